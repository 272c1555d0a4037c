"""OpenAI Responses API items and request logs (read as `openai`): records, ids, detection,
and audit verdicts across a `compaction` item."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest
from conftest import shared_data

from lexkeep.core.formats import detect
from lexkeep.core.ingest import JsonSource, detect_format, read_records
from lexkeep.core.model import (
    ArgumentsKind,
    Boundary,
    BoundaryKind,
    Conversation,
    Format,
    Message,
    MessageKind,
    Role,
    Skipped,
    ToolCall,
    ToolResult,
)
from lexkeep.core.store import Store

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "responses"
SESSION = FIXTURES / "responses_session.jsonl"
REQUESTS = FIXTURES / "responses_requests.jsonl"
COMPACTED_INPUT = FIXTURES / "responses_compacted_input.json"


def _verdicts(cli, *args: object) -> dict[str, str]:
    """`lexkeep audit ARGS --format json --exit-zero` → {value: verdict}."""
    result = cli("audit", *args, "--format", "json", "--exit-zero")
    assert result.exit_code == 0, result.stderr
    return {f["value"]: f["verdict"] for f in json.loads(result.stdout)["findings"]}


# -- detection -------------------------------------------------------------------------------


@pytest.mark.parametrize("path", [SESSION, REQUESTS, COMPACTED_INPUT], ids=lambda p: p.name)
def test_responses_files_are_detected_as_openai(path):
    fmt, _ = detect_format(JsonSource(path))
    assert fmt is Format.OPENAI


def test_detection_leaves_other_formats_alone():
    """Values sharing a type name with Responses items stay with their own format."""
    lexkeep_compaction = {"type": "compaction", "id": "b1", "conversation_id": "c1"}
    lexkeep_message = {"type": "message", "id": "m1", "conversation_id": "c1", "role": "user"}
    assert detect([lexkeep_message, lexkeep_compaction]) is Format.LEXKEEP
    anthropic_response = {
        "type": "message",
        "id": "msg_01",
        "role": "assistant",
        "model": "claude-sonnet-4-5",
        "content": [{"type": "text", "text": "hi"}],
    }
    assert detect([anthropic_response]) is Format.ANTHROPIC
    codex_wrapped = {
        "timestamp": "2026-03-01T10:00:06.000Z",
        "type": "response_item",
        "payload": {"type": "function_call", "call_id": "c", "name": "n", "arguments": "{}"},
    }
    assert detect([codex_wrapped]) is Format.CODEX
    # A dataset of input/output strings is not a request log, nor a typed list of anything.
    assert detect([{"input": "2+2?", "output": "4"}] * 3) is None
    eval_sample = {"input": [{"role": "user", "content": "2+2?"}], "ideal": "4"}
    assert detect([eval_sample] * 3) is None
    assert detect([{"input": [{"type": "image", "url": "x"}], "label": 1}]) is None
    assert detect([{"type": "started", "key": "v2:hash0"}, {"type": "result"}]) is None


def test_bare_codex_rollout_stays_codex():
    """A bare-era Codex rollout is a header line then the same items: Codex keeps it."""
    [path] = (FIXTURES.parent / "codex").glob("rollout-*.jsonl")
    fmt, _ = detect_format(JsonSource(path))
    assert fmt is Format.CODEX


def test_shared_corpus_detects_as_before():
    """Every file of the real corpus keeps the format it had before Responses support."""
    data = shared_data()
    found: Counter = Counter()
    for path in sorted(data.rglob("*.json*")):
        if not path.is_file():
            continue
        try:
            fmt, _ = detect_format(JsonSource(path))
            got = fmt.value
        except Exception as exc:  # unrecognised or empty: counted by class
            got = type(exc).__name__
        found[(path.relative_to(data).parts[0], got)] += 1
    assert found == Counter(
        {
            ("apollo-tau-bench", "openai"): 548,
            ("claude-code-log", "claude"): 120,
            ("claude-code-log", "codex"): 6,
            ("claude-code-log", "EmptyInput"): 17,
            ("claude-code-log", "UnrecognisedFormat"): 11,
            ("gorilla-bfcl", "UnrecognisedFormat"): 14,
        }
    )


# -- a session dump: one item per line -------------------------------------------------------


def test_session_dump_records():
    records = list(read_records(SESSION))
    assert records[0] == Conversation(SESSION.name, Format.OPENAI, records[0].source)
    msgs = [r for r in records if isinstance(r, Message)]
    assert [(m.id, m.role, m.kind) for m in msgs] == [
        ("responses_session.jsonl/L1", Role.USER, MessageKind.USER_TEXT),  # no type, no id
        (
            "responses_session.jsonl/msg_68a1c0f5c2d48190",
            Role.ASSISTANT,
            MessageKind.ASSISTANT_TEXT,
        ),
        ("responses_session.jsonl/L6", Role.USER, MessageKind.USER_TEXT),  # input_text parts
        (
            "responses_session.jsonl/msg_68a1c0fd12178190",
            Role.ASSISTANT,
            MessageKind.ASSISTANT_TEXT,
        ),
    ]
    assert msgs[2].text == "Yes, refund the duplicate and attach ticket BILL-3391 to it."
    calls = [r for r in records if isinstance(r, ToolCall)]
    assert [(c.call_id, c.name, c.arguments_kind) for c in calls] == [
        ("call_Qm4rT7vX2kLp9sWd", "lookup_invoice", ArgumentsKind.JSON_STRING),
        ("call_Zx8nB3cV6mQw1eRt", "issue_refund", ArgumentsKind.JSON_STRING),
        ("call_Hd5sK9pL2vNb7yUf", "shell", ArgumentsKind.FREEFORM),
    ]
    assert calls[2].arguments_raw == "cat /srv/billing/receipts/2025-08/r-4471.pdf"
    results = [(r.call_id, r.text) for r in records if isinstance(r, ToolResult)]
    assert results[1] == ("call_Zx8nB3cV6mQw1eRt", "refund re_3PxK2 created")  # parts joined
    [boundary] = [r for r in records if isinstance(r, Boundary)]
    assert (boundary.id, boundary.kind, boundary.summary_text, boundary.kept_verbatim) == (
        "responses_session.jsonl/cmp_68a1c0f7d0e48190",
        BoundaryKind.REMOTE,
        None,
        (),
    )
    assert boundary.source.line == 7
    skipped = [(s.source.line, s.reason, s.fatal) for s in records if isinstance(s, Skipped)]
    assert skipped == [(2, "reasoning", False), (12, "unknown_type", False)]


def test_session_dump_audit_across_the_compaction_item(cli):
    """Before the compaction item the user typed four identifiers; after it the agent used two
    verbatim, one truncated, and never used the customer id again."""
    assert _verdicts(cli, SESSION) == {
        "INV-2025-08-44719": "kept",
        "BILL-3391": "kept",
        "/srv/billing/receipts/2025-08/r-44719.pdf": "altered",
        "cus_NffrFeUfNV2Hib": "missing",
    }


def test_session_dump_as_a_json_array_and_forced(tmp_path, cli):
    """The same items as one JSON array (even on one line), auto-detected or forced."""
    items = [json.loads(line) for line in SESSION.read_text().splitlines()]
    path = tmp_path / "session.json"
    path.write_text(json.dumps(items))  # one line: every item starts on line 1
    expected = {
        "INV-2025-08-44719": "kept",
        "BILL-3391": "kept",
        "/srv/billing/receipts/2025-08/r-44719.pdf": "altered",
        "cus_NffrFeUfNV2Hib": "missing",
    }
    assert _verdicts(cli, path) == expected
    db = tmp_path / "forced.duckdb"
    ingested = cli("ingest", path, "--input-format", "openai", "--db", db)
    assert ingested.exit_code == 0, ingested.stderr
    assert _verdicts(cli, "--db", db) == expected


# -- request logs ----------------------------------------------------------------------------


def test_request_logs_follow_previous_response_id():
    records = list(read_records(REQUESTS))
    convs = [r.id for r in records if isinstance(r, Conversation)]
    # a chain of four responses, a string input, and a log with conversation_id + response
    assert convs == ["resp_0a1b2c3d4e5f6071", "resp_9f8e7d6c5b4a3921", "support-42"]
    chain = "resp_0a1b2c3d4e5f6071"
    msgs = {(r.conversation_id, r.id): r for r in records if isinstance(r, Message)}
    assert [m for c, m in msgs if c == chain] == [
        f"{chain}/instructions",
        f"{chain}/0",  # first request: index in input + output
        f"{chain}/msg_0a1b02",  # output items keep their own id
        f"{chain}/resp_0a1b2c3d4e5f6073/0",  # a continuation sends only new items
    ]
    assert msgs[(chain, f"{chain}/instructions")].kind == MessageKind.SYSTEM
    assert msgs[("resp_9f8e7d6c5b4a3921", "resp_9f8e7d6c5b4a3921/0")].text == (
        "What is the status of parcel HAT136?"
    )
    assert msgs[("support-42", "support-42/0")].role == Role.SYSTEM  # developer
    [boundary] = [r for r in records if isinstance(r, Boundary)]
    assert (boundary.conversation_id, boundary.id, boundary.source.line) == (
        chain,
        f"{chain}/cmp_0a1b03",
        3,
    )
    # the timeline: the request's input, then its output (the compaction item, then a call)
    order = [type(r).__name__ for r in records if r.source.line == 3]
    assert order == ["Message", "Boundary", "ToolCall"]
    calls = {r.call_id: r.conversation_id for r in records if isinstance(r, ToolCall)}
    assert calls["call_Yz12Ab34Cd56Ef78"] == "support-42"  # from response.output


def test_request_log_audit(cli):
    assert _verdicts(cli, REQUESTS) == {
        "ORD_88412": "altered",  # sent as ORD-88412 after the compaction
        "1Z999AA10123456784": "kept",
        "WH-DAL-07": "kept",  # typed in the request whose response compacted
    }


def test_compacted_input_document_audit(cli):
    """An Agents SDK request after compaction: kept user messages, the compaction item, new
    input; the response's calls come after the boundary."""
    assert _verdicts(cli, COMPACTED_INPUT) == {
        "/var/log/nginx/error.log": "kept",
        "SUP-20931": "missing",
    }


def test_full_history_requests_sharing_a_session_id_are_stored_once(tmp_path, cli):
    """Requests that send the whole history again: repeated items keep one id each."""
    first = {
        "session_id": "s-1",
        "model": "gpt-5",
        "input": [{"role": "user", "content": "Look up ORD_30071"}],
        "output": [
            {
                "id": "fc_1",
                "type": "function_call",
                "call_id": "call_1",
                "name": "get_order",
                "arguments": '{"id":"ORD_30071"}',
            }
        ],
    }
    second = {
        "session_id": "s-1",
        "model": "gpt-5",
        "input": [
            *first["input"],
            *first["output"],
            {"type": "function_call_output", "call_id": "call_1", "output": "shipped"},
        ],
        "output": [
            {
                "id": "msg_2",
                "type": "message",
                "role": "assistant",
                "content": [{"type": "output_text", "text": "It shipped."}],
            }
        ],
    }
    path = tmp_path / "requests.jsonl"
    path.write_text(json.dumps(first) + "\n" + json.dumps(second) + "\n")
    db = tmp_path / "s.duckdb"
    result = cli("ingest", path, "--db", db)
    assert result.exit_code == 0, result.stderr
    with Store.open(db) as store:
        rows = store.con.execute("SELECT id, text FROM messages ORDER BY position").fetchall()
        assert rows == [("s-1/0", "Look up ORD_30071"), ("s-1/msg_2", "It shipped.")]
        calls = store.con.execute("SELECT call_id FROM tool_calls").fetchall()
        assert calls == [("call_1",)]
        assert store.con.execute("SELECT text FROM tool_results").fetchall() == [("shipped",)]


# -- odd items -------------------------------------------------------------------------------


def test_odd_items_are_counted_never_fatal(tmp_path):
    items = [
        {"role": "user", "content": "refund PAY-88120"},
        7,
        {"type": "message", "role": "critic", "content": [{"type": "input_text", "text": "x"}]},
        {"type": "function_call", "call_id": "call_x", "arguments": "{}"},  # no name
        {"type": "function_call_output", "output": "no call_id"},
        {"type": "mcp_list_tools", "id": "mcpl_1", "server_label": "x", "tools": []},
        {"type": "compaction_summary", "encrypted_content": "opaque"},  # Codex's alias
        {"type": "function_call", "call_id": "call_y", "name": "f", "arguments": {"a": 1.50}},
        {"type": "function_call_output", "call_id": "call_y", "output": {"success": False}},
    ]
    path = tmp_path / "odd.jsonl"
    # the file writes 1.50, as a log may: the arguments keep it
    path.write_text(json.dumps({"input": items, "model": "gpt-5"}).replace("1.5", "1.50") + "\n")
    records = list(read_records(path, Format.OPENAI))
    skipped = [(s.reason, s.fatal) for s in records if isinstance(s, Skipped)]
    assert skipped == [
        ("invalid_message", False),
        ("unknown_role", False),
        ("malformed", False),
        ("missing_id", False),
        ("unknown_type", False),
    ]
    [call] = [r for r in records if isinstance(r, ToolCall)]
    assert (call.arguments_raw, call.arguments_kind) == ('{"a":1.50}', ArgumentsKind.OBJECT)
    [result] = [r for r in records if isinstance(r, ToolResult)]
    assert result.is_error
    assert sum(isinstance(r, Boundary) for r in records) == 1


def test_chat_message_list_holding_responses_items(tmp_path, cli):
    """A chat `messages` list that also holds Responses items (an SDK mixing both)."""
    messages = [
        {"role": "user", "content": "Restart pod api-7f9c4d-x2x9q in namespace PROD-EU-2"},
        {"type": "compaction", "id": "cmp_1", "encrypted_content": "opaque"},
        {
            "type": "function_call",
            "call_id": "call_1",
            "name": "kubectl",
            "arguments": '{"pod":"api-7f9c4d-x2x9q","ns":"PROD-EU-2"}',
        },
        {"type": "function_call_output", "call_id": "call_1", "output": "restarted"},
    ]
    path = tmp_path / "chat.jsonl"
    path.write_text(json.dumps({"id": "mixed", "messages": messages}) + "\n")
    records = list(read_records(path))
    assert [type(r).__name__ for r in records] == [
        "Conversation",
        "Message",
        "Boundary",
        "ToolCall",
        "ToolResult",
    ]
    verdicts = _verdicts(cli, path)
    assert verdicts and set(verdicts.values()) == {"kept"}


def test_grown_request_log_adds_only_new_lines_and_keeps_the_chain(tmp_path, cli):
    """A live log read again: the new responses still join the conversation they continue."""
    lines = REQUESTS.read_text().splitlines(keepends=True)
    path = tmp_path / "live.jsonl"
    path.write_text("".join(lines[:2]))
    db = tmp_path / "s.duckdb"
    assert cli("ingest", path, "--db", db).exit_code == 0
    path.write_text("".join(lines))
    grown = cli("ingest", path, "--db", db)
    assert grown.exit_code == 0, grown.stderr
    with Store.open(db) as store:
        convs = store.con.execute("SELECT id FROM conversations ORDER BY id").fetchall()
        assert convs == [("resp_0a1b2c3d4e5f6071",), ("resp_9f8e7d6c5b4a3921",), ("support-42",)]
    assert _verdicts(cli, "--db", db) == _verdicts(cli, REQUESTS)


def test_bare_chat_messages_in_a_one_line_array_are_all_kept(tmp_path):
    """Every element of a one-line JSON array starts on line 1: ids L1, L1.2, L1.3…"""
    path = tmp_path / "bare.json"
    path.write_text(
        json.dumps(
            [
                {"role": "user", "content": "first"},
                {"role": "assistant", "content": "ok"},
                {"role": "user", "content": "second"},
            ]
        )
    )
    msgs = [r for r in read_records(path) if isinstance(r, Message)]
    assert [(m.id, m.text) for m in msgs] == [
        ("bare.json/L1", "first"),
        ("bare.json/L1.2", "ok"),
        ("bare.json/L1.3", "second"),
    ]


def test_full_history_requests_after_a_compaction_lose_no_item(tmp_path, cli):
    """After a compaction the client sends the compaction item and what followed it, no
    longer the items before it. Numbered by their place in each list, the newer id-less items
    took older ones' ids and were left out as already stored (core.requestlog)."""
    user = [
        {"role": "user", "content": "Refund order ORD_30071 please"},
        {"role": "user", "content": "Also invoice INV-2025-08-44719 was charged twice"},
        {"role": "user", "content": "And warehouse WH-4471-B has the parcel"},
        {"role": "user", "content": "Thanks, one more: ticket OPS-2291"},
    ]
    call_1 = {"id": "fc_1", "type": "function_call", "call_id": "call_1", "name": "get_order"}
    call_1["arguments"] = '{"order":"ORD_30071"}'
    out_1 = {"type": "function_call_output", "call_id": "call_1", "output": "refundable"}
    reply = {"role": "assistant", "content": "I will check the invoice next."}
    compaction = {"id": "cmp_1", "type": "compaction", "encrypted_content": "gAAAA-opaque"}
    call_2 = {"id": "fc_2", "type": "function_call", "call_id": "call_2", "name": "invoice"}
    call_2["arguments"] = '{"invoice":"INV-2025-08-4471"}'
    out_2 = {"type": "function_call_output", "call_id": "call_2", "output": "not found"}
    call_3 = {"id": "fc_3", "type": "function_call", "call_id": "call_3", "name": "parcel"}
    call_3["arguments"] = '{"warehouse":"WH-4471-B"}'
    requests = [
        {"input": [user[0]], "output": [call_1]},
        {"input": [user[0], call_1, out_1], "output": [{**reply, "id": "msg_1"}]},
        {"input": [user[0], call_1, out_1, reply, user[1]], "output": [compaction]},
        {"input": [compaction, user[2]], "output": [call_2]},
        {"input": [compaction, user[2], call_2, out_2, user[3]], "output": [call_3]},
    ]
    path = tmp_path / "requests.jsonl"
    path.write_text("".join(json.dumps({"session_id": "s-9", **r}) + "\n" for r in requests))
    db = tmp_path / "s.duckdb"
    for _ in range(2):  # a second ingest adds nothing
        assert cli("ingest", path, "--db", db).exit_code == 0
    with Store.open(db, read_only=True) as store:
        said = store.con.execute(
            "SELECT text FROM messages WHERE role = 'user' ORDER BY position"
        ).fetchall()
        assert [t for (t,) in said] == [u["content"] for u in user]
        assert store.con.execute("SELECT count(*) FROM boundaries").fetchone() == (1,)
        assert store.con.execute("SELECT count(*) FROM tool_results").fetchone() == (2,)
        assert store.con.execute(
            "SELECT count(*) FROM messages WHERE role = 'assistant'"
        ).fetchone() == (1,)
    verdicts = _verdicts(cli, path)
    assert verdicts["ORD_30071"] == "missing"  # used before the compaction only
    assert verdicts["INV-2025-08-44719"] == "altered"


# -- wrapped request logs and streamed responses ---------------------------------------------

_RESPONSE_KEYS = ("id", "object", "created_at", "model", "output", "status")


def _plain_requests() -> list[dict]:
    return [json.loads(line) for line in REQUESTS.read_text().splitlines()]


def _as_wrapped(record: dict, n: int) -> dict:
    """A request log line as `{"request": …, "response": …}`; every other one keeps each side
    under `body`, as a log of the HTTP exchange does."""
    response = record.get("response") or {k: record[k] for k in _RESPONSE_KEYS if k in record}
    request = {
        k: v for k, v in record.items() if k not in (*_RESPONSE_KEYS, "response", "conversation_id")
    }
    request.setdefault("model", record.get("model", "gpt-5"))
    wrapped: dict = {"request": request, "response": response}
    if n % 2:
        wrapped = {"request": {"body": request}, "response": {"status_code": 200, "body": response}}
    if "conversation_id" in record:
        wrapped["conversation_id"] = record["conversation_id"]
    return wrapped


def _as_stream(record: dict) -> list[dict]:
    """A request logged as sent (`"stream": true`), then its response's events."""
    request = {
        k: v for k, v in record.items() if k not in (*_RESPONSE_KEYS, "response", "conversation_id")
    }
    request["model"] = record.get("model", "gpt-5")
    request["stream"] = True
    if "conversation_id" in record:
        request["conversation_id"] = record["conversation_id"]
    done = record.get("response") or {k: record[k] for k in _RESPONSE_KEYS if k in record}
    started = {**done, "status": "in_progress", "output": []}
    if "previous_response_id" in record:
        started["previous_response_id"] = done["previous_response_id"] = record[
            "previous_response_id"
        ]
    events: list[dict] = [request, {"type": "response.created", "response": started}]
    for at, item in enumerate(done["output"]):
        growing = {**item, "status": "in_progress"}
        if item.get("type") == "function_call":
            growing["arguments"] = ""
        events.append({"type": "response.output_item.added", "output_index": at, "item": growing})
        if item.get("type") == "function_call":
            events.append(
                {
                    "type": "response.function_call_arguments.delta",
                    "item_id": item.get("id"),
                    "output_index": at,
                    "delta": item["arguments"][:5],
                }
            )
        events.append({"type": "response.output_item.done", "output_index": at, "item": item})
    events.append({"type": "response.completed", "response": {**done, "status": "completed"}})
    return [{**e, "sequence_number": n} if "type" in e else e for n, e in enumerate(events)]


def _read_back(path: Path) -> list[tuple]:
    """What the audit reads of a file, without ids that name the file: user text, tool calls
    (id, name, arguments) and boundaries, in order."""
    out: list[tuple] = []
    for r in read_records(path):
        if isinstance(r, Message) and r.kind == MessageKind.USER_TEXT:
            out.append(("user", r.text))
        elif isinstance(r, ToolCall):
            out.append(("call", r.call_id, r.name, r.arguments_raw))
        elif isinstance(r, Boundary):
            out.append(("boundary", r.id.rsplit("/", 1)[-1]))
    return out


def test_request_wrappers_read_as_the_request_logs_they_wrap(tmp_path, cli):
    """`{"request": {…}, "response": {…}}` lines were read as their response alone: the
    request's input (the user's text) was not read."""
    wrapped = tmp_path / "wrapped.jsonl"
    lines = [_as_wrapped(r, n) for n, r in enumerate(_plain_requests())]
    wrapped.write_text("".join(json.dumps(x) + "\n" for x in lines))
    plain = [
        (type(r).__name__, getattr(r, "id", None), getattr(r, "call_id", None), r.source.line)
        for r in read_records(REQUESTS)
        if not isinstance(r, Skipped)
    ]
    again = [
        (type(r).__name__, getattr(r, "id", None), getattr(r, "call_id", None), r.source.line)
        for r in read_records(wrapped)
        if not isinstance(r, Skipped)
    ]
    assert again == plain
    assert _verdicts(cli, wrapped) == _verdicts(cli, REQUESTS)


def test_a_streamed_response_log_reads_each_whole_item_once(tmp_path, cli):
    """A request logged as sent, then its response's stream events: the done items are read
    once each (the final `response.completed` repeats them), deltas and partial items are
    not, and `previous_response_id` chains the streamed responses as plain ones."""
    streamed = tmp_path / "streamed.jsonl"
    events = [e for r in _plain_requests() for e in _as_stream(r)]
    streamed.write_text("".join(json.dumps(e) + "\n" for e in events))
    assert detect_format(JsonSource(streamed))[0] is Format.OPENAI
    assert _read_back(streamed) == _read_back(REQUESTS)
    calls = [r for r in read_records(streamed) if isinstance(r, ToolCall)]
    for call in calls:  # each call at the line of its `output_item.done` event
        assert events[call.source.line - 1]["type"] == "response.output_item.done"
    convs = {r.conversation_id for r in read_records(streamed) if isinstance(r, Message)}
    assert len(convs) == 3  # the chain of four responses, the lone one, support-42
    assert _verdicts(cli, streamed) == _verdicts(cli, REQUESTS)


def test_a_log_of_only_final_stream_events_reads_the_final_response(tmp_path):
    """A stream log that kept only the final event of each response."""
    only_final = tmp_path / "final.jsonl"
    events = [
        e
        for r in _plain_requests()
        for e in _as_stream(r)
        if e.get("type") in (None, "response.completed")
    ]
    only_final.write_text("".join(json.dumps(e) + "\n" for e in events))
    assert _read_back(only_final) == _read_back(REQUESTS)
    # each response in its request's conversation (a response alone started its own)
    records = list(read_records(only_final))
    assert len({r.conversation_id for r in records if isinstance(r, Message | ToolCall)}) == 3


def test_streamed_responses_to_full_history_requests_are_aligned_as_logged_outputs(tmp_path):
    """Requests of one session that send the whole history (no previous_response_id), each
    followed by its streamed response: the next request sends the streamed items back. They
    were read again, the function call as a second call (`call_1#2`); they are read as when
    each request's line holds its response's `output`."""
    user = {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "x"}]}
    u1 = {**user, "content": [{"type": "input_text", "text": "Refund ORD-77812"}]}
    u2 = {**user, "content": [{"type": "input_text", "text": "Thanks"}]}
    fc = {
        "type": "function_call",
        "id": "fc_1",
        "call_id": "call_1",
        "name": "refund",
        "arguments": '{"order":"ORD-77812"}',
        "status": "completed",
    }
    fco = {"type": "function_call_output", "call_id": "call_1", "output": "done"}
    msg = {
        "type": "message",
        "id": "msg_2",
        "role": "assistant",
        "status": "completed",
        "content": [{"type": "output_text", "text": "Refunded."}],
    }
    turns = [
        ([u1], [fc], "resp_1"),
        ([u1, fc, fco], [msg], "resp_2"),
        ([u1, fc, fco, msg, u2], [], "resp_3"),
    ]
    logged, streamed = [], []
    for sent, output, rid in turns:
        request = {"model": "gpt-5", "session_id": "s1", "input": sent}
        logged.append({**request, "response": {"id": rid, "output": output}})
        streamed += _as_stream({**request, "id": rid, "object": "response", "output": output})

    def timeline(path: Path, lines: list[dict]) -> list[tuple]:
        path.write_text("".join(json.dumps(x) + "\n" for x in lines))
        return [
            (type(r).__name__, getattr(r, "id", None) or r.call_id)
            for r in read_records(path)
            if isinstance(r, Message | ToolCall | ToolResult)
        ]

    expected = timeline(tmp_path / "logged.jsonl", logged)
    assert expected == [
        ("Message", "s1/0"),
        ("ToolCall", "call_1"),
        ("ToolResult", "call_1"),
        ("Message", "s1/msg_2"),
        ("Message", "s1/4"),
    ]
    assert timeline(tmp_path / "streamed.jsonl", streamed) == expected
