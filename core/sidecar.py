"""The identifier sidecar: identifiers of real user messages, stored beside the timeline.

Only messages of kind `user_text` are scanned (never tool results, summaries or injected
context). Each scanned message gets an `identifier_scans` row saying whether the scan was
complete and which rules digest produced it, so an incomplete scan can never turn into a
"missing" verdict and a rule change can be detected. Writes are bulk loads through DuckDB's
JSON reader (no per-row inserts) inside the caller's transaction.
"""

from __future__ import annotations

import dataclasses
import os
from collections import deque
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import Future, ProcessPoolExecutor
from dataclasses import dataclass
from multiprocessing import get_context

import duckdb

from lexkeep.core.identifiers import SELECT_AFTER, extract_many, prepare
from lexkeep.core.model import Extraction, MessageKind
from lexkeep.core.parallel import cpu_count, env_count, exit_with_parent, ignore_interrupts
from lexkeep.core.rules import RuleSet, default_rules, load_rules
from lexkeep.core.store import Store, bulk_insert, no_store_yet, store_exists

IDENTIFIER_COLUMNS = (
    ("conversation_id", "VARCHAR"),
    ("message_id", "VARCHAR"),
    ("kind", "VARCHAR"),
    ("value", "VARCHAR"),
    ("span_start", "INTEGER"),
    ("span_end", "INTEGER"),
)
SCAN_COLUMNS = (
    ("message_id", "VARCHAR"),
    ("conversation_id", "VARCHAR"),
    ("complete", "BOOLEAN"),
    ("rules_digest", "VARCHAR"),
)


@dataclass(frozen=True, slots=True)
class IndexCounts:
    """What one (re)index pass did."""

    messages: int = 0
    identifiers: int = 0
    incomplete: int = 0
    rules_digest: str = ""
    # The first message (by file, then line) whose scan is incomplete, as FILE:LINE; set by
    # reindex_path only.
    first_incomplete: str | None = None

    def as_dict(self) -> dict[str, object]:
        """Plain-dict form for JSON output."""
        return {
            "messages": self.messages,
            "identifiers": self.identifiers,
            "incomplete": self.incomplete,
            "first_incomplete": self.first_incomplete,
            "rules_digest": self.rules_digest,
        }


# Told (messages scanned so far, messages to scan) after each batch.
Progress = Callable[[int, int], None]


# Extractions made elsewhere (a read-ahead worker), by message id: (the text, its extraction).
Known = Mapping[str, tuple[str, Extraction]]


def index_pending(
    con: duckdb.DuckDBPyConnection,
    rules: RuleSet | None = None,
    known: Known | None = None,
    *,
    keyed: bool = True,
) -> int:
    """Scan every user_text message without a scan row; returns identifiers inserted.

    Runs inside the caller's transaction: it never begins or commits one itself. Without
    `rules`, the settings file's `[tool.lexkeep.identifiers]` applies (else the built-ins).
    A message in `known` with the same text takes that extraction (made with the same
    rules) instead of being extracted again. `keyed=False`: the sidecar tables have no
    primary keys (a private store whose message ids are unique, see scan_query).
    """
    return _index(con, rules or load_rules(), known, keyed=keyed).identifiers


def reindex(
    store: Store, rules: RuleSet | None = None, on_progress: Progress | None = None
) -> IndexCounts:
    """Re-extract every user message with `rules` in one transaction (idempotent).

    `on_progress` is told (messages scanned so far, messages to scan) after each batch.
    """
    rules = rules or load_rules()
    with store.transaction() as con:
        con.execute("DELETE FROM identifiers")
        con.execute("DELETE FROM identifier_scans")
        return _index(con, rules, on_progress=on_progress)


def reindex_path(
    path: str, rules: RuleSet | None = None, on_progress: Progress | None = None
) -> IndexCounts:
    """Open the store at `path` (it must exist) and re-extract it: `lexkeep extract --db`.

    The counts name the first message whose scan is incomplete (`first_incomplete`).
    """
    from lexkeep.core.inspect import incomplete_scans

    if not store_exists(path, read_only=False):
        raise no_store_yet(f"no lexkeep store at {path}", path)
    with Store.open(path) as store:
        counts = reindex(store, rules, on_progress)
        if not counts.incomplete:
            return counts
        _, first = incomplete_scans(store)
        return dataclasses.replace(counts, first_incomplete=first)


def _index(
    con: duckdb.DuckDBPyConnection,
    rules: RuleSet,
    known: Known | None = None,
    *,
    keyed: bool = True,
    on_progress: Progress | None = None,
) -> IndexCounts:
    return scan_query(
        con,
        "SELECT m.id, m.conversation_id, m.text, m.position FROM messages m "
        "WHERE m.kind = ? AND NOT EXISTS "
        "(SELECT 1 FROM identifier_scans s WHERE s.message_id = m.id)",
        [MessageKind.USER_TEXT.value],
        rules,
        known=known,
        keyed=keyed,
        on_progress=on_progress,
    )


# Parallel extraction pays for its process start-up from about this much user text.
PARALLEL_MIN_CHARS = 256 << 10
BATCH_MESSAGES = 2000
CHUNK_ROWS = 50_000  # user messages read from the store at a time
FLUSH_ROWS = 200_000
REST_CHARS = 32 << 20  # text not in `known` held before it is extracted (_scan_known)

_WORKER_RULES: RuleSet | None = None


def workers() -> int:
    """Extraction processes: the CPUs this process may use ($LEXKEEP_EXTRACT_WORKERS overrides)."""
    return max(1, env_count("LEXKEEP_EXTRACT_WORKERS", cpu_count()))


def scan_rows(
    con: duckdb.DuckDBPyConnection,
    rows: Sequence[tuple[str, str, str]],
    rules: RuleSet,
    parallel_min_chars: int = PARALLEL_MIN_CHARS,
) -> IndexCounts:
    """Extract (message id, conversation id, text) rows into both sidecar tables.

    Runs inside the caller's transaction. With more than `parallel_min_chars` characters of
    text, `workers()` forked processes extract batches; they only run the extractor, and every
    write stays in this process.
    """
    total_chars = sum(len(text) for _, _, text in rows)
    return _scan(con, iter([rows]), len(rows), total_chars, rules, parallel_min_chars)


def scan_query(
    con: duckdb.DuckDBPyConnection,
    sql: str,
    params: Sequence[object],
    rules: RuleSet,
    parallel_min_chars: int = PARALLEL_MIN_CHARS,
    *,
    keyed: bool = True,
    known: Known | None = None,
    on_progress: Progress | None = None,
) -> IndexCounts:
    """scan_rows() over the rows of `sql` (message id, conversation id, text, position), read
    CHUNK_ROWS at a time, so memory holds a chunk of user text, not a dump's.

    `keyed=False` is for sidecar tables without primary keys (rows are inserted as they come).
    A row whose message id and text are in `known` takes that extraction (see index_pending).
    `on_progress` is told (messages scanned so far, messages to scan) after each batch
    extracted; not with `known` (an ingest, whose own progress is by bytes read).

    The rows are queued in a temporary table first: the sidecar writes that follow in this
    transaction would invalidate a result still being fetched.
    """
    con.execute(
        "CREATE OR REPLACE TEMP TABLE lexkeep_scan_queue AS SELECT row_number() OVER "
        f"(ORDER BY q.conversation_id, q.position) AS rn, q.* FROM ({sql}) q",
        list(params),
    )
    try:
        total_rows, total_chars = con.execute(
            "SELECT count(*), coalesce(sum(length(text)), 0) FROM lexkeep_scan_queue"
        ).fetchone()

        def chunks() -> Iterator[list[tuple[str, str, str]]]:
            for low in range(0, total_rows, CHUNK_ROWS):
                yield con.execute(
                    "SELECT id, conversation_id, text FROM lexkeep_scan_queue"
                    " WHERE rn > ? AND rn <= ? ORDER BY rn",
                    [low, low + CHUNK_ROWS],
                ).fetchall()

        if known:
            return _scan_known(con, chunks(), known, rules, parallel_min_chars, keyed)
        return _scan(
            con, chunks(), total_rows, total_chars, rules, parallel_min_chars, keyed, on_progress
        )
    finally:
        con.execute("DROP TABLE IF EXISTS lexkeep_scan_queue")


def _scan(
    con: duckdb.DuckDBPyConnection,
    chunks: Iterator[Sequence[tuple[str, str, str]]],
    total_rows: int,
    total_chars: int,
    rules: RuleSet,
    parallel_min_chars: int,
    keyed: bool = True,
    on_progress: Progress | None = None,
) -> IndexCounts:
    if not total_rows:
        return IndexCounts(rules_digest=rules.digest)
    batches = (
        chunk[i : i + BATCH_MESSAGES]
        for chunk in chunks
        for i in range(0, len(chunk), BATCH_MESSAGES)
    )
    n = workers()
    found: list[tuple[object, ...]] = []
    scans: list[tuple[object, ...]] = []
    totals = [0, 0, 0]  # messages, identifiers, incomplete

    def take(result: tuple[list[tuple[object, ...]], list[tuple[object, ...]]]) -> None:
        found.extend(result[0])
        scans.extend(result[1])
        totals[0] += len(result[1])
        totals[1] += len(result[0])
        totals[2] += sum(1 for scan in result[1] if not scan[2])
        if len(found) + len(scans) >= FLUSH_ROWS:
            _flush(con, found, scans, keyed)
        if on_progress is not None:
            on_progress(totals[0], total_rows)

    if total_rows >= SELECT_AFTER:
        # Compiled once here: forked workers inherit it instead of each building their own.
        prepare(rules)
    try:
        # fork: workers inherit the loaded rules and modules (no re-import, no pickled rules).
        context = get_context("fork")
    except ValueError:  # no fork on this platform: extract in this process
        n = 1
    if n == 1 or total_chars < parallel_min_chars:
        _init_worker(rules)
        for batch in batches:
            take(_extract_batch(batch))
    else:
        with ProcessPoolExecutor(
            n, mp_context=context, initializer=_init_worker, initargs=(rules, os.getpid())
        ) as pool:
            # A few batches in flight per worker: submitting them all at once would hold
            # every batch (and its pickled copy) in memory.
            pending: deque[Future[tuple[list[tuple[object, ...]], list[tuple[object, ...]]]]]
            pending = deque()
            for batch in batches:
                pending.append(pool.submit(_extract_batch, batch))
                if len(pending) >= 3 * n:
                    take(pending.popleft().result())
            while pending:
                take(pending.popleft().result())
    _flush(con, found, scans, keyed)
    return IndexCounts(
        messages=totals[0], identifiers=totals[1], incomplete=totals[2], rules_digest=rules.digest
    )


def _scan_known(
    con: duckdb.DuckDBPyConnection,
    chunks: Iterator[Sequence[tuple[str, str, str]]],
    known: Known,
    rules: RuleSet,
    parallel_min_chars: int,
    keyed: bool,
) -> IndexCounts:
    """_scan() with the rows in `known` written from their extractions; the others are
    extracted as usual, REST_CHARS of text at a time (few, when the read-ahead made `known`)."""
    found: list[tuple[object, ...]] = []
    scans: list[tuple[object, ...]] = []
    rest: list[tuple[str, str, str]] = []
    rest_chars = 0
    messages = identifiers = incomplete = 0
    digest = rules.digest
    done: list[IndexCounts] = []
    for chunk in chunks:
        for row in chunk:
            message_id, conversation_id, text = row
            got = known.get(message_id)
            if got is None or got[0] != text:
                rest.append(row)
                rest_chars += len(text)
                if rest_chars >= REST_CHARS:
                    done.append(
                        _scan(
                            con,
                            iter([rest]),
                            len(rest),
                            rest_chars,
                            rules,
                            parallel_min_chars,
                            keyed,
                        )
                    )
                    rest, rest_chars = [], 0
                continue
            extraction = got[1]
            _add_rows(message_id, conversation_id, extraction, digest, found, scans)
            messages += 1
            identifiers += len(extraction.identifiers)
            incomplete += not extraction.complete
            if len(found) + len(scans) >= FLUSH_ROWS:
                _flush(con, found, scans, keyed)
    _flush(con, found, scans, keyed)
    done.append(_scan(con, iter([rest]), len(rest), rest_chars, rules, parallel_min_chars, keyed))
    return IndexCounts(
        messages=messages + sum(c.messages for c in done),
        identifiers=identifiers + sum(c.identifiers for c in done),
        incomplete=incomplete + sum(c.incomplete for c in done),
        rules_digest=digest,
    )


def _init_worker(rules: RuleSet, parent: int | None = None) -> None:
    """Set the rules of this process's extractions; in a forked worker (`parent`: the pid of
    the process that forked it), also stop on Ctrl-C's signal and end when the parent ends."""
    global _WORKER_RULES
    _WORKER_RULES = rules
    if parent is not None:
        exit_with_parent(parent)
        ignore_interrupts()


def _extract_batch(
    batch: Sequence[tuple[str, str, str]],
) -> tuple[list[tuple[object, ...]], list[tuple[object, ...]]]:
    """(identifier rows, scan rows) of a batch of (message id, conversation id, text)."""
    rules = _WORKER_RULES or default_rules()
    found: list[tuple[object, ...]] = []
    scans: list[tuple[object, ...]] = []
    for (message_id, conversation_id, _), extraction in zip(
        batch, extract_many([text for _, _, text in batch], rules), strict=True
    ):
        _add_rows(message_id, conversation_id, extraction, rules.digest, found, scans)
    return found, scans


def _add_rows(
    message_id: str,
    conversation_id: str,
    extraction: Extraction,
    digest: str,
    found: list[tuple[object, ...]],
    scans: list[tuple[object, ...]],
) -> None:
    """Append one message's identifier rows to `found` and its scan row to `scans`."""
    scans.append((message_id, conversation_id, extraction.complete, digest))
    found.extend(
        (conversation_id, message_id, ident.kind, ident.value, ident.start, ident.end)
        for ident in extraction.identifiers
    )


def _flush(
    con: duckdb.DuckDBPyConnection,
    found: list[tuple[object, ...]],
    scans: list[tuple[object, ...]],
    keyed: bool = True,
) -> None:
    conflict = "DO NOTHING" if keyed else ""
    bulk_insert(con, "identifiers", IDENTIFIER_COLUMNS, found, on_conflict=conflict)
    bulk_insert(con, "identifier_scans", SCAN_COLUMNS, scans, on_conflict=conflict)
    found.clear()
    scans.clear()
