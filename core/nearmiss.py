"""Verbatim checks and near-miss diagnosis for identifier values.

The verbatim check never uses normalised forms: a value is *kept* in a text only when the
exact characters occur with no letter or digit directly before or after them. Only when that
fails do we compute side forms (`fold`, `skeleton`) to explain what changed: the case, the
separators, a truncation or extension, or a small edit; and for a date the user wrote in
words (`March 5, 2025`), the same calendar date written as an ISO date (`2025-03-05`). A date
typed without a year (`April 3`) means the one before or the one after the moment it was typed
(`typed_day`), or any year when that moment is unknown.
"""

from __future__ import annotations

import bisect
import calendar
import datetime
import functools
import itertools
import re
import unicodedata
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from enum import StrEnum

import regex

_DASHES = dict.fromkeys(map(ord, "\u2010\u2011\u2012\u2013\u2014\u2015\u2212\ufe63\uff0d"), "-")
_INVISIBLE = dict.fromkeys(map(ord, "\u200b\u200c\u200d\u2060\ufeff\u00ad"), None)
# Separators and sigils: space, - _ . : / \ and # + ( ) (an order's "#", a phone's "+1 (555)").
_SEPARATORS = regex.compile(r"[\s\-_.:/#\\+()]+")
# Candidate tokens in a tool argument: runs of identifier-ish characters.
_TOKEN = regex.compile(r"[\p{L}\p{N}\-_.:/#\\@+~]+")
_EDGE_PUNCT = ".,;:!?'\")]}>"
# Two or more tokens with only white space and brackets between them: one value may be
# written so in groups ("+1 (555) 010-9999", "DE89 3704 0044 0532 0130 00"). A comma, a quote
# or any other character between two tokens makes them items of a list, not groups.
# Possessive, and never from inside a token: a token not followed by a group is given up
# at once instead of being tried again from each of its characters.
_GROUPS = regex.compile(
    r"(?<![\p{L}\p{N}\-_.:/#\\@+~])[\p{L}\p{N}\-_.:/#\\@+~]++"
    r"(?:[\s()]++[\p{L}\p{N}\-_.:/#\\@+~]++)+"
)
_ASCII_GROUPS = re.compile(
    r"(?<![A-Za-z0-9\-_.:/#\\@+~])[A-Za-z0-9\-_.:/#\\@+~]++"
    r"(?:[ \t\n\v\f\r()]++[A-Za-z0-9\-_.:/#\\@+~]++)+"
)
_ASCII_DIGIT_RE = re.compile("[0-9]")
# What joins two tokens of a grouped run in ASCII text (`regex`'s \s there, and brackets).
_ASCII_GAP = re.compile(r"[ \t\n\v\f\r()]")
_ANY_DIGIT = regex.compile(r"\p{N}")
_ASCII_TOKEN = re.compile(r"[A-Za-z0-9\-_.:/#\\@+~]+")
# As bytes: deleting characters is several times faster so than with str.translate.
_ASCII_SEPARATOR_BYTES = b"-_.:/#\\+"
_ASCII_DIGIT = regex.compile(r"[0-9]")
# Places a grouped edit search visits per value and text at most (see grouped_edit_near_miss).
EDIT_STEPS = 512


class Difference(StrEnum):
    """How a found value differs from the expected one."""

    CASE = "case"  # only letter case differs
    SEPARATOR = "separator"  # separators, sigils or leading zeros differ (maybe case too)
    TRUNCATED = "truncated"  # the found value is a cut-down version
    EXTENDED = "extended"  # the found value has extra characters at one end
    EDIT = "edit"  # a small edit (Damerau-Levenshtein 1 for 6-11 chars, 2 for 12+)
    DATE = "date"  # a date typed in words, written as an ISO date (2025-03-05 for March 5, 2025)


@dataclass(frozen=True, slots=True)
class NearMiss:
    """A value close to, but not exactly, the expected one."""

    found: str
    difference: Difference
    distance: int  # edit distance between skeletons (0 for case/separator)


def fold(text: str) -> str:
    """NFKC, dash-like characters to '-', invisible characters removed, casefolded."""
    return unicodedata.normalize("NFKC", text).translate(_DASHES).translate(_INVISIBLE).casefold()


def skeleton(text: str) -> str:
    """`fold` without separators and sigils, leading zeros stripped."""
    return _SEPARATORS.sub("", fold(text)).lstrip("0")


def _is_word_char(ch: str) -> bool:
    return ch.isalpha() or ch.isdigit() or unicodedata.category(ch)[0] in "LN"


def is_kept(value: str, text: str) -> bool:
    """True when `value` occurs in `text` with no letter or digit directly before or after it."""
    if not value:
        return False
    start = text.find(value)
    while start != -1:
        end = start + len(value)
        before_ok = start == 0 or not _is_word_char(text[start - 1])
        after_ok = end == len(text) or not _is_word_char(text[end])
        if before_ok and after_ok:
            return True
        start = text.find(value, start + 1)
    return False


def edit_distance(a: str, b: str, limit: int) -> int:
    """Optimal-string-alignment distance, or `limit + 1` as soon as it must exceed `limit`."""
    if abs(len(a) - len(b)) > limit:
        return limit + 1
    prev2: list[int] = []
    prev = list(range(len(b) + 1))
    for i in range(1, len(a) + 1):
        cur = [i] + [0] * len(b)
        for j in range(1, len(b) + 1):
            cost = 0 if a[i - 1] == b[j - 1] else 1
            cur[j] = min(prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + cost)
            if i > 1 and j > 1 and a[i - 1] == b[j - 2] and a[i - 2] == b[j - 1]:
                cur[j] = min(cur[j], prev2[j - 2] + 1)
        if min(cur) > limit:
            return limit + 1
        prev2, prev = prev, cur
    return min(prev[-1], limit + 1)


def bounded_distance(a: str, b: str, limit: int) -> int:
    """`edit_distance` (optimal string alignment) for small limits, faster.

    Strips the common prefix and suffix, then tries the four edits at the first difference
    with one edit less: at most 4**limit short branches instead of a Python DP table.
    """
    if abs(len(a) - len(b)) > limit:
        return limit + 1
    n = min(len(a), len(b))
    i = 0
    while i < n and a[i] == b[i]:
        i += 1
    if i:
        a, b = a[i:], b[i:]
        n -= i
    j = 0
    while j < n and a[-1 - j] == b[-1 - j]:
        j += 1
    if j:
        a, b = a[:-j], b[:-j]
    if not a or not b:
        return min(len(a) + len(b), limit + 1)
    if limit == 0:
        return 1
    if limit == 1:
        # Both differ at their first and last character now: one edit covers that only as
        # a substitution of one character or a transposition of two (an insertion or a
        # deletion would have left one of them empty). Spares the four calls below.
        la = len(a)
        if la == len(b) and (la == 1 or (la == 2 and a[0] == b[1] and a[1] == b[0])):
            return 1
        return 2
    rest = limit - 1
    best = 1 + bounded_distance(a[1:], b[1:], rest)  # substitution
    if best > 1:
        best = min(best, 1 + bounded_distance(a[1:], b, rest))  # deletion
    if best > 1:
        best = min(best, 1 + bounded_distance(a, b[1:], rest))  # insertion
    if best > 1 and len(a) > 1 and len(b) > 1 and a[0] == b[1] and a[1] == b[0]:
        best = min(best, 1 + bounded_distance(a[2:], b[2:], rest))  # transposition
    return min(best, limit + 1)


# A date in words, as the date_text kind finds it: a month name and a day, either way round,
# maybe a year ("March 5, 2025", "Mar. 9", "20th May 2024", "3rd of Nov").
_MONTH = (
    r"(?P<{g}>jan|january|feb|february|mar|march|apr|april|may|jun|june|jul|july|aug|august"
    r"|sep|sept|september|oct|october|nov|november|dec|december)\.?"
)
_TEXTUAL_DATE = re.compile(
    r"(?:" + _MONTH.format(g="m1") + r"\s+(?P<d1>[0-9]{1,2})(?:st|nd|rd|th)?"
    r"|(?P<d2>[0-9]{1,2})(?:st|nd|rd|th)?\s+(?:of\s+)?" + _MONTH.format(g="m2") + r")"
    r"(?:,?\s+(?P<y>[0-9]{4}))?",
    re.IGNORECASE,
)
# An ISO date at the start of a token, the whole token or a timestamp's date: 2025-03-05,
# 2025-03-05T10:30:00Z (not 2025-03-05-7, a code that starts with a date).
_ISO_DATE = re.compile(r"([0-9]{4})-([0-9]{2})-([0-9]{2})(?:T[0-9][0-9:.+\-Z]*)?")


@functools.lru_cache(maxsize=4096)
def textual_date(value: str) -> tuple[int | None, int, int] | None:
    """(year or None, month, day) when all of `value` is a date written with a month name
    (`March 5, 2025`, `Sept 1`, `20th May 2024`), else None."""
    match = _TEXTUAL_DATE.fullmatch(value.strip())
    if match is None:
        return None
    name = (match["m1"] or match["m2"]).lower()[:3]
    month = _MONTHS[name]
    day = int(match["d1"] or match["d2"])
    year = int(match["y"]) if match["y"] else None
    # 2024 is a leap year: a day that no year has (April 31, February 30) is no date.
    if not 1 <= day <= calendar.monthrange(year or 2024, month)[1]:
        return None
    return year, month, day


_MONTHS = {name.lower(): i for i, name in enumerate(calendar.month_abbr) if name}


# The date a recorded time falls on: an ISO timestamp's date (2026-03-30T10:00:00Z), or the UTC
# date of a Unix time in seconds or milliseconds.
_TIME_DATE = re.compile(r"\s*([0-9]{4})-([0-9]{2})-([0-9]{2})")
_UNIX_TIME = re.compile(r"\s*([0-9]{9,10}|[0-9]{12,13})(?:\.[0-9]+)?\s*")


@functools.lru_cache(maxsize=4096)
def typed_day(time: str | None) -> datetime.date | None:
    """The day a message was typed on, from its recorded `time`; None when it has none, or one
    that is neither an ISO date or timestamp nor a Unix time."""
    if time is None:
        return None
    found = _TIME_DATE.match(time)
    try:
        if found is not None:
            return datetime.date(int(found[1]), int(found[2]), int(found[3]))
        found = _UNIX_TIME.fullmatch(time)
        if found is not None:
            seconds = int(found[1]) / (1000 if len(found[1]) > 10 else 1)
            return datetime.datetime.fromtimestamp(seconds, datetime.UTC).date()
    except (ValueError, OverflowError, OSError):
        return None
    return None


def _near_years(month: int, day: int, when: datetime.date) -> tuple[int, ...]:
    """The years of the last (month, day) on or before `when` and of the first on or after
    it: the dates `April 3`, typed on `when`, can mean (February 29 looks up to 8 years)."""
    years = []
    for step in (-1, 1):
        for n in range(9):
            year = when.year + step * n
            if day <= calendar.monthrange(year, month)[1]:
                candidate = datetime.date(year, month, day)
                if (candidate <= when) if step < 0 else (candidate >= when):
                    years.append(year)
                    break
    return tuple(years)


def date_near_miss(
    date: tuple[int | None, int, int], token: str, when: datetime.date | None = None
) -> NearMiss | None:
    """A DATE near miss when `token` is `date` written as an ISO date or timestamp, else None.

    A date typed without a year matches the ISO date of its last occurrence on or before
    `when` (the day it was typed, `typed_day`) or of its first on or after it; any year when
    `when` is None (nothing says when it was typed).
    """
    match = _ISO_DATE.fullmatch(token)
    if match is None:
        return None
    year, month, day = date
    if int(match[2]) != month or int(match[3]) != day:
        return None
    if year is not None and int(match[1]) != year:
        return None
    if year is None and when is not None and int(match[1]) not in _near_years(month, day, when):
        return None
    return NearMiss(token, Difference.DATE, 0)


def classify(expected: str, found: str, when: datetime.date | None = None) -> NearMiss | None:
    """How `found` differs from `expected`, or None when it is not a near miss (or is equal).

    `when`: the day `expected` was typed, for a date typed without a year (`date_near_miss`).
    """
    if expected == found:
        return None
    if fold(expected) == fold(found):
        return NearMiss(found, Difference.CASE, 0)
    date = textual_date(expected)
    if date is not None and (miss := date_near_miss(date, found, when)) is not None:
        return miss
    want, got = skeleton(expected), skeleton(found)
    if not want or not got:
        return None
    if want == got:
        return NearMiss(found, Difference.SEPARATOR, 0)
    if len(want) >= 4 and len(got) >= 4:
        shorter, longer = sorted((want, got), key=len)
        if len(shorter) / len(longer) >= 0.6 and (
            longer.startswith(shorter) or longer.endswith(shorter)
        ):
            kind = Difference.TRUNCATED if len(got) < len(want) else Difference.EXTENDED
            return NearMiss(found, kind, len(longer) - len(shorter))
    if len(want) >= 6:
        limit = 1 if len(want) < 12 else 2
        distance = edit_distance(want, got, limit)
        if distance <= limit:
            return NearMiss(found, Difference.EDIT, distance)
    return None


_RANK = {
    Difference.CASE: 0,
    Difference.SEPARATOR: 1,
    Difference.DATE: 1,
    Difference.TRUNCATED: 2,
    Difference.EXTENDED: 2,
    Difference.EDIT: 3,
}


# A run of grouped tokens: its text, (start, end, fold without separators) per token, those
# folds joined (a value's skeleton can only be found in a run whose join holds it), and where
# each token's part of the join starts after leading zeros (a skeleton holds none) and ends.
GroupedRun = tuple[str, tuple[tuple[int, int, str], ...], str, list[int], list[int]]


def grouped_runs(text: str) -> list[GroupedRun]:
    """Runs of two or more tokens of `text` separated only by white space and brackets (in
    ASCII text, those that hold a digit)."""
    if not text.isascii():
        return _grouped_runs(text)
    # ASCII text (most arguments): the same runs with `re` and str methods. In ASCII,
    # \p{L}\p{N} is [A-Za-z0-9], `regex`'s \s is [ \t\n\v\f\r], NFKC and the dash and
    # invisible maps change nothing, casefold() is lower(), and a token holds no white space
    # nor bracket, so its separators are -_.:/#\+.
    # A run without a digit is left out: only values with a digit are looked for in groups
    # (may_be_grouped), and a run's skeleton holds the digits of its text.
    return [ascii_grouped_run(text, start, end) for start, end in ascii_run_spans(text)]


def ascii_run_spans(text: str) -> list[tuple[int, int]]:
    """Where the runs of `grouped_runs(text)` lie, for ASCII `text` (cheaper than the runs:
    a caller may build only those it needs, with `ascii_grouped_run`)."""
    if _ASCII_GAP.search(text) is None:
        return []  # nothing can join two tokens
    has_digit = _ASCII_DIGIT_RE.search
    out = []
    for run in _ASCII_GROUPS.finditer(text):
        start, end = run.span()
        if has_digit(text, start, end) is not None:
            out.append((start, end))
    return out


def ascii_grouped_run(text: str, start: int, end: int) -> GroupedRun:
    """The GroupedRun of ASCII `text` at a span given by `ascii_run_spans`. Its join is
    text[start:end] lower-cased without white space, brackets and -_.:/#\\+."""
    raw = text[start:end].encode().lower()  # ASCII: the same offsets as the text's
    tokens = tuple(
        (a, b, raw[a - start : b - start].translate(None, _ASCII_SEPARATOR_BYTES).decode())
        for a, b in (m.span() for m in _ASCII_TOKEN.finditer(text, start, end))
    )
    return _grouped_run(text, tokens)


def _grouped_runs(text: str) -> list[GroupedRun]:
    """grouped_runs() for any text, with the `regex` patterns and `fold`."""
    # A run without a digit (\p{N}: no letter folds to an ASCII digit) is left out, as in
    # ASCII text; ASCII tokens fold as there.
    out = []
    for run in _GROUPS.finditer(text):
        start, end = run.span()
        if _ANY_DIGIT.search(text, start, end) is None:
            continue
        tokens = tuple(
            (m.start(), m.end(), _token_skeleton(m.group()))
            for m in _TOKEN.finditer(text, start, end)
        )
        out.append(_grouped_run(text, tokens))
    return out


def _token_skeleton(token: str) -> str:
    """A token's fold without separators (no leading zeros stripped)."""
    if token.isascii():
        return token.lower().encode().translate(None, _ASCII_SEPARATOR_BYTES).decode()
    return _SEPARATORS.sub("", fold(token))


def _grouped_run(text: str, tokens: tuple[tuple[int, int, str], ...]) -> GroupedRun:
    """A GroupedRun of `tokens` of `text`: their folds joined, and where each one starts and
    ends in the join."""
    joined = "".join(t[2] for t in tokens)
    ends = list(itertools.accumulate(len(t[2]) for t in tokens))
    heads = [end - len(t[2]) for t, end in zip(tokens, ends, strict=True)]
    for i, token in enumerate(tokens):
        if token[2][:1] == "0" or not token[2]:  # never decreasing: bisect finds windows
            at = heads[i]
            while at < len(joined) and joined[at] == "0":
                at += 1
            heads[i] = at
    return (text, tokens, joined, heads, ends)


def grouped_near_miss(expected: str, want: str, runs: list[GroupedRun]) -> NearMiss | None:
    """A case or separator near miss of `expected` written over two or more grouped tokens.

    `want` is skeleton(expected). A value typed as one token may be written in groups
    (`+15550109999` as `+1 (555) 010-9999`), which tokens split at spaces and brackets never
    show. Only values with an ASCII digit and 4 skeleton characters or more: words of prose
    are no groups of a value. The first case change wins, else the first separator change;
    the near miss is the grouped text as written, brackets around its groups included.
    """
    if not may_be_grouped(want):
        return None
    best: NearMiss | None = None
    for text, tokens, joined, _heads, _ends in runs:
        if want not in joined:
            continue
        for i in range(len(tokens) - 1):
            acc = tokens[i][2]
            if not acc or not want.startswith(acc.lstrip("0")):
                continue
            for j in range(i + 1, len(tokens)):
                acc += tokens[j][2]
                got = acc.lstrip("0")
                if len(got) >= len(want) or not want.startswith(got):
                    if got == want:
                        miss = classify(expected, _grouped_text(text, tokens[i][0], tokens[j][1]))
                        if miss is not None and miss.difference == Difference.CASE:
                            return miss
                        if miss is not None and best is None:
                            best = miss
                    break
    return best


def may_be_grouped(want: str) -> bool:
    """Whether a value of skeleton `want` is looked for in grouped tokens at all."""
    return len(want) >= 4 and _ASCII_DIGIT.search(want) is not None


def _grouped_text(text: str, start: int, end: int) -> str:
    """text[start:end] without edge punctuation, with a bracket it opens or closes."""
    span = text[start:end].strip(_EDGE_PUNCT)
    if span.count(")") > span.count("(") and text[start - 1 : start] == "(":
        span = "(" + span
    elif span.count("(") > span.count(")") and text[end : end + 1] == ")":
        span += ")"
    return span


def candidates(text: str) -> list[str]:
    """Identifier-like tokens of a text, edge punctuation trimmed."""
    out = []
    for match in _TOKEN.finditer(text):
        token = match.group().strip(_EDGE_PUNCT)
        if token:
            out.append(token)
    return out


def best_near_miss(
    expected: str, texts: list[str] | tuple[str, ...], when: datetime.date | None = None
) -> NearMiss | None:
    """The closest near miss of `expected` among the tokens of `texts` (case < separator < ...).

    `when`: the day `expected` was typed, for a date typed without a year (`date_near_miss`).
    """
    best: NearMiss | None = None
    want = skeleton(expected)
    want_len = len(want)
    date = textual_date(expected)
    for text in texts:
        for token in candidates(text):
            # Cheap length filter before any folding: near misses are within 0.6x-1.7x
            # (a date near miss is an ISO date or timestamp, whatever the value's length).
            if want_len and not (0.5 * want_len <= len(token) <= 2.5 * want_len + 4):
                miss = None if date is None else date_near_miss(date, token, when)
            else:
                miss = classify(expected, token, when)
            if miss is None:
                continue
            if best is None or (_RANK[miss.difference], miss.distance) < (
                _RANK[best.difference],
                best.distance,
            ):
                best = miss
                if _RANK[best.difference] == 0:
                    return best
    return with_grouped(
        best, expected, want, lambda _needles: [r for t in texts for r in grouped_runs(t)]
    )


def grouped_edit_near_miss(expected: str, want: str, runs: list[GroupedRun]) -> NearMiss | None:
    """A truncation, extension or small edit of `expected` over two or more grouped tokens.

    The same judgement as for one token (`classify`: Damerau-Levenshtein 1 for skeletons of
    6-11 characters, 2 for 12+), applied to runs of whole tokens whose joined skeleton is
    within that many characters of `want`'s length (`DE89 3704 0044 0532 0131 00` for
    `DE89 3704 0044 0532 0130 00`). Only for values at least half digits (numbers, IBANs,
    phones, codes): a word-like value with a digit is an edit away from words of prose
    (`in_progress_2`, `in progress 3`). Bounded work: a span is tried only where one of the
    2*limit+1 pieces of `want` (`edit_pieces`), one of which any such edit leaves whole,
    occurs at its place give or take `limit`, and at most EDIT_STEPS places are visited per
    value and texts (texts so full of the value's pieces that they hold more are left at
    that). The closest wins, the first in the texts on ties.
    """
    if not may_be_edited(want):
        return None
    return grouped_edit_search(expected, want, runs)


def grouped_edit_search(expected: str, want: str, runs: list[GroupedRun]) -> NearMiss | None:
    """`grouped_edit_near_miss` for a value already known to pass `may_be_edited(want)`."""
    limit = 1 if len(want) < 12 else 2
    pieces = edit_pieces(want)
    lo_len, hi_len = len(want) - limit, len(want) + limit
    best: NearMiss | None = None
    best_key = (len(_RANK), 0, 0, 0)
    steps = EDIT_STEPS
    for index, (text, tokens, joined, heads, ends) in enumerate(runs):
        if steps <= 0:
            break
        tried: set[int] = set()
        for piece, offset in pieces:
            pos = joined.find(piece)
            while pos != -1 and steps > 0:
                steps -= 1
                first = bisect.bisect_left(heads, pos - offset - limit)
                last = min(bisect.bisect_right(heads, pos - offset + limit), len(tokens) - 1)
                for i in range(first, last):
                    if i in tried or not tokens[i][2]:
                        continue
                    tried.add(i)
                    for j in range(i + 1, len(tokens)):
                        size = ends[j] - heads[i]
                        if size > hi_len:
                            break
                        if size < lo_len or not tokens[j][2]:
                            continue
                        steps -= 1
                        got = joined[heads[i] : ends[j]]
                        if bounded_distance(want, got, limit) > limit:
                            continue
                        miss = classify(expected, _grouped_text(text, tokens[i][0], tokens[j][1]))
                        if miss is None:
                            continue
                        key = (_RANK[miss.difference], miss.distance, index, tokens[i][0])
                        if key < best_key:
                            best, best_key = miss, key
                pos = joined.find(piece, pos + 1)
    return best


def may_be_edited(want: str) -> bool:
    """Whether a value of skeleton `want` is looked for as an edit over grouped tokens: 6
    skeleton characters or more, at least half of them ASCII digits."""
    return len(want) >= 6 and 2 * len(_ASCII_DIGIT.findall(want)) >= len(want)


@functools.lru_cache(maxsize=4096)
def edit_pieces(want: str) -> tuple[tuple[str, int], ...]:
    """2*limit+1 disjoint pieces of skeleton `want` with their offsets: any near miss within
    the edit limit of `want` (1 under 12 characters, else 2) holds one of them whole, at its
    offset give or take the limit (each edit touches at most two pieces)."""
    if len(want) < 6:
        return ()
    count = 3 if len(want) < 12 else 5
    size = len(want) // count
    return tuple((want[i * size : (i + 1) * size], i * size) for i in range(count))


def with_grouped(
    best: NearMiss | None,
    expected: str,
    want: str,
    runs: Callable[[Sequence[str]], list[GroupedRun]],
) -> NearMiss | None:
    """`best` (the first closest single token), or a grouped near miss that ranks before it.

    `runs(needles)` gives the grouped runs of the texts (it may leave out texts whose
    separator-free fold holds none of `needles`); it is called only when a grouped near miss
    could still win, so a caller can compute the runs lazily: first with `want` itself (a
    case or separator change), then, when nothing better than an edit was found, with the
    pieces of `want` that any truncation, extension or edit of it leaves whole.
    """
    if not may_be_grouped(want) or (
        best is not None and _RANK[best.difference] < _RANK[Difference.SEPARATOR]
    ):
        return best
    grouped = grouped_near_miss(expected, want, runs((want,)))
    if grouped is not None and (best is None or _RANK[grouped.difference] < _RANK[best.difference]):
        return grouped
    if best is not None and _RANK[best.difference] <= _RANK[Difference.TRUNCATED]:
        return best  # a grouped truncation or edit would not rank before it
    if not may_be_edited(want):
        return best  # no texts to split into runs
    pieces = [piece for piece, _offset in edit_pieces(want)]
    grouped = grouped_edit_near_miss(expected, want, runs(pieces))
    if grouped is not None and (best is None or _RANK[grouped.difference] < _RANK[best.difference]):
        return grouped
    return best
