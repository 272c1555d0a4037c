"""Reader for claude traces (skeleton; full implementation follows)."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

from lexkeep.core.model import Format, Record, Skipped
from lexkeep.core.readers import JsonLine


class _Reader:
    """Skeleton reader: recognises nothing yet."""

    format = Format.CLAUDE

    def sniff(self, head: list[Any]) -> int:
        """Score the first decoded values (0 = not this format)."""
        return 0

    def read(self, lines: Iterable[JsonLine | Skipped], path: str) -> Iterator[Record]:
        """Yield records for `path`."""
        for item in lines:
            if isinstance(item, Skipped):
                yield item


READER = _Reader()
