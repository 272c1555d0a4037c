"""core/keyset.py: the compact set of committed key hashes a keyless store's writer keeps.

How the writer uses it against a real store (copies left out, a colliding hash confirmed by
the store) is tested in tests/test_ingest_read_ahead.py (`test_lean_store_without_keys_*`).
"""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from lexkeep.core.keyset import HashSet

_NONZERO = st.integers(min_value=-(2**63), max_value=2**63 - 1).filter(bool)


@settings(max_examples=300, deadline=None)
@given(
    added=st.lists(_NONZERO | st.integers(-50, 50).filter(bool), max_size=3000),
    asked=st.lists(_NONZERO, max_size=200),
)
def test_hash_set_answers_as_a_set(added, asked):
    """Membership equals a Python set's, across growth, repeats, negative values and values
    sharing their low bits (the slot they start from)."""
    held = HashSet()
    shifted = (value << 20 for value in added[:100])
    crowded = [value for value in shifted if -(2**63) <= value < 2**63]
    for value in [*added, *crowded]:
        held.add(value)
    expected = {*added, *crowded}
    assert len(held) == len(expected)
    for value in [*expected, *asked]:
        assert (value in held) == (value in expected)


def test_hash_set_holds_zero_as_one():
    """0 marks an empty slot: it is held as 1, so neither is lost and both then match."""
    held = HashSet()
    assert 0 not in held and 1 not in held
    held.add(0)
    assert 0 in held and 1 in held and len(held) == 1
    held.add(1)
    assert len(held) == 1


def test_hash_set_takes_bytes_per_value_not_objects():
    """200,000 spread 64-bit values: at most 32 bytes each (8-byte slots, at most half full)."""
    values = {(n * 0x9E3779B97F4A7C15) % (2**63 - 1) or 1 for n in range(1, 200_001)}
    held = HashSet()
    for value in values:
        held.add(value)
    assert len(held) == len(values)
    assert held.nbytes <= 32 * len(values)
    assert all(value in held for value in values)
    assert not any(value in held for value in range(1, 10_000) if value not in values)
