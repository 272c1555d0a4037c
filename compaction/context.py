"""Next-run context: what the next run sees of a conversation, under a byte budget.

Seed 000 (cases B and C) and DESIGN.md "Next-run context". The output is assembled in this
order of priority:

1. the pinned identifier sidecar (every identifier typed by the user; bypasses every summary);
2. the newest raw pairs (the tail that is never compacted), newest first;
3. older 10-pair segments, newest first. A segment with a *valid* summary is offered as one
   candidate "original user messages of the range + assistant-history summary"; when that does
   not fit (or there is no valid summary: the raw segment), a bounded projection of the raw
   pairs is offered; when that does not fit either, the range is omitted.

Placement is greedy in that order: each pair or segment takes the first of its forms that still
fits, and one that does not fit does not stop older ones from being tried (gaps are listed).

The budget counts the UTF-8 bytes of the exact serialised output (JSON or text, trailing newline
included, the list of omissions too), so `len(context.output.encode()) <= budget_bytes` always
holds. Omitted ranges are
listed with their reason and the bytes they would have needed; a stale summary is reported and
never used. A summary never replaces original user text: user messages always appear verbatim.

Bounded projection: every user message of the range verbatim, and each assistant answer cut to
at most `answer_bytes` UTF-8 bytes (default 240), cut back to whitespace that splits no word and
no spaced number, date, amount or IBAN (`clip_answer` says exactly which), with the number of
bytes not shown. Its size is therefore at
most the range's user text plus 10 x (answer_bytes + fixed per-pair overhead).
"""

from __future__ import annotations

import itertools
import re
from bisect import bisect_right, insort
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, replace
from enum import StrEnum
from typing import Protocol

import orjson

from lexkeep.compaction.binding import source_digest
from lexkeep.compaction.contextformat import DEFAULT_ANSWER_BYTES, MAX_BYTES, ContextFormat
from lexkeep.compaction.jobs import CONSUMABLE_VERSIONS, CompletedSummary, valid_summary
from lexkeep.compaction.pairs import Pair, pairs_and_user_positions
from lexkeep.compaction.planning import plan_segments
from lexkeep.core.controls import visible, visible_json
from lexkeep.core.errors import BudgetError, ConfigError, NotFoundError
from lexkeep.core.inspect import unknown_conversation_hint
from lexkeep.core.store import Store

CONTEXT_SCHEMA_VERSION = 1


class OmissionReason(StrEnum):
    """Why a range is not in the next-run context."""

    RAW_TOO_BIG = "raw_too_big"  # a newest raw pair did not fit
    SUMMARY_AND_PROJECTION_TOO_BIG = "summary_and_projection_too_big"
    RAW_AND_PROJECTION_TOO_BIG = "raw_and_projection_too_big"  # no valid summary to offer


_REASON_TEXT = {
    OmissionReason.RAW_TOO_BIG: "the raw pair(s) did not fit",
    OmissionReason.SUMMARY_AND_PROJECTION_TOO_BIG: (
        "neither the summary candidate (user messages + assistant-history summary) nor the"
        " bounded projection of the raw pairs fit"
    ),
    OmissionReason.RAW_AND_PROJECTION_TOO_BIG: (
        "no valid summary; neither the raw pairs nor their bounded projection fit"
    ),
}


# -- the result ------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class PinnedIdentifier:
    """One sidecar identifier: exactly as the user typed it."""

    kind: str
    value: str


@dataclass(frozen=True, slots=True)
class Said:
    """One message's id and text, verbatim."""

    id: str
    text: str


@dataclass(frozen=True, slots=True)
class ClippedAnswer:
    """An assistant answer cut at a whitespace to a byte bound; `clipped_bytes` were not shown."""

    id: str
    text: str
    clipped_bytes: int


@dataclass(frozen=True, slots=True)
class RawPair:
    """One eligible pair, verbatim."""

    index: int
    user: Said
    assistant: Said


@dataclass(frozen=True, slots=True)
class SummaryCandidate:
    """A segment as original user messages + a valid assistant-history summary."""

    from_pair: int
    to_pair: int
    user_messages: tuple[Said, ...]
    assistant_summary: str
    compaction_id: str
    prompt_version: str


@dataclass(frozen=True, slots=True)
class ProjectedPair:
    """A pair of a bounded projection: the user message verbatim, the answer clipped."""

    index: int
    user: Said
    assistant: ClippedAnswer


@dataclass(frozen=True, slots=True)
class Projection:
    """A segment as a bounded projection of its raw pairs."""

    from_pair: int
    to_pair: int
    pairs: tuple[ProjectedPair, ...]
    answer_bytes: int


HistoryItem = RawPair | SummaryCandidate | Projection


@dataclass(frozen=True, slots=True)
class Omission:
    """A range the next run will not see, why, and the bytes it would have needed."""

    from_pair: int
    to_pair: int
    reason: OmissionReason
    bytes_needed: int  # bytes its smallest offered form would have added to this output


@dataclass(frozen=True, slots=True)
class StaleSummary:
    """A completed summary that was not used (source changed, or a version never consumed)."""

    from_pair: int
    to_pair: int
    reason: str


@dataclass(frozen=True, slots=True)
class NextRunContext:
    """The assembled next-run context and its exact serialisation (`output`)."""

    conversation_id: str
    budget_bytes: int
    format: ContextFormat
    pinned: tuple[PinnedIdentifier, ...]
    sidecar_complete: bool  # False when some user message's identifier scan timed out
    history: tuple[HistoryItem, ...]  # oldest first
    omitted: tuple[Omission, ...]
    stale: tuple[StaleSummary, ...]
    pairs_total: int
    output: str  # exactly what `lexkeep context` prints

    @property
    def bytes(self) -> int:
        """UTF-8 bytes of `output` (never more than `budget_bytes`)."""
        return len(self.output.encode("utf-8"))


# -- serialisations --------------------------------------------------------------------------
#
# Each serialiser renders the output as
#     before(meta) + omitted_block(entries) + after(meta) + items joined by `separator` + tail
# so every part's size is additive: the assembler tests a candidate in O(log n) without
# re-rendering anything (`omitted_block_size` gives the block's size from its entries' sizes).


class _Serialiser(Protocol):
    separator: bytes

    def before(self, ctx: _Meta) -> bytes: ...  # pragma: no cover - protocol

    def omission(self, o: Omission) -> bytes: ...  # pragma: no cover - protocol

    def omitted_block(
        self, entries: Sequence[bytes], newest: _Newest
    ) -> bytes: ...  # pragma: no cover

    def omitted_block_size(
        self, count: int, entry_bytes: int, newest: _Newest
    ) -> int: ...  # pragma: no cover

    def after(self, ctx: _Meta) -> bytes: ...  # pragma: no cover - protocol

    def item(self, item: HistoryItem) -> bytes: ...  # pragma: no cover - protocol

    def tail(self) -> bytes: ...  # pragma: no cover - protocol


@dataclass(frozen=True, slots=True)
class _Newest:
    """The newest raw pairs (after the last segment): pairs first..last, `omitted` of them
    left out. They are placed before anything older (DESIGN.md), so when some do not fit, older
    exchanges may be shown while they are not, and the text format says so."""

    first: int
    last: int
    omitted: int = 0

    def note(self) -> bytes:
        """The line the text format adds to the omission list, or nothing."""
        if not self.omitted:
            return b""
        return (
            f"- note: {self.omitted} of the {self.last - self.first + 1} newest exchanges"
            f" (pairs {self.first}-{self.last}) did not fit; what is shown below lacks them,"
            " even where it shows older exchanges\n"
        ).encode()


@dataclass(frozen=True, slots=True)
class _Meta:
    conversation_id: str
    budget_bytes: int
    pinned: tuple[PinnedIdentifier, ...]
    sidecar_complete: bool
    stale: tuple[StaleSummary, ...]
    pairs_total: int


def _said(s: Said) -> dict[str, str]:
    return {"id": s.id, "text": s.text}


def _render(
    ser: _Serialiser,
    meta: _Meta,
    omitted: Sequence[Omission],
    newest: _Newest,
    items: Sequence[HistoryItem],
) -> bytes:
    return (
        ser.before(meta)
        + ser.omitted_block([ser.omission(o) for o in omitted], newest)
        + ser.after(meta)
        + ser.separator.join(ser.item(i) for i in items)
        + ser.tail()
    )


def _dumps(obj: object) -> bytes:
    """orjson.dumps with every character plain text must not hold escaped (core.controls).

    orjson escapes the C0 controls but writes DEL, the C1 controls (U+009B is CSI),
    bidirectional overrides and hidden format characters as they are; some terminals act on
    them and a reader sees something else than a model reads. The escapes decode to the same
    text.
    """
    return visible_json(orjson.dumps(obj))


class _Json:
    """Compact JSON, one document and a trailing newline; `history` is the last key."""

    separator = b","

    def before(self, ctx: _Meta) -> bytes:
        doc = {
            "schema_version": CONTEXT_SCHEMA_VERSION,
            "conversation_id": ctx.conversation_id,
            "budget_bytes": ctx.budget_bytes,
            "pairs_total": ctx.pairs_total,
            "pinned_identifiers": [{"kind": p.kind, "value": p.value} for p in ctx.pinned],
            "sidecar_complete": ctx.sidecar_complete,
        }
        return _dumps(doc)[:-1] + b',"omitted":'

    def omission(self, o: Omission) -> bytes:
        return _dumps(
            {
                "from_pair": o.from_pair,
                "to_pair": o.to_pair,
                "reason": str(o.reason),
                "bytes_needed": o.bytes_needed,
            }
        )

    def omitted_block(self, entries: Sequence[bytes], newest: _Newest) -> bytes:
        # The omitted newest pairs are the `raw_too_big` entries: no note needed.
        return b"[" + b",".join(entries) + b"]"

    def omitted_block_size(self, count: int, entry_bytes: int, newest: _Newest) -> int:
        return 2 + entry_bytes + max(0, count - 1)

    def after(self, ctx: _Meta) -> bytes:
        stale = [
            {"from_pair": s.from_pair, "to_pair": s.to_pair, "reason": s.reason} for s in ctx.stale
        ]
        return b',"stale_summaries":' + _dumps(stale) + b',"history":['

    def item(self, item: HistoryItem) -> bytes:
        if isinstance(item, RawPair):
            obj: dict[str, object] = {
                "type": "pair",
                "pair": item.index,
                "user": _said(item.user),
                "assistant": _said(item.assistant),
            }
        elif isinstance(item, SummaryCandidate):
            obj = {
                "type": "summary",
                "from_pair": item.from_pair,
                "to_pair": item.to_pair,
                "user_messages": [_said(s) for s in item.user_messages],
                "assistant_history_summary": item.assistant_summary,
                "prompt_version": item.prompt_version,
                "compaction_id": item.compaction_id,
            }
        else:
            obj = {
                "type": "projection",
                "from_pair": item.from_pair,
                "to_pair": item.to_pair,
                "answer_bytes": item.answer_bytes,
                "pairs": [
                    {
                        "pair": p.index,
                        "user": _said(p.user),
                        "assistant": {
                            "id": p.assistant.id,
                            "text": p.assistant.text,
                            "clipped_bytes": p.assistant.clipped_bytes,
                        },
                    }
                    for p in item.pairs
                ],
            }
        return _dumps(obj)

    def tail(self) -> bytes:
        return b"]}\n"


def _pairs_label(a: int, b: int) -> str:
    return f"pair {a}" if a == b else f"pairs {a}-{b}"


class _Text:
    """Plain text for a model prompt: sections with plain headings, user text verbatim.

    Verbatim except for control characters (core.controls): a NUL, an ESC sequence or a C1
    control in a stored text would reach the prompt or the terminal, so each is written as
    `\\uXXXX` (line feeds, tabs and CRLF line ends stay).
    """

    separator = b""

    _NOTHING = b"## Nothing omitted: every earlier exchange is below, raw or summarised\n"
    _NOT_INCLUDED = b"## NOT INCLUDED: the next run will not see these earlier exchanges\n"

    def before(self, ctx: _Meta) -> bytes:
        lines = [
            f"# Conversation {ctx.conversation_id}: context for the next run"
            f" ({ctx.pairs_total} earlier exchange{'' if ctx.pairs_total == 1 else 's'};"
            f" budget {ctx.budget_bytes} bytes)",
            "",
            "## Identifiers the user typed (verbatim; use these exact strings)",
        ]
        lines += [f"- {p.value} ({p.kind})" for p in ctx.pinned] or ["(none)"]
        if not ctx.sidecar_complete:
            lines.append("(some user messages were not fully scanned for identifiers)")
        lines.append("")
        return visible("\n".join(lines) + "\n").encode("utf-8")

    def omission(self, o: Omission) -> bytes:
        return (
            f"- {_pairs_label(o.from_pair, o.to_pair)}: {_REASON_TEXT[o.reason]}"
            f" (would have needed {o.bytes_needed} bytes)\n"
        ).encode()  # numbers and fixed words only

    def omitted_block(self, entries: Sequence[bytes], newest: _Newest) -> bytes:
        if not entries:
            return self._NOTHING
        return self._NOT_INCLUDED + newest.note() + b"".join(entries)

    def omitted_block_size(self, count: int, entry_bytes: int, newest: _Newest) -> int:
        if not count:
            return len(self._NOTHING)
        return len(self._NOT_INCLUDED) + len(newest.note()) + entry_bytes

    def after(self, ctx: _Meta) -> bytes:
        lines = [""]
        if ctx.stale:
            lines.append("## Stale summaries (not used: they no longer match the messages)")
            lines += [f"- {_pairs_label(s.from_pair, s.to_pair)}: {s.reason}" for s in ctx.stale]
            lines.append("")
        lines.append("## Earlier exchanges, oldest first")
        return visible("\n".join(lines) + "\n").encode("utf-8")

    def item(self, item: HistoryItem) -> bytes:
        if isinstance(item, RawPair):
            out = [
                f"\n### {_pairs_label(item.index, item.index)}",
                f"[user {item.user.id}]",
                item.user.text,
                f"[assistant {item.assistant.id}]",
                item.assistant.text,
            ]
        elif isinstance(item, SummaryCandidate):
            out = [
                f"\n### {_pairs_label(item.from_pair, item.to_pair)}:"
                " the user's own messages, then a summary of the assistant's answers",
            ]
            for said in item.user_messages:
                out += [f"[user {said.id}]", said.text]
            out += [
                f"[summary of the assistant's answers ({item.prompt_version});"
                " not the user's words]",
                item.assistant_summary,
            ]
        else:
            out = [
                f"\n### {_pairs_label(item.from_pair, item.to_pair)}: the user's own messages;"
                f" answers cut to {item.answer_bytes} bytes",
            ]
            for p in item.pairs:
                note = (
                    f" ({p.assistant.clipped_bytes} more bytes not shown)"
                    if p.assistant.clipped_bytes
                    else ""
                )
                out += [
                    f"[user {p.user.id}]",
                    p.user.text,
                    f"[assistant {p.assistant.id}]{note}",
                    p.assistant.text,
                ]
        return visible("\n".join(out) + "\n").encode("utf-8")

    def tail(self) -> bytes:
        return b""


_SERIALISERS: dict[ContextFormat, _Serialiser] = {
    ContextFormat.JSON: _Json(),
    ContextFormat.TEXT: _Text(),
}


# -- assembly --------------------------------------------------------------------------------


# A word of a spaced number: it holds an ASCII digit and no letters, or its letters and digits
# are one short group (`GB29`, `3M02`, `1Z`) or an ordinal (`24th,`). A long code with letters
# (`INV-2025-08-44719`) is whole on its own and joins nothing.
_GROUP = re.compile(r"[A-Za-z0-9]{1,4}")
_ORDINAL = re.compile(r"[0-9]+(?:st|nd|rd|th)")
_TOKEN_END = re.compile(r"\S*")
_DIGIT = re.compile(r"[0-9]")
_LETTER = re.compile(r"[^\W\d_]")
_GROUP_REACH = 8  # an IBAN in groups: its first group is at most 8 groups before any other


def _core(word: str) -> str:
    """`word` without the punctuation around it: `(415)` -> `415`, `24th,` -> `24th`."""
    start, end = 0, len(word)
    while start < end and not word[start].isalnum():
        start += 1
    while end > start and not word[end - 1].isalnum():
        end -= 1
    return word[start:end]


def _number_part(word: str) -> bool:
    """True for a word that may be one part of a spaced number, date, IBAN or amount."""
    if _DIGIT.search(word) is None:
        return False
    if _LETTER.search(word) is None:
        return True
    core = _core(word)
    return _GROUP.fullmatch(core) is not None or _ORDINAL.fullmatch(core) is not None


def _word_start(text: str, end: int) -> int:
    """Start of the word (run of non-whitespace) that ends at `end`."""
    start = end
    while start > 0 and not text[start - 1].isspace():
        start -= 1
    return start


def _words_before(text: str, end: int) -> Iterator[str]:
    """The words ending at `end` and before it, leftwards, while one ASCII space joins them."""
    while end > 0:
        start = _word_start(text, end)
        yield text[start:end]
        if start < 2 or text[start - 1] != " " or text[start - 2].isspace():
            return
        end = start - 1


def _joined(text: str, left_start: int, left_end: int, right: str) -> bool:
    """True when the words around the single space at `left_end` may be one identifier.

    Every built-in identifier kind that holds spaces (`default_rules().spaced_kinds`, derived
    from the kinds' definitions; tests/test_context_clip.py runs each one's examples through
    clip_answer) joins its words with one ASCII space, and each such space has a number part
    (`_number_part`) on one side, except inside `20th of September` and between letter groups
    of an IBAN or UPS number (`QA58 DOHB ... 90AB CDEF G`), whose first group holds digits.
    """
    left = text[left_start:left_end]
    if _number_part(left) or _number_part(right):
        return True
    if left == "of":
        words = _words_before(text, left_end)
        next(words)
        if _number_part(next(words, "")):
            return True
    if _GROUP.fullmatch(_core(right)) is None:
        return False
    for word in itertools.islice(_words_before(text, left_end), _GROUP_REACH):
        if _GROUP.fullmatch(_core(word)) is None:
            return False
        if _number_part(word):
            return True
    return False


def _unsplit_cut(text: str, cut: int) -> int:
    """`cut` (the end of a word) moved back until it splits no spaced number.

    While one ASCII space follows the cut and the words on both sides of it may be one
    identifier (`_joined`), the cut moves back to before the word on its left.
    """
    if not (0 < cut < len(text) - 1 and text[cut] == " " and not text[cut + 1].isspace()):
        return cut
    right_end = _TOKEN_END.match(text, cut + 1).end()  # type: ignore[union-attr]
    if _DIGIT.search(text, 0, right_end) is None:
        return cut  # every joined run holds a digit: none up to the word after the cut
    while 0 < cut < len(text) - 1 and text[cut] == " " and not text[cut + 1].isspace():
        start = _word_start(text, cut)
        right_end = _TOKEN_END.match(text, cut + 1).end()  # type: ignore[union-attr]
        if not _joined(text, start, cut, text[cut + 1 : right_end]):
            break
        cut = start
        while cut > 0 and text[cut - 1].isspace():
            cut -= 1
    return cut


def clip_answer(message_id: str, text: str, limit: int) -> ClippedAnswer:
    """`text` cut to at most `limit` UTF-8 bytes at whitespace, splitting no identifier.

    The cut falls only at whitespace, so no word (a run of non-whitespace characters) is
    ever split, and never at a single ASCII space inside a spaced number, date, amount or
    IBAN: a space with a number part on either side (a word that holds an ASCII digit and
    either no letters, or letters and digits that are one group of at most 4, or an ordinal:
    `+1 415 555 0100`, `July 24th, 2024`, `144.2 MB`, `10:30 am`, `DE89 3704`), the space
    after `of` in `20th of September`, and a space between two groups of at most 4 letters or
    digits that follow such a number part within 8 groups (`90AB CDEF G`). The cut then moves
    back to before the whole run, so no identifier of a built-in kind is split (those that
    hold spaces: `default_rules().spaced_kinds`); a user-defined kind whose values hold spaces
    elsewhere may be. An answer that is such a run from its start is left out whole (empty
    text, every byte in `clipped_bytes`).
    """
    raw = text.encode("utf-8")
    if len(raw) <= limit:
        return ClippedAnswer(message_id, text, 0)
    head = raw[:limit].decode("utf-8", errors="ignore")
    # Cut back to the last whitespace: a half identifier is worse than none (seed 003).
    if not head[-1:].isspace() and not text[len(head) : len(head) + 1].isspace():
        cut = len(head)
        while cut > 0 and not head[cut - 1].isspace():
            cut -= 1
        head = head[:cut]
    head = text[: _unsplit_cut(text, len(head.rstrip()))]
    return ClippedAnswer(message_id, head, len(raw) - len(head.encode("utf-8")))


@dataclass(slots=True)
class _Unit:
    """One thing to place: a raw tail pair or a 10-pair segment, with its forms in order."""

    from_pair: int
    to_pair: int
    forms: list[list[tuple[HistoryItem, int]]]  # each form: items with their byte sizes
    reason: OmissionReason  # reported when no form fits
    needed: int  # bytes of the smallest form, separators included
    chosen: list[tuple[HistoryItem, int]] | None = None


class _Omitted:
    """The omitted units (in pair order) as coalesced ranges, with their serialised size.

    Neighbouring omitted units with the same reason form one entry. Units only ever leave this
    set (when placed), so an entry only ever splits; each split costs O(log n) plus two small
    renders, which keeps assembly fast on conversations with hundreds of pairs.
    """

    def __init__(self, units: Sequence[_Unit], ser: _Serialiser, newest: _Newest) -> None:
        self.units = units
        self.ser = ser
        # Every unit starts omitted: the newest pairs' units are the raw_too_big ones.
        self.newest = replace(
            newest, omitted=sum(u.reason == OmissionReason.RAW_TOO_BIG for u in units)
        )
        self.prefix = [0]
        for u in units:
            self.prefix.append(self.prefix[-1] + u.needed)
        self.starts: list[int] = []
        self.ends: dict[int, int] = {}
        self.sizes: dict[int, int] = {}
        for i, u in enumerate(units):
            if self.starts and units[self.starts[-1]].reason == u.reason:
                self.ends[self.starts[-1]] = i
            else:
                self.starts.append(i)
                self.ends[i] = i
        for start in self.starts:
            self.sizes[start] = self._entry_size(start, self.ends[start])
        self.count = len(self.starts)
        self.entry_bytes = sum(self.sizes.values())

    def entry(self, start: int, end: int) -> Omission:
        """The omission record for units start..end."""
        return Omission(
            self.units[start].from_pair,
            self.units[end].to_pair,
            self.units[start].reason,
            self.prefix[end + 1] - self.prefix[start],
        )

    def _entry_size(self, start: int, end: int) -> int:
        return len(self.ser.omission(self.entry(start, end)))

    def block_size(
        self,
        count: int | None = None,
        entry_bytes: int | None = None,
        newest: _Newest | None = None,
    ) -> int:
        """Bytes of the serialised omission block (now, or for the given entries)."""
        return self.ser.omitted_block_size(
            self.count if count is None else count,
            self.entry_bytes if entry_bytes is None else entry_bytes,
            self.newest if newest is None else newest,
        )

    def _newest_without(self, ui: int) -> _Newest:
        if self.units[ui].reason != OmissionReason.RAW_TOO_BIG:
            return self.newest
        return replace(self.newest, omitted=self.newest.omitted - 1)

    def without(self, ui: int) -> tuple[int, tuple[int, int, list[tuple[int, int, int]]]]:
        """The block size if unit `ui` were placed, and the split that would do it."""
        start = self.starts[bisect_right(self.starts, ui) - 1]
        end = self.ends[start]
        parts = [
            (a, b, self._entry_size(a, b)) for a, b in ((start, ui - 1), (ui + 1, end)) if a <= b
        ]
        count = self.count - 1 + len(parts)
        entry_bytes = self.entry_bytes - self.sizes[start] + sum(size for _, _, size in parts)
        return self.block_size(count, entry_bytes, self._newest_without(ui)), (ui, start, parts)

    def remove(self, split: tuple[int, int, list[tuple[int, int, int]]]) -> None:
        """Apply a split returned by `without`."""
        ui, start, parts = split
        self.newest = self._newest_without(ui)
        self.starts.remove(start)
        self.entry_bytes -= self.sizes.pop(start)
        del self.ends[start]
        self.count -= 1
        for a, b, size in parts:
            insort(self.starts, a)
            self.ends[a] = b
            self.sizes[a] = size
            self.entry_bytes += size
            self.count += 1

    def entries(self) -> list[Omission]:
        """The omitted ranges, in pair order."""
        return [self.entry(start, self.ends[start]) for start in self.starts]


def _said_of(pair: Pair) -> tuple[Said, Said]:
    return Said(pair.user.id, pair.user.text), Said(pair.assistant.id, pair.assistant.text)


def _projection(pairs: Sequence[Pair], answer_bytes: int) -> Projection:
    return Projection(
        from_pair=pairs[0].index,
        to_pair=pairs[-1].index,
        pairs=tuple(
            ProjectedPair(
                p.index,
                Said(p.user.id, p.user.text),
                clip_answer(p.assistant.id, p.assistant.text, answer_bytes),
            )
            for p in pairs
        ),
        answer_bytes=answer_bytes,
    )


# The sidecar: whether the conversation exists and whether any user message's scan ran out
# of time, then its identifiers in the order they were typed.
_SIDECAR_HEAD_SQL = """
SELECT (SELECT count(*) FROM conversations WHERE id = $1),
       (SELECT count(*) FROM identifier_scans WHERE conversation_id = $1 AND NOT complete)
"""
_SIDECAR_SQL = """
SELECT i.kind, i.value
FROM identifiers i JOIN messages m ON m.id = i.message_id
WHERE i.conversation_id = $1 AND m.conversation_id = $1
ORDER BY m.position, i.span_start
"""
# The same rows without the join: ordered in Python by the positions the pairs query read.
_SIDECAR_PLAIN_SQL = """
SELECT kind, value, message_id, span_start FROM identifiers WHERE conversation_id = $1
"""


def _load(
    store: Store, conversation_id: str, positions: dict[str, int]
) -> tuple[list[PinnedIdentifier], bool]:
    """The sidecar block of one conversation (refuses an unknown conversation).

    `positions` are the conversation's user messages (`pairs_and_user_positions`); the
    sidecar only holds identifiers of user_text messages, so the join with messages is needed
    only for one whose role is not user (possible in hand-written lexkeep JSONL).
    """
    known, incomplete = store.con.execute(_SIDECAR_HEAD_SQL, [conversation_id]).fetchone()
    if not known:
        raise NotFoundError(
            f"no conversation {conversation_id!r} in the store",
            **unknown_conversation_hint(store.con),
        )
    rows = store.con.execute(_SIDECAR_PLAIN_SQL, [conversation_id]).fetchall()
    if all(row[2] in positions for row in rows):
        rows.sort(key=lambda row: (positions[row[2]], row[3]))
        found: Iterable[tuple] = rows
    else:
        found = store.con.execute(_SIDECAR_SQL, [conversation_id]).fetchall()
    pinned: dict[str, PinnedIdentifier] = {}
    for kind, value, *_ in found:
        if value not in pinned:
            pinned[value] = PinnedIdentifier(kind, value)
    return list(pinned.values()), incomplete == 0


def _summaries(
    store: Store, conversation_id: str, pairs: list[Pair], segments: list[tuple[int, int]]
) -> tuple[dict[int, CompletedSummary], list[StaleSummary]]:
    """Valid summaries by from_pair, and the completed ones that are not valid (stale).

    One query fetches every completed summary of the conversation. A summary that is plainly
    valid (a consumable prompt version bound to the digest recomputed now from the current
    pairs) is taken directly; every other range with a completed summary is decided by
    `jobs.valid_summary`, which also words the reason. Both apply the same rule, and a test
    checks they agree; this keeps a 500-pair conversation to a handful of queries.
    """
    rows = store.con.execute(
        "SELECT id, from_pair, to_pair, summary, prompt_version, model_id, source_digest, "
        "completed_at FROM compactions WHERE conversation_id = ? AND status = 'completed'",
        [conversation_id],
    ).fetchall()
    by_start: dict[int, list[tuple]] = {}
    for row in rows:
        by_start.setdefault(row[1], []).append(row)
    valid: dict[int, CompletedSummary] = {}
    stale: list[StaleSummary] = []
    for start, end in segments:
        found = by_start.get(start)
        if not found:
            continue
        digest = source_digest(pairs[start : end + 1])
        usable = [
            r for r in found if r[2] == end and r[4] in CONSUMABLE_VERSIONS and r[6] == digest
        ]
        if usable:
            # The same preference as jobs.valid_summary: current version first, then newest.
            best = min(usable, key=lambda r: (CONSUMABLE_VERSIONS.index(r[4]), -r[7]))
            job_id, _, _, text, version, model_id, bound, completed_at = best
            valid[start] = CompletedSummary(
                job_id, conversation_id, start, end, text, version, model_id, bound, completed_at
            )
            continue
        summary, reason = valid_summary(store.con, conversation_id, start, pairs[start : end + 1])
        if summary is not None:
            valid[start] = summary
        else:
            stale.append(StaleSummary(start, end, reason))
    return valid, stale


def _check_bytes(name: str, value: object, least: int) -> None:
    # The output names both numbers in JSON: beyond 64 bits no JSON writer (nor most readers)
    # takes them, and no output is that large anyway.
    if not isinstance(value, int) or isinstance(value, bool) or not least <= value <= MAX_BYTES:
        raise ConfigError(
            f"{name} must be a whole number of bytes from {least} to {MAX_BYTES}, got {value!r}",
            wording="context.bytes",
            fields={
                "flag": "--" + name.replace("_", "-"),
                "least": least,
                "most": MAX_BYTES,
                "value": repr(value),
            },
        )


def build_context(
    store: Store,
    conversation_id: str,
    budget_bytes: int,
    *,
    format: ContextFormat | str = ContextFormat.JSON,
    answer_bytes: int = DEFAULT_ANSWER_BYTES,
) -> NextRunContext:
    """Assemble the next-run context of a conversation within `budget_bytes` of output.

    Raises BudgetError when even the pinned sidecar and the list of what is omitted do not fit.
    """
    try:
        fmt = ContextFormat(format)
    except ValueError as exc:
        raise ConfigError(f"unknown context format {format!r} (json or text)") from exc
    _check_bytes("budget_bytes", budget_bytes, 1)
    _check_bytes("answer_bytes", answer_bytes, 0)
    ser = _SERIALISERS[fmt]

    pairs, positions = pairs_and_user_positions(store.con, conversation_id)
    pinned, sidecar_complete = _load(store, conversation_id, positions)
    segments = plan_segments(len(pairs))
    valid, stale = _summaries(store, conversation_id, pairs, segments)
    meta = _Meta(
        conversation_id, budget_bytes, tuple(pinned), sidecar_complete, tuple(stale), len(pairs)
    )

    def sized(items: Sequence[HistoryItem]) -> list[tuple[HistoryItem, int]]:
        return [(item, len(ser.item(item))) for item in items]

    sep = len(ser.separator)

    def unit(start: int, end: int, forms: list, reason: OmissionReason) -> _Unit:
        needed = min(sum(size + sep for _, size in form) for form in forms)
        return _Unit(start, end, forms, reason, needed)

    # Units in pair order; placement goes newest first (tail pairs, then segments).
    units: list[_Unit] = []
    for start, end in segments:
        seg = pairs[start : end + 1]
        projection = sized([_projection(seg, answer_bytes)])
        summary = valid.get(start)
        if summary is not None:
            candidate = SummaryCandidate(
                start,
                end,
                tuple(Said(p.user.id, p.user.text) for p in seg),
                summary.text,
                summary.job_id,
                summary.prompt_version,
            )
            units.append(
                unit(
                    start,
                    end,
                    [sized([candidate]), projection],
                    OmissionReason.SUMMARY_AND_PROJECTION_TOO_BIG,
                )
            )
        else:
            raw = sized([RawPair(p.index, *_said_of(p)) for p in seg])
            units.append(
                unit(start, end, [raw, projection], OmissionReason.RAW_AND_PROJECTION_TOO_BIG)
            )
    n_segments = len(units)
    for p in pairs[n_segments * 10 :]:
        raw = sized([RawPair(p.index, *_said_of(p))])
        units.append(unit(p.index, p.index, [raw], OmissionReason.RAW_TOO_BIG))

    omitted = _Omitted(units, ser, _Newest(n_segments * 10, len(pairs) - 1))
    frame = len(ser.before(meta)) + len(ser.after(meta)) + len(ser.tail())

    def total(items_bytes: int, items_count: int, block: int) -> int:
        joins = sep * (items_count - 1) if items_count else 0
        return frame + block + items_bytes + joins

    floor = total(0, 0, omitted.block_size())
    if floor > budget_bytes:
        # The output names its budget: the smallest budget that works must fit its own digits.
        while True:
            at = replace(meta, budget_bytes=floor)
            need = len(ser.before(at)) + len(ser.after(at)) + len(ser.tail())
            need += omitted.block_size()
            if need <= floor:
                break
            floor = need
        raise BudgetError(
            f"a budget of {budget_bytes} bytes is too small for conversation"
            f" {conversation_id}: the pinned identifier sidecar ({len(pinned)}"
            f" identifier{'' if len(pinned) == 1 else 's'})"
            f" and the list of what is omitted alone need {floor} bytes",
            hint=f"pass budget_bytes={floor} or more",
            wording="context.budget",
            fields={"floor": floor},
        )

    items_bytes = 0
    items_count = 0
    order = [*range(len(units) - 1, n_segments - 1, -1), *range(n_segments - 1, -1, -1)]
    for ui in order:
        block, split = omitted.without(ui)
        for form in units[ui].forms:
            add_bytes = sum(size for _, size in form)
            if total(items_bytes + add_bytes, items_count + len(form), block) <= budget_bytes:
                units[ui].chosen = form
                items_bytes += add_bytes
                items_count += len(form)
                omitted.remove(split)
                break

    history = [item for u in units if u.chosen for item, _ in u.chosen]
    omissions = omitted.entries()
    rendered = _render(ser, meta, omissions, omitted.newest, history)
    # The sizes above are exact; this guards the promise itself, should they ever drift.
    if len(rendered) > budget_bytes:  # pragma: no cover - would be a bug in the accounting
        raise AssertionError(f"context of {len(rendered)} bytes exceeds {budget_bytes}")
    return NextRunContext(
        conversation_id=conversation_id,
        budget_bytes=budget_bytes,
        format=fmt,
        pinned=tuple(pinned),
        sidecar_complete=sidecar_complete,
        history=tuple(history),
        omitted=tuple(omissions),
        stale=tuple(stale),
        pairs_total=len(pairs),
        output=rendered.decode("utf-8"),
    )
