"""The identifier sidecar: only real user text is scanned; reindexing is idempotent."""

from __future__ import annotations

import tempfile

import pytest

from lexkeep.core import sidecar
from lexkeep.core.model import Extraction, Identifier
from lexkeep.core.rules import build_rules, default_rules
from lexkeep.core.sidecar import index_pending, reindex
from lexkeep.core.store import Store

ROWS = [
    # id, role, kind, text
    ("m1", "user", "user_text", "Refund order #W2378156 to ann@example.org please"),
    ("m2", "tool", "tool_result", "order #W9999999 found"),
    ("m3", "user", "summary", "Summary: user asked about #W1111111"),
    ("m4", "user", "injected", "<environment_context>cwd /home/x/proj</environment_context>"),
    ("m5", "assistant", "assistant_text", "I will look up #W2222222"),
    ("m6", "user", "user_text", "also invoice INV-2025-08-44719"),
]


def add_messages(store: Store, rows=ROWS, conversation: str = "c1") -> None:
    """Insert messages through the store's bulk loader (the path ingest uses)."""
    store.bulk_insert(
        "messages",
        [
            ("id", "VARCHAR"), ("conversation_id", "VARCHAR"), ("position", "BIGINT"),
            ("role", "VARCHAR"), ("kind", "VARCHAR"), ("status", "VARCHAR"), ("text", "VARCHAR"),
            ("source_file", "VARCHAR"), ("source_line", "BIGINT"),
        ],
        [
            (mid, conversation, pos, role, kind, "completed", text, "t.jsonl", pos + 1)
            for pos, (mid, role, kind, text) in enumerate(rows)
        ],
    )  # fmt: skip


def identifiers(store: Store) -> list[tuple]:
    return store.con.execute(
        "SELECT message_id, kind, value, span_start, span_end FROM identifiers "
        "ORDER BY message_id, span_start"
    ).fetchall()


def test_only_user_text_is_indexed(store: Store) -> None:
    add_messages(store)
    with store.transaction() as con:
        inserted = index_pending(con)
    assert inserted == 3
    assert identifiers(store) == [
        ("m1", "hash_ref", "#W2378156", 13, 22),
        ("m1", "email", "ann@example.org", 26, 41),
        ("m6", "compound_code", "INV-2025-08-44719", 13, 30),
    ]
    scans = store.con.execute(
        "SELECT message_id, complete, rules_digest FROM identifier_scans ORDER BY message_id"
    ).fetchall()
    assert scans == [("m1", True, default_rules().digest), ("m6", True, default_rules().digest)]


def test_index_pending_skips_scanned_messages(store: Store) -> None:
    add_messages(store)
    with store.transaction() as con:
        assert index_pending(con) == 3
    with store.transaction() as con:
        assert index_pending(con) == 0
    add_messages(store, [("m7", "user", "user_text", "my zip is 19122")], "c2")
    with store.transaction() as con:
        assert index_pending(con) == 1
    assert store.con.execute("SELECT count(*) FROM identifier_scans").fetchone()[0] == 3


def test_index_pending_joins_the_callers_transaction(store: Store) -> None:
    add_messages(store)
    with pytest.raises(RuntimeError), store.transaction() as con:
        index_pending(con)
        raise RuntimeError("ingest failed after indexing")
    assert identifiers(store) == []
    assert store.con.execute("SELECT count(*) FROM identifier_scans").fetchone()[0] == 0


def test_reindex_is_idempotent_and_follows_rule_changes(store: Store) -> None:
    add_messages(store)
    first = reindex(store)
    before = identifiers(store)
    again = reindex(store)
    assert identifiers(store) == before
    assert (first.messages, first.identifiers, again.identifiers) == (2, 3, 3)
    no_email = build_rules({"disabled": ["email"]}, origin="rules.toml")
    counts = reindex(store, no_email)
    assert counts.identifiers == 2
    assert "email" not in {row[1] for row in identifiers(store)}
    digests = store.con.execute("SELECT DISTINCT rules_digest FROM identifier_scans").fetchall()
    assert digests == [(no_email.digest,)]


def test_reindex_failure_leaves_the_old_sidecar(db_file, monkeypatch: pytest.MonkeyPatch) -> None:
    with Store.open(db_file) as store:
        add_messages(store)
        reindex(store)
        before = identifiers(store)
        # Injected fault between the delete and the bulk insert: no usable temp directory.
        monkeypatch.setattr(tempfile, "tempdir", str(db_file.parent / "missing-dir"))
        with pytest.raises(OSError):
            reindex(store)
        monkeypatch.undo()
        assert identifiers(store) == before


def test_settings_file_rules_apply_by_default(
    store: Store, tmp_path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "pyproject.toml").write_text('[tool.lexkeep.identifiers]\ndisabled = ["email"]\n')
    monkeypatch.chdir(tmp_path)
    add_messages(store)
    with store.transaction() as con:
        assert index_pending(con) == 2
    assert "email" not in {row[1] for row in identifiers(store)}


def test_pending_messages_are_read_in_chunks_and_extracted_in_parallel(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Small chunks, batches and flushes, two forked workers: the sidecar is the same as one
    batch extracted here, and no row is read twice or skipped."""
    rows = [
        (f"m{i:03d}", "user", "user_text", f"order #W{2378100 + i} and INV-2025-08-{44700 + i}")
        for i in range(120)
    ] + [("a1", "assistant", "assistant_text", "#W9999999")]
    add_messages(store, rows[:60], "c1")
    add_messages(store, rows[60:], "c2")
    monkeypatch.setattr(sidecar, "CHUNK_ROWS", 7)
    monkeypatch.setattr(sidecar, "BATCH_MESSAGES", 3)
    monkeypatch.setattr(sidecar, "FLUSH_ROWS", 10)
    monkeypatch.setenv("LEXKEEP_EXTRACT_WORKERS", "2")
    with store.transaction() as con:
        counts = sidecar.scan_query(
            con,
            "SELECT id, conversation_id, text, position FROM messages WHERE kind = 'user_text'",
            [],
            default_rules(),
            parallel_min_chars=0,
        )
    assert (counts.messages, counts.identifiers, counts.incomplete) == (120, 240, 0)
    expected = sorted(
        (f"m{i:03d}", kind, value)
        for i in range(120)
        for kind, value in (("hash_ref", f"#W{2378100 + i}"),
                            ("compound_code", f"INV-2025-08-{44700 + i}"))
    )  # fmt: skip
    assert sorted(row[:3] for row in identifiers(store)) == expected
    assert store.con.execute("SELECT count(*) FROM identifier_scans").fetchone()[0] == 120
    tables = store.con.execute("SELECT table_name FROM duckdb_tables() WHERE temporary").fetchall()
    assert ("lexkeep_scan_queue",) not in tables


def test_known_extractions_are_taken_only_for_the_same_text(store: Store) -> None:
    """index_pending(known=...) writes an extraction made elsewhere (a read-ahead worker) for a
    message whose stored text is the one it was made from; any other message is extracted."""
    add_messages(store)
    marker = Extraction((Identifier("made_elsewhere", "#W2378156", 13, 22),), complete=False)
    stale = Extraction((Identifier("made_elsewhere", "INV-2025-08-44719", 13, 30),))
    known = {
        "m1": (ROWS[0][3], marker),  # the stored text: taken as it is
        "m6": ("an older text of m6", stale),  # another text: m6 is extracted again
        "m2": (ROWS[1][3], marker),  # not pending (tool output): never written
    }
    rules = default_rules()
    with store.transaction() as con:
        inserted = index_pending(con, rules, known)
    assert inserted == 2
    assert identifiers(store) == [
        ("m1", "made_elsewhere", "#W2378156", 13, 22),
        ("m6", "compound_code", "INV-2025-08-44719", 13, 30),
    ]
    scans = store.con.execute(
        "SELECT message_id, complete, rules_digest FROM identifier_scans ORDER BY message_id"
    ).fetchall()
    assert scans == [("m1", False, rules.digest), ("m6", True, rules.digest)]
