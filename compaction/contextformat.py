"""The next-run context's formats and byte limits: what `lexkeep context` and `lexkeep guard`
parse from the command line, importable without the store (compaction/context.py is built on it
and imports DuckDB)."""

from __future__ import annotations

from enum import StrEnum

DEFAULT_ANSWER_BYTES = 240
MAX_BYTES = 2**63 - 1  # the largest --budget-bytes and --answer-bytes (64-bit signed)


class ContextFormat(StrEnum):
    """Serialisations of the next-run context."""

    JSON = "json"
    TEXT = "text"
