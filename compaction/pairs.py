"""Eligible (user message, assistant answer) pairs, projected from the store.

A pair is the real user message of a run and that run's final assistant answer, when (seed 000
§2, DESIGN.md "Compaction" point 1):

- the run exists, belongs to the conversation and has status completed, partial or
  clarify_pending;
- both messages belong to the conversation and to the run, have non-empty ids and non-empty
  text (whitespace only counts as empty);
- the run has exactly one real user message (kind user_text); the answer is the run's last
  assistant_text message, after the user message, itself completed (never streaming) and
  carrying no tool calls (a tool-calling message is an unsettled action, not an answer).

Reasoning, injected context, summaries, tool results and tool calls are never pair members.
Pairs are numbered 0… in conversation order (the position of the user message).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import duckdb

from lexkeep.core.model import Message, MessageKind, MessageStatus, Role, RunStatus, Source

ELIGIBLE_RUN_STATUSES: tuple[str, ...] = (
    RunStatus.COMPLETED.value,
    RunStatus.PARTIAL.value,
    RunStatus.CLARIFY_PENDING.value,
)


@dataclass(frozen=True, slots=True)
class Pair:
    """One eligible pair: its 0-based index in the conversation, the user message, the answer."""

    index: int
    user: Message
    assistant: Message


# Whitespace-only text counts as empty (ASCII whitespace, NBSP, ideographic space, BOM, ZWSP).
_BLANK = " \t\n\r\f\v\u00a0\u3000\ufeff\u200b"

# One query for a whole set of conversations (batch reads keep `compact` fast on big stores).
# The run is joined on id AND conversation, so a message pointing at another conversation's run
# has no valid run link; counting user_text messages per run refuses ambiguous runs.
_PAIRS_SQL = f"""
WITH linked AS (
    SELECT m.*, r.status AS run_status
    FROM messages m
    JOIN runs r ON r.id = m.run_id AND r.conversation_id = m.conversation_id
    -- the range lets DuckDB skip row groups (ingest writes a conversation's rows together)
    WHERE m.conversation_id BETWEEN $lo AND $hi
      AND m.conversation_id IN (SELECT unnest($ids::VARCHAR[]))
),
users AS (
    SELECT *, count(*) OVER (PARTITION BY run_id) AS n_users
    FROM linked
    WHERE role = '{Role.USER.value}' AND kind = '{MessageKind.USER_TEXT.value}'
),
answers AS (
    SELECT *, row_number() OVER (PARTITION BY run_id ORDER BY position DESC) AS rn
    FROM linked
    WHERE role = '{Role.ASSISTANT.value}' AND kind = '{MessageKind.ASSISTANT_TEXT.value}'
)
SELECT u.conversation_id,
       u.id, u.run_id, u.text, u.status, u.time, u.source_file, u.source_line,
       a.id, a.text, a.status, a.time, a.source_file, a.source_line
FROM users u
JOIN answers a ON a.run_id = u.run_id AND a.rn = 1
WHERE u.n_users = 1
  AND u.run_status IN ({", ".join(f"'{s}'" for s in ELIGIBLE_RUN_STATUSES)})
  AND a.status = '{MessageStatus.COMPLETED.value}'
  AND a.position > u.position
  AND u.id <> '' AND a.id <> ''
  AND trim(u.text, $blank) <> '' AND trim(a.text, $blank) <> ''
  AND NOT EXISTS (
      SELECT 1 FROM tool_calls t
      WHERE t.message_id = a.id AND t.conversation_id = a.conversation_id
  )
ORDER BY u.conversation_id, u.position
"""


_STATUSES = {s.value: s for s in MessageStatus}


def _status(value: str) -> MessageStatus:
    # A user message's status does not decide eligibility; keep unknown values readable.
    return _STATUSES.get(value, value)  # type: ignore[return-value]


def eligible_pairs_many(
    con: duckdb.DuckDBPyConnection, conversation_ids: Iterable[str]
) -> dict[str, list[Pair]]:
    """Eligible pairs of several conversations in one query: {conversation id: pairs}."""
    ids = list(dict.fromkeys(conversation_ids))
    result: dict[str, list[Pair]] = {cid: [] for cid in ids}
    if not ids:
        return result
    for row in con.execute(
        _PAIRS_SQL, {"ids": ids, "blank": _BLANK, "lo": min(ids), "hi": max(ids)}
    ).fetchall():
        cid = row[0]
        bucket = result[cid]
        user = Message(
            id=row[1],
            conversation_id=cid,
            role=Role.USER,
            kind=MessageKind.USER_TEXT,
            text=row[3],
            source=Source(row[6], row[7]),
            run_id=row[2],
            status=_status(row[4]),
            time=row[5],
        )
        answer = Message(
            id=row[8],
            conversation_id=cid,
            role=Role.ASSISTANT,
            kind=MessageKind.ASSISTANT_TEXT,
            text=row[9],
            source=Source(row[12], row[13]),
            run_id=row[2],
            status=MessageStatus.COMPLETED,  # the query admits nothing else
            time=row[11],
        )
        bucket.append(Pair(index=len(bucket), user=user, assistant=answer))
    return result


def eligible_pairs(con: duckdb.DuckDBPyConnection, conversation_id: str) -> list[Pair]:
    """Eligible pairs of one conversation, numbered 0… in conversation order."""
    return eligible_pairs_many(con, [conversation_id])[conversation_id]


def pair_range(pairs: Sequence[Pair], from_pair: int, to_pair: int) -> list[Pair]:
    """The pairs with index from_pair..to_pair inclusive (fewer when the conversation is short)."""
    return [p for p in pairs[from_pair : to_pair + 1] if from_pair <= p.index <= to_pair]
