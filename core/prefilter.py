"""Kind selection in one compiled pass: which kinds could match a text at all.

Asking each kind in turn whether a text holds its keywords and its gate costs a few Python
calls per kind per text, which on short chat messages costs more than the patterns do. When
the optional Hyperscan engine is installed, every kind's necessary conditions (its gate, else
its keywords, window keywords and "has an ASCII digit"; a required context word; and, for
some built-in patterns, where a match can begin: _TOKEN_STARTS) are compiled once into one
database (plain text is scanned with one that leaves out the gates those start conditions
imply: _IMPLIED_GATES). One scan of a text reports all of them, and only the kinds whose
conditions all hold run their `regex` pattern. The conditions are the ones the ordinary path
checks (the rule loader verifies them against every positive example), or hold wherever the
pattern matches, so the spans found are exactly the same.

Plain ASCII text is scanned as it is. Any other text is scanned with each non-ASCII
character read as '?' (one byte per character, so offsets stay character offsets), and the
conditions such a character could satisfy differently are not asked for there: Unicode-aware
classes, '.', negated classes, non-ASCII literals, and case-folded words holding 'i' or 'k'
(the only ASCII letters a non-ASCII character lower-cases to). A condition Hyperscan does not
compile is treated as holding. LEXKEEP_PREFILTER=off disables the selector.
"""

from __future__ import annotations

import hashlib
import os
import platform
import re
import threading
import unicodedata
import warnings
from itertools import compress
from typing import Any

import orjson
import regex

from lexkeep.core.errors import SettingsWarning
from lexkeep.core.rules import PLAIN_TEXT, RuleSet, cache_dir

try:  # optional accelerator: results are identical without it, only slower
    import hyperscan as _hs
except ImportError:  # pragma: no cover - depends on the platform's wheels
    _hs = None

__all__ = ["Scanner", "Selector", "available", "scanner", "selector"]

# Plain text: both engines agree on every character (Python's \s also matches \x1c-\x1f).
_PLAIN = PLAIN_TEXT
_SPACES = bytes.maketrans(b"\x0b\x0c\x1c\x1d\x1e\x1f", b"      ")
_UNICODE_AWARE = re.compile(rb"\\[wWdDsSbB]|[^\x00-\x7f]|\[\^|(?<!\\)\.|\(\?[a-z]*i")
# What a neutral non-ASCII character is scanned as (see Selector._neutral): a byte no
# condition names, that white space, word and digit classes leave out, and that '.' and
# negated classes match.
NEUTRAL = "\x01"
# The regex engine's own view: a character it reads as a letter, digit or space is not neutral
# (its Unicode database may be newer than Python's).
_REGEX_WORDISH = regex.compile(r"[\p{L}\p{N}\s_]")
_DIGIT_ID = 0  # expression id of "has an ASCII digit"; kind i's conditions are 4i+1 .. 4i+4
_MEMO_LIMIT = 4096
REACH = 24  # characters; identifiers.WINDOW, the trigger windows' reach


# Where a match can begin, for built-in patterns whose gates also hold inside URLs, paths
# and hashes where the pattern itself never starts (its look-behind refuses a letter, '/' or
# '.' before it): the look-behind read as one character that must precede the match (or the
# start of the text), then what every match begins with. Each condition is a superset of
# the pattern's matches on plain text: a neutral character (scanned as NEUTRAL) is no
# letter, digit or space, in the patterns as in these classes. Negated classes and \s make
# them sensitive, so a text that is not plain is never asked (see _sensitive). Keyed by kind
# id with the sha256 of its pattern's source: a rule file that changes a pattern leaves its
# kind without one (tests/test_identifiers_select.py checks each still names a built-in).
_TOKEN_STARTS = {
    # Two letters, two digits, then two groups of four or 11 characters run together.
    "iban": (
        "2f5156141b8ee7db",
        r"(?:^|[^A-Za-z0-9_\-/.:@#$])[A-Za-z]{2}[0-9]{2}"
        r"(?:[ ][A-Za-z0-9]{4}[ ][A-Za-z0-9]{4}|[A-Za-z0-9]{11})",
    ),
    # Labels of [a-z0-9-] joined by '.', then a known top-level domain.
    "hostname": (
        "5911f978b1a04c51",
        r"(?:^|[^A-Za-z0-9_.@/\\\-])[a-z0-9][a-z0-9.\-]{0,600}\."
        r"(?:com|org|net|io|dev|ai|app|co|uk|us|de|fr|nl|eu|ca|au|jp|cn|in|local|internal"
        r"|corp|lan|cloud|gov|edu|example|test)",
    ),
    # A first segment and its '/' (after '@' too: `@scope/pkg/x.js`).
    "path_rel": (
        "77b7906201b523f2",
        r"(?:^|[^A-Za-z0-9_.:/~\\+\-])[A-Za-z0-9_+\-][A-Za-z0-9_.@+\-]{0,254}/",
    ),
    # A name, dotted parts, then '.' and the extension's first letter.
    "file_name": (
        "51234ddc71f3ff1f",
        r"(?:^|[^A-Za-z0-9_.\-/\\@])[A-Za-z0-9][A-Za-z0-9_.\-]{0,400}\.[a-z]",
    ),
    # After white space, a quote, a bracket or one of =:,;*: a lower-case name, '/', more.
    "branch_name": (
        "0c6f04b4f12aebef",
        r"(?:^|[\s\"'`(\[{<=:,;*])[a-z][a-z0-9._\-]{0,60}/[a-z0-9]",
    ),
    # After white space, a quote, a bracket or one of =:,;*: '~', '.' or '..', then '/' and
    # the first character of a segment.
    "path_posix": (
        "2a491122f1d73419",
        r"(?:^|[\s\"'`(\[{<=:,;*])(?:~|\.{1,2})?/[A-Za-z0-9_.@+\-\[(]",
    ),
    # The rest: the characters that may precede the match, then how every match begins.
    "hex": ("19388d469e807a23", r"(?:^|[^A-Za-z0-9_\-])(?:[0-9a-f]{7}|[0-9A-F]{7})"),
    "digit_run": ("a2c40610464f8348", r"(?:^|[^A-Za-z0-9_.,$\-/:\\])[0-9]{6}"),
    "kebab_id": ("f662afda72e3914e", r"(?:^|[^A-Za-z0-9_\-./\\])[a-z][a-z0-9]{0,39}-[a-z0-9]"),
    "date_iso": ("de226cfc93cd6602", r"(?:^|[^A-Za-z0-9_\-/.])[0-9]{4}-(?:0[1-9]|1[0-2])"),
    "dashed_number": ("684c95e7b39d6f12", r"(?:^|[^A-Za-z0-9_\-./\\:#@+$])[0-9]{1,20}-[0-9]"),
    "ipv4": (
        "2f74a88772f2f86c",
        r"(?:^|[^A-Za-z0-9_.:\-])[0-9]{1,3}\.[0-9]{1,3}\.[0-9]{1,3}\.[0-9]",
    ),
    "prefixed_token": ("c6a263da653e0473", r"(?:^|[^A-Za-z0-9_\-])[a-z]{2,12}[_\-][A-Za-z0-9]{8}"),
    # Three to five digits standing alone: neither a letter, digit or one of _.,$-/:\ before
    # them, nor a letter, digit or '_' after (the pattern's look-ahead; its other look-aheads
    # and the year test only refuse more).
    "short_number": (
        "142eec657c06e2a7",
        r"(?:^|[^A-Za-z0-9_.,$\-/:\\])[0-9]{3,5}(?:[^A-Za-z0-9_]|$)",
    ),
}

# Built-in gates that every hit of the kind's _TOKEN_STARTS condition holds a hit of (by
# kind id, the gate's source). A plain text asks the start condition: the gate then selects
# nothing more, and asking it cost a report per text (about a fifth of the scan and its
# callbacks on the benchmark dumps). Texts that are not plain, which the start conditions
# cannot be asked of, still ask the gate (Selector._wide_database).
_IMPLIED_GATES = {
    "iban": r"[A-Za-z]{2}[0-9]{2}[ ]?[A-Za-z0-9]{4}[ ]?[A-Za-z0-9]{4}",
    "hostname": (
        r"\.(?:com|org|net|io|dev|ai|app|co|uk|us|de|fr|nl|eu|ca|au|jp|cn|in|local|internal"
        r"|corp|lan|cloud|gov|edu|example|test)"
    ),
    "branch_name": r"[a-z0-9._\-]/[a-z0-9]",
    "hex": r"[0-9a-f]{7}|[0-9A-F]{7}",
    "digit_run": r"[0-9]{6}",
    "date_iso": r"[0-9]{4}-[01][0-9]",
    "dashed_number": r"[0-9]-[0-9]",
    "ipv4": r"\.[0-9]{1,3}\.[0-9]{1,3}\.",
    "prefixed_token": r"[a-z][_\-][A-Za-z0-9]{8}",
    "short_number": r"[0-9]{3}",
}


def _token_start(kind_id: str, source: str) -> str | None:
    """The _TOKEN_STARTS condition of a kind whose pattern is still the built-in one."""
    entry = _TOKEN_STARTS.get(kind_id)
    if entry is None or hashlib.sha256(source.encode()).hexdigest()[:16] != entry[0]:
        return None
    return entry[1]


def available() -> bool:
    """True when Hyperscan is importable and LEXKEEP_PREFILTER is not 'off' (or 0, false,
    no). Another value than those and on, 1, true, yes is named in a warning and left on."""
    setting = os.environ.get("LEXKEEP_PREFILTER", "").strip().lower()
    if setting in _OFF:
        return False
    if setting not in _ON and setting not in _WARNED and _started_by_user():
        _WARNED.add(setting)  # once, by the process the user started
        warnings.warn(
            f"LEXKEEP_PREFILTER={setting!r} is neither off nor on (off, 0, false, no turn the"
            " prefilter off); it stays on",
            SettingsWarning,
            stacklevel=2,
        )
    return _hs is not None


_OFF = frozenset({"off", "0", "false", "no"})
_ON = frozenset({"", "on", "1", "true", "yes"})
_WARNED: set[str] = set()


def _started_by_user() -> bool:
    """False in a worker process (its parent warns)."""
    from multiprocessing import parent_process

    return parent_process() is None


class Selector:
    """One compiled database for a rule set; `select(text)` lists the kinds worth running."""

    def __init__(self, rules: RuleSet) -> None:
        assert _hs is not None
        single = _hs.HS_FLAG_SINGLEMATCH
        caseless = single | _hs.HS_FLAG_CASELESS
        expressions: list[tuple[int, bytes, int]] = [(_DIGIT_ID, b"[0-9]", single)]
        # wanted[i]: the condition ids kind i requires (each one must be reported).
        wanted: list[list[int]] = []
        context_ids: list[int | None] = []
        implied: set[int] = set()
        for index, kind in enumerate(rules.kinds):
            ids: list[int] = []
            context_ids.append(None)
            if kind.gate:
                # The gate is the most selective condition: one callback per kind is cheaper
                # than also asking for its keywords and digits (a superset is harmless).
                expressions.append((4 * index + 1, _not_possessive(kind.gate).encode(), single))
                ids.append(4 * index + 1)
            else:
                if kind.prefilter_digit or kind.min_digits:
                    ids.append(_DIGIT_ID)
                if kind.keywords:
                    expressions.append((4 * index + 2, _any_of(kind.keywords), caseless))
                    ids.append(4 * index + 2)
                if kind.window_keywords:
                    expressions.append((4 * index + 3, _any_of(kind.window_keywords), caseless))
                    ids.append(4 * index + 3)
            start = _token_start(kind.id, kind.regex)
            if start is not None:
                # Where a match of this built-in pattern can begin (see _TOKEN_STARTS).
                ident = 4 * len(rules.kinds) + 1 + index
                expressions.append((ident, start.encode(), single))
                ids.append(ident)
                if kind.gate and kind.gate == _IMPLIED_GATES.get(kind.id):
                    implied.add(4 * index + 1)  # not asked of plain text (_IMPLIED_GATES)
            if (
                kind.context is not None
                and kind.context.mode == "require"
                and not any(len(word.split()[0]) <= 2 for word in kind.context.words)
            ):
                # A required context word (a phrase's first word) occurs somewhere in the text.
                # Not asked when one is a word of one or two letters ("by", "of"): that holds
                # in nearly every message and would cost a report per message.
                first = tuple(sorted({word.split()[0] for word in kind.context.words}))
                expressions.append((4 * index + 4, _any_of(first), caseless))
                ids.append(4 * index + 4)
                context_ids[-1] = 4 * index + 4
            wanted.append(ids)
        widths = {ident: w for ident, source, _ in expressions if (w := _width(source)) > 0}
        # Long bounded repeats are the slow part of a Hyperscan scan; unbounded ones find the
        # same hits and more (still a superset), and their first hit ends no later, so the
        # widths of the bounded forms still give safe start bounds.
        expressions = [(ident, _relaxed(source), flags) for ident, source, flags in expressions]
        # Plain text (nearly every text) is scanned without the gates its start conditions
        # imply; the database with every condition is built once a text that is not plain
        # comes (_wide_database).
        self._database, compiled = _database([e for e in expressions if e[0] not in implied])
        self._compiled = compiled
        self._expressions = expressions
        self._implied = frozenset(implied)
        self._wanted = wanted
        self._context_ids = context_ids
        self._widths = widths
        self._wide_kinds = [kind.wide for kind in rules.kinds]
        # Conditions a non-ASCII character could satisfy differently from the '?' it becomes
        # in the scanned copy of a non-ASCII text (see _scanned): not asked for there.
        self._sensitive = frozenset(
            ident for ident, source, flags in expressions if _sensitive(source, flags)
        )
        self._kinds = len(rules.kinds)
        # Per mode (sliced, wide): each kind's required conditions, its (condition, longest
        # hit + REACH) pairs for start bounds, and a memo from reported conditions to kinds.
        # `sliced`: a window of a longer text, whose context word may lie before it.
        self._modes: dict[tuple[bool, bool], tuple[list, list, dict]] = {}
        self._add_modes(compiled, wide=False)
        self._wide: Any = None
        self._wide_lock = threading.Lock()
        self._local = threading.local()
        # Non-ASCII characters conditions name (quotes, currency signs), and which conditions
        # name each; neutral characters seen so far map to NEUTRAL (see _neutral).
        literal_ids: dict[str, set[int]] = {}
        for ident, source, _ in expressions:
            for char in source.decode():
                if not char.isascii():
                    literal_ids.setdefault(char, set()).add(ident)
        self._literal_ids = {char: frozenset(ids) for char, ids in literal_ids.items()}
        self._named = (
            re.compile("[" + "".join(re.escape(c) for c in sorted(literal_ids)) + "]")
            if literal_ids
            else None
        )
        self._neutrals: dict[int, str] = {}

    def _add_modes(self, compiled: frozenset[int], *, wide: bool) -> None:
        """The modes (sliced or not) for plain text (`wide` False) or any other, from the
        conditions of the database those texts are scanned with (`compiled`)."""
        # A condition Hyperscan refused, or one the database leaves out, is treated as
        # holding (a superset).
        needs = [frozenset(i for i in ids if i in compiled) for ids in self._wanted]
        widths = self._widths
        for sliced in (False, True):
            mode_needs = []
            mode_widths = []
            for kind_wide, kind_needs, context in zip(
                self._wide_kinds, needs, self._context_ids, strict=True
            ):
                kept = kind_needs - ({context} if sliced else set())
                kept = kept - self._sensitive if wide else kept
                mode_needs.append(frozenset(kept))
                # The context word sits before the match: it bounds nothing. A wide kind
                # (rules.Kind.wide) is bounded by nothing: it runs from the text's start.
                mode_widths.append(
                    ()
                    if kind_wide
                    else tuple(
                        (ident, widths[ident] + REACH)
                        for ident in sorted(kept)
                        if ident in widths and ident != context
                    )
                )
            self._modes[sliced, wide] = (mode_needs, mode_widths, {})

    def _wide_database(self) -> Any:
        """The database with every condition, for texts that are not plain (built once)."""
        if self._wide is None:
            with self._wide_lock:
                if self._wide is None:
                    if self._implied:
                        database, compiled = _database(self._expressions)
                    else:
                        database, compiled = self._database, self._compiled
                    self._add_modes(compiled, wide=True)
                    self._wide = database
        return self._wide

    def select(self, text: str, *, sliced: bool = False) -> tuple[int, ...]:
        """Indexes (into rules.kinds) of the kinds whose conditions all hold in `text`.

        `sliced`: `text` is a window of a longer text, so a kind's context word may lie
        before it; that condition is then not asked for.
        """
        return self.select_with_ends(text, sliced=sliced)[0]

    def select_with_ends(
        self, text: str, *, sliced: bool = False
    ) -> tuple[tuple[int, ...], dict[int, int], list, bool]:
        """As select(), with the end of each condition's first hit and the kinds' bounds
        (see identifiers._extract_selected), and whether `text` is plain (rules.PLAIN_TEXT,
        or only neutral non-ASCII characters besides: see _neutral)."""
        wide = False
        dropped: frozenset[int] = frozenset()
        if _PLAIN(text) is not None:
            data = text.encode("ascii")
        elif (neutral := self._neutral(text)) is not None:
            data, dropped = neutral
        else:
            data, wide = _scanned(text), True
        if not wide:
            database = self._database
            scratch = getattr(self._local, "scratch", None)
            if scratch is None:
                scratch = self._local.scratch = _hs.Scratch(database)
        else:
            database = self._wide_database()
            scratch = getattr(self._local, "wide_scratch", None)
            if scratch is None:
                scratch = self._local.wide_scratch = _hs.Scratch(database)
        ends: dict[int, int] = {}
        database.scan(data, match_event_handler=_collect, context=ends, scratch=scratch)
        for ident in dropped:
            ends[ident] = 0  # holds, and bounds no start: its hits in `data` prove nothing
        needs, widths, memo = self._modes[sliced, wide]
        key = frozenset(ends)
        found = memo.get(key)
        if found is None:
            if len(memo) >= _MEMO_LIMIT:
                memo.clear()
            # C-level maps: a generator over every kind cost more than the scan (texts with
            # many distinct condition sets miss the memo often).
            found = memo[key] = tuple(compress(range(self._kinds), map(key.issuperset, needs)))
        return found, ends, widths, not wide

    def _neutral(self, text: str) -> tuple[bytes, frozenset[int]] | None:
        """`text` as plain bytes when each of its non-ASCII characters is neutral, with the
        conditions that cannot be asked then; None when some character is not neutral.

        A neutral character (curly quotes, dashes, bullets, emoji, ...) is assigned, and no
        letter, digit, '_' or white space. A condition that does not name it treats it
        exactly as it treats NEUTRAL (a '.' or a negated class matches both; \\w, \\s, \\d
        and other literals match neither), so it is scanned as NEUTRAL. A condition that
        names it (the quotes of quoted_token, currency signs) is not asked: it is reported as
        holding everywhere. The patterns, too, read a neutral character alike in both engines
        (rules.plain_source).
        """
        mapped = text.translate(self._neutrals)
        if not mapped.isascii():
            for char in {c for c in mapped if not c.isascii()}:
                if _is_neutral(char):
                    self._neutrals[ord(char)] = NEUTRAL
            mapped = text.translate(self._neutrals)
            if not mapped.isascii():
                return None
        if _PLAIN(mapped) is None:
            return None  # an ASCII control character that \\s reads differently
        dropped: frozenset[int] = frozenset()
        if self._named is not None and self._named.search(text) is not None:
            dropped = frozenset().union(
                *(ids for char, ids in self._literal_ids.items() if char in text)
            )
        return mapped.encode("ascii"), dropped


def _is_neutral(char: str) -> bool:
    """Punctuation or a symbol that both Unicode databases know: no letter, digit or space."""
    return (
        unicodedata.category(char)[0] in "PS"
        and not (char.isalnum() or char.isspace() or char == "_")
        and _REGEX_WORDISH.match(char) is None
    )


def _scanned(text: str) -> bytes:
    """The bytes Hyperscan scans for a text that is not plain ASCII: one byte per character,
    so offsets stay character offsets. Every non-ASCII character becomes '?', and the ASCII
    characters Python's \\s matches but Hyperscan's may not become a space."""
    return text.encode("ascii", "replace").translate(_SPACES)


def _sensitive(source: bytes, flags: int) -> bool:
    """True when a non-ASCII character, read as '?', could change whether `source` matches:
    Unicode-aware classes, '.', negated classes, non-ASCII literals, or a case-insensitive
    word with 'i' or 'k' (U+0130 and U+212A lower-case to them)."""
    if _UNICODE_AWARE.search(source.replace(b"\\\\", b"")) is not None:
        return True
    return bool(flags & _hs.HS_FLAG_CASELESS) and (b"i" in source.lower() or b"k" in source.lower())


def _collect(ident: int, _start: int, end: int, _flags: int, ends: dict[int, int]) -> None:
    ends[ident] = end  # one report per condition (SINGLEMATCH): its first hit


def _not_possessive(source: str) -> str:
    """`source` with possessive quantifiers made greedy (Hyperscan has none; it finds the
    same hits or more, so the condition stays a superset)."""
    out = []
    escaped = in_class = after_quantifier = False
    for char in source:
        if escaped:
            escaped = after_quantifier = False
        elif char == "\\":
            escaped = True
            after_quantifier = False
        elif in_class:
            in_class = char != "]"
        elif char == "+" and after_quantifier:
            after_quantifier = False
            continue  # the possessive marker after a quantifier
        elif char == "[":
            in_class = True
            after_quantifier = False
        else:
            after_quantifier = char in "}?*+"
        out.append(char)
    return "".join(out)


_REPEAT = re.compile(rb"\{([0-9]+),([0-9]+)\}")
LONG_REPEAT = 32


def _relaxed(source: bytes) -> bytes:
    """`source` with every bounded repeat {m,n} of n >= LONG_REPEAT made unbounded {m,}
    (outside character classes; escaped braces are literals and stay)."""
    out = bytearray()
    i, n = 0, len(source)
    in_class = False
    while i < n:
        char = source[i : i + 1]
        if char == b"\\":
            out += source[i : i + 2]
            i += 2
            continue
        if in_class:
            in_class = char != b"]"
        elif char == b"[":
            in_class = True
            head = b"[^" if source[i + 1 : i + 2] == b"^" else b"["
            if source[i + len(head) : i + len(head) + 1] == b"]":  # first in a class: literal
                out += head + b"]"
                i += len(head) + 1
                continue
        elif char == b"{" and (repeat := _REPEAT.match(source, i)) is not None:
            low, high = repeat.groups()
            out += b"{%s,}" % low if int(high) >= LONG_REPEAT else repeat.group(0)
            i = repeat.end()
            continue
        out += char
        i += 1
    return bytes(out)


def _width(source: bytes) -> int:
    """The longest text the stdlib-re expression `source` can match (0: unknown)."""
    try:
        low, high = re._parser.parse(source.decode()).getwidth()  # type: ignore[attr-defined]
    except Exception:  # noqa: BLE001 - an internal API: without it, no start bound
        return 0
    return high if 0 < high < 1 << 16 else 0


def _any_of(words: tuple[str, ...]) -> bytes:
    return "|".join(re.escape(word) for word in words).encode()


def _database(expressions: list[tuple[int, bytes, int]]) -> tuple[Any, frozenset[int]]:
    """The compiled database and the ids in it, from the cache when it was built before.

    Compiling a rule set's conditions takes about half a second; the result depends only on
    the expressions and the Hyperscan build, so it is kept under the cache directory
    (LEXKEEP_CACHE_DIR, as for the rules' load checks) and reused by every later process.
    """
    assert _hs is not None
    described = [[ident, source.decode(), flags] for ident, source, flags in expressions]
    key = hashlib.sha256(orjson.dumps([_hs.__version__, platform.machine(), described])).hexdigest()
    path = cache_dir() / "hyperscan" / f"{key}.db" if cache_dir() is not None else None
    if path is not None and path.is_file():
        try:
            blob = path.read_bytes()
            size = int.from_bytes(blob[:4], "big")
            compiled = frozenset(orjson.loads(blob[4 : 4 + size]))
            return _hs.loadb(blob[4 + size :], _hs.HS_MODE_BLOCK), compiled
        except Exception:  # noqa: BLE001 - a damaged or foreign cache file: compile again
            pass
    try:
        database = _compile(expressions)
    except Exception:  # noqa: BLE001 - one condition Hyperscan refuses: leave it out
        expressions = [e for e in expressions if _compiles(e[1], e[2])]
        database = _compile(expressions)
    compiled = frozenset(i for i, _, _ in expressions)
    if path is not None:
        header = orjson.dumps(sorted(compiled))
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            temp = path.with_suffix(f".{os.getpid()}.tmp")
            temp.write_bytes(len(header).to_bytes(4, "big") + header + _hs.dumpb(database))
            temp.replace(path)  # atomic: a reader sees the old file or the whole new one
        except OSError:
            pass  # a read-only home: compile each time
    return database, compiled


def _compile(expressions: list[tuple[int, bytes, int]]) -> Any:
    assert _hs is not None
    database = _hs.Database()
    database.compile(
        expressions=[source for _, source, _ in expressions],
        ids=[ident for ident, _, _ in expressions],
        flags=[flags for _, _, flags in expressions],
    )
    return database


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


class Scanner:
    """Stdlib-re conditions compiled into one database: `ends(data)` reports where each hit
    ends, for any number of texts joined into one buffer (no SINGLEMATCH)."""

    def __init__(self, conditions: tuple[tuple[str, bool], ...]) -> None:
        assert _hs is not None
        expressions = [
            (ident, _relaxed(_not_possessive(source).encode()), _hs.HS_FLAG_CASELESS * caseless)
            for ident, (source, caseless) in enumerate(conditions)
        ]
        self._database, compiled = _database(expressions)
        # A condition Hyperscan refused would be missing from the hits: not usable then.
        self.usable = len(compiled) == len(expressions)
        self._local = threading.local()

    def ends(self, data: bytes) -> list[int]:
        """The end offset of every hit of every condition in `data` (ASCII text only)."""
        scratch = getattr(self._local, "scratch", None)
        if scratch is None:
            scratch = self._local.scratch = _hs.Scratch(self._database)
        found: list[int] = []
        self._database.scan(data, match_event_handler=_append_end, context=found, scratch=scratch)
        return found


def _append_end(_ident: int, _start: int, end: int, _flags: int, found: list[int]) -> None:
    found.append(end)


_SCANNERS: dict[tuple[tuple[str, bool], ...], Scanner | None] = {}


def scanner(conditions: tuple[tuple[str, bool], ...]) -> Scanner | None:
    """A compiled Scanner for (stdlib-re source, case-insensitive) conditions, or None
    without Hyperscan or when it refuses one of them."""
    found = _SCANNERS.get(conditions, False)
    if found is not False:
        return found  # type: ignore[return-value]
    with _LOCK:
        if conditions not in _SCANNERS:
            made = Scanner(conditions) if available() and conditions else None
            _SCANNERS[conditions] = made if made is not None and made.usable else None
        return _SCANNERS[conditions]
