"""Next-run context under a byte budget (issue 6; seed 000 cases B and C)."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest
from test_context_support import load, pair_records, summarise

from lexkeep.compaction.context import (
    ContextFormat,
    OmissionReason,
    Projection,
    RawPair,
    SummaryCandidate,
    build_context,
    clip_answer,
)
from lexkeep.core.controls import first_control
from lexkeep.core.errors import BudgetError, ConfigError, NotFoundError
from lexkeep.core.store import Store

INVOICE = "INV-2025-08-44719"


def _first_user(i: int) -> str:
    if i == 0:
        return f"Why was invoice {INVOICE} charged twice on April 3?"
    return f"follow-up question number {i}"


def _answer(i: int) -> str:
    return f"answer {i}: looked at the ledger entries for that period and found entry {i}."


@pytest.fixture
def conv30(store: Store, tmp_path: Path) -> Store:
    """c1: 30 eligible pairs (so pairs 0-9 are a segment), the invoice typed in pair 0."""
    load(store, tmp_path, pair_records("c1", 30, user=_first_user, answer=_answer))
    return store


def _ranges(ctx) -> list[tuple[int, int]]:
    out = []
    for item in ctx.history:
        if isinstance(item, RawPair):
            out.append((item.index, item.index))
        else:
            out.append((item.from_pair, item.to_pair))
    return out


def _everything(store: Store, cid: str, fmt: str = "json"):
    """The context that shows everything, built with a budget of exactly its own size.

    The output names its budget, so its size depends on the budget's digit count: iterate
    until the budget equals the output size (two rounds at most).
    """
    budget = 10_000_000
    for _ in range(4):
        ctx = build_context(store, cid, budget, format=fmt)
        assert ctx.omitted == ()
        if ctx.bytes == budget:
            return ctx
        budget = ctx.bytes
    raise AssertionError("no fixed point")


def _covers_every_pair(ctx) -> None:
    """Included and omitted ranges partition 0..n-1: nothing silently disappears."""
    seen = []
    for a, b in _ranges(ctx) + [(o.from_pair, o.to_pair) for o in ctx.omitted]:
        seen += range(a, b + 1)
    assert sorted(seen) == list(range(ctx.pairs_total))


def test_sidecar_identifier_is_pinned_even_when_its_range_is_summarised(conv30, tmp_path):
    summarise(conv30, "c1", 0, "The assistant looked into a duplicate charge in early April.")
    ctx = build_context(conv30, "c1", 100_000)
    assert [p.value for p in ctx.pinned][0] == INVOICE
    doc = orjson.loads(ctx.output)
    # Pinned block first, before any history.
    assert list(doc)[:5] == [
        "schema_version",
        "conversation_id",
        "budget_bytes",
        "pairs_total",
        "pinned_identifiers",
    ]
    assert list(doc)[-1] == "history"
    assert doc["pinned_identifiers"][0]["value"] == INVOICE


def test_valid_summary_is_offered_with_the_original_user_messages(conv30):
    summary = "The assistant checked ten ledger periods; no duplicate was confirmed."
    job = summarise(conv30, "c1", 0, summary)
    ctx = build_context(conv30, "c1", 100_000)
    first = ctx.history[0]
    assert isinstance(first, SummaryCandidate)
    assert (first.from_pair, first.to_pair, first.compaction_id) == (0, 9, job)
    assert first.assistant_summary == summary
    # A summary never replaces original user text: all ten user messages, verbatim.
    assert [s.text for s in first.user_messages] == [_first_user(i) for i in range(10)]
    assert [s.id for s in first.user_messages] == [f"c1-u{i}" for i in range(10)]
    assert all(isinstance(i, RawPair) for i in ctx.history[1:])
    assert [i.index for i in ctx.history[1:]] == list(range(10, 30))
    assert ctx.omitted == () and ctx.stale == ()
    assert ctx.bytes == len(ctx.output.encode()) <= 100_000


def test_newest_raw_pairs_win_a_tight_budget(conv30):
    everything = build_context(conv30, "c1", 100_000)
    assert everything.omitted == ()
    for n in range(1, 30):
        ctx = build_context(conv30, "c1", 1_500 + 150 * n)
        raw = [i.index for i in ctx.history if isinstance(i, RawPair)]
        if raw and not any(isinstance(i, Projection) for i in ctx.history):
            # Only raw pairs: they are the newest ones, contiguous up to the last pair.
            assert raw == list(range(raw[0], 30))
        assert ctx.bytes <= 1_500 + 150 * n
        _covers_every_pair(ctx)


def test_candidate_too_big_falls_back_to_a_bounded_projection(store, tmp_path):
    long_answer = "The ledger shows " + "entry ok; " * 60  # > 240 bytes: clipped in projection
    load(store, tmp_path, pair_records("c2", 30, answer=lambda i: long_answer + str(i)))
    summarise(store, "c2", 0, "S" * 5_000)  # a valid but huge summary
    full = _everything(store, "c2")
    assert isinstance(full.history[0], SummaryCandidate)
    tail_only = build_context(store, "c2", full.bytes - 1)
    assert isinstance(tail_only.history[0], Projection)
    proj = tail_only.history[0]
    assert (proj.from_pair, proj.to_pair) == (0, 9)
    assert [p.user.text for p in proj.pairs] == [
        f"question {i}: please check order ORD_{88400 + i}" for i in range(10)
    ]
    for p in proj.pairs:
        assert len(p.assistant.text.encode()) <= 240
        assert p.assistant.clipped_bytes > 0
        assert long_answer.startswith(p.assistant.text)
    assert "S" * 100 not in tail_only.output
    assert tail_only.omitted == ()


def test_projection_too_big_omits_the_range_and_says_how_many_bytes(store, tmp_path):
    # User text is never cut, so a long user text makes even the projection big.
    load(
        store,
        tmp_path,
        pair_records("c3", 30, user=lambda i: f"pasted log {i}: " + "line of log text " * 40),
    )
    summarise(store, "c3", 0, "The assistant read ten pasted logs.")
    full = _everything(store, "c3")
    assert isinstance(full.history[0], SummaryCandidate)
    # One byte short: the candidate does not fit, the projection (user text + answers) is
    # bigger still, so pairs 0-9 are omitted and the freed bytes carry the omission note.
    candidate_bytes = len(orjson.dumps(orjson.loads(full.output)["history"][0]))
    tail = build_context(store, "c3", full.bytes - 1)
    assert [o.from_pair for o in tail.omitted] == [0]
    omission = tail.omitted[0]
    assert (omission.to_pair, omission.reason) == (9, OmissionReason.SUMMARY_AND_PROJECTION_TOO_BIG)
    # The smallest offered form (here the candidate, plus its separator) is what it needed.
    assert omission.bytes_needed == candidate_bytes + 1
    assert all(isinstance(i, RawPair) and i.index >= 10 for i in tail.history)
    doc = orjson.loads(tail.output)
    assert doc["omitted"] == [
        {
            "from_pair": 0,
            "to_pair": 9,
            "reason": "summary_and_projection_too_big",
            "bytes_needed": omission.bytes_needed,
        }
    ]
    text_full = _everything(store, "c3", "text")
    text = build_context(store, "c3", text_full.bytes - 1, format="text").output
    assert "NOT INCLUDED: the next run will not see these earlier exchanges" in text
    assert "- pairs 0-9: neither the summary candidate" in text


def test_stale_summary_is_reported_and_raw_pairs_are_used(conv30):
    """Seed case B: one message of the compacted range changes after compaction."""
    summary = "STALE-MARKER the assistant found nothing."
    summarise(conv30, "c1", 0, summary)
    conv30.con.execute("UPDATE messages SET text = 'answer 3, corrected' WHERE id = 'c1-a3'")
    ctx = build_context(conv30, "c1", 100_000)
    assert [(s.from_pair, s.to_pair) for s in ctx.stale] == [(0, 9)]
    assert "stale" in ctx.stale[0].reason
    assert "STALE-MARKER" not in ctx.output
    assert [i.index for i in ctx.history if isinstance(i, RawPair)] == list(range(30))
    assert "answer 3, corrected" in ctx.output
    text = build_context(conv30, "c1", 100_000, format=ContextFormat.TEXT).output
    assert "## Stale summaries (not used" in text
    # As the budget allows: a smaller budget projects or omits pairs 0-9, never the summary.
    small = build_context(conv30, "c1", ctx.bytes // 2)
    assert "STALE-MARKER" not in small.output
    assert not any(isinstance(i, SummaryCandidate) for i in small.history)
    _covers_every_pair(small)


def test_summary_of_version_1_is_never_consumed(conv30):
    summarise(conv30, "c1", 0, "mixed summary", prompt_version="conversation-compaction@1")
    ctx = build_context(conv30, "c1", 100_000)
    assert not any(isinstance(i, SummaryCandidate) for i in ctx.history)
    assert "@1" in ctx.stale[0].reason


def test_budget_too_small_even_for_the_sidecar(conv30):
    with pytest.raises(BudgetError) as err:
        build_context(conv30, "c1", 200)
    assert "too small" in err.value.message
    assert err.value.hint.startswith("pass budget_bytes=")
    floor = int(err.value.hint.split()[1].removeprefix("budget_bytes="))
    ctx = build_context(conv30, "c1", floor)  # the floor itself is enough
    assert ctx.bytes <= floor and ctx.history == ()
    assert [(o.from_pair, o.to_pair) for o in ctx.omitted] == [(0, 9), (10, 29)]


def test_unknown_conversation_and_bad_arguments(conv30):
    with pytest.raises(NotFoundError):
        build_context(conv30, "nope", 10_000)
    with pytest.raises(ConfigError):
        build_context(conv30, "c1", 0)
    with pytest.raises(ConfigError):
        build_context(conv30, "c1", 10_000, format="yaml")


@pytest.mark.parametrize(
    ("budget", "answer_bytes"),
    [("8000", 240), (8000.0, 240), (True, 240), (None, 240), (2**63, 240)]
    + [(8000, "240"), (8000, 2.5), (8000, None), (8000, 2**63), (8000, -1)],
)
def test_budget_and_answer_bytes_of_the_wrong_type_or_size_are_config_errors(
    conv30, budget, answer_bytes
):
    """The library's arguments are checked as the CLI's are: a string, float, bool or a number
    beyond 64 bits was a TypeError from deep inside (or, for True, a budget of 1 byte)."""
    with pytest.raises(ConfigError) as err:
        build_context(conv30, "c1", budget, answer_bytes=answer_bytes)
    assert "bytes" in err.value.message


def test_fewer_than_30_pairs_has_no_segments(store, tmp_path):
    load(store, tmp_path, pair_records("c4", 12))
    ctx = build_context(store, "c4", 100_000, format="text")
    assert [i.index for i in ctx.history] == list(range(12))
    assert "## Nothing omitted" in ctx.output


@pytest.mark.parametrize(
    ("text", "limit", "kept"),
    [
        ("short answer", 240, "short answer"),
        ("order INV-2025-08-44719 is fine", 20, "order"),  # never half an identifier
        ("order INV-2025-08-44719 is fine", 24, "order INV-2025-08-44719"),
        ("ééé ééé", 7, "ééé"),  # UTF-8 bytes: cut at a space
        ("ééé ééé", 5, ""),  # cut inside a character and a token: nothing left
        ("unbroken-identifier-without-spaces", 10, ""),
    ],
)
def test_clip_answer_cuts_at_whitespace_within_the_byte_bound(text, limit, kept):
    clipped = clip_answer("a1", text, limit)
    assert clipped.text == kept
    assert len(clipped.text.encode()) <= limit
    assert clipped.clipped_bytes == len(text.encode()) - len(kept.encode())


def test_batched_summary_lookup_agrees_with_jobs_valid_summary(store, tmp_path):
    """context._summaries takes plainly valid summaries in one query; jobs decides the rest."""
    from lexkeep.compaction.context import _summaries
    from lexkeep.compaction.jobs import valid_summary
    from lexkeep.compaction.pairs import eligible_pairs
    from lexkeep.compaction.planning import plan_segments

    load(store, tmp_path, pair_records("c5", 60))
    summarise(store, "c5", 0, "current version", prompt_version="conversation-compaction@3")
    summarise(store, "c5", 10, "older version", prompt_version="conversation-compaction@2")
    summarise(store, "c5", 20, "mixed input", prompt_version="conversation-compaction@1")
    summarise(store, "c5", 30, "about to go stale")
    store.con.execute("UPDATE messages SET text = text || '!' WHERE id = 'c5-u35'")
    pairs = eligible_pairs(store.con, "c5")
    segments = plan_segments(len(pairs))
    assert len(segments) == 4
    valid, stale = _summaries(store, "c5", pairs, segments)
    for start, end in segments:
        expected, reason = valid_summary(store.con, "c5", start, pairs[start : end + 1])
        assert valid.get(start) == expected
        assert ([s.reason for s in stale if s.from_pair == start] or ["valid"]) == [reason]
    assert sorted(valid) == [0, 10]
    assert [s.from_pair for s in stale] == [20, 30]


def test_jobs_listed_stale_are_the_summaries_context_does_not_use(store, tmp_path):
    """`lexkeep compactions` marks a completed job stale exactly when context cannot use it."""
    from lexkeep.compaction.jobs import list_jobs

    load(store, tmp_path, pair_records("c6", 60))
    summarise(store, "c6", 0, "current version", prompt_version="conversation-compaction@3")
    summarise(store, "c6", 10, "older version", prompt_version="conversation-compaction@2")
    summarise(store, "c6", 20, "mixed input", prompt_version="conversation-compaction@1")
    summarise(store, "c6", 30, "about to go stale")
    store.con.execute("UPDATE messages SET text = text || '!' WHERE id = 'c6-a31'")
    jobs = list_jobs(store.con, ["c6"])
    ctx = build_context(store, "c6", 1_000_000)
    assert {(j.from_pair, j.to_pair): j.stale_reason for j in jobs if j.stale} == {
        (s.from_pair, s.to_pair): s.reason.partition(": ")[2] for s in ctx.stale
    }
    assert [j.from_pair for j in jobs if j.stale] == [20, 30]
    assert [j.stale for j in jobs] == [False, False, True, True]
    used = {i.compaction_id for i in ctx.history if isinstance(i, SummaryCandidate)}
    assert used == {j.id for j in jobs if not j.stale}


def _pinned_by_join(store: Store, cid: str) -> list[tuple[str, str]]:
    """The sidecar block's definition: first occurrence by message position, then span."""
    from lexkeep.compaction.context import _SIDECAR_SQL

    seen: dict[str, tuple[str, str]] = {}
    for kind, value in store.con.execute(_SIDECAR_SQL, [cid]).fetchall():
        seen.setdefault(value, (kind, value))
    return list(seen.values())


def test_pinned_identifiers_come_in_message_then_span_order(store, tmp_path):
    """Ordered in Python by the positions the pairs query read; the same as the SQL join.

    Message ids are written so that id order, ingest order and position order all differ,
    several identifiers share a message, one value repeats, and one user_text message has role
    assistant (hand-written JSONL), which only the join orders.
    """
    typed = {
        0: "Refund ORD_99001 and ORD_10002 for invoice INV-2025-08-44719",
        1: "also ORD_10002 again, then ticket PROJ-4412",
        2: "no identifier here",
        3: "finally PROJ-0007 and ORD_55503",
    }
    records = pair_records("c6", 4, user=lambda i: typed[i])
    for r in records:  # ids whose order is not the position order
        if r.get("type") == "message":
            r["id"] = {"c6-u0": "z9", "c6-u1": "a1", "c6-u2": "m5", "c6-u3": "b2"}.get(
                r["id"], r["id"]
            )
    load(store, tmp_path, records)
    # Stored in the reverse of that order, so a scan does not hand it over ready-made.
    store.con.execute("CREATE TEMP TABLE ids AS SELECT * FROM identifiers")
    store.con.execute("DELETE FROM identifiers")
    store.con.execute(
        "INSERT INTO identifiers SELECT * FROM ids ORDER BY message_id, span_start DESC"
    )
    expected = _pinned_by_join(store, "c6")
    assert [v for _, v in expected] == [
        "ORD_99001", "ORD_10002", "INV-2025-08-44719", "PROJ-4412", "PROJ-0007", "ORD_55503",
    ]  # fmt: skip
    got = build_context(store, "c6", 100_000).pinned
    assert [(p.kind, p.value) for p in got] == expected

    odd = {
        "type": "message",
        "id": "c6-odd",
        "conversation_id": "c6",
        "role": "assistant",
        "kind": "user_text",
        "text": "pasted by hand: ORD_31337",
    }
    load(store, tmp_path, [odd], name="odd")
    expected = _pinned_by_join(store, "c6")
    assert expected[-1][1] == "ORD_31337"
    got = build_context(store, "c6", 100_000).pinned
    assert [(p.kind, p.value) for p in got] == expected


CONTROLS = "\x00\x01\x07\x08\x0b\x0c\x0e\x1b\x1f\x7f\x80\x9b\x9f"


def _store_summary_as_written_before(store: Store, job_id: str, text: str) -> None:
    """A summary an earlier lexkeep accepted: control characters were not refused then."""
    store.con.execute(
        "UPDATE compactions SET summary = $t, summary_sha256 = sha256($t) WHERE id = $id",
        {"t": text, "id": job_id},
    )


def test_text_output_shows_control_characters_instead_of_printing_them(store, tmp_path):
    """A stored summary (and a user message) holding ESC sequences, NUL or C1 controls reached
    the terminal or the prompt as they were through `lexkeep context --format text`."""
    load(
        store,
        tmp_path,
        pair_records(
            "c9",
            30,
            user=lambda i: f"question {i} \x1b[31mred\x1b[0m" if i == 3 else f"question {i}",
            answer=lambda i: f"answer {i}\x9b2J and\rover" if i == 25 else f"answer {i}",
        ),
    )
    job = summarise(store, "c9", 0, "placeholder")
    summary = "Summary \x1b]0;pwned\x07 done\x00" + CONTROLS + " and a\r\nCRLF\tline"
    _store_summary_as_written_before(store, job, summary)

    ctx = _everything(store, "c9", "text")
    assert [type(i).__name__ for i in ctx.history][0] == "SummaryCandidate"
    assert first_control(ctx.output) is None
    assert "a\r\nCRLF\tline" in ctx.output  # line ends and tabs stay as they are
    assert "Summary \\u001b]0;pwned\\u0007 done\\u0000" in ctx.output
    assert "question 3 \\u001b[31mred\\u001b[0m" in ctx.output
    assert "answer 25\\u009b2J and\\u000dover" in ctx.output
    assert len(ctx.output.encode("utf-8")) == ctx.bytes
    for c in CONTROLS:
        assert f"\\u{ord(c):04x}" in ctx.output
    # One byte less than it needs: the escapes are counted, so something is left out.
    smaller = build_context(store, "c9", ctx.bytes - 1, format="text")
    assert smaller.bytes <= ctx.bytes - 1 and smaller.omitted


def test_json_output_escapes_every_control_character_and_keeps_the_text(store, tmp_path):
    load(store, tmp_path, pair_records("c8", 30))
    job = summarise(store, "c8", 0, "placeholder")
    summary = "Summary " + CONTROLS + " end"
    _store_summary_as_written_before(store, job, summary)
    ctx = _everything(store, "c8", "json")
    raw = ctx.output.encode("utf-8")
    assert not any(chr(b) in CONTROLS for b in raw)
    assert not any(raw[i] == 0xC2 and 0x80 <= raw[i + 1] <= 0x9F for i in range(len(raw) - 1))
    doc = orjson.loads(raw)
    assert doc["history"][0]["assistant_history_summary"] == summary
    assert len(raw) == ctx.bytes


def test_context_shows_stored_bidirectional_and_hidden_characters_escaped(store, tmp_path):
    """A summary stored before they were refused, with a right-to-left override, isolates and
    tag characters, reached the prompt and the terminal as it was: the text read one way and
    said another (Trojan Source). Both formats now write them as escapes; ordinary non-ASCII
    text, emoji joiners and a subdivision flag stay as they are."""
    load(
        store,
        tmp_path,
        pair_records(
            "c5", 30, user=lambda i: f"question {i} \u202eabc" if i == 2 else f"question {i}"
        ),
    )
    job = summarise(store, "c5", 0, "placeholder")
    scotland = "\U0001f3f4" + "".join(chr(0xE0000 + ord(c)) for c in "gbsct") + "\U000e007f"
    ordinary = f"caf\u00e9 \U0001f468\u200d\U0001f469 {scotland}"
    summary = f"Refund \u2067ORD_1\u2069 ok\u202e! {ordinary} \U000e0041"
    _store_summary_as_written_before(store, job, summary)

    text = _everything(store, "c5", "text")
    assert "Refund \\u2067ORD_1\\u2069 ok\\u202e! " + ordinary + " \\U000e0041" in text.output
    assert "question 2 \\u202eabc" in text.output
    assert not any(c in text.output for c in "\u2067\u2069\u202e\U000e0041")
    assert len(text.output.encode("utf-8")) == text.bytes

    doc = _everything(store, "c5", "json")
    raw = doc.output.encode("utf-8")
    assert not any(c.encode() in raw for c in "\u2067\u2069\u202e\U000e0041")
    assert ordinary.encode() in raw
    assert b"\\u2067ORD_1\\u2069" in raw and b"\\udb40\\udc41" in raw
    assert orjson.loads(raw)["history"][0]["assistant_history_summary"] == summary
    assert len(raw) == doc.bytes


def _big_newest(i: int) -> str:
    return ("a long answer " * 300) if i in (37, 39) else f"answer {i}"


def test_text_output_says_how_many_newest_pairs_did_not_fit(store, tmp_path):
    """The newest raw pairs come first (DESIGN), but one too big for the budget is left out
    while an older summary still fits: without a word, the text read as if the summary and
    the pairs shown were the latest of the conversation."""
    load(store, tmp_path, pair_records("c7", 40, answer=_big_newest))
    summarise(store, "c7", 0, "summary of the first ten answers")
    everything = build_context(store, "c7", 10**9, format="text")
    big = len(("a long answer " * 300).encode())
    budget = everything.bytes - big + 300  # 300: room for the list of what is left out
    ctx = build_context(store, "c7", budget, format="text")
    assert [(o.from_pair, o.to_pair) for o in ctx.omitted] == [(37, 37)]
    assert isinstance(ctx.history[0], SummaryCandidate)
    note = (
        "- note: 1 of the 20 newest exchanges (pairs 20-39) did not fit; what is shown below"
        " lacks them, even where it shows older exchanges\n"
    )
    assert note in ctx.output
    assert ctx.output.index("## NOT INCLUDED") < ctx.output.index(note)
    assert len(ctx.output.encode()) == ctx.bytes <= budget
    assert "- note:" not in everything.output
    assert "note" not in build_context(store, "c7", budget, format="json").output
    tight = build_context(store, "c7", 2_000, format="text")
    newest_left_out = sum(
        o.to_pair - o.from_pair + 1 for o in tight.omitted if o.reason == "raw_too_big"
    )
    assert newest_left_out > 1
    assert f"- note: {newest_left_out} of the 20 newest exchanges (pairs 20-39)" in tight.output


def test_the_note_is_counted_in_the_budget_to_the_byte(store, tmp_path):
    load(store, tmp_path, pair_records("c6", 40, answer=_big_newest))
    summarise(store, "c6", 0, "summary of the first ten answers")
    sizes = set()
    for budget in range(4300, 4700, 7):
        ctx = build_context(store, "c6", budget, format="text")
        assert len(ctx.output.encode()) == ctx.bytes <= budget
        if "- note:" in ctx.output:
            sizes.add(ctx.bytes)
    assert sizes  # the range of budgets does hit outputs with the note
