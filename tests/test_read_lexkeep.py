"""lexkeep JSONL reader: every record type, defaults, bad records, and arbitrary bytes."""

from __future__ import annotations

from pathlib import Path

import orjson
from hypothesis import given, settings
from hypothesis import strategies as st

from lexkeep.core.ingest import read_records
from lexkeep.core.model import (
    ArgumentsKind,
    Boundary,
    BoundaryKind,
    Conversation,
    Message,
    MessageKind,
    MessageStatus,
    Role,
    Run,
    RunStatus,
    Skipped,
    ToolCall,
    ToolResult,
)
from lexkeep.core.read_lexkeep import READER
from lexkeep.core.readers import JsonLine

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "lexkeep"


def read(*values: dict) -> list:
    return list(READER.read([JsonLine(i + 1, v) for i, v in enumerate(values)], "t.jsonl"))


def test_invoice_fixture_records():
    records = list(read_records(FIXTURES / "invoice.jsonl"))
    kinds = [type(r).__name__ for r in records]
    assert kinds.count("Message") == 7 and kinds.count("ToolCall") == 3
    assert kinds.count("ToolResult") == 2 and kinds.count("Boundary") == 1
    conv = records[0]
    assert conv == Conversation("c-inv", "lexkeep", conv.source, None, "Invoice dispute")
    boundary = next(r for r in records if isinstance(r, Boundary))
    assert boundary.kind == BoundaryKind.LOCAL and boundary.trigger == "auto"
    assert boundary.kept_verbatim == (
        "Please look up invoice INV-2025-08-44719 for account acct_7731.",
    )
    unknown = [r for r in records if isinstance(r, Skipped)]
    assert [(u.reason, u.fatal, u.source.line) for u in unknown] == [("unknown_type", False, 8)]


def test_defaults_from_role():
    [user, system, tool] = read(
        {"type": "message", "id": "a", "conversation_id": "c", "role": "user", "text": "hi"},
        {"type": "message", "id": "b", "conversation_id": "c", "role": "system"},
        {"type": "message", "id": "d", "conversation_id": "c", "role": "tool", "text": "42"},
    )
    assert (user.kind, user.status, user.run_id) == (
        MessageKind.USER_TEXT,
        MessageStatus.COMPLETED,
        None,
    )
    assert (system.kind, system.text) == (MessageKind.SYSTEM, "")
    assert tool.kind == MessageKind.TOOL_RESULT and tool.role == Role.TOOL


def test_summary_kind_is_not_the_user_speaking():
    [msg] = read(
        {
            "type": "message",
            "id": "s",
            "conversation_id": "c",
            "role": "user",
            "kind": "summary",
            "text": "Earlier: the user asked about INV-1.",
        }
    )
    assert isinstance(msg, Message) and msg.kind == MessageKind.SUMMARY


def test_arguments_string_object_array():
    raw = '{"b": 1,  "a": 2}'
    calls = read(
        {"type": "tool_call", "id": "1", "conversation_id": "c", "name": "f", "arguments": raw},
        {
            "type": "tool_call",
            "id": "2",
            "conversation_id": "c",
            "name": "f",
            "arguments": {"x": [1]},
        },
        {
            "type": "tool_call",
            "id": "3",
            "conversation_id": "c",
            "name": "sh",
            "arguments": ["ls", "-l"],
        },
        {
            "type": "tool_call",
            "id": "4",
            "conversation_id": "c",
            "name": "patch",
            "arguments": "*** Begin Patch",
            "arguments_kind": "freeform",
        },
    )
    assert all(isinstance(c, ToolCall) for c in calls)
    assert (calls[0].arguments_raw, calls[0].arguments_kind) == (raw, ArgumentsKind.JSON_STRING)
    assert (calls[1].arguments_raw, calls[1].arguments_kind) == ('{"x":[1]}', ArgumentsKind.OBJECT)
    assert calls[2].arguments_kind == ArgumentsKind.ARRAY
    assert calls[3].arguments_kind == ArgumentsKind.FREEFORM


def test_run_result_and_remote_boundary():
    run, result, boundary = read(
        {"type": "run", "id": "r", "conversation_id": "c", "status": "partial"},
        {"type": "tool_result", "call_id": "k", "conversation_id": "c", "text": {"ok": True}},
        {
            "type": "compaction",
            "id": "b",
            "conversation_id": "c",
            "kind": "remote",
            "summary": None,
        },
    )
    assert isinstance(run, Run) and run.status == RunStatus.PARTIAL
    assert isinstance(result, ToolResult) and result.text == '{"ok":true}'
    assert isinstance(boundary, Boundary) and boundary.summary_text is None
    assert boundary.kind == BoundaryKind.REMOTE


def test_bad_records_are_fatal_with_reason():
    got = read(
        {"type": "message", "conversation_id": "c", "role": "user"},
        {"type": "message", "id": "m", "conversation_id": "c", "role": "robot"},
        {"type": "run", "id": "r", "conversation_id": "c", "status": "done"},
        {"id": "x"},
        {"type": "compaction", "id": "b", "conversation_id": "c", "kept_verbatim": "oops"},
    )
    assert all(isinstance(s, Skipped) and s.fatal for s in got)
    assert [s.reason for s in got] == [
        "missing_field",
        "invalid_field",
        "invalid_field",
        "missing_field",
        "invalid_field",
    ]
    assert "'id'" in got[0].detail and "'robot'" in got[1].detail


def test_sniff_prefers_lexkeep_records_over_envelopes():
    assert READER.sniff([{"type": "message", "conversation_id": "c", "id": "m"}]) > 0
    assert READER.sniff([{"type": "message", "payload": {}, "conversation_id": "x"}]) == 0
    assert READER.sniff([{"type": "user", "uuid": "u", "sessionId": "s"}]) == 0


# orjson decodes integers beyond 64 bits as floats, so decoded lines never hold bigger ones.
json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**63), 2**63 - 1) | st.text(max_size=8),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=4)
    ),
    max_leaves=10,
)
record_like = st.fixed_dictionaries(
    {
        "type": st.sampled_from(
            ["message", "tool_call", "tool_result", "compaction", "run", "conversation", "x"]
        )
    },
    optional={
        "id": json_values,
        "conversation_id": json_values,
        "role": st.sampled_from(["user", "assistant", "tool", "nobody"]) | json_values,
        "text": json_values,
        "arguments": json_values,
        "status": json_values,
        "kept_verbatim": json_values,
        "kind": json_values,
    },
)


@settings(max_examples=100, deadline=None)
@given(st.lists(record_like, max_size=5))
def test_arbitrary_records_never_crash_the_reader(values):
    for item in read(*values):
        assert isinstance(
            item, Conversation | Run | Message | ToolCall | ToolResult | Boundary | Skipped
        )
        if isinstance(item, Message):
            assert isinstance(item.text, str) and isinstance(item.id, str)


def test_json_text_of_fixture_is_valid_jsonl():
    for line in (FIXTURES / "invoice.jsonl").read_bytes().splitlines():
        assert isinstance(orjson.loads(line), dict)


def _schema() -> dict:
    from importlib import resources

    text = resources.files("lexkeep.core").joinpath("lexkeep-jsonl.schema.json").read_text()
    return orjson.loads(text)


def test_schema_ships_and_agrees_with_the_reader():
    jsonschema = __import__("pytest").importorskip("jsonschema")
    validator = jsonschema.Draft202012Validator(_schema())
    for fixture in sorted(FIXTURES.glob("*.jsonl")):
        for line in fixture.read_bytes().splitlines():
            value = orjson.loads(line)
            assert not list(validator.iter_errors(value)), line
            [record] = read(value)
            assert not (isinstance(record, Skipped) and record.fatal)
    bad = [
        {"type": "message", "conversation_id": "c", "role": "user"},
        {"type": "run", "id": "r", "conversation_id": "c", "status": "done"},
        {"type": "compaction", "id": "b", "conversation_id": "c", "kept_verbatim": "oops"},
    ]
    for value in bad:
        assert list(validator.iter_errors(value))
        [record] = read(value)
        assert isinstance(record, Skipped) and record.fatal


BIG = "98765432109876543210"  # beyond 64 bits: orjson reads it as 9.876543210987654e+19


def test_object_and_array_arguments_keep_numbers_as_the_file_writes_them(tmp_path):
    """A 20-digit account number or a long decimal is kept as typed, not as orjson's float."""
    head = '{"type":"tool_call","conversation_id":"c","name":"f",'
    path = tmp_path / "numbers.jsonl"
    path.write_text(
        f'{head}"id":"k1","arguments":{{"account": {BIG}, "rate": 0.10000000000000000555}}}}\n'
        f'{head}"id":"k2","arguments":[1.50, "x", {BIG}, 7]}}\n'
        # a repeated key keeps its first place and its last value, as orjson reads it
        f'{head}"id":"k3","arguments":{{"z": 1.5, "a": {BIG}, "z": 2.50}}}}\n'
        # without a float: orjson's text, as before (escapes written out, spaces dropped)
        f'{head}"id":"k4","arguments":{{"p": "\\u00e9", "n": 18446744073709551615}}}}\n',
        encoding="utf-8",
    )
    calls = [r for r in read_records(path) if isinstance(r, ToolCall)]
    assert [(c.arguments_raw, c.arguments_kind) for c in calls] == [
        (f'{{"account":{BIG},"rate":0.10000000000000000555}}', ArgumentsKind.OBJECT),
        (f'[1.50,"x",{BIG},7]', ArgumentsKind.ARRAY),
        (f'{{"z":2.50,"a":{BIG}}}', ArgumentsKind.OBJECT),
        ('{"p":"é","n":18446744073709551615}', ArgumentsKind.OBJECT),
    ]
