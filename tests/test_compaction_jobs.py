"""Points 5, 7, 8, 9: atomic claims, races, bounded attempts, leases, admission, immutability."""

from __future__ import annotations

import re
import threading

import duckdb
import pytest
from test_compaction_support import Builder, build

from lexkeep.compaction import jobs
from lexkeep.compaction.binding import identity
from lexkeep.compaction.pairs import eligible_pairs
from lexkeep.core.errors import RuleError

NOW = 1_800_000_000.0


def ident_for(store, cid="c1", from_pair=0, *, model_id="m", version=jobs.PROMPT_VERSION):
    pairs = eligible_pairs(store.con, cid)[from_pair : from_pair + 10]
    return identity(cid, from_pair, from_pair + 9, pairs, model_id=model_id, prompt_version=version)


def done(text="a summary"):
    return jobs.Completion(text, "0" * 64, ["u"] * 10, 0, 0)


def messages_snapshot(store):
    return store.con.execute("SELECT * FROM messages ORDER BY id").fetchall()


def test_duplicate_claim_is_refused(store):
    build(store, {"c1": 30})
    ident = ident_for(store)
    first = jobs.claim(store.con, ident, owner="w1", now=NOW)
    assert isinstance(first, jobs.Claim)
    second = jobs.claim(store.con, ident, owner="w2", now=NOW + 1)
    assert isinstance(second, jobs.Refusal) and second.reason == "running"
    jobs.complete(store.con, first, done(), now=NOW + 2)
    third = jobs.claim(store.con, ident, owner="w3", now=NOW + 3)
    assert isinstance(third, jobs.Refusal) and third.reason == "completed"
    assert store.con.execute("SELECT count(*) FROM compactions").fetchone()[0] == 1


def test_competing_identity_for_a_running_range_is_refused(store):
    build(store, {"c1": 30})
    assert isinstance(jobs.claim(store.con, ident_for(store), owner="w1", now=NOW), jobs.Claim)
    other_model = ident_for(store, model_id="other-model")
    refused = jobs.claim(store.con, other_model, owner="w2", now=NOW)
    assert refused == jobs.Refusal("running", refused.detail)


def test_completed_range_with_same_source_refuses_another_model(store):
    build(store, {"c1": 30})
    c = jobs.claim(store.con, ident_for(store), owner="w1", now=NOW)
    jobs.complete(store.con, c, done(), now=NOW)
    refused = jobs.claim(store.con, ident_for(store, model_id="m2"), owner="w2", now=NOW)
    assert refused.reason == "completed"


def test_claim_refuses_incomplete_or_duplicate_source_ids(store):
    build(store, {"c1": 30})
    ident = ident_for(store)
    import dataclasses

    ids = list(ident.source_message_ids)
    ids[5] = ids[4]
    with pytest.raises(RuleError, match="complete and unique"):
        jobs.claim(store.con, dataclasses.replace(ident, source_message_ids=tuple(ids)), owner="w")
    ids[5] = ""
    with pytest.raises(RuleError, match="complete and unique"):
        jobs.claim(store.con, dataclasses.replace(ident, source_message_ids=tuple(ids)), owner="w")
    with pytest.raises(RuleError, match="20 source ids"):
        jobs.claim(
            store.con, dataclasses.replace(ident, source_message_ids=tuple(ids[:19])), owner="w"
        )
    assert store.con.execute("SELECT count(*) FROM compactions").fetchone()[0] == 0


def test_eight_threads_with_own_connections_race_20_times_one_winner_each(store):
    build(store, {f"c{i}": 30 for i in range(20)})
    for rep in range(20):
        ident = ident_for(store, f"c{rep}")
        cons = [store.con.cursor() for _ in range(8)]
        results: list = [None] * 8
        barrier = threading.Barrier(8)

        def race(i: int, ident=ident, cons=cons, results=results, barrier=barrier) -> None:
            barrier.wait()
            results[i] = jobs.claim_with_retry(cons[i], ident, owner=f"w{i}")

        threads = [threading.Thread(target=race, args=(i,)) for i in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        for c in cons:
            c.close()
        winners = [r for r in results if isinstance(r, jobs.Claim)]
        assert len(winners) == 1, (rep, results)
        assert all(r.reason == "running" for r in results if isinstance(r, jobs.Refusal))
    rows = store.con.execute("SELECT count(*), sum(attempts) FROM compactions").fetchone()
    assert rows == (20, 20)
    assert store.con.execute("SELECT count(*) FROM compaction_attempts").fetchone()[0] == 20


def test_a_lost_race_is_reported_not_raised(store):
    # Two transactions open at once: the second to touch the gate row loses, cleanly.
    build(store, {"c1": 30, "c2": 30})
    a, b = store.con.cursor(), store.con.cursor()
    a.execute("BEGIN TRANSACTION")
    a.execute("UPDATE compaction_gate SET claims = claims + 1 WHERE id = 1")
    lost = jobs.claim(b, ident_for(store, "c2"), owner="w2", now=NOW)
    assert lost.reason == "race"
    a.execute("ROLLBACK")
    assert isinstance(jobs.claim(b, ident_for(store, "c2"), owner="w2", now=NOW), jobs.Claim)


def test_at_most_two_attempts_then_the_range_stays_raw(store):
    build(store, {"c1": 30})
    ident = ident_for(store)
    before = messages_snapshot(store)
    c1 = jobs.claim(store.con, ident, owner="w", now=NOW)
    assert jobs.fail(store.con, c1, "boom 1", now=NOW) == "failed"
    c2 = jobs.claim(store.con, ident, owner="w", now=NOW + 1)
    assert isinstance(c2, jobs.Claim) and c2.attempt == 2
    assert jobs.fail(store.con, c2, "boom 2", now=NOW + 1) == "exhausted"
    third = jobs.claim(store.con, ident, owner="w", now=NOW + 2)
    assert third.reason == "exhausted"
    row = store.con.execute(
        "SELECT status, attempts, summary, last_error FROM compactions"
    ).fetchone()
    assert row == ("exhausted", 2, None, "boom 2")
    assert store.con.execute(
        "SELECT attempt, outcome, error FROM compaction_attempts ORDER BY attempt"
    ).fetchall() == [(1, "failed", "boom 1"), (2, "failed", "boom 2")]
    assert store.con.execute("SELECT count(*) FROM boundaries").fetchone()[0] == 0
    assert messages_snapshot(store) == before


def test_expired_lease_counts_as_a_failed_attempt(store):
    build(store, {"c1": 30})
    ident = ident_for(store)
    c1 = jobs.claim(store.con, ident, owner="dead", now=NOW, lease_seconds=10)
    # still live: nobody else may start
    assert jobs.claim(store.con, ident, owner="w", now=NOW + 9).reason == "running"
    c2 = jobs.claim(store.con, ident, owner="w", now=NOW + 11, lease_seconds=10)
    assert isinstance(c2, jobs.Claim) and c2.attempt == 2
    assert store.con.execute(
        "SELECT attempt, outcome FROM compaction_attempts ORDER BY attempt"
    ).fetchall() == [(1, "lease_expired"), (2, None)]
    # the dead worker comes back: its lease is gone, it may not write
    with pytest.raises(RuleError, match="no longer held"):
        jobs.complete(store.con, c1, done(), now=NOW + 12)
    # the second lease expires too: exhausted, stays raw
    assert jobs.expire_leases(store.con, now=NOW + 30) == 1
    assert store.con.execute("SELECT status, attempts FROM compactions").fetchone() == (
        "exhausted",
        2,
    )
    assert jobs.claim(store.con, ident, owner="w", now=NOW + 31).reason == "exhausted"


def test_admission_limit_counts_live_running_jobs_in_the_store(store):
    build(store, {f"c{i}": 30 for i in range(4)})
    idents = [ident_for(store, f"c{i}") for i in range(4)]
    got = [
        jobs.claim(store.con, idents[i], owner=f"w{i}", now=NOW, lease_seconds=10, max_running=2)
        for i in range(3)
    ]
    assert [type(g).__name__ for g in got] == ["Claim", "Claim", "Refusal"]
    assert got[2].reason == "admission"
    # a finished job frees its slot
    jobs.complete(store.con, got[0], done(), now=NOW + 1)
    assert isinstance(
        jobs.claim(store.con, idents[2], owner="w", now=NOW + 1, max_running=2), jobs.Claim
    )
    # got[1] (lease until NOW+10) and idents[2] hold both slots
    third = jobs.claim(store.con, idents[3], owner="w", now=NOW + 1, max_running=2)
    assert third.reason == "admission"
    # an expired lease does not hold a slot: at NOW+11 only idents[2] is live
    later = jobs.claim(store.con, idents[3], owner="w", now=NOW + 11, max_running=2)
    assert isinstance(later, jobs.Claim)


def test_batch_claim_grants_at_most_the_admission_limit(store):
    build(store, {f"c{i}": 30 for i in range(5)})
    idents = [ident_for(store, f"c{i}") for i in range(5)]
    results = jobs.claim_many(store.con, idents, owner="w", now=NOW, max_running=3)
    assert [getattr(r, "reason", "claim") for r in results] == [
        "claim",
        "claim",
        "claim",
        "admission",
        "admission",
    ]


def test_completed_summary_is_never_updated(store):
    build(store, {"c1": 30})
    c = jobs.claim(store.con, ident_for(store), owner="w", now=NOW)
    jobs.complete(store.con, c, done("first and only"), now=NOW)
    with pytest.raises(RuleError, match="never updated"):
        jobs.complete(store.con, c, done("second"), now=NOW + 1)
    with pytest.raises(RuleError, match="never updated"):
        jobs.update_summary(store.con, c.job_id, "edited")
    with pytest.raises(RuleError, match="never updated"):
        jobs.fail(store.con, c, "late failure", now=NOW + 1)
    # the schema too: a summary that no longer matches its stored digest is rejected
    with pytest.raises(duckdb.ConstraintException):
        store.con.execute("UPDATE compactions SET summary = 'edited' WHERE id = ?", [c.job_id])
    row = store.con.execute("SELECT status, summary FROM compactions").fetchone()
    assert row == ("completed", "first and only")
    assert store.con.execute("SELECT count(*) FROM boundaries").fetchone()[0] == 1


def test_completion_writes_a_lexkeep_boundary_after_the_last_record(store):
    build(store, {"c1": 30})
    max_before = store.con.execute("SELECT max_position FROM conversations").fetchone()[0]
    pairs = eligible_pairs(store.con, "c1")[:10]
    c = jobs.claim(store.con, ident_for(store), owner="w", now=NOW)
    completion = jobs.Completion("S", "0" * 64, [p.user.text for p in pairs], 4, 3)
    boundary_id = jobs.complete(store.con, c, completion, now=NOW)
    row = store.con.execute(
        "SELECT id, kind, position, summary_text, kept_verbatim FROM boundaries"
    ).fetchone()
    assert row == (boundary_id, "lexkeep", max_before + 1, "S", [p.user.text for p in pairs])
    assert store.con.execute("SELECT max_position FROM conversations").fetchone()[0] == (
        max_before + 1
    )


def test_new_jobs_use_prompt_version_3_and_valid_summary_prefers_it(store):
    build(store, {"c1": 30})
    pairs = eligible_pairs(store.con, "c1")[:10]
    assert jobs.PROMPT_VERSION == "conversation-compaction@3"
    c = jobs.claim(store.con, ident_for(store), owner="w", now=NOW)
    jobs.complete(store.con, c, done("v3 text"), now=NOW)
    summary, reason = jobs.valid_summary(store.con, "c1", 0, pairs)
    assert reason == "valid" and summary.text == "v3 text"
    assert summary.prompt_version == "conversation-compaction@3"


def _complete_with_version(store, version, text):
    ident = ident_for(store, version=version)
    c = jobs.claim(store.con, ident, owner="w", now=NOW)
    jobs.complete(store.con, c, done(text), now=NOW)


def test_completed_v2_summary_is_consumed_and_blocks_a_new_v3_job(store):
    build(store, {"c1": 30})
    pairs = eligible_pairs(store.con, "c1")[:10]
    _complete_with_version(store, "conversation-compaction@2", "v2 text")
    summary, reason = jobs.valid_summary(store.con, "c1", 0, pairs)
    assert (summary.text, summary.prompt_version) == ("v2 text", "conversation-compaction@2")
    assert jobs.claim(store.con, ident_for(store), owner="w", now=NOW).reason == "completed"


def test_v1_mixed_input_summary_is_recognised_never_consumed(store):
    build(store, {"c1": 30})
    pairs = eligible_pairs(store.con, "c1")[:10]
    _complete_with_version(store, "conversation-compaction@1", "v1 mixed text")
    summary, reason = jobs.valid_summary(store.con, "c1", 0, pairs)
    assert summary is None
    assert "conversation-compaction@1" in reason and "never used" in reason
    # and it does not stand in the way of a proper @3 job
    assert isinstance(jobs.claim(store.con, ident_for(store), owner="w", now=NOW), jobs.Claim)


def test_stale_summary_is_not_valid_after_the_source_changes(store):
    build(store, {"c1": 30})
    c = jobs.claim(store.con, ident_for(store), owner="w", now=NOW)
    jobs.complete(store.con, c, done(), now=NOW)
    store.con.execute("UPDATE messages SET text = text || '!' WHERE id = 'c1-u3'")
    pairs = eligible_pairs(store.con, "c1")[:10]
    summary, reason = jobs.valid_summary(store.con, "c1", 0, pairs)
    assert summary is None and "stale" in reason
    # a new job for the changed source may start
    assert isinstance(jobs.claim(store.con, ident_for(store), owner="w", now=NOW), jobs.Claim)


def test_valid_summary_needs_the_same_range_and_all_ten_pairs(store):
    Builder().pairs("c1", 40).write(store)
    c = jobs.claim(store.con, ident_for(store), owner="w", now=NOW)
    jobs.complete(store.con, c, done(), now=NOW)
    pairs = eligible_pairs(store.con, "c1")
    assert jobs.valid_summary(store.con, "c1", 10, pairs[10:20])[0] is None
    assert jobs.valid_summary(store.con, "c1", 0, pairs[:9])[0] is None
    assert jobs.valid_summary(store.con, "c1", 0, pairs[:10])[0] is not None


def test_release_owned_gives_back_only_the_owners_running_claims(store):
    """An interrupted worker gives back what it still holds without counting an attempt: a
    first attempt's job goes, a second attempt's job is failed again with its first error;
    another worker's claim and a completed job are left as they are."""
    build(store, {"c1": 30, "c2": 30, "c3": 30, "c4": 30})
    mine = jobs.claim(store.con, ident_for(store, "c1"), owner="w1", now=NOW)
    theirs = jobs.claim(store.con, ident_for(store, "c2"), owner="w2", now=NOW)
    finished = jobs.claim(store.con, ident_for(store, "c3"), owner="w1", now=NOW)
    jobs.complete(store.con, finished, done(), now=NOW + 1)
    once = jobs.claim(store.con, ident_for(store, "c4"), owner="w0", now=NOW)
    jobs.fail(store.con, once, "exit status 1: no", now=NOW + 1)
    second = jobs.claim(store.con, ident_for(store, "c4"), owner="w1", now=NOW + 2)
    assert second.attempt == 2
    assert jobs.release_owned(store.con, "w1") == 2
    assert jobs.release_owned(store.con, "w1") == 0
    rows = dict(
        (r[0], r[1:])
        for r in store.con.execute(
            "SELECT id, status, attempts, lease_owner, last_error FROM compactions"
        ).fetchall()
    )
    assert mine.job_id not in rows
    assert rows[second.job_id] == ("failed", 1, None, "exit status 1: no")
    assert rows[theirs.job_id] == ("running", 1, "w2", None)
    assert rows[finished.job_id][0] == "completed"
    attempts = store.con.execute(
        "SELECT job_id, attempt, outcome, error FROM compaction_attempts "
        "WHERE job_id IN (?, ?) ORDER BY job_id, attempt",
        [mine.job_id, second.job_id],
    ).fetchall()
    assert attempts == [(second.job_id, 1, "failed", "exit status 1: no")]
    again = jobs.claim(store.con, ident_for(store, "c1"), owner="w3", now=NOW + 4)
    assert isinstance(again, jobs.Claim) and again.attempt == 1
    again = jobs.claim(store.con, ident_for(store, "c4"), owner="w3", now=NOW + 4)
    assert isinstance(again, jobs.Claim) and again.attempt == 2


@pytest.mark.parametrize(
    "text, problem",
    [
        ("  \n", "an empty summary is never written"),
        ("x" * 6001, "summary has 6001 characters (limit 6000)"),
        ("ok \x1b[2J", "the summary holds control character U+001B at character 3"),
        ("ok\x00", "the summary holds control character U+0000 at character 2"),
        (
            'if access_level != "user\u202e \u2066// admin\u2069 \u2066" {',
            "the summary holds bidirectional formatting character U+202E"
            " (RIGHT-TO-LEFT OVERRIDE) at character 24",
        ),
    ],
)
def test_complete_refuses_a_summary_the_generation_contract_refuses(store, text, problem):
    """The library call writes only what `compact` would: a caller that skips
    check_generation cannot store NUL or terminal escapes either."""
    build(store, {"c1": 30})
    c = jobs.claim(store.con, ident_for(store), owner="w1", now=NOW)
    with pytest.raises(RuleError, match=f"^job {c.job_id[:12]}: {re.escape(problem)}"):
        jobs.complete(store.con, c, done(text), now=NOW + 1)
    row = store.con.execute("SELECT status, summary FROM compactions").fetchone()
    assert row == ("running", None)
    jobs.complete(store.con, c, done("a\tplain\r\nsummary"), now=NOW + 2)


def test_a_completion_after_its_lease_expired_is_refused_even_if_nobody_claimed_since(store):
    """DESIGN point 7: an expired lease counts as a failed attempt. A summary that arrived
    after its lease expired was written all the same when no other claim had taken the range
    meanwhile."""
    build(store, {"c1": 30, "c2": 30})
    c = jobs.claim(store.con, ident_for(store), owner="slow", now=NOW, lease_seconds=10)
    with pytest.raises(RuleError) as info:
        jobs.complete(store.con, c, done(), now=NOW + 12.5)
    assert str(info.value) == (
        f"job {c.job_id[:12]}: its lease expired 2.5 s before the summary arrived; "
        "the attempt counts as failed (lease expired) and nothing was written"
    )
    assert info.value.hint == "give summaries more time: raise lease_seconds"
    row = store.con.execute("SELECT status, attempts, summary, last_error FROM compactions")
    assert row.fetchone() == (
        "failed",
        1,
        None,
        "lease expired: the worker stopped before finishing",
    )
    assert store.con.execute("SELECT attempt, outcome FROM compaction_attempts").fetchall() == [
        (1, "lease_expired")
    ]
    assert store.con.execute("SELECT count(*) FROM boundaries").fetchone()[0] == 0
    again = jobs.claim(store.con, ident_for(store), owner="w", now=NOW + 13)
    assert isinstance(again, jobs.Claim) and again.attempt == 2
    # up to and including the lease's last instant the write is in time
    c2 = jobs.claim(store.con, ident_for(store, "c2"), owner="w", now=NOW, lease_seconds=10)
    assert jobs.complete(store.con, c2, done(), now=NOW + 10) == f"lexkeep-compaction/{c2.job_id}"


def test_a_batch_completion_refuses_only_the_claims_whose_lease_expired(store):
    build(store, {"c1": 30, "c2": 30})
    first = jobs.claim(store.con, ident_for(store), owner="w", now=NOW, lease_seconds=10)
    second = jobs.claim(store.con, ident_for(store, "c2"), owner="w", now=NOW + 5, lease_seconds=10)
    results = jobs.complete_many(store.con, [(first, done()), (second, done())], now=NOW + 11)
    assert isinstance(results[0], RuleError) and "lease expired 1 s before" in str(results[0])
    assert results[1] == f"lexkeep-compaction/{second.job_id}"
    assert store.con.execute(
        "SELECT conversation_id, status, attempts FROM compactions ORDER BY ALL"
    ).fetchall() == [("c1", "failed", 1), ("c2", "completed", 1)]


def test_a_late_completion_on_the_last_attempt_leaves_the_range_raw(store):
    build(store, {"c1": 30})
    c1 = jobs.claim(store.con, ident_for(store), owner="w", now=NOW)
    jobs.fail(store.con, c1, "boom", now=NOW)
    c2 = jobs.claim(store.con, ident_for(store), owner="w", now=NOW + 1, lease_seconds=10)
    with pytest.raises(RuleError, match="lease expired"):
        jobs.complete(store.con, c2, done(), now=NOW + 20)
    assert store.con.execute("SELECT status, attempts, summary FROM compactions").fetchone() == (
        "exhausted",
        2,
        None,
    )
