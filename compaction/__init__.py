"""lexkeep compaction: source-bound, immutable summaries and next-run context assembly."""
