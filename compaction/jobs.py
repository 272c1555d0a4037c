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
from dataclasses import dataclass
from typing import TypeVar

import duckdb

from lexkeep.compaction.binding import JobIdentity, source_digest
from lexkeep.compaction.pairs import Pair
from lexkeep.compaction.planning import is_segment
from lexkeep.core.errors import RuleError

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
        except RACE_ERRORS:
            if i == attempts - 1:
                raise
            time.sleep(pause * (1 + i % 8))
    raise AssertionError("unreachable")


# -- claims ---------------------------------------------------------------------------------


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
    if not is_segment(ident.from_pair, ident.to_pair) or len(ident.source_message_ids) != 20:
        raise RuleError(
            f"conversation {ident.conversation_id} pairs {ident.from_pair}–{ident.to_pair}: "
            "not a whole 10-pair segment with 20 source ids"
        )
    if len(set(ident.source_message_ids)) != 20 or not all(ident.source_message_ids):
        raise RuleError(
            f"conversation {ident.conversation_id} pairs {ident.from_pair}–{ident.to_pair}: "
            "the 20 source message ids are not complete and unique"
        )
    at = time.time() if now is None else now
    try:
        with transaction(con):
            return _claim_in_transaction(
                con, ident, owner, at, lease_seconds, max_running, prompt_sha256
            )
    except RACE_ERRORS as exc:
        return Refusal("race", str(exc).splitlines()[0])


def _claim_in_transaction(
    con: duckdb.DuckDBPyConnection,
    ident: JobIdentity,
    owner: str,
    now: float,
    lease_seconds: float,
    max_running: int | None,
    prompt_sha256: str | None,
) -> Claim | Refusal:
    # The gate row first: a concurrent claim now conflicts here instead of reading stale rows.
    con.execute("UPDATE compaction_gate SET claims = claims + 1 WHERE id = 1")
    key = ident.key()
    rows = con.execute(
        "SELECT id, status, attempts, lease_expires_at, prompt_version, source_digest "
        "FROM compactions WHERE conversation_id = ? AND from_pair = ?",
        [ident.conversation_id, ident.from_pair],
    ).fetchall()
    own = None
    for job_id, status, attempts, lease_expires_at, version, digest in rows:
        if job_id == key:
            own = (status, attempts, lease_expires_at)
            continue
        if (
            status == "completed"
            and digest == ident.source_digest
            and version in CONSUMABLE_VERSIONS
        ):
            return Refusal("completed", f"already summarised by job {job_id[:12]} ({version})")
        if status == "running" and lease_expires_at is not None and lease_expires_at >= now:
            return Refusal("running", f"job {job_id[:12]} holds a live lease on this range")
    attempt = 1
    if own is not None:
        status, attempts, lease_expires_at = own
        if status == "completed":
            return Refusal("completed", f"job {key[:12]} is completed")
        if status == "exhausted":
            return Refusal("exhausted", f"job {key[:12]} failed {attempts} attempts; stays raw")
        if status == "running":
            if lease_expires_at is not None and lease_expires_at >= now:
                return Refusal("running", f"job {key[:12]} holds a live lease")
            # The worker died: its expired lease counts as a failed attempt.
            status = _expire(con, key, attempts, now)
            if status == "exhausted":
                return Refusal("exhausted", f"job {key[:12]} lease expired on its last attempt")
        if attempts >= MAX_ATTEMPTS:
            return Refusal("exhausted", f"job {key[:12]} used its {MAX_ATTEMPTS} attempts")
        attempt = attempts + 1
    if max_running is not None:
        running = con.execute(
            "SELECT count(*) FROM compactions WHERE status = 'running' AND lease_expires_at >= ?",
            [now],
        ).fetchone()[0]
        if running >= max_running:
            return Refusal("admission", f"{running} jobs running, limit {max_running}")
    expires = now + lease_seconds
    if own is None:
        con.execute(
            "INSERT INTO compactions (id, conversation_id, scope, from_pair, to_pair, "
            "source_message_ids, source_digest, model_id, prompt_version, prompt_sha256, "
            "status, attempts, lease_owner, lease_expires_at, created_at, claimed_at) "
            "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, 'running', 1, ?, ?, ?, ?)",
            [
                key,
                ident.conversation_id,
                ident.scope,
                ident.from_pair,
                ident.to_pair,
                list(ident.source_message_ids),
                ident.source_digest,
                ident.model_id,
                ident.prompt_version,
                prompt_sha256,
                owner,
                expires,
                now,
                now,
            ],
        )
    else:
        con.execute(
            "UPDATE compactions SET status = 'running', attempts = ?, lease_owner = ?, "
            "lease_expires_at = ?, claimed_at = ? WHERE id = ? AND status = 'failed'",
            [attempt, owner, expires, now, key],
        )
    con.execute(
        "INSERT INTO compaction_attempts (job_id, attempt, lease_owner, started_at) "
        "VALUES (?, ?, ?, ?)",
        [key, attempt, owner, now],
    )
    return Claim(key, ident, attempt, owner, expires)


def _expire(con: duckdb.DuckDBPyConnection, job_id: str, attempts: int, now: float) -> str:
    status = "exhausted" if attempts >= MAX_ATTEMPTS else "failed"
    con.execute(
        "UPDATE compactions SET status = ?, lease_owner = NULL, lease_expires_at = NULL, "
        "last_error = 'lease expired: the worker stopped before finishing' "
        "WHERE id = ? AND status = 'running'",
        [status, job_id],
    )
    con.execute(
        "UPDATE compaction_attempts SET outcome = 'lease_expired', finished_at = ?, "
        "error = 'lease expired' WHERE job_id = ? AND attempt = ? AND outcome IS NULL",
        [now, job_id, attempts],
    )
    return status


def claim_with_retry(
    con: duckdb.DuckDBPyConnection, ident: JobIdentity, *, retries: int = 200, **kwargs: object
) -> Claim | Refusal:
    """`claim`, tried again after a lost race until it is granted or refused for a reason."""
    result: Claim | Refusal = Refusal("race")
    for i in range(retries):
        result = claim(con, ident, **kwargs)  # type: ignore[arg-type]
        if not (isinstance(result, Refusal) and result.reason == "race"):
            return result
        time.sleep(0.001 * (1 + i % 10))
    return result


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
            for job_id, attempts in rows:
                _expire(con, job_id, attempts, at)
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


def complete(
    con: duckdb.DuckDBPyConnection, c: Claim, done: Completion, *, now: float | None = None
) -> str:
    """Write the summary and its boundary in one transaction; returns the boundary id.

    Refused (RuleError) when the job is not running under this claim's lease, in particular
    when it is already completed: a completed summary is never overwritten.
    """
    if not done.summary or not done.summary.strip():
        raise RuleError(f"job {c.job_id[:12]}: an empty summary is never written")
    if len(done.summary) > MAX_SUMMARY_CHARS:
        raise RuleError(
            f"job {c.job_id[:12]}: summary has {len(done.summary)} characters "
            f"(limit {MAX_SUMMARY_CHARS})"
        )
    at = time.time() if now is None else now
    boundary_id = f"lexkeep-compaction/{c.job_id}"

    def run() -> str:
        with transaction(con):
            row = con.execute(
                "SELECT status, lease_owner, attempts FROM compactions WHERE id = ?", [c.job_id]
            ).fetchone()
            _check_writable(c, row)
            max_position = con.execute(
                "SELECT max_position FROM conversations WHERE id = ?",
                [c.identity.conversation_id],
            ).fetchone()
            if max_position is None:
                raise RuleError(f"conversation {c.identity.conversation_id} is not in the store")
            position = max_position[0] + 1
            con.execute(
                "UPDATE compactions SET status = 'completed', summary = ?, summary_sha256 = ?, "
                "input_sha256 = ?, identifiers_total = ?, identifiers_kept = ?, "
                "lease_owner = NULL, lease_expires_at = NULL, completed_at = ?, "
                "boundary_id = ?, last_error = NULL "
                "WHERE id = ? AND status = 'running' AND lease_owner = ?",
                [
                    done.summary,
                    hashlib.sha256(done.summary.encode("utf-8")).hexdigest(),
                    done.input_sha256,
                    done.identifiers_total,
                    done.identifiers_kept,
                    at,
                    boundary_id,
                    c.job_id,
                    c.lease_owner,
                ],
            )
            con.execute(
                "UPDATE compaction_attempts SET outcome = 'completed', finished_at = ? "
                "WHERE job_id = ? AND attempt = ?",
                [at, c.job_id, c.attempt],
            )
            # Point 12: the audit treats this like any boundary, placed after the last record
            # that existed when the summary completed; later ingests get later positions.
            con.execute(
                "INSERT INTO boundaries (id, conversation_id, position, kind, trigger, "
                "summary_text, kept_verbatim, time, source_file, source_line) "
                "VALUES (?, ?, ?, 'lexkeep', 'lexkeep compact', ?, ?, ?, ?, 0)",
                [
                    boundary_id,
                    c.identity.conversation_id,
                    position,
                    done.summary,
                    list(done.kept_verbatim),
                    _iso(at),
                    f"lexkeep:compactions/{c.job_id}",
                ],
            )
            con.execute(
                "UPDATE conversations SET max_position = ? WHERE id = ?",
                [position, c.identity.conversation_id],
            )
            return boundary_id

    return retry_on_race(run)


def fail(con: duckdb.DuckDBPyConnection, c: Claim, error: str, *, now: float | None = None) -> str:
    """Record a failed attempt (no summary is written); returns the new status."""
    at = time.time() if now is None else now

    def run() -> str:
        with transaction(con):
            row = con.execute(
                "SELECT status, lease_owner, attempts FROM compactions WHERE id = ?", [c.job_id]
            ).fetchone()
            _check_writable(c, row)
            status = "exhausted" if row[2] >= MAX_ATTEMPTS else "failed"
            con.execute(
                "UPDATE compactions SET status = ?, lease_owner = NULL, lease_expires_at = NULL, "
                "last_error = ? WHERE id = ? AND status = 'running' AND lease_owner = ?",
                [status, error[:2000], c.job_id, c.lease_owner],
            )
            con.execute(
                "UPDATE compaction_attempts SET outcome = 'failed', error = ?, finished_at = ? "
                "WHERE job_id = ? AND attempt = ?",
                [error[:2000], at, c.job_id, c.attempt],
            )
            return status

    return retry_on_race(run)


def _check_writable(c: Claim, row: tuple | None) -> None:
    if row is None:
        raise RuleError(f"job {c.job_id[:12]} does not exist")
    status, lease_owner, _ = row
    if status == "completed":
        raise RuleError(
            f"job {c.job_id[:12]} is completed; a completed summary is never updated",
            hint="completed summaries are immutable; a changed source gets a new job identity",
        )
    if status != "running" or lease_owner != c.lease_owner:
        raise RuleError(
            f"job {c.job_id[:12]} is {status} and no longer held by this worker "
            "(its lease expired and was counted as a failed attempt)"
        )


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


def valid_summary(
    con: duckdb.DuckDBPyConnection, conversation_id: str, from_pair: int, pairs: Sequence[Pair]
) -> tuple[CompletedSummary | None, str]:
    """The consumable summary of a range, or None with the reason (for next-run context).

    Valid = completed, prompt version @3 or @2 (@1 mixed input is recognised, never consumed),
    same range, and the source digest recomputed from `pairs` (the range's current pairs) equal
    to the one the summary was bound to.
    """
    to_pair = from_pair + 9
    if not is_segment(from_pair, to_pair):
        return None, f"pairs {from_pair}–{to_pair} are not a whole 10-pair segment"
    if len(pairs) != 10 or [p.index for p in pairs] != list(range(from_pair, to_pair + 1)):
        return None, f"pairs {from_pair}–{to_pair} are not all eligible now"
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
        if version in MIXED_INPUT_VERSIONS:
            reasons.append(f"job {job_id[:12]}: {version} summarised user text too; never used")
            continue
        if version not in CONSUMABLE_VERSIONS:
            reasons.append(f"job {job_id[:12]}: unknown prompt version {version}")
            continue
        if bound_digest != digest:
            reasons.append(f"job {job_id[:12]}: stale, the source changed since it was summarised")
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
    """All jobs (optionally of some conversations), ordered by conversation and range."""
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
    return [JobRow(*row) for row in con.execute(sql, params).fetchall()]
