"""Points 5 and 7 with real processes: while a `command:` summary runs, the store is free for
`lexkeep context`, `stats` and a second `lexkeep compact` (which leaves the leased range alone);
a process holding the store makes `compact` stop with a clear message; a worker killed with
SIGKILL mid-summary leaves a lease that expires and counts as a failed attempt, and the store is
otherwise unchanged; Ctrl-C during a `command:` summary leaves none of the summariser's
processes running; Ctrl-C or another slot's error during a stalled `openai` call ends it at
once and gives its claim back."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from test_compaction_support import SUMMARY_BODY, StallingOpenAI, TerminalReader, build, gone

from lexkeep.core.store import Store

SLEEPER = """\
import os, sys, time
marker, fast = sys.argv[1], sys.argv[2]
data = sys.stdin.read()
if os.path.exists(fast):
    print("summary after a restart")
    sys.exit(0)
with open(marker, "w") as fh:
    fh.write(str(os.getpid()))
time.sleep(120)
"""


def lexkeep(*args: str, **kwargs) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "lexkeep.cli.main", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        **kwargs,
    )


def wait_for_completed(db: Path, seconds: float) -> None:
    """Wait until a running `compact` has recorded a completed range in `db` (it opens the
    store only to record, so a read-only open between two of its writes succeeds)."""
    import duckdb

    deadline = time.monotonic() + seconds
    while True:
        with contextlib.suppress(duckdb.IOException):
            con = duckdb.connect(str(db), read_only=True)
            try:
                query = "SELECT count(*) FROM compactions WHERE status = 'completed'"
                if con.execute(query).fetchone()[0]:
                    return
            finally:
                con.close()
        if time.monotonic() > deadline:
            pytest.fail(f"no range of {db} completed within {seconds} s")
        time.sleep(0.05)


def wait_for_second_call(calls: Path, worker: subprocess.Popen, seconds: float = 60) -> None:
    """Wait until the hanging summariser's second call started (it creates `calls/1`), the
    worker still running."""
    deadline = time.monotonic() + seconds
    while not (calls / "1").exists():
        assert time.monotonic() < deadline, "the second summary did not start"
        assert worker.poll() is None, worker.communicate()
        time.sleep(0.05)


def wait_for(path: Path, seconds: float) -> None:
    deadline = time.monotonic() + seconds
    while not path.exists():
        if time.monotonic() > deadline:
            pytest.fail(f"{path} did not appear within {seconds} s")
        time.sleep(0.05)


@pytest.mark.skipif(sys.platform == "win32", reason="SIGKILL and process groups are POSIX")
def test_store_is_free_during_summaries_and_killed_worker_lease_expires(tmp_path):
    db = tmp_path / "store.duckdb"
    with Store.open(db) as store:
        build(store, {"c1": 30})
        before = store.con.execute("SELECT * FROM messages ORDER BY id").fetchall()
        runs_before = store.con.execute("SELECT * FROM runs ORDER BY id").fetchall()
    script = tmp_path / "sleeper.py"
    script.write_text(SLEEPER, encoding="utf-8")
    marker, fast = tmp_path / "marker", tmp_path / "fast"
    spec = f'command:"{sys.executable} {script} {marker} {fast}"'
    # The lease must outlast the summariser's start and the three commands run below while it
    # holds, each a new process. A 20 s lease ran out before the second compact claimed on a
    # machine at load 15-20 (other test files run beside this one): the lease is long, and
    # the test ends it itself once the dead worker's claim has been checked (below).
    lease = 600
    common = ["--db", str(db), "--summarizer", spec, "--lease-seconds", str(lease)]
    common += ["--timeout", "120"]

    # a new session, so the kill reaches the worker and nothing else of the test's; the
    # summariser runs in a session of its own and is killed by the pid it recorded
    worker = lexkeep("compact", *common, start_new_session=True)
    try:
        wait_for(marker, 60)

        # the summary runs with the store closed: readers need not wait at all ...
        env = {**os.environ, "LEXKEEP_LOCK_WAIT": "0"}
        for args in (["context", "c1", "--budget-bytes", "100000"], ["stats"]):
            reader = lexkeep(*args, "--db", str(db), env=env)
            out, err = reader.communicate(timeout=60)
            assert reader.returncode == 0, (args, err)
        # ... and a second compact runs, leaving the range the first one leased alone
        second = lexkeep("compact", "--db", str(db), "--format", "json", env=env)
        out, err = second.communicate(timeout=60)
        assert second.returncode == 0, err
        report = json.loads(out)
        assert (report["claimed"], report["skipped"]) == (0, 1), report
    finally:
        os.killpg(worker.pid, signal.SIGKILL)
        worker.communicate()
        if marker.exists():
            with contextlib.suppress(ProcessLookupError, ValueError):
                os.kill(int(marker.read_text()), signal.SIGKILL)
    assert worker.returncode == -signal.SIGKILL

    with Store.open(db) as store:
        row = store.con.execute(
            "SELECT status, attempts, summary, lease_owner IS NOT NULL, "
            "lease_expires_at - claimed_at FROM compactions"
        ).fetchone()
        # a claim with the lease it was given, nothing else
        assert row[:4] == ("running", 1, None, True)
        assert row[4] == pytest.approx(lease, abs=0.01), row
        assert store.con.execute("SELECT count(*) FROM boundaries").fetchone()[0] == 0
        assert store.con.execute("SELECT * FROM messages ORDER BY id").fetchall() == before
        assert store.con.execute("SELECT * FROM runs ORDER BY id").fetchall() == runs_before
        # The dead worker's lease runs out in a moment, not in ten minutes: as if it had
        # been given one that ends now.
        expires = time.time() + 0.2
        store.con.execute("UPDATE compactions SET lease_expires_at = ?", [expires])

    # after the lease expires, the next run counts the dead attempt as failed and tries again
    while time.time() <= expires:
        time.sleep(0.05)
    fast.write_text("go", encoding="utf-8")
    third = lexkeep("compact", *common)
    out, err = third.communicate(timeout=120)
    assert third.returncode == 0, err
    assert "completed 1" in out
    with Store.open(db) as store:
        assert store.con.execute(
            "SELECT attempt, outcome FROM compaction_attempts ORDER BY attempt"
        ).fetchall() == [(1, "lease_expired"), (2, "completed")]
        assert store.con.execute(
            "SELECT status, attempts, summary FROM compactions"
        ).fetchone() == (
            "completed",
            2,
            "summary after a restart",
        )
        assert store.con.execute("SELECT * FROM messages ORDER BY id").fetchall() == before


@pytest.mark.skipif(sys.platform == "win32", reason="DuckDB's lock message names a POSIX pid")
def test_compact_stops_when_another_process_holds_the_store(tmp_path):
    db = tmp_path / "store.duckdb"
    with Store.open(db) as store:
        build(store, {"c1": 30})
        # this process holds the file; compact waits its LEXKEEP_LOCK_WAIT, then stops
        env = {**os.environ, "LEXKEEP_LOCK_WAIT": "0.3"}
        second = lexkeep("compact", "--db", str(db), env=env)
        out, err = second.communicate(timeout=60)
        assert second.returncode == 2, err
        assert "in use by another lexkeep process" in err and f"PID {os.getpid()}" in err, err
        assert "waited 0.3 s" in err, err
        assert out == ""
        assert store.con.execute("SELECT count(*) FROM compactions").fetchone() == (0,)


WRAPPER = """\
cat >/dev/null
if [ -e "$1/.fail" ]; then echo "not today" >&2; exit 1; fi
sleep 60 &
echo "$$ $!" > "$1/.$$" && mv "$1/.$$" "$1/$$"
wait
"""


@pytest.mark.skipif(sys.platform == "win32", reason="SIGINT and process groups are POSIX")
@pytest.mark.parametrize("workers", [1, 2])
def test_ctrl_c_during_command_summaries_stops_the_summarisers_whole_groups(tmp_path, workers):
    db = tmp_path / "store.duckdb"
    with Store.open(db) as store:
        build(store, {"c1": 40})  # two segments: with two slots, both are summarised at once
    script = tmp_path / "wrapper.sh"
    script.write_text(WRAPPER, encoding="utf-8")
    pids_dir = tmp_path / "pids"
    pids_dir.mkdir()
    spec = f'command:"sh {script} {pids_dir}"'
    args = ["--db", str(db), "--summarizer", spec, "--workers", str(workers), "--timeout", "60"]
    # A first run fails each range once (a counted attempt); the interrupted second attempts
    # must leave that as it was, not exhaust the ranges.
    (pids_dir / ".fail").touch()
    first = lexkeep("compact", *args)
    _, err = first.communicate(timeout=60)
    assert first.returncode == 1, err
    (pids_dir / ".fail").unlink()
    with Store.open(db, read_only=True) as store:
        query = "SELECT from_pair, status, attempts, last_error, lease_owner FROM compactions"
        before = store.con.execute(query + " ORDER BY from_pair").fetchall()
        attempts_before = store.con.execute("SELECT * FROM compaction_attempts").fetchall()
    assert [r[1:3] for r in before] == [("failed", 1)] * 2, before
    # lexkeep leads its own group, as a shell's foreground job does
    worker = lexkeep("compact", *args, start_new_session=True)
    pids: list[int] = []
    try:
        deadline = time.monotonic() + 60
        while len(started := [f for f in pids_dir.iterdir() if f.name[0] != "."]) < workers:
            assert time.monotonic() < deadline, "the summarisers did not start"
            time.sleep(0.05)
        for f in started:
            pids += map(int, f.read_text(encoding="utf-8").split())  # the shell, its child
        os.killpg(worker.pid, signal.SIGINT)  # what a terminal's Ctrl-C does
        out, err = worker.communicate(timeout=30)
        assert worker.returncode == 130, err
        assert err.endswith("Interrupted.\n"), err
        for pid in pids:
            assert gone(pid, 5), f"summariser process {pid} outlived the interrupted run"
    finally:
        if worker.poll() is None:
            os.killpg(worker.pid, signal.SIGKILL)
            worker.communicate()
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
    # no claim is left held until its lease expires, and none counts as an attempt: the
    # interrupted second attempts are given back, the first attempts' failures stay as they were
    with Store.open(db, read_only=True) as store:
        after = store.con.execute(query + " ORDER BY from_pair").fetchall()
        attempts_after = store.con.execute("SELECT * FROM compaction_attempts").fetchall()
    assert after == before
    assert sorted(attempts_after) == sorted(attempts_before)
    assert "claimed 0, completed 0, failed 0" in out, out


# A summariser program's call number `n`, the first not taken (needs `os` and `calls`): two
# slots may start their calls at once, so each takes its number atomically.
TAKE_A_NUMBER = """\
n = 0
os.makedirs(calls + ".taken", exist_ok=True)
while True:
    try:
        os.close(os.open(os.path.join(calls + ".taken", str(n)), os.O_CREAT | os.O_EXCL))
        break
    except FileExistsError:
        n += 1
"""


# Summarises the first segment at once, then hangs on the second until the run is interrupted.
SECOND_HANGS = (
    """\
import os, sys, time
calls = sys.argv[1]
sys.stdin.read()
os.makedirs(calls, exist_ok=True)
"""
    + TAKE_A_NUMBER
    + """\
open(os.path.join(calls, str(n)), "w").close()
if n == 0:
    print("summary of the first segment")
    sys.exit(0)
time.sleep(120)
"""
)


@pytest.mark.skipif(sys.platform == "win32", reason="SIGINT and process groups are POSIX")
@pytest.mark.parametrize(("workers", "fmt"), [(1, "text"), (1, "json"), (2, "text")])
def test_ctrl_c_prints_what_finished_before_it(tmp_path, workers, fmt):
    db = tmp_path / "store.duckdb"
    with Store.open(db) as store:
        build(store, {"c1": 40})  # two segments: the first completes, the second hangs
    script = tmp_path / "second_hangs.py"
    script.write_text(SECOND_HANGS, encoding="utf-8")
    calls = tmp_path / "calls"
    spec = f'command:"{sys.executable} {script} {calls}"'
    args = ["--db", str(db), "--summarizer", spec, "--timeout", "60", "--format", fmt]
    # With two slots both segments are claimed at once; either one may be the call that hangs.
    worker = lexkeep("compact", *args, "--workers", str(workers), start_new_session=True)
    try:
        wait_for_second_call(calls, worker)
        # With two slots the first summary may have ended without the run having recorded it
        # yet: Ctrl-C then cancelled both. Interrupt once it is recorded, as the test intends.
        wait_for_completed(db, 60)
        os.killpg(worker.pid, signal.SIGINT)  # what a terminal's Ctrl-C does
        out, err = worker.communicate(timeout=30)
    finally:
        if worker.poll() is None:
            os.killpg(worker.pid, signal.SIGKILL)
            worker.communicate()
    assert worker.returncode == 130, err  # the documented exit status of an interrupted run
    assert err.endswith("Interrupted.\n"), err
    with Store.open(db) as store:
        rows = store.con.execute(
            "SELECT from_pair, status, last_error FROM compactions ORDER BY from_pair"
        ).fetchall()
    # the hung call's claim was given back (no job, no attempt left of it)
    assert [r[1] for r in rows] == ["completed"], rows
    done = rows[0][0]
    if fmt == "json":
        doc = json.loads(out)
        assert doc["interrupted"] is True
        counts = ("planned", "claimed", "completed", "failed", "remaining")
        assert [doc[k] for k in counts] == [2, 1, 1, 0, 1], doc
        assert [(s["from_pair"], s["outcome"]) for s in doc["segments"]] == [(done, "completed")]
    else:
        lines = out.splitlines()
        assert lines[0] == (
            "1 conversation: planned 2, claimed 1, completed 1, failed 0, skipped 0"
        ), out
        assert "failed:" not in out
        assert lines[-1] == (
            "interrupted: these counts are what finished before Ctrl-C; a call in progress"
            " was abandoned and its claim given back (no attempt was counted), and a later"
            " run takes up the rest"
        ), out


def serve_then_vanish(answers: int) -> str:
    """A chat-completions server on 127.0.0.1 that answers `answers` requests (one at a time,
    a normal stop each) and then goes away: its port refuses every later connection. The
    listening socket is closed before the last answer is sent, so the next request, sent only
    after that answer arrived, is always refused (never half-served)."""
    listener = socket.create_server(("127.0.0.1", 0))
    listener.settimeout(60)
    port = listener.getsockname()[1]
    body = SUMMARY_BODY

    def serve() -> None:
        with contextlib.suppress(OSError):
            for n in range(answers):
                conn, _ = listener.accept()
                with conn:
                    conn.settimeout(30)
                    data = b""
                    while b"\r\n\r\n" not in data:
                        data += conn.recv(65536)
                    head, _, rest = data.partition(b"\r\n\r\n")
                    length = next(
                        int(line.split(b":", 1)[1])
                        for line in head.split(b"\r\n")
                        if line.lower().startswith(b"content-length:")
                    )
                    while len(rest) < length:
                        rest += conn.recv(65536)
                    if n == answers - 1:
                        listener.close()
                    conn.sendall(
                        b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                        + f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n".encode()
                        + body
                    )
        listener.close()

    threading.Thread(target=serve, daemon=True).start()
    return f"http://127.0.0.1:{port}/v1"


VANISHING_PROGRAM = (
    """\
import os, sys
sys.stdin.read()
calls = sys.argv[1]
"""
    + TAKE_A_NUMBER
    + """\
open(os.path.join(calls, str(n)), "w").close()
if n == {answers} - 1:
    os.remove(sys.argv[0])  # the program is gone for every later call
print("Summary: ORD_88400.")
"""
)


@pytest.mark.skipif(sys.platform == "win32", reason="an executable script needs a shebang")
@pytest.mark.parametrize("backend", ["openai", "command"])
@pytest.mark.parametrize("fmt", ["text", "json"])
def test_an_unreachable_summariser_mid_run_still_reports_what_finished(tmp_path, backend, fmt):
    """A summariser that answered two segments and then could not be reached stopped the run
    with exit 2 and only the error: the two summaries were stored, but nothing said so, nor
    how many segments were left for a later run."""
    db = tmp_path / "store.duckdb"
    with Store.open(db) as store:
        build(store, {"c1": 60})  # four segments: 0-9, 10-19, 20-29, 30-39
    if backend == "openai":
        url = serve_then_vanish(2)
        spec = ["--summarizer", "openai", "--base-url", url, "--model", "m"]
        error = f"Error: cannot reach {url}/chat/completions: "
    else:
        program = tmp_path / "summarise"
        program.write_text(
            f"#!{sys.executable}\n" + VANISHING_PROGRAM.replace("{answers}", "2"),
            encoding="utf-8",
        )
        program.chmod(0o755)
        calls = tmp_path / "calls"
        calls.mkdir()
        spec = ["--summarizer", f'command:"{program} {calls}"']
        error = f"Error: cannot run {program}: "
    worker = lexkeep("compact", "--db", str(db), *spec, "--timeout", "30", "--format", fmt)
    out, err = worker.communicate(timeout=120)
    assert worker.returncode == 2, out + err
    assert err.startswith(error), err
    assert "nothing was counted as an attempt" in err or "Hint: check the program" in err, err
    with Store.open(db, read_only=True) as store:
        rows = store.con.execute(
            "SELECT from_pair, status, attempts FROM compactions ORDER BY from_pair"
        ).fetchall()
    assert rows == [(0, "completed", 1), (10, "completed", 1)]  # the third was given back
    if fmt == "json":
        doc = json.loads(out)
        counts = ("planned", "claimed", "completed", "failed", "skipped", "remaining")
        assert [doc[k] for k in counts] == [4, 2, 2, 0, 0, 2], doc
        assert doc["interrupted"] is False
        assert doc["unreachable"] == err.splitlines()[0].removeprefix("Error: ")
        assert [(s["from_pair"], s["outcome"]) for s in doc["segments"]] == [
            (0, "completed"),
            (10, "completed"),
        ]
    else:
        lines = out.splitlines()
        assert lines[0] == (
            "1 conversation: planned 4, claimed 2, completed 2, failed 0, skipped 0"
        ), out
        assert lines[-1] == (
            "stopped: the summariser could not be reached; these counts are what finished"
            " before it; 2 planned segments were not summarised (no attempt was counted),"
            " and a later run takes them up"
        ), out


# Fails or succeeds by a plan, one letter per call (the last letter repeats): s = a summary,
# f = the same failure every time (a wrong model name), d = a failure of its own.
PLANNED_PROGRAM = (
    """\
import os, sys
sys.stdin.read()
calls, plan = sys.argv[1], sys.argv[2]
"""
    + TAKE_A_NUMBER
    + """\
open(os.path.join(calls, str(n)), "w").close()
mode = plan[min(n, len(plan) - 1)]
if mode == "s":
    print("Summary: ORD_88400.")
    sys.exit(0)
if mode == "f":
    sys.stderr.write("Error: Unknown model: gpt-typo\\n")
    sys.exit(1)
sys.stderr.write(f"Error: call {n} went wrong\\n")
sys.exit(1)
"""
)


def run_planned(tmp_path: Path, plan: str, workers: int = 1) -> tuple[int, str, str, Path]:
    db = tmp_path / "store.duckdb"
    with Store.open(db) as store:
        build(store, {"c1": 60})  # four segments: 0-9, 10-19, 20-29, 30-39
    program = tmp_path / "summarise.py"
    program.write_text(PLANNED_PROGRAM, encoding="utf-8")
    calls = tmp_path / "calls"
    calls.mkdir()
    spec = f'command:"{sys.executable} {program} {calls} {plan}"'
    args = ["--db", str(db), "--summarizer", spec, "--timeout", "30", "--workers", str(workers)]
    worker = lexkeep("compact", *args)
    out, err = worker.communicate(timeout=120)
    return worker.returncode, out, err, calls


@pytest.mark.parametrize("workers", [1, 2])
def test_a_summariser_failing_the_same_way_from_its_first_call_stops_the_run(tmp_path, workers):
    """A misconfigured `command:` (a wrong model name, a missing key) fails every call with the
    same error: the run went on through every segment and spent an attempt of each, twice
    over two runs, and the ranges stayed raw for good. The same failure on the first three
    calls, before any success, now stops the run like an unreachable backend: exit 2, those
    claims given back, no attempt counted."""
    code, out, err, calls = run_planned(tmp_path, "f", workers)
    assert code == 2, out + err
    assert err.startswith(
        "Error: the summariser failed the same way on its first 3 calls, before any"
        " succeeded: error: exit status 1: Error: Unknown model: gpt-typo\n"
    ), err
    assert "Hint: " in err and "nothing was counted as an attempt" in err, err
    lines = out.splitlines()
    assert lines[0] == "1 conversation: planned 4, claimed 0, completed 0, failed 0, skipped 0"
    assert lines[-1] == (
        "stopped: the summariser failed the same way on its first calls; these counts are what"
        " finished before it; 4 planned segments were not summarised (no attempt was counted),"
        " and a later run takes them up"
    ), out
    made = len(list(calls.iterdir()))
    assert made == 3 if workers == 1 else 3 <= made <= 4, made
    with Store.open(tmp_path / "store.duckdb", read_only=True) as store:
        assert store.con.execute("SELECT count(*) FROM compactions").fetchone() == (0,)
        assert store.con.execute("SELECT count(*) FROM compaction_attempts").fetchone() == (0,)


@pytest.mark.parametrize(
    ("plan", "completed", "failed"),
    [("sf", 1, 3), ("fdf", 0, 4), ("ff", 0, 2)],
    ids=["after-a-success", "different-failures", "fewer-than-three"],
)
def test_failures_that_are_not_all_the_same_from_the_start_are_attempts(
    tmp_path, plan, completed, failed
):
    """Rule 7 holds for genuine per-segment failures: after a success, or when the first
    failures differ, each failure is a counted attempt and the run goes to its end (exit 1).
    A run of two segments that both fail alike is not stopped either."""
    if plan == "ff":
        db = tmp_path / "store.duckdb"
        with Store.open(db) as store:
            build(store, {"c1": 40})  # two segments only
        program = tmp_path / "summarise.py"
        program.write_text(PLANNED_PROGRAM, encoding="utf-8")
        calls = tmp_path / "calls"
        calls.mkdir()
        spec = f'command:"{sys.executable} {program} {calls} f"'
        worker = lexkeep("compact", "--db", str(db), "--summarizer", spec, "--timeout", "30")
        out, err = worker.communicate(timeout=120)
        code = worker.returncode
    else:
        code, out, err, calls = run_planned(tmp_path, plan)
    assert code == 1, out + err
    assert out.splitlines()[0].endswith(f"completed {completed}, failed {failed}, skipped 0")
    with Store.open(tmp_path / "store.duckdb", read_only=True) as store:
        rows = store.con.execute("SELECT status, attempts FROM compactions").fetchall()
    assert sorted(rows) == sorted([("completed", 1)] * completed + [("failed", 1)] * failed)


# Tells the test it runs, then answers once the test says so.
WAITS_FOR_GO = """\
import os, sys, time
folder = sys.argv[1]
sys.stdin.read()
open(os.path.join(folder, "started"), "w").close()
deadline = time.monotonic() + 60
while not os.path.exists(os.path.join(folder, "go")) and time.monotonic() < deadline:
    time.sleep(0.02)
print("Summary: ORD_88400.")
"""


@pytest.mark.skipif(sys.platform == "win32", reason="DuckDB's lock message names a POSIX pid")
def test_a_store_held_past_the_lease_stops_the_write_with_a_clear_message(tmp_path):
    """The summary arrived in time, but another process held the store until after the
    claim's lease expired. `compact` waited --lease-seconds from the moment it tried to
    reopen the store, got it after the lease had expired, and recorded a failed attempt whose
    message blamed the summariser ("its lease expired 1 s before the summary arrived"). It now
    waits only while the lease lasts, then stops, saying why; nothing is written."""
    import duckdb

    db = tmp_path / "store.duckdb"
    with Store.open(db) as store:
        build(store, {"c1": 30})
    script = tmp_path / "waits.py"
    script.write_text(WAITS_FOR_GO, encoding="utf-8")
    spec = f'command:"{sys.executable} {script} {tmp_path}"'
    args = ["--db", str(db), "--summarizer", spec, "--timeout", "8", "--lease-seconds", "13"]
    worker = lexkeep("compact", *args)
    try:
        wait_for(tmp_path / "started", 60)  # the summariser runs, the store is closed
        holder = duckdb.connect(str(db))  # another process takes the store, as a writer
        try:
            [(expires,)] = holder.execute("SELECT lease_expires_at FROM compactions").fetchall()
            (tmp_path / "go").touch()  # the summary arrives well within its lease
            # held past the lease: until compact gives up waiting for it (not for a fixed
            # time, after which a compact slowed down by a busy machine could still get it)
            with contextlib.suppress(subprocess.TimeoutExpired):
                worker.wait(timeout=60)
            assert worker.poll() is not None, "compact still waited for the store"
            # compact waits while the lease lasts, to a tenth of a second below: hold the store
            # until the lease is over, as the case is about
            time.sleep(max(0.0, expires - time.time()) + 0.2)
        finally:
            holder.close()
        out, err = worker.communicate(timeout=60)
    finally:
        if worker.poll() is None:
            worker.kill()
            worker.communicate()
    assert worker.returncode == 2, out + err
    first, hint = err.splitlines()[:2]
    assert first.startswith(f"Error: {db} is in use by another lexkeep process"), err
    assert first.endswith(
        "until the lease of c1 pairs 0–9 expired: the summary that arrived for it was not stored"
    ), err
    assert hint.startswith("Hint: nothing was written;"), err
    assert out.splitlines() == [
        "1 conversation: planned 1, claimed 1, completed 0, failed 0, skipped 0",
        "stopped: another process held the store until a claim's lease expired; these counts"
        " are what was stored before; 1 planned segment was left for a later run (a claim"
        " whose lease expired counts as a failed attempt)",
    ], out
    with Store.open(db, read_only=True) as store:
        row = store.con.execute(
            "SELECT status, attempts, summary, lease_expires_at FROM compactions"
        ).fetchone()
        assert store.con.execute("SELECT count(*) FROM boundaries").fetchone() == (0,)
    assert row[:3] == ("running", 1, None)
    # a later run counts the expired lease as the failed attempt it is, then tries again
    again = lexkeep("compact", *args)
    out, err = again.communicate(timeout=60)
    assert again.returncode == 0, out + err


@pytest.mark.skipif(sys.platform == "win32", reason="SIGINT and process groups are POSIX")
@pytest.mark.parametrize("workers", [1, 2])
def test_ctrl_c_while_another_process_holds_the_store_still_gives_the_claims_back(
    tmp_path, workers
):
    """Ctrl-C came while another process (a `lexkeep context`, an ingest) had the store for a
    moment: the run did not wait at all, so its claims stayed `running` until their leases
    expired and then counted as failed attempts. It now waits up to $LEXKEEP_LOCK_WAIT."""
    import duckdb

    db = tmp_path / "store.duckdb"
    with Store.open(db) as store:
        build(store, {"c1": 40})
    script = tmp_path / "waits.py"
    script.write_text(WAITS_FOR_GO, encoding="utf-8")  # never told to go: hangs
    spec = f'command:"{sys.executable} {script} {tmp_path}"'
    args = ["--db", str(db), "--summarizer", spec, "--timeout", "60", "--workers", str(workers)]
    env = {**os.environ, "LEXKEEP_LOCK_WAIT": "10"}
    worker = lexkeep("compact", *args, start_new_session=True, env=env)
    try:
        wait_for(tmp_path / "started", 60)
        holder = duckdb.connect(str(db))
        try:
            running = holder.execute(
                "SELECT count(*) FROM compactions WHERE status = 'running'"
            ).fetchone()[0]
            os.killpg(worker.pid, signal.SIGINT)
            time.sleep(1)
        finally:
            holder.close()
        out, err = worker.communicate(timeout=60)
    finally:
        if worker.poll() is None:
            os.killpg(worker.pid, signal.SIGKILL)
            worker.communicate()
    assert running >= 1
    assert worker.returncode == 130, out + err
    with Store.open(db, read_only=True) as store:
        assert store.con.execute("SELECT count(*) FROM compactions").fetchone() == (0,)
        assert store.con.execute("SELECT count(*) FROM compaction_attempts").fetchone() == (0,)


@pytest.mark.skipif(sys.platform == "win32", reason="SIGINT and process groups are POSIX")
@pytest.mark.parametrize("workers", [1, 2])
def test_ctrl_c_that_cannot_give_a_claim_back_says_so(tmp_path, workers):
    """Ctrl-C while another process held the store longer than $LEXKEEP_LOCK_WAIT: the claim
    stays `running` until its lease expires, but the `interrupted:` line said it had been
    given back without counting an attempt."""
    import duckdb

    db = tmp_path / "store.duckdb"
    with Store.open(db) as store:
        build(store, {"c1": 40})
    script = tmp_path / "waits.py"
    script.write_text(WAITS_FOR_GO, encoding="utf-8")  # never told to go: hangs
    spec = f'command:"{sys.executable} {script} {tmp_path}"'
    args = ["--db", str(db), "--summarizer", spec, "--timeout", "60", "--workers", str(workers)]
    env = {**os.environ, "LEXKEEP_LOCK_WAIT": "0.5"}
    worker = lexkeep("compact", *args, "--format", "json", start_new_session=True, env=env)
    try:
        wait_for(tmp_path / "started", 60)
        holder = duckdb.connect(str(db))
        try:
            os.killpg(worker.pid, signal.SIGINT)
            out, err = worker.communicate(timeout=60)  # it does not wait for the holder
        finally:
            holder.close()
    finally:
        if worker.poll() is None:
            os.killpg(worker.pid, signal.SIGKILL)
            worker.communicate()
    assert worker.returncode == 130, out + err
    doc = json.loads(out)
    # each slot claimed a segment, and its call hung
    assert (doc["claimed"], doc["completed"], doc["claims_held"]) == (workers, 0, workers), doc
    with Store.open(db, read_only=True) as store:
        rows = store.con.execute("SELECT status FROM compactions").fetchall()
    assert rows == [("running",)] * workers
    # and in text
    with Store.open(db) as store:  # as before the first run
        store.con.execute("DELETE FROM compaction_attempts")
        store.con.execute("DELETE FROM compactions")
    (tmp_path / "started").unlink()
    worker = lexkeep("compact", *args, start_new_session=True, env=env)
    try:
        wait_for(tmp_path / "started", 60)
        holder = duckdb.connect(str(db))
        try:
            os.killpg(worker.pid, signal.SIGINT)
            out, err = worker.communicate(timeout=60)
        finally:
            holder.close()
    finally:
        if worker.poll() is None:
            os.killpg(worker.pid, signal.SIGKILL)
            worker.communicate()
    assert worker.returncode == 130, out + err
    held = (
        "1 claim could not be given back (the store could not be written in time) and stays"
        " claimed until its lease expires (then it counts as a failed attempt)"
        if workers == 1
        else "2 claims could not be given back (the store could not be written in time) and"
        " stay claimed until their leases expire (then each counts as a failed attempt)"
    )
    assert out.splitlines()[-1] == (
        "interrupted: these counts are what finished before Ctrl-C; a call in progress was"
        " abandoned, and a later run takes up the rest; " + held
    ), out


# As SECOND_HANGS, and each call's file holds the pid of the program making it.
SECOND_HANGS_NAMED = (
    """\
import os, sys, time
calls = sys.argv[1]
sys.stdin.read()
os.makedirs(calls, exist_ok=True)
"""
    + TAKE_A_NUMBER
    + """\
with open(os.path.join(calls, f".{n}"), "w") as fh:
    fh.write(str(os.getpid()))
os.rename(os.path.join(calls, f".{n}"), os.path.join(calls, str(n)))
if n == 0:
    print("summary of the first segment")
    sys.exit(0)
time.sleep(120)
"""
)


@pytest.mark.skipif(sys.platform == "win32", reason="SIGTERM and process groups are POSIX")
@pytest.mark.parametrize(("workers", "group"), [(1, False), (2, False), (1, True)])
def test_sigterm_stops_a_run_as_ctrl_c_does_and_exits_143(tmp_path, workers, group):
    """A CI job cancelled, `timeout`, `docker stop` or `kill PID`: SIGTERM to lexkeep alone,
    or (`timeout`, systemd) to its whole group. The hung call's claim is given back without
    an attempt, its program is stopped, and the counts of what finished come first."""
    db = tmp_path / "store.duckdb"
    with Store.open(db) as store:
        build(store, {"c1": 40})  # two segments: the first completes, the second hangs
    script = tmp_path / "second_hangs.py"
    script.write_text(SECOND_HANGS_NAMED, encoding="utf-8")
    calls = tmp_path / "calls"
    spec = f'command:"{sys.executable} {script} {calls}"'
    args = ["--db", str(db), "--summarizer", spec, "--timeout", "60", "--workers", str(workers)]
    worker = lexkeep("compact", *args, start_new_session=True)
    hung = 0
    try:
        wait_for_second_call(calls, worker)
        hung = int((calls / "1").read_text(encoding="utf-8"))
        wait_for_completed(db, 60)
        if group:
            os.killpg(worker.pid, signal.SIGTERM)
        else:
            worker.send_signal(signal.SIGTERM)
        out, err = worker.communicate(timeout=30)
    finally:
        if worker.poll() is None:
            os.killpg(worker.pid, signal.SIGKILL)
            worker.communicate()
    assert worker.returncode == 143, err  # 128 + SIGTERM, as a shell reports it
    assert err.endswith("Interrupted.\n"), err
    assert "Traceback" not in err and "internal error" not in err, err
    assert gone(hung, 5), "the hung summariser outlived the stopped run"
    with Store.open(db, read_only=True) as store:
        rows = store.con.execute(
            "SELECT status, attempts, lease_owner FROM compactions ORDER BY from_pair"
        ).fetchall()
        attempts = store.con.execute("SELECT count(*) FROM compaction_attempts").fetchone()[0]
    # the hung call's claim was given back: no job, no attempt left of it
    assert [r[0] for r in rows] == ["completed"], rows
    assert attempts == 1
    lines = out.splitlines()
    assert lines[0] == "1 conversation: planned 2, claimed 1, completed 1, failed 0, skipped 0"
    assert lines[-1] == (
        "interrupted: these counts are what finished before SIGTERM; a call in progress"
        " was abandoned and its claim given back (no attempt was counted), and a later"
        " run takes up the rest"
    ), out


@pytest.mark.skipif(sys.platform == "win32", reason="SIGTERM and a pseudo-terminal are POSIX")
@pytest.mark.parametrize("fmt", ["text", "json"])
def test_a_run_stopped_early_counts_every_segment_it_planned(tmp_path, fmt):
    """A run over more than 500 conversations plans them 500 at a time: stopped during the
    first batch, it said `planned 500` of 501 segments (and `remaining` 499), and its progress
    bar showed no total (`1/?`). Every segment is counted before the first is worked on."""

    db = tmp_path / "store.duckdb"
    with Store.open(db) as store:
        build(store, {f"c{i:03d}": 30 for i in range(501)})  # one segment each
    script = tmp_path / "second_hangs.py"
    script.write_text(SECOND_HANGS_NAMED, encoding="utf-8")
    calls = tmp_path / "calls"
    spec = f'command:"{sys.executable} {script} {calls}"'
    args = ["--db", str(db), "--summarizer", spec, "--timeout", "60", "--format", fmt]
    terminal = TerminalReader()  # stderr on a terminal: the progress bar is drawn
    seen = terminal.seen
    worker = subprocess.Popen(
        [sys.executable, "-m", "lexkeep.cli.main", "compact", *args],
        stdout=subprocess.PIPE,
        stderr=terminal.follower,
        text=True,
        start_new_session=True,
    )
    terminal.started()
    hung = 0
    try:
        deadline = time.monotonic() + 60
        wait_for_second_call(calls, worker)
        hung = int((calls / "1").read_text(encoding="utf-8"))
        wait_for_completed(db, 60)
        while b"1/501" not in seen:  # the bar counts the first segment done of all of them
            assert time.monotonic() < deadline, bytes(seen[-300:]).decode("utf-8", "replace")
            time.sleep(0.05)
        worker.send_signal(signal.SIGTERM)
        out, _ = worker.communicate(timeout=30)
    finally:
        if worker.poll() is None:
            os.killpg(worker.pid, signal.SIGKILL)
            worker.communicate()
        terminal.close()
    assert worker.returncode == 143, bytes(seen[-600:]).decode("utf-8", "replace")
    assert gone(hung, 5), "the hung summariser outlived the stopped run"
    if fmt == "json":
        doc = json.loads(out)
        counts = ("planned", "claimed", "completed", "failed", "skipped", "remaining")
        assert [doc[k] for k in counts] == [501, 1, 1, 0, 0, 500], doc
        assert doc["interrupted"] is True
    else:
        lines = out.splitlines()
        assert lines[0] == (
            "501 conversations: planned 501, claimed 1, completed 1, failed 0, skipped 0"
        ), out
        assert lines[-1].startswith("interrupted: these counts are what finished before SIGTERM")


# Answers every call; on its third it does to the store what the test names first: makes the
# store's folder read-only (no write can reach it) or deletes conversation c2's row.
SPOILS_THE_STORE = (
    """\
import os, sys
sys.stdin.read()
calls, how, db = sys.argv[1], sys.argv[2], sys.argv[3]
"""
    + TAKE_A_NUMBER
    + """\
open(os.path.join(calls, str(n)), "w").close()
if n == 2 and how == "read-only":
    os.chmod(os.path.dirname(db), 0o555)
if n == 2 and how == "row-deleted":
    import duckdb
    con = duckdb.connect(db)
    con.execute("DELETE FROM conversations WHERE id = 'c2'")
    con.close()
print("Summary: ORD_88400.")
"""
)


def run_spoiling(tmp_path: Path, how: str, fmt: str, workers: int = 1) -> tuple[int, str, str]:
    """`lexkeep compact` over c1 and c2 (two segments each) with SPOILS_THE_STORE; returns the
    exit status, stdout and stderr. The store's folder is writable again afterwards."""
    from conftest import permission_bound

    prefix = permission_bound()  # root passes over a read-only folder otherwise
    folder = tmp_path / "store"
    folder.mkdir()
    db = folder / "store.duckdb"
    with Store.open(db) as store:
        build(store, {"c1": 40, "c2": 40})  # c1 0-9, c1 10-19, c2 0-9, c2 10-19
    program = tmp_path / "summarise.py"
    program.write_text(SPOILS_THE_STORE, encoding="utf-8")
    calls = tmp_path / "calls"
    calls.mkdir()
    spec = f'command:"{sys.executable} {program} {calls} {how} {db}"'
    args = ["--db", db, "--summarizer", spec, "--timeout", "30", "--format", fmt]
    try:
        done = subprocess.run(
            [*prefix, sys.executable, "-m", "lexkeep.cli.main", "compact", *map(str, args)],
            capture_output=True, text=True, timeout=120,
        )  # fmt: skip
    finally:
        folder.chmod(0o755)
    return done.returncode, done.stdout, done.stderr


@pytest.mark.skipif(sys.platform == "win32", reason="a read-only folder is a POSIX permission")
@pytest.mark.parametrize("fmt", ["text", "json"])
def test_a_store_that_cannot_be_written_mid_run_still_reports_what_finished(tmp_path, fmt):
    """Two summaries were stored, then the store's folder became read-only (a full disk or a
    quota does the same): the run exited 2 with only the error, so a batch that failed near
    its end said nothing of what it had completed, nor of the claim it had to leave held."""
    code, out, err = run_spoiling(tmp_path, "read-only", fmt)
    assert code == 2, out + err
    db = tmp_path / "store" / "store.duckdb"
    assert err.startswith(f"Error: cannot open {db}.wal: Permission denied\nHint: "), err
    assert "Traceback" not in err and "internal error" not in err, err
    with Store.open(db, read_only=True) as store:
        rows = store.con.execute(
            "SELECT conversation_id, from_pair, status, attempts, summary IS NOT NULL, "
            "boundary_id IS NOT NULL FROM compactions ORDER BY conversation_id, from_pair"
        ).fetchall()
    # The two stored summaries stay, bound to their sources; the third claim could not be
    # given back (nothing can be written): it is held until its lease expires.
    assert rows == [
        ("c1", 0, "completed", 1, True, True),
        ("c1", 10, "completed", 1, True, True),
        ("c2", 0, "running", 1, False, False),
    ]
    if fmt == "json":
        doc = json.loads(out)
        counts = ("planned", "claimed", "completed", "failed", "skipped", "remaining")
        assert [doc[k] for k in counts] == [4, 3, 2, 0, 0, 2], doc
        assert doc["claims_held"] == 1
        assert doc["error"] == err.splitlines()[0].removeprefix("Error: ")
        assert doc["interrupted"] is False and doc["unreachable"] is None
        assert [(s["conversation_id"], s["from_pair"], s["outcome"]) for s in doc["segments"]] == [
            ("c1", 0, "completed"),
            ("c1", 10, "completed"),
        ]
    else:
        lines = out.splitlines()
        assert lines[0] == (
            "2 conversations: planned 4, claimed 3, completed 2, failed 0, skipped 0"
        ), out
        assert lines[-1] == (
            "stopped: an error stopped the run; these counts are what finished before it;"
            " 2 planned segments were not summarised, and a later run takes them up; 1 of them"
            " could not be given back and stays claimed until its lease expires (then it counts"
            " as a failed attempt)"
        ), out


@pytest.mark.parametrize("fmt", ["text", "json"])
@pytest.mark.parametrize("workers", [1, 2])
def test_an_error_mid_run_gives_the_claims_back_and_reports_what_finished(tmp_path, fmt, workers):
    """Another program deleted a conversation's row while its segment was being summarised:
    storing that summary failed, and the run exited 2 with only the error, leaving the claim
    held until its lease expired (then counted as a failed attempt). The claim is now given
    back, and the counts of what finished come before the error."""
    code, out, err = run_spoiling(tmp_path, "row-deleted", fmt, workers)
    assert code == 2, out + err
    assert err == "Error: conversation c2 is not in the store\n", err
    with Store.open(tmp_path / "store" / "store.duckdb", read_only=True) as store:
        rows = store.con.execute(
            "SELECT conversation_id, from_pair, status, attempts FROM compactions "
            "ORDER BY conversation_id, from_pair"
        ).fetchall()
        [(boundaries,)] = store.con.execute("SELECT count(*) FROM boundaries").fetchall()
    assert rows == [("c1", 0, "completed", 1), ("c1", 10, "completed", 1)]
    assert boundaries == 2
    if fmt == "json":
        doc = json.loads(out)
        counts = ("planned", "claimed", "completed", "failed", "skipped", "remaining")
        assert [doc[k] for k in counts] == [4, 2, 2, 0, 0, 2], doc
        assert doc["claims_held"] == 0
        assert doc["error"] == "conversation c2 is not in the store"
    else:
        lines = out.splitlines()
        assert lines[0] == (
            "2 conversations: planned 4, claimed 2, completed 2, failed 0, skipped 0"
        ), out
        assert lines[-1] == (
            "stopped: an error stopped the run; these counts are what finished before it;"
            " 2 planned segments were not summarised (no attempt was counted), and a later run"
            " takes them up"
        ), out


# A library caller whose store's folder turns read-only after the first summary is stored:
# the next claim cannot be written.
READ_ONLY_AFTER_FIRST = """\
import json, os, sys
from lexkeep.compaction.engine import CompactionFailed, run_compaction
from lexkeep.compaction.summarizers import Generation, Summarizer

class Waits(Summarizer):
    name, model_id = "waits", "test/waits"  # not quick: the store is closed between steps

    def summarize(self, request):
        return Generation("Summary: ORD_88400.")

db = sys.argv[1]

def progress(out):
    if out.outcome == "completed":
        os.chmod(os.path.dirname(db), 0o555)

try:
    report = run_compaction(db, summarizer=Waits(), on_progress=progress)
    print(json.dumps({"stopped": None, "skipped": report.skipped_reasons}))
except CompactionFailed as stop:
    r = stop.report
    print(json.dumps({"stopped": str(stop), "counts": [r.claimed, r.completed, r.skipped]}))
"""


@pytest.mark.skipif(sys.platform == "win32", reason="a read-only folder is a POSIX permission")
def test_a_claim_the_store_cannot_take_stops_the_run_instead_of_skipping_as_a_race(tmp_path):
    """A store that could no longer be written when a segment was claimed: DuckDB's failed
    commit was taken for a lost race, tried again 200 times, and every remaining segment was
    then `skipped` (race: … Permission denied): the run went on to its end and exited 0."""
    from conftest import permission_bound

    prefix = permission_bound()
    folder = tmp_path / "store"
    folder.mkdir()
    db = folder / "store.duckdb"
    with Store.open(db) as store:
        build(store, {"c1": 40, "c2": 40})
    script = tmp_path / "caller.py"
    script.write_text(READ_ONLY_AFTER_FIRST, encoding="utf-8")
    try:
        done = subprocess.run(
            [*prefix, sys.executable, str(script), str(db)],
            capture_output=True, text=True, timeout=120,
        )  # fmt: skip
    finally:
        folder.chmod(0o755)
    assert done.returncode == 0, done.stderr
    doc = json.loads(done.stdout)
    assert doc["stopped"] == f"cannot open {db}.wal: Permission denied", doc
    assert doc["counts"] == [1, 1, 0], doc


@pytest.mark.skipif(sys.platform == "win32", reason="RLIMIT_FSIZE is POSIX")
def test_a_full_disk_mid_run_keeps_what_was_stored_and_a_later_run_finishes(tmp_path):
    """The store's disk filled up (here: a file size limit) after some summaries were
    stored: the counts of those come before the error, the claim being stored is given back,
    and a later run with room summarises the rest."""
    from conftest import run_writing_at_most

    db = tmp_path / "store.duckdb"
    with Store.open(db) as store:
        build(store, {f"c{i}": 40 for i in range(3)})  # six segments
    program = tmp_path / "summarise.py"
    # ~18 KB of UTF-8 per summary (under the 6,000-character limit): a few fill the WAL
    program.write_text(
        "import sys\nsys.stdin.read()\nprint('Summary: ORD_88400. ' + '\\u6458' * 5900)\n",
        encoding="utf-8",
    )
    spec = ["--summarizer", f'command:"{sys.executable} {program}"', "--timeout", "30"]
    done = run_writing_at_most(150_000, "compact", "--db", db, *spec, "--format", "json")
    assert done.returncode == 2, done.stdout + done.stderr
    first = done.stderr.splitlines()[0]
    assert first == f"Error: cannot write {db}.wal: File too large", done.stderr
    doc = json.loads(done.stdout)
    assert doc["error"] == first.removeprefix("Error: ")
    stored = doc["completed"]
    assert 0 < stored < doc["planned"] == 6, doc
    assert (doc["claimed"], doc["failed"], doc["claims_held"]) == (stored, 0, 0), doc
    with Store.open(db, read_only=True) as store:
        rows = store.con.execute("SELECT status, attempts FROM compactions").fetchall()
    assert rows == [("completed", 1)] * stored  # nothing left claimed, no attempt spent
    again = lexkeep("compact", "--db", str(db), *spec, "--format", "json")
    out, err = again.communicate(timeout=120)
    assert again.returncode == 0, out + err
    doc = json.loads(out)
    assert (doc["completed"], doc["skipped"]) == (6 - stored, stored), doc


# Call 0 hangs (its pid in calls/pid); every later call waits until call 0 has started, notes
# the time, then fails the run the way the test names: exit 127 (the program it runs is not
# found), the same error every time (a wrong model name), or a summary it cannot store (the
# conversations' rows are deleted meanwhile). Once calls/fixed exists, every call answers.
ONE_HANGS_ANOTHER_STOPS_THE_RUN = (
    """\
import os, sys, time
sys.stdin.read()
calls, how, db = sys.argv[1], sys.argv[2], sys.argv[3]
if os.path.exists(os.path.join(calls, "fixed")):
    print("Summary: ORD_88400.")
    sys.exit(0)
"""
    + TAKE_A_NUMBER
    + """\
if n == 0:
    with open(os.path.join(calls, "pid.tmp"), "w") as fh:
        fh.write(str(os.getpid()))
    os.replace(os.path.join(calls, "pid.tmp"), os.path.join(calls, "pid"))
    time.sleep(60)
    print("Summary: ORD_88400.")
    sys.exit(0)
deadline = time.monotonic() + 30
while not os.path.exists(os.path.join(calls, "pid")) and time.monotonic() < deadline:
    time.sleep(0.02)
with open(os.path.join(calls, "failed"), "w") as fh:
    fh.write(repr(time.time()))
if how == "unreachable":
    sys.stderr.write("sh: 1: llmx: not found\\n")
    sys.exit(127)
if how == "misconfigured":
    sys.stderr.write("Error: Unknown model: gpt-typo\\n")
    sys.exit(1)
import duckdb
con = duckdb.connect(db)
con.execute("DELETE FROM conversations")
con.close()
print("Summary: ORD_88400.")
"""
)


@pytest.mark.skipif(sys.platform == "win32", reason="process groups are POSIX")
@pytest.mark.parametrize("how", ["unreachable", "misconfigured", "storage"])
def test_an_error_in_one_slot_stops_the_calls_of_the_others_at_once(tmp_path, how):
    """With --workers 2, one slot's call hung (a slow model) when the other slot's error
    stopped the run: the run still waited for the hung call, up to --timeout (here 120 s),
    before it printed anything. The other calls are now stopped as Ctrl-C stops them, their
    claims given back with no attempt counted, and the run ends within seconds."""
    db = tmp_path / "store.duckdb"
    with Store.open(db) as store:
        # unreachable and storage: two segments, one per slot; misconfigured: four, so that
        # the second slot makes the three failing calls that stop the run
        build(store, {"c1": 60} if how == "misconfigured" else {"c1": 30, "c2": 30})
    planned = 4 if how == "misconfigured" else 2
    program = tmp_path / "summarise.py"
    program.write_text(ONE_HANGS_ANOTHER_STOPS_THE_RUN, encoding="utf-8")
    calls = tmp_path / "calls"
    calls.mkdir()
    spec = f'command:"{sys.executable} {program} {calls} {how} {db}"'
    args = ["--db", str(db), "--summarizer", spec, "--timeout", "120", "--workers", "2"]
    worker = lexkeep("compact", *args, "--format", "json")
    try:
        out, err = worker.communicate(timeout=100)
    finally:
        if worker.poll() is None:
            worker.kill()
            worker.communicate()
    ended = time.time()
    assert worker.returncode == 2, out + err
    failed_at = float((calls / "failed").read_text())
    assert ended - failed_at < 20, f"the run ended {ended - failed_at:.1f} s after the error"
    assert gone(int((calls / "pid").read_text()), 10), "the hung call's program still runs"
    expected = {
        "unreachable": "Error: cannot run ",
        "misconfigured": "Error: the summariser failed the same way on its first 3 calls",
        "storage": "Error: conversation c",
    }[how]
    _assert_claims_given_back(out, err, expected, db, planned)


@pytest.mark.skipif(sys.platform == "win32", reason="process groups are POSIX")
def test_a_summariser_whose_calls_a_failed_run_stopped_works_in_the_next_run(tmp_path):
    """A library caller keeps one `command:` summariser across runs. The calls a stopped run
    cancelled must not make every call of the next run fail as cancelled (an attempt each)."""
    from lexkeep.compaction.engine import CompactionStopped, run_compaction
    from lexkeep.compaction.summarizers import CommandSummarizer

    db = tmp_path / "store.duckdb"
    with Store.open(db) as store:
        build(store, {"c1": 30, "c2": 30})
    program = tmp_path / "summarise.py"
    program.write_text(ONE_HANGS_ANOTHER_STOPS_THE_RUN, encoding="utf-8")
    calls = tmp_path / "calls"
    calls.mkdir()
    summarizer = CommandSummarizer(f"{sys.executable} {program} {calls} unreachable {db}", 120)
    with pytest.raises(CompactionStopped) as stop:
        run_compaction(db, summarizer=summarizer, workers=2)
    assert (stop.value.report.claimed, stop.value.report.remaining) == (0, 2)
    assert gone(int((calls / "pid").read_text()), 10)
    (calls / "fixed").touch()  # the program is fixed; the same summariser runs it again
    report = run_compaction(db, summarizer=summarizer, workers=2)
    assert (report.completed, report.failed) == (2, 0), report.segments


# A library caller whose progress callback writes to a full device: the write fails with an
# OSError that names no file (ENOSPC), as a write to standard output or to an anonymous
# temporary file on a full disk does. It prints the run's error and the text the command line
# gives the same error.
UNNAMED_WRITE_FAILS = """\
import json, os, sys
from lexkeep.cli.common import unnamed_write_error
from lexkeep.compaction.engine import CompactionFailed, run_compaction

full = os.open("/dev/full", os.O_WRONLY)

def progress(out):
    os.write(full, b"compacted one segment\\\\n")

try:
    run_compaction(sys.argv[1], on_progress=progress)
    print(json.dumps(None))
except CompactionFailed as stop:
    said = unnamed_write_error(stop.cause)
    print(json.dumps([[str(stop), stop.hint], [str(said), said.hint], stop.report.completed]))
"""


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full")
@pytest.mark.parametrize("stdout", ["pipe", "file"])
def test_an_unnamed_write_error_reads_the_same_in_json_and_on_stderr(tmp_path, stdout):
    """A write that failed for want of room and named no file stopped a run: stderr said
    `cannot write a temporary file in /tmp: …` (or `standard output or a temporary file`,
    when standard output is a file) with its hint, while the JSON `"error"` said `cannot write
    a temporary file: …` with another hint: the same error, told two ways."""
    db = tmp_path / "store.duckdb"
    with Store.open(db) as store:
        build(store, {"c1": 30})
    script = tmp_path / "caller.py"
    script.write_text(UNNAMED_WRITE_FAILS, encoding="utf-8")
    out_file = tmp_path / "out.json"
    with open(out_file, "w", encoding="utf-8") as fh:
        done = subprocess.run(
            [sys.executable, str(script), str(db)],
            stdout=fh if stdout == "file" else subprocess.PIPE,
            stderr=subprocess.PIPE, text=True, timeout=120,
        )  # fmt: skip
    assert done.returncode == 0, done.stderr
    doc = json.loads(out_file.read_text() if stdout == "file" else done.stdout)
    assert doc is not None, "the write to /dev/full did not fail"
    run_error, cli_error, completed = doc
    assert run_error == cli_error
    where = "standard output or a temporary file" if stdout == "file" else "a temporary file"
    assert run_error[0].startswith(f"cannot write {where} in "), run_error
    assert completed == 1  # stored and counted before the callback failed


def _delete_conversations(db: Path) -> Callable[[int], None]:
    """A `before_answer` hook that deletes every conversation from `db` (a row another program
    changed under the run: storing the summary then fails and stops it)."""

    def delete(n: int) -> None:
        import duckdb

        deadline = time.monotonic() + 10
        while True:  # the run closes the store while its calls wait
            try:
                con = duckdb.connect(str(db))
                break
            except duckdb.IOException:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)
        try:
            con.execute("DELETE FROM conversations")
        finally:
            con.close()

    return delete


@pytest.mark.parametrize("how", ["misconfigured", "storage"])
@pytest.mark.parametrize("stall", ["n", "d"])  # never answers; drips its answer
def test_an_error_in_one_slot_stops_the_others_openai_calls_at_once(tmp_path, how, stall):
    """With --workers 2 and `--summarizer openai`, one slot's HTTP call stalled (a server that
    took the request and never answered, or answered a byte at a time) when the other slot's
    error stopped the run: the run waited for the stalled call up to --timeout (here 120 s)
    before it printed anything. The call is now cancelled at once, its claim given back with
    no attempt counted, and the run ends within seconds."""
    db = tmp_path / "store.duckdb"
    with Store.open(db) as store:
        # misconfigured: four segments, so that the other slot makes the three failing calls
        # (HTTP 401) that stop the run; storage: two, the other one's summary cannot be stored
        build(store, {"c1": 60} if how == "misconfigured" else {"c1": 30, "c2": 30})
    planned = 4 if how == "misconfigured" else 2
    plan = stall + ("u" if how == "misconfigured" else "a")
    hook = _delete_conversations(db) if how == "storage" else None
    with StallingOpenAI(plan, before_answer=hook) as server:
        spec = ["--summarizer", "openai", "--base-url", server.url, "--model", "m"]
        args = ["--db", str(db), *spec, "--timeout", "120", "--workers", "2"]
        worker = lexkeep("compact", *args, "--format", "json")
        try:
            out, err = worker.communicate(timeout=60)
        finally:
            if worker.poll() is None:
                worker.kill()
                worker.communicate()
        ended = time.time()
        fatal_at = max(server.answered.values())  # the answer that stopped the run
        assert worker.returncode == 2, out + err
        assert ended - fatal_at < 15, f"the run ended {ended - fatal_at:.1f} s after the error"
        assert 0 in server.hung_up, "the stalled call's connection was left open"
        assert server.hung_up[0] - fatal_at < 10
    expected = {
        "misconfigured": "Error: the summariser failed the same way on its first 3 calls",
        "storage": "Error: conversation c",
    }[how]
    _assert_claims_given_back(out, err, expected, db, planned)


@pytest.mark.skipif(sys.platform == "win32", reason="SIGINT to a process group is POSIX")
@pytest.mark.parametrize(("workers", "stall"), [(2, "n"), (2, "d"), (1, "n")])
def test_ctrl_c_during_stalled_openai_calls_ends_at_once_and_gives_the_claims_back(
    tmp_path, workers, stall
):
    """Ctrl-C to `lexkeep compact --summarizer openai --workers 2` while both calls waited for
    a server that had taken the requests and stalled: the command went on until --timeout
    (here 120 s) before it printed its counts and `Interrupted.`. The calls are now cancelled
    at once, their claims given back with no attempt counted, and a later run completes the
    segments."""
    db = tmp_path / "store.duckdb"
    with Store.open(db) as store:
        build(store, {"c1": 40})  # two segments: with two slots, both calls stall at once
    with StallingOpenAI(stall) as server:
        spec = ["--summarizer", "openai", "--base-url", server.url, "--model", "m"]
        args = ["--db", str(db), *spec, "--timeout", "120", "--workers", str(workers)]
        # lexkeep leads its own group, as a shell's foreground job does
        worker = lexkeep("compact", *args, start_new_session=True)
        try:
            server.wait_for(workers, 60)
            time.sleep(0.3)  # the calls wait for their answers
            interrupted_at = time.time()
            os.killpg(worker.pid, signal.SIGINT)  # what a terminal's Ctrl-C does
            out, err = worker.communicate(timeout=60)
        finally:
            if worker.poll() is None:
                os.killpg(worker.pid, signal.SIGKILL)
                worker.communicate()
        ended = time.time()
        assert worker.returncode == 130, err
        assert err.endswith("Interrupted.\n"), err
        assert ended - interrupted_at < 10, f"the run ended {ended - interrupted_at:.1f} s late"
        assert sorted(server.hung_up) == list(range(workers)), server.hung_up
        lines = out.splitlines()
        assert lines[0] == "1 conversation: planned 2, claimed 0, completed 0, failed 0, skipped 0"
        assert lines[-1] == (
            "interrupted: these counts are what finished before Ctrl-C; a call in progress"
            " was abandoned and its claim given back (no attempt was counted), and a later"
            " run takes up the rest"
        ), out
        with Store.open(db, read_only=True) as store:
            assert store.con.execute("SELECT count(*) FROM compactions").fetchone() == (0,)
            attempts = store.con.execute("SELECT count(*) FROM compaction_attempts").fetchone()
            assert attempts == (0,)
        server.plan = "a"  # the server answers now: a later run completes both segments
        again = lexkeep("compact", *args)
        out, err = again.communicate(timeout=120)
    assert again.returncode == 0, out + err
    assert out.startswith("1 conversation: planned 2, claimed 2, completed 2, failed 0"), out
    with Store.open(db, read_only=True) as store:
        rows = store.con.execute("SELECT status, attempts FROM compactions").fetchall()
    assert rows == [("completed", 1)] * 2


def test_an_openai_summariser_whose_calls_a_stopped_run_cancelled_works_in_the_next_run(
    tmp_path,
):
    """A library caller keeps one `openai` summariser across runs. A run that another slot's
    error stopped cancels the stalled call at once (it waited for --timeout), gives its claim
    back, and the next run with the same summariser makes its calls again."""
    from lexkeep.compaction.engine import CompactionStopped, run_compaction
    from lexkeep.compaction.summarizers import OpenAISummarizer

    db = tmp_path / "store.duckdb"
    with Store.open(db) as store:
        build(store, {"c1": 60})  # four segments: one call stalls, the other slot's three fail
    with StallingOpenAI("nu") as server:
        summarizer = OpenAISummarizer(server.url, "m", None, timeout=60)
        started = time.monotonic()
        with pytest.raises(CompactionStopped) as stop:
            run_compaction(db, summarizer=summarizer, workers=2)
        assert time.monotonic() - started < 15
        assert stop.value.misconfigured
        report = stop.value.report
        assert (report.claimed, report.failed, report.remaining) == (0, 0, 4)
        with Store.open(db, read_only=True) as store:
            assert store.con.execute("SELECT count(*) FROM compaction_attempts").fetchone() == (0,)
        server.plan = "a"  # the key is fixed; the same summariser is used again
        report = run_compaction(db, summarizer=summarizer, workers=2)
    assert (report.completed, report.failed) == (4, 0), report.segments


@pytest.mark.parametrize(("backend", "workers"), [("openai", 1), ("openai", 2), ("command", 1)])
def test_a_callers_cancel_stops_the_run_and_spends_no_attempt(tmp_path, backend, workers):
    """A library caller called its own summariser's `cancel()` while `run_compaction` ran (to
    stop it): the call in flight and every later one ended `cancelled`, and each was recorded
    as a failed attempt, so the run went through every remaining segment and spent one of
    each range's two attempts. The run now stops: the claims are given back with no attempt
    counted, and it raises CompactionCancelled with the counts of what finished before."""
    from lexkeep.compaction.engine import CompactionCancelled, run_compaction
    from lexkeep.compaction.summarizers import CommandSummarizer, OpenAISummarizer

    db = tmp_path / "store.duckdb"
    with Store.open(db) as store:
        build(store, {"c1": 60})  # four segments: one is summarised, then the calls stall
    with contextlib.ExitStack() as stack:
        calls = tmp_path / "calls"
        if backend == "openai":
            server = stack.enter_context(StallingOpenAI("an"))
            summarizer = OpenAISummarizer(server.url, "m", None, timeout=60)

            def stalled() -> None:
                server.wait_for(workers + 1, 60)
                time.sleep(0.3)  # the calls wait for their answers

        else:
            script = tmp_path / "second_hangs.py"
            script.write_text(SECOND_HANGS, encoding="utf-8")
            summarizer = CommandSummarizer(f"{sys.executable} {script} {calls}", 60)

            def stalled() -> None:
                wait_for(calls / "1", 60)
                time.sleep(0.3)

        def cancel() -> None:
            stalled()
            summarizer.cancel()  # the caller's own: "stop"

        canceller = threading.Thread(target=cancel, daemon=True)
        canceller.start()
        started = time.monotonic()
        with pytest.raises(CompactionCancelled) as stop:
            run_compaction(db, summarizer=summarizer, workers=workers)
        canceller.join(10)
        assert time.monotonic() - started < 30  # not the calls' --timeout (60 s)
        report = stop.value.report
        counts = (report.planned, report.claimed, report.completed, report.failed)
        assert counts == (4, 1, 1, 0), report.segments
        assert (report.remaining, report.claims_held) == (3, 0)
        with Store.open(db, read_only=True) as store:
            rows = store.con.execute("SELECT status, attempts FROM compactions").fetchall()
            attempts = store.con.execute("SELECT outcome FROM compaction_attempts").fetchall()
        assert rows == [("completed", 1)]  # the cancelled claims were given back
        assert attempts == [("completed",)]
        # The summariser stays cancelled until its caller resumes it; then the run finishes.
        summarizer.resume()
        if backend == "openai":
            server.plan = "a"
        else:
            script.write_text('import sys\nsys.stdin.read()\nprint("Summary.")\n')
        again = run_compaction(db, summarizer=summarizer, workers=workers)
    assert (again.planned, again.completed, again.failed, again.skipped) == (4, 3, 0, 1)


def _assert_claims_given_back(out: str, err: str, expected: str, db: Path, planned: int) -> None:
    """A run a fatal error stopped: its error first, and the claim of the call still in flight
    given back (not claimed, not failed, left for a later run), nothing recorded."""
    assert err.startswith(expected), err
    doc = json.loads(out)
    counts = ("planned", "claimed", "completed", "failed", "remaining", "claims_held")
    assert [doc[k] for k in counts] == [planned, 0, 0, 0, planned, 0], doc
    assert doc["error"] == err.splitlines()[0].removeprefix("Error: ")
    with Store.open(db, read_only=True) as store:
        assert store.con.execute("SELECT count(*) FROM compactions").fetchone() == (0,)
        assert store.con.execute("SELECT count(*) FROM compaction_attempts").fetchone() == (0,)
