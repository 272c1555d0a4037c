"""The compiled kind selector (core.prefilter) never changes what is found.

Three extractors are compared span for span: the selected path (Hyperscan picks the kinds,
they scan the whole text), the windowed path (the pure-Python candidate pass), and a
reference that runs every kind's pattern over the whole text with no prefilter at all.
"""

from __future__ import annotations

import dataclasses
import functools
import random
import warnings
from pathlib import Path

import orjson
import pytest
from conftest import shared_data
from hypothesis import given, settings
from hypothesis import strategies as st

from lexkeep.core import identifiers, prefilter
from lexkeep.core.errors import SettingsWarning
from lexkeep.core.identifiers import _check_match, _plan, _resolve, extract, extract_many
from lexkeep.core.model import Extraction, Identifier
from lexkeep.core.rules import WALL_SLACK, RuleSet, build_rules, default_rules, load_rules

needs_selector = pytest.mark.skipif(
    not prefilter.available(), reason="Hyperscan is not installed on this platform"
)


def reference(text: str, rules: RuleSet | None = None) -> tuple[Identifier, ...]:
    """Every kind over the whole text, no keywords, gates, windows or selector."""
    rules = rules or default_rules()
    candidates = []
    for kind in rules.kinds:
        for match in kind.pattern.finditer(text):
            checked = _check_match(kind, text, *match.span(kind.group), rules.allowlist)
            if checked is not None:
                start, end, claim_only = checked
                report = not (claim_only or kind.suppressor)
                candidates.append((-kind.priority, start - end, start, end, kind.id, report))
    return _resolve(text, candidates) if candidates else ()


@functools.cache
def wide_rules() -> RuleSet:
    """The built-in kinds with a 10 s budget."""
    return build_rules({"settings": {"timeout_ms": 10_000}})


def selected(text: str, rules=None) -> tuple[Identifier, ...] | None:
    """The selected path's answer, or None where the selector does not answer."""
    rules = rules or default_rules()
    found = prefilter.selector(rules).select_with_ends(text)
    return identifiers._extract_selected(_plan(rules), rules, text, *found).identifiers


def windowed(text: str) -> tuple[Identifier, ...]:
    """The pure-Python path (LEXKEEP_PREFILTER=off gives the same for every text)."""
    rules = default_rules()
    plan = _plan(rules)
    if not plan.may_trigger(text):
        return ()
    candidates: list = []
    budget = identifiers._Budget(10.0)
    for start, end in plan.windows(text, 10.0, triggered=True):
        identifiers._scan_window(plan, rules, text, start, end, budget, candidates)
    return _resolve(text, candidates) if candidates else ()


TEXTS = [
    "refund order #W2378156 to ann@example.org, it cost $12.50 on 2025-08-14T10:30:00Z",
    "device plug_kt_coffee, MAC 00:1A:2B:3C:4D:5E, fe80::1ff:fe23:4567:890a db.internal:5432",
    "ticket PROJ-1234, branch feature/new-renderer, file src/foo/bar.py and offer_letter.pdf",
    "call +1 415-555-0132 at 10:30am, zip 19122, HTTP 503, 144.2 MB, code HAT136, rm-de-10",
    "customer cus_NffrFeUfNV2Hib in #ops-alerts, ERR_CONN_RESET, 10.0.0.12:8080, CVE-2024-3094",
    "label it 'needs-review', ship by May 20, 2025 or 20 May; card ending in 7447",
    "9 a.m._ and e.g._x and report.pdf._ are no snake names, but a_b is",
    "quoted `HTTP-` and `session-{id}.html`, a file a_.txt and ::a.m. (no address)",
]


@needs_selector
@pytest.mark.parametrize("text", TEXTS)
def test_selected_equals_reference_and_windowed(text: str) -> None:
    expected = reference(text)
    assert expected, text
    assert selected(text) == expected
    assert windowed(text) == expected


def tau_user_messages(limit: int) -> list[str]:
    texts = []
    for path in sorted((shared_data() / "apollo-tau-bench" / "tau" / "results").glob("*.json")):
        for run in orjson.loads(path.read_bytes()):
            for message in run.get("traj") or []:
                if message.get("role") == "user" and isinstance(message.get("content"), str):
                    texts.append(message["content"])
    random.Random(7).shuffle(texts)
    return texts[:limit]


@needs_selector
def test_selected_equals_reference_on_real_user_messages() -> None:
    texts = tau_user_messages(1500)
    assert len(texts) == 1500
    answered = found = 0
    for text in texts:
        got = selected(text)
        if got is None:
            continue
        answered += 1
        found += len(got)
        assert got == reference(text), text
    assert answered > 1300 and found > 300, (answered, found)


# Identifier-ish pieces, hard negatives and glue: texts where many kinds compete.
_PIECES = [
    "#W2378156", "ann@example.org", "@octocat", "$12.50", "12 USD", "45%", "2025-08-14",
    "2025-08-14T10:30:00Z", "10:30am", "9 pm", "00:1A:2B:3C:4D:5E", "fe80::1", "10.0.0.12:8080",
    "v2.0.1", "3.11.4", "PROJ-1234", "INV-2025-08-44719", "ERR_CONN_RESET", "yusuf_rossi_9620",
    "rm-de-10", "cus_NffrFeUfNV2Hib", "HAT136", "1656367028", "zip", "19122", "ending in",
    "7447", "HTTP", "503", "May 20", "20 May 2024", "on", "feature/new-renderer", "src/a/b.py",
    "/var/log/app.log", "C:\\Users\\x\\a.txt", "https://x.io/a?b=1", "www.x.com",
    "server-01.company.com", "offer_letter.pdf", "README.md", "'needs-review'", "`x_y`",
    "9fceb02", "CVE-2024-3094", "+1 415-555-0132", "(415) 555-0199", "144.2 MB", "250ms",
    "#ops-alerts", "a.m.", "e.g.", "_", "-", ".", "/", ":", "the", "Order", "x",
]  # fmt: skip
_GLUE = [" ", " ", "  ", ", ", "\n", "\t", "/", "-", ".", "(", ")", "'", '"', "`", ":", "_", ""]
_PIECE_TEXTS = st.lists(
    st.tuples(st.sampled_from(_PIECES), st.sampled_from(_GLUE)).map("".join), max_size=12
).map("".join)


@needs_selector
@settings(max_examples=300, deadline=None)
@given(_PIECE_TEXTS)
def test_selected_equals_reference_on_generated_texts(text: str) -> None:
    assert selected(text) == reference(text), text


@settings(max_examples=300, deadline=None)
@given(_PIECE_TEXTS)
def test_windowed_equals_reference_on_generated_texts(text: str) -> None:
    assert windowed(text) == reference(text), text


@needs_selector
@settings(max_examples=500, deadline=None)
@given(st.text(max_size=200))
def test_selected_equals_reference_on_arbitrary_text(text: str) -> None:
    assert selected(text) == reference(text), text


# Non-ASCII text is scanned with every non-ASCII character read as '?': the conditions such a
# character could satisfy (Unicode classes, non-ASCII literals, case-folded words with i/k)
# are not asked for, so the kinds they guard still run.
_WIDE = [
    "é", "ü", "’", "“", "”", "‘", "€", "£", "µ", "°", "—", "İ", "K", "\u00a0", "\u2003",
    "\x1c", "\x0b", "日本", "🙂", "١٢٣",
]  # fmt: skip
_WIDE_TEXTS = st.lists(
    st.one_of(st.sampled_from(_PIECES), st.sampled_from(_WIDE), st.sampled_from(_GLUE)),
    max_size=14,
).map("".join)


@needs_selector
@settings(max_examples=500, deadline=None)
@given(_WIDE_TEXTS)
def test_selected_equals_reference_on_non_ascii_mixes(text: str) -> None:
    assert selected(text) == reference(text), text


@needs_selector
@pytest.mark.parametrize(
    "text",
    [
        "price €12.50 for “ORD_378279” and ‘needs-review’, 5 µs, ändern_1.txt",
        "the file 1é.txt and /données/rapport_2.pdf, café-01.example.com",
        "\x1cINV-2025-08-44719\u00a0zip 19122 — order #W2378156’s refund",
    ],
)
def test_selected_equals_reference_on_non_ascii_text(text: str) -> None:
    expected = reference(text)
    assert expected, text
    assert selected(text) == expected


@needs_selector
def test_user_rules_get_their_own_selector(tmp_path: Path) -> None:
    path = tmp_path / "rules.toml"
    path.write_text(
        '[[kinds]]\nid = "acme"\ntier = "B"\npriority = 50\n'
        "regex = '''ACME-[0-9]{6}'''\ngate = '''E-[0-9]'''\n"
        'tests.positive = ["ACME-123456"]\ntests.negative = ["ACME-1"]\n',
        encoding="utf-8",
    )
    rules = load_rules(path)
    text = "bill ACME-123456 and order #W2378156"
    assert [i.value for i in selected(text, rules)] == ["ACME-123456", "#W2378156"]
    assert prefilter.selector(rules) is not prefilter.selector(default_rules())


@needs_selector
def test_extract_switches_to_the_selector_and_stays_exact() -> None:
    rules = default_rules()
    texts = [piece + " and " + other for piece in _PIECES for other in ("x", "zip 19122")]
    first = [extract(text, rules) for text in texts]  # crosses SELECT_AFTER on the way
    assert _plan(rules).selector() is not None
    again = [extract(text, rules) for text in texts]
    assert first == again
    assert all(
        result.identifiers == reference(text) for text, result in zip(texts, again, strict=True)
    )


def test_without_the_selector_nothing_changes(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LEXKEEP_PREFILTER", "off")
    assert not prefilter.available()
    for text in TEXTS:
        assert windowed(text) == reference(text)


def segmented(text: str) -> tuple[Identifier, ...]:
    """The long-text path: kinds selected per segment (see SEGMENT_TEXT_MIN)."""
    rules = wide_rules()  # a 10 s budget: a GC pause must not make the comparison flaky
    plan = _plan(rules)
    result = identifiers._extract_segmented(
        plan, rules, text, prefilter.selector(rules), complete=True
    )
    assert result.complete
    return result.identifiers


@needs_selector
@settings(max_examples=30, deadline=None)
@given(st.lists(_PIECE_TEXTS, min_size=40, max_size=80).map("\n".join))
def test_segmented_equals_reference_on_long_generated_texts(text: str) -> None:
    assert segmented(text) == reference(text)


@needs_selector
def test_segmented_equals_reference_on_long_real_messages() -> None:
    from lexkeep.core.ingest import read_records
    from lexkeep.core.model import Message

    texts = []
    for path in sorted((shared_data() / "claude-code-log").rglob("*.jsonl")):
        try:
            records = list(read_records(path))
        except Exception:  # noqa: BLE001 - the corpus holds deliberately malformed files
            continue
        texts += [r.text for r in records if isinstance(r, Message) and len(r.text or "") > 2000]
    assert len(texts) >= 20
    for text in texts[:60]:
        text = text[:20_000]
        assert segmented(text) == reference(text), text[:200]


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        (r"[0-9_\-][\w\-]{0,120}+(?:\.[\w\-]{1,60}+){0,3}\.[a-z]",
         r"[0-9_\-][\w\-]{0,120}(?:\.[\w\-]{1,60}){0,3}\.[a-z]"),
        (r"a?+b", "a?b"),
        (r"(?:ab){2}+c", "(?:ab){2}c"),
        (r"\+[0-9]{8}", r"\+[0-9]{8}"),  # an escaped plus is a character
        (r"x\}+", r"x\}+"),  # a quantifier on an escaped brace, not a possessive marker
        (r"[\w.@+\-]{1,255}", r"[\w.@+\-]{1,255}"),  # a plus inside a class
    ],
)  # fmt: skip
def test_gates_lose_possessive_markers_for_hyperscan(source: str, expected: str) -> None:
    assert prefilter._not_possessive(source) == expected


def test_a_garbage_collection_is_not_charged_to_the_scan_budget() -> None:
    import gc
    import time

    heap = [[i] for i in range(1_000_000)]  # a collection over this takes tens of ms
    budget = identifiers._Budget(0.05)
    started = time.thread_time()
    gc.collect()
    assert time.thread_time() - started > 0.01, "the collection was too quick to tell"
    time.sleep(0.06)  # past the wall-clock deadline: the CPU clock is read
    assert budget.remaining() > 0.03
    del heap


def test_the_engine_timeout_follows_cpu_time_left_not_wall_time_waited() -> None:
    """On a loaded machine a scanning thread waits while its budget is barely spent. The
    `regex` engine's wall-clock net was armed at ten times `remaining()`, a lower bound that
    shrinks with wall time: a wait near the wall deadline tripped it, and a complete scan was
    reported incomplete (the guard then said an argument was not checked to its end)."""
    import time

    budget = identifiers._Budget(0.05)
    time.sleep(0.045)  # waiting, as a descheduled thread does: wall time, no CPU time
    assert budget.remaining() > 0  # still inside the wall deadline: a bound of ~5 ms
    assert budget.engine_timeout() > 0.04 * WALL_SLACK


@settings(max_examples=200, deadline=None)
@given(st.lists(st.one_of(_PIECE_TEXTS, _WIDE_TEXTS, st.text(max_size=40)), max_size=30))
def test_extract_many_equals_extract_on_each(texts: list[str]) -> None:
    rules = default_rules()
    assert extract_many(texts, rules) == [extract(text, rules) for text in texts]


def test_extract_many_on_real_messages_and_edge_cases() -> None:
    rules = default_rules()
    texts = tau_user_messages(3000) + [
        "",
        "no trigger here",
        "İstanbul www.x.com and KELVIN K",  # lower() makes the first longer
        "a\x00b 12345",
        "\n\x00\n",
        "ends with a quote 'ab",
        "'cd' starts with one",
    ]
    assert extract_many(texts, rules) == [extract(text, rules) for text in texts]
    assert extract_many([], rules) == []


def test_relaxed_makes_only_long_repeats_outside_classes_unbounded() -> None:
    relaxed = prefilter._relaxed
    assert relaxed(rb"[0-9_\-][\w\-]{0,120}(?:\.[\w\-]{1,60}){0,3}\.[a-z]") == (
        rb"[0-9_\-][\w\-]{0,}(?:\.[\w\-]{1,}){0,3}\.[a-z]"
    )
    assert relaxed(rb"a\{1,40}b{2,31}") == rb"a\{1,40}b{2,31}"  # a literal; a short repeat
    assert relaxed(rb"[{1,40}]x{1,40}") == rb"[{1,40}]x{1,}"  # braces inside a class
    assert relaxed(rb"[^]{1,40}]{0,99}") == rb"[^]{1,40}]{0,}"  # ']' first in a class


@needs_selector
@pytest.mark.parametrize(
    ("text", "plain"),
    [
        ("I’m at “INV-2025-08-44719” — see ‘needs-review’ 🙂 and ’ORD_378279’", True),
        ("• order #W2378156… €12.50, £3 → /var/log/app-3.log", True),
        ("’quoted-token’ “x_y” ‘a/b’", True),
        ("café INV-2025-08-44719", False),  # a letter: scanned wide
        ("\x1cINV-2025-08-44719 ’", False),  # an ASCII control that \s reads differently
    ],
)
def test_neutral_characters_are_scanned_as_plain_text(text: str, plain: bool) -> None:
    *_, got_plain = prefilter.selector(default_rules()).select_with_ends(text)
    assert got_plain is plain
    assert selected(text) == reference(text)


_TRIGGER_EDGES = [
    "no trigger here", "a.b", "x-y", "end.", "-lead", "'ab'", "‘ab’", "GHSA-xxxx", "Www",
    "CVE-", "http://x", "é.x", "ü-2", "İ", "k", "\x1c", "a.\n\x00\nb", "'ab\n'", "",
]  # fmt: skip


@needs_selector
@settings(max_examples=300, deadline=None)
@given(st.lists(st.lists(st.sampled_from(_TRIGGER_EDGES + _WIDE), max_size=4).map(" ".join)))
def test_triggered_equals_may_trigger_with_the_compiled_scanner(texts: list[str]) -> None:
    plan = _plan(default_rules())
    plan.selector(now=True)
    assert plan._rest_scanner() is not None
    assert plan.triggered(texts) == [i for i, text in enumerate(texts) if plan.may_trigger(text)]


@needs_selector
def test_triggered_equals_may_trigger_on_real_messages() -> None:
    plan = _plan(default_rules())
    plan.selector(now=True)
    texts = tau_user_messages(3000)
    assert plan.triggered(texts) == [i for i, text in enumerate(texts) if plan.may_trigger(text)]


@needs_selector
def test_selected_path_restarts_under_a_cpu_budget_once_the_wall_clock_runs_out() -> None:
    rules = default_rules()
    text = "refund INV-2025-08-44719 to ann@example.org, order #W2378156"
    found = prefilter.selector(rules).select_with_ends(text)
    plan = _plan(rules)
    # A budget the wall clock has already spent: the restart under a CPU budget gives up.
    spent = dataclasses.replace(rules, timeout=0.0)
    assert identifiers._extract_selected(plan, spent, text, *found) == Extraction((), False)
    done = identifiers._extract_selected(plan, rules, text, *found)
    assert done.complete and done.identifiers == reference(text)


@settings(max_examples=300, deadline=None)
@given(
    st.lists(
        st.tuples(st.integers(0, 3), st.integers(0, 30), st.integers(1, 6), st.booleans()),
        max_size=40,
    )
)
def test_resolve_keeps_the_best_span_of_every_overlap(spans: list) -> None:
    """Both ways of claiming (span list, text bitmap) equal a plain reference."""
    text = "x" * 40
    candidates = [(-p, -n, s, s + n, f"k{p}", r) for p, s, n, r in spans]
    expected, claimed = [], set()
    for _p, _n, start, end, kind, report in sorted(candidates):
        if claimed.isdisjoint(range(start, end)):
            claimed.update(range(start, end))
            if report:
                expected.append(Identifier(kind, text[start:end], start, end))
    assert list(_resolve(text, list(candidates))) == sorted(expected, key=lambda i: i.start)


# User kinds are wide (rules.Kind.wide): once their conditions hold they run over the whole
# text. A title far longer than REACH after its keyword, and a code found by a gate.
USER_KINDS = r"""
[settings]
timeout_ms = 10000

[[kinds]]
id = "release_title"
tier = "B"
priority = 60
keywords = ["release:"]
regex = '''release: [A-Z][a-z]{1,12}(?: [A-Z][a-z]{1,12}){2,12}'''
tests.positive = [
  { text = "ship release: Alpha Bravo Charlie today", value = "release: Alpha Bravo Charlie" },
]
tests.negative = ["release: alpha"]

[[kinds]]
id = "acme"
tier = "B"
priority = 50
regex = '''ACME-[0-9]{6}'''
gate = '''E-[0-9]'''
prefilter_digit = true
tests.positive = ["ACME-123456"]
tests.negative = ["ACME-1"]

# Competes with the built-in `quantity` suppressor (priority 77) for "144 MB".
[[kinds]]
id = "sku"
tier = "B"
priority = 60
keywords = ["sku"]
regex = '''sku [0-9]{1,6}(?: [A-Z]{2,3})?'''
tests.positive = ["sku 12345"]
tests.negative = ["sku"]
"""

_USER_PIECES = [
    "release: Alpha Bravo Charlie Delta Echo Foxtrot Golf Hotel", "release: alpha",
    "release: Alpha Bravo", "ACME-123456", "ACME-1", "release:", "Delta Echo Foxtrot",
    "sku 144 MB", "sku 12345", "sku 7 GB", "sku",
]  # fmt: skip
_USER_TEXTS = st.lists(
    st.one_of(st.sampled_from(_PIECES), st.sampled_from(_USER_PIECES), st.sampled_from(_GLUE)),
    max_size=16,
).map("".join)


@functools.cache
def user_rules() -> RuleSet:
    import tempfile

    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "rules.toml"
        path.write_text(USER_KINDS, encoding="utf-8")
        rules = load_rules(path)
    assert not _plan(rules).full_scan  # the windows path must really use windows
    return rules


def every_path(text: str, rules: RuleSet) -> dict[str, tuple[Identifier, ...]]:
    """The reference and each extraction path (windows, selection, segments) on `text`."""
    paths = {"reference": reference(text, rules)}
    plan = _plan(rules)
    candidates: list = []
    if plan.may_trigger(text):
        windows = plan.windows(text, 10.0, triggered=True)
        identifiers._scan_with_wide(
            plan, rules, text, windows, identifiers._Budget(10.0), candidates
        )
    paths["windows"] = _resolve(text, candidates) if candidates else ()
    if prefilter.available():
        selector = prefilter.selector(rules)
        found = selector.select_with_ends(text)
        paths["selected"] = identifiers._extract_selected(plan, rules, text, *found).identifiers
        paths["segments"] = identifiers._extract_segmented(
            plan, rules, text, selector, complete=True
        ).identifiers
    return paths


@settings(max_examples=300, deadline=None)
@given(_USER_TEXTS)
def test_user_kinds_are_found_the_same_on_every_path(text: str) -> None:
    paths = every_path(text, user_rules())
    assert all(found == paths["reference"] for found in paths.values()), paths


@settings(max_examples=15, deadline=None)
@given(st.lists(_USER_TEXTS, min_size=60, max_size=120).map("\n".join))
def test_user_kinds_in_long_texts_are_found_the_same_on_every_path(text: str) -> None:
    paths = every_path(text, user_rules())
    assert all(found == paths["reference"] for found in paths.values()), paths


@pytest.mark.parametrize("value", ["off", "OFF", "0", "false", "no"])
def test_the_prefilter_turns_off_with_any_usual_false_value(monkeypatch, value) -> None:
    """Only 'off' did: LEXKEEP_PREFILTER=0 or false left it on without a word."""
    monkeypatch.setenv("LEXKEEP_PREFILTER", value)
    assert prefilter.available() is False


def test_an_unknown_prefilter_value_is_named_once_and_left_on(monkeypatch) -> None:
    monkeypatch.setenv("LEXKEEP_PREFILTER", "of")
    monkeypatch.setattr(prefilter, "_WARNED", set())
    with pytest.warns(SettingsWarning, match="LEXKEEP_PREFILTER='of' is neither off nor on"):
        on = prefilter.available()
    assert on is (prefilter._hs is not None)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        prefilter.available()  # said once is enough


# Numbers every few characters merge the trigger windows into one of several hundred
# characters, where the windowed path searches the context words before the patterns.
_DENSE = " ".join(f"x{i}y" for i in range(60))


@pytest.mark.parametrize(
    "phrase",
    [
        "for ad, set 101 please",  # a phrase whose words punctuation separates
        "for ad\n\nset 101 please",  # or a line break and more than one space
        "card ending, in 7447.",
    ],
)
def test_a_context_phrase_counts_in_long_windows_as_in_short_texts(phrase: str) -> None:
    text = f"{_DENSE} {phrase} {_DENSE}"
    alone = [i.value for i in extract(phrase).identifiers if i.kind == "short_number"]
    assert alone, phrase
    assert len(windowed(text)) > 0
    assert [i.value for i in windowed(text) if i.kind == "short_number"] == alone
    assert windowed(text) == reference(text)


def test_a_context_word_as_far_back_as_the_window_reaches_counts(tmp_path: Path) -> None:
    """A rule file may widen a built-in's context window to 20 words (480 characters)."""
    rules_file = tmp_path / "rules.toml"
    rules_file.write_text(
        """
[[kinds]]
id = "short_number"
context = { words = ["voucher"], window = 20, mode = "require" }
tests.positive = [{ text = "voucher a b c d e f g h i j k l m n o p q 4711", value = "4711" }]
tests.negative = ["4711"]
""",
        encoding="utf-8",
    )
    rules = load_rules(rules_file)
    words = " ".join(["abcdefghijklmnopqrst"] * 18)  # 18 words, 378 characters
    for text in (f"voucher {words} 4711", f"{_DENSE} voucher {words} 4711 {_DENSE}"):
        # extract() on the first texts of a process, and without Hyperscan: trigger windows.
        found = extract(text, rules).identifiers
        assert [(i.kind, i.value) for i in found] == [("short_number", "4711")]


@needs_selector
@pytest.mark.parametrize(
    "text",
    [
        # Only kinds above every suppressor report: the suppressors below them are not run.
        "mail ann@example.org about 123e4567-e89b-12d3-a456-426614174000, it cost $12.50",
        # A reportable kind below a suppressor: the suppressor still claims its span.
        "ticket PROJ-1234 costs $1,249.00 for 100MB, version 2.4.1, at 10:30am",
        "ann@example.org paid 3.5% of INV-2025-08-44719 for 100MB, 250 ms late",
    ],
)
def test_suppressors_below_every_reported_kind_change_nothing(text: str) -> None:
    assert selected(text) == reference(text)
    assert selected(text) == windowed(text)


def _checked_by_check_match(kind, text: str, allow: frozenset[str]) -> tuple[list, bool]:
    """Candidates of every match of `kind`, checked one by one by _check_match (the slow path)."""
    candidates = []
    for match in kind.pattern.finditer(text):
        checked = _check_match(kind, text, *match.span(kind.group), allow)
        if checked is not None:
            start, end, claim_only = checked
            report = not (claim_only or kind.suppressor)
            candidates.append((-kind.priority, start - end, start, end, kind.id, report))
    return candidates, any(candidate[5] for candidate in candidates)


@settings(max_examples=200, deadline=None)
@given(st.one_of(_PIECE_TEXTS, _USER_TEXTS), st.sets(st.sampled_from(_PIECES), max_size=4))
def test_add_candidates_checks_every_match_as_check_match_does(text: str, allowed: set) -> None:
    # _add_candidates reads each kind's checks once per call (identifiers._match_checks);
    # every kind, built-in and from a rule file, with and without a global allowlist.
    for rules in (default_rules(), user_rules()):
        for allow in (rules.allowlist, frozenset(allowed) | rules.allowlist):
            for kind in rules.kinds:
                candidates: list = []
                reportable = identifiers._add_candidates(
                    kind, text, kind.pattern.finditer(text), allow, candidates
                )
                assert (candidates, reportable) == _checked_by_check_match(kind, text, allow)


def test_add_candidates_follows_a_rule_set_built_again() -> None:
    # The checks are kept by the kind's identity: a kind built anew (same id, other lists)
    # gets its own, never the checks of an earlier kind that had its id.
    text = "ship ACME-123456 and ACME-654321 today"
    for deny in (["ACME-123456"], ["ACME-654321"], []):
        rules = build_rules(
            {
                "use_default": False,
                "lists": {"acme_deny": deny},
                "kinds": [
                    {
                        "id": "acme", "tier": "B", "priority": 50, "regex": "ACME-[0-9]{6}",
                        "deny_list": "acme_deny",
                        "tests": {"positive": ["ACME-111111"], "negative": ["ACME-1"]},
                    }
                ],
            }
        )  # fmt: skip
        kind = rules.kinds[0]
        candidates: list = []
        matches = kind.pattern.finditer(text)
        identifiers._add_candidates(kind, text, matches, frozenset(), candidates)
        reported = [text[c[2] : c[3]] for c in candidates if c[5]]
        assert reported == [v for v in ("ACME-123456", "ACME-654321") if v not in deny]


def test_every_token_start_condition_names_a_built_in_pattern() -> None:
    # A condition keyed by a pattern the built-ins no longer have would silently do nothing.
    rules = default_rules()
    kinds = {kind.id: kind for kind in rules.kinds}
    for kind_id in prefilter._TOKEN_STARTS:
        assert prefilter._token_start(kind_id, kinds[kind_id].regex) is not None, kind_id
    # Any other pattern (a rule file's) gets none.
    assert prefilter._token_start("iban", kinds["iban"].regex + "x") is None


_START_PIECES = [
    "https://shop.example.com/orders/604110", "/var/log/billing/batch-49814.log",
    "DE89 3704 0044 0532 0131 00", "GB82WEST12345698765432", "de89370400440532013100",
    "3add6527a4946d15b17dd255f4c18226aed23b0f", "feature/new-renderer", "src/a/b.py",
    "@scope/pkg/index.js", "a/b", "x.io", "db.internal:5432", "report_2024.pdf", "a.b.c.tar.gz",
    "~/notes.md", "./run.sh", "C:\\x\\y.txt", "(src/a.py)", "'fix/bug-1'", "=feat/x_y",
    "user@host.com", "1.2.3", "--", "..", "#", "$", "\u201c", "\u2014", "\u00e9", "\u00a0",
    "INV-2026-01-47416", "#W6359560", "v1.2.3.4", "10.0.0.1/24", "PROJ-12", "UTC-5", "\u20ac",
    "sk_live_abcdef12", "4111-1111-1111-1111", "755715227", "a-b-c", "~/x", "../y", "/(z)",
    "/[id]/page.tsx", "2025-08-14", "1234-5678-9012", "0xdeadbeef1", "ABCDEF0123", "x9-y",
    "1656367028", "deadbeef", "cafe1234", "1234567a", "abcdef9", "9abcdef", "a1b2c3d4e5f6",
    "DEADBEEF7", "7FFFFFFFF", "Deadbeef1", "534.135C745.736", "e3b0c44298fc1c149afbf4c8996fb9",
    "0" * 64 + "a", "f" * 127 + "1", "1abcdef.", "abc1234-", "ab12cd34.5", "9fceb02-x",
]  # fmt: skip
_START_TEXTS = st.lists(
    st.tuples(
        st.sampled_from(_START_PIECES + _PIECES), st.sampled_from([*_GLUE, "@", "=", "~", "$"])
    ).map("".join),
    max_size=10,
).map("".join)


@settings(max_examples=500, deadline=None)
@given(_START_TEXTS)
def test_a_token_start_condition_holds_wherever_its_kind_matches(text: str) -> None:
    # Each condition is a superset of its pattern on plain text (stdlib re reads it as
    # Hyperscan does there); texts that are not plain never ask it. Where a match the kind's
    # checks keep begins, the condition matches: from the character before it (its look-
    # behind), or from the start of the text. A match the checks refuse is no candidate.
    import re

    rules = default_rules()
    plain = text.isascii() and prefilter._PLAIN(text) is not None
    for kind in rules.kinds:
        condition = prefilter._token_start(kind.id, kind.regex)
        if condition is None or not plain:
            continue
        compiled = re.compile(condition)
        for match in kind.pattern.finditer(text):
            span = match.span(kind.group)
            if identifiers._check_match(kind, text, *span, frozenset()) is None:
                continue
            begins = match.start()
            assert compiled.match(text, max(begins - 1, 0)) is not None, (kind.id, text, span)


def test_every_implied_gate_is_the_gate_of_a_kind_with_a_start_condition() -> None:
    # A gate that no longer matches its kind's is asked again (a superset, only slower).
    kinds = {kind.id: kind for kind in default_rules().kinds}
    for kind_id, gate in prefilter._IMPLIED_GATES.items():
        assert kinds[kind_id].gate == gate, kind_id
        assert prefilter._token_start(kind_id, kinds[kind_id].regex) is not None, kind_id


@settings(max_examples=500, deadline=None)
@given(_START_TEXTS)
def test_an_implied_gate_holds_wherever_its_start_condition_does(text: str) -> None:
    # Plain text is scanned without these gates: where the start condition holds, the gate
    # would have held too (stdlib re reads both as Hyperscan does on plain text).
    import re

    if not (text.isascii() and prefilter._PLAIN(text) is not None):
        return
    for kind_id, gate in prefilter._IMPLIED_GATES.items():
        if re.search(prefilter._TOKEN_STARTS[kind_id][1], text) is not None:
            assert re.search(gate, text) is not None, (kind_id, text)


@functools.cache
def selector_asking_every_gate() -> prefilter.Selector:
    """A selector for the built-in kinds that scans plain text with every gate too."""
    implied = dict(prefilter._IMPLIED_GATES)
    prefilter._IMPLIED_GATES.clear()
    try:
        return prefilter.Selector(default_rules())
    finally:
        prefilter._IMPLIED_GATES.update(implied)


@needs_selector
@settings(max_examples=300, deadline=None)
@given(st.one_of(_START_TEXTS, _PIECE_TEXTS, st.text(max_size=80)))
def test_leaving_out_the_implied_gates_selects_the_same_kinds(text: str) -> None:
    every = selector_asking_every_gate()
    used = prefilter.selector(default_rules())
    for sliced in (False, True):
        assert used.select(text, sliced=sliced) == every.select(text, sliced=sliced), text


@needs_selector
def test_text_that_is_not_plain_still_asks_the_gates_start_conditions_imply() -> None:
    # A letter outside ASCII: the start conditions cannot be asked, the gates still are.
    rules = default_rules()
    kinds = [kind.id for kind in rules.kinds]
    select = prefilter.selector(rules).select
    assert not {"hex", "digit_run", "iban"} & {kinds[i] for i in select("naïve 12345 x")}
    assert "hex" in {kinds[i] for i in select("naïve 9fceb02 x")}
    assert "hex" not in {kinds[i] for i in select("naive 12345 x")}


@needs_selector
@settings(max_examples=300, deadline=None)
@given(_START_TEXTS)
def test_selected_with_token_starts_equals_reference(text: str) -> None:
    assert selected(text, wide_rules()) == reference(text, wide_rules())


@needs_selector
def test_short_number_is_not_run_where_no_number_stands_alone() -> None:
    # Its context word ("order") and its gate (three digits) hold, but every run of digits
    # here is part of a longer token, so the pattern cannot match: the kind is not run. Once
    # three digits stand alone, it is.
    rules = default_rules()
    kinds = [kind.id for kind in rules.kinds]
    select = prefilter.selector(rules).select
    text = "order INV-2025-08-44719 cost $129.99 at 10:30, ref AB1234567"
    assert "short_number" not in {kinds[i] for i in select(text)}
    assert selected(text) == reference(text)
    assert "short_number" in {kinds[i] for i in select(text + " and order 4471")}


@needs_selector
def test_gates_inside_urls_and_absolute_paths_do_not_select_kinds_that_cannot_start_there() -> None:
    rules = default_rules()
    kinds = [kind.id for kind in rules.kinds]
    text = (
        "could you verify https://shop.example.com/orders/604110 and the log at "
        "/var/log/billing/batch-49814.log for commit 3add6527a4946d15b17dd255f4c18226aed23b0f"
    )
    chosen = {kinds[i] for i in prefilter.selector(rules).select(text)}
    assert chosen.isdisjoint({"iban", "hostname", "path_rel", "file_name", "branch_name"})
    assert {"url", "path_posix", "hex"} <= chosen
    assert selected(text) == reference(text)
