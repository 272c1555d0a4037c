"""Request logs without conversation ids: the history each request sends again names it.

A proxy log of Chat Completions or Anthropic Messages calls usually has no `conversation_id`
or `session_id`. Each record was its own conversation (`<file>#<n>`): the history a client
sends again with every call was stored once per line, and a compaction block in a later
request was a boundary of another conversation than the turns it summarised. A request whose
list begins with an earlier request's list (and its logged answer) now goes on with that
request's conversation (docs/formats.md, *Request logs without ids*).
"""

from __future__ import annotations

import gzip
import json
import re
from pathlib import Path

import pytest
from conftest import COMPACTED_LOG, COMPACTED_LOG_VERDICTS

from lexkeep.core.formats import get_reader
from lexkeep.core.ingest import JsonSource, detect_format
from lexkeep.core.model import Format, Message, Record
from lexkeep.core.requestlog import Continued, fingerprint
from lexkeep.core.store import Store

COMPACTED = COMPACTED_LOG

EXPECTED = COMPACTED_LOG_VERDICTS


def _write(path: Path, records: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


def _findings(cli, *args) -> list[dict]:
    audited = cli("audit", *args, "--format", "json", "--exit-zero")
    assert audited.exit_code == 0, audited.stderr
    return json.loads(audited.stdout)["findings"]


def _rows(db: Path, conversation: dict[str, str]) -> dict[str, list[tuple]]:
    """Messages, calls, results and boundaries in timeline order, conversation ids renamed
    by `conversation`, with the line each was read from."""
    with Store.open(db) as store:
        con = store.con

        def rows(sql: str) -> list[tuple]:
            out = []
            for row in con.execute(sql).fetchall():
                row = list(row)
                for name, to in conversation.items():
                    row = [v.replace(name, to) if isinstance(v, str) else v for v in row]
                out.append(tuple(row))
            return out

        return {
            "conversations": rows("SELECT id, source_line FROM conversations ORDER BY id"),
            "messages": rows(
                "SELECT conversation_id, id, kind, text, source_line FROM messages"
                " ORDER BY conversation_id, position"
            ),
            "tool_calls": rows(
                "SELECT conversation_id, call_id, name, arguments_raw, source_line"
                " FROM tool_calls ORDER BY conversation_id, position"
            ),
            "tool_results": rows(
                "SELECT conversation_id, call_id, text FROM tool_results"
                " ORDER BY conversation_id, position"
            ),
            "boundaries": rows(
                "SELECT conversation_id, id, source_line FROM boundaries"
                " ORDER BY conversation_id, position"
            ),
        }


def _named(db: Path) -> str:
    """The one conversation of the store `db`, named after its log and first record."""
    with Store.open(db) as store:
        (conv,) = store.con.execute("SELECT id FROM conversations").fetchall()
    assert re.fullmatch(r"[^#]+#[0-9a-f]{16}", conv[0]), conv
    return conv[0]


def _chat_calls() -> list[dict]:
    """Three Chat Completions calls of one conversation as a proxy logs them, with no
    conversation id: each request sends the previous one, its answer and one more turn."""
    call = {
        "id": "call_abc",
        "type": "function",
        "function": {"name": "lookup_order", "arguments": '{"order_id":"ORD-77812"}'},
    }
    system = {"role": "system", "content": "You handle refunds."}
    u0 = {"role": "user", "content": "Refund order ORD-77812, invoice INV-2025-08-44719."}
    a0 = {"role": "assistant", "content": None, "tool_calls": [call], "refusal": None}
    t0 = {"role": "tool", "tool_call_id": "call_abc", "content": "delivered"}
    a1 = {"role": "assistant", "content": "Delivered. Refund it?", "refusal": None}
    u1 = {"role": "user", "content": "Yes, to card ending 4242."}
    a2 = {"role": "assistant", "content": "Refunded.", "refusal": None}
    sent_a0 = {k: v for k, v in a0.items() if v is not None}  # sent back without null keys
    requests = [[system, u0], [system, u0, sent_a0, t0], [system, u0, sent_a0, t0, a1, u1]]
    out = []
    for n, (messages, answer) in enumerate(zip(requests, [a0, a1, a2], strict=True)):
        response = {
            "id": f"chatcmpl-{n}",
            "object": "chat.completion",
            "choices": [{"index": 0, "message": answer, "finish_reason": "stop"}],
        }
        out.append({"request": {"model": "gpt-4o", "messages": messages}, "response": response})
    return out


def test_chat_calls_without_an_id_that_send_the_history_again_are_one_conversation(cli, tmp_path):
    """Three wrapped calls with no id were three conversations, the system prompt and the
    first user turn stored three times; now they are the one conversation the same log with
    a `session_id` is, message for message and line for line."""
    calls = _chat_calls()
    bare = _write(tmp_path / "proxy.jsonl", calls)
    named = _write(tmp_path / "named.jsonl", [c | {"session_id": "s-1"} for c in calls])
    ingested = cli("ingest", bare, "--db", tmp_path / "bare.duckdb")
    assert ingested.exit_code == 0, ingested.stderr
    assert "1 conversation, 6 messages, 1 tool call" in ingested.stderr
    assert cli("ingest", named, "--db", tmp_path / "named.duckdb").exit_code == 0
    conv = _named(tmp_path / "bare.duckdb")
    assert conv.startswith("proxy.jsonl#")
    bare_rows = _rows(tmp_path / "bare.duckdb", {conv: "C"})
    assert bare_rows == _rows(tmp_path / "named.duckdb", {"s-1": "C"})
    assert [m[1] for m in bare_rows["messages"]] == [f"C/{n}" for n in (0, 1, 2, 4, 5, 6)]

    # A grown log adds only the new call's messages, to the same conversation.
    more = json.loads(json.dumps(calls[2]))
    messages = more["request"]["messages"]
    messages += [more["response"]["choices"][0]["message"], {"role": "user", "content": "Thanks"}]
    more["response"]["choices"][0]["message"] = {"role": "assistant", "content": "Welcome."}
    _write(bare, [*calls, more])
    grown = cli("ingest", bare, "--db", tmp_path / "bare.duckdb")
    assert grown.exit_code == 0, grown.stderr
    assert "1 conversation, 2 messages" in grown.stderr
    with Store.open(tmp_path / "bare.duckdb") as store:
        got = store.con.execute(
            "SELECT id, text FROM messages WHERE source_line = 4 ORDER BY position"
        ).fetchall()
    assert got == [(f"{conv}/7", "Thanks"), (f"{conv}/8", "Welcome.")]


def test_a_compacted_anthropic_log_without_ids_is_audited_as_one_conversation(cli, tmp_path):
    """The compacted Anthropic log without its `conversation_id`: the requests after each
    compaction start with the response that holds the block, so they go on with the
    conversation whose answer it was. The audit was split over the records (and
    INV-2025-08-44719, sent altered after the first compaction, was `missing`); now it is
    the audit of the log with its id, each identifier once."""
    records = [json.loads(line) for line in COMPACTED.read_text().splitlines()]
    for record in records:
        del record["conversation_id"]
    bare = _write(tmp_path / "proxy.jsonl", records)
    findings = _findings(cli, bare)
    assert {f["value"]: f["verdict"] for f in findings} == EXPECTED
    assert len(findings) == len(EXPECTED)

    ingested = cli("ingest", bare, "--db", tmp_path / "bare.duckdb")
    assert ingested.exit_code == 0, ingested.stderr
    conv = _named(tmp_path / "bare.duckdb")
    assert {f["conversation_id"] for f in findings} == {conv}
    assert cli("ingest", COMPACTED, "--db", tmp_path / "named.duckdb").exit_code == 0
    renamed = {conv: "C"}
    assert _rows(tmp_path / "bare.duckdb", renamed) == _rows(
        tmp_path / "named.duckdb", {"sess-7f3a": "C"}
    )


def test_a_summary_request_and_unrelated_requests_start_their_own_conversations(cli, tmp_path):
    """What prefixes cannot tell: a client that replaced the history with a summary sends
    only the system prompt of the earlier requests again, so the summary starts a new
    conversation (which its own later requests go on with); a request sent twice adds
    nothing; two requests that share only the system prompt are two conversations."""
    system = {"role": "system", "content": "You handle refunds."}
    u0 = {"role": "user", "content": "Refund order ORD-77812."}
    a0 = {"role": "assistant", "content": "Done."}
    summary = {"role": "user", "content": "Summary so far: order ORD-77812 was refunded."}
    a1 = {"role": "assistant", "content": "Noted."}
    other = {"role": "user", "content": "Where is parcel PKG-5521?"}
    requests = [
        {"messages": [system, u0]},  # 0
        {"messages": [system, u0, a0, _user("And invoice INV-2025-08-44719?")]},  # 0
        {"messages": [system, u0, a0, _user("And invoice INV-2025-08-44719?")]},  # sent again
        {"messages": [system, other]},  # 3
        {"messages": [system, summary]},  # 4
        {"messages": [system, summary, a1, _user("Close the ticket.")]},  # 4
    ]
    log = _write(tmp_path / "log.jsonl", requests)
    ingested = cli("ingest", log, "--db", tmp_path / "s.duckdb")
    assert ingested.exit_code == 0, ingested.stderr
    with Store.open(tmp_path / "s.duckdb") as store:
        rows = store.con.execute(
            "SELECT c.id, c.source_line, m.id, m.source_line FROM messages m"
            " JOIN conversations c ON c.id = m.conversation_id ORDER BY c.source_line, m.position"
        ).fetchall()
    # Each conversation is named after its first record: by the line it starts on here.
    assert all(re.fullmatch(r"log\.jsonl#[0-9a-f]{16}", conv) for conv, *_ in rows)
    got = [(mid.replace(conv, f"L{first}"), line) for conv, first, mid, line in rows]
    assert got == [
        ("L1/0", 1),
        ("L1/1", 1),
        ("L1/2", 2),
        ("L1/3", 2),
        ("L4/0", 4),
        ("L4/1", 4),
        ("L5/0", 5),
        ("L5/1", 5),
        ("L5/2", 6),
        ("L5/3", 6),
    ]


def _user(text: str) -> dict:
    return {"role": "user", "content": text}


def test_the_longest_and_latest_earlier_request_names_the_conversation():
    """Resent directly: a list that begins with the lists of two earlier requests goes on
    with the one whose list is longer; at equal length, with the one that sent it last; a
    conversation not continued for `limit` newer ones is forgotten (memory stays bounded)."""
    from lexkeep.core.requestlog import Resent

    fp = [fingerprint(n) for n in range(8)]
    resent = Resent(limit=2)
    assert resent.conversation(fp[:2], b"", "A") == "A"
    resent.keep("A", fp[:2], (2,))
    assert resent.conversation(fp[:3], b"", "B") == "A"  # [0, 1] begins it
    resent.keep("A", fp[:3], (3,))
    assert resent.conversation(fp[:4], b"", "C") == "A"  # [0, 1, 2], the longest
    assert resent.conversation(fp[2:4], b"", "D") == "D"  # begins with no earlier list
    resent.keep("D", fp[2:4], (2,))
    assert resent.conversation(fp[2:5], b"", "E") == "D"
    assert resent.conversation(fp[:2], b"seed", "F") == "F"  # another system prompt
    resent.keep("F", fp[:2], (2,), b"seed")
    # three conversations with a limit of two: A, continued least recently, is forgotten
    assert resent.conversation(fp[:3], b"", "G") == "G"
    assert resent.log.dump("A") is None

    tied = Resent()
    tied.keep("X", fp[:2], (2,))
    tied.keep("Y", fp[:2], (2,))
    assert tied.conversation(fp[:3], b"", "Z") == "Y"


@pytest.mark.parametrize("fmt", [Format.ANTHROPIC, Format.OPENAI])
def test_a_log_without_ids_reads_alike_whatever_log_was_read_before_it(tmp_path, fmt):
    """Two proxies' logs of one day, each `requests.jsonl` in its own folder, read by one
    command: their requests name no conversation, so the first request of each was
    `requests.jsonl#0`. Whether its system prompt was read was kept for the files after it,
    so the second file's prompt was taken for read already and never stored; a log without
    ids leaves nothing for the next files, which also lets workers read it ahead."""
    paths = []
    for folder, system, text in (
        ("eu", "You handle refunds.", "Refund order ORD-77812."),
        ("us", "You route tickets to OPS-2291.", "Escalate WH-4471-B."),
    ):
        (tmp_path / folder).mkdir()
        response = {
            "id": f"msg_{folder}",
            "type": "message",
            "role": "assistant",
            "content": [{"type": "text", "text": "On it."}],
        }
        request = {
            "model": "claude-sonnet-4-5",
            "max_tokens": 512,
            "system": system,
            "messages": [{"role": "user", "content": text}],
        }
        paths.append(
            _write(tmp_path / folder / "requests.jsonl", [request | {"response": response}])
        )

    def read(path: Path, continued: Continued) -> list[Record]:
        _, items = detect_format(JsonSource(str(path)), fmt)
        return list(get_reader(fmt).read(items, str(path), continued))  # type: ignore[call-arg]

    shared = Continued()
    read(paths[0], shared)
    assert shared.empty()
    after = read(paths[1], shared)
    assert after == read(paths[1], Continued())
    systems = [(r.id, r.text) for r in after if isinstance(r, Message) and r.role == "system"]
    assert len(systems) == 1
    assert re.fullmatch(r"requests\.jsonl#[0-9a-f]{16}/system", systems[0][0])
    assert systems[0][1] == "You route tickets to OPS-2291."


def _without_lines(rows: dict[str, list[tuple]]) -> dict[str, list[tuple]]:
    """`_rows` without the lines records were read from (a split log has other lines)."""
    drop = {"conversations": 1, "messages": 4, "tool_calls": 4, "boundaries": 2}
    return {
        table: [tuple(v for n, v in enumerate(row) if n != drop.get(table)) for row in got]
        for table, got in rows.items()
    }


def _logrotated(folder: Path, records: list[dict]) -> Path:
    """`records` as logrotate leaves them: the oldest in `requests.jsonl.2.gz`, then
    `requests.jsonl.1`, the newest in `requests.jsonl`."""
    folder.mkdir()
    third = len(records) // 3
    (folder / "requests.jsonl.2.gz").write_bytes(
        gzip.compress("".join(json.dumps(r) + "\n" for r in records[:third]).encode())
    )
    _write(folder / "requests.jsonl.1", records[third : 2 * third])
    _write(folder / "requests.jsonl", records[2 * third :])
    return folder


@pytest.mark.parametrize("log", ["chat", "anthropic"])
def test_a_log_without_ids_goes_on_in_the_next_file_logrotate_made(cli, tmp_path, monkeypatch, log):
    """A proxy log without ids that logrotate split into `requests.jsonl.2.gz`,
    `requests.jsonl.1` and `requests.jsonl`: a request was chained only to the requests of
    its own file, so each file began the conversation again, storing the history the client
    sent once per file (and its tool calls as `call_abc#2`), and an audit saw a compaction
    apart from what the user typed before it. Read by one command, the files of one rotated
    log now chain as the one file does, workers reading ahead or not."""
    from lexkeep.core.ingest import ingest_paths

    if log == "chat":
        records = _chat_calls()
    else:
        records = [json.loads(line) for line in COMPACTED.read_text().splitlines()]
        for record in records:
            del record["conversation_id"]
    whole = _write(tmp_path / "proxy.jsonl", records)
    logs = _logrotated(tmp_path / "logs", records)
    assert cli("ingest", whole, "--db", tmp_path / "whole.duckdb").exit_code == 0
    one = _named(tmp_path / "whole.duckdb")
    expected = _without_lines(_rows(tmp_path / "whole.duckdb", {one: "C"}))
    ingested = cli("ingest", logs, "--db", tmp_path / "split.duckdb")
    assert ingested.exit_code == 0, ingested.stderr
    assert "already stored" not in ingested.stderr
    # Named after the log (the name its files share) and the same first record.
    conv = _named(tmp_path / "split.duckdb")
    assert conv == one.replace("proxy.jsonl#", "requests.jsonl#")
    renamed = {conv: "C"}
    assert _without_lines(_rows(tmp_path / "split.duckdb", renamed)) == expected

    monkeypatch.setenv("LEXKEEP_READ_WORKERS", "2")
    with Store.open(tmp_path / "ahead.duckdb") as store:
        ingest_paths(store, [str(logs)], read_ahead_min_bytes=0)
    assert _without_lines(_rows(tmp_path / "ahead.duckdb", renamed)) == expected

    # The current file written while the rotated copies stayed: they are read again for
    # what the new requests go on from, not stored again.
    newest = logs / "requests.jsonl"
    newest.write_text("")
    assert cli("ingest", logs, "--db", tmp_path / "grown.duckdb").exit_code == 0
    _write(newest, records[2 * (len(records) // 3) :])
    grown = cli("ingest", logs, "--db", tmp_path / "grown.duckdb")
    assert grown.exit_code == 0, grown.stderr
    assert "already stored" not in grown.stderr
    assert _without_lines(_rows(tmp_path / "grown.duckdb", renamed)) == expected

    if log == "anthropic":
        findings = _findings(cli, logs)
        assert {f["value"]: f["verdict"] for f in findings} == EXPECTED
        assert {f["conversation_id"] for f in findings} == {conv}
