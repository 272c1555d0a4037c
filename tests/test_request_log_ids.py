"""What a conversation of a request log without ids is called (docs/formats.md, *Requests
without ids*).

Such a conversation was named after its file's name and the index of its first record
(`requests.jsonl#0`). Two proxies' `requests.jsonl` in two folders then named different
conversations alike, and one ingest kept the first and left the other out; and a log
logrotate renamed (`requests.jsonl` become `requests.jsonl.1`) was stored a second time under
its new name. A conversation is now named after its log (the name logrotate's copies share)
and a digest of its first record, which stays the same on every read of the same bytes, on a
grown file and on a rotated copy.
"""

from __future__ import annotations

import gzip
import json
import re
from functools import partial
from pathlib import Path

import pytest
from conftest import undo_migrations_after
from test_request_log_chains import COMPACTED, EXPECTED

from lexkeep.core.requestlog import Resent, fingerprint
from lexkeep.core.store import Store

LOGS = {
    # folder: (system prompt, order, what the user answers, the order the agent looks up)
    "eu": ("You handle refunds.", "ORD-77812", "Yes, to card ending 4242.", "ORD-77812"),
    "us": ("You route tickets.", "ORD-55190", "Yes, ticket OPS-2291.", "ORD-5519"),
}


def _calls(system: str, order: str, answer: str, looked_up: str) -> list[dict]:
    """Three Chat Completions calls of one conversation as a proxy logs them, with no
    conversation id, a compaction marked between the second and the third."""
    call = {
        "id": "call_abc",
        "type": "function",
        "function": {"name": "lookup_order", "arguments": json.dumps({"order_id": looked_up})},
    }
    s = {"role": "system", "content": system}
    u0 = {"role": "user", "content": f"Refund order {order}, please."}
    a0 = {"role": "assistant", "content": "Which card?"}
    u1 = {"role": "user", "content": answer}
    a1 = {"role": "assistant", "content": None, "tool_calls": [call]}
    t1 = {"role": "tool", "tool_call_id": "call_abc", "content": "refunded"}
    a2 = {"role": "assistant", "content": "Refunded."}
    requests = [([s, u0], a0), ([s, u0, a0, u1], a1), ([s, u0, a0, u1, a1, t1], a2)]
    return [
        {
            "request": {"model": "gpt-4o", "messages": messages},
            "response": {"choices": [{"index": 0, "message": answer, "finish_reason": "stop"}]},
        }
        for messages, answer in requests
    ]


def _write(path: Path, records: list[dict]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


def _contents(db: Path) -> dict[str, list[tuple]]:
    """Each conversation's messages and tool calls by id, by conversation id."""
    with Store.open(db) as store:
        con = store.con
        out: dict[str, list[tuple]] = {}
        for conv, mid, role, text in con.execute(
            "SELECT conversation_id, id, role, text FROM messages ORDER BY conversation_id, id"
        ).fetchall():
            out.setdefault(conv, []).append((mid, role, text))
        for conv, cid, name, args in con.execute(
            "SELECT conversation_id, call_id, name, arguments_raw FROM tool_calls"
            " ORDER BY conversation_id, call_id"
        ).fetchall():
            out.setdefault(conv, []).append((cid, name, args))
        return out


def _without_ids(text: str) -> list[dict]:
    records = [json.loads(line) for line in text.splitlines()]
    for record in records:
        del record["conversation_id"]
    return records


def test_two_logs_of_one_name_in_two_folders_are_two_conversations(cli, tmp_path):
    """Two proxies' `requests.jsonl` (the compacted Anthropic log without its id, and the same
    log for another order) both began a conversation named `requests.jsonl#0`: one ingest
    kept eu's and left us's messages out. Each is now the conversation it is when ingested
    alone, and the audit of both folders gives each log's own findings."""
    text = COMPACTED.read_text()
    _write(tmp_path / "eu" / "requests.jsonl", _without_ids(text))
    _write(tmp_path / "us" / "requests.jsonl", _without_ids(text.replace("ORD-77812", "ORD-55190")))
    alone = {}
    for folder in ("eu", "us"):
        db = tmp_path / f"{folder}.duckdb"
        done = cli("ingest", tmp_path / folder, "--db", db)
        assert done.exit_code == 0, done.stderr
        alone.update(_contents(db))
    both = cli("ingest", tmp_path / "eu", tmp_path / "us", "--db", tmp_path / "both.duckdb")
    assert both.exit_code == 0, both.stderr
    assert "left out" not in both.stderr
    assert len(alone) == 2
    assert _contents(tmp_path / "both.duckdb") == alone

    def findings(*args: Path | str) -> list[tuple]:
        done = cli("audit", *args, "--format", "json", "--exit-zero")
        assert done.exit_code == 0, done.stderr
        got = json.loads(done.stdout)["findings"]
        return sorted((f["conversation_id"], f["value"], f["verdict"]) for f in got)

    eu, us = findings(tmp_path / "eu"), findings(tmp_path / "us")
    assert {value: verdict for _, value, verdict in eu} == EXPECTED
    assert {value: verdict for _, value, verdict in us} == {
        ("ORD-55190" if value == "ORD-77812" else value): verdict
        for value, verdict in EXPECTED.items()
    }
    assert findings(tmp_path / "eu", tmp_path / "us") == sorted(eu + us)
    assert findings("--db", tmp_path / "both.duckdb") == sorted(eu + us)


@pytest.mark.parametrize("compress", [False, True])
def test_a_log_logrotate_renamed_is_not_stored_again(cli, tmp_path, compress):
    """`requests.jsonl` ingested, then rotated by logrotate to `requests.jsonl.1` (or
    `requests.jsonl.1.gz`) while the client goes on in a new `requests.jsonl`: the copy was
    read as new conversations (`requests.jsonl.1#0`), every message stored twice. It now adds
    nothing, and the new file's request goes on with the conversation the store holds."""
    records = _calls(*LOGS["eu"])
    logs = tmp_path / "logs"
    current = _write(logs / "requests.jsonl", records[:2])
    first = cli("ingest", logs, "--db", tmp_path / "s.duckdb")
    assert first.exit_code == 0, first.stderr
    before = _contents(tmp_path / "s.duckdb")

    if compress:
        (logs / "requests.jsonl.1.gz").write_bytes(gzip.compress(current.read_bytes()))
        current.unlink()
    else:
        current.rename(logs / "requests.jsonl.1")
    _write(current, records[2:])
    again = cli("ingest", logs, "--db", tmp_path / "s.duckdb")
    assert again.exit_code == 0, again.stderr
    assert "left out" not in again.stderr
    got = _contents(tmp_path / "s.duckdb")
    assert list(got) == list(before)  # the same one conversation
    whole = cli("ingest", _write(tmp_path / "whole" / "requests.jsonl", records), "--db",
                tmp_path / "whole.duckdb")  # fmt: skip
    assert whole.exit_code == 0, whole.stderr
    assert got == _contents(tmp_path / "whole.duckdb")


def _numbered_the_old_way(db: Path, names: dict[str, str]) -> None:
    """Make the store `db` what lexkeep wrote before it named conversations without ids after
    their first record: schema 005, each conversation of `names` called by its old name
    (`requests.jsonl#0`) wherever its id, or an id made from it, is written."""
    with Store.open(db) as store:
        con = store.con
        undo_migrations_after(store, 5)
        columns = con.execute(
            "SELECT table_name, column_name, data_type FROM information_schema.columns"
            " WHERE table_schema = 'main' AND data_type IN ('VARCHAR', 'VARCHAR[]')"
        ).fetchall()
        for table, column, kind in columns:
            for new, old in names.items():
                if kind == "VARCHAR":
                    value = f"replace({column}, ?, ?)"
                else:
                    value = f"list_transform({column}, lambda v: replace(v, ?, ?))"
                con.execute(f"UPDATE {table} SET {column} = {value}", [new, old])


def _conversations(db: Path) -> list[str]:
    with Store.open(db) as store:
        return [r[0] for r in store.con.execute("SELECT id FROM conversations").fetchall()]


@pytest.mark.parametrize("later", ["grown", "rotated", "rotated.gz"])
def test_a_store_that_numbered_a_log_keeps_its_names(cli, tmp_path, later):
    """A store an earlier lexkeep filled holds `requests.jsonl#0`. The file read again when
    it grew, or its copy logrotate renamed `requests.jsonl.1` (or compressed,
    `requests.jsonl.1.gz`) beside the new `requests.jsonl`, keeps that name: nothing is
    stored a second time and the new request goes on with the conversation the store holds."""
    records = _calls(*LOGS["eu"])
    logs = tmp_path / "logs"
    current = _write(logs / "requests.jsonl", records[:2])
    db = tmp_path / "s.duckdb"
    first = cli("ingest", logs, "--db", db)
    assert first.exit_code == 0, first.stderr
    (named,) = _conversations(db)
    _numbered_the_old_way(db, {named: "requests.jsonl#0"})

    if later == "grown":
        _write(current, records)
    else:
        if later == "rotated":
            current.rename(logs / "requests.jsonl.1")
        else:
            (logs / "requests.jsonl.1.gz").write_bytes(gzip.compress(current.read_bytes()))
            current.unlink()
        _write(current, records[2:])
    again = cli("ingest", logs, "--db", db)
    assert again.exit_code == 0, again.stderr
    assert "left out" not in again.stderr
    whole = _write(tmp_path / "whole" / "requests.jsonl", records)
    assert cli("ingest", whole, "--db", tmp_path / "whole.duckdb").exit_code == 0
    (renamed,) = _conversations(tmp_path / "whole.duckdb")
    expected = {
        "requests.jsonl#0": [
            tuple(v.replace(renamed, "requests.jsonl#0") for v in row)
            for row in _contents(tmp_path / "whole.duckdb")[renamed]
        ]
    }
    assert _contents(db) == expected


def test_a_record_names_its_conversation_whatever_its_keys_order_and_once():
    """The name is a digest of the record as canonical JSON: the same record written with
    its keys in another order names the same conversation, another record another one. A
    record equal to the one that began a conversation the reader has forgotten since (it
    keeps `limit` conversations going) begins a second one, which gets `.2`, not the same
    name (its messages would be taken for the first one's)."""
    record = {"request": {"model": "gpt-4o", "messages": [{"role": "user", "content": "hi"}]}}
    reordered = {"request": dict(reversed(list(record["request"].items())))}
    assert list(reordered["request"]) != list(record["request"])
    first = Resent().named("requests.jsonl", record)
    assert re.fullmatch(r"requests\.jsonl#[0-9a-f]{16}", first)
    assert Resent().named("requests.jsonl", reordered) == first
    other = {"request": {"model": "gpt-4o", "messages": [{"role": "user", "content": "hi!"}]}}
    assert Resent().named("requests.jsonl", other) != first

    fp = [fingerprint(n) for n in range(3)]
    resent = Resent(limit=1)
    assert resent.conversation(fp[:1], b"", partial(resent.named, "requests.jsonl", record)) == (
        first
    )
    resent.keep(first, fp[:1], (1,))
    # another conversation begins, and the first is forgotten (limit 1)
    assert resent.conversation(fp[1:2], b"", "B") == "B"
    again = resent.conversation(fp[:1], b"", partial(resent.named, "requests.jsonl", record))
    assert again == f"{first}.2"


def _responses_calls(order: str, answer: str) -> list[dict]:
    """Two Responses API calls as a proxy logs them, with no conversation and no response id:
    the second sends the first's input and output again, and the user's answer."""
    u0 = {"type": "message", "role": "user", "content": f"Refund order {order}, please."}
    call = {
        "type": "function_call",
        "call_id": "call_1",
        "name": "lookup_order",
        "arguments": json.dumps({"order_id": order}),
    }
    result = {"type": "function_call_output", "call_id": "call_1", "output": "delivered"}
    u1 = {"type": "message", "role": "user", "content": answer}
    said = {
        "type": "message",
        "role": "assistant",
        "content": [{"type": "output_text", "text": "Refunded."}],
    }
    return [
        {"model": "gpt-5", "input": [u0], "output": [call]},
        {"model": "gpt-5", "input": [u0, call, result, u1], "output": [said]},
    ]


def _streamed(order: str) -> list[dict]:
    """A request sent with `"stream": true` and its response's events, none with an id."""
    u0 = {"type": "message", "role": "user", "content": f"Where is order {order}?"}
    call = {
        "type": "function_call",
        "call_id": "call_1",
        "name": "track_order",
        "arguments": json.dumps({"order_id": order}),
    }
    started = {"object": "response", "status": "in_progress", "output": []}
    return [
        {"model": "gpt-5", "input": [u0], "stream": True},
        {"type": "response.created", "response": started},
        {"type": "response.output_item.done", "output_index": 0, "item": call},
        {"type": "response.completed", "response": {**started, "status": "completed",
                                                    "output": [call]}},
    ]  # fmt: skip


@pytest.mark.parametrize("log", ["requests", "stream"])
def test_responses_logs_without_ids_of_one_name_in_two_folders_are_two_logs(cli, tmp_path, log):
    """Responses request logs, and streamed responses, with no conversation and no response id
    were named `<file>#<n>` too: two folders' `requests.jsonl` named different conversations
    alike and one ingest left the second folder's out. Each is now its own."""
    orders = {"eu": "ORD-77812", "us": "ORD-55190"}
    alone = {}
    for folder, order in orders.items():
        records = _responses_calls(order, "Yes.") if log == "requests" else _streamed(order)
        _write(tmp_path / folder / "requests.jsonl", records)
        db = tmp_path / f"{folder}.duckdb"
        done = cli("ingest", tmp_path / folder, "--db", db)
        assert done.exit_code == 0, done.stderr
        alone.update(_contents(db))
    assert all(re.fullmatch(r"requests\.jsonl#[0-9a-f]{16}", conv) for conv in alone)
    both = cli("ingest", tmp_path / "eu", tmp_path / "us", "--db", tmp_path / "both.duckdb")
    assert both.exit_code == 0, both.stderr
    assert "left out" not in both.stderr
    assert _contents(tmp_path / "both.duckdb") == alone
    got = "".join(str(rows) for rows in alone.values())
    assert all(order in got for order in orders.values())


@pytest.mark.parametrize("log", ["requests", "stream"])
@pytest.mark.parametrize("compress", [False, True])
def test_a_responses_log_logrotate_renamed_is_not_stored_again(cli, tmp_path, log, compress):
    """A Responses log without ids rotated by logrotate: its copy `requests.jsonl.1` (or
    `.1.gz`) was read as new conversations (`requests.jsonl.1#0`), everything stored twice.
    It now adds nothing: its conversations keep the names they had."""
    records = _responses_calls("ORD-77812", "Yes.") if log == "requests" else _streamed("ORD-1")
    logs = tmp_path / "logs"
    current = _write(logs / "requests.jsonl", records)
    db = tmp_path / "s.duckdb"
    first = cli("ingest", logs, "--db", db)
    assert first.exit_code == 0, first.stderr
    before = _contents(db)
    if compress:
        (logs / "requests.jsonl.1.gz").write_bytes(gzip.compress(current.read_bytes()))
        current.unlink()
    else:
        current.rename(logs / "requests.jsonl.1")
    again = cli("ingest", logs, "--db", db)
    assert again.exit_code == 0, again.stderr
    assert "left out" not in again.stderr
    assert _contents(db) == before


@pytest.mark.parametrize("later", ["grown", "rotated"])
def test_a_store_that_numbered_a_responses_log_keeps_its_names(cli, tmp_path, later):
    """A store an earlier lexkeep filled holds a Responses log's conversations without ids as
    `requests.jsonl#0`, `requests.jsonl#1`: read again (it grew) or renamed by logrotate,
    the file keeps those names and nothing is stored a second time."""
    records = _responses_calls("ORD-77812", "Yes.")
    logs = tmp_path / "logs"
    current = _write(logs / "requests.jsonl", records)
    db = tmp_path / "s.duckdb"
    first = cli("ingest", logs, "--db", db)
    assert first.exit_code == 0, first.stderr
    named = sorted(_conversations(db), key=lambda conv: _contents(db)[conv][0][2])
    assert len(named) == 2
    # the first record's conversation holds "Refund order", the second's more
    by_size = sorted(named, key=lambda conv: len(_contents(db)[conv]))
    old = {by_size[0]: "requests.jsonl#0", by_size[1]: "requests.jsonl#1"}
    _numbered_the_old_way(db, old)
    expected = _contents(db)
    assert sorted(expected) == ["requests.jsonl#0", "requests.jsonl#1"]

    more = _responses_calls("ORD-55190", "No.")[:1]
    if later == "grown":
        _write(current, records + more)
    else:
        current.rename(logs / "requests.jsonl.1")
        _write(current, more)
    again = cli("ingest", logs, "--db", db)
    assert again.exit_code == 0, again.stderr
    assert "left out" not in again.stderr
    got = _contents(db)
    new = set(got) - set(expected)
    assert {conv: got[conv] for conv in expected} == expected
    (added,) = new  # the new request's conversation, and no copy of the old ones
    assert "ORD-55190" in str(got[added])
    if later == "grown":
        assert added == "requests.jsonl#2"  # the file goes on numbering, as it did
    else:
        assert re.fullmatch(r"requests\.jsonl#[0-9a-f]{16}", added)


def test_a_stream_without_ids_is_one_conversation_read_once(tmp_path):
    """A streamed response without an id: its final `response.completed` event began a
    conversation of its own (`stream.jsonl#3`), the call read a second time there. It is the
    conversation of the request it answers, each item read once."""
    from lexkeep.core.ingest import read_records
    from lexkeep.core.model import ToolCall

    records = _streamed("ORD-77812")
    path = _write(tmp_path / "stream.jsonl", records + _streamed("ORD-55190"))
    calls = [r for r in read_records(path) if isinstance(r, ToolCall)]
    assert [(c.arguments_raw, c.source.line) for c in calls] == [
        ('{"order_id": "ORD-77812"}', 3),
        ('{"order_id": "ORD-55190"}', 7),
    ]
    first, second = (c.conversation_id for c in calls)
    assert first != second
    assert re.fullmatch(r"stream\.jsonl#[0-9a-f]{16}", first)
    # only the events: the stream's first event names it
    events = _write(tmp_path / "events.jsonl", records[1:])
    calls = [r for r in read_records(events) if isinstance(r, ToolCall)]
    assert len(calls) == 1 and re.fullmatch(r"events\.jsonl#[0-9a-f]{16}", calls[0].conversation_id)


def test_streams_without_ids_beginning_alike_in_two_folders_share_a_name_and_no_finding(
    cli, tmp_path
):
    """Two streamed responses without an id and without the request they answer, in two
    folders, whose first events are equal: they are one conversation in a store (each
    stream's call is stored, the second as `call_1#2`), as docs/formats.md says. No finding
    depends on it: such a stream holds only the model's output, no user message, and nothing
    can go on with a response that has no id, so an audit has nothing of either to judge."""
    for folder, order in (("eu", "ORD-77812"), ("us", "ORD-55190")):
        _write(tmp_path / folder / "stream.jsonl", _streamed(order)[1:])
    db = tmp_path / "s.duckdb"
    done = cli("ingest", tmp_path / "eu", tmp_path / "us", "--db", db)
    assert done.exit_code == 0, done.stderr
    ((conv, calls),) = _contents(db).items()
    assert re.fullmatch(r"stream\.jsonl#[0-9a-f]{16}", conv)
    assert [(cid, args) for cid, _, args in calls] == [
        ("call_1", '{"order_id": "ORD-77812"}'),
        ("call_1#2", '{"order_id": "ORD-55190"}'),
    ]
    with Store.open(db) as store:
        assert store.con.execute("SELECT count(*) FROM messages").fetchone() == (0,)
    audited = cli("audit", "--db", db, "--format", "json", "--exit-zero")
    assert audited.exit_code == 0, audited.stderr
    assert json.loads(audited.stdout)["findings"] == []
