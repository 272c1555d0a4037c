"""OpenAI Responses API items and request logs → lexkeep records (read as format `openai`).

The Responses API (and the OpenAI Agents SDK sessions built on it) records a conversation as a
list of *items* rather than chat messages:

- `message` {role, content: string | [{type: input_text | output_text | refusal | …, text}]};
  an item with only `role` and `content` (no `type`) is a message too;
- `function_call` {call_id, name, arguments: JSON text} and `custom_tool_call` {call_id, name,
  input: free text}, answered by `function_call_output` / `custom_tool_call_output` {call_id,
  output}; older built-ins (`local_shell_call`, `web_search_call`, `tool_search_call`) alike;
- `reasoning` (not the answer: skipped), and `compaction` {encrypted_content}: the opaque state
  of a server-side compaction, read as a remote boundary with no summary.

Codex rollouts wrap the same items in `response_item` lines; the item-level helpers here
(`content_text`, `output_text`, `call_arguments`) are shared with `read_codex`.

Containers (`request_items`, `Chains`) say which items a request log holds and which
conversation it continues. Ids are given to `read_item` by its caller; the functions that
derive them (`Chains.conversation`, `request_scope`, `item_id`) are kept apart from the parsing.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

from lexkeep.core.model import (
    ArgumentsKind,
    Boundary,
    BoundaryKind,
    Message,
    MessageKind,
    Record,
    Role,
    Skipped,
    Source,
    ToolCall,
    ToolResult,
)
from lexkeep.core.readers import JsonLine, json_text, type_of
from lexkeep.core.requestlog import RequestLog, fingerprint

if TYPE_CHECKING:  # only for annotations: read_openai imports this module
    from lexkeep.core.read_openai import CallIds

TOOL_CALL_TYPES = frozenset(
    {"function_call", "custom_tool_call", "local_shell_call", "tool_search_call", "web_search_call"}
)
OUTPUT_TYPES = frozenset(
    {
        "function_call_output",
        "custom_tool_call_output",
        "local_shell_call_output",
        "tool_search_output",
    }
)
COMPACTION_TYPES = frozenset({"compaction", "compaction_summary"})
# Item types that only the Responses API writes (a chat message has a role, never these).
ITEM_TYPES = TOOL_CALL_TYPES | OUTPUT_TYPES | COMPACTION_TYPES | {"reasoning"}
# Content part types of Responses messages; Anthropic blocks are `text`, `image`, `document`…
PART_TYPES = frozenset(
    {"input_text", "output_text", "refusal", "input_image", "input_file", "input_audio"}
)
MESSAGE_ROLES = frozenset({"user", "assistant", "system", "developer"})
# How many items of a list are looked at to recognise it.
_SAMPLE = 50
# Keys of a Responses request besides `input` (any one marks a value as a request).
_REQUEST_KEYS = ("model", "previous_response_id", "instructions", "conversation")


# -- item-level helpers (shared with read_codex) ---------------------------------------------


def content_text(content: Any) -> str:
    """Text of an item's content: a string, or the `text` of each part of a list, joined."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = [
            item["text"]
            for item in content
            if isinstance(item, dict) and isinstance(item.get("text"), str)
        ]
        return "\n".join(parts)
    return ""


def output_text(output: Any, line: JsonLine | None = None) -> tuple[str, bool]:
    """Text and error flag of a tool output (string, content-part list, or object)."""
    if isinstance(output, str):
        return output, False
    if isinstance(output, list):
        return content_text(output), False
    if isinstance(output, dict):
        is_error = output.get("success") is False
        inner = output.get("content", output.get("output"))
        if isinstance(inner, (str, list)):
            return output_text(inner, line)[0], is_error
        return json_text(output, line), is_error
    if output is None:
        return "", False
    return json_text(output, line), False


def call_arguments(
    item: dict[str, Any], line: JsonLine | None
) -> tuple[str | None, str, ArgumentsKind]:
    """Name (None when a function or custom tool call has none), raw arguments and their kind
    of a tool call item, the arguments exactly as recorded."""
    kind = type_of(item)
    name = item.get("name") if isinstance(item.get("name"), str) else None
    if kind == "function_call":
        args = item.get("arguments")
        if isinstance(args, str):
            return name, args, ArgumentsKind.JSON_STRING
        return name, json_text(args, line), ArgumentsKind.OBJECT
    if kind == "custom_tool_call":
        args = item.get("input")
        if isinstance(args, str):
            return name, args, ArgumentsKind.FREEFORM
        return name, json_text(args, line), ArgumentsKind.OBJECT
    if kind == "local_shell_call":
        action = item.get("action")
        command = action.get("command") if isinstance(action, dict) else None
        argv = command if command is not None else []
        return name or "local_shell", json_text(argv, line), ArgumentsKind.ARRAY
    if kind == "tool_search_call":
        return name or "tool_search", json_text(item.get("arguments"), line), ArgumentsKind.OBJECT
    # web_search_call: the query lives in action
    return name or "web_search", json_text(item.get("action"), line), ArgumentsKind.OBJECT


# -- recognising items and request logs -------------------------------------------------------


def is_item(value: Any) -> bool:
    """A Responses item with a `type` this module reads (a typed `message` included)."""
    if not isinstance(value, dict):
        return False
    kind = type_of(value)
    if kind == "message":
        return value.get("role") in MESSAGE_ROLES and "content" in value
    return kind in ITEM_TYPES


def _typed_parts(value: dict[str, Any]) -> bool:
    content = value.get("content")
    return isinstance(content, list) and any(
        isinstance(p, dict) and type_of(p) in PART_TYPES for p in content
    )


def _is_input_item(value: Any) -> bool:
    """Anything a Responses `input` list may hold: a typed item or a role message (a value
    that is not an object is let through here, and skipped when read)."""
    if not isinstance(value, dict):
        return True
    if "type" not in value:
        return value.get("role") in MESSAGE_ROLES
    return isinstance(value.get("type"), str)


def _is_known_item(value: Any) -> bool:
    """An item this module reads: a typed item, or a role message without `type`."""
    if is_item(value):
        return True
    return isinstance(value, dict) and "type" not in value and value.get("role") in MESSAGE_ROLES


def response_output(value: dict[str, Any]) -> list[Any] | None:
    """The output items of a request log: its `output` list, or its `response.output`."""
    out = value.get("output")
    if isinstance(out, list):
        return out
    response = value.get("response")
    if isinstance(response, dict) and isinstance(response.get("output"), list):
        return response["output"]
    return None


def chat_answer(value: dict[str, Any]) -> dict[str, Any] | None:
    """The message a logged Chat Completions response answered with: its `response`'s
    `choices[0].message`, or None when the value holds no such response."""
    response = value.get("response")
    if not isinstance(response, dict):
        return None
    choices = response.get("choices")
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
        return None
    message = choices[0].get("message")
    return message if isinstance(message, dict) else None


def _body(value: Any) -> dict[str, Any] | None:
    """A request's or response's JSON as a log keeps it: the object, or its `body` object (an
    HTTP exchange's log: `{"status_code": 200, "body": {…}}`)."""
    if not isinstance(value, dict):
        return None
    body = value.get("body")
    return body if isinstance(body, dict) else value


def unwrapped(value: Any) -> Any:
    """A request log written as `{"request": {…}, "response": {…}}` (a client's or proxy's log
    of one call; each side may hold its JSON under `body`) as the request's own fields with
    `response` beside them, read as any request log; any other value as it is. The request is
    a Responses one (`input`) or a Chat Completions one (`messages`).

    The wrapper's own keys (`conversation_id`, `session_id`, a log `id`…) are kept where the
    request has none of its own; a chat request does not take the wrapper's `id`, which names
    the log entry (a chat record's `id` would name its conversation)."""
    if not isinstance(value, dict) or "input" in value or "messages" in value:
        return value
    request = _body(value.get("request"))
    if request is None or ("input" in request) == ("messages" in request):
        return value
    chat = "messages" in request
    merged = dict(request)
    for key, got in value.items():
        if key not in ("request", "response") and not (chat and key == "id"):
            merged.setdefault(key, got)
    response = _body(value.get("response"))
    if response is not None:
        merged["response"] = response
    return merged


def is_request_log(value: Any) -> bool:
    """A Responses request log: `input` items (or a string) and/or a response's `output`
    (also wrapped: `unwrapped`)."""
    value = unwrapped(value)
    if not isinstance(value, dict) or "messages" in value or "traj" in value:
        return False
    if is_stream_event(value):  # `response.completed` holds a response too: Stream reads it
        return False
    if "payload" in value or ("conversation_id" in value and "type" in value):
        return False  # a Codex envelope, a lexkeep record
    inp = value.get("input")
    out = response_output(value)
    if out is not None and not all(_is_input_item(i) for i in out[:_SAMPLE]):
        return False
    # Datasets use `input` too ({"input": str, "output": str}; eval sets of role messages with
    # an expected answer): a request names its model, its response or what it continues.
    marked = out is not None or any(k in value for k in _REQUEST_KEYS)
    if isinstance(inp, list):
        sample = inp[:_SAMPLE] + (out or [])[:_SAMPLE]
        return (
            all(_is_input_item(i) for i in inp[:_SAMPLE])
            and any(_is_known_item(i) for i in sample)
            and (marked or any(is_item(i) for i in sample))
        )
    if isinstance(inp, str):
        return marked
    return (
        out is not None
        and any(_is_known_item(i) for i in out[:_SAMPLE])
        and (
            value.get("object") in ("response", "response.compaction")
            or isinstance(value.get("response"), dict)
        )
    )


def sniff_value(value: Any) -> int:
    """Score of one head value as Responses data (0: not recognisably Responses)."""
    if is_request_log(value):
        return 8
    if is_stream_event(value):
        return 6
    if not isinstance(value, dict) or "payload" in value or "conversation_id" in value:
        return 0  # Codex envelopes and lexkeep records use some of the same type names
    if is_item(value):
        if type_of(value) == "message":
            return 8 if _typed_parts(value) else 0  # plain role messages: the chat sniffer
        return 6
    return 0


def codex_bare_header(head: list[Any]) -> bool:
    """True when `head` starts like a bare-era Codex rollout (its items are Codex's)."""
    objs = [v for v in head if isinstance(v, dict)]
    if any("record_type" in o for o in objs):
        return True
    first = objs[0] if objs else {}
    return (
        "type" not in first
        and "role" not in first
        and "input" not in first
        and "id" in first
        and "timestamp" in first
    )


# -- conversation and item ids (kept apart from the parsing) ----------------------------------


def _text_id(value: Any) -> str | None:
    if isinstance(value, str) and value:
        return value
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value)
    return None


def response_id(value: dict[str, Any]) -> str | None:
    """The id of the response a request log recorded: `response.id`, else the record's `id`."""
    response = value.get("response")
    if isinstance(response, dict) and _text_id(response.get("id")):
        return _text_id(response.get("id"))
    return _text_id(value.get("id"))


def previous_response_id(value: dict[str, Any]) -> str | None:
    """The `previous_response_id` the request named (top level, or in `request`/`response`)."""
    for holder in (value, value.get("request"), value.get("response")):
        if isinstance(holder, dict) and _text_id(holder.get("previous_response_id")):
            return _text_id(holder.get("previous_response_id"))
    return None


def _explicit_conversation(value: dict[str, Any]) -> str | None:
    for key in ("conversation_id", "session_id"):
        got = _text_id(value.get(key))
        if got:
            return got
    conv = value.get("conversation")  # the Conversations API: an id, or {"id": …}
    if isinstance(conv, dict):
        conv = conv.get("id")
    return _text_id(conv)


class Chains:
    """Conversation ids of the request logs of one file, following previous_response_id.

    A request log belongs to its `conversation_id`, `session_id` or `conversation` when it names
    one; else to the conversation of the earlier request log in the file whose response its
    `previous_response_id` names; else it starts a conversation named by its response id, or
    by `fallback` (named after the record, see docs/formats.md) when it has none.
    """

    def __init__(self) -> None:
        self._of: dict[str, str] = {}
        self._by_conversation: dict[str, list[str]] = {}  # the responses of each

    def __len__(self) -> int:
        """How many responses it knows the conversation of."""
        return len(self._of)

    def knows(self, response: str) -> bool:
        """True when the conversation of the response `response` is known."""
        return response in self._of

    def dump(self, conversation: str) -> list[str] | None:
        """The ids of the conversation's responses (core.requestlog.Kept)."""
        got = self._by_conversation.get(conversation)
        return None if got is None else list(got)

    def load(self, conversation: str, data: Any) -> None:
        """Take back the response ids `dump` gave."""
        for rid in data if isinstance(data, list) else ():
            if isinstance(rid, str) and rid not in self._of:
                self._remember(rid, conversation)

    def _remember(self, rid: str, conversation: str) -> None:
        self._of[rid] = conversation
        self._by_conversation.setdefault(conversation, []).append(rid)

    def conversation(
        self,
        value: dict[str, Any],
        fallback: str | Callable[[], str],
        waiting: str | None = None,
    ) -> str:
        """The conversation id of request log `value` (and remember its response's).

        `fallback`: the id of a conversation nothing names, or what makes it (called only
        then). `waiting`: the conversation of the request a streamed response answers, taken
        before the response's own id."""
        rid = response_id(value)
        prev = previous_response_id(value)
        conv = (
            _explicit_conversation(value)
            or (self._of.get(prev) if prev is not None else None)
            or waiting
            or rid
            or (fallback if isinstance(fallback, str) else fallback())
        )
        if rid is not None and rid not in self._of:
            self._remember(rid, conv)
        return conv


def request_scope(value: dict[str, Any], conv: str, line: int) -> str:
    """The prefix of the ids of a request log's items that have no id of their own.

    A request that continues a stored response (`previous_response_id`, or a `conversation`
    the server keeps) sends only the new items, so their indices restart in every request:
    such items get `<conversation>/<response id or L<line>>`. A request that sends the whole
    history again keeps `<conversation>`, as OpenAI chat request logs do, so a repeated item
    gets the id it had before.
    """
    incremental = previous_response_id(value) is not None or value.get("conversation")
    if not incremental:
        return conv
    return f"{conv}/{response_id(value) or f'L{line}'}"


def item_id(item: Any, conv: str, fallback: str) -> str:
    """`<conversation>/<the item's own id>` (msg_…, fc_…, cmp_…) when it has one, else
    `fallback`: the same item repeated in later requests keeps one id."""
    own = _text_id(item.get("id")) if isinstance(item, dict) else None
    return f"{conv}/{own}" if own else fallback


def request_items(value: dict[str, Any]) -> list[Any]:
    """The items of a request log in timeline order: `input` (a string is one user message),
    then the response's `output`."""
    inp = value.get("input")
    items: list[Any]
    if isinstance(inp, str):
        items = [{"role": "user", "content": inp}]
    elif isinstance(inp, list):
        items = list(inp)
    else:
        items = []
    return items + (response_output(value) or [])


# -- parsing one item -------------------------------------------------------------------------


def read_item(
    item: Any,
    mid: str,
    conv: str,
    src: Source,
    ids: CallIds,
    line: JsonLine | None,
    user_kind: Callable[[str], MessageKind],
) -> Iterator[Record]:
    """Records of one Responses item; `mid` is its id (messages, boundaries), `ids` makes
    tool call ids unique in the conversation and `user_kind` classifies user text."""
    if not isinstance(item, dict):
        yield Skipped(src, "invalid_message", f"item {mid} is not an object")
        return
    kind = type_of(item)
    if kind == "message" or (kind is None and "role" in item):
        yield from _message(item, mid, conv, src, user_kind)
    elif kind in TOOL_CALL_TYPES:
        given = _text_id(item.get("call_id")) or _text_id(item.get("id"))
        name, raw, akind = call_arguments(item, line)
        if name is None:
            yield Skipped(src, "malformed", f"{kind} {mid} without name")
            return
        call_id = ids.call(given) if given else f"{mid}/call"
        yield ToolCall(call_id, conv, name, raw, akind, src)
    elif kind in OUTPUT_TYPES:
        given = _text_id(item.get("call_id"))
        if given is None:
            yield Skipped(src, "missing_id", f"{kind} {mid} without call_id")
            return
        text, is_error = output_text(item.get("output"), line)
        yield ToolResult(ids.result(given), conv, text, src, is_error=is_error)
    elif kind in COMPACTION_TYPES:
        # encrypted_content is opaque: nothing readable was kept, and nothing is claimed kept.
        yield Boundary(id=mid, conversation_id=conv, kind=BoundaryKind.REMOTE, source=src)
    elif kind == "reasoning":
        yield Skipped(src, "reasoning", f"item {mid}: reasoning is not the answer")
    else:
        yield Skipped(src, "unknown_type", f"item {mid}: type {kind!r}")


def _message(
    item: dict[str, Any],
    mid: str,
    conv: str,
    src: Source,
    user_kind: Callable[[str], MessageKind],
) -> Iterator[Record]:
    role = item.get("role")
    text = content_text(item.get("content"))
    if role == "user":
        yield Message(mid, conv, Role.USER, user_kind(text), text, src)
    elif role == "assistant":
        yield Message(mid, conv, Role.ASSISTANT, MessageKind.ASSISTANT_TEXT, text, src)
    elif role in ("system", "developer"):
        yield Message(mid, conv, Role.SYSTEM, MessageKind.SYSTEM, text, src)
    else:
        yield Skipped(src, "unknown_role", f"item {mid}: unknown role {role!r}")


def item_print(item: Any) -> bytes:
    """The fingerprint that tells an item sent again from a new one. A client sends a
    response's items back with or without their `id` and `status`, and a message as typed
    parts or as a string: a message counts by its role and text, any other item without those
    keys (and keys whose value is null)."""
    if not isinstance(item, dict):
        return fingerprint(item)
    if item.get("type", "message") == "message" and "role" in item:
        return fingerprint(["message", item.get("role"), content_text(item.get("content"))])
    return fingerprint(
        {k: v for k, v in item.items() if k not in ("id", "status") and v is not None}
    )


def read_request_log(
    value: dict[str, Any],
    conv: str,
    src: Source,
    ids: CallIds,
    line: JsonLine,
    user_kind: Callable[[str], MessageKind],
    log: RequestLog | None = None,
) -> Iterator[Record]:
    """Records of one request log of conversation `conv`: `instructions` as a system message,
    then its input and output items (ids: `request_scope`, `item_id`).

    With `log`, a request that sends the whole history again yields only the items no earlier
    request of `conv` showed, the id-less ones numbered by their place in its timeline
    (core.requestlog): after a compaction the client drops the items before it, and numbering
    by the place in each list would give newer items older ones' ids."""
    scope = request_scope(value, conv, src.line)
    instructions = value.get("instructions")
    if isinstance(instructions, str) and instructions:
        yield Message(
            f"{scope}/instructions", conv, Role.SYSTEM, MessageKind.SYSTEM, instructions, src
        )
    items = request_items(value)
    start = first = 0
    if log is not None and scope == conv:  # the whole history again, not a continuation
        start, first = log.new_messages(conv, [item_print(i) for i in items])
    for k, item in enumerate(items[start:], first):
        mid = item_id(item, conv, f"{scope}/{k}")
        yield from read_item(item, mid, conv, src, ids, line, user_kind)


# -- streamed responses -----------------------------------------------------------------------

# Events of a streamed response that hold the response object (`response`) or a whole item.
_STREAM_STARTS = frozenset({"response.created", "response.queued", "response.in_progress"})
_STREAM_ENDS = frozenset({"response.completed", "response.incomplete", "response.failed"})
_ITEM_DONE = "response.output_item.done"


def is_stream_event(value: Any) -> bool:
    """An event of a streamed response (`response.output_item.done`, `response.completed`,
    `response.output_text.delta`…), as a log of the stream keeps one per line."""
    if not isinstance(value, dict) or "payload" in value or "conversation_id" in value:
        return False
    kind = type_of(value)
    if not isinstance(kind, str) or not kind.startswith("response."):
        return False
    if kind in _STREAM_STARTS or kind in _STREAM_ENDS:
        return isinstance(value.get("response"), dict)
    if kind == _ITEM_DONE:
        return isinstance(value.get("item"), dict)
    return any(k in value for k in ("sequence_number", "item_id", "output_index", "delta"))


def ends_stream(value: dict[str, Any]) -> bool:
    """A stream event that ends its response (`response.completed`, `.incomplete`, `.failed`)."""
    return type_of(value) in _STREAM_ENDS


class Stream:
    """The streamed response one file's events are building, and the request it answers.

    A stream log holds `response.created`, the items as they grow (`response.output_item.added`,
    text and argument deltas), each item whole once done (`response.output_item.done`), and the
    whole response again at the end (`response.completed`). The whole items are read: each
    `output_item.done` item, then those items of the final response that no `done` event
    gave (a log that kept only the final event). A request logged on the line before its
    stream (`"stream": true`, no response) is `waiting`: the stream is its conversation's.
    When that request sent the whole history (`whole`), the stream's items follow its input
    on the conversation's timeline (`aligned`), as a response's `output` does in a request
    log, so that the next request sending them back is aligned past them.
    """

    __slots__ = ("aligned", "conv", "ended", "rid", "seen", "waiting", "whole")

    def __init__(self) -> None:
        self.conv: str | None = None
        self.rid: str | None = None
        self.seen: set[bytes] = set()  # prints of the items read from the current response
        self.waiting: str | None = None
        self.whole = False  # the waiting request sent the whole history
        self.aligned = False  # the current response's items go on its timeline
        self.ended = False  # the current response's final event was read

    def begin(
        self,
        response: dict[str, Any],
        chains: Chains,
        fallback: str | Callable[[], str],
        ends: bool = False,
    ) -> str:
        """The conversation of the streamed `response` (a new one resets what was read);
        `ends`: the event is the response's final one.

        A response is new when its id is another, or, for a response without an id, when the
        current one has ended: `response.created`, `response.in_progress` and the final
        `response.completed` of one stream are one response."""
        rid = response_id(response)
        if self.conv is None or rid != self.rid or (rid is None and self.ended):
            self.conv = chains.conversation(response, fallback, self.waiting)
            self.aligned = self.waiting is not None and self.whole
            self.rid, self.seen, self.waiting, self.ended = rid, set(), None, False
        if ends:
            self.ended = True
        return self.conv

    def items(self, value: dict[str, Any]) -> list[tuple[int, Any]]:
        """(output index, item) of the whole items event `value` gives that were not read."""
        if type_of(value) == _ITEM_DONE:
            at = value.get("output_index")
            found = [(at if isinstance(at, int) else len(self.seen), value["item"])]
        elif type_of(value) in _STREAM_ENDS:
            output = value["response"].get("output")
            found = list(enumerate(output)) if isinstance(output, list) else []
        else:
            return []
        fresh = []
        for at, item in found:
            printed = item_print(item)
            if printed not in self.seen:
                self.seen.add(printed)
                fresh.append((at, item))
        return fresh
