"""`lexkeep compact`: plan → claim → summarise → check the generation contract → complete/fail.

Reads pairs for many conversations at once, skips ranges already completed or exhausted before
claiming (one query per batch), then runs the claims through `--workers` in-process slots, each
slot with its own DuckDB connection (a cursor of the store's database). Each segment is claimed
at most once per run; a failed attempt is retried by a later run, up to 2 attempts in all.

Given a store path, a run opens the store only to read, claim and write: while a summariser
that waits (a model, a program) works, the file is closed, and `lexkeep context`, `ingest` or
another `compact` process can use it (claims and leases keep their work apart).
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import gc
import math
import os
import queue
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field

from lexkeep.compaction import jobs
from lexkeep.compaction.binding import JobIdentity, identity
from lexkeep.compaction.pairs import (
    Pair,
    eligible_pair_counts,
    eligible_pairs_many,
    source_states,
)
from lexkeep.compaction.planning import plan_segments, segment_count
from lexkeep.compaction.summarizers import (
    _CANCELLED,
    AssistantAnswer,
    ExtractiveSummarizer,
    Summarizer,
    SummarizerOptions,
    SummaryRequest,
    check_generation,
    create,
    prompt_text,
)
from lexkeep.core.errors import (
    BackendUnreachableError,
    ConfigError,
    LexkeepError,
    RuleError,
    StoreLockedError,
    SummarizerMisconfiguredError,
    is_query_interrupt,
    storage_error,
    unnamed_write_error,
)
from lexkeep.core.inspect import require_conversations
from lexkeep.core.model import Extraction
from lexkeep.core.nearmiss import is_kept
from lexkeep.core.store import Store, StoreOnDemand, migrations, no_store_yet, store_exists

BATCH_CONVERSATIONS = 500
# What a lease must hold beyond the summariser calls made under it: reopening the store and
# writing the outcome. A summary that arrives after its lease is refused (the attempt is spent).
LEASE_WRITE_SECONDS = 5.0
# The default lease: the calls made under one claim and a minute more (--timeout + 60 s for a
# backend that claims one segment at a time).
LEASE_SPARE_SECONDS = 60.0


# A run whose summariser fails the same way on this many first calls, before any succeeds, is
# misconfigured (a wrong model name, a missing key): it stops and gives those attempts back,
# instead of spending an attempt of every range on a setting.
SAME_FAILURE_LIMIT = 3


class _FirstCalls:
    """Judges a run's first calls: the same failure SAME_FAILURE_LIMIT times before any
    success trips it; a success or a different failure closes it for the rest of the run.

    Shared by the worker slots. While it is undecided, a slot sorts and writes its outcomes
    holding `lock`, so the failures it would give back are all written when it trips.
    """

    def __init__(self, limit: int = SAME_FAILURE_LIMIT, *, judge: bool = True) -> None:
        self.limit = limit
        self.lock = threading.Lock()
        self.closed = not judge
        self.tripped: SummarizerMisconfiguredError | None = None
        self.problem: str | None = None
        self.recorded: list[tuple[jobs.Claim, SegmentOutcome]] = []  # written as failed

    def sort(
        self, succeeded: bool, failed: list[tuple[jobs.Claim, str, SegmentOutcome]]
    ) -> SummarizerMisconfiguredError | None:
        """Judge one batch's outcomes (the caller holds `lock`); the error when the run must
        stop now, or None. Once tripped, every later failure is given back too."""
        if self.closed or self.tripped is not None:
            return None
        if succeeded:
            self.closed = True
            return None
        for _, problem, _ in failed:
            if self.problem is None:
                self.problem = problem
            if problem != self.problem:
                self.closed = True
                return None
        if len(self.recorded) + len(failed) >= self.limit:
            self.tripped = SummarizerMisconfiguredError(
                f"the summariser failed the same way on its first {self.limit} calls, before"
                f" any succeeded: {self.problem}",
                hint="check its settings (the summarizer, its model, base_url, a key it needs);"
                " nothing was counted as an attempt",
                wording="compact.misconfigured",
            )
            return self.tripped
        return None

    @property
    def undecided(self) -> bool:
        """True while failures may still be given back (before a success or a different one)."""
        return not self.closed


def _lease_seconds(
    lease_seconds: float | None, summarizer: Summarizer, timeout: float | None
) -> float:
    """The lease for each claim: `lease_seconds`, checked to cover the calls made under one
    claim (`batch_size` calls of up to `timeout` each) and the write, or by default those calls
    and LEASE_SPARE_SECONDS. A backend that answers at once (`quick`) or whose timeout is not
    known takes any lease."""
    batch = max(1, getattr(summarizer, "batch_size", 1))
    if timeout is None or summarizer.quick:
        return jobs.DEFAULT_LEASE_SECONDS if lease_seconds is None else lease_seconds
    if lease_seconds is None:
        return batch * timeout + LEASE_SPARE_SECONDS
    if lease_seconds >= batch * timeout + LEASE_WRITE_SECONDS:
        return lease_seconds
    write = f"{LEASE_WRITE_SECONDS:g} s to store"
    least = batch * timeout + LEASE_WRITE_SECONDS
    longest = int((lease_seconds - LEASE_WRITE_SECONDS) / batch * 100) / 100  # rounded down
    refused = "; a summary that arrives after its lease is refused and spends an attempt"

    def said(lease: str, timeout_is: str, shorter: str) -> tuple[str, str]:
        """The message and hint, naming the lease and the timeout as `lease` / `timeout_is`,
        and a shorter timeout as `shorter` (the keyword arguments, or the command's flags:
        cli/wording.py)."""
        if batch == 1:
            what = f"a summariser call of up to {timeout_is}{timeout:g} s and {write} its outcome"
        else:
            what = (
                f"the {batch} summariser calls made under one claim (up to {timeout_is}"
                f"{timeout:g} s each) and {write} their outcomes"
            )
        hint = f"pass {lease}{least:g} or more"
        if longest >= 0.1:  # the timeout's smallest value
            hint += shorter.format(longest=f"{longest:g}")
        return f"{lease}{lease_seconds:g} cannot cover {what}", hint + refused

    message, hint = said("lease_seconds=", "timeout=", ", or timeout={longest} or less")
    cli_message, cli_hint = said(
        "--lease-seconds ", "--timeout ", ", or a --timeout of at most {longest}"
    )
    raise ConfigError(
        message,
        hint=hint,
        wording="compact.lease_too_short",
        fields={"message": cli_message, "hint": cli_hint},
    )


@dataclass(frozen=True, slots=True)
class SegmentOutcome:
    """What happened to one planned segment in this run."""

    conversation_id: str
    from_pair: int
    to_pair: int
    outcome: str  # planned | completed | failed | skipped
    job_id: str | None = None
    attempt: int | None = None
    detail: str = ""
    identifiers_total: int = 0
    identifiers_kept: int = 0


@dataclass
class CompactionReport:
    """Counts and per-segment outcomes of one `compact` run."""

    dry_run: bool = False
    conversations: int = 0
    planned: int = 0
    claimed: int = 0
    completed: int = 0
    failed: int = 0
    skipped: int = 0
    skipped_reasons: Counter[str] = field(default_factory=Counter)
    identifiers_total: int = 0
    identifiers_kept: int = 0
    seconds: float = 0.0
    segments: list[SegmentOutcome] = field(default_factory=list)
    # A dry run leaves an old store as it is: the migrations a real run would apply first.
    pending_migrations: int = 0
    schema: tuple[int, int] | None = None  # (the store's schema, the current one), dry runs

    @property
    def remaining(self) -> int:
        """Planned segments this run neither completed, failed nor skipped (a later run's)."""
        return self.planned - self.completed - self.failed - self.skipped

    @property
    def claims_held(self) -> int:
        """Claims this run made and still holds: neither completed, failed nor given back (0
        after a run that went to its end). A run that stopped holds one when it could not write
        to the store to give it back: it stays claimed until its lease expires, then counts as
        a failed attempt."""
        return self.claimed - self.completed - self.failed

    @property
    def identifier_share(self) -> float | None:
        """Share of the summarised answers' identifiers found verbatim in their summaries."""
        if self.identifiers_total == 0:
            return None
        return self.identifiers_kept / self.identifiers_total


class CompactionInterrupted(KeyboardInterrupt):
    """Ctrl-C stopped a run; `report` holds what finished before it.

    A KeyboardInterrupt, so code that stops on Ctrl-C still does. The report counts the
    segments planned, claimed, completed, failed and skipped until then; a claim given back
    because of the interruption (its call abandoned, no attempt counted) is not in
    `report.claimed`, and `report.remaining` counts it with the segments never claimed.
    """

    def __init__(self, report: CompactionReport) -> None:
        super().__init__("the run was interrupted")
        self.report = report


class CompactionStopped(BackendUnreachableError):
    """The summariser could not be reached mid-run, or failed the same way on the run's first
    calls (`misconfigured`); `report` holds what finished before it.

    A `BackendUnreachableError` with the same message and hint as the backend's, so code that
    handles that error still does. The claims of the call that could not be made, and of the
    segments claimed with it, were given back without counting an attempt: they are not in
    `report.claimed`, and `report.remaining` counts them with the segments never claimed.
    """

    def __init__(self, report: CompactionReport, cause: BackendUnreachableError) -> None:
        super().__init__(
            cause.message,
            path=cause.path,
            line=cause.line,
            col=cause.col,
            hint=cause.hint,
            wording=cause.wording,
            fields=cause.fields,
        )
        self.report = report
        # The summariser was reached but failed the same way on the run's first calls.
        self.misconfigured = isinstance(cause, SummarizerMisconfiguredError)


class CompactionStoreHeld(StoreLockedError):
    """Another process held the store until a claim's lease expired, so what the summariser
    returned for it could not be stored and the run stopped; `report` holds what was stored
    before. A `StoreLockedError`, so code that handles that error still does."""

    def __init__(self, message: str, *, hint: str, wording: str | None = None) -> None:
        super().__init__(message, hint=hint, wording=wording)
        self.report = CompactionReport()


class CompactionFailed(LexkeepError):
    """An error stopped a run mid-way: a store that could not be written (a full disk, a
    read-only folder), a row another program changed, a crash; `report` holds what finished
    before it, `cause` the error itself.

    Its message and hint are the cause's (a crash: `internal error: TYPE: message`). The
    claims of the segments in progress were given back without counting an attempt when the
    store could still be written (`report.claims_held` counts those that could not be).
    Errors before anything was planned (an unknown conversation, a store that cannot be
    opened) are raised as they are.
    """

    def __init__(self, report: CompactionReport, cause: Exception) -> None:
        # As the command line tells the cause (cli.common.handle_errors), so that its JSON
        # `"error"` and its `Error:` line are one text.
        known = (
            cause
            if isinstance(cause, LexkeepError)
            else unnamed_write_error(cause) or storage_error(cause)
        )
        if known is None:
            super().__init__(f"internal error: {type(cause).__name__}: {cause}")
        else:
            super().__init__(
                known.message, path=known.path, line=known.line, col=known.col, hint=known.hint
            )
        self.report = report
        self.cause = cause


class CompactionCancelled(LexkeepError):
    """The summariser's own `cancel()` stopped the run: its caller cancelled it (from another
    thread) while the run was under way, or before it and did not `resume()` it. A call it
    cancelled generated nothing, so, as after Ctrl-C, its claim and those claimed with it were
    given back without counting an attempt, and the run claimed nothing more; `report` holds
    what finished before (`report.remaining` counts the segments left for a later run).
    The summariser stays cancelled until its caller calls `resume()`."""

    def __init__(self) -> None:
        super().__init__(
            "the summariser was cancelled (its cancel() was called), so the run stopped",
            hint="nothing was counted as an attempt for the calls it cancelled; call the"
            " summariser's resume() before a later run uses it",
        )
        self.report = CompactionReport()


@dataclass(frozen=True, slots=True)
class _Task:
    ident: JobIdentity
    key: str  # ident.key(), computed once
    pairs: tuple[Pair, ...]
    state: str | None = None  # the source state read with `pairs` (pairs.source_states)

    def outcome(
        self, outcome: str, job_id: str | None, attempt: int | None, detail: str
    ) -> SegmentOutcome:
        """What happened to this task's segment, without identifier counts."""
        i = self.ident
        return SegmentOutcome(
            i.conversation_id, i.from_pair, i.to_pair, outcome, job_id, attempt, detail
        )


def run_compaction(
    store: Store | str | os.PathLike[str],
    *,
    conversation_ids: Sequence[str] | str | None = None,
    summarizer: Summarizer | str | None = None,
    summarizer_options: SummarizerOptions | None = None,
    workers: int = 1,
    max_running: int | None = None,
    dry_run: bool = False,
    lease_seconds: float | None = None,
    admission_wait: float | None = None,
    on_planned: Callable[[int], None] | None = None,
    on_progress: Callable[[SegmentOutcome], None] | None = None,
) -> CompactionReport:
    """Compact every candidate segment of the given (default: all) conversations
    (`conversation_ids`: a sequence of ids, or one id alone).

    `store` is an open `Store`, used throughout, or the path of one: then the store is open
    only while the run reads, claims and writes, and closed while a summariser that is not
    `quick` works, so other processes can use it meanwhile; each reopening waits up to
    `lease_seconds` for them (the first one $LEXKEEP_LOCK_WAIT seconds).
    Each claim's lease (`lease_seconds`) must cover the summariser calls made under it, each
    up to `summarizer_options.timeout`, and LEASE_WRITE_SECONDS to store their outcomes (else
    ConfigError, before anything is claimed); by default it is those calls and
    LEASE_SPARE_SECONDS more (jobs.DEFAULT_LEASE_SECONDS when the timeout is not known: a
    summariser object given without options, or one that answers at once).
    Conversations are planned and compacted BATCH_CONVERSATIONS at a time; the later batches'
    segments are counted before the first is worked on, so `report.planned` is every segment
    of the run, however it ends. `on_planned` gets that number once the first batch is planned
    and after each later one (it changes when a batch's conversations changed meanwhile).
    A summariser whose `cancel()` its caller called stops the run (CompactionCancelled).
    A path where there is no store raises StoreError (`no lexkeep store at PATH`) and creates
    nothing: a mistyped path is not a new, empty store with nothing to compact.
    """
    if not isinstance(store, Store) and not store_exists(str(store), read_only=dry_run):
        raise no_store_yet(f"no lexkeep store at {store}", str(store))
    if isinstance(store, Store) and not dry_run:
        store.require_writable("run_compaction")
    if isinstance(conversation_ids, str):
        conversation_ids = [conversation_ids]  # one id, not its letters
    if workers < 1:
        raise ConfigError(
            f"workers must be at least 1, got {workers}",
            wording="compact.at_least_one",
            fields={"flag": "--workers", "value": workers},
        )
    if max_running is not None and max_running < 1:
        raise ConfigError(
            f"max_running must be at least 1, got {max_running}",
            wording="compact.at_least_one",
            fields={"flag": "--max-running", "value": max_running},
        )
    if summarizer is None:
        summarizer = ExtractiveSummarizer()
    elif isinstance(summarizer, str):
        if summarizer_options is None:
            summarizer_options = SummarizerOptions()  # what create() gives it
        summarizer = create(summarizer, summarizer_options)
    timeout = None if summarizer_options is None else summarizer_options.timeout
    lease_seconds = _lease_seconds(lease_seconds, summarizer, timeout)
    started = time.perf_counter()
    if isinstance(store, Store):
        access: Store | StoreOnDemand = store
    else:
        # A dry run writes nothing: it reads the store as it is, even one a real run would
        # migrate first (before migration 002 it has no jobs, so none is known).
        access = StoreOnDemand(
            store,
            hold=dry_run or summarizer.quick,
            wait=lease_seconds,
            read_only=dry_run,
            readable_from=1,
        )
    report = CompactionReport(dry_run=dry_run)
    # extractive fails only for reasons of the range itself (too many identifiers to fit)
    first_calls = _FirstCalls(judge=not summarizer.quick)
    under_way = False  # past the first reading: an error then stops a run that did work
    try:
        with _use(access) as con:
            if dry_run:
                have, current = _schema_version(con), len(migrations())
                report.schema = (have, current)
                report.pending_migrations = max(current - have, 0)
            ids = _conversations(con, conversation_ids)
            if not dry_run:
                jobs.expire_leases(con)
            # Planned and worked on one batch of conversations at a time, so memory holds one
            # batch's pairs, not the whole store's. The later batches' segments are counted
            # now, before any is worked on, so that a run that stops early (Ctrl-C, an error)
            # still reports every segment it planned, and `remaining` all it left.
            batches = [
                ids[i : i + BATCH_CONVERSATIONS] for i in range(0, len(ids), BATCH_CONVERSATIONS)
            ]
            counted = [_count_segments(con, b) if i else 0 for i, b in enumerate(batches)]
        report.conversations = len(ids)
        report.planned = sum(counted)
        under_way = True
        instructions = prompt_text(jobs.PROMPT_VERSION)
        prompt_sha = _sha(instructions)

        for batch, estimate in zip(batches, counted, strict=True):
            planned = 0
            tasks: list[_Task] = []
            # One read transaction: the source states taken below describe the very pairs
            # the identities are bound to, even when another process writes meanwhile.
            with _use(access) as con, jobs.transaction(con):
                by_conv = eligible_pairs_many(con, batch)
                has_jobs = report.schema is None or report.schema[0] >= _JOBS_FROM
                known = _known_jobs(con, batch) if has_jobs else {}
                for cid in batch:
                    pairs = by_conv[cid]
                    for from_pair, to_pair in plan_segments(len(pairs)):
                        seg = pairs[from_pair : to_pair + 1]
                        ident = identity(
                            cid,
                            from_pair,
                            to_pair,
                            seg,
                            model_id=summarizer.model_id,
                            prompt_version=jobs.PROMPT_VERSION,
                        )
                        planned += 1
                        key = ident.key()
                        reason = _already(known.get((cid, from_pair), ()), ident, key)
                        if reason:
                            _skip(report, ident, key, reason, on_progress)
                        elif dry_run:
                            out = SegmentOutcome(cid, from_pair, to_pair, "planned", key)
                            report.segments.append(out)
                            if on_progress:
                                on_progress(out)
                        else:
                            tasks.append(_Task(ident, key, tuple(seg)))
                if tasks:
                    states = source_states(
                        con,
                        [(t.ident.conversation_id, t.ident.source_message_ids[18]) for t in tasks],
                    )
                    for i, state in enumerate(states):
                        tasks[i] = dataclasses.replace(tasks[i], state=state)
            # What was counted of this batch is now what was planned of it (they differ
            # when its conversations changed meanwhile, e.g. an ingest added turns).
            report.planned += planned - estimate
            if on_planned:
                on_planned(report.planned)
            if tasks:
                with _planned_objects_frozen():
                    _run_tasks(
                        access,
                        tasks,
                        summarizer,
                        instructions,
                        prompt_sha,
                        workers,
                        max_running,
                        lease_seconds,
                        admission_wait,
                        report,
                        on_progress,
                        first_calls,
                    )
        report.seconds = time.perf_counter() - started
        return report
    except BackendUnreachableError as exc:
        if isinstance(exc, CompactionStopped):
            raise
        report.seconds = time.perf_counter() - started
        raise CompactionStopped(report, exc) from exc
    except (CompactionStoreHeld, CompactionCancelled) as exc:
        report.seconds = time.perf_counter() - started
        exc.report = report
        raise
    except Exception as exc:
        if is_query_interrupt(exc):
            report.seconds = time.perf_counter() - started
            raise CompactionInterrupted(report) from exc
        if not under_way or isinstance(exc, CompactionFailed):
            raise
        # What finished before is in the store: the caller says so before the error.
        report.seconds = time.perf_counter() - started
        raise CompactionFailed(report, exc) from exc
    except BaseException as exc:
        if not _is_interrupt(exc) or isinstance(exc, CompactionInterrupted):
            raise
        report.seconds = time.perf_counter() - started
        raise CompactionInterrupted(report) from exc
    finally:
        if isinstance(access, StoreOnDemand):
            access.close()


def _count_segments(con, batch: Sequence[str]) -> int:
    """How many candidate segments the conversations of `batch` have now (their pairs
    counted in SQL, not read: the batch is planned from its pairs when its turn comes)."""
    return sum(segment_count(n) for n in eligible_pair_counts(con, batch).values())


@contextlib.contextmanager
def _use(
    access: Store | StoreOnDemand, wait: float | None = None, *, despite_interrupt: bool = False
) -> Iterator:
    """A cursor for one step: of the caller's open store, or of `access` (open for the step,
    waiting up to `wait` seconds for another process, when given, and after Ctrl-C too with
    `despite_interrupt`)."""
    if isinstance(access, StoreOnDemand):
        with access.use(wait, despite_interrupt=despite_interrupt) as cursor:
            yield cursor
        return
    cursor = access.con.cursor()
    try:
        yield cursor
    finally:
        cursor.close()


@contextlib.contextmanager
def _planned_objects_frozen() -> Iterator[None]:
    """Keep the planned pairs out of the cyclic GC's scans while the segments are worked on.

    They stay alive to the end of the run, and every full collection would walk them again
    (~15% of compact's CPU on 2,000 conversations). When the host froze objects itself (the
    CLI freezes what its imports made), they are frozen too but never thawed: unfreezing
    would thaw the host's as well. Pairs hold no cycles, so reference counting still frees
    them.
    """
    if gc.get_freeze_count():
        gc.freeze()
        yield
        return
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()


def _run_tasks(
    access: Store | StoreOnDemand,
    tasks: list[_Task],
    summarizer: Summarizer,
    instructions: str,
    prompt_sha: str,
    workers: int,
    max_running: int | None,
    lease_seconds: float,
    admission_wait: float | None,
    report: CompactionReport,
    on_progress: Callable[[SegmentOutcome], None] | None,
    first_calls: _FirstCalls,
) -> None:
    """Claim, summarise and finish `tasks` through `workers` in-process slots."""
    work: queue.Queue[_Task] = queue.Queue()
    for task in tasks:
        work.put(task)
    lock = threading.Lock()
    errors: list[BaseException] = []
    stopping = threading.Event()  # the run was interrupted: claim nothing more
    wait_limit = lease_seconds if admission_wait is None else admission_wait
    batch_size = max(1, getattr(summarizer, "batch_size", 1))

    def record(out: SegmentOutcome) -> None:
        with lock:
            report.segments.append(out)
            if out.outcome == "skipped":
                report.skipped += 1
                report.skipped_reasons[out.detail.split(":")[0]] += 1
            elif out.outcome == "completed":
                report.completed += 1
                report.identifiers_total += out.identifiers_total
                report.identifiers_kept += out.identifiers_kept
            elif out.outcome == "failed":
                report.failed += 1
        if on_progress:
            on_progress(out)

    def worker(finished: threading.Event) -> None:
        owner = jobs.new_owner()
        try:
            while not stopping.is_set():
                batch = []
                while len(batch) < batch_size:
                    try:
                        batch.append(work.get_nowait())
                    except queue.Empty:
                        break
                if not batch:
                    return
                _run_batch(
                    access,
                    batch,
                    summarizer,
                    instructions,
                    prompt_sha,
                    owner,
                    lease_seconds,
                    max_running,
                    wait_limit,
                    report,
                    lock,
                    record,
                    stopping,
                    first_calls,
                )
        except BaseException as exc:  # surfaced to the caller after the other slots stop
            with lock:
                errors.append(exc)  # first: a slot stopped because of it fails after it
            stopping.set()  # the other slots claim nothing more either
            if workers > 1 and not isinstance(exc, CompactionCancelled):
                # The run has failed: the other slots' calls are stopped as Ctrl-C stops them
                # (their claims given back, no attempt counted) instead of being waited for,
                # up to --timeout each. Ctrl-C reaches a slot only when it is the only one.
                # (The caller who cancelled the summariser has stopped its calls already, and
                # resumes it when it sees fit.)
                stop_calls()
            # An unreachable or cancelled backend gave its claims back already; a store held
            # past a lease is not waited for again.
            if not isinstance(
                exc, (BackendUnreachableError, CompactionStoreHeld, CompactionCancelled)
            ):
                given_back = _give_back_claims(access, owner)
                if given_back:  # undone as if never made: the next run's to claim
                    with lock:
                        report.claimed -= given_back
        finally:
            finished.set()

    cancelled = False

    def stop_calls() -> None:
        """Stop the calls in progress and every wait for the store (the run is stopping)."""
        nonlocal cancelled
        if isinstance(access, StoreOnDemand):
            access.interrupt()  # a slot waiting for the file stops waiting
        cancel = getattr(summarizer, "cancel", None)
        if cancel is not None:
            with lock:
                cancelled = True
            cancel()

    if workers == 1:
        worker(threading.Event())  # one slot: no thread needed
    else:
        finished = [threading.Event() for _ in range(workers)]
        threads = [
            threading.Thread(target=worker, args=(done,), name=f"compact-{i}")
            for i, done in enumerate(finished)
        ]
        for t in threads:
            t.start()
        try:
            for t in threads:
                t.join()
        except BaseException:
            # Ctrl-C reaches this thread only; the slots would go on claiming. And CPython 3.11
            # can take a slot whose join() was interrupted for finished, so it would not wait
            # for it at exit, and that slot's summariser (a `command:` program runs in a
            # session of its own) would outlive the run. So: stop claiming, cancel the calls
            # in progress, wait for every slot (on events, not join()), then leave.
            stopping.set()
            stop_calls()
            for done in finished:
                done.wait()
            raise
        finally:
            # Every slot has stopped: a later run may use the same summariser again.
            if cancelled and all(done.is_set() for done in finished):
                resume = getattr(summarizer, "resume", None)
                if resume is not None:
                    resume()
    if errors:
        raise errors[0]


def _run_batch(
    access: Store | StoreOnDemand,
    batch: list[_Task],
    summarizer: Summarizer,
    instructions: str,
    prompt_sha: str,
    owner: str,
    lease_seconds: float,
    max_running: int | None,
    wait_limit: float,
    report: CompactionReport,
    lock: threading.Lock,
    record: Callable[[SegmentOutcome], None],
    stopping: threading.Event,
    first_calls: _FirstCalls,
) -> None:
    """Claim a batch in one transaction, summarise each granted segment, write outcomes."""
    deadline = time.monotonic() + wait_limit
    pause = 0.005
    pending = batch
    while pending and not stopping.is_set():  # no waiting for admission once interrupted
        with _use(access) as cursor:
            results = jobs.claim_many_with_retry(
                cursor,
                [t.ident for t in pending],
                owner=owner,
                lease_seconds=lease_seconds,
                max_running=max_running,
                prompt_sha256=prompt_sha,
            )
        granted: list[tuple[_Task, jobs.Claim]] = []
        waiting: list[_Task] = []
        for task, result in zip(pending, results, strict=True):
            if isinstance(result, jobs.Claim):
                granted.append((task, result))
            elif result.reason == "admission" and time.monotonic() < deadline:
                waiting.append(task)  # another slot will finish; the store counts who runs
            else:
                record(task.outcome("skipped", task.key, None, f"{result.reason}: {result.detail}"))
        if granted:
            with lock:
                report.claimed += len(granted)
            _summarise_granted(
                access,
                granted,
                summarizer,
                instructions,
                record,
                report,
                lock,
                stopping,
                first_calls,
            )
        pending = waiting
        if pending:
            time.sleep(pause)
            pause = min(pause * 2, 0.2)


def _summarise_granted(
    access: Store | StoreOnDemand,
    granted: list[tuple[_Task, jobs.Claim]],
    summarizer: Summarizer,
    instructions: str,
    record: Callable[[SegmentOutcome], None],
    report: CompactionReport,
    lock: threading.Lock,
    stopping: threading.Event,
    first_calls: _FirstCalls,
) -> None:
    done: list[tuple[jobs.Claim, jobs.Completion, SegmentOutcome]] = []
    failed: list[tuple[jobs.Claim, str, SegmentOutcome]] = []
    unreachable: BackendUnreachableError | None = None
    cancelled: CompactionCancelled | None = None
    given_back: list[jobs.Claim] = []  # claims of a backend that could not be reached
    for n, (task, c) in enumerate(granted):
        ident = task.ident
        cid, a, b = ident.conversation_id, ident.from_pair, ident.to_pair
        # Assistant answers only, each with its id: user text never reaches a summariser.
        answers = tuple(
            AssistantAnswer(p.assistant.id, p.assistant.text, _extract(p.assistant.text))
            for p in task.pairs
        )
        request = SummaryRequest(cid, a, b, answers, jobs.PROMPT_VERSION, instructions)
        try:
            gen = summarizer.summarize(request)
            if gen.finish_reason == _CANCELLED.finish_reason:
                # The summariser's cancel() stopped the call: nothing was generated, so the
                # claim and the rest are given back as they were. The run stops: it was
                # stopping already (Ctrl-C, an error in another slot), or the caller cancelled
                # the summariser, which means "stop" too, not a failed attempt per segment.
                given_back = [claim for _, claim in granted[n:]]
                if not stopping.is_set():
                    cancelled = CompactionCancelled()
                break
            problem = check_generation(gen)
        except BackendUnreachableError as exc:
            # Nothing was generated: not an attempt. Give this claim and the rest back, stop.
            unreachable = exc
            given_back = [claim for _, claim in granted[n:]]
            break
        except Exception as exc:  # a crashing backend is a failed attempt, never a crashed run
            gen, problem = None, f"summarizer crashed: {type(exc).__name__}: {exc}"
        if problem is None and gen is not None:
            values = {
                answer.text[i.start : i.end]
                for answer in answers
                if answer.extraction is not None
                for i in answer.extraction.identifiers
            }
            # Kept as the audit keeps: no letter or digit right before or after (an identifier
            # the summary extended, `ORD_88401` in `ORD_884019`, was altered, not kept).
            kept = sum(1 for v in values if v in gen.text and is_kept(v, gen.text))
            completion = jobs.Completion(
                summary=gen.text,
                input_sha256=request.input_sha256(),
                kept_verbatim=[p.user.text for p in task.pairs],
                identifiers_total=len(values),
                identifiers_kept=kept,
                source_state=task.state,
            )
            out = SegmentOutcome(cid, a, b, "completed", c.job_id, c.attempt, "", len(values), kept)
            done.append((c, completion, out))
        else:
            out = SegmentOutcome(cid, a, b, "failed", c.job_id, c.attempt, problem or "failed")
            failed.append((c, problem or "unknown failure", out))
    if not (done or failed or given_back):
        return
    # While the run's first calls are judged, sorting and writing are one step for all slots.
    judging = first_calls.undecided
    with first_calls.lock if judging else contextlib.nullcontext():
        restore: list[tuple[jobs.Claim, SegmentOutcome]] = []
        if judging and first_calls.tripped is None:
            tripped = first_calls.sort(bool(done), failed)
            if tripped is not None:  # misconfigured: no failure of it counts; stop the run
                unreachable = unreachable or tripped
                restore, first_calls.recorded = first_calls.recorded, []
        if judging and first_calls.tripped is not None:
            given_back += [c for c, _, _ in failed]
            failed = []
        # The summaries above ran with the store closed. Another process may hold it now: it
        # is waited for only while the leases last (an outcome stored later would be refused).
        held = [c for c, _, _ in done] + [c for c, _, _ in failed] + given_back
        first = min(held, key=lambda c: c.lease_expires_at)
        wait = max(0.0, math.floor((first.lease_expires_at - time.time()) * 10) / 10)
        stopped = False
        if stopping.is_set() and isinstance(access, StoreOnDemand):
            # Interrupted: the outcomes are still stored, but Ctrl-C waits no longer than this.
            stopped, wait = True, min(wait, access.lock_wait)
        try:
            with _use(access, wait, despite_interrupt=stopped) as cursor:
                completed = jobs.complete_many(cursor, [(c, g) for c, g, _ in done]) if done else []
                failures = jobs.fail_many(cursor, [(c, p) for c, p, _ in failed]) if failed else []
                released = jobs.release_many(cursor, given_back)
                restored = jobs.restore_failed(cursor, [c for c, _ in restore])
        except StoreLockedError as exc:
            summarised = any(c is first for c, _, _ in done)
            raise _lease_lost(exc, first, wait, summarised) from exc
        if released:  # undone as if never made: these segments are the next run's to claim
            with lock:
                report.claimed -= released
        if restored:  # failures recorded earlier, now undone: out of the counts too
            gone = {id(out) for _, out in restore}
            with lock:
                report.claimed -= restored
                report.failed -= restored
                report.segments[:] = [s for s in report.segments if id(s) not in gone]
        for (_, _, out), result in zip(done, completed, strict=True):
            if isinstance(result, RuleError):  # lease lost meanwhile: nothing was written
                out = dataclasses.replace(out, outcome="failed", detail=str(result))
            record(out)
        for (c, _, out), result in zip(failed, failures, strict=True):
            if isinstance(result, RuleError):
                out = dataclasses.replace(out, detail=f"{out.detail} ({result})")
            else:
                out = dataclasses.replace(out, detail=f"{result}: {out.detail}")
                if judging and first_calls.undecided:
                    first_calls.recorded.append((c, out))
            record(out)
    if unreachable is not None:
        raise unreachable
    if cancelled is not None:
        raise cancelled


def _lease_lost(
    exc: StoreLockedError, first: jobs.Claim, waited: float, summarised: bool
) -> CompactionStoreHeld:
    """The store stayed held by another process until a claim's lease expired: say so."""
    i = first.identity
    what = "the summary that arrived for it" if summarised else "its outcome"
    what += " was not stored"
    message = exc.message.partition("; waited ")[0]
    return CompactionStoreHeld(
        f"{message}; waited {waited:g} s, until the lease of {i.conversation_id} pairs"
        f" {i.from_pair}–{i.to_pair} expired: {what}",
        hint="nothing was written; a later run summarises the range again (this attempt"
        " counts as failed: lease expired); raise lease_seconds to wait longer for the store",
        wording="compact.store_held",
    )


def _is_interrupt(exc: BaseException) -> bool:
    """Ctrl-C: Python's KeyboardInterrupt, or DuckDB's answer to the signal inside a query."""
    return isinstance(exc, KeyboardInterrupt) or is_query_interrupt(exc)


def _give_back_claims(access: Store | StoreOnDemand, owner: str) -> int:
    """Give back the claims a stopped slot still holds, without counting an attempt (the
    calls were abandoned, or what they generated could not be stored), so the next run takes
    their ranges up at once with the attempts they had. Returns how many.

    Found by the slot's lease owner, so a claim whose transaction committed just as Ctrl-C
    arrived is found too. Best effort: a store another process holds now is waited for only
    $LEXKEEP_LOCK_WAIT seconds, and one that cannot be written is left as it is (then the
    leases expire as for a worker that died)."""
    given_back = 0
    if isinstance(access, StoreOnDemand):
        use = _use(access, access.lock_wait, despite_interrupt=True)
    else:
        use = _use(access)
    with contextlib.suppress(Exception), use as cursor:
        given_back = jobs.release_owned(cursor, owner)
    return given_back


@functools.lru_cache(maxsize=65536)
def _extract(text: str) -> Extraction:
    # Answers repeat across conversations (templated replies); Extraction is immutable.
    from lexkeep.core.identifiers import extract

    return extract(text)


def _skip(
    report: CompactionReport,
    ident: JobIdentity,
    key: str,
    reason: str,
    on_progress: Callable[[SegmentOutcome], None] | None,
) -> None:
    out = SegmentOutcome(
        ident.conversation_id, ident.from_pair, ident.to_pair, "skipped", key, None, reason
    )
    report.skipped += 1
    report.skipped_reasons[reason.split(":")[0]] += 1
    report.segments.append(out)
    if on_progress:
        on_progress(out)


def _already(rows: Sequence[tuple], ident: JobIdentity, key: str) -> str | None:
    """Why a segment needs no claim (completed or out of attempts), judged before claiming."""
    for job_id, status, digest, version, attempts in rows:
        if (
            status == "completed"
            and digest == ident.source_digest
            and (version in jobs.CONSUMABLE_VERSIONS)
        ):
            return f"completed: job {job_id[:12]} ({version})"
        if job_id == key and status == "exhausted":
            return f"exhausted: {attempts} failed attempts; the range stays raw"
    return None


def _known_jobs(con, conversation_ids: Sequence[str]) -> dict[tuple[str, int], list[tuple]]:
    rows = con.execute(
        "SELECT conversation_id, from_pair, id, status, source_digest, prompt_version, attempts "
        "FROM compactions WHERE conversation_id IN (SELECT unnest(?::VARCHAR[])) "
        "AND status IN ('completed', 'exhausted')",
        [list(conversation_ids)],
    ).fetchall()
    known: dict[tuple[str, int], list[tuple]] = {}
    for cid, from_pair, *rest in rows:
        known.setdefault((cid, from_pair), []).append(tuple(rest))
    return known


_JOBS_FROM = 2  # the migration that made the compactions table


def _schema_version(con) -> int:
    """The store's highest applied migration (outside a transaction)."""
    return con.execute("SELECT coalesce(max(version), 0) FROM schema_migrations").fetchone()[0]


def _conversations(con, wanted: Sequence[str] | None) -> list[str]:
    if not wanted:
        return [r[0] for r in con.execute("SELECT id FROM conversations ORDER BY id").fetchall()]
    return require_conversations(con, wanted)


def _sha(text: str) -> str:
    import hashlib

    return hashlib.sha256(text.encode("utf-8")).hexdigest()
