"""Ctrl-C during a long ingest: one line, exit 130, no worker tracebacks, a usable store.

A terminal's Ctrl-C signals the whole process group: the command, its reading workers and its
extraction workers. The workers ignore it (their parent stops them), and DuckDB's own answer
to the signal inside a query reads as the same interruption.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from lexkeep.core.store import Store

REPO = Path(__file__).resolve().parent.parent
GENERATE = REPO / "benchmarks" / "generate.py"


@pytest.mark.skipif(not hasattr(os, "killpg"), reason="process groups are POSIX")
def test_ctrl_c_during_a_folder_ingest(tmp_path: Path) -> None:
    dump = tmp_path / "dump"
    made = subprocess.run(
        [sys.executable, str(GENERATE), "--format", "claude", "--size", "96MB", "--out", str(dump)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert made.returncode == 0, made.stderr
    db = tmp_path / "s.duckdb"
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "lexkeep.cli.main",
            "ingest",
            str(dump / "projects"),
            "--db",
            str(db),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )
    assert proc.stderr is not None
    # Files are listed as their group commits (64 MB): the first line means a second group
    # is being read, extracted or written, with its workers running.
    first = proc.stderr.readline()
    assert b": ingested (claude)" in first, first
    os.killpg(proc.pid, signal.SIGINT)
    rest = proc.stderr.read()
    assert proc.wait(timeout=60) == 130
    assert rest.endswith(b"Interrupted.\n"), rest[-2000:]
    assert b"Traceback" not in rest and b"internal error" not in rest
    with Store.open(str(db), read_only=True) as store:
        runs = store.con.execute("SELECT count(*), sum(messages) FROM ingest_runs").fetchone()
        rows = store.con.execute("SELECT count(*) FROM messages").fetchone()[0]
    assert runs[0] > 0 and rows == runs[1]  # whole groups only: every file's rows or none


@pytest.mark.skipif(not hasattr(os, "killpg"), reason="process groups are POSIX")
def test_ctrl_c_during_an_ingest_prints_the_totals_of_what_was_stored(tmp_path: Path) -> None:
    # The file is stored first; then the ingest waits on standard input (a pipe kept open)
    # until Ctrl-C comes.
    trace = REPO / "tests" / "fixtures" / "lexkeep" / "invoice.jsonl"
    db = tmp_path / "s.duckdb"
    proc = subprocess.Popen(
        [sys.executable, "-m", "lexkeep.cli.main", "ingest", str(trace), "-", "--db", str(db)],
        stdin=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )
    assert proc.stderr is not None and proc.stdin is not None
    try:
        first = proc.stderr.readline()
        assert first.startswith(f"{trace}: ingested (lexkeep) 1 conversation,".encode()), first
        os.killpg(proc.pid, signal.SIGINT)
        rest = proc.stderr.read().decode()
        assert proc.wait(timeout=60) == 130
    finally:
        proc.stdin.close()
        if proc.poll() is None:
            proc.kill()
    assert rest == (
        "1 file: 1 ingested, 0 unchanged, 0 not traces; 7 messages, 3 tool calls\n"
        "interrupted: the files above were stored before Ctrl-C; the ones being read then"
        " were not (ingest them again to add them)\n"
        "Interrupted.\n"
    ), rest
    with Store.open(str(db), read_only=True) as store:
        assert store.con.execute("SELECT count(*) FROM messages").fetchone()[0] == 7
