-- lexkeep's own compaction jobs (DESIGN.md "Compaction"; seed 000).
--
-- One row per job identity: conversation, scope, pair range, the 20 source message ids, the
-- SHA-256 of the canonical encoding of the 10-pair sequence, model id and prompt version.
-- `id` is the SHA-256 of that identity, so a second row for the same identity is a primary-key
-- conflict. Attempts are counted on the row (at most 2); every attempt is also logged in
-- compaction_attempts with its outcome.
--
-- DuckDB has no triggers, so "a completed summary is never updated" is enforced by the library
-- (lexkeep.compaction.jobs refuses any write to a completed row and every UPDATE it issues is
-- guarded by `status = 'running'`) and, as far as CHECK constraints reach, here: a summary exists
-- exactly when the job is completed, is 1..6,000 characters and matches its stored SHA-256.
CREATE TABLE compactions (
    id VARCHAR PRIMARY KEY,                 -- sha256 hex of the identity
    conversation_id VARCHAR NOT NULL,
    scope VARCHAR NOT NULL,
    from_pair INTEGER NOT NULL,
    to_pair INTEGER NOT NULL,
    source_message_ids VARCHAR[] NOT NULL,  -- user0, assistant0, user1, assistant1, ...
    digest_algorithm VARCHAR NOT NULL DEFAULT 'SHA-256',
    source_digest VARCHAR NOT NULL,
    model_id VARCHAR NOT NULL,
    prompt_version VARCHAR NOT NULL,
    prompt_sha256 VARCHAR,
    status VARCHAR NOT NULL,                -- running | completed | failed | exhausted
    attempts INTEGER NOT NULL,
    lease_owner VARCHAR,
    lease_expires_at DOUBLE,                -- unix seconds; only meaningful while running
    summary VARCHAR,
    summary_sha256 VARCHAR,
    input_sha256 VARCHAR,                   -- sha256 of the rendered prompt (docs/compaction.md 4)
    identifiers_total INTEGER,
    identifiers_kept INTEGER,
    last_error VARCHAR,
    boundary_id VARCHAR,
    created_at DOUBLE NOT NULL,
    claimed_at DOUBLE,
    completed_at DOUBLE,
    CHECK (from_pair >= 0 AND from_pair % 10 = 0 AND to_pair = from_pair + 9),
    CHECK (len(source_message_ids) = 20),
    CHECK (status IN ('running', 'completed', 'failed', 'exhausted')),
    CHECK (attempts BETWEEN 1 AND 2),
    CHECK ((status = 'completed') = (summary IS NOT NULL)),
    CHECK (summary IS NULL OR (length(summary) BETWEEN 1 AND 6000)),
    -- the stored digest must match the stored text: an edit that forgets the digest fails
    CHECK (summary IS NULL OR summary_sha256 = sha256(summary))
);

CREATE INDEX compactions_range ON compactions (conversation_id, from_pair);

-- Every attempt, with its outcome: completed | failed | lease_expired.
CREATE TABLE compaction_attempts (
    job_id VARCHAR NOT NULL,
    attempt INTEGER NOT NULL,
    lease_owner VARCHAR NOT NULL,
    outcome VARCHAR,                        -- NULL while the attempt runs
    error VARCHAR,
    started_at DOUBLE NOT NULL,
    finished_at DOUBLE,
    PRIMARY KEY (job_id, attempt)
);

-- The admission gate: every claim updates this one row first, inside the claim transaction.
-- Two concurrent claims therefore conflict on it (DuckDB reports a write-write conflict to the
-- later one), so the count of running jobs read by a claim can never be stale.
CREATE TABLE compaction_gate (
    id INTEGER PRIMARY KEY,
    claims BIGINT NOT NULL
);
INSERT INTO compaction_gate VALUES (1, 0);
