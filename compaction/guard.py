"""The identifier guard: check proposed tool arguments against what the conversation supplied.

Seed 003: "before execution, require that identifiers come from the session sidecar, not from
inferred arguments." An agent calls `guard` before each tool call; every identifier-shaped value
in the proposed arguments that no real user message and no tool result of the conversation
supplied verbatim is reported, with the nearest known value and how it differs.
"""

from __future__ import annotations

import contextlib
import datetime
import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import orjson

from lexkeep.core.controls import visible_json
from lexkeep.core.errors import InputError, NotFoundError
from lexkeep.core.identifiers import extract
from lexkeep.core.inspect import unknown_conversation_hint
from lexkeep.core.jsonnumbers import Number, holds_float, loads_exact
from lexkeep.core.nearmiss import Difference, NearMiss, classify, is_kept, typed_day
from lexkeep.core.readers import BOM, bad_utf8
from lexkeep.core.rules import RuleSet
from lexkeep.core.store import Store

GUARD_SCHEMA_VERSION = 1

# Lower is closer: the same ranking core.nearmiss uses for its own best match.
_RANK = {
    Difference.CASE: 0,
    Difference.SEPARATOR: 1,
    Difference.DATE: 1,
    Difference.TRUNCATED: 2,
    Difference.EXTENDED: 2,
    Difference.EDIT: 3,
}


@dataclass(frozen=True, slots=True)
class Leaf:
    """One decoded argument value: its JSON path (`$.a[0].b`) and its text."""

    path: str
    text: str


@dataclass(frozen=True, slots=True)
class Unsupplied:
    """A proposed identifier that the conversation never supplied verbatim."""

    path: str  # JSON path of the argument leaf it was found in
    kind: str
    value: str
    nearest: str | None  # the closest known value (sidecar or tool result), if any is close
    difference: Difference | None  # how `value` differs from `nearest`
    distance: int | None
    nearest_source: str | None  # "user" (sidecar) | "tool_result"


@dataclass(frozen=True, slots=True)
class GuardReport:
    """The guard's verdict on one proposed set of tool arguments."""

    conversation_id: str
    checked: tuple[str, ...]  # every identifier value found in the arguments, in order
    unsupplied: tuple[Unsupplied, ...]
    complete: bool  # False when an extraction ran out of its time budget

    @property
    def passed(self) -> bool:
        """True when no identifier found in the arguments was unsupplied.

        This says nothing of what a scan that ran out of its time budget did not reach: check
        `complete` too, or use `ok`.
        """
        return not self.unsupplied

    @property
    def ok(self) -> bool:
        """True when every identifier in the arguments was supplied verbatim and every value
        was scanned to its end (fails closed: an incomplete scan is not ok)."""
        return self.passed and self.complete

    @property
    def exit_code(self) -> int:
        """0 when `ok`; 1 when an identifier was not supplied or a scan was incomplete."""
        return 0 if self.ok else 1


def decode_arguments(arguments: str | bytes | Any, *, path: str = "ARGUMENTS_JSON") -> list[Leaf]:
    """String leaves of the arguments, and numbers as their JSON text (keys are not values).

    A number's text is the one `arguments` holds when it is JSON text (`98765432109876543210`,
    `1.50`); an already decoded value only has Python's numbers, written as JSON.
    """
    if isinstance(arguments, str | bytes):
        # A byte-order mark is skipped, as ingest skips it (orjson refuses it).
        if isinstance(arguments, bytes):
            arguments = arguments.removeprefix(BOM)
        else:
            arguments = arguments.removeprefix("\ufeff")
        try:
            value = orjson.loads(arguments)
        except orjson.JSONDecodeError as exc:
            # exc.msg: the position is already in path:line:col, not repeated in the text
            reason, line, col = _bad_utf8(arguments) or (
                getattr(exc, "msg", str(exc)),
                getattr(exc, "lineno", None),
                getattr(exc, "colno", None),
            )
            raise InputError(
                f"proposed arguments are not valid JSON ({reason})",
                path=path,
                line=line,
                col=col,
                hint='pass a JSON object, e.g. \'{"invoice_id": "INV-2025-08-44719"}\'',
            ) from exc
        if holds_float(value):
            # orjson read a big integer or a long decimal as a float, whose text is not the
            # proposed one (12345678901234567890123 would be scanned as 1.2345678901234568e+22).
            # Text orjson read but the standard library does not (deeper than its recursion
            # limit) keeps orjson's reading.
            with contextlib.suppress(ValueError, RecursionError):
                value = loads_exact(arguments)
    else:
        value = arguments
    leaves: list[Leaf] = []
    _walk(value, "$", leaves)
    return leaves


def _bad_utf8(text: str | bytes) -> tuple[str, int, int] | None:
    """(reason, line, column) of the first byte that is not UTF-8, or None.

    orjson says "str is not valid UTF-8: surrogates not allowed" at column 1; a str holds such
    a byte as a surrogate when it came from the command line or standard input.
    """
    try:
        raw = text if isinstance(text, bytes) else text.encode("utf-8", "surrogateescape")
    except UnicodeEncodeError:
        return None  # a lone surrogate of another origin: orjson's own message says it
    place = bad_utf8(raw)
    if place is None:
        return None
    byte, line, col = place
    return f"invalid UTF-8, byte 0x{byte:02x}", line, col


_PLAIN_KEY = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def _member(key: object) -> str:
    """`.key` for a plain name, else `["key"]`, the key as a JSON string with every character
    plain text must not hold escaped (a dot or space in `.key` would make two places one
    path; a control character or bidirectional override would drive or reorder the terminal
    the report is printed on)."""
    key = key if isinstance(key, str) else str(key)  # a decoded value passed in may have any
    if _PLAIN_KEY.fullmatch(key):
        return f".{key}"
    # orjson escapes the C0 controls only: DEL, C1 controls and bidirectional overrides too
    return f"[{visible_json(orjson.dumps(key)).decode()}]"


def _walk(value: Any, path: str, out: list[Leaf]) -> None:
    if type(value) is Number:
        out.append(Leaf(path, str(value)))  # a number as its JSON text, a plain str
    elif isinstance(value, str):
        out.append(Leaf(path, value))
    elif isinstance(value, bool) or value is None:
        return  # true/false/null are never identifiers
    elif isinstance(value, int | float):
        out.append(Leaf(path, orjson.dumps(value).decode()))
    elif isinstance(value, dict):
        for key, item in value.items():
            _walk(item, path + _member(key), out)
    elif isinstance(value, list | tuple):
        for i, item in enumerate(value):
            _walk(item, f"{path}[{i}]", out)


# Characters per extraction of a long argument (a file a write_file call writes). One text is
# scanned to at most 200,000 characters within 50 ms of CPU (docs/identifiers.md), and text
# dense with identifiers scans at about 1 ms per KB: the rest of a longer value went unchecked,
# and the guard passed it.
PIECE_CHARS = 16_384
# Where a piece may end, best first: no identifier spans a line break or white space, and
# few hold one of the separators of minified JSON or code.
_CUTS = ("\n", " \t\r\f\v", ",;\"'<>()[]{}")


def _pieces(text: str) -> Iterator[str]:
    """`text` in pieces of at most PIECE_CHARS characters, each cut after a line break, else
    white space, else a separator, so that no identifier is cut in two."""
    start = 0
    while len(text) - start > PIECE_CHARS:
        end = start + PIECE_CHARS
        cut = -1
        for chars in _CUTS:
            cut = max(text.rfind(c, start, end) for c in chars)
            if cut > start:
                break
        # No separator in a whole piece (a base64 blob): cut it anyway, it holds no identifier
        # a rule takes whole.
        stop = cut + 1 if cut > start else end
        yield text[start:stop]
        start = stop
    yield text[start:]


def _supplied_texts(store: Store, conversation_id: str) -> tuple[list[str], list[str]]:
    """(real user message texts, tool result texts) of one conversation, in timeline order."""
    con = store.con
    found = con.execute("SELECT 1 FROM conversations WHERE id = ?", [conversation_id]).fetchone()
    if found is None:
        raise NotFoundError(
            f"no conversation {conversation_id!r} in the store",
            **unknown_conversation_hint(con),
        )
    rows = con.execute(
        "SELECT kind, text FROM messages WHERE conversation_id = ? "
        "AND kind IN ('user_text', 'tool_result') ORDER BY position",
        [conversation_id],
    ).fetchall()
    user = [text for kind, text in rows if kind == "user_text"]
    tool = [text for kind, text in rows if kind == "tool_result"]
    tool += [
        text
        for (text,) in con.execute(
            "SELECT text FROM tool_results WHERE conversation_id = ? ORDER BY position",
            [conversation_id],
        ).fetchall()
    ]
    return user, _supplied_by_tools(tool)


def _supplied_by_tools(texts: list[str]) -> list[str]:
    """The tool result texts as the values they supplied: a JSON document holding escapes is
    its decoded leaves.

    A tool that returns JSON escapes what it returns ("C:\\\\Users", "\\u00e9", "\\/"); the
    value it supplied is the decoded string. Its escaped text is left out, or the nearest known
    value of a near miss could be `https:\\/\\/x.io`, which the agent must not be told to send.
    """
    out: list[str] = []
    for text in texts:
        if text.lstrip()[:1] in ("{", "[") and "\\" in text:
            try:
                value = orjson.loads(text)
            except orjson.JSONDecodeError:
                pass
            else:
                leaves: list[Leaf] = []
                _walk(value, "$", leaves)
                out.extend(leaf.text for leaf in leaves)
                continue
        out.append(text)
    return out


# A known value: (value, source, the day it was typed: core.nearmiss.typed_day).
_Known = tuple[str, str, datetime.date | None]


def _known_values(
    store: Store, conversation_id: str, tool_texts: list[str], rules: RuleSet | None
) -> list[_Known]:
    """Known identifier values as (value, source, day typed): the sidecar first (the time of
    the message it was first typed in, else the conversation's first user message time), then
    tool results (that first time)."""
    known: dict[str, tuple[str, datetime.date | None]] = {}
    first = store.con.execute(
        "SELECT min(time) FROM messages"
        " WHERE conversation_id = ? AND kind = 'user_text' AND time IS NOT NULL",
        [conversation_id],
    ).fetchone()
    first_day = typed_day(first[0] if first else None)
    for value, time in store.con.execute(
        "SELECT i.value, m.time FROM identifiers i"
        " LEFT JOIN messages m ON m.id = i.message_id AND m.conversation_id = i.conversation_id"
        " WHERE i.conversation_id = ? ORDER BY i.message_id, i.span_start",
        [conversation_id],
    ).fetchall():
        if value not in known:
            known[value] = ("user", typed_day(time) or first_day)
    for text in tool_texts:
        for ident in extract(text, rules).identifiers:
            known.setdefault(ident.value, ("tool_result", first_day))
    return [(value, source, day) for value, (source, day) in known.items()]


def _nearest(value: str, known: list[_Known]) -> tuple[NearMiss, str] | None:
    """The known value closest to the proposed `value`, with its source."""
    best: tuple[NearMiss, str] | None = None
    for candidate, source, day in known:
        # classify(expected, found): the known value is what was expected, the proposal found;
        # a date typed without a year is read near the day it was typed.
        miss = classify(candidate, value, day)
        if miss is None:
            continue
        if best is None or (_RANK[miss.difference], miss.distance) < (
            _RANK[best[0].difference],
            best[0].distance,
        ):
            best = (NearMiss(candidate, miss.difference, miss.distance), source)
    return best


def guard_arguments(
    store: Store,
    conversation_id: str,
    arguments: str | bytes | Any,
    *,
    rules: RuleSet | None = None,
    arguments_path: str = "ARGUMENTS_JSON",
) -> GuardReport:
    """Report every identifier in `arguments` that the conversation never supplied verbatim.

    `arguments` is JSON text (as a tool call would carry it) or an already decoded value.
    Supplied means: occurs verbatim, at letter/digit boundaries, in a real user message or a
    tool result of the conversation. `rules` are the identifier rules (None: the built-in
    kinds); use the same rules the store was ingested with.
    """
    leaves = decode_arguments(arguments, path=arguments_path)
    user_texts, tool_texts = _supplied_texts(store, conversation_id)
    supplied = user_texts + tool_texts
    checked: list[str] = []
    pending: list[tuple[Leaf, str, str]] = []
    complete = True
    for leaf in leaves:
        for piece in _pieces(leaf.text):
            extraction = extract(piece, rules)
            complete = complete and extraction.complete
            for ident in extraction.identifiers:
                checked.append(ident.value)
                if not any(is_kept(ident.value, text) for text in supplied):
                    pending.append((leaf, ident.kind, ident.value))
    unsupplied: list[Unsupplied] = []
    if pending:
        # Only now pay for extracting the tool results: most calls pass the guard.
        known = _known_values(store, conversation_id, tool_texts, rules)
        for leaf, kind, value in pending:
            near = _nearest(value, known)
            unsupplied.append(
                Unsupplied(
                    path=leaf.path,
                    kind=kind,
                    value=value,
                    nearest=near[0].found if near else None,
                    difference=near[0].difference if near else None,
                    distance=near[0].distance if near else None,
                    nearest_source=near[1] if near else None,
                )
            )
    return GuardReport(conversation_id, tuple(checked), tuple(unsupplied), complete)


def guard_to_json(report: GuardReport) -> dict[str, Any]:
    """The report as a JSON-ready dict (with `schema_version`)."""
    return {
        "schema_version": GUARD_SCHEMA_VERSION,
        "conversation_id": report.conversation_id,
        "ok": report.ok,
        "passed": report.passed,
        "complete": report.complete,
        "checked": list(report.checked),
        "unsupplied": [
            {
                "path": u.path,
                "kind": u.kind,
                "value": u.value,
                "nearest": u.nearest,
                "difference": str(u.difference) if u.difference else None,
                "distance": u.distance,
                "nearest_source": u.nearest_source,
            }
            for u in report.unsupplied
        ],
    }


def _shown(value: str) -> str:
    """A value between single quotes as it is (a repr would double every backslash of a
    Windows path); one with a quote or an unprintable character as a JSON string, controls and
    bidirectional overrides escaped."""
    if value.isprintable() and "'" not in value:
        return f"'{value}'"
    return visible_json(orjson.dumps(value)).decode()


def guard_to_text(report: GuardReport) -> str:
    """A short human-readable verdict, one line per unsupplied value."""
    lines = []
    if report.ok:
        lines.append(
            f"ok: {len(report.checked)} identifier(s) in the arguments, all supplied verbatim"
            " by the conversation"
        )
    elif report.passed:
        # Not "ok": what the scan did not reach was not checked (`ok` is false in the JSON).
        lines.append(
            "incomplete: part of a value was not scanned; the"
            f" {len(report.checked)} identifier(s) found in the rest were all supplied verbatim"
            " by the conversation"
        )
    else:
        lines.append(
            f"NOT SUPPLIED: {len(report.unsupplied)} of {len(report.checked)} identifier(s)"
            " in the arguments never appeared verbatim in a user message or tool result"
        )
        for u in report.unsupplied:
            if u.nearest is None:
                near = "no known value is close"
            else:
                near = (
                    f"nearest known {_shown(u.nearest)} ({u.difference}, from {u.nearest_source})"
                )
            lines.append(f"  {u.path}: {_shown(u.value)} [{u.kind}] — {near}")
    if not report.complete:
        lines.append("note: identifier extraction ran out of time on some argument values")
    return "\n".join(lines) + "\n"
