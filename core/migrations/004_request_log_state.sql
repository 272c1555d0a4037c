-- What a request log's reader knew of each conversation (lexkeep.core.requestlog.Continued):
-- the fingerprints of the conversation's messages in timeline order, its tool call ids,
-- whether its system prompt was read, the ids of its logged responses. A file of the same log
-- ingested by a later command goes on from this state, as it would after the earlier files in
-- one ingest (docs/formats.md, "Files of one log"). Written in the transaction of the files
-- that changed it.
--
-- `path` '' holds the state the last ingest left; a file's ingest key (ingest_runs.path) holds
-- the state that file began the conversation from, so that a file read again from its start
-- (it grew) reads its requests as it did the first time.
CREATE TABLE request_log_state (
    reader VARCHAR NOT NULL,            -- the reader's state prefix: openai, anthropic
    conversation_id VARCHAR NOT NULL,
    path VARCHAR NOT NULL,
    state VARCHAR NOT NULL,             -- JSON: {part name: the conversation's share}
    responses VARCHAR[] NOT NULL,       -- response ids (previous_response_id chains), path ''
    PRIMARY KEY (reader, conversation_id, path)
);
