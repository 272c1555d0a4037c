"""`lexkeep.core.controls`: what plain text must not hold, and its escaped forms."""

from __future__ import annotations

import re

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lexkeep.core.controls import first_control, maybe_unsafe, visible, visible_json

# Characters near every edge of the rules, mixed with ordinary text.
EDGES = (
    "\x00\x1b\x7f\x9b\r\n\t\u200b\u200c\u200d\u200e\u200f\u061c\u202a\u202e\u2066\u2069"
    "\u206a\u206f\u2060\ufeff\ufe0e\ufe0f\ufe00\ufff9\ufffb\U0001f3f4\U000e0001\U000e0020"
    "\U000e0041\U000e0067\U000e0062\U000e0065\U000e006e\U000e007f\U000e0100\U0001f468"
)
texts = st.text(
    alphabet=st.one_of(st.sampled_from(EDGES), st.characters(exclude_categories=("Cs",))),
    max_size=40,
)

SCOTLAND = "\U0001f3f4" + "".join(chr(0xE0000 + ord(c)) for c in "gbsct") + "\U000e007f"


@settings(max_examples=400, deadline=None)
@given(texts)
def test_visible_leaves_nothing_unsafe_and_changes_only_unsafe_text(text):
    shown = visible(text)
    assert first_control(shown) is None
    if first_control(text) is None:
        assert shown is text


@settings(max_examples=400, deadline=None)
@given(st.lists(texts, max_size=4))
def test_visible_json_decodes_to_the_same_values_and_leaves_nothing_unsafe(values):
    data = visible_json(orjson.dumps({"v": values}))
    assert orjson.loads(data) == {"v": values}
    assert first_control(data.decode("utf-8")) is None


# What maybe_unsafe stands in for: any byte that starts such a character in UTF-8.
_LEAD_BYTES = re.compile(rb"[\x7f\xc2\xe2\xef\xf3]")


@settings(max_examples=400, deadline=None)
@given(st.lists(texts, max_size=4))
def test_maybe_unsafe_is_a_search_for_the_lead_bytes_and_misses_no_unsafe_text(values):
    data = orjson.dumps({"v": values})
    assert maybe_unsafe(data) == (_LEAD_BYTES.search(data) is not None)
    if not maybe_unsafe(data):
        assert first_control(data.decode("utf-8")) is None


@pytest.mark.parametrize(
    ("text", "maybe"),
    [
        ("plain ascii", False),
        ("del \x7f", True),
        ("caf\u00e9 \u4e2d\u6587", False),  # \xc3 and \xe4 start no such character
        ("no-break\u00a0space", True),  # \xc2 starts the C1 controls too
        ("\u0085", True),
        ("\u202e", True),
        ("\ufe0f", True),
        ("\U000e0041", True),
    ],
)
def test_maybe_unsafe_on_each_lead_byte(text, maybe):
    data = orjson.dumps({"v": text})
    assert maybe_unsafe(data) is maybe
    assert maybe_unsafe(data) == (_LEAD_BYTES.search(data) is not None)


def test_visible_json_returns_plain_ascii_as_it_is():
    data = orjson.dumps({"v": ["x" * 1000] * 1000})
    assert visible_json(data) is data


@pytest.mark.parametrize(
    ("text", "at"),
    [
        (SCOTLAND, None),
        (f"flags {SCOTLAND}{SCOTLAND}.", None),
        ("\U0001f3f4\U000e0067\U000e0062", 1),  # no cancel tag: not a flag
        ("\U0001f3f4" + "".join(chr(0xE0000 + ord(c)) for c in "ignoreall") + "\U000e007f", 1),
        ("\U000e0067\U000e0062\U000e007f", 0),  # no black flag before the tags
        (f"{SCOTLAND}\U000e0041", 7),  # a tag after a whole flag
        ("x\ufe0f\ufe0f", None),
        ("x\ufe0f\ufe0e", 2),
        ("\ufe0fx", None),
    ],
)
def test_tags_only_in_a_subdivision_flag_and_no_selector_after_a_different_one(text, at):
    found = first_control(text)
    assert (None if found is None else found.start()) == at
