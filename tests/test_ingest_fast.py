"""The ingest's DuckDB fast path (core/fastload.py) writes exactly the general ingest's rows.

Every test ingests the same file(s) both ways into two DuckDB files (`fast_min_bytes=0`: the
fast path whenever it applies; `None`: never) and compares every table row for row, except
ingest_runs.id and started_at. Files the fast path cannot reproduce must fall back, so errors
keep their exact file:line:col.
"""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import orjson
import pytest
from conftest import INGEST_TABLES, ingest_rows, position_holes
from hypothesis import given, settings
from hypothesis import strategies as st

from lexkeep.core import fastload
from lexkeep.core import store as store_module
from lexkeep.core.errors import InputError
from lexkeep.core.fastload import drop_staging, stage, write
from lexkeep.core.ingest import ingest_paths
from lexkeep.core.rules import default_rules
from lexkeep.core.store import Store

REPO = Path(__file__).resolve().parent.parent
GENERATE = REPO / "benchmarks" / "generate.py"
TABLES = INGEST_TABLES


def _generate(out: Path, seed: int, size: str = "512KB") -> Path:
    proc = subprocess.run(
        [sys.executable, str(GENERATE), "--format", "lexkeep", "--size", size, "--out", str(out)]
        + ["--seed", str(seed)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    return out / "dump.jsonl"


def _rows(db: Path) -> dict[str, list[tuple]]:
    """Every row of every ingest table, in a stable order (no ingest_runs.id / started_at)."""
    with Store.open(db, read_only=True) as store:
        return ingest_rows(store)


# The extractor's budget is wall time; a generous one keeps both stores' scans complete on a
# busy machine, so the identifier tables compare like the rest.
RULES = replace(default_rules(), timeout=10.0)


def _ingest_both(tmp_path: Path, batches: list[list[str]], **options: object) -> tuple:
    """Ingest each batch of paths in turn, fast and general, into two stores; (fast, general)."""
    options.setdefault("rules", RULES)
    tmp_path.mkdir(parents=True, exist_ok=True)
    dbs = []
    counts = []
    for name, fast_min in (("fast", 0), ("slow", None)):
        db = tmp_path / f"{name}.duckdb"
        got = []
        with Store.open(db) as store:
            for paths in batches:
                try:
                    got.append(ingest_paths(store, paths, fast_min_bytes=fast_min, **options))
                except InputError as exc:  # must be the same error, at the same file:line:col
                    got.append((str(exc), exc.path, exc.line, exc.col))
        dbs.append(_rows(db))
        counts.append(got)
    assert counts[0] == counts[1]
    return dbs[0], dbs[1]


def _took_fast_path(path: Path, tmp_path: Path) -> bool:
    with Store.open(tmp_path / "probe.duckdb") as store:
        staged = stage(store, str(path))
        took = staged is not None
        if staged is not None:
            with store.transaction():
                took = write(store, staged) is not None
        drop_staging(store.con)
    (tmp_path / "probe.duckdb").unlink()
    return took


def _assert_same(fast: dict, slow: dict) -> None:
    for table in TABLES:
        assert fast[table] == slow[table], table


@pytest.mark.parametrize("seed", [3, 11])
def test_generated_dump_is_identical_both_ways(tmp_path, seed):
    dump = _generate(tmp_path / "gen", seed)
    assert _took_fast_path(dump, tmp_path)
    fast, slow = _ingest_both(tmp_path, [[str(dump)]])
    assert fast["messages"] and fast["runs"] and fast["tool_calls"] and fast["boundaries"]
    assert {r[2] for r in fast["runs"]} >= {"completed"}
    _assert_same(fast, slow)


def test_second_file_continues_conversations_of_the_first(tmp_path):
    dump = _generate(tmp_path / "gen", 5, "256KB")
    lines = dump.read_bytes().splitlines(keepends=True)
    half = len(lines) // 2
    first, second = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    first.write_bytes(b"".join(lines[:half]))
    second.write_bytes(b"".join(lines[half:]))
    fast, slow = _ingest_both(tmp_path, [[str(first)], [str(second)]])
    _assert_same(fast, slow)
    # Re-ingesting adds nothing either way (the second ingest is not a fast one).
    fast2, slow2 = _ingest_both(tmp_path / "again", [[str(first)], [str(first)]])
    _assert_same(fast2, slow2)


def _line(type_: str, **fields: object) -> bytes:
    return orjson.dumps({"type": type_, **fields}) + b"\n"


EDGE = b"".join(
    [
        _line("message", id="m0", conversation_id="c1", role="assistant", text="before any user"),
        _line("conversation", id="c1", title="", parent_id=None),
        b"\n",
        _line("message", id="m1", conversation_id="c1", role="user", text="INV-1", time="2025-02"),
        _line("message", id="m2", conversation_id="c1", role="assistant", text="\u3000 \u00a0"),
        _line("tool_call", id="k1", conversation_id="c1", name="f", arguments={"b": 1.5, "a": []}),
        _line("tool_call", id="k2", conversation_id="c1", name="g", arguments="not json"),
        _line("tool_call", id="k3", conversation_id="c1", name="h", arguments=[1, "x"]),
        _line("tool_call", id="k4", conversation_id="c1", name="i", arguments_kind="freeform"),
        _line("tool_result", call_id="k1", conversation_id="c1", text="ok", is_error=True),
        _line("tool_result", call_id="k2", conversation_id="c1"),
        _line("mystery", id="x"),
        _line("message", id="m3", conversation_id="c2", role="user", kind="user_text"),
        _line("message", id="m4", conversation_id="c2", role="assistant", text="done", time="1"),
        _line("message", id="m5", conversation_id="c2", role="user", text="again"),
        _line("message", id="m6", conversation_id="c2", role="assistant", status="failed"),
        _line("compaction", id="b1", conversation_id="c2", summary=None, kept_verbatim=["a"]),
        _line("compaction", id="b2", conversation_id="c1", kind="remote", trigger="manual"),
        _line("conversation", id="c3", title="only a record", parent_id="c1"),
        _line("conversation", id="c1", title="later title", parent_id="c0"),
        _line("message", id="m7", conversation_id="c1", role="user", text="last turn"),
        _line("message", id="m8", conversation_id="c1", role="system", text="sys", time="0"),
        b'{"type":"message","id":"m10","conversation_id":"c2","role":"user","text":"\\ud83d\\ude00'
        b'\\u0000\\/"}\n',
        b'{"type":"message","id":"m9","conversation_id":"c2","role":"user","text":"no newline"}',
    ]
)


def test_edge_file_is_identical_both_ways(tmp_path):
    path = tmp_path / "edge.jsonl"
    path.write_bytes(EDGE)
    assert _took_fast_path(path, tmp_path)
    fast, slow = _ingest_both(tmp_path, [[str(path)]])
    assert len(fast["runs"]) == 6 and len(fast["tool_calls"]) == 4
    assert {r[2] for r in fast["runs"]} == {"completed", "failed", "running"}
    _assert_same(fast, slow)


def test_the_first_line_of_an_unknown_type_is_kept_both_ways(tmp_path):
    """A file's summary keeps the line of its first record of an unknown type (the audit's
    note names FILE:LINE), whether DuckDB or the reader read it."""
    path = tmp_path / "edge.jsonl"
    mystery = _line("mystery", id="x")
    path.write_bytes(EDGE.replace(mystery, mystery + _line("telemetry", id="y")))
    at = EDGE.splitlines(keepends=True).index(mystery) + 1
    assert _took_fast_path(path, tmp_path)
    for fast_min in (0, None):
        with Store.open(None) as store:
            [got] = ingest_paths(store, [str(path)], fast_min_bytes=fast_min, rules=RULES)
        assert got.skipped == {"unknown_type": 2}
        assert got.unknown_type_line == at


def test_fast_file_after_a_general_one_in_the_same_conversation(tmp_path):
    base = tmp_path / "base.jsonl"
    base.write_bytes(
        _line("conversation", id="c1", title="first title")
        + _line("message", id="p1", conversation_id="c1", role="user", text="hello", time="9")
    )
    path = tmp_path / "edge.jsonl"
    path.write_bytes(EDGE)
    fast, slow = _ingest_both(tmp_path, [[str(base)], [str(path)]])
    _assert_same(fast, slow)


@pytest.mark.parametrize(
    "bad",
    [
        _line("run", id="r1", conversation_id="c1", status="completed"),
        _line("message", id="m3", conversation_id="c1", role="user", run_id="r1"),
        _line("message", id=7, conversation_id="c1", role="user"),
        _line("tool_result", call_id="k", conversation_id="c1", text=None),
        _line("tool_result", call_id="k", conversation_id="c1", text={"a": [1]}),
        _line("message", id="m2", conversation_id="c1", role="user", text=5),
        _line("tool_result", call_id="k", conversation_id="c1", is_error="yes"),
        _line("message", id="m1", conversation_id="c1", role="user", text="dup"),
        b"   \n",
        b'{"type":"message","id":"mx","conversation_id":"c1","role":"user","n":NaN}\n',
        b'{"type":"message","id":"mx","conversation_id":"c1","role":"user","n":[1,],}\n',
        b'{"type":"message","id":"mx","conversation_id":"c1","role":"user","n":1e999}\n',
        b'[{"type":"message","id":"mx","conversation_id":"c1","role":"user"}]\n',
        b'{"type":"message","id":"my","conversation_id":"c1","role":"user"}\r\n',
        # DuckDB reads the first of a repeated key, the reader (orjson) the last
        b'{"type":"message","id":"mz","conversation_id":"c1","role":"user","text":"ORD_1",'
        b'"text":"ORD_2"}\n',
        b'{"type":"tool_call","id":"k","conversation_id":"c1","name":"a","name":"b"}\n',
        # the same key written once plainly and once with an escape
        b'{"type":"message","id":"mz","conversation_id":"c1","role":"user","text":"ORD_1",'
        b'"te\\u0078t":"ORD_2"}\n',
    ],
)
def test_what_the_fast_path_does_not_reproduce_falls_back(tmp_path, bad):
    path = tmp_path / "odd.jsonl"
    path.write_bytes(_line("message", id="m1", conversation_id="c1", role="user") + bad)
    assert not _took_fast_path(path, tmp_path)
    fast, slow = _ingest_both(tmp_path, [[str(path)]])
    _assert_same(fast, slow)


def test_a_key_no_reader_reads_may_repeat_on_the_fast_path(tmp_path):
    """DuckDB refuses a repeated key only among those it stages (every key the reader reads):
    one that neither reads makes no difference, and the file stays on the fast path."""
    path = tmp_path / "extra.jsonl"
    path.write_bytes(
        _line("message", id="m1", conversation_id="c1", role="user", text="ORD_1")
        + b'{"type":"message","id":"m2","conversation_id":"c1","role":"assistant",'
        b'"text":"ok","extra":1,"extra":2}\n'
    )
    assert _took_fast_path(path, tmp_path)
    fast, slow = _ingest_both(tmp_path, [[str(path)]])
    _assert_same(fast, slow)


def _with_empty_lines(lines: list[bytes], where: dict[int, int]) -> bytes:
    """`lines` joined, with where[i] empty lines before line i (len(lines): after the last)."""
    out = b""
    for i, line in enumerate([*lines, b""]):
        out += b"\n" * where.get(i, 0) + line
    return out


def test_empty_lines_anywhere_keep_every_line_number_both_ways(tmp_path):
    """DuckDB's JSON reader skips empty lines: rows are numbered among the others, and the
    staging counts the empty lines back (first lines, several in a row, before the last
    record, at the end). A tool call whose arguments need their line (a float) has it read
    from the file by its physical number."""
    head = '{"type":"tool_call","conversation_id":"c1","name":"f",'
    lines = [
        _line("message", id="m1", conversation_id="c1", role="user", text="INV-2025-08-44719"),
        _line("message", id="m2", conversation_id="c1", role="assistant", text="looking"),
        f'{head}"id":"k1","arguments":{{"rate": 1.50, "n": 1E5}}}}\n'.encode(),
        _line("tool_result", call_id="k1", conversation_id="c1", text="ok"),
        _line("compaction", id="b1", conversation_id="c1", summary="earlier"),
        f'{head}"id":"k2","arguments":[2.50, "INV-2025-08-44719"]}}\n'.encode(),
        _line("mystery", id="x"),
        _line("message", id="m3", conversation_id="c1", role="user", text="last"),
    ]
    path = tmp_path / "gaps.jsonl"
    path.write_bytes(_with_empty_lines(lines, {0: 2, 2: 1, 5: 3, 7: 1, 8: 2}))
    assert _took_fast_path(path, tmp_path)
    fast, slow = _ingest_both(tmp_path, [[str(path)]])
    _assert_same(fast, slow)
    calls = {row[1]: row for row in fast["tool_calls"]}
    assert calls["k1"][5] == '{"rate":1.50,"n":1E5}' and calls["k1"][-1] == 6
    assert calls["k2"][5] == '[2.50,"INV-2025-08-44719"]' and calls["k2"][-1] == 12
    with Store.open(None) as store:
        [got] = ingest_paths(store, [str(path)], fast_min_bytes=0, rules=RULES)
        lines_of = dict(store.con.execute("SELECT id, source_line FROM messages").fetchall())
    assert lines_of == {"m1": 3, "m2": 4, "m3": 15}
    assert got.unknown_type_line == 13


def test_a_call_line_rewritten_after_staging_sends_the_file_to_the_general_path(tmp_path):
    """The line of a call whose arguments hold a float is read again from the file when it is
    written: a file rewritten in between (that line now holds something else) is not written
    from the staging, and no store table is touched."""
    head = '{"type":"tool_call","conversation_id":"c1","name":"f",'
    path = tmp_path / "calls.jsonl"
    first = _line("message", id="m1", conversation_id="c1", role="user", text="go")
    path.write_bytes(first + f'{head}"id":"k1","arguments":{{"rate": 1.50}}}}\n'.encode())
    with Store.open(tmp_path / "x.duckdb") as store:
        staged = stage(store, str(path))
        assert staged is not None
        path.write_bytes(first + f'{head}"id":"k9","arguments":{{"rate": 2.50}}}}\n'.encode())
        with store.transaction():
            assert write(store, staged) is None
            for table in TABLES:
                count = store.con.execute(f"SELECT count(*) FROM {table}").fetchone()[0]
                assert count == 0, table
        drop_staging(store.con)


def test_a_file_removed_after_staging_is_left_to_the_general_path(tmp_path):
    """A call whose line must be read again, from a file removed since it was staged: the
    file is not written from the staging (the general ingest then names the missing file)."""
    path = tmp_path / "calls.jsonl"
    path.write_bytes(
        _line("message", id="m1", conversation_id="c1", role="user", text="go")
        + b'{"type":"tool_call","id":"k1","conversation_id":"c1","name":"f",'
        b'"arguments":{"rate": 1.50}}\n'
    )
    with Store.open(tmp_path / "x.duckdb") as store:
        staged = stage(store, str(path))
        assert staged is not None
        path.unlink()
        with store.transaction():
            assert write(store, staged) is None
            assert store.con.execute("SELECT count(*) FROM tool_calls").fetchone()[0] == 0
        drop_staging(store.con)


def test_the_line_check_reads_blocks_as_the_file_has_lines(tmp_path, monkeypatch):
    """The line check reads the file in blocks: lines longer than a block, empty lines on a
    block's edge and a last line without a newline are counted and hashed as Python reads
    them."""
    import hashlib

    monkeypatch.setattr(fastload, "_CHUNK", 64)
    records = [
        _line("message", id=f"m{i}", conversation_id="c1", role="user", text="x" * (i * 37 % 300))
        for i in range(40)
    ]
    body = _with_empty_lines(records, {0: 1, 3: 2, 17: 1, 39: 4})
    for data in (body, body.rstrip(b"\n"), body + b"\n"):
        path = tmp_path / "blocks.jsonl"
        path.write_bytes(data)
        scan = fastload._Scan(str(path))
        scan.run()
        physical = data.split(b"\n")
        if physical[-1] == b"":
            physical.pop()
        assert scan.ok and scan.error is None
        assert scan.lines == len(physical)
        assert scan.empty == [n for n, line in enumerate(physical, start=1) if not line]
        assert scan.size == len(data)
        assert scan.digest.hexdigest() == hashlib.sha256(data).hexdigest()
    path.write_bytes(body.replace(b'"m17"', b'"m17","text":5,"x":"\r"'))
    scan = fastload._Scan(str(path))
    scan.run()
    assert not scan.ok


def test_bad_line_keeps_its_file_line_and_column(tmp_path):
    path = tmp_path / "bad.jsonl"
    path.write_bytes(_line("conversation", id="c1") + b'{"type": "message", oops}\n')
    with Store.open(tmp_path / "x.duckdb") as store:
        with pytest.raises(InputError) as err:
            ingest_paths(store, [str(path)], fast_min_bytes=0)
        assert err.value.line == 2 and err.value.path == str(path)
        assert store.con.execute("SELECT count(*) FROM messages").fetchone()[0] == 0


def test_failure_while_writing_rolls_the_fast_load_back(tmp_path, monkeypatch):
    path = tmp_path / "edge.jsonl"
    path.write_bytes(EDGE)
    real = store_module.bulk_insert

    def failing(con, table, *args, **kwargs):
        # the first write of the fast path dies: the calls built in Python (EDGE has some)
        if table in ("tool_calls", "lexkeep_ingest_calls"):
            raise OSError("disk full (injected)")
        return real(con, table, *args, **kwargs)

    monkeypatch.setattr(store_module, "bulk_insert", failing)
    with Store.open(tmp_path / "x.duckdb") as store:
        with pytest.raises(OSError, match="injected"):
            ingest_paths(store, [str(path)], fast_min_bytes=0)
        for table in TABLES:
            assert store.con.execute(f"SELECT count(*) FROM {table}").fetchone()[0] == 0, table
        staging = store.con.execute(
            "SELECT count(*) FROM duckdb_tables() WHERE table_name LIKE 'lexkeep_ingest_%'"
        ).fetchone()[0]
        assert staging == 0


def test_tool_calls_are_written_chunk_by_chunk(tmp_path, monkeypatch):
    """Calls read three at a time across two conversations: the same store as the general
    ingest (every call once, in line order)."""
    monkeypatch.setattr(fastload, "TOOL_CALL_CHUNK", 3)
    lines = [_line("message", id="m1", conversation_id="c1", role="user", text="hi #W2378156")]
    lines += [
        _line("tool_call", id=f"t{i}", conversation_id=f"c{i % 2}", name="f", arguments={"n": i})
        for i in range(10)
    ]
    path = tmp_path / "calls.jsonl"
    path.write_bytes(b"".join(lines))
    assert _took_fast_path(path, tmp_path)
    fast, slow = _ingest_both(tmp_path, [[str(path)]])
    assert len(fast["tool_calls"]) == 10
    _assert_same(fast, slow)


def test_a_second_file_repeating_ids_keeps_the_conflict_check(tmp_path):
    """Into an empty store the fast path inserts without conflict checks; into one that holds
    rows it keeps them, so ids a later file repeats are skipped as the general path does."""
    first = tmp_path / "a.jsonl"
    first.write_bytes(
        _line("message", id="m1", conversation_id="c1", role="user", text="order #W2378156")
        + _line("tool_call", id="t1", conversation_id="c1", name="f", arguments={"n": 1})
    )
    second = tmp_path / "b.jsonl"
    second.write_bytes(
        _line("message", id="m1", conversation_id="c1", role="user", text="again #W2378156")
        + _line("tool_call", id="t1", conversation_id="c1", name="f", arguments={"n": 2})
        + _line("message", id="m2", conversation_id="c1", role="user", text="more")
    )
    assert _took_fast_path(second, tmp_path)
    fast, slow = _ingest_both(tmp_path / "dbs", [[str(first)], [str(second)]])
    assert [row[0] for row in fast["messages"]].count("m1") == 1
    _assert_same(fast, slow)


def test_records_the_store_holds_already_take_no_positions_both_ways(tmp_path):
    """A file repeating stored records (a copy, a resumed session): the new ones continue
    right after the conversation's last position, with no hole where the copies were."""
    first = tmp_path / "a.jsonl"
    first.write_bytes(
        _line("message", id="m1", conversation_id="c1", role="user", text="order #W2378156")
        + _line("tool_call", id="t1", conversation_id="c1", name="f", arguments={"n": 1})
        + _line("tool_result", call_id="t1", conversation_id="c1", text="ok")
        + _line("compaction", id="b1", conversation_id="c1", summary="s")
    )
    second = tmp_path / "b.jsonl"
    second.write_bytes(
        first.read_bytes()
        + _line("message", id="m2", conversation_id="c1", role="user", text="more")
        + _line("tool_call", id="t2", conversation_id="c1", name="f", arguments={"n": 2})
        + _line("message", id="m3", conversation_id="c2", role="user", text="elsewhere")
    )
    assert _took_fast_path(second, tmp_path)
    fast, slow = _ingest_both(tmp_path / "dbs", [[str(first)], [str(second)]])
    _assert_same(fast, slow)
    assert sorted((r[0], r[3]) for r in fast["messages"]) == [("m1", 0), ("m2", 4), ("m3", 0)]
    assert sorted((r[1], r[3]) for r in fast["tool_calls"]) == [("t1", 1), ("t2", 5)]
    assert sorted((r[0], r[3]) for r in fast["runs"]) == [
        ("m1/run", 0),
        ("m2/run", 4),
        ("m3/run", 0),
    ]
    for name in ("fast", "slow"):
        with Store.open(tmp_path / "dbs" / f"{name}.duckdb", read_only=True) as store:
            assert position_holes(store) == [], name


def test_staged_line_numbers_are_physical_lines_when_duckdb_reads_in_parallel(
    tmp_path: Path,
) -> None:
    """stage_sql numbers lines by rowid: that must hold when many buffers are read at once.

    Small buffers (4 x 16 KiB) split a 2 MB file into about 30 pieces, read by every thread;
    empty lines in between must still count. The numbers are compared with Python's.
    """
    path = tmp_path / "lines.jsonl"
    lines = []
    for i in range(40_000):
        if i % 997 == 0:
            lines.append("")
        else:
            lines.append(orjson.dumps({"type": "message", "id": f"m{i}", "n": "x" * (i % 50)}))
    path.write_bytes(b"\n".join(x if isinstance(x, bytes) else x.encode() for x in lines) + b"\n")
    expected = {f"m{i}": i + 1 for i in range(40_000) if i % 997}
    create, view = fastload.stage_sql(
        "t_lines", "id ->> '$' AS x_id", '{"id": "JSON"}', line_bytes=16 << 10
    )
    with Store.open(None) as store:
        store.con.execute("SET threads = 4")
        store.con.execute(create, [str(path)])
        store.con.execute(view)
        got = dict(store.con.execute("SELECT x_id, line FROM t_lines").fetchall())
        fastload.drop_stage(store.con, "t_lines")
    assert got == expected


def _mixed_records(path: Path, n: int, output: int = 0) -> dict[str, int]:
    """A JSONL file of every record type (with blank lines); {probe id: physical line}.
    `output`: characters added to every tool result (a bigger file, as many lines)."""
    out: list[bytes] = []
    lines: dict[str, int] = {}
    tail = "y" * output
    for i in range(n):
        if i % 997 == 0:
            out.append(b"")
            continue
        common = {"conversation_id": f"c{i // 40}"}
        record = [
            {
                "type": "message",
                "id": f"u{i}",
                "role": "user",
                "text": f"ORD-{i} " + "x" * (i % 70),
            },
            {"type": "message", "id": f"a{i}", "role": "assistant", "text": "done " * (i % 9)},
            {"type": "tool_call", "id": f"t{i}", "name": "get", "arguments": f'{{"q": "ORD-{i}"}}'},
            {"type": "tool_result", "call_id": f"t{i - 1}", "text": "ok " * (i % 40) + tail},
            {"type": "compaction", "id": f"b{i}", "summary": "earlier work"},
        ][i % 5] | common
        out.append(orjson.dumps(record))
        lines[str(record.get("id", record.get("call_id")))] = len(out)
    path.write_bytes(b"\n".join(out) + b"\n")
    return lines


def test_the_ingest_staging_numbers_physical_lines_when_read_in_parallel(tmp_path: Path) -> None:
    """The ingest's staging (DuckDB's JSON reader, which skips empty lines, and the view that
    counts them back) gives every record its physical line on many threads. DuckDB reads
    32 MB a piece: a 40 MB file of every record type with an empty line every 997 is read in
    two pieces at once."""
    path = tmp_path / "mixed.jsonl"
    expected = _mixed_records(path, 40_000, output=5_000)
    assert path.stat().st_size > 40 << 20
    empty = [i for i, line in enumerate(path.read_bytes().split(b"\n")[:-1], 1) if not line]
    with Store.open(None) as store:
        con = store.con
        con.execute("SET threads = 4")
        fastload._read(con, str(path))
        fastload._number_lines(con, empty)
        got = dict(
            # a call and its result share a probe: the later line is the expected one
            con.execute(
                "SELECT coalesce(x_id, x_call), line FROM lexkeep_ingest_lines ORDER BY line"
            ).fetchall()
        )
        drop_staging(con)
    assert got == expected


@pytest.mark.parametrize("which", ["ingest", "audit"])
def test_the_real_staging_numbers_physical_lines_when_read_in_parallel(
    tmp_path: Path, which: str
) -> None:
    """The ingest's and the audit's own staging columns keep the file's order on many threads.

    An expression DuckDB plans as a join made the threads' pieces land out of order (a `type
    IN (...)` column became a MARK join): lines were renumbered, and a conversation cut across
    pieces got its positions, runs and pairs wrong. Small buffers split 2 MB into ~30 pieces.
    """
    from lexkeep.audit import fastload as audit_fastload

    path = tmp_path / "mixed.jsonl"
    expected = _mixed_records(path, 20_000)
    macros = fastload.SQL_MACROS
    if which == "ingest":
        columns, schema, inner = fastload._STAGE_COLUMNS, fastload._SCHEMA, ""
    else:
        columns = audit_fastload._STAGE_COLUMNS
        schema, inner = audit_fastload._SCHEMA, audit_fastload._STAGE_INNER
        macros = (*macros, *audit_fastload.TEXT_MACROS)  # its checks on fields read as text
    create, view = fastload.stage_sql(
        "t_real", columns + ", coalesce(x_id, x_call) AS probe", schema, inner, line_bytes=16 << 10
    )
    with Store.open(None) as store:
        con = store.con
        con.execute("SET threads = 4")
        for macro in macros:
            con.execute(macro)
        assert fastload.keeps_file_order(con, create, str(path))
        con.execute(create, [str(path)])
        con.execute(view)
        got = dict(con.execute("SELECT probe, line FROM t_real").fetchall())
        fastload.drop_stage(con, "t_real")
    assert got == expected


def test_a_plan_that_may_reorder_lines_sends_the_file_to_the_general_path(tmp_path: Path) -> None:
    """keeps_file_order refuses joins and windows in a staging plan (rowids would not be lines);
    an IN list of constants is such a join in DuckDB 2's plans."""
    path = tmp_path / "mixed.jsonl"
    _mixed_records(path, 2_000)
    schema = '{"type": "VARCHAR"}'
    with Store.open(None) as store:
        con = store.con
        con.execute("SET threads = 2")
        plain = fastload.stage_sql("t_ok", "type = 'message' AS m", schema)[0]
        assert fastload.keeps_file_order(con, plain, str(path))
        windowed = fastload.stage_sql("t_w", "count(*) OVER () AS n", schema)[0]
        assert not fastload.keeps_file_order(con, windowed, str(path))
        listed = "type IN ('a', 'b', 'c', 'd', 'e', 'f') AS known"
        assert not fastload.keeps_file_order(con, fastload.stage_sql("t_in", listed, schema)[0],
                                             str(path))  # fmt: skip


def test_listed_strip_whitespace_is_what_python_strips():
    """The RE2 class behind "answered" lists exactly the characters str.strip() removes."""
    spaces = tuple(c for c in range(0x110000) if chr(c).isspace() and not 0xD800 <= c < 0xE000)
    assert spaces == fastload.STRIP_WHITESPACE


def test_a_file_loaded_by_duckdb_tells_its_phases(tmp_path: Path) -> None:
    """Its bytes are all read at once, so the bar's text says what the ingest does instead."""
    path = tmp_path / "mixed.jsonl"
    _mixed_records(path, 2_000)
    phases: list[str] = []
    with Store.open(tmp_path / "fast.duckdb") as store:
        ingest_paths(store, [str(path)], fast_min_bytes=0, on_phase=phases.append)
    assert phases == [
        "loading the file (DuckDB)",
        "extracting identifiers",
        "writing the store",
        "ingesting",
    ]
    phases.clear()
    with Store.open(tmp_path / "general.duckdb") as store:
        ingest_paths(store, [str(path)], fast_min_bytes=None, on_phase=phases.append)
    assert phases == []


def test_a_file_loaded_by_duckdb_moves_the_bar_while_it_is_staged(tmp_path, monkeypatch):
    """The bar sat at 0 for the whole DuckDB load, then jumped to the end: it now hears the
    bytes as the staging reads them, each byte once, all before identifiers are extracted."""
    monkeypatch.setattr(fastload, "PROGRESS_BYTES", 16 << 10)
    path = tmp_path / "mixed.jsonl"
    _mixed_records(path, 2_000)
    size = path.stat().st_size
    assert size > 6 * fastload.PROGRESS_BYTES
    events: list[tuple[str, object]] = []
    with Store.open(tmp_path / "fast.duckdb") as store:
        ingest_paths(
            store,
            [str(path)],
            fast_min_bytes=0,
            on_phase=lambda text: events.append(("phase", text)),
            on_progress=lambda n: events.append(("bytes", n)),
        )
    loading = events.index(("phase", "loading the file (DuckDB)"))
    extracting = events.index(("phase", "extracting identifiers"))
    told = [n for kind, n in events if kind == "bytes"]
    assert sum(told) == size  # type: ignore[arg-type]
    assert [n for _, n in events[loading + 1 : extracting]] == told
    assert len(told) >= size // fastload.PROGRESS_BYTES


@pytest.mark.parametrize(
    "bad",
    [
        _line("message", id="u5", conversation_id="c0", role="user", text="dup"),  # in DuckDB
        b'{"type":"message","id":"mx","conversation_id":"c1","role":"user","n":NaN}\n',
        _line("tool_result", call_id="k", conversation_id="c1", text={"a": [1]}),
    ],
)
def test_a_file_the_fast_path_gives_up_on_is_counted_once(tmp_path, monkeypatch, bad):
    """Bytes the staging told the bar before the file went to the general path (found by
    DuckDB's checks, or by the reading thread, which stops there) are not told again."""
    monkeypatch.setattr(fastload, "PROGRESS_BYTES", 16 << 10)
    path = tmp_path / "mixed.jsonl"
    _mixed_records(path, 2_000)
    lines = path.read_bytes().splitlines(keepends=True)
    path.write_bytes(b"".join(lines[:1000] + [bad] + lines[1000:]))
    assert not _took_fast_path(path, tmp_path)
    told: list[int] = []
    with Store.open(tmp_path / "s.duckdb") as store:
        ingest_paths(
            store, [str(path)], fast_min_bytes=0, skip_invalid=True, on_progress=told.append
        )
    assert sum(told) == path.stat().st_size


# Keys of a line: the reader's, others, and ones only an escape or a quote can write.
_KEYS = st.sampled_from(["type", "id", "text", "name", "arguments", "kind", "x", "é", 'q"'])
_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=12),
    lambda inner: (
        st.lists(inner, max_size=3) | st.lists(st.tuples(_KEYS, inner), max_size=3).map(dict)
    ),
    max_leaves=8,
)


@given(
    pairs=st.lists(st.tuples(_KEYS, _VALUES), min_size=1, max_size=6),
    compact=st.booleans(),
    ascii_only=st.booleans(),
)
def test_one_of_each_key_finds_every_repeated_top_level_key(pairs, compact, ascii_only):
    """As a full decode says, on lines as JSON writers write them (repeats made by hand)."""
    separators = (",", ":") if compact else (", ", ": ")

    def dump(value: object) -> str:
        return json.dumps(value, ensure_ascii=ascii_only, separators=separators)

    raw = "{" + separators[0].join(dump(k) + separators[1] + dump(v) for k, v in pairs) + "}"
    raw_bytes = raw.encode()
    read = [k for k, _ in pairs if k in fastload._KEY_TOKENS]  # keys both readers ignore aside
    repeated = len(set(read)) < len(read)
    assert fastload.one_of_each_key(raw_bytes, orjson.loads(raw_bytes)) is not repeated


@pytest.mark.parametrize("type_, taken", [("message", "m1"), ("compaction", "b1")])
def test_an_id_another_conversation_holds_is_refused_both_ways(tmp_path, type_, taken):
    """A big file whose message or compaction id the store holds for another conversation:
    the fast path refuses it as the general one does (its rows were left out as duplicates)."""
    first, second = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    first.write_bytes(
        _line("message", id="m1", conversation_id="c1", role="user", text="ORD_88412")
        + _line("compaction", id="b1", conversation_id="c1")
    )
    fields = {"message": {"role": "user", "text": "ORD_99999"}, "compaction": {}}[type_]
    second.write_bytes(
        _line("message", id="m2", conversation_id="c2", role="user")
        + _line(type_, id=taken, conversation_id="c2", **fields)
    )
    assert _took_fast_path(second, tmp_path)
    fast, slow = _ingest_both(tmp_path, [[str(first)], [str(second)]])
    _assert_same(fast, slow)
    assert [r[1] for r in fast["messages"]] == ["c1"]  # nothing of b.jsonl
    with Store.open(tmp_path / "fast.duckdb") as store, pytest.raises(InputError) as info:
        ingest_paths(store, [str(second)], fast_min_bytes=0)
    assert (info.value.path, info.value.line) == (str(second), 2)
    assert f"{type_} id '{taken}' is already used by conversation 'c1' ({first}:" in str(info.value)


BIG = "98765432109876543210"  # beyond 64 bits: orjson reads it as a float


def test_numbers_in_object_arguments_are_written_as_the_file_has_them_both_ways(tmp_path):
    """DuckDB writes a decimal back changed (`1.50` as `1.5`) and orjson reads a 20-digit
    integer as a float: the fast path takes such arguments from the line, as the reader does."""
    head = '{"type":"tool_call","conversation_id":"c1","name":"f",'
    path = tmp_path / "numbers.jsonl"
    path.write_bytes(
        _line("message", id="m1", conversation_id="c1", role="user", text=f"account {BIG}")
        + f'{head}"id":"k1","arguments":{{"account": {BIG}, "rate": 0.10000000000000000555}}}}\n'
        f'{head}"id":"k2","arguments":[1.50, 1E5, -0, "x"]}}\n'
        f'{head}"id":"k3","arguments":{{"z": 1.5, "a": {BIG}, "z": 2.50}}}}\n'
        # a line the pattern picks out without a float in the arguments: orjson's text
        f'{head}"id":"k4","score":1.5,"arguments":{{"v": "1.2e3", "n": 1234567890123456789}}}}\n'
        f'{head}"id":"k5","arguments":{{"plain": "ORD_88412"}}}}\n'.encode()
    )
    assert _took_fast_path(path, tmp_path)
    fast, slow = _ingest_both(tmp_path, [[str(path)]])
    _assert_same(fast, slow)
    with Store.open(tmp_path / "fast.duckdb", read_only=True) as store:
        raws = store.con.execute("SELECT arguments_raw FROM tool_calls ORDER BY call_id").fetchall()
    assert [r[0] for r in raws] == [
        f'{{"account":{BIG},"rate":0.10000000000000000555}}',
        '[1.50,1E5,-0,"x"]',
        f'{{"z":2.50,"a":{BIG}}}',
        '{"v":"1.2e3","n":1234567890123456789}',
        '{"plain":"ORD_88412"}',
    ]


# Argument texts where DuckDB's reading of JSON and orjson's differ, or may: each call's row is
# written by SQL only when both read it alike (fastload._ARGUMENTS_BY_SQL).
ODD_ARGUMENTS = [
    '{"a":1,"a":2}',
    '{"x":{"b":1,"b":2}}',
    '[{"a":1,"a":2}]',
    '{"a" :1, "a": 2}',
    "NaN",
    "[NaN]",
    '{"n": Infinity}',
    "[-inf]",
    "[1,2,]",
    '{"a":1,}',
    "[1e400]",
    "[1e-400]",
    "[1234567890123456789012.5]",
    "[-0]",
    "[-0.0, 0.1, 1e16, 1e-7, 5e-324]",
    '["\\ud800"]',
    '["\\u00e9 \\u2028 \\u001f \\/"]',
    "[123456789012345678901234]",
    '  {"a" : 1 }  ',
    "",
    "not json",
    '{"level": "info", "nan": "inf"}',
    '{"code": "if (a) { b(); }"}',
    '{"k": [1, {"z": 2}]}',
    '"just a string"',
    "5",
    "null",
    " null ",
    "[null]",
    '{"":1}',
    '{"command":["bash","-lc","ls -la /srv/app"],"workdir":"/srv/app"}',
    '{"a":1}\n{"b":2}',
]


def _calls_file(path: Path, arguments: list[str], kinds: list[str | None] | None = None) -> None:
    """A user message, then one tool call per argument text (given as a JSON string)."""
    out = [_line("message", id="m1", conversation_id="c1", role="user", text="ORD_88412")]
    for i, text in enumerate(arguments):
        kind = kinds[i] if kinds else None
        fields = {"arguments_kind": kind} if kind else {}
        out.append(
            _line("tool_call", id=f"k{i}", conversation_id="c1", name="f", arguments=text, **fields)
        )
    path.write_bytes(b"".join(out))


def test_arguments_duckdb_and_orjson_read_otherwise_are_stored_as_the_reader_stores_them(tmp_path):
    """Calls whose JSON text DuckDB reads otherwise than orjson (repeated keys, NaN, trailing
    commas, numbers beyond a double...) get the general ingest's parsed value: they are built
    in Python, and the others are written by SQL, row for row the same."""
    path = tmp_path / "calls.jsonl"
    kinds = [None] * len(ODD_ARGUMENTS) + ["freeform", "object", "freeform"]
    _calls_file(path, [*ODD_ARGUMENTS, '{"a":1,"a":2}', '{"a":1,"a":2}', ""], kinds)
    assert _took_fast_path(path, tmp_path)
    fast, slow = _ingest_both(tmp_path, [[str(path)]])
    _assert_same(fast, slow)
    with Store.open(None) as store:
        staged = stage(store, str(path))
        assert staged is not None
        store.con.execute(fastload._CALLS_BY_SQL)
        by_sql = dict(
            store.con.execute(
                "SELECT x_id, line IN (SELECT line FROM lexkeep_ingest_sql_calls)"
                " FROM lexkeep_ingest_lines WHERE type = 'tool_call'"
            ).fetchall()
        )
        drop_staging(store.con)

    def call(text: str) -> str:
        return f"k{ODD_ARGUMENTS.index(text)}"

    for text in ('{"a":1,"a":2}', '{"x":{"b":1,"b":2}}', "NaN", "[1,2,]", "[1e400]"):
        assert not by_sql[call(text)], text  # built in Python, as the reader reads them
    for text in (
        "null",
        '{"":1}',
        '{"command":["bash","-lc","ls -la /srv/app"],"workdir":"/srv/app"}',
    ):
        assert by_sql[call(text)], text  # written by SQL
    assert by_sql[f"k{len(ODD_ARGUMENTS)}"]  # free text with a repeated key: no parsed value


_JSON_VALUES = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(10**25), max_value=10**25)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(alphabet=st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=8),
    lambda inner: (
        st.lists(inner, max_size=4)
        | st.dictionaries(st.sampled_from(["a", "b", "inf", "{", ""]), inner, max_size=3)
    ),
    max_leaves=12,
)


@given(
    values=st.lists(
        st.tuples(_JSON_VALUES, st.sampled_from(["compact", "spaced", "repeated", "comma"])),
        min_size=1,
        max_size=12,
    )
)
@settings(max_examples=15, deadline=None)
def test_generated_arguments_are_stored_alike_both_ways(tmp_path_factory, values):
    """Any JSON text as arguments (spacing, a repeated key, a trailing comma): the fast path
    stores what the general ingest stores."""
    texts = []
    for value, style in values:
        text = json.dumps(value, separators=(",", ":") if style == "compact" else (", ", ": "))
        if style == "repeated" and text.startswith("{") and len(text) > 2:
            text = '{"a":0,"a":' + text + "," + text[1:]
        elif style == "comma" and text[-1:] in "]}" and len(text) > 2:
            text = text[:-1] + "," + text[-1]
        texts.append(text)
    tmp_path = tmp_path_factory.mktemp("calls")
    path = tmp_path / "calls.jsonl"
    _calls_file(path, texts)
    fast, slow = _ingest_both(tmp_path, [[str(path)]])
    _assert_same(fast, slow)


def test_a_float_only_duckdb_text_shows_is_left_to_the_general_path():
    """Without the line (the pattern did not keep it) a float in the arguments cannot be
    written as the file has it: None, and the file goes to the general ingest."""
    assert fastload.object_arguments('{"n":1.5}', None) is None
    assert fastload.object_arguments('{"n":15}', None) == ('{"n":15}', {"n": 15})
    line = '{"type":"tool_call","arguments":{"n":1.50}}'
    assert fastload.object_arguments('{"n":1.5}', line) == ('{"n":1.50}', {"n": 1.5})


def test_arguments_nested_deeper_than_orjson_writes_are_kept_both_ways(tmp_path):
    """orjson reads JSON nested up to 1024 levels but writes only 254: arguments nested in
    between crashed every ingest (and the audit) with an internal error."""
    deep: object = "ORD_88412"
    for _ in range(300):
        deep = [deep]
    path = tmp_path / "deep.jsonl"
    path.write_bytes(
        _line("message", id="m1", conversation_id="c1", role="user", text="check ORD_88412")
        + _line("compaction", id="b1", conversation_id="c1")
        + json.dumps(  # orjson itself cannot write it
            {
                "type": "tool_call",
                "id": "t1",
                "conversation_id": "c1",
                "name": "q",
                "arguments": {"a": deep, "n": 1.5},
            }
        ).encode()
        + b"\n"
    )
    fast, slow = _ingest_both(tmp_path / "stores", [[str(path)]])
    _assert_same(fast, slow)
    (call,) = fast["tool_calls"]
    raw = next(v for v in call if isinstance(v, str) and v.startswith('{"a":'))
    assert raw == json.dumps({"a": deep, "n": 1.5}, separators=(",", ":"))


def test_records_left_out_for_an_id_their_conversation_holds_are_recorded_both_ways(tmp_path):
    """Day 2 of an export restarts its ids, and is big enough for the DuckDB path: both paths
    write the same ingest_errors row for each record left out (`id_conflict`)."""
    first = tmp_path / "day1.jsonl"
    first.write_bytes(
        _line("message", id="m1", conversation_id="c1", role="user", text="order #W2378156")
        + _line("compaction", id="b1", conversation_id="c1", summary="day one")
        + _line("message", id="m2", conversation_id="c1", role="assistant", text="done")
    )
    second = tmp_path / "day2.jsonl"
    second.write_bytes(
        _line("message", id="m1", conversation_id="c1", role="user", text="invoice INV-2025-7")
        + _line("message", id="m2", conversation_id="c1", role="assistant", text="other")
        + _line("compaction", id="b1", conversation_id="c1", summary="day two")
        + _line("message", id="m3", conversation_id="c1", role="user", text="more")
    )
    assert _took_fast_path(second, tmp_path)
    fast, slow = _ingest_both(tmp_path / "dbs", [[str(first)], [str(second)], [str(second)]])
    _assert_same(fast, slow)
    # A message other than a user's own text is named with its kind: the audit never reads it.
    assert [row[1:] for row in fast["ingest_errors"]] == [
        (str(second), 1, None, "id_conflict", "message 'm1'"),
        (str(second), 2, None, "id_conflict", "message 'm2' (assistant_text)"),
        (str(second), 3, None, "id_conflict", "compaction 'b1'"),
    ]


def test_tool_calls_and_results_left_out_for_their_id_are_recorded_both_ways(tmp_path):
    """Day 2 of an export whose call ids restart, big enough for the DuckDB path: both paths
    leave out the same calls and results (other arguments, other output, arguments given as
    text or as a JSON value), keep a true copy quiet (also one whose arguments are the same
    JSON written otherwise), and write the same id_conflict rows and summary."""
    # Its arguments as a JSON value with a number the line writes with a trailing zero.
    t1 = b'{"type":"tool_call","id":"t1","conversation_id":"c1","name":"f","arguments":{"n":%s}}\n'
    first = tmp_path / "day1.jsonl"
    first.write_bytes(
        _line("message", id="m1", conversation_id="c1", role="user", text="order #W2378156")
        + t1 % b"1.50"
        + _line("tool_result", call_id="t1", conversation_id="c1", text="found")
        + _line("tool_call", id="t2", conversation_id="c1", name="g", arguments='{"a": 1}')
        + _line("tool_result", call_id="t2", conversation_id="c1", text="same")
        + _line("tool_call", id="t3", conversation_id="c1", name="h", arguments=[1, "x"])
        + _line("tool_call", id="t5", conversation_id="c1", name="k", arguments='{"a": 1, "b": 2}')
    )
    second = tmp_path / "day2.jsonl"
    second.write_bytes(
        _line("message", id="m2", conversation_id="c1", role="user", text="order #W2378157")
        + t1 % b"2.50"
        + _line("tool_result", call_id="t1", conversation_id="c1", text="not found")
        + _line("tool_call", id="t2", conversation_id="c1", name="g", arguments='{"a": 1}')
        + _line("tool_result", call_id="t2", conversation_id="c1", text="same")
        + _line("tool_call", id="t3", conversation_id="c1", name="h2", arguments=[1, "x"])
        + _line("tool_call", id="t4", conversation_id="c1", name="f", arguments={"n": 2})
        + _line("tool_call", id="t5", conversation_id="c1", name="k", arguments='{"b":2,"a":1}')
    )
    assert _took_fast_path(second, tmp_path)
    fast, slow = _ingest_both(tmp_path / "dbs", [[str(first)], [str(second)], [str(second)]])
    _assert_same(fast, slow)
    conflicts = "tool_call 't1' in conversation 'c1'"
    assert [row[1:] for row in fast["ingest_errors"]] == [
        (str(second), 2, None, "id_conflict", conflicts),
        (str(second), 3, None, "id_conflict", "tool_result 't1' in conversation 'c1'"),
        (str(second), 6, None, "id_conflict", "tool_call 't3' in conversation 'c1'"),
    ]
    assert [row[1:6] for row in fast["tool_calls"]] == [
        ("t1", None, 1, "f", '{"n":1.50}'),
        ("t2", None, 3, "g", '{"a": 1}'),
        ("t3", None, 5, "h", '[1,"x"]'),
        ("t4", None, 8, "f", '{"n":2}'),
        ("t5", None, 6, "k", '{"a": 1, "b": 2}'),  # the same JSON value, written otherwise
    ]


def test_the_parsed_arguments_keep_integers_beyond_64_bits_both_ways(tmp_path):
    """The parsed `arguments` column (what SQL on the store reads: `arguments ->> '$.account'`)
    held a 24-digit account number as a double (`1.2345678901234569e23`); only
    `arguments_raw` was exact. Integers of any size are now exact there, both ways; a decimal
    is the number it writes (`1.50` reads as 1.5)."""
    account = "123456789012345678901234"
    path = tmp_path / "big.jsonl"
    path.write_bytes(
        _line("message", id="m1", conversation_id="c1", role="user", text=f"account {account}")
        + _line(
            "tool_call",
            id="t1",
            conversation_id="c1",
            name="lookup",
            arguments=f'{{"account": {account},\n "n": 1.50, "ok": [7, {account}]}}',
        )
        + f'{{"type":"tool_call","id":"t2","conversation_id":"c1","name":"lookup",'
        f'"arguments":{{"account":{account},"n":1.50}}}}\n'.encode()
    )
    assert _took_fast_path(path, tmp_path)
    for fast in (0, None):
        with Store.open(None) as store:
            ingest_paths(store, [str(path)], fast_min_bytes=fast)
            got = store.con.execute(
                "SELECT call_id, arguments ->> '$.account', arguments ->> '$.n',"
                " arguments ->> '$.ok[1]' FROM tool_calls ORDER BY call_id"
            ).fetchall()
        assert got == [("t1", account, "1.5", account), ("t2", account, "1.5", None)], fast
