"""Shared fixtures: real DuckDB files in tmp_path, the shared trace corpus, a CLI runner."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import orjson
import pytest
from typer.testing import CliRunner

from lexkeep.cli.main import app
from lexkeep.core.store import Store, migrations

# A shell without job control starts a background command with SIGINT ignored, and every
# process the tests start inherits that: the Ctrl-C tests' commands then never see their
# signal and the tests wait for ever. Catching it here (not ignoring) lets each child start
# with the default, so Python raises KeyboardInterrupt in it as after a terminal's Ctrl-C.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)

# The tests start hundreds of `lexkeep` processes. Where PYTHONDONTWRITEBYTECODE is set (as on
# some CI machines), each one compiled lexkeep's sources again (about 0.15 s of CPU a process)
# and every pytest process rewrote and compiled each test module again: let them write
# __pycache__ (ignored by git) once and reuse it. What runs is the same code.
os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
sys.dont_write_bytecode = False

REPO = Path(__file__).resolve().parent.parent

# The shared corpus sits beside the repo; a git worktree elsewhere names it in the environment.
SHARED_DATA = Path(os.environ.get("LEXKEEP_SHARED_DATA") or REPO.parent / "shared" / "data")
SAMPLE_TRACES = REPO / "sample_traces"
FIXTURES = Path(__file__).resolve().parent / "fixtures"
# Seven requests of one conversation (`sess-7f3a`, Anthropic Messages): three user turns, two
# compactions; after each the next request starts with the response that holds the block.
COMPACTED_LOG = FIXTURES / "request_logs" / "anthropic_compaction.jsonl"
# What the agent's tool calls after each compaction kept of what the user typed in it.
COMPACTED_LOG_VERDICTS = {
    "ORD-77812": "kept",
    "cus_NffrFeUfNV2Hib": "missing",
    "dana.kim@example.com": "missing",
    "INV-2025-08-44719": "altered",  # sent as INV-2025-08-4471
    "WH-4471-B": "kept",  # typed after the first compaction, audited at the second
    "OPS-2291": "missing",
}


# A test process started by pytest-xdist finds COLUMNS=80 and LINES=24 in its environment,
# which narrows every table a piped command prints. The values the run was started with (none,
# usually) are handed to each such process and put back below.
XDIST_ENV = ("COLUMNS", "LINES")


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node) -> None:
    """(pytest-xdist, in the main process) Hand each test process the run's environment."""
    node.workerinput["lexkeep_env"] = {k: os.environ.get(k) for k in XDIST_ENV}


def pytest_configure(config: pytest.Config) -> None:
    """In a pytest-xdist test process, put back the environment the run was started with."""
    given = getattr(config, "workerinput", {}).get("lexkeep_env")
    for key, value in (given or {}).items():
        if value is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = value


@pytest.fixture
def db_file(tmp_path: Path) -> Path:
    """Path for a fresh DuckDB store file."""
    return tmp_path / "store.duckdb"


@pytest.fixture(scope="session")
def migrated_store_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A new store file as `Store.open` makes it (every migration applied), made once per test
    process: read it only, copy it to use it (migrating a new file costs ~0.1 s of CPU)."""
    path = tmp_path_factory.mktemp("migrated") / "store.duckdb"
    Store.open(path).close()
    return path


@pytest.fixture
def store(db_file: Path, migrated_store_file: Path):
    """An open, migrated store on a real file (a copy of a new one: test_store.py checks that
    opening a new file migrates it)."""
    import shutil

    shutil.copyfile(migrated_store_file, db_file)
    with Store.open(db_file) as s:
        yield s


@pytest.fixture
def cli():
    """Invoke `lexkeep ARGS...`; returns the click Result (stdout and stderr kept apart)."""
    runner = CliRunner()

    def invoke(*args: str, input: str | bytes | None = None, env: dict[str, str] | None = None):
        return runner.invoke(
            app, [str(a) for a in args], input=input, env=env, catch_exceptions=False
        )

    return invoke


# Every table an ingest writes.
INGEST_TABLES = (
    "conversations",
    "runs",
    "messages",
    "tool_calls",
    "tool_results",
    "boundaries",
    "identifiers",
    "identifier_scans",
    "ingest_runs",
    "ingest_errors",
)


def ingest_rows(store: Store) -> dict[str, list[tuple]]:
    """Every row of every ingest table in a stable order, without what differs between two
    ingests of the same files (ingest_runs.id, started_at): to compare two stores whole."""
    out = {}
    for table in INGEST_TABLES:
        cols = [r[0] for r in store.con.execute(f"DESCRIBE {table}").fetchall()]
        keep = [c for c in cols if c != "started_at" and (c != "id" or table != "ingest_runs")]
        order = ", ".join(f'"{c}"' for c in keep)
        out[table] = store.con.execute(f"SELECT {order} FROM {table} ORDER BY {order}").fetchall()
    return out


def run_writing_at_most(limit: int, *args: str | Path) -> subprocess.CompletedProcess:
    """`lexkeep ARGS` in a process that may not write a file past `limit` bytes: a write past
    it fails with EFBIG (File too large), as on a full disk it fails with ENOSPC (POSIX)."""
    import resource

    def limit_writes() -> None:
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # fail the write, do not kill
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    env = {k: v for k, v in os.environ.items() if not k.startswith("LEXKEEP_")}
    env["PYTHONDONTWRITEBYTECODE"] = "1"  # a cached module cut short would break later runs
    return subprocess.run(
        [sys.executable, "-m", "lexkeep.cli.main", *map(str, args)],
        preexec_fn=limit_writes,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def permission_bound() -> list[str]:
    """The command prefix that makes a process obey file permissions: none for a user; for
    root, `setpriv` without the capabilities that pass over them (skipped without it)."""
    import shutil

    if sys.platform == "win32":
        pytest.skip("needs POSIX permissions")
    if os.geteuid() != 0:
        return []
    prefix = ["setpriv", "--bounding-set=-dac_override,-dac_read_search"]
    if shutil.which("setpriv") is None or subprocess.run([*prefix, "true"]).returncode != 0:
        pytest.skip("root, and setpriv cannot drop the capabilities that pass over permissions")
    return prefix


class BoundResult:
    """What a permission-bound `lexkeep` run gave, read like the `cli` fixture's result."""

    def __init__(self, done: subprocess.CompletedProcess) -> None:
        self.exit_code, self.stdout, self.stderr = done.returncode, done.stdout, done.stderr


def bound_cli(cwd: Path):
    """Like the `cli` fixture, but each call runs `lexkeep` in a process that obeys file
    permissions (`permission_bound`), in `cwd`, without LEXKEEP_* settings."""
    prefix = permission_bound()
    env = {k: v for k, v in os.environ.items() if not k.startswith("LEXKEEP_")}

    def invoke(*args: object) -> BoundResult:
        done = subprocess.run(
            [*prefix, sys.executable, "-m", "lexkeep.cli.main", *map(str, args)],
            cwd=cwd, env=env, capture_output=True, text=True, timeout=120,
        )  # fmt: skip
        return BoundResult(done)

    return invoke


def children_of(pid: int) -> set[int]:
    """The processes `pid` forked that still run (Linux /proc)."""
    import contextlib

    found: set[int] = set()
    for task in Path(f"/proc/{pid}/task").glob("*"):
        with contextlib.suppress(OSError):
            found.update(int(c) for c in (task / "children").read_text().split())
    return found


def still_running(pid: int) -> bool:
    """Whether process `pid` runs (not gone, not a zombie; Linux /proc)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(") ")[1][0] != "Z"
    except OSError:
        return False


def left_running(pids: list[int], seconds: float = 10) -> list[int]:
    """Of `pids`, those still running after up to `seconds`; they are killed (not to be left
    to the next test), so the caller only asserts there were none."""
    deadline = time.monotonic() + seconds
    while any(still_running(pid) for pid in pids) and time.monotonic() < deadline:
        time.sleep(0.1)
    left = [pid for pid in pids if still_running(pid)]
    for pid in left:
        os.kill(pid, signal.SIGKILL)
    return left


# What takes a store back to before each migration from 004 on (tests of older stores).
_UNDO_MIGRATION = {
    5: [
        f"ALTER TABLE ingest_runs DROP COLUMN {column}"
        for column in (
            "unknown_types",
            "first_unknown_type_line",
            "truncated_line",
            "truncated_document",
        )
    ],
    4: ["DROP TABLE request_log_state"],
    6: ["ALTER TABLE ingest_runs DROP COLUMN numbered_under"],
    7: [
        f"ALTER TABLE ingest_runs DROP COLUMN {column}"
        for column in (
            "nul_tail_bytes",
            "nul_tail_after_line",
            "nul_gaps",
            "first_nul_gap_bytes",
            "first_nul_gap_after_line",
        )
    ],
    8: ["DROP TABLE renamed_away"],
    9: ["ALTER TABLE ingest_runs DROP COLUMN nul_tail_cut"],
}


def undo_migrations_after(store: Store, version: int) -> None:
    """Make `store` what lexkeep wrote at schema `version` as far as migrations 004 and later
    go (a test undoes earlier ones itself), and forget every migration after `version`."""
    assert max(v for v, _, _ in migrations()) == max(_UNDO_MIGRATION), "undo the new migration"
    for later in sorted(_UNDO_MIGRATION, reverse=True):
        if later > version:
            for sql in _UNDO_MIGRATION[later]:
                store.con.execute(sql)
    store.con.execute("DELETE FROM schema_migrations WHERE version > ?", [version])


def position_holes(store: Store) -> list[tuple]:
    """Conversations whose timeline is not numbered 0..max_position without holes or repeats
    (docs/formats.md, "Positions"), with what they hold; [] when every one is."""
    return store.con.execute(
        """
        WITH p AS (
            SELECT conversation_id AS c, position FROM messages
            UNION ALL SELECT conversation_id, position FROM tool_calls
            UNION ALL SELECT conversation_id, position FROM tool_results
            UNION ALL SELECT conversation_id, position FROM boundaries
        )
        SELECT c.id, c.max_position, count(p.position), count(DISTINCT p.position),
               min(p.position), max(p.position)
        FROM conversations c LEFT JOIN p ON p.c = c.id
        GROUP BY c.id, c.max_position
        HAVING count(p.position) <> c.max_position + 1
            OR count(DISTINCT p.position) <> count(p.position)
            OR coalesce(min(p.position), 0) <> 0
            OR coalesce(max(p.position), -1) <> c.max_position
        ORDER BY c.id
        """
    ).fetchall()


def shared_data() -> Path:
    """The shared corpus; tests that need it skip with a reason when it is not beside the repo
    (or where $LEXKEEP_SHARED_DATA says)."""
    if not SHARED_DATA.is_dir():
        pytest.skip(f"shared corpus not found at {SHARED_DATA} (set LEXKEEP_SHARED_DATA)")
    return SHARED_DATA


def repeated_call_file(tmp_path: Path, fmt: str) -> tuple[Path, str, str]:
    """A session file of `fmt` whose call id `call_1` comes three times: line 2 first, line 3
    with other input, line 4 as on line 2 (in other key order). (file, conversation, name)."""

    def claude(uuid: str, kind: str, **kw: object) -> dict:
        return {"type": kind, "uuid": uuid, "sessionId": "s1", "parentUuid": None, **kw}

    def use(uuid: str, mid: str, args: dict) -> dict:
        block = {"type": "tool_use", "id": "call_1", "name": "Bash", "input": args}
        return claude(uuid, "assistant", message={"id": mid, "content": [block]})

    def codex(args: str) -> dict:
        call = {"type": "function_call", "call_id": "call_1", "name": "shell", "arguments": args}
        return {"timestamp": "2026-01-02T03:04:05Z", "type": "response_item", "payload": call}

    if fmt == "claude":
        text = {"role": "user", "content": "list INV-2041 please"}
        values = [
            claude("u1", "user", message=text),
            use("a1", "msg_1", {"command": "ls INV-2041", "timeout": 5}),
            use("a2", "msg_2", {"command": "ls INV-2014", "timeout": 5}),
            use("a3", "msg_3", {"timeout": 5, "command": "ls INV-2041"}),
        ]
        path, conv = tmp_path / "s1.jsonl", "s1"
    else:
        meta = {"id": "r1", "timestamp": "2026-01-02T03:04:05Z"}
        values = [
            {"timestamp": "2026-01-02T03:04:05Z", "type": "session_meta", "payload": meta},
            codex('{"cmd": "ls INV-2041", "timeout": 5}'),
            codex('{"cmd": "ls INV-2014", "timeout": 5}'),
            codex('{"timeout":5,"cmd":"ls INV-2041"}'),
        ]
        path, conv = tmp_path / "rollout-r1.jsonl", "r1"
    path.write_bytes(b"".join(orjson.dumps(v) + b"\n" for v in values))
    return path, conv, "Bash" if fmt == "claude" else "shell"


def repeated_result_file(tmp_path: Path, fmt: str) -> tuple[Path, str]:
    """A session file of `fmt` with one tool call `call_1` (line 2) whose result comes three
    times: line 3 first, line 4 with other text, line 5 as on line 3. (file, conversation)."""

    def claude(uuid: str, kind: str, **kw: object) -> dict:
        return {"type": kind, "uuid": uuid, "sessionId": "s1", "parentUuid": None, **kw}

    def result(uuid: str, text: str) -> dict:
        block = {"type": "tool_result", "tool_use_id": "call_1", "content": text}
        return claude(uuid, "user", message={"role": "user", "content": [block]})

    def codex(payload: dict) -> dict:
        return {"timestamp": "2026-01-02T03:04:05Z", "type": "response_item", "payload": payload}

    def output(text: str) -> dict:
        return codex({"type": "function_call_output", "call_id": "call_1", "output": text})

    if fmt == "claude":
        use = {"type": "tool_use", "id": "call_1", "name": "Bash", "input": {"command": "ls"}}
        values = [
            claude("u1", "user", message={"role": "user", "content": "list INV-2041 please"}),
            claude("a1", "assistant", message={"id": "msg_1", "content": [use]}),
            result("r1", "INV-2041.txt"),
            result("r2", "INV-2014.txt"),
            result("r3", "INV-2041.txt"),
        ]
        path, conv = tmp_path / "s1.jsonl", "s1"
    else:
        meta = {"id": "r1", "timestamp": "2026-01-02T03:04:05Z"}
        call = {"type": "function_call", "call_id": "call_1", "name": "shell", "arguments": "{}"}
        values = [
            {"timestamp": "2026-01-02T03:04:05Z", "type": "session_meta", "payload": meta},
            codex(call),
            output("INV-2041.txt"),
            output("INV-2014.txt"),
            output("INV-2041.txt"),
        ]
        path, conv = tmp_path / "rollout-r1.jsonl", "r1"
    path.write_bytes(b"".join(orjson.dumps(v) + b"\n" for v in values))
    return path, conv


def on_terminal(
    args: list[str],
    *,
    cols: int | None = None,
    stream: str = "stderr",
    check: bool = True,
    env: dict[str, str] | None = None,
    raw: bool = False,
) -> str:
    """Run lexkeep with `stream` (stdout or stderr) on a pseudo-terminal (`cols` wide if
    given; the other stream goes nowhere); what it wrote there, without colours and cursor
    moves (`raw`: with them). `check`: the command must exit 0. `env`: variables to add."""
    import fcntl
    import pty
    import re
    import struct
    import subprocess
    import termios

    leader, follower = pty.openpty()
    if cols is not None:
        fcntl.ioctl(follower, termios.TIOCSWINSZ, struct.pack("HHHH", 50, cols, 0, 0))
    hidden = ("COLUMNS", "LINES", "NO_COLOR", "FORCE_COLOR")
    run_env = {k: v for k, v in os.environ.items() if k not in hidden} | (env or {})
    streams = {"stdout": subprocess.DEVNULL, "stderr": subprocess.DEVNULL, stream: follower}
    proc = subprocess.Popen(
        [sys.executable, "-m", "lexkeep.cli.main", *args],
        stdout=streams["stdout"],
        stderr=streams["stderr"],
        env=run_env,
    )
    os.close(follower)
    chunks = []
    while True:
        try:
            chunk = os.read(leader, 65536)
        except OSError:  # EIO: the child closed the terminal
            break
        if not chunk:
            break
        chunks.append(chunk)
    code = proc.wait(timeout=60)
    os.close(leader)
    if check:
        assert code == 0, b"".join(chunks).decode(errors="replace")
    text = b"".join(chunks).decode()
    return text if raw else re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", text)


GENERATE = REPO / "benchmarks" / "generate.py"


@pytest.fixture(scope="session")
def generated(tmp_path_factory: pytest.TempPathFactory):
    """`generated(fmt, size, seed=7)`: the folder `benchmarks/generate.py` writes for those
    arguments, made once per run and shared by the tests and test processes that ask for the
    same (the generator is deterministic). Read it only: copy what a test changes."""
    import fcntl
    import shutil

    base = tmp_path_factory.getbasetemp()
    # pytest-xdist gives each test process a folder in the run's own: share that one.
    root = base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base
    cache = root / "generated"
    cache.mkdir(exist_ok=True)

    def make(fmt: str, size: str, seed: int = 7) -> Path:
        out = cache / f"{fmt}-{size}-{seed}"
        with open(cache / f"{out.name}.lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)  # another process may be making it
            if not out.is_dir():
                part = cache / f"{out.name}.part"
                shutil.rmtree(part, ignore_errors=True)
                args = ["--format", fmt, "--size", size, "--seed", str(seed), "--out", str(part)]
                made = subprocess.run(
                    [sys.executable, str(GENERATE), *args],
                    capture_output=True,
                    text=True,
                    timeout=300,
                )
                assert made.returncode == 0, made.stderr
                part.rename(out)
        return out

    return make
