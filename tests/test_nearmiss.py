"""Verbatim check and near-miss diagnosis (the seed's invoice story and the design's examples)."""

from __future__ import annotations

import datetime

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lexkeep.core.nearmiss import (
    EDIT_STEPS,
    Difference,
    NearMiss,
    best_near_miss,
    classify,
    edit_distance,
    fold,
    grouped_runs,
    is_kept,
    typed_day,
)


@pytest.mark.parametrize(
    ("value", "text"),
    [
        ("W5061109", "#W5061109"),
        ("7091239", "gift_card_7091239"),
        ("src/foo/bar.py", "/repo/src/foo/bar.py"),
        ("INV-2025-08-44719", "lookup INV-2025-08-44719 now"),
        ("C:\\Users\\x\\a.txt", "C:\\Users\\x\\a.txt"),
    ],
)
def test_kept_at_a_boundary(value, text):
    assert is_kept(value, text)


@pytest.mark.parametrize(
    ("value", "text"),
    [
        ("INV-2025-08-4471", "INV-2025-08-44719"),
        ("123", "91234"),
        ("W5061109", "W50611090"),
        ("abc", "xabc"),
        ("", "anything"),
    ],
)
def test_not_kept_inside_a_longer_token(value, text):
    assert not is_kept(value, text)


def test_kept_when_a_later_occurrence_is_bounded():
    assert is_kept("4471", "44719 and 4471")


@pytest.mark.parametrize(
    ("expected", "found", "difference"),
    [
        ("INV-2025-08-44719", "INV-2025-08-4471", Difference.TRUNCATED),
        ("INV-2025-08-4471", "INV-2025-08-44719", Difference.EXTENDED),
        ("INV-2025-08-44719", "inv-2025-08-44719", Difference.CASE),
        ("INV-2025-08-44719", "INV\u20132025\u201308\u201344719", Difference.CASE),
        ("#W2378156", "W2378156", Difference.SEPARATOR),
        ("ORD_88412", "ORD-88412", Difference.SEPARATOR),
        ("007342", "7342", Difference.SEPARATOR),
        ("INV-2025-08-44719", "INV-2025-08-47419", Difference.EDIT),
        ("8JX2QD", "8JXQ2D", Difference.EDIT),
    ],
)
def test_classify(expected, found, difference):
    miss = classify(expected, found)
    assert miss is not None and miss.difference == difference


@pytest.mark.parametrize(
    ("expected", "found"),
    [
        ("INV-2025-08-44719", "INV-2025-08-44719"),  # equal is not a miss
        ("8JX2", "8JX3"),  # too short for an edit
        ("INV-2025-08-44719", "ORD-1999-01-00001"),
        ("src/foo/bar.py", "src"),  # a fragment far shorter than the value
    ],
)
def test_not_a_near_miss(expected, found):
    assert classify(expected, found) is None


def test_best_near_miss_prefers_the_closest_kind():
    texts = ['{"q": "inv-2025-08-44719"}', "INV-2025-08-4471"]
    miss = best_near_miss("INV-2025-08-44719", ["INV-2025-08-4471", "inv-2025-08-44719"])
    assert miss is not None and miss.difference == Difference.CASE
    assert best_near_miss("INV-2025-08-44719", texts[1:]).found == "INV-2025-08-4471"


def test_best_near_miss_trims_edge_punctuation():
    miss = best_near_miss("ORD_88412", ["see (ORD-88412)."])
    assert miss is not None and miss.found == "ORD-88412"


@given(st.text(max_size=12), st.text(max_size=12))
def test_edit_distance_is_symmetric_and_bounded(a, b):
    d = edit_distance(a, b, 3)
    assert d == edit_distance(b, a, 3)
    assert 0 <= d <= 4
    assert (d == 0) == (a == b)


@pytest.mark.parametrize(
    ("expected", "found"),
    [
        ("+1 (555) 010-9999", "+15550109999"),
        ("+15550109999", "+1 (555) 010-9999"),
        ("(555) 010-9999", "5550109999"),
        ("+44 20 7946 0958", "442079460958"),
    ],
)
def test_phone_formatting_is_a_separator_change(expected: str, found: str) -> None:
    assert classify(expected, found) == NearMiss(found, Difference.SEPARATOR, 0)


@pytest.mark.parametrize(
    ("expected", "text", "found", "difference"),
    [
        # typed compact, written in groups: the groups are one near miss, not three tokens
        ("+15550109999", '{"phone": "+1 (555) 010-9999"}', "+1 (555) 010-9999", "separator"),
        ("5550109999", "call (555) 010-9999 now", "(555) 010-9999", "separator"),
        ("DE89370400440532013000", "iban DE89 3704 0044 0532 0130 00.", None, "separator"),
        ("4111111111111111", "card 4111 1111 1111 1111, exp 12/26", None, "separator"),
        ("ORD_88412", "order ORD 88412 shipped", "ORD 88412", "separator"),
        # typed in groups, written in other groups or another case
        ("+1 415-555-0132", "dial +1 415 555 0132", "+1 415 555 0132", "separator"),
        (
            "DE89 3704 0044 0532 0130 00",
            "iban de89 3704 0044 0532 0130 00",
            "de89 3704 0044 0532 0130 00",
            "case",
        ),
    ],
)
def test_a_value_written_in_groups_is_a_separator_near_miss(
    expected: str, text: str, found: str | None, difference: str
) -> None:
    miss = best_near_miss(expected, [text])
    assert miss is not None
    assert miss.difference == difference
    assert miss.distance == 0
    if found is None:
        found = text.split(" ", 1)[1].split(",")[0].rstrip(".")
    assert miss.found == found
    assert miss.found in text


@pytest.mark.parametrize(
    ("expected", "text"),
    [
        ("+15550109999", "+1, 555, 010, 9999"),  # a list, not one number in groups
        ("+15550109999", '["+1", "555", "010-9999"]'),
        ("in_progress", "the job is in progress"),  # no digit: words of prose, not groups
        ("AB12 3456", "see AB12 3456"),  # kept as typed: no near miss at all
        ("+15550109999", "1 5550 109"),
    ],
)
def test_words_or_list_items_are_no_grouped_near_miss(expected: str, text: str) -> None:
    miss = best_near_miss(expected, [text])
    assert miss is None or " " not in miss.found


def test_a_single_token_near_miss_comes_before_an_equal_grouped_one() -> None:
    miss = best_near_miss("ORD-88412", ["ORD 88412 or ORD_88412"])
    assert miss == NearMiss("ORD_88412", Difference.SEPARATOR, 0)
    # a case change in groups beats a separator change in one token
    miss = best_near_miss("AB12 3456 7890", ["AB12-3456-7890 or ab12 3456 7890"])
    assert miss == NearMiss("ab12 3456 7890", Difference.CASE, 0)


@pytest.mark.parametrize(
    ("expected", "text", "found", "difference", "distance"),
    [
        # typed in groups, written in groups with one character changed
        (
            "DE89 3704 0044 0532 0130 00",
            "iban DE89 3704 0044 0532 0131 00 please",
            "DE89 3704 0044 0532 0131 00",
            "edit",
            1,
        ),
        ("4111 1111 1111 1111", "card 4111 1111 1111 1117.", "4111 1111 1111 1117", "edit", 1),
        ("4111 1111 1111 1111", "card (4111 1111 1111 111)", "4111 1111 1111 111", "truncated", 1),
        # typed run together, written in groups with one digit changed
        ("+15550109999", '{"phone": "+1 (555) 010-9998"}', "+1 (555) 010-9998", "edit", 1),
        # the groups hold one digit more: an extension, as it is run together
        ("15550109999", "+1 555 010 99999", "+1 555 010 99999", "extended", 1),
    ],
)
def test_an_edit_inside_a_value_written_in_groups_is_a_near_miss(
    expected: str, text: str, found: str, difference: str, distance: int
) -> None:
    assert best_near_miss(expected, [text]) == NearMiss(found, Difference(difference), distance)


@pytest.mark.parametrize(
    ("expected", "text"),
    [
        ("DE89 3704 0044 0532 0130 00", "iban DE89 3704 0044 0532 9999 00"),  # 4 edits
        ("AB12 34", "see AB12 35"),  # under 6 characters: no edit is a near miss
        ("4111 1111 1111 1111", "4111, 1111, 1111, 1112"),  # a list, not groups
        ("in_progress_2", "the job is in progress 3"),  # words of prose
    ],
)
def test_far_or_listed_groups_are_no_edit_near_miss(expected: str, text: str) -> None:
    miss = best_near_miss(expected, [text])
    assert miss is None or " " not in miss.found


def _reference_runs(text: str) -> list[tuple[int, int, str]]:
    """The grouped runs' tokens by their plain definition: runs of two or more tokens with
    only white space and brackets between them, each token's fold without separators; the
    runs without a digit left out."""
    import regex

    groups = regex.compile(r"[\p{L}\p{N}\-_.:/#\\@+~]+(?:[\s()]+[\p{L}\p{N}\-_.:/#\\@+~]+)+")
    token = regex.compile(r"[\p{L}\p{N}\-_.:/#\\@+~]+")
    separators = regex.compile(r"[\s\-_.:/#\\+()]+")
    out = []
    for run in groups.finditer(text):
        tokens = tuple(
            (m.start(), m.end(), separators.sub("", fold(m.group())))
            for m in token.finditer(text, run.start(), run.end())
        )
        if regex.search(r"[0-9]", "".join(t[2] for t in tokens)):
            out.append(tokens)
    return out


@settings(max_examples=400, deadline=None)
@given(st.text(st.sampled_from("ab1 0Z-_.:/#\\@+~(),;\t\n\x1cé１²Ⅻ"), max_size=40))
def test_grouped_runs_follow_their_definition(text: str) -> None:
    runs = grouped_runs(text)
    # Runs left in that hold no ASCII digit (a digit of another script without one) are
    # never searched (a value looked for in groups has one): only their cost counts.
    assert [run[1] for run in runs if any(c in "0123456789" for c in run[2])] == (
        _reference_runs(text)
    )
    for _text, tokens, joined, heads, ends in runs:
        assert joined == "".join(t[2] for t in tokens)
        assert ends == [len("".join(t[2] for t in tokens[: i + 1])) for i in range(len(tokens))]
        assert heads == sorted(heads)
        assert all(joined[h : ends[-1]] == joined[h : ends[-1]].lstrip("0") for h in heads)


def test_the_grouped_edit_search_visits_a_bounded_number_of_places() -> None:
    """Each place where a piece of the value occurs costs a visit; past EDIT_STEPS of them
    the search stops, so a text made of the value's pieces costs no more than that."""
    value, near = "4111 1111 1111 1111", "4111 1111 1111 1112"
    few = "411 x " * 100 + near
    miss = best_near_miss(value, [few])
    assert miss == NearMiss(near, Difference.EDIT, 1)
    many = "411 x " * (EDIT_STEPS + 10) + near
    assert best_near_miss(value, [many]) is None


@pytest.mark.parametrize(
    ("expected", "text", "found"),
    [
        ("March 5, 2025", "book 2025-03-05 please", "2025-03-05"),
        ("5 March 2025", "2025-03-05", "2025-03-05"),
        ("20th May 2024", "from 2024-05-20T10:30:00Z", "2024-05-20T10:30:00Z"),
        ("Sept 1", "date=2026-09-01", "date=2026-09-01"),  # no year typed: any year
        ("May 20", "on 2024-05-20", "2024-05-20"),
        ("Mar. 9", "2025-03-09", "2025-03-09"),
        ("3rd of Nov", "2025-11-03", "2025-11-03"),
    ],
)
def test_a_textual_date_written_as_an_iso_date_is_a_date_near_miss(
    expected: str, text: str, found: str
) -> None:
    miss = best_near_miss(expected, [text])
    assert miss == NearMiss(found.split("=")[-1], Difference.DATE, 0)
    assert classify(expected, found.split("=")[-1]) == miss


@pytest.mark.parametrize(
    ("expected", "text"),
    [
        ("March 5, 2025", "2025-03-06"),  # another day
        ("March 5, 2025", "2024-03-05"),  # another year
        ("March 5, 2025", "2025-05-03"),  # month and day swapped
        ("May 20", "2024-20-05"),  # no such month
        ("May 20", "2024-05-201"),  # a longer number
        ("INV-2025-03-05", "2025-03-05"),  # not a date the user wrote in words
        ("March 5, 2025", "2025-03-05-7"),  # a code that starts with a date
    ],
)
def test_other_dates_and_non_dates_are_no_date_near_miss(expected: str, text: str) -> None:
    miss = best_near_miss(expected, [text])
    assert miss is None or miss.difference != Difference.DATE


@pytest.mark.parametrize(
    ("typed", "when", "sent", "same"),
    [
        ("April 3", "2026-03-30", "2026-04-03", True),
        ("April 3", "2026-03-30", "2019-04-03", False),  # years away from when it was typed
        ("April 3", "2026-04-10", "2027-04-03", True),  # the next one
        ("April 3", "2026-04-10", "2025-04-03", False),  # the last one was 2026-04-03
        ("Jan 3", "2026-12-28", "2027-01-03", True),  # over New Year, either way
        ("Dec 28", "2027-01-02", "2026-12-28", True),
        ("Feb 29", "2026-05-01", "2024-02-29", True),  # the last February 29
        ("Feb 29", "2026-05-01", "2028-02-29", True),  # and the next
        ("Feb 29", "2026-05-01", "2020-02-29", False),
        ("April 3", None, "2019-04-03", True),  # no time: any year
    ],
)
def test_a_date_typed_without_a_year_means_the_one_before_or_after_it_was_typed(
    typed: str, when: str | None, sent: str, same: bool
) -> None:
    day = None if when is None else datetime.date.fromisoformat(when)
    miss = best_near_miss(typed, [f"date={sent}"], day)
    assert (miss == NearMiss(sent, Difference.DATE, 0)) is same
    assert (classify(typed, sent, day) == NearMiss(sent, Difference.DATE, 0)) is same


@pytest.mark.parametrize(
    ("time", "day"),
    [
        ("2026-03-30T10:00:00Z", datetime.date(2026, 3, 30)),
        ("2026-03-30 23:59:59+05:00", datetime.date(2026, 3, 30)),  # its own date
        ("1774864800", datetime.date(2026, 3, 30)),  # Unix seconds
        ("1774864800123", datetime.date(2026, 3, 30)),  # and milliseconds
        ("yesterday", None),
        ("2026-13-01T00:00:00Z", None),  # no such month
        (None, None),
    ],
)
def test_the_day_a_message_was_typed_is_read_from_its_time(time: str | None, day) -> None:
    assert typed_day(time) == day
