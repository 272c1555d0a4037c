"""Identifier extraction: exact spans of identifier-shaped tokens in user text.

Pipeline per text: a cheap candidate pass decides which kinds run at all — the compiled
selector (core.prefilter: one Hyperscan scan reporting every kind's gate, keyword, digit and
context-word condition) when it is installed, else trigger windows with per-kind keyword and
gate checks in Python. Each kind that runs applies its bounded `regex` pattern under one
shared CPU-time budget; each match is trimmed and checked (composition, validators,
deny/allow lists, context words); then every candidate, suppressors included, competes for
its span by priority, then length, and a claimed span is exclusive. Values are never
normalised: text[start:end] is the value. extract_many() does the same for a batch of texts,
rejecting trigger-free ones in a few passes over all of them.
"""

from __future__ import annotations

import bisect
import gc
import ipaddress
import itertools
import operator
import re
import threading
import time
from collections.abc import Iterator, Sequence
from typing import Any

import regex

from lexkeep.core import prefilter
from lexkeep.core.model import Extraction, Identifier
from lexkeep.core.rules import PLAIN_ENGINE_MAX, WALL_SLACK, Kind, RuleSet, default_rules

__all__ = ["extract", "extract_many", "passes_prefilter", "prepare", "scan_kind"]

_DIGIT = regex.compile(r"[0-9]")
_DIGIT_GROUPS = re.compile("[0-9]+")
# Texts up to this long ask the compiled selector (core.prefilter) which kinds to run, and
# those run over the whole text; longer texts are scanned in windows around triggers.
SELECT_TEXT_MAX = 512
# Texts longer than this select kinds per SEGMENT characters; in between, trigger windows.
SEGMENT_TEXT_MIN = 8192
SEGMENT = 512
# The selector is compiled (a fraction of a second) only once a process has extracted this
# many texts: a one-off `lexkeep extract TEXT` or guard call never pays for it.
SELECT_AFTER = 64
MAX_TRIGGERS = 256  # a text needing more trigger visits than this is scanned whole
SHORT_WINDOW = 256  # characters; longer windows search context words before the pattern
# Windows up to this long run every pattern without arming the engine timeout: a built-in
# pattern that passed the 8 KB adversarial strings at load cannot overrun the budget by much
# on 1 KB, and the deadline is still checked before every call. With a rule file's pattern
# in play (Kind.wide) the timeout is always armed: no fixed set of strings proves a pattern
# someone else wrote.
UNARMED_WINDOW = 1024
SHORT_TRIGGER_TEXT = 8192  # characters; texts up to this long find triggers without a timeout
# The per-text budget is CPU time of this thread, so a busy machine does not turn complete
# scans into incomplete ones (results would depend on load); see rules.WALL_SLACK.
_cpu_clock = time.thread_time
_wall_clock = time.perf_counter
# Reading the thread's CPU clock is a system call (~0.5 µs), ten times a wall-clock read;
# a budget start reuses a reading at most this old (seconds of wall time, so at most this
# much CPU time is charged to a text that it did not spend).
CPU_READING_AGE = 0.0005
_readings = threading.local()
# CPU time the cyclic garbage collector has spent, which the budget does not charge to the
# text being scanned: a full collection in a process holding millions of objects can take
# longer than a whole budget, and it would turn a complete scan into an incomplete one.
_gc_time = [0.0, 0.0]  # [total seconds, start of the running collection]


def _time_collections(phase: str, _info: dict[str, Any]) -> None:
    if phase == "start":
        _gc_time[1] = _cpu_clock()
    else:
        _gc_time[0] += _cpu_clock() - _gc_time[1]


gc.callbacks.append(_time_collections)


class _Budget:
    """A text's CPU-time budget, checked with the cheap wall clock until that runs out.

    A thread's CPU time never advances faster than wall time, so while less wall time than
    the budget has passed, the budget cannot be spent; only then is the CPU clock read.
    """

    __slots__ = ("cpu_start", "gc_start", "timeout", "wall_deadline")

    def __init__(self, timeout: float) -> None:
        now = _wall_clock()
        reading = getattr(_readings, "last", None)
        if reading is None or now - reading[0] > CPU_READING_AGE:
            reading = _readings.last = (now, _cpu_clock())
        self.cpu_start = reading[1]
        self.gc_start = _gc_time[0]
        self.timeout = timeout
        self.wall_deadline = now + timeout

    def remaining(self) -> float:
        """A lower bound of the CPU seconds left (<= 0 when the budget is spent)."""
        now = _wall_clock()
        if now < self.wall_deadline:
            return self.wall_deadline - now
        spent = _cpu_clock() - self.cpu_start - (_gc_time[0] - self.gc_start)
        left = self.timeout - spent
        self.wall_deadline = now + left
        return left

    def engine_timeout(self) -> float:
        """The `regex` engine's wall-clock timeout for the next call: WALL_SLACK times the CPU
        seconds truly left, read from the CPU clock.

        Not `remaining()`, a lower bound that shrinks with wall time: on a loaded machine a
        thread waits while its budget is barely spent, and a net of ten times that bound
        tripped on the wait (a complete scan reported incomplete, depending on load).
        """
        spent = _cpu_clock() - self.cpu_start - (_gc_time[0] - self.gc_start)
        return max(self.timeout - spent, 0.0) * WALL_SLACK


_SPACE_OR_NEWLINE = re.compile("[ \n]")
_DIGIT_BYTES = b"0123456789"


def _count_digits(text: str) -> int:
    """The ASCII digits in `text`: UTF-8 writes every other character in bytes of 0x80 and
    above (lone surrogates too, with surrogatepass), so the bytes that deleting the digits
    removes are the digits; about four times cheaper than counting each digit in the str."""
    data = text.encode("utf-8", "surrogatepass")
    return len(data) - len(data.translate(None, _DIGIT_BYTES))


# The result for a text with nothing to scan (frozen, so one instance serves every call).
_NOTHING = Extraction((), True)
_PUNCTUATION = "!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~“”‘’«»…"
# Sentence punctuation, closing quotes and markdown emphasis never end an identifier.
_TRAILING = frozenset(".,;:!?…'\"’”»`*~")
_CLOSERS = {")": "(", "]": "[", "}": "{", ">": "<"}
_EXT = regex.compile(r"\.[A-Za-z][A-Za-z0-9]{0,7}\Z")
_HEX_COLOUR = regex.compile(r"#(?:[0-9a-fA-F]{3}|[0-9a-fA-F]{4}|[0-9a-fA-F]{6}|[0-9a-fA-F]{8})\Z")
_FILE_STEM = regex.compile(r"[0-9_\-]")
_SEPARATOR = regex.compile(r"[_\-/.@\\]")
_PATH_SPLIT = regex.compile(r"[/\\]")  # compiled once: regex.split() looks up its cache per call
_ROOTS = frozenset(
    [
        "tmp",
        "var",
        "etc",
        "usr",
        "opt",
        "home",
        "srv",
        "mnt",
        "dev",
        "proc",
        "sys",
        "bin",
        "sbin",
        "lib",
        "root",
        "data",
        "Users",
        "Volumes",
    ]
)
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
        # Cut at whitespace so no identifier is cut in two (a partial span is worse than none).
        cut = max(text.rfind(" ", 0, rules.max_chars + 1), text.rfind("\n", 0, rules.max_chars + 1))
        text = text[: max(cut, 0)]
        complete = False
    plan = _plan(rules)
    if not plan.full_scan and not plan.may_trigger(text):
        # Most chat messages: no trigger, so nothing to scan and no budget to start.
        return _NOTHING if complete else Extraction((), complete)
    return _extract_triggered(plan, rules, text, complete)


def extract_many(texts: Sequence[str], rules: RuleSet | None = None) -> list[Extraction]:
    """extract() of each text, in order, with the fast reject done for all of them at once.

    Most messages hold no trigger at all. Instead of four C-level searches per message, the
    searches run over the messages joined by a separator no trigger can cross, and only the
    messages they hit are extracted one by one. Same results as extract() on each.
    """
    rules = rules or default_rules()
    plan = _plan(rules)
    out: list[Extraction] = [_NOTHING] * len(texts)
    if plan.full_scan:
        return [extract(text, rules) for text in texts]
    for first in range(0, len(texts), MANY_BATCH):
        group = texts[first : first + MANY_BATCH]
        hits = plan.triggered(group)
        # A batch worth it builds the compiled selector now (as extract() does after
        # SELECT_AFTER texts); most messages then take its short-text path directly.
        selector = plan.selector(now=len(hits) >= SELECT_AFTER)
        select = selector.select_with_ends if selector is not None else None
        for index in hits:
            text = group[index]
            if select is not None and len(text) <= SELECT_TEXT_MAX:
                found = _extract_selected(plan, rules, text, *select(text))
            elif len(text) > rules.max_chars:
                found = extract(text, rules)
            else:
                found = _extract_triggered(plan, rules, text, True)
            out[first + index] = found
    return out


def _extract_triggered(plan: _Plan, rules: RuleSet, text: str, complete: bool) -> Extraction:
    """extract() once the fast reject has let `text` through."""
    selector = plan.selector()
    if selector is not None:
        if len(text) > SEGMENT_TEXT_MIN:
            return _extract_segmented(plan, rules, text, selector, complete)
        if len(text) <= SELECT_TEXT_MAX:
            return _extract_selected(plan, rules, text, *selector.select_with_ends(text))
    budget = _Budget(rules.timeout)
    candidates: list[tuple[int, int, int, int, str, bool]] = []
    settled = 0  # candidates of the windows whose suppressors ran (or had nothing to claim)
    try:
        windows = plan.windows(text, rules.timeout, triggered=True)
        if not plan.has_wide:
            for start, end in windows:
                settled = len(candidates)
                _scan_window(plan, rules, text, start, end, budget, candidates)
        else:
            _scan_with_wide(plan, rules, text, windows, budget, candidates)
    except TimeoutError:
        complete = False
        _suppress_after_timeout(plan, rules, text, candidates, settled)
    if not candidates:
        return Extraction((), complete)
    return Extraction(_resolve(text, candidates), complete)


def _scan_with_wide(
    plan: _Plan,
    rules: RuleSet,
    text: str,
    windows: list[tuple[int, int]],
    budget: _Budget,
    candidates: list[tuple[int, int, int, int, str, bool]],
) -> None:
    """The windows for the kinds bounded by REACH; the whole text, as one window, for the wide
    ones (their conditions asked of the whole text, as the compiled selection asks them).

    Suppressors run wherever something reportable may compete for their span, as in
    _scan_window: a window whose own kinds found nothing reportable gets its suppressors once
    a wide kind found something reportable anywhere.
    """
    ran = [
        _scan_window(plan, rules, text, start, end, budget, candidates, wide=False)
        for start, end in windows
    ]
    before = len(candidates)
    reportable = any(candidate[5] for candidate in candidates)
    _scan_window(
        plan, rules, text, 0, len(text), budget, candidates, wide=True, reportable=reportable
    )
    if any(candidate[5] for candidate in candidates[before:]):
        for (start, end), done in zip(windows, ran, strict=True):
            if not done:
                _scan_window(
                    plan,
                    rules,
                    text,
                    start,
                    end,
                    budget,
                    candidates,
                    wide=False,
                    reportable=True,
                    identifiers=False,
                )


def _scan_window(
    plan: _Plan,
    rules: RuleSet,
    text: str,
    start: int,
    end: int,
    budget: _Budget,
    candidates: list[tuple[int, int, int, int, str, bool]],
    *,
    wide: bool | None = None,
    reportable: bool = False,
    identifiers: bool = True,
) -> bool:
    """Run every kind whose prefilter passes on text[start:end]; append its candidates.

    `wide`: None runs every kind; True only the wide kinds (rules.Kind.wide), False only the
    others. `reportable`: something reportable was found already, so the suppressors run
    whatever this window finds. `identifiers`: False runs the suppressors only. True when the
    window's suppressors ran.
    """
    segment = text[start:end]
    lower = segment.lower()
    digits = _count_digits(segment)
    # One-character keywords here; longer ones (month names, currency words) only for the
    # kinds that get that far, and only when no one-character keyword already let them in.
    # Inside a window any '.' or '-' counts (a quoted 'HTTP-' holds no interior one); only
    # opening a window asks for one between letters or digits.
    present = {word for word in plan.single_keywords if word in lower}
    size = end - start
    context_text = None
    allow = rules.allowlist
    # Suppressors only matter where an identifier competes for the span: they run second,
    # and only in windows that produced a reportable candidate. The digit count and the size
    # enter the memo key as steps, so kinds needing more digits or length are never visited.
    identifier_kinds, suppressor_kinds = plan.eligible(
        frozenset(present),
        bisect.bisect_right(plan.digit_steps, digits),
        bisect.bisect_right(plan.size_steps, size),
    )
    # A rule file's pattern (Kind.wide) passed only the adversarial strings its own
    # material suggests: the engine's timeout stays armed while any is in play.
    armed = size > UNARMED_WINDOW or plan.has_wide
    for step in (identifier_kinds, suppressor_kinds):
        if step is identifier_kinds and not identifiers:
            continue
        if step is suppressor_kinds and not reportable:
            return False
        # Each run tuple was prepared once per memo key (see _runs): only per-window facts
        # are checked here.
        for kind, multi, also, gate, context_words in step:
            if wide is not None and kind.wide is not wide:
                continue
            if multi and not any(map(lower.__contains__, multi)):  # no generator frame
                continue
            if also and not any(map(lower.__contains__, also)):
                continue
            # The kind's gate (stdlib re, a few characters every match holds) rejects most
            # windows several times faster than running the full pattern would.
            if gate is not None and gate(text, start, end) is None:
                continue
            if context_words is not None:
                # Context words sit before the match, possibly before the window: as far
                # as any kind's context window reaches (_context_ok reads 24 characters a
                # word). On short windows checking each match's context is cheaper than
                # searching for many words; a short word list (http_status) is always
                # cheaper to search first (_filter keeps the words only where it pays).
                if context_text is None:
                    context_text = text[max(0, start - plan.context_reach) : end].lower()
                if not any(map(context_text.__contains__, context_words)):
                    continue
            remaining = budget.remaining()
            if remaining <= 0:
                raise TimeoutError
            # Arming the engine timeout costs more than scanning a short window; every
            # pattern already finished 8 KB adversarial strings in budget at load, and the
            # deadline is still checked between calls.
            # A first search is three times cheaper than opening a finditer, and most
            # windows hold no match of a kind; only a hit pays for the iterator.
            # Even timeout=None costs a keyword parse: pass it only when it is armed.
            pattern = kind.pattern
            if armed:
                first = pattern.search(text, start, end, timeout=budget.engine_timeout())
            else:
                first = pattern.search(text, start, end)
            if first is None:
                continue
            resume = first.end() if first.end() > first.start() else start
            if armed:
                rest = pattern.finditer(text, resume, end, timeout=budget.engine_timeout())
            else:
                rest = pattern.finditer(text, resume, end)
            matches = itertools.chain((first,), rest) if resume != start else rest
            reportable = _add_candidates(kind, text, matches, allow, candidates) or reportable
    return True


def _suppress_after_timeout(
    plan: _Plan,
    rules: RuleSet,
    text: str,
    candidates: list[tuple[int, int, int, int, str, bool]],
    first: int = 0,
) -> None:
    """After a scan ran out of its budget: the suppressors a complete scan would have run
    around each reportable candidate from `first` on (the ones before are settled), under a
    budget of their own. A candidate whose surroundings they could not cover in it still
    claims its span but is not reported: an incomplete scan may find less than a complete
    one, never a span a suppressor (a price, a version, a quantity) would have claimed.

    Around a candidate means its trigger window (WINDOW characters either side, snapped to
    whitespace), where a complete scan looks for every built-in kind; a rule file's
    suppressor (Kind.wide) runs over the whole text, as in a complete scan.
    """
    spans = sorted(c[2:4] for c in itertools.islice(candidates, first, None) if c[5])
    if not spans:
        return
    reach = _Plan.WINDOW
    windows: list[list[int]] = []
    for start, end in spans:
        left, right = _snap_left(text, start - reach), _snap_right(text, end + reach)
        if windows and left <= windows[-1][1]:
            windows[-1][1] = max(windows[-1][1], right)
        else:
            windows.append([left, right])
    budget = _Budget(rules.timeout)
    covered = 0  # the text up to here had its suppressors run
    try:
        if plan.has_wide:
            _scan_window(
                plan, rules, text, 0, len(text), budget, candidates, wide=True,
                reportable=True, identifiers=False,
            )  # fmt: skip
        wide = False if plan.has_wide else None
        for left, right in windows:
            _scan_window(
                plan, rules, text, left, right, budget, candidates, wide=wide,
                reportable=True, identifiers=False,
            )  # fmt: skip
            covered = right
    except TimeoutError:
        # Windows are merged and in order: a candidate ending after `covered` lies in one
        # whose suppressors did not all run.
        for index in range(first, len(candidates)):
            candidate = candidates[index]
            if candidate[5] and candidate[3] > covered:
                candidates[index] = (*candidate[:5], False)


def _add_candidates(
    kind: Kind,
    text: str,
    matches: Iterator[Any],
    allow: frozenset[str],
    candidates: list[tuple[int, int, int, int, str, bool]],
) -> bool:
    """Append the checked matches of `kind` as candidates; True when one is reportable.

    The checks of _check_match, with the kind's fields read once per call instead of once
    per match (see _MatchChecks).
    """
    checks = _CHECKS.get(id(kind))
    if checks is None or checks[0] is not kind:
        checks = _match_checks(kind)
    _, group, trim, tests, context, claimed, neg_priority, kind_id, suppressor = checks
    reportable = False
    for match in matches:
        start, end = match.span(group)
        if start < 0:
            continue
        if trim:
            end = _trim(text, start, end)
        if end <= start:
            continue
        value = text[start:end]
        if tests:
            failed = False
            for test in tests:
                if not test(value):
                    failed = True
                    break
            if failed:
                continue
        if context is not None and not _context_ok(text, start, kind):
            continue
        if (claimed and value in claimed) or value in allow or suppressor:
            candidates.append((neg_priority, start - end, start, end, kind_id, False))
        else:
            candidates.append((neg_priority, start - end, start, end, kind_id, True))
            reportable = True
    return reportable


# A kind's checks as _add_candidates reads them: (kind, group, trim, value tests in
# _check_match's order (composition, then validators), context kind or None, deny | allow,
# -priority, id, suppressor).
_MatchChecks = tuple[Kind, Any, bool, tuple[Any, ...], Any, frozenset[str], int, str, bool]
_CHECKS: dict[int, _MatchChecks] = {}


def _match_checks(kind: Kind) -> _MatchChecks:
    """Build (and keep, by the kind's identity) the checks _add_candidates applies."""
    tests = tuple(_COMPOSITION[need] for need in kind.require if need in _COMPOSITION)
    tests += tuple(_VALIDATE[name] for name in kind.validators)
    checks = (
        kind,
        kind.group,
        bool(kind.trim),
        tests,
        kind if kind.context is not None else None,
        kind.deny | kind.allow,
        -kind.priority,
        kind.id,
        kind.suppressor,
    )
    if len(_CHECKS) >= 4096:
        _CHECKS.clear()  # bounded memory: rule sets built and dropped (load-time tests)
    _CHECKS[id(kind)] = checks
    return checks


def _extract_selected(
    plan: _Plan,
    rules: RuleSet,
    text: str,
    selected: tuple[int, ...],
    ends: dict[int, int],
    widths: list[Any],
    plain: bool = False,
    budget: _Budget | None = None,
) -> Extraction:
    """Run only the selected kinds (see core.prefilter) over a short text, each from where its
    first match can start. `plain`: the text is plain (rules.PLAIN_TEXT, or only neutral
    non-ASCII characters besides, see core.prefilter), so kinds with
    engine = "re" run their stdlib translation.

    Without a `budget`, only the wall clock is read between kinds: a thread's CPU time cannot
    run ahead of it, so while the wall clock is within the budget the CPU budget is too. Once
    it is not (a busy machine, a hard text), the text starts again under a CPU-time budget.
    """
    if not selected:
        return _NOTHING
    size = len(text)
    # The stdlib translations have no timeout: they are timed at load up to this length.
    plain = plain and size <= PLAIN_ENGINE_MAX
    identifier_runs, suppressor_runs = plan.selected_order(selected, plain)
    armed = size > UNARMED_WINDOW or plan.has_wide  # see _scan_window
    if budget is None and armed:
        budget = _Budget(rules.timeout)  # the engine's own timeout needs what is left
    deadline = _wall_clock() + rules.timeout
    candidates: list[tuple[int, int, int, int, str, bool]] = []
    digits = -1
    reportable = False
    complete = True
    try:
        # Identifier kinds first; suppressors only matter where an identifier was found.
        # While suppressors run: the lowest priority of a reportable candidate (kept up to
        # date as candidates come). A suppressor of lower priority changes nothing: it only
        # claims spans, and a claim takes effect only against candidates it outranks, whose
        # priority is at most its own; blocking an unreported candidate only matters where
        # that one would have blocked a reportable candidate of still lower priority. So only
        # suppressors of at least this priority run.
        lowest = 0
        lowest_reported = 1 << 30
        for runs in (identifier_runs, suppressor_runs):
            if runs is suppressor_runs:
                if not reportable:
                    break
                lowest = lowest_reported
            for index, kind, pattern, min_length, min_digits, simple, claims, tag in runs:
                if size < min_length or -tag[0] < lowest:
                    continue
                if min_digits > 1:
                    if digits < 0:
                        digits = _count_digits(text)
                    if digits < min_digits:
                        continue
                if budget is not None:
                    remaining = budget.remaining()
                    if remaining <= 0:
                        raise TimeoutError
                elif _wall_clock() >= deadline:
                    budget = _Budget(rules.timeout)
                    return _extract_selected(
                        plan, rules, text, selected, ends, widths, plain, budget
                    )
                # Where the kind can first match: a match holds a hit of each of its
                # conditions, ending no earlier than that condition's first hit, and starts at
                # most the condition's longest hit plus REACH characters before it (REACH is
                # the trigger windows' reach: the pure path looks no further from a hit).
                start = 0
                for ident, width in widths[index]:
                    bound = ends[ident] - width
                    if bound > start:
                        start = bound
                if start > 0:
                    # _snap_left, inlined: look-behinds still see what is before.
                    space = text.rfind(" ", 0, start)
                    start = max(space, text.rfind("\n", max(space, 0), start)) + 1
                # A first search, as in _scan_window: most runs find nothing, and only a hit
                # pays for the iterator (and, for a checked kind, the call that checks it).
                if armed and pattern is kind.pattern:  # stdlib translations have no timeout
                    first = pattern.search(text, start, timeout=budget.engine_timeout())
                else:
                    first = pattern.search(text, start)
                if first is None:
                    continue
                resume = first.end()
                if resume > first.start():
                    if armed and pattern is kind.pattern:
                        rest = pattern.finditer(text, resume, timeout=budget.engine_timeout())
                    else:
                        rest = pattern.finditer(text, resume)
                    matches = itertools.chain((first,), rest)
                elif armed and pattern is kind.pattern:  # an empty match: iterate as before
                    matches = pattern.finditer(text, start, timeout=budget.engine_timeout())
                else:
                    matches = pattern.finditer(text, start)
                if not simple:
                    if _add_candidates(kind, text, matches, claims, candidates):
                        reportable = True
                        if -tag[0] < lowest_reported:
                            lowest_reported = -tag[0]
                    continue
                # No group, trim, composition, validator or context check: the span as found.
                neg_priority, kind_id, report = tag
                for match in matches:
                    start, end = match.span()
                    if end <= start:
                        continue
                    if claims and text[start:end] in claims:
                        candidates.append((neg_priority, start - end, start, end, kind_id, False))
                    else:
                        candidates.append((neg_priority, start - end, start, end, kind_id, report))
                        if report:
                            reportable = True
                            if -neg_priority < lowest_reported:
                                lowest_reported = -neg_priority
    except TimeoutError:
        complete = False
        _suppress_after_timeout(plan, rules, text, candidates)
    if not candidates:
        return _NOTHING if complete else Extraction((), False)
    return Extraction(_resolve(text, candidates), complete)


def _extract_segmented(
    plan: _Plan, rules: RuleSet, text: str, selector: prefilter.Selector, complete: bool
) -> Extraction:
    """A long text: select kinds per segment, run each kind over its merged segments.

    Segments of about SEGMENT characters end at whitespace and are widened like trigger
    windows (WINDOW characters, snapped to whitespace), so a match that holds a gate hit or
    keyword of a segment lies inside that segment's window, as with trigger windows.
    """
    n = len(text)
    reach = _Plan.WINDOW
    windows: dict[int, list[list[int]]] = {}
    pos = 0
    while pos < n:
        cut = _snap_right(text, pos + SEGMENT) if pos + SEGMENT < n else n
        start = _snap_left(text, pos - reach)
        end = _snap_right(text, cut + reach) if cut < n else n
        part = text[start:end]
        chosen = selector.select(part, sliced=True)
        for index in chosen:
            spans = windows.setdefault(index, [])
            if spans and start <= spans[-1][1]:
                spans[-1][1] = max(spans[-1][1], end)
            else:
                spans.append([start, end])
        pos = cut + 1 if cut < n else n
    if plan.has_wide:
        # Wide kinds (rules.Kind.wide): their conditions asked of the whole text, and then
        # the whole text scanned, as _extract_selected and _scan_with_wide do.
        kinds = rules.kinds
        for index in windows:
            if kinds[index].wide:
                windows[index] = []
        for index in selector.select(text):
            if kinds[index].wide:
                windows[index] = [[0, n]]
        windows = {index: spans for index, spans in windows.items() if spans}
    budget = _Budget(rules.timeout)
    candidates: list[tuple[int, int, int, int, str, bool]] = []
    allow = rules.allowlist
    reportable = False
    order = sorted(windows)
    try:
        for suppressors in (False, True):
            if suppressors and not reportable:
                break
            for index in order:
                kind = rules.kinds[index]
                if kind.suppressor is not suppressors:
                    continue
                for start, end in windows[index]:
                    if end - start < kind.min_length:
                        continue
                    remaining = budget.remaining()
                    if remaining <= 0:
                        raise TimeoutError
                    if end - start > UNARMED_WINDOW or kind.wide:  # see _scan_window
                        matches = kind.pattern.finditer(
                            text, start, end, timeout=budget.engine_timeout()
                        )
                    else:
                        matches = kind.pattern.finditer(text, start, end)
                    found = _add_candidates(kind, text, matches, allow, candidates)
                    reportable = found or reportable
    except TimeoutError:
        complete = False
        _suppress_after_timeout(plan, rules, text, candidates)
    if not candidates:
        return Extraction((), complete)
    return Extraction(_resolve(text, candidates), complete)


_Entry = tuple[
    Kind, int, frozenset[str], tuple[str, ...], tuple[str, ...] | None, int, Any, tuple[str, ...]
]
# What the window loop needs per eligible kind: (kind, longer keywords still to check (empty:
# already let in), window_keywords, gate search or None, context words to search or None).
_Eligible = tuple[Kind, tuple[str, ...], tuple[str, ...], Any, tuple[str, ...] | None]
# A selected kind's run: (index, kind, pattern, min_length, digits needed, simple, claimed,
# (-priority, id, reported)).
_Run = tuple[int, Kind, Any, int, int, bool, frozenset[str], tuple[int, str, bool]]


class _Plan:
    """The cheap candidate pass for one rule set: where in a text any kind could match.

    A trigger is a digit run, a keyword, or an interior '.'/'-' (between letters or digits),
    so sentence punctuation and hyphenated words alone do not wake the patterns. Each trigger
    opens a window of WINDOW characters either side, widened to the next space or newline;
    kinds run only inside windows whose text passes their prefilter. A kind's match always
    holds one of its keywords, or a digit when it needs one (both checked at load), so every
    match lies inside a window.
    """

    # 24 characters: covers the longest multi-word shapes ("September 30, 2025",
    # "+1 (415) 555-0199"); the selector's start bounds use the same reach.
    WINDOW = prefilter.REACH

    def __init__(self, rules: RuleSet) -> None:
        singles: set[str] = set()
        parts: set[str] = set()
        keywords: set[str] = set()
        self.full_scan = False
        # Kinds that run over the whole text once their conditions hold anywhere in it
        # (rules.Kind.wide: user patterns, whose reach the built-ins' 24 characters may not cover).
        self.has_wide = any(kind.wide for kind in rules.kinds)
        self.gate_triggers: list[Any] = []
        # Characters before a window that a required context word may lie in (_context_ok).
        self.context_reach = 0
        self.gate_sources: list[str] = []
        self.identifier_kinds: list[_Entry] = []
        self.suppressor_kinds: list[_Entry] = []
        self._eligible: dict[
            tuple[frozenset[str], int, int], tuple[list[_Eligible], list[_Eligible]]
        ] = {}
        # Distinct digit-count and window-size thresholds: a window is keyed by how many it meets.
        self.digit_steps = sorted(
            {max(k.min_digits, 1 if k.prefilter_digit else 0) for k in rules.kinds} - {0}
        )
        # SHORT_WINDOW + 1 too: whether a window is long decides how context words are checked.
        self.size_steps = sorted({k.min_length for k in rules.kinds} - {0} | {SHORT_WINDOW + 1})
        for kind in rules.kinds:
            if not kind.keywords and not kind.prefilter_digit:
                self.full_scan = True  # a kind with no prefilter must see the whole text
            keywords.update(kind.keywords)
            gate = kind.context
            # What a window must hold for a required context word to be among the words
            # before a match: a one-word entry, or the last word of a phrase (whose words
            # punctuation or several spaces may separate: "ad, set").
            words = (
                tuple(sorted(gate.single_words | gate.phrase_ends))
                if gate is not None and gate.mode == "require"
                else None
            )
            if words is not None:
                self.context_reach = max(self.context_reach, 24 * gate.window)
            min_digits = max(kind.min_digits, 1 if kind.prefilter_digit else 0)
            entry = (
                kind,
                min_digits,
                frozenset(kind.keywords),
                kind.window_keywords,
                words,
                kind.min_length,
                kind.gate_pattern,
                tuple(word for word in kind.keywords if len(word) > 1),
            )
            (self.suppressor_kinds if kind.suppressor else self.identifier_kinds).append(entry)
            if kind.window_keywords and kind.gate:
                # A quoted token may hold its separator at an edge ('HTTP-'), where no
                # interior '.' or '-' opens a window: its gate (quotes and all) opens one.
                parts.add(kind.gate)
                self.gate_triggers.append(kind.gate_pattern.search)
                self.gate_sources.append(kind.gate)
            if kind.prefilter_digit:
                # Its match holds a digit (checked at load): digits alone can trigger it.
                singles.update("0123456789")
                continue
            for word in kind.keywords:
                if word in (".", "-"):
                    parts.add(r"[.\-](?<=[\p{L}\p{N}][.\-])(?=[\p{L}\p{N}])")
                elif len(word) == 1:
                    singles.add(word)
                else:
                    # Case-folded by character classes: the engine scans (?i:…) groups slower.
                    parts.add(
                        "".join(
                            f"[{c.lower()}{c.upper()}]" if c.isalpha() else regex.escape(c)
                            for c in word
                        )
                    )
        # For the selected path: per kind (index, kind, pattern, min_length, digits needed,
        # simple, claimed values, candidate tag), and the runs of each selection, identifier
        # kinds first.
        # `simple`: no group, trim or check, so a match is a candidate as it is. The claimed
        # values (deny list, kind and global allowlists) hold a span without reporting it.
        self._selected_runs = [
            (
                index,
                kind,
                kind.pattern,
                kind.min_length,
                max(kind.min_digits, 1 if kind.prefilter_digit else 0),
                kind.group == 0
                and not (kind.trim or kind.require or kind.validators or kind.context),
                kind.deny | kind.allow | rules.allowlist,
                (-kind.priority, kind.id, not kind.suppressor),
            )
            for index, kind in enumerate(rules.kinds)
        ]
        # The same for plain text: kinds with engine = "re" run their stdlib translation,
        # except a rule file's (Kind.wide): stdlib re has no timeout to arm (_scan_window).
        self._plain_runs = [
            run
            if run[1].plain_pattern is None or run[1].wide
            else (*run[:2], run[1].plain_pattern, *run[3:])
            for run in self._selected_runs
        ]
        self._orders: dict[
            tuple[tuple[int, ...], bool], tuple[tuple[_Run, ...], tuple[_Run, ...]]
        ] = {}
        # selected_order's memo by the identity of the selection, for plain False and True.
        self._by_identity: tuple[dict[int, tuple[tuple[int, ...], Any]], ...] = ({}, {})
        self._rules = rules
        self._selector: prefilter.Selector | None = None
        self._texts = 0
        first = []
        if singles:
            # One character class first: far cheaper per character than an alternation.
            first.append("[" + "".join(regex.escape(c) for c in sorted(singles)) + "]+")
        self.keywords = tuple(sorted(keywords))
        self.single_keywords = tuple(sorted(w for w in keywords if len(w) == 1))
        # For the fast reject: the trigger characters as one class, and longer keywords.
        # One stdlib character-class search rejects a text several times faster than
        # frozenset.isdisjoint (no per-character str objects); same characters, same answer.
        self.trigger_class = (
            re.compile("[" + "".join(re.escape(c) for c in sorted(singles)) + "]").search
            if singles
            else None
        )
        self.interior = any(p.startswith("[.\\-]") for p in parts)
        self.trigger_words = tuple(sorted(
            {w for k in rules.kinds if not k.prefilter_digit for w in k.keywords if len(w) > 1}
        ))  # fmt: skip
        self.word_needles = _needles(self.trigger_words)
        ordered = first + sorted(parts, key=len)
        self.trigger = regex.compile("|".join(ordered), regex.V1) if ordered else None

    def selector(self, *, now: bool = False) -> prefilter.Selector | None:
        """The compiled kind selector, once this process has extracted SELECT_AFTER texts
        (or `now`)."""
        if self._selector is None:
            if self._texts < SELECT_AFTER and not now:
                self._texts += 1
                return None
            self._selector = prefilter.selector(self._rules)
            if self._selector is None:
                self._texts = -(1 << 62)  # no Hyperscan: never ask again
        return self._selector

    def selected_order(
        self, selected: tuple[int, ...], plain: bool = False
    ) -> tuple[tuple[_Run, ...], tuple[_Run, ...]]:
        """The runs of the selected kinds: identifier kinds, then suppressors. `plain`: for a
        plain text (the stdlib translation of engine = "re" kinds)."""
        # The selector hands out the same tuple for the same conditions (its memo): found by
        # identity, no tuple is hashed. The entry holds the tuple, so its id is not reused.
        by_identity = self._by_identity[plain]
        entry = by_identity.get(id(selected))
        if entry is not None and entry[0] is selected:
            return entry[1]
        key = (selected, plain)
        found = self._orders.get(key)
        if found is None:
            if len(self._orders) >= 4096:
                self._orders.clear()  # bounded memory, as the selector's own memo
            table = self._plain_runs if plain else self._selected_runs
            runs = [table[index] for index in selected]
            found = self._orders[key] = (
                tuple(run for run in runs if not run[1].suppressor),
                tuple(run for run in runs if run[1].suppressor),
            )
        if len(by_identity) >= 4096:
            by_identity.clear()
        by_identity[id(selected)] = (selected, found)
        return found

    def eligible(
        self, present: frozenset[str], digit_step: int = 0, size_step: int = 0
    ) -> tuple[list[_Eligible], list[_Eligible]]:
        """Entries not ruled out by the one-character keywords, digit count and window size.

        `digit_step`/`size_step`: how many of `digit_steps`/`size_steps` the window meets.
        """
        key = (present, digit_step, size_step)
        found = self._eligible.get(key)
        if found is None:
            # Few distinct keyword sets occur: the filter runs once per set, not per window.
            if len(self._eligible) >= 4096:
                self._eligible.clear()  # bounded memory on texts with unusual keyword mixes
            digits = self.digit_steps[digit_step - 1] if digit_step else 0
            size = self.size_steps[size_step - 1] if size_step else 0
            found = self._eligible[key] = (
                _filter(self.identifier_kinds, present, digits, size),
                _filter(self.suppressor_kinds, present, digits, size),
            )
        return found

    def windows(
        self, text: str, timeout: float, *, triggered: bool = False
    ) -> list[tuple[int, int]]:
        """Merged (start, end) windows of `text` worth scanning; [] when nothing can match.

        `triggered`: the caller already knows may_trigger(text) is True.
        """
        n = len(text)
        if self.full_scan:
            return [(0, n)] if n else []
        if self.trigger is None or not n or (not triggered and not self.may_trigger(text)):
            return []
        spans: list[list[int]] = []
        reach = self.WINDOW
        # The trigger pattern is linear and its visits are capped (MAX_TRIGGERS), so below
        # SHORT_TRIGGER_TEXT characters arming the engine timeout costs more than it guards.
        budget = timeout * WALL_SLACK if n > SHORT_TRIGGER_TEXT else None
        pos = visits = 0
        while pos < n:
            if budget is None:  # even timeout=None costs a keyword parse
                match = self.trigger.search(text, pos)
            else:
                match = self.trigger.search(text, pos, timeout=budget)
            if match is None:
                break
            a, b = match.span()
            start = _snap_left(text, a - reach)
            end = _snap_right(text, b + reach)
            if spans and start <= spans[-1][1]:
                spans[-1][1] = max(spans[-1][1], end)
            else:
                spans.append([start, end])
            # Jump ahead instead of visiting every trigger (a run of 50,000 dashes is one
            # window), but re-read the window's tail so a trigger there can still widen it.
            pos = max(b, spans[-1][1] - reach)
            visits += 1
            if visits > MAX_TRIGGERS:
                return [(0, n)]  # trigger-dense text: one pass over everything is cheaper
            if spans[-1][1] == n and visits + (n - pos) <= MAX_TRIGGERS:
                # The last window reaches the end: a trigger in its tail could only merge
                # into it, and the tail is too short to reach the visit cap either.
                break
        return [(a, b) for a, b in spans]

    def triggered(self, texts: Sequence[str]) -> list[int]:
        """Indexes of the texts for which may_trigger() is True, found in a few passes.

        The texts are joined by "\n\x00\n": no trigger starts with or holds a line break,
        and an interior '.'/'-' needs a letter or digit on both sides, so every hit lies
        inside one text.
        """
        hit: list[int] = []
        left: Sequence[int] = range(len(texts))  # texts no search has hit yet
        if self.trigger_class is not None:
            # The character class text by text: one C-level map, no joined copy needed.
            flags = list(map(self.trigger_class, texts))
            hit = list(itertools.compress(left, flags))
            left = list(itertools.compress(left, map(operator.not_, flags)))
            scanner = self._rest_scanner()
            if scanner is not None and left:
                # Plain ASCII texts the class left: every further search in one compiled
                # pass over all of them.
                plain = [i for i in left if texts[i].isascii()]
                hit += [plain[j] for j in _scanner_hits(scanner, [texts[i] for i in plain])]
                left = [i for i in left if not texts[i].isascii()]
        searches: list[Any] = []
        if self.interior:
            searches.append(_INTERIOR)
        searches += self.gate_triggers
        if self.trigger_words:
            searches.append(None)  # the keywords, searched in the lower-cased texts
        for search in searches:
            if not left:
                break
            # Each round searches only the texts still left: most are hit by the first.
            chosen = [texts[i] for i in left]
            starts = _starts(chosen)
            found: set[int] = set()
            if search is not None:
                _texts_hit(search, _JOIN.join(chosen), starts, found)
            else:
                joined = _JOIN.join(chosen)
                lowered = _JOIN.join(t.lower() for t in chosen)
                if len(lowered) == len(joined):  # lower() kept every length: same offsets
                    for word in self.trigger_words:
                        _texts_hit(re.compile(re.escape(word)).search, lowered, starts, found)
                else:
                    found.update(j for j, t in enumerate(chosen) if self.may_trigger(t))
            if found:
                hit += [left[j] for j in found]
                left = [i for j, i in enumerate(left) if j not in found]
        return sorted(hit)

    def _rest_scanner(self) -> prefilter.Scanner | None:
        """The triggers after the character class (interior '.'/'-', gates, keywords) as one
        compiled scanner for ASCII text, or None (no Hyperscan, or a trigger is missing)."""
        if self.trigger_class is None or self._selector is None:
            return None  # only once the selector is in use (SELECT_AFTER texts)
        conditions: list[tuple[str, bool]] = []
        if self.interior:
            conditions.append((r"[A-Za-z0-9][.\-][A-Za-z0-9]", False))  # ASCII _INTERIOR
        conditions += [(source, False) for source in self.gate_sources]
        if self.trigger_words:
            conditions.append(("|".join(re.escape(word) for word in self.trigger_words), True))
        return prefilter.scanner(tuple(conditions))

    def may_trigger(self, text: str) -> bool:
        """C-speed pre-check: False when no trigger can occur (most chat messages)."""
        if self.trigger_class is not None and self.trigger_class(text) is not None:
            return True
        if self.interior and _has_interior(text):
            return True
        if any(search(text) is not None for search in self.gate_triggers):
            return True
        if self.trigger_words:
            # In ASCII text a keyword can only occur where its needles do; skips the lower().
            if text.isascii() and not any(map(text.__contains__, self.word_needles)):
                return False
            lower = text.lower()
            return any(map(lower.__contains__, self.trigger_words))
        return False


def _filter(
    entries: list[_Entry], present: frozenset[str], digits: int, size: int
) -> list[_Eligible]:
    out: list[_Eligible] = []
    for entry in entries:
        keywords, multi = entry[2], entry[7]
        if digits < entry[1] or size < entry[5]:
            continue  # needs more digits (min_digits) or a longer window (min_length)
        if not keywords or not keywords.isdisjoint(present):
            still: tuple[str, ...] = ()
        elif multi:
            still = multi  # let in only if a longer keyword occurs
        else:
            continue
        kind, also, words, gate = entry[0], entry[3], entry[4], entry[6]
        # A long window, or a short word list, searches the context words before the pattern.
        if words is not None and not (size > SHORT_WINDOW or len(words) <= 12):
            words = None
        out.append((kind, still, also, gate.search if gate is not None else None, words))
    return out


_JOIN = "\n\x00\n"
MANY_BATCH = 4096  # texts joined for one round of fast-reject searches
# The same test as _has_interior, as one search: [^\W_] is exactly str.isalnum().
_INTERIOR = re.compile(r"[.\-](?<=[^\W_][.\-])(?=[^\W_])").search


def _texts_hit(search: Any, joined: str, starts: list[int], hit: set[int]) -> None:
    """Add to `hit` the index of every joined text that `search` finds something in."""
    pos = 0
    last = len(starts) - 1
    while (match := search(joined, pos)) is not None:
        index = bisect.bisect_right(starts, match.start()) - 1
        hit.add(index)
        if index >= last:
            return
        pos = starts[index + 1]  # the rest of this text cannot add anything


def _starts(texts: list[str]) -> list[int]:
    """Offsets of the texts in _JOIN.join(texts) (C-level maps: no Python step per text)."""
    lengths = itertools.accumulate(map(len, texts[:-1]), initial=0)
    return list(map(operator.add, lengths, range(0, len(_JOIN) * len(texts), len(_JOIN))))


def _scanner_hits(scanner: prefilter.Scanner, texts: list[str]) -> set[int]:
    """Indexes of the (ASCII) texts in which `scanner` finds a hit, in one scan of them all."""
    if not texts:
        return set()
    ends = scanner.ends(_JOIN.join(texts).encode("ascii"))
    if not ends:
        return set()
    starts = _starts(texts)
    # A hit ends inside its text: end - 1 is the offset of its last character.
    return {bisect.bisect_right(starts, end - 1) - 1 for end in ends}


def _needles(words: tuple[str, ...]) -> tuple[str, ...]:
    """Case-exact substrings of which an ASCII text holds one if its lower() holds a word.

    A word's first character that is not a letter stands for it (case-folding leaves it
    alone); an all-letter word is represented by its first letter in both cases.
    """
    needles: set[str] = set()
    for word in words:
        fixed = next((c for c in word if not c.isalpha()), None)
        if fixed is not None:
            needles.add(fixed)
        else:
            needles.update((word[0].lower(), word[0].upper()))
    return tuple(sorted(needles))


def _has_interior(text: str) -> bool:
    """True when a '.' or '-' sits between two letters/digits (x.io, rm-de-10)."""
    last = len(text) - 1
    for mark in (".", "-"):
        i = text.find(mark, 1)
        while i != -1 and i < last:
            if text[i - 1].isalnum() and text[i + 1].isalnum():
                return True
            i = text.find(mark, i + 1)
    return False


_PLANS: dict[str, _Plan] = {}


def prepare(rules: RuleSet | None = None) -> None:
    """Build everything extraction with `rules` needs now (before forking workers, say)."""
    _plan(rules or default_rules()).selector(now=True)


def forget(rules: RuleSet) -> None:
    """Drop what extraction built for `rules` (a rule set used once, e.g. a load-time test)."""
    _PLANS.pop(rules.digest, None)


def _plan(rules: RuleSet) -> _Plan:
    plan = _PLANS.get(rules.digest)
    if plan is None:
        plan = _PLANS[rules.digest] = _Plan(rules)
    return plan


def _snap_left(text: str, i: int) -> int:
    """Start of the space-separated token at or before `i`."""
    if i <= 0:
        return 0
    space = text.rfind(" ", 0, i)
    # Bounded by the space found, so a text without newlines is never rescanned (quadratic).
    return max(space, text.rfind("\n", max(space, 0), i)) + 1


def _snap_right(text: str, i: int) -> int:
    """Position of the first space or newline at or after `i` (or the end)."""
    n = len(text)
    if i >= n:
        return n
    # One search for either character: str.find(" ") alone runs to the end of a long text
    # without spaces (JSON, base64) before the newline search can stop early.
    found = _SPACE_OR_NEWLINE.search(text, i)
    return n if found is None else found.start()


def passes_prefilter(kind: Kind, text: str) -> bool:
    """True when the cheap candidate pass lets `kind` run on `text`."""
    if kind.prefilter_digit and _DIGIT.search(text) is None:
        return False
    if kind.min_digits and sum(map(text.count, "0123456789")) < kind.min_digits:
        return False
    if kind.gate_pattern is not None and kind.gate_pattern.search(text) is None:
        return False
    if kind.keywords:
        lower = text.lower()
        return any(word in lower for word in kind.keywords)
    return True


def scan_kind(
    kind: Kind,
    text: str,
    timeout: float | None,
    rules: RuleSet | None = None,
    pos: int = 0,
    endpos: int | None = None,
) -> Iterator[tuple[int, int, str, bool]]:
    """Checked matches of one kind: (start, end, value, claim_only); may raise TimeoutError.

    claim_only marks a match that holds its span without being reported (a deny-listed word
    or an allowlisted value): nothing else may be reported inside it either. Look-behinds see
    text before `pos`; `endpos` must sit on whitespace (windows do).
    """
    allow = rules.allowlist if rules is not None else frozenset()
    for match in kind.pattern.finditer(text, pos, endpos, timeout=timeout):
        checked = _check_match(kind, text, *match.span(kind.group), allow)
        if checked is not None:
            start, end, claim_only = checked
            yield start, end, text[start:end], claim_only


def _check_match(
    kind: Kind, text: str, start: int, end: int, allow: frozenset[str]
) -> tuple[int, int, bool] | None:
    """(start, trimmed end, claim_only) for a raw match that passes the kind's checks, else None."""
    if start < 0:
        return None
    if kind.trim:
        end = _trim(text, start, end)
    if end <= start:
        return None
    value = text[start:end]
    if kind.require and not _composition_ok(value, kind.require):
        return None
    for name in kind.validators:
        if not _VALIDATE[name](value):
            return None
    if kind.context is not None and not _context_ok(text, start, kind):
        return None
    return start, end, value in kind.deny or value in kind.allow or value in allow


def _resolve(
    text: str, candidates: list[tuple[int, int, int, int, str, bool]]
) -> tuple[Identifier, ...]:
    # Priority first, then the longer span, then the earlier one. A bitmap of claimed
    # characters keeps this linear; checking against every accepted span goes quadratic.
    if len(candidates) == 1:  # most texts: nothing to compete with
        _neg_priority, _neg_length, start, end, kind_id, report = candidates[0]
        return (Identifier(kind_id, text[start:end], start, end),) if report else ()
    candidates.sort()
    found = []
    if len(candidates) <= 16:  # a few spans: comparing them beats a bitmap of the text
        taken: list[tuple[int, int]] = []
        for _neg_priority, _neg_length, start, end, kind_id, report in candidates:
            for claimed_start, claimed_end in taken:
                if start < claimed_end and claimed_start < end:
                    break
            else:
                taken.append((start, end))
                if report:
                    found.append(Identifier(kind_id, text[start:end], start, end))
    else:
        claimed = bytearray(len(text))
        for _neg_priority, _neg_length, start, end, kind_id, report in candidates:
            if claimed.find(1, start, end) != -1:
                continue
            claimed[start:end] = b"\x01" * (end - start)
            if report:
                found.append(Identifier(kind_id, text[start:end], start, end))
    if len(found) > 1:
        found.sort(key=_START)
    return tuple(found)


_START = operator.attrgetter("start")


def _trim(text: str, start: int, end: int) -> int:
    """Drop trailing sentence punctuation, closing quotes, unbalanced closing brackets and a
    last query parameter left without its value."""
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
        if char == "=":
            # `https://x.io/a?b=<script>`: the URL ends where its value was cut off, before
            # `?b=` (a value ending in '=', such as base64 padding, holds a '=' before it).
            cut = max(text.rfind("?", start, end), text.rfind("&", start, end))
            if cut > start and text.find("=", cut, end - 1) == -1:
                end = cut
                continue
        break
    return end


_HAS_ASCII_DIGIT = re.compile("[0-9]").search
_HAS_HEX_LETTER = re.compile("[a-fA-F]").search


def _composition_ok(value: str, require: tuple[str, ...]) -> bool:
    # C-level searches and maps: a generator per requirement cost more than the pattern.
    for need in require:
        if need == "digit" and _HAS_ASCII_DIGIT(value) is None:
            return False
        if need == "letter" and not any(map(str.isalpha, value)):
            return False
        if need == "upper" and not any(map(str.isupper, value)):
            return False
        if need == "lower" and not any(map(str.islower, value)):
            return False
        if need == "hexletter" and _HAS_HEX_LETTER(value) is None:
            return False
    return True


# Each composition requirement as one test of the value (_composition_ok's, one at a time).
_COMPOSITION: dict[str, Any] = {
    "digit": lambda value: _HAS_ASCII_DIGIT(value) is not None,
    "letter": lambda value: any(map(str.isalpha, value)),
    "upper": lambda value: any(map(str.isupper, value)),
    "lower": lambda value: any(map(str.islower, value)),
    "hexletter": lambda value: _HAS_HEX_LETTER(value) is not None,
}


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
    segments = [s for s in _PATH_SPLIT.split(body) if s]
    if len(segments) >= 2:
        return True
    if not segments:
        return False
    # One segment: a file with an extension, or a well-known root (/tmp) — not "/help".
    return _EXT.search(segments[-1]) is not None or (
        value.startswith("/") and segments[0] in _ROOTS
    )


def _is_quoted_token(value: str) -> bool:
    """A quoted token worth keeping: a letter and a separator (- _ / . @ or backslash)."""
    # Starts like a name or a path, not like an extension (.log) or a flag (--force).
    if not (value[0].isalnum() or value[0] in "/~\\@"):
        return False
    return any(map(str.isalpha, value)) and _SEPARATOR.search(value) is not None


def _is_degenerate(value: str) -> bool:
    """All one character, or a straight run like 123456 / ABCDEF: placeholders, not ids."""
    # count() of the first character and four `in` tests: no set or generator per value.
    return (
        not value  # "" lies in every sequence
        or value.count(value[0]) == len(value)
        or value in _SEQUENCES[0]
        or value in _SEQUENCES[1]
        or value in _SEQUENCES[2]
        or value in _SEQUENCES[3]
    )


# Length of an IBAN of each country that has them (the SWIFT IBAN registry, 89 countries).
_IBAN_LENGTHS = {
    **dict.fromkeys(["NO"], 15),
    **dict.fromkeys(["BE"], 16),
    **dict.fromkeys(["DK", "FI", "FK", "FO", "GL", "NL", "SD"], 18),
    **dict.fromkeys(["MK", "SI"], 19),
    **dict.fromkeys(["AT", "BA", "EE", "KZ", "LT", "LU", "MN", "XK"], 20),
    **dict.fromkeys(["CH", "HR", "LI", "LV"], 21),
    **dict.fromkeys(["BG", "BH", "CR", "DE", "GB", "GE", "IE", "ME", "RS", "VA"], 22),
    **dict.fromkeys(["AE", "GI", "IL", "IQ", "OM", "SO", "TL"], 23),
    **dict.fromkeys(["AD", "CZ", "ES", "MD", "PK", "RO", "SA", "SE", "SK", "TN", "VG"], 24),
    **dict.fromkeys(["LY", "PT", "ST"], 25),
    **dict.fromkeys(["IS", "TR"], 26),
    **dict.fromkeys(["BI", "DJ", "FR", "GR", "IT", "MC", "MR", "SM"], 27),
    **dict.fromkeys(["AL", "AZ", "BY", "CY", "DO", "GT", "HN", "HU", "LB", "NI", "PL", "SV"], 28),
    **dict.fromkeys(["BR", "EG", "PS", "QA", "UA"], 29),
    **dict.fromkeys(["JO", "KW", "MU", "YE"], 30),
    **dict.fromkeys(["MT", "SC"], 31),
    **dict.fromkeys(["LC"], 32),
    **dict.fromkeys(["RU"], 33),
}


def _is_iban(value: str) -> bool:
    """At least 8 digits after the check digits, and: in groups, capitals or the length of
    its country's IBANs (always that length when a short last group is letters only: a
    currency code ends a Mauritius or Seychelles IBAN, a currency after another is no part
    of it);
    else (run together) the mod-97 check."""
    compact = value.replace(" ", "")
    if sum(c.isdigit() for c in compact[4:]) < 8:
        return False
    last = value.rpartition(" ")[2]
    if (
        len(last) < 4
        and last.isalpha()
        and (_IBAN_LENGTHS.get(compact[:2].upper()) != len(compact))
    ):
        return False
    # In groups the shape says enough (a mistyped IBAN is still what the user typed): in
    # capitals, or in any case at the length of its country's IBANs.
    if " " in value and (
        compact.isupper() or _IBAN_LENGTHS.get(compact[:2].upper()) == len(compact)
    ):
        return True
    digits = "".join(str(int(c, 36)) for c in compact[4:] + compact[:4])
    return int(digits) % 97 == 1


_GROUP_SEPARATOR = re.compile("[ \\-]")


def _is_number_list(value: str) -> bool:
    """Three or more plain numbers without leading zeros that are all round (multiples of 100) or
    evenly spaced (1000 2000 3000, 1024 2048 4096): a list in prose, not one number."""
    groups = _GROUP_SEPARATOR.split(value)
    if len(groups) < 3 or any(g[:1] == "0" or not g.isdigit() for g in groups):
        return False
    numbers = [int(g) for g in groups]
    if all(n % 100 == 0 for n in numbers):
        return True
    triples = list(zip(numbers, numbers[1:], numbers[2:], strict=False))
    arithmetic = numbers[1] != numbers[0] and all(b - a == c - b for a, b, c in triples)
    geometric = numbers[1] != numbers[0] and all(b * b == a * c for a, b, c in triples)
    return arithmetic or geometric


def _is_range(value: str) -> bool:
    """Two numbers joined by '-' that read as a range in prose, not as one number: both
    round (multiples of 100: 10000-20000, 0900-1700), or the second above the first and
    below twice it (lines 1153-1175, 2019-2020, 12500-13750)."""
    groups = value.split("-")
    if len(groups) != 2:
        return False
    low, high = int(groups[0]), int(groups[1])
    return (low % 100 == 0 and high % 100 == 0) or low < high < 2 * low


def _luhn(digits: str) -> bool:
    """The Luhn (mod 10) check of a payment card number holds."""
    total = 0
    for position, char in enumerate(reversed(digits)):
        digit = ord(char) - 48
        if position % 2:
            digit = digit * 2 - 9 if digit > 4 else digit * 2
        total += digit
    return total % 10 == 0


def _card_separators(value: str) -> bool:
    """Groups joined by one separator throughout; or by ' ' and '-' mixed (4111-1111-1111
    1111), a looser shape that is a card only when its Luhn check digit holds."""
    if " " not in value or "-" not in value:
        return True
    return _luhn(value.replace(" ", "").replace("-", ""))


# Each validator: True when the value passes (rules.VALIDATORS names them).
_VALIDATE: dict[str, Any] = {
    "ipv6": _is_ipv6,
    "path": _is_path,
    "not_css_colour": lambda value: _HEX_COLOUR.match(value) is None or value[1:].isdigit(),
    "not_repeated": lambda value: not _is_degenerate(value),
    "file_stem": lambda value: _FILE_STEM.search(value.split(".", 1)[0]) is not None,
    "quoted_token": _is_quoted_token,
    "iban": _is_iban,
    "not_years": lambda value: (
        not all(len(g) == 4 and "1900" <= g <= "2099" for g in value.split(" "))
    ),
    "not_number_list": lambda value: not _is_number_list(value),
    "not_range": lambda value: not _is_range(value),
    "card_separators": _card_separators,
    # E.164: a phone number holds at most 15 digits, country code included; 8 at least here.
    "phone_digits": lambda value: 8 <= sum(map(value.count, "0123456789")) <= 15,
    # No numbering plan writes 12 digits as three groups of four (1234-5678-9012): that is
    # an account or reference number, never a phone.
    "phone_groups": lambda value: [len(g) for g in _DIGIT_GROUPS.findall(value)] != [4, 4, 4],
}


# Tokens that join a context word to its value and count as no word of the window.
_OPERATORS = frozenset(["=", "==", "===", ":=", ":", "->", "=>", "-->", "==>", "→", "⇒"])


def _context_ok(text: str, start: int, kind: Kind) -> bool:
    ctx = kind.context
    assert ctx is not None
    before = text[max(0, start - 24 * ctx.window) : start]
    # Whitespace-separated words with surrounding punctuation stripped ("zip:" is "zip"); an
    # operator between a word and the value ("=", "->") is no word. str.split is far cheaper
    # here than a regex word scan.
    tokens = before.split()
    if not _OPERATORS.isdisjoint(tokens[-ctx.reach :]):  # rare: read past the operators
        tokens = [token for token in tokens if token not in _OPERATORS]
    in_window = [w.strip(_PUNCTUATION).lower() for w in tokens[-ctx.window :]]
    hit = not ctx.single_words.isdisjoint(in_window)
    if not hit and ctx.phrases and not ctx.phrase_ends.isdisjoint(in_window):
        # A phrase counts as one word of the window: it ends among the window's words.
        words = [w.strip(_PUNCTUATION).lower() for w in tokens[-ctx.reach :]]
        first = len(words) - len(in_window)
        hit = any(
            end >= len(phrase) and tuple(words[end - len(phrase) : end]) == phrase
            for end in range(first + 1, len(words) + 1)
            for phrase in ctx.phrases
        )
    return hit if ctx.mode == "require" else not hit
