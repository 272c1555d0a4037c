"""The audit report: one frozen object that every renderer takes.

The engine builds it, `redact` returns a copy with values hashed, and the renderers in
`lexkeep.audit.render` only read it. Nothing here touches the store.
"""

from __future__ import annotations

import hashlib
import hmac
import os
from dataclasses import dataclass, field, replace

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
    difference: str | None = None  # case | separator | truncated | extended | edit
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

    findings: tuple[Finding, ...]
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


def redact_value(value: str, key: bytes) -> str:
    """A stable keyed hash standing for `value` (HMAC-SHA256, first 16 hex digits)."""
    digest = hmac.new(key, value.encode("utf-8"), hashlib.sha256).hexdigest()
    return f"redacted:{digest[:16]}"


def redact(report: AuditReport, key: bytes | None = None) -> AuditReport:
    """A copy of `report` with every identifier value and evidence value replaced by its hash."""
    key = key if key is not None else redact_key()
    findings = []
    for f in report.findings:
        evidence = f.evidence
        if evidence is not None:
            evidence = replace(evidence, found=redact_value(evidence.found, key))
        findings.append(replace(f, value=redact_value(f.value, key), evidence=evidence))
    return replace(report, findings=tuple(findings), redacted=True)


# Reports allocate a few objects per identifier and no cycles (see core.collector).
gc_paused = paused
