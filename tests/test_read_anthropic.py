"""Anthropic Messages reader: request logs, per-line messages, tool blocks, compaction blocks."""

from __future__ import annotations

import json
from pathlib import Path

from lexkeep.core.ingest import read_records
from lexkeep.core.model import (
    ArgumentsKind,
    Boundary,
    BoundaryKind,
    Conversation,
    Format,
    Message,
    MessageKind,
    Role,
    ToolCall,
    ToolResult,
)
from lexkeep.core.read_anthropic import READER
from lexkeep.core.read_openai import READER as OPENAI

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "anthropic"


def test_request_log_with_response():
    records = list(read_records(FIXTURES / "requests.jsonl"))
    assert isinstance(records[0], Conversation) and records[0].id == "req-1"
    assert records[0].format == Format.ANTHROPIC
    msgs = [r for r in records if isinstance(r, Message)]
    assert [(m.id, m.role, m.kind) for m in msgs] == [
        ("req-1/system", Role.SYSTEM, MessageKind.SYSTEM),
        ("req-1/0", Role.USER, MessageKind.USER_TEXT),
        ("req-1/1", Role.ASSISTANT, MessageKind.ASSISTANT_TEXT),
        ("req-1/3", Role.ASSISTANT, MessageKind.ASSISTANT_TEXT),
    ]
    # The tool_result-only user turn is not a user message.
    assert msgs[2].text == "Listing files."  # thinking blocks are not the answer text
    [call] = [r for r in records if isinstance(r, ToolCall)]
    assert (call.call_id, call.arguments_raw, call.arguments_kind) == (
        "toolu_01A",
        '{"path":"/var/log/app"}',
        ArgumentsKind.OBJECT,
    )
    [result] = [r for r in records if isinstance(r, ToolResult)]
    assert result.text == "app.log\nerror.log"
    [boundary] = [r for r in records if isinstance(r, Boundary)]
    assert boundary.kind == BoundaryKind.ANTHROPIC
    assert boundary.summary_text == "Summary: user asked about /var/log/app and error E0502."
    # The compaction block comes before the text that follows it in the same response.
    assert records.index(boundary) < records.index(msgs[3])


def test_messages_per_line():
    records = list(read_records(FIXTURES / "messages.jsonl"))
    assert records[0] == Conversation("messages.jsonl", Format.ANTHROPIC, records[0].source)
    [result] = [r for r in records if isinstance(r, ToolResult)]
    assert result.is_error and result.call_id == "toolu_02"
    kinds = {r.id: r.kind for r in records if isinstance(r, Message)}
    assert kinds["messages.jsonl/L3"] == MessageKind.INJECTED  # a system reminder
    assert kinds["msg_03"] == MessageKind.ASSISTANT_TEXT  # the response object keeps its id
    [boundary] = [r for r in records if isinstance(r, Boundary)]
    assert boundary.summary_text is None  # `content: null`: compaction failed, nothing readable


def test_sniff_separates_anthropic_from_openai():
    anthropic = {
        "role": "assistant",
        "content": [{"type": "tool_use", "id": "t", "name": "f", "input": {}}],
    }
    openai = {"role": "assistant", "content": None, "tool_calls": [{"id": "c", "function": {}}]}
    assert READER.sniff([anthropic]) > OPENAI.sniff([anthropic])
    assert OPENAI.sniff([openai]) > READER.sniff([openai])
    lexkeep = {
        "type": "message",
        "id": "m",
        "conversation_id": "c",
        "role": "assistant",
        "text": "x",
    }
    assert READER.sniff([lexkeep]) == 0


def test_streamed_input_string_is_kept_raw():
    from lexkeep.core.readers import JsonLine

    line = JsonLine(
        1,
        {
            "role": "assistant",
            "content": [{"type": "tool_use", "id": "t", "name": "f", "input": '{"a": 1'}],
        },
    )
    [_, _, call] = list(READER.read([line], "s.jsonl"))
    assert (call.arguments_raw, call.arguments_kind) == ('{"a": 1', ArgumentsKind.JSON_STRING)


def test_tool_use_input_keeps_numbers_as_the_log_writes_them(tmp_path):
    """A request log (several calls in one value) and a message per line: 20-digit numbers
    stay as written (orjson alone would write 9.876543210987654e+19)."""
    big = "98765432109876543210"

    def use(n: int) -> str:
        return (
            f'{{"type": "tool_use", "id": "toolu_{n}", "name": "refund",'
            f' "input": {{"account": {big}{n}, "amount": 12.50}}}}'
        )

    def raw(n: int) -> str:
        return f'{{"account":{big}{n},"amount":12.50}}'

    request = (
        f'{{"id": "req-9", "messages": [{{"role": "user", "content": "refund {big}"}},'
        f' {{"role": "assistant", "content": [{use(1)}, {use(2)}]}},'
        f' {{"role": "user", "content": "and the other"}}],'
        f' "response": {{"role": "assistant", "content": [{use(3)}]}}}}'
    )
    per_line = f'{{"role": "assistant", "content": [{use(4)}]}}'
    for name, text, want in (
        ("requests.jsonl", request, [raw(1), raw(2), raw(3)]),
        ("messages.jsonl", per_line, [raw(4)]),
    ):
        path = tmp_path / name
        path.write_text(text + "\n")
        calls = [r for r in read_records(path, Format.ANTHROPIC) if isinstance(r, ToolCall)]
        assert [c.arguments_raw for c in calls] == want, name
        assert {c.arguments_kind for c in calls} == {ArgumentsKind.OBJECT}


def test_tool_result_content_given_as_an_object_keeps_its_numbers_as_written(tmp_path):
    big = "98765432109876543210"
    request = (
        '{"id": "req-1", "messages": ['
        '{"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "q",'
        ' "input": {}}]},'
        '{"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1",'
        f' "content": {{"account": {big}}}}}]}}]}}'
    )
    path = tmp_path / "requests.jsonl"
    path.write_text(request + "\n")
    (result,) = [r for r in read_records(path, Format.ANTHROPIC) if isinstance(r, ToolResult)]
    assert result.text == f'{{"account":{big}}}'


def test_request_log_keyed_by_conversation_id_is_detected_as_anthropic(tmp_path):
    """docs/formats.md: request logs take their id from `id`, `conversation_id` or
    `session_id`. One keyed by `conversation_id` was taken for OpenAI chat, which reads no
    tool_use, tool_result or compaction block: the audit then saw no boundary at all."""
    request = {
        "conversation_id": "s1",
        "model": "claude-x",
        "messages": [
            {"role": "user", "content": "refund order ORD-77812 please"},
            {
                "role": "assistant",
                "content": [
                    {"type": "compaction", "content": "User wants a refund."},
                    {"type": "tool_use", "id": "toolu_1", "name": "refund", "input": {"o": 1}},
                ],
            },
            {
                "role": "user",
                "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": "ok"}],
            },
        ],
    }
    path = tmp_path / "requests.jsonl"
    path.write_text(json.dumps(request) + "\n")
    records = list(read_records(path))
    assert records[0] == Conversation("s1", Format.ANTHROPIC, records[0].source)
    assert [type(r).__name__ for r in records[1:]] == [
        "Message",
        "Boundary",
        "Message",
        "ToolCall",
        "ToolResult",
    ]


def test_tool_use_ids_repeated_in_one_conversation_are_kept_apart(tmp_path):
    """As in OpenAI logs (test_read_openai): a compatible server that numbers tool_use ids per
    turn must not lose the later call and its result as already stored."""

    def turn(args: dict) -> list[dict]:
        use = {"type": "tool_use", "id": "t0", "name": "f", "input": args}
        result = {"type": "tool_result", "tool_use_id": "t0", "content": str(args)}
        return [{"role": "assistant", "content": [use]}, {"role": "user", "content": [result]}]

    lines = [{"role": "user", "content": "order ORD-77812"}, *turn({"q": 1}), *turn({"q": 2})]
    path = tmp_path / "messages.jsonl"
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    records = list(read_records(path, Format.ANTHROPIC))
    calls = [(r.call_id, r.arguments_raw) for r in records if isinstance(r, ToolCall)]
    assert calls == [("t0", '{"q":1}'), ("t0#2", '{"q":2}')]
    results = [(r.call_id, r.text) for r in records if isinstance(r, ToolResult)]
    assert results == [("t0", "{'q': 1}"), ("t0#2", "{'q': 2}")]


def test_request_response_wrappers_are_read_as_the_request_logs_they_wrap(tmp_path):
    """`{"request": {…}, "response": {…}}` lines of Messages API calls (either side may be
    under `body`) read as the request logs they wrap. Once OpenAI Chat Completions wrappers
    were read, these would have been read as OpenAI chat, without their tool_use blocks."""
    plain = FIXTURES / "requests.jsonl"
    wrapped = tmp_path / "wrapped.jsonl"
    lines = []
    for n, line in enumerate(plain.read_text().splitlines()):
        record = json.loads(line)
        request = {k: v for k, v in record.items() if k not in ("id", "response")}
        # the line's `id` names the log entry; the conversation is named beside it
        entry: dict = {"id": f"log-{n}", "conversation_id": record["id"], "request": request}
        if "response" in record:
            entry["response"] = record["response"]
            if n % 2:
                entry["response"] = {"status_code": 200, "body": record["response"]}
        lines.append(json.dumps(entry) + "\n")
    wrapped.write_text("".join(lines))

    def shown(path: Path) -> list[tuple]:
        return [
            (type(r).__name__, getattr(r, "id", getattr(r, "call_id", None)), r.source.line)
            for r in read_records(path)
        ]

    assert shown(wrapped) == shown(plain)
    assert any(isinstance(r, ToolCall) for r in read_records(wrapped))


def _text_only_log(path: Path) -> Path:
    """An Anthropic request log whose requests hold only text, each with its response."""
    user = "Refund order ORD-77812, please."
    answers = ["Which card?", "Refunding ORD-77812 to the card ending 4242."]
    first = [{"role": "user", "content": user}]
    said = {"role": "assistant", "content": [{"type": "text", "text": answers[0]}]}
    second = [*first, said, {"role": "user", "content": "Visa"}]  # the answer sent back
    lines = []
    for n, messages in enumerate((first, second)):
        response = {
            "id": f"msg_0{n}",
            "type": "message",
            "role": "assistant",
            "model": "claude-sonnet-4-5",
            "content": [{"type": "text", "text": answers[n]}],
            "stop_reason": "end_turn",
            "usage": {"input_tokens": 10, "output_tokens": 5},
        }
        request = {"model": "claude-sonnet-4-5", "max_tokens": 1024, "messages": messages}
        lines.append({"session_id": "s-9", "request": request, "response": response})
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    return path


def test_a_text_only_anthropic_log_is_read_with_its_last_answer(tmp_path, cli):
    """Requests holding only text, answered by Anthropic message objects: the file was
    detected as OpenAI chat, whose reader ignored the responses, so the last request's
    answer was lost. The response's shape tells the format; read as OpenAI (forced), the
    answer is read too, once."""
    path = _text_only_log(tmp_path / "proxy.jsonl")
    ingested = cli("ingest", path, "--db", tmp_path / "s.duckdb")
    assert ingested.exit_code == 0, ingested.stderr
    assert "ingested (anthropic) 1 conversation, 4 messages" in ingested.stderr

    forced = [
        (r.id, r.text)
        for r in read_records(path, Format.OPENAI)
        if isinstance(r, Message) and r.role == Role.ASSISTANT
    ]
    assert forced == [
        ("s-9/1", "Which card?"),
        ("s-9/3", "Refunding ORD-77812 to the card ending 4242."),
    ]


def _agent_after_text_only_requests(path: Path) -> Path:
    """A proxy's log of Messages API requests without ids: twenty one-turn text requests,
    streamed (their responses not logged), then an agent's conversation whose requests and
    responses carry `tool_use`, `tool_result` and `compaction` blocks."""
    base = {"model": "claude-sonnet-4-5", "max_tokens": 1024, "system": "You handle refunds."}
    lines = [
        {
            **base,
            "stream": True,
            "messages": [{"role": "user", "content": f"Summarise ticket OPS-{1000 + n}."}],
        }
        for n in range(20)
    ]
    u0 = {"role": "user", "content": "Refund order ORD-77812 to the card ending 4242."}
    use = {"type": "tool_use", "id": "toolu_01A", "name": "lookup_order"}
    a0 = {
        "role": "assistant",
        "content": [
            {"type": "text", "text": "Looking it up.", "citations": None},
            {**use, "input": {"order_id": "ORD-77812"}},
        ],
    }
    r0 = {"type": "tool_result", "tool_use_id": "toolu_01A", "content": "delivered"}
    t0 = {"role": "user", "content": [r0]}
    summary = "User wants order ORD-77812 refunded; it was delivered."
    a1 = {
        "role": "assistant",
        "content": [
            {"type": "compaction", "content": summary},
            {
                "type": "tool_use",
                "id": "toolu_01B",
                "name": "refund",
                "input": {"order": "ORD-77812"},
            },
        ],
    }
    r1 = {
        "type": "tool_result",
        "tool_use_id": "toolu_01B",
        "content": "refunded",
        "is_error": False,
    }
    t1 = {"role": "user", "content": [r1, {"type": "text", "text": "Also cancel WH-4471-B."}]}
    a2 = {"role": "assistant", "content": [{"type": "text", "text": "Done.", "citations": None}]}
    for n, (messages, answer) in enumerate((([u0], a0), ([u0, a0, t0], a1), ([a1, t1], a2))):
        response = {"id": f"msg_0{n}", "type": "message", **answer, "stop_reason": "end_turn"}
        lines.append({**base, "messages": messages, "response": response})
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    return path


def _shown(path: Path, fmt: Format) -> list[tuple]:
    """Every record but the conversations' format: type, id, text or arguments, line."""
    out = []
    for r in read_records(path, fmt):
        if isinstance(r, Conversation):
            out.append(("Conversation", r.id, r.source.line))
        elif isinstance(r, Message):
            out.append(("Message", r.id, r.kind, r.text, r.source.line))
        elif isinstance(r, ToolCall):
            out.append(("ToolCall", r.call_id, r.name, r.arguments_raw, r.source.line))
        elif isinstance(r, ToolResult):
            out.append(("ToolResult", r.call_id, r.text, r.is_error, r.source.line))
        elif isinstance(r, Boundary):
            out.append(("Boundary", r.id, r.summary_text, r.source.line))
    return out


def test_anthropic_tool_blocks_are_read_in_a_log_detected_as_openai_chat(tmp_path, cli):
    """Twenty text-only requests at the head of an Anthropic log made it OpenAI chat to the
    sniffers; the OpenAI reader kept only the text of each message's blocks, so the later
    requests' tool calls, tool results and compaction block were dropped without a word and
    the audit found nothing to audit. Read as OpenAI, the log now gives what the Anthropic
    reader gives, system prompts included (and their top-level `system` makes it detected
    as Anthropic)."""
    path = _agent_after_text_only_requests(tmp_path / "proxy.jsonl")
    ingested = cli("ingest", path, "--db", tmp_path / "s.duckdb")
    assert ingested.exit_code == 0, ingested.stderr
    assert "ingested (anthropic) 21 conversations" in ingested.stderr
    assert "2 tool calls, 1 boundar" in ingested.stderr

    read_as_openai = _shown(path, Format.OPENAI)
    assert read_as_openai == _shown(path, Format.ANTHROPIC)
    assert ("ToolCall", "toolu_01A", "lookup_order", '{"order_id":"ORD-77812"}', 21) in (
        read_as_openai
    )

    audited = cli("audit", path, "--format", "json", "--exit-zero")
    assert audited.exit_code == 0, audited.stderr
    found = {f["value"]: f["verdict"] for f in json.loads(audited.stdout)["findings"]}
    assert found["ORD-77812"] == "kept"


def _streamed_text_requests(path: Path) -> Path:
    """A proxy's log of Messages API requests holding only text: a top-level `system`
    prompt, string contents, streamed (no response logged), as a chat client sends them."""
    base = {
        "model": "claude-sonnet-4-5",
        "max_tokens": 1024,
        "stream": True,
        "system": [{"type": "text", "text": "You handle refunds for the shop."}],
    }
    user = {"role": "user", "content": "Refund order ORD-77812 to the card ending 4242."}
    said = {"role": "assistant", "content": "Which card should receive it?"}
    again = {"role": "user", "content": "Visa, ending 4242."}
    lines = [
        {**base, "metadata": {"user_id": "u-18"}, "messages": messages}
        for messages in ([user], [user, said, again])
    ]
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    return path


def test_a_text_only_request_log_with_a_system_prompt_is_detected_as_anthropic(tmp_path, cli):
    """Requests with a top-level `system` (which OpenAI chat requests never have) and only
    text were detected as OpenAI chat and shown `(openai)`: string contents weighed more than
    the system prompt. A system message in `messages` (OpenAI's way) still reads as OpenAI."""
    path = _streamed_text_requests(tmp_path / "proxy.jsonl")
    head = [json.loads(line) for line in path.read_text().splitlines()]
    assert READER.sniff(head) > OPENAI.sniff(head)
    ingested = cli("ingest", path, "--db", tmp_path / "s.duckdb")
    assert ingested.exit_code == 0, ingested.stderr
    assert "ingested (anthropic) 1 conversation, 4 messages" in ingested.stderr, ingested.stderr
    openai = {
        "model": "gpt-4o",
        "messages": [
            {"role": "system", "content": "You handle refunds for the shop."},
            {"role": "user", "content": "Refund order ORD-77812."},
        ],
    }
    assert OPENAI.sniff([openai]) > READER.sniff([openai])
