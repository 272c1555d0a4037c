"""Property tests: arbitrary bytes never crash the input layer, a reader or an ingest."""

from __future__ import annotations

import string

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from lexkeep.core.errors import InputError
from lexkeep.core.formats import all_readers
from lexkeep.core.ingest import ingest_paths, iter_json_lines
from lexkeep.core.model import Skipped
from lexkeep.core.readers import JsonLine
from lexkeep.core.store import Store

# Bytes that look like JSON often enough to reach the readers, plus anything at all.
jsonish = st.lists(
    st.sampled_from(
        [
            b"{",
            b"}",
            b"[",
            b"]",
            b'"',
            b":",
            b",",
            b"\n",
            b"\\",
            b'"type"',
            b'"message"',
            b'"role"',
            b'"user"',
            b'"messages"',
            b'"traj"',
            b'"content"',
            b'"id"',
            b'"conversation_id"',
            b"null",
            b"1",
            b"\xff",
            b" ",
        ]
    ),
    max_size=40,
).map(b"".join)
any_bytes = st.binary(max_size=200) | jsonish
SETTINGS = settings(
    max_examples=120, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)


@SETTINGS
@given(data=any_bytes)
def test_input_layer_yields_values_or_skipped(tmp_path_factory, data):
    path = tmp_path_factory.mktemp("p") / "x.jsonl"
    path.write_bytes(data)
    try:
        items = list(iter_json_lines(path))
    except InputError as err:  # the documented error: e.g. a damaged gzip stream
        assert err.path == str(path)
        return
    for item in items:
        assert isinstance(item, JsonLine | Skipped)
        if isinstance(item, JsonLine):
            assert isinstance(item.value, dict) and item.line >= 1


@SETTINGS
@given(data=any_bytes)
def test_every_reader_survives_arbitrary_bytes(tmp_path_factory, data):
    path = tmp_path_factory.mktemp("r") / "x.jsonl"
    path.write_bytes(data)
    try:
        items = list(iter_json_lines(path))
    except InputError:
        return
    for reader in all_readers():
        for record in reader.read(iter(items), str(path)):
            assert record is not None


@pytest.fixture(scope="module")
def shared_store(tmp_path_factory):
    with Store.open(tmp_path_factory.mktemp("s") / "p.duckdb") as store:
        yield store


@SETTINGS
@given(data=any_bytes, name=st.text(string.ascii_lowercase, min_size=1, max_size=6))
def test_ingest_parses_or_raises_input_error(tmp_path_factory, shared_store, data, name):
    path = tmp_path_factory.mktemp("i") / f"{name}.jsonl"
    path.write_bytes(data)
    before = shared_store.con.execute("SELECT count(*) FROM ingest_runs").fetchone()[0]
    try:
        [got] = ingest_paths(shared_store, [str(path)])
    except InputError as err:
        assert err.path == str(path) and err.message
        after = shared_store.con.execute("SELECT count(*) FROM ingest_runs").fetchone()[0]
        assert after == before  # a rejected file writes nothing
    else:
        assert got.status in ("ingested", "unchanged", "empty")


_text = st.text(alphabet=st.sampled_from(list('ab "\\,[]{}:\n\t\u00e9\u4e2d/')), max_size=30)
_element = st.dictionaries(
    st.text(alphabet=st.sampled_from(list('k"\\,[]}')), min_size=1, max_size=4),
    st.one_of(_text, st.integers(-5, 5), st.lists(_text, max_size=3)),
    max_size=4,
)


@settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    elements=st.lists(_element, min_size=1, max_size=6),
    gaps=st.lists(st.sampled_from(["", " ", "\n", "\n  ", "\n\n"]), min_size=14, max_size=14),
    indent=st.sampled_from([None, 1, 2]),
    chunk=st.integers(1, 64),
)
def test_an_array_document_is_split_into_its_elements_with_their_lines(
    tmp_path_factory, monkeypatch, elements, gaps, indent, chunk
):
    """Whatever the strings hold (quotes, escapes, brackets, commas) and wherever the reads cut
    the document, each element comes back whole with the line its first byte is on."""
    import json

    from lexkeep.core import ingest

    parts, lines = ["["], []
    for i, element in enumerate(elements):
        parts.append(gaps[2 * i])
        lines.append(1 + "".join(parts).count("\n"))
        parts.append(json.dumps(element, indent=indent, ensure_ascii=False))
        parts.append(gaps[2 * i + 1] + ("," if i < len(elements) - 1 else ""))
    parts.append("]\n")
    path = tmp_path_factory.mktemp("doc") / "doc.json"
    path.write_text("".join(parts), encoding="utf-8")
    monkeypatch.setattr(ingest, "_CHUNK", chunk * 16)  # the head read is a sixteenth
    got = list(iter_json_lines(path))
    assert [(g.line, g.value) for g in got] == list(zip(lines, elements, strict=True))
