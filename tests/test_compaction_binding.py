"""Point 3: source binding — documented encoding, golden SHA-256, sensitivity, complete ids."""

from __future__ import annotations

import dataclasses
import hashlib
import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lexkeep.compaction.binding import (
    canonical_encoding,
    check_range,
    identity,
    source_digest,
    source_message_ids,
)
from lexkeep.compaction.pairs import Pair
from lexkeep.core.errors import RuleError
from lexkeep.core.model import Message, MessageKind, Role, Source

# Pinned: if this changes, every stored summary becomes stale. Change only with a new
# encoding version (the magic line) and a note in docs/compaction.md.
GOLDEN_SHA256 = "e51c8ed3398e4b626a947aa5db275f7e9aa7f4f4c8351f6222765f7200491636"


def golden_pairs() -> list[Pair]:
    """Ten fixed pairs, with non-ASCII text, newlines and an empty-looking field boundary."""
    pairs = []
    for i in range(10):
        user = Message(
            id=f"u{i}",
            conversation_id="conv-1",
            role=Role.USER,
            kind=MessageKind.USER_TEXT,
            text=f"发票 INV-2025-08-4471{i} — line\nbreak {i}",
            source=Source("g.jsonl", 2 * i + 1),
            run_id=f"r{i}",
        )
        answer = Message(
            id=f"a{i}",
            conversation_id="conv-1",
            role=Role.ASSISTANT,
            kind=MessageKind.ASSISTANT_TEXT,
            text=f"Answer {i}: net value as of last week ≠ current value.",
            source=Source("g.jsonl", 2 * i + 2),
            run_id=f"r{i}",
        )
        pairs.append(Pair(i, user, answer))
    return pairs


def documented_encoding(pairs: list[Pair]) -> bytes:
    """The encoding exactly as docs/compaction.md states it, written independently."""
    out = b"lexkeep-compaction-source/1\n" + struct.pack(">I", len(pairs))
    for p in pairs:
        for value in (p.user.id, p.user.text, p.assistant.id, p.assistant.text):
            raw = value.encode("utf-8")
            out += struct.pack(">Q", len(raw)) + raw
    return out


def test_canonical_encoding_is_the_documented_one():
    pairs = golden_pairs()
    assert canonical_encoding(pairs) == documented_encoding(pairs)


def test_golden_sha256():
    pairs = golden_pairs()
    assert source_digest(pairs) == GOLDEN_SHA256
    assert source_digest(pairs) == hashlib.sha256(documented_encoding(pairs)).hexdigest()


def _replace(pairs, i, side, **changes):
    pair = pairs[i]
    message = dataclasses.replace(getattr(pair, side), **changes)
    new = dataclasses.replace(pair, **{side: message})
    return [*pairs[:i], new, *pairs[i + 1 :]]


@pytest.mark.parametrize("i", [0, 3, 9])
@pytest.mark.parametrize("side", ["user", "assistant"])
def test_any_id_change_changes_the_digest(i, side):
    pairs = golden_pairs()
    changed = _replace(pairs, i, side, id=getattr(pairs[i], side).id + "x")
    assert source_digest(changed) != source_digest(pairs)


@pytest.mark.parametrize("i", [0, 3, 9])
@pytest.mark.parametrize("side", ["user", "assistant"])
def test_any_byte_of_text_changes_the_digest(i, side):
    pairs = golden_pairs()
    text = getattr(pairs[i], side).text
    for pos in (0, len(text) // 2, len(text) - 1):
        flipped = text[:pos] + chr(ord(text[pos]) ^ 1) + text[pos + 1 :]
        assert source_digest(_replace(pairs, i, side, text=flipped)) != source_digest(pairs)
    # one trailing space, one dropped character
    assert source_digest(_replace(pairs, i, side, text=text + " ")) != source_digest(pairs)
    assert source_digest(_replace(pairs, i, side, text=text[:-1])) != source_digest(pairs)


def test_moving_bytes_between_fields_changes_the_digest():
    # length prefixes make ("ab", "c") and ("a", "bc") encode differently
    pairs = golden_pairs()
    a = _replace(_replace(pairs, 0, "user", text="ab"), 0, "assistant", text="c")
    b = _replace(_replace(pairs, 0, "user", text="a"), 0, "assistant", text="bc")
    assert source_digest(a) != source_digest(b)


def test_swapping_two_pairs_changes_the_digest():
    pairs = golden_pairs()
    swapped = [pairs[1], pairs[0], *pairs[2:]]
    assert source_digest(swapped) != source_digest(pairs)


def test_identity_carries_20_ids_in_binding_order():
    pairs = golden_pairs()
    ident = identity("conv-1", 0, 9, pairs, model_id="m", prompt_version="p@3")
    assert ident.source_message_ids == tuple(x for i in range(10) for x in (f"u{i}", f"a{i}"))
    assert ident.source_digest == source_digest(pairs)
    assert len(source_message_ids(pairs)) == 20


def test_identity_key_changes_with_every_component():
    pairs = golden_pairs()
    base = identity("conv-1", 0, 9, pairs, model_id="m", prompt_version="p@3")
    variants = [
        dataclasses.replace(base, conversation_id="conv-2"),
        dataclasses.replace(base, scope="other"),
        dataclasses.replace(base, model_id="m2"),
        dataclasses.replace(base, prompt_version="p@2"),
        dataclasses.replace(base, source_digest="0" * 64),
        dataclasses.replace(base, source_message_ids=base.source_message_ids[::-1]),
        dataclasses.replace(base, from_pair=10, to_pair=19),
    ]
    keys = {v.key() for v in variants}
    assert base.key() not in keys and len(keys) == len(variants)


def test_duplicate_id_is_refused():
    pairs = golden_pairs()
    dup = _replace(pairs, 5, "assistant", id="u2")
    with pytest.raises(RuleError, match="not unique: u2"):
        identity("conv-1", 0, 9, dup, model_id="m", prompt_version="p@3")


def test_user_and_assistant_sharing_an_id_is_refused():
    pairs = golden_pairs()
    dup = _replace(pairs, 4, "assistant", id="u4")
    with pytest.raises(RuleError, match="not unique"):
        check_range("conv-1", 0, 9, dup)


def test_empty_id_is_refused():
    pairs = golden_pairs()
    with pytest.raises(RuleError, match="no id"):
        check_range("conv-1", 0, 9, _replace(pairs, 7, "user", id=""))


@pytest.mark.parametrize("count", [9, 11])
def test_not_exactly_10_pairs_is_refused(count):
    pairs = golden_pairs()
    extra = dataclasses.replace(pairs[0], index=10)
    seq = (pairs + [extra])[:count]
    with pytest.raises(RuleError):
        check_range("conv-1", 0, 9, seq)


@pytest.mark.parametrize(("a", "b"), [(1, 10), (5, 14), (0, 10), (10, 18), (-10, -1)])
def test_range_must_be_a_whole_window(a, b):
    with pytest.raises(RuleError, match="multiple of 10"):
        check_range("conv-1", a, b, golden_pairs())


def test_message_of_another_conversation_is_refused():
    pairs = golden_pairs()
    with pytest.raises(RuleError, match="belongs to conversation other"):
        check_range("conv-1", 0, 9, _replace(pairs, 2, "user", conversation_id="other"))


def _decode(data: bytes) -> list[tuple[str, str, str, str]]:
    """Parse the documented encoding back into fields (proves it is unambiguous)."""
    magic = b"lexkeep-compaction-source/1\n"
    assert data.startswith(magic)
    pos = len(magic)
    (count,) = struct.unpack_from(">I", data, pos)
    pos += 4
    out = []
    for _ in range(count):
        fields = []
        for _ in range(4):
            (length,) = struct.unpack_from(">Q", data, pos)
            pos += 8
            fields.append(data[pos : pos + length].decode("utf-8"))
            pos += length
        out.append(tuple(fields))
    assert pos == len(data)
    return out


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.text(), st.text(), st.text(), st.text()), min_size=0, max_size=12))
def test_encoding_round_trips_so_different_sources_never_share_bytes(fields):
    pairs = []
    for i, (uid, utext, aid, atext) in enumerate(fields):
        base = golden_pairs()[0]
        pairs.append(
            Pair(
                i,
                dataclasses.replace(base.user, id=uid, text=utext),
                dataclasses.replace(base.assistant, id=aid, text=atext),
            )
        )
    assert _decode(canonical_encoding(pairs)) == fields
