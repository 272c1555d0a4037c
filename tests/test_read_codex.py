"""Codex CLI rollout reader: synthetic fixtures for every era and case, the real corpus, fuzzing."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import FIXTURES, shared_data
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from lexkeep.core.errors import InputError
from lexkeep.core.formats import detect
from lexkeep.core.ingest import iter_json_lines, read_records
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
    ToolCall,
    ToolResult,
)
from lexkeep.core.read_claude import READER as CLAUDE
from lexkeep.core.read_codex import READER, strip_summary_prefix
from lexkeep.core.readers import JsonLine

CODEX = FIXTURES / "codex"
PARENT = "0190f00d-0000-7000-8000-00000000c0de"


def read(path: Path) -> list[Record]:
    """Every record of a fixture, through the real ingest input layer with forced format."""
    return list(read_records(path, Format.CODEX))


def of(records: list[Record], cls: type) -> list:
    return [r for r in records if isinstance(r, cls)]


def feed(values: list, path: str = "inline.jsonl") -> list[Record]:
    """Run the reader on decoded values (line i+1 each), bypassing files."""
    return list(READER.read([JsonLine(i + 1, v) for i, v in enumerate(values)], path))


# -- the wrapped era, with a local and a remote compaction ---------------------------------


@pytest.fixture(scope="module")
def wrapped() -> list[Record]:
    return read(CODEX / "wrapped_compactions.jsonl")


def test_session_meta_opens_the_conversation(wrapped):
    convs = of(wrapped, Conversation)
    assert [(c.id, c.parent_id, c.source.line) for c in convs] == [(PARENT, None, 1)]
    assert all(r.conversation_id == PARENT for r in wrapped if hasattr(r, "conversation_id"))


def test_only_typed_text_is_user_text(wrapped):
    users = [m.text for m in of(wrapped, Message) if m.kind is MessageKind.USER_TEXT]
    assert users == [
        "Please refund invoice INV-2025-08-44719 for customer ACME-7781.",
        "Now issue the refund, reference ticket BILL-4412.",
    ]
    kinds = {m.source.line: (m.role, m.kind) for m in of(wrapped, Message)}
    assert kinds[3] == (Role.SYSTEM, MessageKind.SYSTEM)  # developer permissions
    assert kinds[4] == (Role.USER, MessageKind.INJECTED)  # AGENTS.md
    assert kinds[5] == (Role.USER, MessageKind.INJECTED)  # <environment_context>
    assert kinds[23] == (Role.USER, MessageKind.SUMMARY)  # summary re-inserted after compaction
    assert kinds[9] == (Role.ASSISTANT, MessageKind.REASONING)


def test_duplicated_views_keep_one_copy(wrapped):
    texts = [m.text for m in of(wrapped, Message)]
    assert len(texts) == len(set(texts))
    dups = [s.source.line for s in of(wrapped, Skipped) if s.reason == "duplicate_view"]
    # whichever view comes first is kept: response_item at 6/24, event_msg at 17/29 … skipped
    assert dups == [7, 18, 25, 29]
    assert {m.source.line for m in of(wrapped, Message) if m.role is Role.ASSISTANT} == {9, 17, 28}


def test_tool_calls_keep_arguments_exactly(wrapped):
    calls = {c.call_id: c for c in of(wrapped, ToolCall)}
    assert list(calls) == ["call_lookup_1", "call_patch_1", "call_shell_1", "call_refund_1"]
    assert calls["call_lookup_1"].arguments_raw == '{"invoice_id":"INV-2025-08-44719"}'
    assert calls["call_lookup_1"].arguments_kind is ArgumentsKind.JSON_STRING
    assert calls["call_patch_1"].arguments_kind is ArgumentsKind.FREEFORM
    assert calls["call_patch_1"].arguments_raw.startswith("*** Begin Patch\n")
    assert calls["call_shell_1"].name == "local_shell"
    assert calls["call_shell_1"].arguments_kind is ArgumentsKind.ARRAY
    assert json.loads(calls["call_shell_1"].arguments_raw) == [
        "bash",
        "-lc",
        "grep -r ACME-7781 data/",
    ]
    assert calls["call_refund_1"].time == "2026-03-01T10:20:05.000Z"


def test_tool_results_join_by_call_id(wrapped):
    results = {r.call_id: r for r in of(wrapped, ToolResult)}
    assert set(results) == {c.call_id for c in of(wrapped, ToolCall)}
    assert results["call_patch_1"].text.startswith("Success.")  # content-item list output
    assert results["call_shell_1"].is_error  # {content, success: false}
    assert not results["call_lookup_1"].is_error


def test_local_and_remote_compaction_boundaries(wrapped):
    local, remote = of(wrapped, Boundary)
    assert local.kind is BoundaryKind.LOCAL and local.source.line == 20
    assert local.summary_text == (
        "Goal: refund invoice INV-2025-08-44719 for customer ACME-7781.\n"
        "Done: looked up the invoice.\nNext: issue the refund."
    )
    # the <environment_context> and the summary itself are not kept-verbatim user messages
    assert local.kept_verbatim == (
        "Please refund invoice INV-2025-08-44719 for customer ACME-7781.",
    )
    assert remote.kind is BoundaryKind.REMOTE and remote.summary_text is None
    assert remote.kept_verbatim == (
        "Please refund invoice INV-2025-08-44719 for customer ACME-7781.",
        "Refund queued under BILL-4412.",
        "Now issue the refund, reference ticket BILL-4412.",
    )
    assert remote.time == "2026-03-01T10:40:00.000Z"


def test_unknown_and_metadata_lines_are_counted_not_errors(wrapped):
    skipped = of(wrapped, Skipped)
    assert not [s for s in skipped if s.fatal]
    assert [s.detail for s in skipped if s.reason == "unknown_type"] == ["window_checkpoint_v9"]
    metadata = [s.source.line for s in skipped if s.reason == "metadata"]
    # turn_context ×2, token_count, agent_reasoning, task_complete, context_compacted ×2, ghost
    assert metadata == [2, 8, 10, 19, 21, 22, 31, 33]


def test_timeline_is_file_order(wrapped):
    lines = [r.source.line for r in wrapped]
    assert lines == sorted(lines)
    assert len(lines) == 33  # one record (or skip) per line


# -- other eras and shapes -----------------------------------------------------------------


def test_legacy_bridge_compaction():
    recs = read(CODEX / "legacy_bridge.jsonl")
    (b,) = of(recs, Boundary)
    assert b.kind is BoundaryKind.LOCAL
    assert b.summary_text == "Renamed the flag; docs pending."
    assert b.kept_verbatim == (
        "rename the flag --dry to --dry-run in cli/args.py\n\nalso update docs/USAGE.md",
    )
    kinds = [(m.source.line, m.kind) for m in of(recs, Message)]
    assert kinds == [
        (2, MessageKind.INJECTED),  # event_msg kind user_instructions
        (3, MessageKind.USER_TEXT),
        (7, MessageKind.SUMMARY),  # the bridge message re-inserted as a user message
        (8, MessageKind.INJECTED),  # <turn_aborted>
    ]
    last = recs[-1]
    assert isinstance(last, Skipped) and not last.fatal and last.source.line == 9


def test_bare_era():
    path = CODEX / "rollout-2025-08-01T09-00-00-5f0c1d2e-3a4b-4c5d-8e6f-7a8b9c0d1e2f.jsonl"
    recs = read(path)
    (conv,) = of(recs, Conversation)
    assert conv.id == "5f0c1d2e-3a4b-4c5d-8e6f-7a8b9c0d1e2f"
    assert [m.kind for m in of(recs, Message)] == [
        MessageKind.INJECTED,
        MessageKind.USER_TEXT,
        MessageKind.ASSISTANT_TEXT,
    ]
    shell, fn = of(recs, ToolCall)
    assert (shell.call_id, shell.arguments_kind) == ("lsh_1", ArgumentsKind.ARRAY)
    assert json.loads(shell.arguments_raw) == ["grep", "-n", "ERR_CONN_RESET", "logs/job-88412.log"]
    assert fn.arguments_kind is ArgumentsKind.JSON_STRING
    assert [s.detail for s in of(recs, Skipped) if s.reason == "metadata"] == [
        "record_type state",
        "record_type state",
    ]
    assert READER.sniff([json.loads(line) for line in path.read_text().splitlines()]) > 0


def test_newest_era_subagent_links_parent_and_drops_copied_history():
    recs = read(CODEX / "newest_subagent.jsonl")
    (conv,) = of(recs, Conversation)
    assert conv.parent_id == PARENT
    copied = [s.source.line for s in of(recs, Skipped) if s.reason == "copied_parent_history"]
    assert copied == [2, 3]
    (prompt, answer) = of(recs, Message)
    # the sub-agent's "user" is the parent agent: not a person typing
    assert prompt.kind is MessageKind.INJECTED and prompt.text == "find ACME-7781 in the CRM"
    assert answer.kind is MessageKind.ASSISTANT_TEXT
    search, web = of(recs, ToolCall)
    assert (search.name, search.arguments_kind) == ("tool_search", ArgumentsKind.OBJECT)
    assert json.loads(search.arguments_raw) == {"query": "crm customer lookup"}
    assert web.name == "web_search" and "ACME-7781 crm" in web.arguments_raw


def test_forked_thread_names_its_origin():
    recs = read(CODEX / "forked.jsonl")
    (conv,) = of(recs, Conversation)
    assert conv.parent_id == PARENT
    assert recs[1] == Skipped(recs[1].source, "metadata", "repeated session_meta")
    assert [m.text for m in of(recs, Message) if m.kind is MessageKind.USER_TEXT] == [
        "continue from the fork: check order ORD_55120"
    ]


def test_every_fixture_is_detected_as_codex_and_not_claude():
    for path in sorted(CODEX.glob("*.jsonl")):
        head = [v.value for v in iter_json_lines(path) if isinstance(v, JsonLine)][:20]
        assert detect(head) is Format.CODEX, path.name
        assert CLAUDE.sniff(head) == 0, path.name


def test_strip_summary_prefix_keeps_other_text():
    assert strip_summary_prefix("plain summary") == "plain summary"
    assert strip_summary_prefix("Another language model started to solve this problem") == ""


# -- odd data ------------------------------------------------------------------------------


def test_missing_ids_are_fatal_and_odd_shapes_are_skipped():
    recs = feed(
        [
            {"type": "session_meta", "payload": {"cwd": "/x"}},
            {"type": "response_item", "payload": {"type": "function_call", "name": "f"}},
            {"type": "response_item", "payload": {"type": "function_call_output", "output": "x"}},
            {"type": "response_item", "payload": "not an object"},
            {"type": "response_item", "payload": {"type": "message", "role": "user", "content": 7}},
            {"type": "response_item", "payload": {"type": "message", "role": "critic"}},
            {"type": "compacted", "payload": {"message": ""}},
            [1, 2],
        ],
        path="rollout-2026-01-01T00-00-00-0190aaaa-0000-7000-8000-000000000001.jsonl",
    )
    reasons = [(r.source.line, r.reason, r.fatal) for r in recs if isinstance(r, Skipped)]
    assert reasons == [
        (1, "missing_id", True),
        (2, "missing_id", True),
        (3, "missing_id", True),
        (4, "unknown_type", False),
        (5, "empty", False),
        (6, "unknown_type", False),
        (8, "not_an_object", True),
    ]
    # without session_meta the conversation id comes from the file name
    (conv,) = of(recs, Conversation)
    assert conv.id == "0190aaaa-0000-7000-8000-000000000001"
    (b,) = of(recs, Boundary)  # legacy remote: empty message, no replacement_history
    assert b.kind is BoundaryKind.REMOTE and b.summary_text is None


def test_a_repeated_call_id_is_a_duplicate_only_when_it_is_the_same_call_or_output():
    """A call or output given again as it was (a copied line) is a quiet duplicate; other
    arguments or other output under the id are yielded for the ingest to record as
    id_conflict. A function call without a name is malformed whether or not its id came
    before: Codex's rollout writer always records a function call's name, so such a line is
    no copy Codex wrote, and the first one is refused the same way."""

    def item(payload: dict) -> dict:
        return {"type": "response_item", "payload": payload}

    call = {"type": "function_call", "call_id": "c1", "name": "shell", "arguments": '{"a": 1}'}
    out = {"type": "function_call_output", "call_id": "c1", "output": "one"}
    recs = feed(
        [
            {"type": "session_meta", "payload": {"id": "r1"}},
            item(call),
            item({**call, "arguments": '{"a":1}'}),  # the same JSON value
            item({**call, "arguments": '{"a": 2}'}),
            item({k: v for k, v in call.items() if k != "name"}),
            item(out),
            item(out),
            item({**out, "output": "two"}),
        ]
    )
    skipped = [(r.source.line, r.reason, r.fatal) for r in recs if isinstance(r, Skipped)]
    assert skipped == [(3, "duplicate", False), (5, "malformed", True), (7, "duplicate", False)]
    assert [(r.source.line, r.arguments_raw) for r in of(recs, ToolCall)] == [
        (2, '{"a": 1}'),
        (4, '{"a": 2}'),
    ]
    assert [(r.source.line, r.text) for r in of(recs, ToolResult)] == [(6, "one"), (8, "two")]


def test_repeated_user_text_is_not_collapsed_across_turns():
    def turn(text: str) -> list[dict]:
        item = {
            "type": "message",
            "role": "user",
            "content": [{"type": "input_text", "text": text}],
        }
        event = {"type": "user_message", "message": text}
        return [{"type": "response_item", "payload": item}, {"type": "event_msg", "payload": event}]

    recs = feed([{"type": "session_meta", "payload": {"id": "c"}}, *turn("go"), *turn("go")])
    users = [m for m in of(recs, Message) if m.kind is MessageKind.USER_TEXT]
    assert [m.source.line for m in users] == [2, 4]


def test_ids_are_stable_across_reads():
    path = CODEX / "wrapped_compactions.jsonl"
    assert read(path) == read(path)
    ids = [m.id for m in of(read(path), Message)]
    assert len(ids) == len(set(ids)) and ids[0] == f"{PARENT}:L3"


# -- property tests ------------------------------------------------------------------------

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=12), inner, max_size=5)
    ),
    max_leaves=10,
)
# Values shaped like rollout lines, so the fuzzing reaches deep into the reader.
envelopes = st.fixed_dictionaries(
    {
        "type": st.sampled_from(["session_meta", "response_item", "event_msg", "compacted", "x"]),
        "payload": st.one_of(
            json_values,
            st.fixed_dictionaries(
                {
                    "type": st.sampled_from(
                        [
                            "message",
                            "function_call",
                            "custom_tool_call",
                            "local_shell_call",
                            "function_call_output",
                            "user_message",
                            "agent_message",
                            "reasoning",
                            "web_search_call",
                            "tool_search_call",
                        ]
                    ),  # fmt: skip
                    "role": st.sampled_from(["user", "assistant", "developer", "x"]),
                },
                optional={
                    "id": json_values,
                    "call_id": json_values,
                    "content": json_values,
                    "message": json_values,
                    "arguments": json_values,
                    "input": json_values,
                    "action": json_values,
                    "output": json_values,
                    "replacement_history": json_values,
                    "source": json_values,
                    "summary": json_values,
                },
            ),
        ),
    },
    optional={"timestamp": json_values},
)


@pytest.mark.parametrize("kind", [[], {}, ["response_item"], 7])
def test_a_type_that_is_not_a_string_is_an_unknown_type_not_a_crash(kind):
    meta = {"timestamp": "t", "type": "session_meta", "payload": {"id": "s"}}
    records = feed([meta, {"type": kind}])
    skipped = of(records, Skipped)
    assert [s.reason for s in skipped] == ["unknown_type"], skipped
    assert "Error" not in skipped[0].detail


@settings(max_examples=60, deadline=None)
@given(st.lists(st.one_of(json_values, envelopes), max_size=12))
def test_arbitrary_json_never_crashes(values):
    for record in feed(values):
        assert isinstance(record, Record.__args__)  # type: ignore[attr-defined]
        # the reader's last-resort guard (an exception turned into a Skipped) never fires
        assert not (isinstance(record, Skipped) and "Error: " in record.detail), record
    READER.sniff(values)


@settings(
    max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(st.binary(max_size=300))
def test_arbitrary_bytes_parse_or_give_the_documented_error(tmp_path, data):
    path = tmp_path / "fuzz.jsonl"
    path.write_bytes(data)
    try:
        records = read(path)
    except InputError:  # the ingest's documented error (e.g. not JSON at all)
        return
    assert all(isinstance(r, Record.__args__) for r in records)  # type: ignore[attr-defined]


# -- the real corpus -----------------------------------------------------------------------


def test_real_codex_rollouts_counts():
    root = shared_data() / "claude-code-log" / "test" / "test_data" / "codex"
    files = sorted(root.rglob("*.jsonl"))
    recs = [r for f in files for r in read_records(f)]
    convs = of(recs, Conversation)
    users = [m for m in of(recs, Message) if m.kind is MessageKind.USER_TEXT]
    # Counted independently, in that folder:
    #   files, conversations: find . -name '*.jsonl' | wc -l                                → 6
    #   tool calls: grep -h -o '"call_id":"[^"]*"' $(grep -L subagent $(find . -name '*.jsonl'))
    #               | sort -u | wc -l                                                      → 4
    #     (the sub-agent file's only call is copied parent history)
    #   boundaries: grep -c '"compacted"' -r . (all 0)                                      → 0
    #   real user messages: grep -L subagent $(find . -name '*.jsonl')
    #       | xargs grep -h -c '"user_message"\|^{"type":"message","role":"user"' | paste -sd+ | bc
    #                                                                                       → 5
    assert len(files) == 6
    assert len(convs) == 6
    assert len(of(recs, ToolCall)) == 4
    assert len(of(recs, Boundary)) == 0
    assert len(users) == 5
    subagent = next(c for c in convs if c.id.startswith("33333333"))
    assert subagent.parent_id == "22222222-2222-4222-8222-222222222222"
    fatal = [(Path(s.source.file).name, s.source.line) for s in of(recs, Skipped) if s.fatal]
    assert fatal == [("rollout-66666666-6666-4666-8666-666666666666.jsonl", 3)]


# -- through the real ingest into a DuckDB file --------------------------------------------


def test_ingested_store_takes_identifiers_from_user_text_only(store):
    from lexkeep.core.ingest import ingest_paths

    ingest_paths(store, [str(CODEX)])
    values = {v for (v,) in store.con.execute("SELECT value FROM identifiers").fetchall()}
    assert {"INV-2025-08-44719", "BILL-4412", "ORD_55120"} <= values
    # named only in AGENTS.md / <environment_context> / a sub-agent prompt / the summary
    assert not {"/home/dev/billing", "/srv/app"} & values
    (kept,) = store.con.execute(
        "SELECT kept_verbatim FROM boundaries WHERE kind = 'local' AND summary_text LIKE 'Goal:%'"
    ).fetchone()
    assert kept == ["Please refund invoice INV-2025-08-44719 for customer ACME-7781."]
    rows = store.con.execute(
        "SELECT count(*) FILTER (kind = 'user_text'), count(*) FILTER (kind = 'summary')"
        " FROM messages"
    ).fetchone()
    assert rows == (5, 2)


def test_object_and_array_arguments_keep_numbers_as_the_rollout_writes_them(tmp_path):
    """A function_call with object arguments and a local_shell_call argv: 20-digit numbers stay
    as written (orjson alone would write 9.876543210987654e+19)."""
    big = 98765432109876543210
    meta = {"id": "0190f00d-0000-7000-8000-0000000000b1", "timestamp": "2026-05-01T09:00:00Z"}
    items = [
        {"type": "function_call", "name": "refund", "call_id": "c1", "arguments": {"n": big}},
        {"type": "local_shell_call", "call_id": "c2", "action": {"command": ["echo", big]}},
    ]
    lines = [{"timestamp": "2026-05-01T09:00:00Z", "type": "session_meta", "payload": meta}]
    lines += [{"timestamp": "2026-05-01T09:00:01Z", "type": "response_item", "payload": p}
              for p in items]  # fmt: skip
    path = tmp_path / "rollout.jsonl"
    path.write_text("".join(json.dumps(v) + "\n" for v in lines))
    calls = {c.call_id: c.arguments_raw for c in of(read(path), ToolCall)}
    assert calls == {"c1": f'{{"n":{big}}}', "c2": f'["echo",{big}]'}


def test_tool_output_given_as_an_object_keeps_its_numbers_as_written(tmp_path):
    big = 98765432109876543210
    meta = {"id": "0190f00d-0000-7000-8000-0000000000b2", "timestamp": "2026-05-01T09:00:00Z"}
    items = [
        {"type": "function_call", "name": "lookup", "call_id": "c1", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "c1", "output": {"account": big, "x": 1.50}},
    ]
    lines = [{"timestamp": "2026-05-01T09:00:00Z", "type": "session_meta", "payload": meta}]
    lines += [{"timestamp": "2026-05-01T09:00:01Z", "type": "response_item", "payload": p}
              for p in items]  # fmt: skip
    path = tmp_path / "rollout.jsonl"
    text = "".join(json.dumps(v) + "\n" for v in lines).replace('"x": 1.5}', '"x": 1.50}')
    path.write_text(text)
    (result,) = of(read(path), ToolResult)
    assert result.text == f'{{"account":{big},"x":1.50}}'
