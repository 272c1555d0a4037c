"""The wording of failed reads and writes: what was being done, the file, and what to do."""

from __future__ import annotations

import errno
import os
import subprocess
import sys
from pathlib import Path

import duckdb
import pytest
from conftest import permission_bound

from lexkeep.core.errors import doing, storage_error


def _refused(code: int, path: str) -> OSError:
    return OSError(code, os.strerror(code), path)


@pytest.mark.parametrize("code", [errno.EACCES, errno.EPERM, errno.EROFS])
def test_a_refused_read_says_read_and_asks_for_the_file_to_be_readable(code: int) -> None:
    found = storage_error(_refused(code, "traces/t.jsonl"), "read")
    assert found is not None
    assert found.message == f"cannot read traces/t.jsonl: {os.strerror(code)}"
    assert found.hint == "make traces/t.jsonl and the folders above it readable"


def test_a_refused_write_says_write() -> None:
    for operation in ("write",):
        found = storage_error(_refused(errno.EACCES, "s.duckdb"), operation)
        assert found is not None
        assert found.message == "cannot write s.duckdb: Permission denied"
        assert found.hint is not None and "writable" in found.hint


def test_duckdb_names_its_operation_unless_the_caller_knows_better() -> None:
    failed = duckdb.IOException('IO Error: Cannot open file "s.duckdb": Permission denied')
    opened = storage_error(failed)
    read = storage_error(failed, "read")
    assert opened is not None and opened.message == "cannot open s.duckdb: Permission denied"
    assert read is not None and read.message == "cannot read s.duckdb: Permission denied"


def test_an_unknown_operation_is_refused() -> None:
    with pytest.raises(ValueError, match="'append'"):
        storage_error(_refused(errno.EACCES, "f"), "append")


def test_a_refusal_whose_operation_is_unknown_is_not_called_a_write() -> None:
    """An unexpected EACCES reached the generic handler as `cannot write FILE` with the
    store's hint, whatever had been tried (a look-up, a read)."""
    found = storage_error(_refused(errno.EACCES, "traces/t.jsonl"))
    assert found is not None
    assert found.message == "cannot access traces/t.jsonl: Permission denied"
    assert found.hint == (
        "check the permissions of traces/t.jsonl and of the folders above it: a file must be"
        " readable (writable, for what lexkeep writes), and each folder above it searchable"
    )
    for operation in ("open", "create"):
        named = storage_error(_refused(errno.EACCES, "s.duckdb"), operation)
        assert named is not None
        assert named.message == f"cannot {operation} s.duckdb: Permission denied"


def test_a_full_disk_or_read_only_mount_is_a_write_without_being_told() -> None:
    """ENOSPC, EDQUOT, EFBIG and EROFS come only from writing: they still say write."""
    for code in (errno.ENOSPC, errno.EROFS):
        found = storage_error(_refused(code, "s.duckdb"))
        assert found is not None
        assert found.message == f"cannot write s.duckdb: {os.strerror(code)}"


def test_the_folder_that_may_not_be_searched_is_named(tmp_path: Path) -> None:
    """A refusal inside a folder that may be listed but not searched names that folder and
    asks for search permission, not for the file to be made readable."""
    prefix = permission_bound()
    shut = tmp_path / "shut"
    (shut / "inner").mkdir(parents=True)
    (shut / "inner" / "t.jsonl").write_text("{}\n")
    shut.chmod(0o600)
    try:
        done = subprocess.run(
            [*prefix, sys.executable, "-c",
             "import sys; from lexkeep.core.errors import storage_error\n"
             "try:\n    open(sys.argv[1])\n"
             "except OSError as exc:\n"
             "    e = storage_error(exc, 'read'); print(e.message); print(e.hint)",
             str(shut / "inner" / "t.jsonl")],
            capture_output=True, text=True, timeout=60,
        )  # fmt: skip
    finally:
        shut.chmod(0o755)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [
        f"cannot read {shut / 'inner' / 't.jsonl'}: Permission denied",
        f"make the folder {shut} searchable (its x permission): nothing in it can be reached"
        " without it",
    ]


def test_a_refusal_whose_operation_is_unknown_says_what_was_being_done(tmp_path: Path) -> None:
    """An unforeseen refusal said only `cannot access PATH`, whatever the command was doing
    (reading its settings, opening the store, writing the report): it now names that, the
    innermost activity it escaped, from a real refused open."""
    prefix = permission_bound()
    shut = tmp_path / "shut"
    shut.mkdir()
    (shut / "lexkeep.toml").write_text("")
    shut.chmod(0o600)  # listed, not searched: anything in it is refused
    script = (
        "import sys\n"
        "from lexkeep.core.errors import doing, storage_error\n"
        "try:\n"
        "    with doing('writing the report'), doing('reading settings'):\n"
        "        open(sys.argv[1], 'rb')\n"
        "except OSError as exc:\n"
        "    print(storage_error(exc).message)\n"
    )
    try:
        done = subprocess.run(
            [*prefix, sys.executable, "-c", script, str(shut / "lexkeep.toml")],
            capture_output=True, text=True, timeout=60,
        )  # fmt: skip
    finally:
        shut.chmod(0o755)
    assert done.stdout.splitlines() == [
        f"cannot access {shut / 'lexkeep.toml'} while reading settings: Permission denied"
    ], done.stderr
    # Where the operation is known, it is named as before; outside any activity, as before.
    with pytest.raises(OSError) as raised, doing("opening the store"):
        raise _refused(errno.EACCES, "s.duckdb")
    found = storage_error(raised.value, "open")
    assert found is not None and found.message == "cannot open s.duckdb: Permission denied"
    found = storage_error(_refused(errno.EACCES, "t.jsonl"))
    assert found is not None and found.message == "cannot access t.jsonl: Permission denied"
