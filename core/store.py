"""The DuckDB store: opening, numbered migrations, transactions and bulk writes."""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import stat
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from importlib import resources
from pathlib import Path

import duckdb
import orjson

try:
    import fcntl
except ImportError:  # not POSIX: spill folders are not marked with a locked owner file
    fcntl = None  # type: ignore[assignment]

from lexkeep.core.errors import (
    ConfigError,
    StoreError,
    StoreLockedError,
    doing,
    storage_error,
)
from lexkeep.core.jsonnumbers import compact_text
from lexkeep.core.paths import (
    ShownPaths,
    current_folder,
    search_hint,
    stored_path,
    unsearchable_folder,
)
from lexkeep.core.readers import LEADING

DEFAULT_DB = "lexkeep.duckdb"
DEFAULT_MEMORY_LIMIT = "1GB"
# Seconds a reading open waits for a writing process (DuckDB allows one writer, or any number
# of readers) before it gives up: an ingest of one session from a hook takes well under this,
# and a `context` or `guard` call beside it should not fail. $LEXKEEP_LOCK_WAIT overrides it;
# a writing open never waits (a second writer is refused at once).
DEFAULT_LOCK_WAIT = 2.0
_MIGRATIONS_PACKAGE = "lexkeep.core"
# The oldest schema a read-only open accepts without migrating. Migrations after it only add
# what readers can do without: 003 adds compactions.source_state, and a store without it has
# every summary's digest recomputed (lexkeep.compaction.jobs.unchanged_summaries). A migration
# that readers cannot do without raises it to its own number.
READABLE_FROM = 2


def migrations() -> list[tuple[int, str, str]]:
    """All shipped migrations as (version, name, sql), in order."""
    found = []
    folder = resources.files(_MIGRATIONS_PACKAGE).joinpath("migrations")
    for entry in folder.iterdir():
        name = entry.name
        if not name.endswith(".sql"):
            continue
        number, _, rest = name.partition("_")
        found.append((int(number), rest.removesuffix(".sql"), entry.read_text(encoding="utf-8")))
    found.sort()
    versions = [v for v, _, _ in found]
    if versions != list(range(1, len(versions) + 1)):
        raise StoreError(f"migrations are not numbered 1..n without gaps: {versions}")
    return found


SPILL_PREFIX = "lexkeep-spill-"
# The file in a spill folder that its process keeps locked while the folder is in use.
SPILL_OWNER = ".owner"
# The temp folders this process has looked through for stale spill folders (once each).
_SWEPT: set[str] = set()


def new_spill_folder() -> tuple[str, int | None]:
    """A new private folder under $TMPDIR for an in-memory store to spill to, and the open
    descriptor of its owner file, which holds an exclusive lock (flock) until closed.

    A process killed by a signal never runs its cleanup, and leaves its folder; the kernel
    releases its lock then. A process's first new folder first removes the folders whose owner
    file no process holds locked any more (remove_stale_spill_folders); later ones do not list
    $TMPDIR again, a cost that grows with a busy temp folder (a folder left meanwhile goes
    with the next process). Without flock (not POSIX) no folder is marked, and none removed.
    """
    parent = tempfile.gettempdir()
    if parent not in _SWEPT:
        _SWEPT.add(parent)
        remove_stale_spill_folders(parent)
    folder = tempfile.mkdtemp(prefix=SPILL_PREFIX)
    if fcntl is None:
        return folder, None
    # Locked under another name, then renamed: an owner file is never seen unlocked.
    pending = os.path.join(folder, SPILL_OWNER + ".new")
    fd = os.open(pending, os.O_CREAT | os.O_WRONLY, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        os.rename(pending, os.path.join(folder, SPILL_OWNER))
    except BaseException:
        os.close(fd)
        shutil.rmtree(folder, ignore_errors=True)
        raise
    return folder, fd


def remove_stale_spill_folders(parent: str | None = None) -> list[str]:
    """Remove the spill folders under `parent` ($TMPDIR) whose process is gone; their paths.

    A folder counts as stale only when its owner file can be locked: its process (and any
    process forked from it) has ended. A folder without an owner file (being created, or
    left by an older build) is left alone.
    """
    if fcntl is None:
        return []
    parent = tempfile.gettempdir() if parent is None else parent
    removed = []
    try:
        names = [n for n in os.listdir(parent) if n.startswith(SPILL_PREFIX)]
    except OSError:
        return []
    for name in names:
        folder = os.path.join(parent, name)
        try:
            held = os.lstat(folder)
        except OSError:
            continue
        if not stat.S_ISDIR(held.st_mode) or held.st_uid != os.getuid():
            continue  # another user's, or no folder at all
        try:
            fd = os.open(os.path.join(folder, SPILL_OWNER), os.O_RDONLY | os.O_NOFOLLOW)
        except OSError:
            continue  # no owner file, or not ours to open
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                continue  # its process still runs
            shutil.rmtree(folder, ignore_errors=True)
            removed.append(folder)
        finally:
            os.close(fd)
    return removed


class Store:
    """An open lexkeep store: one DuckDB connection plus helpers for the shared tables."""

    def __init__(
        self, con: duckdb.DuckDBPyConnection, path: str | None, *, read_only: bool = False
    ) -> None:
        self.con = con
        self.path = path  # None for an in-memory store
        self.read_only = read_only  # opened with read_only=True: nothing is written through it
        self._columns: dict[str, list[tuple[str, str]]] = {}
        self._spill: str | None = None  # an in-memory store's spill folder, removed on close
        self._spill_owner: int | None = None  # the locked descriptor that marks it as in use

    # -- opening -----------------------------------------------------------------------

    @classmethod
    @doing("opening the store")
    def open(
        cls,
        path: str | os.PathLike[str] | None = None,
        *,
        read_only: bool = False,
        memory_limit: str = DEFAULT_MEMORY_LIMIT,
        lock_wait: float | None = None,
        readable_from: int = READABLE_FROM,
    ) -> Store:
        """Open (and migrate) the store at `path`; `None` or ':memory:' gives an in-memory one.

        A read-only open never migrates: it refuses a store older than schema `readable_from`
        (a reader that copes with older ones, missing tables and all, may lower it).

        DuckDB's working memory is bounded by `memory_limit` (beyond it, it spills to disk);
        $LEXKEEP_MEMORY_LIMIT overrides it. When another process holds the file, a reading
        open waits up to $LEXKEEP_LOCK_WAIT seconds for it and a writing one fails at once;
        `lock_wait` sets the wait for either.
        """
        if path is None or str(path) == ":memory:":
            store = cls(duckdb.connect(":memory:"), None)
            # DuckDB would spill an in-memory database to `.tmp` in the working directory,
            # which may be read-only or a checkout; a private folder under $TMPDIR instead.
            store._spill, store._spill_owner = new_spill_folder()
            try:
                store.con.execute("SET temp_directory = ?", [store._spill])
                store._limit_memory(memory_limit)
                store.migrate()
            except BaseException:
                store.close()
                raise
            return store
        target = str(path)
        missing = not store_exists(target, read_only=read_only)
        is_folder = not missing and Path(target).is_dir()
        if read_only and missing:
            raise no_store_yet(f"no lexkeep store at {target}", target)
        if is_folder:
            raise StoreError(
                f"{target} is a folder, not a store file",
                hint=f"Store.open takes the store file, e.g. {Path(target) / DEFAULT_DB};"
                " trace files and folders go to ingest_paths",
                wording="store.folder",
                fields={"example": Path(target) / DEFAULT_DB},
            )
        _refuse_other_file(target)
        new = not os.path.exists(target)
        if _empty_file(target):
            # An empty file (`mktemp --suffix .duckdb`) is a new store, as a missing one is;
            # DuckDB refuses to open it, so it is replaced by a new database.
            if read_only:
                raise no_store_yet(f"no lexkeep store at {target} (the file is empty)", target)
            os.remove(target)
            new = True
        try:
            con = _connect(target, read_only, lock_wait)
        except StoreLockedError:
            raise  # another process made it meanwhile, and holds it
        except BaseException:
            if new:
                _remove_new_store(target)
            raise
        store = cls(con, target, read_only=read_only)
        try:
            store._limit_memory(memory_limit)
            if read_only:
                store.check_version(readable_from)
            else:
                store.migrate()
        except BaseException:
            store.close()  # or the file stays open (and locked) in this process
            if new:
                _remove_new_store(target)
            raise
        return store

    def _limit_memory(self, default: str) -> None:
        # DuckDB would take up to 80% of RAM before spilling; a bounded working set keeps
        # multi-GB ingests and audits flat (they spill to `<db>.tmp` instead of growing).
        limit = os.environ.get("LEXKEEP_MEMORY_LIMIT", default)
        try:
            self.con.execute(f"SET memory_limit = '{limit}'")
        except duckdb.Error as exc:
            raise ConfigError(
                f"LEXKEEP_MEMORY_LIMIT: invalid memory limit {limit!r}",
                hint="use a size such as 1GB or 512MB",
            ) from exc

    def require_writable(self, what: str) -> None:
        """Raise StoreError when this store was opened read-only: `what` (a library call)
        would write to it, and DuckDB would refuse that with an error of its own."""
        if self.read_only:
            raise StoreError(
                f"{self.path} is open read-only: {what} writes to it",
                hint=f"open it with Store.open({self.path!r}) (not read_only=True) for {what}",
            )

    def close(self) -> None:
        """Close the connection (and remove an in-memory store's spill folder)."""
        self.con.close()
        if self._spill is not None:
            shutil.rmtree(self._spill, ignore_errors=True)
            self._spill = None
        if self._spill_owner is not None:
            os.close(self._spill_owner)  # its lock goes with it
            self._spill_owner = None

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- trace paths ---------------------------------------------------------------------

    def stored_path(self, path: str) -> str:
        """How this store records the trace `path`: absolute on disk, as given in memory.

        See core.paths: a store on disk is read from other folders than the one it was
        written in; a store in memory lives in the process that was given the path.
        """
        return path if self.path is None else stored_path(path)

    def shown_paths(self) -> ShownPaths:
        """The mapping from this store's source paths to how reports show them (core.paths)."""
        return ShownPaths(None if self.path is None else current_folder())

    # -- migrations ----------------------------------------------------------------------

    def schema_version(self) -> int:
        """The highest migration applied, 0 for an empty database.

        Asked of the table itself: DuckDB builds information_schema on its first use in a
        connection (about 9 ms of every command's start). Call it outside a transaction: on
        a database without the table, the failed query would abort one.
        """
        try:
            row = self.con.execute("SELECT coalesce(max(version), 0) FROM schema_migrations")
        except duckdb.CatalogException:
            return 0
        return row.fetchone()[0]

    def _refuse_foreign(self) -> None:
        """Refuse a DuckDB database that holds tables but no lexkeep migrations: someone
        else's data, which lexkeep must neither read as a store nor write its tables into."""
        tables = self.con.execute(
            "SELECT table_name FROM duckdb_tables() WHERE database_name = current_database()"
            " AND NOT temporary ORDER BY table_name LIMIT 3"
        ).fetchall()
        if tables:
            names = ", ".join(name for (name,) in tables)
            raise StoreError(
                f"{self.path} is a DuckDB database but not a lexkeep store"
                f" (it holds other tables: {names})",
                hint="open a store made by ingest_paths, or a new file name",
                wording="store.foreign",
            )

    def check_version(self, readable_from: int = READABLE_FROM) -> None:
        """Refuse a store that misses migrations readers need (before `readable_from`) or was
        made by a newer lexkeep."""
        known = len(migrations())
        have = self.schema_version()
        if have == 0:
            self._refuse_foreign()
            raise no_store_yet(
                f"no lexkeep store at {self.path} (an empty DuckDB database)", str(self.path)
            )
        if have > known:
            raise StoreError(
                f"{self.path} was written by a newer lexkeep"
                f" (schema {have}, this one knows {known})",
                hint="upgrade lexkeep",
            )
        if have < readable_from:
            raise StoreError(
                f"{self.path} needs migrating (schema {have} of {known}) but was opened read-only",
                hint=f"ingest into it once (ingest_paths into Store.open({str(self.path)!r}))",
                wording="store.needs_migrating",
                fields={"target": self.path},
            )

    def migrate(self) -> list[int]:
        """Apply every migration not yet recorded, each in its own transaction."""
        if self.path is not None and self.schema_version() == 0:
            self._refuse_foreign()
        self.con.execute(
            "CREATE TABLE IF NOT EXISTS schema_migrations ("
            " version INTEGER PRIMARY KEY, name VARCHAR NOT NULL,"
            " applied_at TIMESTAMP NOT NULL DEFAULT current_timestamp)"
        )
        have = self.schema_version()
        all_migrations = migrations()
        if have > len(all_migrations):
            self.check_version()
        applied = []
        for version, name, sql in all_migrations:
            if version <= have:
                continue
            with self.transaction():
                self.con.execute(sql)
                self.con.execute(
                    "INSERT INTO schema_migrations (version, name) VALUES (?, ?)", [version, name]
                )
            applied.append(version)
        return applied

    # -- transactions and bulk writes ------------------------------------------------------

    @contextmanager
    def transaction(self) -> Iterator[duckdb.DuckDBPyConnection]:
        """One DuckDB transaction: commit on success, roll back on any exception."""
        self.con.execute("BEGIN TRANSACTION")
        try:
            yield self.con
        except BaseException:
            self.con.execute("ROLLBACK")
            raise
        self.con.execute("COMMIT")

    def columns(self, table: str) -> list[tuple[str, str]]:
        """(name, DuckDB type) of every column of `table` in declaration order, from the schema."""
        cached = self._columns.get(table)
        if cached is None:
            # pragma_table_info, not information_schema (see schema_version): same names
            # and types, in declaration order.
            try:
                rows = self.con.execute(
                    "SELECT name, type FROM pragma_table_info(?)", [table]
                ).fetchall()
            except duckdb.CatalogException:
                rows = []
            cached = [(name, typ) for name, typ in rows]
            if not cached:
                raise StoreError(f"no table {table!r} in the store")
            self._columns[table] = cached
        return cached

    def bulk_insert(
        self,
        table: str,
        columns: Sequence[tuple[str, str]] | None,
        rows: Iterable[Sequence[object]],
        *,
        on_conflict: str = "DO NOTHING",
        tmpdir: str | None = None,
        added_per_file: Counter[str] | None = None,
        count_added: bool = False,
    ) -> int:
        """Insert rows through DuckDB's own JSON reader (no per-row inserts); returns rows read
        (with `count_added`: rows inserted, fewer when a conflict left some out).

        `columns` are (name, DuckDB type), or None for every column of the table in declaration
        order; each row is a list or tuple in that order. Rows are written to a temporary file
        as JSON arrays, one per line, and loaded with `read_json`, each element cast to its
        column's type, so the load runs in C++ and nothing is guessed from the first lines.
        `added_per_file` counts the rows actually inserted (not left out by a conflict) by
        their `source_file`.
        """
        if columns is None:
            columns = self.columns(table)
        return bulk_insert(
            self.con,
            table,
            columns,
            rows,
            on_conflict=on_conflict,
            tmpdir=tmpdir,
            added_per_file=added_per_file,
            count_added=count_added,
        )


class StoreOnDemand:
    """A store at a path that is open only while some thread reads or writes it.

    DuckDB lets one process write a file, or any number read it. A long job that mostly waits
    (a model call, another program) reads and writes inside `use()` and leaves the file closed
    in between, so `lexkeep context`, `ingest` or another job get it meanwhile. With
    `hold=True` the first `use()` opens it and it stays open until `close()`: for jobs that
    never wait, where reopening would cost more than the work.

    The first open waits up to `first_wait` seconds for another process to let go of the file,
    every later one up to `wait` (`None`: $LEXKEEP_LOCK_WAIT); `interrupt()` ends a wait at
    once. Threads share the open store, each through its own cursor. With `read_only=True` the
    file is opened only to read, never migrated, and any schema from `readable_from` is taken.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        hold: bool = False,
        wait: float | None = None,
        first_wait: float | None = None,
        read_only: bool = False,
        readable_from: int = READABLE_FROM,
    ) -> None:
        self.path = str(path)
        self.hold = hold
        self.read_only = read_only
        self._readable_from = readable_from
        self._wait = _lock_wait() if wait is None else wait
        self._first_wait = _lock_wait() if first_wait is None else first_wait
        self._lock = threading.Lock()
        self._store: Store | None = None
        self._users = 0
        self._opened = 0  # times the file was opened, for tests and progress
        self._interrupted = threading.Event()

    @property
    def opened(self) -> int:
        """How many times the file was opened so far."""
        return self._opened

    @contextmanager
    def use(
        self, wait: float | None = None, *, despite_interrupt: bool = False
    ) -> Iterator[duckdb.DuckDBPyConnection]:
        """A cursor on the store, opened (or reused) for the block and released after it.

        `wait`: how long this opening may wait for another process, instead of the usual;
        `despite_interrupt`: wait so long even after `interrupt()` (to give work back).
        """
        with self._lock:
            if self._store is None:
                if wait is None:
                    wait = self._first_wait if not self._opened else self._wait
                self._store = self._open(wait, despite_interrupt)
                self._opened += 1
            try:
                cursor = self._store.con.cursor()
            except BaseException:
                self._release()  # a store opened for this use only is not left open
                raise
            self._users += 1
        try:
            yield cursor
        finally:
            cursor.close()
            with self._lock:
                self._users -= 1
                self._release()

    def _release(self) -> None:
        """Close the store when nobody uses it and it is not held (the caller has the lock)."""
        if not self._users and not self.hold and self._store is not None:
            self._store.close()
            self._store = None

    def _open(self, wait: float, despite_interrupt: bool = False) -> Store:
        deadline = time.monotonic() + wait
        # After interrupt(), an opening gives up at once, unless told to wait anyway.
        interrupted = threading.Event() if despite_interrupt else self._interrupted
        while True:
            try:
                return Store.open(
                    self.path,
                    read_only=self.read_only,
                    lock_wait=0,
                    readable_from=self._readable_from,
                )
            except StoreLockedError as exc:
                if interrupted.is_set():
                    raise self._interruption() from exc
                if time.monotonic() >= deadline:
                    if not wait:
                        raise
                    message = f"{exc.message}; waited {wait:g} s"
                    raise StoreLockedError(message, hint=exc.hint) from exc
            if interrupted.wait(0.05):
                raise self._interruption()

    def _interruption(self) -> StoreError:
        return StoreError(
            f"{self.path}: interrupted while waiting for the store",
            hint="nothing more was written; claims in progress expire after their lease",
        )

    def interrupt(self) -> None:
        """End every wait for the file at once (the job was interrupted), but those that
        give work back (`despite_interrupt`)."""
        self._interrupted.set()

    @property
    def lock_wait(self) -> float:
        """How long the first opening waits for another process ($LEXKEEP_LOCK_WAIT)."""
        return self._first_wait

    def close(self) -> None:
        """Close the store if it is open (with `hold`, it stays open until this).

        Call it when no thread uses the store any more: a cursor still in use would be closed
        under its user.
        """
        with self._lock:
            if self._store is not None:
                self._store.close()
                self._store = None


def _remove_new_store(target: str) -> None:
    """Remove what a store creation that failed (a full disk) left: a file cut short, which
    DuckDB would refuse to open ever after, the next ingest with room to write included."""
    for path in (target, target + ".wal"):
        with contextlib.suppress(OSError):
            os.remove(path)


def store_exists(target: str, *, read_only: bool) -> bool:
    """Whether something exists at the store path `target` (a file or a folder); a StoreError
    saying `cannot open` and what to do when it cannot be looked at (a folder above it that
    may not be searched). `read_only`: the store is only to be read (`cannot read`)."""
    try:
        return Path(target).exists()
    except OSError as exc:
        refused = storage_error(exc, "read" if read_only else "open")
        if refused is None:
            raise
        hint, wording = _unwritable_hint(target, read_only)
        raise StoreError(
            refused.message, hint=hint, wording=wording, fields=_store_fields(target)
        ) from exc


def _unwritable_hint(target: str, read_only: bool) -> tuple[str, str | None]:
    """What to do when the store `target` cannot be opened for want of permission, and the
    commands' wording of it (lexkeep.cli.wording, with the field `target`)."""
    blocked = unsearchable_folder(target)
    if blocked is not None:
        if read_only:
            return search_hint(blocked), None
        return (
            f"{search_hint(blocked)}; a store is written with {Path(target).name}.wal beside"
            f" it, so {os.path.dirname(os.path.abspath(target))} must be writable too"
        ), None
    if os.path.exists(target) and not os.access(target, os.R_OK):
        return (
            f"make {target} readable (and writable, to write into it), or ask its owner for a copy"
        ), "store.unreadable"
    if read_only:
        return f"make {target} and the folders above it readable", None
    if os.path.exists(target) and not os.access(target, os.W_OK):
        return (
            f"make {target} writable, or copy it to a folder you can write and open the copy;"
            " Store.open(path, read_only=True) only reads it"
        ), "store.unwritable"
    folder = Path(target).resolve().parent
    return (
        f"make the folder {folder} writable (a store is written with {Path(target).name}.wal"
        " beside it), or open a store file in a folder you can write"
    ), "store.unwritable_folder"


def _store_fields(target: str) -> dict[str, object]:
    """The fields the commands' wordings of a store that cannot be opened use."""
    return {
        "target": target,
        "wal": os.path.abspath(target) + ".wal",
        "folder": Path(target).resolve().parent,
        "name": Path(target).name,
    }


# DuckDB's answer when another process holds the file: `IO Error: Could not set lock on file
# "PATH": Conflicting lock is held in PROGRAM (PID N)`.
_HELD_LOCK = re.compile(r"Could not set lock on file|Conflicting lock is held")


def _lock_wait() -> float:
    """Seconds a reading open waits for a writer: $LEXKEEP_LOCK_WAIT, else DEFAULT_LOCK_WAIT."""
    raw = os.environ.get("LEXKEEP_LOCK_WAIT")
    if raw is None or raw == "":
        return DEFAULT_LOCK_WAIT
    try:
        value = float(raw)
    except ValueError:
        value = -1.0
    if not 0 <= value <= 3600:
        raise ConfigError(
            f"LEXKEEP_LOCK_WAIT: not a number of seconds from 0 to 3600: {raw!r}",
            hint="e.g. LEXKEEP_LOCK_WAIT=5, or 0 to fail at once",
        )
    return value


def _connect(target: str, read_only: bool, wait: float | None) -> duckdb.DuckDBPyConnection:
    """A DuckDB connection to the file `target`, waiting `wait` seconds for another process.

    `None`: a reading connection waits $LEXKEEP_LOCK_WAIT seconds, a writing one not at all.
    """
    if wait is None:
        wait = _lock_wait() if read_only else 0.0
    deadline = time.monotonic() + wait
    while True:
        try:
            return duckdb.connect(target, read_only=read_only)
        except duckdb.IOException as exc:
            if not _HELD_LOCK.search(str(exc)):  # not "lock" anywhere: a path may hold it
                room = storage_error(exc)  # a full disk or a read-only folder: say what to do
                folder = Path(target).parent
                hint = None if folder.is_dir() else f"the folder {folder} does not exist: create it"
                wording = None
                if hint is None and room is not None:
                    hint, wording = room.hint, room.wording
                    if room.message.endswith(("Permission denied", "Read-only file system")):
                        hint, wording = _unwritable_hint(target, read_only)
                    wal = os.path.abspath(target) + ".wal"
                    if room.message.startswith(f"cannot open {wal}: Permission denied"):
                        hint = (
                            f"make {wal} readable (and writable, to write into the store): it"
                            " is the store's write-ahead log, left by a process that stopped"
                            " before closing the store"
                        )
                        wording = "store.wal_unreadable"
                if "Could not read enough bytes" in str(exc):
                    hint = (
                        f"{target} is cut short (a copy or a creation that did not finish):"
                        " restore it, or remove it and ingest the traces again"
                    )
                raise StoreError(
                    f"cannot open {target}: {exc}",
                    hint=hint,
                    wording=wording,
                    fields=_store_fields(target),
                ) from exc
            if time.monotonic() < deadline:
                time.sleep(0.05)
                continue
            holder = re.search(r"\(PID (\d+)\)", str(exc))
            raise StoreLockedError(
                f"{target} is in use by another lexkeep process (DuckDB file lock held"
                + (f" by PID {holder.group(1)})" if holder else ")")
                + (f"; waited {wait:g} s" if wait else ""),
                hint="wait for the other process to finish, or open another store file",
                wording="store.locked",
            ) from exc
        except duckdb.ConnectionException as exc:
            if "different configuration" not in str(exc):
                raise StoreError(f"cannot open {target}: {exc}") from exc
            # DuckDB opens a file once per process: a second Store on it must ask for what the
            # first one has (read-only or writable, the same settings).
            mode = "read-only" if read_only else "writable"
            raise StoreError(
                f"{target} is already open in this process, and not {mode}",
                hint="use the Store this process opened already (one writable Store can read"
                " and write), or close it first",
            ) from exc
        except duckdb.Error as exc:
            raise StoreError(
                f"{target} is not a DuckDB database ({exc})",
                hint="open a new file name, or a store made by lexkeep",
                wording="store.not_duckdb",
            ) from exc


def no_store_yet(message: str, target: str) -> StoreError:
    """The error for a store to read that is not there yet (`message`), at `target`."""
    return StoreError(
        message,
        hint=f"ingest some traces first: ingest_paths(store, paths) into Store.open({target!r})",
        wording="store.none_yet",
        fields={"target": target},
    )


def _empty_file(path: str) -> bool:
    try:
        return os.stat(path).st_size == 0 and Path(path).is_file()
    except OSError:
        return False


def is_duckdb_file(path: str) -> bool:
    """True when `path` starts like a DuckDB database file ('DUCK' at byte 8)."""
    try:
        with open(path, "rb") as fh:
            return fh.read(12)[8:] == b"DUCK"
    except OSError:
        return False


def _refuse_other_file(target: str) -> None:
    """Refuse a --db that names an existing file which is not a DuckDB database.

    DuckDB opens a JSON, CSV or Parquet file given as a database as a read-only view and
    keeps the writes in memory: an ingest into `--db trace.jsonl` reported success and
    stored nothing. An empty file is a new store, as a missing one is.
    """
    try:
        with open(target, "rb") as fh:  # one read of the head, on every store open
            head = fh.read(64)
    except OSError:
        return  # missing (a new store); a folder is refused before this
    if not head or head[8:12] == b"DUCK":
        return
    looks = " (it looks like a trace file)" if head.lstrip(LEADING)[:1] in (b"{", b"[") else ""
    raise StoreError(
        f"{target} is not a DuckDB database{looks}",
        hint="Store.open takes the store file (e.g. lexkeep.duckdb); trace files go to"
        " ingest_paths",
        wording="store.trace_given_as_store",
    )


# Column types whose values DuckDB reads exactly from a JSON scalar's text: rows are read as
# VARCHAR[] (each element unquoted, or a number's or boolean's JSON text) and cast per column,
# unless a JSON or list column holds a value: that needs the element's JSON itself (a JSON
# string and the text of a nested value would read alike as VARCHAR), so such rows are read
# as JSON[], which costs DuckDB about 1.6 times as much.
_SCALAR_TYPES = frozenset({"VARCHAR", "BIGINT", "INTEGER", "BOOLEAN", "DOUBLE", "TIMESTAMP"})


def _element_sql(index: int, typ: str, as_json: bool) -> str:
    """SQL taking element `index` (1-based) of a row array `r` as a column of type `typ`.

    A JSON null element reads as SQL NULL either way."""
    if typ == "VARCHAR":
        return f"r[{index}]->>'$'" if as_json else f"r[{index}]"
    if typ == "JSON" and as_json:
        return f"r[{index}]"
    return f"CAST(r[{index}] AS {typ})"


def bulk_insert(
    con: duckdb.DuckDBPyConnection,
    table: str,
    columns: Sequence[tuple[str, str]],
    rows: Iterable[Sequence[object]],
    *,
    on_conflict: str = "DO NOTHING",
    tmpdir: str | None = None,
    added_per_file: Counter[str] | None = None,
    count_added: bool = False,
) -> int:
    """See `Store.bulk_insert`; usable with a bare connection.

    Each row is written as one JSON array (orjson serialises a tuple about four times faster
    than the same row as an object, which the row would first have to become) and DuckDB
    takes the columns from the array's elements (see _SCALAR_TYPES).
    """
    width = len(columns)
    nested = [i for i, (_, typ) in enumerate(columns) if typ not in _SCALAR_TYPES]
    as_json = False
    fd, tmp = tempfile.mkstemp(prefix=f"lexkeep-{table}-", suffix=".ndjson", dir=tmpdir)
    count = 0
    longest = 0
    dumps, newline = orjson.dumps, orjson.OPT_APPEND_NEWLINE
    try:
        with os.fdopen(fd, "wb") as out:
            write = out.write
            for row in rows:
                if len(row) != width:
                    raise ValueError(f"{table}: a row of {len(row)} values for {width} columns")
                if nested and not as_json:
                    as_json = any(row[i] is not None for i in nested)
                try:
                    line = dumps(row, option=newline)
                except orjson.JSONEncodeError:  # a value nested deeper than orjson writes
                    line = compact_text(row).encode() + b"\n"
                write(line)
                if len(line) > longest:
                    longest = len(line)
                count += 1
        if count == 0:
            return 0
        # A 1 GB maximum_object_size costs ~20 ms per call (buffer set-up), which dominates
        # small batches; ask only for what the longest row needs (DuckDB's default is 16 MB).
        max_size = max(16 << 20, 1 << (longest + 1).bit_length())
        column_list = ", ".join(f'"{name}"' for name, _ in columns)
        values = ", ".join(_element_sql(i, typ, as_json) for i, (_, typ) in enumerate(columns, 1))
        conflict = f" ON CONFLICT {on_conflict}" if on_conflict else ""
        returning = " RETURNING source_file" if added_per_file is not None else ""
        result = con.execute(
            f"INSERT INTO {table} ({column_list}) "
            f"SELECT {values} FROM read_json(?, format='newline_delimited', records=false, "
            f"columns={{'r': '{'JSON' if as_json else 'VARCHAR'}[]'}}, "
            f"maximum_object_size={max_size}){conflict}{returning}",
            [tmp],
        )
        if added_per_file is None:
            # an INSERT without RETURNING answers the number of rows it inserted
            return result.fetchone()[0] if count_added else count
        added = 0
        while chunk := result.fetchmany(65536):
            added += len(chunk)
            added_per_file.update(row[0] for row in chunk)
        return added if count_added else count
    except OSError as exc:
        if exc.filename is None:  # a full disk fails the temporary file's write: name it
            exc.filename = tmp
        raise
    finally:
        os.unlink(tmp)


# The tables whose rows take a conversation's positions (one ordering shared by all four).
TIMELINE_TABLES = ("messages", "tool_calls", "tool_results", "boundaries")


def close_position_holes(
    con: duckdb.DuckDBPyConnection, bases: dict[str, int], given: dict[str, int] | None = None
) -> dict[str, int]:
    """Renumber what a write added to each conversation of `bases` as base + 1, base + 2, ...
    in the order it was given; its new max_position by conversation.

    `bases` holds each conversation's max_position before the write. Positions are given
    before the insert, which leaves out records the store holds already (a copy read again):
    theirs were holes. Runs at an added record move with it; a run placed after everything
    (`given` max_position + 1: no message of its own in the write) moves to the new end.
    conversations.max_position is set for the rows that exist. Only for a write that left
    records out: it reads every timeline table.
    """
    if not bases:
        return {}
    convs, base_list = list(bases), [bases[c] for c in bases]
    union = " UNION ALL ".join(
        f"SELECT conversation_id AS c, position FROM {table}" for table in TIMELINE_TABLES
    )
    con.execute(
        f"""
        CREATE OR REPLACE TEMP TABLE lexkeep_renumber AS
        WITH b AS (SELECT unnest($convs) AS c, unnest($bases) AS base)
        SELECT p.c, p.position AS old,
               b.base + row_number() OVER (PARTITION BY p.c ORDER BY p.position) AS new
        FROM ({union}) p JOIN b ON p.c = b.c AND p.position > b.base
        """,
        {"convs": convs, "bases": base_list},
    )
    for table in (*TIMELINE_TABLES, "runs"):
        con.execute(
            f"UPDATE {table} SET position = r.new FROM lexkeep_renumber r"
            f" WHERE {table}.conversation_id = r.c AND {table}.position = r.old"
            " AND r.new <> r.old"
        )
    counts = dict(con.execute("SELECT c, count(*) FROM lexkeep_renumber GROUP BY c").fetchall())
    con.execute("DROP TABLE lexkeep_renumber")
    new_max = {c: base + counts.get(c, 0) for c, base in bases.items()}
    moved = [c for c in new_max if given and c in given and given[c] != new_max[c]]
    if moved:
        con.execute(
            "UPDATE runs SET position = m.new FROM"
            " (SELECT unnest($c) AS c, unnest($old) AS old, unnest($new) AS new) m"
            " WHERE runs.conversation_id = m.c AND runs.position = m.old",
            {
                "c": moved,
                "old": [given[c] + 1 for c in moved],  # type: ignore[index]
                "new": [new_max[c] + 1 for c in moved],
            },
        )
    con.execute(
        "UPDATE conversations SET max_position = m.new FROM"
        " (SELECT unnest($c) AS c, unnest($new) AS new) m WHERE conversations.id = m.c",
        {"c": list(new_max), "new": list(new_max.values())},
    )
    return new_max


# What a read of files from their start gave (restore_file_order): per timeline table, the
# conversation, the record's key (messages and boundaries: id; tool calls and results: call_id)
# and the file it was read from, as source_file names it.
READ_AGAIN_TABLE = "lexkeep_read_again"


def restore_file_order(
    con: duckdb.DuckDBPyConnection, convs: Iterable[str], read: str | None = None
) -> None:
    """Put the records of each conversation in `convs` back in their files' line order, on
    the positions they hold (so max_position stays).

    New records take positions after the stored ones, which is the file order when a file
    grows. A line read again after it was fixed (skipped by --skip-invalid, or rewritten)
    stands before stored lines of its file, though: left at the end, a tool call made before
    a compaction would count as made after it. Such a record (one that stands after a record
    of its own file with a later line) moves to just before the first record of its file
    with a later line, as one ingest of the files would have placed it; every other record
    keeps its order, so a conversation that spans files (a resumed Claude Code session, a
    `lexkeep compact` boundary, a file that grew after another was read) keeps the order
    between its files, and one read from a single file ends in that file's line order.
    Runs at a moved record move with it.

    `read` names a table like READ_AGAIN_TABLE (table, c, k, f): the records the files were
    read into, those stored already included. Only they are put in their file's line order;
    every other record keeps its place. A record stored from an earlier file of the same name
    is no line of the file read now: logrotate renamed `requests.jsonl` and a new file took
    its name, whose first line follows the old file's last on the conversation's timeline.
    Without `read`, every record of the conversations counts.
    """
    convs = list(convs)
    if not convs:
        return
    keys = dict(messages="id", boundaries="id", tool_calls="call_id", tool_results="call_id")
    if read is None:
        union = " UNION ALL ".join(
            f"SELECT conversation_id AS c, position, source_file, source_line FROM {table}"
            f" WHERE conversation_id IN (SELECT unnest($convs))"
            for table in TIMELINE_TABLES
        )
    else:
        # A record not read now stands alone (a file name of its own, no line before it).
        union = " UNION ALL ".join(
            f"SELECT t.conversation_id AS c, t.position,"
            f" CASE WHEN r.k IS NULL THEN chr(0) || t.position ELSE t.source_file END"
            f" AS source_file, t.source_line FROM {table} t"
            f" LEFT JOIN (SELECT DISTINCT c, k, f FROM {read} WHERE tbl = '{table}') r"
            f" ON r.c = t.conversation_id AND r.k = t.{keys[table]} AND r.f = t.source_file"
            f" WHERE t.conversation_id IN (SELECT unnest($convs))"
            for table in TIMELINE_TABLES
        )
    con.execute(
        f"""
        CREATE OR REPLACE TEMP TABLE lexkeep_reorder AS
        WITH t AS ({union}),
        w AS (  -- the latest line of the same file at an earlier position
            SELECT *, max(source_line) OVER (
                PARTITION BY c, source_file ORDER BY position
                ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS before
            FROM t
        ),
        stay AS (SELECT * FROM w WHERE before IS NULL OR before <= source_line),
        -- Staying records never go back in line order along positions, so the first of them
        -- (by position) with a later line is the first of those on the nearest later line.
        stay_lines AS (
            SELECT c, source_file, source_line, min(position) AS position FROM stay GROUP BY ALL
        ),
        -- a record out of its file's order goes just before the first staying record of its
        -- file with a later line (there is one: the record holding `before` or a later one)
        keyed AS (
            SELECT c, position, 1 AS flag, position AS anchor, source_line FROM stay
            UNION ALL
            SELECT w.c, w.position, 0, s.position, w.source_line
            FROM (SELECT * FROM w WHERE before > source_line) w ASOF JOIN stay_lines s
              ON w.c = s.c AND w.source_file = s.source_file AND w.source_line < s.source_line
        ),
        r AS (
            SELECT c, position AS old,
                   row_number() OVER (PARTITION BY c ORDER BY anchor, flag, source_line, position)
                       AS k,
                   row_number() OVER (PARTITION BY c ORDER BY position) AS j
            FROM keyed
        )
        SELECT a.c, a.old, b.old AS new FROM r a JOIN r b ON a.c = b.c AND a.k = b.j
        WHERE a.old <> b.old
        """,
        {"convs": convs},
    )
    if con.execute("SELECT count(*) FROM lexkeep_reorder").fetchone()[0]:  # type: ignore[index]
        for table in (*TIMELINE_TABLES, "runs"):
            con.execute(
                f"UPDATE {table} SET position = r.new FROM lexkeep_reorder r"
                f" WHERE {table}.conversation_id = r.c AND {table}.position = r.old"
            )
    con.execute("DROP TABLE lexkeep_reorder")


def drop_keys(con: duckdb.DuckDBPyConnection, tables: Iterable[str]) -> None:
    """Replace each of `tables` (empty) by a copy without constraints or indexes.

    For a private store whose writer guarantees the keys itself: DuckDB's primary-key
    indexes cost insert and commit time (and memory) that such a store does not need.
    """
    for table in tables:
        con.execute(f"ALTER TABLE {table} RENAME TO {table}_keyed")
        con.execute(f"CREATE TABLE {table} AS FROM {table}_keyed LIMIT 0")
        con.execute(f"DROP TABLE {table}_keyed")


def default_db_path() -> str:
    """The store used when no --db is given: $LEXKEEP_DB, else ./lexkeep.duckdb."""
    return os.environ.get("LEXKEEP_DB") or DEFAULT_DB
