"""Reading files ahead in worker processes (core/parallel.py) writes exactly the same store.

Folders of real traces (../shared/data) and generated Claude Code / Codex dumps are ingested
with the read-ahead forced on (`read_ahead_min_bytes=0`, two workers) and off (`None`), into
two DuckDB files whose tables are compared row for row. A bad line keeps its exact
file:line:col either way. The lean store of an audit keeps what the audit reads, and audits
the same.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import orjson
import pytest
from conftest import INGEST_TABLES, children_of, ingest_rows, left_running, shared_data

from lexkeep.audit.engine import audit_store
from lexkeep.audit.settings import AuditSettings
from lexkeep.core import ingest as ingest_module
from lexkeep.core import keyset, parallel
from lexkeep.core.errors import ConfigError, InputError
from lexkeep.core.ingest import ingest_paths
from lexkeep.core.parallel import ReadAhead
from lexkeep.core.rules import default_rules
from lexkeep.core.store import Store

# Two ingests of the same files are compared row for row, identifier scans included: the
# extractor's 50 ms CPU budget per text can run out for one of them on a loaded machine (a
# scan then comes back incomplete), so these ingests get a budget no text reaches.
RULES = replace(default_rules(), timeout=10.0)

REPO = Path(__file__).resolve().parent.parent
INVOICE = REPO / "tests" / "fixtures" / "lexkeep" / "invoice.jsonl"


@pytest.fixture
def counted_takes(monkeypatch: pytest.MonkeyPatch) -> list[bool]:
    """Two read workers, and a record of each take(): True when a worker had read the file."""
    monkeypatch.setenv("LEXKEEP_READ_WORKERS", "2")
    took: list[bool] = []
    take = ReadAhead.take

    def counting(self: ReadAhead, item: str) -> object:
        got = take(self, item)
        took.append(got is not None)
        return got

    monkeypatch.setattr(ReadAhead, "take", counting)
    return took


def _ingest_both(
    tmp_path: Path, paths: list[str], **options: object
) -> tuple[dict, dict, list, list]:
    """(ahead rows, in-place rows, ahead counts or error, in-place counts or error)."""
    tmp_path.mkdir(parents=True, exist_ok=True)
    rows, counts = [], []
    for name, min_bytes in (("ahead", 0), ("here", None)):
        with Store.open(str(tmp_path / f"{name}.duckdb")) as store:
            try:
                got: object = ingest_paths(
                    store, paths, read_ahead_min_bytes=min_bytes, **{"rules": RULES, **options}
                )
            except InputError as exc:
                got = (str(exc), exc.path, exc.line, exc.col)
            rows.append(ingest_rows(store))
            counts.append(got)
    return rows[0], rows[1], counts[0], counts[1]


@pytest.mark.parametrize("folder", ["claude-code-log", "apollo-tau-bench"])
def test_real_folders_ingest_the_same_read_ahead(tmp_path, counted_takes, folder):
    path = shared_data() / folder
    ahead, here, counts_ahead, counts_here = _ingest_both(tmp_path, [str(path)], skip_invalid=True)
    assert counts_ahead == counts_here
    for table in INGEST_TABLES:
        assert ahead[table] == here[table], table
    assert sum(counted_takes) > 50  # most files were read by a worker


@pytest.mark.parametrize("fmt", ["claude", "codex"])
def test_generated_dumps_ingest_the_same_read_ahead_lean_or_not(
    tmp_path, counted_takes, fmt, generated
):
    dump = generated(fmt, "2MB")
    for lean in (False, True):
        ahead, here, counts_ahead, counts_here = _ingest_both(
            tmp_path / str(lean), [str(dump)], lean=lean
        )
        assert counts_ahead == counts_here
        for table in INGEST_TABLES:
            assert ahead[table] == here[table], (lean, table)
        assert ahead["identifiers"] and ahead["boundaries"]
    assert sum(counted_takes) >= 2 * len(list(dump.rglob("*.jsonl")))


def test_a_bad_line_read_ahead_stops_at_the_same_file_line_and_column(tmp_path, counted_takes):
    folder = tmp_path / "traces"
    source = shared_data() / "claude-code-log" / "test" / "test_data"
    names = ["dag_simple.jsonl", "dag_fork.jsonl", "sidechain.jsonl", "session_b.jsonl"]
    for i, name in enumerate(names):
        data = (source / name).read_bytes()
        if i == 2:  # the third file breaks on its second line
            first, rest = data.split(b"\n", 1)
            data = first + b"\n{not json\n" + rest
        (folder / f"{i}-{name}").parent.mkdir(exist_ok=True)
        (folder / f"{i}-{name}").write_bytes(data)
    ahead, here, error_ahead, error_here = _ingest_both(tmp_path / "db", [str(folder)])
    assert error_ahead == error_here
    assert error_ahead[1].endswith("2-sidechain.jsonl") and error_ahead[2] == 2
    assert ahead == here  # the files before it are written, the rest is not
    assert len(ahead["ingest_runs"]) == 2
    assert any(counted_takes)


def test_files_ingested_before_are_read_in_place(tmp_path, counted_takes):
    folder = shared_data() / "claude-code-log" / "test" / "test_data" / "real_projects"
    with Store.open(str(tmp_path / "s.duckdb")) as store:
        first = ingest_paths(store, [str(folder)], read_ahead_min_bytes=0, skip_invalid=True)
        assert any(counted_takes)
        counted_takes.clear()
        again = ingest_paths(store, [str(folder)], read_ahead_min_bytes=0, skip_invalid=True)
    # Only files no ingest records (empty, not a trace) are candidates; those are read here.
    assert {c.status for c in again} == {"unchanged", "empty", "unrecognised"}
    assert len(again) == len(first)
    assert len(counted_takes) == sum(c.status != "unchanged" for c in again)
    assert not any(counted_takes)


# -- the lean store of an audit ------------------------------------------------------------


def test_lean_ingest_keeps_what_the_audit_reads(tmp_path, generated):
    """Users' messages, tool calls, boundaries, conversations and identifiers as a full ingest
    writes them (positions count every record); no tool results, runs or other messages."""
    dump = generated("claude", "1MB")
    paths = [str(dump), str(INVOICE)]
    got = {}
    reports = {}
    for lean in (False, True):
        with Store.open(str(tmp_path / f"{lean}.duckdb")) as store:
            ingest_paths(store, paths, lean=lean, rules=RULES)
            got[lean] = ingest_rows(store)
            reports[lean] = audit_store(store, AuditSettings())
    full, lean = got[False], got[True]
    users = [row for row in full["messages"] if row[5] == "user_text"]
    assert users and lean["messages"] == users
    assert len(full["messages"]) > len(users)
    for table in ("conversations", "boundaries", "identifiers", "identifier_scans"):
        assert lean[table] == full[table], table
    # Tool calls keep their raw arguments, which the audit reads; not the parsed column.
    arguments = 6  # conversation_id, call_id, message_id, position, name, arguments_raw, arguments
    assert [r[:arguments] + r[arguments + 1 :] for r in lean["tool_calls"]] == [
        r[:arguments] + r[arguments + 1 :] for r in full["tool_calls"]
    ]
    assert {r[arguments] for r in lean["tool_calls"]} == {None}
    assert any(r[arguments] is not None for r in full["tool_calls"])
    assert full["tool_results"] and full["runs"]
    assert lean["tool_results"] == [] and lean["runs"] == []
    assert reports[True].totals.audited > 0
    assert reports[True] == reports[False]


# -- ReadAhead itself ----------------------------------------------------------------------


def _square(n: int) -> int | None:
    if n == 7:
        raise ValueError("seven")
    if n == 13:
        return None
    return n * n


def _die(n: int) -> int:
    if n == 3:
        os._exit(1)  # a worker killed mid-read
    return n


def test_read_ahead_hands_results_back_in_order_and_skips_what_it_cannot_give():
    with ReadAhead(_square, list(range(30)), workers=2, depth=3) as ahead:
        assert ahead.take(0) == 0
        assert ahead.take(1) == 1
        assert ahead.take(4) == 16  # 2 and 3 passed over
        assert ahead.take(2) is None  # behind: the caller reads it
        assert ahead.take(7) is None  # fn raised
        assert ahead.take(13) is None  # fn said no
        assert ahead.take(14) == 196
        assert ahead.take(99) is None  # never an item
        assert ahead.take(19) is None  # a jump past what is queued is read here...
        assert ahead.take(20) == 400  # ...and reading ahead goes on after it
    assert ahead.take(21) is None  # closed


def test_a_dead_worker_only_costs_its_files():
    results: list[int | None] = []
    take: Callable[[int], int | None]
    with ReadAhead(_die, list(range(12)), workers=2, depth=4) as ahead:
        take = ahead.take
        results = [take(n) for n in range(12)]
    assert results[:3] == [0, 1, 2]
    assert results[3] is None  # the dead worker's file (and the pool's) are read in place
    assert all(got in (None, n) for n, got in enumerate(results))


def test_read_workers_follow_the_environment(monkeypatch):
    monkeypatch.setenv("LEXKEEP_READ_WORKERS", "0")
    assert parallel.read_workers() == 0
    monkeypatch.delenv("LEXKEEP_READ_WORKERS")
    assert parallel.read_workers() == parallel.cpu_count()


@pytest.mark.parametrize("name", ["LEXKEEP_READ_WORKERS", "LEXKEEP_EXTRACT_WORKERS"])
def test_a_worker_count_that_is_not_a_number_is_a_clear_error(cli, monkeypatch, tmp_path, name):
    monkeypatch.setenv(name, "two")
    with pytest.raises(ConfigError, match=f"{name} must be a whole number"):
        parallel.env_count(name, 1)
    folder = tmp_path / "traces"
    folder.mkdir()
    (folder / "a.jsonl").write_bytes(INVOICE.read_bytes())
    result = cli("ingest", folder, "--db", tmp_path / "s.duckdb")
    assert result.exit_code == 2
    assert f"{name} must be a whole number of processes, not 'two'" in result.stderr


def _line(**fields: object) -> str:
    return orjson.dumps(fields).decode() + "\n"


def test_lean_runs_of_counted_records_keep_positions_times_and_counts(tmp_path, counted_takes):
    """Tool output and non-user messages, sent by the readers as one _Filler per run, give the
    positions, the conversation's first and last time and the message counts of each record:
    times out of order inside a run, a run that ends the conversation, two conversations."""
    folder = tmp_path / "traces"
    folder.mkdir()
    for n in range(2):
        c = f"c{n}"
        lines = [
            _line(type="conversation", id=c),
            _line(type="message", id=f"{c}u1", conversation_id=c, role="user",
                  text="look up INV-2025-08-44719", time="2025-08-14T10:00:05Z"),
            _line(type="message", id=f"{c}a1", conversation_id=c, role="assistant",
                  text="later", time="2025-08-14T10:09:00Z"),
            _line(type="message", id=f"{c}a2", conversation_id=c, role="assistant",
                  text="earliest", time="2025-08-14T09:59:00Z"),
            _line(type="tool_call", id=f"{c}t1", conversation_id=c, name="lookup",
                  arguments='{"id": "INV-2025-08-44719"}'),
            _line(type="tool_result", call_id=f"{c}t1", conversation_id=c, text="found"),
            _line(type="compaction", id=f"{c}b1", conversation_id=c, summary="an invoice"),
            _line(type="message", id=f"{c}u2", conversation_id="other", role="user",
                  text="and ORD-7731", time="2025-08-14T10:01:00Z"),
            _line(type="message", id=f"{c}a3", conversation_id=c, role="assistant",
                  text="last of all", time="2025-08-14T11:00:00Z"),
            _line(type="message", id=f"{c}a4", conversation_id=c, role="assistant",
                  text="between", time="2025-08-14T10:30:00Z"),
        ]  # fmt: skip
        (folder / f"{n}.jsonl").write_text("".join(lines), encoding="utf-8")
    ahead, here, counts_ahead, counts_here = _ingest_both(tmp_path / "db", [str(folder)], lean=True)
    assert counts_ahead == counts_here
    assert ahead == here
    assert all(counted_takes) and len(counted_takes) == 2
    times = {row[0]: (row[4], row[5], row[6]) for row in ahead["conversations"]}
    assert times["c0"] == ("2025-08-14T09:59:00Z", "2025-08-14T11:00:00Z", 7)  # 8 records


# -- the lean store without primary keys ---------------------------------------------------
#
# An audit's private in-memory store drops the primary keys of its timeline and sidecar tables
# and the writer checks the keys itself (core.keyset.Keys). A lean ingest into a store on disk
# keeps the keys (DuckDB's ON CONFLICT DO NOTHING decides): both must hold the same rows.

_LEAN_TABLES = ("conversations", "messages", "tool_calls", "boundaries", "identifiers",
                "identifier_scans")  # fmt: skip


def _lean_rows(store: Store, paths: list[str], **options: object) -> dict:
    """A lean ingest of `paths` into `store`: its rows (or error) and how many keys it has."""
    with store:
        try:
            ingest_paths(store, paths, lean=True, **{"rules": RULES, **options})
        except InputError as exc:
            rows: dict = {"error": (str(exc), exc.path, exc.line)}
        else:
            rows = {}
        rows["keys"] = store.con.execute(
            "SELECT count(*) FROM duckdb_constraints() WHERE constraint_type = 'PRIMARY KEY'"
            " AND table_name IN ('messages', 'tool_calls', 'identifiers')"
        ).fetchone()[0]
        rows.update((t, r) for t, r in ingest_rows(store).items() if t in _LEAN_TABLES)
    return rows


def _lean_both(tmp_path: Path, paths: list[str], **options: object) -> tuple[dict, dict]:
    """(rows of the keyless in-memory lean store, rows of the keyed lean store on disk)."""
    unkeyed = _lean_rows(Store.open(None), paths, **options)
    return unkeyed, _lean_rows(Store.open(str(tmp_path / "keyed.duckdb")), paths, **options)


def _all_hashes_collide(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, int]]:
    """Every key hashes alike in core.keyset, so each committed key is confirmed by the store;
    returns the (table, number of keys) of each store lookup."""
    monkeypatch.setattr(keyset, "_hash", lambda key: 1)
    lookups: list[tuple[str, int]] = []
    stored_keys = ingest_module._stored_keys

    def counted(store: Store, table: str, keys: list[object]) -> set[object]:
        lookups.append((table, len(keys)))
        return stored_keys(store, table, keys)

    monkeypatch.setattr(ingest_module, "_stored_keys", counted)
    return lookups


@pytest.mark.parametrize("collide", [False, True], ids=["hashes", "colliding-hashes"])
@pytest.mark.parametrize("group_files", [1, 1000])
def test_lean_store_without_keys_keeps_the_first_of_repeated_ids(
    tmp_path, counted_takes, monkeypatch, group_files, collide
):
    """Messages, tool calls and boundaries repeated in a later file (a resumed session copies
    them), one with another text: the first one stays, its identifiers once; with the files
    in one transaction or each in its own. With every hash alike, a new key of a later group
    matches a committed hash and the store says it is new: it stays."""
    monkeypatch.setattr(ingest_module, "GROUP_FILES", group_files)
    lookups = _all_hashes_collide(monkeypatch) if collide else []
    folder = tmp_path / "traces"
    folder.mkdir()
    first = [
        _line(type="conversation", id="c"),
        _line(type="message", id="u1", conversation_id="c", role="user",
              text="refund INV-2025-08-44719 please"),
        _line(type="tool_call", id="t1", conversation_id="c", name="lookup",
              arguments='{"id": "INV-2025-08-44719"}'),
        _line(type="compaction", id="b1", conversation_id="c", summary="an invoice"),
    ]  # fmt: skip
    again = [
        *first,
        _line(type="message", id="u1", conversation_id="c", role="user",
              text="a different text for the same id: ORD-7731"),
        _line(type="tool_call", id="t1", conversation_id="c", name="other", arguments="{}"),
        _line(type="message", id="u2", conversation_id="c", role="user", text="and ORD-7731"),
    ]  # fmt: skip
    (folder / "a.jsonl").write_text("".join(first), encoding="utf-8")
    (folder / "b.jsonl").write_text("".join(again), encoding="utf-8")
    unkeyed, keyed = _lean_both(tmp_path, [str(folder)])
    assert (unkeyed.pop("keys"), keyed.pop("keys")) == (0, 3)
    assert unkeyed == keyed
    assert [m[0] for m in keyed["messages"]] == ["u1", "u2"]
    assert keyed["messages"][0][7] == "refund INV-2025-08-44719 please"  # text
    assert [c[1] for c in keyed["tool_calls"]] == ["t1"]
    assert sorted(i[3] for i in keyed["identifiers"]) == ["INV-2025-08-44719", "ORD-7731"]
    # Files in separate transactions: b.jsonl's keys (u1 twice, u2; t1 twice; b1) each met a
    # committed hash once, the first time they came.
    expected = [("messages", 2), ("tool_calls", 1), ("boundaries", 1)]
    assert sorted(lookups) == (sorted(expected) if collide and group_files == 1 else [])


def test_lean_store_without_keys_forgets_the_keys_of_a_group_rolled_back(tmp_path, monkeypatch):
    """A bad line rolls its group back and the files before it are written again: their
    keys (rows written record by record here) must not count as written by the rolled-back
    attempt."""
    monkeypatch.setattr(ingest_module, "CHUNK_ROWS", 1)
    folder = tmp_path / "traces"
    folder.mkdir()
    (folder / "a.jsonl").write_bytes(INVOICE.read_bytes())
    (folder / "b.jsonl").write_text('{"type": "conversation", "id": "z"}\n{not json\n')
    unkeyed, keyed = _lean_both(tmp_path, [str(folder)])
    assert unkeyed["error"][1:] == (str(folder / "b.jsonl"), 2)
    assert (unkeyed.pop("keys"), keyed.pop("keys")) == (0, 3)
    assert unkeyed == keyed
    assert keyed["messages"] and keyed["tool_calls"] and keyed["identifiers"]


@pytest.mark.parametrize("fmt", ["claude", "codex"])
def test_lean_store_without_keys_holds_the_same_rows(tmp_path, counted_takes, fmt, generated):
    dump = generated(fmt, "2MB")
    unkeyed, keyed = _lean_both(tmp_path, [str(dump)])
    assert unkeyed.pop("keys") == 0
    assert unkeyed == {k: v for k, v in keyed.items() if k != "keys"}
    assert keyed["identifiers"] and keyed["boundaries"]


_KEYED_CLAUDE: dict[str, dict] = {}


@pytest.mark.parametrize("collide", [False, True], ids=["hashes", "colliding-hashes"])
def test_lean_store_without_keys_on_real_claude_sessions(
    tmp_path, counted_takes, monkeypatch, collide
):
    """Real Claude Code sessions, resumed and forked ones included (copied records); also with
    every key's hash alike, when only the store's answer tells a copy from a new record."""
    monkeypatch.setattr(ingest_module, "GROUP_FILES", 3)  # several committed groups
    lookups = _all_hashes_collide(monkeypatch) if collide else []
    paths = [str(shared_data() / "claude-code-log")]
    unkeyed = _lean_rows(Store.open(None), paths, skip_invalid=True)
    # The keyed store on disk checks ids with its own keys, never with core.keyset's hashes:
    # it holds the same rows in both cases, so it is read once per test process.
    if "rows" not in _KEYED_CLAUDE:
        keyed_store = Store.open(str(tmp_path / "keyed.duckdb"))
        _KEYED_CLAUDE["rows"] = _lean_rows(keyed_store, paths, skip_invalid=True)
    keyed = _KEYED_CLAUDE["rows"]
    assert unkeyed.pop("keys") == 0
    assert unkeyed == {k: v for k, v in keyed.items() if k != "keys"}
    assert keyed["messages"]
    assert bool(lookups) == collide


@pytest.mark.skipif(not Path("/proc/self/task").exists(), reason="needs Linux /proc")
@pytest.mark.parametrize("how", [signal.SIGTERM, signal.SIGKILL])
def test_workers_end_when_the_ingest_is_killed(tmp_path, how, generated):
    """A CI timeout kills `lexkeep ingest` while its workers read ahead: they end with it
    instead of waiting for ever on their task pipe, holding the command's output open."""
    folder = generated("claude", "12MB") / "projects"
    env = {**os.environ, "LEXKEEP_READ_WORKERS": "2"}
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "lexkeep.cli.main",
            "ingest",
            str(folder),
            "--db",
            str(tmp_path / "s.duckdb"),
        ],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    workers: set[int] = set()
    deadline = time.monotonic() + 60
    while len(workers) < 2 and proc.poll() is None and time.monotonic() < deadline:
        workers |= children_of(proc.pid)
        time.sleep(0.02)
    if proc.poll() is not None:
        pytest.skip("the ingest ended before its workers were seen")
    proc.send_signal(how)
    proc.wait(timeout=30)
    left = left_running(workers)
    assert not left, f"workers still running after the ingest was killed: {left}"


def test_a_file_ending_in_nul_bytes_reads_the_same_read_ahead(tmp_path, counted_takes):
    """The NUL bytes a crash leaves at the end of a file are said of it, read by a worker or not
    (a worker counted what it skipped, and would have counted them as a skipped line)."""
    folder = tmp_path / "traces"
    folder.mkdir()
    (folder / "invoice.jsonl").write_bytes(INVOICE.read_bytes())
    claude = REPO / "sample_traces" / "claude_lost_path.jsonl"
    lines = claude.read_bytes().splitlines(keepends=True)
    (folder / "crashed.jsonl").write_bytes(b"".join(lines) + b"\0" * 100)
    # A restarted writer's lines after the NUL bytes of a crash (and a line it cut).
    resumed = lines[:4] + [lines[4][:9] + b"\0" * 20 + lines[4]] + lines[5:]
    (folder / "resumed.jsonl").write_bytes(b"".join(resumed))
    # A line the crash cut, then the NUL bytes it ends in.
    (folder / "cut.jsonl").write_bytes(b"".join(lines[:6]) + lines[6][:11] + b"\0" * 40)
    ahead, here, counts_ahead, counts_here = _ingest_both(tmp_path / "stores", [str(folder)])
    assert counts_ahead == counts_here
    for table in INGEST_TABLES:
        assert ahead[table] == here[table], table
    crashed = next(c for c in counts_ahead if c.path.endswith("crashed.jsonl"))
    assert crashed.nul_tail == (100, len(lines)) and crashed.skipped == {}
    gap = next(c for c in counts_ahead if c.path.endswith("resumed.jsonl"))
    assert gap.nul_gaps == ((20, 4, 9),) and gap.skipped == {}
    assert gap.messages == crashed.messages and gap.tool_calls == crashed.tool_calls
    cut = next(c for c in counts_ahead if c.path.endswith("cut.jsonl"))
    assert (cut.nul_tail, cut.nul_tail_cut, cut.truncated_last_line) == ((40, 6), 11, False)
    assert sum(counted_takes) == 4  # every file read by a worker
