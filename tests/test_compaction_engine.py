"""Points 4, 6, 8, 10 and 12 through the engine: assistant-only input, the generation contract,
worker slots under the admission limit, the extractive summariser, the audit boundary."""

from __future__ import annotations

import gc
import subprocess
import sys
import threading
import time

import duckdb
import pytest
from test_compaction_support import Builder, answer_text, build, user_text

from lexkeep.compaction import jobs
from lexkeep.compaction.engine import run_compaction
from lexkeep.compaction.pairs import eligible_pairs
from lexkeep.compaction.summarizers import (
    AssistantAnswer,
    ExtractiveSummarizer,
    Generation,
    Summarizer,
    SummarizerOptions,
    SummaryRequest,
    check_generation,
)
from lexkeep.core.errors import BackendUnreachableError, ConfigError, NotFoundError
from lexkeep.core.identifiers import extract
from lexkeep.core.store import Store


class Recording(Summarizer):
    """Records every request; answers with a fixed, valid summary."""

    name = "recording"
    model_id = "test/recording"

    def __init__(self) -> None:
        self.requests: list[SummaryRequest] = []

    def summarize(self, request: SummaryRequest) -> Generation:
        self.requests.append(request)
        return Generation("summary of " + ", ".join(a.message_id for a in request.answers))


class Scripted(Summarizer):
    """Returns one fixed Generation (or raises), to exercise the contract."""

    name = "scripted"
    model_id = "test/scripted"

    def __init__(self, gen: Generation | Exception) -> None:
        self.gen = gen

    def summarize(self, request: SummaryRequest) -> Generation:
        if isinstance(self.gen, Exception):
            raise self.gen
        return self.gen


def snapshot(store):
    return {
        t: store.con.execute(f"SELECT * FROM {t} ORDER BY ALL").fetchall()
        for t in ("messages", "runs", "tool_calls", "conversations")
    }


def test_no_user_text_ever_reaches_a_summariser(store):
    build(store, {"c1": 45, "c2": 30})
    rec = Recording()
    report = run_compaction(store, summarizer=rec)
    assert report.completed == 3 and len(rec.requests) == 3
    user_texts = [
        r[0] for r in store.con.execute("SELECT text FROM messages WHERE role = 'user'").fetchall()
    ]
    for request in rec.requests:
        rendered = request.render() + repr(request)
        for text in user_texts:
            assert text not in rendered
        assert "USER-SAYS" not in rendered
        # each answer arrives with its own assistant message id
        cid = request.conversation_id
        expected = [
            (f"{cid}-a{i}", answer_text(cid, i))
            for i in range(request.from_pair, request.to_pair + 1)
        ]
        assert [(a.message_id, a.text) for a in request.answers] == expected
        for message_id, _ in expected:
            assert f"=== assistant message {message_id} ===" in request.render()


def test_job_identity_and_prompt_version_are_stored(store):
    build(store, {"c1": 30})
    run_compaction(store, summarizer=Recording())
    row = store.con.execute(
        "SELECT scope, from_pair, to_pair, len(source_message_ids), prompt_version, model_id, "
        "status, attempts, digest_algorithm FROM compactions"
    ).fetchone()
    assert row == (
        "conversation",
        0,
        9,
        20,
        "conversation-compaction@3",
        "test/recording",
        "completed",
        1,
        "SHA-256",
    )


PERFECT = "A perfect summary [c1-a0] ORD_88400."


@pytest.mark.parametrize(
    ("gen", "fragment"),
    [
        (Generation(PERFECT, "stop", tool_calls=1), "tool call"),
        (Generation(PERFECT, "tool_calls", tool_calls=2), "tool call"),
        (Generation(PERFECT, "length"), "not a normal stop"),
        (Generation(PERFECT, "content_filter"), "not a normal stop"),
        (Generation("", "error", error="HTTP 500"), "HTTP 500"),
        (Generation("", "timeout", error="no answer within 1 s"), "timeout"),
        (Generation("", "stop"), "empty"),
        (Generation("  \n ", "stop"), "empty"),
        (Generation("x" * 6001, "stop"), "6,001 characters"),
        (RuntimeError("backend exploded"), "backend exploded"),
    ],
)
def test_generation_contract_failures_write_no_summary(store, gen, fragment):
    build(store, {"c1": 30})
    before = snapshot(store)
    report = run_compaction(store, summarizer=Scripted(gen))
    assert (report.claimed, report.completed, report.failed) == (1, 0, 1)
    assert fragment in report.segments[0].detail
    row = store.con.execute(
        "SELECT status, attempts, summary, last_error FROM compactions"
    ).fetchone()
    assert row[:3] == ("failed", 1, None) and fragment in row[3]
    assert store.con.execute("SELECT count(*) FROM boundaries").fetchone()[0] == 0
    assert snapshot(store) == before  # stored messages are never touched by a failure


def test_6000_characters_pass_the_contract(store):
    build(store, {"c1": 30})
    report = run_compaction(store, summarizer=Scripted(Generation("y" * 6000, "stop")))
    assert report.completed == 1
    assert store.con.execute("SELECT length(summary) FROM compactions").fetchone()[0] == 6000


def test_check_generation_is_the_contract():
    assert check_generation(Generation("ok")) is None
    assert check_generation(Generation("x" * 6000)) is None
    assert check_generation(Generation("x" * 6001)) is not None
    assert check_generation(Generation("ok", tool_calls=1)) is not None


def test_two_failed_runs_exhaust_the_range_and_a_third_run_skips_it(store):
    build(store, {"c1": 30})
    bad = Scripted(Generation("x", "length"))
    first = run_compaction(store, summarizer=bad)
    second = run_compaction(store, summarizer=bad)
    # the same identity (same model id) would now succeed, but its two attempts are used up
    third = run_compaction(store, summarizer=Scripted(Generation("would be fine", "stop")))
    assert (first.failed, second.failed) == (1, 1)
    assert third.claimed == 0 and third.skipped == 1 and "exhausted" in third.skipped_reasons
    assert store.con.execute("SELECT status, attempts FROM compactions").fetchone() == (
        "exhausted",
        2,
    )


def test_success_on_the_second_attempt(store):
    build(store, {"c1": 30})
    run_compaction(store, summarizer=Scripted(Generation("", "error", error="flaky")))
    report = run_compaction(store, summarizer=Scripted(Generation("fine", "stop")))
    assert report.completed == 1
    assert store.con.execute("SELECT status, attempts FROM compactions").fetchone() == (
        "completed",
        2,
    )


class Concurrency(Summarizer):
    """Slow summariser that measures how many calls run at once, in-process and in the store."""

    name = "concurrency"
    model_id = "test/concurrency"

    def __init__(self, store, target: int) -> None:
        self.target = target  # hold each call until this many ran at once (or 3 s passed)
        self.lock = threading.Lock()
        self.active = 0
        self.peak = 0
        self.store_peak = 0
        self.cursor = store.con.cursor()

    def summarize(self, request: SummaryRequest) -> Generation:
        with self.lock:
            self.active += 1
            self.peak = max(self.peak, self.active)
            running = self.cursor.execute(
                "SELECT count(*) FROM compactions WHERE status = 'running' "
                "AND lease_expires_at >= ?",
                [time.time()],
            ).fetchone()[0]
            self.store_peak = max(self.store_peak, running)
        deadline = time.monotonic() + 3
        while self.peak < self.target and time.monotonic() < deadline:
            time.sleep(0.01)
        time.sleep(0.1)  # linger: a broken limit would let more calls in meanwhile
        with self.lock:
            self.active -= 1
        return Generation("ok")


@pytest.mark.parametrize(("workers", "max_running"), [(6, 2), (4, 1), (3, None)])
def test_max_running_is_never_exceeded(store, workers, max_running):
    build(store, {f"c{i}": 30 for i in range(12)})
    limit = max_running or workers
    probe = Concurrency(store, target=limit)
    report = run_compaction(store, summarizer=probe, workers=workers, max_running=max_running)
    assert report.completed == 12
    assert probe.peak <= limit and probe.store_peak <= limit
    assert probe.peak == limit  # the slots really ran in parallel up to the limit


def test_admission_counts_jobs_of_other_workers_in_the_store(store):
    # Two live leases held by "another worker" fill max_running=2: nothing more is admitted.
    build(store, {f"c{i}": 30 for i in range(3)})
    other = store.con.cursor()
    for cid in ("c0", "c1"):
        pairs = eligible_pairs(other, cid)[:10]
        from lexkeep.compaction.binding import identity

        ident = identity(cid, 0, 9, pairs, model_id="elsewhere", prompt_version=jobs.PROMPT_VERSION)
        assert isinstance(jobs.claim(other, ident, owner="other", lease_seconds=60), jobs.Claim)
    report = run_compaction(
        store, summarizer=Recording(), conversation_ids=["c2"], max_running=2, admission_wait=0.3
    )
    assert report.claimed == 0 and report.skipped_reasons == {"admission": 1}


def test_extractive_keeps_every_identifier_verbatim_with_answer_ids(store):
    b = Builder()
    long_tail = " ".join(f"filler{i}" for i in range(400))
    for i in range(30):
        rid = f"r{i}"
        b.run("c1", rid)
        b.message("c1", f"u{i}", rid, "user", f"question {i}")
        b.message(
            "c1",
            f"a{i}",
            rid,
            "assistant",
            f"Invoice INV-2025-08-4471{i} at /var/log/app{i}.log; {long_tail} "
            f"then ticket PROJ-{900 + i} and https://x.io/a?b={i} end.",
        )
    b.write(store)
    report = run_compaction(store)
    assert report.completed == 1
    summary = store.con.execute("SELECT summary FROM compactions").fetchone()[0]
    assert len(summary) <= 6000
    for i in range(10):
        assert f"[a{i}]" in summary
        for value in (
            f"INV-2025-08-4471{i}",
            f"/var/log/app{i}.log",
            f"PROJ-{900 + i}",
            f"https://x.io/a?b={i}",
        ):
            assert value in summary
    assert report.identifier_share == 1.0
    assert report.identifiers_total == 40


def test_extractive_is_deterministic(tmp_path):
    from lexkeep.core.store import Store

    outputs = []
    for n in range(2):
        with Store.open(tmp_path / f"s{n}.duckdb") as s:
            build(s, {"c1": 30})
            run_compaction(s)
            outputs.append(s.con.execute("SELECT summary, id FROM compactions").fetchall())
    assert outputs[0] == outputs[1]


def test_extractive_fails_honestly_when_identifiers_do_not_fit():
    many = " ".join(f"ORD_{100000 + k}" for k in range(80))  # ~880 chars of identifiers
    answers = tuple(AssistantAnswer(f"a{i}", many) for i in range(10))
    gen = ExtractiveSummarizer().summarize(SummaryRequest("c", 0, 9, answers))
    assert check_generation(gen) is not None and "more than 6,000" in gen.error


def test_extractive_never_cuts_inside_an_identifier():
    text = "x " * 2990 + "INV-2025-08-44719 tail"
    answers = tuple(AssistantAnswer(f"a{i}", text) for i in range(10))
    gen = ExtractiveSummarizer().summarize(SummaryRequest("c", 0, 9, answers))
    assert check_generation(gen) is None
    # the identifier appears whole for every answer, never a prefix of it
    assert gen.text.count("INV-2025-08-44719") == 10
    assert "INV-2025-08-4471 " not in gen.text and not gen.text.endswith("INV-2025-08-4471")


def test_extractive_keeps_an_answer_whole_when_its_scan_was_incomplete():
    from lexkeep.core.model import Extraction

    answers = tuple(
        AssistantAnswer(f"a{i}", f"answer {i} with odd-token-{i}", Extraction((), complete=False))
        for i in range(10)
    )
    gen = ExtractiveSummarizer().summarize(SummaryRequest("c", 0, 9, answers))
    assert all(f"[a{i}] answer {i} with odd-token-{i}" in gen.text for i in range(10))


def test_only_named_conversations_are_compacted(store):
    build(store, {"c1": 30, "c2": 30})
    report = run_compaction(store, conversation_ids=["c2"], summarizer=Recording())
    assert report.completed == 1
    assert store.con.execute("SELECT conversation_id FROM compactions").fetchall() == [("c2",)]
    with pytest.raises(NotFoundError, match="no conversation nope"):
        run_compaction(store, conversation_ids=["nope"])


def test_dry_run_writes_nothing(store):
    build(store, {"c1": 40})
    before = snapshot(store)
    report = run_compaction(store, dry_run=True)
    assert report.planned == 2 and report.claimed == 0
    assert [s.outcome for s in report.segments] == ["planned", "planned"]
    assert store.con.execute("SELECT count(*) FROM compactions").fetchone()[0] == 0
    assert snapshot(store) == before


def test_completed_job_adds_a_boundary_with_the_original_user_texts(store):
    build(store, {"c1": 30})
    run_compaction(store)
    kept, kind, summary_text = store.con.execute(
        "SELECT kept_verbatim, kind, summary_text FROM boundaries"
    ).fetchone()
    assert kind == "lexkeep"
    assert kept == [user_text("c1", i) for i in range(10)]
    assert summary_text == store.con.execute("SELECT summary FROM compactions").fetchone()[0]


def test_identifier_share_reports_identifiers_missing_from_the_summary(store):
    build(store, {"c1": 30})
    report = run_compaction(store, summarizer=Scripted(Generation("ORD_88400 only", "stop")))
    values = {v.value for i in range(10) for v in extract(answer_text("c1", i)).identifiers}
    assert report.identifiers_total == len(values)
    assert report.identifiers_kept == 1


class FreezeProbe(Summarizer):
    """Records whether the planned objects were frozen while it ran."""

    name = "freeze-probe"
    model_id = "test/freeze-probe"

    def __init__(self) -> None:
        self.frozen: list[int] = []

    def summarize(self, request: SummaryRequest) -> Generation:
        self.frozen.append(gc.get_freeze_count())
        return Generation("summary of " + ", ".join(a.message_id for a in request.answers))


def test_planned_pairs_are_frozen_during_the_run_and_released_after(store):
    build(store, {"c1": 30})
    probe = FreezeProbe()
    assert gc.get_freeze_count() == 0
    assert run_compaction(store, summarizer=probe).completed == 1
    assert probe.frozen[0] > 0  # out of the collector's scans while summarising
    assert gc.get_freeze_count() == 0  # and handed back to it afterwards


def test_a_host_that_froze_objects_itself_keeps_them_frozen(store):
    """The CLI freezes what its imports made: the planned pairs are frozen on top of that
    (more objects frozen while summarising), and the host's stay frozen afterwards."""
    build(store, {"c1": 30})
    gc.freeze()
    try:
        before = gc.get_freeze_count()
        probe = FreezeProbe()
        assert run_compaction(store, summarizer=probe).completed == 1
        assert probe.frozen[0] > before  # the planned pairs joined the frozen objects
        assert gc.get_freeze_count() >= before  # lexkeep did not unfreeze the host's objects
    finally:
        gc.unfreeze()


class GrowsALaterConversation(Recording):
    """While it summarises the first segment, ten more turns reach conversation c4 (an ingest
    beside the run): 40 pairs, two segments instead of the one counted."""

    def __init__(self, store: Store) -> None:
        super().__init__()
        self.store = store

    def summarize(self, request: SummaryRequest) -> Generation:
        if not self.requests:
            b = Builder()
            b.positions["c4"] = self.store.con.execute(
                "SELECT max_position FROM conversations WHERE id = 'c4'"
            ).fetchone()[0]
            b.pairs("c4", 10, start=30).write(self.store)
        return super().summarize(request)


def test_conversations_are_planned_and_compacted_batch_by_batch(store, monkeypatch):
    """Each batch is planned from its pairs when its turn comes (c4 grew while the first batch
    was summarised: its new segment is compacted too); the later batches' segments are
    counted before the first is worked on, so the total is known from the start."""
    from lexkeep.compaction import engine

    monkeypatch.setattr(engine, "BATCH_CONVERSATIONS", 2)
    build(store, {f"c{i}": 30 for i in range(5)})
    planned: list[int] = []
    report = run_compaction(
        store, summarizer=GrowsALaterConversation(store), on_planned=planned.append
    )
    # one segment per 30-pair conversation, batches 2 + 2 + 1; then c4 plans two
    assert planned == [5, 5, 6]
    assert (report.planned, report.completed, report.failed, report.remaining) == (6, 6, 0, 0)
    done = store.con.execute(
        "SELECT count(*) FROM compactions WHERE status = 'completed'"
    ).fetchone()[0]
    assert done == 6


class StopsTheRun(Summarizer):
    """Summarises until its `n`-th call, which stops the run as `how` says: Ctrl-C, a backend
    that cannot be reached, the same failure from the first call on (a misconfigured backend:
    the third stops the run), another process holding the store past the claim's lease, or
    a store that cannot take the summary (the conversation's row was deleted meanwhile)."""

    name = "stops"
    model_id = "test/stops"

    def __init__(self, db, n: int, how: str) -> None:
        self.db, self.n, self.how = db, n, how
        self.calls = 0
        self.holder: subprocess.Popen | None = None

    def summarize(self, request: SummaryRequest) -> Generation:
        self.calls += 1
        if self.how == "misconfigured":
            return Generation("", "error", error="no key")
        if self.calls < self.n:
            return Generation("Summary: ORD_88400.")
        if self.how == "ctrl-c":
            raise KeyboardInterrupt
        if self.how == "unreachable":
            raise BackendUnreachableError("cannot reach the model", hint="start it")
        if self.how == "store-held":  # another process takes the store until after the lease
            self.holder = subprocess.Popen(
                [sys.executable, "-c", HOLDS_THE_STORE, str(self.db)],
                stdout=subprocess.PIPE,
                text=True,
            )
            assert self.holder.stdout is not None
            assert self.holder.stdout.readline() == "held\n"
            return Generation("Summary: ORD_88400.")
        con = duckdb.connect(str(self.db))  # the run has closed the store meanwhile
        try:
            con.execute("DELETE FROM conversations WHERE id = ?", [request.conversation_id])
        finally:
            con.close()
        return Generation("Summary: ORD_88400.")


HOLDS_THE_STORE = """\
import sys, time, duckdb
con = duckdb.connect(sys.argv[1])
print("held", flush=True)
time.sleep(10)
"""


@pytest.mark.parametrize(
    ("how", "n", "completed"),
    [
        ("ctrl-c", 3, 2),  # in the second batch
        ("ctrl-c", 1, 0),
        ("unreachable", 2, 1),
        ("misconfigured", 1, 0),
        ("store-held", 3, 2),
        ("storage", 2, 1),
    ],
)
def test_a_run_stopped_early_reports_every_segment_it_planned(
    db_file, monkeypatch, how, n, completed
):
    """`planned` was counted batch by batch (500 conversations at a time) as the run went: a
    run that stopped early said `planned 2` of a store with 5 segments, and `remaining` left
    out the batches it never reached. Every segment of the run is now counted, however it
    stops."""
    from lexkeep.compaction import engine
    from lexkeep.compaction.engine import (
        CompactionFailed,
        CompactionInterrupted,
        CompactionStopped,
        CompactionStoreHeld,
    )

    monkeypatch.setattr(engine, "BATCH_CONVERSATIONS", 2)
    with Store.open(db_file) as store:
        build(store, {f"c{i}": 30 for i in range(5)})  # one segment each: batches 2 + 2 + 1
    stops = {
        "ctrl-c": CompactionInterrupted,
        "unreachable": CompactionStopped,
        "misconfigured": CompactionStopped,
        "store-held": CompactionStoreHeld,
        "storage": CompactionFailed,
    }[how]
    summarizer = StopsTheRun(db_file, n, how)
    planned: list[int] = []
    try:
        with pytest.raises(stops) as stop:
            # another process holds the store until the lease expires: a short one
            lease = 3.0 if how == "store-held" else None
            run_compaction(
                db_file, summarizer=summarizer, lease_seconds=lease, on_planned=planned.append
            )
    finally:
        if summarizer.holder is not None:
            summarizer.holder.kill()
            summarizer.holder.communicate()
    report = stop.value.report
    assert report.planned == 5 and planned[0] == 5, (report.planned, planned)
    assert report.completed == completed and report.failed == 0, report.segments
    left = 5 - completed
    assert report.remaining == left


class ReadsBeside(Summarizer):
    """While it summarises, another process reads the store without waiting for a lock."""

    name = "reads-beside"
    model_id = "test/reads-beside"
    READER = (
        "import sys, duckdb\n"
        "con = duckdb.connect(sys.argv[1], read_only=True)\n"
        "print(con.execute(\"SELECT count(*) FROM compactions WHERE status = 'running'\")"
        ".fetchone()[0])\n"
    )

    def __init__(self, path, patience: float) -> None:
        self.path = path
        self.patience = patience  # other slots may be claiming or writing a moment
        self.seen: list[int] = []

    def summarize(self, request: SummaryRequest) -> Generation:
        import subprocess
        import sys

        deadline = time.monotonic() + self.patience
        while True:
            reader = subprocess.run(
                [sys.executable, "-c", self.READER, str(self.path)], capture_output=True, text=True
            )
            if reader.returncode == 0 or time.monotonic() > deadline:
                break
            time.sleep(0.01)
        if reader.returncode:
            return Generation("", finish_reason="error", error=reader.stderr[-300:])
        self.seen.append(int(reader.stdout))
        return Generation("summary of " + ", ".join(a.message_id for a in request.answers))


@pytest.mark.parametrize("workers", [1, 3])
def test_given_a_path_the_store_is_closed_while_a_summariser_works(tmp_path, workers):
    from lexkeep.core.store import Store

    path = tmp_path / "store.duckdb"
    with Store.open(path) as store:
        build(store, {f"c{i}": 40 for i in range(4)})  # 2 segments each
    summarizer = ReadsBeside(path, patience=0 if workers == 1 else 20)
    report = run_compaction(str(path), summarizer=summarizer, workers=workers)
    assert (report.planned, report.completed, report.failed) == (8, 8, 0), report.segments
    assert len(summarizer.seen) == 8 and min(summarizer.seen) >= 1  # its own claim, seen
    with Store.open(path) as store:
        assert store.con.execute("SELECT count(*) FROM boundaries").fetchone() == (8,)
        # and given an open store, the run uses it throughout: the reader is refused
        build(store, {"late": 30})
        report = run_compaction(store, summarizer=ReadsBeside(path, patience=0))
    assert (report.completed, report.failed) == (0, 1)
    assert "lock" in report.segments[-1].detail, report.segments[-1]


class InterruptedAfter(ExtractiveSummarizer):
    """The extractive summariser, with Ctrl-C arriving during its `n`-th call."""

    def __init__(self, n: int) -> None:
        super().__init__()
        self.n = n
        self.calls = 0

    def summarize(self, request: SummaryRequest) -> Generation:
        self.calls += 1
        if self.calls == self.n:
            raise KeyboardInterrupt
        return super().summarize(request)


@pytest.mark.parametrize("by_path", [True, False])
def test_ctrl_c_in_one_slot_leaves_no_claim_held(db_file, by_path):
    """Ctrl-C during an extractive run (one slot, 512 segments claimed per transaction) left
    every segment of the batch `running` under a lease of --timeout + 60 s, and later
    recorded them as failed attempts: an interruption spent one of each range's two attempts.
    The claims still held are now given back as they were, so the next run takes them up
    again with their attempts unchanged."""
    from lexkeep.compaction.engine import CompactionInterrupted

    with Store.open(db_file) as store:
        build(store, {f"c{i}": 30 for i in range(6)})  # six segments, one batch
    interrupted = InterruptedAfter(3)
    with pytest.raises(CompactionInterrupted) as stop:
        if by_path:
            run_compaction(db_file, summarizer=interrupted)
        else:
            with Store.open(db_file) as store:
                run_compaction(store, summarizer=interrupted)
    report = stop.value.report
    assert (report.claimed, report.completed, report.failed) == (0, 0, 0), report.segments
    with Store.open(db_file, read_only=True) as store:
        # first attempts given back: no job, no attempt is left of them
        assert store.con.execute("SELECT count(*) FROM compactions").fetchone() == (0,)
        assert store.con.execute("SELECT count(*) FROM compaction_attempts").fetchone() == (0,)
    again = run_compaction(db_file)  # the same identity (extractive/1), attempt 1 again
    assert (again.completed, again.skipped) == (6, 0), again.skipped_reasons
    assert {s.attempt for s in again.segments} == {1}
    same = run_compaction(db_file, summarizer=InterruptedAfter(0))  # never interrupts
    assert (same.completed, same.skipped) == (0, 6)  # each range has its summary now


class FailsOrInterrupted(Summarizer):
    """Fails every call (a real, counted attempt), or gets Ctrl-C during every call."""

    name = "flaky"
    model_id = "test/flaky"

    def __init__(self, interrupt: bool) -> None:
        self.interrupt = interrupt

    def summarize(self, request: SummaryRequest) -> Generation:
        if self.interrupt:
            raise KeyboardInterrupt
        return Generation("", "error", error="the backend said no")


def test_ctrl_c_during_a_second_attempt_leaves_the_first_ones_failure_as_it_was(db_file):
    """An interrupted second attempt used to exhaust the range (two failed attempts: the
    range stayed raw for good), though the summariser never finished its second try."""
    from lexkeep.compaction.engine import CompactionInterrupted

    with Store.open(db_file) as store:
        build(store, {"c1": 30})
    first = run_compaction(db_file, summarizer=FailsOrInterrupted(False))
    assert (first.claimed, first.failed) == (1, 1)
    with Store.open(db_file, read_only=True) as store:
        before = store.con.execute(
            "SELECT status, attempts, last_error, lease_owner, lease_expires_at FROM compactions"
        ).fetchall()
        attempts_before = store.con.execute("SELECT * FROM compaction_attempts").fetchall()
    assert before == [("failed", 1, "error: the backend said no", None, None)]
    with pytest.raises(CompactionInterrupted) as stop:
        run_compaction(db_file, summarizer=FailsOrInterrupted(True))
    assert (stop.value.report.claimed, stop.value.report.failed) == (0, 0)
    with Store.open(db_file, read_only=True) as store:
        after = store.con.execute(
            "SELECT status, attempts, last_error, lease_owner, lease_expires_at FROM compactions"
        ).fetchall()
        attempts_after = store.con.execute("SELECT * FROM compaction_attempts").fetchall()
    assert after == before
    assert attempts_after == attempts_before
    again = run_compaction(db_file, summarizer=FailsOrInterrupted(False))
    assert [s.attempt for s in again.segments] == [2]  # the second attempt is still there


class Slow(Summarizer):
    """Answers after `seconds`: longer than a short lease."""

    name = "slow"
    model_id = "test/slow"

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds

    def summarize(self, request: SummaryRequest) -> Generation:
        time.sleep(self.seconds)
        return Generation("summary of " + ", ".join(a.message_id for a in request.answers))


def test_a_summary_that_outlives_its_lease_is_a_failed_attempt(db_file):
    """Nobody else claimed the range meanwhile, and the late summary used to be written."""
    with Store.open(db_file) as store:
        build(store, {"c1": 30})
    report = run_compaction(db_file, summarizer=Slow(1.5), lease_seconds=1)
    assert (report.completed, report.failed) == (0, 1), report
    [segment] = report.segments
    assert segment.outcome == "failed"
    assert "lease expired" in segment.detail and "nothing was written" in segment.detail
    with Store.open(db_file, read_only=True) as store:
        assert store.con.execute(
            "SELECT status, attempts, summary FROM compactions"
        ).fetchone() == ("failed", 1, None)
        assert store.con.execute("SELECT outcome FROM compaction_attempts").fetchall() == [
            ("lease_expired",)
        ]
        assert store.con.execute("SELECT count(*) FROM boundaries").fetchone()[0] == 0
    again = run_compaction(db_file, summarizer=Slow(0), lease_seconds=30)
    assert (again.completed, again.segments[0].attempt) == (1, 2)


class SlowBatch(Slow):
    """A remote-style summariser claiming 3 segments per transaction, called one by one."""

    batch_size = 3

    def __init__(self, seconds: float) -> None:
        super().__init__(seconds)
        self.calls = 0

    def summarize(self, request: SummaryRequest) -> Generation:
        self.calls += 1
        return super().summarize(request)


def test_a_lease_that_cannot_cover_the_calls_it_holds_is_refused(db_file):
    """A claim's lease is the whole time its attempt has: a lease shorter than the calls made
    under it (--timeout per call, `batch_size` calls per claim) spent every attempt for
    nothing, so run_compaction refuses it before claiming anything."""
    with Store.open(db_file) as store:
        build(store, {"c1": 40})  # segments 0-9 and 10-19
    slow = SlowBatch(0)
    options = SummarizerOptions(timeout=10)
    with pytest.raises(ConfigError) as err:
        run_compaction(db_file, summarizer=slow, summarizer_options=options, lease_seconds=30)
    # A Python caller reads its keyword arguments (the command, its flags: test_cli_compact).
    assert str(err.value) == (
        "lease_seconds=30 cannot cover the 3 summariser calls made under one claim (up to "
        "timeout=10 s each) and 5 s to store their outcomes"
    )
    assert err.value.hint.startswith("pass lease_seconds=35 or more, or timeout=8.33 or less;")
    assert slow.calls == 0
    with Store.open(db_file, read_only=True) as store:
        assert store.con.execute("SELECT count(*) FROM compactions").fetchone() == (0,)
    # by default the lease covers the batch's calls and a minute more (3 x 40 + 60 s, where
    # --timeout + 60 alone would be refused)
    options = SummarizerOptions(timeout=40)
    report = run_compaction(db_file, summarizer=slow, summarizer_options=options)
    assert report.completed == 2 and slow.calls == 2


def test_a_summary_is_bound_to_exactly_what_its_program_read(store, tmp_path):
    """DESIGN points 3 and 4 end to end, with a real `command:` program: what it read on
    stdin hashes to the stored input digest, holds exactly the 10 answers of the bound ids
    and no user text, and those answers with the stored user texts give the source digest."""
    import hashlib
    import re
    import struct
    import sys

    from lexkeep.compaction.summarizers import SummarizerOptions, create

    build(store, {"c1": 41})  # two segments
    seen = tmp_path / "seen"
    seen.mkdir()
    script = tmp_path / "keep_stdin.py"
    script.write_text(
        "import os, sys\n"
        "data = sys.stdin.buffer.read()\n"
        f"n = len(os.listdir({str(seen)!r}))\n"
        f"open(os.path.join({str(seen)!r}, str(n)), 'wb').write(data)\n"
        "print('summary', n)\n",
        encoding="utf-8",
    )
    spec = f'command:"{sys.executable} {script}"'
    report = run_compaction(store, summarizer=create(spec, SummarizerOptions(timeout=30)))
    assert report.completed == 2, report.segments
    read = {
        hashlib.sha256(p.read_bytes()).hexdigest(): p.read_bytes().decode("utf-8")
        for p in seen.iterdir()
    }
    rows = store.con.execute(
        "SELECT source_message_ids, source_digest, input_sha256, summary FROM compactions"
    ).fetchall()
    texts = dict(store.con.execute("SELECT id, text FROM messages").fetchall())
    user_texts = {
        r[0] for r in store.con.execute("SELECT text FROM messages WHERE role = 'user'").fetchall()
    }
    assert len(rows) == 2
    for ids, digest, input_sha, summary in rows:
        stdin = read[input_sha]  # the stored input digest is that of the bytes it read
        assert summary.startswith("summary ")
        assert not any(t in stdin for t in user_texts)
        parts = re.split(r"(?m)^=== assistant message (\S+) ===\n", stdin)
        answers = list(zip(parts[1::2], parts[2::2], strict=True))
        assert [a for a, _ in answers] == list(ids[1::2])  # the bound assistant ids, in order
        encoding = b"lexkeep-compaction-source/1\n" + struct.pack(">I", 10)
        for (aid, shown), uid in zip(answers, ids[0::2], strict=True):
            # each answer as stored, then the blank line between answers (or the final one)
            assert shown.removesuffix("\n").removesuffix("\n") == texts[aid]
            for field in (uid, texts[uid], aid, shown.removesuffix("\n").removesuffix("\n")):
                raw = field.encode("utf-8")
                encoding += struct.pack(">Q", len(raw)) + raw
        assert hashlib.sha256(encoding).hexdigest() == digest


class Extending(Summarizer):
    """Writes every identifier of the answers with one more digit: altered, not kept."""

    name = "extending"
    model_id = "test/extending"

    def summarize(self, request: SummaryRequest) -> Generation:
        values = [
            a.text[i.start : i.end] for a in request.answers for i in a.identifiers().identifiers
        ]
        # the first one verbatim between brackets (kept), every other one extended by a digit
        return Generation(f"({values[0]}) " + " ".join(v + "9" for v in values[1:]))


def test_the_kept_verbatim_share_counts_an_extended_identifier_as_altered(store):
    """The report counted `ORD_88401` as kept in a summary that says `ORD_884019`: a plain
    substring test, where the audit's rule wants no letter or digit right before or after."""
    build(store, {"c1": 30})
    report = run_compaction(store, summarizer=Extending())
    assert report.completed == 1
    assert report.identifiers_total > 2
    assert report.identifiers_kept == 1  # only the bracketed one
    row = store.con.execute(
        "SELECT identifiers_total, identifiers_kept FROM compactions"
    ).fetchone()
    assert row == (report.identifiers_total, 1)


class Failing(Summarizer):
    """Fails every call: with an error of its own per call, or with the same one each time."""

    name = "failing"
    model_id = "test/failing"

    def __init__(self, same: bool) -> None:
        self.same = same
        self.calls = 0

    def summarize(self, request: SummaryRequest) -> Generation:
        self.calls += 1
        return Generation("", "error", error="no key" if self.same else f"call {self.calls}")


@pytest.mark.parametrize("workers", [1, 2])
def test_a_misconfigured_second_attempt_leaves_the_first_attempts_as_they_were(db_file, workers):
    """The same failure on a run's first calls gives back every attempt it made, second
    attempts too: they are `failed` again with one attempt and their first error, not
    exhausted."""
    from lexkeep.compaction.engine import CompactionStopped
    from lexkeep.core.errors import SummarizerMisconfiguredError

    with Store.open(db_file) as store:
        build(store, {"c1": 60})  # four segments
    first = run_compaction(db_file, summarizer=Failing(same=False))
    assert (first.claimed, first.failed) == (4, 4)
    query = "SELECT id, status, attempts, last_error, lease_owner FROM compactions ORDER BY id"
    with Store.open(db_file, read_only=True) as store:
        before = store.con.execute(query).fetchall()
        attempts_before = store.con.execute(
            "SELECT * FROM compaction_attempts ORDER BY job_id, attempt"
        ).fetchall()
    assert {r[1:3] for r in before} == {("failed", 1)}
    same = Failing(same=True)
    with pytest.raises(CompactionStopped) as stop:
        run_compaction(db_file, summarizer=same, workers=workers)
    assert stop.value.misconfigured and isinstance(
        stop.value.__cause__, SummarizerMisconfiguredError
    )
    assert str(stop.value) == (
        "the summariser failed the same way on its first 3 calls, before any succeeded:"
        " error: no key"
    )
    report = stop.value.report
    assert (report.claimed, report.completed, report.failed, report.remaining) == (0, 0, 0, 4)
    assert report.segments == []
    assert 3 <= same.calls <= 3 + workers - 1
    with Store.open(db_file, read_only=True) as store:
        assert store.con.execute(query).fetchall() == before
        attempts_after = store.con.execute(
            "SELECT * FROM compaction_attempts ORDER BY job_id, attempt"
        ).fetchall()
    assert attempts_after == attempts_before


class Cancellable(Summarizer):
    """A plugin with `cancel()` and `resume()`: once cancelled, each call ends `cancelled`
    (nothing generated) until it is resumed. It claims `batch_size` segments at a time."""

    name = "cancellable"
    model_id = "test/cancellable"

    def __init__(self, batch_size: int = 1) -> None:
        self.batch_size = batch_size
        self.cancelled = False
        self.calls = 0

    def summarize(self, request: SummaryRequest) -> Generation:
        self.calls += 1
        if self.cancelled:
            return Generation("", "cancelled", error="cancelled by its caller")
        return Generation("Summary: ORD_88400.")

    def cancel(self) -> None:
        self.cancelled = True

    def resume(self) -> None:
        self.cancelled = False


@pytest.mark.parametrize("batch_size", [1, 3])
def test_a_summariser_its_caller_cancelled_stops_the_run_at_its_first_call(db_file, batch_size):
    """A summariser its caller had cancelled (and not resumed) made a run record every
    segment as a failed attempt (`cancelled: …`), one call after the other. The run stops at
    the first call instead, gives the claims back (the whole batch's) and the caller learns why;
    nothing is recorded. Resumed, the summariser compacts everything."""
    from lexkeep.compaction.engine import CompactionCancelled

    with Store.open(db_file) as store:
        build(store, {"c1": 60})  # four segments
    summarizer = Cancellable(batch_size)
    summarizer.cancel()
    with pytest.raises(CompactionCancelled) as stop:
        run_compaction(db_file, summarizer=summarizer)
    assert summarizer.calls == 1
    assert "cancel" in str(stop.value) and "resume()" in (stop.value.hint or "")
    report = stop.value.report
    assert (report.planned, report.claimed, report.failed, report.remaining) == (4, 0, 0, 4)
    with Store.open(db_file, read_only=True) as store:
        assert store.con.execute("SELECT count(*) FROM compactions").fetchone() == (0,)
        assert store.con.execute("SELECT count(*) FROM compaction_attempts").fetchone() == (0,)
    assert summarizer.cancelled  # the caller's cancel stands until the caller resumes it
    summarizer.resume()
    again = run_compaction(db_file, summarizer=summarizer)
    assert (again.completed, again.failed) == (4, 0)
    assert {s.attempt for s in again.segments} == {1}


def crash_on_write(monkeypatch, after: int) -> None:
    """Injected fault: storing outcomes crashes from the write after the first `after`."""
    real = jobs.complete_many
    calls = []

    def complete_many(con, items, **kwargs):
        calls.append(len(items))
        if len(calls) > after:
            raise RuntimeError("the write crashed")
        return real(con, items, **kwargs)

    monkeypatch.setattr(jobs, "complete_many", complete_many)


@pytest.mark.parametrize("workers", [1, 2])
def test_an_error_mid_run_keeps_the_counts_and_gives_the_claims_back(db_file, monkeypatch, workers):
    """An error that was neither Ctrl-C, an unreachable backend nor a held store (here a
    crash storing a summary) left the run's report behind, and the claim of the segment it
    was storing `running` until its lease expired, when it counted as a failed attempt."""
    from lexkeep.compaction.engine import CompactionFailed

    with Store.open(db_file) as store:
        build(store, {f"c{i}": 30 for i in range(6)})  # six segments
    crash_on_write(monkeypatch, 2)
    with pytest.raises(CompactionFailed) as stop:
        run_compaction(db_file, summarizer=Recording(), workers=workers)
    assert str(stop.value) == "internal error: RuntimeError: the write crashed"
    assert isinstance(stop.value.cause, RuntimeError)
    assert stop.value.__cause__ is stop.value.cause
    report = stop.value.report
    assert (report.completed, report.failed, report.claims_held) == (2, 0, 0), report.segments
    assert report.claimed == 2 and report.remaining == 4
    with Store.open(db_file, read_only=True) as store:
        rows = store.con.execute("SELECT status, attempts FROM compactions").fetchall()
    assert rows == [("completed", 1), ("completed", 1)]  # no claim left running


def test_an_error_before_anything_is_planned_is_raised_as_it_is(db_file):
    """Only a run under way wraps its error with the counts: an unknown conversation is the
    NotFoundError it always was."""
    from lexkeep.compaction.engine import CompactionFailed

    with Store.open(db_file) as store:
        build(store, {"c1": 30})
    with pytest.raises(NotFoundError) as err:
        run_compaction(db_file, conversation_ids=["nope"])
    assert not isinstance(err.value, CompactionFailed)


def test_a_store_path_where_there_is_no_store_is_refused_and_nothing_created(tmp_path):
    """A batch script's mistyped path was compacted as a new, empty store: the run reported
    0 conversations and left an empty `typo.duckdb` behind. It is the error `lexkeep compact`
    gives, and the folder stays as it was."""
    from lexkeep.core.errors import StoreError

    target = tmp_path / "typo.duckdb"
    for dry_run in (False, True):
        with pytest.raises(StoreError, match="no lexkeep store at .*typo.duckdb") as err:
            run_compaction(target, dry_run=dry_run)
        assert "ingest_paths" in err.value.hint
        assert list(tmp_path.iterdir()) == []


def test_one_conversation_id_alone_is_that_conversation(db_file):
    """`run_compaction(db, conversation_ids="c1")` read the id letter by letter and failed with
    `no conversation c, 1 in the store`; one id alone is a list of one."""
    with Store.open(db_file) as store:
        build(store, {"c1": 30, "c2": 30})
    report = run_compaction(db_file, conversation_ids="c1")
    assert (report.conversations, report.completed) == (1, 1)
    assert {s.conversation_id for s in report.segments} == {"c1"}
