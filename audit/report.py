"""The audit report: one frozen object that every renderer takes.

The engine builds it, `redact` returns a copy with values hashed, and the renderers in
`lexkeep.audit.render` only read it. Nothing here touches the store.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import pickle
import tempfile
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from itertools import islice
from typing import IO, Any, overload

from lexkeep.core.collector import paused
from lexkeep.core.model import Source, Verdict

SCHEMA_VERSION = 1

# Documented default so `--redact` works without setup; CI should set LEXKEEP_REDACT_KEY to a
# secret, because with a public key short identifiers can be recovered by guessing.
DEFAULT_REDACT_KEY = "lexkeep-redact-v1"

# Bins of the per-conversation ratio distribution: [0,10%), ..., [90%,100%), and exactly 100%.
BIN_LABELS: tuple[str, ...] = tuple(f"{10 * i}-{10 * i + 10}%" for i in range(10)) + ("100%",)


@dataclass(frozen=True, slots=True)
class Counts:
    """Verdict counts; `audited` excludes unverified identifiers (outside the ratio)."""

    kept: int = 0
    altered: int = 0
    missing: int = 0
    unverified: int = 0

    @property
    def audited(self) -> int:
        """Identifiers that count in the ratio."""
        return self.kept + self.altered + self.missing

    @property
    def ratio(self) -> float | None:
        """kept / audited, or None when nothing was audited."""
        return self.kept / self.audited if self.audited else None

    def add(self, verdict: Verdict) -> Counts:
        """A copy with one more finding of `verdict`."""
        name = verdict.value
        return replace(self, **{name: getattr(self, name) + 1})


@dataclass(frozen=True, slots=True)
class Evidence:
    """The tool call that shows the value after the boundary (kept) or a near miss (altered)."""

    call_id: str
    tool: str
    found: str  # the exact value for kept; the altered value for altered
    source: Source
    difference: str | None = None  # case | separator | truncated | extended | edit | date
    distance: int | None = None


@dataclass(frozen=True, slots=True)
class Finding:
    """One audited identifier: its verdict, where it was typed, the boundary and the evidence."""

    conversation_id: str
    message_id: str
    kind: str
    value: str
    verdict: Verdict
    message: Source
    boundary_id: str
    boundary_kind: str
    boundary: Source
    evidence: Evidence | None
    in_summary: bool | None  # None when the summary is opaque (remote compaction)
    in_kept_verbatim: bool
    used_before: bool
    scan_complete: bool = True


# Findings an audit holds as objects; later ones wait in a temporary file, SPILL_CHUNK at a time,
# so a big audit's memory does not grow with its findings (about 0.5 KB each as objects).
KEEP_IN_MEMORY = 200_000
SPILL_CHUNK = 20_000

_VERDICTS = {v.value: v for v in Verdict}


def _flat(f: Finding) -> tuple[Any, ...]:
    """A finding as a tuple of plain values (FLAT_FIELDS; pickled in C, without the
    dataclasses' reduce)."""
    m, b, ev = f.message, f.boundary, f.evidence
    return (
        f.conversation_id,
        f.message_id,
        f.kind,
        f.value,
        f.verdict.value,
        None if m is None else m.file,
        None if m is None else m.line,
        f.boundary_id,
        f.boundary_kind,
        None if b is None else b.file,
        None if b is None else b.line,
        None if ev is None else (ev.call_id, ev.tool, ev.found,
                                 None if ev.source is None else ev.source.file,
                                 None if ev.source is None else ev.source.line,
                                 ev.difference, ev.distance),
        f.in_summary,
        f.in_kept_verbatim,
        f.used_before,
        f.scan_complete,
    )  # fmt: skip


# The fields of a flat finding (_flat), in order; `evidence` is None or (call id, tool, found,
# file, line, difference, distance).
FLAT_FIELDS = (
    "conversation_id", "message_id", "kind", "value", "verdict", "message_file",
    "message_line", "boundary_id", "boundary_kind", "boundary_file", "boundary_line",
    "evidence", "in_summary", "in_kept_verbatim", "used_before", "scan_complete",
)  # fmt: skip


def _unflat(row: tuple[Any, ...]) -> Finding:
    cid, mid, kind, value, verdict, m_file, m_line, bid, bkind, b_file, b_line, ev = row[:12]
    evidence = None
    if ev is not None:
        source = None if ev[3] is None else Source(ev[3], ev[4])
        evidence = Evidence(ev[0], ev[1], ev[2], source, ev[5], ev[6])  # type: ignore[arg-type]
    return Finding(
        cid,
        mid,
        kind,
        value,
        _VERDICTS[verdict],
        None if m_file is None else Source(m_file, m_line),  # type: ignore[arg-type]
        bid,
        bkind,
        None if b_file is None else Source(b_file, b_line),  # type: ignore[arg-type]
        evidence,
        *row[12:],
    )


class Findings(Sequence[Finding]):
    """An audit's findings in order, kept flat (see _flat): the first KEEP_IN_MEMORY in memory,
    the rest pickled to an anonymous temporary file in chunks and read back a chunk at a time
    while iterating. Iterating or indexing gives Finding objects; `flat_rows()` the flat
    tuples, which the JSON report and the tallies read without building any object.

    Equal to any sequence of the same findings in the same order (a tuple, another Findings).
    """

    def __init__(self, items: Iterable[Finding] = ()) -> None:
        self._head: list[tuple[Any, ...]] = []
        self._tail: list[tuple[Any, ...]] = []  # flat findings not yet written
        self._file: IO[bytes] | None = None
        self._chunks: list[tuple[int, int]] = []  # (file offset, findings) of written chunks
        self._len = 0
        self.extend(items)

    def extend(self, items: Iterable[Finding]) -> None:
        """Append findings (in order)."""
        self.extend_flat(map(_flat, items))

    def extend_flat(self, rows: Iterable[tuple[Any, ...]]) -> None:
        """Append flat findings (tuples in the FLAT_FIELDS layout, in order)."""
        head, tail = self._head, self._tail
        for row in rows:
            if len(head) == self._len < KEEP_IN_MEMORY:  # nothing spilled yet, room left
                head.append(row)
            else:
                tail.append(row)
                if len(tail) >= SPILL_CHUNK:
                    self._spill()
            self._len += 1

    def _spill(self) -> None:
        if self._file is None:
            # lives as long as the findings (closed by close() or when collected)
            self._file = tempfile.TemporaryFile(prefix="lexkeep-findings-")  # noqa: SIM115
        self._file.seek(0, os.SEEK_END)
        self._chunks.append((self._file.tell(), len(self._tail)))
        pickle.dump(self._tail, self._file, protocol=pickle.HIGHEST_PROTOCOL)
        self._tail.clear()  # the same list: extend_flat() holds it

    def _rows(self) -> Iterator[list[tuple[Any, ...]]]:
        """The flat findings, a list at a time, in order: the head, then each chunk."""
        if self._head:
            yield self._head
        for offset, _ in self._chunks:
            assert self._file is not None
            self._file.seek(offset)
            yield pickle.load(self._file)
        if self._tail:
            yield self._tail

    def flat_rows(self) -> Iterator[tuple[Any, ...]]:
        """Every finding as its flat tuple (FLAT_FIELDS), in order."""
        for rows in self._rows():
            yield from rows

    def tally_keys(self) -> Iterator[tuple[str, str, str]]:
        """(conversation id, kind, verdict value) of each finding, without rebuilding any."""
        return tally_keys(self)

    def __iter__(self) -> Iterator[Finding]:
        return map(_unflat, self.flat_rows())

    def __len__(self) -> int:
        return self._len

    @overload
    def __getitem__(self, index: int) -> Finding: ...

    @overload
    def __getitem__(self, index: slice) -> tuple[Finding, ...]: ...

    def __getitem__(self, index: int | slice) -> Finding | tuple[Finding, ...]:
        if isinstance(index, slice):
            start, stop, step = index.indices(self._len)
            return tuple(islice(self, start, stop, step)) if step > 0 else tuple(self)[index]
        if index < 0:
            index += self._len
        if not 0 <= index < self._len:
            raise IndexError("finding index out of range")
        if index < len(self._head):
            return _unflat(self._head[index])
        return _unflat(next(islice(self.flat_rows(), index, None)))

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Sequence) or isinstance(other, (str, bytes)):
            return NotImplemented
        return len(self) == len(other) and all(a == b for a, b in zip(self, other, strict=True))

    __hash__ = None  # type: ignore[assignment]  # mutable while the audit appends

    def __repr__(self) -> str:
        return f"Findings({self._len} findings, {len(self._chunks)} chunks on disk)"

    def __reduce__(self) -> tuple[Any, ...]:
        # pickle and copy take every finding (the temporary file cannot travel)
        return (Findings, (tuple(self),))

    def close(self) -> None:
        """Remove the temporary file (also done when the object is collected)."""
        if self._file is not None:
            self._file.close()
            self._file = None


def flat_rows(findings: Sequence[Finding]) -> Iterator[tuple[Any, ...]]:
    """Each finding as its flat tuple (FLAT_FIELDS): a `Findings` gives the ones it holds."""
    if isinstance(findings, Findings):
        return findings.flat_rows()
    return map(_flat, findings)


def problem_findings(findings: Sequence[Finding], kept_cap: int = 0) -> Iterator[Finding]:
    """The findings not kept and the first `kept_cap` kept ones, in order; a kept one past the
    cap is skipped on its flat tuple, so no object is built for it."""
    kept = Verdict.KEPT.value
    shown = 0
    for row in flat_rows(findings):
        if row[4] == kept:
            shown += 1
            if shown > kept_cap:
                continue
        yield _unflat(row)


def tally_keys(findings: Sequence[Finding]) -> Iterator[tuple[str, str, str]]:
    """(conversation id, kind, verdict value) of each finding, read from its flat tuple."""
    return ((row[0], row[2], row[4]) for row in flat_rows(findings))


@dataclass(frozen=True, slots=True)
class ConversationResult:
    """Per-conversation counts for a conversation that crosses at least one boundary."""

    conversation_id: str
    source: Source
    boundaries: int
    counts: Counts


@dataclass(frozen=True, slots=True)
class KindResult:
    """Per-identifier-kind counts."""

    kind: str
    counts: Counts


@dataclass(frozen=True, slots=True)
class Gate:
    """The CI gate: the settings it was judged with, the outcome and the reasons for a failure."""

    min_ratio: float
    fail_on: tuple[str, ...]
    exit_zero: bool
    passed: bool
    reasons: tuple[str, ...] = ()

    @property
    def exit_code(self) -> int:
        """0 when the gate is met (or --exit-zero), 1 when it is not."""
        return 0 if self.passed or self.exit_zero else 1


@dataclass(frozen=True, slots=True)
class AuditReport:
    """Everything an audit found; the single input of every renderer."""

    findings: Sequence[Finding]  # a tuple, or Findings (some on disk) for big audits
    conversations: tuple[ConversationResult, ...]  # those with >= 1 boundary
    kinds: tuple[KindResult, ...]
    totals: Counts
    distribution: tuple[tuple[str, int], ...]  # (bin label, conversations) over audited ones
    conversations_total: int
    gate: Gate
    inputs: tuple[str, ...] = ()
    redacted: bool = False
    notes: tuple[str, ...] = field(default=())

    @property
    def exit_code(self) -> int:
        """The process exit code for this report (0 or 1; 2 never comes from a report)."""
        return self.gate.exit_code

    @property
    def audited_conversations(self) -> tuple[ConversationResult, ...]:
        """Conversations with at least one identifier audited (or unverified)."""
        return tuple(c for c in self.conversations if c.counts.audited or c.counts.unverified)


def ratio_bin(ratio: float) -> str:
    """The distribution bin label of one conversation's ratio."""
    if ratio >= 1.0:
        return BIN_LABELS[-1]
    return BIN_LABELS[min(int(ratio * 10), 9)]


def distribution(conversations: tuple[ConversationResult, ...]) -> tuple[tuple[str, int], ...]:
    """How many audited conversations fall in each ratio bin (every bin listed, maybe 0)."""
    counts = dict.fromkeys(BIN_LABELS, 0)
    for conv in conversations:
        ratio = conv.counts.ratio
        if ratio is not None:
            counts[ratio_bin(ratio)] += 1
    return tuple(counts.items())


def redact_key() -> bytes:
    """The HMAC key: $LEXKEEP_REDACT_KEY, else the documented default."""
    return (os.environ.get("LEXKEEP_REDACT_KEY") or DEFAULT_REDACT_KEY).encode("utf-8")


def redact_key_is_default() -> bool:
    """True when --redact hashes with the public default key ($LEXKEEP_REDACT_KEY unset or
    empty, as a CI secret that was never created is)."""
    return not os.environ.get("LEXKEEP_REDACT_KEY")


def redact_value(value: str, key: bytes) -> str:
    """A stable keyed hash standing for `value` (HMAC-SHA256, first 16 hex digits)."""
    digest = hmac.new(key, value.encode("utf-8"), hashlib.sha256).hexdigest()
    return f"redacted:{digest[:16]}"


def redact(report: AuditReport, key: bytes | None = None) -> AuditReport:
    """A copy of `report` with every identifier value and evidence value replaced by its hash."""
    key = key if key is not None else redact_key()

    digests: dict[str, str] = {}  # a value typed in many conversations is hashed once

    def digest(value: str) -> str:
        got = digests.get(value)
        if got is None:
            got = digests[value] = redact_value(value, key)
        return got

    def hashed(row: tuple[Any, ...]) -> tuple[Any, ...]:
        ev = row[11]  # FLAT_FIELDS: value at 3, evidence at 11 with `found` at 2
        if ev is not None:
            ev = (ev[0], ev[1], digest(ev[2]), *ev[3:])
        return (*row[:3], digest(row[3]), *row[4:11], ev, *row[12:])

    findings = Findings()
    findings.extend_flat(map(hashed, flat_rows(report.findings)))
    return replace(report, findings=findings, redacted=True)


# Reports allocate a few objects per identifier and no cycles (see core.collector).
gc_paused = paused
