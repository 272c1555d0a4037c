"""The registry of trace formats: one Reader per Format, and per-file auto-detection."""

from __future__ import annotations

import importlib
from collections.abc import Callable
from enum import StrEnum
from typing import TYPE_CHECKING, Any

from lexkeep.core.errors import InputError

if TYPE_CHECKING:  # the readers import the data model: --help lists the formats without it
    from lexkeep.core.readers import Reader


class Format(StrEnum):
    """Trace formats lexkeep reads (re-exported by core.model, with the rest of the data model)."""

    LEXKEEP = "lexkeep"
    OPENAI = "openai"
    CODEX = "codex"
    CLAUDE = "claude"
    ANTHROPIC = "anthropic"


# Module (under lexkeep.core) that exposes each format's `READER`. Imported lazily so that
# a reader still being written (or failing to import) does not break the other formats.
_MODULES: dict[Format, str] = {
    Format.LEXKEEP: "read_lexkeep",
    Format.OPENAI: "read_openai",
    Format.CODEX: "read_codex",
    Format.CLAUDE: "read_claude",
    Format.ANTHROPIC: "read_anthropic",
}

_cache: dict[Format, Reader] = {}


def _load(fmt: Format) -> Reader | None:
    if fmt in _cache:
        return _cache[fmt]
    name = f"lexkeep.core.{_MODULES[fmt]}"
    try:
        module = importlib.import_module(name)
    except ModuleNotFoundError as exc:
        if exc.name != name:  # a real import error inside the reader must surface
            raise
        return None
    reader: Reader = module.READER
    _cache[fmt] = reader
    return reader


def get_reader(fmt: Format | str) -> Reader:
    """The reader for `fmt`; InputError naming the known formats when it is unknown."""
    try:
        key = Format(fmt)
    except ValueError:
        known = ", ".join(f.value for f in Format)
        raise InputError(f"unknown format {fmt!r}", hint=f"use one of: {known}") from None
    reader = _load(key)
    if reader is None:
        raise InputError(f"the {key.value} reader is not available in this build")
    return reader


def all_readers() -> list[Reader]:
    """Every reader that is available, in registry order."""
    return [r for r in (_load(f) for f in _MODULES) if r is not None]


def detect(head: list[Any]) -> Format | None:
    """The format whose reader scores `head` (the first decoded values) highest; None if none."""
    best: tuple[int, Format] | None = None
    for reader in all_readers():
        try:
            score = int(reader.sniff(head))
        except Exception:  # a sniffer must never stop detection of the other formats
            score = 0
        if score > 0 and (best is None or score > best[0]):
            best = (score, reader.format)
    return best[1] if best else None


def header_only(head: list[Any]) -> bool:
    """True when a reader's optional `header_only(head)` says `head` is its file's header line
    alone, before which no format can be told: the file is read once its next line is whole."""
    for reader in all_readers():
        check = getattr(reader, "header_only", None)
        try:
            if check is not None and check(head):
                return True
        except Exception:  # as in detect: one reader never stops the others
            continue
    return False


def other_claims(fmt: Format) -> list[tuple[Format, Callable[[Any], bool]]]:
    """(format, claims) of every other format whose reader can tell one of its lines alone.

    A reader's optional `claims(value)` is true only for a value that is that format's line
    wherever it is found (a Claude Code chain line, a Codex envelope, a typed lexkeep record):
    the ingest refuses a file detected as `fmt` that holds such a line of another format
    (`cat a.jsonl b.jsonl`), which the detected reader would skip as an unknown record type.
    Request logs are claimed only by what one format alone writes (an OpenAI `tool_calls`
    list, an Anthropic `tool_use` block, a Responses request or stream event). A reader's
    `read_also_by` names formats whose reader reads its lines too (OpenAI chat reads
    Anthropic `messages` records): a file detected as one of those is not refused for them.
    """
    found = []
    for reader in all_readers():
        claims = getattr(reader, "claims", None)
        if reader.format == fmt or claims is None:
            continue
        if fmt in getattr(reader, "read_also_by", ()):
            continue
        found.append((reader.format, claims))
    return found


def format_names() -> list[str]:
    """Names accepted by --format."""
    return [f.value for f in Format]
