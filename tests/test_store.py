"""The store: migrations are numbered, recorded, idempotent; transactions roll back."""

from __future__ import annotations

import tempfile
import time
from pathlib import Path

import duckdb
import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lexkeep.core.errors import ConfigError, StoreError
from lexkeep.core.store import SPILL_OWNER, Store, bulk_insert, migrations

SAMPLE_TRACES = Path(__file__).resolve().parent.parent / "sample_traces"


def test_migrations_are_recorded_once(db_file):
    with Store.open(db_file) as store:
        versions = [
            r[0] for r in store.con.execute("SELECT version FROM schema_migrations").fetchall()
        ]
        assert versions == [v for v, _, _ in migrations()]
    with Store.open(db_file) as store:  # reopening applies nothing twice
        assert store.migrate() == []
        assert store.schema_version() == len(migrations())


def test_newer_store_is_refused(db_file):
    with Store.open(db_file) as store:
        store.con.execute("INSERT INTO schema_migrations (version, name) VALUES (999, 'future')")
    with pytest.raises(StoreError, match="newer lexkeep"):
        Store.open(db_file)


def test_another_programs_duckdb_file_is_refused_and_left_as_it_was(tmp_path):
    """Another program's DuckDB file has tables but no schema_migrations: lexkeep neither reads
    it as a store nor writes its tables into it (a `messages` table of its own would clash)."""
    other = tmp_path / "other.duckdb"
    duckdb.connect(str(other)).execute("CREATE TABLE notes (t VARCHAR)").close()
    for read_only in (True, False):
        with pytest.raises(StoreError, match="a DuckDB database but not a lexkeep store") as info:
            Store.open(other, read_only=read_only)
        assert "other tables: notes" in str(info.value)
    tables = duckdb.connect(str(other), read_only=True).execute(
        "SELECT table_name FROM duckdb_tables()"
    )
    assert tables.fetchall() == [("notes",)]


def test_an_empty_duckdb_file_is_no_store_to_read_but_one_to_write(tmp_path):
    empty = tmp_path / "empty.duckdb"
    duckdb.connect(str(empty)).close()
    with pytest.raises(StoreError, match="no lexkeep store at .* empty DuckDB database"):
        Store.open(empty, read_only=True)
    with Store.open(empty) as store:  # a writing open makes it a store
        assert store.schema_version() == len(migrations())


def test_a_store_missing_a_migration_asks_for_a_writing_command(db_file):
    with Store.open(db_file) as store:
        store.con.execute("DELETE FROM schema_migrations WHERE version > 1")
    with pytest.raises(StoreError, match=r"needs migrating \(schema 1 of") as info:
        Store.open(db_file, read_only=True)
    assert (
        info.value.hint == f"ingest into it once (ingest_paths into Store.open({str(db_file)!r}))"
    )


def test_read_only_open_of_missing_file_is_a_clear_error(tmp_path):
    with pytest.raises(StoreError, match="no lexkeep store"):
        Store.open(tmp_path / "absent.duckdb", read_only=True)


def test_store_in_a_missing_folder_says_which_folder(tmp_path):
    with pytest.raises(StoreError, match="cannot open") as info:
        Store.open(tmp_path / "no" / "such" / "store.duckdb")
    assert info.value.hint == f"the folder {tmp_path / 'no' / 'such'} does not exist: create it"
    assert not (tmp_path / "no").exists()


@pytest.mark.parametrize("folder", ["locks", "unlocked"])
def test_a_path_with_lock_in_its_name_is_not_taken_for_a_held_lock(tmp_path, folder):
    """Any failure to open `/srv/locks/x.duckdb` read as "in use by another lexkeep process"
    (after waiting, for a reading open): the path holds the word that marks a held lock."""
    started = time.monotonic()
    with pytest.raises(StoreError, match="cannot open") as info:
        Store.open(tmp_path / folder / "store.duckdb")
    assert info.value.hint == f"the folder {tmp_path / folder} does not exist: create it"
    (tmp_path / folder).mkdir()
    Store.open(tmp_path / folder / "store.duckdb").close()
    (tmp_path / folder / "store.duckdb").write_bytes(b"\0" * 8 + b"DUCK" + b"\0" * 4084)
    with pytest.raises(StoreError) as info:  # a store cut short, opened to read
        Store.open(tmp_path / folder / "store.duckdb", read_only=True, lock_wait=5)
    assert "in use by another lexkeep process" not in str(info.value)
    assert time.monotonic() - started < 4  # no waiting for a lock nobody holds


def test_a_db_that_names_a_folder_says_so_and_names_a_file_to_use(tmp_path, cli):
    """`--db traces/` read as DuckDB's "IO Error: Could not read from file ...: Is a
    directory", with no hint."""
    folder = tmp_path / "traces"
    folder.mkdir()
    for read_only in (False, True):
        with pytest.raises(StoreError) as info:
            Store.open(folder, read_only=read_only)
        assert str(info.value) == f"{folder} is a folder, not a store file"
        assert info.value.hint == (  # to a library caller; the commands say --db (below)
            f"Store.open takes the store file, e.g. {folder / 'lexkeep.duckdb'};"
            " trace files and folders go to ingest_paths"
        )
    assert list(folder.iterdir()) == []
    for args in (("ingest", SAMPLE_TRACES), ("stats",), ("audit",)):
        result = cli(*args, "--db", folder)
        assert result.exit_code == 2, result.stderr
        assert result.stderr.startswith(f"Error: {folder} is a folder, not a store file\nHint:")
        assert f"Hint: --db names the store file, e.g. --db {folder / 'lexkeep.duckdb'};" in (
            result.stderr
        )


def test_not_a_database_is_a_clear_error(tmp_path):
    bogus = tmp_path / "notes.duckdb"
    bogus.write_text("hello, not a database\n")
    with pytest.raises(StoreError):
        Store.open(bogus)


@pytest.mark.parametrize(
    ("name", "body", "says"),
    [
        ("trace.jsonl", '{"type":"message","id":"m1"}\n', "(it looks like a trace file)"),
        ("table.csv", "a,b\n1,2\n", "not a DuckDB database"),
    ],
)
def test_a_db_that_names_a_trace_or_csv_file_is_refused(tmp_path, name, body, says):
    """DuckDB opens such a file as a read-only view and keeps writes in memory: an ingest into
    it reported success and stored nothing."""
    from conftest import SAMPLE_TRACES

    from lexkeep.core.ingest import ingest_paths

    target = tmp_path / name
    target.write_text(body)
    for read_only in (False, True):
        with pytest.raises(StoreError, match="is not a DuckDB database") as info:
            Store.open(target, read_only=read_only)
        assert says in str(info.value)
        assert "trace files go to ingest_paths" in info.value.hint
    with pytest.raises(StoreError), Store.open(target) as store:
        ingest_paths(store, [str(SAMPLE_TRACES / "invoice_altered.jsonl")])
    assert target.read_text() == body


def test_transaction_rolls_back_on_error(store):
    with pytest.raises(RuntimeError), store.transaction() as con:
        con.execute(
            "INSERT INTO conversations (id, format, source_file, source_line)"
            " VALUES ('c', 'lexkeep', 'f', 1)"
        )
        raise RuntimeError("crash between two writes")
    assert store.con.execute("SELECT count(*) FROM conversations").fetchone()[0] == 0


def test_bulk_insert_goes_through_read_json_and_skips_conflicts(store):
    cols = [
        ("id", "VARCHAR"),
        ("format", "VARCHAR"),
        ("source_file", "VARCHAR"),
        ("source_line", "BIGINT"),
    ]
    rows = [("c1", "lexkeep", "a.jsonl", 1), ("c2", "openai", "b.json", 3)]
    assert store.bulk_insert("conversations", cols, rows) == 2
    assert store.bulk_insert("conversations", cols, rows) == 2  # read again, inserted nothing
    got = store.con.execute("SELECT id, format FROM conversations ORDER BY id").fetchall()
    assert got == [("c1", "lexkeep"), ("c2", "openai")]


def test_bulk_insert_counts_the_rows_it_inserted(store):
    """The ingest learns from the count alone whether a write left rows out, instead of
    taking every inserted key back into Python."""
    from collections import Counter

    cols = [("id", "VARCHAR"), ("format", "VARCHAR"), ("source_file", "VARCHAR")]
    cols.append(("source_line", "BIGINT"))
    rows = [("c1", "lexkeep", "a.jsonl", 1), ("c2", "openai", "b.json", 3)]
    assert store.bulk_insert("conversations", cols, rows[:1], count_added=True) == 1
    assert store.bulk_insert("conversations", cols, rows + rows, count_added=True) == 1
    assert store.bulk_insert("conversations", cols, rows, count_added=True) == 0
    per_file: Counter[str] = Counter()
    more = [("c3", "lexkeep", "a.jsonl", 2), ("c1", "lexkeep", "a.jsonl", 1)]
    assert (
        store.bulk_insert("conversations", cols, more, added_per_file=per_file, count_added=True)
        == 1
    )
    assert per_file == {"a.jsonl": 1}


# Text DuckDB can hold (no lone surrogates), including NUL, controls, quotes and backslashes.
_TEXT = st.text(st.characters(blacklist_categories=("Cs",)), max_size=40)
_ROW = st.tuples(
    st.none() | _TEXT,
    st.none() | st.integers(-(2**63), 2**63 - 1),
    st.none() | st.integers(-(2**31), 2**31 - 1),
    st.none() | st.floats(allow_nan=False, allow_infinity=False),
    st.none() | st.booleans(),
    st.none() | st.lists(st.none() | _TEXT, max_size=4),
    st.none() | _TEXT | st.dictionaries(_TEXT, st.none() | _TEXT | st.integers(-5, 5), max_size=3),
)
_COLUMNS = [
    ("a", "VARCHAR"),
    ("b", "BIGINT"),
    ("c", "INTEGER"),
    ("d", "DOUBLE"),
    ("e", "BOOLEAN"),
    ("f", "VARCHAR[]"),
    ("g", "JSON"),
]


@settings(max_examples=60, deadline=None)
@given(rows=st.lists(_ROW, max_size=6))
def test_bulk_insert_stores_every_value_exactly(rows, tmp_path_factory):
    """Rows go through the file as JSON arrays, read as scalars when no column is JSON or a
    list, else as JSON: each value must come back exactly as DuckDB reads the same row
    written as a JSON object with the table's schema (text byte for byte, 64-bit integers,
    doubles, NULL distinct from empty, JSON as DuckDB writes it)."""
    folder = tmp_path_factory.mktemp("rows")
    con = duckdb.connect()
    try:
        for columns in (_COLUMNS[:5], _COLUMNS):
            names = [name for name, _ in columns]
            types = ", ".join(f"{name} {typ}" for name, typ in columns)
            con.execute(f"CREATE OR REPLACE TABLE got ({types})")
            cut = [row[: len(columns)] for row in rows]
            assert bulk_insert(con, "got", columns, cut, on_conflict="") == len(cut)
            objects = folder / "objects.ndjson"
            lines = [orjson.dumps(dict(zip(names, r, strict=True))) + b"\n" for r in cut]
            objects.write_bytes(b"".join(lines))
            schema = "{" + ", ".join(f"'{name}': '{typ}'" for name, typ in columns) + "}"
            want = con.execute(
                f"SELECT * FROM read_json(?, format='newline_delimited', columns={schema})",
                [str(objects)],
            ).fetchall()
            assert con.execute("SELECT * FROM got ORDER BY rowid").fetchall() == (
                want if cut else []
            )
    finally:
        con.close()


def test_bulk_insert_refuses_a_row_of_the_wrong_width(store):
    cols = [("id", "VARCHAR"), ("format", "VARCHAR")]
    with pytest.raises(ValueError, match="a row of 3 values for 2 columns"):
        store.bulk_insert("conversations", cols, [("c1", "lexkeep", "extra")])
    assert store.con.execute("SELECT count(*) FROM conversations").fetchone()[0] == 0


def test_second_writer_process_gets_a_clear_message(db_file):
    import subprocess
    import sys

    Store.open(db_file).close()
    holder = duckdb.connect(str(db_file))
    try:
        code = "\n".join(
            [
                "import sys",
                "from lexkeep.core.store import Store",
                "from lexkeep.core.errors import StoreError",
                "try:",
                f"    Store.open({str(db_file)!r})",
                "except StoreError as e:",
                "    print(e, e.hint)",
                "    sys.exit(3)",
            ]
        )
        proc = subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True, timeout=60
        )
    finally:
        holder.close()
    assert proc.returncode == 3, proc.stderr
    assert "in use by another lexkeep process" in proc.stdout


def test_columns_come_from_the_schema_in_declaration_order(store):
    assert store.columns("runs") == [
        ("id", "VARCHAR"),
        ("conversation_id", "VARCHAR"),
        ("status", "VARCHAR"),
        ("position", "BIGINT"),
        ("source_file", "VARCHAR"),
        ("source_line", "BIGINT"),
    ]
    with pytest.raises(StoreError, match="no table"):
        store.columns("nope")
    rows = [("r1", "c1", "completed", 0, "f.jsonl", 1)]
    assert store.bulk_insert("runs", None, rows) == 1
    assert store.con.execute("SELECT id, status FROM runs").fetchall() == [("r1", "completed")]


def test_memory_limit_bounds_duckdb_and_is_configurable(db_file, monkeypatch):
    with Store.open(db_file) as store:
        limit = store.con.execute("SELECT current_setting('memory_limit')").fetchone()[0]
        assert limit.replace(" ", "") in ("953.6MiB", "1.0GiB", "1GB")
    monkeypatch.setenv("LEXKEEP_MEMORY_LIMIT", "256MB")
    with Store.open(None) as store:
        limit = store.con.execute("SELECT current_setting('memory_limit')").fetchone()[0]
        assert limit.replace(" ", "") in ("244.1MiB", "256MB")
    monkeypatch.setenv("LEXKEEP_MEMORY_LIMIT", "lots")
    with pytest.raises(ConfigError, match="LEXKEEP_MEMORY_LIMIT"):
        Store.open(None)


def test_in_memory_store_spills_to_a_private_temp_folder_removed_on_close(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Past its memory limit an in-memory store (the audit's) writes under $TMPDIR, not `.tmp`
    in the working directory, and leaves nothing behind."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("LEXKEEP_MEMORY_LIMIT", "64MB")
    with Store.open(None) as store:
        folder = Path(store.con.execute("SELECT current_setting('temp_directory')").fetchone()[0])
        assert folder.is_dir() and folder.parent == Path(tempfile.gettempdir())
        # ~300 MB of distinct text in a temporary table: more than the limit allows in memory.
        store.con.execute(
            "CREATE TEMP TABLE big AS SELECT i, repeat(md5(i::VARCHAR), 10) AS t"
            " FROM range(1000000) r(i)"
        )
        assert store.con.execute("SELECT count(DISTINCT t) FROM big").fetchone()[0] == 1_000_000
        assert any(p.name != SPILL_OWNER for p in folder.iterdir()), "nothing was spilled"
    assert not folder.exists()
    assert not (tmp_path / ".tmp").exists()


def _hold_write_lock(db_file, seconds: float):
    """A process that holds the store open for writing for `seconds`, once it says so."""
    import subprocess
    import sys

    code = (
        "import sys, time, duckdb\n"
        f"con = duckdb.connect({str(db_file)!r})\n"
        "print('held', flush=True)\n"
        f"time.sleep({seconds})\n"
        "con.close()\n"
    )
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "held"
    return proc


def test_a_reading_open_waits_for_a_short_writer(db_file, monkeypatch):
    """`lexkeep context` beside an ingest of one session (a hook) waits for it, not exit 2."""
    import time

    Store.open(db_file).close()
    monkeypatch.setenv("LEXKEEP_LOCK_WAIT", "20")
    holder = _hold_write_lock(db_file, 1.0)
    try:
        started = time.monotonic()
        with Store.open(db_file, read_only=True) as store:
            assert store.schema_version() == len(migrations())
        assert time.monotonic() - started > 0.3  # it did wait for the writer
    finally:
        holder.wait(timeout=60)


def test_a_reading_open_gives_up_after_its_wait_and_a_writer_never_waits(db_file, monkeypatch):
    import time

    Store.open(db_file).close()
    holder = _hold_write_lock(db_file, 30.0)
    try:
        monkeypatch.setenv("LEXKEEP_LOCK_WAIT", "0.5")
        started = time.monotonic()
        with pytest.raises(StoreError, match=r"in use by another lexkeep process .*; waited 0.5 s"):
            Store.open(db_file, read_only=True)
        assert 0.4 < time.monotonic() - started < 10
        started = time.monotonic()
        with pytest.raises(StoreError, match="in use by another lexkeep process") as info:
            Store.open(db_file)  # a second writer is refused at once
        assert "waited" not in str(info.value) and time.monotonic() - started < 0.4
        monkeypatch.setenv("LEXKEEP_LOCK_WAIT", "soon")
        with pytest.raises(ConfigError, match="LEXKEEP_LOCK_WAIT"):
            Store.open(db_file, read_only=True)
    finally:
        holder.kill()
        holder.wait(timeout=60)


def _readable_by_another_process(path) -> bool:
    import subprocess
    import sys

    code = "import sys, duckdb; duckdb.connect(sys.argv[1], read_only=True).close()"
    done = subprocess.run([sys.executable, "-c", code, str(path)], capture_output=True)
    return done.returncode == 0


def test_store_on_demand_is_open_only_while_used_unless_held(db_file):
    from lexkeep.core.store import StoreOnDemand

    Store.open(db_file).close()
    access = StoreOnDemand(db_file, wait=0, first_wait=0)
    with access.use() as outer:
        with access.use() as inner:  # a second user (another slot) shares the open store
            assert inner.execute("SELECT 1").fetchone() == (1,)
        assert not _readable_by_another_process(db_file)
        outer.execute("CREATE TABLE scratch AS SELECT 42 AS n")
    assert access.opened == 1
    assert _readable_by_another_process(db_file)  # closed between uses
    with access.use() as con:
        assert con.execute("SELECT n FROM scratch").fetchone() == (42,)
    assert access.opened == 2

    held = StoreOnDemand(db_file, hold=True)
    for _ in range(3):
        with held.use() as con:
            con.execute("SELECT 1")
    assert held.opened == 1 and not _readable_by_another_process(db_file)
    held.close()
    assert _readable_by_another_process(db_file)


def test_store_on_demand_waits_for_another_process_and_an_interrupt_ends_the_wait(db_file):
    import threading
    import time

    from lexkeep.core.errors import StoreLockedError
    from lexkeep.core.store import StoreOnDemand

    Store.open(db_file).close()
    holder = _hold_write_lock(db_file, 30.0)
    try:
        locked = pytest.raises(StoreLockedError, match=r"in use by .*; waited 0.3 s")
        with locked, StoreOnDemand(db_file, first_wait=0.3).use():
            pass
        access = StoreOnDemand(db_file, first_wait=30)
        access.interrupt()  # before the first try, as a busy machine may run it
        with pytest.raises(StoreError, match="interrupted while waiting"), access.use():
            pass
        access = StoreOnDemand(db_file, first_wait=30)
        threading.Timer(0.3, access.interrupt).start()
        started = time.monotonic()
        with pytest.raises(StoreError, match="interrupted while waiting"), access.use():
            pass
        assert time.monotonic() - started < 5
    finally:
        holder.kill()
        holder.wait(timeout=60)
    # once the other process lets go, a waiting open gets the store
    holder = _hold_write_lock(db_file, 0.5)
    try:
        with StoreOnDemand(db_file, first_wait=20).use() as con:
            assert con.execute("SELECT 1").fetchone() == (1,)
    finally:
        holder.wait(timeout=60)


def test_an_empty_file_is_a_new_store_and_no_store_to_read(tmp_path):
    path = tmp_path / "made-by-mktemp.duckdb"
    path.write_bytes(b"")
    with pytest.raises(StoreError, match=r"no lexkeep store at .* \(the file is empty\)"):
        Store.open(path, read_only=True)
    assert path.stat().st_size == 0  # left as it was
    with Store.open(path) as store:
        assert store.schema_version() == len(migrations())
    with Store.open(path, read_only=True) as store:
        assert store.schema_version() == len(migrations())


def test_opening_a_store_this_process_holds_otherwise_says_so(tmp_path):
    """DuckDB opens a file once per process: a read-only Store beside a writable one was
    reported as "not a DuckDB database"."""
    path = tmp_path / "s.duckdb"
    with Store.open(path):
        with pytest.raises(StoreError, match="already open in this process, and not read-only"):
            Store.open(path, read_only=True, lock_wait=0)
        with Store.open(path) as second:  # the same mode is fine
            assert second.schema_version() == len(migrations())


def _spilling_process(tmpdir: Path):
    """A process holding an in-memory store open (its spill folder under `tmpdir`), once it
    has printed the folder."""
    import os
    import subprocess
    import sys

    code = (
        "import time\n"
        "from lexkeep.core.store import Store\n"
        "store = Store.open(None)\n"
        "print(store.con.execute(\"SELECT current_setting('temp_directory')\").fetchone()[0],"
        " flush=True)\n"
        "time.sleep(60)\n"
        "store.close()\n"
    )
    env = {**os.environ, "TMPDIR": str(tmpdir)}
    proc = subprocess.Popen(
        [sys.executable, "-c", code], stdout=subprocess.PIPE, text=True, env=env
    )
    return proc, Path(proc.stdout.readline().strip())


def test_spill_folders_of_killed_processes_go_with_the_next_open(tmp_path: Path) -> None:
    """A process killed (SIGTERM, SIGKILL) leaves its spill folder; the next in-memory store
    removes it, and never the folder of a process still running."""
    import signal

    killed, gone = _spilling_process(tmp_path)
    alive, kept = _spilling_process(tmp_path)
    try:
        assert gone.parent == tmp_path and gone.is_dir() and kept.is_dir()
        killed.send_signal(signal.SIGTERM)
        killed.wait(timeout=30)
        assert gone.is_dir()  # nothing runs in a process killed by the signal
        third, fresh = _spilling_process(tmp_path)
        third.kill()
        third.wait(timeout=30)
        assert not gone.exists()
        assert kept.is_dir() and fresh.is_dir()  # killed after its own open cleaned up
        unrelated = tmp_path / "lexkeep-spill-not-ours"  # no owner file: never touched
        unrelated.mkdir()
        fourth, _ = _spilling_process(tmp_path)
        fourth.terminate()
        fourth.wait(timeout=30)
        assert not fresh.exists() and kept.is_dir()
    finally:
        for proc in (killed, alive):
            proc.kill()
            proc.wait(timeout=30)
    assert unrelated.is_dir()


def test_temp_folder_is_listed_for_stale_spill_folders_once_per_process(tmp_path: Path) -> None:
    """Every in-memory store open (each audit, each `context` build in a long process) listed
    all of $TMPDIR to find stale spill folders, a cost that grows with a busy /tmp. A process
    now looks once: a folder left stale after its first open waits for the next process."""
    import os
    import subprocess
    import sys

    code = (
        "import os, sys\n"
        "from lexkeep.core.store import SPILL_OWNER, SPILL_PREFIX, Store\n"
        "def stale(name):\n"
        "    folder = os.path.join(sys.argv[1], SPILL_PREFIX + name)\n"
        "    os.mkdir(folder)\n"
        "    open(os.path.join(folder, SPILL_OWNER), 'w').close()  # no process holds it\n"
        "    return folder\n"
        "first = stale('first')\n"
        "Store.open(None).close()\n"
        "second = stale('second')  # stale after the first open\n"
        "Store.open(None).close()\n"
        "print(os.path.exists(first), os.path.exists(second))\n"
    )
    env = {**os.environ, "TMPDIR": str(tmp_path)}
    got = subprocess.run(
        [sys.executable, "-c", code, str(tmp_path)],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    assert got.returncode == 0, got.stderr
    assert got.stdout.split() == ["False", "True"]
    again = subprocess.run(
        [sys.executable, "-c", "from lexkeep.core.store import Store; Store.open(None).close()"],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    assert again.returncode == 0, again.stderr
    assert not (tmp_path / "lexkeep-spill-second").exists()  # the next process removes it


@pytest.fixture(scope="module")
def reorder_store():
    """One in-memory store for every example below (each empties its messages first)."""
    with Store.open(None) as store:
        yield store


@settings(max_examples=60, deadline=None)
@given(
    lines=st.lists(
        st.tuples(st.sampled_from(["a.jsonl", "b.jsonl"]), st.booleans()), min_size=1, max_size=14
    ),
    order=st.randoms(use_true_random=False),
)
def test_restore_file_order_moves_only_lines_read_again(lines, order, reorder_store):
    """Records stored in timeline order, some of whose lines were skipped and read again later
    (appended after everything, in any order): each file ends in its line order on the same
    positions, the records stored first keep their order, and one file ends as one ingest of
    it would have stored it."""
    from lexkeep.core.store import restore_file_order

    store = reorder_store
    store.con.execute("DELETE FROM messages")  # the last example's conversation

    line_of: dict[str, int] = {}
    timeline = []  # (file, line) in the order the files were first read
    for file, _ in lines:
        line_of[file] = line_of.get(file, 0) + 1
        timeline.append((file, line_of[file]))
    late = [rec for rec, (_, skipped) in zip(timeline, lines, strict=True) if skipped]
    order.shuffle(late)
    stored = [rec for rec in timeline if rec not in late] + late
    store.bulk_insert(
        "messages",
        None,
        [
            (f"{f}:{n}", "c1", None, pos, "user", "user_text", "completed", "x", None, f, n)
            for pos, (f, n) in enumerate(stored)
        ],
    )
    restore_file_order(store.con, ["c1"])
    got = [
        (f, n)
        for f, n in store.con.execute(
            "SELECT source_file, source_line FROM messages WHERE conversation_id = 'c1'"
            " ORDER BY position"
        ).fetchall()
    ]
    assert sorted(got) == sorted(stored)  # the same positions, each used once
    for file in ("a.jsonl", "b.jsonl"):
        of_file = [n for f, n in got if f == file]
        assert of_file == sorted(of_file)
    early = [rec for rec in stored if rec not in late]
    assert [rec for rec in got if rec not in late] == early
    # With the files read one after the other, that is the order one ingest gives them.
    if all(f == "a.jsonl" for f, _ in timeline) or not late:
        assert got == timeline
