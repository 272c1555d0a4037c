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
