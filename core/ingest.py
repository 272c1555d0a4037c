"""Ingest: trace files → decoded JSON values → reader records → the DuckDB store.

The input side (`JsonSource`, `iter_json_lines`, `read_records`) never touches the store;
`ingest_paths` is the one library entry point that writes.
"""

from __future__ import annotations

import errno
import glob as globmod
import gzip
import hashlib
import io
import os
import re
import stat
import sys
import warnings
import zlib
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import nullcontext, suppress
from dataclasses import replace
from functools import partial
from itertools import chain
from operator import itemgetter
from pathlib import Path
from typing import IO, Any, BinaryIO

import orjson

from lexkeep.core.collector import paused
from lexkeep.core.errors import InputError, ReusedIdError, SkippedInputWarning
from lexkeep.core.fastload import Staged, drop_staging, is_plain_file, stage, write
from lexkeep.core.formats import detect, get_reader, header_only, other_claims
from lexkeep.core.identifiers import extract_many, prepare
from lexkeep.core.inspect import ID_CONFLICT, conflict_detail
from lexkeep.core.jsonnumbers import parsed_json
from lexkeep.core.keyset import Keys
from lexkeep.core.model import (
    ArgumentsKind,
    Boundary,
    Conversation,
    Extraction,
    FileCounts,
    Format,
    Message,
    MessageKind,
    MessageStatus,
    Record,
    Role,
    Run,
    RunStatus,
    Skipped,
    Source,
    ToolCall,
    ToolResult,
)
from lexkeep.core.parallel import ReadAhead, read_workers
from lexkeep.core.paths import ROTATED, log_name, rotated_log, search_hint, unsearchable_folder
from lexkeep.core.readers import BOM, LEADING, JsonLine, same_call
from lexkeep.core.requestlog import Continued, Memory
from lexkeep.core.rules import load_rules
from lexkeep.core.sidecar import Known, index_pending
from lexkeep.core.store import (
    READ_AGAIN_TABLE,
    Store,
    close_position_holes,
    drop_keys,
    is_duckdb_file,
    restore_file_order,
)

# How many decoded values the format sniffers see, and how many lines (values or not) are read
# to find them: a binary file (a DuckDB store given as a trace) is all bad "lines".
HEAD_VALUES = 20
HEAD_ITEMS = 1000
_CHUNK = 1 << 20

TRUNCATED_LAST_LINE = "truncated last line (file still being written?)"


def nul_tail_note(nul_bytes: int, after_line: int, path: str, cut: int = 0) -> str:
    """What is said of a file that ends in `nul_bytes` NUL bytes after line `after_line` (what a
    machine crash leaves on some file systems), after the first `cut` bytes of a line the crash
    cut (0: none): those bytes are not read."""
    cut_text = f" and {cut} bytes of a line they cut" if cut else ""
    return (
        f"ends in {nul_bytes} NUL bytes after line {after_line}{cut_text}"
        f" ({path}:{after_line + 1}), as a crash leaves: not read"
    )


def crash_left(c: FileCounts) -> str | None:
    """What a file with nothing to read (status "empty") holds when a crash left it so: NUL
    bytes only, or the start of its first line and NUL bytes after it; None otherwise."""
    if c.status != "empty" or c.nul_tail is None or c.nul_tail[1]:
        return None
    return crash_left_text(c.nul_tail[0], c.nul_tail_cut)


def crash_left_text(nul_bytes: int, cut: int | None) -> str:
    """What a file a crash left with nothing readable holds: `nul_bytes` NUL bytes, after the
    `cut` first bytes of its first line when the crash cut one (crash_left)."""
    if cut:
        return (
            f"a crash cut its first line after {cut} bytes and left {nul_bytes} NUL bytes"
            " after them"
        )
    return f"a file of {nul_bytes} NUL bytes, as a crash leaves before anything was written"


def nothing_yet(c: FileCounts) -> str | None:
    """Why nothing of a file with nothing to read (status "empty") could be read yet, as the
    ingest's summary line and the audit say it; None when it has nothing to read for good
    (empty, blank, NUL bytes only) or is standard input."""
    if c.status != "empty" or c.path == "-":
        return None
    if c.header_only:
        return f"{HEADER_ONLY} yet (file still being written?)"
    if c.truncated_last_line and (c.truncated_line or 1) > 1:
        return (
            f"line {c.truncated_line} is not complete and the lines before it hold no record"
            " (file still being written?)"
        )
    if c.truncated_last_line:
        return "its first line is not complete (file still being written?)"
    if c.truncated_document:
        return "the JSON document is still being written (not one value is complete)"
    return None


def nul_gap_note(gaps: Sequence[tuple[int, int, int]], path: str) -> str:
    """What is said of a file that holds runs of NUL bytes with lines after them (`gaps`: NUL
    bytes, the line after which they start, bytes of a line they cut; a writer restarted
    after a crash and appended): the NUL bytes are not read, the lines after them are."""
    nul_bytes, after_line, cut = gaps[0]
    cut_text = f" and {cut} bytes of a line they cut" if cut else ""
    more = f" (and {len(gaps) - 1} more such gap(s))" if len(gaps) > 1 else ""
    return (
        f"{nul_bytes} NUL bytes after line {after_line}{cut_text} ({path}:{after_line + 1}),"
        f" as a crash leaves: not read, the lines written after them are{more}"
    )


def _after_nul_bytes(raw: bytes) -> tuple[bytes, int, int] | None:
    """(what follows, NUL bytes, bytes before them) of a line holding one run of NUL bytes,
    where a crash left them and a restarted writer appended after them; None when `raw` holds
    none, or NUL bytes apart (UTF-16 text has one after each ASCII character). No JSON text
    holds a NUL byte (a string writes it as \\u0000), so this is asked only of a line that is
    not JSON: a valid line is never read otherwise."""
    first = raw.find(b"\0")
    if first < 0:
        return None
    last = raw.rfind(b"\0")
    if raw.count(b"\0", first, last + 1) != last + 1 - first:
        return None
    return raw[last + 1 :], last + 1 - first, first


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


def stdin_stream() -> BinaryIO:
    """Standard input as bytes; an InputError naming `-` when it is closed (`<&-`: Python
    then has no sys.stdin at all)."""
    stdin = sys.stdin
    if stdin is None:
        raise InputError(
            "standard input is closed: there is nothing to read",
            path="-",
            hint="pipe the input into the command (... | lexkeep ... -), or name a file"
            " instead of -",
        )
    return getattr(stdin, "buffer", stdin)


def open_input(path: str | Path) -> BinaryIO:
    """Open a trace for binary reading: '-' is standard input; gzip (known by its magic bytes,
    whatever the name says) is decompressed."""
    name = str(path)
    if name == "-":
        # A gzip stream is known by its first two bytes (`zcat` is not needed either way).
        stdin = stdin_stream()
        if stdin.isatty():
            # Typed at a terminal: its end (Ctrl-D) ends one read, not the input, so the
            # reads after the first two bytes would wait for another. Read it whole at once.
            stdin = io.BytesIO(stdin.read())  # type: ignore[assignment]
        head = stdin.read(2)
        rest = io.BufferedReader(_Prefixed(head, stdin))
        if head == b"\x1f\x8b":
            return gzip.GzipFile(fileobj=rest, mode="rb")  # type: ignore[return-value]
        return rest
    try:
        raw = open(name, "rb")  # noqa: SIM115 - closed by the caller
    except OSError as exc:
        raise InputError(
            f"cannot open: {exc.strerror or exc}",
            path=name,
            hint="make the file readable, or leave it out of the paths given",
        ) from exc
    head = raw.read(2)
    raw.seek(0)
    if head == GZIP_MAGIC:
        return gzip.GzipFile(fileobj=raw, mode="rb")  # type: ignore[return-value]
    return raw


GZIP_MAGIC = b"\x1f\x8b"


def unreadable(exc: OSError | EOFError | zlib.error, path: str) -> InputError:
    """A read of the trace `path` that failed, as an InputError naming it: a gzip file cut
    short (EOFError) or damaged (a CRC or a length that does not match, data zlib refuses,
    bytes after the compressed data that are not gzip) says so and what to do."""
    if isinstance(exc, EOFError):
        return InputError(
            "the gzip file ends before its end-of-stream marker: it is cut short (a copy or a"
            " compression that did not finish, or one still being written)",
            path=path,
            hint="restore the whole file, or let its writer finish (gzip -t FILE checks one);"
            " nothing of it was stored",
        )
    if isinstance(exc, zlib.error | gzip.BadGzipFile):
        return InputError(
            f"the gzip file is damaged ({exc})",
            path=path,
            hint="restore the file from a good copy (gzip -t FILE checks one); nothing of it"
            " was stored",
        )
    return InputError(f"cannot read: {exc}", path=path)


# Byte-order marks of the encodings Windows tools write instead of UTF-8 (PowerShell's `>`).
_WIDE_BOMS = (
    (b"\xff\xfe\x00\x00", "UTF-32"),
    (b"\x00\x00\xfe\xff", "UTF-32"),
    (b"\xff\xfe", "UTF-16"),
    (b"\xfe\xff", "UTF-16"),
)


def _wide_encoding(path: str | None) -> str | None:
    """ "UTF-16" or "UTF-32" when the file at `path` starts with that byte-order mark (after
    gzip); None otherwise, for standard input (read once) and for a file that cannot be read."""
    if path is None or path == "-":
        return None
    try:
        stream = open_input(path)
    except InputError:
        return None
    with stream:
        try:
            head = stream.read(4)
        except (OSError, EOFError, zlib.error):
            return None  # a damaged gzip file: reading it says so
    return next((name for bom, name in _WIDE_BOMS if head.startswith(bom)), None)


def is_gzip(path: str | Path) -> bool:
    """True when the file at `path` starts as gzip does (how open_input decides, not the name);
    False for a file that cannot be read (opening it says why)."""
    try:
        with open(path, "rb") as raw:
            return raw.read(2) == GZIP_MAGIC
    except OSError:
        return False


class JsonSource:
    """The decoded JSON values of one input, with what was consumed (lines, bytes, sha256).

    JSONL is read line by line. A document whose first value is an array (tau-bench result
    files) or a pretty-printed object is split into its top-level values (the elements of a
    top-level array) by a streaming scanner, so an array is never held whole in memory; a
    document that is one object (one value, held whole either way) is parsed by orjson at
    once, and the scanner only runs when orjson refuses it. Each value carries the line it
    starts on.
    """

    def __init__(self, path: str | Path, display: str | None = None) -> None:
        self.path = str(path)
        self.display = display or self.path
        self.lines_consumed = 0
        self.bytes_consumed = 0
        self.digest = hashlib.sha256()
        self.truncated_last_line = False
        self.truncated_object = False  # ... and that line starts a JSON object
        # (NUL bytes, the line after which they start) when the file ends in NUL bytes only
        # (a machine crash): they are not read, nor counted as consumed.
        self.nul_tail: tuple[int, int] | None = None
        self.nul_tail_cut = 0  # ... and the bytes of a line the crash cut before them
        # (NUL bytes, the line after which they start, bytes of a line they cut) of each run
        # of NUL bytes that lines follow (a writer restarted after a crash): see _lines.
        self.nul_gaps: list[tuple[int, int, int]] = []
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
                yield from self._document(body, head.lstrip(LEADING).startswith(b"{"))
            elif head.startswith(BOM):
                # A byte-order mark (Windows tools write one) is not part of the first line's
                # JSON (RFC 8259 lets a reader ignore it); its bytes still count as consumed.
                body.read(len(BOM))
                self.digest.update(BOM)
                yield from self._lines(body, len(BOM))
            else:
                yield from self._lines(body)
        except (OSError, EOFError, zlib.error) as exc:
            raise unreadable(exc, self.display) from exc
        finally:
            if stream is not sys.stdin.buffer:
                stream.close()

    # -- JSONL -------------------------------------------------------------------------

    def _lines(self, body: IO[bytes], consumed: int = 0) -> Iterator[JsonLine | Skipped]:
        display = self.display
        loads = orjson.loads
        update = self.digest.update
        decode_error = orjson.JSONDecodeError
        number = 0
        for raw in body:
            number += 1
            if raw[-1:] != b"\n":
                if not raw.strip(b"\0"):
                    # Only NUL bytes, what a crash leaves where the file was to grow: no line
                    # of it is being written. Not read, not consumed: a writer that goes on
                    # over them (a resumed session) has its lines read by a later ingest.
                    self.nul_tail = (len(raw), number - 1)
                    self.lines_consumed = number - 1
                    self.bytes_consumed = consumed
                    yield Skipped(
                        Source(display, number),
                        "nul_tail",
                        nul_tail_note(len(raw), number - 1, display),
                    )
                    return
                # The last line has no newline: a writer may still be busy with it. Use it
                # when it is complete JSON; otherwise leave it for a later ingest.
                try:
                    value = loads(raw)
                except decode_error:
                    after = _after_nul_bytes(raw)
                    if after is not None and not after[0].strip():
                        # The start of a line a crash cut, then NUL bytes where the file was
                        # to grow: a crash tail, as above, not a line being written. The cut
                        # start is lost with it; nothing of the line is consumed, so a writer
                        # that goes on after the NUL bytes makes it a gap (below).
                        nul_bytes, cut = after[1], after[2]
                        self.nul_tail = (nul_bytes, number - 1)
                        self.nul_tail_cut = cut
                        self.lines_consumed = number - 1
                        self.bytes_consumed = consumed
                        yield Skipped(
                            Source(display, number),
                            "nul_tail",
                            nul_tail_note(nul_bytes, number - 1, display, cut),
                        )
                        return
                    if after is not None:
                        try:
                            value = loads(after[0])
                        except decode_error:
                            pass
                        else:  # whole JSON after the NUL bytes of a crash: see below
                            self.nul_gaps.append((after[1], number - 1, after[2]))
                            update(raw)
                            consumed += len(raw)
                            yield _value_or_skip(value, display, number, after[0])
                            break
                    if raw.strip():
                        self.truncated_last_line = True
                        # the start of a JSON object, not some other file without a newline
                        self.truncated_object = raw.lstrip(LEADING).startswith(b"{")
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
                    yield _value_or_skip(value, display, number, raw)
                break
            update(raw)
            consumed += len(raw)
            if not number & 0x1FFF:
                self.bytes_consumed = consumed  # live, for progress bars
            if len(raw) <= 2 and not raw.strip():
                continue
            try:
                value = loads(raw)
            except decode_error as exc:
                if not raw.strip():
                    continue
                after = _after_nul_bytes(raw)
                if after is None:
                    yield _decode_skip(exc, raw, display, number)
                    continue
                # NUL bytes a crash left where the file was to grow (after a line it may have
                # cut), then what a restarted writer appended: a gap, not a bad line. The
                # appended line is read as the line's value.
                rest, nul_bytes, cut = after
                self.nul_gaps.append((nul_bytes, number - 1, cut))
                if not rest.strip():
                    continue
                try:
                    value = loads(rest)
                except decode_error as exc:
                    skip = _decode_skip(exc, rest, display, number)
                    if skip.col is not None:  # a column of the whole line
                        gap = raw[: len(raw) - len(rest)].decode("utf-8", "replace")
                        skip = replace(skip, col=skip.col + len(gap))
                    yield skip
                    continue
                yield _value_or_skip(value, display, number, rest)
                continue
            yield _value_or_skip(value, display, number, raw)
        self.lines_consumed = number
        self.bytes_consumed = consumed

    # -- JSON documents ----------------------------------------------------------------

    def _document(self, body: IO[bytes], is_object: bool) -> Iterator[JsonLine | Skipped]:
        if is_object:
            # One object is one value: the scanner would hold all of it anyway, one Python
            # step per quote, comma and bracket (0.36 s for a 5 MB object). When orjson reads
            # the whole document, that is the answer; otherwise the scanner says what is wrong.
            data = body.read()
            try:
                value = orjson.loads(data)
            except orjson.JSONDecodeError:
                body = io.BytesIO(data)
            else:
                self.digest.update(data)
                self.bytes_consumed = len(data)
                newlines = data.count(b"\n")
                self.lines_consumed = newlines if data.endswith(b"\n") else newlines + 1
                line = 1 + data.count(b"\n", 0, data.find(b"{"))
                yield _value_or_skip(value, self.display, line, data)
                return
        for start_line, raw in _scan_document(body, self):
            if isinstance(raw, Skipped):
                yield raw
                return
            try:
                value = orjson.loads(raw)
            except orjson.JSONDecodeError as exc:
                yield _decode_skip(exc, raw, self.display, start_line, multiline=True)
                continue
            yield _value_or_skip(value, self.display, start_line, raw)


def _read_head(stream: IO[bytes]) -> bytes:
    """Up to one chunk from the start of the stream (enough to choose JSONL vs document)."""
    head = stream.read(_CHUNK // 16)
    return head or b""


def _looks_like_document(head: bytes) -> bool:
    """True for a JSON array or a pretty-printed object; False for JSONL (and empty input)."""
    text = head.lstrip(LEADING)
    if text.startswith(b"["):
        return True
    if not text.startswith(b"{"):
        return False
    first, newline, _ = text.partition(b"\n")
    if not newline:
        return False  # one long line: JSONL (or a single-line object, which is the same)
    # A JSONL line is a whole object; a pretty-printed document's first line is not.
    return not first.rstrip().endswith(b"}")


def _value_or_skip(value: Any, display: str, line: int, raw: bytes) -> JsonLine | Skipped:
    if isinstance(value, dict):
        return JsonLine(line, value, raw)
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
        bad = _first_bad_byte(raw)
        if bad is not None:  # orjson says column 1: point at the byte itself
            head = raw[:bad]
            start = head.rfind(b"\n") + 1
            col = len(head[start:].decode("utf-8")) + 1  # in characters, as JSON errors are
            return Skipped(
                Source(display, line + head.count(b"\n")),
                "invalid_utf8",
                f"invalid UTF-8 (byte 0x{raw[bad]:02x})",
                fatal=True,
                col=col,
            )
        if raw.lstrip(b" \t").startswith(BOM):
            reason = "invalid_json"
            detail = (
                "a byte-order mark (U+FEFF) starts the line, which only the start of a file"
                " may hold: files joined together?"
            )
        else:
            reason, detail = "invalid_utf8", "invalid UTF-8"
    else:
        reason, detail = "invalid_json", f"invalid JSON ({message})"
    err_line = line + (exc.lineno - 1 if multiline and getattr(exc, "lineno", 0) else 0)
    col = getattr(exc, "colno", None) or None
    return Skipped(Source(display, err_line), reason, detail, fatal=True, col=col)


def _first_bad_byte(raw: bytes) -> int | None:
    """Offset of the first byte of `raw` that is not valid UTF-8, or None."""
    try:
        raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        return exc.start
    return None


# Outside a string: a whole string at once (most of a document's quotes, commas and brackets
# are inside strings), else one structural byte; a lone quote opens a string that does not end
# in this chunk (or holds a raw newline). Inside such a string: the bytes that can end it.
# Line breaks are counted with bytes.count where a line number is needed, not one by one.
_TOKEN = re.compile(rb'"[^"\\\n]*(?:\\.[^"\\\n]*)*"|[\[\]{}",]')
_IN_STRING = re.compile(rb'[\\"]')


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
        source.bytes_consumed = base
        if top_array is None:
            text = buf.lstrip(LEADING)
            if text:
                top_array = text.startswith(b"[")
        at = counted = 0  # line counts the breaks of buf[:counted]
        while match := (_IN_STRING if in_string else _TOKEN).search(buf, at):
            at = match.end()
            start = match.start()
            pos = base + start
            ch = buf[start : start + 1]
            if pos == skip_at:
                continue
            if in_string:
                if ch == b'"':
                    in_string = False
                elif ch == b"\\":
                    skip_at = pos + 1
                continue
            if ch == b'"':
                in_string = at - start == 1  # a whole string was one token
                if depth == 0 and not top_array and piece_start is None:
                    line += buf.count(b"\n", counted, start)
                    yield (
                        line,
                        Skipped(
                            Source(display, line), "invalid_json", "expected a JSON object", True
                        ),
                    )
                    return
                continue
            if ch in (b"[", b"{"):
                if depth == 0:
                    line += buf.count(b"\n", counted, start)
                    counted = start
                    piece_start, piece_line = (pos + 1 if top_array else pos), line
                depth += 1
                continue
            if ch in (b"]", b"}"):
                depth -= 1
                if depth < 0:
                    line += buf.count(b"\n", counted, start)
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
                line += buf.count(b"\n", counted, start)
                counted = start
                piece_start, piece_line = pos + 1, line
        line += buf.count(b"\n", counted)
        if piece_start is not None:
            pending += buf[max(piece_start - base, 0) :]
        base += len(buf)
    source.bytes_consumed = base
    source.lines_consumed = line - 1 if last.endswith(b"\n") or not base else line
    if depth != 0 or in_string:
        # Nothing of an unfinished document counts as consumed: a later ingest reads it all
        # again (records already stored are skipped), so the cut record is not lost.
        source.bytes_consumed = source.lines_consumed = 0
        source.digest = hashlib.sha256()
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
    try:
        fmt, items = detect_format(source, format)
    except EmptyInput:
        return  # no values, no records
    yield from get_reader(fmt).read(items, source.display)


def _reader_records(
    fmt: Format,
    items: Iterable[JsonLine | Skipped],
    path: str,
    continued: Continued | None,
    key: str | None = None,
    again: bool = False,
    numbered: str | None = None,
) -> Iterator[Record]:
    """The records of a file read as `fmt`. A request-log reader (`continues`) goes on from
    what the earlier files of the same ingest showed (`continued`, see core.requestlog): files
    left unread before (unchanged since the last ingest) are read for that state first.
    `key`: the file's ingest key (None for standard input); `again`: it was read before from
    the same first bytes; `numbered`: the name an earlier lexkeep numbered its conversations
    without ids under (Continued.begin_file)."""
    reader = get_reader(fmt)
    if continued is None or not getattr(reader, "continues", False):
        return reader.read(items, path)
    _bring_up_to_date(continued)
    continued.begin_file(key, again, numbered)
    return reader.read(items, path, continued)  # type: ignore[call-arg]


def _continues(name: str | None) -> bool:
    """True when the format called `name` is read by a request-log reader (`continues`)."""
    try:
        return bool(name) and getattr(get_reader(name), "continues", False)
    except InputError:  # a format this build does not know
        return False


def _bring_up_to_date(continued: Continued) -> None:
    """Read the files `continued` has pending for their state only (nothing is stored).

    They were unchanged since the last ingest, so they read as they did then; one that can no
    longer be read leaves no state, as if it were not there.
    """
    while continued.pending:
        path, name, key, numbered = continued.pending.pop(0)
        continued.begin_file(key, True, numbered)
        try:
            fmt, items = detect_format(JsonSource(path), name)
            for _ in get_reader(fmt).read(items, path, continued):  # type: ignore[call-arg]
                pass
        except (InputError, OSError):
            continue


def detect_format(
    source: Iterable[JsonLine | Skipped], format: Format | str | None = None
) -> tuple[Format, Iterator[JsonLine | Skipped]]:
    """The format of a stream (forced or sniffed from its head) and the whole stream again."""
    items = iter(source)
    if format is not None:
        return Format(format) if not isinstance(format, Format) else format, items
    head_items: list[JsonLine | Skipped] = []
    values = 0
    for item in items:
        head_items.append(item)
        values += isinstance(item, JsonLine)
        if values >= HEAD_VALUES or len(head_items) >= HEAD_ITEMS:
            break
    display = getattr(source, "display", None)
    if not head_items:
        # Nothing at all (e.g. a session file just created): not an error, nothing to store.
        raise EmptyInput("empty input, nothing to read", path=display)
    head = [i.value for i in head_items if isinstance(i, JsonLine)]
    if not head and getattr(source, "truncated_object", False) and display != "-":
        # Only a first line still being written (a session file just started): nothing to
        # read yet, as for an empty file; a later ingest reads the line once it is whole.
        raise EmptyInput("nothing complete to read yet (file still being written?)", path=display)
    nul_tail = getattr(source, "nul_tail", None)
    if not head and nul_tail is not None and nul_tail[1] == 0:
        # Nothing but NUL bytes (a file a crash left before its first line was on disk).
        raise EmptyInput(f"nothing to read: it holds only {nul_tail[0]} NUL bytes", path=display)
    cut = getattr(source, "truncated_last_line", False)
    bad = any(isinstance(i, Skipped) and i.fatal for i in head_items)
    if display == "-" and cut and not bad and (not head or header_only(head)):
        # A pipe is read once: a line cut short is not "left for a later ingest", and nothing
        # before it holds a record (_FileIngest._skipped says so of a later line).
        raise InputError(
            "the last line is incomplete (no newline, and not whole JSON); standard input"
            " cannot be read again for the rest of it",
            path=display,
            line=source.lines_consumed + 1,
            hint="pipe the whole trace",
        )
    fmt = detect(head)
    truncated = getattr(source, "truncated_object", False) and display != "-"
    if fmt is None and truncated and header_only(head):
        # A header line whose first record is still being written (a Codex rollout just
        # begun): nothing to read yet, as for a first line still being written.
        raise EmptyInput("nothing complete to read yet (file still being written?)", path=display)
    if fmt is None and not bad and header_only(head):
        # The header line alone, its writer not yet at the next (a Codex rollout just begun).
        raise HeaderOnly(HEADER_ONLY, path=display)
    if fmt is None:
        first_bad = next((i for i in head_items if isinstance(i, Skipped) and i.fatal), None)
        path = getattr(source, "path", None)
        if not head and path is not None and is_duckdb_file(path):
            raise InputError(
                "a DuckDB database, not a trace file",
                path=display,
                hint="a lexkeep store is opened with Store.open(path), or audited with"
                " run_audit(db=...)",
                wording="ingest.store_given_as_trace",
            )
        if first_bad is not None and not head and first_bad.reason == "truncated_document":
            # Not one value of the document is complete yet (see IncompleteDocument).
            raise IncompleteDocument(
                first_bad.detail or first_bad.reason,
                path=first_bad.source.file,
                line=first_bad.source.line,
                hint=_hints_for(first_bad.reason, first_bad.source.file),
            )
        if first_bad is not None and not head:
            detail, hint = first_bad.detail or first_bad.reason, "the file is not valid JSON/JSONL"
            wide = _wide_encoding(path) if first_bad.reason == "invalid_utf8" else None
            if wide is not None:
                detail = f"{wide} text, not UTF-8 (it starts with a {wide} byte-order mark)"
                hint = f"convert it first: iconv -f {wide} -t UTF-8 {display} > NEW_FILE"
            raise InputError(
                detail,
                path=first_bad.source.file,
                line=first_bad.source.line,
                col=first_bad.col,
                hint=hint,
            )
        raise UnrecognisedFormat(
            "not a recognised trace format",
            path=display,
            hint="force one with format= (input_format= of run_audit): "
            + ", ".join(f.value for f in Format),
            wording="ingest.unrecognised",
            fields={"formats": ", ".join(f.value for f in Format)},
        )
    return fmt, _one_format(chain(head_items, items), fmt, display)


class MixedFormats(InputError):
    """A line of a file is positively another format than the one the file was detected as."""


def _one_format(
    items: Iterator[JsonLine | Skipped], fmt: Format, display: str | None
) -> Iterator[JsonLine | Skipped]:
    """`items`, refusing (MixedFormats) the first value another format claims as its own line.

    A file is read by one reader, and the Claude Code and Codex readers keep per-file state, so
    the lines of a concatenation cannot each go to their own reader; the detected one would skip
    the others as unknown record types and store half the file. A forced format is not checked:
    --input-format reads every line as that format.
    """
    others = other_claims(fmt)
    if not others:
        yield from items
        return
    for item in items:
        if type(item) is JsonLine:
            value = item.value
            for other, claims in others:
                if claims(value):
                    raise MixedFormats(
                        f"this line is a {other.value} record, but the file is read as"
                        f" {fmt.value} (detected from its first lines): it mixes formats",
                        path=display,
                        line=item.line,
                        hint="split the file into one file per format, or pass format="
                        " (input_format= of run_audit) to read every line as one format",
                        wording="ingest.mixed_formats",
                    )
        yield item


class UnrecognisedFormat(InputError):
    """No reader recognised the file (e.g. a JSON file that is not a trace)."""


class EmptyInput(UnrecognisedFormat):
    """The input holds no JSON value at all (an empty or blank file)."""


HEADER_ONLY = "line 1 is a Codex rollout's header and no record follows it"


class HeaderOnly(EmptyInput):
    """The input holds a header line alone (a bare-era Codex rollout just begun), before which
    no format can be told: nothing to read yet; a later ingest reads the file once it holds
    a record."""


class IncompleteDocument(InputError):
    """A JSON document whose writer has not finished even its first value: an error, except
    that with skip_invalid a file on disk has nothing to read yet (a later ingest reads it)."""


# -- writing to the store -------------------------------------------------------------------

# The prefix of a key that stands for a turn the store holds (_Batch.carried).
_CARRIED = "\x00carried:"


def carried_key(conv: str) -> str:
    """The key that stands for the turn of `conv` the store holds (_Batch.carried)."""
    return _CARRIED + conv


# Rows staged in memory before one bulk write per table (inside the file's transaction).
CHUNK_ROWS = 50_000
# Files a folder walk picks up (each may also end in .gz).
TRACE_SUFFIXES = (".jsonl", ".json", ".ndjson")
# A run row another conversation holds is left as it is: a message naming that run has no
# valid run link (docs/compaction.md), and a run record reusing its id is refused
# (_check_ids).
_RUN_UPSERT = (
    "(id) DO UPDATE SET status = excluded.status"
    " WHERE runs.conversation_id = excluded.conversation_id"
)
_INGEST_RUN_COLUMNS = (
    ("id", "BIGINT"),
    ("path", "VARCHAR"),
    ("sha256", "VARCHAR"),
    ("bytes_consumed", "BIGINT"),
    ("lines_consumed", "BIGINT"),
    ("format", "VARCHAR"),
    ("conversations", "INTEGER"),
    ("messages", "INTEGER"),
    ("tool_calls", "INTEGER"),
    ("boundaries", "INTEGER"),
    ("skipped", "INTEGER"),
    # Records of a type the reader does not know in the whole file read so far, and the
    # first one's line (migration 005): NULL when not known.
    ("unknown_types", "BIGINT"),
    ("first_unknown_type_line", "BIGINT"),
    # The last line still being written when the file was read (NULL: none), and whether a
    # JSON document was cut before its end (migration 005): what `audit --db` notes of it.
    ("truncated_line", "BIGINT"),
    ("truncated_document", "BOOLEAN"),
    # The name an earlier lexkeep numbered the file's conversations without ids under
    # (migration 006); NULL: they are named after their first record.
    ("numbered_under", "VARCHAR"),
    # NUL bytes a crash left (migration 007): those the file ends in and the line after which
    # they start, and the runs of them that lines follow (how many, the first's bytes and
    # line): what `audit --db` notes of them. NULL: none.
    ("nul_tail_bytes", "BIGINT"),
    ("nul_tail_after_line", "BIGINT"),
    ("nul_gaps", "BIGINT"),
    ("first_nul_gap_bytes", "BIGINT"),
    ("first_nul_gap_after_line", "BIGINT"),
    # The bytes of a first line a crash cut before NUL bytes, in the row of a file a crash
    # left with nothing readable (migration 009, _holds_nothing_now). NULL: none.
    ("nul_tail_cut", "BIGINT"),
)
# Times span every record stored (least / greatest skip NULLs): a later file or an append may
# hold an earlier time than the store had, e.g. a resumed session's copied lines.
_CONV_UPSERT = (
    "(id) DO UPDATE SET max_position = greatest(conversations.max_position, excluded.max_position),"
    " title = coalesce(conversations.title, excluded.title),"
    " parent_id = coalesce(conversations.parent_id, excluded.parent_id),"
    " first_time = least(conversations.first_time, excluded.first_time),"
    " last_time = greatest(conversations.last_time, excluded.last_time)"
)


class _Unchanged(Exception):
    """Raised inside a file's transaction to roll back an ingest that adds nothing."""


def _wording_for(reason: str) -> str | None:
    """The commands' wording of _hints_for's hint for `reason` (lexkeep.cli.wording)."""
    return None if reason == "truncated_document" else "ingest.bad_line"


def _hints_for(reason: str, path: str | None = None) -> str:
    if reason == "truncated_document" and path == "-":
        return "pipe the whole document: standard input cannot be read again for the rest of it"
    if reason == "truncated_document":
        return "wait until the writer has finished the file, then ingest it again"
    return "fix the line, or pass skip_invalid=True to skip bad lines and record them"


# What a library caller may pass as trace paths: a sequence of them, or one alone.
PathsArg = Sequence[str | os.PathLike[str]] | str | os.PathLike[str]


def path_list(paths: PathsArg) -> list[str]:
    """`paths` as a list of str: one path alone (a str or a `pathlib.Path`) is a list of one,
    not read letter by letter (`"/"` first: the whole disk), and a Path is its text."""
    if isinstance(paths, str | os.PathLike):
        return [os.fspath(paths)]
    return [os.fspath(p) for p in paths]


def expand_paths(paths: Sequence[str]) -> list[tuple[str, bool]]:
    """Files named by `paths` (files, folders walked recursively, globs, '-'), each with a flag
    saying it was found by walking a folder (such files may be skipped when not a trace).

    They come in the order given, a folder's and a glob's in name order, except that the
    files of one rotated log are put in the order they were written (`rotation_order`)."""
    files = rotation_order(_expand(paths))
    for path, _ in files:
        _require_utf8_name(path)
    return files


def _require_utf8_name(path: str) -> None:
    """Refuse a file whose name is not UTF-8 (Latin-1 names from an archive made elsewhere):
    Python keeps its bytes as surrogates, which no report, JSON document or store can hold."""
    try:
        path.encode("utf-8")
    except UnicodeEncodeError:
        shown = path.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")
        raise InputError(
            "the file name is not UTF-8 text: no report or store could name it",
            path=shown,
            hint="rename it to UTF-8 (convmv -f latin1 -t utf-8 --notest FILE does), or leave"
            " it out of the paths given",
        ) from None


def rotation_order(files: list[tuple[str, bool]]) -> list[tuple[str, bool]]:
    """`files` with the files of each rotated log, found side by side in one folder, moved
    among their own places into the order they were written: oldest first, the current file
    (`requests.jsonl`) last. logrotate's numbers grow with age (`requests.jsonl.2.gz` is older
    than `requests.jsonl.1`); dated copies (`requests.jsonl-20250109`) are in name order.
    Every other file keeps its place."""
    families: dict[tuple[str, str], list[int]] = {}
    ranks: list[tuple[Any, ...]] = []
    rotated: set[tuple[str, str]] = set()
    for n, (path, _) in enumerate(files):
        rank: tuple[Any, ...] = (2,)  # the current file, written last
        if path == "-":
            ranks.append(rank)
            continue
        folder, name = os.path.split(os.path.abspath(path))
        base = name
        got = ROTATED.match(name)
        if got is not None:
            base, suffix = got["base"], got["suffix"]
            if got["sep"] == "." and suffix.isdigit() and len(suffix) <= 5:
                rank = (1, -int(suffix))  # logrotate's count: the highest is the oldest
            else:
                rank = (0, name)  # a date: name order is the order written
            rotated.add((folder, base))
        ranks.append(rank)
        families.setdefault((folder, base), []).append(n)
    out = list(files)
    for family, places in families.items():
        if family in rotated and len(places) > 1:
            for place, n in zip(places, sorted(places, key=ranks.__getitem__), strict=True):
                out[place] = files[n]
    return out


def _expand(paths: Sequence[str]) -> list[tuple[str, bool]]:
    found: list[tuple[str, bool]] = []
    for given in paths:
        if given == "-":
            found.append(("-", False))
            continue
        path = Path(given)
        try:
            is_dir, exists = path.is_dir(), path.exists()
        except OSError as exc:  # a folder above it may not be searched
            raise InputError(
                f"cannot read: {exc.strerror or exc}", path=given, hint=_readable_hint(given)
            ) from exc
        if is_dir:
            for child in _walk(path, given):
                name = child.name.lower().removesuffix(".gz")  # A.JSONL from Windows too
                hidden = any(part.startswith(".") for part in child.relative_to(path).parts)
                trace = name.endswith(TRACE_SUFFIXES) or ROTATED.match(child.name) is not None
                if hidden or not trace:
                    continue
                if _is_file(child):
                    found.append((str(child), True))
                elif _broken_link(child):
                    _warn_broken_link(str(child))
            continue
        if exists:
            _refuse_stream(given)
            found.append((given, False))
            continue
        if _broken_link(path):  # named directly: the user asked for exactly this file
            raise InputError(
                _what_link(path),
                path=given,
                hint="point the link at an existing trace file, or name the file itself",
            )
        matches = sorted(globmod.glob(given, recursive=True))
        if not matches:
            raise InputError("no such file, folder or matching glob", path=given)
        for match in matches:
            _is_file(Path(match))  # a match that cannot be looked at is named here
            if Path(match).is_dir():
                found.extend(_expand([match]))
            elif _broken_link(Path(match)):
                _warn_broken_link(match)
            else:
                _refuse_stream(match)
                found.append((match, True))
    return found


_READABLE = "make it (and the folders above it) readable, or leave it out of the paths given"


def _readable_hint(path: str | Path) -> str:
    """What to do about a trace that cannot be looked at: name the folder above it that may
    not be searched (listed, but nothing in it reached), else ask for it to be readable."""
    blocked = unsearchable_folder(path)
    if blocked is None:
        return _READABLE
    return f"{search_hint(blocked)}; or leave it out of the paths given"


def _is_file(path: Path) -> bool:
    """Whether `path`, found by a folder walk or a glob, is a file; an InputError naming it
    when it cannot be looked at (in a folder that may be listed but not searched)."""
    try:
        return path.is_file()
    except OSError as exc:
        raise InputError(
            f"cannot read: {exc.strerror or exc}", path=str(path), hint=_readable_hint(path)
        ) from exc


def _walk(folder: Path, given: str) -> list[Path]:
    """Everything under `folder` as `sorted(folder.rglob("*"))` lists it (links to folders are
    not followed), except that a folder that cannot be read is not passed over in silence:
    `folder` itself is an InputError, one below it is skipped with a warning naming it (a CI
    job must not pass on traces it never read without a word)."""
    entries: list[Path] = []
    unreadable: list[OSError] = []
    for top, folders, files in os.walk(folder, onerror=unreadable.append):
        entries.extend(Path(top, name) for name in (*folders, *files))
    for exc in unreadable:
        where = Path(exc.filename) if exc.filename is not None else folder
        if where == folder:
            raise InputError(
                f"cannot read the folder: {exc.strerror or exc}", path=given, hint=_READABLE
            )
        if not any(part.startswith(".") for part in where.relative_to(folder).parts):
            warnings.warn(
                f"{where}: skipped, a folder that cannot be read ({exc.strerror or exc})",
                SkippedInputWarning,
                stacklevel=1,
            )
    return sorted(entries)


def _broken_link(path: Path) -> bool:
    """A symbolic link whose target does not exist (or a loop of links)."""
    try:
        return path.is_symlink() and not path.exists()
    except OSError:
        return False


def _link_target(path: Path) -> str:
    """Where the link `path` points, as an absolute path (or as written, when unreadable)."""
    try:
        target = Path(os.readlink(path))
    except OSError:
        return "(unreadable)"
    return str(target if target.is_absolute() else path.parent / target)


def _missing_target(path: Path) -> str:
    """The target of the broken link `path` that does not exist: "X", or, when the target is
    itself a link (a chain of them), "X is a link to Y" / "X leads through links to Y", Y being
    the missing end of the chain."""
    first = _link_target(path)
    chain = [first]
    while len(chain) <= 40 and os.path.islink(chain[-1]):  # 40: the kernel's own limit
        chain.append(_link_target(Path(chain[-1])))
    if len(chain) == 1:
        return first
    end = chain[-1]
    if len(chain) == 2:
        return f"{first} is a link to {end}, which"
    return f"{first} leads through links to {end}, which"


def _loops(path: Path) -> bool:
    """Whether following the link `path` leads back to a link already followed."""
    try:
        os.stat(path)
    except OSError as exc:
        return exc.errno == errno.ELOOP
    return False


def _what_link(path: Path) -> str:
    """What is wrong with the broken link `path`: a loop, or a target that does not exist."""
    if _loops(path):
        return "a loop of symbolic links (it leads back to itself)"
    return f"a broken symbolic link: its target {_missing_target(path)} does not exist"


def _warn_broken_link(path: str) -> None:
    """Name a broken link a folder walk or a glob found: skipped, the run goes on."""
    what = (
        "a loop of symbolic links (it leads back to itself)"
        if _loops(Path(path))
        else f"a broken symbolic link (its target {_missing_target(Path(path))} does not exist)"
    )
    warnings.warn(
        f"{path}: skipped, {what}",
        SkippedInputWarning,
        stacklevel=1,  # one place: a path listed again (audit, ingest) is named once
    )


def _refuse_stream(path: str) -> None:
    """A named pipe, socket or character device (`<(zcat dump.gz)`, /dev/stdin on a pipe) can
    be read only once, and a trace file is opened more than once (its format is detected
    first): refused before it is opened, which would wait for a writer."""
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return  # opening it says why
    if stat.S_ISFIFO(mode) or stat.S_ISCHR(mode) or stat.S_ISSOCK(mode):
        raise InputError(
            "a pipe or device, not a file: it can be read only once, and a trace file is read"
            " more than once",
            path=path,
            hint='pass it on standard input instead (the path "-"), or save it to a file first',
            wording="ingest.pipe_given",
        )


def input_size(paths: Sequence[str]) -> int | None:
    """Bytes the files named by `paths` hold, or None when unknown (stdin, gzip files: the
    ingest counts their decompressed bytes). Gzip is known by its first bytes, as reading
    does (open_input), whatever the file is called."""
    total = 0
    for path, _ in expand_paths(paths):
        if path == "-" or is_gzip(path):
            return None
        total += Path(path).stat().st_size
    return total


def _tell_whole(path: str, on_progress: Callable[[int], None] | None, told: int) -> None:
    """Tell `on_progress` the bytes of a file nothing is read from now (empty, no trace, still
    being written): the bar's total (input_size) counts them, so they count as seen."""
    if on_progress is None or path == "-":
        return
    with suppress(OSError):
        size = Path(path).stat().st_size
        if size > told:
            on_progress(size - told)


def _same_prefix(path: str, nbytes: int, sha256: str) -> tuple[bool, bool]:
    """(the first nbytes hash to sha256, there are more bytes after them) — one raw pass."""
    digest = hashlib.sha256()
    stream = open_input(path)
    try:
        left = nbytes
        while left > 0:
            block = stream.read(min(_CHUNK, left))
            if not block:
                return False, False
            digest.update(block)
            left -= len(block)
        more = bool(stream.read(1))
    except (OSError, EOFError, zlib.error) as exc:  # a gzip file cut short or damaged since
        raise unreadable(exc, path) from exc
    finally:
        stream.close()
    return digest.hexdigest() == sha256, more


def _parsed_arguments(raw: str, kind: str) -> Any:
    # The parsed form beside the raw text: a JSON value, or None (NULL) when it is not JSON.
    # Integers beyond 64 bits stay exact (parsed_json), as in arguments_raw.
    if kind == ArgumentsKind.FREEFORM:
        return None
    try:
        return parsed_json(raw)
    except orjson.JSONDecodeError:
        return None


# Small files are written together: one transaction (and one bulk write per table) per group
# of files, since each DuckDB statement costs milliseconds. A group never holds standard input
# (it cannot be read twice), and a failing file rolls its group back and re-ingests the files
# before it, so the store ends exactly as before the failing file.
GROUP_BYTES = 64 << 20
GROUP_FILES = 1000
# Files from this size up are ingested alone, so the DuckDB fast path may load them.
FAST_MIN_BYTES = 8 << 20


# The tables whose rows core.keyset.Keys checks, and every table a keyless lean store holds
# without its primary key (the sidecar's rows are unique once the messages are).
_KEYED_ROWS = ("messages", "tool_calls", "boundaries")
_UNKEYED_TABLES = (*_KEYED_ROWS, "identifiers", "identifier_scans")


class _Batch:
    """Rows staged for one transaction: positions, conversations, runs, timeline rows."""

    def __init__(
        self,
        store: Store,
        lean: bool = False,
        seen: Keys | None = None,
        prefixes: PrefixHashes | None = None,
    ) -> None:
        self.store = store
        # The first bytes' hashes of the files looked at for a renamed copy, for the ingest
        # (one pass per file however many files look for their copy in it: PrefixHashes).
        self.prefixes = prefixes if prefixes is not None else PrefixHashes()
        self.con = store.con
        # seen: the store's timeline tables have no primary keys; rows are checked here.
        self.seen = seen
        # lean: write only what an audit reads (conversations, user messages, tool calls
        # without their parsed arguments, boundaries); other messages, tool output and runs
        # only take their positions.
        self.lean = lean
        self.max_pos: dict[str, int] = {}
        # max_position before this batch, and whether a write left out records the store
        # held already (their positions are then holes: close_position_holes in finish()).
        self.base: dict[str, int] = {}
        self.holes = False
        self.convs: dict[str, list[Any]] = {}  # id -> conversation row (updated in place)
        self.recorded: set[str] = set()  # conversations whose row a conversation record sourced
        self.touched: set[str] = set()
        self.buffer: list[Any] = []
        self.runs: dict[str, tuple[list[Any], str]] = {}  # run id -> (turn, status)
        self.errors: list[tuple[Any, ...]] = []  # ingest_errors rows, by index into ingest_runs
        # Files read again (ingest_runs key, lines read before): the errors earlier ingests
        # recorded for the lines read now are replaced by this read's (see finish).
        self.reread: list[tuple[str, int]] = []
        # Conversations of files read again from their start (restore_file_order in finish).
        self.reread_convs: set[str] = set()
        # Those files, as source_file names them: which records each read gave is kept in
        # READ_AGAIN_TABLE (from its first row on: `read_again`), since only those are its
        # lines (a file logrotate gave an old file's name to holds none of the old lines).
        self.rereading: set[str] = set()
        self.read_again = False
        # The group's ingest_runs rows, written in finish(): one statement per group, not one
        # round trip per file (about 2.5 ms each, most of a small file's ingest).
        self.ingest_runs: list[tuple[Any, ...]] = []
        # key -> (bytes, lines, sha256, format, unknown types, first unknown type line,
        # truncated line, numbered under) of its latest ingest, read once per group
        self.previous: dict[str, tuple[Any, ...]] = {}
        # log name -> (bytes, sha256, numbered under) of the ingests that numbered a file of
        # that log's conversations without ids the old way, earliest first (_numbered_copy)
        self.numbered: dict[str, list[tuple[int, str, str]]] = {}
        # log name -> (path, bytes, sha256, lines) of every ingest that consumed bytes of a
        # file of that log, in ingest order: the files a new one may be a renamed copy of
        # (_renamed_from).
        self.earlier: dict[str, list[tuple[str, int, str, int]]] = {}
        # log name -> (ingest_runs id, path, bytes, sha256, lines) of each read of a file of
        # that log whose content was renamed away before its copy was found, its rows kept in
        # the table renamed_away (_renamed_away, _renamed_from).
        self.away: dict[str, list[tuple[int, str, int, str, int]]] = {}
        self.keys: dict[str, str] = {}  # path as given -> its ingest_runs key
        # path as given -> as the store records it in source_file and ingest_errors.path
        # (absolute in a store on disk: core.paths), and back, for errors about stored rows.
        self.names = _Names(store)
        # message id -> (text, extraction) made by read-ahead workers (see _extract_users)
        self.extracted: dict[str, tuple[str, Extraction]] = {}
        # Messages, tool calls and boundaries written per source file: fewer than were read when
        # the store held some already (a resumed Claude Code session copies its earlier lines).
        # Records left out whose id their conversation holds with other content, per stored
        # source file: (how many, the first as text) (see _check_ids and _check_calls).
        self.conflicts: dict[str, tuple[int, str]] = {}
        self.first_conflict: dict[str, int] = {}  # stored source file -> the first's line
        # ... and each of them, for ingest_errors: (stored source file, line, detail).
        self.left_out: list[tuple[str, int, str]] = []
        # stored path -> the index of its file's ingest_runs row (see record_ingest).
        self.run_index: dict[str, int] = {}
        self.added: dict[str, Counter[str]] = {
            "messages": Counter(),
            "tool_calls": Counter(),
            "boundaries": Counter(),
            "tool_results": Counter(),
        }
        # Run ids run records gave: id -> (conversation, file, line) of the first record.
        self.named_runs: dict[str, tuple[str, str, int]] = {}
        # Messages and boundaries that start on a line an earlier ingest read and end on a
        # new one (Message.end_line): stored then as far as they went, completed in finish().
        self.revised: list[Message | Boundary] = []
        # (reader, conversation, file key or '') -> (state JSON, response ids) of the request
        # logs read, kept for later ingests (Continued.touched_states), written in finish().
        self.request_states: dict[tuple[str, str, str], tuple[str, list[str]]] = {}
        # Ids of the run records of grown files (see _place_appended_runs).
        self.appended_runs: set[str] = set()
        # conversation -> (run id, turn) of the turn a file of this batch left open, for a
        # later file whose first messages of it answer that turn (see _FileIngest._turn).
        self.open_turns: dict[str, tuple[str, list[Any]]] = {}
        # The same from the store: a turn the batch's files do not know stands for it under
        # carried_key(conv) until flush and finish look the store's turn up (resolve_carried):
        # key -> the run id it stands for (None: not looked up yet; "": the store holds none).
        self.carried: dict[str, str | None] = {}
        self.answered: set[str] = set()  # ... of those, the runs the store holds completed
        # ... and the id of the message the file went on with (an answer, or the user's next
        # message), which the store holds when the file is read again.
        self.carried_by: dict[str, str] = {}

    def resolve_carried(self) -> None:
        """Look up, in one query, the run each carried key not looked up yet stands for: the
        latest turn a real user message of its conversation opened in the store. Rows written
        before hold no user message of it after that turn (the key stands for the turn a file
        goes on with before its first user message)."""
        todo = {key[len(_CARRIED) :]: key for key, run in self.carried.items() if run is None}
        if not todo:
            return
        # Only a conversation the store held before this batch can hold a turn to go on
        # with (the batch writes its conversations last): most conversations a file begins
        # are new, and the messages are not searched for them.
        held = {
            conv
            for (conv,) in self.con.execute(
                "SELECT id FROM conversations WHERE id IN (SELECT unnest(?))", [list(todo)]
            ).fetchall()
        }
        for conv in [conv for conv in todo if conv not in held]:
            self.carried[todo.pop(conv)] = ""
        if not todo:
            return
        firsts = [self.carried_by.get(key) for key in todo.values()]
        rows = self.con.execute(
            "SELECT u.c, u.run, r.status, u.again FROM (SELECT m.conversation_id AS c,"
            " arg_max(m.id, m.position) || '/run' AS run,"
            " coalesce(bool_or(m.id = f.first), false) AS again FROM messages m"
            " JOIN (SELECT unnest(?) AS c, unnest(?) AS first) f ON m.conversation_id = f.c"
            " WHERE m.kind = 'user_text' GROUP BY ALL) u"
            " JOIN runs r ON r.id = u.run AND r.conversation_id = u.c",
            [list(todo), firsts],
        ).fetchall()
        for conv, run, status, again in rows:
            key = todo.pop(conv)
            if again:
                # The file goes on from a message the store holds (read again: a rotated
                # copy after the newer file, a file rewritten): its turns are stored already,
                # and the store's latest may be a later file's.
                self.carried[key] = ""
                continue
            self.carried[key] = run
            if status == RunStatus.COMPLETED.value:
                self.answered.add(run)
        for key in todo.values():
            self.carried[key] = ""  # none: the messages stay without a run

    def conflict(
        self, path: str, record: str, line: int, held_path: str, held_line: int, count: int = 1
    ) -> None:
        """Count `count` records of `path` left out because their conversation holds their id
        with other content; the file's first of them in line order is named (`record` at
        `line`)."""
        counted, first = self.conflicts.get(path, (0, ""))
        if not counted or line < self.first_conflict[path]:
            # The file's first in line order, whichever table's check counted it first.
            self.first_conflict[path] = line
            first = (
                f"{record} at {self.shown(path)}:{line}, stored from"
                f" {self.shown(held_path)}:{held_line}"
            )
        self.conflicts[path] = (counted + count, first)

    def key(self, path: str) -> str:
        """The ingest_runs key of `path`: absolute for files on disk, '-' for stdin.

        Symlinks resolved: the key is the file's identity (an unchanged or grown file is
        recognised whichever folder or link names it), not how rows name it (core.paths).
        """
        key = self.keys.get(path)
        if key is None:
            key = self.keys[path] = path if path == "-" else str(Path(path).resolve())
        return key

    def shown(self, stored: str) -> str:
        """A stored path as an error shows it: as given when this ingest was given it, else
        as reports show it (relative to the current folder when under it)."""
        given = self.names.given.get(stored)
        return given if given is not None else self.store.shown_paths()[stored]

    def load_previous(self, paths: list[str]) -> None:
        """Read the latest ingest_runs row of each of `paths` (one query)."""
        keys = [self.key(path) for path in paths if path != "-"]
        if not keys:
            return
        rows = self.con.execute(
            "SELECT path, bytes_consumed, lines_consumed, sha256, format, unknown_types,"
            " first_unknown_type_line, truncated_line, numbered_under, nul_gaps,"
            " first_nul_gap_bytes, first_nul_gap_after_line FROM ingest_runs"
            " WHERE path IN (SELECT unnest(?))"
            " QUALIFY row_number() OVER (PARTITION BY path ORDER BY id DESC) = 1",
            [keys],
        ).fetchall()
        for path, *prev in rows:
            self.previous[path] = tuple(prev)
        # Files an earlier lexkeep numbered the conversations without ids of, of the logs
        # of `paths` (a log name starts the name they are numbered under): _numbered_copy.
        self.numbered = {}
        for nbytes, sha, name in self.con.execute(
            "SELECT bytes_consumed, sha256, numbered_under FROM ingest_runs"
            " WHERE numbered_under IS NOT NULL AND bytes_consumed > 0"
            " AND list_bool_or(list_transform(?, lambda n: starts_with(numbered_under, n)))"
            " ORDER BY id",
            [sorted({log_name(path) for path in paths if path != "-"})],
        ).fetchall():
            self.numbered.setdefault(log_name(name), []).append((nbytes, sha, name))
        # Every ingest of a file of those logs, for a new file that is one renamed: the log
        # name in SQL (paths.log_name, joined, not compared with each name of the group).
        names = sorted({log_name(path) for path in paths if path != "-"})
        self.earlier = {}
        if self.lean:  # an audit's own store: nothing of it is shown by file later
            return
        for key, nbytes, sha, lines in self.con.execute(
            "SELECT path, bytes_consumed, sha256, lines_consumed FROM ingest_runs"
            " WHERE path <> '-' AND regexp_replace(regexp_replace(regexp_extract(path,"
            r" '[^/\\]*$'), '^(.+\.(?:jsonl|json|ndjson))[._-][0-9](?:[0-9._-]*[0-9])?"
            r"(?:\.gz)?$', '\1', 'i'), '\.gz$', '') IN (SELECT unnest(?)) ORDER BY id",
            [names],
        ).fetchall():
            self.earlier.setdefault(log_name(key), []).append((key, nbytes, sha, lines))
        self.away = {}
        for run_id, key, nbytes, sha, lines in self.con.execute(
            "SELECT id, path, bytes_consumed, sha256, lines_consumed FROM ingest_runs"
            " WHERE id IN (SELECT ingest_run_id FROM renamed_away) ORDER BY id"
        ).fetchall():
            if log_name(key) in names:
                self.away.setdefault(log_name(key), []).append((run_id, key, nbytes, sha, lines))

    def log_ends(self, log: str) -> set[int]:
        """The byte counts a file of the log `log` may be compared at, for a copy of another
        file of it: what the store's ingests of its files read (_numbered_copy, _renamed_from,
        _renamed_to)."""
        ends = {nbytes for _, nbytes, _, _ in self.earlier.get(log, ())}
        ends.update(nbytes for nbytes, _, _ in self.numbered.get(log, ()))
        ends.update(entry[2] for entry in self.away.get(log, ()))
        ends.discard(0)
        return ends

    def prefix_hashes(self, path: str, ends: set[int]) -> dict[int, str]:
        """The sha256 of the first n bytes of `path` for each n of `ends` it holds: read once
        for every count its log's files may be compared at (PrefixHashes)."""
        return self.prefixes.of(path, ends, self.log_ends(log_name(path)))

    def keep_request_states(self, continued: Continued) -> None:
        """Stage what `continued` holds of the conversations met since the last call, for
        the files later ingests read (written in finish())."""
        for reader, conv, file, shares in continued.touched_states():
            responses = (shares.get(f"{reader}.chains") or []) if file is None else []
            state = orjson.dumps(shares).decode()
            self.request_states[reader, conv, file or ""] = (state, responses)

    def record_ingest(self, key: str, row: tuple[Any, ...]) -> int:
        """Stage one file's ingest_runs row (see finish); its index, for its error rows."""
        self.ingest_runs.append((key, *row))
        # A second copy is unchanged (or goes on from this read).
        self.previous[key] = (
            *(row[1], row[2], row[0], row[3], row[9], row[10], row[11], row[13]),
            *row[16:19],  # the NUL gaps, kept by a row that goes on from this one
        )
        return len(self.ingest_runs) - 1

    def conversation(self, fmt: Format, conv: str, src: Source, record: Any) -> None:
        """Note a conversation (from its record, or implied by first use)."""
        row = self.convs.get(conv)
        if row is None:
            # id, format, parent_id, title, first_time, last_time, max_position, file, line
            row = [conv, fmt.value, None, None, None, None, -1, self.names[src.file], src.line]
            self.convs[conv] = row
        if record is not None:
            self.recorded.add(conv)
            row[1] = record.format.value
            row[2] = record.parent_id or row[2]
            row[3] = record.title or row[3]
            row[7], row[8] = self.names[src.file], src.line

    def _load_positions(self, convs: Iterable[str]) -> None:
        missing = [c for c in convs if c not in self.max_pos]
        if not missing:
            return
        for conv in missing:
            self.max_pos[conv] = self.base[conv] = -1
        rows = self.con.execute(
            "SELECT id, max_position FROM conversations WHERE id IN (SELECT unnest(?))",
            [missing],
        ).fetchall()
        for conv, pos in rows:
            self.max_pos[conv] = self.base[conv] = pos

    def flush(self) -> None:
        """Give buffered records positions and bulk-write them (one write per table)."""
        if not self.buffer:
            return
        carried = self.carried
        if carried:
            self.resolve_carried()
        self._load_positions({_conversation_of(item) for item in self.buffer})
        max_pos = self.max_pos
        convs = self.convs
        lean = self.lean
        names = self.names
        messages: list[tuple[Any, ...]] = []
        calls: list[tuple[Any, ...]] = []
        results: list[tuple[Any, ...]] = []
        boundaries: list[tuple[Any, ...]] = []
        for item in self.buffer:
            if type(item) is tuple:
                tag = item[0]
                if tag is _Filler:
                    _, conv, count, _, first_time, last_time, _, _ = item
                    max_pos[conv] += count
                    if first_time is not None:
                        _widen(convs[conv], first_time)
                        _widen(convs[conv], last_time)
                    continue
                if tag is ToolCall:
                    _, conv, call_id, message_id, name, raw, kind, time, file, line = item
                    pos = max_pos[conv] + 1
                    max_pos[conv] = pos
                    file = names[file]
                    calls.append(
                        (conv, call_id, message_id, pos, name, raw, None, kind, time, file, line)
                    )
                    if time is not None:
                        _widen(convs[conv], time)
                    continue
                rec, run_id, turn = item
            else:
                rec = item
            conv = rec.conversation_id
            rtype = type(rec)
            pos = max_pos[conv] + 1
            max_pos[conv] = pos
            src = rec.source
            file = names[src.file]
            time = getattr(rec, "time", None)
            if rtype is Message:
                if turn is not None and turn[2] is None:
                    turn[2] = pos
                if carried and run_id in carried:
                    run_id = carried[run_id] or None
                if not lean or rec.kind == MessageKind.USER_TEXT:
                    messages.append(
                        (
                            rec.id,
                            conv,
                            run_id,
                            pos,
                            rec.role,  # StrEnum members serialise as their value
                            rec.kind,
                            rec.status,
                            rec.text,
                            time,
                            file,
                            src.line,
                        )
                    )
            elif rtype is ToolCall:
                kind = rec.arguments_kind
                calls.append(
                    (
                        conv,
                        rec.call_id,
                        rec.message_id,
                        pos,
                        rec.name,
                        rec.arguments_raw,
                        None if lean else _parsed_arguments(rec.arguments_raw, kind),
                        kind,
                        time,
                        file,
                        src.line,
                    )
                )
            elif rtype is ToolResult:
                if not lean:
                    results.append((conv, rec.call_id, pos, rec.text, rec.is_error, file, src.line))
            else:
                boundaries.append(
                    (
                        rec.id,
                        conv,
                        pos,
                        rec.kind,
                        rec.trigger,
                        rec.summary_text,
                        list(rec.kept_verbatim),
                        time,
                        file,
                        src.line,
                    )
                )
            if time is not None:
                _widen(convs[conv], time)
        self.buffer = []
        if self.rereading:
            self._note_read_again(messages, calls, results, boundaries)
        store = self.store
        seen = self.seen
        # Rows left out as already stored, whose id may be another conversation's (see
        # _check_ids): in a keyless store what its key set held back, else what the insert did
        # not return.
        left_out: dict[str, list[tuple[Any, ...]]] = {}
        if seen is not None:
            fresh_messages = seen.fresh("messages", messages, itemgetter(0))
            fresh_boundaries = seen.fresh("boundaries", boundaries, itemgetter(0))
            fresh_calls = seen.fresh("tool_calls", calls, itemgetter(0, 1))
            for table, rows, fresh in (
                ("messages", messages, fresh_messages),
                ("boundaries", boundaries, fresh_boundaries),
                ("tool_calls", calls, fresh_calls),
            ):
                if len(fresh) < len(rows):
                    written = {id(row) for row in fresh}
                    left_out[table] = [row for row in rows if id(row) not in written]
            messages, boundaries, calls = fresh_messages, fresh_boundaries, fresh_calls
        conflict = "DO NOTHING" if seen is None else ""
        # Written rows per file: counted by the insert in a keyed store, here in a keyless one
        # (what its key set let through); not at all in a lean store, which writes only some.
        added = {} if lean else self.added
        if seen is not None and added:
            added["messages"].update(row[9] for row in messages)
            added["tool_calls"].update(row[9] for row in calls)
            added["boundaries"].update(row[8] for row in boundaries)
        for table, rows in (
            ("messages", messages),
            ("tool_calls", calls),
            ("tool_results", results),
            ("boundaries", boundaries),
        ):
            if rows:
                counter = None if seen is not None else added.get(table)
                inserted = store.bulk_insert(
                    table,
                    None,
                    rows,
                    on_conflict=conflict,
                    added_per_file=counter,
                    count_added=True,
                )
                if seen is None and inserted < len(rows):
                    if counter is not None:
                        self.holes = True  # rows left out as already stored took positions
                    if table in _CHECKED:
                        left_out[table] = _not_inserted(self, table, rows)
        for table, rows in left_out.items():
            if table in _OWN_IDS:
                _check_ids(self, table, rows)
            else:
                _check_calls(self, table, rows)

    def _note_read_again(
        self,
        messages: list[tuple[Any, ...]],
        calls: list[tuple[Any, ...]],
        results: list[tuple[Any, ...]],
        boundaries: list[tuple[Any, ...]],
    ) -> None:
        """Keep in READ_AGAIN_TABLE the key of each row of a file read again from its start
        (`rereading`), stored already or not: restore_file_order puts only those in line order."""
        rereading = self.rereading
        tables, convs, keys, files = [], [], [], []
        # (table, rows, index of the conversation, of the key, of the file)
        for table, rows, c, k, f in (
            ("messages", messages, 1, 0, 9),
            ("tool_calls", calls, 0, 1, 9),
            ("tool_results", results, 0, 1, 5),
            ("boundaries", boundaries, 1, 0, 8),
        ):
            for row in rows:
                if row[f] in rereading:
                    tables.append(table)
                    convs.append(row[c])
                    keys.append(row[k])
                    files.append(row[f])
        if not tables:
            return
        if not self.read_again:
            self.con.execute(
                f"CREATE OR REPLACE TEMP TABLE {READ_AGAIN_TABLE}"
                " (tbl VARCHAR, c VARCHAR, k VARCHAR, f VARCHAR)"
            )
            self.read_again = True
        self.con.execute(
            f"INSERT INTO {READ_AGAIN_TABLE} SELECT unnest(?), unnest(?), unnest(?), unnest(?)",
            [tables, convs, keys, files],
        )

    def finish(self) -> None:
        """Write everything staged: timeline rows, runs, conversations, ingest errors."""
        self.flush()
        self._revise()
        rows = []
        for run_id, (turn, status) in () if self.lean else self.runs.items():
            if run_id in self.carried:  # a turn the store holds, which this batch went on with
                run_id = self.carried[run_id]
                if not run_id or run_id in self.runs:  # none, or one this batch derived
                    continue
                if run_id in self.answered:
                    status = RunStatus.COMPLETED.value
            conv, _, pos, file, line = turn
            if pos is None:
                pos = self.max_pos.get(conv, -1) + 1
            rows.append((run_id, conv, status, pos, self.names[file], line))
        if rows:
            self.store.bulk_insert("runs", None, rows, on_conflict=_RUN_UPSERT)
            named = [row for row in rows if row[0] in self.named_runs]
            if named:
                _check_ids(self, "runs", named)
        self._load_positions(self.touched)
        if self.holes:
            given = {conv: self.max_pos[conv] for conv in self.touched}
            bases = {conv: self.base[conv] for conv in self.touched}
            self.max_pos.update(close_position_holes(self.con, bases, given))
        if self.reread_convs and self.read_again:
            # Lines read again: a fixed one takes its place among the stored ones.
            restore_file_order(self.con, self.reread_convs & self.touched, READ_AGAIN_TABLE)
        if self.read_again:
            self.con.execute(f"DROP TABLE {READ_AGAIN_TABLE}")
            self.read_again = False
        self.reread_convs.clear()
        self.rereading.clear()
        if self.appended_runs and not self.lean:
            self._place_appended_runs()
        conv_rows = []
        for conv in self.touched:
            row = self.convs[conv]
            row[6] = self.max_pos[conv]
            conv_rows.append(row)
        if conv_rows:
            self.store.bulk_insert("conversations", None, conv_rows, on_conflict=_CONV_UPSERT)
            recorded = [self.convs[conv] for conv in self.touched & self.recorded]
            if recorded:
                # A conversation's source is its file's last conversation record, also when an
                # earlier ingest of the file (before it grew) stored an earlier one (request
                # logs repeat it per request). Another file's conversation keeps its source.
                self.con.execute(
                    "UPDATE conversations c SET source_line = r.line"
                    " FROM (SELECT unnest(?) AS id, unnest(?) AS file, unnest(?) AS line) r"
                    " WHERE c.id = r.id AND c.source_file = r.file AND c.source_line <> r.line",
                    [[r[0] for r in recorded], [r[7] for r in recorded], [r[8] for r in recorded]],
                )
        if self.reread:
            self._forget_errors_read_again()
        if self.request_states:
            keys, states = list(self.request_states), list(self.request_states.values())
            self.con.execute(
                "INSERT OR REPLACE INTO request_log_state"
                " SELECT unnest(?), unnest(?), unnest(?), unnest(?), unnest(?::VARCHAR[][])",
                [[k[0] for k in keys], [k[1] for k in keys], [k[2] for k in keys]]
                + [[v[0] for v in states], [v[1] for v in states]],
            )
            self.request_states.clear()
        ids: list[int] = []
        if self.ingest_runs:
            # Ids from the sequence, in file order (the latest run of a path has the highest).
            ids = sorted(
                r[0]
                for r in self.con.execute(
                    "SELECT nextval('ingest_run_ids') FROM range(?)", [len(self.ingest_runs)]
                ).fetchall()
            )
            self.store.bulk_insert(
                "ingest_runs",
                _INGEST_RUN_COLUMNS,
                [(run_id, *row) for run_id, row in zip(ids, self.ingest_runs, strict=True)],
                on_conflict="",
            )
        errors = [(ids[index], *rest) for index, *rest in self.errors]
        # Records left out for their id: rows of their file's ingest, so a later read of the
        # same lines replaces them (_forget_errors_read_again) instead of adding to them.
        errors += [
            (ids[self.run_index[path]], path, line, None, ID_CONFLICT, detail)
            for path, line, detail in self.left_out
        ]
        self.left_out.clear()
        if errors:
            self.store.bulk_insert("ingest_errors", None, errors, on_conflict="")

    def _forget_errors_read_again(self) -> None:
        """Delete the ingest_errors rows earlier ingests recorded for the lines of `reread`
        files that this batch read again: this read's own rows say what holds now.

        A grown JSONL file is read again from its start, but the lines its last ingest read
        are not checked again, so their rows stay; a JSON document is always read again from
        its start (nothing of an incomplete one counts as consumed), and a file whose first
        bytes changed is read again whole, so all their rows go. Standard input is never read
        again. In the batch's transaction: a read that fails leaves the rows as they were.
        """
        self.con.execute(
            "DELETE FROM ingest_errors e USING ingest_runs r,"
            " (SELECT unnest(?) AS path, unnest(?) AS lines) f"
            " WHERE r.id = e.ingest_run_id AND r.path = f.path AND e.line > f.lines",
            [[key for key, _ in self.reread], [lines for _, lines in self.reread]],
        )
        self.reread.clear()

    def _place_appended_runs(self) -> None:
        """Put each run record of a grown file at its run's first message, as one read of the
        file does: a run record read before any of its messages (the file grew after it) was
        stored where the record stood."""
        self.con.execute(
            "UPDATE runs SET position = f.position, source_file = f.source_file,"
            " source_line = f.source_line"
            " FROM (SELECT run_id, conversation_id, min(position) AS position,"
            " arg_min(source_file, position) AS source_file,"
            " arg_min(source_line, position) AS source_line"
            " FROM messages WHERE run_id IN (SELECT unnest(?)) GROUP BY ALL) f"
            " WHERE runs.id = f.run_id AND runs.conversation_id = f.conversation_id"
            " AND (runs.position, runs.source_file, runs.source_line)"
            " <> (f.position, f.source_file, f.source_line)",
            [list(self.appended_runs)],
        )
        self.appended_runs.clear()

    def _revise(self) -> None:
        """Complete the stored rows of records that went on after an earlier ingest's last
        line (see `revised`): a message's text and status, a boundary's summary. A user
        message whose text changed is scanned for identifiers again."""
        con = self.con
        for record in self.revised:
            if type(record) is Boundary:
                con.execute(
                    "UPDATE boundaries SET summary_text = ?, kept_verbatim = ?, trigger = ?"
                    " WHERE id = ? AND conversation_id = ?",
                    [
                        record.summary_text,
                        list(record.kept_verbatim),
                        record.trigger,
                        record.id,
                        record.conversation_id,
                    ],
                )
                continue
            changed = con.execute(
                "UPDATE messages SET text = ?, status = ? WHERE id = ? AND conversation_id = ?"
                " AND (text <> ? OR status <> ?) RETURNING kind",
                [record.text, record.status.value, record.id, record.conversation_id]
                + [record.text, record.status.value],
            ).fetchall()
            if changed and changed[0][0] == MessageKind.USER_TEXT.value:
                con.execute("DELETE FROM identifiers WHERE message_id = ?", [record.id])
                con.execute("DELETE FROM identifier_scans WHERE message_id = ?", [record.id])
        self.revised.clear()


# Tables whose `id` names one record in the whole store: what an error calls such a record,
# and the index of its source file in a row (its line follows).
_OWN_IDS = {"messages": ("message", 9), "boundaries": ("compaction", 8), "runs": ("run", 4)}
# The content a record read again must have: its index in a row, its column.
_TEXT_AT = {"messages": 7, "boundaries": 5}
_TEXT_COLUMN = {"messages": "text", "boundaries": "summary_text"}


# Tool calls and results: keyed by conversation and call id, checked by _check_calls. Per
# table: what an error calls such a record, the index of its source file in a row (its line
# follows), the indexes of its content.
_CALLS = {"tool_calls": ("tool_call", 9, (4, 5)), "tool_results": ("tool_result", 5, (3,))}
_CALL_CONTENT_SQL = {"tool_calls": "name, arguments_raw", "tool_results": "text"}
# Tables whose rows an insert may leave out as already stored, to be checked.
_CHECKED = frozenset({"messages", "boundaries", *_CALLS})
# Where a row of each of them sits (see _not_inserted): its key column (with the conversation),
# and the indexes of its conversation, key and position in a row.
_ROW_SLOT = {
    "messages": ("id", 1, 0, 3),
    "boundaries": ("id", 1, 0, 2),
    "tool_calls": ("call_id", 0, 1, 3),
    "tool_results": ("call_id", 0, 1, 2),
}


def _not_inserted(batch: _Batch, table: str, rows: list[tuple[Any, ...]]) -> list[tuple[Any, ...]]:
    """The rows of `rows` an insert into `table` left out as already stored (in row order).

    Asked of the store only when its count says some were: an inserted row is the one the
    table holds under its key at the position this write gave it (a position no row held
    before), so a row left out is one of `rows` the table does not hold there.
    """
    key, conv_at, key_at, pos_at = _ROW_SLOT[table]
    found = batch.con.execute(
        f"""
        SELECT r.i FROM (SELECT unnest($conv) AS conversation_id, unnest($key) AS k,
                                unnest($pos) AS position, unnest($i) AS i) r
        WHERE NOT EXISTS (SELECT 1 FROM {table} t WHERE t.conversation_id = r.conversation_id
                          AND t.position = r.position AND t.{key} = r.k)
        ORDER BY r.i
        """,
        {
            "conv": [row[conv_at] for row in rows],
            "key": [row[key_at] for row in rows],
            "pos": [row[pos_at] for row in rows],
            "i": list(range(len(rows))),
        },
    ).fetchall()
    return [rows[i] for (i,) in found]


class _Names(dict[str, str]):
    """Trace path as given -> as `store` records it (Store.stored_path), each computed once;
    `given` maps back."""

    def __init__(self, store: Store) -> None:
        super().__init__()
        self.store = store
        self.given: dict[str, str] = {}

    def __missing__(self, path: str) -> str:
        stored = self[path] = self.store.stored_path(path)
        self.given.setdefault(stored, path)
        return stored


def _check_ids(batch: _Batch, table: str, rows: list[tuple[Any, ...]]) -> None:
    """Refuse the first of `rows` whose id `table` holds for another conversation; count the
    ones whose id the same conversation holds with other content.

    A message or compaction left out as already stored must be the same record read again (a
    file ingested twice, a resumed session's copy); under another conversation it is a
    different record that would silently be lost, so the ingest stops (its transaction rolls
    back) naming both places. Under the same conversation with another text (an export whose
    ids restart in every file) the first one stays, the file's summary says how many were
    left out (`FileCounts.conflicts`), and each is an ingest_errors row (`id_conflict`).
    """
    what, at = _OWN_IDS[table]
    text_at = _TEXT_AT.get(table)
    text = _TEXT_COLUMN.get(table, "NULL")
    stored = {
        key: (conv, file, line, content)
        for key, conv, file, line, content in batch.con.execute(
            f"SELECT id, conversation_id, source_file, source_line, {text} FROM {table}"
            " WHERE id IN (SELECT unnest(?))",
            [list({row[0] for row in rows})],
        ).fetchall()
    }
    for row in rows:
        held = stored.get(row[0])
        if held is None:
            continue
        if held[0] != row[1]:
            shown = (held[0], batch.shown(held[1]), held[2])
            raise ReusedIdError(what, row[0], shown, path=batch.shown(row[at]), line=row[at + 1])
        if text_at is not None and held[3] != row[text_at]:
            # A message names its kind unless it is a user's own text (see conflict_detail).
            kind = row[5] if table == "messages" else None
            detail = conflict_detail(what, row[0], kind=kind)
            batch.conflict(row[at], detail, row[at + 1], held[1], held[2])
            batch.left_out.append((row[at], row[at + 1], detail))


def _check_calls(batch: _Batch, table: str, rows: list[tuple[Any, ...]]) -> None:
    """Count and record the tool calls (or results) of `rows`, left out as already stored,
    whose conversation holds their call id with another name or arguments (another output).

    A call id is its conversation's own (the store's key is both), so unlike a message's id
    it cannot name another conversation's record. The same call read again (a file ingested
    twice, a request log that sends the history again, a resumed session's copy) is quiet;
    any other is as _check_ids's records left out: the first stays, the file's summary
    counts it, and it is an ingest_errors row (`id_conflict`).
    """
    what, at, content = _CALLS[table]
    stored = {
        (conv, call_id): (file, line, held)
        for conv, call_id, file, line, *held in batch.con.execute(
            f"SELECT t.conversation_id, t.call_id, t.source_file, t.source_line,"
            f" {_CALL_CONTENT_SQL[table]} FROM {table} t"
            " JOIN (SELECT unnest(?) AS conversation_id, unnest(?) AS call_id) k"
            " USING (conversation_id, call_id)",
            [[row[0] for row in rows], [row[1] for row in rows]],
        ).fetchall()
    }
    for row in rows:
        held = stored.get((row[0], row[1]))
        if held is None or _same_call(table, held[2], [row[i] for i in content]):
            continue
        detail = conflict_detail(what, row[1], row[0])
        batch.conflict(row[at], detail, row[at + 1], held[0], held[1])
        batch.left_out.append((row[at], row[at + 1], detail))


def _same_call(table: str, held: list[Any], read: list[Any]) -> bool:
    """A stored tool call's (name, raw arguments) and one read again are the same call: same
    name, and arguments one JSON value written twice (readers.same_call); a result's text is
    equal."""
    if table == "tool_calls":
        return same_call(held[0], held[1], read[0], read[1])
    return held == read


def _conversation_of(item: Any) -> str:
    """The conversation of a batch buffer item: a record, (message, run id, turn) or a
    packed tuple (see _Filler)."""
    if type(item) is not tuple:
        return item.conversation_id
    tag = item[0]
    return item[1] if tag is ToolCall or tag is _Filler else tag.conversation_id


def _widen(row: list[Any], time: str) -> None:
    """Stretch a conversation row's first_time / last_time (indexes 4 and 5) over `time`."""
    if row[4] is None or time < row[4]:
        row[4] = time
    if row[5] is None or time > row[5]:
        row[5] = time


class _FileIngest:
    """One file's part of a batch: which lines are new, derived runs, counts."""

    def __init__(
        self, batch: _Batch, display: str, fmt: Format, skip_lines: int, skip_invalid: bool
    ) -> None:
        self.batch = batch
        self.display = display
        self.fmt = fmt
        self.skip_lines = skip_lines
        self.skip_invalid = skip_invalid
        self.errors: list[tuple[int, int | None, str, str]] = []
        self.skipped: dict[str, int] = {}
        self.unknown_type_line: int | None = None  # the first line skipped as unknown_type
        self.truncated = False
        self.truncated_document = False
        self.truncated_line: int | None = None  # the incomplete last line left unread
        self.messages = self.tool_calls = self.boundaries = 0
        self.convs: set[str] = set()  # conversations this file adds to
        # Runs: explicit Run records (last status wins) and derived turns.
        self.explicit_runs: dict[str, Run] = {}
        self.convs_with_runs: set[str] = set()
        self.turns: dict[str, list[Any]] = {}  # run id -> [conv, answered, position, file, line]
        self.open_turn: dict[str, str] = {}  # conversation -> run id of its current turn
        self.last_turn: str | None = None
        self.carried: set[str] = set()  # conversations whose earlier turn was looked for
        # A request log goes on with the turns its earlier files left open (see _turn); other
        # formats derive runs per file, as the fast path (core/fastload.py) does.
        self.carries = _continues(fmt.value)

    def read_anything(self) -> bool:
        """True when the file gave at least one conversation, message, call or boundary."""
        return bool(self.convs or self.messages or self.tool_calls or self.boundaries)

    def add(self, record: Record) -> None:
        """Take one reader record (old lines only feed run derivation and conversation data)."""
        rtype = type(record)
        if rtype is tuple:  # packed by a read-ahead worker for a lean batch (never old lines)
            self._packed(record)  # type: ignore[arg-type]
            return
        if rtype is Skipped:
            self._skipped(record)  # type: ignore[arg-type]
            return
        batch = self.batch
        new = record.source.line > self.skip_lines
        if rtype is Conversation:
            batch.conversation(self.fmt, record.id, record.source, record)  # type: ignore[union-attr]
            if new:
                self.convs.add(record.id)  # type: ignore[union-attr]
            return
        if rtype is Run:
            self._name_run(record.id, record.conversation_id, record.source)  # type: ignore[union-attr]
            self.explicit_runs[record.id] = record  # type: ignore[union-attr]
            self.convs_with_runs.add(record.conversation_id)  # type: ignore[union-attr]
            return
        conv = record.conversation_id  # type: ignore[union-attr]
        if rtype is Message:
            run_id, turn = self._turn(record, new)  # type: ignore[arg-type]
            if not new:
                if record.end_line > self.skip_lines:  # type: ignore[union-attr]
                    batch.revised.append(record)  # type: ignore[arg-type]
                return
            self.messages += 1
            batch.buffer.append((record, run_id, turn))
        else:
            if not new:
                if rtype is Boundary and record.end_line > self.skip_lines:  # type: ignore[union-attr]
                    batch.revised.append(record)  # type: ignore[arg-type]
                return
            if rtype is ToolCall:
                self.tool_calls += 1
            elif rtype is Boundary:
                self.boundaries += 1
            batch.buffer.append(record)
        if conv not in self.convs:
            self.convs.add(conv)
            batch.conversation(self.fmt, conv, record.source, None)
        if len(batch.buffer) >= CHUNK_ROWS:
            batch.flush()

    def _packed(self, item: tuple[Any, ...]) -> None:
        """Take a ToolCall or _Filler tuple (see _Filler)."""
        batch = self.batch
        conv = item[1]
        if item[0] is ToolCall:
            self.tool_calls += 1
        else:
            self.messages += item[3]
        batch.buffer.append(item)
        if conv not in self.convs:
            self.convs.add(conv)
            batch.conversation(self.fmt, conv, Source(item[-2], item[-1]), None)
        if len(batch.buffer) >= CHUNK_ROWS:
            batch.flush()

    def _skipped(self, item: Skipped) -> None:
        if item.reason == "nul_tail":
            # Not a bad line nor one being written: the summary says it (JsonSource.nul_tail),
            # nothing is recorded.
            return
        if item.source.line <= self.skip_lines and item.reason != "truncated_last_line":
            return
        if item.reason == "truncated_last_line" and self.display != "-":
            self.truncated = True  # read again by a later ingest, once it is whole
            self.truncated_line = item.source.line
        elif item.reason == "truncated_document" and self.skip_invalid and self.display != "-":
            # Not a bad line: the writer has not finished the document. What was complete is
            # stored; nothing of it counts as consumed, so a later ingest reads it all again.
            self.truncated_document = True
            return
        elif item.reason == "truncated_last_line" and not self.skip_invalid:
            # A pipe is read once: "left for a later ingest" would be a quiet loss.
            raise InputError(
                "the last line is incomplete (no newline, and not whole JSON);"
                " standard input cannot be read again for the rest of it",
                path=item.source.file,
                line=item.source.line,
                hint="pipe the whole trace, or pass skip_invalid=True to drop the line and"
                " record it",
                wording="ingest.stdin_cut",
            )
        elif item.reason == "truncated_last_line":
            self.errors.append((item.source.line, None, item.reason, item.detail))
        elif item.fatal and not self.skip_invalid:
            raise InputError(
                item.detail or item.reason,
                path=item.source.file,
                line=item.source.line,
                col=item.col,
                hint=_hints_for(item.reason, item.source.file),
                wording=_wording_for(item.reason),
            )
        elif item.fatal:
            self.errors.append((item.source.line, item.col, item.reason, item.detail))
        elif item.reason == "unknown_type" and self.unknown_type_line is None:
            self.unknown_type_line = item.source.line
        self.skipped[item.reason] = self.skipped.get(item.reason, 0) + 1

    def _name_run(self, run_id: str, conv: str, src: Source) -> None:
        """Note a run a record names; refuse it when another conversation named it first."""
        first = self.batch.named_runs.setdefault(run_id, (conv, src.file, src.line))
        if first[0] != conv:
            raise ReusedIdError("run", run_id, first, path=src.file, line=src.line)

    def _turn(self, msg: Message, new: bool) -> tuple[str | None, list[Any] | None]:
        conv = msg.conversation_id
        run_id = msg.run_id
        if run_id is None and conv not in self.convs_with_runs:
            # No runs in this format: each real user message opens one.
            user = msg.kind == MessageKind.USER_TEXT
            run_id = self.open_turn.get(conv)
            if (
                run_id is None
                and new
                and self.carries
                and (user or msg.role == Role.ASSISTANT)
                and conv not in self.carried
            ):
                # The first message of `conv` in this file: an answer goes to the turn an
                # earlier file (of this batch, or in the store) left open; a user message
                # begins the next turn, and that one, unanswered, failed (as in one file).
                run_id = self._carried(conv, msg)
            if user:
                run_id = f"{msg.id}/run"
                self.turns[run_id] = [conv, False, None, msg.source.file, msg.source.line]
                self.open_turn[conv] = run_id
                self.last_turn = run_id
        elif run_id is not None and run_id not in self.turns:
            named = self.batch.named_runs.get(run_id)
            if named is not None and named[0] != conv:
                return run_id, None  # another conversation's run: no valid run link
            self.turns[run_id] = [conv, False, None, msg.source.file, msg.source.line]
            self.last_turn = run_id
        if run_id is None:
            return None, None
        turn = self.turns[run_id]
        if turn[0] != conv:
            return run_id, None  # a run another conversation's message opened: no valid link
        if (
            msg.role == Role.ASSISTANT
            and msg.kind == MessageKind.ASSISTANT_TEXT
            and msg.status == MessageStatus.COMPLETED
            and msg.text.strip()
        ):
            turn[1] = True
        return run_id, turn

    def _carried(self, conv: str, msg: Message) -> str | None:
        """The run of the turn an earlier file left open in `conv` (of this batch, or a key
        for the store's), now this file's turn of it, which `msg` goes on with; None when
        there is none to look for."""
        src = msg.source
        self.carried.add(conv)
        batch = self.batch
        earlier = batch.open_turns.get(conv)
        if earlier is not None:
            run_id, turn = earlier
            self.turns[run_id] = turn
        elif not batch.lean:
            run_id = carried_key(conv)
            if run_id not in batch.carried:
                batch.carried[run_id] = None
                batch.carried_by[run_id] = msg.id
            self.turns[run_id] = [conv, False, None, src.file, src.line]
        else:
            return None
        self.open_turn[conv] = self.last_turn = run_id
        return run_id

    def finish(self) -> None:
        """Hand this file's runs and conversations to the batch."""
        batch = self.batch
        for run_id, turn in self.turns.items():
            if run_id in self.explicit_runs:
                continue
            if turn[1]:
                status = RunStatus.COMPLETED
            elif run_id == self.last_turn:
                status = RunStatus.RUNNING  # the file's last turn: its answer may still come
            else:
                status = RunStatus.FAILED
            batch.runs[run_id] = (turn, status.value)
        if self.carries:
            for conv, run_id in self.open_turn.items():
                batch.open_turns[conv] = (run_id, self.turns[run_id])
        if self.skip_lines:
            batch.appended_runs.update(self.explicit_runs)
        for run in self.explicit_runs.values():
            turn = self.turns.get(run.id)
            if turn is None or turn[0] != run.conversation_id:  # opened by another's message
                src = run.source
                turn = [run.conversation_id, False, None, src.file, src.line]
            batch.runs[run.id] = (turn, run.status.value)
        batch.touched |= self.convs


def _index_identifiers(
    store: Store, rules: Any, known: Known | None = None, *, keyed: bool = True
) -> dict[str, int]:
    """Fill the identifier sidecar for new real user messages; identifiers added per file.

    `known`: extractions the read-ahead workers made; `keyed`: see index_pending."""
    con = store.con
    # Note which messages are about to be scanned, to count identifiers per source file.
    con.execute(
        "CREATE OR REPLACE TEMP TABLE lexkeep_pending_scan AS SELECT m.id, m.source_file"
        " FROM messages m WHERE m.kind = ? AND NOT EXISTS"
        " (SELECT 1 FROM identifier_scans s WHERE s.message_id = m.id)",
        [MessageKind.USER_TEXT.value],
    )
    try:
        if not index_pending(con, rules, known, keyed=keyed):
            return {}
        rows = con.execute(
            "SELECT p.source_file, count(*) FROM identifiers i"
            " JOIN lexkeep_pending_scan p ON p.id = i.message_id GROUP BY 1"
        ).fetchall()
    finally:
        con.execute("DROP TABLE IF EXISTS lexkeep_pending_scan")
    return dict(rows)


class _Read:
    """A file read whole by a ReadAhead worker: its format, records and what was consumed.

    Lines skipped for a reason that is only counted (not fatal, not a truncated last line)
    come as counts per reason: a Codex rollout has as many of those as records. For a lean
    batch, tool calls and runs of only-counted records come packed as tuples (see _Filler).
    """

    __slots__ = (
        "fmt",
        "records",
        "counted",
        "unknown_type_line",
        "extracted",
        "sha256",
        "bytes_consumed",
        "lines_consumed",
        "nul_tail",
        "nul_tail_cut",
        "nul_gaps",
    )

    def __init__(
        self,
        fmt: Format,
        records: Sequence[Record | tuple[Any, ...]],
        counted: dict[str, int],
        extracted: dict[str, tuple[str, Extraction]],
        source: JsonSource,
        unknown_type_line: int | None = None,
    ) -> None:
        self.fmt = fmt
        self.records = records
        self.counted = counted
        self.unknown_type_line = unknown_type_line  # of the counted: the first unknown_type
        self.extracted = extracted
        self.sha256 = source.sha256
        self.bytes_consumed = source.bytes_consumed
        self.lines_consumed = source.lines_consumed
        self.nul_tail = source.nul_tail
        self.nul_tail_cut = source.nul_tail_cut
        self.nul_gaps = source.nul_gaps


class _Filler:
    """Tag of a run of consecutive records of one conversation that a lean batch only counts:
    tool output and messages other than the users' (they take positions, widen the
    conversation's time span and count as messages; no row is written). A read-ahead worker
    sends one tuple for each such run instead of every record (see _pack):

        (_Filler, conversation, count, messages, first time, last time, file, line)

    file and line are the first record's (a conversation first seen there is located there).
    """


# A lean read-ahead worker also sends each tool call as a tuple tagged by its class:
#     (ToolCall, conversation, call id, message id, name, raw arguments, kind, time, file, line)
# Plain tuples pickle and unpickle in C, and the tags (classes) travel as references; a frozen
# dataclass costs a Python-level reduce in the worker and a constructor call in the writer.
# In 128 MB of Codex rollouts: 0.48 -> 0.18 s to pickle, 0.29 -> 0.09 s to unpickle.


def _only_counted(record: Record) -> bool:
    """True for a record a lean batch does not write: tool output, or not the users' text."""
    rtype = type(record)
    return rtype is ToolResult or (
        rtype is Message and record.kind != MessageKind.USER_TEXT  # type: ignore[union-attr]
    )


def _pack(records: Iterable[Record]) -> Iterator[Record | tuple[Any, ...]]:
    """`records` for a lean batch: each run of _only_counted ones of one conversation as one
    _Filler tuple, each tool call as a ToolCall tuple (see _Filler), the rest as they are."""
    run: list[Any] = []  # [_Filler, conversation, count, messages, first, last, file, line]
    for record in records:
        if _only_counted(record):
            conv = record.conversation_id  # type: ignore[union-attr]
            time = getattr(record, "time", None)
            is_message = type(record) is Message
            if run and run[1] == conv:
                run[2] += 1
                run[3] += is_message
                if time is not None:
                    if run[4] is None or time < run[4]:
                        run[4] = time
                    if run[5] is None or time > run[5]:
                        run[5] = time
                continue
            if run:
                yield tuple(run)
            src = record.source  # type: ignore[union-attr]
            run = [_Filler, conv, 1, int(is_message), time, time, src.file, src.line]
            continue
        if run:
            yield tuple(run)
            run = []
        if type(record) is ToolCall:
            src = record.source
            yield (
                ToolCall,
                record.conversation_id,
                record.call_id,
                record.message_id,
                record.name,
                record.arguments_raw,
                record.arguments_kind.value,
                record.time,
                src.file,
                src.line,
            )
        else:
            yield record
    if run:
        yield tuple(run)


# The rules a read-ahead worker extracts identifiers with (set in the worker, see _read_ahead).
_READ_RULES: Any = None


def _set_read_rules(rules: Any) -> None:
    global _READ_RULES
    _READ_RULES = rules


def _extract_users(records: list[Record]) -> dict[str, tuple[str, Extraction]]:
    """The identifiers of the users' messages, by message id (the first of a repeated id),
    with the text they come from: the writer's index_pending takes them for the rows it stores
    with that text instead of extracting them again."""
    if _READ_RULES is None:
        return {}
    users: dict[str, str] = {}
    for record in records:
        if type(record) is Message and record.kind == MessageKind.USER_TEXT:
            users.setdefault(record.id, record.text)
    found = extract_many(list(users.values()), _READ_RULES)
    return {mid: (text, got) for (mid, text), got in zip(users.items(), found, strict=True)}


def _read_whole(path: str, format: Format | str | None, lean: bool) -> _Read | None:
    """Read one file into its reader records (in a ReadAhead worker); None for anything the
    writing process must see for itself (empty, unrecognised, unreadable: it reads the file
    again and reports it exactly as it would have).

    `lean` sends what a lean batch only counts (tool output, messages but the users') as
    _Filler runs and tool calls as tuples (_pack): a fraction of the objects to pickle,
    unpickle and add.
    """
    try:
        source = JsonSource(path)
        fmt, items = detect_format(source, format)
        records: list[Record] = []
        counted: dict[str, int] = {}
        unknown: int | None = None
        append = records.append
        continued = Continued()
        # A request log whose conversations earlier files of the ingest may have begun (its
        # reader keeps state for the next files) is read by the writing process, in order
        # after them: given back as soon as its reader keeps anything.
        watch = getattr(get_reader(fmt), "continues", False)
        for record in _reader_records(fmt, items, path, continued):
            if watch and not continued.empty():
                return None
            if (
                type(record) is Skipped
                and not record.fatal
                and record.reason not in ("truncated_last_line", "nul_tail")  # see _skipped
            ):
                reason = record.reason
                counted[reason] = counted.get(reason, 0) + 1
                if reason == "unknown_type" and unknown is None:
                    unknown = record.source.line
                continue
            append(record)
        if not continued.empty():
            return None
        extracted = _extract_users(records)
        sent: Sequence[Record | tuple[Any, ...]] = list(_pack(records)) if lean else records
        return _Read(fmt, sent, counted, extracted, source, unknown)
    except Exception:
        return None


def _ingest_one(
    batch: _Batch,
    path: str,
    *,
    format: Format | str | None,
    skip_invalid: bool,
    from_walk: bool,
    on_progress: Callable[[int], None] | None,
    staged: Staged | None = None,
    ahead: ReadAhead[str, _Read] | None = None,
    told: int = 0,
    continued: Continued | None = None,
) -> tuple[FileCounts, int]:
    """Stage one file into `batch`; returns its counts (identifiers still 0) and skip_lines.

    A file `staged` for the fast path (alone in its transaction, never ingested before) is
    written from DuckDB's staging tables (core/fastload.py) instead of being read here; a
    file never ingested before may have been read by a worker of `ahead`. `told`: bytes of
    this file `on_progress` heard already (from staging it), not told again. `continued`: what
    the request logs read before in this ingest hold for the next files (core.requestlog).
    """
    con = batch.con
    key = batch.key(path)
    prev = batch.previous.get(key)  # read for the whole group (_ingest_group)
    numbered: str | None = None  # see Continued.numbered
    skip_lines = 0
    status = "ingested"
    if prev is not None and path != "-":
        forced = format.value if isinstance(format, Format) else format
        if forced is not None and prev[3] and forced != prev[3]:
            # Its records are stored as the other format's; reading it again as this one
            # would add a second, different copy, and calling it unchanged would hide that.
            raise InputError(
                f"was ingested into this store as {prev[3]}, not {forced}",
                path=path,
                hint=f"ingest it into a new store with format={forced!r}"
                f" (or leave format out to keep it as {prev[3]})",
                wording="ingest.forced_other_format",
                fields={"forced": forced, "stored": prev[3]},
            )
        same, more = _same_prefix(path, prev[0], prev[2])
        # prev[0] is 0 when nothing counted as read (see _holds_nothing_now): an empty file
        # then has nothing to read, and is not called unchanged.
        if same and not more and prev[0]:
            if on_progress is not None:  # the bar counts it as read, not stuck at its start
                on_progress(prev[0])
            if continued is not None and _continues(prev[3]):
                # read if a later file needs it
                continued.pending.append((path, prev[3], key, prev[7]))
            if prev[6] is not None:
                # It ended in a line still being written, which its writer has cut since: it
                # now ends with the last line read, and the note on that line goes.
                batch.record_ingest(
                    key,
                    (prev[2], prev[0], prev[1], prev[3], 0, 0, 0, 0, 0, prev[4], prev[5], None,
                     False, prev[7], None, None, *prev[8:11], None),
                )  # fmt: skip
            return FileCounts(path=path, format=prev[3], status="unchanged"), 0
        if same:
            # A file a crash left with nothing readable (format '') was never ingested.
            skip_lines, status = prev[1], "appended" if prev[3] else "ingested"
            numbered = prev[7]
    if path != "-" and not skip_lines:
        numbered = _numbered_copy(batch, path)  # logrotate renamed a file read the old way
    if path != "-" and not batch.lean and not skip_lines:
        # logrotate renamed a file read before: its records name the file they are in now
        if prev is None:
            _renamed_from(batch, path, key)
        elif not same:
            _renamed_to(batch, path, key, prev)
    if staged is not None and prev is None and path == staged.path:
        done = _fast_write(batch, staged, path, key, on_progress, told)
        if done is not None:
            return done, 0
    read = ahead.take(path) if ahead is not None and prev is None else None
    if numbered is not None:
        read = None  # read without the old names
    source: JsonSource | _Read
    if read is not None:
        source, fmt = read, read.fmt
        records: Iterable[Record] = read.records
    else:
        source = JsonSource(path)
        try:
            fmt, items = detect_format(source, format)
        except EmptyInput as exc:
            _tell_whole(path, on_progress, told)
            counts = FileCounts(
                path=path,
                format="",
                status="empty",
                truncated_last_line=source.truncated_last_line,
                truncated_line=source.lines_consumed + 1 if source.truncated_last_line else None,
                nul_tail=source.nul_tail,
                nul_tail_cut=source.nul_tail_cut,
                nul_gaps=tuple(source.nul_gaps),
                header_only=isinstance(exc, HeaderOnly),
            )
            crashed = counts if crash_left(counts) is not None else None
            _holds_nothing_now(batch, key, prev, crashed)
            return counts, 0
        except UnrecognisedFormat:
            if from_walk:
                _holds_nothing_now(batch, key, prev)
                _tell_whole(path, on_progress, told)
                return FileCounts(path=path, format="", status="unrecognised"), 0
            raise
        except IncompleteDocument:
            if not skip_invalid or path == "-":
                raise
            # As a document cut after some values (_FileIngest._skipped): not a bad line,
            # only one not written yet. Nothing is stored or recorded.
            _holds_nothing_now(batch, key, prev)
            _tell_whole(path, on_progress, told)
            return FileCounts(path=path, format="", status="empty", truncated_document=True), 0
        again = prev is not None and path != "-" and same
        records = _reader_records(
            fmt, items, path, continued, None if path == "-" else key, again, numbered
        )
    if skip_lines and prev is not None and prev[3] and prev[3] != fmt.value:
        # Detected from a head of fewer lines than now (a bare chat message reads as OpenAI
        # until an Anthropic content block shows up): the file's conversations take the
        # format its longer head shows, as one ingest of the whole file gives them.
        con.execute(
            "UPDATE conversations SET format = ? WHERE source_file = ? AND format = ?",
            [fmt.value, batch.names[path], prev[3]],
        )
    if prev is not None and path != "-" and not skip_lines:
        batch.rereading.add(batch.names[path])  # read again from its start (see finish)
    state = _FileIngest(batch, path, fmt, skip_lines, skip_invalid)
    reported = told
    add = state.add
    for n, record in enumerate(records):
        add(record)
        if on_progress is not None and not n & 0x3FFF and read is None:
            done = source.bytes_consumed
            if done > reported:
                on_progress(done - reported)
                reported = done
    if read is not None:
        for reason, count in read.counted.items():
            state.skipped[reason] = state.skipped.get(reason, 0) + count
        if read.unknown_type_line is not None:
            # the reader's skipped records are counted apart from those it passed on (none of
            # them unknown_type, which is never fatal): its first is the file's
            state.unknown_type_line = read.unknown_type_line
        for message_id, got in read.extracted.items():
            batch.extracted.setdefault(message_id, got)
    state.finish()
    if on_progress is not None and source.bytes_consumed > reported:
        on_progress(source.bytes_consumed - reported)
    if (
        format is not None
        and not skip_lines
        and set(state.skipped) - {"metadata"}
        and not (state.messages or state.tool_calls or state.boundaries)
    ):
        # A forced format that matches no line would be recorded as ingested with nothing in
        # it (at most a conversation named after the file), and every later ingest of the
        # file would then call it unchanged.
        reasons = ", ".join(f"{k}={v}" for k, v in sorted(state.skipped.items()))
        raise InputError(
            f"no line is a {fmt.value} record ({reasons})",
            path=path,
            hint="leave format out to detect the format per file, or name the right one",
            wording="ingest.forced_format_reads_nothing",
        )
    if path == "-" and not state.errors:
        # Standard input cannot be compared with an earlier ingest before it is read; the
        # same bytes again (a re-piped file) add nothing.
        seen = con.execute(
            "SELECT count(*) FROM ingest_runs WHERE sha256 = ? AND bytes_consumed = ?",
            [source.sha256, source.bytes_consumed],
        ).fetchone()[0]
        if seen:
            raise _Unchanged(fmt.value)
    run_id = batch.record_ingest(
        key,
        (
            source.sha256,
            source.bytes_consumed,
            source.lines_consumed,
            fmt.value,
            len(state.convs),
            state.messages,
            state.tool_calls,
            state.boundaries,
            sum(state.skipped.values()),
            *_unknown_types(state, prev if skip_lines else None),
            state.truncated_line if state.truncated else None,
            state.truncated_document,
            numbered if _continues(fmt.value) else None,
            *_nul_columns(source.nul_tail, source.nul_gaps),
        ),
    )
    if prev is not None and path != "-":
        batch.reread.append((key, skip_lines))
        if not skip_lines:  # read again from its start: a line may now stand before stored ones
            batch.reread_convs.update(state.convs)
    stored = batch.names[path]
    batch.run_index[stored] = run_id
    batch.errors.extend(
        (run_id, stored, line, col, reason, detail) for line, col, reason, detail in state.errors
    )
    counts = FileCounts(
        path=path,
        format=fmt.value,
        conversations=len(state.convs),
        messages=state.messages,
        tool_calls=state.tool_calls,
        boundaries=state.boundaries,
        skipped=dict(state.skipped),
        status=status,
        truncated_last_line=state.truncated,
        truncated_document=state.truncated_document,
        truncated_line=state.truncated_line,
        nul_tail=source.nul_tail,
        nul_tail_cut=source.nul_tail_cut,
        nul_gaps=tuple(source.nul_gaps),
        unknown_type_line=state.unknown_type_line,
        invalid_line=min((line for line, *_ in state.errors), default=None),
    )
    return counts, skip_lines


_EMPTY_SHA256 = hashlib.sha256(b"").hexdigest()


def _numbered_copy(batch: _Batch, path: str) -> str | None:
    """The name an earlier lexkeep numbered the conversations without ids of a file `path`
    is a copy of under (`<name>#<index>`), when the store holds such a file read the old way:
    logrotate's `requests.jsonl.1` or `requests.jsonl.1.gz` is `requests.jsonl` renamed, so
    it keeps that file's names and nothing of it is stored again. None when it is no copy
    of one (its conversations are named after their first record).

    A copy is a file whose first bytes are those an ingest of a file of the same log (its
    name, `paths.log_name`) read; of several, the earliest ingest's names. One pass over the
    file, only when the store holds a file of that log read the old way."""
    candidates = batch.numbered.get(log_name(path))
    if not candidates:
        return None
    # earliest first, so that of several with the same first bytes the earliest stays
    wanted: dict[tuple[int, str], str] = {}
    for nbytes, sha, name in candidates:
        wanted.setdefault((nbytes, sha), name)
    prefixes = batch.prefix_hashes(path, {nbytes for nbytes, _ in wanted})  # none: read as any
    return next((name for (n, sha), name in wanted.items() if prefixes.get(n) == sha), None)


# Tables whose rows name the file and line they were read from.
_SOURCED = ("conversations", "runs", "messages", "tool_calls", "tool_results", "boundaries")


def _renamed_from(batch: _Batch, path: str, key: str) -> None:
    """Have the records stored from a file that `path` (never ingested) is, renamed, name
    `path`: logrotate's `requests.jsonl.1` is the `requests.jsonl` an earlier ingest read,
    and the lines those records cite are in it now.

    `path` is that file (of the same log name, `paths.log_name`) renamed when it begins with
    the bytes the file's latest ingest read, and the file no longer does (it is no copy kept
    beside its file); a file read in this batch is left to `_renamed_to`. The ingest errors
    recorded for the file go: `path`'s own read records what its lines hold, and so do its
    ingest_runs rows, which name `path` from now on (what `audit --db` notes of the file is
    then noted once, of `path`).

    `path` may also be the copy of a content its file held before logrotate gave the file's
    name to a new file that an ingest read first (the copy was in another folder): the rows
    that content gave, kept in renamed_away (_renamed_away), then name `path`."""
    reads: dict[str, tuple[int, str, int]] = {}  # other file -> its latest read
    for other, nbytes, sha, lines in batch.earlier.get(log_name(path), ()):
        if other != key and nbytes > 0:
            reads[other] = (nbytes, sha, lines)
    staged = {row[0] for row in batch.ingest_runs}
    for other in staged:
        reads.pop(other, None)
    away = [entry for entry in batch.away.get(log_name(path), ()) if entry[1] != key]
    if not reads and not away:
        return
    ends = {nbytes for nbytes, _, _ in reads.values()} | {entry[2] for entry in away}
    prefixes = batch.prefix_hashes(path, ends)
    for other, (nbytes, sha, lines) in reads.items():
        if prefixes.get(nbytes) != sha:
            continue
        # Gone (or unreadable: no hashes), or no longer begins so: not beside its copy.
        if batch.prefix_hashes(other, {nbytes}).get(nbytes) != sha:
            _move_sources(batch, other, lines, path, key)
            batch.con.execute(
                "DELETE FROM ingest_errors WHERE ingest_run_id IN"
                " (SELECT id FROM ingest_runs WHERE path = ?)",
                [other],
            )
            # The file's reads are `path`'s: it is that file, renamed.
            batch.con.execute("UPDATE ingest_runs SET path = ? WHERE path = ?", [key, other])
    for entry in away:
        run_id, _, nbytes, sha, _ = entry
        if prefixes.get(nbytes) == sha:
            _move_away_rows(batch, run_id, path)
            batch.away[log_name(path)].remove(entry)


def _renamed_to(batch: _Batch, path: str, key: str, prev: tuple[Any, ...]) -> None:
    """Have the records stored from `path`, whose first bytes changed since its last ingest
    (`prev`), name the rotated copy beside it that holds those bytes now, if any: logrotate
    renamed `requests.jsonl` to `requests.jsonl.1` (or `.1.gz`, or a dated name) and gave its
    name to a new file. Of several such copies, the newest (`rotation_order`)."""
    nbytes, lines, sha = prev[0], prev[1], prev[2]
    if not nbytes:
        return
    folder, name = os.path.split(path)
    log, _ = rotated_log(path)
    try:
        names = sorted(os.listdir(folder or "."))
    except OSError:
        return
    copies = []
    for entry in names:
        sibling = os.path.join(folder, entry)
        if entry != name and rotated_log(sibling) == (log, True) and os.path.isfile(sibling):
            copies.append((sibling, False))
    for sibling, _ in reversed(rotation_order(copies)):
        if batch.prefix_hashes(sibling, {nbytes}).get(nbytes) == sha:
            _move_sources(batch, key, lines, sibling, batch.key(sibling))
            return
    _renamed_away(batch, path, key, prev)


# Each table of _SOURCED: its rows' conversation and id columns (renamed_away, migration 008).
_ROW_KEYS = {
    "conversations": ("id", "id"),
    "runs": ("conversation_id", "id"),
    "messages": ("conversation_id", "id"),
    "tool_calls": ("conversation_id", "call_id"),
    "tool_results": ("conversation_id", "call_id"),
    "boundaries": ("conversation_id", "id"),
}


def _renamed_away(batch: _Batch, path: str, key: str, prev: tuple[Any, ...]) -> None:
    """Keep which rows lines 1 … `prev`'s line count of `path` gave, when its first bytes
    changed and no rotated copy beside it holds them (_renamed_to): logrotate may have put the
    copy in another folder (`olddir`), which an ingest finds later by its first bytes
    (_renamed_from). Until then they name `path`, as the new content's rows do, and only this
    list tells them apart. Rows an older content gave (kept already) stay with that content."""
    nbytes, lines, sha = prev[0], prev[1], prev[2]
    (run_id,) = batch.con.execute(
        "SELECT max(id) FROM ingest_runs WHERE path = ?", [key]
    ).fetchone()
    if run_id is None:
        return
    olds = sorted({key, batch.names[path]})
    for table, (conv, row_id) in _ROW_KEYS.items():
        batch.con.execute(
            f"INSERT INTO renamed_away SELECT ?, ?, t.{conv}, t.{row_id} FROM {table} t"
            " WHERE t.source_file IN (SELECT unnest(?)) AND t.source_line <= ?"
            " AND NOT EXISTS (SELECT 1 FROM renamed_away a WHERE a.tbl = ?"
            f" AND a.conversation_id = t.{conv} AND a.k = t.{row_id})",
            [run_id, table, olds, lines, table],
        )
    batch.away.setdefault(log_name(path), []).append((run_id, key, nbytes, sha, lines))


def _move_away_rows(batch: _Batch, run_id: int, path: str) -> None:
    """Have the rows kept in renamed_away for the read `run_id` name `path`, the copy that holds
    their lines now, and forget them there."""
    new_name = batch.names[path]
    for table, (conv, row_id) in _ROW_KEYS.items():
        batch.con.execute(
            f"UPDATE {table} t SET source_file = ? FROM renamed_away a"
            f" WHERE a.ingest_run_id = ? AND a.tbl = ? AND a.conversation_id = t.{conv}"
            f" AND a.k = t.{row_id}",
            [new_name, run_id, table],
        )
    batch.con.execute("DELETE FROM renamed_away WHERE ingest_run_id = ?", [run_id])


class PrefixHashes:
    """The sha256 of the first n bytes of files, kept for one ingest: finding the renamed copy
    of each file of a rotated log compares the file's first bytes with its siblings', and read
    for each such comparison, every sibling was read again for each file of its log (30
    rotated files: 437 passes over them). A file is read once, for every count that any file
    of its log may be compared at (`also`), and again only for a count not known then (a
    file of the log read by an earlier transaction of the same ingest)."""

    def __init__(self) -> None:
        # path -> (the counts its pass was for, their hashes: those the file holds)
        self._known: dict[str, tuple[frozenset[int], dict[int, str]]] = {}

    def of(
        self, path: str, ends: set[int], also: set[int] | frozenset[int] = frozenset()
    ) -> dict[int, str]:
        """The hashes of the first n bytes of `path` for each n of `ends` it holds (none when
        it cannot be read), read with those of `also` when it has to be read."""
        known = self._known.get(path)
        if known is None or not ends <= known[0]:
            wanted = frozenset(ends | also | (known[0] if known else frozenset()))
            known = self._known[path] = (wanted, _prefix_hashes(path, set(wanted)))
        hashes = known[1]
        return {end: hashes[end] for end in ends if end in hashes}


def _prefix_hashes(path: str, ends: set[int]) -> dict[int, str]:
    """The sha256 of the first n bytes of `path` for each n of `ends` it holds (one pass);
    none when it cannot be read."""
    prefixes: dict[int, str] = {}
    digest = hashlib.sha256()
    done = 0
    try:
        with open_input(path) as stream:
            for end in sorted(ends):
                while done < end:
                    block = stream.read(min(_CHUNK, end - done))
                    if not block:
                        break
                    digest.update(block)
                    done += len(block)
                if done < end:
                    break
                prefixes[end] = digest.copy().hexdigest()
    except (OSError, EOFError, zlib.error, InputError):
        return {}
    return prefixes


def _move_sources(batch: _Batch, old_key: str, lines: int, path: str, key: str) -> None:
    """Rows stored from lines 1..`lines` of the file `old_key` name `path` instead, the file
    those lines are in now. Rows stored from an earlier content of `old_key` (rotated away
    before, its copy never found) cite a line `old_key` no longer holds either way."""
    new_name = batch.names[path]
    # Rows name a file as given (symlinks kept), the key with symlinks resolved.
    olds = {old_key}
    if os.path.dirname(old_key) == os.path.dirname(key):
        olds.add(os.path.join(os.path.dirname(new_name), os.path.basename(old_key)))
    olds.discard(new_name)
    for table in _SOURCED:
        batch.con.execute(
            f"UPDATE {table} SET source_file = ? WHERE source_file IN (SELECT unnest(?))"
            " AND source_line <= ?",
            [new_name, sorted(olds), lines],
        )


def _unknown_types(state: _FileIngest, prev: tuple[Any, ...] | None) -> tuple[Any, Any]:
    """The ingest_runs (unknown_types, first_unknown_type_line) of a file read by `state`:
    over the whole file read so far. `prev`: the file's latest row when this read goes on
    from where it stopped (a grown file), else None. Not known (None, None) when that row's
    are not (written before ingest kept them)."""
    count = state.skipped.get("unknown_type", 0)
    first = state.unknown_type_line
    if prev is None:
        return count, first
    if prev[4] is None:
        return None, None
    return prev[4] + count, prev[5] if prev[5] is not None else first


def _nul_columns(
    tail: tuple[int, int] | None, gaps: Sequence[tuple[int, int, int]], cut: int | None = None
) -> tuple[int | None, ...]:
    """The ingest_runs columns of a file's NUL bytes (migrations 007, 009): the tail's bytes
    and line, then how many gaps, the first one's bytes and line, then the bytes of a first
    line a crash cut in a file it left with nothing readable (NULL for none)."""
    first = gaps[0][:2] if gaps else (None, None)
    return (*(tail or (None, None)), len(gaps) or None, *first, cut)


def _holds_nothing_now(
    batch: _Batch, key: str, prev: tuple[Any, ...] | None, crash: FileCounts | None = None
) -> None:
    """A file ingested before (`prev`: its latest ingest_runs row) holds nothing to read now:
    emptied, rewritten as something that is no trace, or its first line or value still being
    written. The errors earlier ingests recorded for it describe lines it no longer holds, so
    they go (in the batch's transaction, as for a file read again: _forget_errors_read_again).

    An ingest_runs row consuming nothing is recorded too, so that the file's old content,
    should it come back, is read again whole (and its errors found again) instead of being
    unchanged since the row before. A file whose latest row consumed nothing already gets no
    second one. The records stored from the old content stay, as for any rewritten file.

    `crash`: the counts of a file a crash left with nothing readable (crash_left). Such a
    file gets that row too when never ingested before, with its NUL bytes, and format '' (no
    file ingested, for `stats`): `audit --db` then says of it what `audit FILE` says.
    """
    if key == "-" or (prev is None and crash is None):
        return
    if prev is not None:
        batch.reread.append((key, 0))
    if prev is None or prev[0]:
        nul = (None, ()) if crash is None else ((crash.nul_tail or (0, 0)), ())
        batch.record_ingest(
            key,
            (_EMPTY_SHA256, 0, 0, "" if prev is None else prev[3], 0, 0, 0, 0, 0, 0, None,
             None, False, None)
            + _nul_columns(*nul, None if crash is None else crash.nul_tail_cut),
        )  # fmt: skip


def _fast_stage(
    store: Store,
    path: str,
    format: Format | str | None,
    on_progress: Callable[[int], None] | None = None,
) -> Staged | None:
    """Stage `path` for the fast path when it is plain lexkeep JSONL never ingested before;
    `on_progress` hears the bytes staged as DuckDB loads them (see fastload.stage)."""
    if not is_plain_file(path):
        return None
    if format is not None and Format(format) != Format.LEXKEEP:
        return None
    key = str(Path(path).resolve())
    prev = store.con.execute("SELECT count(*) FROM ingest_runs WHERE path = ?", [key])
    if prev.fetchone()[0]:
        return None  # appends and re-ingests take the general path
    source = JsonSource(path)
    items = iter(source)
    try:
        fmt, _ = detect_format(items, format)
    except InputError:  # empty, unrecognised or a bad head: the general path says so
        return None
    finally:
        items.close()  # type: ignore[attr-defined]
    if fmt != Format.LEXKEEP or source.document:
        return None
    return stage(store, path, on_progress)


def _fast_write(
    batch: _Batch,
    staged: Staged,
    path: str,
    key: str,
    on_progress: Callable[[int], None] | None,
    told: int = 0,
) -> FileCounts | None:
    """Write a staged file and its ingest_runs row; None when the general path must run.
    `told`: its bytes that on_progress heard while it was staged."""
    got = write(batch.store, staged, batch.names[path])
    if got is None:
        return None
    (run_id,) = batch.con.execute(
        "INSERT INTO ingest_runs (path, sha256, bytes_consumed, lines_consumed, format,"
        " conversations, messages, tool_calls, boundaries, skipped, unknown_types,"
        " first_unknown_type_line, truncated_line, truncated_document)"
        " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, NULL, false) RETURNING id",
        [
            key,
            got.sha256,
            got.bytes_consumed,
            got.lines_consumed,
            Format.LEXKEEP.value,
            got.conversations,
            got.messages,
            got.tool_calls,
            got.boundaries,
            sum(got.skipped.values()),
            got.skipped.get("unknown_type", 0),  # a file never ingested before: read whole
            got.unknown_type_line,
            # (truncated_line NULL, truncated_document false: only a file of whole JSON lines
            # is staged, fastload._Scan)
        ],
    ).fetchone()
    if got.left_out:
        # The rows the general path writes for them (_Batch.finish), on this file's run.
        name = batch.names[path]
        batch.store.bulk_insert(
            "ingest_errors",
            None,
            [(run_id, name, line, None, ID_CONFLICT, record) for record, line in got.left_out],
            on_conflict="",
        )
    if on_progress is not None and got.bytes_consumed > told:
        on_progress(got.bytes_consumed - told)
    left_out, first = got.conflicts
    if first is not None:
        record, line, held_file, held_line = first
        batch.conflict(batch.names[path], record, line, held_file, held_line, left_out)
    return FileCounts(
        path=path,
        format=Format.LEXKEEP.value,
        conversations=got.conversations,
        messages=got.messages,
        tool_calls=got.tool_calls,
        boundaries=got.boundaries,
        skipped=dict(got.skipped),
        status="ingested",
        messages_added=got.messages_added,
        tool_calls_added=got.tool_calls_added,
        boundaries_added=got.boundaries_added,
        unknown_type_line=got.unknown_type_line,
    )


def _ingest_group(
    store: Store,
    group: list[tuple[str, bool]],
    rules: Any,
    *,
    fast_min_bytes: int | None = None,
    lean: bool = False,
    keys: Keys | None = None,
    on_phase: Callable[[str], None] | None = None,
    **options: Any,
) -> list[FileCounts]:
    """Ingest `group` in one transaction; on failure, keep the files before the failing one.

    `on_phase(text)` hears the phases of a file loaded by DuckDB: loading (its bytes go to
    `on_progress` as they are staged, from the staging's reading thread), extracting
    identifiers, writing the store, then "ingesting" again.
    """
    done: list[tuple[FileCounts, int]] = []
    reading = True
    fast = len(group) == 1 and fast_min_bytes is not None
    if fast:
        with suppress(OSError):
            fast = Path(group[0][0]).stat().st_size >= fast_min_bytes  # type: ignore[operator]
    phase = on_phase if fast and on_phase is not None else lambda text: None
    phase("loading the file (DuckDB)")
    told = 0  # bytes the staging told on_progress: the reading after it does not repeat them
    tell = options["on_progress"]

    def counted(n: int) -> None:
        nonlocal told
        told += n
        tell(n)

    continued: Continued | None = options.get("continued")
    saved = continued.snapshot() if continued is not None else None
    prefixes: PrefixHashes | None = options.pop("prefixes", None)
    staged = None
    if fast:
        # Staged before the transaction: a line DuckDB refuses would abort it.
        staged = _fast_stage(store, group[0][0], options["format"], counted if tell else None)
    if staged is None:
        phase("ingesting")
    try:
        with store.transaction():
            batch = _Batch(store, lean=lean, seen=keys, prefixes=prefixes)
            batch.load_previous([path for path, _ in group])
            for path, from_walk in group:
                done.append(
                    _ingest_one(
                        batch, path, from_walk=from_walk, staged=staged, told=told, **options
                    )
                )
            reading = False
            if continued is not None and continued.memory is not None:
                # Once per group: the state the group's last file left, written with its rows.
                batch.keep_request_states(continued)
            batch.finish()
            if staged is not None:
                phase("extracting identifiers")
            per_file = _index_identifiers(store, rules, batch.extracted, keyed=keys is None)
            if staged is not None:
                phase("writing the store")
    except _Unchanged as unchanged:  # standard input, always alone in its group
        if keys is not None:
            keys.discard()
        return [FileCounts(path=group[0][0], format=str(unchanged), status="unchanged")]
    except BaseException as exc:
        if keys is not None:
            keys.discard()
        if staged is not None:
            drop_staging(store.con)
        if isinstance(exc, ReusedIdError):
            # Found while writing, but one file's fault: the files before it are kept.
            paths = [path for path, _ in group]
            reading = exc.path in paths
            done = done[: paths.index(exc.path)] if reading else done
        # A file that failed while being read: the files before it were fine, so write them
        # and re-raise. A failure while writing the group is not any one file's fault: the
        # whole group is rolled back (the store is as before it) and a re-run retries it.
        if reading and done:
            if continued is not None and saved is not None:
                continued.restore(saved)  # the files kept are read again from that state
            kept = _ingest_group(
                store,
                group[: len(done)],
                rules,
                fast_min_bytes=fast_min_bytes,
                lean=lean,
                keys=keys,
                prefixes=prefixes,
                **options,
            )
            # What was committed after all, for the caller's per-file lines (_ingest_files).
            exc.lexkeep_committed = kept  # type: ignore[attr-defined]
        raise
    if keys is not None:
        keys.commit()
    if staged is not None:
        drop_staging(store.con)
        phase("ingesting")
    # Counted per stored path (the rows' source_file), reported per path as given.
    names = batch.names
    conflicts = batch.conflicts
    if staged is not None or lean:  # counted by the fast path; lean writes only some rows
        return [
            replace(
                c,
                identifiers=per_file.get(names[c.path], 0),
                conflicts=conflicts.get(names[c.path], (0, None)),
            )
            for c, _ in done
        ]
    return [
        replace(
            c,
            identifiers=per_file.get(names[c.path], 0),
            messages_added=batch.added["messages"][names[c.path]],
            tool_calls_added=batch.added["tool_calls"][names[c.path]],
            boundaries_added=batch.added["boundaries"][names[c.path]],
            conflicts=conflicts.get(names[c.path], (0, None)),
        )
        for c, _ in done
    ]


# Reading ahead in worker processes pays for their start from about this much input, in files
# of at most READ_AHEAD_MAX_BYTES (a worker holds a whole file's records; larger files are
# streamed by the writing process), READ_AHEAD_DEPTH files per worker in flight.
READ_AHEAD_MIN_BYTES = 4 << 20
READ_AHEAD_MAX_BYTES = 8 << 20
READ_AHEAD_DEPTH = 4


def _read_ahead(
    store: Store,
    files: list[tuple[str, bool]],
    format: Format | str | None,
    fast_min_bytes: int | None,
    min_bytes: int | None,
    lean: bool,
    rules: Any,
) -> ReadAhead[str, _Read] | nullcontext[None]:
    """A ReadAhead over the files worth reading in workers, or nullcontext() for none.

    Candidates are plain files below the fast path's size and READ_AHEAD_MAX_BYTES that no
    earlier ingest recorded (appends and unchanged files are decided by the writer). Workers
    also extract the identifiers of the users' messages with `rules` (_extract_users).
    """
    n = read_workers()
    if min_bytes is None or n < 2:
        return nullcontext()
    limit = (
        READ_AHEAD_MAX_BYTES
        if fast_min_bytes is None
        else min(READ_AHEAD_MAX_BYTES, fast_min_bytes - 1)
    )
    # The files of a rotated log are read by the writer, in order: a request log without ids
    # goes on from its earlier files (core.requestlog.resent_for).
    logs: dict[tuple[str, str], int] = {}
    rotated: set[tuple[str, str]] = set()
    for path, _ in files:
        if path != "-":
            log, copy = rotated_log(path)
            logs[log] = logs.get(log, 0) + 1
            if copy:
                rotated.add(log)
    sizes: dict[str, int] = {}
    for path, _ in files:
        if path != "-" and path not in sizes:
            log, _ = rotated_log(path)
            if log in rotated and logs[log] > 1:
                continue
            with suppress(OSError):
                size = Path(path).stat().st_size
                if size <= limit:
                    sizes[path] = size
    if len(sizes) < 2 or sum(sizes.values()) < min_bytes:
        return nullcontext()
    keys = {str(Path(path).resolve()): path for path in sizes}
    seen = store.con.execute(
        "SELECT DISTINCT path FROM ingest_runs WHERE path IN (SELECT unnest(?))", [list(keys)]
    ).fetchall()
    for (key,) in seen:
        sizes.pop(keys[key], None)
    if len(sizes) < 2 or sum(sizes.values()) < min_bytes:
        return nullcontext()
    prepare(rules)  # compiled once here: the forked workers inherit it
    return ReadAhead(
        partial(_read_whole, format=format, lean=lean),
        [path for path, _ in files if path in sizes],
        n,
        READ_AHEAD_DEPTH * n,
        initializer=_set_read_rules,
        initargs=(rules,),
    )


def ingest_inputs(paths: PathsArg, format: Format | str | None = None) -> list[tuple[str, bool]]:
    """The files `paths` name (as `expand_paths`), checked before a store is opened: an
    unknown `format`, a missing path or paths holding no file at all raise InputError, so a
    mistyped command leaves no new, empty store behind. Pass the result to `ingest_paths`."""
    if format is not None:
        get_reader(format)  # an unknown --format fails before any file is read
    paths = path_list(paths)
    files = expand_paths(paths)
    if not files:
        raise _no_traces(paths, "no files found")
    return files


def require_traces(paths: PathsArg, counts: Sequence[FileCounts]) -> None:
    """Raise InputError when every file an ingest of `paths` found was no trace (a folder of
    other JSON): an ingest pointed at the wrong folder fails, as `lexkeep audit` of it does.
    A file with nothing to read yet (a session not written yet) or read before is no error."""
    if counts and all(c.status == "unrecognised" for c in counts):
        raise _no_traces(
            path_list(paths), f"{len(counts)} file(s) found, none of them a trace lexkeep reads"
        )


def _no_traces(paths: Sequence[str], found: str) -> InputError:
    return InputError(
        f"no trace files in {', '.join(paths)} ({found})",
        hint="point the ingest at trace files or folders holding them; formats: "
        + ", ".join(f.value for f in Format),
    )


def ingest_paths(
    store: Store,
    paths: PathsArg,
    *,
    format: Format | str | None = None,
    skip_invalid: bool = False,
    rules: Any = None,
    on_file: Callable[[FileCounts], None] | None = None,
    on_progress: Callable[[int], None] | None = None,
    fast_min_bytes: int | None = FAST_MIN_BYTES,
    lean: bool = False,
    on_phase: Callable[[str], None] | None = None,
    read_ahead_min_bytes: int | None = READ_AHEAD_MIN_BYTES,
    files: list[tuple[str, bool]] | None = None,
) -> list[FileCounts]:
    """Ingest files, folders (recursive), globs and '-' into `store` (`paths`: str or
    `pathlib.Path`, a sequence of them or one alone).

    A file with an invalid line raises InputError and writes nothing (unless `skip_invalid`,
    which records each skipped line in ingest_errors); files before it stay ingested.
    Re-ingesting an unchanged file adds nothing; a grown file adds only its new lines.
    `on_file` gets each file's counts once they are committed; `on_progress(n)` bytes read
    (while DuckDB loads a file, from the thread that reads it beside DuckDB).
    A plain file of at least `fast_min_bytes` bytes (None: never) is ingested alone in its
    transaction, so that a lexkeep JSONL file read for the first time can be loaded by DuckDB.
    `lean` (for a throw-away audit store) writes only what the audit reads: conversations, the
    users' messages, tool calls (raw arguments only), boundaries and identifiers (positions
    still count every record).
    `on_phase(text)`: what a file loaded by DuckDB is going through (a progress bar's text).
    Small files never ingested before are read ahead by worker processes (`read_workers()`)
    when they hold at least `read_ahead_min_bytes` bytes together (None: never).
    `files`: what `ingest_inputs(paths, format)` returned, so the paths are not walked twice.
    Without it, `paths` are checked as `ingest_inputs` checks them: an unknown `format`, a
    missing path or paths holding no file at all (an empty folder) raise InputError.
    Files that are no trace come back with status `unrecognised`; `require_traces(paths,
    counts)` raises the error `lexkeep ingest` gives when every file found is one.
    """
    store.require_writable("ingest_paths")
    paths = path_list(paths)
    if files is None:
        files = ingest_inputs(paths, format)
    # Read once: the settings file's rules, else the built-ins (see index_pending).
    rules = rules if rules is not None else load_rules()
    options = {
        "format": format,
        "skip_invalid": skip_invalid,
        "on_progress": on_progress,
    }
    # Decoded lines, records and rows hold no reference cycles (see core.collector). The pause
    # is taken before the read-ahead workers fork, so they read without the collector too.
    keys = _unkey(store, files, fast_min_bytes) if lean else None
    with (
        paused(),
        _read_ahead(
            store, files, format, fast_min_bytes, read_ahead_min_bytes, lean, rules
        ) as ahead,
    ):
        options["ahead"] = ahead
        options["keys"] = keys
        # Request logs continued from one file to the next (a rotated log, per-day files),
        # and from the files earlier ingests stored (a throw-away audit store has none).
        options["continued"] = Continued(None if lean else _StoredState(store))
        options["prefixes"] = PrefixHashes()  # files' first bytes, hashed once per ingest
        return _ingest_files(store, files, rules, options, fast_min_bytes, lean, on_file, on_phase)


class _StoredState(Memory):
    """What the store kept of the conversations request logs continue (request_log_state)."""

    def __init__(self, store: Store) -> None:
        self.con = store.con
        self._kept: dict[str, set[str]] = {}  # reader -> its conversations stored
        self._responses: dict[str, dict[str, str]] = {}  # reader -> response id -> conversation

    def recall(self, reader: str, conversation: str, entry: str | None) -> dict[str, Any] | None:
        """The parts' shares of `conversation` the store kept (Memory.recall), or None."""
        kept = self._kept.get(reader)
        if kept is None:  # asked once: most conversations met are new ones
            rows = self.con.execute(
                "SELECT conversation_id FROM request_log_state WHERE reader = ?", [reader]
            ).fetchall()
            kept = self._kept[reader] = {row[0] for row in rows}
        if conversation not in kept:
            return None
        # The file's own entry state first (path ''  is the latest state, it sorts last).
        row = self.con.execute(
            "SELECT state FROM request_log_state WHERE reader = ? AND conversation_id = ?"
            " AND path IN ('', ?) ORDER BY path DESC LIMIT 1",
            [reader, conversation, entry or ""],
        ).fetchone()
        return orjson.loads(row[0]) if row is not None else None

    def find(self, reader: str, response_id: str) -> str | None:
        """The conversation the store knows the response `response_id` of, or None."""
        known = self._responses.get(reader)
        if known is None:
            rows = self.con.execute(
                "SELECT unnest(responses), conversation_id FROM request_log_state WHERE reader = ?",
                [reader],
            ).fetchall()
            known = self._responses[reader] = dict(rows)
        return known.get(response_id)


def _unkey(store: Store, files: list[tuple[str, bool]], fast_min_bytes: int | None) -> Keys | None:
    """Drop the primary keys of a lean in-memory store's timeline and sidecar (_UNKEYED_TABLES)
    while they are empty, and check the keys in Python instead (core.keyset.Keys); None to keep
    them.

    DuckDB's key indexes cost about a tenth of a lean ingest of many small files (inserts,
    and commits that merge each group's index into the store's). A file that may take the
    DuckDB fast path (core/fastload.py, whose inserts rely on the keys) keeps them.
    """
    if store.path is not None:
        return None  # a store on disk outlives this ingest: its schema stays as migrated
    if fast_min_bytes is not None:
        for path, _ in files:
            with suppress(OSError):
                if path != "-" and Path(path).stat().st_size >= fast_min_bytes:
                    return None
    con = store.con
    for table in _UNKEYED_TABLES:
        if con.execute(f"SELECT count(*) FROM {table}").fetchone()[0]:
            return None
    drop_keys(con, _UNKEYED_TABLES)
    return Keys(_KEYED_ROWS, partial(_stored_keys, store))


def _stored_keys(store: Store, table: str, keys: list[Any]) -> set[Any]:
    """Of `keys` (see _KEYED_ROWS), the ones `table` of the keyless store holds."""
    con = store.con
    if table == "tool_calls":
        rows = con.execute(
            "SELECT t.conversation_id, t.call_id FROM tool_calls t"
            " JOIN (SELECT unnest(?) AS conversation_id, unnest(?) AS call_id) k"
            " USING (conversation_id, call_id)",
            [[k[0] for k in keys], [k[1] for k in keys]],
        ).fetchall()
        return set(rows)
    rows = con.execute(f"SELECT id FROM {table} WHERE id IN (SELECT unnest(?))", [keys]).fetchall()
    return {row[0] for row in rows}


def _ingest_files(
    store: Store,
    files: list[tuple[str, bool]],
    rules: Any,
    options: dict[str, Any],
    fast_min_bytes: int | None,
    lean: bool,
    on_file: Callable[[FileCounts], None] | None,
    on_phase: Callable[[str], None] | None,
) -> list[FileCounts]:
    counts: list[FileCounts] = []

    def run(group: list[tuple[str, bool]]) -> None:
        try:
            got_all = _ingest_group(
                store,
                group,
                rules,
                fast_min_bytes=fast_min_bytes,
                lean=lean,
                on_phase=on_phase,
                **options,
            )
        except BaseException as exc:
            # The files before a bad one are stored: their lines come before the error's.
            for got in getattr(exc, "lexkeep_committed", ()):
                counts.append(got)
                if on_file is not None:
                    on_file(got)
            raise
        for got in got_all:
            counts.append(got)
            if on_file is not None:
                on_file(got)

    group: list[tuple[str, bool]] = []
    size = 0
    for path, from_walk in files:
        if path == "-":
            if group:
                run(group)
                group, size = [], 0
            run([(path, from_walk)])
            continue
        with suppress(OSError):  # a missing file is reported when it is opened
            file_size = Path(path).stat().st_size
            if fast_min_bytes is not None and file_size >= fast_min_bytes:
                # Alone in its transaction: the fast path writes the store tables directly.
                if group:
                    run(group)
                    group, size = [], 0
                run([(path, from_walk)])
                continue
            size += file_size
        group.append((path, from_walk))
        if size >= GROUP_BYTES or len(group) >= GROUP_FILES:
            run(group)
            group, size = [], 0
    if group:
        run(group)
    return counts
