-- The state of a job's source when its pairs were read (lexkeep.compaction.pairs.SOURCE_STATE_SQL):
-- a fingerprint of every row the pairing of the conversation up to the range's last user
-- message reads. While it is unchanged the summary's source digest is too, so `lexkeep
-- compactions` need not recompute the digest. NULL for jobs written before this migration
-- (their digest is recomputed, as before).
ALTER TABLE compactions ADD COLUMN source_state VARCHAR;
