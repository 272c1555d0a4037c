"""Look at what is stored: store-wide statistics and one conversation's timeline."""

from __future__ import annotations

import ast
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from lexkeep.core.errors import NotFoundError
from lexkeep.core.store import Store

SCHEMA_VERSION = 1

# The ingest_errors reason of a record left out because its conversation already held its id
# with other content (core.ingest._check_ids); its detail names the record (conflict_detail).
ID_CONFLICT = "id_conflict"


def conflict_detail(
    what: str, record_id: str, conversation: str | None = None, kind: str | None = None
) -> str:
    """The ingest_errors detail of a record left out for its id: its kind and id as Python
    writes a string (`message 'm1'`), and for a tool call or result, whose call id only its
    conversation makes unique, the conversation too (`tool_call 't1' in conversation 'c1'`);
    a message that is not a user's own text also names its `kind` (`message 'm2'
    (assistant_text)`: the audit never reads it). `conflict_record` reads it back exactly."""
    text = f"{what} {record_id!r}"
    if conversation is not None:
        text = f"{text}{_IN_CONVERSATION}{conversation!r}"
    if kind is not None and kind != _USER_TEXT:
        text = f"{text} ({kind})"
    return text


_IN_CONVERSATION = " in conversation "
_USER_TEXT = "user_text"  # MessageKind.USER_TEXT: the only messages the audit reads

# The details of records left out that the audit does not read (conflict_detail): tool results,
# and messages named with a kind (a quoted id ends in a quote, never in ')').
_UNREAD_SQL = (
    "(starts_with(detail, 'tool_result ')"
    " OR (starts_with(detail, 'message ') AND ends_with(detail, ')')))"
)


def conflict_record(detail: str) -> tuple[str, str, str | None]:
    """(kind, id, conversation or None) of a conflict_detail text."""
    if detail.endswith(")"):  # a message's kind after its quoted id
        detail = detail[: detail.rindex(" (")]
    what, _, quoted = detail.partition(" ")
    # Split where both sides are Python strings: an id may itself hold the separator.
    start = 0
    while (at := quoted.find(_IN_CONVERSATION, start)) != -1:
        start = at + 1
        try:
            record_id = ast.literal_eval(quoted[:at])
            conversation = ast.literal_eval(quoted[at + len(_IN_CONVERSATION) :])
        except (SyntaxError, ValueError):
            continue
        if isinstance(record_id, str) and isinstance(conversation, str):
            return what, record_id, conversation
    return what, ast.literal_eval(quoted), None


# Where the record a left-out one conflicts with is stored, by its kind (see left_out).
_HELD_SQL = {
    "message": "SELECT source_file, source_line FROM messages WHERE id = ?",
    "compaction": "SELECT source_file, source_line FROM boundaries WHERE id = ?",
    "tool_call": "SELECT source_file, source_line FROM tool_calls"
    " WHERE call_id = ? AND conversation_id = ?",
    "tool_result": "SELECT source_file, source_line FROM tool_results"
    " WHERE call_id = ? AND conversation_id = ?",
}


def left_out(store: Store, read: bool | None = None) -> tuple[int, str | None]:
    """Records ingests left out because their conversation already held their id with other
    content (ingest_errors rows `id_conflict`): how many, and the first recorded as text
    (`message 'm1' at day2.jsonl:1, stored from day1.jsonl:1`, paths as reports show them).

    `read` True counts only records the audit reads (user messages, tool calls, compactions),
    False only the others (tool results, messages other than users' own text), None all.
    """
    con = store.con
    which = "" if read is None else f" AND {'NOT ' if read else ''}{_UNREAD_SQL}"
    rows = con.execute(
        "SELECT count(*) OVER (), path, line, detail FROM ingest_errors WHERE reason = ?"
        f"{which} ORDER BY ingest_run_id, line LIMIT 1",
        [ID_CONFLICT],
    ).fetchall()
    if not rows:
        return 0, None
    total, path, line, detail = rows[0]
    what, record_id, conversation = conflict_record(detail)
    shown = store.shown_paths()
    text = f"{detail} at {shown[path]}:{line}"
    sql = _HELD_SQL.get(what)
    if sql is not None:
        params = [record_id] if conversation is None else [record_id, conversation]
        held = con.execute(sql, params).fetchone()
        if held is not None:
            text += f", stored from {shown[held[0]]}:{held[1]}"
    return total, text


@dataclass(frozen=True, slots=True)
class FormatStats:
    """Counts for the conversations of one source format."""

    format: str
    conversations: int
    conversations_with_boundaries: int
    messages: int
    user_messages: int
    tool_calls: int
    tool_results: int
    boundaries: int
    identifiers: int


@dataclass(frozen=True, slots=True)
class Stats:
    """What the store holds, per format and in total, plus the ingest ledger."""

    formats: list[FormatStats]
    totals: FormatStats
    files_ingested: int
    ingest_errors: int
    errors_by_reason: dict[str, int] = field(default_factory=dict)
    incomplete_scans: int = 0
    # The first message (by file, then line) whose scan is incomplete, as FILE:LINE.
    first_incomplete_scan: str | None = None
    # Of ingest_errors, the records left out because their conversation already held their id
    # with other content (`id_conflict`), and the first of them as text (see left_out).
    records_left_out: int = 0
    first_left_out: str | None = None
    # The other ingest_errors rows: lines skipped by --skip-invalid, and the first as FILE:LINE.
    invalid_lines: int = 0
    first_invalid_line: str | None = None

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready dict with `schema_version`."""
        return {"schema_version": SCHEMA_VERSION, **asdict(self)}


_PER_FORMAT = """
WITH c AS (SELECT id, format FROM conversations),
m AS (SELECT conversation_id, count(*) AS n,
             count(*) FILTER (WHERE kind = 'user_text') AS u
      FROM messages GROUP BY ALL),
t AS (SELECT conversation_id, count(*) AS n FROM tool_calls GROUP BY ALL),
r AS (SELECT conversation_id, count(*) AS n FROM tool_results GROUP BY ALL),
b AS (SELECT conversation_id, count(*) AS n FROM boundaries GROUP BY ALL),
i AS (SELECT conversation_id, count(*) AS n FROM identifiers GROUP BY ALL)
SELECT c.format, count(*), count(*) FILTER (WHERE coalesce(b.n, 0) > 0),
       coalesce(sum(m.n), 0), coalesce(sum(m.u), 0), coalesce(sum(t.n), 0),
       coalesce(sum(r.n), 0), coalesce(sum(b.n), 0), coalesce(sum(i.n), 0)
FROM c LEFT JOIN m ON m.conversation_id = c.id LEFT JOIN t ON t.conversation_id = c.id
LEFT JOIN r ON r.conversation_id = c.id LEFT JOIN b ON b.conversation_id = c.id
LEFT JOIN i ON i.conversation_id = c.id
GROUP BY c.format ORDER BY c.format
"""


def incomplete_scans(store: Store) -> tuple[int, str | None]:
    """How many identifier scans ran out of time (or were cut at max_chars), and where the
    first such message is (by file, then line; FILE:LINE), so the user can open it."""
    row = store.con.execute(
        "SELECT count(*) OVER (), m.source_file, m.source_line"
        " FROM identifier_scans s LEFT JOIN messages m ON m.id = s.message_id"
        " WHERE NOT s.complete ORDER BY m.source_file NULLS LAST, m.source_line LIMIT 1"
    ).fetchone()
    if row is None:
        return 0, None
    if row[1] is None:
        return row[0], None
    return row[0], f"{store.shown_paths()[row[1]]}:{row[2]}"


def stats(store: Store) -> Stats:
    """Counts per format, conversations with boundaries, identifiers and ingest errors."""
    con = store.con
    per = [
        FormatStats(*(int(v) if i else v for i, v in enumerate(row)))
        for row in con.execute(_PER_FORMAT).fetchall()
    ]
    totals = FormatStats(
        "all",
        *(sum(getattr(f, name) for f in per) for name in FormatStats.__slots__[1:]),
    )
    # A file is its path; standard input ('-') is a new input each time other bytes came in.
    # A file a crash left with nothing readable has a row of format '' (migration 009): it
    # was never ingested.
    files = con.execute(
        "SELECT count(DISTINCT CASE WHEN path = '-' THEN '-' || sha256 ELSE path END)"
        " FROM ingest_runs WHERE format <> ''"
    ).fetchone()[0]
    by_reason = dict(
        con.execute("SELECT reason, count(*) FROM ingest_errors GROUP BY 1 ORDER BY 1").fetchall()
    )
    incomplete, first_incomplete = incomplete_scans(store)
    left, first = left_out(store) if by_reason.get(ID_CONFLICT) else (0, None)
    invalid = con.execute(
        "SELECT count(*) OVER (), path, line FROM ingest_errors WHERE reason <> ?"
        " ORDER BY ingest_run_id, line LIMIT 1",
        [ID_CONFLICT],
    ).fetchone()
    invalid_lines, first_invalid = (0, None) if invalid is None else (invalid[0], None)
    if invalid is not None:
        first_invalid = f"{store.shown_paths()[invalid[1]]}:{invalid[2]}"
    return Stats(
        per,
        totals,
        files,
        sum(by_reason.values()),
        by_reason,
        incomplete,
        first_incomplete,
        left,
        first,
        invalid_lines,
        first_invalid,
    )


@dataclass(frozen=True, slots=True)
class TimelineEntry:
    """One item of a conversation's timeline, in position order."""

    position: int
    type: str  # message | tool_call | tool_result | boundary
    source_file: str
    source_line: int
    role: str | None = None
    kind: str | None = None
    status: str | None = None
    run_id: str | None = None
    id: str | None = None
    text: str | None = None
    time: str | None = None
    name: str | None = None
    arguments_raw: str | None = None
    arguments_kind: str | None = None
    is_error: bool | None = None
    summary_text: str | None = None
    kept_verbatim: list[str] | None = None
    trigger: str | None = None


@dataclass(frozen=True, slots=True)
class Timeline:
    """A conversation with its runs and timeline entries."""

    id: str
    format: str
    title: str | None
    parent_id: str | None
    source_file: str
    source_line: int
    runs: dict[str, str]
    entries: list[TimelineEntry]
    identifiers: list[dict[str, Any]]

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready dict with `schema_version`."""
        return {"schema_version": SCHEMA_VERSION, **asdict(self)}


def resolve_conversation(store: Store, conversation: str) -> str:
    """The stored id for `conversation`: an exact id, else a unique prefix of one."""
    con = store.con
    if con.execute("SELECT 1 FROM conversations WHERE id = ?", [conversation]).fetchone():
        return conversation
    found: list[str] = []
    if conversation:  # an empty prefix would match every id and read as "ambiguous"
        found = [
            r[0]
            for r in con.execute(
                "SELECT id FROM conversations WHERE starts_with(id, ?) ORDER BY id LIMIT 6",
                [conversation],
            ).fetchall()
        ]
    if len(found) == 1:
        return found[0]
    if found:
        # A session and its sub-agents (Claude Code names them `<session>/agent-…`): the
        # prefix names the one match whose parent is not a match too.
        roots = con.execute(
            "SELECT c.id FROM conversations c WHERE starts_with(c.id, ?) AND NOT EXISTS"
            " (SELECT 1 FROM conversations p WHERE p.id = c.parent_id AND starts_with(p.id, ?))"
            " LIMIT 2",
            [conversation, conversation],
        ).fetchall()
        if len(roots) == 1 and _all_descend_from(con, conversation, roots[0][0]):
            return roots[0][0]
        raise NotFoundError(
            f"conversation {conversation!r} is ambiguous",
            hint="matches " + ", ".join(found[:5]) + (" …" if len(found) > 5 else ""),
        )
    raise NotFoundError(
        f"no conversation {conversation!r} in the store", **unknown_conversation_hint(con)
    )


def _all_descend_from(con: Any, prefix: str, root: str) -> bool:
    """True when every conversation whose id starts with `prefix` is `root` or a sub-agent
    of it, at any depth (parent links are checked, not the shape of the ids)."""
    row = con.execute(
        "WITH RECURSIVE family(id) AS (SELECT ? UNION SELECT c.id FROM conversations c"
        " JOIN family f ON c.parent_id = f.id)"
        " SELECT count(*) FROM conversations WHERE starts_with(id, ?)"
        " AND id NOT IN (SELECT id FROM family)",
        [root, prefix],
    ).fetchone()
    return row[0] == 0


def require_conversations(con: Any, wanted: Sequence[str]) -> list[str]:
    """`wanted` without repeats, in order; NotFoundError naming those not in the store.

    `con` is a store's connection. Ids are taken whole (no prefixes): these are the ids a
    command was told to work on, and a typo must not read as "nothing to do".
    """
    wanted = list(dict.fromkeys(wanted))
    if not wanted:
        return wanted
    found = {
        r[0]
        for r in con.execute(
            "SELECT id FROM conversations WHERE id IN (SELECT unnest(?::VARCHAR[]))", [wanted]
        ).fetchall()
    }
    missing = [c for c in wanted if c not in found]
    if missing:
        raise NotFoundError(
            f"no conversation {', '.join(missing)} in the store",
            **unknown_conversation_hint(con),
        )
    return wanted


def unknown_conversation_hint(con: Any) -> dict[str, Any]:
    """The hint for an unknown conversation id (`con`: a store's connection), as keyword
    arguments of the error: some stored ids, and the call that lists them all (the commands
    name theirs: lexkeep.cli.wording)."""
    # A user who typed a title or a file name sees what an id looks like.
    total = con.execute("SELECT count(*) FROM conversations").fetchone()[0]
    some = [
        r[0] for r in con.execute("SELECT id FROM conversations ORDER BY id LIMIT 5").fetchall()
    ]
    if not total:
        return {
            "hint": "the store is empty: ingest_paths(store, paths) fills it",
            "wording": "conversation.store_empty",
        }
    held = f"the store holds {total} conversation(s), e.g. " + ", ".join(some)
    held += " …" if total > len(some) else ""
    return {
        "hint": f"{held}; lexkeep.core.inspect.conversations(store) lists them all",
        "wording": "conversation.unknown",
        "fields": {"held": held},
    }


@dataclass(frozen=True, slots=True)
class ConversationSummary:
    """One stored conversation: its id, where it starts and what it holds."""

    id: str
    format: str
    title: str | None
    parent_id: str | None
    source_file: str
    source_line: int
    messages: int
    tool_calls: int
    boundaries: int
    identifiers: int


_CONVERSATIONS = """
WITH m AS (SELECT conversation_id, count(*) AS n FROM messages GROUP BY ALL),
t AS (SELECT conversation_id, count(*) AS n FROM tool_calls GROUP BY ALL),
b AS (SELECT conversation_id, count(*) AS n FROM boundaries GROUP BY ALL),
i AS (SELECT conversation_id, count(*) AS n FROM identifiers GROUP BY ALL)
SELECT c.id, c.format, c.title, c.parent_id, c.source_file, c.source_line,
       coalesce(m.n, 0), coalesce(t.n, 0), coalesce(b.n, 0), coalesce(i.n, 0)
FROM conversations c LEFT JOIN m ON m.conversation_id = c.id
LEFT JOIN t ON t.conversation_id = c.id LEFT JOIN b ON b.conversation_id = c.id
LEFT JOIN i ON i.conversation_id = c.id
ORDER BY c.id
"""


def conversations(store: Store) -> list[ConversationSummary]:
    """Every stored conversation, by id, with its counts (source files as reports name them)."""
    shown = store.shown_paths()
    return [
        ConversationSummary(*row[:4], shown[row[4]], *(int(v) for v in row[5:]))
        for row in store.con.execute(_CONVERSATIONS).fetchall()
    ]


def conversations_to_json(listed: Sequence[ConversationSummary]) -> dict[str, Any]:
    """The listing as a JSON-ready dict with `schema_version`."""
    return {"schema_version": SCHEMA_VERSION, "conversations": [asdict(c) for c in listed]}


def show(store: Store, conversation: str) -> Timeline:
    """The timeline of one conversation (by id or unique id prefix)."""
    conv_id = resolve_conversation(store, conversation)
    con = store.con
    head = con.execute(
        "SELECT id, format, title, parent_id, source_file, source_line FROM conversations"
        " WHERE id = ?",
        [conv_id],
    ).fetchone()
    rows = con.execute(
        """
        SELECT position, 'message', source_file, source_line, role, kind, status, run_id, id,
               text, time, NULL, NULL, NULL, NULL, NULL, NULL, NULL
        FROM messages WHERE conversation_id = $1
        UNION ALL
        SELECT position, 'tool_call', source_file, source_line, NULL, NULL, NULL, NULL, call_id,
               NULL, time, name, arguments_raw, arguments_kind, NULL, NULL, NULL, NULL
        FROM tool_calls WHERE conversation_id = $1
        UNION ALL
        SELECT position, 'tool_result', source_file, source_line, NULL, NULL, NULL, NULL, call_id,
               text, NULL, NULL, NULL, NULL, is_error, NULL, NULL, NULL
        FROM tool_results WHERE conversation_id = $1
        UNION ALL
        SELECT position, 'boundary', source_file, source_line, NULL, kind, NULL, NULL, id,
               NULL, time, NULL, NULL, NULL, NULL, summary_text, kept_verbatim, trigger
        FROM boundaries WHERE conversation_id = $1
        ORDER BY 1
        """,
        [conv_id],
    ).fetchall()
    runs = dict(
        con.execute(
            "SELECT id, status FROM runs WHERE conversation_id = ? ORDER BY position", [conv_id]
        ).fetchall()
    )
    # Source files as reports name them (relative to the current folder when under it).
    shown = store.shown_paths()
    head = (*head[:4], shown[head[4]], head[5])
    entries = [TimelineEntry(row[0], row[1], shown[row[2]], *row[3:]) for row in rows]
    idents = [
        {"message_id": m, "kind": k, "value": v, "start": s, "end": e}
        for m, k, v, s, e in con.execute(
            "SELECT message_id, kind, value, span_start, span_end FROM identifiers"
            " WHERE conversation_id = ? ORDER BY message_id, span_start",
            [conv_id],
        ).fetchall()
    ]
    return Timeline(*head, runs, entries, idents)
