-- Records of a type their file's reader does not know (skipped as unknown_type), kept per
-- ingest_runs row so that `lexkeep audit --db` can say what `lexkeep audit FILE` says of
-- them: how many, and the first one's line. Counted over the whole file read so far: the row
-- of a grown file, read from where the last ingest stopped, carries the count and first line
-- of the lines read before. NULL: the row was written before ingest kept the count (or goes
-- on from such a row), so whether the file held any is not known.
ALTER TABLE ingest_runs ADD COLUMN unknown_types BIGINT;
ALTER TABLE ingest_runs ADD COLUMN first_unknown_type_line BIGINT;
