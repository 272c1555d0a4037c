-- Core timeline: conversations, runs, messages, tool calls and results, boundaries,
-- the identifier sidecar, and the ingest ledger. `position` orders one conversation's
-- timeline across messages, tool_calls, tool_results and boundaries.

CREATE TABLE conversations (
    id VARCHAR PRIMARY KEY,
    format VARCHAR NOT NULL,
    parent_id VARCHAR,
    title VARCHAR,
    first_time VARCHAR,
    last_time VARCHAR,
    max_position BIGINT NOT NULL DEFAULT -1,
    source_file VARCHAR NOT NULL,
    source_line BIGINT NOT NULL
);

CREATE TABLE runs (
    id VARCHAR PRIMARY KEY,
    conversation_id VARCHAR NOT NULL,
    status VARCHAR NOT NULL,
    position BIGINT NOT NULL,
    source_file VARCHAR NOT NULL,
    source_line BIGINT NOT NULL
);

CREATE TABLE messages (
    id VARCHAR PRIMARY KEY,
    conversation_id VARCHAR NOT NULL,
    run_id VARCHAR,
    position BIGINT NOT NULL,
    role VARCHAR NOT NULL,
    kind VARCHAR NOT NULL,
    status VARCHAR NOT NULL,
    text VARCHAR NOT NULL,
    time VARCHAR,
    source_file VARCHAR NOT NULL,
    source_line BIGINT NOT NULL
);

CREATE TABLE tool_calls (
    conversation_id VARCHAR NOT NULL,
    call_id VARCHAR NOT NULL,
    message_id VARCHAR,
    position BIGINT NOT NULL,
    name VARCHAR NOT NULL,
    arguments_raw VARCHAR NOT NULL,   -- exactly as recorded
    arguments JSON,                   -- parsed form; NULL when the raw text is not JSON
    arguments_kind VARCHAR NOT NULL,
    time VARCHAR,
    source_file VARCHAR NOT NULL,
    source_line BIGINT NOT NULL,
    PRIMARY KEY (conversation_id, call_id)
);

CREATE TABLE tool_results (
    conversation_id VARCHAR NOT NULL,
    call_id VARCHAR NOT NULL,
    position BIGINT NOT NULL,
    text VARCHAR NOT NULL,
    is_error BOOLEAN NOT NULL DEFAULT false,
    source_file VARCHAR NOT NULL,
    source_line BIGINT NOT NULL,
    PRIMARY KEY (conversation_id, call_id)
);

CREATE TABLE boundaries (
    id VARCHAR PRIMARY KEY,
    conversation_id VARCHAR NOT NULL,
    position BIGINT NOT NULL,
    kind VARCHAR NOT NULL,
    trigger VARCHAR,
    summary_text VARCHAR,             -- NULL when opaque
    kept_verbatim VARCHAR[] NOT NULL DEFAULT [],
    time VARCHAR,
    source_file VARCHAR NOT NULL,
    source_line BIGINT NOT NULL
);

-- The sidecar: identifiers from real user messages, filled at ingest, never by a summariser.
CREATE TABLE identifiers (
    conversation_id VARCHAR NOT NULL,
    message_id VARCHAR NOT NULL,
    kind VARCHAR NOT NULL,
    value VARCHAR NOT NULL,
    span_start INTEGER NOT NULL,
    span_end INTEGER NOT NULL,
    PRIMARY KEY (message_id, span_start)
);

-- One row per scanned user message: an incomplete scan (time budget ran out) can never
-- produce a "missing" verdict downstream.
CREATE TABLE identifier_scans (
    message_id VARCHAR PRIMARY KEY,
    conversation_id VARCHAR NOT NULL,
    complete BOOLEAN NOT NULL,
    rules_digest VARCHAR NOT NULL
);

CREATE SEQUENCE ingest_run_ids START 1;

CREATE TABLE ingest_runs (
    id BIGINT PRIMARY KEY DEFAULT nextval('ingest_run_ids'),
    path VARCHAR NOT NULL,            -- as given (absolute for files on disk, '-' for stdin)
    sha256 VARCHAR NOT NULL,          -- of the bytes consumed so far (the whole file when done)
    bytes_consumed BIGINT NOT NULL,   -- offset just after the last complete line read
    lines_consumed BIGINT NOT NULL,
    format VARCHAR NOT NULL,
    conversations INTEGER NOT NULL DEFAULT 0,
    messages INTEGER NOT NULL DEFAULT 0,
    tool_calls INTEGER NOT NULL DEFAULT 0,
    boundaries INTEGER NOT NULL DEFAULT 0,
    skipped INTEGER NOT NULL DEFAULT 0,
    started_at TIMESTAMP NOT NULL DEFAULT current_timestamp
);

CREATE TABLE ingest_errors (
    ingest_run_id BIGINT NOT NULL,
    path VARCHAR NOT NULL,
    line BIGINT NOT NULL,
    col INTEGER,
    reason VARCHAR NOT NULL,
    detail VARCHAR
);
