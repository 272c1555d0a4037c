-- NUL bytes a crash left in a file (docs/formats.md, "NUL bytes"), kept per ingest_runs row so
-- that `lexkeep audit --db` can say what `lexkeep audit FILE` says of them. Of this row's read
-- of the file (a file read again is read from its start, so of the whole file):
-- nul_tail_bytes / nul_tail_after_line: the NUL bytes the file ends in and the line after
-- which they start (not read, nor consumed), NULL when it ends otherwise;
-- nul_gaps: how many runs of NUL bytes lines written after them follow (a writer restarted
-- after the crash), first_nul_gap_bytes / first_nul_gap_after_line: the first such run.
-- NULL in rows written before (or by the DuckDB path, which reads only whole JSON lines):
-- none known.
ALTER TABLE ingest_runs ADD COLUMN nul_tail_bytes BIGINT;
ALTER TABLE ingest_runs ADD COLUMN nul_tail_after_line BIGINT;
ALTER TABLE ingest_runs ADD COLUMN nul_gaps BIGINT;
ALTER TABLE ingest_runs ADD COLUMN first_nul_gap_bytes BIGINT;
ALTER TABLE ingest_runs ADD COLUMN first_nul_gap_after_line BIGINT;
