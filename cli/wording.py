"""How the commands say the library's errors: in their options' words.

A library error speaks to a Python caller (`pass skip_invalid=True`); an error with a
`wording` key is said here the way a command line is written (`pass --skip-invalid`), with
the error's `fields` filled in. The error's place (file, line, column) stays as it is.
"""

from lexkeep.core.errors import LexkeepError

# The library's text stays (a message that quotes a trace, or holds no option).
KEEP = None

# wording key -> (message, hint); KEEP keeps the library's. Fields in braces.
WORDINGS: dict[str, tuple[str | None, str | None]] = {
    "audit.skip_invalid_without_paths": (
        "--skip-invalid only applies when auditing trace files",
        KEEP,
    ),
    "audit.input_format_without_paths": (
        "--input-format only applies when auditing trace files",
        "a store's files were read at ingest: lexkeep ingest --input-format FORMAT",
    ),
    "audit.paths_and_db": (
        "give trace files or --db, not both",
        "lexkeep audit TRACES...  or  lexkeep audit --db lexkeep.duckdb",
    ),
    "audit.rules_without_paths": (
        "--rules only applies when auditing trace files",
        "a store's identifiers were extracted at ingest; re-extract them with:"
        " lexkeep extract --db {db} --rules {rules}",
    ),
    "audit.nothing": (KEEP, "lexkeep audit TRACES... or --db FILE"),
    "ingest.unrecognised": (KEEP, "force one with --input-format ({formats})"),
    "ingest.mixed_formats": (
        KEEP,
        "split the file into one file per format, or pass --input-format to read every line"
        " as one format",
    ),
    "ingest.bad_line": (
        KEEP,
        "fix the line, or pass --skip-invalid to skip bad lines and record them",
    ),
    "ingest.stdin_cut": (
        KEEP,
        "pipe the whole trace, or pass --skip-invalid to drop the line and record it",
    ),
    "ingest.forced_other_format": (
        KEEP,
        "ingest it into a new store with --input-format {forced} (or drop --input-format to"
        " keep it as {stored})",
    ),
    "ingest.forced_format_reads_nothing": (
        KEEP,
        "drop --input-format to detect the format per file, or name the right one",
    ),
    "ingest.store_given_as_trace": (KEEP, "a lexkeep store is read with --db FILE"),
    "ingest.pipe_given": (
        KEEP,
        "pass it on standard input instead (zcat dump.jsonl.gz | lexkeep audit -), or save it"
        " to a file first",
    ),
    "conversation.store_empty": (
        KEEP,
        "the store is empty: lexkeep ingest TRACES... --db FILE fills it",
    ),
    "conversation.unknown": (KEEP, "{held}; lexkeep show --db FILE lists them all"),
    "store.needs_migrating": (KEEP, "ingest into it once (lexkeep ingest TRACES... --db {target})"),
    "context.bytes": (
        "{flag} must be a whole number of bytes from {least} to {most}, got {value}",
        KEEP,
    ),
    "context.budget": (KEEP, "pass --budget-bytes {floor} or more"),
    "compact.lease_too_short": ("{message}", "{hint}"),
    "summarizer.command_unsplittable": (
        KEEP,
        "close the quote, e.g. --summarizer 'command:\"llm -m gpt-4o-mini\"'",
    ),
    "summarizer.command_empty": (KEEP, "e.g. --summarizer 'command:\"llm -m gpt-4o-mini\"'"),
    "summarizer.command_cannot_run": (
        KEEP,
        "check the program's name and path in --summarizer 'command:...'; nothing was counted"
        " as an attempt",
    ),
    "summarizer.base_url_not_http": (
        "--base-url {base_url} is not an http:// or https:// URL",
        "e.g. --base-url https://api.openai.com/v1 or http://127.0.0.1:8000/v1",
    ),
    "summarizer.unreachable": (
        KEEP,
        "start the server or fix --base-url; nothing was counted as an attempt",
    ),
    "summarizer.needs_base_url": (
        "the openai summarizer needs --base-url",
        "e.g. --base-url https://api.openai.com/v1 --model gpt-4o-mini",
    ),
    "summarizer.needs_model": ("the openai summarizer needs --model", "e.g. --model gpt-4o-mini"),
    "compact.at_least_one": ("{flag} must be at least 1, got {value}", KEEP),
    "compact.misconfigured": (
        KEEP,
        "check its settings (--summarizer, --model, --base-url, a key it needs); nothing was"
        " counted as an attempt",
    ),
    "compact.store_held": (
        KEEP,
        "nothing was written; a later run summarises the range again (this attempt counts as"
        " failed: lease expired); raise --lease-seconds to wait longer for the store",
    ),
    "compact.lease_expired": (KEEP, "give summaries more time: raise --lease-seconds"),
    "store.none_yet": (KEEP, "ingest some traces first: lexkeep ingest TRACES... --db {target}"),
    "store.folder": (
        KEEP,
        "--db names the store file, e.g. --db {example}; trace files and folders are arguments",
    ),
    "store.foreign": (KEEP, "pass --db a store made by lexkeep ingest, or a new file name"),
    "store.locked": (KEEP, "wait for the other process to finish, or use another --db file"),
    "store.not_duckdb": (KEEP, "pass --db with a new file name, or a store made by lexkeep"),
    "store.trace_given_as_store": (
        KEEP,
        "--db names the store (e.g. --db lexkeep.duckdb); trace files are arguments",
    ),
    "store.unreadable": (
        KEEP,
        "make {target} readable (and writable, for ingest, compact and extract --db), or ask"
        " its owner for a copy",
    ),
    "store.unwritable": (
        KEEP,
        "make {target} writable, or copy it to a folder you can write and pass --db the copy;"
        " audit --db, stats, show, context, guard and compactions only read it",
    ),
    "store.unwritable_folder": (
        KEEP,
        "make the folder {folder} writable (a store is written with {name}.wal beside it), or"
        " pass --db a file in a folder you can write",
    ),
    "store.wal_unreadable": (
        KEEP,
        "make {wal} readable (and writable, for ingest, compact and extract --db): it is the"
        " store's write-ahead log, left by a process that stopped before closing the store",
    ),
    "storage.no_room": (
        KEEP,
        "free space (or raise the quota or file size limit) where it is written, or point --db"
        " or $TMPDIR at another disk, then run the command again: the write that failed stored"
        " nothing, and what was stored before it stays",
    ),
    "storage.unwritable_folder": (
        KEEP,
        "a store is written together with FILE.wal beside it: make its folder writable, or"
        " copy the store to a folder that is (audit --db, stats and show open it read-only)",
    ),
}


def as_commands_say(err: LexkeepError) -> LexkeepError:
    """`err` with its message and hint in the commands' words, when it has a wording (in
    place, once: the wording is then dropped)."""
    key = getattr(err, "wording", None)
    if key is None or key not in WORDINGS:
        return err
    message, hint = WORDINGS[key]
    fields = getattr(err, "fields", {})
    if message is not KEEP:
        err.message = message.format(**fields)
        err.args = (err.message,)
    if hint is not KEEP:
        err.hint = hint.format(**fields)
    err.wording = None
    return err
