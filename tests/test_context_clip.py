"""The bounded projection never cuts a built-in identifier that holds spaces in half."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lexkeep.compaction.context import clip_answer
from lexkeep.core.identifiers import scan_kind
from lexkeep.core.rules import default_rules

RULES = default_rules()

# Spaced values beyond the kinds' own examples: shapes their patterns accept.
EXTRA = [
    "call +1 415 555 0100 today",
    "The follow-up meeting is on July 24th, 2024 at noon",
    "due by 20th of September 2024 please",
    "pay to QA58 DOHB 0000 1234 5678 90AB CDEF G now",
    "pay to AB12 1234 5678 CDEF GHIJ KLMN OPQR, now",
    "tracking 1Z 9 9 9 A A 1 0 1 2 3 4 5 6 7 8 4 arrived",
    "at 10:30 a.m. on Mar. 9 for $ 5 million",
    "at 2025-08-14 10:30 the card 3782 822463 10005 was declined",
]


def _spans(text: str) -> list[tuple[int, int, str, str]]:
    """Every match holding a space of every built-in kind (suppressors too), overlaps kept."""
    found = []
    for kind in RULES.kinds:
        for start, end, value, _ in scan_kind(kind, text, None, RULES):
            if " " in value:
                found.append((start, end, kind.id, value))
    return found


def _assert_no_span_cut(text: str, limit: int) -> None:
    clipped = clip_answer("a1", text, limit)
    assert text.startswith(clipped.text)
    assert len(clipped.text.encode()) <= limit
    assert clipped.clipped_bytes == len(text.encode()) - len(clipped.text.encode())
    cut = len(clipped.text)
    for start, end, kind, value in _spans(text):
        assert not start < cut < end, f"{kind} {value!r} cut to {text[start:cut]!r} at {limit}"


def _spaced_examples() -> list[str]:
    texts = []
    for kind in RULES.kinds:
        for example in kind.positive:
            if any(" " in value for *_, value in _spans(example.text)):
                texts.append(example.text)
    return texts


SPACED = _spaced_examples()


def test_the_built_in_kinds_have_spaced_examples():
    kinds = {kind for text in SPACED for _, _, kind, _ in _spans(text)}
    assert kinds == RULES.spaced_kinds
    for text in EXTRA:
        assert _spans(text), text  # each extra shape is one the extractor finds


def test_every_kind_whose_pattern_admits_a_space_is_a_spaced_kind():
    """The kinds the clip rule keeps whole are derived from the definitions (a positive
    example whose value holds a space), not listed by hand. A kind whose pattern finds a
    spaced value in any text the definitions or these tests hold, but that shows no spaced
    example of its own, would escape that derivation and the per-kind test below: it must
    show one."""
    texts = [e.text for kind in RULES.kinds for e in (*kind.positive, *kind.negative)]
    texts += EXTRA
    admits = {kind for text in texts for _, _, kind, _ in _spans(text)}
    assert admits == RULES.spaced_kinds


@pytest.mark.parametrize("kind", sorted(RULES.spaced_kinds))
def test_no_example_of_a_spaced_kind_is_cut_at_any_limit(kind):
    """Each kind the definitions show with spaces (RuleSet.spaced_kinds), by name: a kind with
    spaces added to kinds.toml is tested here without a word in this file."""
    examples = [e.text for e in RULES.kind(kind).positive if " " in e.value]
    assert examples
    for text in examples:
        for limit in range(len(text.encode()) + 1):
            _assert_no_span_cut("see " + text + " and more", limit)


def test_the_docs_name_the_spaced_kinds_the_definitions_hold():
    """docs/context.md lists the kinds whose values hold spaces that a cut never splits."""
    docs = (Path(__file__).resolve().parent.parent / "docs" / "context.md").read_text()
    listed = docs.split("including those that hold spaces (", 1)[1].split(")", 1)[0]
    assert set(re.findall(r"`([a-z_]+)`", listed)) == RULES.spaced_kinds


@pytest.mark.parametrize("text", SPACED + EXTRA)
def test_no_spaced_identifier_is_cut_at_any_limit(text):
    for lead in ("", "see ", "answer 0: " + "x" * 30 + " "):
        full = lead + text + " and more words after it"
        for limit in range(len(full.encode()) + 1):
            _assert_no_span_cut(full, limit)


@pytest.mark.parametrize(
    ("text", "ends"),
    [
        ("answer 0: " + "x" * 216 + " call +1 415 555 0100 today", "x" * 216),
        ("The follow-up meeting is on " + "y" * 198 + " July 24th, 2024 at noon", "y" * 198),
    ],
)
def test_a_phone_or_date_at_the_bound_is_left_out_whole(text, ends):
    clipped = clip_answer("a0", text, 240)
    assert clipped.text.endswith(ends)
    assert clipped.clipped_bytes == len(text.encode()) - len(clipped.text.encode())


@pytest.mark.parametrize(
    ("text", "limit", "kept"),
    [
        # A code that holds letters and digits is no part of a spaced number: cut after it.
        ("order INV-2025-08-44719 is fine", 24, "order INV-2025-08-44719"),
        # Two spaces, a line break or a tab never join the parts of a built-in identifier.
        ("call 415  555 0100", 9, "call 415"),
        ("total 12\n34 more", 9, "total 12"),
        ("words only here and there", 12, "words only"),
    ],
)
def test_cuts_that_split_nothing_stay_where_they_were(text, limit, kept):
    assert clip_answer("a1", text, limit).text == kept


_words = st.sampled_from(
    [
        "call",
        "on",
        "of",
        "at",
        "by",
        "the",
        "May",
        "July",
        "Sept",
        "Mar.",
        "24th,",
        "20th",
        "2024",
        "415",
        "555-0100",
        "+1",
        "(415)",
        "$",
        "$5",
        "12",
        "USD",
        "MB",
        "144.2",
        "pm",
        "a.m.",
        "7:45",
        "DE89",
        "3704",
        "0044",
        "NWBK",
        "CDEF",
        "G",
        "1Z",
        "999",
        "AA1",
        "01",
        "4111",
        "1111",
        "9400",
        "percent",
        "million",
        "INV-2025-08-44719",
        "é",
        "zip",
        "19122",
    ]
)
_gaps = st.sampled_from([" ", " ", " ", " ", "  ", "\n", ", "])


@settings(max_examples=300, deadline=None)
@given(
    words=st.lists(st.tuples(_words, _gaps), min_size=1, max_size=24),
    limit=st.integers(min_value=0, max_value=120),
)
def test_random_number_prose_is_never_cut_inside_a_spaced_match(words, limit):
    text = "".join(word + gap for word, gap in words).rstrip()
    _assert_no_span_cut(text, limit)
