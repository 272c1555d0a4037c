"""Identifier rule files: the built-in kinds and user TOML, merged and checked when they load.

A rule set is the built-in kinds (core/kinds.toml) extended by the user's
`[tool.lexkeep.identifiers]` table (pyproject.toml), `[identifiers]` in lexkeep.toml, or an
explicit `--rules FILE`. Every kind, built-in or not, passes the same checks before it is used:
the regex compiles without a global ignore-case flag, its positive examples are found and its
negative ones are not, each positive example passes the keyword prefilter, and the pattern
finishes the adversarial strings within the time budget. A failing rule is refused with a
RuleError naming it; nothing half-checked is ever used.

A kind that passed every check in an earlier process (the same table and deny list, checked
by the same code) is remembered in the cache folder: it is built without the checks, and its
patterns are compiled when extraction first reads them (Deferred).
"""

from __future__ import annotations

import contextlib
import copyreg
import functools
import getpass
import hashlib
import os
import pickle
import re
import stat
import sys
import tempfile
import threading
import time
import warnings
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from importlib import resources
from pathlib import Path
from typing import Any

import orjson
import regex

from lexkeep.core.config import load_section, read_toml
from lexkeep.core.errors import RuleError, SettingsWarning, doing

# Time budgets are CPU time of the scanning thread; the `regex` engine's own timeout is wall
# clock, so it is armed at this multiple of the budget as a safety net that load never trips.
WALL_SLACK = 10.0

# Bumped whenever the extraction code changes what a rule means, so stored scans re-run.
ENGINE_VERSION = "7"
TIERS = ("A", "B", "C", "suppressor")
REQUIRE = ("digit", "letter", "upper", "lower", "hexletter")
VALIDATORS = (
    "ipv6",
    "path",
    "not_css_colour",
    "not_repeated",
    "file_stem",
    "quoted_token",
    "iban",
    "not_years",
    "phone_digits",
    "phone_groups",
    "not_number_list",
    "not_range",
    "card_separators",
)
CONTEXT_MODES = ("require", "veto")
KIND_KEYS = {
    "id", "tier", "priority", "regex", "group", "keywords", "prefilter_digit", "trim", "require",
    "validators", "deny_list", "allowlist", "context", "tests", "description", "min_length",
    "min_digits", "window_keywords", "gate", "engine",
}  # fmt: skip
USER_KEYS = {"schema_version", "use_default", "disabled", "allowlist", "context", "lists",
             "kinds", "settings"}  # fmt: skip
SETTINGS_KEYS = {"timeout_ms", "max_chars"}
CONTEXT_KEYS = {"words", "window", "mode"}
TESTS_KEYS = {"positive", "negative"}
RULES_HINT = (
    "a rules file holds the rules at its top level (disabled, allowlist, [[kinds]], ...); "
    "fix the TOML syntax at that position"
)
_DIGIT = regex.compile(r"[0-9]")
# Look-arounds, anchors and word boundaries: a gate searched inside a window must not use them.
_GATE_CONTEXT = regex.compile(r"\(\?<?[=!]|(?<![\\\[])[\^$]|\\[bBAZ]")
# Load-time ReDoS smoke test: a pattern must finish each of these within the time budget.
ADVERSARIAL_LENGTH = 8_000
ADVERSARIAL_BUDGET = 0.05  # seconds per adversarial string, whatever the scan budget is
ENGINES = ("regex", "re")
# engine = "re": the longest plain-ASCII text the stdlib translation runs on (it has no
# timeout, so it is timed at load on adversarial strings up to this long).
PLAIN_ENGINE_MAX = 1024
# Text every character of which both engines read alike (see plain_source).
PLAIN_TEXT = re.compile(r"[\t\n\r\x01\x20-\x7e]*").fullmatch
# Stdlib re before Python 3.11.5 lets a possessive repeat keep an alternative whose
# look-ahead failed (`(?:x|\.(?!X))*+` matches all of ".X"; CPython gh-106052, gh-100061), so
# a translation can find other spans than the pattern: there, engine = "re" kinds run on the
# regex engine, which finds the spans the rule was checked for (only slower).
STDLIB_RE_SOUND = sys.version_info >= (3, 11, 5)


@dataclass(frozen=True, slots=True)
class Example:
    """A rule's self-test: `value` must (positive) or must not (negative) be found in `text`."""

    text: str
    value: str


@dataclass(frozen=True, slots=True)
class Context:
    """Whole-word context gate: `require` a word in the `window` words before, or `veto` on one.

    A phrase (an entry of several words) counts as one word of the window: it ends among the
    `window` words before the match. An operator token (`=`, `==`, `:`, `->`, `=>`) is no word.
    """

    words: tuple[str, ...]
    window: int
    mode: str
    single_words: frozenset[str] = frozenset()  # one-word entries, matched by set lookup
    phrases: tuple[tuple[str, ...], ...] = ()  # multi-word entries, as their words
    phrase_ends: frozenset[str] = frozenset()  # the last word of each phrase
    reach: int = 0  # words to read before a match: the window, and a phrase ending in it


@dataclass(frozen=True, slots=True)
class Kind:
    """One checked identifier (or suppressor) kind, ready to scan with."""

    id: str
    tier: str
    priority: int
    regex: str
    pattern: Any  # compiled regex.Pattern
    group: int | str = 0
    keywords: tuple[str, ...] = ()
    prefilter_digit: bool = False
    trim: bool = False
    require: tuple[str, ...] = ()
    validators: tuple[str, ...] = ()
    deny: frozenset[str] = frozenset()
    allow: frozenset[str] = frozenset()
    context: Context | None = None
    min_length: int = 0
    min_digits: int = 0
    window_keywords: tuple[str, ...] = ()
    gate: str = ""  # stdlib-re necessary condition: every match of the kind contains a gate hit
    gate_pattern: Any = None  # compiled re.Pattern, None when there is no gate
    # engine = "re": the pattern translated for stdlib re, used on plain text (PLAIN_TEXT) up
    # to PLAIN_ENGINE_MAX characters, where it finds the same spans faster for some shapes.
    engine: str = "regex"
    plain_pattern: Any = None
    positive: tuple[Example, ...] = ()
    negative: tuple[Example, ...] = ()
    description: str = ""
    # A kind whose pattern is not a built-in's (a user kind, or a built-in whose pattern,
    # keywords, digit need, gate or window keywords a rule file changed): once its conditions
    # hold anywhere in a text it runs over the whole text, not only REACH characters around
    # their hits, so a match that reaches further than the examples showed is never cut.
    wide: bool = False

    @property
    def suppressor(self) -> bool:
        """True when the kind only claims spans and is never reported."""
        return self.tier == "suppressor"


class Deferred:
    """A pattern not compiled yet: what a Kind holds in `pattern`, `gate_pattern` or
    `plain_pattern` when its checks passed in an earlier process (see _build_kind). Reading
    the field compiles it, once; the Kind keeps the compiled pattern."""

    __slots__ = ("source", "engine")

    def __init__(self, source: str, engine: str) -> None:
        self.source = source
        self.engine = engine  # "regex" (regex.V1) or "re" (stdlib)

    def compile(self) -> Any:
        """The compiled pattern, as the checks compiled it."""
        if self.engine == "regex":
            return regex_pattern(self.source)
        return re.compile(self.source)

    def __repr__(self) -> str:
        return f"Deferred({self.source!r}, {self.engine!r})"


class _CompiledOnUse:
    """A Kind field whose slot may hold a Deferred pattern: compiled on first read, and the
    slot then holds the compiled one (every later read returns that same object: extraction
    tells a kind's own pattern from its stdlib translation by identity)."""

    __slots__ = ("slot",)

    def __init__(self, slot: Any) -> None:
        self.slot = slot

    def __get__(self, obj: Any, owner: Any = None) -> Any:
        if obj is None:
            return self
        value = self.slot.__get__(obj, owner)
        if type(value) is not Deferred:
            return value
        with _COMPILING:
            value = self.slot.__get__(obj, owner)  # another thread may have compiled it
            if type(value) is Deferred:
                value = value.compile()
                self.slot.__set__(obj, value)
        return value

    def __set__(self, obj: Any, value: Any) -> None:
        self.slot.__set__(obj, value)

    def __delete__(self, obj: Any) -> None:
        self.slot.__delete__(obj)


_COMPILING = threading.Lock()

# One compiled object per source in a process, as regex.compile's own cache gives.
_REGEX_PATTERNS: dict[str, Any] = {}


def regex_pattern(source: str) -> Any:
    """`regex.compile(source, regex.V1)`, read back from the cache folder when an earlier
    process compiled it (the `regex` module parses a pattern in Python: ~2 ms each, most of
    the first extraction of a command).

    Kept as the `regex` module pickles a pattern (its compiled form, which unpickling hands
    to the engine as it is), and read back only as that: an entry that holds anything else,
    or another pattern, is compiled again."""
    pattern = _REGEX_PATTERNS.get(source)
    if pattern is not None:
        return pattern
    folder = cache_dir()
    entry = None
    if folder is not None:
        key = f"{regex.__version__}|{sys.version}|V1|{source}".encode()
        entry = folder / "compiled" / f"{hashlib.sha256(key).hexdigest()}.pickle"
        pattern = _read_pattern(entry, source)
    if pattern is None:
        pattern = regex.compile(source, regex.V1)
        if entry is not None:
            _write_atomically(entry, pickle.dumps(pattern, protocol=pickle.HIGHEST_PROTOCOL))
    _REGEX_PATTERNS[source] = pattern
    return pattern


class _PatternUnpickler(pickle.Unpickler):
    """Unpickles a `regex` pattern and nothing else: the one callable it looks up is the
    one the `regex` module pickles its patterns with (no other module is even imported)."""

    def find_class(self, module: str, name: str) -> Any:
        rebuild = copyreg.dispatch_table[regex.Pattern](_EMPTY)[0]
        if (module, name) == (getattr(rebuild, "__module__", None), rebuild.__name__):
            return rebuild
        raise pickle.UnpicklingError(f"{module}.{name} is not a compiled pattern")


_EMPTY = regex.compile("", regex.V1)


def _read_pattern(entry: Path, source: str) -> Any:
    """The pattern kept at `entry` when it is `source` compiled with regex.V1, else None."""
    try:
        with entry.open("rb") as fh:
            pattern = _PatternUnpickler(fh).load()
    except Exception:  # missing, cut short, or not a pattern: compiled again
        return None
    if (
        not isinstance(pattern, regex.Pattern)
        or pattern.pattern != source
        or not pattern.flags & regex.V1
    ):
        return None
    return pattern


def _write_atomically(path: Path, data: bytes) -> None:
    """Write `data` to `path` whole or not at all (a process may read it meanwhile)."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp.write_bytes(data)
        os.replace(tmp, path)
    except OSError:  # an unwritable cache only costs time; a full disk leaves no temp file
        with contextlib.suppress(OSError):
            tmp.unlink(missing_ok=True)


for _name in ("pattern", "gate_pattern", "plain_pattern"):
    setattr(Kind, _name, _CompiledOnUse(Kind.__dict__[_name]))


@dataclass(frozen=True, slots=True)
class RuleSet:
    """The kinds to scan with (highest priority first), global allowlist and budget."""

    kinds: tuple[Kind, ...]
    allowlist: frozenset[str] = frozenset()
    timeout: float = 0.05
    max_chars: int = 200_000
    digest: str = ""
    origin: str = "built-in"
    disabled: tuple[str, ...] = field(default=())

    @property
    def spaced_kinds(self) -> frozenset[str]:
        """Ids of the kinds whose values may hold a space (`+1 415 555 0100`, `May 20`): those
        with a positive example whose value holds one (its pattern finds it: checked at load).

        What `lexkeep context`'s clip rule keeps whole is stated for these kinds of the
        built-in rules (compaction.context.clip_answer), so the list is never kept by hand.
        """
        return frozenset(k.id for k in self.kinds if any(" " in e.value for e in k.positive))

    def kind(self, kind_id: str) -> Kind:
        """The kind with this id (KeyError when absent)."""
        for kind in self.kinds:
            if kind.id == kind_id:
                return kind
        raise KeyError(kind_id)


# -- loading ----------------------------------------------------------------------------------


def _builtin_data() -> dict[str, Any]:
    text = resources.files("lexkeep.core").joinpath("kinds.toml").read_text(encoding="utf-8")
    return parsed_toml(text)


def parsed_toml(text: str) -> dict[str, Any]:
    """`tomllib.loads(text)`, remembered in the cache folder under the text's digest (parsing
    the built-in kinds took ~20 ms of every command that loads the rules). Only a document
    whose values JSON holds exactly is remembered; an unreadable entry is parsed again."""
    folder = cache_dir()
    entry = None
    if folder is not None:
        entry = folder / "parsed-toml" / f"{hashlib.sha256(text.encode()).hexdigest()}.json"
        try:
            return orjson.loads(entry.read_bytes())
        except (OSError, orjson.JSONDecodeError):
            pass
    import tomllib  # only when the cache cannot answer

    data = tomllib.loads(text)
    if entry is None:
        return data
    try:
        blob = orjson.dumps(data)
    except TypeError:  # a value JSON cannot hold (orjson.JSONEncodeError)
        return data
    if orjson.loads(blob) != data:  # a date, a time: JSON would give it back as a string
        return data
    _write_atomically(entry, blob)
    return data


@functools.lru_cache(maxsize=1)
def default_rules() -> RuleSet:
    """The built-in kinds, checked once per process."""
    return build_rules(None)


@doing("loading identifier rules")
def load_rules(path: Path | None = None) -> RuleSet:
    """Rules from `path` (--rules), else the settings file's identifiers table, else defaults."""
    if path is not None:
        data, origin = _read_rules_file(Path(path)), str(path)
    else:
        data, settings = load_section("identifiers")
        if not data:
            return default_rules()
        origin = str(settings)
    return build_rules(data, origin=origin)


def _read_rules_file(path: Path) -> dict[str, Any]:
    data = read_toml(path, error=RuleError, what="rules", hint=RULES_HINT)
    # Accept a bare rules file, `[identifiers]`, or a pyproject-style `[tool.lexkeep.identifiers]`.
    nested = data.get("tool", {}).get("lexkeep", {}).get("identifiers")
    if isinstance(nested, dict):
        return nested
    if isinstance(data.get("identifiers"), dict) and "kinds" not in data:
        return data["identifiers"]
    return data


def build_rules(user: Mapping[str, Any] | None, *, origin: str = "built-in") -> RuleSet:
    """Merge the built-in kinds with a user rules table, check every kind, return the set."""
    base = _builtin_data()
    where = None if origin == "built-in" else origin
    user = dict(user or {})
    _check_keys(user, USER_KEYS, "the identifiers rules", where)
    lists: dict[str, list[str]] = {k: list(v) for k, v in base.get("lists", {}).items()}
    settings = dict(base.get("settings", {}))
    kinds: dict[str, dict[str, Any]] = {}
    if user.get("use_default", True):
        for raw in base["kinds"]:
            kinds[raw["id"]] = dict(raw)
    for name, values in _table(user, "lists", where).items():
        lists.setdefault(name, []).extend(_str_list(values, f"lists.{name}", where))
    user_settings = _table(user, "settings", where)
    _check_keys(user_settings, SETTINGS_KEYS, "[settings]", where)
    settings.update(user_settings)
    for raw in user.get("kinds", []) or []:
        if not isinstance(raw, dict) or not isinstance(raw.get("id"), str):
            raise RuleError("every [[kinds]] entry needs a string id", path=where)
        kind_id = raw["id"]
        _check_keys(raw, KIND_KEYS, f"kind {kind_id!r}", where)
        if kind_id in kinds:
            merged = {**kinds[kind_id], **raw}  # override only the fields given
            if "regex" in raw and "engine" not in raw:
                merged.pop("engine", None)  # a new pattern runs on the regex engine unless asked
            kinds[kind_id] = merged
        else:
            for needed in ("regex", "tier", "priority"):
                if needed not in raw:
                    raise RuleError(f"kind {kind_id!r}: missing {needed!r}", path=where)
            tests = raw.get("tests") or {}
            if not tests.get("positive") or not tests.get("negative"):
                raise RuleError(
                    f"kind {kind_id!r}: needs tests.positive and tests.negative examples",
                    path=where,
                    hint="every rule carries examples that are checked when it loads",
                )
            kinds[kind_id] = dict(raw)
    builtin = {raw["id"]: raw for raw in base["kinds"]}
    for kind_id, raw in kinds.items():
        known = builtin.get(kind_id)
        if known is None or any(raw.get(f) != known.get(f) for f in _REACH_FIELDS):
            kinds[kind_id] = {**raw, "wide": True}
    disabled = tuple(_str_list(user.get("disabled", []), "disabled", where))
    for kind_id in disabled:
        if kind_id not in kinds:
            raise RuleError(f"disabled: unknown kind {kind_id!r}", path=where)
        del kinds[kind_id]
    for kind_id, words in _table(user, "context", where).items():
        if kind_id not in kinds:
            raise RuleError(f"context: unknown kind {kind_id!r}", path=where)
        ctx = kinds[kind_id].get("context")
        if not ctx:
            raise RuleError(
                f"context: kind {kind_id!r} has no context gate to add words to", path=where
            )
        extra = _str_list(words, f"context.{kind_id}", where)
        kinds[kind_id] = {**kinds[kind_id], "context": {**ctx, "words": [*ctx["words"], *extra]}}
    allowlist = frozenset(_str_list(user.get("allowlist", []), "allowlist", where))

    timeout_ms = settings.get("timeout_ms", 50)
    if not isinstance(timeout_ms, int | float) or not 1 <= timeout_ms <= 10_000:
        raise RuleError("settings.timeout_ms must be a number from 1 to 10000", path=where)
    max_chars = settings.get("max_chars", 200_000)
    if not isinstance(max_chars, int) or max_chars < 1:
        raise RuleError("settings.max_chars must be a positive integer", path=where)
    timeout = timeout_ms / 1000

    checked = [_checked_kind(raw, lists, where) for raw in kinds.values()]
    checked.sort(key=lambda k: (-k.priority, k.id))
    digest = _digest(checked, allowlist, timeout, max_chars)
    return RuleSet(
        kinds=tuple(checked),
        allowlist=allowlist,
        timeout=timeout,
        max_chars=max_chars,
        digest=digest,
        origin=origin,
        disabled=disabled,
    )


# What decides where in a text a kind's matches can lie (see Kind.wide).
_REACH_FIELDS = ("regex", "keywords", "prefilter_digit", "gate", "window_keywords", "group")

# -- building and checking one kind ----------------------------------------------------------

# Checked kinds by content: the built-ins are checked once per process, not once per rule file.
_CHECKED: dict[bytes, Kind] = {}


def _checked_kind(raw: dict[str, Any], lists: dict[str, list[str]], where: str | None) -> Kind:
    name = raw.get("deny_list")
    deny = lists.get(name, []) if isinstance(name, str) else []  # anything else: refused below
    key = orjson.dumps([raw, deny], option=orjson.OPT_SORT_KEYS)
    kind = _CHECKED.get(key)
    if kind is None:
        # A kind that passed every check in an earlier process (the same kind and deny list,
        # checked by the same code) is built without them, its patterns compiled on first use:
        # most of the start-up of a command that loads the rules.
        marker = _checked_marker(key)
        passed = marker is not None and marker.exists()
        kind = _CHECKED[key] = _build_kind(raw, lists, where, passed=passed)
        if not passed:
            _touch(marker)
    return kind


@functools.lru_cache(maxsize=1)
def code_digest() -> str | None:
    """Digest of the code the load-time checks run (this module, extraction and its
    prefilter), None when it cannot be read: a check that other code passed is run again."""
    digest = hashlib.sha256()
    folder = Path(__file__).parent
    try:
        for name in ("rules.py", "identifiers.py", "prefilter.py"):
            digest.update((folder / name).read_bytes())
    except OSError:
        return None
    return digest.hexdigest()


def _checked_marker(key: bytes) -> Path | None:
    """Cache file that records that the kind `key` (its table and deny list) passed every
    load-time check; None: no cache (or no way to tell which code checked it)."""
    code = code_digest()
    if code is None:
        return None
    source = f"checked {ENGINE_VERSION} {code} {sys.version} {STDLIB_RE_SOUND}\0{key.decode()}"
    return _redos_marker(source, ADVERSARIAL_BUDGET, "checked-ok")


def _build_kind(
    raw: dict[str, Any], lists: dict[str, list[str]], where: str | None, *, passed: bool = False
) -> Kind:
    """The kind `raw`, checked (RuleError naming `where` and the kind when a check fails).

    `passed`: the same kind passed every check before (_checked_kind). It is built as it was,
    without the checks that need its patterns compiled, and compiles them on first use."""
    kind_id = raw["id"]

    def fail(message: str, hint: str | None = None) -> RuleError:
        return RuleError(f"kind {kind_id!r}: {message}", path=where, hint=hint)

    tier = raw.get("tier")
    if tier not in TIERS:
        raise fail(f"tier must be one of {', '.join(TIERS)}, not {tier!r}")
    priority = raw.get("priority")
    if not isinstance(priority, int) or isinstance(priority, bool) or not 0 <= priority <= 1000:
        raise fail("priority must be an integer from 0 to 1000")
    source = raw.get("regex")
    if not isinstance(source, str) or not source:
        raise fail("regex must be a non-empty string")
    group = raw.get("group", 0)
    if passed:
        pattern: Any = Deferred(source, "regex")
    else:
        try:
            pattern = regex.compile(source, regex.V1)
        except (regex.error, ValueError) as exc:
            raise fail(f"regex does not compile: {exc}") from exc
    if not passed:
        position = unbounded_quantifier(source)
        if position != -1:
            raise fail(
                f"unbounded quantifier {source[position]!r} at position {position}",
                hint="bound every repetition, e.g. {1,64} instead of + (possessive {1,64}+ is"
                " fine)",
            )
        if pattern.flags & regex.IGNORECASE:
            raise fail(
                "global ignore-case flag (?i) is not allowed",
                hint="scope it to the part that needs it, e.g. (?i:https?)",
            )
        if isinstance(group, str) and group not in pattern.groupindex:
            raise fail(f"regex has no group named {group!r}")
        if isinstance(group, int) and not 0 <= group <= pattern.groups:
            raise fail(f"regex has no group {group}")
    keywords = tuple(_str_list(raw.get("keywords", []), "keywords", where, kind_id))
    if any(k != k.lower() or not k for k in keywords):
        raise fail("keywords must be non-empty and lower-case (they are matched case-folded)")
    require = tuple(_str_list(raw.get("require", []), "require", where, kind_id))
    for name in require:
        if name not in REQUIRE:
            raise fail(f"unknown require {name!r} (known: {', '.join(REQUIRE)})")
    validators = tuple(_str_list(raw.get("validators", []), "validators", where, kind_id))
    for name in validators:
        if name not in VALIDATORS:
            raise fail(f"unknown validator {name!r} (known: {', '.join(VALIDATORS)})")
    deny: frozenset[str] = frozenset()
    if raw.get("deny_list"):
        if not isinstance(raw["deny_list"], str):
            raise fail(
                "deny_list must name a list of [lists] (a string), not a "
                + ("list" if isinstance(raw["deny_list"], list) else "value of another type"),
                hint='put the values in [lists], e.g. my_words = ["A", "B"], and write '
                'deny_list = "my_words"',
            )
        if raw["deny_list"] not in lists:
            raise fail(f"deny_list names an unknown list {raw['deny_list']!r}")
        deny = frozenset(lists[raw["deny_list"]])
    allow = frozenset(_str_list(raw.get("allowlist", []), "allowlist", where, kind_id))
    min_length = raw.get("min_length", 0)
    if not isinstance(min_length, int) or isinstance(min_length, bool) or min_length < 0:
        raise fail("min_length must be a non-negative integer")
    min_digits = raw.get("min_digits", 0)
    if not isinstance(min_digits, int) or isinstance(min_digits, bool) or min_digits < 0:
        raise fail("min_digits must be a non-negative integer")
    window_keywords = tuple(
        _str_list(raw.get("window_keywords", []), "window_keywords", where, kind_id)
    )
    if any(k != k.lower() or not k for k in window_keywords):
        raise fail("window_keywords must be non-empty and lower-case")
    gate, gate_pattern = _gate(raw.get("gate", ""), fail, passed=passed)
    context = _context(raw.get("context"), fail)
    if tier == "C" and (context is None or context.mode != "require"):
        raise fail('tier C kinds need a context gate with mode = "require"')
    engine = raw.get("engine", "regex")
    if engine not in ENGINES:
        raise fail(f"engine must be one of {', '.join(ENGINES)}, not {engine!r}")
    plain_pattern = _plain_pattern(source, fail, passed=passed) if engine == "re" else None
    if not STDLIB_RE_SOUND:
        plain_pattern = None  # translated, so a rule that cannot be is refused everywhere
    tests = raw.get("tests") or {}
    if not isinstance(tests, dict):
        raise fail("tests must be a table with positive and negative lists")
    _check_keys(tests, TESTS_KEYS, f"kind {kind_id!r} tests", where)
    positive = tuple(_example(item, fail) for item in tests.get("positive", []))
    negative = tuple(_example(item, fail) for item in tests.get("negative", []))
    kind = Kind(
        id=kind_id,
        tier=tier,
        priority=priority,
        regex=source,
        pattern=pattern,
        group=group,
        keywords=keywords,
        prefilter_digit=bool(raw.get("prefilter_digit", False)),
        trim=bool(raw.get("trim", False)),
        require=require,
        validators=validators,
        deny=deny,
        allow=allow,
        context=context,
        min_length=min_length,
        min_digits=min_digits,
        window_keywords=window_keywords,
        gate=gate,
        gate_pattern=gate_pattern,
        engine=engine,
        plain_pattern=plain_pattern,
        positive=positive,
        negative=negative,
        description=str(raw.get("description", "")),
        wide=raw.get("wide") is True,
    )
    if passed:
        return kind
    _self_test(kind, fail)
    _redos_test(kind, ADVERSARIAL_BUDGET, fail)
    _reach_test(kind, fail)
    if plain_pattern is not None:
        # Remembered like the ReDoS test: the same translation under the same engines passes.
        marker = _redos_marker(f"re {sys.version_info[:3]} {kind.regex}\0{kind.positive}"
                               f"\0{kind.negative}", ADVERSARIAL_BUDGET)  # fmt: skip
        if marker is None or not marker.exists():
            _plain_test(kind, fail)
            _touch(marker)
    return kind


# Regex-only syntax a translation must not carry over: set operations and nested sets (V1),
# fuzzy matching, Unicode properties, and engine-only escapes.
# \w and \b differ between the engines outside ASCII letters (marks, other numbers).
_REGEX_ONLY = re.compile(r"\[\[|--|&&|\|\||~~|\{[eisd]|\\[pPXLGKmMRwWbB]|\(\?[Vbefprw|]")
_CLASS_LN = re.compile(r"\[(\^?)\\p\{L\}\\p\{N\}((?:\\.|[^\]\\])*)\]")


def plain_source(source: str) -> str | None:
    """`source` rewritten for stdlib re, finding the same spans in plain text (PLAIN_TEXT);
    None when it cannot be.

    In plain text a letter or digit is [A-Za-z0-9] for both engines, so the class
    [\\p{L}\\p{N}] becomes [^\\W_] and [\\p{L}\\p{N}_…] becomes [\\w…]. Anything else that only
    the regex engine reads (other Unicode properties, set operations, fuzzy matching,
    case-folded non-ASCII literals) is not translated.
    """

    def rewrite(match: re.Match[str]) -> str:
        negated, rest = match.group(1), match.group(2)
        if not rest:
            return "[\\W_]" if negated else "[^\\W_]"
        if re.search(r"(?<!\\)_", rest) is None:
            raise ValueError("a class with \\p{L}\\p{N} but no '_'")
        return f"[{negated}\\w{rest}]"

    if _REGEX_ONLY.search(_CLASS_LN.sub("", source)) is not None:
        return None
    try:
        translated = _CLASS_LN.sub(rewrite, source)
    except ValueError:
        return None
    if "(?i" in translated and not translated.isascii():
        return None  # full case folding of non-ASCII literals can match ASCII text
    return translated


def _plain_pattern(source: str, fail: Any, *, passed: bool = False) -> Any:
    translated = plain_source(source)
    if translated is None:
        raise fail(
            'engine "re" needs a pattern stdlib re can run on ASCII text',
            hint="use \\p{L}\\p{N} only as [\\p{L}\\p{N}] or [\\p{L}\\p{N}_...], or drop engine",
        )
    if passed:
        return Deferred(translated, "re")
    try:
        return re.compile(translated)
    except (re.error, ValueError) as exc:
        raise fail(f'engine "re": the translated pattern does not compile: {exc}') from exc


def _plain_test(kind: Kind, fail: Any) -> None:
    """engine = "re": the same spans as the regex engine on every plain example and adversarial
    string, and within the budget on adversarial strings up to PLAIN_ENGINE_MAX characters."""
    # Stdlib re has no timeout: lengths grow slowly (by 4 characters to 64, then by a
    # quarter), so a pattern whose time explodes with length is refused at the first length
    # that takes too long, instead of running for ever on a long string.
    for name, text in adversarial_strings():
        size = 8
        while size <= PLAIN_ENGINE_MAX:
            started = time.thread_time()
            for _ in kind.plain_pattern.finditer(text[:size]):
                pass
            if time.thread_time() - started > ADVERSARIAL_BUDGET:
                raise fail(
                    f'engine "re": pattern takes longer than {ADVERSARIAL_BUDGET * 1000:g} ms on'
                    f" {size} characters of the adversarial string {name!r}",
                    hint="bound every quantifier and avoid nested repetition, or drop engine",
                )
            size = size + 4 if size < 64 else size + size // 4
    texts = [e.text[:PLAIN_ENGINE_MAX] for e in kind.positive + kind.negative]
    texts += [text[:PLAIN_ENGINE_MAX] for _, text in adversarial_strings()]
    for text in texts:
        if PLAIN_TEXT(text) is None:
            continue
        want = [m.span(kind.group) for m in kind.pattern.finditer(text)]
        got = [m.span(kind.group) for m in kind.plain_pattern.finditer(text)]
        if want != got:
            raise fail(f'engine "re" finds {got} where the regex engine finds {want} in {text!r}')


def _gate(source: Any, fail: Any, *, passed: bool = False) -> tuple[str, Any]:
    """The kind's gate: a bounded stdlib-`re` pattern every match must contain (or none).

    `passed`: its checks passed before (_build_kind); compiled on first use."""
    if source == "":
        return "", None
    if not isinstance(source, str):
        raise fail("gate must be a string (a regular expression)")
    if passed:
        return source, Deferred(source, "re")
    try:
        # Stdlib re on purpose: the gate only decides whether the kind's pattern runs at all,
        # and re rejects a short window several times faster than the regex engine.
        pattern = re.compile(source)
    except (re.error, ValueError) as exc:
        raise fail(f"gate does not compile: {exc}") from exc
    position = unbounded_quantifier(source)
    if position != -1:
        raise fail(
            f"unbounded quantifier {source[position]!r} at position {position} in gate",
            hint="bound every repetition, e.g. {1,64} instead of +",
        )
    if pattern.flags & re.IGNORECASE:
        raise fail("global ignore-case flag (?i) is not allowed in gate")
    if _GATE_CONTEXT.search(source):
        raise fail(
            "gate must not use look-arounds, anchors or \\b",
            hint="a gate is searched inside a window of the text: it may see no context",
        )
    return source, pattern


def unbounded_quantifier(pattern: str) -> int:
    """Position of the first unbounded `*` or `+` quantifier in `pattern`, or -1.

    A `+` right after another quantifier is the possessive modifier, not a repetition.
    """
    i, n = 0, len(pattern)
    previous = ""
    while i < n:
        char = pattern[i]
        if char == "\\":
            i += 2
            previous = "x"
            continue
        if char == "[":
            # Skip the class; a ']' first (or after '^') is a literal.
            i += 1
            if i < n and pattern[i] == "^":
                i += 1
            if i < n and pattern[i] == "]":
                i += 1
            while i < n and pattern[i] != "]":
                i += 2 if pattern[i] == "\\" else 1
            i += 1
            previous = "]"
            continue
        if char in "*+":
            if char == "+" and previous in ("}", "?", "*", "+"):
                previous = "possessive"
                i += 1
                continue
            return i
        previous = char
        i += 1
    return -1


def _context(raw: Any, fail: Any) -> Context | None:
    if raw is None:
        return None
    if not isinstance(raw, dict):
        raise fail("context must be a table with words, window and mode")
    unknown = set(raw) - CONTEXT_KEYS
    if unknown:
        raise fail(f"unknown key {sorted(unknown)[0]!r} in context")
    words = raw.get("words")
    if not isinstance(words, list) or not words or not all(isinstance(w, str) for w in words):
        raise fail("context.words must be a non-empty list of strings")
    window = raw.get("window", 4)
    if not isinstance(window, int) or not 1 <= window <= 20:
        raise fail("context.window must be an integer from 1 to 20")
    mode = raw.get("mode", "require")
    if mode not in CONTEXT_MODES:
        raise fail(f"context.mode must be one of {', '.join(CONTEXT_MODES)}, not {mode!r}")
    # Whole-word, case-folded phrases; normalised to single spaces for the window match.
    folded = tuple(" ".join(w.lower().split()) for w in words)
    phrases = tuple(tuple(w.split()) for w in folded if " " in w)
    return Context(
        folded,
        window,
        mode,
        frozenset(w for w in folded if " " not in w),
        phrases,
        frozenset(p[-1] for p in phrases),
        window + max((len(p) for p in phrases), default=1) - 1,
    )


def _example(item: Any, fail: Any) -> Example:
    if isinstance(item, str):
        return Example(item, item)
    if isinstance(item, dict) and isinstance(item.get("text"), str):
        value = item.get("value", item["text"])
        if not isinstance(value, str) or value not in item["text"]:
            raise fail(f"example value {value!r} does not occur in its text {item['text']!r}")
        return Example(item["text"], value)
    raise fail(f"an example must be a string or {{text, value}}, not {item!r}")


def _self_test(kind: Kind, fail: Any) -> None:
    """Run the kind's own examples through the real per-kind scan (gitleaks-style Validate)."""
    # Imported here: identifiers imports this module for RuleSet.
    from lexkeep.core.identifiers import passes_prefilter, scan_kind

    for ex in kind.positive:
        if len(ex.value) < kind.min_length:
            raise fail(
                f"positive example {ex.value!r} is shorter than min_length {kind.min_length}"
            )
        if sum(map(ex.value.count, "0123456789")) < kind.min_digits:
            raise fail(f"positive example {ex.value!r} has fewer than {kind.min_digits} digits")
        if kind.window_keywords and not any(w in ex.text.lower() for w in kind.window_keywords):
            raise fail(
                f"positive example {ex.text!r} contains none of its window_keywords "
                f"{list(kind.window_keywords)}; the prefilter would skip it"
            )
        # The candidate pass only scans near a keyword (or digit): the match itself must hold
        # one. For a kind reporting a group, the whole match (quotes and all) is what it sees.
        whole = _whole_match(kind, ex)
        if not passes_prefilter(kind, whole):
            if kind.prefilter_digit and _DIGIT.search(whole) is None:
                wanted = "an ASCII digit"
            elif kind.gate_pattern is not None and kind.gate_pattern.search(whole) is None:
                wanted = f"a match of its gate {kind.gate!r}"
            else:
                wanted = f"any of its keywords {list(kind.keywords)}"
            raise fail(
                f"positive example {ex.value!r} does not contain {wanted}; "
                "the prefilter would skip it",
                hint="fix the keywords so every positive example contains one",
            )
        # A value on the kind's allowlist is still found (it claims its span); the allowlist
        # only keeps it out of reports, so `allowlist = [<an example's value>]` on a built-in
        # kind is a choice about reports, not a broken example. A deny-listed one is not found.
        found = [
            v
            for _, _, v, claimed in scan_kind(kind, ex.text, 1.0)
            if not claimed or v in kind.allow and v not in kind.deny
        ]
        if kind.suppressor:
            found = [v for _, _, v, _ in scan_kind(kind, ex.text, 1.0)]
        if ex.value not in found:
            got = ", ".join(repr(v) for v in found) or "nothing"
            raise fail(f"positive example {ex.text!r}: expected {ex.value!r}, found {got}")
    for ex in kind.negative:
        found = [v for _, _, v, claimed in scan_kind(kind, ex.text, 1.0) if not claimed]
        if kind.suppressor:
            found = [v for _, _, v, _ in scan_kind(kind, ex.text, 1.0)]
        if found:
            raise fail(f"negative example {ex.text!r} matched {found[0]!r}")
    for word in kind.keywords:
        if not any(word in ex.text.lower() for ex in kind.positive):
            raise fail(
                f"keyword {word!r} occurs in no positive example",
                hint="every keyword must be exercised by a positive example",
            )


def _reach_test(kind: Kind, fail: Any) -> None:
    """Each positive example is found by extraction itself, not only by the pattern.

    Extraction scans a built-in kind only near a hit of one of its keywords (or a digit):
    REACH characters either side, widened to the next space or line break, and the compiled
    selection starts its search no further back. A built-in shape that outgrew that reach
    would be cut or missed without a word: it is refused here. A kind a rule file defines or
    reshapes (Kind.wide) runs over the whole text once its conditions hold, so for it this
    checks the conditions and context words end to end. Both extraction paths run (one text;
    a batch, which takes the compiled selection when it is installed). Remembered like the
    ReDoS test.
    """
    if kind.suppressor or not kind.positive:
        return
    # Imported here: identifiers imports this module for RuleSet.
    from lexkeep.core import identifiers
    from lexkeep.core.prefilter import REACH

    marker = _redos_marker(
        f"reach {ENGINE_VERSION} {REACH} {kind.regex}\0{kind.keywords}"
        f"\0{kind.prefilter_digit}\0{kind.gate}\0{kind.window_keywords}\0{kind.positive}"
        f"\0{kind.wide}",
        ADVERSARIAL_BUDGET,
        "reach-ok",
    )
    if marker is not None and marker.exists():
        return
    # Without its allowlist: an allowlisted example value is found but never reported, and
    # this test looks at what extraction finds.
    probe = replace(kind, allow=frozenset())
    digest = "reach-test:" + hashlib.sha256(repr(probe).encode()).hexdigest()
    rules = RuleSet(kinds=(probe,), timeout=1.0, digest=digest)
    try:
        for ex in kind.positive:
            single = {i.value for i in identifiers.extract(ex.text, rules).identifiers}
            batch = identifiers.extract_many([ex.text] * identifiers.SELECT_AFTER, rules)
            if ex.value in single and ex.value in {i.value for i in batch[0].identifiers}:
                continue
            if kind.wide:
                raise fail(
                    f"positive example {ex.text!r}: the pattern finds {ex.value!r} but "
                    "extraction does not. Extraction runs this kind only where its keywords, "
                    "gate and digits occur, and looks for context words just before a match",
                    hint="check the example against the kind's keywords, gate and context words",
                )
            raise fail(
                f"positive example {ex.text!r}: the pattern finds {ex.value!r} but extraction "
                f"does not. Extraction scans {REACH} characters around a keyword or digit "
                "(widened to the next space), and looks for context words just before",
                hint="add a keyword that occurs nearer the far end of such matches, or keep "
                "matches with spaces in them short",
            )
    finally:
        identifiers.forget(rules)
    _touch(marker)


def _whole_match(kind: Kind, ex: Example) -> str:
    """The full match (group 0) whose reported group is the example's value, else the value."""
    if kind.group == 0:
        return ex.value
    for match in kind.pattern.finditer(ex.text, timeout=1.0):
        if match.group(kind.group) == ex.value:
            return match.group(0)
    return ex.value


@functools.lru_cache(maxsize=1)
def adversarial_strings() -> tuple[tuple[str, str], ...]:
    """Named strings that make badly bounded patterns backtrack (reference §3.5)."""
    n = ADVERSARIAL_LENGTH
    alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"
    b64 = "".join(alphabet[(i * 37 + i // 7) % 64] for i in range(n))
    return (
        ("letters", "a" * n),
        ("digits", "1" * n),
        ("upper", "A" * n),
        ("base64", b64),
        ("dashes", "a-" * (n // 2)),
        ("digit-dashes", "1-" * (n // 2)),
        ("slashes", "/a" * (n // 2)),
        ("dots", "1." * (n // 2)),
        ("underscores", "A_" * (n // 2)),
        ("at-dots", "@a." * (n // 3)),
        ("colons", "f:" * (n // 2)),
        ("hashes", "#1" * (n // 2)),
        ("backslashes", "C:\\" + "ab\\" * (n // 3)),
        ("url", "http://" + "x" * n),
        ("spaced-digits", "1 " * (n // 2)),
        ("mixed", "aA1_-." * (n // 6)),
    )


def kind_strings(kind: Kind) -> tuple[tuple[str, str], ...]:
    """Adversarial strings made of a rule file's own material: each character of its keywords
    and positive examples repeated, and each keyword and example value repeated.

    The fixed strings pump the usual suspects (letters, digits, separators); a pattern that
    nests repeats of another character (`(?:q{1,40}){1,40}!`) backtracks only on runs of that
    character, which its own examples and keywords name."""
    n = ADVERSARIAL_LENGTH
    material = [*kind.keywords, *(e.value for e in kind.positive)]
    chars = dict.fromkeys(c for part in material for c in part if not c.isspace())
    out = [(f"{c!r} repeated", c * n) for c in list(chars)[:32]]
    pieces = dict.fromkeys(p for p in material if len(p) > 1)
    out += [(f"{p!r} repeated", p * (n // len(p))) for p in list(pieces)[:8]]
    return tuple(out)


def _redos_test(kind: Kind, timeout: float, fail: Any) -> None:
    # A pattern that passed once (same engine version and strings) is remembered on disk:
    # the smoke test is most of the start-up time of every command.
    # The gate is part of the key: a kind with a new gate is timed again. A kind whose
    # pattern is not a built-in's (Kind.wide) is also timed on strings of its own material,
    # which are part of its key.
    strings = adversarial_strings() + (kind_strings(kind) if kind.wide else ())
    source = kind.regex + ("\0" + kind.gate if kind.gate else "")
    if kind.wide:
        source += "\0" + "\0".join(text[:64] for _, text in strings)
    marker = _redos_marker(source, timeout)
    if marker is not None and marker.exists():
        return
    _gate_speed_test(kind, timeout, fail)
    for name, text in strings:
        # Judged on this thread's CPU time, so a busy machine cannot refuse a good rule; the
        # engine's wall-clock timeout only stops a pattern that would never finish.
        started = time.thread_time()
        try:
            for _ in kind.pattern.finditer(text, timeout=timeout * WALL_SLACK):
                pass
            slow = time.thread_time() - started > timeout
        except TimeoutError:
            slow = True
        if slow:
            raise fail(
                f"pattern takes longer than {timeout * 1000:g} ms on the adversarial string "
                f"{name!r}",
                hint="bound every quantifier and avoid nested repetition",
            )
    _touch(marker)


def _touch(marker: Path | None) -> None:
    if marker is not None:
        try:
            marker.parent.mkdir(parents=True, exist_ok=True)
            marker.touch()
        except OSError:
            pass  # an unwritable cache only costs time


def _gate_speed_test(kind: Kind, budget: float, fail: Any) -> None:
    # Stdlib re has no timeout: time each adversarial search and refuse a slow gate.
    if kind.gate_pattern is None:
        return
    for name, text in adversarial_strings():
        started = time.thread_time()
        for _ in kind.gate_pattern.finditer(text):
            pass
        if time.thread_time() - started > budget:
            raise fail(
                f"gate takes longer than {budget * 1000:g} ms on the adversarial string {name!r}",
                hint="keep a gate short: a few characters that every match must contain",
            )


def cache_dir() -> Path | None:
    """lexkeep's cache folder: $LEXKEEP_CACHE_DIR, else $XDG_CACHE_HOME/lexkeep or
    ~/.cache/lexkeep; None when set to '' (no cache).

    When that folder cannot be written (a read-only home, a read-only mount), a folder of the
    user's own under the system temporary folder is used instead; when neither can be, one
    `Warning:` line says so (every command then re-runs the rules' load-time checks) and the
    answer is None.
    """
    root = os.environ.get("LEXKEEP_CACHE_DIR")
    if root == "":
        return None
    if root:
        configured = Path(root)
    else:
        configured = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "lexkeep"
    if _writable_once(configured):
        return configured
    # Found only when needed: finding the temporary folder writes a file there.
    return _usable_cache_dir(configured, tempfile.gettempdir())


@functools.lru_cache(maxsize=8)
def _writable_once(folder: Path) -> bool:
    """_writable(folder), asked once per process and folder."""
    return _writable(folder)


@functools.lru_cache(maxsize=8)
def _usable_cache_dir(configured: Path, temp_root: str) -> Path | None:
    """`configured` when it can be written, else the user's own folder under `temp_root`,
    else None (said once per process and setting by a SettingsWarning)."""
    if _writable(configured):
        return configured
    owner = os.getuid() if hasattr(os, "getuid") else getpass.getuser()
    fallback = Path(temp_root) / f"lexkeep-{owner}"
    if _writable(fallback, private=True):
        return fallback
    warnings.warn(
        f"no cache folder can be written ({configured}, nor {fallback}): every command"
        " re-runs the rules' load-time checks (a few seconds); set LEXKEEP_CACHE_DIR to a"
        " writable folder",
        SettingsWarning,
        stacklevel=2,
    )
    return None


def _writable(folder: Path, *, private: bool = False) -> bool:
    """Whether `folder` exists (made when missing) and can be written. A `private` folder (in
    a temporary folder that others can write) is made only readable by its user, and is
    refused unless it is a real folder (not a symbolic link) of this user: another user's
    markers could otherwise skip the checks of a slow pattern."""
    try:
        folder.mkdir(mode=0o700 if private else 0o777, parents=True, exist_ok=True)
        if private and hasattr(os, "getuid"):
            info = folder.lstat()
            if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.getuid():
                return False
    except OSError:
        return False
    return os.access(folder, os.W_OK | os.X_OK)


def _redos_marker(source: str, timeout: float, folder: str = "redos-ok") -> Path | None:
    """Cache file that records `source` passed the adversarial strings (or the check that
    `folder` names); None: no cache."""
    base = cache_dir()
    if base is None:
        return None
    key = f"{regex.__version__}|{ADVERSARIAL_LENGTH}|{timeout}|{source}".encode()
    return base / folder / hashlib.sha256(key).hexdigest()


# -- helpers -----------------------------------------------------------------------------------


def _digest(kinds: list[Kind], allowlist: frozenset[str], timeout: float, max_chars: int) -> str:
    canon = {
        "engine": ENGINE_VERSION,
        "timeout": timeout,
        "max_chars": max_chars,
        "allowlist": sorted(allowlist),
        "kinds": [
            {
                "id": k.id, "tier": k.tier, "priority": k.priority, "regex": k.regex,
                "group": k.group, "keywords": k.keywords, "prefilter_digit": k.prefilter_digit,
                "trim": k.trim, "require": k.require, "validators": k.validators,
                "deny": sorted(k.deny), "allow": sorted(k.allow),
                "min_length": k.min_length,
                "min_digits": k.min_digits,
                "window_keywords": k.window_keywords,
                "gate": k.gate,
                "engine": k.engine,
                "wide": k.wide,
                "context": None if k.context is None
                else [k.context.words, k.context.window, k.context.mode],
            }
            for k in kinds
        ],
    }  # fmt: skip
    return hashlib.sha256(orjson.dumps(canon, option=orjson.OPT_SORT_KEYS)).hexdigest()[:16]


def _check_keys(values: Mapping[str, Any], allowed: set[str], where: str,
                path: str | None) -> None:  # fmt: skip
    for key in values:
        if key not in allowed:
            raise RuleError(
                f"unknown key {key!r} in {where}",
                path=path,
                hint="known keys: " + ", ".join(sorted(allowed)),
            )


def _table(data: Mapping[str, Any], key: str, where: str | None) -> dict[str, Any]:
    value = data.get(key, {})
    if not isinstance(value, dict):
        raise RuleError(f"{key} must be a table", path=where)
    return value


def _str_list(value: Any, name: str, where: str | None, kind_id: str | None = None) -> list[str]:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        prefix = f"kind {kind_id!r}: " if kind_id else ""
        raise RuleError(f"{prefix}{name} must be a list of strings", path=where)
    return value
