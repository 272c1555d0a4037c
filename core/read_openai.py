"""Reader for OpenAI traces: chat `messages`, tau-bench `traj`, and Responses API items.

Accepted shapes (per file, mixed freely):
- a record with a `messages` (or tau-bench `traj`) list: one conversation per record — one per
  JSONL line, or one per element of a top-level JSON array; a logged Chat Completions
  `response` (`choices[0].message`) is the list's last message, and a call logged as
  `{"request": {"messages": …}, "response": …}` is read as that record;
- a bare chat message per line (`{"role":..., "content":...}`): all of them form one
  conversation named after the file;
- Responses API request logs (`input` and/or `output` items, also wrapped as
  `{"request": …, "response": …}`), streamed responses (one event per line) and Responses
  items one per line (a session dump): read by `lexkeep.core.read_responses`, see its docstring;
- Anthropic Messages requests (detected as chat when their first requests hold only text): a
  message holding an Anthropic-only block is read by `lexkeep.core.read_anthropic`, and a
  top-level `system` is the conversation's system prompt, read once.

Conversation id: the record's `id`, `conversation_id` or `session_id`; otherwise, for a
`messages` record that sends an earlier record's history again, that record's conversation
(requestlog.Resent), else `<log name>#<digest of the record>` (Resent.named: the same on
re-reads, appends and logrotate's renamed copies); a tau-bench run (`traj`) with no id is
`<file name>#<n>` with n the 0-based index of the record in the file (stable across re-reads
and appends because the whole file is read again). Message ids are
`<conversation>/<index in its messages list>` (`<conversation>/L<line>` for bare messages per
line). Records of one conversation (a request log) repeat it: only the messages no earlier
record showed are read, numbered by their place in the conversation's timeline
(`lexkeep.core.requestlog`).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from functools import partial
from pathlib import PurePath
from typing import TYPE_CHECKING, Any

from lexkeep.core import read_responses as responses
from lexkeep.core.jsonnumbers import compact_text
from lexkeep.core.model import (
    ArgumentsKind,
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
from lexkeep.core.readers import JsonLine, type_of
from lexkeep.core.requestlog import (
    Continued,
    RequestLog,
    Systems,
    fingerprint,
    given,
    resent_for,
)

if TYPE_CHECKING:
    from types import ModuleType

_ROLES = {"user", "assistant", "system", "developer", "tool", "function"}
# Block types only Anthropic content uses (OpenAI parts are text/image_url/input_audio…).
ANTHROPIC_BLOCKS = frozenset(
    {
        "tool_use",
        "tool_result",
        "compaction",
        "thinking",
        "redacted_thinking",
        "server_tool_use",
        "web_search_tool_result",
        "document",
        "search_result",
    }
)
# Text a harness injects into a user turn; it must never be taken for the user speaking.
INJECTED_PREFIXES = ("<system-reminder>", "<environment_context>", "<user_instructions>")


def file_stem(path: str) -> str:
    """The file name used in derived ids: base name without .gz ('-' reads as 'stdin')."""
    if path == "-":
        return "stdin"
    name = PurePath(path).name
    return name.removesuffix(".gz")


def conversation_key(value: dict[str, Any]) -> str | None:
    """The record's own conversation id (`id`, `conversation_id`, `session_id`), if any."""
    for key in ("id", "conversation_id", "session_id"):
        got = value.get(key)
        if isinstance(got, str) and got:
            return got
        if isinstance(got, int) and not isinstance(got, bool):
            return str(got)
    return None


def content_text(content: Any, line: JsonLine | None = None) -> str:
    """Text of a message `content`: a string, or the text of a list of parts; any other value
    as its JSON text (its numbers as `line` writes them, when given: JsonLine.json_text)."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for part in content:
            if isinstance(part, str):
                parts.append(part)
            elif isinstance(part, dict):
                text = part.get("text")
                if isinstance(text, str):
                    parts.append(text)
        return "\n".join(parts)
    return line.json_text(content) if line is not None else compact_text(content)


def user_kind(text: str) -> MessageKind:
    """USER_TEXT unless the text is harness-injected context."""
    return (
        MessageKind.INJECTED
        if text.lstrip().startswith(INJECTED_PREFIXES)
        else MessageKind.USER_TEXT
    )


def _arguments(raw: Any, line: JsonLine | None) -> tuple[str, ArgumentsKind]:
    if isinstance(raw, str):
        return raw, ArgumentsKind.JSON_STRING
    if raw is None:
        return "", ArgumentsKind.JSON_STRING
    # An object is kept as its JSON text, numbers as the line writes them (JsonLine.json_text).
    text = line.json_text(raw) if line is not None else compact_text(raw)
    return text, ArgumentsKind.OBJECT


def _is_message(value: Any) -> bool:
    return isinstance(value, dict) and value.get("role") in _ROLES


def _answer(value: dict[str, Any]) -> dict[str, Any] | None:
    """The message a logged response answered with: a Chat Completions `choices[0].message`,
    or an Anthropic Messages response (read by the OpenAI reader when its requests held only
    text) as the message a client sends back, its role and content."""
    answer = responses.chat_answer(value)
    response = value.get("response")
    if (
        answer is None
        and isinstance(response, dict)
        and type_of(response) == "message"
        and response.get("role") == "assistant"
        and "content" in response
    ):
        answer = {"role": "assistant", "content": response["content"]}
    return answer


def anthropic_blocks(content: Any) -> bool:
    """True when a message `content` holds a block only Anthropic writes (`tool_use`,
    `tool_result`, `compaction`, `thinking`…): the OpenAI reader reads such a message as the
    Anthropic reader does, so that a Messages API log detected as OpenAI chat (its first
    requests held only text) loses none of its tool calls."""
    return isinstance(content, list) and any(
        isinstance(b, dict)
        and (type_of(b) in ANTHROPIC_BLOCKS or str(type_of(b)).endswith("_tool_result"))
        for b in content
    )


def _anthropic() -> ModuleType:
    """The Anthropic reader's module (it imports this one: not imported at the top)."""
    from lexkeep.core import read_anthropic

    return read_anthropic


def _compaction(msg: Any) -> bool:
    """True for a Responses compaction item in a chat list, or an Anthropic message holding a
    `compaction` block (the client dropped what it summarised)."""
    if not isinstance(msg, dict):
        return False
    if responses.is_item(msg):
        return type_of(msg) in responses.COMPACTION_TYPES
    content = msg.get("content")
    return anthropic_blocks(content) and any(
        isinstance(b, dict) and type_of(b) == "compaction" for b in content
    )


def _messages_of(value: dict[str, Any]) -> list[Any] | None:
    for key in ("messages", "traj"):
        got = value.get(key)
        if isinstance(got, list):
            return got
    return None


class CallIds:
    """The tool call ids of one conversation, each made unique, and the call a result answers.

    OpenAI-compatible servers often number calls per turn (`call_0` in every turn): the store
    keeps one call per id and conversation, so a later `call_0` and its result were left out
    as already stored. The n-th call with one id is `ID#n` (n >= 2); a result answers the latest
    call with its id. Counting from the start of the message list (or of the file, for bare
    messages) keeps the ids the same on every read, and a request log that repeats the history
    so far gives its calls the same ids each time.
    """

    def __init__(self) -> None:
        self._count: dict[str, int] = {}
        self._latest: dict[str, str] = {}

    def call(self, call_id: str) -> str:
        """The stored id of the next call that carries `call_id`."""
        n = self._count.get(call_id, 0) + 1
        self._count[call_id] = n
        stored = call_id if n == 1 else f"{call_id}#{n}"
        self._latest[call_id] = stored
        return stored

    def result(self, call_id: str) -> str:
        """The stored id of the call a result with `call_id` answers."""
        return self._latest.get(call_id, call_id)

    def dump(self) -> dict[str, Any]:
        """The counts and latest ids as a JSON value (`loaded` takes it back)."""
        return {"count": dict(self._count), "latest": dict(self._latest)}

    @classmethod
    def loaded(cls, data: Any) -> CallIds:
        """Call ids as `dump` gave them."""
        ids = cls()
        if isinstance(data, dict):
            ids._count = dict(data.get("count") or {})
            ids._latest = dict(data.get("latest") or {})
        return ids


class ConversationCallIds(dict[str, CallIds]):
    """The call ids of each conversation of a request log (a core.requestlog.Kept part)."""

    def dump(self, conversation: str) -> dict[str, Any] | None:
        """The conversation's call ids as a JSON value, None when it has none."""
        ids = self.get(conversation)
        return None if ids is None else ids.dump()

    def load(self, conversation: str, data: Any) -> None:
        """Take back what `dump` gave."""
        self[conversation] = CallIds.loaded(data)


# Blocks a client may leave out when it sends an Anthropic answer back: the API ignores the
# thinking of earlier turns.
UNSENT_BLOCKS = frozenset({"thinking", "redacted_thinking"})


def _sent_content(content: Any) -> Any:
    """What of a message `content` tells it apart (`message_print`): a list of parts without
    thinking blocks and without their null and empty keys, one text part as its text (a
    client may send an answer back as a string or as the part it came as); None for none."""
    if isinstance(content, list):
        parts = [
            given(p) if isinstance(p, dict) else p
            for p in content
            if not (isinstance(p, dict) and type_of(p) in UNSENT_BLOCKS)
        ]
        if len(parts) == 1:
            part = parts[0]
            if isinstance(part, str):
                return part
            if (
                isinstance(part, dict)
                and part.get("type") == "text"
                and isinstance(part.get("text"), str)
                and part.keys() <= {"type", "text", "cache_control"}
            ):
                return part["text"]
        content = parts
    return content or None  # "" and [] are no content, as null is


def message_print(msg: Any) -> bytes:
    """The fingerprint that tells a message sent again from a new one: the whole message,
    without keys whose value is null or an empty list (a response's `refusal: null` and
    `annotations: []` may be left out), its content as `_sent_content` has it."""
    if isinstance(msg, dict):
        content = msg.get("content")
        msg = given(msg)
        if content == "" or isinstance(content, list):  # a string (most) counts as it is
            sent = _sent_content(content)
            if sent is None:
                msg.pop("content", None)
            else:
                msg["content"] = sent
    return fingerprint(msg)


def read_messages(
    messages: list[Any],
    conv: str,
    src: Source,
    line: JsonLine | None = None,
    log: RequestLog | None = None,
    ids: CallIds | None = None,
    prints: list[bytes] | None = None,
) -> Iterator[Record]:
    """Records of one OpenAI chat message list, ids `<conv>/<index>`; `line` is the line they
    were decoded from. With `log` (and `ids`, the conversation's call ids), only the messages
    no earlier list of `conv` showed, numbered by their place in its timeline (requestlog);
    `prints` are the messages' `message_print`s, when known."""
    start = first = 0
    if log is not None:
        if prints is None:
            prints = [message_print(m) for m in messages]
        start, first = log.new_messages(conv, prints)
    ids = CallIds() if ids is None else ids
    for index, msg in enumerate(messages[start:], first):
        yield from _message(msg, f"{conv}/{index}", conv, src, ids, line)


def _message(
    msg: Any, mid: str, conv: str, src: Source, ids: CallIds, line: JsonLine | None = None
) -> Iterator[Record]:
    if not isinstance(msg, dict):
        yield Skipped(src, "invalid_message", f"message {mid} is not an object")
        return
    if responses.is_item(msg) and type_of(msg) != "message":
        # A Responses item in a chat list (function_call, its output, a compaction item…).
        yield from responses.read_item(msg, mid, conv, src, ids, line, user_kind)
        return
    role = msg.get("role")
    if role in ("user", "assistant") and anthropic_blocks(msg.get("content")):
        # An Anthropic message (tool_use / tool_result blocks…) in a log read as OpenAI chat.
        yield from _anthropic().read_message(msg, mid, conv, src, ids, line)
        return
    text = content_text(msg.get("content"), line)
    if role == "user":
        yield Message(mid, conv, Role.USER, user_kind(text), text, src)
    elif role in ("system", "developer"):
        yield Message(mid, conv, Role.SYSTEM, MessageKind.SYSTEM, text, src)
    elif role == "assistant":
        yield Message(mid, conv, Role.ASSISTANT, MessageKind.ASSISTANT_TEXT, text, src)
        calls = msg.get("tool_calls") or []
        if isinstance(calls, list):
            for j, call in enumerate(calls):
                if not isinstance(call, dict):
                    continue
                given = call.get("id")
                # an empty id is no id: several of them would be one call in the store
                call_id = ids.call(given) if isinstance(given, str) and given else f"{mid}/call{j}"
                if type_of(call) == "custom" and isinstance(call.get("custom"), dict):
                    fn = call["custom"]
                    raw, akind = content_text(fn.get("input")), ArgumentsKind.FREEFORM
                else:
                    fn = call.get("function") if isinstance(call.get("function"), dict) else {}
                    raw, akind = _arguments(fn.get("arguments"), line)
                name = fn.get("name") if isinstance(fn.get("name"), str) else ""
                yield ToolCall(call_id, conv, name, raw, akind, src, message_id=mid)
        legacy = msg.get("function_call")
        if isinstance(legacy, dict):  # deprecated single function_call of old logs
            raw, akind = _arguments(legacy.get("arguments"), line)
            name = legacy.get("name") if isinstance(legacy.get("name"), str) else ""
            yield ToolCall(f"{mid}/function_call", conv, name, raw, akind, src, message_id=mid)
    elif role in ("tool", "function"):
        call_id = msg.get("tool_call_id")
        if isinstance(call_id, str) and call_id:
            yield ToolResult(ids.result(call_id), conv, text, src)
        else:
            yield Message(mid, conv, Role.TOOL, MessageKind.TOOL_RESULT, text, src)
    else:
        yield Skipped(src, "unknown_role", f"message {mid}: unknown role {role!r}")


class OpenAIReader:
    """OpenAI chat: `messages`/`traj` conversations, or one chat message per line."""

    format = Format.OPENAI
    continues = True  # read() takes `continued` (core.requestlog.Continued)

    def claims(self, value: Any) -> bool:
        """True when the one value `value` is, by itself, an OpenAI request-log line, whatever
        file it is found in: a Responses request log (wrapped or not), an event of a streamed
        response, or a chat record whose messages hold a `tool_calls` list or a `tool` result
        (no other format writes either). Bare Responses items are not claimed: a bare-era
        Codex rollout is made of them."""
        if not isinstance(value, dict):
            return False
        if responses.is_request_log(value) or responses.is_stream_event(value):
            return True
        value = responses.unwrapped(value)  # a Chat Completions call logged as a wrapper
        messages = value.get("messages")
        if not isinstance(messages, list) or "payload" in value:
            return False
        answer = responses.chat_answer(value)
        if answer is not None:
            messages = [*messages, answer]
        return any(
            isinstance(m, dict)
            and (
                isinstance(m.get("tool_calls"), list)
                or (m.get("role") == "tool" and "tool_call_id" in m)
            )
            for m in messages
        )

    def sniff(self, head: list[Any]) -> int:
        """Score records holding OpenAI chat messages (tool_calls / role tool weigh most) or
        Responses items and request logs."""
        score = 0
        codex_items = responses.codex_bare_header(head)  # bare-era Codex: items are Codex's
        for value in head:
            if not isinstance(value, dict):
                continue
            got = responses.sniff_value(value)
            if got and not (codex_items and responses.is_item(value)):
                score += got
                continue
            value = responses.unwrapped(value)  # a Chat Completions call logged as a wrapper
            if isinstance(value.get("traj"), list):
                score += 5
                continue
            msgs = value.get("messages")
            answer = responses.chat_answer(value)
            if isinstance(msgs, list) and answer is not None:
                msgs = [*msgs[:49], answer]
            sample = msgs[:50] if isinstance(msgs, list) else [value]
            listed = isinstance(msgs, list)  # a chat list may hold Responses items too
            if not sample or not all(
                _is_message(m) or (listed and responses.is_item(m)) for m in sample
            ):
                continue
            if any("tool_calls" in m or m.get("role") == "tool" for m in sample):
                score += 5
            elif all(isinstance(m.get("content"), str | None) for m in sample):
                score += 3
            else:
                score += 1
        return score

    def read(
        self,
        lines: Iterable[JsonLine | Skipped],
        path: str,
        continued: Continued | None = None,
    ) -> Iterator[Record]:
        """Yield a Conversation and its timeline per record (see the module docstring).

        `continued` holds what earlier files of the same ingest showed of the conversations
        they share with this one (a rotated request log, per-day files): their requests go on
        from there, and this file's are kept there for the next files."""
        stem = file_stem(path)
        logname = log_name(path)  # conversations without ids: <logname>#<first record>
        index = 0
        file_conv_started = False
        file_ids = CallIds()  # bare messages: the whole file is one conversation
        shared = Continued() if continued is None else continued
        log = shared.part("openai.log", RequestLog)  # records sharing an id repeat it so far
        calls = shared.part("openai.calls", ConversationCallIds)
        # Anthropic requests read as chat: conversations whose top-level `system` was read
        # (those without an id: in `resent`)
        systems = shared.part("openai.systems", Systems)
        # Responses request logs: previous_response_id chains
        chains = shared.part("openai.chains", responses.Chains)
        stream = responses.Stream()  # a streamed response's events, and its request
        started: set[str] = set()
        # chat requests without ids: their conversations, by what they resend (in this file
        # and the earlier files of its rotated log)
        resent = resent_for(shared, "openai", path)
        # Where each conversation starts: a later request naming it again keeps that place.
        begins: dict[str, Source] = {}
        # Responses conversations nothing names (no conversation, no response id): no other
        # record or file goes on with them.
        unnamed: set[str] = set()

        def named(record: Any, n: int) -> str:
            """A Responses conversation no id names, begun by `record`, the file's n-th: named
            after it, or as an earlier lexkeep numbered the file (Continued.numbered)."""
            if shared.numbered is None:
                conv = resent.named(logname, record)
            else:
                conv = f"{shared.numbered}#{n}"
            unnamed.add(conv)
            return conv

        last_line, on_line = 0, 0
        for item in lines:
            if isinstance(item, Skipped):
                yield item
                continue
            value = responses.unwrapped(item.value)  # {"request": …, "response": …}
            src = Source(path, item.line)
            # Values of a JSON array written on one line all start on that line: the second
            # one there is L<line>.2, so that it is not taken for a copy of the first.
            on_line = on_line + 1 if item.line == last_line else 1
            last_line = item.line
            at = f"L{item.line}" if on_line == 1 else f"L{item.line}.{on_line}"
            messages = _messages_of(value)
            if messages is not None:
                answer = _answer(value)
                if answer is not None:  # a logged Chat Completions response: the list's last
                    messages = [*messages, answer]
                key = conversation_key(value)
                conv = key or f"{stem}#{index}"
                index += 1
                prints: list[bytes] = []
                # An Anthropic request read as chat keeps its system prompt outside the list.
                system = value.get("system") if "messages" in value else None
                seed = b"" if system is None else fingerprint(_anthropic().blocks(system))
                if key is None and isinstance(value.get("messages"), list):
                    # A request log without ids: the history the request sends again names
                    # the conversation (requestlog.Resent); a tau-bench `traj` is one run.
                    prints = [message_print(m) for m in messages]
                    sent = len(prints) - (answer is not None)
                    # A new one is named after the record, or as an earlier lexkeep
                    # numbered the file (Continued.numbered).
                    new = (
                        partial(resent.named, logname, item.value)
                        if shared.numbered is None
                        else f"{shared.numbered}#{index - 1}"
                    )
                    conv = resent.conversation(prints[:sent], seed, new)
                title = value.get("title") if isinstance(value.get("title"), str) else None
                if title is None and "task_id" in value:
                    title = f"task {value['task_id']} trial {value.get('trial', 0)}"
                yield Conversation(conv, Format.OPENAI, begins.setdefault(conv, src), title=title)
                if key is not None:
                    shared.meet("openai", conv)
                read = systems if key is not None else resent.extra(conv, "system", Systems)
                if system and conv not in read:
                    read.add(conv)  # later requests send it again
                    text = content_text(system, item)
                    yield Message(
                        f"{conv}/system", conv, Role.SYSTEM, MessageKind.SYSTEM, text, src
                    )
                if prints:
                    ids = resent.extra(conv, "calls", CallIds)
                    yield from read_messages(messages, conv, src, item, resent.log, ids, prints)
                    restart = max((n for n, m in enumerate(messages) if _compaction(m)), default=0)
                    resent.keep(conv, prints, (sent, len(prints)), seed, restart)
                elif key is None:  # a conversation no other record can repeat
                    yield from read_messages(messages, conv, src, item)
                else:
                    ids = calls.setdefault(conv, CallIds())
                    yield from read_messages(messages, conv, src, item, log, ids)
            elif responses.is_request_log(value):
                prev = responses.previous_response_id(value)
                if prev is not None and not chains.knows(prev):
                    shared.find("openai", prev)  # logged in a file an earlier ingest read
                conv = chains.conversation(value, partial(named, item.value, index))
                if conv not in unnamed:  # later files may go on with it
                    shared.meet("openai", conv)
                index += 1
                stream.ended = True  # a stream after it is another response
                if conv not in started:
                    started.add(conv)
                    yield Conversation(conv, Format.OPENAI, src)
                ids = calls.setdefault(conv, CallIds())
                yield from responses.read_request_log(value, conv, src, ids, item, user_kind, log)
                answered = responses.response_output(value) is not None
                # A request logged before its streamed response: the stream is its conversation's.
                stream.waiting = conv if value.get("stream") is True and not answered else None
                stream.whole = responses.request_scope(value, conv, item.line) == conv
            elif responses.is_stream_event(value):
                response = value.get("response")
                fallback = partial(named, item.value, index)
                if isinstance(response, dict):
                    prev = responses.previous_response_id(response)
                    if prev is not None and not chains.knows(prev):
                        shared.find("openai", prev)
                    conv = stream.begin(response, chains, fallback, responses.ends_stream(value))
                elif stream.conv is None:  # items of a stream whose start the log does not hold
                    conv = stream.begin({}, chains, fallback)
                else:
                    conv = stream.conv
                if conv not in unnamed:
                    shared.meet("openai", conv)
                index += 1
                found = stream.items(value)
                if not found:
                    yield Skipped(src, "metadata", f"stream event {value.get('type')}")
                    continue
                if conv not in started:
                    started.add(conv)
                    yield Conversation(conv, Format.OPENAI, src)
                ids = calls.setdefault(conv, CallIds())
                if stream.aligned:  # after the input of the request it answers (Stream)
                    log.extend(conv, [responses.item_print(got) for _, got in found])
                scope = f"{conv}/{stream.rid or at}"
                for k, got in found:
                    mid = responses.item_id(got, conv, f"{scope}/{k}")
                    yield from responses.read_item(got, mid, conv, src, ids, item, user_kind)
            elif responses.is_item(value):
                # A Responses item per line (a session dump): one conversation for the file.
                index += 1
                if not file_conv_started:
                    file_conv_started = True
                    yield Conversation(stem, Format.OPENAI, src)
                mid = responses.item_id(value, stem, f"{stem}/{at}")
                yield from responses.read_item(value, mid, stem, src, file_ids, item, user_kind)
            elif _is_message(value):
                # A bare message per line: one conversation for the whole file.
                index += 1
                if not file_conv_started:
                    file_conv_started = True
                    yield Conversation(stem, Format.OPENAI, src)
                yield from _message(value, f"{stem}/{at}", stem, src, file_ids, item)
            else:
                index += 1
                yield Skipped(src, "unknown_type", "no `messages`, `traj`, `input` or `role`")


READER = OpenAIReader()
