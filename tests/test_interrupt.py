"""Ctrl-C during a long ingest: one line, exit 130, no worker tracebacks, a usable store.

A terminal's Ctrl-C signals the whole process group: the command, its reading workers and its
extraction workers. The workers ignore it (their parent stops them), and DuckDB's own answer
to the signal inside a query reads as the same interruption.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import children_of, left_running

from lexkeep.core.store import Store

REPO = Path(__file__).resolve().parent.parent


# `lexkeep` run as its entry point does, with the ingest's groups committed every 2 MB
# instead of 64 MB: a folder of a few MB then has a group committed and the next in flight.
SMALL_GROUPS = (
    "import sys; from lexkeep.core import ingest; ingest.GROUP_BYTES = 2 << 20; "
    "from lexkeep.cli.main import main; sys.argv[0] = 'lexkeep'; main()"
)


@pytest.mark.skipif(not hasattr(os, "killpg"), reason="process groups are POSIX")
def test_ctrl_c_during_a_folder_ingest(tmp_path: Path, generated) -> None:
    dump = generated("claude", "12MB")
    db = tmp_path / "s.duckdb"
    proc = subprocess.Popen(
        [sys.executable, "-c", SMALL_GROUPS, "ingest", str(dump / "projects"), "--db", str(db)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )
    assert proc.stderr is not None
    # Files are listed as their group commits: the first line means a second group is being
    # read, extracted or written, with its workers running.
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
        files = store.con.execute("SELECT count(DISTINCT path) FROM ingest_runs").fetchone()[0]
    assert runs[0] > 0 and rows == runs[1]  # whole groups only: every file's rows or none
    assert files < len(list((dump / "projects").rglob("*.jsonl")))  # stopped midway


def _lexkeep(args: list[str], **kwargs) -> subprocess.Popen:
    """`lexkeep ARGS` in a session of its own, standard input and error piped (and standard
    output, unless `stdout` says otherwise)."""
    kwargs.setdefault("stdout", subprocess.PIPE)
    return subprocess.Popen(
        [sys.executable, "-m", "lexkeep.cli.main", *args],
        stdin=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,
        **kwargs,
    )


@pytest.mark.skipif(not hasattr(os, "killpg"), reason="process groups are POSIX")
@pytest.mark.parametrize(
    ("stop", "code", "word"),
    [
        # Ctrl-C: the terminal signals the whole group.
        (lambda proc: os.killpg(proc.pid, signal.SIGINT), 130, "Ctrl-C"),
        # `docker stop`, `kill PID`, a CI job cancelled: SIGTERM to lexkeep alone.
        (lambda proc: proc.send_signal(signal.SIGTERM), 143, "SIGTERM"),
    ],
    ids=["ctrl-c", "sigterm"],
)
def test_a_stopped_ingest_prints_the_totals_of_what_was_stored(
    tmp_path: Path, stop, code: int, word: str
) -> None:
    # The file is stored first; then the ingest waits on standard input (a pipe kept open)
    # until it is stopped.
    trace = REPO / "tests" / "fixtures" / "lexkeep" / "invoice.jsonl"
    db = tmp_path / "s.duckdb"
    proc = _lexkeep(["ingest", str(trace), "-", "--db", str(db)], stdout=subprocess.DEVNULL)
    assert proc.stderr is not None and proc.stdin is not None
    try:
        first = proc.stderr.readline()
        assert first.startswith(f"{trace}: ingested (lexkeep) 1 conversation,".encode()), first
        stop(proc)
        rest = proc.stderr.read().decode()
        assert proc.wait(timeout=60) == code
    finally:
        proc.stdin.close()
        if proc.poll() is None:
            proc.kill()
    assert rest == (
        "1 file: 1 ingested, 0 unchanged, 0 not traces; 7 messages, 3 tool calls\n"
        f"interrupted: the files above were stored before {word}; the ones being read then"
        " were not (ingest them again to add them)\n"
        "Interrupted.\n"
    ), rest
    with Store.open(str(db), read_only=True) as store:
        assert store.con.execute("SELECT count(*) FROM messages").fetchone()[0] == 7


@pytest.mark.skipif(not Path("/proc/self/task").exists(), reason="needs Linux /proc")
def test_sigterm_to_the_group_during_a_folder_ingest(tmp_path: Path, generated) -> None:
    """`timeout` and systemd signal the whole group: the reading workers too. They leave the
    stop to the command, which ends them, stores whole groups only and exits 143."""
    dump = generated("claude", "12MB")
    db = tmp_path / "s.duckdb"
    env = {**os.environ, "LEXKEEP_READ_WORKERS": "2"}
    proc = _lexkeep(["ingest", str(dump / "projects"), "--db", str(db)], env=env)
    workers: set[int] = set()
    try:
        deadline = time.monotonic() + 60
        while len(workers) < 2 and proc.poll() is None and time.monotonic() < deadline:
            workers |= children_of(proc.pid)
            time.sleep(0.02)
        assert proc.poll() is None, "the ingest ended before its workers were seen"
        assert len(workers) >= 2, workers
        os.killpg(proc.pid, signal.SIGTERM)
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate()
    assert proc.returncode == 143, err[-2000:]
    assert err.endswith(b"Interrupted.\n"), err[-2000:]
    assert b"Traceback" not in err and b"internal error" not in err, err[-2000:]
    left = left_running(workers)
    assert not left, f"workers still running after the ingest stopped: {left}"
    with Store.open(str(db), read_only=True) as store:
        runs = store.con.execute("SELECT count(*), sum(messages) FROM ingest_runs").fetchone()
        rows = store.con.execute("SELECT count(*) FROM messages").fetchone()[0]
    assert rows == (runs[1] or 0)  # whole groups only: every file's rows or none


@pytest.mark.skipif(not hasattr(os, "killpg"), reason="SIGTERM is POSIX")
def test_sigterm_during_an_audit_exits_143(tmp_path: Path) -> None:
    # The audit waits on standard input (a pipe kept open) when SIGTERM comes.
    proc = _lexkeep(["audit", "-", "--format", "json"])
    assert proc.stdin is not None
    try:
        time.sleep(1.5)  # the command is up and reading
        assert proc.poll() is None
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=60) == 143
        out, err = proc.stdout.read(), proc.stderr.read()
    finally:
        proc.stdin.close()
        if proc.poll() is None:
            proc.kill()
    assert err.endswith(b"Interrupted.\n") and b"Traceback" not in err, err
    assert out == b""


# SIGTERM taken up where Python drops exceptions ("Exception ignored in ..."): a finaliser, a
# garbage collector callback, a fork hook. Raised there, the stop was lost. And one taken up
# during an import is raised once the import is done: a compiled module being set up (DuckDB's)
# aborts the process on it.
DROPPED = """\
import gc, os, signal, sys, time, weakref
from lexkeep.cli.signals import stop_on_signals

stop_on_signals()
sent = []
SIGNAL = getattr(signal, sys.argv[3])


def send_once(*_):
    if not sent:
        sent.append(1)
        signal.raise_signal(SIGNAL)


class Thing:
    pass


try:
    if sys.argv[1] == "finaliser":
        thing = Thing()
        weakref.finalize(thing, send_once)
        del thing
    elif sys.argv[1] == "gc-callback":
        gc.callbacks.append(send_once)
        gc.collect()
    elif sys.argv[1] == "fork-hook":
        os.register_at_fork(after_in_parent=send_once)
        child = os.fork()
        if child == 0:
            os._exit(0)
        os.waitpid(child, 0)
    else:
        sys.path.insert(0, sys.argv[2])
        try:
            import sends_while_imported
        finally:
            print("imported", "sends_while_imported" in sys.modules)
    for _ in range(500):  # the command goes on with its work
        time.sleep(0.01)
except KeyboardInterrupt as stop:  # Terminated after SIGTERM
    print("stopped", type(stop).__name__)
    sys.exit(0)
print("went on")
"""


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
@pytest.mark.parametrize("where", ["finaliser", "gc-callback", "fork-hook", "import"])
@pytest.mark.parametrize("sig", ["SIGTERM", "SIGINT"])
def test_a_stop_where_python_drops_exceptions_or_during_an_import_still_stops(
    where: str, sig: str, tmp_path: Path
) -> None:
    """Ctrl-C as SIGTERM: taken up in a finaliser, a collector callback or a fork hook it
    was lost ("Exception ignored in ...") and the command went on; in an import it broke the
    import off (DuckDB's: an ImportError, or a crash)."""
    (tmp_path / "sends_while_imported.py").write_text(
        f"import signal\nsignal.raise_signal(signal.{sig})\nfor _ in range(1000):\n    pass\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", DROPPED, where, str(tmp_path), sig],
        capture_output=True,
        text=True,
        timeout=60,
    )
    stop = "Terminated" if sig == "SIGTERM" else "KeyboardInterrupt"
    expected = ("imported True\n" if where == "import" else "") + f"stopped {stop}\n"
    assert (done.returncode, done.stdout) == (0, expected), done.stderr
    assert "Exception ignored" not in done.stderr, done.stderr


# The main thread held up right after it started the thread that sends the stop again, as a
# loaded machine does: the stop came back while it was still being put off.
HELD_UP = (
    """\
import threading, time as held
started = threading.Thread.start


def start_then_wait(self):
    started(self)
    held.sleep(0.1)


threading.Thread.start = start_then_wait
"""
    + DROPPED
)


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
@pytest.mark.parametrize("where", ["finaliser", "gc-callback", "fork-hook"])
@pytest.mark.parametrize("sig", ["SIGTERM", "SIGINT"])
def test_a_stop_sent_again_while_it_is_put_off_still_stops(where: str, sig: str) -> None:
    """On a loaded machine the stop put off from where Python drops exceptions was sent again
    before the hook putting it off had returned; raised in the hook it was dropped as well
    ("Exception ignored in sys.unraisablehook") and the command went on."""
    done = subprocess.run(
        [sys.executable, "-c", HELD_UP, where, "", sig], capture_output=True, text=True, timeout=60
    )
    stop = "Terminated" if sig == "SIGTERM" else "KeyboardInterrupt"
    assert (done.returncode, done.stdout) == (0, f"stopped {stop}\n"), done.stderr
    assert "Exception ignored" not in done.stderr, done.stderr


COMMANDS = ["ingest", "stats", "show", "extract", "audit", "compact", "compactions"]
COMMANDS += ["context", "guard"]


def _blocked_writing(pid: int, seconds: float = 30) -> bool:
    """Wait until process `pid` waits to write into a full pipe (Linux /proc); False when
    the kernel never says where a process waits."""
    deadline = time.monotonic() + seconds
    seen = set()
    while time.monotonic() < deadline:
        where = Path(f"/proc/{pid}/wchan").read_text()
        if where.endswith("pipe_write"):
            return True
        seen.add(where)
        time.sleep(0.01)
    if seen == {"0"}:  # "0" while it runs, and always where the kernel hides it
        return False
    pytest.fail(f"lexkeep (pid {pid}) never waited to write its help: {sorted(seen)}")


@pytest.mark.skipif(not Path("/proc/self/wchan").exists(), reason="needs Linux /proc")
@pytest.mark.parametrize(
    ("command", "sig", "code"),
    [*((c, signal.SIGINT, 130) for c in COMMANDS), (None, signal.SIGINT, 130)]
    + [("compact", signal.SIGTERM, 143), (None, signal.SIGTERM, 143)],
)
def test_a_stop_before_the_command_runs_is_an_interruption(command, sig, code) -> None:
    """Ctrl-C or SIGTERM while the command line is still being read, before a command's own
    handling (here: `--help` written into a pipe nobody reads yet) exited 130 without a word
    (SIGTERM too), or, with an older Typer, `Aborted!` and exit 1: as during a command now,
    `Interrupted.` and 130 (143 after SIGTERM)."""
    import fcntl

    read, write = os.pipe()
    fcntl.fcntl(write, fcntl.F_SETFL, os.O_NONBLOCK)
    with contextlib.suppress(BlockingIOError):
        while True:
            os.write(write, b"x" * 4096)  # full: the help waits to be written
    fcntl.fcntl(write, fcntl.F_SETFL, 0)
    args = [command, "--help"] if command else ["--help"]
    try:
        proc = _lexkeep(args, stdout=write)
        os.close(write)
        try:
            if not _blocked_writing(proc.pid):
                pytest.skip("the kernel does not say where a process waits")
            proc.send_signal(sig)
            _, err = proc.communicate(timeout=60)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.communicate()
    finally:
        os.close(read)
    assert (proc.returncode, err.decode()) == (code, "Interrupted.\n")


# Stands in for Typer while lexkeep starts: its import waits until the test has sent its
# signal (and writes to the named pipe `go`), then hands over to the real Typer.
TYPER_LATE = """\
import os, sys
here = os.path.dirname(__file__)
with open(os.path.join(here, "go"), encoding="utf-8") as go:
    go.read()
sys.path.remove(here)
del sys.modules["typer"]
import typer
"""


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs a named pipe")
@pytest.mark.parametrize(("sig", "code"), [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_a_stop_while_lexkeep_starts_is_an_interruption(tmp_path: Path, sig, code) -> None:
    """SIGTERM in the first tenth of a second, while lexkeep imported what it runs on, killed
    it where it stood (-15), before its handler was in place; Ctrl-C there broke the import
    off with a traceback (in DuckDB's, a crash). Both now wait for the import to finish, then
    stop the command as anywhere else: `Interrupted.`, 130 or 143."""
    import errno

    folder = tmp_path / "late"
    folder.mkdir()
    (folder / "typer.py").write_text(TYPER_LATE, encoding="utf-8")
    os.mkfifo(folder / "go")
    env = {**os.environ, "PYTHONPATH": str(folder), "PYTHONDONTWRITEBYTECODE": "1"}
    proc = _lexkeep(["--version"], env=env)
    try:
        deadline = time.monotonic() + 60
        while True:  # until lexkeep waits in the import, reading the pipe
            try:
                go = os.open(folder / "go", os.O_WRONLY | os.O_NONBLOCK)
                break
            except OSError as exc:
                assert exc.errno == errno.ENXIO, exc  # no reader yet
                assert proc.poll() is None, proc.communicate()
                assert time.monotonic() < deadline, "lexkeep never imported Typer"
                time.sleep(0.01)
        proc.send_signal(sig)
        time.sleep(0.2)  # taken up, and put off while the import goes on
        with contextlib.suppress(BrokenPipeError):  # gone already (before the fix)
            os.write(go, b"go")
        os.close(go)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert (proc.returncode, err.decode()) == (code, "Interrupted.\n")
    assert out == b""
