"""Property: the next-run context never exceeds its byte budget, and hides nothing silently."""

from __future__ import annotations

import itertools
import tempfile
from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from test_context_support import load, pair_records, summarise

from lexkeep.compaction.context import ContextFormat, Projection, RawPair, build_context
from lexkeep.compaction.pairs import eligible_pairs
from lexkeep.compaction.planning import plan_segments
from lexkeep.core.controls import first_control
from lexkeep.core.errors import BudgetError
from lexkeep.core.store import Store

_ids = itertools.count()

# Any Unicode but surrogates (not encodable as UTF-8, so never in a real trace).
texts = st.text(alphabet=st.characters(blacklist_categories=("Cs",)), min_size=1, max_size=60)
# Long answers with spaces: what a bounded projection actually clips.
long_texts = texts.map(lambda t: (t + " ") * 5)


@st.composite
def conversations(draw: st.DrawFn) -> dict:
    """A random conversation (often long enough for segments), summaries and a budget."""
    n = draw(st.one_of(st.integers(0, 29), st.integers(30, 45), st.integers(40, 42)))
    return {
        "users": draw(st.lists(texts, min_size=n, max_size=n)),
        "answers": draw(st.lists(st.one_of(texts, long_texts, long_texts), min_size=n, max_size=n)),
        "summaries": draw(st.lists(st.one_of(st.none(), texts), min_size=2, max_size=2)),
        "stale": draw(st.booleans()),
        # A share of what showing everything would take: spreads budgets over the range where
        # summaries, projections and omissions compete.
        "budget_share": draw(st.integers(min_value=1, max_value=110)) / 100,
        "format": draw(st.sampled_from(list(ContextFormat))),
        "answer_bytes": draw(st.integers(min_value=0, max_value=80)),
    }


@pytest.fixture(scope="module")
def shared() -> Iterator[tuple[Store, Path]]:
    """One real store file for every example (each example gets its own conversation)."""
    with tempfile.TemporaryDirectory() as tmp, Store.open(Path(tmp) / "p.duckdb") as store:
        yield store, Path(tmp)


@settings(
    max_examples=30,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(conv=conversations())
def test_output_never_exceeds_the_budget(shared, conv):
    store, tmp = shared
    cid = f"p{next(_ids)}"
    users, answers = conv["users"], conv["answers"]
    load(
        store,
        tmp,
        pair_records(cid, len(users), user=users.__getitem__, answer=answers.__getitem__),
        name=cid,
    )
    pairs = eligible_pairs(store.con, cid)
    segments = plan_segments(len(pairs))
    summaries = {}
    for (start, _), text in zip(segments, conv["summaries"], strict=False):
        if text is not None and text.strip():
            if first_control(text) is None:
                summarise(store, cid, start, text)
            else:  # stored as an earlier lexkeep did; complete() refuses control characters
                job = summarise(store, cid, start, "placeholder")
                store.con.execute(
                    "UPDATE compactions SET summary = $t, summary_sha256 = sha256($t) "
                    "WHERE id = $id",
                    {"t": text, "id": job},
                )
            summaries[start] = text
    if conv["stale"] and summaries:
        start = min(summaries)
        store.con.execute(
            "UPDATE messages SET text = text || ' (edited)' WHERE id = ?",
            [pairs[start + 3].assistant.id],
        )

    event(f"segments: {len(segments)}, summarised: {len(summaries)}")
    everything = build_context(store, cid, 10**9, format=conv["format"])
    conv["budget"] = max(1, int(everything.bytes * conv["budget_share"]))
    try:
        ctx = build_context(
            store, cid, conv["budget"], format=conv["format"], answer_bytes=conv["answer_bytes"]
        )
    except BudgetError as err:
        event("budget error")
        floor = int(err.hint.split()[1].removeprefix("budget_bytes="))
        assert floor > conv["budget"]
        ctx = build_context(
            store, cid, floor, format=conv["format"], answer_bytes=conv["answer_bytes"]
        )
        assert ctx.bytes <= floor
        return

    event(f"kinds shown: {sorted({type(i).__name__ for i in ctx.history})}")
    raw = ctx.output.encode("utf-8")
    assert len(raw) == ctx.bytes <= conv["budget"]
    if ctx.format is ContextFormat.JSON:
        doc = orjson.loads(raw)
        assert len(doc["history"]) == len(ctx.history)
    # Every pair is either shown (in some form) or listed as omitted, exactly once.
    seen = []
    for item in ctx.history:
        if isinstance(item, RawPair):
            seen.append(item.index)
            assert (item.user.text, item.assistant.text) == (
                pairs[item.index].user.text,
                store.con.execute(
                    "SELECT text FROM messages WHERE id = ?", [item.assistant.id]
                ).fetchone()[0],
            )
        else:
            seen += range(item.from_pair, item.to_pair + 1)
            if isinstance(item, Projection):
                for p in item.pairs:
                    assert len(p.assistant.text.encode()) <= conv["answer_bytes"]
                    assert p.user.text == pairs[p.index].user.text  # never cut
            else:
                assert not (conv["stale"] and item.from_pair == min(summaries))
                assert item.assistant_summary == summaries[item.from_pair]
    for o in ctx.omitted:
        seen += range(o.from_pair, o.to_pair + 1)
        assert o.bytes_needed > 0
    assert sorted(seen) == list(range(len(pairs)))
