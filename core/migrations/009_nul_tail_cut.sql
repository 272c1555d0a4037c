-- A file a crash left with nothing readable (NUL bytes only, or the start of its first line
-- and NUL bytes after it) gets an ingest_runs row consuming nothing, with format '' and its
-- NUL bytes (nul_tail_bytes, nul_tail_after_line 0), so that `lexkeep audit --db` says of it
-- what `lexkeep audit FILE` says (docs/formats.md, "NUL bytes"). nul_tail_cut: the bytes of
-- the first line the crash cut before the NUL bytes, NULL when none (and in rows written
-- before: none known).
ALTER TABLE ingest_runs ADD COLUMN nul_tail_cut BIGINT;
