"""The reader contract: each trace format turns parsed JSON values into model records.

The ingest (`lexkeep.core.ingest`) opens files (plain, .gz, standard input), splits lines,
decodes JSON with orjson and hands each reader a stream of `JsonLine` (or `Skipped` for a
line that could not be decoded). A reader never opens files, never touches the store, and
never raises on bad data: it yields `Skipped(reason=...)` and goes on. It yields records in
timeline order; the ingest gives them positions in that order.

Re-reading a grown file: the ingest runs the reader over the whole file again (readers keep
state such as the session id from line 1) and keeps only records from new lines, so record
ids derived from file content must be stable: derive them from the conversation id and the
source line, never from counters that depend on where reading started.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any, Protocol

from lexkeep.core.model import Format, Record, Skipped


@dataclass(frozen=True, slots=True)
class JsonLine:
    """One decoded JSON value and the 1-based line it starts on."""

    line: int
    value: Any


class Reader(Protocol):
    """A trace format: how to recognise it and how to turn its lines into records."""

    format: Format

    def sniff(self, head: list[Any]) -> int:
        """Score (0 = not this format, higher = more certain) from the first decoded values."""
        ...

    def read(self, lines: Iterable[JsonLine | Skipped], path: str) -> Iterator[Record]:
        """Yield records for `path` (the display path used in every Source)."""
        ...
