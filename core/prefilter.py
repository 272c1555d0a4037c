"""Kind selection in one compiled pass: which kinds could match a text at all.

Asking each kind in turn whether a text holds its keywords and its gate costs a few Python
calls per kind per text, which on short chat messages costs more than the patterns do. When
the optional Hyperscan engine is installed, every kind's necessary conditions (its gate, else
its keywords, window keywords and "has an ASCII digit"; and a required context word) are
compiled once into one database. One scan of a text reports all of them, and only the kinds
whose conditions all hold run their `regex` pattern. The conditions are the ones the
ordinary path checks (the rule loader verifies them against every positive example), so the
spans found are exactly the same.

The selector answers only for texts where both engines provably agree: plain ASCII with no
control characters other than tab, newline and carriage return (Python's \\s also matches
\\x1c-\\x1f; ASCII case folding is the same everywhere). Any other text, and any condition
Hyperscan does not compile (that condition is then treated as holding), takes the ordinary
path. LEXKEEP_PREFILTER=off disables the selector.
"""

from __future__ import annotations

import os
import re
import threading

from lexkeep.core.rules import RuleSet

try:  # optional accelerator: results are identical without it, only slower
    import hyperscan as _hs
except ImportError:  # pragma: no cover - depends on the platform's wheels
    _hs = None

__all__ = ["Selector", "available", "selector"]

_SAFE = re.compile(r"[\t\n\r\x20-\x7e]*").fullmatch
_DIGIT_ID = 0  # expression id of "has an ASCII digit"; kind i's conditions are 4i+1 .. 4i+4
_MEMO_LIMIT = 4096


def available() -> bool:
    """True when Hyperscan is importable and LEXKEEP_PREFILTER is not 'off'."""
    return _hs is not None and os.environ.get("LEXKEEP_PREFILTER", "").lower() != "off"


class Selector:
    """One compiled database for a rule set; `select(text)` lists the kinds worth running."""

    def __init__(self, rules: RuleSet) -> None:
        assert _hs is not None
        single = _hs.HS_FLAG_SINGLEMATCH
        expressions: list[tuple[int, bytes, int]] = [(_DIGIT_ID, b"[0-9]", single)]
        # needs[i]: the condition ids kind i requires (each one must be reported).
        self._needs: list[frozenset[int]] = []
        self._needs_sliced: list[frozenset[int]] = []
        for index, kind in enumerate(rules.kinds):
            wanted: list[tuple[int, bytes, int]] = []
            caseless = single | _hs.HS_FLAG_CASELESS
            if kind.gate:
                # The gate is the most selective condition: one callback per kind is cheaper
                # than also asking for its keywords and digits (a superset is harmless).
                wanted.append((4 * index + 1, kind.gate.encode(), single))
            else:
                if kind.prefilter_digit or kind.min_digits:
                    wanted.append((_DIGIT_ID, b"", 0))
                if kind.keywords:
                    wanted.append((4 * index + 2, _any_of(kind.keywords), caseless))
                if kind.window_keywords:
                    wanted.append((4 * index + 3, _any_of(kind.window_keywords), caseless))
            if kind.context is not None and kind.context.mode == "require":
                # A required context word (a phrase's first word) occurs somewhere in the text.
                first = tuple(sorted({word.split()[0] for word in kind.context.words}))
                wanted.append((4 * index + 4, _any_of(first), caseless))
            needs = set()
            context_id = None
            for ident, source, flags in wanted:
                if ident == _DIGIT_ID:
                    needs.add(_DIGIT_ID)
                elif _compiles(source, flags):
                    expressions.append((ident, source, flags))
                    needs.add(ident)
                    if ident == 4 * index + 4:
                        context_id = ident
                # A condition Hyperscan refuses is treated as holding (a superset).
            self._needs.append(frozenset(needs))
            # A slice of a longer text may not hold the context word before its match.
            self._needs_sliced.append(frozenset(needs - {context_id}))
        self._database = _hs.Database()
        self._database.compile(
            expressions=[source for _, source, _ in expressions],
            ids=[ident for ident, _, _ in expressions],
            flags=[flags for _, _, flags in expressions],
        )
        self._kinds = len(rules.kinds)
        self._memo: dict[frozenset[int], tuple[int, ...]] = {}
        self._memo_sliced: dict[frozenset[int], tuple[int, ...]] = {}
        self._local = threading.local()

    def select(self, text: str, *, sliced: bool = False) -> tuple[int, ...] | None:
        """Indexes (into rules.kinds) of the kinds whose conditions all hold in `text`, or None
        when the selector cannot answer for this text (take the ordinary path).

        `sliced`: `text` is a window of a longer text, so a kind's context word may lie
        before it; that condition is then not asked for.
        """
        if _SAFE(text) is None:
            return None
        scratch = getattr(self._local, "scratch", None)
        if scratch is None:
            scratch = self._local.scratch = _hs.Scratch(self._database)
        hits: list[int] = []
        self._database.scan(
            text.encode("ascii"), match_event_handler=_collect, context=hits, scratch=scratch
        )
        key = frozenset(hits)
        memo = self._memo_sliced if sliced else self._memo
        found = memo.get(key)
        if found is None:
            if len(memo) >= _MEMO_LIMIT:
                memo.clear()
            needs = self._needs_sliced if sliced else self._needs
            found = memo[key] = tuple(i for i in range(self._kinds) if needs[i] <= key)
        return found


def _collect(ident: int, _start: int, _end: int, _flags: int, hits: list[int]) -> None:
    hits.append(ident)


def _any_of(words: tuple[str, ...]) -> bytes:
    return "|".join(re.escape(word) for word in words).encode()


def _compiles(source: bytes, flags: int) -> bool:
    assert _hs is not None
    try:
        _hs.Database().compile(expressions=[source], ids=[1], flags=[flags])
    except Exception:  # noqa: BLE001 - any construct Hyperscan refuses: condition not used
        return False
    return True


_SELECTORS: dict[str, Selector | None] = {}
_LOCK = threading.Lock()


def selector(rules: RuleSet) -> Selector | None:
    """The rule set's selector (compiled once per process), or None without Hyperscan."""
    found = _SELECTORS.get(rules.digest, False)
    if found is not False:
        return found  # type: ignore[return-value]
    with _LOCK:
        if rules.digest not in _SELECTORS:
            _SELECTORS[rules.digest] = Selector(rules) if available() else None
        return _SELECTORS[rules.digest]
