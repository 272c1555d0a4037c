"""The keys a keyless store already holds, in memory that grows by bytes per key, not objects.

A folder audit ingests into a private in-memory store whose timeline tables have no primary-key
indexes (core/ingest.py `_unkey`): the writer leaves out a row whose key was written before,
as ON CONFLICT DO NOTHING would. Holding every key written so far as Python strings and tuples
costs about 150 bytes a key, which grew a 4 GB folder audit's memory by ~270 MB. `Keys` holds
the keys of committed groups as 64-bit hashes in an open-addressed array (8 bytes a slot, at
most half full: 16-32 bytes a key), and only the current group's keys exactly. A committed
hash that matches is checked against the store itself before a row is left out, so a hash
collision never drops a row.
"""

from __future__ import annotations

from array import array
from collections.abc import Callable, Collection, Hashable, Sequence
from typing import Any, TypeVar

Row = TypeVar("Row", bound=Sequence[Any])

# What a store lookup answers: of these keys, the ones the table holds.
Lookup = Callable[[str, list[Any]], set[Any]]

_EMPTY = 0
_FIRST_SLOTS = 1 << 12


# A key's 64-bit value (Python's hash of strings and of tuples of strings). A module name, so
# a test can make every key's value alike.
_hash: Callable[[Hashable], int] = hash


class HashSet:
    """A set of 64-bit integers in one `array('q')`, linear probing, at most half full.

    0 marks an empty slot, so 0 is held as 1 (a caller storing hashes only gets one more value
    that matches). Only membership and insertion: nothing is ever removed.
    """

    __slots__ = ("_slots", "_mask", "_count")

    def __init__(self) -> None:
        self._slots = array("q", bytes(8 * _FIRST_SLOTS))
        self._mask = _FIRST_SLOTS - 1
        self._count = 0

    def __len__(self) -> int:
        return self._count

    def __contains__(self, value: int) -> bool:
        value = value or 1
        slots = self._slots
        mask = self._mask
        i = value & mask
        while True:
            held = slots[i]
            if held == value:
                return True
            if held == _EMPTY:
                return False
            i = (i + 1) & mask

    def add(self, value: int) -> None:
        """Insert `value` (0 is taken as 1); a value already held is left as it is."""
        self.update((value,))

    def update(self, values: Collection[int]) -> None:
        """Insert each of `values` (0 is taken as 1); values already held are left as they are."""
        while 2 * (self._count + len(values)) > len(self._slots):
            self._grow()
        slots = self._slots
        mask = self._mask
        count = self._count
        for value in values:
            value = value or 1
            i = value & mask
            while True:
                held = slots[i]
                if held == value:
                    break
                if held == _EMPTY:
                    slots[i] = value
                    count += 1
                    break
                i = (i + 1) & mask
        self._count = count

    def _grow(self) -> None:
        size = 2 * len(self._slots)
        slots = array("q", bytes(8 * size))
        mask = size - 1
        for value in filter(None, self._slots):
            i = value & mask
            while slots[i] != _EMPTY:
                i = (i + 1) & mask
            slots[i] = value
        self._slots = slots
        self._mask = mask

    @property
    def nbytes(self) -> int:
        """Bytes the slots take."""
        return len(self._slots) * self._slots.itemsize


class Keys:
    """The keys written so far, per table, to a store whose tables have no primary keys.

    `fresh(table, rows, key)` keeps the rows whose key was not written before, the first one
    winning as with DuckDB's ON CONFLICT DO NOTHING. A group's keys stay apart (exact) until
    its transaction commits, so a group rolled back forgets them with its rows; committed keys
    are kept as hashes, and `lookup(table, keys)` (the store) confirms a matching hash.
    """

    def __init__(self, tables: Sequence[str], lookup: Lookup) -> None:
        self.lookup = lookup
        self.committed: dict[str, HashSet] = {table: HashSet() for table in tables}
        self.pending: dict[str, set[Any]] = {table: set() for table in tables}
        self._pending_values: dict[str, list[int]] = {table: [] for table in tables}

    def fresh(self, table: str, rows: list[Row], key: Callable[[Row], Hashable]) -> list[Row]:
        """The rows of `rows` whose key is new to `table` (noted as written, pending commit)."""
        committed = self.committed[table]
        pending = self.pending[table]
        values = self._pending_values[table]  # their hashes, for commit()
        out: list[Row] = []
        doubtful: list[tuple[int, Any]] = []  # (index in out, key) whose hash was committed
        slots = committed._slots  # committed.__contains__, inlined: one call per row costs
        mask = committed._mask
        hasher = _hash
        for row in rows:
            k = key(row)
            if k in pending:
                continue
            pending.add(k)
            value = hasher(k) or 1
            values.append(value)
            i = value & mask
            while True:
                held = slots[i]
                if held == value:
                    doubtful.append((len(out), k))
                    break
                if held == _EMPTY:
                    break
                i = (i + 1) & mask
            out.append(row)
        if doubtful:
            stored = self.lookup(table, [k for _, k in doubtful])
            if stored:
                drop = {i for i, k in doubtful if k in stored}
                out = [row for i, row in enumerate(out) if i not in drop]
        return out

    def commit(self) -> None:
        """The group's transaction committed: its keys are the store's."""
        for table, keys in self.pending.items():
            values = self._pending_values[table]
            self.committed[table].update(values)
            values.clear()
            keys.clear()

    def discard(self) -> None:
        """The group's transaction rolled back: forget its keys."""
        for keys in self.pending.values():
            keys.clear()
        for values in self._pending_values.values():
            values.clear()
