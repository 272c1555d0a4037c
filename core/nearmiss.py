"""Verbatim checks and near-miss diagnosis for identifier values.

The verbatim check never uses normalised forms: a value is *kept* in a text only when the
exact characters occur with no letter or digit directly before or after them. Only when that
fails do we compute side forms (`fold`, `skeleton`) to explain what changed: the case, the
separators, a truncation or extension, or a small edit.
"""

from __future__ import annotations

import unicodedata
from collections.abc import Callable
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
_GROUPS = regex.compile(r"[\p{L}\p{N}\-_.:/#\\@+~]+(?:[\s()]+[\p{L}\p{N}\-_.:/#\\@+~]+)+")
_ASCII_DIGIT = regex.compile(r"[0-9]")


class Difference(StrEnum):
    """How a found value differs from the expected one."""

    CASE = "case"  # only letter case differs
    SEPARATOR = "separator"  # separators, sigils or leading zeros differ (maybe case too)
    TRUNCATED = "truncated"  # the found value is a cut-down version
    EXTENDED = "extended"  # the found value has extra characters at one end
    EDIT = "edit"  # a small edit (Damerau-Levenshtein 1 for 6-11 chars, 2 for 12+)


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


def classify(expected: str, found: str) -> NearMiss | None:
    """How `found` differs from `expected`, or None when it is not a near miss (or is equal)."""
    if expected == found:
        return None
    if fold(expected) == fold(found):
        return NearMiss(found, Difference.CASE, 0)
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
    Difference.TRUNCATED: 2,
    Difference.EXTENDED: 2,
    Difference.EDIT: 3,
}


# A run of grouped tokens: its text, (start, end, fold without separators) per token, and
# those folds joined (a value's skeleton can only be found in a run whose join holds it).
GroupedRun = tuple[str, tuple[tuple[int, int, str], ...], str]


def grouped_runs(text: str) -> list[GroupedRun]:
    """Runs of two or more tokens of `text` separated only by white space and brackets."""
    out = []
    for run in _GROUPS.finditer(text):
        tokens = tuple(
            (m.start(), m.end(), _SEPARATORS.sub("", fold(m.group())))
            for m in _TOKEN.finditer(text, run.start(), run.end())
        )
        out.append((text, tokens, "".join(t[2] for t in tokens)))
    return out


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
    for text, tokens, joined in runs:
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


def best_near_miss(expected: str, texts: list[str] | tuple[str, ...]) -> NearMiss | None:
    """The closest near miss of `expected` among the tokens of `texts` (case < separator < ...)."""
    best: NearMiss | None = None
    want = skeleton(expected)
    want_len = len(want)
    for text in texts:
        for token in candidates(text):
            # Cheap length filter before any folding: near misses are within 0.6x-1.7x.
            if want_len and not (0.5 * want_len <= len(token) <= 2.5 * want_len + 4):
                continue
            miss = classify(expected, token)
            if miss is None:
                continue
            if best is None or (_RANK[miss.difference], miss.distance) < (
                _RANK[best.difference],
                best.distance,
            ):
                best = miss
                if _RANK[best.difference] == 0:
                    return best
    return with_grouped(best, expected, want, lambda _: [r for t in texts for r in grouped_runs(t)])


def with_grouped(
    best: NearMiss | None, expected: str, want: str, runs: Callable[[str], list[GroupedRun]]
) -> NearMiss | None:
    """`best` (the first closest single token), or a grouped near miss that ranks before it.

    `runs(want)` gives the grouped runs of the texts (it may leave out texts that cannot hold
    `want`); it is called only when a grouped near miss could still win (it can only be a
    case or separator change), so a caller can compute the runs lazily.
    """
    if not may_be_grouped(want) or (
        best is not None and _RANK[best.difference] < _RANK[Difference.SEPARATOR]
    ):
        return best
    grouped = grouped_near_miss(expected, want, runs(want))
    if grouped is not None and (best is None or _RANK[grouped.difference] < _RANK[best.difference]):
        return grouped
    return best
