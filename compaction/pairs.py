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

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import duckdb

from lexkeep.core.collector import paused
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


# Whitespace-only text counts as empty: Python's whitespace (what str.strip() removes, as the
# ingest judges whether a turn was answered: em space, line separator, NBSP, ...) and the
# invisible BOM and zero-width space. Stops at the first other character.
_BLANK = re.compile("[\\s\ufeff\u200b]*")
# The same characters listed, for SQL (eligible_pair_counts): Python's whitespace (str.isspace,
# which is what `\s` matches in a str pattern), then the BOM and the zero-width space.
BLANK_CHARACTERS = (
    "\t\n\x0b\x0c\r\x1c\x1d\x1e\x1f \x85\xa0\u1680\u2000\u2001\u2002\u2003\u2004\u2005"
    "\u2006\u2007\u2008\u2009\u200a\u2028\u2029\u202f\u205f\u3000\ufeff\u200b"
)

# The messages pairing reads (a user's text, an assistant's text) and the answers that called
# a tool (never a pair's answer), shared by the fetches, the count and SOURCE_STATE_SQL below.
_PAIRED_KINDS = (
    f"((role = '{Role.USER.value}' AND kind = '{MessageKind.USER_TEXT.value}')"
    f" OR (role = '{Role.ASSISTANT.value}' AND kind = '{MessageKind.ASSISTANT_TEXT.value}'))"
)
_CALLED = (
    "SELECT DISTINCT conversation_id AS cid, message_id FROM tool_calls"
    " WHERE message_id IS NOT NULL AND {scope}"
)

# Three plain, parameterised fetches (candidate messages, runs, messages with tool calls) of
# the conversations; the join and the pairing rules run in Python over those rows. Window
# functions, a CTE read twice or a join in SQL cost several times these plain scans on a
# 500-pair conversation in a large store.
_MESSAGES_SQL = f"""
SELECT conversation_id, id, run_id, role, text, status, time, source_file, source_line, position
FROM messages
WHERE {{where}} AND {_PAIRED_KINDS}
ORDER BY conversation_id, position
"""
_RUNS_SQL = "SELECT id, conversation_id, status FROM runs WHERE {where}"
_CALLS_SQL = _CALLED.format(scope="{where}")
# How many pairs the rules above find in each conversation, counted in SQL without reading the
# texts into Python: what a run needs of conversations it has not planned yet (several times
# cheaper than pairing them). The same rules as _pair_rows, run by run: a valid run link (the
# run exists in the same conversation), exactly one real user message, the run's last answer
# after it, completed and without tool calls, an eligible run status, non-empty ids and texts
# (`filled`: a text holding a character outside BLANK_CHARACTERS; most texts start with one).
# tests/test_compaction_pairs.py checks that the counts are the lengths of the pairs.
_COUNTS_SQL = f"""
WITH m AS (
  SELECT conversation_id AS cid, id, run_id, role, status, position,
         id <> '' AND CASE WHEN strpos($blanks, left(text, 1)) = 0 THEN true
                           ELSE ltrim(text, $blanks) <> '' END AS filled
  FROM messages
  WHERE {{where}}
    AND {_PAIRED_KINDS}
),
calls AS ({_CALLED.format(scope="{where}")}),
per_run AS (
  SELECT m.cid, m.run_id, any_value(r.status) AS run_status,
         count(*) FILTER (WHERE m.role = '{Role.USER.value}') AS users,
         max(m.position) FILTER (WHERE m.role = '{Role.USER.value}') AS user_position,
         bool_and(m.filled) FILTER (WHERE m.role = '{Role.USER.value}') AS user_filled,
         max(m.position) FILTER (WHERE m.role = '{Role.ASSISTANT.value}') AS answer_position,
         arg_max(m.id, m.position) FILTER (WHERE m.role = '{Role.ASSISTANT.value}') AS answer_id,
         arg_max(m.status, m.position) FILTER (WHERE m.role = '{Role.ASSISTANT.value}')
           AS answer_status,
         arg_max(m.filled, m.position) FILTER (WHERE m.role = '{Role.ASSISTANT.value}')
           AS answer_filled
  FROM m
  JOIN (SELECT id, conversation_id, status FROM runs WHERE {{where}}) r
    ON r.id = m.run_id AND r.conversation_id = m.cid
  GROUP BY m.cid, m.run_id
)
SELECT cid, count(*) FROM per_run p
WHERE users = 1 AND answer_position > user_position AND user_filled AND answer_filled
  AND answer_status = '{MessageStatus.COMPLETED.value}'
  AND run_status IN ({", ".join(f"'{s}'" for s in ELIGIBLE_RUN_STATUSES)})
  AND NOT EXISTS (SELECT 1 FROM calls c WHERE c.cid = p.cid AND c.message_id = p.answer_id)
GROUP BY cid
"""

_ONE = "conversation_id = $id"
# the range lets DuckDB skip row groups (ingest writes a conversation's rows together)
_MANY = (
    "conversation_id BETWEEN $lo AND $hi AND conversation_id IN (SELECT unnest($ids::VARCHAR[]))"
)

# The state of a conversation's source up to one user message, in SQL: a fingerprint of every
# row the pairing above reads for the runs that have a real user message at or before that
# message's position (their candidate messages with the columns pairing and the source digest
# use, their run rows, the tool calls on their messages). The pairs up to that user message
# depend on those rows only: a run without such a message pairs after it, and a turn appended
# later leaves the state alone. Equal states therefore mean equal pairs up to there, so a
# summary whose range ends at that message still has the digest it was bound to. DuckDB's
# `hash` is fast but not kept across DuckDB versions, so its version is part of the state
# (another version only compares unequal). `{wanted}` is a query of (k, cid, uid) rows:
# a key, the conversation, the id of the user message; `{within}` limits the scans to those
# conversations (WANTED_ONLY, or with a range as _MANY has). The result is (k, state), and no
# row for a key whose user message is not a real user message with a run.
SOURCE_STATE_SQL = f"""
WITH wanted AS ({{wanted}}),
msg AS (
  SELECT conversation_id AS cid, run_id, id, role, position,
         hash(id, run_id, role, kind, status, position, text) AS h
  FROM messages
  WHERE {{within}} AND run_id IS NOT NULL
    AND {_PAIRED_KINDS}
),
calls AS ({_CALLED.format(scope="{within}")}),
run_messages AS (
  SELECT cid, run_id, min(position) FILTER (WHERE role = '{Role.USER.value}') AS first_user,
         bit_xor(h) AS h, count(*) AS n
  FROM msg GROUP BY cid, run_id
),
run_calls AS (
  SELECT m.cid, m.run_id, bit_xor(hash(c.message_id)) AS h, count(*) AS n
  FROM msg m JOIN calls c ON c.cid = m.cid AND c.message_id = m.id
  GROUP BY m.cid, m.run_id
),
per_run AS (
  SELECT rm.cid, rm.first_user, hash(rm.run_id, rm.h, rm.n, rc.h, rc.n, r.id, r.status) AS h
  FROM run_messages rm
  LEFT JOIN run_calls rc ON rc.cid = rm.cid AND rc.run_id = rm.run_id
  LEFT JOIN (SELECT id, conversation_id, status FROM runs WHERE {{within}}) r
    ON r.id = rm.run_id AND r.conversation_id = rm.cid
  WHERE rm.first_user IS NOT NULL
)
SELECT w.k, 'duckdb-hash/' || version() || ':' || count(*) || ':' || bit_xor(p.h) AS state
FROM wanted w
JOIN msg u ON u.id = w.uid AND u.cid = w.cid AND u.role = '{Role.USER.value}'
JOIN per_run p ON p.cid = w.cid AND p.first_user <= u.position
GROUP BY w.k
"""

_ELIGIBLE_RUNS = frozenset(ELIGIBLE_RUN_STATUSES)
_USER = Role.USER.value
_COMPLETED = MessageStatus.COMPLETED.value
_STATUSES = {s.value: s for s in MessageStatus}


def _status(value: str) -> MessageStatus:
    # A user message's status does not decide eligibility; keep unknown values readable.
    return _STATUSES.get(value, value)  # type: ignore[return-value]


def _blank(text: str | None) -> bool:
    return text is None or _BLANK.fullmatch(text) is not None


def _pair_rows(
    cid: str,
    rows: list[tuple],
    runs: dict[str, tuple[str, str]],
    with_calls: set[tuple[str, str]],
) -> list[Pair]:
    """Apply the pairing rules to one conversation's candidate rows (in position order)."""
    users: dict[str, list[tuple]] = {}
    last_answer: dict[str, tuple] = {}
    for row in rows:
        run = runs.get(row[2])
        # A valid run link: the run exists AND belongs to this conversation.
        if run is None or run[0] != cid:
            continue
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
            runs[run_id][1] not in _ELIGIBLE_RUNS
            or a[5] != _COMPLETED  # the run's LAST answer must be completed (never streaming)
            or (cid, a[1]) in with_calls  # tool calls: an unsettled action, not an answer
            or a[9] <= u[9]  # the answer comes after the question
            or not u[1]
            or not a[1]
            or _blank(u[4])
            or _blank(a[4])
        ):
            continue
        # Positional arguments (Message's field order): ~0.8 µs a message less than keywords,
        # which a 500-pair context pays 1,000 times.
        user = Message(
            u[1], cid, Role.USER, MessageKind.USER_TEXT, u[4], Source(u[7], u[8]), run_id,
            _status(u[5]), u[6],
        )  # fmt: skip
        answer = Message(
            a[1], cid, Role.ASSISTANT, MessageKind.ASSISTANT_TEXT, a[4], Source(a[7], a[8]),
            run_id, MessageStatus.COMPLETED, a[6],  # the status was checked above
        )  # fmt: skip
        pairs.append(Pair(index=len(pairs), user=user, assistant=answer))
    return pairs


def eligible_pairs_many(
    con: duckdb.DuckDBPyConnection, conversation_ids: Iterable[str]
) -> dict[str, list[Pair]]:
    """Eligible pairs of several conversations (three plain queries): {conversation id: pairs}."""
    return _pairs_many(con, conversation_ids, with_positions=False)[0]


def eligible_pair_counts(
    con: duckdb.DuckDBPyConnection, conversation_ids: Iterable[str]
) -> dict[str, int]:
    """How many eligible pairs each conversation has (0 for one without), counted in SQL: the
    lengths `eligible_pairs_many` would give, without reading the messages into Python."""
    ids = list(dict.fromkeys(conversation_ids))
    if not ids:
        return {}
    sql = _COUNTS_SQL.format(where=_MANY)
    params = {"ids": ids, "lo": min(ids), "hi": max(ids), "blanks": BLANK_CHARACTERS}
    counts = dict.fromkeys(ids, 0)
    counts.update(con.execute(sql, params).fetchall())
    return counts


def eligible_pairs(con: duckdb.DuckDBPyConnection, conversation_id: str) -> list[Pair]:
    """Eligible pairs of one conversation, numbered 0… in conversation order."""
    return eligible_pairs_many(con, [conversation_id])[conversation_id]


def pairs_and_user_positions(
    con: duckdb.DuckDBPyConnection, conversation_id: str
) -> tuple[list[Pair], dict[str, int]]:
    """Eligible pairs of one conversation, and the position of each of its user messages
    (role user, kind user_text: paired or not), read by the same queries."""
    by_conv, positions = _pairs_many(con, [conversation_id], with_positions=True)
    return by_conv[conversation_id], positions


def _pairs_many(
    con: duckdb.DuckDBPyConnection, conversation_ids: Iterable[str], *, with_positions: bool
) -> tuple[dict[str, list[Pair]], dict[str, int]]:
    ids = list(dict.fromkeys(conversation_ids))
    result: dict[str, list[Pair]] = {cid: [] for cid in ids}
    if not ids:
        return result, {}
    if len(ids) == 1:
        where, params = _ONE, {"id": ids[0]}
    else:
        where, params = _MANY, {"ids": ids, "lo": min(ids), "hi": max(ids)}
    # Rows and messages are acyclic: ~100k of them need no collection.
    with paused():
        rows = con.execute(_MESSAGES_SQL.format(where=where), params).fetchall()
        if not rows:
            return result, {}
        runs_sql = _RUNS_SQL.format(where=where)
        runs = {r[0]: (r[1], r[2]) for r in con.execute(runs_sql, params).fetchall()}
        with_calls = set(con.execute(_CALLS_SQL.format(where=where), params).fetchall())
        by_conv: dict[str, list[tuple]] = {}
        for row in rows:
            by_conv.setdefault(row[0], []).append(row)
        for cid, conv_rows in by_conv.items():
            result[cid] = _pair_rows(cid, conv_rows, runs, with_calls)
        positions = {row[1]: row[9] for row in rows if row[3] == _USER} if with_positions else {}
    return result, positions


WANTED_ONLY = "conversation_id IN (SELECT cid FROM wanted)"


def source_states(
    con: duckdb.DuckDBPyConnection, wanted: Sequence[tuple[str, str]]
) -> list[str | None]:
    """The source state (see SOURCE_STATE_SQL) of each (conversation id, user message id):
    None where that message is not a real user message with a run in the conversation."""
    if not wanted:
        return []
    sql = SOURCE_STATE_SQL.format(
        wanted="SELECT unnest($ks) AS k, unnest($cids) AS cid, unnest($uids) AS uid",
        # the range lets DuckDB skip row groups, as in the pairs' own reads
        within=f"conversation_id BETWEEN $lo AND $hi AND {WANTED_ONLY}",
    )
    cids = [cid for cid, _ in wanted]
    params = {
        "ks": list(range(len(wanted))),
        "cids": cids,
        "uids": [uid for _, uid in wanted],
        "lo": min(cids),
        "hi": max(cids),
    }
    found = dict(con.execute(sql, params).fetchall())
    return [found.get(k) for k in range(len(wanted))]


def pair_range(pairs: Sequence[Pair], from_pair: int, to_pair: int) -> list[Pair]:
    """The pairs with index from_pair..to_pair inclusive (fewer when the conversation is short)."""
    return [p for p in pairs[from_pair : to_pair + 1] if from_pair <= p.index <= to_pair]
