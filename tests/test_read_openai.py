"""OpenAI chat reader: fixtures, derived ids, and every real tau-bench and gorilla-bfcl file."""

from __future__ import annotations

import json
import re
from collections import Counter
from pathlib import Path

import pytest
from conftest import shared_data

from lexkeep.core.ingest import (
    JsonSource,
    UnrecognisedFormat,
    detect_format,
    ingest_paths,
    read_records,
)
from lexkeep.core.model import (
    ArgumentsKind,
    Conversation,
    Format,
    Message,
    MessageKind,
    Skipped,
    ToolCall,
    ToolResult,
)

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "openai"


def by_type(records: list) -> Counter:
    return Counter(type(r).__name__ for r in records)


def test_chats_fixture():
    records = list(read_records(FIXTURES / "chats.jsonl"))
    convs = [r.id for r in records if isinstance(r, Conversation)]
    # `id`, then no id (named after the file and the record), then `session_id`.
    assert convs[0] == "chat-a" and convs[2] == "sess-9"
    assert re.fullmatch(r"chats\.jsonl#[0-9a-f]{16}", convs[1])
    calls = {r.call_id: r for r in records if isinstance(r, ToolCall)}
    assert calls["call_A1"].arguments_raw == '{"order_id": "#W2378156"}'
    assert calls["call_A1"].arguments_kind == ArgumentsKind.JSON_STRING
    assert calls["call_A1"].message_id == "chat-a/2"
    assert calls["call_B1"].arguments_raw == '{"reservation": "ZK81QX"'  # invalid JSON, kept
    results = [r for r in records if isinstance(r, ToolResult)]
    assert [r.call_id for r in results] == ["call_A1", "call_B1"]
    kinds = {r.id: r.kind for r in records if isinstance(r, Message)}
    assert kinds["sess-9/0"] == MessageKind.INJECTED  # <environment_context> is not the user
    assert kinds["sess-9/1"] == MessageKind.USER_TEXT
    assert kinds[f"{convs[1]}/0"] == MessageKind.USER_TEXT  # text given as content parts


def test_tau_bench_shaped_array():
    records = list(read_records(FIXTURES / "results.json"))
    convs = [r for r in records if isinstance(r, Conversation)]
    assert [(c.id, c.title, c.source.line) for c in convs] == [
        ("results.json#0", "task 3 trial 0", 2),
        ("results.json#1", "task 4 trial 1", 43),
    ]
    assert by_type(records) == Counter(
        {"Message": 5, "Conversation": 2, "ToolCall": 1, "ToolResult": 1}
    )


def test_bare_messages_per_line():
    records = list(read_records(FIXTURES / "bare_messages.jsonl"))
    assert records[0] == Conversation("bare_messages.jsonl", Format.OPENAI, records[0].source)
    msgs = [r for r in records if isinstance(r, Message)]
    assert [m.id for m in msgs] == [
        "bare_messages.jsonl/L1",
        "bare_messages.jsonl/L2",
        "bare_messages.jsonl/L4",
    ]


def test_unknown_role_and_non_object_message_are_counted_not_fatal(tmp_path):
    path = tmp_path / "odd.jsonl"
    path.write_text(
        '{"messages": [{"role": "critic", "content": "x"}, 7, {"role": "user", "content": "hi"}]}\n'
    )
    records = list(read_records(path, Format.OPENAI))
    skipped = [r for r in records if isinstance(r, Skipped)]
    assert [(s.reason, s.fatal) for s in skipped] == [
        ("unknown_role", False),
        ("invalid_message", False),
    ]
    assert sum(isinstance(r, Message) for r in records) == 1


def _tau_files() -> list[Path]:
    return sorted((shared_data() / "apollo-tau-bench" / "tau" / "results").glob("*.json"))


def test_every_tau_bench_file_counts_match_json_module():
    files = _tau_files()
    assert len(files) == 548
    totals: Counter = Counter()
    for path in files:
        records = list(read_records(path))
        runs = json.loads(path.read_text())  # independent count, per file, with the json module
        expected = Counter(
            conversations=len(runs),
            user=sum(m["role"] == "user" for r in runs for m in r["traj"]),
            calls=sum(len(m.get("tool_calls") or []) for r in runs for m in r["traj"]),
            results=sum(m["role"] == "tool" for r in runs for m in r["traj"]),
        )
        got = Counter(
            conversations=sum(isinstance(r, Conversation) for r in records),
            user=sum(isinstance(r, Message) and r.kind == MessageKind.USER_TEXT for r in records),
            calls=sum(isinstance(r, ToolCall) for r in records),
            results=sum(isinstance(r, ToolResult) for r in records),
        )
        assert +got == +expected, path.name
        assert not any(isinstance(r, Skipped) for r in records), path.name
        totals += got
    # cd ../shared/data/apollo-tau-bench && python -c "import json,glob; d=[r for f in
    #   glob.glob('tau/results/*.json') for r in json.load(open(f))]; print(len(d),
    #   sum(m['role']=='user' for r in d for m in r['traj']), sum(len(m.get('tool_calls')
    #   or []) for r in d for m in r['traj']))"   ->   587 7301 8168  (boundaries: none)
    assert (totals["conversations"], totals["user"], totals["calls"]) == (587, 7301, 8168)


def test_every_tau_bench_file_ingests(tmp_path):
    """All 548 files through the store; counts as above, every call's raw arguments kept."""
    from lexkeep.core.store import Store

    files = _tau_files()
    with Store.open(tmp_path / "tau.duckdb") as store:
        counts = ingest_paths(store, [str(f) for f in files])
        assert [c.status for c in counts] == ["ingested"] * 548
        con = store.con
        # 587, not 565: runs of different result files equal byte for byte (35 runs in 13
        # groups here, each failed before its first message) stay apart, named after their
        # file (docs/formats.md, tau-bench runs).
        assert con.execute("SELECT count(*) FROM conversations").fetchone()[0] == 587
        assert (
            con.execute("SELECT count(*) FROM messages WHERE kind = 'user_text'").fetchone()[0]
            == 7301
        )
        assert con.execute("SELECT count(*) FROM tool_calls").fetchone()[0] == 8168
        assert con.execute("SELECT count(*) FROM boundaries").fetchone()[0] == 0
        # Raw argument text equals the recorded JSON string byte for byte.
        sample = files[5]
        raw = [
            c["function"]["arguments"]
            for r in json.loads(sample.read_text())
            for m in r["traj"]
            for c in m.get("tool_calls") or []
        ]
        stored = [
            a
            for (a,) in con.execute(
                "SELECT arguments_raw FROM tool_calls WHERE source_file = ?"
                " ORDER BY conversation_id, position",
                [str(sample)],
            ).fetchall()
        ]
        assert stored == raw


def test_gorilla_bfcl_is_not_a_trace():
    """BFCL holds questions, gold answers and tool schemas, not traces: it is not read.

    Named explicitly it is an error naming the file; found by walking a folder it is skipped
    with status "unrecognised" (see docs/formats.md).
    """
    root = shared_data() / "gorilla-bfcl"
    files = sorted(root.rglob("*.json"))
    # find ../shared/data/gorilla-bfcl -name '*.json' | wc -l   ->   14
    assert len(files) == 14
    for path in files:
        with pytest.raises(UnrecognisedFormat) as info:
            detect_format(JsonSource(path))
        assert info.value.path == str(path)


def test_object_arguments_keep_numbers_as_the_file_writes_them(tmp_path):
    """`function.arguments` given as an object: a 20-digit number stays as written."""
    big = 98765432109876543210
    call = {"id": "call_1", "type": "function", "function": {"name": "refund"}}
    call["function"]["arguments"] = {"account": big}
    path = tmp_path / "chat.jsonl"
    path.write_text(
        json.dumps({"role": "user", "content": f"refund {big}"})
        + "\n"
        + json.dumps({"role": "assistant", "content": None, "tool_calls": [call]})
        + "\n"
    )
    [got] = [r for r in read_records(path, Format.OPENAI) if isinstance(r, ToolCall)]
    assert (got.arguments_raw, got.arguments_kind) == (
        f'{{"account":{big}}}',
        ArgumentsKind.OBJECT,
    )


def _call(call_id: str, args: str) -> dict:
    return {"id": call_id, "type": "function", "function": {"name": "f", "arguments": args}}


def test_call_ids_repeated_per_turn_are_kept_apart(tmp_path, cli):
    """OpenAI-compatible servers often number calls per turn (`call_0` in every turn) or give
    an empty id. The later call and its result were left out as already stored: the audit saw
    no use of ORD-77812 after the boundary and reported it missing."""
    messages = [
        {"role": "user", "content": "look up order ORD-77812 please"},
        {"role": "assistant", "content": None, "tool_calls": [_call("call_0", '{"q": "x"}')]},
        {"role": "tool", "tool_call_id": "call_0", "content": "none"},
        {"type": "compaction", "id": "cmp_1"},
        {"role": "assistant", "tool_calls": [_call("call_0", '{"q": "ORD-77812"}')]},
        {"role": "tool", "tool_call_id": "call_0", "content": "found"},
        {"role": "assistant", "tool_calls": [_call("", "{}"), _call("", '{"n": 2}')]},
        {"role": "assistant", "content": "done"},
    ]
    path = tmp_path / "chat.jsonl"
    path.write_text(json.dumps({"id": "dup", "messages": messages}) + "\n")
    records = list(read_records(path, Format.OPENAI))
    calls = [(r.call_id, r.arguments_raw) for r in records if isinstance(r, ToolCall)]
    assert calls == [
        ("call_0", '{"q": "x"}'),
        ("call_0#2", '{"q": "ORD-77812"}'),
        ("dup/6/call0", "{}"),
        ("dup/6/call1", '{"n": 2}'),
    ]
    results = [(r.call_id, r.text) for r in records if isinstance(r, ToolResult)]
    assert results == [("call_0", "none"), ("call_0#2", "found")]

    db = tmp_path / "s.duckdb"
    ingested = cli("ingest", path, "--input-format", "openai", "--db", db)
    assert ingested.exit_code == 0, ingested.stderr
    audited = cli("audit", "--db", db, "--format", "json")
    assert audited.exit_code == 0, audited.stderr
    [finding] = json.loads(audited.stdout)["findings"]
    assert (finding["value"], finding["verdict"]) == ("ORD-77812", "kept")


def _completion(n: int, message: dict, finish: str) -> dict:
    """A Chat Completions response object answering with `message`."""
    return {
        "id": f"chatcmpl-{n}",
        "object": "chat.completion",
        "model": "gpt-4o",
        "choices": [{"index": 0, "message": message, "finish_reason": finish, "logprobs": None}],
        "usage": {"prompt_tokens": 10, "completion_tokens": 5},
    }


def _chat_calls() -> tuple[list[list[dict]], list[dict]]:
    """Three requests of one conversation (their message lists) and the message each
    response answered with: a tool call, a text, and after a compaction (the client keeps
    the system prompt and the newest turn) a call that uses what the user typed before it."""
    tool_call = {
        "id": "call_abc",
        "type": "function",
        "function": {"name": "lookup_order", "arguments": '{"order_id":"ORD-77812"}'},
    }
    system = {"role": "system", "content": "You handle refunds."}
    u0 = {"role": "user", "content": "Refund order ORD-77812, invoice INV-2025-08-44719."}
    a0 = {"role": "assistant", "content": None, "tool_calls": [tool_call], "refusal": None}
    t0 = {"role": "tool", "tool_call_id": "call_abc", "content": "delivered"}
    a1 = {"role": "assistant", "content": "Delivered. Refund it?", "refusal": None}
    u1 = {"role": "user", "content": "Yes please."}
    compaction = {"type": "compaction", "id": "cmp_1", "encrypted_content": "gAAAAB-opaque"}
    refund = {
        "id": "call_def",
        "type": "function",
        "function": {"name": "refund", "arguments": '{"order_id":"ORD-77812"}'},
    }
    a2 = {"role": "assistant", "content": None, "tool_calls": [refund]}
    # the client sends a response's message back without its null keys
    sent_a0 = {"role": "assistant", "content": None, "tool_calls": [tool_call]}
    requests = [
        [system, u0],
        [system, u0, sent_a0, t0],
        [system, compaction, u1],
    ]
    return requests, [a0, a1, a2]


def test_chat_completions_request_response_wrappers_are_read(tmp_path, cli):
    """`{"request": {"messages": …}, "response": {"choices": …}}` lines (a proxy's log of
    Chat Completions calls; either side may be under `body`) were not read at all: the file
    was `not a recognised trace format`. They are read as the request's messages followed by
    the response's `choices[0].message`, each message once: the same records as the log
    written with each request's answer in its list."""
    requests, answers = _chat_calls()
    finishes = ["tool_calls", "stop", "tool_calls"]
    wrapped = []
    for n, (messages, answer) in enumerate(zip(requests, answers, strict=True)):
        request = {"model": "gpt-4o", "messages": messages, "temperature": 0}
        response = _completion(n, answer, finishes[n])
        line: dict = {"session_id": "s-1", "id": f"log-{n}"}  # the log entry's own id
        if n == 1:  # a log of the HTTP exchange
            line |= {
                "request": {"body": request},
                "response": {"status_code": 200, "body": response},
            }
        else:
            line |= {"request": request, "response": response}
        wrapped.append(line)
    path = tmp_path / "chat.jsonl"
    path.write_text("".join(json.dumps(w) + "\n" for w in wrapped))
    listed = tmp_path / "listed.jsonl"  # the same calls, each answer at the end of its list
    listed.write_text(
        "".join(
            json.dumps({"session_id": "s-1", "messages": [*m, a]}) + "\n"
            for m, a in zip(requests, answers, strict=True)
        )
    )
    assert detect_format(JsonSource(path))[0] is Format.OPENAI

    def shown(file: Path) -> list[tuple]:
        out = []
        for r in read_records(file):
            if isinstance(r, Message):
                out.append(("message", r.id, r.kind.value, r.text, r.source.line))
            elif isinstance(r, ToolCall):
                out.append(("call", r.call_id, r.name, r.arguments_raw, r.source.line))
            elif isinstance(r, ToolResult):
                out.append(("result", r.call_id, r.text, r.source.line))
        return out

    got = shown(path)
    assert got == shown(listed)
    assert [g[:2] for g in got] == [
        ("message", "s-1/0"),
        ("message", "s-1/1"),
        ("message", "s-1/2"),  # the first response, read once though sent back
        ("call", "call_abc"),
        ("result", "call_abc"),
        ("message", "s-1/4"),  # the second response (under `body`)
        ("message", "s-1/6"),  # after the compaction: the user's next turn
        ("message", "s-1/7"),
        ("call", "call_def"),
    ]
    assert got[3][4] == 1 and got[5][4] == 2  # each response at its own line

    ingested = cli("ingest", path, "--db", tmp_path / "store.duckdb")
    assert ingested.exit_code == 0, ingested.stderr
    assert "1 conversation, 6 messages, 2 tool calls, 1 boundary" in ingested.stderr
    audited = cli("audit", path, "--format", "json", "--exit-zero")
    assert audited.exit_code == 0, audited.stderr
    verdicts = {f["value"]: f["verdict"] for f in json.loads(audited.stdout)["findings"]}
    assert verdicts == {"ORD-77812": "kept", "INV-2025-08-44719": "missing"}
