"""Identifier extraction: exact spans of identifier-shaped tokens in user text.

Pipeline per text: a cheap candidate pass (keyword substrings and "has an ASCII digit", computed
once) decides which kinds run at all; each remaining kind runs its bounded pattern under one
shared time budget; each match is trimmed, checked (composition, validators, deny/allow lists,
context gate); then every candidate, suppressors included, competes for its span by priority,
then length, and a claimed span is exclusive. Values are never normalised: text[start:end] is
the value.
"""

from __future__ import annotations

import ipaddress
import time
from collections.abc import Iterator

import regex

from lexkeep.core.model import Extraction, Identifier
from lexkeep.core.rules import Kind, RuleSet, default_rules

__all__ = ["extract", "passes_prefilter", "scan_kind"]

_DIGIT = regex.compile(r"[0-9]")
_WORD = regex.compile(r"[\p{L}\p{N}]+")
# Sentence punctuation, closing quotes and markdown emphasis never end an identifier.
_TRAILING = frozenset(".,;:!?…'\"’”»`*~")
_CLOSERS = {")": "(", "]": "[", "}": "{", ">": "<"}
_EXT = regex.compile(r"\.[A-Za-z][A-Za-z0-9]{0,7}\Z")
_HEX_COLOUR = regex.compile(r"#(?:[0-9a-fA-F]{3}|[0-9a-fA-F]{4}|[0-9a-fA-F]{6}|[0-9a-fA-F]{8})\Z")
_SEQUENCES = (
    "0123456789",
    "9876543210",
    "ABCDEFGHIJKLMNOPQRSTUVWXYZ",
    "abcdefghijklmnopqrstuvwxyz",
)


def extract(text: str, rules: RuleSet | None = None) -> Extraction:
    """Identifiers in `text`, exact spans sorted by start; complete=False if the budget ran out."""
    rules = rules or default_rules()
    complete = True
    if len(text) > rules.max_chars:
        text = text[: rules.max_chars]
        complete = False
    if not text:
        return Extraction((), complete)
    lower = text.lower()
    has_digit = _DIGIT.search(text) is not None
    deadline = time.perf_counter() + rules.timeout
    candidates: list[tuple[int, int, int, int, str, bool]] = []
    for kind in rules.kinds:
        if kind.prefilter_digit and not has_digit:
            continue
        if kind.keywords and not any(word in lower for word in kind.keywords):
            continue
        remaining = deadline - time.perf_counter()
        if remaining <= 0:
            complete = False
            break
        try:
            for start, end, _value, claim_only in scan_kind(kind, text, remaining, rules):
                report = not (claim_only or kind.suppressor)
                candidates.append((-kind.priority, start - end, start, end, kind.id, report))
        except TimeoutError:
            complete = False
            break
    return Extraction(_resolve(text, candidates), complete)


def passes_prefilter(kind: Kind, text: str) -> bool:
    """True when the cheap candidate pass lets `kind` run on `text`."""
    if kind.prefilter_digit and _DIGIT.search(text) is None:
        return False
    if kind.keywords:
        lower = text.lower()
        return any(word in lower for word in kind.keywords)
    return True


def scan_kind(
    kind: Kind, text: str, timeout: float, rules: RuleSet | None = None
) -> Iterator[tuple[int, int, str, bool]]:
    """Checked matches of one kind: (start, end, value, claim_only); may raise TimeoutError.

    claim_only marks a match that holds its span without being reported (a deny-listed word
    or an allowlisted value): nothing else may be reported inside it either.
    """
    allow = rules.allowlist if rules is not None else frozenset()
    for match in kind.pattern.finditer(text, timeout=timeout):
        start, end = match.span(kind.group)
        if start < 0:
            continue
        if kind.trim:
            end = _trim(text, start, end)
        if end <= start:
            continue
        value = text[start:end]
        if kind.require and not _composition_ok(value, kind.require):
            continue
        if kind.validators and not _validators_ok(value, kind.validators):
            continue
        if kind.context is not None and not _context_ok(text, start, kind):
            continue
        claim_only = value in kind.deny or value in kind.allow or value in allow
        yield start, end, value, claim_only


def _resolve(
    text: str, candidates: list[tuple[int, int, int, int, str, bool]]
) -> tuple[Identifier, ...]:
    # Priority first, then the longer span, then the earlier one. A bitmap of claimed
    # characters keeps this linear; checking against every accepted span goes quadratic.
    candidates.sort()
    claimed = bytearray(len(text))
    found = []
    for _neg_priority, _neg_length, start, end, kind_id, report in candidates:
        if claimed.find(1, start, end) != -1:
            continue
        claimed[start:end] = b"\x01" * (end - start)
        if report:
            found.append(Identifier(kind_id, text[start:end], start, end))
    found.sort(key=lambda ident: ident.start)
    return tuple(found)


def _trim(text: str, start: int, end: int) -> int:
    """Drop trailing sentence punctuation, closing quotes and unbalanced closing brackets."""
    while end > start:
        char = text[end - 1]
        if char in _TRAILING:
            end -= 1
            continue
        opener = _CLOSERS.get(char)
        if opener is not None:
            span = text[start:end]
            if span.count(char) > span.count(opener):
                end -= 1
                continue
        break
    return end


def _composition_ok(value: str, require: tuple[str, ...]) -> bool:
    for need in require:
        if need == "digit" and not any("0" <= c <= "9" for c in value):
            return False
        if need == "letter" and not any(c.isalpha() for c in value):
            return False
        if need == "upper" and not any(c.isupper() for c in value):
            return False
        if need == "lower" and not any(c.islower() for c in value):
            return False
        if need == "hexletter" and not any(c in "abcdefABCDEF" for c in value):
            return False
    return True


def _validators_ok(value: str, validators: tuple[str, ...]) -> bool:
    for name in validators:
        if name == "ipv6" and not _is_ipv6(value):
            return False
        if name == "path" and not _is_path(value):
            return False
        if name == "not_css_colour" and _HEX_COLOUR.match(value) and not value[1:].isdigit():
            return False
        if name == "not_repeated" and _is_degenerate(value):
            return False
    return True


def _is_ipv6(value: str) -> bool:
    address = value.split("%", 1)[0]
    # Needs a hex letter, '::' or 7 colons: keeps clock times like 12:30:45 out.
    if not (
        "::" in address or address.count(":") >= 7 or any(c in "abcdefABCDEF" for c in address)
    ):
        return False
    if not any(c.isalnum() for c in address):
        return False
    try:
        ipaddress.IPv6Address(address)
    except ValueError:
        return False
    return True


def _is_path(value: str) -> bool:
    body = value.lstrip("~.")
    segments = [s for s in regex.split(r"[/\\]", body) if s]
    if len(segments) >= 2:
        return True
    return bool(segments) and _EXT.search(segments[-1]) is not None


def _is_degenerate(value: str) -> bool:
    """All one character, or a straight run like 123456 / ABCDEF: placeholders, not ids."""
    if len(set(value)) == 1:
        return True
    return any(value in seq for seq in _SEQUENCES)


def _context_ok(text: str, start: int, kind: Kind) -> bool:
    ctx = kind.context
    assert ctx is not None
    before = text[max(0, start - 24 * ctx.window) : start]
    words = _WORD.findall(before)[-ctx.window :]
    window = f" {' '.join(words).lower()} "
    hit = any(f" {word} " in window for word in ctx.words)
    return hit if ctx.mode == "require" else not hit
