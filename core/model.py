"""The one data model: what readers produce, the store keeps, and audit/compaction consume.

Readers emit these records in timeline order; the ingest assigns each a `position` in its
conversation (one ordering shared by messages, tool calls, tool results and boundaries).
"""

from __future__ import annotations

import copyreg
from dataclasses import dataclass, field, fields
from enum import StrEnum
from typing import Any

# Defined with the registry of readers, which the command line's --help reads without building
# the classes below (~20 ms); part of the data model all the same.
from lexkeep.core.formats import Format


class Role(StrEnum):
    """Who produced a message."""

    USER = "user"
    ASSISTANT = "assistant"
    SYSTEM = "system"
    TOOL = "tool"


class MessageKind(StrEnum):
    """What a message really is; only USER_TEXT is the user speaking."""

    USER_TEXT = "user_text"  # typed by a person: the only kind identifiers are taken from
    ASSISTANT_TEXT = "assistant_text"
    SUMMARY = "summary"  # a compaction summary, even when recorded with role user
    INJECTED = "injected"  # AGENTS.md, <environment_context>, system reminders, meta lines
    SYSTEM = "system"  # system / developer prompts
    REASONING = "reasoning"
    TOOL_RESULT = "tool_result"  # tool output carried as a message (e.g. OpenAI role tool)


class MessageStatus(StrEnum):
    """Lifecycle of one message."""

    COMPLETED = "completed"
    STREAMING = "streaming"
    INCOMPLETE = "incomplete"
    FAILED = "failed"


class RunStatus(StrEnum):
    """Lifecycle of one run (one request's execution)."""

    COMPLETED = "completed"
    PARTIAL = "partial"
    CLARIFY_PENDING = "clarify_pending"
    FAILED = "failed"
    CANCELLED = "cancelled"
    RUNNING = "running"


class ArgumentsKind(StrEnum):
    """How a tool call's arguments were recorded in the source."""

    JSON_STRING = "json_string"  # a string holding JSON (OpenAI, Codex function_call)
    OBJECT = "object"  # a JSON object (Claude Code, Anthropic tool_use.input)
    FREEFORM = "freeform"  # free text (Codex custom_tool_call.input)
    ARRAY = "array"  # an argv array (Codex local_shell_call.action.command)


class BoundaryKind(StrEnum):
    """Where a compaction boundary came from."""

    LOCAL = "local"  # summary written into the trace (Codex local compaction, lexkeep record)
    REMOTE = "remote"  # opaque server-side state (Codex remote / OpenAI compaction item)
    CLAUDE = "claude"  # Claude Code compact_boundary + isCompactSummary
    ANTHROPIC = "anthropic"  # Anthropic API `compaction` content block
    LEXKEEP = "lexkeep"  # a completed lexkeep compaction job


class Verdict(StrEnum):
    """Audit verdict for one identifier."""

    KEPT = "kept"
    ALTERED = "altered"
    MISSING = "missing"
    UNVERIFIED = "unverified"  # would be missing, but the message's scan was incomplete


@dataclass(frozen=True, slots=True)
class Source:
    """Where a record came from: file and 1-based line.

    A reader names the file as it was given (on the command line, '-' for standard input); a
    store on disk records it absolute, and reports show it from the current folder
    (core.paths).
    """

    file: str
    line: int


@dataclass(frozen=True, slots=True)
class Conversation:
    """A conversation a user can reopen; sub-agent conversations name their parent."""

    id: str
    format: Format
    source: Source
    parent_id: str | None = None
    title: str | None = None


@dataclass(frozen=True, slots=True)
class Run:
    """One request's execution inside a conversation."""

    id: str
    conversation_id: str
    status: RunStatus
    source: Source


@dataclass(frozen=True, slots=True)
class Message:
    """One message in a conversation's timeline."""

    id: str
    conversation_id: str
    role: Role
    kind: MessageKind
    text: str
    source: Source
    run_id: str | None = None
    status: MessageStatus = MessageStatus.COMPLETED
    time: str | None = None  # ISO-8601 as recorded
    # The last line the record was read from when it spans several (a Claude Code response
    # split over lines); 0: its own line only. A grown file's ingest updates the stored row of
    # a record that starts on a line read before and ends on a new one.
    end_line: int = 0


@dataclass(frozen=True, slots=True)
class ToolCall:
    """A tool call with its arguments exactly as recorded (`arguments_raw`)."""

    call_id: str
    conversation_id: str
    name: str
    arguments_raw: str
    arguments_kind: ArgumentsKind
    source: Source
    message_id: str | None = None
    time: str | None = None


@dataclass(frozen=True, slots=True)
class ToolResult:
    """What a tool returned, joined to its call by `call_id`."""

    call_id: str
    conversation_id: str
    text: str
    source: Source
    is_error: bool = False


@dataclass(frozen=True, slots=True)
class Boundary:
    """A compaction point found in a trace (or a completed lexkeep compaction)."""

    id: str
    conversation_id: str
    kind: BoundaryKind
    source: Source
    summary_text: str | None = None  # None when opaque (remote compaction)
    kept_verbatim: tuple[str, ...] = ()  # e.g. user messages in Codex replacement_history
    trigger: str | None = None  # auto | manual | None when unknown
    time: str | None = None
    end_line: int = 0  # as Message.end_line: a summary read from a later line


@dataclass(frozen=True, slots=True)
class Skipped:
    """A line a reader could not use, and why (`unknown_type` lines are counted, not errors)."""

    source: Source
    reason: str
    detail: str = ""
    fatal: bool = False  # True: the file is rejected unless --skip-invalid
    col: int | None = None


Record = Conversation | Run | Message | ToolCall | ToolResult | Boundary | Skipped


def _pickle_by_fields(cls: type) -> None:
    """Pickle `cls` as cls(*fields): a frozen slots dataclass otherwise unpickles through a
    Python-level __setstate__, about twice as slow: most of the cost of handing a
    file's records from a reading process to the writer (core/parallel.py)."""
    names = tuple(f.name for f in fields(cls))

    def reduce(obj: Any) -> tuple[type, tuple[Any, ...]]:
        return cls, tuple([getattr(obj, name) for name in names])

    copyreg.pickle(cls, reduce)


@dataclass(frozen=True, slots=True)
class Identifier:
    """An identifier-shaped token: its kind and the exact span of the original text."""

    kind: str
    value: str
    start: int
    end: int


@dataclass(frozen=True, slots=True)
class Extraction:
    """What the extractor found in one text; `complete` is False when the time budget ran out."""

    identifiers: tuple[Identifier, ...]
    complete: bool = True


@dataclass(frozen=True, slots=True)
class FileCounts:
    """Per-file ingest summary."""

    path: str
    format: str
    conversations: int = 0
    messages: int = 0
    tool_calls: int = 0
    boundaries: int = 0
    identifiers: int = 0
    skipped: dict[str, int] = field(default_factory=dict)
    # ingested | appended (a grown file's new lines) | unchanged | unrecognised (no trace) |
    # empty (nothing to read yet: an empty file, a header line alone)
    status: str = "ingested"
    truncated_last_line: bool = False
    # A JSON document (a whole-file array) that ends before it is complete, read with
    # skip_invalid: its complete values are stored, the rest is read by a later ingest.
    truncated_document: bool = False
    truncated_line: int | None = None  # that last line's number, when the file was read
    # (NUL bytes, the line after which they start) for a file ending in NUL bytes, as a machine
    # crash leaves: those bytes are not read.
    nul_tail: tuple[int, int] | None = None
    nul_tail_cut: int = 0  # ... after the first bytes of a line the crash cut (0: none)
    # Status "empty": the file holds a header line alone (a bare-era Codex rollout just begun).
    header_only: bool = False
    # (NUL bytes, the line after which they start, bytes of a line they cut) of each run of NUL
    # bytes inside the file that lines follow (a writer restarted after a crash and appended
    # them): the NUL bytes and the cut line are not read, the lines after them are.
    nul_gaps: tuple[tuple[int, int, int], ...] = ()
    # Of `messages`, `tool_calls` and `boundaries` (records read), how many were written:
    # fewer when the store held some already. None when not counted (a lean audit store).
    messages_added: int | None = None
    tool_calls_added: int | None = None
    boundaries_added: int | None = None
    # Records left out because their conversation holds their id with other content: how many,
    # and the first of them as text (None when there was none).
    conflicts: tuple[int, str | None] = (0, None)
    # The line of the file's first record skipped as `unknown_type` (None when there was none).
    unknown_type_line: int | None = None
    # The file's first line recorded as an ingest error (skipped by --skip-invalid), or None.
    invalid_line: int | None = None


for _cls in (
    Source,
    Conversation,
    Run,
    Message,
    ToolCall,
    ToolResult,
    Boundary,
    Skipped,
    Identifier,
    Extraction,
):
    _pickle_by_fields(_cls)
