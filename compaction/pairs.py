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

# One plain, parameterised fetch of the candidate messages (real user text and assistant text
# whose run exists in the same conversation); the pairing rules run in Python over those rows.
# Window functions and a CTE read twice cost ~9x a plain fetch on a 500-pair conversation.
# The run is joined on id AND conversation, so a message pointing at another conversation's run
# has no valid run link. `has_calls` marks answers carrying tool calls (unsettled actions).
_ROWS_SQL = f"""
SELECT m.conversation_id, m.id, m.run_id, m.role, m.text, m.status, m.time,
       m.source_file, m.source_line, r.status,
       m.role = '{Role.ASSISTANT.value}' AND EXISTS (
           SELECT 1 FROM tool_calls t
           WHERE t.message_id = m.id AND t.conversation_id = m.conversation_id
       ) AS has_calls,
       m.position
FROM messages m
JOIN runs r ON r.id = m.run_id AND r.conversation_id = m.conversation_id
WHERE {{where}}
  AND ((m.role = '{Role.USER.value}' AND m.kind = '{MessageKind.USER_TEXT.value}')
    OR (m.role = '{Role.ASSISTANT.value}' AND m.kind = '{MessageKind.ASSISTANT_TEXT.value}'))
ORDER BY m.conversation_id, m.position
"""
_ONE_SQL = _ROWS_SQL.format(where="m.conversation_id = $id")
# the range lets DuckDB skip row groups (ingest writes a conversation's rows together)
_MANY_SQL = _ROWS_SQL.format(
    where="m.conversation_id BETWEEN $lo AND $hi "
    "AND m.conversation_id IN (SELECT unnest($ids::VARCHAR[]))"
)

_ELIGIBLE_RUNS = frozenset(ELIGIBLE_RUN_STATUSES)
_USER = Role.USER.value
_COMPLETED = MessageStatus.COMPLETED.value
_STATUSES = {s.value: s for s in MessageStatus}


def _status(value: str) -> MessageStatus:
    # A user message's status does not decide eligibility; keep unknown values readable.
    return _STATUSES.get(value, value)  # type: ignore[return-value]


def _blank(text: str | None) -> bool:
    return text is None or not text.strip(_BLANK)


def _pair_rows(cid: str, rows: list[tuple]) -> list[Pair]:
    """Apply the pairing rules to one conversation's candidate rows (in position order)."""
    users: dict[str, list[tuple]] = {}
    last_answer: dict[str, tuple] = {}
    for row in rows:
        if row[3] == _USER:
            users.setdefault(row[2], []).append(row)
        else:
            last_answer[row[2]] = row  # rows come in position order: the last one wins
    pairs: list[Pair] = []
    for run_id, found in users.items():  # dicts keep first-seen order = user position order
        answer_row = last_answer.get(run_id)
        if len(found) != 1 or answer_row is None:
            continue  # ambiguous run (several user messages) or no answer at all
        u, a = found[0], answer_row
        if (
            u[9] not in _ELIGIBLE_RUNS
            or a[5] != _COMPLETED  # the run's LAST answer must be completed (never streaming)
            or a[10]  # tool calls: an unsettled action, not an answer
            or a[11] <= u[11]  # the answer comes after the question
            or not u[1]
            or not a[1]
            or _blank(u[4])
            or _blank(a[4])
        ):
            continue
        user = Message(
            id=u[1],
            conversation_id=cid,
            role=Role.USER,
            kind=MessageKind.USER_TEXT,
            text=u[4],
            source=Source(u[7], u[8]),
            run_id=run_id,
            status=_status(u[5]),
            time=u[6],
        )
        answer = Message(
            id=a[1],
            conversation_id=cid,
            role=Role.ASSISTANT,
            kind=MessageKind.ASSISTANT_TEXT,
            text=a[4],
            source=Source(a[7], a[8]),
            run_id=run_id,
            status=MessageStatus.COMPLETED,  # checked above
            time=a[6],
        )
        pairs.append(Pair(index=len(pairs), user=user, assistant=answer))
    return pairs


def eligible_pairs_many(
    con: duckdb.DuckDBPyConnection, conversation_ids: Iterable[str]
) -> dict[str, list[Pair]]:
    """Eligible pairs of several conversations in one query: {conversation id: pairs}."""
    ids = list(dict.fromkeys(conversation_ids))
    result: dict[str, list[Pair]] = {cid: [] for cid in ids}
    if not ids:
        return result
    if len(ids) == 1:
        rows = con.execute(_ONE_SQL, {"id": ids[0]}).fetchall()
    else:
        rows = con.execute(_MANY_SQL, {"ids": ids, "lo": min(ids), "hi": max(ids)}).fetchall()
    by_conv: dict[str, list[tuple]] = {}
    for row in rows:
        by_conv.setdefault(row[0], []).append(row)
    for cid, conv_rows in by_conv.items():
        result[cid] = _pair_rows(cid, conv_rows)
    return result


def eligible_pairs(con: duckdb.DuckDBPyConnection, conversation_id: str) -> list[Pair]:
    """Eligible pairs of one conversation, numbered 0… in conversation order."""
    return eligible_pairs_many(con, [conversation_id])[conversation_id]


def pair_range(pairs: Sequence[Pair], from_pair: int, to_pair: int) -> list[Pair]:
    """The pairs with index from_pair..to_pair inclusive (fewer when the conversation is short)."""
    return [p for p in pairs[from_pair : to_pair + 1] if from_pair <= p.index <= to_pair]
