"""The identifier sidecar: identifiers of real user messages, stored beside the timeline.

Only messages of kind `user_text` are scanned (never tool results, summaries or injected
context). Each scanned message gets an `identifier_scans` row saying whether the scan was
complete and which rules digest produced it, so an incomplete scan can never turn into a
"missing" verdict and a rule change can be detected. Writes are bulk loads through DuckDB's
JSON reader (no per-row inserts) inside the caller's transaction.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import duckdb

from lexkeep.core.errors import StoreError
from lexkeep.core.identifiers import extract
from lexkeep.core.model import MessageKind
from lexkeep.core.rules import RuleSet, load_rules
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
    if not rows:
        return IndexCounts(rules_digest=rules.digest)
    found: list[tuple[object, ...]] = []
    scans: list[tuple[object, ...]] = []
    for message_id, conversation_id, text in rows:
        extraction = extract(text, rules)
        scans.append((message_id, conversation_id, extraction.complete, rules.digest))
        found.extend(
            (conversation_id, message_id, ident.kind, ident.value, ident.start, ident.end)
            for ident in extraction.identifiers
        )
    inserted = bulk_insert(con, "identifiers", IDENTIFIER_COLUMNS, found)
    bulk_insert(con, "identifier_scans", SCAN_COLUMNS, scans)
    return IndexCounts(
        messages=len(scans),
        identifiers=inserted,
        incomplete=sum(1 for scan in scans if not scan[2]),
        rules_digest=rules.digest,
    )
