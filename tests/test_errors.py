"""The wording of failed reads and writes: what was being done, the file, and what to do."""

from __future__ import annotations

import errno
import os

import duckdb
import pytest

from lexkeep.core.errors import storage_error


def _refused(code: int, path: str) -> OSError:
    return OSError(code, os.strerror(code), path)


@pytest.mark.parametrize("code", [errno.EACCES, errno.EPERM, errno.EROFS])
def test_a_refused_read_says_read_and_asks_for_the_file_to_be_readable(code: int) -> None:
    found = storage_error(_refused(code, "traces/t.jsonl"), "read")
    assert found is not None
    assert found.message == f"cannot read traces/t.jsonl: {os.strerror(code)}"
    assert found.hint == "make traces/t.jsonl and the folders above it readable"


def test_a_refused_write_says_write_with_or_without_the_operation() -> None:
    for operation in (None, "write"):
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
