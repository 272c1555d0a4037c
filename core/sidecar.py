"""The identifier sidecar: identifiers of real user messages, stored beside the timeline.

Only messages of kind `user_text` are scanned (never tool results, summaries or injected
context). Each scanned message gets an `identifier_scans` row saying whether the scan was
complete and which rules digest produced it, so an incomplete scan can never turn into a
"missing" verdict and a rule change can be detected. Writes are bulk loads through DuckDB's
JSON reader (no per-row inserts) inside the caller's transaction.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from multiprocessing import get_context
from pathlib import Path

import duckdb

from lexkeep.core.errors import StoreError
from lexkeep.core.identifiers import SELECT_AFTER, extract_many, prepare
from lexkeep.core.model import MessageKind
from lexkeep.core.rules import RuleSet, default_rules, load_rules
from lexkeep.core.store import Store, bulk_insert

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

    def as_dict(self) -> dict[str, object]:
        """Plain-dict form for JSON output."""
        return {
            "messages": self.messages,
            "identifiers": self.identifiers,
            "incomplete": self.incomplete,
            "rules_digest": self.rules_digest,
        }


def index_pending(con: duckdb.DuckDBPyConnection, rules: RuleSet | None = None) -> int:
    """Scan every user_text message without a scan row; returns identifiers inserted.

    Runs inside the caller's transaction: it never begins or commits one itself. Without
    `rules`, the settings file's `[tool.lexkeep.identifiers]` applies (else the built-ins).
    """
    return _index(con, rules or load_rules()).identifiers


def reindex(store: Store, rules: RuleSet | None = None) -> IndexCounts:
    """Re-extract every user message with `rules` in one transaction (idempotent)."""
    rules = rules or load_rules()
    with store.transaction() as con:
        con.execute("DELETE FROM identifiers")
        con.execute("DELETE FROM identifier_scans")
        return _index(con, rules)


def reindex_path(path: str, rules: RuleSet | None = None) -> IndexCounts:
    """Open the store at `path` (it must exist) and re-extract it: `lexkeep extract --db`."""
    if not Path(path).exists():
        raise StoreError(
            f"no lexkeep store at {path}",
            hint="ingest some traces first: lexkeep ingest TRACES... --db " + path,
        )
    with Store.open(path) as store:
        return reindex(store, rules)


def _index(con: duckdb.DuckDBPyConnection, rules: RuleSet) -> IndexCounts:
    rows = con.execute(
        "SELECT m.id, m.conversation_id, m.text FROM messages m "
        "WHERE m.kind = ? AND NOT EXISTS "
        "(SELECT 1 FROM identifier_scans s WHERE s.message_id = m.id) "
        "ORDER BY m.conversation_id, m.position",
        [MessageKind.USER_TEXT.value],
    ).fetchall()
    return scan_rows(con, rows, rules)


# Parallel extraction pays for its process start-up from about this much user text.
PARALLEL_MIN_CHARS = 256 << 10
BATCH_MESSAGES = 2000
FLUSH_ROWS = 200_000

_WORKER_RULES: RuleSet | None = None


def workers() -> int:
    """Extraction processes: the CPUs this process may use ($LEXKEEP_EXTRACT_WORKERS overrides)."""
    given = os.environ.get("LEXKEEP_EXTRACT_WORKERS")
    if given:
        return max(1, int(given))
    return max(1, len(os.sched_getaffinity(0)))


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
    if not rows:
        return IndexCounts(rules_digest=rules.digest)
    batches = [rows[i : i + BATCH_MESSAGES] for i in range(0, len(rows), BATCH_MESSAGES)]
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
            _flush(con, found, scans)

    if len(rows) >= SELECT_AFTER:
        # Compiled once here: forked workers inherit it instead of each building their own.
        prepare(rules)
    try:
        # fork: workers inherit the loaded rules and modules (no re-import, no pickled rules).
        context = get_context("fork")
    except ValueError:  # no fork on this platform: extract in this process
        n = 1
    if n == 1 or sum(len(text) for _, _, text in rows) < parallel_min_chars:
        _init_worker(rules)
        for batch in batches:
            take(_extract_batch(batch))
    else:
        with ProcessPoolExecutor(
            n, mp_context=context, initializer=_init_worker, initargs=(rules,)
        ) as pool:
            for result in pool.map(_extract_batch, batches, chunksize=1):
                take(result)
    _flush(con, found, scans)
    return IndexCounts(
        messages=totals[0], identifiers=totals[1], incomplete=totals[2], rules_digest=rules.digest
    )


def _init_worker(rules: RuleSet) -> None:
    global _WORKER_RULES
    _WORKER_RULES = rules


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
        scans.append((message_id, conversation_id, extraction.complete, rules.digest))
        found.extend(
            (conversation_id, message_id, ident.kind, ident.value, ident.start, ident.end)
            for ident in extraction.identifiers
        )
    return found, scans


def _flush(
    con: duckdb.DuckDBPyConnection, found: list[tuple[object, ...]], scans: list[tuple[object, ...]]
) -> None:
    bulk_insert(con, "identifiers", IDENTIFIER_COLUMNS, found)
    bulk_insert(con, "identifier_scans", SCAN_COLUMNS, scans)
    found.clear()
    scans.clear()
