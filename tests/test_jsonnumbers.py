"""JSON text whose numbers stay as written (core/jsonnumbers.py), next to orjson's own text."""

from __future__ import annotations

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from lexkeep.core.jsonnumbers import (
    Number,
    dumps_exact,
    exact_text,
    holds_float,
    loads_exact,
    same_json,
)

BIG = "98765432109876543210"  # beyond 64 bits: orjson reads 9.876543210987654e+19


def _text(part: object, source: str) -> str:
    root = orjson.loads(source)
    return exact_text(part(root) if callable(part) else root, root, source)


def test_orjson_changes_these_numbers():
    """The premise: orjson writes back what it read as a float, not the text it read."""
    assert orjson.dumps(orjson.loads(f"[{BIG},0.10000000000000000555,1.50,1E5]")) == (
        b"[9.876543210987654e+19,0.1,1.5,100000.0]"
    )


@pytest.mark.parametrize(
    ("source", "want"),
    [
        (f'{{"account": {BIG}}}', f'{{"account":{BIG}}}'),
        ('{"rate": 0.10000000000000000555}', '{"rate":0.10000000000000000555}'),
        ('[1.50, 1E5, -0, 7, "x"]', '[1.50,1E5,-0,7,"x"]'),
        (f"{BIG}", BIG),
        ("18446744073709551616", "18446744073709551616"),  # 2**64
        ("-9223372036854775809", "-9223372036854775809"),  # below the smallest int64
        # strings and escapes as orjson writes them; only the numbers keep their text
        (
            f'{{"p": "\\u00e9\\/x", "n": [ {BIG} ], "t": true, "z": null}}',
            f'{{"p":"é/x","n":[{BIG}],"t":true,"z":null}}',
        ),
        # a repeated key keeps its first place and its last value, as orjson reads it
        (f'{{"z": 1.5, "a": {BIG}, "z": 2.50}}', f'{{"z":2.50,"a":{BIG}}}'),
    ],
)
def test_numbers_keep_their_text_when_orjson_read_a_float(source, want):
    assert _text(None, source) == want
    assert orjson.loads(want) == orjson.loads(source)


def test_a_part_of_the_line_is_written_from_the_same_place():
    source = f'{{"a": {{"input": {{"n": 1.0}}}}, "b": [{{"input": {{"n": {BIG}}}}}]}}'
    assert _text(lambda root: root["b"][0]["input"], source) == f'{{"n":{BIG}}}'
    assert _text(lambda root: root["a"]["input"], source) == '{"n":1.0}'


@pytest.mark.parametrize(
    "source",
    ['{"a": 1, "b": [true, null, "\\u00e9"], "c": {}}', "[]", '"x"', "18446744073709551615"],
)
def test_without_a_float_the_text_is_orjsons(source):
    root = orjson.loads(source)
    assert not holds_float(root)
    assert exact_text(root, root, source) == orjson.dumps(root).decode()


def test_without_its_source_or_outside_it_the_text_is_orjsons():
    root = orjson.loads(f'{{"n": {BIG}}}')
    assert exact_text(root, root, b"") == '{"n":9.876543210987654e+19}'
    elsewhere = {"n": 1.5}  # not a value inside root
    assert exact_text(elsewhere, root, f'{{"n": {BIG}}}') == '{"n":1.5}'


def test_holds_float_looks_inside_containers():
    assert holds_float(1.5) and holds_float([[{"a": [0.5]}]]) and holds_float({"a": {"b": 1e3}})
    assert not holds_float({"a": [1, "2.5", None, True, {"b": []}]})


def test_loads_exact_hands_over_every_number_as_its_text():
    value = loads_exact(f'{{"a": [{BIG}, 1.50, -0]}}'.encode())
    assert value == {"a": [BIG, "1.50", "-0"]}
    assert all(type(n) is Number for n in value["a"])
    assert dumps_exact(value) == f'{{"a":[{BIG},1.50,-0]}}'


_NUMBER = st.from_regex(r"\A-?(0|[1-9][0-9]{0,40})(\.[0-9]{1,30})?([eE][-+]?[0-9]{1,2})?\Z")


@given(numbers=st.lists(_NUMBER, min_size=1, max_size=5), key=st.text(max_size=5))
def test_any_number_text_survives_where_orjson_reads_a_float(numbers, key):
    source = f'{{"k": {orjson.dumps(key).decode()}, "args": [ {" , ".join(numbers)} ]}}'
    root = orjson.loads(source)
    got = exact_text(root["args"], root, source)
    if holds_float(root["args"]):
        assert got == "[" + ",".join(numbers) + "]"
    else:
        assert got == orjson.dumps(root["args"]).decode()
    assert orjson.loads(got) == root["args"]


@pytest.mark.parametrize(
    ("first", "second", "same"),
    [
        ('{"a": 1, "b": [true, null]}', '{"b":[true,null],"a":1}', True),  # order, spacing
        ('{"p": "\\u00e9"}', '{"p": "é"}', True),  # escapes
        ('{"n": 1.50}', '{"n": 1.5}', False),  # numbers as written
        ("98765432109876543210", "98765432109876543211", False),  # beyond a float's digits
        ('{"a": true}', '{"a": 1}', False),
        ('{"a": "1"}', '{"a": 1}', False),
        ('{"a": NaN}', '{"a": null}', False),  # not JSON: only equal to itself
        ("rm -rf build", "rm -rf build", True),
        ("rm -rf build", "rm  -rf build", False),
    ],
)
def test_same_json_is_one_value_written_twice(first, second, same):
    assert same_json(first, second) is same
    assert same_json(second, first) is same
