"""Fixed 10-pair windows: which ranges are compaction candidates (seed 000 §3).

A segment is exactly 10 pairs starting at a multiple of 10. Segment k (pairs 10k…10k+9) is a
candidate only when at least 20 newer pairs remain after it, i.e. n >= 10k + 30: 30 pairs give
0–9, 39 still only 0–9, 40 give 0–9 and 10–19. The newest 20 pairs or more always stay raw.
"""

from __future__ import annotations

SEGMENT_PAIRS = 10
RAW_TAIL_PAIRS = 20


def segment_count(n_pairs: int) -> int:
    """How many candidate segments a conversation with `n_pairs` eligible pairs has."""
    if n_pairs < 0:
        raise ValueError(f"n_pairs must be >= 0, got {n_pairs}")
    return max(0, (n_pairs - RAW_TAIL_PAIRS) // SEGMENT_PAIRS)


def plan_segments(n_pairs: int) -> list[tuple[int, int]]:
    """Candidate segments for a conversation with `n_pairs` eligible pairs, as (from, to)."""
    return [
        (k * SEGMENT_PAIRS, k * SEGMENT_PAIRS + SEGMENT_PAIRS - 1)
        for k in range(segment_count(n_pairs))
    ]


def is_segment(from_pair: int, to_pair: int) -> bool:
    """True when (from_pair, to_pair) is a whole fixed window."""
    return from_pair >= 0 and from_pair % SEGMENT_PAIRS == 0 and to_pair == from_pair + 9
