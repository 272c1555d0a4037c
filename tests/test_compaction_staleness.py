"""`lexkeep compactions` judges staleness cheaply without judging it differently.

A completed job remembers the state of the source it was summarised from (`source_state`,
taken when its pairs were read). `jobs.unchanged_summaries` compares it with the state now in
SQL; only jobs it cannot vouch for have their source digest recomputed. The cheap test may
only ever say "unchanged" when the recomputed digest says the summary is still valid.
"""

from __future__ import annotations

import json
from collections.abc import Callable

import pytest
from conftest import undo_migrations_after
from test_compaction_support import Builder, build

from lexkeep.compaction import jobs
from lexkeep.compaction.engine import run_compaction
from lexkeep.compaction.pairs import eligible_pairs_many
from lexkeep.compaction.summarizers import Generation, Summarizer, SummaryRequest
from lexkeep.core.store import Store, migrations


def _full_verdicts(store: Store) -> dict[str, str | None]:
    """The definition: every completed job's stale reason from the current pairs."""
    rows = store.con.execute(
        "SELECT id, conversation_id, from_pair, to_pair, prompt_version, source_digest "
        "FROM compactions WHERE status = 'completed'"
    ).fetchall()
    pairs = eligible_pairs_many(store.con, sorted({r[1] for r in rows}))
    return {
        job_id: jobs.summary_stale_reason(a, b, version, digest, pairs[cid])
        for job_id, cid, a, b, version, digest in rows
    }


def _listed(store: Store) -> dict[str, str | None]:
    return {j.id: j.stale_reason for j in jobs.list_jobs(store.con) if j.status == "completed"}


def _by_range(store: Store, ids: set[str]) -> list[tuple[str, int]]:
    rows = store.con.execute(
        "SELECT conversation_id, from_pair FROM compactions WHERE id IN "
        "(SELECT unnest(?::VARCHAR[])) ORDER BY ALL",
        [sorted(ids)],
    ).fetchall()
    return [tuple(r) for r in rows]


def _max_position(store: Store, cid: str) -> int:
    return store.con.execute(
        "SELECT max(position) FROM (SELECT position FROM messages WHERE conversation_id = $c "
        "UNION ALL SELECT position FROM runs WHERE conversation_id = $c "
        "UNION ALL SELECT position FROM tool_calls WHERE conversation_id = $c)",
        {"c": cid},
    ).fetchone()[0]


def _append(store: Store, fill: Callable[[Builder], None], cid: str = "c1") -> None:
    """Add rows to an existing conversation, after everything it holds."""
    b = Builder()
    b.positions[cid] = _max_position(store, cid)
    fill(b)
    b.write(store)


@pytest.fixture
def compacted(store: Store) -> Store:
    """c1: 60 pairs (segments 0, 10, 20, 30 summarised); c2: 30 pairs (segment 0)."""
    build(store, {"c1": 60, "c2": 30})
    report = run_compaction(store)
    assert report.completed == 5, report
    return store


def test_every_completed_job_records_its_source_state_and_is_vouched_for(compacted):
    states = compacted.con.execute(
        "SELECT count(*), count(DISTINCT source_state) FROM compactions "
        "WHERE status = 'completed' AND source_state IS NOT NULL"
    ).fetchone()
    assert states == (5, 5)
    unchanged = jobs.unchanged_summaries(compacted.con)
    assert _by_range(compacted, unchanged) == [
        ("c1", 0),
        ("c1", 10),
        ("c1", 20),
        ("c1", 30),
        ("c2", 0),
    ]
    assert _listed(compacted) == _full_verdicts(compacted) == dict.fromkeys(unchanged)
    assert jobs.unchanged_summaries(compacted.con, ["c2"]) == {
        j for j in unchanged if _by_range(compacted, {j}) == [("c2", 0)]
    }


def _edit_answer(pair: int) -> Callable[[Store], None]:
    def edit(store: Store) -> None:
        store.con.execute(
            "UPDATE messages SET text = text || ' (edited)' WHERE id = ?", [f"c1-a{pair}"]
        )

    return edit


def _grow(store: Store) -> None:  # a live session: new turns after everything
    _append(store, lambda b: b.pairs("c1", 5, start=60))


def _run_fails(store: Store) -> None:  # pair 14 is no longer eligible: 15… renumbered
    store.con.execute("UPDATE runs SET status = 'failed' WHERE id = 'c1-r14'")


def _later_draft(store: Store) -> None:  # run 3's last answer is now a later, streaming one
    _append(
        store,
        lambda b: b.message("c1", "c1-a3-late", "c1-r3", "assistant", "x", status="streaming"),
    )


def _second_user_text(store: Store) -> None:  # run 23 now has two user messages: ambiguous
    _append(store, lambda b: b.message("c1", "c1-u23-again", "c1-r23", "user", "and again"))


def _tool_call(store: Store) -> None:  # answer 5 now carries a tool call: not an answer
    _append(store, lambda b: b.tool_call("c1", "call-late", "c1-a5", "{}"))


def _run_elsewhere(store: Store) -> None:  # run 33 now belongs to another conversation
    store.con.execute("UPDATE runs SET conversation_id = 'c2' WHERE id = 'c1-r33'")


def _kind_changed(store: Store) -> None:  # user message 2 is injected context now
    store.con.execute("UPDATE messages SET kind = 'injected_context' WHERE id = 'c1-u2'")


def _inserted_turn(store: Store) -> None:  # a turn ingested between pairs 14 and 15
    first = store.con.execute("SELECT position FROM runs WHERE id = 'c1-r15'").fetchone()[0]
    for table in ("runs", "messages"):
        store.con.execute(
            f"UPDATE {table} SET position = position + 100 "
            "WHERE conversation_id = 'c1' AND position >= ?",
            [first],
        )
    b = Builder()
    b.positions["c1"] = first - 1
    b.pair("c1", 1000)
    b.write(store)


def _unrelated_change(store: Store) -> None:  # kinds and fields pairing never reads
    store.con.execute("UPDATE messages SET time = '2030-01-01', source_line = source_line + 7")
    _append(store, lambda b: b.message("c1", "c1-note", "c1-r12", "tool", "a tool note"))


def _late_answer_after_range(store: Store) -> None:  # the answer of pair 45 edited: no range
    _edit_answer(45)(store)


# (change, jobs of c1 the cheap test still vouches for, c1 jobs that are stale)
CHANGES = {
    "grown": (_grow, [0, 10, 20, 30], []),
    "edited in range 10": (_edit_answer(13), [0], [10]),
    "edited after every range": (_late_answer_after_range, [0, 10, 20, 30], []),
    "run failed": (_run_fails, [0], [10, 20, 30]),
    "later streaming draft": (_later_draft, [], [0, 10, 20, 30]),
    "two user messages in a run": (_second_user_text, [0, 10], [20, 30]),
    "tool call on an answer": (_tool_call, [], [0, 10, 20, 30]),
    "run moved away": (_run_elsewhere, [0, 10, 20], [30]),
    "kind changed": (_kind_changed, [], [0, 10, 20, 30]),
    "turn inserted before a range": (_inserted_turn, [0], [10, 20, 30]),
    "unrelated fields": (_unrelated_change, [0, 10, 20, 30], []),
}


@pytest.mark.parametrize("name", CHANGES)
def test_the_cheap_test_vouches_only_for_summaries_the_digest_still_accepts(compacted, name):
    change, vouched, stale = CHANGES[name]
    change(compacted)
    full = _full_verdicts(compacted)
    unchanged = jobs.unchanged_summaries(compacted.con)
    assert all(full[j] is None for j in unchanged)
    assert [p for c, p in _by_range(compacted, unchanged) if c == "c1"] == vouched
    assert ("c2", 0) in _by_range(compacted, unchanged)
    assert _listed(compacted) == full
    stale_ids = {j for j, reason in full.items() if reason is not None}
    assert [p for c, p in _by_range(compacted, stale_ids) if c == "c1"] == stale


class EditsWhileSummarising(Summarizer):
    """Edits an answer of the range it summarises while the store is closed (as an ingest
    running beside a slow model would), then answers."""

    name = "edits-while-summarising"
    model_id = "test/edits"

    def __init__(self, path) -> None:
        self.path = path

    def summarize(self, request: SummaryRequest) -> Generation:
        if request.from_pair == 10:
            with Store.open(self.path) as other:
                other.con.execute(
                    "UPDATE messages SET text = 'changed meanwhile' WHERE id = ?",
                    [request.answers[3].message_id],
                )
        return Generation("summary of " + ", ".join(a.message_id for a in request.answers))


def test_a_source_changed_while_its_summary_was_written_is_not_vouched_for(db_file):
    with Store.open(db_file) as store:
        build(store, {"c1": 40})
    report = run_compaction(db_file, summarizer=EditsWhileSummarising(db_file))
    assert report.completed == 2, report
    with Store.open(db_file, read_only=True) as store:
        assert [p for _, p in _by_range(store, jobs.unchanged_summaries(store.con))] == [0]
        listed = {j.from_pair: j.stale_reason for j in jobs.list_jobs(store.con)}
        assert listed == {0: None, 10: "stale, the source changed since it was summarised"}
        assert _listed(store) == _full_verdicts(store)


def _as_schema_2(db_file, *changes: str) -> None:
    """Make the store what lexkeep wrote before migration 003 (no source_state column, and
    no table of a later migration), after the SQL `changes`."""
    assert [v for v, name, _ in migrations()][2] == 3
    with Store.open(db_file) as store:
        for sql in changes:
            store.con.execute(sql)
        store.con.execute("DROP INDEX compactions_range")  # DuckDB: else no DROP COLUMN
        store.con.execute("ALTER TABLE compactions DROP COLUMN source_state")
        store.con.execute(
            "CREATE INDEX compactions_range ON compactions (conversation_id, from_pair)"
        )
        undo_migrations_after(store, 2)


def test_a_store_from_before_source_states_is_read_and_judged_by_the_digest(db_file):
    with Store.open(db_file) as store:
        build(store, {"c1": 40})
        assert run_compaction(store).completed == 2
    _as_schema_2(db_file, "UPDATE messages SET text = 'edited' WHERE id = 'c1-a12'")
    with Store.open(db_file, read_only=True) as store:  # read-only: stays at schema 2
        assert store.schema_version() == 2
        assert jobs.unchanged_summaries(store.con) == set()
        listed = {j.from_pair: j.stale_reason for j in jobs.list_jobs(store.con)}
        assert listed == {0: None, 10: "stale, the source changed since it was summarised"}
    with Store.open(db_file) as store:  # migrated: old jobs have no state, so the digest
        assert store.schema_version() == len(migrations())
        assert jobs.unchanged_summaries(store.con) == set()
        assert {j.from_pair: j.stale_reason for j in jobs.list_jobs(store.con)} == listed


def test_the_cli_lists_a_schema_2_store_without_migrating_it(cli, db_file):
    with Store.open(db_file) as store:
        build(store, {"c1": 30})
    assert cli("compact", "--db", str(db_file)).exit_code == 0
    _as_schema_2(db_file)
    r = cli("compactions", "--db", str(db_file), "--format", "json")
    assert r.exit_code == 0, r.stderr
    assert [(j["from_pair"], j["stale"]) for j in json.loads(r.stdout)["jobs"]] == [(0, False)]
    with Store.open(db_file, read_only=True) as store:
        assert store.schema_version() == 2
