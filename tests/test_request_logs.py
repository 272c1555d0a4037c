"""Request logs: records that share a conversation id repeat it, and clients drop messages.

Message ids were each message's index in its request's list. After an Anthropic compaction
the client drops the messages before the compaction block, the indexes start again, and newer
messages took the ids of older ones: the second user turn after the compaction was left out as
already stored (its identifiers never audited), and the boundary was stored twice.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import COMPACTED_LOG, COMPACTED_LOG_VERDICTS, ingest_rows
from hypothesis import given, settings
from hypothesis import strategies as st

from lexkeep.core.ingest import read_records
from lexkeep.core.model import Boundary, Format, Message, MessageKind, ToolCall, ToolResult
from lexkeep.core.requestlog import RequestLog, fingerprint
from lexkeep.core.store import Store

COMPACTED = COMPACTED_LOG


def _timeline(path: Path, fmt: Format | None = None) -> list[tuple[str, str]]:
    """(type, id) of every timeline record the reader gives, in order."""
    out = []
    for r in read_records(path, fmt):
        if isinstance(r, Message):
            out.append(("message", r.id))
        elif isinstance(r, Boundary):
            out.append(("boundary", r.id))
        elif isinstance(r, ToolCall | ToolResult):
            out.append((type(r).__name__, r.call_id))
    return out


def test_compacted_request_log_reads_each_message_once_in_timeline_order():
    records = list(read_records(COMPACTED))
    users = [r.text for r in records if isinstance(r, Message) and r.kind == MessageKind.USER_TEXT]
    assert [text.split()[0] for text in users] == ["Hi,", "Yes,", "Thanks."]
    assert _timeline(COMPACTED) == [
        ("message", "sess-7f3a/system"),
        ("message", "sess-7f3a/0"),  # first user turn
        ("message", "sess-7f3a/1"),
        ("ToolCall", "toolu_01VbX"),
        ("ToolResult", "toolu_01VbX"),
        ("message", "sess-7f3a/3"),
        ("message", "sess-7f3a/4"),  # second user turn
        # first compaction: after what it summarised, before the response's own text
        ("boundary", "sess-7f3a/5/compaction0"),
        ("message", "sess-7f3a/5"),
        ("ToolCall", "toolu_02Kd1"),
        # the client dropped the messages before the compaction from here on
        ("ToolResult", "toolu_02Kd1"),
        ("message", "sess-7f3a/7"),
        ("ToolCall", "toolu_03Hn4"),
        ("ToolResult", "toolu_03Hn4"),
        ("message", "sess-7f3a/9"),
        ("message", "sess-7f3a/10"),  # third user turn, lost before
        ("boundary", "sess-7f3a/11/compaction0"),
        ("message", "sess-7f3a/11"),
        ("ToolCall", "toolu_04Zp9"),
        ("ToolResult", "toolu_04Zp9"),
        ("message", "sess-7f3a/13"),
    ]


def _verdicts(cli, *args) -> dict[str, str]:
    audited = cli("audit", *args, "--format", "json", "--exit-zero")
    assert audited.exit_code == 0, audited.stderr
    return {f["value"]: f["verdict"] for f in json.loads(audited.stdout)["findings"]}


EXPECTED = COMPACTED_LOG_VERDICTS


def test_compacted_request_log_ingest_audit_and_reingest(cli, tmp_path):
    db = tmp_path / "store.duckdb"
    ingested = cli("ingest", COMPACTED, "--db", db)
    assert ingested.exit_code == 0, ingested.stderr
    assert _verdicts(cli, "--db", db) == EXPECTED
    assert _verdicts(cli, COMPACTED) == EXPECTED  # the audit of the file in memory agrees
    with Store.open(db) as store:
        con = store.con
        boundaries = con.execute(
            "SELECT id, left(summary_text, 21) FROM boundaries ORDER BY position"
        ).fetchall()
        assert boundaries == [
            ("sess-7f3a/5/compaction0", "Summary: the customer"),
            ("sess-7f3a/11/compaction0", "Summary: refund for O"),
        ]
        users = con.execute(
            "SELECT id FROM messages WHERE kind = 'user_text' ORDER BY position"
        ).fetchall()
        assert users == [("sess-7f3a/0",), ("sess-7f3a/4",), ("sess-7f3a/10",)]
        before = ingest_rows(store)

    again = cli("ingest", COMPACTED, "--db", db)
    assert again.exit_code == 0, again.stderr
    assert "unchanged" in again.stderr
    with Store.open(db) as store:
        after = ingest_rows(store)
    assert {t: rows for t, rows in after.items() if t != "ingest_runs"} == {
        t: rows for t, rows in before.items() if t != "ingest_runs"
    }


def test_a_grown_request_log_adds_only_its_new_requests(cli, tmp_path):
    """Lines 1-4 (up to the first request after the compaction), then the whole file: the
    store is the one a single ingest of the whole file makes."""
    lines = COMPACTED.read_text().splitlines(keepends=True)
    live = tmp_path / "live.jsonl"
    live.write_text("".join(lines[:4]))
    first = cli("ingest", live, "--db", tmp_path / "grown.duckdb")
    assert first.exit_code == 0, first.stderr
    live.write_text("".join(lines))
    grown = cli("ingest", live, "--db", tmp_path / "grown.duckdb")
    assert grown.exit_code == 0, grown.stderr
    whole = cli("ingest", live, "--db", tmp_path / "whole.duckdb")
    assert whole.exit_code == 0, whole.stderr

    def timeline(db: Path) -> dict[str, list[tuple]]:
        # A conversation row keeps the file:line of its first request, in both.
        with Store.open(db) as store:
            rows = ingest_rows(store)
        skip = ("ingest_runs", "ingest_errors")
        return {t: r for t, r in rows.items() if t not in skip}

    assert timeline(tmp_path / "grown.duckdb") == timeline(tmp_path / "whole.duckdb")


def _write(path: Path, records: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


def _user(text: str) -> dict:
    return {"role": "user", "content": text}


def _said(text: str) -> dict:
    return {"role": "assistant", "content": [{"type": "text", "text": text}]}


def test_a_message_typed_again_is_new_and_a_request_sent_again_adds_nothing(tmp_path):
    """The rule in docs/formats.md: equal messages are told apart by where the list puts
    them, not by their text."""
    convo = [_user("ok"), _said("Done."), _user("ok"), _said("Done.")]
    requests = [
        {"session_id": "s", "messages": convo[:1], "response": convo[1]},
        {"session_id": "s", "messages": convo[:1], "response": convo[1]},  # a retry
        {"session_id": "s", "messages": convo[:3], "response": convo[3]},
        # trimmed to the last exchange, then "ok" once more: a third message, not the second
        {"session_id": "s", "messages": [*convo[2:], _user("ok")], "response": _said("Sure.")},
    ]
    path = _write(tmp_path / "requests.jsonl", requests)
    texts = [(r.id, r.text) for r in read_records(path, Format.ANTHROPIC) if isinstance(r, Message)]
    assert texts == [
        ("s/0", "ok"),
        ("s/1", "Done."),
        ("s/2", "ok"),
        ("s/3", "Done."),
        ("s/4", "ok"),
        ("s/5", "Sure."),
    ]


def test_a_response_sent_back_without_thinking_or_with_a_cache_mark_is_the_same_message(
    tmp_path,
):
    thinking = {"type": "thinking", "thinking": "Look it up.", "signature": "sig"}
    text = {"type": "text", "text": "Order ORD-77812 is open."}
    marked = {**text, "cache_control": {"type": "ephemeral"}}
    requests = [
        {
            "id": "c",
            "messages": [_user("status of ORD-77812?")],
            "response": {
                "id": "msg_1",
                "type": "message",
                "role": "assistant",
                "content": [thinking, text],
                "stop_reason": "end_turn",
                "usage": {"input_tokens": 9, "output_tokens": 7},
            },
        },
        {
            "id": "c",
            "messages": [
                _user("status of ORD-77812?"),
                {"role": "assistant", "content": [marked]},
                _user("thanks"),
            ],
        },
    ]
    path = _write(tmp_path / "requests.jsonl", requests)
    ids = [r.id for r in read_records(path, Format.ANTHROPIC) if isinstance(r, Message)]
    assert ids == ["c/0", "c/1", "c/2"]


def _call(call_id: str, name: str, args: dict) -> dict:
    return {
        "id": call_id,
        "type": "function",
        "function": {"name": name, "arguments": json.dumps(args)},
    }


def test_openai_request_log_with_a_trimmed_history(tmp_path, cli):
    """The same weakness in OpenAI chat request logs: a client that keeps the system prompt
    and the latest turns (here after a Responses-style `compaction` item), with a server that
    numbers tool calls per turn (`call_0` each time)."""
    system = {"role": "system", "content": "You handle returns."}
    u0 = _user("Refund order ORD-77812, invoice INV-2025-08-44719.")
    a0 = {
        "role": "assistant",
        "content": None,
        "tool_calls": [_call("call_0", "lookup", {"order": "ORD-77812"})],
    }
    t0 = {"role": "tool", "tool_call_id": "call_0", "content": "delivered"}
    a1 = {"role": "assistant", "content": "Delivered. Refund it?"}
    u1 = _user("Yes, and email dana.kim@example.com.")
    compaction = {"type": "compaction", "id": "cmp_1", "encrypted_content": "gAAAAB-opaque"}
    a2 = {
        "role": "assistant",
        "content": None,
        "tool_calls": [_call("call_0", "refund", {"order": "ORD-77812"})],
    }
    t2 = {"role": "tool", "tool_call_id": "call_0", "content": "refunded"}
    u2 = _user("Thanks, also ship to warehouse WH-4471-B.")
    requests = [
        {"conversation_id": "chat-9", "messages": [system, u0]},
        {"conversation_id": "chat-9", "messages": [system, u0, a0, t0]},
        {"conversation_id": "chat-9", "messages": [system, u0, a0, t0, a1, u1]},
        {"conversation_id": "chat-9", "messages": [system, compaction, a2, t2]},
        {"conversation_id": "chat-9", "messages": [system, compaction, a2, t2, u2]},
    ]
    path = _write(tmp_path / "chat.jsonl", requests)
    assert _timeline(path, Format.OPENAI) == [
        ("message", "chat-9/0"),
        ("message", "chat-9/1"),
        ("message", "chat-9/2"),
        ("ToolCall", "call_0"),
        ("ToolResult", "call_0"),
        ("message", "chat-9/4"),
        ("message", "chat-9/5"),
        ("boundary", "chat-9/6"),
        ("message", "chat-9/7"),
        ("ToolCall", "call_0#2"),  # not the first call_0 again
        ("ToolResult", "call_0#2"),
        ("message", "chat-9/9"),  # the user turn after the compaction
    ]
    db = tmp_path / "chat.duckdb"
    ingested = cli("ingest", path, "--db", db)
    assert ingested.exit_code == 0, ingested.stderr
    assert _verdicts(cli, "--db", db) == {
        "ORD-77812": "kept",
        "INV-2025-08-44719": "missing",
        "dana.kim@example.com": "missing",
    }


def _prints(*names: str) -> list[bytes]:
    return [fingerprint(n) for n in names]


def test_a_list_that_leaves_the_timeline_is_new_from_where_it_leaves():
    log = RequestLog()
    assert log.new_messages("c", _prints("s", "u1", "a1", "u2")) == (0, 0)
    # an older state sent again (a retry before u2): nothing new
    assert log.new_messages("c", _prints("s", "u1")) == (2, 4)
    # an edit: u1 answered differently, then u2 typed again; both follow the timeline's end
    assert log.new_messages("c", _prints("s", "u1", "a1'", "u2")) == (2, 4)
    # a sliding window that keeps the system prompt: only the last message is new
    assert log.new_messages("c", _prints("s", "a1'", "u2", "u3")) == (3, 6)


@given(
    size=st.integers(1, 30),
    cuts=st.lists(st.tuples(st.integers(0, 30), st.integers(1, 30)), min_size=1, max_size=12),
    keep_head=st.booleans(),
)
@settings(max_examples=300, deadline=None)
def test_distinct_messages_are_each_read_once_whatever_the_client_drops(size, cuts, keep_head):
    """Requests show windows of a conversation (the end never moves back, the start never
    moves back, optionally the first message kept as a system prompt): every message shown is
    numbered once, in conversation order, and nothing shown is missed."""
    conversation = [f"m{i}" for i in range(size)]
    windows = []
    start = end = 0
    for a, b in cuts:
        end = min(size, max(end, b))
        start = min(max(start, a), end - 1)
        head = [0] if keep_head and start > 0 else []
        windows.append([*head, *range(start, end)])
    log = RequestLog()
    numbered: list[int] = []
    for window in windows:
        at, first = log.new_messages("c", _prints(*(conversation[i] for i in window)))
        assert first == len(numbered)
        numbered.extend(window[at:])
    shown = sorted({i for window in windows for i in window})
    assert numbered == shown


def test_a_request_log_split_over_files_sends_its_calls_again_without_a_conflict(tmp_path):
    """The second file of a split log starts with the whole history again, and the client
    writes a tool call's input back with its keys in another order and other spacing: the
    same call, so nothing is recorded as left out. A call that does differ (another number
    as written, another value) is."""
    from lexkeep.core.ingest import ingest_paths

    def use(raw_input: str) -> dict:
        block = {"type": "tool_use", "id": "toolu_1", "name": "ls", "input": "INPUT"}
        return {"role": "assistant", "content": [block], "raw": raw_input}

    def result() -> dict:
        block = {"type": "tool_result", "tool_use_id": "toolu_1", "content": "a.log"}
        return {"role": "user", "content": [block]}

    def write(path: Path, requests: list[dict]) -> Path:
        lines = []
        for request in requests:
            text = json.dumps(request)
            for message in request["messages"] + [request.get("response") or {}]:
                if "raw" in message:  # the input exactly as this request writes it
                    text = text.replace(', "raw": ' + json.dumps(message["raw"]), "", 1)
                    text = text.replace('"INPUT"', message["raw"], 1)
            lines.append(text + "\n")
        path.write_text("".join(lines))
        return path

    first = '{"path": "/var/log/app", "depth": 1.50}'
    again = '{"depth":1.50,"path" : "/var/log/app"}'
    ask = _user("list /var/log/app")
    day1 = write(
        tmp_path / "day1.jsonl",
        [
            {"session_id": "s", "messages": [ask], "response": use(first)},
            {"session_id": "s", "messages": [ask, use(again), result()]},
        ],
    )
    history = [ask, use(again), result(), _said("Done."), _user("and /tmp?")]
    day2 = write(tmp_path / "day2.jsonl", [{"session_id": "s", "messages": history}])
    changed = [ask, use('{"depth":1.5,"path":"/var/log/app"}'), result()]
    day3 = write(tmp_path / "day3.jsonl", [{"session_id": "s", "messages": changed}])
    with Store.open(None) as store:
        counts = ingest_paths(store, [str(day1), str(day2)])
        # Ingested on its own later, day 3 goes on from days 1 and 2: its request sends the
        # history again (its `1.5` decodes as the `1.50` stored, the same message to the
        # alignment), so it adds nothing and nothing is left out.
        added = ingest_paths(store, [str(day3)])[0]
        calls = store.con.execute("SELECT call_id FROM tool_calls ORDER BY ALL").fetchall()
        assert store.con.execute("SELECT count(*) FROM ingest_errors").fetchone()[0] == 0
    assert counts[1].conflicts == (0, None) and counts[1].tool_calls_added == 0
    assert calls == [("toolu_1",)] and added.tool_calls_added == added.messages_added == 0
    with Store.open(None) as store:
        ingest_paths(store, [str(day1), str(day2)])
        # A store that kept no state of the log (written by an older lexkeep): day 3 alone is
        # aligned on its own, and its call, the stored one's id with another number, is left
        # out and recorded.
        store.con.execute("DELETE FROM request_log_state")
        ingest_paths(store, [str(day3)])
        rows = store.con.execute("SELECT path, line, detail FROM ingest_errors").fetchall()
    assert rows == [(str(day3), 1, "tool_call 'toolu_1' in conversation 's'")]


def test_a_request_log_conversation_starts_at_its_first_request(cli, tmp_path):
    """Every request of a log names the conversation again: its file:line (show, the audit's
    conversations and JUnit test cases) stays the first request's, where it begins, for
    Anthropic and OpenAI chat logs alike."""
    chat = _write(
        tmp_path / "chat.jsonl",
        [
            {"id": "cv-1", "messages": [_user("Refund ORD-55123")]},
            {"id": "cv-1", "messages": [_user("Refund ORD-55123"), _said("Done.")]},
        ],
    )
    for log, conv in ((COMPACTED, "sess-7f3a"), (chat, "cv-1")):
        db = tmp_path / f"{log.stem}.duckdb"
        assert cli("ingest", log, "--db", db).exit_code == 0
        shown = json.loads(cli("show", conv, "--db", db, "--format", "json").stdout)
        assert shown["source_line"] == 1, log
    audited = json.loads(cli("audit", COMPACTED, "--format", "json").stdout)
    assert [c["line"] for c in audited["conversations"]] == [1]


def _trimmed_chat_requests() -> list[dict]:
    """The requests of test_openai_request_log_with_a_trimmed_history, plus a second
    compaction after the user's last turn and a call that uses what the user typed."""
    system = {"role": "system", "content": "You handle returns."}
    u0 = _user("Refund order ORD-77812, invoice INV-2025-08-44719.")
    a0 = {"role": "assistant", "content": None, "tool_calls": [_call("call_0", "lookup", {})]}
    t0 = {"role": "tool", "tool_call_id": "call_0", "content": "delivered"}
    a1 = {"role": "assistant", "content": "Delivered. Refund it?"}
    u1 = _user("Yes, and email dana.kim@example.com.")
    compaction = {"type": "compaction", "id": "cmp_1", "encrypted_content": "gAAAAB-opaque"}
    a2 = {
        "role": "assistant",
        "content": None,
        "tool_calls": [_call("call_0", "refund", {"order": "ORD-77812"})],
    }
    t2 = {"role": "tool", "tool_call_id": "call_0", "content": "refunded"}
    u2 = _user("Thanks, also ship to warehouse WH-4471-B.")
    again = {"type": "compaction", "id": "cmp_2", "encrypted_content": "gAAAAB-opaque-2"}
    a3 = {
        "role": "assistant",
        "content": None,
        "tool_calls": [_call("call_0", "ship", {"warehouse": "WH-4471-B"})],
    }
    return [
        {"conversation_id": "chat-9", "messages": [system, u0]},
        {"conversation_id": "chat-9", "messages": [system, u0, a0, t0]},
        {"conversation_id": "chat-9", "messages": [system, u0, a0, t0, a1, u1]},
        {"conversation_id": "chat-9", "messages": [system, compaction, a2, t2]},
        {"conversation_id": "chat-9", "messages": [system, compaction, a2, t2, u2]},
        {"conversation_id": "chat-9", "messages": [system, again, a3]},
    ]


def _stored(db: Path) -> dict[str, list[tuple]]:
    """Messages, tool calls and boundaries by id (without where they came from), and the
    ingest errors."""
    with Store.open(db) as store:
        con = store.con
        return {
            "messages": con.execute("SELECT id, kind, text FROM messages ORDER BY id").fetchall(),
            "tool_calls": con.execute(
                "SELECT call_id, name, arguments_raw FROM tool_calls ORDER BY call_id"
            ).fetchall(),
            "boundaries": con.execute("SELECT id FROM boundaries ORDER BY id").fetchall(),
            "errors": con.execute(
                "SELECT path, line, reason, detail FROM ingest_errors ORDER BY ALL"
            ).fetchall(),
        }


def test_a_request_log_rotated_into_several_files_is_aligned_across_them(cli, tmp_path):
    """A log rotated after the third request: the fourth request, first of the next file,
    sends the trimmed history. Read per file, it was numbered from 0 again and its messages,
    its `call_0` and the user's next turn were left out as `id_conflict` against the first
    file's; a folder (or several files) is aligned as the one file would be."""
    requests = _trimmed_chat_requests()
    whole = _write(tmp_path / "requests.jsonl", requests)
    logs = tmp_path / "logs"
    logs.mkdir()
    _write(logs / "requests.1.jsonl", requests[:3])
    second = _write(logs / "requests.2.jsonl", requests[3:])
    for name, target in (("whole", whole), ("split", logs)):
        assert cli("ingest", target, "--db", tmp_path / f"{name}.duckdb").exit_code == 0
    split = _stored(tmp_path / "split.duckdb")
    assert split["errors"] == []
    assert split == _stored(tmp_path / "whole.duckdb")

    audited = cli("audit", logs, "--format", "json", "--exit-zero")
    assert audited.exit_code == 0, audited.stderr
    report = json.loads(audited.stdout)
    found = {f["value"]: f for f in report["findings"]}
    assert found["WH-4471-B"]["verdict"] == "kept"
    assert found["WH-4471-B"]["message"] == {"file": str(second), "line": 2}
    # the call that kept it is the second file's third line, its own `call_0` (the third)
    assert (found["WH-4471-B"]["evidence"]["file"], found["WH-4471-B"]["evidence"]["line"]) == (
        str(second),
        3,
    )
    assert found["WH-4471-B"]["evidence"]["call_id"] == "call_0#3"
    assert found["ORD-77812"]["verdict"] == "kept"
    assert (found["ORD-77812"]["evidence"]["file"], found["ORD-77812"]["evidence"]["line"]) == (
        str(second),
        1,
    )
    assert report["notes"] == []


def test_a_rotated_request_log_read_again_when_its_last_file_grew(cli, tmp_path):
    """The folder ingested while its last file held one request, then again once it grew:
    the unchanged first file is not stored again, yet the grown one is still aligned after
    it, as one ingest of the whole folder aligns it."""
    requests = _trimmed_chat_requests()
    logs = tmp_path / "logs"
    logs.mkdir()
    _write(logs / "requests.1.jsonl", requests[:3])
    _write(logs / "requests.2.jsonl", requests[3:4])
    db = tmp_path / "grown.duckdb"
    assert cli("ingest", logs, "--db", db).exit_code == 0
    _write(logs / "requests.2.jsonl", requests[3:])
    grown = cli("ingest", logs, "--db", db)
    assert grown.exit_code == 0, grown.stderr
    assert "unchanged" in grown.stderr and "appended" in grown.stderr
    assert cli("ingest", logs, "--db", tmp_path / "once.duckdb").exit_code == 0
    assert _stored(db) == _stored(tmp_path / "once.duckdb")
    assert _stored(db)["errors"] == []


def test_a_rotated_request_log_read_ahead_by_workers_is_aligned_as_one_read(tmp_path, monkeypatch):
    """Workers that read small files ahead each read one file alone: a request log's file
    is read again in order by the writing process, after the files before it."""
    from lexkeep.core.ingest import ingest_paths

    monkeypatch.setenv("LEXKEEP_READ_WORKERS", "2")
    requests = _trimmed_chat_requests()
    logs = tmp_path / "logs"
    logs.mkdir()
    for n in range(3):  # three files of two requests each
        _write(logs / f"requests.{n + 1}.jsonl", requests[2 * n : 2 * n + 2])
    whole = _write(tmp_path / "requests.jsonl", requests)
    for name, target, min_bytes in (("ahead", logs, 0), ("whole", whole, None)):
        with Store.open(tmp_path / f"{name}.duckdb") as store:
            ingest_paths(store, [str(target)], read_ahead_min_bytes=min_bytes)
    assert _stored(tmp_path / "ahead.duckdb") == _stored(tmp_path / "whole.duckdb")


def test_a_rotated_request_log_before_a_bad_file_is_kept_whole(cli, tmp_path):
    """A bad line in the folder's last file stops the ingest, and the files before it are
    written again without it: read again from the state before them, not after."""
    requests = _trimmed_chat_requests()
    logs = tmp_path / "logs"
    logs.mkdir()
    _write(logs / "requests.1.jsonl", requests[:3])
    _write(logs / "requests.2.jsonl", requests[3:])
    whole = _write(tmp_path / "requests.jsonl", requests)
    (logs / "requests.3.jsonl").write_text(json.dumps(requests[-1]) + "\n{not json\n")
    bad = cli("ingest", logs, "--db", tmp_path / "split.duckdb")
    assert bad.exit_code == 2 and "requests.3.jsonl:2" in bad.stderr
    assert cli("ingest", whole, "--db", tmp_path / "whole.duckdb").exit_code == 0
    assert _stored(tmp_path / "split.duckdb") == _stored(tmp_path / "whole.duckdb")


# Two Responses API calls, the second naming the first's response (`previous_response_id`).
_RESPONSES_CHAIN = (
    {
        "model": "gpt-4.1",
        "input": "Refund order ORD-77812.",
        "response": {
            "id": "resp_1",
            "output": [{"type": "message", "role": "assistant", "content": "Which card?"}],
        },
    },
    {
        "model": "gpt-4.1",
        "previous_response_id": "resp_1",
        "input": "The Visa, and email dana.kim@example.com.",
        "response": {"id": "resp_2", "output": []},
    },
)


def test_a_responses_chain_continues_in_the_next_file_of_the_same_ingest(tmp_path):
    """`previous_response_id` naming a response logged in an earlier file of the folder: the
    same conversation, as within one file."""
    logs = tmp_path / "logs"
    logs.mkdir()
    first, second = _RESPONSES_CHAIN
    _write(logs / "2025-01-09.jsonl", [first])
    _write(logs / "2025-01-10.jsonl", [second])
    records = [r for p in sorted(logs.iterdir()) for r in read_records(p)]
    assert {r.conversation_id for r in records if isinstance(r, Message)} == {
        "resp_1",
        "resp_2",
    }  # read one file at a time, the chain is cut
    from lexkeep.core.ingest import ingest_paths

    with Store.open(None) as store:
        ingest_paths(store, [str(logs)])
        rows = store.con.execute(
            "SELECT conversation_id, text FROM messages ORDER BY position"
        ).fetchall()
    assert rows == [
        ("resp_1", "Refund order ORD-77812."),
        ("resp_1", "Which card?"),
        ("resp_1", "The Visa, and email dana.kim@example.com."),
    ]


def test_unchanged_files_of_other_formats_before_a_request_log_are_not_read_again(cli, tmp_path):
    """A folder holding a Claude Code session and a request log, ingested again once the log
    grew: only request logs are read again for their state (the session's reader has none)."""
    from conftest import SAMPLE_TRACES

    requests = _trimmed_chat_requests()
    logs = tmp_path / "logs"
    logs.mkdir()
    (logs / "a-session.jsonl").write_bytes((SAMPLE_TRACES / "claude_lost_path.jsonl").read_bytes())
    _write(logs / "b-requests.1.jsonl", requests[:3])
    _write(logs / "c-requests.2.jsonl", requests[3:4])
    db = tmp_path / "store.duckdb"
    assert cli("ingest", logs, "--db", db).exit_code == 0
    _write(logs / "c-requests.2.jsonl", requests[3:])
    grown = cli("ingest", logs, "--db", db)
    assert grown.exit_code == 0, grown.stderr
    assert _stored(db)["errors"] == []


def test_a_logrotate_rotated_request_log_is_read_oldest_file_first(cli, tmp_path):
    """logrotate names the newest file `requests.jsonl` and older ones `requests.jsonl.1`,
    `requests.jsonl.2.gz` (compressed), the number growing with age. A folder walk skipped
    the numbered files (not named `*.jsonl`), and named by a shell glob they were read in name
    order, newest first: the later requests were numbered before the earlier ones and the
    user's first turns were left out. Read oldest first, the store is the one file's."""
    import gzip

    requests = _trimmed_chat_requests()
    whole = _write(tmp_path / "whole.jsonl", requests)
    logs = tmp_path / "logs"
    logs.mkdir()
    oldest = logs / "requests.jsonl.2.gz"
    oldest.write_bytes(gzip.compress("".join(json.dumps(r) + "\n" for r in requests[:2]).encode()))
    _write(logs / "requests.jsonl.1", requests[2:4])
    newest = _write(logs / "requests.jsonl", requests[4:])
    assert cli("ingest", whole, "--db", tmp_path / "whole.duckdb").exit_code == 0
    expected = _stored(tmp_path / "whole.duckdb")
    by_glob = sorted(str(p) for p in logs.iterdir())  # what a shell makes of requests.jsonl*
    for name, targets in (("folder", [logs]), ("glob", by_glob)):
        ingested = cli("ingest", *targets, "--db", tmp_path / f"{name}.duckdb")
        assert ingested.exit_code == 0, ingested.stderr
        assert "3 files: 3 ingested" in ingested.stderr, name
        # the summary lines come in the order the files were read
        lines = ingested.stderr.splitlines()
        named = [line.split(":")[0] for line in lines if ": ingested" in line]
        assert named == [str(oldest), str(logs / "requests.jsonl.1"), str(newest)], name
        assert _stored(tmp_path / f"{name}.duckdb") == expected, name

    audited = cli("audit", logs, "--format", "json", "--exit-zero")
    assert audited.exit_code == 0, audited.stderr
    found = {f["value"]: f for f in json.loads(audited.stdout)["findings"]}
    assert {v: f["verdict"] for v, f in found.items()} == {
        "ORD-77812": "kept",
        "INV-2025-08-44719": "missing",
        "dana.kim@example.com": "missing",
        "WH-4471-B": "kept",
    }
    assert found["ORD-77812"]["message"] == {"file": str(oldest), "line": 1}


def test_rotated_names_keep_their_place_among_other_files(tmp_path):
    """Only the files of one rotated log change places, among themselves; other files (dated
    names, which sort right already, and other logs) keep name order, or the order given."""
    from lexkeep.core.ingest import expand_paths

    logs = tmp_path / "logs"
    logs.mkdir()
    names = [
        "a.jsonl",
        "app-2025-01-09.jsonl",
        "app-2025-01-10.jsonl",
        "requests.jsonl",
        "requests.jsonl.1",
        "requests.jsonl.10.gz",
        "requests.jsonl.2.gz",
        "z.jsonl",
    ]
    for name in names:
        (logs / name).write_text("{}\n")
    order = [Path(p).name for p, _ in expand_paths([str(logs)])]
    assert order == [
        "a.jsonl",
        "app-2025-01-09.jsonl",
        "app-2025-01-10.jsonl",
        "requests.jsonl.10.gz",
        "requests.jsonl.2.gz",
        "requests.jsonl.1",
        "requests.jsonl",
        "z.jsonl",
    ]
    given = [str(logs / n) for n in ("z.jsonl", "requests.jsonl", "a.jsonl", "requests.jsonl.1")]
    order = [Path(p).name for p, _ in expand_paths(given)]
    assert order == ["z.jsonl", "requests.jsonl.1", "a.jsonl", "requests.jsonl"]


def test_a_request_log_file_ingested_by_a_later_command_goes_on_from_the_store(cli, tmp_path):
    """The earlier file of a log ingested by one command, the next one (and, once it grew,
    again) by later commands, each alone: the later file's trimmed requests were aligned only
    within it, numbered from 0 again and left out as `id_conflict`, so the user's later turn
    and the calls after the compaction were never audited. The store keeps what a later file
    needs of each conversation, and the store is the one a single ingest of the log makes."""
    requests = _trimmed_chat_requests()
    whole = _write(tmp_path / "whole.jsonl", requests)
    first = _write(tmp_path / "requests.1.jsonl", requests[:3])
    second = _write(tmp_path / "requests.2.jsonl", requests[3:5])
    db = tmp_path / "later.duckdb"
    for target in (first, second):
        ingested = cli("ingest", target, "--db", db)
        assert ingested.exit_code == 0, ingested.stderr
        assert "left out" not in ingested.stderr
    _write(second, requests[3:])  # it grew
    grown = cli("ingest", second, "--db", db)
    assert grown.exit_code == 0, grown.stderr
    assert "appended" in grown.stderr and "left out" not in grown.stderr
    assert cli("ingest", whole, "--db", tmp_path / "whole.duckdb").exit_code == 0
    assert _stored(db) == _stored(tmp_path / "whole.duckdb")
    assert _stored(db)["errors"] == []

    def turns(path: Path) -> list[tuple]:
        with Store.open(path) as store:
            return store.con.execute(
                "SELECT m.id, m.position, m.run_id, r.status FROM messages m"
                " LEFT JOIN runs r ON r.id = m.run_id ORDER BY m.position"
            ).fetchall()

    # each message in the run (user turn) it has when both files are ingested together
    together = cli("ingest", first, second, "--db", tmp_path / "together.duckdb")
    assert together.exit_code == 0, together.stderr
    assert turns(db) == turns(tmp_path / "together.duckdb")
    assert _verdicts(cli, "--db", db) == {
        "ORD-77812": "kept",
        "INV-2025-08-44719": "missing",
        "dana.kim@example.com": "missing",
        "WH-4471-B": "kept",
    }


def test_an_anthropic_log_split_over_two_ingests_is_one_timeline(cli, tmp_path):
    """The compacted Anthropic log cut after its first compaction, its two halves ingested
    by two commands: the store of one ingest of the whole file, audited the same."""
    lines = COMPACTED.read_text().splitlines(keepends=True)
    head, tail = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    head.write_text("".join(lines[:4]))
    tail.write_text("".join(lines[4:]))
    db = tmp_path / "two.duckdb"
    for part in (head, tail):
        ingested = cli("ingest", part, "--db", db)
        assert ingested.exit_code == 0, ingested.stderr
    assert cli("ingest", COMPACTED, "--db", tmp_path / "one.duckdb").exit_code == 0
    assert _stored(db) == _stored(tmp_path / "one.duckdb")
    assert _verdicts(cli, "--db", db) == EXPECTED


def test_a_responses_chain_continues_in_a_file_of_a_later_ingest(cli, tmp_path):
    """`previous_response_id` naming a response a file of an earlier ingest logged: the same
    conversation, as when both files are ingested together."""
    first, second = _RESPONSES_CHAIN
    day1 = _write(tmp_path / "2025-01-09.jsonl", [first])
    day2 = _write(tmp_path / "2025-01-10.jsonl", [second])
    db = tmp_path / "store.duckdb"
    for day in (day1, day2):
        ingested = cli("ingest", day, "--db", db)
        assert ingested.exit_code == 0, ingested.stderr
    with Store.open(db) as store:
        rows = store.con.execute(
            "SELECT conversation_id, text FROM messages ORDER BY position"
        ).fetchall()
    assert rows == [
        ("resp_1", "Refund order ORD-77812."),
        ("resp_1", "Which card?"),
        ("resp_1", "The Visa, and email dana.kim@example.com."),
    ]


def _answered_log(path: Path, shape: str, resent: bool) -> Path:
    """Three requests of one conversation as a proxy logs them (no id), each with the answer
    as the API gave it (`shape`: `chat` or `anthropic`). The next request sends the answers
    back as given, or (`resent`) as clients often rewrite them: a Chat Completions answer
    without its `refusal: null` and `annotations: []`, its text as a text part, an empty
    string for the content of a tool call's message; a Messages API answer without the
    `citations: null` the SDK dumps, a one-block text as a plain string."""
    u0, u1 = _user("Refund order ORD-77812."), _user("Visa")
    if shape == "chat":
        call = _call("call_abc", "lookup_order", {"order_id": "ORD-77812"})
        meta = {"refusal": None, "annotations": []}
        answers = [
            {"role": "assistant", "content": None, "tool_calls": [call], **meta},
            {"role": "assistant", "content": "Which card?", **meta},
            {"role": "assistant", "content": "Refunded.", **meta},
        ]
        result = {"role": "tool", "tool_call_id": "call_abc", "content": "delivered"}
        again = [
            {"role": "assistant", "content": "", "tool_calls": [call]},
            _said("Which card?"),
        ]
    else:
        use = {"type": "tool_use", "id": "toolu_1", "name": "lookup_order"}
        use["input"] = {"order_id": "ORD-77812"}
        answers = [
            {
                "role": "assistant",
                "content": [{"type": "text", "text": "Looking.", "citations": None}, use],
            },
            {
                "role": "assistant",
                "content": [{"type": "text", "text": "Which card?", "citations": None}],
            },
            {
                "role": "assistant",
                "content": [{"type": "text", "text": "Refunded.", "citations": None}],
            },
        ]
        block = {"type": "tool_result", "tool_use_id": "toolu_1", "content": "delivered"}
        result = {"role": "user", "content": [block]}
        again = [
            {"role": "assistant", "content": [{"type": "text", "text": "Looking."}, use]},
            {"role": "assistant", "content": "Which card?"},
        ]
    sent = again if resent else answers[:2]
    lists = [[u0], [u0, sent[0], result], [u0, sent[0], result, sent[1], u1]]
    records = []
    for n, (messages, answer) in enumerate(zip(lists, answers, strict=True)):
        if shape == "chat":
            choice = {"index": 0, "message": answer, "finish_reason": "stop"}
            response = {"id": f"chatcmpl-{n}", "object": "chat.completion", "choices": [choice]}
        else:
            response = {"id": f"msg_{n}", "type": "message", **answer, "stop_reason": "end_turn"}
        records.append({"request": {"model": "m", "messages": messages}, "response": response})
    return _write(path, records)


@pytest.mark.parametrize(
    ("shape", "fmt"),
    [("chat", Format.OPENAI), ("anthropic", Format.ANTHROPIC), ("anthropic", Format.OPENAI)],
)
def test_an_answer_sent_back_rewritten_is_the_same_message(tmp_path, shape, fmt):
    """An answer the client sends back as a plain string instead of the blocks it came back
    as (or the other way round), or without the null and empty keys the API added, was a
    new message: stored a second time, and its tool call a second time as `call_abc#2`. Read
    as OpenAI chat or as Anthropic, such a log now reads as the one that sends the answers
    back as given."""
    rewritten = _timeline(_answered_log(tmp_path / "rewritten.jsonl", shape, True), fmt)
    verbatim = _timeline(_answered_log(tmp_path / "verbatim.jsonl", shape, False), fmt)
    assert rewritten == [(kind, name.replace("verbatim", "rewritten")) for kind, name in verbatim]
    assert [n for kind, n in rewritten if kind == "ToolCall"] in (["call_abc"], ["toolu_1"])
    assert len([n for kind, n in rewritten if kind == "message"]) == 5  # the result is none


def test_messages_that_differ_in_what_they_say_are_not_made_equal():
    """What the fingerprints leave out is only what does not change a message: text, its
    split into blocks, the role and any key with a value still tell messages apart."""
    from lexkeep.core import read_anthropic, read_openai

    text = {"type": "text", "text": "Which card?"}
    for message_print in (read_openai.message_print, read_anthropic.message_print):
        same = message_print({"role": "assistant", "content": "Which card?"})
        assert same == message_print({"role": "assistant", "content": [text]})
        assert same == message_print(
            {"role": "assistant", "content": [{**text, "citations": None}]}
        )
        for other in (
            {"role": "user", "content": "Which card?"},
            {"role": "assistant", "content": "Which card? "},
            {
                "role": "assistant",
                "content": [{"type": "text", "text": "Which "}, {**text, "text": "card?"}],
            },
            {"role": "assistant", "content": [text, text]},
            {"role": "assistant", "content": [{**text, "citations": [{"cited_text": "card"}]}]},
        ):
            assert message_print(other) != same, other
    chat = {"role": "assistant", "content": "Which card?"}
    assert read_openai.message_print(chat) != read_openai.message_print({**chat, "name": "bot"})
