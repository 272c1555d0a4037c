"""Ingesting a file after every step of its growth writes what one ingest of the whole file writes.

A hook that runs `lexkeep ingest SESSION --db store.duckdb` after every turn of a live agent
session ingests the file many times while it grows, often while a line is half written. Each
test here grows a copy of a trace in steps (at line ends, at arbitrary byte offsets, inside a
UTF-8 character), ingesting after each step into store A, ingests the whole file once into
store B, and compares every table an ingest writes row for row (ingest_runs aside: it holds one
row per ingest). Both stores read the file at the same path, since rows record it.
"""

from __future__ import annotations

import hashlib
import subprocess
import sys
from collections import Counter
from dataclasses import replace
from pathlib import Path

import pytest
from conftest import FIXTURES, INGEST_TABLES, ingest_rows, position_holes, shared_data
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from lexkeep.core.errors import InputError
from lexkeep.core.ingest import ingest_paths
from lexkeep.core.rules import default_rules
from lexkeep.core.store import Store

# The extractor's budget is wall time; a generous one keeps both stores' scans complete on a
# busy machine, so the identifier tables compare like the rest. Loaded once for every ingest.
RULES = replace(default_rules(), timeout=10.0)
LIBRARY = {"rules": RULES, "read_ahead_min_bytes": None}
GENERATE = Path(__file__).resolve().parent.parent / "benchmarks" / "generate.py"


def store_tables(store: Store) -> dict[str, list[tuple]]:
    """Every ingest table but ingest_runs, without ingest_errors' link to an ingest_runs row."""
    rows = ingest_rows(store)
    del rows["ingest_runs"]
    rows["ingest_errors"] = sorted(row[1:] for row in rows["ingest_errors"])
    return rows


def table_diff(grown: dict[str, list[tuple]], once: dict[str, list[tuple]]) -> str:
    """The rows only the grown store (A) or only the store read once (B) holds, per table."""
    out = []
    for table in (t for t in INGEST_TABLES if t != "ingest_runs"):
        a, b = Counter(map(repr, grown[table])), Counter(map(repr, once[table]))
        if a == b:
            continue
        out.append(f"{table}: {len(grown[table])} rows grown, {len(once[table])} read once")
        out += [f"  grown only: {row[:400]}" for row in sorted((a - b).elements())[:5]]
        out += [f"  once only:  {row[:400]}" for row in sorted((b - a).elements())[:5]]
    return "\n".join(out)


def ingest_once(live: Path, data: bytes, db: Path, **options: object) -> dict[str, list[tuple]]:
    """Write all of `data` to `live`, ingest it into a new store at `db`; its tables."""
    live.parent.mkdir(parents=True, exist_ok=True)
    live.write_bytes(data)
    with Store.open(db) as store:
        ingest_paths(store, [str(live)], **{**LIBRARY, **options})
        return store_tables(store)


def ingest_growing(
    live: Path, data: bytes, cuts: list[int], db: Path, **options: object
) -> dict[str, list[tuple]]:
    """Grow `live` from empty to `data`, ending a step at each of `cuts` (and at the end),
    ingesting after each step into a new store at `db`; its tables.

    A step may leave a JSON document unfinished: that ingest is refused as documented
    (`truncated_document`, nothing written) and a later one reads it. Any other error fails.
    """
    live.parent.mkdir(parents=True, exist_ok=True)
    live.write_bytes(b"")
    done = 0
    with Store.open(db) as store:
        for cut in [*sorted({c for c in cuts if 0 < c < len(data)}), len(data)]:
            with live.open("ab") as out:
                out.write(data[done:cut])
            done = cut
            try:
                ingest_paths(store, [str(live)], **{**LIBRARY, **options})
            except InputError as exc:
                assert "still being written" in str(exc) and cut < len(data), str(exc)
        return store_tables(store)


# What one ingest of a whole file stores, by file name, content and options: the tests and
# Hypothesis examples that grow the same trace compare against it, so it is read once per test
# process, not once per example. Rows record the file's path, so the file keeps the path it was
# first read at: every grown copy is written there too.
_READ_ONCE: dict[tuple[str, bytes, str], tuple[Path, dict[str, list[tuple]]]] = {}


def read_once(
    tmp_path: Path, name: str, data: bytes, **options: object
) -> tuple[Path, dict[str, list[tuple]]]:
    """The path of the file `name` holding `data`, and what one ingest of it stores."""
    key = (name, hashlib.sha256(data).digest(), repr(sorted(options.items())))
    if key not in _READ_ONCE:
        live = tmp_path / "live" / name
        _READ_ONCE[key] = (live, ingest_once(live, data, tmp_path / "once.duckdb", **options))
    return _READ_ONCE[key]


def assert_same(tmp_path: Path, name: str, data: bytes, cuts: list[int], **options: object):
    """Grown in steps at `cuts` or read once, the file `name` holding `data` stores the same."""
    live, once = read_once(tmp_path, name, data, **options)
    grown = ingest_growing(live, data, cuts, tmp_path / "grown.duckdb", **options)
    diff = table_diff(grown, once)
    assert not diff, f"{name} grown at {sorted(set(cuts))[:20]}…:\n{diff}"
    return once


def lexkeep_line(kind: str, **fields: object) -> str:
    """One lexkeep JSONL record."""
    import json

    return json.dumps({"type": kind, **fields}, ensure_ascii=False) + "\n"


def line_ends(data: bytes) -> list[int]:
    """The offset after each newline of `data`."""
    return [i + 1 for i, byte in enumerate(data) if byte == 0x0A]


# -- what growing found --------------------------------------------------------------------


def test_a_conversation_keeps_its_first_and_last_time_when_an_append_is_older(tmp_path):
    """A line appended with an earlier time (a resumed or copied session) widens the
    conversation's times; it does not move last_time back, as one ingest would not."""
    data = (
        lexkeep_line(
            "message",
            id="m1",
            conversation_id="c",
            role="user",
            text="a",
            time="2025-01-01T10:00:00Z",
        )
        + lexkeep_line(
            "message",
            id="m2",
            conversation_id="c",
            role="assistant",
            text="b",
            time="2025-01-01T12:00:00Z",
        )
        + lexkeep_line(
            "message",
            id="m3",
            conversation_id="c",
            role="user",
            text="c",
            time="2025-01-01T11:00:00Z",
        )
    ).encode()
    once = assert_same(tmp_path, "times.jsonl", data, line_ends(data))
    [conv] = once["conversations"]
    assert conv[4:6] == ("2025-01-01T10:00:00Z", "2025-01-01T12:00:00Z")


def claude_data(name: str) -> Path:
    """A file of the shared corpus's Claude Code test data."""
    return shared_data() / "claude-code-log" / "test" / "test_data" / name


def test_a_claude_response_split_over_lines_keeps_its_later_parts(tmp_path):
    """Claude Code writes one response as several lines (one per content block). An ingest
    between two of them stored the response as far as it went; the next one completes it."""
    path = claude_data(
        "real_projects/-experiments-ideas/03eb5929-52b3-4b13-ada3-b93ae35806b8.jsonl"
    )
    data = path.read_bytes()
    once = assert_same(tmp_path, path.name, data, spread(line_ends(data), 30))
    texts = {row[0]: row[7] for row in once["messages"]}
    assert texts[f"{path.stem}:msg_01CAgUXyPMrcZLbyeRW4W25K"].strip()  # text from a later part


def test_a_claude_compaction_keeps_the_summary_written_on_the_next_line(tmp_path):
    """A compact_boundary line is followed by the isCompactSummary line holding its summary;
    an ingest between the two stored the boundary without it, the next one adds it."""
    path = claude_data("dag_compact_after_rewind.jsonl")
    data = path.read_bytes()
    once = assert_same(tmp_path, path.name, data, line_ends(data))
    [boundary] = once["boundaries"]
    assert boundary[5].startswith("This session is being continued")


def run_cli(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """`lexkeep ARGS...` in a subprocess, as a hook runs it."""
    return subprocess.run(
        [sys.executable, "-m", "lexkeep.cli.main", *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        timeout=120,
    )


def test_a_session_whose_first_line_is_half_written_is_left_for_a_later_ingest(tmp_path):
    """The hook may run right after the agent started its file: an incomplete first line is
    nothing to read yet (exit 0, nothing recorded), not `not a recognised trace format`."""
    path = claude_data("dag_simple.jsonl")
    data = path.read_bytes()
    live = tmp_path / path.name
    live.write_bytes(data[: data.index(b"\n") // 2])
    got = run_cli("ingest", str(live), "--db", "s.duckdb", cwd=tmp_path)
    assert got.returncode == 0, got.stderr
    assert "first line is not complete" in got.stderr
    live.write_bytes(data)
    got = run_cli("ingest", str(live), "--db", "s.duckdb", cwd=tmp_path)
    assert got.returncode == 0 and "ingested (claude)" in got.stderr, got.stderr


def test_a_run_record_read_before_its_messages_moves_to_its_first_message(tmp_path):
    """A lexkeep run record ends the file at one ingest, its messages come with the next: the
    run sits at its first message, as one ingest of the whole file puts it."""
    data = (FIXTURES / "lexkeep" / "runs.jsonl").read_bytes()
    once = assert_same(tmp_path, "runs.jsonl", data, line_ends(data))
    assert [(row[0], row[3], row[5]) for row in once["runs"]] == [("r1", 0, 2), ("r2", 2, 5)]


@pytest.mark.parametrize(
    "name", ["anthropic/messages.jsonl", "request_logs/anthropic_compaction.jsonl"]
)
def test_an_anthropic_log_first_read_from_a_short_head_ends_as_one_read(tmp_path, name):
    """With one line, a bare chat message reads as OpenAI and a request log's conversation
    starts at its first request; once the file grew, the conversation has the format and the
    source line (its last conversation record) one ingest of the whole file gives it."""
    data = (FIXTURES / name).read_bytes()
    once = assert_same(tmp_path, Path(name).name, data, line_ends(data))
    assert {row[1] for row in once["conversations"]} == {"anthropic"}


def test_a_json_document_ingested_with_skip_invalid_while_written_ends_as_one_read(tmp_path):
    """A tau-bench results file (one JSON array) ingested by a hook with --skip-invalid while
    the writer is inside a value: the values complete so far are stored, the cut one waits,
    and once the file is whole the store holds what one read holds, ingest_errors included
    (it used to keep a `truncated_document` row per incomplete read)."""
    import json

    # Three runs of the corpus (one per file there) as the array a run of several tasks writes.
    results = shared_data() / "apollo-tau-bench" / "tau" / "results"
    runs = [
        json.loads(
            (
                results / f"tool-calling-gpt-4o-mini-0.0_range_0-1_user-gpt-4o-llm_{n}.json"
            ).read_bytes()
        )[0]
        for n in (1010154042, 1010154043, 1010154127)
    ]
    data = json.dumps(runs, indent=2).encode()
    starts = [i for i in range(len(data)) if data.startswith(b'"task_id"', i)]
    cuts = [*starts, len(data) // 2, len(data) - 3]
    once = assert_same(tmp_path, "results.json", data, cuts, skip_invalid=True)
    assert len(once["conversations"]) == 3 and len(once["messages"]) > 60


# -- every format, grown at line ends and anywhere -----------------------------------------

CLAUDE = "claude-code-log/test/test_data/"
# (corpus, path, ingest options): real traces of each format, small enough to grow in many
# steps; each with something that spans lines or needs state from earlier lines.
TRACES = [
    # split responses (one line per content block), tool calls and results
    (
        "shared",
        CLAUDE + "real_projects/-experiments-ideas/03eb5929-52b3-4b13-ada3-b93ae35806b8.jsonl",
        {},
    ),
    ("shared", CLAUDE + "dag_compact_after_rewind.jsonl", {}),  # compact_boundary + summary
    ("shared", CLAUDE + "edge_cases.jsonl", {"skip_invalid": True}),  # bad lines, UTF-8
    ("shared", CLAUDE + "sidechain.jsonl", {}),  # inline sub-agent chains
    (
        "shared",
        CLAUDE + "teammates/ef000000-0000-4000-8000-000000000001/subagents/"
        "agent-aaaa111111111111.jsonl",
        {},
    ),
    (
        "shared",
        CLAUDE + "codex/sessions/2026/01/02/"
        "rollout-2026-01-02T03-04-05-11111111-1111-4111-8111-111111111111.jsonl",
        {},
    ),
    (
        "shared",
        CLAUDE + "codex/malformed/rollout-66666666-6666-4666-8666-666666666666.jsonl",
        {"skip_invalid": True},
    ),
    (
        "shared",
        "apollo-tau-bench/tau/results/"
        "tool-calling-gpt-4o-mini-0.0_range_0-1_user-gpt-4o-llm_1010154306.json",
        {},
    ),
    ("fixtures", "codex/wrapped_compactions.jsonl", {}),  # local and remote compactions
    ("fixtures", "lexkeep/invoice.jsonl", {}),
    ("fixtures", "lexkeep/runs.jsonl", {}),
    ("fixtures", "openai/chats.jsonl", {}),
    ("fixtures", "anthropic/messages.jsonl", {}),
    ("fixtures", "request_logs/anthropic_compaction.jsonl", {}),
]
TRACE_IDS = [Path(path).name[:40] for _, path, _ in TRACES]
# Grown at line ends by the tests above already.
AT_LINE_ENDS = [
    t
    for t in TRACES
    if t[1]
    not in {p for _, p, _ in TRACES[:2]}
    | {"lexkeep/runs.jsonl", "anthropic/messages.jsonl", "request_logs/anthropic_compaction.jsonl"}
]


def trace(corpus: str, path: str) -> Path:
    """A trace of the shared corpus or of the test fixtures."""
    return (shared_data() if corpus == "shared" else FIXTURES) / path


def mid_character(data: bytes) -> list[int]:
    """Offsets that fall inside a UTF-8 character (before a continuation byte)."""
    return [i for i, byte in enumerate(data) if byte & 0xC0 == 0x80]


def spread(offsets: list[int], most: int) -> list[int]:
    """At most `most` of `offsets`, evenly spread."""
    if len(offsets) <= most:
        return offsets
    step = len(offsets) / most
    return [offsets[int(i * step)] for i in range(most)]


@pytest.mark.parametrize(
    ("corpus", "path", "options"), AT_LINE_ENDS, ids=[Path(t[1]).name[:40] for t in AT_LINE_ENDS]
)
def test_grown_at_line_ends_stores_what_one_ingest_stores(tmp_path, corpus, path, options):
    data = trace(corpus, path).read_bytes()
    assert_same(tmp_path, Path(path).name, data, spread(line_ends(data), 30), **options)


@settings(
    max_examples=2,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(choice=st.data())
@pytest.mark.parametrize(("corpus", "path", "options"), TRACES, ids=TRACE_IDS)
def test_grown_anywhere_stores_what_one_ingest_stores(
    tmp_path_factory, corpus, path, options, choice
):
    """Steps end at arbitrary bytes: inside a line, a string, an escape, a UTF-8 character."""
    data = trace(corpus, path).read_bytes()
    anywhere = st.integers(1, len(data) - 1)
    inside = mid_character(data)
    cuts = choice.draw(st.lists(anywhere, min_size=1, max_size=4), label="cuts")
    if inside:
        cuts += choice.draw(st.lists(st.sampled_from(inside), max_size=1), label="mid-char")
    assert_same(tmp_path_factory.mktemp("any"), Path(path).name, data, cuts, **options)


def test_grown_in_one_huge_step_stores_what_one_ingest_stores(tmp_path):
    """The first ingest sees half a line; the next one the whole rest of the file."""
    _, path, _ = TRACES[0]
    data = trace("shared", path).read_bytes()
    assert_same(tmp_path, Path(path).name, data, [data.index(b"\n") + 100])


def test_grown_one_byte_at_a_time_stores_what_one_ingest_stores(tmp_path):
    data = (
        lexkeep_line("message", id="m", conversation_id="c", role="user", text="Nº 8JX2QD")
        + lexkeep_line("message", id="n", conversation_id="c", role="assistant", text="✓")
    ).encode()
    assert len(data) < 200 and mid_character(data)
    once = assert_same(tmp_path, "bytes.jsonl", data, list(range(1, len(data))))
    assert [row[3] for row in once["identifiers"]] == ["8JX2QD"]


@pytest.fixture(scope="module")
def dumps(tmp_path_factory) -> dict[str, Path]:
    """The largest session file of a small generated dump of each format."""
    out = {}
    for fmt in ("lexkeep", "claude", "codex"):
        folder = tmp_path_factory.mktemp(f"dump-{fmt}")
        proc = subprocess.run(
            [sys.executable, str(GENERATE), "--format", fmt, "--size", "20KB", "--out", str(folder)]
            + ["--seed", "5"],
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert proc.returncode == 0, proc.stderr
        out[fmt] = max(folder.rglob("*.jsonl"), key=lambda p: p.stat().st_size)
    return out


@pytest.mark.parametrize("fmt", ["lexkeep", "claude", "codex"])
def test_a_grown_generated_dump_stores_what_one_ingest_stores(tmp_path, dumps, fmt):
    data = dumps[fmt].read_bytes()
    ends = line_ends(data)
    cuts = spread(ends, 4) + [ends[len(ends) // 3] - 7, ends[len(ends) // 2] + 11]
    once = assert_same(tmp_path, dumps[fmt].name, data, cuts)
    assert once["boundaries"] and once["identifiers"]


def test_a_big_lexkeep_file_loaded_by_duckdb_first_then_grown(tmp_path, dumps):
    """The first ingest of a big lexkeep JSONL file takes the DuckDB fast path (here from 0
    bytes up, as tests/test_ingest_fast.py lowers it), later ones the per-line path: the
    store is what one per-line ingest of the whole file writes."""
    data = dumps["lexkeep"].read_bytes()
    ends = line_ends(data)
    live = tmp_path / "live" / "dump.jsonl"
    once = ingest_once(live, data, tmp_path / "once.duckdb", fast_min_bytes=None)
    cuts = [ends[len(ends) // 2], ends[len(ends) // 2] + 30, ends[-3] + 2]
    grown = ingest_growing(live, data, cuts, tmp_path / "grown.duckdb", fast_min_bytes=0)
    assert not table_diff(grown, once), table_diff(grown, once)
    with Store.open(tmp_path / "grown.duckdb", read_only=True) as store:
        first = store.con.execute("SELECT lines_consumed FROM ingest_runs ORDER BY id").fetchall()
    assert first[0] == (len(ends) // 2 + 1,)  # the first ingest consumed half the file at once


def test_two_sessions_growing_side_by_side_store_what_one_ingest_stores(tmp_path):
    """Two live sessions, each written a few lines at a time, ingested together and in turn."""
    sources = [trace(c, p).read_bytes() for c, p, _ in (TRACES[0], TRACES[5])]
    names = [Path(TRACES[0][1]).name, Path(TRACES[5][1]).name]
    lives = [tmp_path / "live" / name for name in names]
    (tmp_path / "live").mkdir()
    for live, data in zip(lives, sources, strict=True):
        live.write_bytes(data)
    with Store.open(tmp_path / "once.duckdb") as store:
        ingest_paths(store, [str(p) for p in lives], **LIBRARY)
        once = store_tables(store)
    steps = [spread(line_ends(data), 8) + [len(data) // 3, len(data)] for data in sources]
    for live in lives:
        live.write_bytes(b"")
    with Store.open(tmp_path / "grown.duckdb") as store:
        for i in range(max(map(len, steps))):
            for live, data, cuts in zip(lives, sources, steps, strict=True):
                if i < len(cuts):
                    live.write_bytes(data[: sorted(cuts)[i]])
            together = [str(p) for p in lives] if i % 2 else [str(lives[i % 4 // 2])]
            ingest_paths(store, together, **LIBRARY)
        ingest_paths(store, [str(p) for p in lives], **LIBRARY)
        grown = store_tables(store)
    assert not table_diff(grown, once), table_diff(grown, once)


def test_a_rewritten_file_that_grows_again_stores_what_one_ingest_stores(tmp_path):
    """docs/formats.md: a file whose first bytes changed is read again whole and records
    already stored are skipped, taking no position. A session cut back (rewritten shorter)
    and then written on to its end stores what one ingest of the end state stores."""
    _, path, _ = TRACES[0]
    data = trace("shared", path).read_bytes()
    ends = line_ends(data)
    live, once = read_once(tmp_path, Path(path).name, data)
    live.write_bytes(b"")
    with Store.open(tmp_path / "grown.duckdb") as store:
        for size in (ends[len(ends) // 2] + 5, ends[len(ends) // 4], ends[-5] - 3, len(data)):
            live.write_bytes(data[:size])
            ingest_paths(store, [str(live)], **LIBRARY)
        grown = store_tables(store)
        assert position_holes(store) == []
    assert not table_diff(grown, once), table_diff(grown, once)


def test_a_live_session_ingested_by_the_cli_after_every_step(tmp_path):
    """The hook's own command, in a subprocess per step, mid-line and mid-character included."""
    _, path, _ = TRACES[2]
    data = trace("shared", path).read_bytes()
    live, once = read_once(tmp_path, Path(path).name, data, skip_invalid=True)
    cuts = [data.index(b"\n") // 2, line_ends(data)[3], mid_character(data)[0], len(data) - 9]
    live.write_bytes(b"")
    done = 0
    for cut in [*sorted(cuts), len(data)]:
        with live.open("ab") as out:
            out.write(data[done:cut])
        done = cut
        got = run_cli("ingest", str(live), "--db", "grown.duckdb", "--skip-invalid", cwd=tmp_path)
        assert got.returncode == 0, got.stderr
    with Store.open(tmp_path / "grown.duckdb", read_only=True) as store:
        grown = store_tables(store)
    assert not table_diff(grown, once), table_diff(grown, once)


def test_a_fixed_line_of_a_session_spanning_two_files_takes_its_place(tmp_path):
    """A resumed Claude Code session spans two files (one sessionId). A line of the first file
    skipped by --skip-invalid and fixed since was read again but left after the second file's
    records: a tool call made early in the session counted as made at its end. It now takes
    its place in its file's line order, as one ingest of both fixed files places it."""
    path = CLAUDE + "real_projects/-Users-dain-workspace-claude-code-log-sample/"
    data = trace("shared", path + "937c6e6b-27e7-4edd-86f1-ad28f9731841.jsonl").read_bytes()
    lines = data.splitlines(keepends=True)
    half = len(lines) // 2
    # A line of the first half with a tool call in it, to be broken and then fixed.
    bad = next(i for i in range(half) if b'"tool_use"' in lines[i] and i > 2)
    live = tmp_path / "live"
    live.mkdir()
    first, second = live / "1-session.jsonl", live / "2-resumed.jsonl"
    files = [str(first), str(second)]

    def write(broken: bool) -> None:
        head = list(lines[:half])
        if broken:
            head[bad] = head[bad][: len(head[bad]) // 2] + b"\n"  # cut: invalid JSON
        first.write_bytes(b"".join(head))
        second.write_bytes(b"".join(lines[half:]))

    write(broken=False)
    with Store.open(tmp_path / "once.duckdb") as store:
        ingest_paths(store, files, **LIBRARY)
        once = store_tables(store)
        [(conversations,)] = store.con.execute("SELECT count(*) FROM conversations").fetchall()
        assert conversations == 1  # one conversation from the two files
    write(broken=True)
    with Store.open(tmp_path / "fixed.duckdb") as store:
        ingest_paths(store, files, skip_invalid=True, **LIBRARY)
        write(broken=False)
        ingest_paths(store, files, skip_invalid=True, **LIBRARY)
        fixed = store_tables(store)
        # The fixed line's tool call stands among its file's records, not after the second's.
        [(position,)] = store.con.execute(
            "SELECT position FROM tool_calls WHERE source_file = ? AND source_line = ?",
            [str(first), bad + 1],
        ).fetchall()
        [(second_starts,)] = store.con.execute(
            "SELECT min(position) FROM messages WHERE source_file = ?", [str(second)]
        ).fetchall()
        assert position < second_starts
        assert position_holes(store) == []
    assert not table_diff(fixed, once), table_diff(fixed, once)


def test_a_fixed_line_moves_alone_when_files_interleave(tmp_path):
    """Only the fixed line moves: a line its file gained after another file's records were
    stored (here a compaction) stays after them, so a call made after the compaction is not
    counted as made before it."""
    a, b = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    user = lexkeep_line(
        "message", id="m1", conversation_id="c1", role="user", text="look up ORD_88412"
    )
    early = lexkeep_line(
        "tool_call", id="t1", conversation_id="c1", name="f", arguments='{"o": "ORD_88412"}'
    )
    answer = lexkeep_line("message", id="m2", conversation_id="c1", role="assistant", text="ok")
    late = lexkeep_line(
        "tool_call", id="t2", conversation_id="c1", name="f", arguments='{"o": "ORD_88412"}'
    )
    with Store.open(tmp_path / "s.duckdb") as store:
        a.write_text(user + early[:20] + "\n" + answer)  # line 2 broken
        ingest_paths(store, [str(a)], skip_invalid=True, **LIBRARY)
        b.write_text(lexkeep_line("compaction", id="b1", conversation_id="c1", summary="s"))
        ingest_paths(store, [str(b)], **LIBRARY)
        a.write_text(user + early[:20] + "\n" + answer + late)  # grew after the compaction
        ingest_paths(store, [str(a)], skip_invalid=True, **LIBRARY)
        a.write_text(user + early + answer + late)  # line 2 fixed: read again from the start
        ingest_paths(store, [str(a)], skip_invalid=True, **LIBRARY)
        order = store.con.execute(
            "SELECT source_file, source_line FROM (SELECT position, source_file, source_line"
            " FROM messages UNION ALL SELECT position, source_file, source_line FROM tool_calls"
            " UNION ALL SELECT position, source_file, source_line FROM boundaries)"
            " ORDER BY position"
        ).fetchall()
        assert order == [(str(a), 1), (str(a), 2), (str(a), 3), (str(b), 1), (str(a), 4)]
        assert position_holes(store) == []
