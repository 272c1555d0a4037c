"""Reader for OpenAI Codex CLI rollout files (all three eras) → lexkeep records.

Eras: *bare* (line 1 `{id, timestamp, instructions}`, then bare ResponseItems and
`{"record_type": ...}` sentinels), *wrapped* (`{timestamp, type, payload}`) and *newest* (the
same envelope plus `ordinal` and `metadata`, which are ignored). See docs/agent-formats.md.

Mapping, in short:
- `session_meta` (or the bare header) → Conversation; a sub-agent's parent is
  `source.subagent.thread_spawn.parent_thread_id`, else `forked_from_id`.
- `response_item` message → Message; user text is classified (AGENTS.md, `<environment_context>`
  … → INJECTED; compaction summary / bridge → SUMMARY; developer/system → SYSTEM). The
  `event_msg` user_message / agent_message views of the same text are dropped as duplicates
  (whichever view comes first is kept, so files with only one view still read fully).
- function_call / custom_tool_call / local_shell_call / tool_search_call / web_search_call →
  ToolCall with the arguments exactly as recorded; *_output → ToolResult. A call id seen
  before in the file with the same name and arguments is a `duplicate`; with other arguments
  it is yielded, and the ingest records it as an `id_conflict` (readers.same_call). So is a
  second output for a call id: the same text is a `duplicate`, other text an `id_conflict`
  (readers.result_digest).
- `compacted` → Boundary (local: readable summary + the real user messages of
  `replacement_history`; remote: opaque, summary None; legacy: no replacement_history).

Runs are not emitted: the ingest derives one run per real user message.
Message ids are `<conversation id>:L<line>` (stable when a grown file is read again).
"""

from __future__ import annotations

import re
from collections import deque
from collections.abc import Iterable, Iterator
from pathlib import PurePath
from typing import Any

from lexkeep.core.model import (
    Boundary,
    BoundaryKind,
    Conversation,
    Format,
    Message,
    MessageKind,
    Record,
    Role,
    Skipped,
    Source,
    ToolCall,
    ToolResult,
)
from lexkeep.core.read_responses import call_arguments, content_text, output_text
from lexkeep.core.readers import JsonLine, result_digest, same_call, type_of

# codex-rs/core/templates/compact/summary_prefix.md is one line; the summary follows a "\n".
SUMMARY_PREFIX = "Another language model started to solve this problem"
# Older builds (~Sept–Nov 2025) wrote one "bridge" user message instead of replacement_history.
BRIDGE_PREFIX = "You were originally given instructions from a user over one or more turns"
_BRIDGE_USERS_HEAD = "Here were the user messages:"

# User-role text that the harness injects (codex-rs `is_contextual_user_message`, plus older
# spellings). Compared against the left-stripped text.
INJECTED_PREFIXES = (
    "# AGENTS.md instructions",
    "<user_instructions>",
    "<environment_context",
    "<skills_instructions>",
    "<external_",
    "<user_shell_command>",
    "<turn_aborted>",
    "<subagent_notification>",
    "<codex_internal_context",
    "<recommended_plugins>",
    "<hook_prompt",
    "<INSTRUCTIONS>",
    "<permissions instructions>",
    "<collaboration_mode>",
    "<developer_instructions>",
)

ENVELOPE_TYPES = frozenset(
    {"session_meta", "response_item", "event_msg", "turn_context", "compacted"}
)
# Envelope types newer builds write that carry nothing for the timeline.
METADATA_TYPES = frozenset(
    {
        "turn_context",
        "inter_agent_communication",
        "inter_agent_communication_metadata",
        "token_usage_record",
        "world_state",
        "retained_context",
        "security_risk_score",
        "realtime_item",
    }
)
RESPONSE_ITEM_TYPES = frozenset(
    {
        "message",
        "reasoning",
        "function_call",
        "function_call_output",
        "custom_tool_call",
        "custom_tool_call_output",
        "local_shell_call",
        "local_shell_call_output",
        "web_search_call",
        "tool_search_call",
        "tool_search_output",
        "image_generation_call",
        "ghost_snapshot",
        "compaction",
        "compaction_summary",
        "context_compaction",
        "compaction_trigger",
        "configuration_update",
    }
)
_OUTPUT_TYPES = frozenset(
    {
        "function_call_output",
        "custom_tool_call_output",
        "local_shell_call_output",
        "tool_search_output",
    }
)
_UUID_RE = re.compile(
    r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}"
)
# How many unmatched texts of each view we remember for de-duplication (bounded memory).
_DEDUP_WINDOW = 64


def classify_user_text(text: str, *, subagent: bool = False) -> MessageKind:
    """What a Codex user-role text really is: only USER_TEXT is a person typing."""
    head = text.lstrip()
    if head.startswith(SUMMARY_PREFIX) or head.startswith(BRIDGE_PREFIX):
        return MessageKind.SUMMARY
    if head.startswith(INJECTED_PREFIXES):
        return MessageKind.INJECTED
    if subagent:
        # A sub-agent's "user" is the parent agent relaying its task, not a person.
        return MessageKind.INJECTED
    return MessageKind.USER_TEXT


def strip_summary_prefix(message: str) -> str:
    """The summary of a local compaction without Codex's one-line SUMMARY_PREFIX."""
    text = message.lstrip()
    if text.startswith(SUMMARY_PREFIX):
        _, sep, rest = text.partition("\n")
        return rest if sep else ""
    if text.startswith(BRIDGE_PREFIX):
        # bridge = users header, the user messages, SUMMARY_PREFIX, then the summary
        at = text.find(SUMMARY_PREFIX)
        if at >= 0:
            _, sep, rest = text[at:].partition("\n")
            return rest.lstrip("\n") if sep else ""
    return message


def _bridge_user_messages(message: str) -> tuple[str, ...]:
    """The user messages a legacy bridge message carried (one joined text), if any."""
    text = message.lstrip()
    if not text.startswith(BRIDGE_PREFIX):
        return ()
    start = text.find(_BRIDGE_USERS_HEAD)
    end = text.find(SUMMARY_PREFIX)
    if start < 0 or end < 0 or end <= start:
        return ()
    users = text[start + len(_BRIDGE_USERS_HEAD) : end].strip()
    return (users,) if users else ()


class _State:
    """Per-file reading state."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.conversation_id: str | None = None
        self.subagent = False
        self.has_parent = False
        self.start_time: str | None = None
        # de-duplication of event_msg vs response_item views: (role, text) not yet matched
        self.unmatched: dict[str, deque[tuple[str, str]]] = {
            "event": deque(maxlen=_DEDUP_WINDOW),
            "item": deque(maxlen=_DEDUP_WINDOW),
        }
        self.calls: dict[str, tuple[str, str]] = {}  # call id -> (name, raw arguments), first
        # call id -> result_digest of its first output
        self.results: dict[str, tuple[int, int]] = {}
        self.line: JsonLine | None = None  # the line being read

    def fallback_id(self) -> str:
        """Conversation id when no session_meta was seen: the uuid in the file name, or stem."""
        name = PurePath(self.path).name
        found = _UUID_RE.findall(name)
        if found:
            return found[-1].lower()
        stem = name.split(".")[0]
        return stem or "codex"

    def is_duplicate(self, view: str, role: str, text: str) -> bool:
        """True when the other view already produced this (role, text); else remember it."""
        key = (role, " ".join(text.split()))
        other = self.unmatched["item" if view == "event" else "event"]
        if key in other:
            other.remove(key)
            return True
        self.unmatched[view].append(key)
        return False


class CodexReader:
    """Codex CLI rollout JSONL (bare, wrapped and newest eras)."""

    format = Format.CODEX

    def sniff(self, head: list[Any]) -> int:
        """10 for wrapped-era envelopes, 7 for bare-era rollouts, else 0."""
        objs = [v for v in head if isinstance(v, dict)]
        if not objs:
            return 0
        if any(type_of(o) in ENVELOPE_TYPES and isinstance(o.get("payload"), dict) for o in objs):
            return 10
        if any("record_type" in o for o in objs):
            return 7
        first = objs[0]
        bare_header = "type" not in first and "id" in first and "timestamp" in first
        items = [o for o in objs[1:] if type_of(o) in RESPONSE_ITEM_TYPES]
        if bare_header and (items or "instructions" in first):
            return 7
        return 0

    def header_only(self, head: list[Any]) -> bool:
        """True when `head` is a bare-era rollout's header line alone: `sniff` needs a record
        after it, which a file just begun may not hold complete yet."""
        if len(head) != 1 or not isinstance(head[0], dict):
            return False
        first = head[0]
        return "type" not in first and "id" in first and "timestamp" in first

    def claims(self, value: Any) -> bool:
        """True when the one value `value` is, by itself, a Codex line (a wrapped-era envelope
        with a payload object), whatever file it is found in."""
        return (
            isinstance(value, dict)
            and type_of(value) in ENVELOPE_TYPES
            and isinstance(value.get("payload"), dict)
        )

    def read(self, lines: Iterable[JsonLine | Skipped], path: str) -> Iterator[Record]:
        """Yield records for one rollout file, in file order."""
        st = _State(path)
        for item in lines:
            if isinstance(item, Skipped):
                yield item
                continue
            src = Source(path, item.line)
            st.line = item
            try:
                yield from self._line(st, item.value, src)
            except Exception as exc:  # never crash on odd data
                yield Skipped(src, "malformed", f"{type(exc).__name__}: {exc}", fatal=True)

    # -- one line ---------------------------------------------------------------------------

    def _line(self, st: _State, value: Any, src: Source) -> Iterator[Record]:
        if not isinstance(value, dict):
            yield Skipped(src, "not_an_object", type(value).__name__, fatal=True)
            return
        kind = type_of(value)
        payload = value.get("payload")
        time = value.get("timestamp") if isinstance(value.get("timestamp"), str) else None
        if "record_type" in value and "payload" not in value:
            yield Skipped(src, "metadata", f"record_type {value.get('record_type')}")
            return
        if isinstance(kind, str) and isinstance(payload, dict):
            # Copied parent history at the top of a sub-agent / forked file predates its meta.
            if (
                kind != "session_meta"
                and st.has_parent
                and time is not None
                and st.start_time is not None
                and time < st.start_time
            ):
                yield Skipped(src, "copied_parent_history", kind)
                return
            if kind == "session_meta":
                yield from self._session_meta(st, payload, src, time)
            elif kind == "response_item":
                yield from self._response_item(st, payload, src, time)
            elif kind == "event_msg":
                yield from self._event(st, payload, src, time)
            elif kind == "compacted":
                yield from self._compacted(st, payload, src, time)
            elif kind in METADATA_TYPES:
                yield Skipped(src, "metadata", kind)
            else:
                yield Skipped(src, "unknown_type", kind)
            return
        if kind is None and "id" in value and st.conversation_id is None:
            yield from self._bare_header(st, value, src)
            return
        if isinstance(kind, str) and kind in RESPONSE_ITEM_TYPES:
            yield from self._response_item(st, value, src, None)
            return
        yield Skipped(src, "unknown_type", str(kind) if kind is not None else "no type")

    def _conversation(self, st: _State, src: Source) -> Iterator[Record]:
        """Open the conversation from the file name when no session_meta came first."""
        if st.conversation_id is None:
            st.conversation_id = st.fallback_id()
            yield Conversation(st.conversation_id, Format.CODEX, src)

    def _bare_header(self, st: _State, value: dict[str, Any], src: Source) -> Iterator[Record]:
        cid = value.get("id")
        if not isinstance(cid, str) or not cid:
            yield Skipped(src, "missing_id", "bare header without id", fatal=True)
            return
        st.conversation_id = cid
        yield Conversation(cid, Format.CODEX, src)

    def _session_meta(
        self, st: _State, payload: dict[str, Any], src: Source, time: str | None
    ) -> Iterator[Record]:
        if st.conversation_id is not None:
            # A forked child can hold a second session_meta (the parent's); keep the first.
            yield Skipped(src, "metadata", "repeated session_meta")
            return
        cid = payload.get("id")
        if not isinstance(cid, str) or not cid:
            yield Skipped(src, "missing_id", "session_meta without payload.id", fatal=True)
            return
        parent = None
        source = payload.get("source")
        if isinstance(source, dict) and "subagent" in source:
            st.subagent = True
            sub = source.get("subagent")
            spawn = sub.get("thread_spawn") if isinstance(sub, dict) else None
            if isinstance(spawn, dict) and isinstance(spawn.get("parent_thread_id"), str):
                parent = spawn["parent_thread_id"]
        if parent is None:
            for key in ("forked_from_id", "forked_from_process_id"):
                if isinstance(payload.get(key), str) and payload[key]:
                    parent = payload[key]
                    break
        st.conversation_id = cid
        st.has_parent = parent is not None
        # Compare envelope timestamps with each other (same RFC 3339 spelling on every line).
        st.start_time = time or (
            payload.get("timestamp") if isinstance(payload.get("timestamp"), str) else None
        )
        yield Conversation(cid, Format.CODEX, src, parent_id=parent)

    # -- response items ---------------------------------------------------------------------

    def _response_item(
        self, st: _State, p: dict[str, Any], src: Source, time: str | None
    ) -> Iterator[Record]:
        yield from self._conversation(st, src)
        cid = st.conversation_id
        assert cid is not None
        kind = type_of(p)
        if kind == "message":
            yield from self._message(st, p, src, time)
        elif kind == "reasoning":
            summary = p.get("summary")
            text = content_text(summary) if isinstance(summary, list) else ""
            if not text.strip():
                yield Skipped(src, "empty", "reasoning without readable summary")
                return
            yield Message(
                f"{cid}:L{src.line}",
                cid,
                Role.ASSISTANT,
                MessageKind.REASONING,
                text,
                src,
                time=time,
            )
        elif kind in (
            "function_call",
            "custom_tool_call",
            "local_shell_call",
            "tool_search_call",
            "web_search_call",
        ):
            yield from self._tool_call(st, p, src, time)
        elif kind in _OUTPUT_TYPES:
            call_id = p.get("call_id")
            if not isinstance(call_id, str) or not call_id:
                yield Skipped(src, "missing_id", f"{kind} without call_id", fatal=True)
                return
            text, is_error = output_text(p.get("output"), st.line)
            digest = result_digest(text)
            first = st.results.get(call_id)
            if first is None:
                st.results[call_id] = digest
            elif first == digest:
                yield Skipped(src, "duplicate", f"second output for {call_id}")
                return
            # Other text for a call given an output before is yielded all the same, for the
            # ingest to keep the first and record this one as left out (`id_conflict`).
            yield ToolResult(call_id, cid, text, src, is_error=is_error)
        elif kind in RESPONSE_ITEM_TYPES:
            # ghost snapshots, opaque compaction items, image generation, control items
            yield Skipped(src, "metadata", f"response_item {kind}")
        else:
            yield Skipped(src, "unknown_type", f"response_item {kind}")

    def _message(
        self, st: _State, p: dict[str, Any], src: Source, time: str | None
    ) -> Iterator[Record]:
        cid = st.conversation_id
        assert cid is not None
        role = p.get("role")
        text = content_text(p.get("content"))
        if role == "user":
            kind = classify_user_text(text, subagent=st.subagent)
            out_role = Role.USER
        elif role == "assistant":
            kind = MessageKind.ASSISTANT_TEXT
            out_role = Role.ASSISTANT
        elif role in ("developer", "system"):
            kind = MessageKind.SYSTEM
            out_role = Role.SYSTEM
        else:
            yield Skipped(src, "unknown_type", f"message role {role!r}")
            return
        if not text.strip():
            yield Skipped(src, "empty", f"{role} message without text")
            return
        if out_role in (Role.USER, Role.ASSISTANT) and st.is_duplicate("item", role, text):
            yield Skipped(src, "duplicate_view", f"{role} message also recorded as event_msg")
            return
        yield Message(f"{cid}:L{src.line}", cid, out_role, kind, text, src, time=time)

    def _tool_call(
        self, st: _State, p: dict[str, Any], src: Source, time: str | None
    ) -> Iterator[Record]:
        cid = st.conversation_id
        assert cid is not None
        kind = type_of(p)
        call_id = p.get("call_id")
        if not isinstance(call_id, str) or not call_id:
            if kind in ("function_call", "custom_tool_call", "tool_search_call"):
                yield Skipped(src, "missing_id", f"{kind} without call_id", fatal=True)
                return
            # local_shell_call.call_id and web_search_call ids are optional in the protocol
            other = p.get("id")
            call_id = other if isinstance(other, str) and other else f"{cid}:L{src.line}"
        name, raw, akind = call_arguments(p, st.line)
        first = st.calls.get(call_id)
        if first is not None and name is not None and same_call(*first, name, raw):
            yield Skipped(src, "duplicate", f"second call with id {call_id}")
            return
        if name is None:
            yield Skipped(src, "malformed", f"{kind} without name", fatal=True)
            return
        # A call id seen before with other arguments is yielded all the same, for the ingest
        # to keep the first and record this one as left out (`id_conflict`).
        st.calls.setdefault(call_id, (name, raw))
        yield ToolCall(call_id, cid, name, raw, akind, src, time=time)

    # -- events -----------------------------------------------------------------------------

    def _event(
        self, st: _State, p: dict[str, Any], src: Source, time: str | None
    ) -> Iterator[Record]:
        kind = type_of(p)
        if kind not in ("user_message", "agent_message"):
            # token counts, task start/complete, context_compacted, reasoning (a duplicate of
            # response_item reasoning), tool end events (duplicates of *_output items) …
            yield Skipped(src, "metadata", f"event_msg {kind}")
            return
        yield from self._conversation(st, src)
        cid = st.conversation_id
        assert cid is not None
        text = p.get("message")
        if not isinstance(text, str) or not text.strip():
            yield Skipped(src, "empty", f"event_msg {kind} without message")
            return
        role = "user" if kind == "user_message" else "assistant"
        if st.is_duplicate("event", role, text):
            yield Skipped(src, "duplicate_view", f"event_msg {kind} also recorded as response_item")
            return
        if role == "user":
            # Old builds tagged injected context on the event itself (`kind`).
            tag = p.get("kind")
            mkind = classify_user_text(text, subagent=st.subagent)
            if isinstance(tag, str) and tag not in ("plain", "") and mkind is MessageKind.USER_TEXT:
                mkind = MessageKind.INJECTED
            yield Message(f"{cid}:L{src.line}", cid, Role.USER, mkind, text, src, time=time)
        else:
            yield Message(
                f"{cid}:L{src.line}",
                cid,
                Role.ASSISTANT,
                MessageKind.ASSISTANT_TEXT,
                text,
                src,
                time=time,
            )

    # -- compaction -------------------------------------------------------------------------

    def _compacted(
        self, st: _State, p: dict[str, Any], src: Source, time: str | None
    ) -> Iterator[Record]:
        yield from self._conversation(st, src)
        cid = st.conversation_id
        assert cid is not None
        message = p.get("message") if isinstance(p.get("message"), str) else ""
        history = p.get("replacement_history")
        bid = f"{cid}:L{src.line}"
        if not isinstance(history, list):
            # Legacy: only the summary (possibly a bridge that embeds the user messages).
            if not message.strip():
                yield Boundary(bid, cid, BoundaryKind.REMOTE, src, None, (), None, time)
                return
            yield Boundary(
                bid,
                cid,
                BoundaryKind.LOCAL,
                src,
                strip_summary_prefix(message),
                _bridge_user_messages(message),
                None,
                time,
            )
            return
        items = [h for h in history if isinstance(h, dict)]
        opaque = any(type_of(h) in ("compaction", "compaction_summary") for h in items)
        # (role, text) of what the history kept in clear, in order: real user messages, and
        # assistant answers (kept verbatim by remote compaction only)
        kept: list[tuple[str, str]] = []
        for h in items:
            if type_of(h) != "message":
                continue
            text = content_text(h.get("content"))
            if h.get("role") == "user" and classify_user_text(text) is MessageKind.USER_TEXT:
                kept.append(("user", text))
            elif h.get("role") == "assistant" and text.strip():
                kept.append(("assistant", text))
        if opaque or not message.strip():
            # Remote: the server-side state is opaque; only what it kept in clear is readable.
            texts = tuple(t for r, t in kept if opaque or r == "user")
            yield Boundary(bid, cid, BoundaryKind.REMOTE, src, None, texts, None, time)
            return
        users = [t for r, t in kept if r == "user"]
        # Local: the last user message is the summary itself; drop it if it slipped through.
        if users and users[-1].strip() == message.strip():
            users.pop()
        yield Boundary(
            bid,
            cid,
            BoundaryKind.LOCAL,
            src,
            strip_summary_prefix(message),
            tuple(users),
            None,
            time,
        )


READER = CodexReader()
