"""Reader for lexkeep JSONL, the canonical format: one typed record per line (docs/formats.md)."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

from lexkeep.core.model import (
    ArgumentsKind,
    Boundary,
    BoundaryKind,
    Conversation,
    Format,
    Message,
    MessageKind,
    MessageStatus,
    Record,
    Role,
    Run,
    RunStatus,
    Skipped,
    Source,
    ToolCall,
    ToolResult,
)
from lexkeep.core.readers import JsonLine, type_of

TYPES = frozenset({"conversation", "run", "message", "tool_call", "tool_result", "compaction"})

_DEFAULT_KIND = {
    Role.USER: MessageKind.USER_TEXT,
    Role.ASSISTANT: MessageKind.ASSISTANT_TEXT,
    Role.SYSTEM: MessageKind.SYSTEM,
    Role.TOOL: MessageKind.TOOL_RESULT,
}
_ROLES = {r.value: r for r in Role}
_KINDS = {k.value: k for k in MessageKind}
_MSG_STATUS = {s.value: s for s in MessageStatus}
_RUN_STATUS = {s.value: s for s in RunStatus}
_ARG_KINDS = {k.value: k for k in ArgumentsKind}
_BOUNDARY_KINDS = {k.value: k for k in BoundaryKind}


class _Bad(Exception):
    """A record that cannot be used: reason and detail for its Skipped."""

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(detail)
        self.reason = reason
        self.detail = detail


def _req(value: dict[str, Any], key: str) -> str:
    got = value.get(key)
    if isinstance(got, str) and got:
        return got
    if isinstance(got, int) and not isinstance(got, bool):
        return str(got)
    if got is None:
        raise _Bad("missing_field", f"{value.get('type')} record without required {key!r}")
    raise _Bad("invalid_field", f"{key!r} must be a non-empty string")


def _opt_str(value: dict[str, Any], key: str) -> str | None:
    got = value.get(key)
    if got is None or isinstance(got, str):
        return got
    if isinstance(got, int | float) and not isinstance(got, bool):
        return str(got)
    raise _Bad("invalid_field", f"{key!r} must be a string")


def _enum(table: dict[str, Any], value: dict[str, Any], key: str, default: Any) -> Any:
    got = value.get(key)
    if got is None:
        return default
    try:
        return table[got]
    except (KeyError, TypeError):
        raise _Bad("invalid_field", f"{key!r}: unknown value {got!r}") from None


def _arguments(value: dict[str, Any], line: JsonLine) -> tuple[str, ArgumentsKind]:
    raw = value.get("arguments")
    if isinstance(raw, str):
        kind = ArgumentsKind.JSON_STRING
    elif raw is None:
        raw, kind = "", ArgumentsKind.JSON_STRING
    else:
        # An object (or array) is kept as its JSON text: the recorded value, serialised once,
        # with its numbers as the line writes them.
        kind = ArgumentsKind.ARRAY if isinstance(raw, list) else ArgumentsKind.OBJECT
        raw = line.json_text(raw)
    return raw, _enum(_ARG_KINDS, value, "arguments_kind", kind)


def _record(line: JsonLine, src: Source) -> Record:
    value = line.value
    kind = type_of(value)
    if kind == "message":
        role = _enum(_ROLES, value, "role", None)
        if role is None:
            raise _Bad("missing_field", "message record without required 'role'")
        text = value.get("text", "")
        if text is None:
            text = ""
        elif not isinstance(text, str):
            raise _Bad("invalid_field", "'text' must be a string")
        return Message(
            id=_req(value, "id"),
            conversation_id=_req(value, "conversation_id"),
            role=role,
            kind=_enum(_KINDS, value, "kind", _DEFAULT_KIND[role]),
            text=text,
            source=src,
            run_id=_opt_str(value, "run_id"),
            status=_enum(_MSG_STATUS, value, "status", MessageStatus.COMPLETED),
            time=_opt_str(value, "time"),
        )
    if kind == "tool_call":
        raw, arg_kind = _arguments(value, line)
        return ToolCall(
            call_id=_req(value, "id"),
            conversation_id=_req(value, "conversation_id"),
            name=_req(value, "name"),
            arguments_raw=raw,
            arguments_kind=arg_kind,
            source=src,
            message_id=_opt_str(value, "message_id"),
            time=_opt_str(value, "time"),
        )
    if kind == "tool_result":
        text = value.get("text", "")
        if not isinstance(text, str):
            text = line.json_text(text)  # its numbers as the line writes them
        return ToolResult(
            call_id=_req(value, "call_id"),
            conversation_id=_req(value, "conversation_id"),
            text=text,
            source=src,
            is_error=bool(value.get("is_error", False)),
        )
    if kind == "compaction":
        kept = value.get("kept_verbatim") or []
        if not isinstance(kept, list) or not all(isinstance(k, str) for k in kept):
            raise _Bad("invalid_field", "'kept_verbatim' must be a list of strings")
        return Boundary(
            id=_req(value, "id"),
            conversation_id=_req(value, "conversation_id"),
            kind=_enum(_BOUNDARY_KINDS, value, "kind", BoundaryKind.LOCAL),
            source=src,
            summary_text=_opt_str(value, "summary"),
            kept_verbatim=tuple(kept),
            trigger=_opt_str(value, "trigger"),
            time=_opt_str(value, "time"),
        )
    if kind == "run":
        status = _enum(_RUN_STATUS, value, "status", None)
        if status is None:
            raise _Bad("missing_field", "run record without required 'status'")
        return Run(
            id=_req(value, "id"),
            conversation_id=_req(value, "conversation_id"),
            status=status,
            source=src,
        )
    if kind == "conversation":
        return Conversation(
            id=_req(value, "id"),
            format=Format.LEXKEEP,
            source=src,
            parent_id=_opt_str(value, "parent_id"),
            title=_opt_str(value, "title"),
        )
    if kind is None:
        raise _Bad("missing_field", "record without 'type'")
    return Skipped(src, "unknown_type", f"unknown record type {kind!r}")


class LexkeepReader:
    """lexkeep JSONL: conversation, run, message, tool_call, tool_result, compaction records."""

    format = Format.LEXKEEP

    def sniff(self, head: list[Any]) -> int:
        """Count head values that are typed lexkeep records (not Codex/Claude envelopes)."""
        score = 0
        for value in head:
            if not isinstance(value, dict) or type_of(value) not in TYPES:
                continue
            if "payload" in value or "uuid" in value or "sessionId" in value:
                continue
            if "conversation_id" in value or type_of(value) == "conversation":
                score += 3
        return score

    def claims(self, value: Any) -> bool:
        """True when the one value `value` is, by itself, a lexkeep record, whatever file it
        is found in (the sniffer's test for one value)."""
        return self.sniff([value]) > 0

    def read(self, lines: Iterable[JsonLine | Skipped], path: str) -> Iterator[Record]:
        """Yield one record per line; bad records become fatal Skipped, unknown types not."""
        for item in lines:
            if isinstance(item, Skipped):
                yield item
                continue
            src = Source(path, item.line)
            try:
                yield _record(item, src)
            except _Bad as bad:
                yield Skipped(src, bad.reason, bad.detail, fatal=True)


READER = LexkeepReader()
