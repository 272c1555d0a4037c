"""Ingest: trace files → decoded JSON values → reader records → the DuckDB store.

The input side (`JsonSource`, `iter_json_lines`, `read_records`) never touches the store;
`ingest_paths` is the one library entry point that writes.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import re
import sys
from collections.abc import Iterable, Iterator
from itertools import chain
from pathlib import Path
from typing import IO, Any, BinaryIO

import orjson

from lexkeep.core.errors import InputError
from lexkeep.core.formats import detect, get_reader
from lexkeep.core.model import Format, Record, Skipped, Source
from lexkeep.core.readers import JsonLine

# How many decoded values the format sniffers see.
HEAD_VALUES = 20
_CHUNK = 1 << 20

TRUNCATED_LAST_LINE = "truncated last line (file still being written?)"


class _Prefixed(io.RawIOBase):
    """A raw stream that replays `head` before the rest of `rest` (peeking without seek)."""

    def __init__(self, head: bytes, rest: IO[bytes]) -> None:
        self._head = head
        self._rest = rest

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        if self._head:
            n = min(len(buffer), len(self._head))
            buffer[:n] = self._head[:n]
            self._head = self._head[n:]
            return n
        data = self._rest.read(len(buffer))
        n = len(data)
        buffer[:n] = data
        return n


def open_input(path: str | Path) -> BinaryIO:
    """Open a trace for binary reading: '-' is standard input, *.gz is decompressed."""
    name = str(path)
    if name == "-":
        return sys.stdin.buffer
    try:
        raw = open(name, "rb")  # noqa: SIM115 - closed by the caller
    except OSError as exc:
        raise InputError(f"cannot open: {exc.strerror or exc}", path=name) from exc
    head = raw.read(2)
    raw.seek(0)
    if head == b"\x1f\x8b" or name.endswith(".gz"):
        return gzip.GzipFile(fileobj=raw, mode="rb")  # type: ignore[return-value]
    return raw


class JsonSource:
    """The decoded JSON values of one input, with what was consumed (lines, bytes, sha256).

    JSONL is read line by line. A document whose first value is an array (tau-bench result
    files) or a pretty-printed object is split into its top-level values (the elements of a
    top-level array) by a streaming scanner, so no whole file is ever held in memory. Each
    value carries the line it starts on.
    """

    def __init__(self, path: str | Path, display: str | None = None) -> None:
        self.path = str(path)
        self.display = display or self.path
        self.lines_consumed = 0
        self.bytes_consumed = 0
        self.digest = hashlib.sha256()
        self.truncated_last_line = False
        self.document = False  # True when read as a JSON document rather than JSONL

    @property
    def sha256(self) -> str:
        """Hex sha256 of the bytes consumed so far."""
        return self.digest.hexdigest()

    def __iter__(self) -> Iterator[JsonLine | Skipped]:
        stream = open_input(self.path)
        try:
            head = _read_head(stream)
            body = io.BufferedReader(_Prefixed(head, stream), buffer_size=_CHUNK)
            if _looks_like_document(head):
                self.document = True
                yield from self._document(body)
            else:
                yield from self._lines(body)
        except (OSError, EOFError, gzip.BadGzipFile) as exc:
            raise InputError(f"cannot read: {exc}", path=self.display) from exc
        finally:
            if stream is not sys.stdin.buffer:
                stream.close()

    # -- JSONL -------------------------------------------------------------------------

    def _lines(self, body: IO[bytes]) -> Iterator[JsonLine | Skipped]:
        display = self.display
        loads = orjson.loads
        update = self.digest.update
        decode_error = orjson.JSONDecodeError
        number = 0
        consumed = 0
        for raw in body:
            number += 1
            if raw[-1:] != b"\n":
                # The last line has no newline: a writer may still be busy with it. Use it
                # when it is complete JSON; otherwise leave it for a later ingest.
                try:
                    value = loads(raw)
                except decode_error:
                    if raw.strip():
                        self.truncated_last_line = True
                        self.lines_consumed = number - 1
                        self.bytes_consumed = consumed
                        yield Skipped(
                            Source(display, number), "truncated_last_line", TRUNCATED_LAST_LINE
                        )
                        return
                    value = None
                update(raw)
                consumed += len(raw)
                if value is not None or raw.strip():
                    yield _value_or_skip(value, display, number)
                break
            update(raw)
            consumed += len(raw)
            if len(raw) <= 2 and not raw.strip():
                continue
            try:
                value = loads(raw)
            except decode_error as exc:
                if not raw.strip():
                    continue
                yield _decode_skip(exc, raw, display, number)
                continue
            yield _value_or_skip(value, display, number)
        self.lines_consumed = number
        self.bytes_consumed = consumed

    # -- JSON documents ----------------------------------------------------------------

    def _document(self, body: IO[bytes]) -> Iterator[JsonLine | Skipped]:
        for start_line, raw in _scan_document(body, self):
            if isinstance(raw, Skipped):
                yield raw
                return
            try:
                value = orjson.loads(raw)
            except orjson.JSONDecodeError as exc:
                yield _decode_skip(exc, raw, self.display, start_line, multiline=True)
                continue
            yield _value_or_skip(value, self.display, start_line)


def _read_head(stream: IO[bytes]) -> bytes:
    """Up to one chunk from the start of the stream (enough to choose JSONL vs document)."""
    head = stream.read(_CHUNK // 16)
    return head or b""


def _looks_like_document(head: bytes) -> bool:
    """True for a JSON array or a pretty-printed object; False for JSONL (and empty input)."""
    text = head.lstrip(b"\xef\xbb\xbf \t\r\n")
    if text.startswith(b"["):
        return True
    if not text.startswith(b"{"):
        return False
    first, newline, _ = text.partition(b"\n")
    if not newline:
        return False  # one long line: JSONL (or a single-line object, which is the same)
    # A JSONL line is a whole object; a pretty-printed document's first line is not.
    return not first.rstrip().endswith(b"}")


def _value_or_skip(value: Any, display: str, line: int) -> JsonLine | Skipped:
    if isinstance(value, dict):
        return JsonLine(line, value)
    return Skipped(
        Source(display, line),
        "not_an_object",
        f"expected a JSON object, got {type(value).__name__}",
        fatal=True,
        col=1,
    )


def _decode_skip(
    exc: orjson.JSONDecodeError, raw: bytes, display: str, line: int, *, multiline: bool = False
) -> Skipped:
    message = str(exc.msg if hasattr(exc, "msg") else exc)
    if "utf-8" in message.lower() or "utf8" in message.lower():
        reason, detail = "invalid_utf8", "invalid UTF-8"
    else:
        reason, detail = "invalid_json", f"invalid JSON ({message})"
    err_line = line + (exc.lineno - 1 if multiline and getattr(exc, "lineno", 0) else 0)
    col = getattr(exc, "colno", None) or None
    return Skipped(Source(display, err_line), reason, detail, fatal=True, col=col)


_STRUCTURE = re.compile(rb'[\[\]{}",\\\n]')


def _scan_document(body: IO[bytes], source: JsonSource) -> Iterator[tuple[int, Any]]:
    """Split a JSON document into its top-level values (a top-level array's elements).

    Yields (line the value starts on, raw bytes) or, on a structural problem, one
    (line, Skipped) and stops. Strings and escapes are tracked so brackets inside text
    do not count.
    """
    display = source.display
    depth = 0
    in_string = False
    skip_at = -1  # absolute offset of a byte escaped by a backslash
    line = 1
    base = 0
    top_array: bool | None = None
    piece_start: int | None = None  # absolute offset where the current value's bytes begin
    piece_line = 1
    pending = bytearray()
    buf = b""

    def finish(end: int) -> tuple[int, bytes] | None:
        nonlocal pending, piece_start
        assert piece_start is not None
        local_start = max(piece_start - base, 0)
        pending += buf[local_start : end - base]
        raw = bytes(pending)
        pending = bytearray()
        piece_start = None
        stripped = raw.lstrip()
        if not stripped.strip():
            return None
        lead = raw[: len(raw) - len(stripped)]
        return piece_line + lead.count(b"\n"), stripped

    last = b""
    while True:
        buf = body.read(_CHUNK)
        if not buf:
            break
        last = buf
        source.digest.update(buf)
        if top_array is None:
            text = buf.lstrip(b"\xef\xbb\xbf \t\r\n")
            if text:
                top_array = text.startswith(b"[")
        for match in _STRUCTURE.finditer(buf):
            pos = base + match.start()
            ch = match.group()
            if ch == b"\n":
                line += 1
                continue
            if pos == skip_at:
                continue
            if in_string:
                if ch == b'"':
                    in_string = False
                elif ch == b"\\":
                    skip_at = pos + 1
                continue
            if ch == b'"':
                in_string = True
                if depth == 0 and not top_array and piece_start is None:
                    yield (
                        line,
                        Skipped(
                            Source(display, line), "invalid_json", "expected a JSON object", True
                        ),
                    )
                    return
                continue
            if ch in (b"[", b"{"):
                if top_array and depth == 0:
                    piece_start, piece_line = pos + 1, line
                elif not top_array and depth == 0:
                    piece_start, piece_line = pos, line
                depth += 1
                continue
            if ch in (b"]", b"}"):
                depth -= 1
                if depth < 0:
                    yield (
                        line,
                        Skipped(
                            Source(display, line), "invalid_json", f"unexpected {ch.decode()}", True
                        ),
                    )
                    return
                if top_array and depth == 0:
                    done = finish(pos)
                    if done:
                        yield done
                elif not top_array and depth == 0:
                    done = finish(pos + 1)
                    if done:
                        yield done
                continue
            if ch == b"," and top_array and depth == 1:
                done = finish(pos)
                if done:
                    yield done
                piece_start, piece_line = pos + 1, line
        if piece_start is not None:
            pending += buf[max(piece_start - base, 0) :]
        base += len(buf)
    source.bytes_consumed = base
    source.lines_consumed = line - 1 if last.endswith(b"\n") or not base else line
    if depth != 0 or in_string:
        yield (
            line,
            Skipped(
                Source(display, line),
                "truncated_document",
                "the JSON document ends before it is complete (file still being written?)",
                True,
            ),
        )


def iter_json_lines(path: str | Path) -> Iterator[JsonLine | Skipped]:
    """Decoded JSON values of a trace file (JSONL, JSON array document, .gz, '-' = stdin)."""
    return iter(JsonSource(path))


def read_records(
    path: str | Path, format: Format | str | None = None, *, display: str | None = None
) -> Iterator[Record]:
    """Detect the format of `path` (unless given) and yield its records; writes nothing."""
    source = JsonSource(path, display)
    fmt, items = detect_format(source, format)
    yield from get_reader(fmt).read(items, source.display)


def detect_format(
    source: Iterable[JsonLine | Skipped], format: Format | str | None = None
) -> tuple[Format, Iterator[JsonLine | Skipped]]:
    """The format of a stream (forced or sniffed from its head) and the whole stream again."""
    items = iter(source)
    if format is not None:
        return Format(format) if not isinstance(format, Format) else format, items
    head_items: list[JsonLine | Skipped] = []
    for item in items:
        head_items.append(item)
        if sum(isinstance(i, JsonLine) for i in head_items) >= HEAD_VALUES:
            break
    head = [i.value for i in head_items if isinstance(i, JsonLine)]
    fmt = detect(head)
    display = getattr(source, "display", None)
    if fmt is None:
        first_bad = next((i for i in head_items if isinstance(i, Skipped) and i.fatal), None)
        if first_bad is not None and not head:
            raise InputError(
                first_bad.detail or first_bad.reason,
                path=first_bad.source.file,
                line=first_bad.source.line,
                col=first_bad.col,
                hint="the file is not valid JSON/JSONL",
            )
        raise UnrecognisedFormat(
            "not a recognised trace format",
            path=display,
            hint="force one with --format (" + ", ".join(f.value for f in Format) + ")",
        )
    return fmt, chain(head_items, items)


class UnrecognisedFormat(InputError):
    """No reader recognised the file (e.g. a JSON file that is not a trace)."""
