"""Reader for Anthropic Messages logs: content blocks, tool_use/tool_result, `compaction` blocks.

Accepted shapes (per file, mixed freely):
- a request log with `messages` (and optional `system`, and an optional `response` message):
  one conversation per record, id from `id`/`conversation_id`/`session_id`, else the
  conversation of an earlier record whose history (and `system`) it sends again
  (requestlog.Resent), else `<log name>#<digest of the record>` (Resent.named), as for
  OpenAI files. Records that share an id repeat one conversation: only the messages no earlier
  record showed are read, numbered `<conversation>/<n>` by their place in its timeline
  (`lexkeep.core.requestlog`);
- one message per line (`{"role":..., "content":...}`, or an API response object with
  `"type":"message"`): one conversation per file, named after the file.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from functools import partial
from typing import Any

from lexkeep.core import read_responses as responses
from lexkeep.core.model import (
    ArgumentsKind,
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
from lexkeep.core.paths import log_name
from lexkeep.core.read_openai import (
    ANTHROPIC_BLOCKS,
    UNSENT_BLOCKS,
    CallIds,
    ConversationCallIds,
    content_text,
    conversation_key,
    file_stem,
    user_kind,
)
from lexkeep.core.readers import JsonLine, json_text, type_of
from lexkeep.core.requestlog import (
    Continued,
    RequestLog,
    Systems,
    fingerprint,
    given,
    resent_for,
)


def blocks(content: Any) -> list[Any]:
    """A message `content` (or a `system`) as a list of blocks: a string is one text block."""
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    return content if isinstance(content, list) else []


def message_print(msg: Any) -> bytes:
    """The fingerprint that tells a message sent again from a new one: its role and content
    (as blocks), without thinking blocks and without the null and empty keys of a block (an
    SDK's `citations: null`); a response and its copy in the next request are the same
    message."""
    if not isinstance(msg, dict):
        return fingerprint(msg)
    sent = [
        given(b) if isinstance(b, dict) else b
        for b in blocks(msg.get("content"))
        if not (isinstance(b, dict) and type_of(b) in UNSENT_BLOCKS)
    ]
    return fingerprint([msg.get("role"), sent])


def _compaction(msg: Any) -> bool:
    """True for a message holding a `compaction` block (the client dropped what it
    summarised)."""
    return isinstance(msg, dict) and any(
        isinstance(b, dict) and type_of(b) == "compaction" for b in blocks(msg.get("content"))
    )


def _input(raw: Any, line: JsonLine | None) -> tuple[str, ArgumentsKind]:
    if isinstance(raw, str):  # a streamed input_json_delta concatenation
        return raw, ArgumentsKind.JSON_STRING
    if raw is None:
        return "{}", ArgumentsKind.OBJECT
    return json_text(raw, line), ArgumentsKind.OBJECT


def read_message(
    msg: Any, mid: str, conv: str, src: Source, ids: CallIds, line: JsonLine | None
) -> Iterator[Record]:
    """Records of one Anthropic message (`line`: the JSON line it was decoded from): its text,
    then its tool calls (assistant) or its tool results, then its text (user)."""
    if not isinstance(msg, dict):
        yield Skipped(src, "invalid_message", f"message {mid} is not an object")
        return
    role = msg.get("role")
    if role not in ("user", "assistant"):
        yield Skipped(src, "unknown_role", f"message {mid}: unknown role {role!r}")
        return
    texts: list[str] = []
    after: list[Record] = []
    for j, block in enumerate(blocks(msg.get("content"))):
        if not isinstance(block, dict):
            continue
        btype = type_of(block)
        if btype == "text":
            text = block.get("text")
            if isinstance(text, str):
                texts.append(text)
        elif btype in ("tool_use", "server_tool_use"):
            raw, kind = _input(block.get("input"), line)
            given = block.get("id")
            call_id = ids.call(given) if isinstance(given, str) and given else f"{mid}/call{j}"
            name = block.get("name") if isinstance(block.get("name"), str) else ""
            after.append(ToolCall(call_id, conv, name, raw, kind, src, message_id=mid))
        elif btype == "tool_result" or (isinstance(btype, str) and btype.endswith("_tool_result")):
            call_id = block.get("tool_use_id")
            if isinstance(call_id, str) and call_id:
                after.append(
                    ToolResult(
                        ids.result(call_id),
                        conv,
                        content_text(block.get("content"), line),
                        src,
                        is_error=bool(block.get("is_error", False)),
                    )
                )
        elif btype == "compaction":
            summary = block.get("content")
            after.append(
                Boundary(
                    id=f"{mid}/compaction{j}",
                    conversation_id=conv,
                    kind=BoundaryKind.ANTHROPIC,
                    source=src,
                    summary_text=content_text(summary) if summary is not None else None,
                )
            )
    text = "\n".join(texts)
    if role == "assistant":
        # Assistant text first, then its tool calls; a compaction block precedes what follows.
        boundaries = [r for r in after if isinstance(r, Boundary)]
        yield from boundaries
        yield Message(mid, conv, Role.ASSISTANT, MessageKind.ASSISTANT_TEXT, text, src)
        yield from (r for r in after if not isinstance(r, Boundary))
    else:
        # Tool results come back in a user turn; only real text there is the user speaking.
        yield from after
        if texts:
            yield Message(mid, conv, Role.USER, user_kind(text), text, src)


def _system(system: Any, mid: str, conv: str, src: Source) -> Iterator[Record]:
    if system:
        text = content_text(system)
        yield Message(mid, conv, Role.SYSTEM, MessageKind.SYSTEM, text, src)


def _answer(value: dict[str, Any]) -> bool:
    """True when the record's `response` is a Messages API response (`"type": "message"`, role
    assistant): a request log whose requests hold only text is Anthropic by its answers."""
    response = value.get("response")
    return (
        isinstance(response, dict)
        and type_of(response) == "message"
        and response.get("role") == "assistant"
    )


class AnthropicReader:
    """Anthropic Messages: request logs with `messages`, or one message per line."""

    format = Format.ANTHROPIC
    continues = True  # read() takes `continued` (core.requestlog.Continued)

    # The OpenAI reader reads `messages` records of both (an Anthropic log whose first
    # requests hold only text and no response is detected as OpenAI chat): not another
    # format's lines there.
    read_also_by = frozenset({Format.OPENAI})

    def claims(self, value: Any) -> bool:
        """True when the one value `value` is, by itself, an Anthropic request-log line,
        whatever file it is found in: a record with a `messages` list (and no Codex payload)
        one of whose messages, or its `response`, holds a block only Anthropic writes
        (`tool_use`, `tool_result`, `thinking`, `compaction`…)."""
        if not isinstance(value, dict) or "payload" in value:
            return False
        value = responses.unwrapped(value)  # {"request": …, "response": …}
        messages = value.get("messages")
        if not isinstance(messages, list):
            return False
        response = value.get("response")
        sample = [*messages, response] if isinstance(response, dict) else messages
        return any(
            isinstance(b, dict) and type_of(b) in ANTHROPIC_BLOCKS
            for m in sample
            if isinstance(m, dict) and isinstance(m.get("content"), list)
            for b in m["content"]
        )

    def sniff(self, head: list[Any]) -> int:
        """Score values whose content blocks are Anthropic-only (tool_use, compaction…), or
        requests answered by a Messages API response."""
        score = 0
        for value in head:
            if not isinstance(value, dict):
                continue
            value = responses.unwrapped(value)  # {"request": …, "response": …}
            msgs = value.get("messages")
            sample = msgs[:50] if isinstance(msgs, list) else [value]
            if isinstance(value.get("response"), dict):
                sample = [*sample, value["response"]]
            if msgs is None and ("conversation_id" in value or "content" not in value):
                # lexkeep records carry conversation_id and `text`, never `content`; a request
                # log may carry conversation_id too, as its id (docs/formats.md)
                continue
            if type_of(value) == "message" and value.get("role") == "assistant":
                score += 6
                continue
            types = {
                type_of(b)
                for m in sample
                if isinstance(m, dict)
                for b in (m.get("content") if isinstance(m.get("content"), list) else [])
                if isinstance(b, dict)
            }
            if types & ANTHROPIC_BLOCKS or (isinstance(msgs, list) and _answer(value)):
                score += 6
            elif isinstance(msgs, list) and "system" in value and "model" in value:
                # A top-level system prompt: never in an OpenAI chat request (its system
                # prompt is a message), so it outweighs text-only messages there (3), not an
                # OpenAI tool call (5).
                score += 4
        return score

    def read(
        self,
        lines: Iterable[JsonLine | Skipped],
        path: str,
        continued: Continued | None = None,
    ) -> Iterator[Record]:
        """Yield a Conversation and its timeline per request log, or per file of messages.

        `continued`: what earlier files of the same ingest showed, as for OpenAI logs."""
        stem = file_stem(path)
        logname = log_name(path)  # conversations without ids: <logname>#<first record>
        index = 0
        file_conv_started = False
        file_ids = CallIds()  # messages per line: the whole file is one conversation
        shared = Continued() if continued is None else continued
        log = shared.part("anthropic.log", RequestLog)  # requests repeat their conversation
        calls = shared.part("anthropic.calls", ConversationCallIds)
        # conversations whose system prompt was read (those without an id: in `resent`)
        systems = shared.part("anthropic.systems", Systems)
        # requests without ids: their conversations, by what they resend (in this file and
        # the earlier files of its rotated log)
        resent = resent_for(shared, "anthropic", path)
        # Where each conversation starts: a later request naming it again keeps that place.
        begins: dict[str, Source] = {}
        for item in lines:
            if isinstance(item, Skipped):
                yield item
                continue
            value = responses.unwrapped(item.value)  # {"request": …, "response": …}
            src = Source(path, item.line)
            msgs = value.get("messages")
            if isinstance(msgs, list):
                key = conversation_key(value)
                conv = key or f"{stem}#{index}"
                index += 1
                response = value.get("response")
                if isinstance(response, dict):
                    msgs = [*msgs, response]
                prints = [message_print(m) for m in msgs]
                sent = len(prints) - isinstance(response, dict)
                seed = b""
                if key is None:  # the history the request sends again names the conversation
                    seed = fingerprint(blocks(value.get("system")))
                    # A new one is named after the record, or as an earlier lexkeep
                    # numbered the file (Continued.numbered).
                    new = (
                        partial(resent.named, logname, item.value)
                        if shared.numbered is None
                        else f"{shared.numbered}#{index - 1}"
                    )
                    conv = resent.conversation(prints[:sent], seed, new)
                yield Conversation(conv, Format.ANTHROPIC, begins.setdefault(conv, src))
                if key is not None:  # other records may go on with it, in later files too
                    shared.meet("anthropic", conv)
                read = systems if key is not None else resent.extra(conv, "system", Systems)
                if conv not in read and value.get("system"):
                    read.add(conv)  # later requests repeat it (and would store it once)
                    yield from _system(value["system"], f"{conv}/system", conv, src)
                # Other records may repeat the conversation so far: only the messages none
                # of them showed are new (requestlog).
                if key is not None:
                    start, first = log.new_messages(conv, prints)
                    ids = calls.setdefault(conv, CallIds())
                else:
                    start, first = resent.log.new_messages(conv, prints)
                    ids = resent.extra(conv, "calls", CallIds)
                    restart = max((n for n, m in enumerate(msgs) if _compaction(m)), default=0)
                    resent.keep(conv, prints, (sent, len(prints)), seed, restart)
                for k, msg in enumerate(msgs[start:], first):
                    yield from read_message(msg, f"{conv}/{k}", conv, src, ids, item)
            elif value.get("role") in ("user", "assistant"):
                index += 1
                if not file_conv_started:
                    file_conv_started = True
                    yield Conversation(stem, Format.ANTHROPIC, src)
                mid = value.get("id") if isinstance(value.get("id"), str) else None
                yield from read_message(
                    value, mid or f"{stem}/L{item.line}", stem, src, file_ids, item
                )
            else:
                index += 1
                yield Skipped(src, "unknown_type", "no `messages` or `role`")


READER = AnthropicReader()
