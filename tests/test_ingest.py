"""ingest_paths: transactions, idempotency, appends, bad input, positions, runs, arguments."""

from __future__ import annotations

import gzip
import shutil
from pathlib import Path

import pytest
from conftest import (
    INGEST_TABLES,
    SAMPLE_TRACES,
    position_holes,
    repeated_call_file,
    repeated_result_file,
)

from lexkeep.core import store as store_module
from lexkeep.core.errors import InputError
from lexkeep.core.ingest import (
    TRUNCATED_LAST_LINE,
    JsonSource,
    UnrecognisedFormat,
    ingest_paths,
    iter_json_lines,
)
from lexkeep.core.model import Skipped
from lexkeep.core.readers import JsonLine
from lexkeep.core.store import Store

FIXTURES = Path(__file__).resolve().parent / "fixtures"
INVOICE = FIXTURES / "lexkeep" / "invoice.jsonl"

TABLES = INGEST_TABLES


def snapshot(store: Store) -> dict[str, list[tuple]]:
    """Every row of every table this area writes (sorted), to compare whole stores."""
    out = {}
    for table in TABLES:
        cols = [r[0] for r in store.con.execute(f"DESCRIBE {table}").fetchall()]
        keep = [c for c in cols if c != "started_at"]
        rows = store.con.execute(f"SELECT {', '.join(keep)} FROM {table}").fetchall()
        out[table] = sorted(rows, key=repr)
    return out


def count(store: Store, table: str, where: str = "true") -> int:
    return store.con.execute(f"SELECT count(*) FROM {table} WHERE {where}").fetchone()[0]


def lexkeep_line(kind: str, **fields: object) -> str:
    import orjson

    return orjson.dumps({"type": kind, **fields}).decode() + "\n"


def test_fixture_counts_and_positions(store):
    [got] = ingest_paths(store, [str(INVOICE)])
    # grep -c '"type":"message"' invoice.jsonl -> 7; tool_call -> 3; compaction -> 1
    assert (got.format, got.messages, got.tool_calls, got.boundaries) == ("lexkeep", 7, 3, 1)
    assert got.conversations == 1
    assert got.skipped == {"unknown_type": 1}
    # One ordering shared by messages, calls, results and boundaries: 0..n-1, no holes.
    positions = store.con.execute(
        "SELECT position FROM messages UNION ALL SELECT position FROM tool_calls"
        " UNION ALL SELECT position FROM tool_results UNION ALL SELECT position FROM boundaries"
        " ORDER BY 1"
    ).fetchall()
    assert [p for (p,) in positions] == list(range(13))  # 7 + 3 + 2 results + 1
    assert store.con.execute("SELECT max_position FROM conversations").fetchone()[0] == 12
    # Source file and line are kept for every message and call.
    assert store.con.execute("SELECT source_line FROM messages WHERE id = 'm5'").fetchone()[0] == 10
    assert (
        store.con.execute("SELECT source_line FROM tool_calls WHERE call_id = 'call_3'").fetchone()[
            0
        ]
        == 13
    )


def test_arguments_raw_parsed_and_kind(store):
    ingest_paths(store, [str(INVOICE)])
    rows = dict(
        (r[0], r[1:])
        for r in store.con.execute(
            "SELECT call_id, arguments_raw, arguments::VARCHAR, arguments_kind FROM tool_calls"
        ).fetchall()
    )
    assert rows["call_1"] == ('{"invoice_id":"INV-2025-08-44719"}',) * 2 + ("json_string",)
    assert rows["call_2"][2] == "object" and '"INV-2025-08-4471"' in rows["call_2"][0]
    # Invalid JSON is kept verbatim, parsed form NULL.
    assert rows["call_3"] == ('{"text": "unterminated', None, "json_string")


def test_derived_runs(store):
    ingest_paths(store, [str(INVOICE), str(FIXTURES / "lexkeep" / "runs.jsonl")])
    runs = dict(store.con.execute("SELECT id, status FROM runs").fetchall())
    # m2 and m5 were answered; m7 is the file's last turn without an answer.
    assert runs["m2/run"] == "completed"
    assert runs["m5/run"] == "completed"
    assert runs["m7/run"] == "running"
    # Explicit run records are kept as recorded, never derived.
    assert runs["r1"] == "completed" and runs["r2"] == "clarify_pending"
    assert "rm1/run" not in runs
    run_of = dict(store.con.execute("SELECT id, run_id FROM messages").fetchall())
    assert run_of["m1"] is None  # before the first user message
    assert run_of["m3"] == run_of["m4"] == "m2/run"


def test_unanswered_turn_before_the_last_is_failed(store, tmp_path):
    path = tmp_path / "t.jsonl"
    path.write_text(
        lexkeep_line("message", id="u1", conversation_id="c", role="user", text="first")
        + lexkeep_line("message", id="u2", conversation_id="c", role="user", text="second")
        + lexkeep_line("message", id="a2", conversation_id="c", role="assistant", text="")
    )
    ingest_paths(store, [str(path)])
    runs = dict(store.con.execute("SELECT id, status FROM runs").fetchall())
    # u2's answer is empty, so u2 is still running (last turn); u1 got no answer at all.
    assert runs == {"u1/run": "failed", "u2/run": "running"}


def test_same_file_twice_adds_nothing(store):
    ingest_paths(store, [str(INVOICE)])
    before = snapshot(store)
    [again] = ingest_paths(store, [str(INVOICE)])
    assert again.status == "unchanged"
    assert snapshot(store) == before


def test_grown_file_adds_only_new_lines_and_updates_run_status(store, tmp_path):
    path = tmp_path / "live.jsonl"
    lines = INVOICE.read_text().splitlines(keepends=True)
    path.write_text("".join(lines))
    ingest_paths(store, [str(path)])
    assert dict(store.con.execute("SELECT id, status FROM runs").fetchall())["m7/run"] == "running"
    with path.open("a") as fh:
        fh.write(
            lexkeep_line(
                "message", id="m8", conversation_id="c-inv", role="assistant", text="Still pending."
            )
        )
        fh.write(
            lexkeep_line(
                "tool_call", id="call_9", conversation_id="c-inv", name="status", arguments="{}"
            )
        )
    [got] = ingest_paths(store, [str(path)])
    assert (got.status, got.messages, got.tool_calls) == ("appended", 1, 1)
    assert count(store, "messages") == 8
    pos = dict(store.con.execute("SELECT id, position FROM messages").fetchall())
    assert pos["m8"] == 13  # after the old max_position 12
    assert (
        store.con.execute("SELECT position FROM tool_calls WHERE call_id='call_9'").fetchone()[0]
        == 14
    )
    assert store.con.execute("SELECT max_position FROM conversations").fetchone()[0] == 14
    runs = dict(store.con.execute("SELECT id, status FROM runs").fetchall())
    assert runs["m7/run"] == "completed"  # the turn completed after the append
    assert store.con.execute("SELECT run_id FROM messages WHERE id='m8'").fetchone()[0] == "m7/run"
    assert count(store, "ingest_runs") == 2


def test_truncated_last_line_is_reported_and_read_later(store, tmp_path):
    path = tmp_path / "live.jsonl"
    good = lexkeep_line(
        "message", id="m1", conversation_id="c", role="user", text="Order ORD_88412"
    )
    partial = lexkeep_line(
        "message", id="m2", conversation_id="c", role="assistant", text="Found it"
    )
    path.write_text(good + partial[:25])  # the writer is in the middle of line 2
    [got] = ingest_paths(store, [str(path)])
    assert got.truncated_last_line and got.status == "ingested"
    assert got.messages == 1 and got.skipped == {"truncated_last_line": 1}
    assert count(store, "ingest_errors") == 0  # not corruption
    assert store.con.execute("SELECT lines_consumed FROM ingest_runs").fetchone()[0] == 1
    path.write_text(good + partial)
    [later] = ingest_paths(store, [str(path)])
    assert (later.status, later.messages, later.truncated_last_line) == ("appended", 1, False)
    assert dict(store.con.execute("SELECT id, status FROM runs").fetchall()) == {
        "m1/run": "completed"
    }


def test_truncated_last_line_message_from_iter_json_lines(tmp_path):
    path = tmp_path / "t.jsonl"
    path.write_bytes(b'{"a": 1}\n{"b": ')
    items = list(iter_json_lines(path))
    assert isinstance(items[0], JsonLine) and items[0].value == {"a": 1}
    assert isinstance(items[1], Skipped) and items[1].detail == TRUNCATED_LAST_LINE
    assert not items[1].fatal


def test_bad_line_rejects_whole_file_and_writes_nothing(store, tmp_path):
    ingest_paths(store, [str(FIXTURES / "lexkeep" / "runs.jsonl")])
    before = snapshot(store)
    bad = tmp_path / "bad.jsonl"
    lines = INVOICE.read_text().splitlines(keepends=True)
    lines[4] = '{"type":"message", "id": oops}\n'
    bad.write_text("".join(lines))
    with pytest.raises(InputError) as info:
        ingest_paths(store, [str(bad)])
    err = info.value
    assert (err.path, err.line) == (str(bad), 5)
    assert err.col is not None and "invalid JSON" in err.message
    assert "skip_invalid=True" in err.hint
    assert snapshot(store) == before


@pytest.mark.parametrize(
    ("line", "reason"),
    [
        (b'{"type":"message","conversation_id":"c","role":"user","text":"x"}\n', "missing_field"),
        (
            b'{"type":"message","id":"m","conversation_id":"c","role":"user","text":"\xff\xfe"}\n',
            "invalid_utf8",
        ),
        (b"[1, 2]\n", "not_an_object"),
        (b'{"type":"tool_call","id":["t"],"conversation_id":"c","name":"n"}\n', "invalid_field"),
    ],
)
def test_skip_invalid_records_every_skipped_line(store, tmp_path, line, reason):
    path = tmp_path / "mixed.jsonl"
    ok = lexkeep_line("message", id="m1", conversation_id="c", role="user", text="hello").encode()
    path.write_bytes(ok + line + ok.replace(b'"m1"', b'"m2"'))
    with pytest.raises(InputError) as info:
        ingest_paths(store, [str(path)])
    assert info.value.line == 2
    assert count(store, "messages") == 0
    [got] = ingest_paths(store, [str(path)], skip_invalid=True)
    assert got.messages == 2 and got.skipped == {reason: 1}
    rows = store.con.execute("SELECT path, line, reason FROM ingest_errors").fetchall()
    assert rows == [(str(path), 2, reason)]


def test_a_byte_order_mark_before_the_first_line_is_not_part_of_it(store, tmp_path):
    """Windows tools write a UTF-8 BOM; it was reported as invalid UTF-8 at 1:1, and
    --skip-invalid dropped the file's first record."""
    body = INVOICE.read_bytes()
    lines = body.splitlines(keepends=True)
    path = tmp_path / "bom.jsonl"
    path.write_bytes(b"\xef\xbb\xbf" + b"".join(lines[:5]))
    [got] = ingest_paths(store, [str(path)])
    assert (got.status, got.skipped) == ("ingested", {})
    assert store.con.execute("SELECT min(source_line) FROM conversations").fetchone() == (1,)
    path.write_bytes(b"\xef\xbb\xbf" + body)  # the file grows: only the new lines are read
    [grown] = ingest_paths(store, [str(path)])
    assert grown.status == "appended"
    with Store.open(tmp_path / "plain.duckdb") as plain:
        ingest_paths(plain, [str(INVOICE)])
        expected = {t: rows for t, rows in snapshot(plain).items() if t != "ingest_runs"}
    got_rows = {t: rows for t, rows in snapshot(store).items() if t in expected}
    assert repr(got_rows).replace(str(path), "F") == repr(expected).replace(str(INVOICE), "F")


@pytest.mark.parametrize("document", [False, True])
def test_invalid_utf8_names_the_line_and_column_of_the_bad_byte(store, tmp_path, document):
    """Not column 1: the character column of the first byte that is not UTF-8."""
    good = '{"type": "message", "id": "m1", "conversation_id": "c", "role": "user", "text": "a"}'
    bad = '{"type": "message", "id": "m2", "conversation_id": "c", "role": "user",'
    text = ' "text": "café @ ok"}'
    if document:  # a pretty-printed JSON array: the bad byte on the document's 4th line
        body = f"[\n  {good},\n  {bad}\n {text}\n]\n"
        where = (4, 1 + text.index("@") + 1)
        path = tmp_path / "doc.json"
    else:
        body = f"{good}\n{bad}{text}\n"
        where = (2, len(bad) + text.index("@") + 1)
        path = tmp_path / "lines.jsonl"
    path.write_bytes(body.encode().replace(b"@", b"\xc3("))
    with pytest.raises(InputError) as info:
        ingest_paths(store, [str(path)])
    err = info.value
    assert (err.line, err.col) == where
    assert "invalid UTF-8 (byte 0xc3)" in err.message
    assert count(store, "messages") == 0


def test_crash_between_two_writes_leaves_store_as_before(store, tmp_path, monkeypatch):
    ingest_paths(store, [str(FIXTURES / "openai" / "chats.jsonl")])
    before = snapshot(store)
    real = store_module.bulk_insert
    calls = []

    def failing(con, table, *args, **kwargs):
        calls.append(table)
        if len(calls) == 2:  # messages were written; now the tool_calls write dies
            raise OSError("disk full (injected)")
        return real(con, table, *args, **kwargs)

    monkeypatch.setattr(store_module, "bulk_insert", failing)
    with pytest.raises(OSError, match="injected"):
        ingest_paths(store, [str(INVOICE)])
    assert calls[:2] == ["messages", "tool_calls"]
    monkeypatch.setattr(store_module, "bulk_insert", real)
    assert snapshot(store) == before
    # And the file ingests cleanly afterwards: nothing half-written blocks it.
    [got] = ingest_paths(store, [str(INVOICE)])
    assert got.status == "ingested" and got.messages == 7


def test_chunked_staging_gives_same_result(store, tmp_path, monkeypatch):
    import lexkeep.core.ingest as ingest_module

    monkeypatch.setattr(ingest_module, "CHUNK_ROWS", 2)
    ingest_paths(store, [str(INVOICE)])
    with Store.open(tmp_path / "other.duckdb") as other:
        monkeypatch.setattr(ingest_module, "CHUNK_ROWS", 50_000)
        ingest_paths(other, [str(INVOICE)])
        assert snapshot(store) == snapshot(other)


def test_gz_folder_glob_and_unrecognised_files(store, tmp_path):
    folder = tmp_path / "traces" / "nested"
    folder.mkdir(parents=True)
    with gzip.open(folder / "invoice.jsonl.gz", "wb") as fh:
        fh.write(INVOICE.read_bytes())
    shutil.copy(FIXTURES / "openai" / "results.json", tmp_path / "traces" / "results.json")
    (tmp_path / "traces" / "tools.json").write_text('[{"name": "f", "parameters": {}}]\n')
    (tmp_path / "traces" / "notes.txt").write_text("not a trace\n")
    got = ingest_paths(store, [str(tmp_path / "traces")])
    status = {Path(c.path).name: (c.status, c.format) for c in got}
    assert status == {
        "invoice.jsonl.gz": ("ingested", "lexkeep"),
        "results.json": ("ingested", "openai"),
        "tools.json": ("unrecognised", ""),
    }
    # A file named explicitly that is not a trace is an error, not a silent skip.
    with pytest.raises(UnrecognisedFormat) as info:
        ingest_paths(store, [str(tmp_path / "traces" / "tools.json")])
    assert "format=" in info.value.hint
    # Globs expand; everything there is already stored.
    again = ingest_paths(store, [str(tmp_path / "traces" / "**" / "*.gz")])
    assert [c.status for c in again] == ["unchanged"]
    with pytest.raises(InputError, match="no such file"):
        ingest_paths(store, [str(tmp_path / "absent-*.jsonl")])


def test_forced_format(store, tmp_path):
    with pytest.raises(InputError, match="unknown format"):
        ingest_paths(store, [str(INVOICE)], format="yaml")
    # Forcing OpenAI on a lexkeep file: lines with `role` read as bare chat messages, the
    # other record types are unknown to the OpenAI reader and only counted.
    [got] = ingest_paths(store, [str(INVOICE)], format="openai")
    assert (got.format, got.messages, got.tool_calls) == ("openai", 7, 0)
    assert got.skipped == {"unknown_type": 7}


def test_a_forced_format_that_reads_nothing_is_refused_and_not_recorded(store):
    """Codex read a lexkeep file as one conversation named after it and nothing else; it was
    recorded as ingested, and every later ingest, in any format, called it unchanged."""
    with pytest.raises(InputError, match=r"no line is a codex record \(.*unknown_type=7"):
        ingest_paths(store, [str(INVOICE)], format="codex")
    assert count(store, "ingest_runs") == 0 and count(store, "conversations") == 0
    [got] = ingest_paths(store, [str(INVOICE)])
    assert (got.format, got.status, got.messages) == ("lexkeep", "ingested", 7)


def test_a_file_forced_into_another_format_than_before_is_refused(store):
    ingest_paths(store, [str(INVOICE)], format="openai")
    before = snapshot(store)
    with pytest.raises(InputError, match="was ingested into this store as openai, not lexkeep"):
        ingest_paths(store, [str(INVOICE)], format="lexkeep")
    assert snapshot(store) == before
    [again] = ingest_paths(store, [str(INVOICE)])  # not forced: the file as it was stored
    assert (again.status, again.format) == ("unchanged", "openai")


def test_json_array_document_values_start_lines(tmp_path):
    path = FIXTURES / "openai" / "results.json"
    source = JsonSource(path)
    items = list(source)
    assert [i.line for i in items] == [2, 43]  # the lines of the two elements' '{'
    assert items[1].value["task_id"] == 4
    assert source.document and source.bytes_consumed == path.stat().st_size
    # A document cut short is reported as possibly still being written.
    cut = tmp_path / "cut.json"
    cut.write_bytes(path.read_bytes()[:300])
    last = list(iter_json_lines(cut))[-1]
    assert isinstance(last, Skipped) and last.reason == "truncated_document" and last.fatal


def test_position_continues_across_files_of_one_conversation(store, tmp_path):
    a, b = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    a.write_text(lexkeep_line("message", id="x1", conversation_id="c", role="user", text="one"))
    b.write_text(
        lexkeep_line("message", id="x2", conversation_id="c", role="assistant", text="two")
    )
    ingest_paths(store, [str(a), str(b)])
    assert store.con.execute("SELECT id, position FROM messages ORDER BY 2").fetchall() == [
        ("x1", 0),
        ("x2", 1),
    ]


def test_a_file_cut_short_and_grown_again_keeps_positions_without_holes(store, tmp_path):
    """docs/formats.md: new records get max_position + 1, ... Records read again that the
    store holds already are skipped, and took positions all the same: after a file was cut
    short and grew again, the new messages came after a hole as wide as the copies."""
    path = tmp_path / "live.jsonl"

    def msg(n: int) -> str:
        role = "user" if n % 2 else "assistant"
        return lexkeep_line("message", id=f"m{n}", conversation_id="c", role=role, text=f"t{n}")

    path.write_text("".join(msg(n) for n in (1, 2, 3, 4)))
    ingest_paths(store, [str(path)])
    path.write_text("".join(msg(n) for n in (1, 2)))  # rewritten shorter: read again whole
    ingest_paths(store, [str(path)])
    with path.open("a") as out:  # then it grows: m3 and m4 again, and two new messages
        out.write("".join(msg(n) for n in (3, 4, 5, 6)))
    [got] = ingest_paths(store, [str(path)])
    assert (got.status, got.messages, got.messages_added) == ("appended", 4, 2)
    con = store.con
    assert con.execute("SELECT id, position FROM messages ORDER BY position").fetchall() == [
        (f"m{n}", n - 1) for n in range(1, 7)
    ]
    assert con.execute("SELECT id, position FROM runs ORDER BY position").fetchall() == [
        ("m1/run", 0),
        ("m3/run", 2),
        ("m5/run", 4),
    ]
    assert position_holes(store) == []


def test_a_run_without_messages_stays_after_the_last_position_when_copies_are_left_out(
    store, tmp_path
):
    a, b = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    first = lexkeep_line("message", id="m1", conversation_id="c", role="user", text="hi")
    first += lexkeep_line("message", id="m2", conversation_id="c", role="assistant", text="ok")
    a.write_text(first)
    b.write_text(
        first
        + lexkeep_line("message", id="m3", conversation_id="c", role="user", text="more")
        + lexkeep_line("run", id="r9", conversation_id="c", status="completed")
    )
    ingest_paths(store, [str(a)])
    ingest_paths(store, [str(b)])
    runs = store.con.execute("SELECT id, position FROM runs ORDER BY id").fetchall()
    assert runs == [("m1/run", 0), ("m3/run", 2), ("r9", 3)]
    assert position_holes(store) == []


def test_bad_file_after_good_ones_keeps_the_good_ones(store, tmp_path):
    bad = tmp_path / "z-bad.jsonl"
    bad.write_text('{"type": "message", "id": "q", oops\n')
    shutil.copy(INVOICE, tmp_path / "a-good.jsonl")
    with pytest.raises(InputError) as info:
        ingest_paths(store, [str(tmp_path)])  # one group: a-good.jsonl then z-bad.jsonl
    assert info.value.path == str(bad)
    assert count(store, "messages") == 7
    assert [
        Path(p).name for (p,) in store.con.execute("SELECT path FROM ingest_runs").fetchall()
    ] == ["a-good.jsonl"]


def test_empty_file_is_not_an_error_and_is_read_once_it_has_lines(store, tmp_path):
    path = tmp_path / "session.jsonl"
    path.write_text("")  # a live session file that was just created
    [got] = ingest_paths(store, [str(path)])
    assert got.status == "empty" and count(store, "ingest_runs") == 0
    path.write_text(lexkeep_line("message", id="e1", conversation_id="c", role="user", text="hi"))
    [later] = ingest_paths(store, [str(path)])
    assert (later.status, later.messages) == ("ingested", 1)


def test_pretty_printed_objects_are_read_as_a_document(store, tmp_path):
    path = tmp_path / "pretty.json"
    path.write_text(
        '{\n  "id": "p1",\n  "messages": [\n'
        '    {"role": "user", "content": "Find ORD_88412"}\n  ]\n}\n'
        '{\n  "id": "p2",\n  "messages": [{"role": "user", "content": "and } { ["}]\n}\n'
    )
    items = list(iter_json_lines(path))
    assert [(i.line, i.value["id"]) for i in items] == [(1, "p1"), (7, "p2")]
    [got] = ingest_paths(store, [str(path)])
    assert (got.format, got.conversations, got.messages) == ("openai", 2, 2)


def test_a_one_object_document_reads_as_the_scanner_reads_it(tmp_path):
    """A document that is one object is parsed whole by orjson (a 5 MB one: 0.36 -> 0.06 s)
    and must give what the streaming scanner gives: values or the same skip, the start line,
    bytes, lines and sha256; anything orjson refuses goes through the scanner as before."""
    cases = {
        "plain": b'\n\n{\n  "id": "p1",\n  "messages": [{"content": "a } { [ \\" ,"}]\n}\n',
        "no final newline": b'{\n  "id": "p1"\n}',
        "cut": b'{\n  "id": "p1",\n  "messages": [\n',
        "two objects": b'{\n "id": "a"\n}\n{\n "id": "b"\n}\n',
        "bad": b'{\n  "id": "p1",,\n  "x": 1\n}\n',
        "bom": b'\xef\xbb\xbf{\n  "id": "p1"\n}\n',
    }
    for name, data in cases.items():
        path = tmp_path / f"{name.replace(' ', '_')}.json"
        path.write_bytes(data)
        whole = JsonSource(path)
        got = list(whole)
        assert whole.document, name
        scanned = JsonSource(path)
        with path.open("rb") as body:
            want = list(scanned._document(body, is_object=False))  # the scanner alone
        assert got == want, name
        assert (whole.bytes_consumed, whole.lines_consumed, whole.sha256) == (
            scanned.bytes_consumed,
            scanned.lines_consumed,
            scanned.sha256,
        ), name
    assert [i.line for i in list(JsonSource(tmp_path / "plain.json"))] == [3]


def test_source_lines_count_blank_lines(tmp_path):
    path = tmp_path / "gaps.jsonl"
    path.write_bytes(b'{"a": 1}\n\n   \n{"b": 2}\r\n')
    source = JsonSource(path)
    assert [i.line for i in source] == [1, 4]
    assert (source.lines_consumed, source.bytes_consumed) == (4, path.stat().st_size)


def test_truncated_document_is_read_again_whole_once_complete(store, tmp_path):
    full = (FIXTURES / "openai" / "results.json").read_bytes()
    path = tmp_path / "results.json"
    path.write_bytes(full[: full.index(b'"task_id": 4')])  # cut inside the second run
    with pytest.raises(InputError, match="still being written"):
        ingest_paths(store, [str(path)])
    # --skip-invalid: the values complete so far are stored, the rest waits for a later
    # ingest. Not an error: the document is not bad, only not written yet.
    [partial] = ingest_paths(store, [str(path)], skip_invalid=True)
    assert partial.conversations == 1 and partial.skipped == {}
    assert partial.truncated_document
    assert count(store, "ingest_errors") == 0
    path.write_bytes(full)
    [done] = ingest_paths(store, [str(path)])
    assert done.status == "appended" and not done.truncated_document
    assert count(store, "conversations") == 2 and count(store, "messages") == 5
    assert count(store, "ingest_errors") == 0


def test_a_truncated_document_on_standard_input_is_recorded_with_skip_invalid(
    store, tmp_path, monkeypatch
):
    """Standard input cannot be read again: its cut document is an error row, as its
    truncated last line is."""
    import io
    import sys

    full = (FIXTURES / "openai" / "results.json").read_bytes()
    cut = full[: full.index(b'"task_id": 4')]
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(cut)))
    [got] = ingest_paths(store, ["-"], skip_invalid=True)
    assert got.skipped == {"truncated_document": 1} and not got.truncated_document
    assert store.con.execute("SELECT path, reason FROM ingest_errors").fetchall() == [
        ("-", "truncated_document")
    ]


def _errors(store: Store) -> list[tuple]:
    return store.con.execute(
        "SELECT path, line, reason FROM ingest_errors ORDER BY path, line"
    ).fetchall()


def test_a_later_read_of_a_file_replaces_the_errors_recorded_for_the_lines_it_reads_again(
    store, tmp_path
):
    """Errors recorded by --skip-invalid for lines a later ingest reads again (a document
    is always read from its start) are replaced by what that read finds: stats and the
    audit count an error once, and not at all once the file no longer holds it."""
    full = (FIXTURES / "openai" / "results.json").read_bytes()
    second = full.rindex(b"{", 0, full.index(b'"task_id": 4'))
    bad = full[:second] + b"5,\n  " + full[second:]  # a value that is not an object
    bad_line = bad[:second].count(b"\n") + 1
    path = tmp_path / "results.json"
    stored = str(path.resolve())
    # Still being written, with a bad value: the bad value is an error, the cut is not.
    path.write_bytes(bad[: bad.index(b'"task_id": 4')])
    ingest_paths(store, [str(path)], skip_invalid=True)
    assert _errors(store) == [(stored, bad_line, "not_an_object")]
    # Complete now: read again from its start, the bad value is found again, once.
    path.write_bytes(bad)
    [done] = ingest_paths(store, [str(path)], skip_invalid=True)
    assert done.status == "appended"
    assert _errors(store) == [(stored, bad_line, "not_an_object")]
    # Rewritten without it: nothing is wrong with the file any more.
    path.write_bytes(full)
    [again] = ingest_paths(store, [str(path)], skip_invalid=True)
    assert again.status == "ingested" and again.skipped == {}
    assert _errors(store) == []
    assert count(store, "conversations") == 2


def test_an_append_keeps_the_errors_of_the_lines_read_before(store, tmp_path):
    """A grown JSONL file is read again from its start, but its old lines are not checked
    again: their errors stay."""
    path = tmp_path / "s.jsonl"
    line = lexkeep_line("message", id="m1", conversation_id="c", role="user", text="x")
    path.write_text(line + "{broken\n")
    ingest_paths(store, [str(path)], skip_invalid=True)
    path.write_text(line + "{broken\n" + line.replace("m1", "m2") + "{again\n")
    [got] = ingest_paths(store, [str(path)], skip_invalid=True)
    assert got.status == "appended"
    stored = str(path.resolve())
    assert _errors(store) == [(stored, 2, "invalid_json"), (stored, 4, "invalid_json")]


def test_a_failed_read_keeps_the_errors_of_the_read_before(store, tmp_path):
    """Errors are replaced in the transaction of the read that replaces them: a read that
    fails (no --skip-invalid) leaves them as they were."""
    path = tmp_path / "results.json"
    full = (FIXTURES / "openai" / "results.json").read_bytes()
    second = full.rindex(b"{", 0, full.index(b'"task_id": 4'))
    bad = full[:second] + b"5,\n  " + full[second:]  # a value that is not an object
    path.write_bytes(bad)
    ingest_paths(store, [str(path)], skip_invalid=True)
    before = _errors(store)
    path.write_bytes(bad.replace(b"5,", b"6,", 1))
    with pytest.raises(InputError):
        ingest_paths(store, [str(path)])
    assert _errors(store) == before and len(before) == 1


def test_input_size_counts_plain_files_and_gives_up_on_stdin_and_gz(tmp_path):
    from lexkeep.core.ingest import input_size

    (tmp_path / "a.jsonl").write_bytes(b"x" * 10)
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "b.jsonl").write_bytes(b"y" * 5)
    assert input_size([str(tmp_path)]) == 15
    assert input_size(["-"]) is None
    (tmp_path / "c.jsonl.gz").write_bytes(gzip.compress(b"z"))
    assert input_size([str(tmp_path)]) is None


def test_input_size_knows_gzip_by_its_first_bytes_as_reading_does(tmp_path: Path) -> None:
    """The progress bar's total is the bytes the ingest reports reading, whatever the names say:
    gzip named .jsonl has no known total (its decompressed bytes are read), and a plain file
    named .gz counts its size."""
    from lexkeep.core.ingest import input_size

    data = (SAMPLE_TRACES / "invoice_altered.jsonl").read_bytes()
    zipped = tmp_path / "zipped.jsonl"
    zipped.write_bytes(gzip.compress(data))
    assert input_size([str(zipped)]) is None
    plain = tmp_path / "plain.jsonl.gz"
    plain.write_bytes(data)
    assert input_size([str(plain)]) == len(data)
    heard: list[int] = []
    with Store.open(str(tmp_path / "s.duckdb")) as store:
        ingest_paths(store, [str(plain)], on_progress=heard.append)
    assert sum(heard) == input_size([str(plain)])


def test_progress_counts_an_unchanged_file_as_read(tmp_path: Path) -> None:
    with Store.open(str(tmp_path / "s.duckdb")) as store:
        first: list[int] = []
        ingest_paths(store, [str(INVOICE)], on_progress=first.append)
        again: list[int] = []
        counts = ingest_paths(store, [str(INVOICE)], on_progress=again.append)
    assert counts[0].status == "unchanged"
    size = INVOICE.stat().st_size
    assert sum(first) == size
    assert sum(again) == size  # the bar reaches its end instead of staying at 0


def test_a_group_of_files_records_one_ingest_run_each_and_maps_its_errors(store, tmp_path):
    """ingest_runs rows are written once per group: each file still gets its own run, the
    latest run of a path has the highest id, and skipped lines point at their file's run."""
    folder = tmp_path / "traces"
    folder.mkdir()
    for n in range(5):
        line = lexkeep_line("message", id=f"m{n}", conversation_id=f"c{n}", role="user", text="x")
        (folder / f"s{n}.jsonl").write_text(line)
    bad = folder / "s2.jsonl"
    bad.write_text(bad.read_text() + "{broken\n")
    got = ingest_paths(store, [str(folder), str(folder / "s4.jsonl")], skip_invalid=True)
    # the file named twice is read once: its second mention finds the first's run
    assert [c.status for c in got] == ["ingested"] * 5 + ["unchanged"]
    runs = store.con.execute("SELECT id, path FROM ingest_runs ORDER BY id").fetchall()
    assert [Path(p).name for _, p in runs] == [f"s{n}.jsonl" for n in range(5)]
    errors = store.con.execute(
        "SELECT r.path, e.line, e.reason FROM ingest_errors e"
        " JOIN ingest_runs r ON r.id = e.ingest_run_id"
    ).fetchall()
    assert errors == [(str(bad.resolve()), 2, "invalid_json")]
    (folder / "s0.jsonl").write_text((folder / "s0.jsonl").read_text() + "\n")  # grown
    [first, *rest] = ingest_paths(store, [str(folder)], skip_invalid=True)
    assert first.status == "appended" and {c.status for c in rest} == {"unchanged"}
    latest = store.con.execute("SELECT max(id) FROM ingest_runs WHERE path LIKE '%s0.jsonl'")
    assert latest.fetchone()[0] == 6


@pytest.mark.parametrize("read_ahead", [None, 0])
def test_each_file_counts_what_it_added_beside_what_it_read(
    store, tmp_path, monkeypatch, read_ahead
):
    """A resumed Claude Code session copies the earlier lines into a new file: its counts say
    how many of the records it read the store held already (also when read ahead)."""
    import re

    from conftest import SAMPLE_TRACES

    monkeypatch.setenv("LEXKEEP_READ_WORKERS", "2")  # read ahead in two workers, or not
    lines = (SAMPLE_TRACES / "claude_lost_path.jsonl").read_text().splitlines(keepends=True)
    first = tmp_path / "first.jsonl"
    first.write_text("".join(lines[:6]))
    # The resumed session: the six lines again, then the rest under uuids of its own.
    rest = [re.sub(r'"(uuid|parentUuid)":"([^"]+)"', r'"\1":"\2-r"', line) for line in lines[6:]]
    resumed = tmp_path / "resumed.jsonl"
    resumed.write_text("".join(lines[:6] + rest))
    other = tmp_path / "other.jsonl"
    shutil.copy(SAMPLE_TRACES / "codex_kept_verbatim.jsonl", other)
    paths = [str(first), str(resumed), str(other)]
    got = {c.path: c for c in ingest_paths(store, paths, read_ahead_min_bytes=read_ahead)}
    a, b, c = got[str(first)], got[str(resumed)], got[str(other)]
    assert (a.messages_added, a.tool_calls_added) == (a.messages, a.tool_calls)
    assert (c.messages_added, c.tool_calls_added) == (c.messages, c.tool_calls)
    assert 0 < b.messages_added < b.messages and b.tool_calls_added < b.tool_calls
    assert (b.messages - b.messages_added, b.tool_calls - b.tool_calls_added) == (
        a.messages,
        a.tool_calls,
    )  # exactly the copies
    stored = count(store, "messages", f"source_file = '{resumed}'")
    assert stored == b.messages_added
    assert count(store, "tool_calls", f"source_file = '{resumed}'") == b.tool_calls_added
    assert position_holes(store) == []  # the copies took no positions


def test_format_detection_reads_a_bounded_head_of_a_file_of_bad_lines(tmp_path):
    """A binary file is all bad 'lines': detection gives up after HEAD_ITEMS of them (it used
    to read the whole file, recounting its head at every line)."""
    from lexkeep.core.ingest import HEAD_ITEMS, detect_format

    path = tmp_path / "noise.jsonl"
    path.write_bytes(b"\xff not json\n" * (HEAD_ITEMS * 5))
    read = 0

    def counted():
        nonlocal read
        for item in JsonSource(path):
            read += 1
            yield item

    with pytest.raises(InputError) as info:
        detect_format(counted())
    assert read == HEAD_ITEMS
    assert (info.value.line, info.value.col) == (1, 1) and "invalid UTF-8" in info.value.message


def test_a_duckdb_store_given_as_a_trace_is_named_as_such(store, tmp_path):
    db = tmp_path / "other.duckdb"
    Store.open(db).close()
    with pytest.raises(InputError) as info:
        ingest_paths(store, [str(db)])
    assert info.value.message == "a DuckDB database, not a trace file"
    assert info.value.hint.startswith("a lexkeep store is opened with Store.open(path)")


def _reuse_lines(what: str) -> tuple[str, str]:
    """Two conversations' lines, the second reusing the first's id of `what`."""
    first = (
        lexkeep_line("run", id="r1", conversation_id="c1", status="completed")
        + lexkeep_line("message", id="m1", conversation_id="c1", role="user", text="ORD_88412")
        + lexkeep_line("compaction", id="b1", conversation_id="c1", summary="s")
        + lexkeep_line("tool_call", id="t1", conversation_id="c1", name="get", arguments="{}")
    )
    ids = {"message": "m2", "compaction": "b2", "run": "r2"}
    ids[what] = {"message": "m1", "compaction": "b1", "run": "r1"}[what]
    second = (
        lexkeep_line("run", id=ids["run"], conversation_id="c2", status="failed")
        + lexkeep_line(
            "message", id=ids["message"], conversation_id="c2", role="user", text="ORD_99999"
        )
        + lexkeep_line("compaction", id=ids["compaction"], conversation_id="c2", summary="s")
        + lexkeep_line("tool_call", id="t1", conversation_id="c2", name="get", arguments="{}")
    )
    return first, second


@pytest.mark.parametrize("what", ["message", "compaction", "run"])
@pytest.mark.parametrize("layout", ["one file", "two files", "second ingest"])
def test_an_id_reused_by_another_conversation_is_refused_naming_both_places(
    store, tmp_path, what, layout
):
    """A second conversation's record under a taken id was left out as "already stored" (or,
    for a run, changed the first one's status): its identifiers were never audited."""
    first, second = _reuse_lines(what)
    line = {"run": 1, "message": 2, "compaction": 3}[what]
    a, b = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    if layout == "one file":
        a.write_text(first + second)
        paths, bad, bad_line = [[str(a)]], a, 4 + line
    else:
        a.write_text(first)
        b.write_text(second)
        bad, bad_line = b, line
        paths = [[str(a), str(b)]] if layout == "two files" else [[str(a)], [str(b)]]
    for batch in paths[:-1]:
        ingest_paths(store, batch)
    before = snapshot(store)
    with pytest.raises(InputError) as info:
        ingest_paths(store, paths[-1])
    err = info.value
    assert (err.path, err.line) == (str(bad), bad_line)
    taken = {"message": "m1", "compaction": "b1", "run": "r1"}[what]
    assert f"{what} id '{taken}' is already used by conversation 'c1' ({a}:{line})" in str(err)
    assert "unique in the whole store" in err.hint
    if layout == "two files":  # one call: the file before the refused one is kept
        with Store.open(tmp_path / "ref.duckdb") as ref:
            ingest_paths(ref, [str(a)])
            before = snapshot(ref)
    assert snapshot(store) == before  # nothing of the refused file was written
    assert count(store, "runs", "id = 'r1' AND status = 'completed'") == (layout != "one file")


def test_records_read_again_under_their_own_conversation_are_not_refused(store, tmp_path):
    """The same records under another file name (a copy, a resumed session) stay duplicates."""
    first, _ = _reuse_lines("message")
    a, b = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    a.write_text(first)
    b.write_text(first + lexkeep_line("message", id="m9", conversation_id="c1", role="user"))
    ingest_paths(store, [str(a)])
    [got] = ingest_paths(store, [str(b)])
    assert (got.messages, got.messages_added) == (2, 1)
    assert count(store, "messages") == 2


@pytest.mark.parametrize("fast_min", [0, None])
def test_a_copy_under_another_name_counts_its_boundaries_as_already_stored(
    store, tmp_path, fast_min
):
    copy = tmp_path / "copy.jsonl"
    shutil.copy(INVOICE, copy)
    ingest_paths(store, [str(INVOICE)], fast_min_bytes=fast_min)
    [got] = ingest_paths(store, [str(copy)], fast_min_bytes=fast_min)
    assert (got.boundaries, got.boundaries_added) == (1, 0)
    assert (got.messages, got.messages_added) == (7, 0)


@pytest.mark.parametrize("order", ["run first", "message first", "run in the store"])
def test_a_message_naming_another_conversations_run_has_no_run_link(store, tmp_path, order):
    """docs/compaction.md: such a message has no valid run link. It was refused as a reused
    run id, or (before that) its derived status overwrote the other conversation's run."""
    run = lexkeep_line("run", id="other/r8", conversation_id="other", status="completed")
    other = lexkeep_line("message", id="o/u1", conversation_id="other", role="user", text="hi")
    message = lexkeep_line(
        "message", id="pt/u8", conversation_id="pt", role="user", text="q8", run_id="other/r8"
    )
    path = tmp_path / "t.jsonl"
    if order == "run in the store":
        first = tmp_path / "first.jsonl"
        first.write_text(run + other)
        ingest_paths(store, [str(first)])
        path.write_text(message)
    else:
        path.write_text(run + other + message if order == "run first" else message + run + other)
    ingest_paths(store, [str(path)])
    runs = store.con.execute("SELECT id, conversation_id, status FROM runs").fetchall()
    assert runs == [("other/r8", "other", "completed")]
    assert store.con.execute("SELECT run_id FROM messages WHERE id = 'pt/u8'").fetchone() == (
        "other/r8",
    )


def _two_days(tmp_path: Path) -> tuple[Path, Path, Path]:
    """Day 1 and day 2 of an export whose ids restart in every file (conversation c1 says m1,
    b1 both days, with other content), and a true copy of day 1."""
    day1 = lexkeep_line(
        "message", id="m1", conversation_id="c1", role="user", text="refund ORD_88412"
    ) + lexkeep_line("compaction", id="b1", conversation_id="c1", summary="day one")
    day2 = lexkeep_line(
        "message", id="m1", conversation_id="c1", role="user", text="and invoice INV-2025-08-44719"
    ) + lexkeep_line("compaction", id="b1", conversation_id="c1", summary="day two")
    a, b, copy = tmp_path / "day1.jsonl", tmp_path / "day2.jsonl", tmp_path / "copy.jsonl"
    a.write_text(day1)
    b.write_text(day2)
    copy.write_text(day1)
    return a, b, copy


@pytest.mark.parametrize("layout", ["two files", "second ingest", "lean"])
def test_a_record_whose_conversation_holds_its_id_with_other_content_is_counted(tmp_path, layout):
    """An export whose ids restart in every file (day 2 of conversation c1 again says m1, b1):
    the second file's records were left out as "already stored" without a word. The first
    stays; the file's summary counts the rest and names the first; a true copy counts nothing."""
    a, b, copy = _two_days(tmp_path)
    with Store.open(None) as store:
        lean = layout == "lean"
        if layout == "second ingest":
            ingest_paths(store, [str(a)])
            counts = ingest_paths(store, [str(b), str(copy)])
        else:
            counts = ingest_paths(store, [str(a), str(b), str(copy)], lean=lean)[1:]
        texts = [t for (t,) in store.con.execute("SELECT text FROM messages").fetchall()]
    assert texts == ["refund ORD_88412"]  # the first stays
    left_out, first = counts[0].conflicts
    assert left_out == 2
    assert first == f"message 'm1' at {b}:1, stored from {a}:1"
    assert counts[1].conflicts == (0, None)  # the same records read again


def _left_out(store: Store) -> list[tuple]:
    return store.con.execute(
        "SELECT path, line, col, detail FROM ingest_errors WHERE reason = 'id_conflict'"
        " ORDER BY path, line"
    ).fetchall()


@pytest.mark.parametrize("layout", ["two files", "second ingest", "lean", "on disk"])
def test_records_left_out_for_an_id_their_conversation_holds_are_recorded(tmp_path, layout):
    """Day 2 of an export restarts its ids: each record left out is an ingest_errors row
    (`id_conflict`, its file and line, which record), written with the rest of the ingest, so
    `stats` and `audit --db` can still say what the store does not hold; a true copy adds
    none, and reading the files again adds none either."""
    a, b, copy = _two_days(tmp_path)
    day2 = b.read_text()
    where = tmp_path / "s.duckdb" if layout == "on disk" else None
    with Store.open(where) as store:
        if layout == "second ingest":
            ingest_paths(store, [str(a)])
            ingest_paths(store, [str(b), str(copy)])
        else:
            ingest_paths(store, [str(a), str(b), str(copy)], lean=layout == "lean")
        name = str(b) if where is None else str(b.absolute())
        expected = [(name, 1, None, "message 'm1'"), (name, 2, None, "compaction 'b1'")]
        assert _left_out(store) == expected
        # each row belongs to the ingest of its file
        assert store.con.execute(
            "SELECT DISTINCT r.path FROM ingest_errors e JOIN ingest_runs r"
            " ON r.id = e.ingest_run_id"
        ).fetchall() == [(str(b.resolve()),)]
        if layout == "lean":
            return
        # read again: unchanged, grown (only its new lines are checked), rewritten (read whole)
        ingest_paths(store, [str(a), str(b), str(copy)])
        assert _left_out(store) == expected
        b.write_text(
            b.read_text() + lexkeep_line("message", id="m9", conversation_id="c1", role="user")
        )
        [grown] = ingest_paths(store, [str(b)])
        assert grown.status == "appended" and _left_out(store) == expected
        b.write_text(day2.replace("day two", "day 2"))
        [rewritten] = ingest_paths(store, [str(b)])
        assert rewritten.status == "ingested" and _left_out(store) == expected


def test_records_left_out_are_not_recorded_when_the_ingest_fails(tmp_path):
    """The rows are part of the ingest's transaction: a file that fails to be written leaves
    none behind."""
    a, b = tmp_path / "day1.jsonl", tmp_path / "day2.jsonl"
    a.write_text(lexkeep_line("message", id="m1", conversation_id="c1", role="user", text="x"))
    b.write_text(
        lexkeep_line("message", id="m1", conversation_id="c1", role="user", text="y") + "{broken\n"
    )
    with Store.open(None) as store:
        ingest_paths(store, [str(a)])
        with pytest.raises(InputError):
            ingest_paths(store, [str(b)])
        assert _left_out(store) == []
        ingest_paths(store, [str(b)], skip_invalid=True)
        assert _left_out(store) == [(str(b), 1, None, "message 'm1'")]


@pytest.mark.parametrize("layout", ["two files", "second ingest", "lean", "on disk"])
def test_tool_calls_and_results_left_out_for_their_id_are_recorded(tmp_path, layout):
    """A tool call or result whose conversation already holds its call id with other
    arguments or output (day 2 of an export whose call ids restart) was left out without a
    word, though tool arguments are what the audit checks. Each is now counted on the file's
    summary and recorded as an `id_conflict` row; a true copy (the same file under another
    name, read again) records nothing. A lean store (an audit's) holds no tool output, so
    only its calls are checked."""
    day1 = lexkeep_line(
        "tool_call", id="t1", conversation_id="c1", name="f", arguments={"n": 1}
    ) + lexkeep_line("tool_result", call_id="t1", conversation_id="c1", text="order ORD_1")
    day2 = lexkeep_line(
        "tool_call", id="t1", conversation_id="c1", name="f", arguments={"n": 2}
    ) + lexkeep_line("tool_result", call_id="t1", conversation_id="c1", text="order ORD_2")
    a, b, copy = tmp_path / "day1.jsonl", tmp_path / "day2.jsonl", tmp_path / "copy.jsonl"
    a.write_text(day1)
    b.write_text(day2)
    copy.write_text(day1)
    where = tmp_path / "s.duckdb" if layout == "on disk" else None
    lean = layout == "lean"
    with Store.open(where) as store:
        if layout == "second ingest":
            ingest_paths(store, [str(a)])
            counts = ingest_paths(store, [str(b), str(copy)])
        else:
            counts = ingest_paths(store, [str(a), str(b), str(copy)], lean=lean)[1:]
        name = str(b) if where is None else str(b.absolute())
        expected = [(name, 1, None, "tool_call 't1' in conversation 'c1'")]
        if not lean:
            expected.append((name, 2, None, "tool_result 't1' in conversation 'c1'"))
        assert _left_out(store) == expected
        assert store.con.execute("SELECT arguments_raw FROM tool_calls").fetchall() == [
            ('{"n":1}',)
        ]
        assert counts[0].conflicts == (
            len(expected),
            f"tool_call 't1' in conversation 'c1' at {b}:1, stored from {a}:1",
        )
        assert counts[1].conflicts == (0, None)  # the same records read again
        if lean:
            return
        # read again: unchanged, then grown (only its new lines are checked)
        ingest_paths(store, [str(a), str(b), str(copy)])
        assert _left_out(store) == expected
        b.write_text(day2 + lexkeep_line("tool_call", id="t1", conversation_id="c1", name="g"))
        [grown] = ingest_paths(store, [str(b)])
        assert grown.status == "appended"
        assert _left_out(store) == [*expected, (name, 3, None, expected[0][3])]


def test_the_first_record_left_out_is_the_first_in_the_file(tmp_path):
    """The summary names the file's first record left out, whatever its kind: a compaction
    before a message, a tool call before both."""

    def day(n: int) -> str:
        return (
            lexkeep_line("tool_call", id="t1", conversation_id="c1", name="f", arguments={"n": n})
            + lexkeep_line("compaction", id="b1", conversation_id="c1", summary=f"day {n}")
            + lexkeep_line("message", id="m1", conversation_id="c1", role="user", text=f"{n}")
        )

    a, b = tmp_path / "day1.jsonl", tmp_path / "day2.jsonl"
    a.write_text(day(1))
    b.write_text(day(2))
    with Store.open(None) as store:
        counts = ingest_paths(store, [str(a), str(b)])
    assert counts[1].conflicts == (
        3,
        f"tool_call 't1' in conversation 'c1' at {b}:1, stored from {a}:1",
    )


@pytest.mark.parametrize(
    "now",
    [
        b"",  # emptied
        b"\n  \n",  # blank
        b'{"name": "not a trace"}\n',  # rewritten as something else (found by a walk)
        b'{"type": "message", "id": "m1", "conv',  # its first line still being written
    ],
)
def test_a_file_that_holds_nothing_to_read_now_loses_the_errors_of_its_old_content(
    store, tmp_path, now
):
    """A file ingested with --skip-invalid, later emptied or rewritten as what is no trace:
    the errors recorded for its old lines stayed (no run was recorded, so none were
    replaced), and stats and audit --db kept reporting them. They now go; and once the old
    content comes back it is read again whole, so they come back with it, once."""
    folder = tmp_path / "traces"
    folder.mkdir()
    path = folder / "s.jsonl"
    old = lexkeep_line("message", id="m1", conversation_id="c", role="user", text="x") + (
        "{broken\n"
    )
    path.write_text(old)
    ingest_paths(store, [str(folder)], skip_invalid=True)
    stored = str(path.resolve())
    assert _errors(store) == [(stored, 2, "invalid_json")]
    path.write_bytes(now)
    [got] = ingest_paths(store, [str(folder)], skip_invalid=True)
    assert got.status in ("empty", "unrecognised")
    assert _errors(store) == []
    [again] = ingest_paths(store, [str(folder)], skip_invalid=True)  # nothing piles up
    assert again.status in ("empty", "unrecognised") and _errors(store) == []
    path.write_text(old)
    [back] = ingest_paths(store, [str(folder)], skip_invalid=True)
    assert back.status != "unchanged" and back.messages == 1
    assert _errors(store) == [(stored, 2, "invalid_json")]
    assert count(store, "messages") == 1


def test_errors_of_an_emptied_file_go_with_its_ingest_not_before(store, tmp_path):
    """The errors go in the transaction of the ingest that finds the file empty: an ingest
    that stops at a bad file before it leaves them; one that stops after it keeps its files
    before the bad one, so they go."""
    emptied, bad = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    line = lexkeep_line("message", id="m1", conversation_id="c", role="user", text="x")
    emptied.write_text(line + "{broken\n")
    ingest_paths(store, [str(emptied)], skip_invalid=True)
    before = _errors(store)
    assert len(before) == 1
    emptied.write_text("")
    bad.write_text("{broken\n")
    with pytest.raises(InputError):
        ingest_paths(store, [str(bad), str(emptied)])
    assert _errors(store) == before
    with pytest.raises(InputError):
        ingest_paths(store, [str(emptied), str(bad)])
    assert _errors(store) == []


def test_a_document_rewritten_and_cut_in_its_first_value_loses_its_old_errors(store, tmp_path):
    """A results file rewritten from its start by its writer: while its first value is being
    written the errors of the document it replaced no longer hold; the whole document read
    again has them again."""
    full = (FIXTURES / "openai" / "results.json").read_bytes()
    second = full.rindex(b"{", 0, full.index(b'"task_id": 4'))
    bad = full[:second] + b"5,\n  " + full[second:]  # a value that is not an object
    path = tmp_path / "results.json"
    path.write_bytes(bad)
    ingest_paths(store, [str(path)], skip_invalid=True)
    before = _errors(store)
    assert [reason for *_, reason in before] == ["not_an_object"]
    path.write_bytes(bad[: bad.index(b'"task_id": 3') + 5])  # inside the first value
    [got] = ingest_paths(store, [str(path)], skip_invalid=True)
    assert got.status == "empty" and got.truncated_document
    assert _errors(store) == []
    path.write_bytes(bad)
    [done] = ingest_paths(store, [str(path)], skip_invalid=True)
    assert done.status != "unchanged" and _errors(store) == before


def test_files_are_read_by_what_they_hold_not_by_their_names_case(store, tmp_path):
    """A folder exported on a case-insensitive system (`A.JSONL`, `b.jsonl.GZ`) is walked like
    any other, and a plain file renamed `*.gz` is read as the plain file it is."""
    folder = tmp_path / "traces"
    folder.mkdir()
    (folder / "A.JSONL").write_bytes(INVOICE.read_bytes())
    (folder / "b.jsonl.GZ").write_bytes(gzip.compress(INVOICE.read_bytes()))
    got = ingest_paths(store, [str(folder)])
    assert [(Path(c.path).name, c.status) for c in got] == [
        ("A.JSONL", "ingested"),
        ("b.jsonl.GZ", "ingested"),
    ]
    renamed = tmp_path / "plain.jsonl.gz"
    renamed.write_bytes(INVOICE.read_bytes())
    with Store.open(tmp_path / "other.duckdb") as other:
        [counts] = ingest_paths(other, [str(renamed)])
        assert (counts.status, counts.messages) == ("ingested", 7)


@pytest.mark.parametrize("fmt", ["claude", "codex"])
@pytest.mark.parametrize("lean", [False, True])
def test_a_call_id_repeated_in_one_file_with_other_input_is_an_id_conflict(tmp_path, fmt, lean):
    """A Claude Code session or Codex rollout that repeats a tool call's id with other input
    lost the repeat as a quiet `duplicate`, though tool arguments are what the audit checks.
    It is now left out as an `id_conflict` (counted, named, recorded), as the same call id
    with other arguments is across files; a repeat with the same input stays quiet."""
    path, conv, name = repeated_call_file(tmp_path, fmt)
    with Store.open(None) as store:
        [counts] = ingest_paths(store, [str(path)], lean=lean)
        detail = f"tool_call 'call_1' in conversation '{conv}'"
        assert _left_out(store) == [(str(path), 3, None, detail)]
        assert counts.conflicts == (1, f"{detail} at {path}:3, stored from {path}:2")
        assert counts.skipped.get("duplicate") == 1  # line 4: the same call again
        [(stored, raw, line)] = store.con.execute(
            "SELECT name, arguments_raw, source_line FROM tool_calls"
        ).fetchall()
        assert (stored, line) == (name, 2) and "ls INV-2041" in raw  # the first stays


@pytest.mark.parametrize("fmt", ["claude", "codex"])
@pytest.mark.parametrize("lean", [False, True])
def test_a_result_repeated_in_one_file_with_other_text_is_an_id_conflict(tmp_path, fmt, lean):
    """A Claude Code session or Codex rollout that gave one call's result twice with other
    text dropped the second as a quiet `duplicate`. It is now left out as an `id_conflict`
    (counted, named, recorded), as a repeated call with other input is; a repeat with the
    same text stays quiet. The audit's lean store keeps no results: there it is counted
    like any other output, and nothing is recorded or lost."""
    path, conv = repeated_result_file(tmp_path, fmt)
    with Store.open(None) as store:
        [counts] = ingest_paths(store, [str(path)], lean=lean)
        assert counts.status == "ingested"
        assert counts.skipped.get("duplicate") == 1  # line 5: the same result again
        max_position = store.con.execute("SELECT max_position FROM conversations").fetchone()
        if lean:
            assert counts.conflicts == (0, None)
            assert _left_out(store) == []
            return
        detail = f"tool_result 'call_1' in conversation '{conv}'"
        assert _left_out(store) == [(str(path), 4, None, detail)]
        assert counts.conflicts == (1, f"{detail} at {path}:4, stored from {path}:3")
        [(text, line, position)] = store.con.execute(
            "SELECT text, source_line, position FROM tool_results"
        ).fetchall()
        assert (text, line) == ("INV-2041.txt", 3)  # the first stays
        assert max_position == (position,)  # no hole where the one left out was


def test_a_folder_with_no_file_in_it_is_an_error_as_a_missing_path_is(tmp_path, store):
    """A batch script's `ingest_paths(store, ["traces/"])` of an empty folder returned `[]`
    without a word, while a missing path raised and `lexkeep ingest` refuses both: an ingest
    pointed at the wrong folder must not look like one that found nothing new."""
    (tmp_path / "traces").mkdir()
    with pytest.raises(InputError, match=r"no trace files in .*traces \(no files found\)"):
        ingest_paths(store, [str(tmp_path / "traces")])
    assert snapshot(store)["ingest_runs"] == []
