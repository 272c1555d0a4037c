"""Point 1: eligible pairs, one test per exclusion, and point 2: fixed windows."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from test_compaction_support import Builder, answer_text, user_text

from lexkeep.compaction.pairs import eligible_pair_counts, eligible_pairs, eligible_pairs_many
from lexkeep.compaction.planning import plan_segments, segment_count
from lexkeep.core.store import Store


def pair_ids(store, cid="c1"):
    pairs = eligible_pairs(store.con, cid)
    # what a run counts of a batch it has not planned yet is what pairing finds
    assert eligible_pair_counts(store.con, [cid]) == {cid: len(pairs)}
    return [(p.index, p.user.id, p.assistant.id) for p in pairs]


def test_ordinary_pairs_are_numbered_in_conversation_order(store):
    Builder().pairs("c1", 3).write(store)
    assert pair_ids(store) == [(0, "c1-u0", "c1-a0"), (1, "c1-u1", "c1-a1"), (2, "c1-u2", "c1-a2")]
    pair = eligible_pairs(store.con, "c1")[1]
    assert pair.user.text == user_text("c1", 1)
    assert pair.assistant.text == answer_text("c1", 1)


def _with_middle(store, build_middle) -> list[str]:
    """Turn 0 ordinary, turn 1 built by `build_middle`, turn 2 ordinary; returns user ids."""
    b = Builder().pair("c1", 0)
    build_middle(b)
    b.pair("c1", 2).write(store)
    return [uid for _, uid, _ in pair_ids(store)]


def test_streaming_answer_is_excluded(store):
    def middle(b):
        b.run("c1", "r1")
        b.message("c1", "u1", "r1", "user", "question")
        b.message("c1", "a1", "r1", "assistant", "half an answ", status="streaming")

    assert _with_middle(store, middle) == ["c1-u0", "c1-u2"]


def test_streaming_final_answer_does_not_fall_back_to_an_earlier_one(store):
    def middle(b):
        b.run("c1", "r1")
        b.message("c1", "u1", "r1", "user", "question")
        b.message("c1", "a1a", "r1", "assistant", "first take")
        b.message("c1", "a1b", "r1", "assistant", "still writing", status="streaming")

    assert _with_middle(store, middle) == ["c1-u0", "c1-u2"]


def test_blank_final_answer_does_not_fall_back_to_an_earlier_one(store):
    def middle(b):
        b.run("c1", "r1")
        b.message("c1", "u1", "r1", "user", "question")
        b.message("c1", "a1a", "r1", "assistant", "first take")
        b.message("c1", "a1b", "r1", "assistant", "\u3000\n")

    assert _with_middle(store, middle) == ["c1-u0", "c1-u2"]


@pytest.mark.parametrize("status", ["failed", "cancelled", "running", "weird"])
def test_run_status_outside_the_three_is_excluded(store, status):
    def middle(b):
        b.run("c1", "r1", status=status)
        b.message("c1", "u1", "r1", "user", "question")
        b.message("c1", "a1", "r1", "assistant", "answer")

    assert _with_middle(store, middle) == ["c1-u0", "c1-u2"]


@pytest.mark.parametrize("status", ["completed", "partial", "clarify_pending"])
def test_run_status_completed_partial_clarify_pending_is_eligible(store, status):
    def middle(b):
        b.run("c1", "r1", status=status)
        b.message("c1", "u1", "r1", "user", "question")
        b.message("c1", "a1", "r1", "assistant", "answer")

    assert _with_middle(store, middle) == ["c1-u0", "u1", "c1-u2"]


@pytest.mark.parametrize("status", ["incomplete", "failed"])
def test_answer_not_completed_is_excluded_even_in_a_completed_run(store, status):
    def middle(b):
        b.run("c1", "r1", status="completed")
        b.message("c1", "u1", "r1", "user", "question")
        b.message("c1", "a1", "r1", "assistant", "answer", status=status)

    assert _with_middle(store, middle) == ["c1-u0", "c1-u2"]


def test_missing_run_link_is_excluded(store):
    def middle(b):
        b.message("c1", "u1", None, "user", "question")
        b.message("c1", "a1", None, "assistant", "answer")

    assert _with_middle(store, middle) == ["c1-u0", "c1-u2"]


def test_run_id_that_names_no_run_is_excluded(store):
    def middle(b):
        b.message("c1", "u1", "ghost-run", "user", "question")
        b.message("c1", "a1", "ghost-run", "assistant", "answer")

    assert _with_middle(store, middle) == ["c1-u0", "c1-u2"]


@pytest.mark.parametrize("which", ["user", "assistant"])
@pytest.mark.parametrize(
    "text",
    # em space, line separator, narrow no-break space, ...: Python's whitespace, as the ingest
    # judges whether a turn was answered; a zero-width space or BOM between them is no text
    ["", "   \n\t", "\u2003\u2028", "\u200b\u2003\u200b\u202f\ufeff\x85", "\u3000\u1680\u205f"],
)
def test_empty_text_is_excluded(store, which, text):
    def middle(b):
        b.run("c1", "r1")
        b.message("c1", "u1", "r1", "user", text if which == "user" else "question")
        b.message("c1", "a1", "r1", "assistant", text if which == "assistant" else "answer")

    assert _with_middle(store, middle) == ["c1-u0", "c1-u2"]


@pytest.mark.parametrize("which", ["user", "assistant"])
def test_empty_message_id_is_excluded(store, which):
    def middle(b):
        b.run("c1", "r1")
        b.message("c1", "" if which == "user" else "u1", "r1", "user", "question")
        b.message("c1", "" if which == "assistant" else "a1", "r1", "assistant", "answer")

    assert _with_middle(store, middle) == ["c1-u0", "c1-u2"]


def test_answer_with_tool_calls_is_an_unsettled_action_not_an_answer(store):
    def middle(b):
        b.run("c1", "r1")
        b.message("c1", "u1", "r1", "user", "question")
        b.message("c1", "a1", "r1", "assistant", "let me look that up")
        b.tool_call("c1", "call_1", "a1", '{"q": 1}')

    assert _with_middle(store, middle) == ["c1-u0", "c1-u2"]


def test_tool_call_message_is_skipped_when_a_final_answer_follows(store):
    def middle(b):
        b.run("c1", "r1")
        b.message("c1", "u1", "r1", "user", "question")
        b.message("c1", "a1", "r1", "assistant", "let me look that up")
        b.tool_call("c1", "call_1", "a1", '{"q": 1}')
        b.message("c1", "t1", "r1", "tool", "result", kind="tool_result")
        b.message("c1", "a1f", "r1", "assistant", "final answer")

    assert [(u, a) for _, u, a in pair_ids(_store_for(store, middle))][1] == ("u1", "a1f")


def _store_for(store, middle):
    b = Builder().pair("c1", 0)
    middle(b)
    b.pair("c1", 2).write(store)
    return store


@pytest.mark.parametrize(
    ("role", "kind"),
    [("assistant", "reasoning"), ("user", "injected"), ("user", "summary"), ("system", "system")],
)
def test_traces_injected_context_and_summaries_are_never_pair_members(store, role, kind):
    def middle(b):
        b.run("c1", "r1")
        if role == "user":
            b.message("c1", "u1", "r1", "user", "not the user speaking", kind=kind)
            b.message("c1", "a1", "r1", "assistant", "answer")
        else:
            b.message("c1", "u1", "r1", "user", "question")
            b.message("c1", "a1", "r1", role, "internal trace", kind=kind)

    assert _with_middle(store, middle) == ["c1-u0", "c1-u2"]


def test_another_conversations_message_is_excluded(store):
    # c2's user message points at c1's run: it is not c1 material, and for c2 the run link is
    # not valid (the run belongs to c1); so neither conversation gets a pair from it.
    def middle(b):
        b.run("c1", "r1")
        b.message("c2", "u1", "r1", "user", "c2 private question")
        b.message("c1", "a1", "r1", "assistant", "answer")

    assert _with_middle(store, middle) == ["c1-u0", "c1-u2"]
    assert pair_ids(store, "c2") == []


def test_run_of_another_conversation_is_no_run_link_in_a_batch_read(store):
    # compact reads many conversations at once: c1's run r1 is then among the runs fetched,
    # yet c2's messages pointing at it still have no valid run link.
    b = Builder().pairs("c1", 1).run("c1", "r1")
    b.message("c2", "u1", "r1", "user", "question")
    b.message("c2", "a1", "r1", "assistant", "answer")
    b.write(store)
    both = eligible_pairs_many(store.con, ["c1", "c2"])
    assert [p.user.id for p in both["c1"]] == ["c1-u0"]
    assert both["c2"] == []
    assert eligible_pair_counts(store.con, ["c1", "c2"]) == {"c1": 1, "c2": 0}


def test_answer_from_another_conversation_is_excluded(store):
    def middle(b):
        b.run("c1", "r1")
        b.message("c1", "u1", "r1", "user", "question")
        b.message("c2", "a1", "r1", "assistant", "c2 answer")

    assert _with_middle(store, middle) == ["c1-u0", "c1-u2"]


def test_run_with_two_user_messages_is_ambiguous_and_excluded(store):
    def middle(b):
        b.run("c1", "r1")
        b.message("c1", "u1", "r1", "user", "question")
        b.message("c1", "u1b", "r1", "user", "and another")
        b.message("c1", "a1", "r1", "assistant", "answer")

    assert _with_middle(store, middle) == ["c1-u0", "c1-u2"]


def test_answer_before_the_user_message_is_not_its_answer(store):
    def middle(b):
        b.run("c1", "r1")
        b.message("c1", "a1", "r1", "assistant", "answer first")
        b.message("c1", "u1", "r1", "user", "question")

    assert _with_middle(store, middle) == ["c1-u0", "c1-u2"]


def test_exclusions_renumber_later_pairs(store):
    def middle(b):
        b.run("c1", "r1", status="failed")
        b.message("c1", "u1", "r1", "user", "question")
        b.message("c1", "a1", "r1", "assistant", "answer")

    _with_middle(store, middle)
    assert [i for i, _, _ in pair_ids(store)] == [0, 1]


def _mostly(usual, *others):
    """`usual` four times in five, else one of `others`."""
    return st.sampled_from([usual] * 4 * len(others) + list(others))


# Texts: Python's whitespace, the BOM and the zero-width space are no text; a zero-width
# non-joiner, a combining accent after a space, a NUL, or a letter after blanks are text.
_TEXT = _mostly(
    "text", "", " \n\t", "\u3000\u200b\ufeff", "\x85\u2028\xa0", "\u200c", " \u0301", "\x00",
    "\u200b\u3000x",
)  # fmt: skip
# One message of a turn: its role and kind, status, text, an empty id, a tool call on it.
_USER = st.tuples(
    _mostly(("user", "user_text"), ("user", "injected"), ("user", "summary")),
    _mostly("completed", "streaming"),
    _TEXT,
    _mostly(False, True),
    st.just(False),
)
_ANSWER = st.tuples(
    _mostly(("assistant", "assistant_text"), ("assistant", "reasoning"), ("tool", "tool_result")),
    _mostly("completed", "streaming", "incomplete"),
    _TEXT,
    _mostly(False, True),
    _mostly(False, True),
)
# One turn: its run's status, which run its messages name (its own, none, one that does not
# exist, another conversation's), its user messages and answers, and where they go: answers
# after the user message or before it, and the answers at the conversation's end (after
# later turns) or in place.
_TURN = st.tuples(
    _mostly("completed", "partial", "clarify_pending", "failed", "cancelled", "running"),
    st.sampled_from(["own", "own", "own", "none", "missing", "other"]),
    st.lists(_USER, min_size=1, max_size=2),
    st.sampled_from([1, 1, 1, 2, 0]).flatmap(lambda k: st.lists(_ANSWER, min_size=k, max_size=k)),
    _mostly(False, True),
    _mostly(False, True),
)
_CONVERSATION = st.lists(_TURN, max_size=6)


def test_pair_counts_are_what_pairing_finds():
    """The count a run takes of conversations it has not planned yet (`eligible_pair_counts`,
    in SQL) is the number of pairs the pairing rules find, whatever the rows."""
    numbers = itertools.count()
    with Store.open(":memory:") as store:
        store.con.execute("SET threads = 1")  # rows are few: one thread answers soonest

        @settings(max_examples=60, deadline=None)
        @given(st.lists(_CONVERSATION, min_size=1, max_size=8))
        def check(conversations):
            n = next(numbers)
            b = Builder()
            other = f"x{n}-other"
            b.run(other, f"{other}-r", "completed")
            cids = []
            empty_id = []  # message ids are unique in the store: one empty id an example

            def message(cid, mid, run_id, spec):
                (role, kind), status, text, no_id, call = spec
                if no_id and not empty_id:
                    empty_id.append(mid)
                    mid = ""
                b.message(cid, mid, run_id, role, text, kind=kind, status=status)
                if call and mid:
                    b.tool_call(cid, f"{mid}-t", mid, "{}")

            for k, turns in enumerate(conversations):
                cid = f"x{n}-c{k}"
                cids.append(cid)
                b.conversation(cid)
                late = []
                for t, (status, link, users, answers, answers_first, at_end) in enumerate(turns):
                    rid = f"{cid}-r{t}"
                    if link != "missing":
                        b.run(cid, rid, status)
                    # another conversation's run: one of this batch read (the first's) or not
                    elsewhere = f"x{n}-c0-r0" if k else f"{other}-r"
                    run_id = {"none": None, "other": elsewhere}.get(link, rid)
                    said = [(f"{rid}-u{i}", spec) for i, spec in enumerate(users)]
                    answered = [(f"{rid}-a{i}", spec) for i, spec in enumerate(answers)]
                    ordered = answered + said if answers_first else said + answered
                    if at_end:
                        ordered, late = said, late + [(run_id, m) for m in answered]
                    for mid, spec in ordered:
                        message(cid, mid, run_id, spec)
                for run_id, (mid, spec) in late:
                    message(cid, mid, run_id, spec)
            b.write(store)
            try:
                pairs = eligible_pairs_many(store.con, cids)
                assert eligible_pair_counts(store.con, cids) == {
                    cid: len(found) for cid, found in pairs.items()
                }
            finally:  # the next example may use an empty message id again
                for table in ("tool_calls", "messages", "runs"):
                    store.con.execute(f"DELETE FROM {table} WHERE conversation_id LIKE 'x{n}-%'")
                store.con.execute(f"DELETE FROM conversations WHERE id LIKE 'x{n}-%'")

        check()


def test_pair_counts_of_no_conversation_and_of_one_without_pairs(store):
    Builder().pairs("c1", 3).conversation("c2").write(store)
    assert eligible_pair_counts(store.con, []) == {}
    assert eligible_pair_counts(store.con, ["c1", "c2"]) == {"c1": 3, "c2": 0}
    assert eligible_pair_counts(store.con, ["c2"]) == {"c2": 0}


# -- point 2: fixed windows ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("n", "expected"),
    [
        (0, []),
        (29, []),
        (30, [(0, 9)]),
        (39, [(0, 9)]),
        (40, [(0, 9), (10, 19)]),
        (41, [(0, 9), (10, 19)]),
        (59, [(0, 9), (10, 19), (20, 29)]),
        (60, [(0, 9), (10, 19), (20, 29), (30, 39)]),
    ],
)
def test_plan_segments(n, expected):
    assert plan_segments(n) == expected
    assert segment_count(n) == len(expected)


@pytest.mark.parametrize("n", range(0, 130))
def test_every_plan_leaves_at_least_20_raw_pairs_and_whole_windows(n):
    segments = plan_segments(n)
    for k, (a, b) in enumerate(segments):
        assert (a, b) == (10 * k, 10 * k + 9)
    last = segments[-1][1] if segments else -1
    if segments:
        assert n - (last + 1) >= 20
    # and no candidate is withheld: one more segment would leave fewer than 20 raw pairs
    assert n - (last + 11) < 20


def test_negative_pair_count_is_refused():
    with pytest.raises(ValueError):
        plan_segments(-1)
