-- Conversations of request logs that name none were named after the file and the index of
-- their first record (`requests.jsonl#0`) until lexkeep named them after that record
-- (`requests.jsonl#<digest>`, docs/formats.md, "Requests without ids"). A file a store holds
-- named the old way keeps those names when it is read again (it grew, a later file of its log
-- needs its conversations, logrotate renamed it), so that nothing of it is stored twice.
-- `numbered_under`: the file name its conversations without ids are numbered under
-- (`<numbered_under>#<index>`); NULL: they are named after their first record.
ALTER TABLE ingest_runs ADD COLUMN numbered_under VARCHAR;
UPDATE ingest_runs
SET numbered_under = CASE
    WHEN path = '-' THEN 'stdin'
    ELSE regexp_replace(regexp_extract(path, '[^/\\]*$'), '\.gz$', '')
END
WHERE format IN ('openai', 'anthropic');
