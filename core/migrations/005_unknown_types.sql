-- Records of a type their file's reader does not know (skipped as unknown_type), kept per
-- ingest_runs row so that `lexkeep audit --db` can say what `lexkeep audit FILE` says of
-- them: how many, and the first one's line. Counted over the whole file read so far: the row
-- of a grown file, read from where the last ingest stopped, carries the count and first line
-- of the lines read before. NULL: the row was written before ingest kept the count (or goes
-- on from such a row), so whether the file held any is not known.
ALTER TABLE ingest_runs ADD COLUMN unknown_types BIGINT;
ALTER TABLE ingest_runs ADD COLUMN first_unknown_type_line BIGINT;
-- Likewise what `lexkeep audit FILE` notes of a file still being written: the line of its
-- last line, cut (still being written) when this row's ingest read the file, NULL when it
-- ended in a complete line; and whether it was a JSON document cut before its end (read with
-- --skip-invalid). Of this read alone: a file read again when whole gets a row without them.
-- truncated_document NULL: the row was written before ingest kept them (not known).
ALTER TABLE ingest_runs ADD COLUMN truncated_line BIGINT;
ALTER TABLE ingest_runs ADD COLUMN truncated_document BOOLEAN;
