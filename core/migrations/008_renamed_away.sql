-- Rows read from a file whose content logrotate then renamed away (`requests.jsonl` ->
-- `requests.jsonl.1`) and whose name it gave to a new file, when the ingest that read the new
-- file found no renamed copy beside it (logrotate's `olddir` puts it in another folder). The
-- rows name the old file and cite lines it no longer holds; the new file's rows name it too,
-- so which rows the old content gave is kept here, for the ingest that finds the copy later
-- (it begins with the bytes that read consumed) to have them name the copy
-- (docs/formats.md, "Renamed files"). Written and emptied in the transaction of those ingests.
CREATE TABLE renamed_away (
    ingest_run_id BIGINT NOT NULL,      -- the old content's latest read: path, sha256, bytes, lines
    tbl VARCHAR NOT NULL,               -- conversations, runs, messages, tool_calls, tool_results,
                                        -- boundaries
    conversation_id VARCHAR NOT NULL,
    k VARCHAR NOT NULL                  -- the row's id (call_id of tool calls and results)
);
