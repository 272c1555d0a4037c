"""lexkeep audit: do identifiers typed by users survive compaction verbatim?"""
