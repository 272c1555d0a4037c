"""The reader contract: each trace format turns parsed JSON values into model records.

The ingest (`lexkeep.core.ingest`) opens files (plain, .gz, standard input), splits lines,
decodes JSON with orjson and hands each reader a stream of `JsonLine` (or `Skipped` for a
line that could not be decoded). A reader never opens files, never touches the store, and
never raises on bad data: it yields `Skipped(reason=...)` and goes on. It yields records in
timeline order; the ingest gives them positions in that order. A value a reader keeps as JSON
text (a tool call's object arguments) is written with `JsonLine.json_text`, which keeps every
number as the line writes it.

Re-reading a grown file: the ingest runs the reader over the whole file again (readers keep
state such as the session id from line 1) and keeps only records from new lines, so record
ids derived from file content must be stable: derive them from the conversation id and the
source line, never from counters that depend on where reading started.

Request-log readers (`continues = True`: OpenAI, Anthropic) also take `continued`, the state
the earlier files of the same ingest (and, through the store, of earlier ingests) left
(core.requestlog.Continued), so that a conversation continued in the next file of a rotated
log goes on where it was. They `meet` each conversation that other files may continue before
they align anything of it, so that its stored state is recalled first.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any, Protocol

from lexkeep.core.jsonnumbers import compact_text, counterparts, float_text, holds_float, same_json
from lexkeep.core.model import Format, Record, Skipped

BOM = b"\xef\xbb\xbf"  # UTF-8's byte-order mark, skipped before a file's first line or value
LEADING = BOM + b" \t\r\n"  # what may come before a JSON value at the start of a file


def bad_utf8(raw: bytes) -> tuple[int, int, int] | None:
    """(byte, line, column) of the first byte of `raw` that is not UTF-8, or None.

    The column counts characters, as JSON errors and editors do; lines and columns are 1-based.
    """
    try:
        raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        head = raw[: exc.start]
        start = head.rfind(b"\n") + 1
        return raw[exc.start], head.count(b"\n") + 1, len(head[start:].decode("utf-8")) + 1
    return None


@dataclass(frozen=True, slots=True)
class JsonLine:
    """One decoded JSON value, the 1-based line it starts on and the JSON text it came from."""

    line: int
    value: Any
    # Not part of the value's identity: a document and its scanned pieces read alike.
    raw: bytes | str = field(default=b"", compare=False, repr=False)
    # The line decoded again keeping numbers' text, once: a request log holds a whole
    # conversation, and each of its tool calls with a float would decode it again.
    _parts: dict[int, Any] | None = field(default=None, init=False, compare=False, repr=False)

    def json_text(self, part: Any) -> str:
        """`part` (the value, or a value inside it) as compact JSON text, numbers as written.

        orjson decoded the line: an integer beyond 64 bits or a long decimal became a float,
        which it would write back changed. Such a number is written as the line has it.
        """
        if not self.raw or not holds_float(part):
            return compact_text(part)
        parts = self._parts
        if parts is None:
            parts = counterparts(self.value, self.raw)
            object.__setattr__(self, "_parts", parts)
        return float_text(part, parts)  # holds_float tested here already


def type_of(value: dict[str, Any]) -> str | None:
    """`value["type"]` when it is a string or absent (None); any other value as `<list>` etc.

    Readers look a type up in sets of known names, and a list or an object cannot be looked
    up in a set; as `<list>` it is a name no reader knows, reported like any unknown type.
    """
    kind = value.get("type")
    if kind is None or isinstance(kind, str):
        return kind
    return f"<{type(kind).__name__}>"


def json_text(value: Any, line: JsonLine | None) -> str:
    """Compact JSON text of a decoded value (how object arguments are kept raw), its numbers
    as `line` writes them when given (orjson read a big integer as a float: JsonLine)."""
    try:
        return line.json_text(value) if line is not None else compact_text(value)
    except TypeError:  # a value no JSON writer takes (decoded by another parser)
        return str(value)


def same_call(name: str, raw: str, other_name: str, other_raw: str) -> bool:
    """True when two tool calls under one call id are the same call written twice: the same
    name, and arguments that are one JSON value (`same_json`: key order, spacing and escapes
    aside). A reader that meets a call id again in its file drops such a repeat as a
    `duplicate`; any other repeat it yields, and the ingest keeps the first call and records
    the repeat as left out (`id_conflict`), as for the same call id in two files."""
    return name == other_name and same_json(raw, other_raw)


def result_digest(text: str) -> tuple[int, int]:
    """What a reader keeps of a tool result's text, to tell a result given again under its call
    id with the same text (a `duplicate`, dropped) from one with other text (yielded; the ingest
    keeps the first and records the repeat as left out, `id_conflict`, as for tool calls). Not
    the text: a file's tool output is not held until the end of the file. The length and
    Python's string hash (cached on the string, a fifth of a cryptographic digest's cost on
    tool output, which is most of a dump's bytes); digests are compared only within one
    reader in one process, where two texts of one length share a hash with odds of 2^-64."""
    return len(text), hash(text)


class Reader(Protocol):
    """A trace format: how to recognise it and how to turn its lines into records."""

    format: Format

    def sniff(self, head: list[Any]) -> int:
        """Score (0 = not this format, higher = more certain) from the first decoded values."""
        ...

    def read(self, lines: Iterable[JsonLine | Skipped], path: str) -> Iterator[Record]:
        """Yield records for `path` (the display path used in every Source)."""
        ...
