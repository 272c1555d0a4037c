"""Claude Code session reader: synthetic fixtures for every case, the real corpus, fuzzing."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import FIXTURES, position_holes, shared_data
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from lexkeep.core.errors import InputError
from lexkeep.core.formats import detect
from lexkeep.core.ingest import ingest_paths, iter_json_lines, read_records
from lexkeep.core.model import (
    ArgumentsKind,
    Boundary,
    BoundaryKind,
    Conversation,
    Format,
    Message,
    MessageKind,
    MessageStatus,
    Record,
    Role,
    Skipped,
    ToolCall,
    ToolResult,
)
from lexkeep.core.read_claude import READER
from lexkeep.core.read_codex import READER as CODEX
from lexkeep.core.readers import JsonLine
from lexkeep.core.store import Store

CLAUDE = FIXTURES / "claude"
SESSION = "7d0c2b1a-5e4f-4a3b-9c8d-1e2f3a4b5c6d"


def read(path: Path) -> list[Record]:
    """Every record of a fixture, through the real ingest input layer with forced format."""
    return list(read_records(path, Format.CLAUDE))


def of(records: list[Record], cls: type) -> list:
    return [r for r in records if isinstance(r, cls)]


def feed(values: list, path: str = "inline.jsonl") -> list[Record]:
    """Run the reader on decoded values (line i+1 each), bypassing files."""
    return list(READER.read([JsonLine(i + 1, v) for i, v in enumerate(values)], path))


def line(uuid: str, kind: str = "user", **kw) -> dict:
    """A minimal chain line of session "s"."""
    return {"type": kind, "uuid": uuid, "sessionId": "s", "parentUuid": None, **kw}


# -- a main session with a compaction ------------------------------------------------------


@pytest.fixture(scope="module")
def session() -> list[Record]:
    return read(CLAUDE / f"{SESSION}.jsonl")


def test_one_conversation_named_by_session_id(session):
    assert [(c.id, c.parent_id, c.source.line) for c in of(session, Conversation)] == [
        (SESSION, None, 2)
    ]


def test_only_typed_text_is_user_text(session):
    users = [(m.id, m.text) for m in of(session, Message) if m.kind is MessageKind.USER_TEXT]
    assert users == [
        (
            f"{SESSION}:u-004",
            "ship order ORD_88412 to the address on file, tracking 1Z999AA10123456784",
        ),
        (f"{SESSION}:u-007", "use the backup printer PRN-0042 instead"),
        (f"{SESSION}:u-008", "now mark ORD_88412 as shipped"),
    ]
    injected = {m.source.line for m in of(session, Message) if m.kind is MessageKind.INJECTED}
    # isMeta caveat, <command-name>, <local-command-stdout>, hook attachment, interrupt,
    # and the <system-reminder> block that shares line 16 with real text
    assert injected == {2, 3, 4, 7, 15, 16}
    mixed = [m for m in of(session, Message) if m.source.line == 16]
    assert [(m.id, m.kind) for m in mixed] == [
        (f"{SESSION}:u-007/injected", MessageKind.INJECTED),
        (f"{SESSION}:u-007", MessageKind.USER_TEXT),
    ]


def test_compact_boundary_takes_the_following_summary(session):
    (b,) = of(session, Boundary)
    assert (b.id, b.kind, b.trigger, b.source.line) == (
        f"{SESSION}:cb-001",
        BoundaryKind.CLAUDE,
        "manual",
        18,
    )
    assert b.summary_text is not None and "ORD_88412" in b.summary_text
    (summary,) = [m for m in of(session, Message) if m.kind is MessageKind.SUMMARY]
    assert summary.role is Role.USER and summary.text == b.summary_text
    assert summary.source.line == 19
    order = [type(r).__name__ for r in session if r.source.line in (18, 19)]
    assert order == ["Boundary", "Message"]


def test_split_assistant_response_is_joined(session):
    assistants = [m for m in of(session, Message) if m.role is Role.ASSISTANT]
    first = assistants[0]
    # lines 8 (thinking), 9 (text), 11 (tool_use), 12 (same tool_use again) → one message
    assert (first.id, first.text, first.source.line) == (
        f"{SESSION}:msg_01AAA",
        "Looking up ORD_88412.",
        8,
    )
    assert [m.id.split(":")[1] for m in assistants] == [
        "msg_01AAA",
        "msg_01BBB",
        "msg_01CCC",
        "msg_01DDD",
    ]
    calls = of(session, ToolCall)
    assert [c.call_id for c in calls] == ["toolu_01ORD", "toolu_01SHIP", "toolu_01MARK"]
    assert calls[0].message_id == first.id


def test_tool_use_input_object_is_kept_as_json_text(session):
    call = of(session, ToolCall)[0]
    assert call.arguments_kind is ArgumentsKind.OBJECT
    assert call.name == "mcp__shop__get_order"
    assert json.loads(call.arguments_raw) == {
        "order_id": "ORD_88412",
        "fields": ["address", "status"],
    }
    assert call.time == "2026-04-10T09:00:07.000Z"


def test_tool_result_lines_are_results_not_user_text(session):
    results = {r.call_id: r for r in of(session, ToolResult)}
    assert results["toolu_01ORD"].text == "status: packed"
    assert results["toolu_01SHIP"].is_error and "printer offline" in results["toolu_01SHIP"].text
    assert results["toolu_01MARK"].text == "ok"
    assert not [m for m in of(session, Message) if m.source.line in (13, 22)]


def test_metadata_unknown_and_truncated_lines_are_counted(session):
    skipped = [(s.source.line, s.reason, s.fatal) for s in of(session, Skipped)]
    assert skipped == [
        (1, "metadata", False),  # file-history-snapshot
        (6, "metadata", False),  # progress
        (10, "metadata", False),  # progress between two parts of one response
        (17, "metadata", False),  # system turn_duration
        (24, "metadata", False),  # summary (a title, not a compaction)
        (25, "unknown_type", False),
        (26, "metadata", False),  # last-prompt
        (27, "truncated_last_line", False),
    ]


def test_records_carry_their_source_line_and_message_ids_are_unique(session):
    messages = of(session, Message)
    assert len({m.id for m in messages}) == len(messages)
    assert all(r.source.file.endswith(f"{SESSION}.jsonl") for r in session)
    timeline = [r.source.line for r in session if not isinstance(r, Skipped)]
    assert timeline == sorted(timeline)


# -- sub-agents, old layouts, partial and legacy compaction ---------------------------------


def test_subagent_file_links_to_its_session():
    recs = read(CLAUDE / SESSION / "subagents" / "agent-a1b2c3d4e5f6a7b8.jsonl")
    (conv,) = of(recs, Conversation)
    assert (conv.id, conv.parent_id) == (f"{SESSION}/agent-a1b2c3d4e5f6a7b8", SESSION)
    prompt = of(recs, Message)[0]
    # the sub-agent's "user" is the parent agent, not a person
    assert prompt.kind is MessageKind.INJECTED and "ORD_88412" in prompt.text
    assert [c.name for c in of(recs, ToolCall)] == ["Grep"]
    assert not [m for m in of(recs, Message) if m.kind is MessageKind.USER_TEXT]


def test_old_layout_agent_file_without_agent_id_uses_the_file_name():
    recs = read(CLAUDE / "agent-9f8e7d6c.jsonl")
    (conv,) = of(recs, Conversation)
    parent = "3c4d5e6f-7a8b-4c9d-8e0f-1a2b3c4d5e6f"
    assert (conv.id, conv.parent_id) == (f"{parent}/agent-9f8e7d6c", parent)


def test_workflow_agents_are_sub_agents_of_the_session_that_ran_the_workflow(tmp_path):
    """Workflow agents write `sessionId: "<session>#agent-<id>"`; their parent is <session>."""
    root = shared_data() / "claude-code-log" / "test" / "test_data" / "workflow_basic"
    main = "11110000-0000-4000-8000-000000000001"
    with Store.open(tmp_path / "wf.duckdb") as s:
        ingest_paths(s, [str(root)])
        convs = s.con.execute("SELECT id, parent_id FROM conversations ORDER BY id").fetchall()
        (dangling,) = s.con.execute(
            "SELECT count(*) FROM conversations WHERE parent_id IS NOT NULL"
            " AND parent_id NOT IN (SELECT id FROM conversations)"
        ).fetchone()
        prompts = s.con.execute(
            "SELECT DISTINCT kind FROM messages WHERE conversation_id <> ? AND role = 'user'",
            [main],
        ).fetchall()
    assert convs == [(main, None)] + [(f"{main}/agent-ag00000{i}", main) for i in (1, 2, 3)]
    assert dangling == 0
    assert prompts == [("injected",)]  # the workflow script's prompt, not a person


def test_workflow_session_suffix_names_the_agent_when_the_line_has_no_agent_id():
    recs = feed(
        [{**line("w1", message={"role": "user", "content": "go"}), "sessionId": "s#agent-x"}]
    )
    (conv,) = of(recs, Conversation)
    assert (conv.id, conv.parent_id) == ("s/agent-x", "s")
    assert of(recs, Message)[0].kind is MessageKind.INJECTED


def test_inline_sidechain_and_legacy_summary_without_boundary_line():
    recs = read(CLAUDE / "legacy_inline_sidechain.jsonl")
    convs = of(recs, Conversation)
    main = "legacy-session-0001"
    assert [(c.id, c.parent_id) for c in convs] == [
        (main, None),
        (f"{main}/sidechain-l-s1", main),
    ]
    side = [r for r in recs if getattr(r, "conversation_id", None) == f"{main}/sidechain-l-s1"]
    assert [type(r).__name__ for r in side] == ["Message", "Message", "ToolCall", "ToolResult"]
    # the Task result comes back to the main conversation
    assert [r.conversation_id for r in of(recs, ToolResult)] == [f"{main}/sidechain-l-s1", main]
    (b,) = of(recs, Boundary)
    assert b.source.line == 8 and b.trigger is None
    assert b.summary_text is not None and b.summary_text.endswith("audit config/prod.yaml.")
    users = [m.text for m in of(recs, Message) if m.kind is MessageKind.USER_TEXT]
    assert users == ["audit config/prod.yaml for key ROTATE_KEYS_V2", "thanks"]


def test_partial_compaction_keeps_the_preserved_user_text_and_two_boundaries():
    recs = read(CLAUDE / "partial_compaction.jsonl")
    first, second = of(recs, Boundary)
    assert first.kept_verbatim == ("second: link it to PR 4411",)
    assert first.trigger == "auto" and first.summary_text is not None
    # a boundary whose summary line never came still counts, with no readable summary
    assert second.summary_text is None and second.kept_verbatim == ()


def test_queued_prompt_typed_while_busy_is_user_text():
    recs = read(CLAUDE / "partial_compaction.jsonl")
    queued = [(m.text, m.kind) for m in of(recs, Message) if m.source.line >= 9]
    assert queued == [
        ("and tag it SEV-2", MessageKind.USER_TEXT),
        (queued[1][0], MessageKind.INJECTED),  # a task notification queued by the harness
    ]


def test_every_fixture_is_detected_as_claude_and_not_codex():
    for path in sorted(CLAUDE.rglob("*.jsonl")):
        head = [v.value for v in iter_json_lines(path) if isinstance(v, JsonLine)][:20]
        assert detect(head) is Format.CLAUDE, path.name
        assert CODEX.sniff(head) == 0, path.name


# -- odd data ------------------------------------------------------------------------------


def test_missing_ids_and_broken_lines():
    recs = feed(
        [
            {"type": "user", "sessionId": "s", "message": {"role": "user", "content": "hi"}},
            {"type": "user", "uuid": "u1", "message": {"role": "user", "content": "hi"}},
            line("u2", message="error"),
            line("u2", message={"role": "user", "content": "a later valid copy of u2"}),
            line("u2", message={"role": "user", "content": "a duplicate of u2"}),
            line("a1", "assistant", message={"id": "m", "content": [{"type": "tool_use"}]}),
            line("u3", message={"role": "user", "content": [{"type": "tool_result"}]}),
            line("u4", message={"role": "user", "content": [{"type": "image"}]}),
            {"no": "type"},
            "text",
        ]
    )
    skipped = [(r.source.line, r.reason, r.fatal) for r in recs if isinstance(r, Skipped)]
    assert skipped == [
        (1, "missing_id", True),
        (2, "missing_id", True),
        (3, "malformed", True),
        (5, "duplicate", False),
        (6, "missing_id", True),
        (7, "missing_id", True),
        (8, "empty", False),
        (9, "unknown_type", False),
        (10, "not_an_object", True),
    ]
    users = [m.text for m in of(recs, Message) if m.kind is MessageKind.USER_TEXT]
    assert users == ["a later valid copy of u2"]


def test_response_continued_after_other_lines_gets_its_own_id():
    part = {"id": "msg_X", "content": [{"type": "text", "text": "one"}]}
    later = {"id": "msg_X", "content": [{"type": "text", "text": "two"}]}
    recs = feed(
        [
            line("a1", "assistant", message=part),
            line("u1", message={"role": "user", "content": "go on"}),
            line("a2", "assistant", message=later, isApiErrorMessage=True),
        ]
    )
    first, _, second = of(recs, Message)
    assert (first.id, first.text) == ("s:msg_X", "one")
    assert (second.id, second.text, second.status) == ("s:a2", "two", MessageStatus.FAILED)


def test_forked_session_names_its_origin():
    fork = {"sessionId": "s", "messageUuid": "u1"}
    recs = feed(
        [
            {**line("u9", message={"role": "user", "content": "go"}), "sessionId": "f"}
            | {"forkedFrom": fork}
        ]
    )
    (conv,) = of(recs, Conversation)
    assert (conv.id, conv.parent_id) == ("f", "s")
    assert of(recs, Message)[0].kind is MessageKind.USER_TEXT  # a fork is not a sub-agent


def test_same_uuid_in_two_sessions_gives_two_messages():
    recs = feed(
        [
            {**line("a", message={"role": "user", "content": "in s"}), "sessionId": "s"},
            {**line("a", message={"role": "user", "content": "in t"}), "sessionId": "t"},
        ]
    )
    assert [m.id for m in of(recs, Message)] == ["s:a", "t:a"]


# -- property tests ------------------------------------------------------------------------

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=12), inner, max_size=5)
    ),
    max_leaves=10,
)
blocks = st.fixed_dictionaries(
    {"type": st.sampled_from(["text", "tool_use", "tool_result", "thinking", "image", "x"])},
    optional={
        "text": json_values,
        "id": json_values,
        "input": json_values,
        "tool_use_id": json_values,
        "content": json_values,
        "is_error": json_values,
    },
)
chain_lines = st.fixed_dictionaries(
    {
        "type": st.sampled_from(["user", "assistant", "system", "attachment", "progress", "x"]),
        "uuid": st.sampled_from(["u1", "u2", "u3"]) | json_values,
        "sessionId": st.sampled_from(["s", "t"]) | json_values,
    },
    optional={
        "parentUuid": st.sampled_from(["u1", "u2", None]) | json_values,
        "isSidechain": st.booleans() | json_values,
        "agentId": json_values,
        "isMeta": json_values,
        "isCompactSummary": json_values,
        "subtype": st.sampled_from(["compact_boundary", "turn_duration"]) | json_values,
        "compactMetadata": json_values,
        "attachment": json_values,
        "message": st.fixed_dictionaries(
            {},
            optional={
                "id": st.sampled_from(["m1", "m2"]) | json_values,
                "content": st.lists(blocks, max_size=3) | json_values,
            },
        )
        | json_values,
    },
)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.one_of(json_values, chain_lines), max_size=12))
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


def test_real_claude_sessions_counts():
    root = shared_data() / "claude-code-log" / "test" / "test_data"
    files = [
        f
        for f in sorted(root.rglob("*.jsonl"))
        if f.relative_to(root).parts[0] != "codex"
        # a workflow journal ({"type":"started"|"result"}), not a session transcript
        and f.name != "journal.jsonl"
        and f.stat().st_size > 0
    ]
    empty = [f for f in root.rglob("*.jsonl") if f.stat().st_size == 0]
    recs = [r for f in files for r in read_records(f)]
    users = [m for m in of(recs, Message) if m.kind is MessageKind.USER_TEXT]
    # Counted independently, in test_data/ (non-empty *.jsonl outside codex/, not journal.jsonl):
    #   empty files: find . -name '*.jsonl' -empty | wc -l                                   → 17
    #   tool calls: distinct tool_use ids per file (python one-liner: for each file, a set of
    #     b["id"] over message.content blocks with type tool_use; summed); also
    #     grep -rc '"type": *"tool_use"' --include=*.jsonl . (outside codex) summed          → 962
    #   boundaries: grep -rc '"subtype":"compact_boundary"' . summed                          → 2
    #   conversations: distinct (sessionId, agentId or agent-file or inline-sidechain) per file,
    #     over lines with uuid + sessionId                                                     → 125
    #   real user messages: user lines with uuid+sessionId, not isSidechain/isMeta/
    #     isCompactSummary, with a text block not starting with <system-reminder>, <command-,
    #     <local-command, Caveat:, [Request, <ide_, <bash-std, <task-notification>,
    #     <teammate-message or "This session is being continued"                              → 130
    assert len(files) == 120 and len(empty) == 17
    assert len(of(recs, ToolCall)) == 962
    assert len(of(recs, Boundary)) == 2
    assert len(of(recs, Conversation)) == 125
    assert len(users) == 130
    # every tool_use of a split response is attached to a message that exists
    message_ids = {m.id for m in of(recs, Message)}
    assert all(c.message_id in message_ids for c in of(recs, ToolCall))
    fatal = {(Path(s.source.file).name, s.source.line) for s in of(recs, Skipped) if s.fatal}
    # only the deliberately broken lines of edge_cases.jsonl are errors
    assert {name for name, _ in fatal} == {"edge_cases.jsonl"}
    subagents = [c for c in of(recs, Conversation) if c.parent_id is not None]
    assert subagents and all("/" in c.id and c.id.startswith(c.parent_id) for c in subagents)


# -- through the real ingest into a DuckDB file --------------------------------------------


def test_ingested_store_takes_identifiers_from_user_text_only(store):
    from lexkeep.core.ingest import ingest_paths

    ingest_paths(store, [str(CLAUDE)])
    con = store.con
    values = {v for (v,) in con.execute("SELECT value FROM identifiers").fetchall()}
    assert {"ORD_88412", "PRN-0042"} <= values
    # shop/labels.py is only named in a <system-reminder>; the summary's text is not the user
    assert "shop/labels.py" not in values
    kinds = dict(con.execute("SELECT kind, count(*) FROM messages GROUP BY kind").fetchall())
    assert kinds["summary"] == 3 and kinds["user_text"] == 9
    (n,) = con.execute("SELECT count(*) FROM boundaries WHERE summary_text IS NOT NULL").fetchone()
    assert n == 3


def test_real_sessions_sharing_a_session_id_keep_positions_without_holes(tmp_path):
    """Files of the corpus that share a sessionId repeat some of each other's lines: those are
    stored once, and took positions all the same (holes in s1, s2, todowrite_session)."""
    root = shared_data() / "claude-code-log" / "test" / "test_data"
    with Store.open(tmp_path / "all.duckdb") as s:
        ingest_paths(s, [str(root)], skip_invalid=True)
        assert position_holes(s) == []


def test_tool_use_input_keeps_numbers_as_the_session_writes_them(tmp_path):
    """orjson reads a 20-digit number as a float; the input keeps the digits the line has."""
    big = 98765432109876543210
    message = {
        "id": "msg_1",
        "role": "assistant",
        "content": [
            {"type": "text", "text": "Refunding."},
            {
                "type": "tool_use",
                "id": "toolu_1",
                "name": "refund",
                "input": {"account": big, "items": [{"qty": 2, "ref": big}]},
            },
        ],
    }
    path = tmp_path / "session.jsonl"
    path.write_text(
        json.dumps(line("u1", message={"role": "user", "content": f"refund account {big}"}))
        + "\n"
        + json.dumps(line("a1", "assistant", message=message))
        + "\n"
    )
    [call] = of(read(path), ToolCall)
    assert call.arguments_raw == f'{{"account":{big},"items":[{{"qty":2,"ref":{big}}}]}}'
    assert call.arguments_kind is ArgumentsKind.OBJECT


def test_a_block_holding_an_integer_beyond_64_bits_is_read():
    """Values decoded by another parser (the library takes decoded values) may hold integers
    orjson cannot write: the split-response check turned such a line into a fatal error."""
    value = line("u1", "assistant", message={"id": "m1", "content": [{"type": "x", "n": 2**64}]})
    value["message"]["content"].append({"type": "text", "text": "done"})
    records = feed([value])
    assert not any(isinstance(r, Skipped) for r in records), records
    assert [r.text for r in records if isinstance(r, Message)] == ["done"]
