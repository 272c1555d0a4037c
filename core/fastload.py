"""Fast path for `lexkeep ingest` of one big lexkeep JSONL file read for the first time.

DuckDB reads the file once (`read_json` with an explicit schema, which parses each line where
it lies in the read buffer), checks in SQL what the lexkeep reader (core/read_lexkeep.py) would
check, and writes the store tables with exactly the rows the general ingest writes: positions
after each conversation's max_position in file order, runs derived per user message, arguments
raw/parsed/kind, conversations upserted the same way, one ingest_runs row with the file's
sha256, bytes and lines. `read_json` skips empty lines, so its rows are numbered among the
non-empty lines: the line check beside it (`_Scan`, which reads every line anyway) lists the
empty ones, and the staged view turns row numbers into the file's lines (`_number_lines`).

Anything this path does not reproduce exactly makes it give up *before* writing anything, and
the caller runs the general ingest, which reports a bad line's exact file:line:col: a line DuckDB
cannot parse or orjson refuses (NaN, trailing commas...), a key the reader reads repeated at the
top of a line (DuckDB's JSON reader refuses it; orjson would keep the last), blank-but-not-empty
lines, carriage returns, ids given as numbers, run records or messages with a run_id, duplicate
ids in the file, a tool result whose text is not a string. Arguments given as a JSON value are
written as the reader writes them: from the line itself (read again from the file, `_LineTexts`)
when they hold a number orjson reads as a float, since DuckDB's text of the value has such
numbers changed.
(audit/fastload.py is the audit's own variant of this loader: it stages lines through
`stage_sql` or its own `read_json` statement but keeps only what the audit reads, with its own
checks and inserts.)
"""

from __future__ import annotations

import hashlib
import json
import os
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import duckdb
import orjson

from lexkeep.core.errors import ReusedIdError
from lexkeep.core.formats import other_claims
from lexkeep.core.inspect import conflict_detail
from lexkeep.core.jsonnumbers import (
    compact_text,
    exact_text,
    holds_float,
    parsed_json,
    same_json,
)
from lexkeep.core.model import (
    ArgumentsKind,
    BoundaryKind,
    Format,
    MessageKind,
    MessageStatus,
    Role,
    RunStatus,
)
from lexkeep.core.read_lexkeep import TYPES as LEXKEEP_TYPES
from lexkeep.core.readers import BOM
from lexkeep.core.store import Store, close_position_holes

# Lines longer than this make DuckDB fail, and the general ingest takes over.
MAX_LINE_BYTES = 16 << 20
_CHUNK = 1 << 20
# How often, in bytes read, the staging tells a progress bar (stage's on_progress).
PROGRESS_BYTES = 4 << 20

# Every key of every record type the lexkeep reader looks at (core/read_lexkeep.py).
READER_FIELDS = (
    "id",
    "conversation_id",
    "title",
    "parent_id",
    "run_id",
    "status",
    "role",
    "kind",
    "time",
    "message_id",
    "name",
    "arguments",
    "arguments_kind",
    "call_id",
    "summary",
    "trigger",
    "kept_verbatim",
    "text",
)
_FIELDS = (*READER_FIELDS, "is_error")
# `type` as text, as the reader compares it; every other field as JSON so its JSON type can be
# checked the way the reader checks it. JSON null and a missing key both become SQL NULL.
# `text` (most of a dump's bytes) is read as VARCHAR, unescaped once; its JSON type is checked
# by the orjson pass (`_Scan`) instead.
_SCHEMA = json.dumps(
    {"type": "VARCHAR", **{f: "VARCHAR" if f == "text" else "JSON" for f in _FIELDS}}
)


def sql_values(enum: Any) -> str:
    """A DuckDB list literal of an enum's values."""
    return "[" + ", ".join(f"'{member.value}'" for member in enum) + "]"


# Python's str.strip() whitespace, as an RE2 class: a run is answered by an assistant text
# with something left after strip(). Listed rather than computed (a scan of every code point
# cost ~85 ms of every command's start); tests/test_ingest_fast.py checks it against isspace().
STRIP_WHITESPACE = (
    0x09, 0x0A, 0x0B, 0x0C, 0x0D, 0x1C, 0x1D, 0x1E, 0x1F, 0x20, 0x85, 0xA0, 0x1680,
    *range(0x2000, 0x200B), 0x2028, 0x2029, 0x202F, 0x205F, 0x3000,
)  # fmt: skip
_SPACE = "".join(f"\\x{{{c:x}}}" for c in STRIP_WHITESPACE)
_NOT_BLANK = f"[^{_SPACE}]"

# What the lexkeep reader requires per record type (core/read_lexkeep.py), in the macros
# below: a required field is a non-empty string, an optional one a string or null, an enum one
# of its values. Numbers, which the reader accepts as their text, send the file to the general
# path. Each fast path adds what it needs (ok_sql).
READER_CHECKS = {
    "message": (
        "ok_req(id) AND ok_req(conversation_id) AND role IS NOT NULL"
        f" AND ok_enum(role, {sql_values(Role)}) AND ok_enum(kind, {sql_values(MessageKind)})"
        f" AND ok_enum(status, {sql_values(MessageStatus)}) AND ok_opt(time)"
    ),
    "tool_call": (
        "ok_req(id) AND ok_req(conversation_id) AND ok_req(name) AND ok_opt(message_id)"
        f" AND ok_opt(time) AND ok_enum(arguments_kind, {sql_values(ArgumentsKind)})"
    ),
    "tool_result": "ok_req(call_id) AND ok_req(conversation_id)",
    "compaction": (
        f"ok_req(id) AND ok_req(conversation_id) AND ok_enum(kind, {sql_values(BoundaryKind)})"
        " AND ok_opt(summary) AND ok_opt(trigger) AND ok_opt(time)"
        " AND (kept_verbatim IS NULL OR (json_type(kept_verbatim) = 'ARRAY' AND"
        " len(list_filter(json_extract(kept_verbatim, '$[*]'),"
        " lambda x: json_type(x) <> 'VARCHAR')) = 0))"
    ),
    "run": (
        "ok_req(id) AND ok_req(conversation_id) AND status IS NOT NULL"
        f" AND ok_enum(status, {sql_values(RunStatus)})"
    ),
    "conversation": "ok_req(id) AND ok_opt(parent_id) AND ok_opt(title)",
}


def ok_sql(checks: dict[str, str]) -> str:
    """A staged line's `ok` column: its record type's check holds (unknown types are fine)."""
    return (
        "coalesce(type IS NOT NULL AND CASE type "
        + " ".join(f"WHEN '{t}' THEN ({check})" for t, check in checks.items())
        + " ELSE true END, false)"
    )


def duplicates_sql(table: str) -> str:
    """How many staged records of `table` repeat an earlier one's key (the general ingest keeps
    the first: ON CONFLICT DO NOTHING)."""
    return f"""
SELECT
  (SELECT count(*) - count(DISTINCT x_id) FROM {table} WHERE type = 'message')
+ (SELECT count(*) - count(DISTINCT (x_conv, x_id)) FROM {table} WHERE type = 'tool_call')
+ (SELECT count(*) - count(DISTINCT (x_conv, x_call)) FROM {table} WHERE type = 'tool_result')
+ (SELECT count(*) - count(DISTINCT x_id) FROM {table} WHERE type = 'compaction')
"""


# The ingest's fast path writes runs of its own (a file with run records, or messages naming a
# run, takes the general path), stores is_error as the reader does (a boolean; any other JSON
# type takes the general path), and checks a message's text type in its orjson pass (_Scan).
_CHECKS = {
    **READER_CHECKS,
    "message": READER_CHECKS["message"] + " AND run_id IS NULL",
    "tool_result": READER_CHECKS["tool_result"]
    + " AND (is_error IS NULL OR json_type(is_error) = 'BOOLEAN')",
    "run": "false",
}

# A JSON field from json_transform is its value written back minified (no whitespace, escapes
# normalised): a string, and only a string, starts with '"', and the empty string is '""'.
# Testing that text costs a fraction of json_type(x), which parses it again (a few calls per
# line: about a fifth of the staging's time).
SQL_MACROS = (
    "CREATE OR REPLACE TEMP MACRO ok_req(x) AS"
    " coalesce(starts_with(x, '\"') AND x <> '\"\"', false)",
    "CREATE OR REPLACE TEMP MACRO ok_opt(x) AS x IS NULL OR starts_with(x, '\"')",
    "CREATE OR REPLACE TEMP MACRO ok_enum(x, allowed) AS"
    " x IS NULL OR (starts_with(x, '\"') AND list_contains(allowed, x ->> '$'))",
)

DEFAULT_KIND_SQL = (
    "CASE role ->> '$' WHEN 'user' THEN 'user_text' WHEN 'assistant' THEN 'assistant_text'"
    " WHEN 'system' THEN 'system' ELSE 'tool_result' END"
)
_OK = ok_sql(_CHECKS)
# The lexkeep reader's record types, as an SQL list: any other type is skipped (unknown_type).
TYPES_SQL = "(" + ", ".join(f"'{t}'" for t in sorted(LEXKEEP_TYPES)) + ")"


def stage_sql(
    table: str, columns: str, schema: str, inner: str = "", line_bytes: int = MAX_LINE_BYTES
) -> tuple[str, str]:
    """The two statements that stage a JSONL file's lines as `table`, one row per non-empty line.

    The first reads the file once (`read_csv` of whole lines, `json_transform(l, schema)`; its
    fields, plus `inner` terms over `l` and `s`, are visible to `columns`) into `<table>_rows`:
    every physical line, empty ones included, in file order. DuckDB guarantees that order for
    a plain SELECT from one source ("order preservation" in its docs) while still running on
    every thread, so a line's number is its `rowid` + 1. The second is the view `table` that
    adds that `line` and drops the empty lines (NULL). Numbering with `row_number() OVER ()`
    instead runs the whole read on one thread (a streaming window): about twice as slow.
    Lines longer than `line_bytes` fail the read; DuckDB reads buffers of 4 x `line_bytes`.

    The order holds only while the plan is scan, projections and filters: an expression the
    optimizer turns into a join (an IN list of constants becomes a MARK join) lets the
    threads' pieces land in any order. `run_stage` runs both statements only after
    `keeps_file_order` has read the plan.
    """
    create = f"""
CREATE OR REPLACE TEMP TABLE {table}_rows AS
SELECT l IS NULL AS blank, {columns}
FROM (
    SELECT l, s.*{inner}
    FROM (
        SELECT l, json_transform(l, '{schema}') AS s
        FROM read_csv(?, columns = {{'l': 'VARCHAR'}}, delim = '\x01', quote = '',
                      escape = '', header = false, auto_detect = false, skip = 0,
                      max_line_size = {line_bytes}, buffer_size = {4 * line_bytes})
    )
)
"""
    view = (
        f"CREATE OR REPLACE TEMP VIEW {table} AS"
        f" SELECT rowid + 1 AS line, * EXCLUDE (blank) FROM {table}_rows WHERE NOT blank"
    )
    return create, view


# Operators of a staging plan that keep the file's order (docs: "order preservation"): the
# scan, projections, filters, and the order-keeping sink. Any other (a join, an aggregate, a
# window) may reorder rows, and so renumber lines.
_ORDER_KEEPING = frozenset(
    {"READ_CSV", "READ_JSON", "PROJECTION", "FILTER", "BATCH_CREATE_TABLE_AS"}
)


def keeps_file_order(con: duckdb.DuckDBPyConnection, create: str, path: str) -> bool:
    """True when DuckDB's plan for a stage_sql `create` statement keeps the file's line order.

    A plan that might not (an operator outside _ORDER_KEEPING; the plain CREATE_TABLE_AS sink,
    which appends the threads' rows as they come, is fine only on one thread) means its rowids
    would not be line numbers: the caller takes its general path instead.
    """
    rows = con.execute("EXPLAIN (FORMAT json) " + create, [path]).fetchall()
    names: list[str] = []

    def walk(node: dict[str, Any]) -> None:
        names.append(node.get("name", ""))
        for child in node.get("children", ()):
            walk(child)

    for node in json.loads(rows[0][1]):
        walk(node)
    allowed = set(_ORDER_KEEPING)
    if con.execute("SELECT current_setting('threads')").fetchone()[0] == 1:
        allowed.add("CREATE_TABLE_AS")
    return bool(names) and set(names) <= allowed


def run_stage(con: duckdb.DuckDBPyConnection, statements: tuple[str, str], path: str) -> bool:
    """Stage `path` with stage_sql's two `statements` (and the SQL_MACROS they use).

    False, having staged nothing, when DuckDB's plan would not keep the file's line order
    (keeps_file_order): the caller takes its general path. DuckDB's errors propagate.
    """
    for macro in SQL_MACROS:
        con.execute(macro)
    if not keeps_file_order(con, statements[0], path):
        return False
    con.execute(statements[0], [path])
    con.execute(statements[1])
    return True


@contextmanager
def statement_progress(
    con: duckdb.DuckDBPyConnection,
    size: int,
    on_progress: Callable[[int], None] | None,
    *,
    every: float = 0.25,
) -> Iterator[Callable[[], int]]:
    """Tell `on_progress` how much of a `size`-byte file the block's DuckDB statements on `con`
    have read, from DuckDB's own query progress polled on a thread every `every` seconds.

    DuckDB holds the thread that runs a statement until it ends; its progress is the only
    measure of a load there is meanwhile. What is told only grows (a later statement starts
    again at 0%) and never passes `size`. Yields a function giving the bytes told so far.
    """
    told = 0
    if on_progress is None:
        yield lambda: told
        return
    con.execute("SET enable_progress_bar = true")
    con.execute("SET enable_progress_bar_print = false")
    stop = threading.Event()
    failed: list[BaseException] = []  # what on_progress raised, raised again after the block

    def poll() -> None:
        nonlocal told
        while not stop.wait(every):
            try:
                percent = con.query_progress()
            except duckdb.Error:
                continue
            reached = min(size, int(size * percent / 100)) if percent > 0 else 0
            if reached > told:
                try:
                    on_progress(reached - told)
                except BaseException as exc:  # noqa: BLE001 - handed to the caller's thread
                    failed.append(exc)
                    return
                told = reached

    poller = threading.Thread(target=poll, daemon=True, name="lexkeep-load-progress")
    poller.start()
    try:
        yield lambda: told
    finally:
        stop.set()
        poller.join()
        con.execute("SET enable_progress_bar = false")
    if failed:
        raise failed[0]


def drop_stage(con: duckdb.DuckDBPyConnection, table: str) -> None:
    """Drop what stage_sql(table, ...) created."""
    con.execute(f"DROP VIEW IF EXISTS {table}")
    con.execute(f"DROP TABLE IF EXISTS {table}_rows")


# Where a number orjson reads as a float may be written: a fraction or an exponent (a digit,
# then `.`, `e` or `E`) or an integer of 19 digits or more (beyond a signed 64-bit one).
# Strings may match too: that only keeps a line for nothing.
FLOAT_PATTERN = "[0-9][.eE]|[0-9]{19}"
# A tool call's whole line, for a staging of whole lines (`stage_sql`), kept when its arguments
# are a JSON value that may hold such a number. The reader writes such a value with its numbers
# as the line has them (JsonLine.json_text), and DuckDB's text of the value has them changed
# (`1.50` becomes `1.5`), so `object_arguments` takes them from the line. A nested CASE, so
# the pattern runs on those calls' lines only.
ARGUMENTS_LINE_SQL = f"""CASE WHEN type = 'tool_call' AND NOT starts_with(arguments, '"')
            THEN CASE WHEN regexp_matches(l, '{FLOAT_PATTERN}') THEN l END END"""


def object_arguments(as_json: str, line: str | None) -> tuple[str, Any] | None:
    """(raw text, value) of a tool call's arguments recorded as a JSON value, as the lexkeep
    reader keeps them; None when that cannot be reproduced here (the general path must run).

    `as_json` is DuckDB's text of the value, `line` the call's line (kept by
    ARGUMENTS_LINE_SQL, or read again from the file: `_LineTexts`) or None.
    """
    try:
        if line is not None:
            record = orjson.loads(line)  # the reader's own reading of the line
            if type(record) is not dict:
                return None
            value = record.get("arguments")
            return exact_text(value, record, line), value
        value = orjson.loads(as_json)
    except orjson.JSONDecodeError:  # NaN, 1e999...: the general path reports the line
        return None
    if holds_float(value):
        return None  # a number the pattern missed: only the line has its text
    return compact_text(value), value


# Whether a tool call's row is written by SQL (write, _CALLS_SQL) rather than built in Python
# (_tool_call_rows): its arguments were given as text, and either are free text (no parsed
# value) or are JSON that DuckDB reads as orjson (the reader's parser) does, so that DuckDB's
# own `json(text)` is the parsed value the general ingest stores (orjson's text of its
# decoding, read by DuckDB: bulk_insert). DuckDB also reads NaN, Infinity, inf, trailing
# commas and numbers beyond a double, which orjson refuses, and keeps every copy of a repeated
# key, where orjson keeps the last: text that may hold any of those goes through Python. A
# repeated key is ruled out by DuckDB's keys of a JSON object that holds no other object, or
# of JSON that holds no object at all; any other `{` sends the call to Python. The patterns
# may match inside strings too: that only sends a call to Python for nothing.
# (tests/test_ingest_fast.py compares both ways on generated and edge-case arguments.)
_NOT_ORJSON_PATTERN = (
    r"(?i)(^|[^a-z0-9_])-?(nan|inf|infinity)($|[^a-z0-9_])"  # non-finite numbers
    r"|,\s*[\]}]"  # a trailing comma
    r"|[0-9]{19}|[0-9][eE][-+]?[0-9]{3}"  # numbers orjson may read otherwise or refuse
)
_ARGUMENTS_BY_SQL = f"""x_args IS NOT NULL AND CASE
    WHEN coalesce(x_args_kind, 'json_string') = 'freeform' THEN true
    WHEN NOT json_valid(x_args) THEN false
    WHEN regexp_matches(x_args, '{_NOT_ORJSON_PATTERN}') THEN false
    ELSE CASE length(x_args) - length(replace(x_args, '{{', ''))
        WHEN 0 THEN true
        WHEN 1 THEN json_type(x_args) = 'OBJECT'
                    AND len(json_keys(x_args)) = len(list_distinct(json_keys(x_args)))
        ELSE false END
    END"""
# The lines of the staged calls _CALLS_SQL writes (the others: _tool_call_rows).
_CALLS_BY_SQL = f"""
CREATE OR REPLACE TEMP TABLE lexkeep_ingest_sql_calls AS
SELECT line FROM lexkeep_ingest_lines WHERE type = 'tool_call' AND {_ARGUMENTS_BY_SQL}
"""

# What each staged line keeps (see stage_sql): only expressions over the line's own fields.
_STAGE_COLUMNS = f"""type,
       {_OK} AS ok,
       conversation_id ->> '$' AS x_conv, id ->> '$' AS x_id, call_id ->> '$' AS x_call,
       name ->> '$' AS x_name, role ->> '$' AS x_role,
       CASE type WHEN 'message' THEN coalesce(kind ->> '$', {DEFAULT_KIND_SQL})
                 WHEN 'compaction' THEN coalesce(kind ->> '$', 'local') END AS x_kind,
       coalesce(status ->> '$', 'completed') AS x_status,
       coalesce(text, '') AS x_text, time ->> '$' AS x_time,
       message_id ->> '$' AS x_message_id,
       CASE WHEN arguments IS NULL THEN ''
            WHEN starts_with(arguments, '"') THEN arguments ->> '$' END AS x_args,
       CASE WHEN NOT starts_with(arguments, '"') THEN arguments::VARCHAR END AS x_args_json,
       arguments_kind ->> '$' AS x_args_kind,
       coalesce(is_error::BOOLEAN, false) AS x_is_error,
       summary ->> '$' AS x_summary, trigger ->> '$' AS x_trigger,
       CASE WHEN json_type(kept_verbatim) = 'ARRAY'
            THEN json_transform(kept_verbatim, '["VARCHAR"]') END AS x_kept,
       parent_id ->> '$' AS x_parent, title ->> '$' AS x_title"""
# One pass of DuckDB's JSON reader over the file into `lexkeep_ingest_lines_rows`, a row per
# non-empty line in file order (see stage_sql on why rowids follow the file's order, and
# keeps_file_order), then the view `lexkeep_ingest_lines` adds each row's physical `line`
# (_number_lines). A key of the schema repeated at the top of a line fails the read.
_JSON_READ = (
    f"read_json(?, format = 'newline_delimited', columns = {_SCHEMA},"
    f" maximum_object_size = {MAX_LINE_BYTES})"
)
_STAGE_SQL = f"""
CREATE OR REPLACE TEMP TABLE lexkeep_ingest_lines_rows AS
SELECT {_STAGE_COLUMNS}
FROM {_JSON_READ}
"""

_DUPLICATES_SQL = duplicates_sql("lexkeep_ingest_lines")

# Positions continue after what the store already holds for a conversation; messages get the
# run of their conversation's latest user message (the user message opens it).
_TIMELINE_SQL = """
CREATE OR REPLACE TEMP TABLE lexkeep_ingest_timeline AS
SELECT l.line, l.type, l.x_conv AS conv,
       coalesce(c.max_position, -1)
         + row_number() OVER (PARTITION BY l.x_conv ORDER BY l.line) AS position,
       CASE WHEN l.type = 'message' THEN last_value(
           CASE WHEN l.type = 'message' AND l.x_kind = 'user_text' THEN l.x_id || '/run' END
           IGNORE NULLS) OVER (PARTITION BY l.x_conv ORDER BY l.line
                               ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW) END AS run_id
FROM lexkeep_ingest_lines l LEFT JOIN conversations c ON c.id = l.x_conv
WHERE l.type IN ('message', 'tool_call', 'tool_result', 'compaction')
"""

# Every staged tool call: those of _CALLS_BY_SQL written here (the parsed value is DuckDB's JSON
# of the text: see _ARGUMENTS_BY_SQL), the others as _tool_call_rows built them.
_CALLS_SQL = """
INSERT INTO tool_calls (conversation_id, call_id, message_id, position, name, arguments_raw,
                        arguments, arguments_kind, time, source_file, source_line)
SELECT * FROM (
    SELECT t.conv, l.x_id, l.x_message_id, t.position, l.x_name, l.x_args,
           -- JSON null: no parsed value (SQL NULL), as orjson's None is stored
           CASE WHEN coalesce(l.x_args_kind, 'json_string') <> 'freeform'
                THEN nullif(json(l.x_args), 'null'::JSON) END,
           coalesce(l.x_args_kind, 'json_string'), l.x_time, $file, l.line AS source_line
    FROM lexkeep_ingest_lines l JOIN lexkeep_ingest_timeline t USING (line)
    JOIN lexkeep_ingest_sql_calls USING (line)
    UNION ALL
    SELECT conversation_id, call_id, message_id, position, name, arguments_raw, arguments,
           arguments_kind, time, source_file, source_line
    FROM lexkeep_ingest_calls
) ORDER BY source_line
"""

_INSERTS = (
    """
    INSERT INTO messages (id, conversation_id, run_id, position, role, kind, status, text,
                          time, source_file, source_line)
    SELECT l.x_id, t.conv, t.run_id, t.position, l.x_role, l.x_kind, l.x_status, l.x_text,
           l.x_time, $file, l.line
    FROM lexkeep_ingest_lines l JOIN lexkeep_ingest_timeline t USING (line)
    WHERE l.type = 'message'
    ON CONFLICT DO NOTHING
    """,
    """
    INSERT INTO tool_results (conversation_id, call_id, position, text, is_error, source_file,
                              source_line)
    SELECT t.conv, l.x_call, t.position, l.x_text, l.x_is_error, $file, l.line
    FROM lexkeep_ingest_lines l JOIN lexkeep_ingest_timeline t USING (line)
    WHERE l.type = 'tool_result'
    ON CONFLICT DO NOTHING
    """,
    """
    INSERT INTO boundaries (id, conversation_id, position, kind, trigger, summary_text,
                            kept_verbatim, time, source_file, source_line)
    SELECT l.x_id, t.conv, t.position, l.x_kind, l.x_trigger, l.x_summary,
           coalesce(l.x_kept, []), l.x_time, $file, l.line
    FROM lexkeep_ingest_lines l JOIN lexkeep_ingest_timeline t USING (line)
    WHERE l.type = 'compaction'
    ON CONFLICT DO NOTHING
    """,
    # A derived run: completed when a completed, non-blank assistant text answers it; running
    # when it is the file's last turn; failed otherwise. It sits at its user message.
    f"""
    INSERT INTO runs (id, conversation_id, status, position, source_file, source_line)
    WITH turns AS (
        SELECT t.run_id, arg_min(t.conv, t.line) AS conv, min(t.position) AS position,
               min(t.line) AS line,
               bool_or(l.x_role = 'assistant' AND l.x_kind = 'assistant_text'
                       AND l.x_status = 'completed'
                       AND regexp_matches(l.x_text, '{_NOT_BLANK}')) AS answered
        FROM lexkeep_ingest_timeline t JOIN lexkeep_ingest_lines l USING (line)
        WHERE t.run_id IS NOT NULL
        GROUP BY t.run_id
    )
    SELECT run_id, conv,
           CASE WHEN answered THEN 'completed'
                WHEN line = (SELECT max(line) FROM turns) THEN 'running'
                ELSE 'failed' END,
           position, $file, line
    FROM turns
    ON CONFLICT (id) DO UPDATE SET status = excluded.status
    """,
    # A conversation's source: its (last) conversation record, else its first timeline line;
    # title and parent: the last non-empty ones; times: over messages, calls and boundaries.
    """
    INSERT INTO conversations (id, format, parent_id, title, first_time, last_time,
                               max_position, source_file, source_line)
    WITH recs AS (
        SELECT x_id AS id,
               arg_max(x_parent, line) FILTER (WHERE x_parent <> '') AS parent,
               arg_max(x_title, line) FILTER (WHERE x_title <> '') AS title,
               max(line) AS line
        FROM lexkeep_ingest_lines WHERE type = 'conversation' GROUP BY 1
    ),
    used AS (
        SELECT t.conv AS id, min(t.line) AS line, max(t.position) AS max_position,
               min(l.x_time) FILTER (WHERE t.type <> 'tool_result') AS first_time,
               max(l.x_time) FILTER (WHERE t.type <> 'tool_result') AS last_time
        FROM lexkeep_ingest_timeline t JOIN lexkeep_ingest_lines l USING (line)
        GROUP BY 1
    )
    SELECT coalesce(r.id, u.id), 'lexkeep', r.parent, r.title, u.first_time, u.last_time,
           coalesce(u.max_position, c.max_position, -1), $file, coalesce(r.line, u.line)
    FROM recs r FULL OUTER JOIN used u ON r.id = u.id
    LEFT JOIN conversations c ON c.id = coalesce(r.id, u.id)
    ON CONFLICT (id) DO UPDATE SET
      max_position = greatest(conversations.max_position, excluded.max_position),
      title = coalesce(conversations.title, excluded.title),
      parent_id = coalesce(conversations.parent_id, excluded.parent_id),
      first_time = least(conversations.first_time, excluded.first_time),
      last_time = greatest(conversations.last_time, excluded.last_time)
    """,
)

_COUNTS_SQL = f"""
SELECT count(*) FILTER (WHERE type = 'message'),
       count(*) FILTER (WHERE type = 'tool_call'),
       count(*) FILTER (WHERE type = 'compaction'),
       count(*) FILTER (WHERE type NOT IN {TYPES_SQL}),
       count(DISTINCT CASE WHEN type = 'conversation' THEN x_id
                           WHEN type IN ('message', 'tool_call', 'tool_result', 'compaction')
                           THEN x_conv END),
       max(line),
       min(line) FILTER (WHERE type NOT IN {TYPES_SQL})
FROM lexkeep_ingest_lines
"""


@dataclass
class FastCounts:
    """What one fast-loaded file added, for its ingest_runs row and FileCounts."""

    sha256: str
    bytes_consumed: int
    lines_consumed: int
    conversations: int
    messages: int
    tool_calls: int
    boundaries: int
    skipped: dict[str, int] = field(default_factory=dict)
    unknown_type_line: int | None = None  # the first line of a type the reader does not know
    messages_added: int | None = None  # written: fewer when the store held some already
    tool_calls_added: int | None = None
    boundaries_added: int | None = None
    # Records left out whose conversation holds their id with other content: how many, and
    # the first as (record, line, stored file, stored line) (see core.ingest._check_ids and
    # _check_calls).
    conflicts: tuple[int, tuple[str, int, str, int] | None] = (0, None)
    # Each of them as (record, line), in file order, for ingest_errors (record: its
    # core.inspect.conflict_detail).
    left_out: list[tuple[str, int]] = field(default_factory=list)


class _GiveUp(Exception):
    """The file needs the general ingest (a check failed or DuckDB refused it)."""


def _text_ok(value: dict[str, Any]) -> bool:
    """A record's `text` as the reader takes it as is: a message's a string or null (read as
    ""), a tool result's a string or absent (other values become their JSON text there)."""
    kind = value.get("type")
    if kind == "message":
        return type(value.get("text", "")) in (str, type(None))
    if kind == "tool_result":
        return type(value.get("text", "")) is str
    return True


# The keys the lexkeep reader reads, as they appear in a line's text.
_KEY_TOKENS = {key: json.dumps(key).encode() for key in ("type", *_FIELDS)}


def one_of_each_key(raw: bytes, value: dict[str, Any]) -> bool:
    """False when line `raw` (decoded by orjson: `value`) repeats a top-level key that the
    reader reads (a repeated key that both readers ignore makes no difference).

    DuckDB's JSON functions read the first of a repeated key, orjson (so the reader) the last.
    A key is a string closed right before its colon (`":`, which inside a string can only
    follow a backslash): a line with as many of those as distinct top-level keys repeats
    none (most lines; one or two C-speed scans). Otherwise each key the reader reads whose quoted
    name occurs once in the text occurs once, and any other (twice in the text, maybe nested,
    or written with escapes) is decided by a full decode. Not caught: a line that mixes key
    styles (one key written plainly and again with escapes or with a space before its colon),
    which no JSON writer produces, or that repeats a key beside a key ending in a backslash.
    """
    closed, keys = raw.count(b'":'), len(value)
    if closed == keys or (closed > keys and closed - raw.count(b'\\":') == keys):
        return True
    for key in value:
        token = _KEY_TOKENS.get(key)
        if token is None:
            continue
        first = raw.find(token)
        if first != -1 and first == raw.rfind(token):
            continue
        pairs = json.loads(raw, object_pairs_hook=list)  # the top level's pairs, in order
        read = [k for k, _ in pairs if k in _KEY_TOKENS]
        return len(read) == len(set(read))
    return True


class _Scan(threading.Thread):
    """sha256, size and lines of a file, its empty lines, and whether orjson reads every line,
    beside DuckDB.

    DuckDB's JSON reader accepts what orjson (so the general ingest) rejects: NaN, Infinity,
    1e999, trailing commas. Each line is therefore also decoded here, in a thread that runs
    while DuckDB works (DuckDB releases the GIL), and any line orjson refuses, that is not an
    object, holds a carriage return or a `text` the reader would convert sends the file to the
    general ingest, as does a line another format claims (a Claude Code or Codex line in a
    concatenation): the general ingest refuses it. A key repeated at the top of a line needs
    no test here: DuckDB's reader refuses the keys the staging reads (`_SCHEMA`, every key the
    reader reads), and a repeated key that neither reads makes no difference.

    The file is read in blocks of _CHUNK bytes: each is hashed and searched for a carriage
    return at once, then split into lines. `empty` lists the empty lines (`read_json` skips
    them; `_number_lines` counts them back). `on_progress(n)` hears the bytes read, about
    every PROGRESS_BYTES, from this thread: the only measure of the load's progress there is
    while DuckDB's statement runs.
    """

    def __init__(self, path: str, on_progress: Callable[[int], None] | None = None) -> None:
        super().__init__(daemon=True)
        self.path = path
        self.on_progress = on_progress
        self.digest = hashlib.sha256()
        self.size = self.lines = 0
        self.empty: list[int] = []
        self.ok = True
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            self.ok = self._read()
        except orjson.JSONDecodeError:
            self.ok = False
        except BaseException as exc:  # noqa: BLE001 - re-raised by the caller's thread
            self.error = exc

    def _read(self) -> bool:
        loads = orjson.loads
        update = self.digest.update
        empty = self.empty
        known = LEXKEEP_TYPES
        told = 0
        tell = self.on_progress
        step = PROGRESS_BYTES if tell is not None else 1 << 62  # never reached without one
        next_at = step
        chunk = min(_CHUNK, step)  # a bar hears about every `step` bytes, not a block
        number = 0
        head = b""  # the start of a line the previous block did not end
        with open(self.path, "rb", buffering=0) as stream:
            while True:
                block = stream.read(chunk)
                if not block:
                    break
                update(block)
                self.size += len(block)
                if self.size >= next_at:
                    tell(self.size - told)  # type: ignore[misc]
                    told, next_at = self.size, self.size + step
                if b"\r" in block:
                    return False
                lines = block.split(b"\n")
                if head:
                    lines[0] = head + lines[0]
                head = lines.pop()  # after the block's last newline: the next line's start
                for raw in lines:
                    number += 1
                    if not raw:
                        empty.append(number)
                        continue
                    value = loads(raw)
                    if type(value) is not dict:
                        return False
                    kind = value.get("type")
                    if kind == "tool_result":
                        if type(value.get("text", "")) is not str:
                            return False
                    elif kind == "message":
                        if type(value.get("text", "")) not in _MESSAGE_TEXT:
                            return False
                    elif kind not in known and _foreign(value):
                        return False
                self.lines = number
            if head:  # a last line without a newline
                number += 1
                self.lines = number
                value = loads(head)
                if type(value) is not dict or not _text_ok(value):
                    return False
                if value.get("type") not in known and _foreign(value):
                    return False
        if tell is not None and self.size > told:
            tell(self.size - told)
        return True


# The types of a message's text the reader takes as is (_text_ok).
_MESSAGE_TEXT = (str, type(None))


def _foreign(value: dict[str, Any]) -> bool:
    """True when another format claims `value` as its line (see formats.other_claims)."""
    return any(claims(value) for _, claims in other_claims(Format.LEXKEEP))


@dataclass
class Staged:
    """A file staged in temporary tables and checked; its counts, ready to be written."""

    path: str
    counts: FastCounts


def stage(
    store: Store, path: str, on_progress: Callable[[int], None] | None = None
) -> Staged | None:
    """Stage and check the plain lexkeep JSONL file `path`; None when the general path must run.

    Call it outside any transaction: a line DuckDB refuses raises an error that would abort
    the caller's transaction. Only temporary tables are written; `drop_staging` frees them.
    `on_progress(n)` hears the bytes read while DuckDB stages them, from another thread (see
    _Scan); it may hear fewer than the file's size when the file goes to the general path.
    """
    con = store.con
    size = os.stat(path).st_size
    scan = _Scan(path, on_progress)
    scan.start()
    try:
        _read(con, path)
    except (duckdb.Error, _GiveUp):  # not JSON, invalid UTF-8, a line too long, a key twice...
        scan.join()
        drop_staging(con)
        return None
    scan.join()
    if scan.error is not None:
        drop_staging(con)
        raise scan.error
    # A file that grew while it was read (a live session) is left to the general ingest, so
    # ingest_runs never claims bytes DuckDB did not load.
    grew = scan.size != size or os.stat(path).st_size != size
    counts = None
    if not grew and scan.ok:
        try:
            counts = _check(con, scan.empty)
        except _GiveUp:
            counts = None
    if counts is None or counts[5] is None or counts[5] > scan.lines:
        drop_staging(con)
        return None
    return Staged(
        path,
        FastCounts(
            sha256=scan.digest.hexdigest(),
            bytes_consumed=scan.size,
            lines_consumed=scan.lines,
            conversations=counts[4],
            messages=counts[0],
            tool_calls=counts[1],
            boundaries=counts[2],
            skipped={"unknown_type": counts[3]} if counts[3] else {},
            unknown_type_line=counts[6],
        ),
    )


def write(store: Store, staged: Staged, name: str | None = None) -> FastCounts | None:
    """Write a staged file into the store tables (inside the caller's transaction).

    `name` is the file's path as the rows record it (Store.stored_path; default: as staged).
    Returns None, having written no store table, when the general path must run after all.
    """
    name = staged.path if name is None else name
    con = store.con
    before = con.execute(_ADDED_SQL).fetchone()
    con.execute(_TIMELINE_SQL)  # positions continue after what the store holds now
    lines = _LineTexts(con, staged.path)
    # Calls whose row SQL cannot write as the general ingest does (_CALLS_BY_SQL) are built in
    # Python, as the general ingest's own writer stores them, into a temporary table. First:
    # giving up on one leaves every store table unwritten.
    con.execute(_CALLS_BY_SQL)
    con.execute("CREATE OR REPLACE TEMP TABLE lexkeep_ingest_calls AS FROM tool_calls LIMIT 0")
    try:
        calls = _tool_call_rows(con, name, lines)
        store.bulk_insert("lexkeep_ingest_calls", None, calls, on_conflict="")
    except _GiveUp:
        return None
    # Then every call in one insert, in line order, as one insert from Python wrote them.
    conflict = " ON CONFLICT DO NOTHING" if _holds_rows(con, "tool_calls") else ""
    con.execute(_CALLS_SQL + conflict, {"file": name})
    for sql in _INSERTS:
        table = sql.split("INSERT INTO ", 1)[1].split(None, 1)[0]
        if _NOTHING in sql and not _holds_rows(con, table):
            # Into an empty table the staged rows cannot conflict (_DUPLICATES_SQL refused
            # duplicates within the file), and the check costs a key lookup per row.
            sql = sql.replace(_NOTHING, "")
        con.execute(sql, {"file": name})
    after = con.execute(_ADDED_SQL).fetchone()
    counts = staged.counts
    if after[0] - before[0] < counts.messages or after[2] - before[2] < counts.boundaries:
        # Some were left out as already stored: the same records read again, unless another
        # conversation holds their id (then the caller's transaction rolls back).
        reused = con.execute(_REUSED_SQL).fetchone()
        if reused is not None:
            what, key, line, conv, file, file_line = reused
            held = (conv, store.shown_paths()[file], file_line)
            raise ReusedIdError(what, key, held, path=staged.path, line=line)
    conflicts: tuple[int, tuple[str, int, str, int] | None] = (0, None)
    left_out: list[tuple[str, int]] = []
    if sum(after) - sum(before) < con.execute(_STAGED_RECORDS_SQL).fetchone()[0]:
        # Records the store held already were left out, and had positions all the same.
        bases = dict(con.execute(_BASES_SQL).fetchall())
        close_position_holes(con, bases)
        # (every call's line was read already, for its row: this gives up on none)
        rows = _conflicts(con, name, lines)
        if rows:
            record, line, held_file, held_line = rows[0]
            conflicts = (len(rows), (record, line, held_file, held_line))
            left_out = [(record, line) for record, line, _, _ in rows]
    return replace(
        staged.counts,
        messages_added=after[0] - before[0],
        tool_calls_added=after[1] - before[1],
        boundaries_added=after[2] - before[2],
        conflicts=conflicts,
        left_out=left_out,
    )


_NOTHING = "ON CONFLICT DO NOTHING"
# The file is written alone in its transaction: what the tables grew by is what it added.
_ADDED_SQL = (
    "SELECT (SELECT count(*) FROM messages), (SELECT count(*) FROM tool_calls),"
    " (SELECT count(*) FROM boundaries), (SELECT count(*) FROM tool_results)"
)
# What the timeline gave positions to, and each conversation's max_position before the file.
_STAGED_RECORDS_SQL = "SELECT count(*) FROM lexkeep_ingest_timeline"
_BASES_SQL = "SELECT conv, min(position) - 1 FROM lexkeep_ingest_timeline GROUP BY conv"
# The first staged message or compaction whose id the store holds for another conversation.
_REUSED_SQL = """
SELECT * FROM (
    SELECT 'message', l.x_id, l.line, m.conversation_id, m.source_file, m.source_line
    FROM lexkeep_ingest_lines l JOIN messages m ON m.id = l.x_id
    WHERE l.type = 'message' AND m.conversation_id <> l.x_conv
    UNION ALL
    SELECT 'compaction', l.x_id, l.line, b.conversation_id, b.source_file, b.source_line
    FROM lexkeep_ingest_lines l JOIN boundaries b ON b.id = l.x_id
    WHERE l.type = 'compaction' AND b.conversation_id <> l.x_conv
) ORDER BY 3 LIMIT 1
"""


# Staged messages, compactions and tool results left out because their conversation holds
# their id with other content (core.ingest._check_ids and _check_calls on the general path),
# in file order: (kind, id, conversation of a tool result, line, stored file, stored line, a
# message's kind). A stored row from this very line is the record itself.
_CONFLICTS_SQL = """
SELECT * FROM (
    SELECT 'message', l.x_id, NULL, l.line, m.source_file, m.source_line, l.x_kind
    FROM lexkeep_ingest_lines l JOIN messages m ON m.id = l.x_id
    WHERE l.type = 'message' AND m.conversation_id = l.x_conv AND m.text <> l.x_text
      AND NOT (m.source_file = $file AND m.source_line = l.line)
    UNION ALL
    SELECT 'compaction', l.x_id, NULL, l.line, b.source_file, b.source_line, NULL
    FROM lexkeep_ingest_lines l JOIN boundaries b ON b.id = l.x_id
    WHERE l.type = 'compaction' AND b.conversation_id = l.x_conv
      AND b.summary_text IS DISTINCT FROM l.x_summary
      AND NOT (b.source_file = $file AND b.source_line = l.line)
    UNION ALL
    SELECT 'tool_result', l.x_call, l.x_conv, l.line, r.source_file, r.source_line, NULL
    FROM lexkeep_ingest_lines l
    JOIN tool_results r ON r.conversation_id = l.x_conv AND r.call_id = l.x_call
    WHERE l.type = 'tool_result' AND r.text <> l.x_text
      AND NOT (r.source_file = $file AND r.source_line = l.line)
) ORDER BY 4
"""
# Staged tool calls left out as already stored, but for those with the stored name and argument
# text, with what decides whether they are the stored call read again: the stored name and raw
# arguments, and the staged ones (the raw text of arguments given as a JSON value is made in
# Python, as _tool_call_rows makes it).
_CALLS_LEFT_OUT_SQL = """
SELECT l.x_id, l.x_conv, l.line, c.source_file, c.source_line, c.name, c.arguments_raw,
       l.x_name, l.x_args, l.x_args_json, l.x_args_kind
FROM lexkeep_ingest_lines l
JOIN tool_calls c ON c.conversation_id = l.x_conv AND c.call_id = l.x_id
WHERE l.type = 'tool_call' AND NOT (c.source_file = $file AND c.source_line = l.line)
  -- the same name and argument text: the stored call read again, not compared in Python
  AND NOT coalesce(c.name = l.x_name AND c.arguments_raw = l.x_args, false)
ORDER BY l.line
"""


def _conflicts(
    con: duckdb.DuckDBPyConnection, name: str, lines: _LineTexts
) -> list[tuple[str, int, str, int]]:
    """The staged records left out because their conversation holds their id with other
    content, in file order: (record as conflict_detail writes it, line, stored file, stored
    line). `lines`: the staged file's lines (_arguments)."""
    found = [
        (conflict_detail(what, key, conv, kind), line, held_file, held_line)
        for what, key, conv, line, held_file, held_line, kind in con.execute(
            _CONFLICTS_SQL, {"file": name}
        ).fetchall()
    ]
    for row in con.execute(_CALLS_LEFT_OUT_SQL, {"file": name}).fetchall():
        key, conv, line, held_file, held_line, held_name, held_raw, call_name, *given = row
        raw = _arguments(*given, key, line, lines)[0]
        if call_name != held_name or not same_json(held_raw, raw):
            found.append((conflict_detail("tool_call", key, conv), line, held_file, held_line))
    found.sort(key=lambda conflict: conflict[1])
    return found


def _holds_rows(con: duckdb.DuckDBPyConnection, table: str) -> bool:
    return bool(con.execute(f"SELECT EXISTS (SELECT 1 FROM {table})").fetchone()[0])


def _read(con: duckdb.DuckDBPyConnection, path: str) -> None:
    """Stage the file's non-empty lines in file order (_STAGE_SQL). Writes no store table."""
    con.execute("SET enable_progress_bar = false")
    for macro in SQL_MACROS:
        con.execute(macro)
    if not keeps_file_order(con, _STAGE_SQL, path):
        raise _GiveUp("DuckDB's plan would not keep the file's line order")
    con.execute(_STAGE_SQL, [path])


def _number_lines(con: duckdb.DuckDBPyConnection, empty: list[int]) -> None:
    """The view `lexkeep_ingest_lines`: the staged rows with their physical `line`, given the
    file's empty lines (ascending), which `read_json` skipped.

    The k-th empty line (from 1) follows `empty[k - 1] - k` non-empty lines: every row
    numbered above that is k lines further down (an ASOF join takes each row's last such k).
    """
    if not empty:
        con.execute(
            "CREATE OR REPLACE TEMP VIEW lexkeep_ingest_lines AS"
            " SELECT rowid + 1 AS line, * FROM lexkeep_ingest_lines_rows"
        )
        return
    shift: dict[int, int] = {}  # non-empty lines before an empty one -> empty lines so far
    for k, line in enumerate(empty, start=1):
        shift[line - k] = k
    con.execute(
        "CREATE OR REPLACE TEMP TABLE lexkeep_ingest_gaps AS"
        " SELECT unnest(?::BIGINT[]) AS after, unnest(?::BIGINT[]) AS k",
        [list(shift), list(shift.values())],
    )
    con.execute(
        "CREATE OR REPLACE TEMP VIEW lexkeep_ingest_lines AS"
        " SELECT r.rowid + 1 + coalesce(g.k, 0) AS line, r.*"
        " FROM lexkeep_ingest_lines_rows r"
        " ASOF LEFT JOIN lexkeep_ingest_gaps g ON r.rowid + 1 > g.after"
    )


def _check(con: duckdb.DuckDBPyConnection, empty: list[int]) -> tuple[Any, ...]:
    """Number the staged lines (`empty`: the file's empty lines), check them; the per-file
    counts. Writes no store table."""
    _number_lines(con, empty)
    if con.execute("SELECT count(*) FROM lexkeep_ingest_lines WHERE NOT ok").fetchone()[0]:
        raise _GiveUp("a record the reader rejects")
    if con.execute(_DUPLICATES_SQL).fetchone()[0]:
        raise _GiveUp("duplicate ids")
    return con.execute(_COUNTS_SQL).fetchone()


def _tool_call_rows(
    con: duckdb.DuckDBPyConnection, path: str, lines: _LineTexts
) -> Iterator[tuple[Any, ...]]:
    """tool_calls rows as the general ingest builds them (raw text, parsed value, kind) of the
    calls SQL does not write (_CALLS_BY_SQL), read TOOL_CALL_CHUNK at a time in line order
    (memory holds a chunk, not a dump's calls).
    `path`: the file as the rows name it; `lines`: the staged file's lines (_arguments)."""
    loads = parsed_json  # integers beyond 64 bits exact, as the general ingest stores them
    freeform = ArgumentsKind.FREEFORM.value
    last = -1
    while True:
        # A complete query per chunk: nothing is left open while the caller writes.
        rows = con.execute(
            "SELECT t.conv, l.x_id, l.x_message_id, t.position, l.x_name, l.x_args,"
            " l.x_args_json, l.x_args_kind, l.x_time, l.line"
            " FROM lexkeep_ingest_lines l JOIN lexkeep_ingest_timeline t USING (line)"
            " WHERE l.type = 'tool_call' AND l.line > ?"
            " AND l.line NOT IN (SELECT line FROM lexkeep_ingest_sql_calls)"
            " ORDER BY l.line LIMIT ?",
            [last, TOOL_CALL_CHUNK],
        ).fetchall()
        if not rows:
            return
        last = rows[-1][-1]
        for conv, call_id, message_id, pos, name, raw, as_json, explicit, time, line in rows:
            raw, kind = _arguments(raw, as_json, explicit, call_id, line, lines)
            parsed = None
            if kind != freeform:
                try:
                    parsed = loads(raw)
                except orjson.JSONDecodeError:
                    parsed = None
            yield (conv, call_id, message_id, pos, name, raw, parsed, kind, time, path, line)


def _arguments(
    raw: str | None,
    as_json: str | None,
    explicit: str | None,
    call_id: str,
    line: int,
    lines: _LineTexts,
) -> tuple[str, str]:
    """(raw text, kind) of staged call `call_id`'s arguments, as the reader keeps them: `raw`
    when they were given as text, else the text of the JSON value (`as_json`, or, when it
    holds a number orjson reads as a float, from the call's `line` of the file, read again:
    see object_arguments). _GiveUp when that cannot be reproduced here."""
    if raw is not None:
        return raw, explicit or ArgumentsKind.JSON_STRING.value
    # Arguments recorded as a JSON value: kept as its JSON text, as the reader does.
    got = object_arguments(as_json, None)  # type: ignore[arg-type]
    if got is None:
        got = object_arguments(as_json, lines.of_call(line, call_id))  # type: ignore[arg-type]
    if got is None:
        raise _GiveUp("arguments this path cannot write as the reader does")
    raw, value = got
    default = ArgumentsKind.ARRAY if isinstance(value, list) else ArgumentsKind.OBJECT
    return raw, explicit or default.value


TOOL_CALL_CHUNK = 50_000


class _LineTexts:
    """Lines of the staged file by number, read from the file when first asked for: the
    staging keeps no line's text, and only tool calls whose arguments hold a number orjson
    reads as a float need theirs (object_arguments).

    The first call reads, in one pass, every line whose call may need it (FLOAT_PATTERN in
    DuckDB's text of its arguments); a line asked for later is read in a pass of its own.
    """

    def __init__(self, con: duckdb.DuckDBPyConnection, path: str) -> None:
        self.con = con
        self.path = path
        self.texts: dict[int, str | None] | None = None

    def of_call(self, number: int, call_id: str) -> str:
        """Line `number`'s text (without its newline); _GiveUp unless it still holds tool call
        `call_id` (the file changed since it was staged)."""
        if self.texts is None:
            wanted = self.con.execute(
                "SELECT line FROM lexkeep_ingest_lines WHERE type = 'tool_call'"
                " AND regexp_matches(x_args_json, ?)",
                [FLOAT_PATTERN],
            ).fetchall()
            self.texts = self._read({line for (line,) in wanted})
        text = self.texts.get(number)
        if text is None:
            text = self.texts[number] = self._read({number}).get(number)
        try:
            record = orjson.loads(text) if text is not None else None
        except orjson.JSONDecodeError:
            record = None
        if type(record) is not dict or record.get("id") != call_id:
            raise _GiveUp(f"line {number} no longer holds tool call {call_id!r}")
        return text  # type: ignore[return-value]

    def _read(self, wanted: set[int]) -> dict[int, str | None]:
        found: dict[int, str | None] = {}
        if not wanted:
            return found
        last = max(wanted)
        try:
            with open(self.path, "rb", buffering=_CHUNK) as stream:
                for number, raw in enumerate(stream, start=1):
                    if number in wanted:
                        found[number] = raw.rstrip(b"\n").decode("utf-8", "replace")
                        if number == last:
                            break
        except OSError as exc:  # gone since it was staged: the general ingest says so
            raise _GiveUp(f"{self.path}: {exc}") from exc
        return found


def drop_staging(con: duckdb.DuckDBPyConnection) -> None:
    """Drop the staging tables (after the write, or when giving up)."""
    drop_stage(con, "lexkeep_ingest_lines")
    con.execute("DROP TABLE IF EXISTS lexkeep_ingest_gaps")
    con.execute("DROP TABLE IF EXISTS lexkeep_ingest_calls")
    con.execute("DROP TABLE IF EXISTS lexkeep_ingest_sql_calls")
    con.execute("DROP TABLE IF EXISTS lexkeep_ingest_timeline")


def is_plain_file(path: str) -> bool:
    """True for a file on disk that is neither gzip nor starts with a BOM."""
    if path == "-" or path.endswith(".gz") or not Path(path).is_file():
        return False
    with open(path, "rb") as head:
        start = head.read(3)
    return start[:2] != b"\x1f\x8b" and start != BOM
