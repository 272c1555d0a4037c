"""User-facing errors: every failure the CLI can explain carries where and what to do next."""

from __future__ import annotations

import errno
import os
import re
import stat
import sys
from collections.abc import Iterator, Mapping
from contextlib import contextmanager

from lexkeep.core.paths import search_hint, unsearchable_folder


class LexkeepError(Exception):
    """An error a user can act on: message, optional location (path, line, column) and hint.

    The message and hint speak to a library caller (keyword arguments: `skip_invalid=True`).
    `wording` names the error for the commands, which say it their own way (their options:
    `--skip-invalid`), with the values of `fields`: lexkeep.cli.wording.
    """

    def __init__(
        self,
        message: str,
        *,
        path: str | None = None,
        line: int | None = None,
        col: int | None = None,
        hint: str | None = None,
        wording: str | None = None,
        fields: Mapping[str, object] | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.path = path
        self.line = line
        self.col = col
        self.hint = hint
        self.wording = wording
        self.fields = dict(fields or {})

    def location(self) -> str:
        """`path:line:col` with the parts that are known, or an empty string."""
        if self.path is None:
            return ""
        parts = [self.path]
        if self.line is not None:
            parts.append(str(self.line))
            if self.col is not None:
                parts.append(str(self.col))
        return ":".join(parts)

    def __str__(self) -> str:
        loc = self.location()
        return f"{loc}: {self.message}" if loc else self.message


class SettingsWarning(UserWarning):
    """Settings that are read around, not refused: the CLI shows it as one `Warning:` line."""


class SkippedInputWarning(SettingsWarning):
    """An input a folder walk or a glob found but could not read (a broken symbolic link):
    skipped, and named in one `Warning:` line, as settings read around are."""


class InputError(LexkeepError):
    """A trace file (or standard input) could not be read as the format it claims to be."""


class ReusedIdError(InputError):
    """A record's id is already taken by another conversation's record of the same kind.

    Message, compaction and run ids name one record in the whole store (tool call ids only
    within their conversation); a second conversation's record under the same id would be left
    out or change the first one, and an audit would silently not see it.
    """

    def __init__(
        self,
        what: str,
        value: str,
        held: tuple[str, str | None, int | None],
        *,
        path: str,
        line: int,
    ) -> None:
        """`what` record `value` at `path`:`line`; `held`: (conversation, file, line) of the
        record that has the id (file and line None when unknown)."""
        other_conversation, other_path, other_line = held
        where = f" ({other_path}:{other_line})" if other_path is not None else ""
        super().__init__(
            f"{what} id {value!r} is already used by conversation {other_conversation!r}{where}",
            path=path,
            line=line,
            hint=(
                "message, compaction and run ids must be unique in the whole store (tool call"
                " ids only in their conversation): prefix them with their conversation id,"
                ' e.g. "c2/m1"'
            ),
        )


class ConfigError(LexkeepError):
    """A setting, flag, environment variable or config file is invalid."""


class RuleError(ConfigError):
    """An identifier rule failed its own checks when it was loaded."""


class BackendUnreachableError(LexkeepError):
    """A summariser backend that cannot be reached at all: no request reached it (name lookup,
    connection or TLS handshake failed) or its program cannot be started. Nothing was
    generated, so the run gives its claims back without counting an attempt and stops."""


class SummarizerMisconfiguredError(BackendUnreachableError):
    """A summariser that failed the same way on each of a run's first calls, before any
    succeeded: a setting is wrong (a model name, a key, a path), not the ranges. The run
    gives those attempts back, as for a backend it cannot reach, and stops."""


class StoreError(LexkeepError):
    """The DuckDB store is missing, locked, or from an incompatible version."""


class StoreLockedError(StoreError):
    """Another process holds the DuckDB file (one writing process, or any number of readers)."""


class NotFoundError(LexkeepError):
    """A conversation, job or other named thing does not exist in the store."""


class BudgetError(LexkeepError):
    """A byte budget is too small for what must always be included."""


def is_query_interrupt(exc: BaseException) -> bool:
    """True for DuckDB's answer to Ctrl-C during a query: it takes the signal itself and raises
    its InterruptException (or, in older builds, RuntimeError("Query interrupted")) instead of
    KeyboardInterrupt."""
    return type(exc).__name__ == "InterruptException" or (
        type(exc) is RuntimeError and str(exc) == "Query interrupted"
    )


# Why a write can fail that is the machine's, not lexkeep's: strerror text -> kind of fix.
_NO_ROOM = {
    errno.ENOSPC: "No space left on device",
    errno.EDQUOT: "Disk quota exceeded",
    errno.EFBIG: "File too large",
}
_NOT_WRITABLE = {
    errno.EROFS: "Read-only file system",
    errno.EACCES: "Permission denied",
    errno.EPERM: "Operation not permitted",
}
# DuckDB reports the same failures as text: `Could not write file "PATH": No space left on
# device`, `Cannot open file "PATH.wal": Permission denied` (inside a commit or checkpoint).
_DUCKDB_FILE_ERROR = re.compile(
    r"(?:Could not|Cannot|Failed to) (write|open|create|truncate|sync|extend)\w* "
    r'(?:to )?(?:file|directory) "([^"]+)": ('
    + "|".join(re.escape(text) for text in (*_NO_ROOM.values(), *_NOT_WRITABLE.values()))
    + ")"
)


OPERATIONS = ("read", "open", "create", "write")


@contextmanager
def doing(what: str) -> Iterator[None]:
    """Name what the code inside is doing ("reading settings", "opening the store", "writing
    the report"): a refused permission that escapes it unforeseen, which `storage_error` can
    only call `cannot access PATH`, says so (`... while reading settings`). The innermost
    activity an error escapes is the one named. Also a decorator."""
    try:
        yield
    except OSError as exc:
        if getattr(exc, "lexkeep_doing", None) is None:
            exc.lexkeep_doing = what  # type: ignore[attr-defined]
        raise


def storage_error(exc: BaseException, operation: str | None = None) -> StoreError | None:
    """A read or write that failed for want of room or permission (a full disk, a quota, a
    file size limit, a read-only folder, a file or folder that may not be read or searched),
    as an error naming the file and what to do; None for any other exception. DuckDB rolls
    back the transaction that failed, and lexkeep writes each file's ingest and each batch of
    compactions in one, so what was stored before stays stored.

    `operation` is what was being done: "read", "open", "create" or "write". Without it,
    DuckDB's message names the operation; for an OSError, a full disk, a quota, a size limit
    or a read-only file system can only have refused a write, and a refused permission says
    `cannot access`, since the call that failed may have been a look-up or a read as well as
    a write, and then what the command was doing when it escaped a `doing` block (`cannot
    access PATH while reading settings`). A refusal inside a folder that may not be searched
    names that folder.
    """
    if operation not in (None, *OPERATIONS):
        raise ValueError(f"operation must be one of {OPERATIONS} or None, not {operation!r}")
    reason: str | None = None
    wording: str | None = None
    verb, where = operation, None
    if isinstance(exc, OSError) and not isinstance(exc, LexkeepError):
        reason = _NO_ROOM.get(exc.errno or 0)
        if reason is None and exc.filename is not None:
            reason = _NOT_WRITABLE.get(exc.errno or 0)
        where = None if exc.filename is None else str(exc.filename)
        if verb is None:
            verb = "access" if exc.errno in (errno.EACCES, errno.EPERM) else "write"
    elif type(exc).__module__.split(".")[0] in ("duckdb", "_duckdb"):
        found = _DUCKDB_FILE_ERROR.search(str(exc))
        if found is not None:
            verb, where, reason = operation or found.group(1), found.group(2), found.group(3)
    if reason is None:
        return None
    target = where if where is not None else "a temporary file"
    blocked = None
    if where is not None and reason not in _NO_ROOM.values() and reason != "Read-only file system":
        # Through a symbolic link, the folder that blocks may be above the file it names.
        blocked = unsearchable_folder(where) or unsearchable_folder(os.path.realpath(where))
    if reason in _NO_ROOM.values():
        hint = (
            "free space (or raise the quota or file size limit) where it is written, or put"
            " the store or $TMPDIR on another disk, then try again: the write that failed"
            " stored nothing, and what was stored before it stays"
        )
        wording = "storage.no_room"
    elif blocked is not None:
        hint = search_hint(blocked)
    elif verb == "read":
        hint = f"make {target} and the folders above it readable"
    elif verb == "access":
        hint = (
            f"check the permissions of {target} and of the folders above it: a file must be"
            " readable (writable, for what lexkeep writes), and each folder above it searchable"
        )
    else:
        hint = (
            "a store is written together with FILE.wal beside it: make its folder writable, or"
            " copy the store to a folder that is (Store.open(path, read_only=True) only reads)"
        )
        wording = "storage.unwritable_folder"
    activity = getattr(exc, "lexkeep_doing", None) if verb == "access" else None
    during = f" while {activity}" if activity else ""
    return StoreError(f"cannot {verb} {target}{during}: {reason}", hint=hint, wording=wording)


def unnamed_write_error(exc: BaseException) -> LexkeepError | None:
    """A write that failed for want of room and names no file, as an error naming where it
    can have gone; None for any other exception.

    The OSError of a write to standard output (`lexkeep stats > stats.json` on a full disk)
    names no file, nor does one of the anonymous temporary files a big audit spills to, so
    when standard output is a file both are named (-o names its own file: output_stream).
    """
    if not isinstance(exc, OSError) or exc.filename is not None or exc.errno not in _NO_ROOM:
        return None
    import tempfile  # only after a failed write: the quick calls never need it

    temp = tempfile.gettempdir()
    if _stdout_is_a_file():
        return LexkeepError(
            f"cannot write standard output or a temporary file in {temp}: {exc.strerror}",
            hint="free space (or raise the quota or file size limit) where standard output goes"
            f" and in {temp}, or send standard output to another disk (and point $TMPDIR at"
            " one), then run the command again: what was stored before stays",
        )
    return LexkeepError(
        f"cannot write a temporary file in {temp}: {exc.strerror}",
        hint=f"free space (or raise the quota or file size limit) in {temp}, or point $TMPDIR at"
        " another disk, then run the command again: what was stored before stays",
    )


def _stdout_is_a_file() -> bool:
    """True when standard output goes to a file or a device (not a terminal or a pipe)."""
    try:
        fd = sys.stdout.fileno()
        mode = os.fstat(fd).st_mode
    except (AttributeError, OSError, ValueError):
        return False
    return stat.S_ISREG(mode) or (stat.S_ISCHR(mode) and not os.isatty(fd))
