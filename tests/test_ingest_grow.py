"""Ingesting a file after every step of its growth writes what one ingest of the whole file writes.

A hook that runs `lexkeep ingest SESSION --db store.duckdb` after every turn of a live agent
session ingests the file many times while it grows, often while a line is half written. Each
test here grows a copy of a trace in steps (at line ends, at arbitrary byte offsets, inside a
UTF-8 character), ingesting after each step into store A, ingests the whole file once into
store B, and compares every table an ingest writes row for row (ingest_runs aside: it holds one
row per ingest). Both stores read the file at the same path, since rows record it.
"""

from __future__ import annotations

import subprocess
import sys
from collections import Counter
from dataclasses import replace
from pathlib import Path

import pytest
from conftest import FIXTURES, INGEST_TABLES, ingest_rows, shared_data

from lexkeep.core.errors import InputError
from lexkeep.core.ingest import ingest_paths
from lexkeep.core.rules import default_rules
from lexkeep.core.store import Store

# The extractor's budget is wall time; a generous one keeps both stores' scans complete on a
# busy machine, so the identifier tables compare like the rest. Loaded once for every ingest.
RULES = replace(default_rules(), timeout=10.0)
LIBRARY = {"rules": RULES, "read_ahead_min_bytes": None}


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


def assert_same(tmp_path: Path, name: str, data: bytes, cuts: list[int], **options: object):
    """Grown in steps at `cuts` or read once, the file `name` holding `data` stores the same."""
    live = tmp_path / "live" / name
    once = ingest_once(live, data, tmp_path / "once.duckdb", **options)
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
    once = assert_same(tmp_path, path.name, data, line_ends(data))
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
