"""Report layout: a table only where its values fit whole, records whose values never break."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st
from rich.cells import cell_len

from lexkeep.core.layout import PROSE, WHOLE, fit_widths, record_lines, wrap_words

PATH = "/home/dev/.codex/sessions/2026/01/03/rollout-2026-01-03T04-05-06.jsonl:14"

words = st.lists(
    st.text(st.characters(blacklist_categories=("Cs", "Cc", "Zs", "Zl", "Zp")), min_size=1),
    min_size=1,
    max_size=12,
)


@settings(deadline=None)  # a busy shared machine, not the code, decides the time
@given(words, st.integers(1, 60))
def test_wrapping_breaks_at_spaces_only_and_loses_nothing(parts, width):
    text = " ".join(parts)
    lines = wrap_words(text, width)
    assert " ".join(lines) == text
    for line in lines:  # within the width, or a single word wider than it
        assert cell_len(line) <= width or line in parts


def test_fit_widths_narrows_the_widest_column_down_to_its_floor_only():
    assert fit_widths([10, 40, 8], [10, 20, 8], 50) == [10, 32, 8]
    assert fit_widths([10, 40, 8], [10, 33, 8], 50) is None  # 51 of floors in 50
    assert fit_widths([10, 40, 8], [10, 20, 8], 100) == [10, 40, 8]  # room enough: as they are


def test_a_record_is_one_line_a_field_in_a_log_however_long():
    fields = [("typed at", PATH, WHOLE), ("flags", "used before boundary", PROSE)]
    assert record_lines(fields, None) == [f"  typed at  {PATH}", "  flags     used before boundary"]


def test_a_value_too_wide_beside_its_label_goes_below_it_whole():
    fields = [("kind", "path_posix", WHOLE), ("evidence", PATH, WHOLE)]
    assert record_lines(fields, 80) == ["  kind      path_posix", "  evidence", f"    {PATH}"]
    # Wider than the line at its indent too: at the left edge, still whole.
    assert record_lines(fields, 60) == ["  kind      path_posix", "  evidence", PATH]


def test_prose_continues_under_itself_and_never_breaks_a_word():
    detail = f"error 429: rate limit exceeded, retry after 20s; see {PATH}"
    lines = record_lines([("attempts", "2", WHOLE), ("detail", detail, PROSE)], 100)
    assert lines == [
        "  attempts  2",
        "  detail    error 429: rate limit exceeded, retry after 20s; see",
        f"            {PATH}",
    ]
    lines = record_lines([("detail", detail, PROSE)], 70)  # the path fits beside no label
    assert lines == ["  detail", "    error 429: rate limit exceeded, retry after 20s; see", PATH]
