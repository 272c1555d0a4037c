"""Compaction jobs in the store: atomic claims, leases, bounded attempts, immutable completion.

Every write here is one DuckDB transaction on the caller's connection. A claim first bumps the
single `compaction_gate` row, so two concurrent claims conflict on it and the later one is told
it lost the race (DuckDB is optimistic: it raises a TransactionException rather than waiting);
the check of the range, the admission count and the insert therefore never read a stale
snapshot (seed 000 §5, DESIGN.md point 5).
"""

from __future__ import annotations

import contextlib
import hashlib
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, replace
from typing import TypeVar

import duckdb

from lexkeep.compaction.binding import JobIdentity, source_digest
from lexkeep.compaction.pairs import SOURCE_STATE_SQL, WANTED_ONLY, Pair, eligible_pairs_many
from lexkeep.compaction.planning import is_segment
from lexkeep.core.controls import describe, first_control
from lexkeep.core.errors import RuleError, storage_error
from lexkeep.core.inspect import require_conversations

PROMPT_VERSION = "conversation-compaction@3"  # every new job
CONSUMABLE_VERSIONS = ("conversation-compaction@3", "conversation-compaction@2")
# @1 summarised user and assistant text together: recognised, never consumed.
MIXED_INPUT_VERSIONS = ("conversation-compaction@1",)
MAX_ATTEMPTS = 2
MAX_SUMMARY_CHARS = 6000
DEFAULT_LEASE_SECONDS = 300.0

T = TypeVar("T")

# DuckDB reports write-write conflicts as TransactionException and a concurrent duplicate
# primary key as ConstraintException: both mean another claim got there first.
RACE_ERRORS: tuple[type[Exception], ...] = (
    duckdb.TransactionException,
    duckdb.ConstraintException,
)


def _lost_race(exc: BaseException) -> bool:
    """True when `exc` means another transaction got there first. A commit that could not be
    written (a full disk, a read-only folder) is a TransactionException too: trying again
    cannot help, and taking it for a race would skip the segment as if another worker had it."""
    return isinstance(exc, RACE_ERRORS) and storage_error(exc) is None


@dataclass(frozen=True, slots=True)
class Claim:
    """A won claim: this worker may summarise the job until `lease_expires_at`."""

    job_id: str
    identity: JobIdentity
    attempt: int
    lease_owner: str
    lease_expires_at: float


@dataclass(frozen=True, slots=True)
class Refusal:
    """A claim that was not granted, and why.

    reason: completed | running | exhausted | admission | race
    """

    reason: str
    detail: str = ""


@dataclass(frozen=True, slots=True)
class CompletedSummary:
    """A completed, consumable summary of one range."""

    job_id: str
    conversation_id: str
    from_pair: int
    to_pair: int
    text: str
    prompt_version: str
    model_id: str
    source_digest: str
    completed_at: float


@dataclass(frozen=True, slots=True)
class JobRow:
    """One row of `compactions`, as listed by `lexkeep compactions`."""

    id: str
    conversation_id: str
    scope: str
    from_pair: int
    to_pair: int
    source_digest: str
    model_id: str
    prompt_version: str
    status: str
    attempts: int
    lease_owner: str | None
    lease_expires_at: float | None
    summary_chars: int | None
    identifiers_total: int | None
    identifiers_kept: int | None
    last_error: str | None
    boundary_id: str | None
    created_at: float
    completed_at: float | None
    # A completed summary the next-run context does not use, and why (`summary_stale_reason`);
    # None when it is usable, or when the job is not completed.
    stale_reason: str | None = None

    @property
    def stale(self) -> bool | None:
        """For a completed job: True when the next-run context does not use its summary."""
        return None if self.status != "completed" else self.stale_reason is not None


def new_owner() -> str:
    """A fresh lease-owner token (one per worker slot)."""
    return uuid.uuid4().hex


@contextmanager
def transaction(con: duckdb.DuckDBPyConnection) -> Iterator[duckdb.DuckDBPyConnection]:
    """BEGIN … COMMIT on `con`; ROLLBACK on any exception (also a failed COMMIT)."""
    con.execute("BEGIN TRANSACTION")
    try:
        yield con
        con.execute("COMMIT")
    except BaseException:
        # a failed COMMIT has already ended the transaction
        with contextlib.suppress(duckdb.Error):
            con.execute("ROLLBACK")
        raise


def retry_on_race(fn: Callable[[], T], *, attempts: int = 50, pause: float = 0.002) -> T:
    """Run the transaction `fn` again when it loses a write-write race (bounded)."""
    for i in range(attempts):
        try:
            return fn()
        except RACE_ERRORS as exc:
            if i == attempts - 1 or not _lost_race(exc):
                raise
            time.sleep(pause * (1 + i % 8))
    raise AssertionError("unreachable")


# -- claims ---------------------------------------------------------------------------------


def _validate(ident: JobIdentity) -> None:
    ids = ident.source_message_ids
    where = f"conversation {ident.conversation_id} pairs {ident.from_pair}–{ident.to_pair}"
    if not is_segment(ident.from_pair, ident.to_pair) or len(ids) != 20:
        raise RuleError(f"{where}: not a whole 10-pair segment with 20 source ids")
    if len(set(ids)) != 20 or not all(ids):
        raise RuleError(f"{where}: the 20 source message ids are not complete and unique")


def claim(
    con: duckdb.DuckDBPyConnection,
    ident: JobIdentity,
    *,
    owner: str,
    now: float | None = None,
    lease_seconds: float = DEFAULT_LEASE_SECONDS,
    max_running: int | None = None,
    prompt_sha256: str | None = None,
) -> Claim | Refusal:
    """Atomically claim the job `ident` (one transaction); a lost race is Refusal('race')."""
    return claim_many(
        con,
        [ident],
        owner=owner,
        now=now,
        lease_seconds=lease_seconds,
        max_running=max_running,
        prompt_sha256=prompt_sha256,
    )[0]


def claim_many(
    con: duckdb.DuckDBPyConnection,
    idents: Sequence[JobIdentity],
    *,
    owner: str,
    now: float | None = None,
    lease_seconds: float = DEFAULT_LEASE_SECONDS,
    max_running: int | None = None,
    prompt_sha256: str | None = None,
) -> list[Claim | Refusal]:
    """Claim several jobs in ONE transaction (each judged as `claim` would); all or nothing.

    Batching exists for speed (one commit per batch); a lost race refuses the whole batch.
    """
    for ident in idents:
        _validate(ident)
    if not idents:
        return []
    at = time.time() if now is None else now
    try:
        with transaction(con):
            return _claim_in_transaction(
                con, idents, owner, at, lease_seconds, max_running, prompt_sha256
            )
    except RACE_ERRORS as exc:
        if not _lost_race(exc):
            raise
        return [Refusal("race", str(exc).splitlines()[0])] * len(idents)


def _claim_in_transaction(
    con: duckdb.DuckDBPyConnection,
    idents: Sequence[JobIdentity],
    owner: str,
    now: float,
    lease_seconds: float,
    max_running: int | None,
    prompt_sha256: str | None,
) -> list[Claim | Refusal]:
    # The gate row first: a concurrent claim now conflicts here instead of reading stale rows.
    con.execute("UPDATE compaction_gate SET claims = claims + 1 WHERE id = 1")
    rows = con.execute(
        "SELECT c.conversation_id, c.from_pair, c.id, c.status, c.attempts, "
        "c.lease_expires_at, c.prompt_version, c.source_digest "
        "FROM compactions c JOIN (SELECT unnest($cids) AS cid, unnest($froms) AS fp) r "
        "ON c.conversation_id = r.cid AND c.from_pair = r.fp",
        {
            "cids": [i.conversation_id for i in idents],
            "froms": [i.from_pair for i in idents],
        },
    ).fetchall()
    by_range: dict[tuple[str, int], list[tuple]] = {}
    for cid, from_pair, *rest in rows:
        by_range.setdefault((cid, from_pair), []).append(tuple(rest))
    running = None
    if max_running is not None:
        running = con.execute(
            "SELECT count(*) FROM compactions WHERE status = 'running' AND lease_expires_at >= ?",
            [now],
        ).fetchone()[0]
    expires = now + lease_seconds
    results: list[Claim | Refusal] = []
    new: list[tuple[str, JobIdentity]] = []
    again: list[tuple[str, int]] = []
    expired: list[tuple[str, int]] = []
    taken: set[tuple[str, int]] = set()
    for ident in idents:
        key = ident.key()
        verdict = _judge(
            ident, key, by_range.get((ident.conversation_id, ident.from_pair), ()), now
        )
        if isinstance(verdict, tuple):  # the own job's lease expired: a failed attempt first
            expired.append((key, verdict[1]))
            verdict = verdict[0]
        if isinstance(verdict, Refusal):
            results.append(verdict)
            continue
        range_key = (ident.conversation_id, ident.from_pair)
        if range_key in taken:
            results.append(Refusal("running", "claimed earlier in this batch"))
            continue
        if running is not None:
            if running >= max_running:
                results.append(Refusal("admission", f"{running} jobs running, limit {max_running}"))
                continue
            running += 1
        taken.add(range_key)
        attempt = verdict
        if attempt == 1:  # no row yet for this identity
            new.append((key, ident))
        else:
            again.append((key, attempt))
        results.append(Claim(key, ident, attempt, owner, expires))
    if expired:
        _expire_many(con, expired, now)
    if new:
        con.execute(
            "INSERT INTO compactions (id, conversation_id, scope, from_pair, to_pair, "
            "source_message_ids, source_digest, model_id, prompt_version, prompt_sha256, "
            "status, attempts, lease_owner, lease_expires_at, created_at, claimed_at) "
            "SELECT unnest($ids), unnest($cids), unnest($scopes), unnest($froms), unnest($tos), "
            "unnest($sources), unnest($digests), unnest($models), unnest($versions), "
            "$prompt, 'running', 1, $owner, $expires, $now, $now",
            {
                "ids": [k for k, _ in new],
                "cids": [i.conversation_id for _, i in new],
                "scopes": [i.scope for _, i in new],
                "froms": [i.from_pair for _, i in new],
                "tos": [i.to_pair for _, i in new],
                "sources": [list(i.source_message_ids) for _, i in new],
                "digests": [i.source_digest for _, i in new],
                "models": [i.model_id for _, i in new],
                "versions": [i.prompt_version for _, i in new],
                "prompt": prompt_sha256,
                "owner": owner,
                "expires": expires,
                "now": now,
            },
        )
    if again:
        con.execute(
            "UPDATE compactions SET status = 'running', attempts = v.attempt, "
            "lease_owner = $owner, lease_expires_at = $expires, claimed_at = $now "
            "FROM (SELECT unnest($ids) AS id, unnest($attempts) AS attempt) v "
            "WHERE compactions.id = v.id AND compactions.status = 'failed'",
            {
                "ids": [k for k, _ in again],
                "attempts": [a for _, a in again],
                "owner": owner,
                "expires": expires,
                "now": now,
            },
        )
    granted = [r for r in results if isinstance(r, Claim)]
    if granted:
        con.execute(
            "INSERT INTO compaction_attempts (job_id, attempt, lease_owner, started_at) "
            "SELECT unnest($ids), unnest($attempts), $owner, $now",
            {
                "ids": [c.job_id for c in granted],
                "attempts": [c.attempt for c in granted],
                "owner": owner,
                "now": now,
            },
        )
    return results


def _judge(
    ident: JobIdentity, key: str, rows: Sequence[tuple], now: float
) -> int | Refusal | tuple[int | Refusal, int]:
    """The attempt number to grant, or a Refusal; (that, attempts) when the own lease expired."""
    own = None
    for job_id, status, attempts, lease_expires_at, version, digest in rows:
        if job_id == key:
            own = (status, attempts, lease_expires_at)
            continue
        if (
            status == "completed"
            and digest == ident.source_digest
            and (version in CONSUMABLE_VERSIONS)
        ):
            return Refusal("completed", f"already summarised by job {job_id[:12]} ({version})")
        if status == "running" and lease_expires_at is not None and lease_expires_at >= now:
            return Refusal("running", f"job {job_id[:12]} holds a live lease on this range")
    if own is None:
        return 1
    status, attempts, lease_expires_at = own
    if status == "completed":
        return Refusal("completed", f"job {key[:12]} is completed")
    if status == "exhausted":
        return Refusal("exhausted", f"job {key[:12]} failed {attempts} attempts; stays raw")
    if status == "running":
        if lease_expires_at is not None and lease_expires_at >= now:
            return Refusal("running", f"job {key[:12]} holds a live lease")
        # The worker died: its expired lease counts as a failed attempt.
        if attempts >= MAX_ATTEMPTS:
            return (
                Refusal("exhausted", f"job {key[:12]} lease expired on its last attempt"),
                attempts,
            )
        return (attempts + 1, attempts)
    if attempts >= MAX_ATTEMPTS:
        return Refusal("exhausted", f"job {key[:12]} used its {MAX_ATTEMPTS} attempts")
    return attempts + 1


def _expire_many(
    con: duckdb.DuckDBPyConnection, jobs_: Sequence[tuple[str, int]], now: float
) -> None:
    """Count expired leases as failed attempts: failed, or exhausted after the last attempt."""
    con.execute(
        "UPDATE compactions SET status = CASE WHEN attempts >= $max THEN 'exhausted' "
        "ELSE 'failed' END, lease_owner = NULL, lease_expires_at = NULL, "
        "last_error = 'lease expired: the worker stopped before finishing' "
        "FROM (SELECT unnest($ids) AS id) v "
        "WHERE compactions.id = v.id AND compactions.status = 'running'",
        {"ids": [k for k, _ in jobs_], "max": MAX_ATTEMPTS},
    )
    con.execute(
        "UPDATE compaction_attempts SET outcome = 'lease_expired', finished_at = $now, "
        "error = 'lease expired' "
        "FROM (SELECT unnest($ids) AS id, unnest($attempts) AS attempt) v "
        "WHERE job_id = v.id AND compaction_attempts.attempt = v.attempt AND outcome IS NULL",
        {"ids": [k for k, _ in jobs_], "attempts": [a for _, a in jobs_], "now": now},
    )


def claim_with_retry(
    con: duckdb.DuckDBPyConnection, ident: JobIdentity, *, retries: int = 200, **kwargs: object
) -> Claim | Refusal:
    """`claim`, tried again after a lost race until it is granted or refused for a reason."""
    return claim_many_with_retry(con, [ident], retries=retries, **kwargs)[0]


def claim_many_with_retry(
    con: duckdb.DuckDBPyConnection,
    idents: Sequence[JobIdentity],
    *,
    retries: int = 200,
    **kwargs: object,
) -> list[Claim | Refusal]:
    """`claim_many`, tried again after a lost race (the whole batch) a bounded number of times."""
    results: list[Claim | Refusal] = []
    for i in range(retries):
        results = claim_many(con, idents, **kwargs)  # type: ignore[arg-type]
        if not (results and isinstance(results[0], Refusal) and results[0].reason == "race"):
            return results
        time.sleep(0.001 * (1 + i % 10))
    return results


def expire_leases(con: duckdb.DuckDBPyConnection, *, now: float | None = None) -> int:
    """Turn every expired lease into a failed attempt (one transaction); returns how many."""
    at = time.time() if now is None else now

    def run() -> int:
        with transaction(con):
            con.execute("UPDATE compaction_gate SET claims = claims + 1 WHERE id = 1")
            rows = con.execute(
                "SELECT id, attempts FROM compactions "
                "WHERE status = 'running' AND lease_expires_at < ?",
                [at],
            ).fetchall()
            if rows:
                _expire_many(con, rows, at)
            return len(rows)

    return retry_on_race(run)


# -- completion and failure -------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Completion:
    """What a successful attempt writes besides the summary (point 12: the audit boundary)."""

    summary: str
    input_sha256: str
    kept_verbatim: Sequence[str]  # the original user texts of the range
    identifiers_total: int
    identifiers_kept: int
    # The source state (pairs.source_states) read with the pairs the job's identity was bound
    # to, or None: `lexkeep compactions` then recomputes the digest to tell whether it is stale.
    source_state: str | None = None


def complete(
    con: duckdb.DuckDBPyConnection, c: Claim, done: Completion, *, now: float | None = None
) -> str:
    """Write the summary and its boundary in one transaction; returns the boundary id.

    Refused (RuleError) when the job is not running under this claim's lease, in particular
    when it is already completed: a completed summary is never overwritten.
    """
    result = complete_many(con, [(c, done)], now=now)[0]
    if isinstance(result, RuleError):
        raise result
    return result


def complete_many(
    con: duckdb.DuckDBPyConnection,
    items: Sequence[tuple[Claim, Completion]],
    *,
    now: float | None = None,
) -> list[str | RuleError]:
    """Complete several claims in ONE transaction; per item the boundary id or why refused."""
    for c, done in items:
        if not done.summary or not done.summary.strip():
            raise RuleError(f"job {c.job_id[:12]}: an empty summary is never written")
        if len(done.summary) > MAX_SUMMARY_CHARS:
            raise RuleError(
                f"job {c.job_id[:12]}: summary has {len(done.summary)} characters "
                f"(limit {MAX_SUMMARY_CHARS})"
            )
        odd = first_control(done.summary)
        if odd is not None:
            raise RuleError(
                f"job {c.job_id[:12]}: the summary holds {describe(odd)} "
                f"at character {odd.start()}",
                hint="a summary is plain text: no NUL, terminal escapes or other controls, no "
                "bidirectional overrides or hidden characters",
            )
    if not items:
        return []
    at = time.time() if now is None else now

    def run() -> list[str | RuleError]:
        with transaction(con):
            state = _states(con, [c.job_id for c, _ in items])
            results: list[str | RuleError] = []
            ok: list[tuple[Claim, Completion]] = []
            expired: list[tuple[str, int]] = []
            for c, done in items:
                problem = _not_writable(c, state.get(c.job_id))
                if problem is None:
                    problem = _too_late(c, state[c.job_id], at)
                    if problem is not None:  # still held by this claim, but its lease ran out
                        expired.append((c.job_id, c.attempt))
                results.append(problem or f"lexkeep-compaction/{c.job_id}")
                if problem is None:
                    ok.append((c, done))
            if expired:  # point 7: an expired lease is a failed attempt, late or not
                _expire_many(con, expired, at)
            if not ok:
                return results
            conv_ids = list(dict.fromkeys(c.identity.conversation_id for c, _ in ok))
            positions = dict(
                con.execute(
                    "SELECT id, max_position FROM conversations "
                    "WHERE id IN (SELECT unnest(?::VARCHAR[]))",
                    [conv_ids],
                ).fetchall()
            )
            boundary_positions = []
            for c, _ in ok:
                cid = c.identity.conversation_id
                if cid not in positions:
                    raise RuleError(f"conversation {cid} is not in the store")
                positions[cid] += 1
                boundary_positions.append(positions[cid])
            params = {
                "ids": [c.job_id for c, _ in ok],
                "owners": [c.lease_owner for c, _ in ok],
                "attempts": [c.attempt for c, _ in ok],
                "summaries": [d.summary for _, d in ok],
                "shas": [hashlib.sha256(d.summary.encode("utf-8")).hexdigest() for _, d in ok],
                "inputs": [d.input_sha256 for _, d in ok],
                "totals": [d.identifiers_total for _, d in ok],
                "kepts": [d.identifiers_kept for _, d in ok],
                "states": [d.source_state for _, d in ok],
                "now": at,
            }
            con.execute(
                "UPDATE compactions SET status = 'completed', summary = v.summary, "
                "summary_sha256 = v.sha, input_sha256 = v.input, identifiers_total = v.total, "
                "identifiers_kept = v.kept, lease_owner = NULL, lease_expires_at = NULL, "
                "completed_at = $now, boundary_id = 'lexkeep-compaction/' || v.id, "
                "last_error = NULL, source_state = v.state "
                "FROM (SELECT unnest($ids) AS id, unnest($owners) AS owner, "
                "unnest($summaries) AS summary, unnest($shas) AS sha, unnest($inputs) AS input, "
                "unnest($totals) AS total, unnest($kepts) AS kept, "
                "unnest($states::VARCHAR[]) AS state) v "
                "WHERE compactions.id = v.id AND compactions.status = 'running' "
                "AND compactions.lease_owner = v.owner",
                {k: params[k] for k in params if k != "attempts"},
            )
            _finish_attempts(con, [(c.job_id, c.attempt) for c, _ in ok], "completed", None, at)
            # Point 12: the audit treats this like any boundary, placed after the last record
            # that existed when the summary completed; later ingests get later positions.
            con.execute(
                "INSERT INTO boundaries (id, conversation_id, position, kind, trigger, "
                "summary_text, kept_verbatim, time, source_file, source_line) "
                "SELECT 'lexkeep-compaction/' || id, cid, pos, 'lexkeep', 'lexkeep compact', "
                "summary, kept, $time, 'lexkeep:compactions/' || id, 0 "
                "FROM (SELECT unnest($ids) AS id, unnest($cids) AS cid, unnest($pos) AS pos, "
                "unnest($summaries) AS summary, unnest($kept) AS kept)",
                {
                    "ids": params["ids"],
                    "cids": [c.identity.conversation_id for c, _ in ok],
                    "pos": boundary_positions,
                    "summaries": params["summaries"],
                    "kept": [list(d.kept_verbatim) for _, d in ok],
                    "time": _iso(at),
                },
            )
            con.execute(
                "UPDATE conversations SET max_position = v.pos "
                "FROM (SELECT unnest($cids) AS cid, unnest($pos) AS pos) v "
                "WHERE conversations.id = v.cid",
                {"cids": list(positions), "pos": list(positions.values())},
            )
            return results

    return retry_on_race(run)


def fail(con: duckdb.DuckDBPyConnection, c: Claim, error: str, *, now: float | None = None) -> str:
    """Record a failed attempt (no summary is written); returns the new status."""
    result = fail_many(con, [(c, error)], now=now)[0]
    if isinstance(result, RuleError):
        raise result
    return result


def fail_many(
    con: duckdb.DuckDBPyConnection,
    items: Sequence[tuple[Claim, str]],
    *,
    now: float | None = None,
) -> list[str | RuleError]:
    """Record several failed attempts in ONE transaction; per item the new status or refusal."""
    if not items:
        return []
    at = time.time() if now is None else now

    def run() -> list[str | RuleError]:
        with transaction(con):
            state = _states(con, [c.job_id for c, _ in items])
            results: list[str | RuleError] = []
            ok = []
            for c, error in items:
                problem = _not_writable(c, state.get(c.job_id))
                if problem is None:
                    attempts = state[c.job_id][2]
                    results.append("exhausted" if attempts >= MAX_ATTEMPTS else "failed")
                    ok.append((c, error[:2000]))
                else:
                    results.append(problem)
            if ok:
                _mark_failed(con, [(c.job_id, c.lease_owner, c.attempt, e) for c, e in ok], at)
            return results

    return retry_on_race(run)


def _mark_failed(
    con: duckdb.DuckDBPyConnection, failed: Sequence[tuple[str, str, int, str]], at: float
) -> None:
    """Record failed attempts of running jobs, each (job id, lease owner, attempt, error): the
    job becomes failed (exhausted after its last attempt), and its attempt row says why."""
    con.execute(
        "UPDATE compactions SET status = CASE WHEN attempts >= $max "
        "THEN 'exhausted' ELSE 'failed' END, lease_owner = NULL, "
        "lease_expires_at = NULL, last_error = v.error "
        "FROM (SELECT unnest($ids) AS id, unnest($owners) AS owner, "
        "unnest($errors) AS error) v "
        "WHERE compactions.id = v.id AND compactions.status = 'running' "
        "AND compactions.lease_owner = v.owner",
        {
            "ids": [job_id for job_id, _, _, _ in failed],
            "owners": [owner for _, owner, _, _ in failed],
            "errors": [error for _, _, _, error in failed],
            "max": MAX_ATTEMPTS,
        },
    )
    _finish_attempts(
        con,
        [(job_id, attempt) for job_id, _, attempt, _ in failed],
        "failed",
        [error for _, _, _, error in failed],
        at,
    )


def release_owned(con: duckdb.DuckDBPyConnection, lease_owner: str) -> int:
    """Give back, WITHOUT counting an attempt, every job `lease_owner` still holds (an
    interrupted worker: its calls were abandoned, so nothing was generated); returns how
    many. As `release_many`: a first attempt's job is removed, a later one is `failed` again
    with the attempts and the error it had."""

    def run() -> int:
        with transaction(con):
            # A running job's `attempts` is the number of the attempt it runs (see claim_many).
            rows = con.execute(
                "SELECT id, attempts FROM compactions WHERE status = 'running' AND lease_owner = ?",
                [lease_owner],
            ).fetchall()
            _give_back(con, rows)
            return len(rows)

    return retry_on_race(run)


def release_many(con: duckdb.DuckDBPyConnection, claims: Sequence[Claim]) -> int:
    """Give claims back WITHOUT counting an attempt (the backend was never reached, so nothing
    was generated): a first attempt's job is removed, a later one is `failed` again with the
    attempts it had before. Only claims still running under their own lease; returns how many."""
    if not claims:
        return 0

    def run() -> int:
        with transaction(con):
            state = _states(con, [c.job_id for c in claims])
            mine = [c for c in claims if _not_writable(c, state.get(c.job_id)) is None]
            _give_back(con, [(c.job_id, c.attempt) for c in mine])
            return len(mine)

    return retry_on_race(run)


def restore_failed(con: duckdb.DuckDBPyConnection, claims: Sequence[Claim]) -> int:
    """Undo the failed attempts these claims recorded, as `release_many` undoes a claim: the
    attempt is not counted (a run found its summariser misconfigured, so the failure said
    nothing about the range). Only where that attempt is still the job's last one, so a range
    another worker claimed since is left alone; returns how many were undone."""
    if not claims:
        return 0

    def run() -> int:
        with transaction(con):
            rows = con.execute(
                "SELECT c.id, c.attempts FROM compactions c "
                "JOIN (SELECT unnest($ids) AS id, unnest($attempts) AS attempt, "
                "unnest($owners) AS owner) v ON c.id = v.id AND c.attempts = v.attempt "
                "JOIN compaction_attempts a ON a.job_id = c.id AND a.attempt = c.attempts "
                "AND a.lease_owner = v.owner "
                "WHERE c.status IN ('failed', 'exhausted') AND a.outcome = 'failed'",
                {
                    "ids": [c.job_id for c in claims],
                    "attempts": [c.attempt for c in claims],
                    "owners": [c.lease_owner for c in claims],
                },
            ).fetchall()
            if not rows:
                return 0
            # Back to `running` first, then undone exactly as a claim given back is.
            con.execute(
                "UPDATE compactions SET status = 'running', last_error = "
                "(SELECT error FROM compaction_attempts a WHERE a.job_id = compactions.id "
                "AND a.attempt = compactions.attempts - 1) "
                "WHERE id IN (SELECT unnest(?::VARCHAR[]))",
                [[job_id for job_id, _ in rows]],
            )
            _give_back(con, rows)
            return len(rows)

    return retry_on_race(run)


def _give_back(con: duckdb.DuckDBPyConnection, items: Sequence[tuple[str, int]]) -> None:
    """Undo the claims `items` (job id, attempt) of running jobs, inside a transaction: their
    attempt rows go, a first attempt's job goes, a later one is `failed` with attempt - 1."""
    if not items:
        return
    first = [job_id for job_id, attempt in items if attempt == 1]
    later = [(job_id, attempt) for job_id, attempt in items if attempt > 1]
    con.execute(
        "DELETE FROM compaction_attempts USING (SELECT unnest($ids) AS id, "
        "unnest($attempts) AS attempt) v "
        "WHERE compaction_attempts.job_id = v.id "
        "AND compaction_attempts.attempt = v.attempt",
        {"ids": [job_id for job_id, _ in items], "attempts": [a for _, a in items]},
    )
    if first:
        con.execute(
            "DELETE FROM compactions WHERE id IN (SELECT unnest(?::VARCHAR[])) "
            "AND status = 'running'",
            [first],
        )
    if later:
        con.execute(
            "UPDATE compactions SET status = 'failed', attempts = v.attempt - 1, "
            "lease_owner = NULL, lease_expires_at = NULL "
            "FROM (SELECT unnest($ids) AS id, unnest($attempts) AS attempt) v "
            "WHERE compactions.id = v.id AND compactions.status = 'running'",
            {"ids": [k for k, _ in later], "attempts": [a for _, a in later]},
        )


def _states(con: duckdb.DuckDBPyConnection, job_ids: list[str]) -> dict[str, tuple]:
    """{job id: (status, lease owner, attempts, lease expiry)} of the jobs that exist."""
    rows = con.execute(
        "SELECT id, status, lease_owner, attempts, lease_expires_at FROM compactions "
        "WHERE id IN (SELECT unnest(?::VARCHAR[]))",
        [job_ids],
    ).fetchall()
    return {row[0]: row[1:] for row in rows}


def _finish_attempts(
    con: duckdb.DuckDBPyConnection,
    items: Sequence[tuple[str, int]],
    outcome: str,
    errors: list[str] | None,
    at: float,
) -> None:
    """Close the attempt rows `items` (job id, attempt) with `outcome` and `errors`."""
    con.execute(
        "UPDATE compaction_attempts SET outcome = $outcome, error = v.error, finished_at = $now "
        "FROM (SELECT unnest($ids) AS id, unnest($attempts) AS attempt, "
        "unnest($errors) AS error) v "
        "WHERE compaction_attempts.job_id = v.id AND compaction_attempts.attempt = v.attempt",
        {
            "ids": [job_id for job_id, _ in items],
            "attempts": [attempt for _, attempt in items],
            "errors": errors if errors is not None else [None] * len(items),
            "outcome": outcome,
            "now": at,
        },
    )


def _not_writable(c: Claim, row: tuple | None) -> RuleError | None:
    if row is None:
        return RuleError(f"job {c.job_id[:12]} does not exist")
    status, lease_owner, _, _ = row
    if status == "completed":
        return RuleError(
            f"job {c.job_id[:12]} is completed; a completed summary is never updated",
            hint="completed summaries are immutable; a changed source gets a new job identity",
        )
    if status != "running" or lease_owner != c.lease_owner:
        return RuleError(
            f"job {c.job_id[:12]} is {status} and no longer held by this worker "
            "(its lease expired and was counted as a failed attempt)"
        )
    return None


def _too_late(c: Claim, row: tuple, at: float) -> RuleError | None:
    """Refuse a write to a job whose lease expired before `at`, though no other claim took
    it: the lease is the whole time an attempt has (DESIGN.md point 7)."""
    expires = row[3]
    if expires is None or expires >= at:
        return None
    return RuleError(
        f"job {c.job_id[:12]}: its lease expired {_seconds(at - expires)} s before the summary "
        "arrived; the attempt counts as failed (lease expired) and nothing was written",
        hint="give summaries more time: raise lease_seconds",
        wording="compact.lease_expired",
    )


def _seconds(value: float) -> str:
    """`2.5`, `1`, `42`: a duration for a message, to a tenth below 10 s."""
    return f"{value:.0f}" if value >= 10 else f"{value:.1f}".removesuffix(".0")


def update_summary(con: duckdb.DuckDBPyConnection, job_id: str, text: str) -> None:
    """Replace a job's summary text: refused for completed jobs (the only ones with a summary)."""
    row = con.execute("SELECT status FROM compactions WHERE id = ?", [job_id]).fetchone()
    if row is None:
        raise RuleError(f"job {job_id[:12]} does not exist")
    raise RuleError(
        f"job {job_id[:12]} is {row[0]}: summaries are written once, at completion, and "
        "never updated",
        hint="completed summaries are immutable; a changed source gets a new job identity",
    )


def _iso(at: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(at))


# -- reading ---------------------------------------------------------------------------------


def _range_unusable(from_pair: int, to_pair: int, pairs: Sequence[Pair]) -> str | None:
    """Why no summary of pairs from..to can stand for `pairs` (the range's current pairs)."""
    if not is_segment(from_pair, to_pair):
        return f"pairs {from_pair}–{to_pair} are not a whole 10-pair segment"
    if len(pairs) != 10 or [p.index for p in pairs] != list(range(from_pair, to_pair + 1)):
        return f"pairs {from_pair}–{to_pair} are not all eligible now"
    return None


def _summary_unusable(prompt_version: str, bound_digest: str, digest: str) -> str | None:
    """Why one completed summary of a whole, eligible range is not used (digest: current)."""
    if prompt_version in MIXED_INPUT_VERSIONS:
        return f"{prompt_version} summarised user text too; never used"
    if prompt_version not in CONSUMABLE_VERSIONS:
        return f"unknown prompt version {prompt_version}"
    if bound_digest != digest:
        return "stale, the source changed since it was summarised"
    return None


def summary_stale_reason(
    from_pair: int, to_pair: int, prompt_version: str, bound_digest: str, pairs: Sequence[Pair]
) -> str | None:
    """Why the next-run context does not use a completed summary, or None when it may.

    `pairs` are the conversation's eligible pairs now. The rule of `valid_summary`: the range
    must be a whole segment whose pairs are all eligible, the prompt version consumable, and
    the source digest recomputed from the current pairs equal to the one it was bound to.
    """
    current = list(pairs[from_pair : to_pair + 1])
    reason = _range_unusable(from_pair, to_pair, current)
    if reason is None:
        reason = _summary_unusable(prompt_version, bound_digest, source_digest(current))
    return reason


def valid_summary(
    con: duckdb.DuckDBPyConnection, conversation_id: str, from_pair: int, pairs: Sequence[Pair]
) -> tuple[CompletedSummary | None, str]:
    """The consumable summary of a range, or None with the reason (for next-run context).

    Valid = completed, prompt version @3 or @2 (@1 mixed input is recognised, never consumed),
    same range, and the source digest recomputed from `pairs` (the range's current pairs) equal
    to the one the summary was bound to.
    """
    to_pair = from_pair + 9
    unusable = _range_unusable(from_pair, to_pair, pairs)
    if unusable is not None:
        return None, unusable
    rows = con.execute(
        "SELECT id, summary, prompt_version, model_id, source_digest, completed_at "
        "FROM compactions WHERE conversation_id = ? AND from_pair = ? AND to_pair = ? "
        "AND status = 'completed' ORDER BY completed_at DESC",
        [conversation_id, from_pair, to_pair],
    ).fetchall()
    if not rows:
        return None, "no completed summary for this range"
    digest = source_digest(pairs)
    reasons = []
    # Prefer the current prompt version, then @2; among equals the newest.
    ordered = sorted(
        rows,
        key=lambda r: CONSUMABLE_VERSIONS.index(r[2]) if r[2] in CONSUMABLE_VERSIONS else 99,
    )
    for job_id, summary, version, model_id, bound_digest, completed_at in ordered:
        unusable = _summary_unusable(version, bound_digest, digest)
        if unusable is not None:
            reasons.append(f"job {job_id[:12]}: {unusable}")
            continue
        return (
            CompletedSummary(
                job_id,
                conversation_id,
                from_pair,
                to_pair,
                summary,
                version,
                model_id,
                bound_digest,
                completed_at,
            ),
            "valid",
        )
    return None, "; ".join(reasons)


def list_jobs(
    con: duckdb.DuckDBPyConnection, conversation_ids: Sequence[str] | None = None
) -> list[JobRow]:
    """All jobs (optionally of some conversations), ordered by conversation and range.

    Raises NotFoundError for a named conversation that is not in the store (and has no jobs).
    """
    sql = (
        "SELECT id, conversation_id, scope, from_pair, to_pair, source_digest, model_id, "
        "prompt_version, status, attempts, lease_owner, lease_expires_at, length(summary), "
        "identifiers_total, identifiers_kept, last_error, boundary_id, created_at, completed_at "
        "FROM compactions"
    )
    params: list[object] = []
    if conversation_ids:
        sql += " WHERE conversation_id IN (SELECT unnest(?::VARCHAR[]))"
        params.append(list(conversation_ids))
    sql += " ORDER BY conversation_id, from_pair, created_at"
    rows = [JobRow(*row) for row in con.execute(sql, params).fetchall()]
    rows = _with_staleness(con, rows, conversation_ids)
    if conversation_ids:
        # A mistyped id must not read as "no jobs". Only ids without jobs are looked up: the
        # schema has no foreign key, and a job is listed even without its conversation row.
        listed = {r.conversation_id for r in rows}
        require_conversations(con, [c for c in conversation_ids if c not in listed])
    return rows


# Conversations whose pairs are read at once to judge staleness (as engine.BATCH_CONVERSATIONS).
_STALENESS_BATCH = 500


def _has_source_states(con: duckdb.DuckDBPyConnection) -> bool:
    """Whether the store records source states (migration 003; a store opened read-only
    may be older)."""
    return bool(
        con.execute(
            "SELECT count(*) FROM pragma_table_info('compactions') WHERE name = 'source_state'"
        ).fetchone()[0]
    )


def unchanged_summaries(
    con: duckdb.DuckDBPyConnection, conversation_ids: Sequence[str] | None = None
) -> set[str]:
    """Ids of the completed jobs whose source state is still the one they were summarised
    from, compared in SQL: their source digest is unchanged (pairs.SOURCE_STATE_SQL).

    A job not in the set may still be valid (its state is older than this lexkeep, or a
    change elsewhere in the conversation's earlier turns moved it): only the recomputed
    digest can tell.
    """
    if not _has_source_states(con):
        return set()
    where = "status = 'completed' AND source_state IS NOT NULL"
    params: dict[str, object] = {}
    if conversation_ids:
        where += " AND conversation_id IN (SELECT unnest($cids::VARCHAR[]))"
        params["cids"] = list(conversation_ids)
    wanted = (
        "SELECT id AS k, conversation_id AS cid, source_message_ids[19] AS uid, "
        f"source_state FROM compactions WHERE {where}"
    )
    sql = (
        f"SELECT s.k FROM ({SOURCE_STATE_SQL.format(wanted=wanted, within=WANTED_ONLY)}) s "
        f"JOIN ({wanted}) j ON j.k = s.k WHERE j.source_state = s.state"
    )
    return {k for (k,) in con.execute(sql, params).fetchall()}


def _with_staleness(
    con: duckdb.DuckDBPyConnection, rows: list[JobRow], conversation_ids: Sequence[str] | None
) -> list[JobRow]:
    """`rows` with the stale reason of each completed job, judged as the next-run context does.

    A job whose source state is unchanged (`unchanged_summaries`) keeps its digest, so only
    its prompt version is judged; the others have their digest recomputed from the current
    pairs, read 500 conversations at a time and let go after their jobs are judged, so
    memory holds one batch of pairs, not the store's text.
    """
    judged = list(rows)
    completed_any = any(r.status == "completed" for r in rows)
    unchanged = unchanged_summaries(con, conversation_ids) if completed_any else set()
    jobs: dict[str, list[int]] = {}  # conversation -> indexes of its completed jobs in rows
    for index, r in enumerate(rows):
        if r.status != "completed":
            continue
        if r.id in unchanged:
            reason = _summary_unusable(r.prompt_version, r.source_digest, r.source_digest)
            judged[index] = replace(r, stale_reason=reason)
        else:
            jobs.setdefault(r.conversation_id, []).append(index)
    completed = list(jobs)
    for at in range(0, len(completed), _STALENESS_BATCH):
        batch = eligible_pairs_many(con, completed[at : at + _STALENESS_BATCH])
        for conversation_id, pairs in batch.items():
            for index in jobs[conversation_id]:
                r = rows[index]
                reason = summary_stale_reason(
                    r.from_pair, r.to_pair, r.prompt_version, r.source_digest, pairs
                )
                judged[index] = replace(r, stale_reason=reason)
    return judged
