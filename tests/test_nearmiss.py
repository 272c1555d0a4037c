"""Verbatim check and near-miss diagnosis (the seed's invoice story and the design's examples)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from lexkeep.core.nearmiss import (
    Difference,
    NearMiss,
    best_near_miss,
    classify,
    edit_distance,
    is_kept,
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
