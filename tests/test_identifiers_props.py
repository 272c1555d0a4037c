"""Property tests: spans are exact substrings, never overlap, and any Unicode is safe."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from lexkeep.core.identifiers import extract
from lexkeep.core.rules import default_rules

# Text built from identifier-ish pieces and separators hits the patterns far more often than
# uniform random characters would.
PIECES = st.sampled_from(
    [
        "#W2378156", "INV-2025-08-44719", "https://x.io/a?b=1", "ann@example.org", "/var/log/a.log",
        "yusuf_rossi_9620", "2025-08-14T10:30:00Z", "10.0.0.1", "$1,234.56", "12.5%", "v2.0.1",
        "(", ")", "'", '"', "`", ".", ",", "-", "_", "/", "\\", ":", "@", "#", " ", "\n", "zip",
        "ending in", "1656367028", "19122", "é", "١٢٣", "🙂", "\u200b", "\u00a0", "May 20",
    ]
)  # fmt: skip
MIXED = st.one_of(
    st.lists(PIECES, max_size=40).map("".join),
    st.text(max_size=300),
    st.lists(st.one_of(PIECES, st.text(max_size=5)), max_size=40).map("".join),
)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(MIXED)
def test_spans_are_exact_and_disjoint(text: str) -> None:
    result = extract(text, default_rules())
    previous_end = -1
    for ident in result.identifiers:
        assert 0 <= ident.start < ident.end <= len(text)
        assert text[ident.start : ident.end] == ident.value
        assert ident.start >= previous_end  # sorted and never overlapping
        previous_end = ident.end


@settings(max_examples=200, deadline=None)
@given(st.text(alphabet=st.characters(), max_size=500))
def test_arbitrary_unicode_never_raises(text: str) -> None:
    result = extract(text)
    assert isinstance(result.complete, bool)


@settings(max_examples=100, deadline=None)
@given(MIXED, MIXED)
def test_an_identifier_keeps_its_span_when_text_is_appended_after_whitespace(
    a: str, b: str
) -> None:
    # Context only looks backwards and windows end at whitespace: appending text after a
    # newline never changes what was found before it.
    first = extract(a).identifiers
    combined = extract(a + "\n\n" + b).identifiers
    assert [i for i in combined if i.end <= len(a)][: len(first)] == list(first)


# Plain text made of the characters identifier patterns care about.
_PLAIN_PIECES = [
    *("a", "Z", "k9", "0", "7", "_", "-", ".", "/", "\\", "@", ":", "#", "$", "%", "'", '"'),
    *("`", "(", ")", "com", "log", "pdf", "x_y", "AB-12", "12:30", "pm", "GB", "::", " ", "\n"),
]


@settings(max_examples=300, deadline=None)
@given(st.lists(st.sampled_from(_PLAIN_PIECES), max_size=60).map("".join))
def test_engine_re_kinds_agree_with_the_regex_engine_on_plain_text(text: str) -> None:
    """engine = "re" kinds: the stdlib translation finds the regex engine's spans."""
    for kind in default_rules().kinds:
        if kind.plain_pattern is not None:
            want = [m.span(kind.group) for m in kind.pattern.finditer(text)]
            got = [m.span(kind.group) for m in kind.plain_pattern.finditer(text)]
            assert got == want, kind.id


@settings(max_examples=300, deadline=None)
@given(
    st.text(alphabet=st.characters(), max_size=80)
    | st.text(alphabet="0123456789٣௫ab\ud800 ", max_size=40)
)
def test_digits_are_counted_in_any_text(text: str) -> None:
    """ASCII digits only (not other decimal digits), lone surrogates included."""
    from lexkeep.core.identifiers import _count_digits

    assert _count_digits(text) == sum(text.count(digit) for digit in "0123456789")
