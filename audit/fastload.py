"""Fast path for `lexkeep audit FILE` on one lexkeep JSONL file: DuckDB parses, Python extracts.

The general ingest decodes every line in Python (orjson, reader records, run derivation), which
costs most of an audit's time on a big dump, although the audit only reads a small part of it:
user messages, tool calls, boundaries and the conversations they belong to. Here DuckDB reads
the file once (`read_json` with an explicit schema, fields as text), checks in SQL the values
the lexkeep reader would check, and fills the tables the audit reads in an in-memory store.
Only user text reaches Python, for the identifier extractor (several processes on big inputs).
`read_json` skips empty lines, so a row is numbered among the non-empty lines: the line check
(`LineCheck`, below) also lists the empty lines, and `renumber_lines` makes the numbers the
file's lines before the report is kept. A file with tool arguments given as a JSON value that
holds a fraction or a long integer is staged again with `read_csv` of whole lines (numbered
before empty lines are dropped) and `json_transform`, which keeps the lines those numbers are
written back from.

Anything this path does not reproduce exactly makes it give up *before* writing anything, and
the caller runs the normal ingest, which reports the exact file:line:col of a bad line: a line
DuckDB cannot parse, a key repeated at the top of a line (DuckDB's JSON reader refuses it), an
empty id, a value outside an enum, duplicate ids, records of an unknown type (the normal ingest
counts them for the notes), gzip, a BOM.
DuckDB also reads what orjson, and so the reader, refuses (NaN, Infinity, numbers beyond a
double, trailing commas), reads the first of a repeated key where orjson reads the last, and
the staging reads any JSON value of a field as text (an id given as a number, which the reader
stores otherwise; a message text that is not a string, which it refuses): `LineCheck` decodes
every line with orjson while the audit runs and checks those fields' types, and the caller
discards the fast path's report when a line is not read alike. The result must equal the normal
path's (tests/test_audit_fastload.py compares both).

Stored differently from `lexkeep ingest` (the store is private to one audit and discarded):
only user-text messages are kept, without their text once it is extracted; runs, tool results
and ingest_runs are not written; the tables have no primary-key indexes (the keys are checked
on the staged lines); user messages after their conversation's last boundary are not scanned
(nothing typed there is audited, and the "unscanned" note only counts messages before a
boundary).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
from collections.abc import Callable
from dataclasses import dataclass
from multiprocessing import get_context
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

import duckdb
import orjson

from lexkeep.core.errors import InputError
from lexkeep.core.fastload import (
    ARGUMENTS_LINE_SQL,
    DEFAULT_KIND_SQL,
    MAX_LINE_BYTES,
    READER_CHECKS,
    READER_FIELDS,
    TYPES_SQL,
    drop_stage,
    duplicates_sql,
    object_arguments,
    ok_sql,
    one_of_each_key,
    run_stage,
    stage_sql,
    statement_progress,
)
from lexkeep.core.ingest import JsonSource, detect_format
from lexkeep.core.model import ArgumentsKind, Format
from lexkeep.core.parallel import exit_with_parent, ignore_interrupts, read_workers
from lexkeep.core.readers import BOM
from lexkeep.core.rules import RuleSet, load_rules
from lexkeep.core.sidecar import PARALLEL_MIN_CHARS, scan_query
from lexkeep.core.store import Store, drop_keys

# Every field as text (a string unquoted, any other value as its JSON text), but the two whose
# JSON value the audit reads: `arguments` and `kept_verbatim`. The JSON type of the others is
# checked by `read_alike` (orjson, in a worker beside the audit): asking DuckDB for each field's
# JSON text and unquoting it cost about a fifth of the staging. `text` is not in the schema:
# tool results' text is most of a dump's bytes and the audit never reads it, so it is taken (a
# second, cheap parse) only from user messages. Rows are numbered before empty lines (NULL) are
# dropped, so `line` is the physical line, as the reader counts.
_JSON_FIELDS = ("arguments", "kept_verbatim")
_SCHEMA = json.dumps(
    {
        "type": "VARCHAR",
        **{f: "JSON" if f in _JSON_FIELDS else "VARCHAR" for f in READER_FIELDS if f != "text"},
    }
)


# The reader's checks (core.fastload.READER_CHECKS); a message's text must be a string or null
# (a number would be stored as its text: the normal ingest).
_CHECKS = {
    **READER_CHECKS,
    "message": READER_CHECKS["message"] + " AND ok_opt(run_id) AND ok_opt(text)",
}

# The fields each record type must hold as a string (or null, or not at all): those of the
# checks' ok_req, ok_opt and ok_enum. `read_alike` checks their JSON type; the staging checks
# their values on text (TEXT_MACROS): non-empty, one of the allowed ones.
STRING_FIELDS = {
    record: tuple(dict.fromkeys(re.findall(r"\bok_(?:req|opt|enum)\((\w+)", check)))
    for record, check in _CHECKS.items()
}

# The checks' macros over fields read as text, and the checks with them (message text is left
# to read_alike: it is not staged).
TEXT_MACROS = (
    "CREATE OR REPLACE TEMP MACRO lexkeep_req(x) AS coalesce(x <> '', false)",
    "CREATE OR REPLACE TEMP MACRO lexkeep_opt(x) AS true",
    "CREATE OR REPLACE TEMP MACRO lexkeep_enum(x, allowed) AS"
    " x IS NULL OR list_contains(allowed, x)",
)


def _on_text(check: str) -> str:
    """A check of core.fastload.READER_CHECKS with its enum lists as text and its macros as
    TEXT_MACROS'."""
    check = re.sub(r"\bok_(req|opt|enum)\(", r"lexkeep_\1(", check)
    return check.replace(" AND lexkeep_opt(text)", "")


_OK = ok_sql({record: _on_text(check) for record, check in _CHECKS.items()})
_DEFAULT_KIND = DEFAULT_KIND_SQL.replace("role ->> '$'", "role")

# One pass over the file (core.fastload.stage_sql numbers the lines); `ok` says whether the
# reader accepts the record; only the typed values the audit needs are kept (the JSON-typed
# columns are never materialised).
_STAGE_COLUMNS = f"""type, {_OK} AS ok,
       conversation_id AS x_conv, id AS x_id, call_id AS x_call, name AS x_name, role AS x_role,
       CASE type WHEN 'message' THEN coalesce(kind, {_DEFAULT_KIND})
                 WHEN 'compaction' THEN coalesce(kind, 'local') END AS x_kind,
       coalesce(status, 'completed') AS x_status,
       CASE WHEN type = 'message' THEN time END AS x_time,
       text AS x_text,
       CASE WHEN arguments IS NULL THEN ''
            WHEN starts_with(arguments, '"') THEN arguments ->> '$' END AS x_args,
       CASE WHEN NOT starts_with(arguments, '"') THEN arguments::VARCHAR END AS x_args_json,
       {ARGUMENTS_LINE_SQL} AS x_args_line,
       arguments_kind AS x_args_kind, summary AS x_summary, trigger AS x_trigger,
       CASE WHEN json_type(kept_verbatim) = 'ARRAY'
            THEN json_transform(kept_verbatim, '["VARCHAR"]') END AS x_kept,
       parent_id AS x_parent, title AS x_title"""
# A user message's text, read from its line (as text, like the other fields).
_STAGE_INNER = (
    ", CASE WHEN s.type = 'message' AND coalesce(s.kind, "
    + DEFAULT_KIND_SQL.replace("role ->> '$'", "s.role")
    + ") = 'user_text' THEN json_extract_string(l, '$.text') END AS text"
)
_STAGE_SQL = stage_sql("lexkeep_fast_lines", _STAGE_COLUMNS, _SCHEMA, inner=_STAGE_INNER)

# The same staging through DuckDB's own JSON reader (`read_json`), which parses each line where
# it lies in the read buffer: about a quarter less CPU than copying every line out as a CSV value
# and parsing that copy (1.16 against 1.56 CPU-s for the 256 MB dump). It skips empty and
# whitespace-only lines, so a row's number counts the non-empty lines before it: the line check
# (`LineCheck`) reports the empty lines, and `renumber_lines` turns the numbers into physical
# lines. It has no line to give ARGUMENTS_LINE_SQL: a file with arguments given as a JSON value
# that holds a fraction or a long integer is staged again with _STAGE_SQL (object_arguments
# needs the line's text of those numbers).
_JSON_READ = (
    "read_json(?, format = 'newline_delimited', columns = "
    + json.dumps({**json.loads(_SCHEMA), "text": "VARCHAR"})
    + f", maximum_object_size = {MAX_LINE_BYTES})"
)
_STAGE_JSON_SQL = (
    f"""
CREATE OR REPLACE TEMP TABLE lexkeep_fast_lines_rows AS
SELECT false AS blank, {_STAGE_COLUMNS.replace(ARGUMENTS_LINE_SQL, "NULL::VARCHAR")}
FROM (
    SELECT * REPLACE (CASE WHEN type = 'message' AND coalesce(kind, {_DEFAULT_KIND}) = 'user_text'
                           THEN text END AS text)
    FROM {_JSON_READ}
)
""",
    _STAGE_SQL[1],
)

_DUPLICATES_SQL = duplicates_sql("lexkeep_fast_lines")
_UNKNOWN_TYPES_SQL = f"SELECT count(*) FROM lexkeep_fast_lines WHERE type NOT IN {TYPES_SQL}"

_TIMELINE_SQL = """
CREATE OR REPLACE TEMP TABLE lexkeep_fast_timeline AS
SELECT line, type, x_conv AS conv,
       row_number() OVER (PARTITION BY x_conv ORDER BY line) - 1 AS position
FROM lexkeep_fast_lines
WHERE type IN ('message', 'tool_call', 'tool_result', 'compaction')
"""

# run_id, message_id and the time of calls and boundaries are left NULL: the audit never reads
# them (a user message's time dates a date typed without a year: core.nearmiss.typed_day).
_INSERTS = (
    """
    INSERT INTO messages (id, conversation_id, run_id, position, role, kind, status, text,
                          time, source_file, source_line)
    SELECT l.x_id, t.conv, NULL, t.position, l.x_role, l.x_kind, l.x_status, '', l.x_time,
           $file, l.line
    FROM lexkeep_fast_lines l JOIN lexkeep_fast_timeline t USING (line)
    WHERE l.type = 'message' AND l.x_kind = 'user_text'
    """,
    # The text the extractor reads: user messages before their conversation's last boundary.
    # Identifiers typed later are never audited (DESIGN.md), so extracting them would change
    # no report; messages keep no text (read once, here).
    """
    CREATE OR REPLACE TEMP TABLE lexkeep_fast_pending AS
    SELECT l.x_id AS id, t.conv AS conversation_id, coalesce(l.x_text, '') AS text,
           t.position
    FROM lexkeep_fast_lines l JOIN lexkeep_fast_timeline t USING (line)
    JOIN (SELECT conv, max(position) AS last FROM lexkeep_fast_timeline
          WHERE type = 'compaction' GROUP BY 1) b ON b.conv = t.conv AND t.position < b.last
    WHERE l.type = 'message' AND l.x_kind = 'user_text'
    """,
    """
    INSERT INTO tool_calls (conversation_id, call_id, message_id, position, name, arguments_raw,
                            arguments, arguments_kind, time, source_file, source_line)
    SELECT t.conv, l.x_id, NULL, t.position, l.x_name, coalesce(l.x_args, ''), NULL,
           coalesce(l.x_args_kind, 'json_string'), NULL, $file, l.line
    FROM lexkeep_fast_lines l JOIN lexkeep_fast_timeline t USING (line)
    WHERE l.type = 'tool_call'
    """,
    """
    INSERT INTO boundaries (id, conversation_id, position, kind, trigger, summary_text,
                            kept_verbatim, time, source_file, source_line)
    SELECT l.x_id, t.conv, t.position, l.x_kind, l.x_trigger, l.x_summary,
           coalesce(l.x_kept, []), NULL, $file, l.line
    FROM lexkeep_fast_lines l JOIN lexkeep_fast_timeline t USING (line)
    WHERE l.type = 'compaction'
    """,
    # A conversation's source: its (last) conversation record, else its first timeline line.
    """
    INSERT INTO conversations (id, format, parent_id, title, max_position, source_file,
                               source_line)
    WITH recs AS (
        SELECT x_id AS id,
               arg_max(x_parent, line) FILTER (WHERE x_parent <> '') AS parent,
               arg_max(x_title, line) FILTER (WHERE x_title <> '') AS title,
               max(line) AS line
        FROM lexkeep_fast_lines WHERE type = 'conversation' GROUP BY 1
    ),
    used AS (
        SELECT conv AS id, min(line) AS line, max(position) AS max_position
        FROM lexkeep_fast_timeline GROUP BY 1
    )
    SELECT coalesce(r.id, u.id), 'lexkeep', r.parent, r.title, coalesce(u.max_position, -1),
           $file, coalesce(r.line, u.line)
    FROM recs r FULL OUTER JOIN used u ON r.id = u.id
    """,
)


class _GiveUp(Exception):
    """The file needs the normal ingest (a check failed or DuckDB refused it)."""


def is_candidate(path: str) -> bool:
    """True when `path` is a plain (not gzip, no BOM) JSONL file sniffed as lexkeep JSONL."""
    if path == "-" or not Path(path).is_file():
        return False
    try:
        with open(path, "rb") as head:
            start = head.read(3)
    except OSError:
        return False  # the normal ingest says why it cannot be read, naming the file
    if start[:2] == b"\x1f\x8b" or start == BOM or path.endswith(".gz"):
        return False
    source = JsonSource(path)
    items = iter(source)
    try:
        fmt, _ = detect_format(items)
    except InputError:
        return False
    finally:
        items.close()  # type: ignore[attr-defined]
    return fmt == Format.LEXKEEP and not source.document


@dataclass(frozen=True)
class Loaded:
    """A file fast_load loaded (true). `by_content`: its rows are numbered among the file's
    non-empty lines (the read_json staging); `renumber_lines` with the line check's empty lines
    makes them physical lines, as the reader counts."""

    by_content: bool

    def __bool__(self) -> bool:
        return True


def fast_load(
    store: Store,
    path: str,
    rules: RuleSet | None = None,
    *,
    parallel_min_chars: int = PARALLEL_MIN_CHARS,
    on_phase: Callable[[str], None] | None = None,
    on_progress: Callable[[int], None] | None = None,
) -> Loaded | None:
    """Load one lexkeep JSONL file into the (fresh, in-memory) `store` for the audit.

    Returns None when the file needs the normal ingest (run it on a fresh store). User text of
    at least `parallel_min_chars` characters is extracted in parallel (core.sidecar.scan_query).
    `on_phase(text)` is told when extraction starts; `on_progress(n)` the file's bytes as
    DuckDB loads them (all of them once loaded; taken back with a negative `n` when the file
    needs the normal ingest, which tells them again). A result does not yet say that the reader
    reads every line alike: `LineCheck(path)` does (the caller runs it beside the audit), and
    gives the empty lines that `renumber_lines` needs when the result is `by_content`.
    """
    if not is_candidate(path):
        return None
    con = store.con
    con.execute("SET enable_progress_bar = false")
    # No transaction: dropping the staging tables inside one would keep their memory until
    # the commit. Every check runs before the first write, so giving up leaves `store` as it
    # was; an error after that propagates (the caller's store is then unusable).
    size = os.stat(path).st_size
    try:
        with statement_progress(con, size, on_progress) as told:
            by_content = _load(con, path)
    except _GiveUp:
        if on_progress is not None and told():
            on_progress(-told())  # the normal ingest reads the file again and tells it
        return None
    finally:
        _drop_staging(con)
    if on_progress is not None and size > told():
        on_progress(size - told())
    if on_phase is not None:
        on_phase("extracting identifiers")
    # As core.sidecar.index_pending: without rules, the settings file's, else the built-ins.
    _index(con, rules or load_rules(), parallel_min_chars)
    return Loaded(by_content)


def _load(con: duckdb.DuckDBPyConnection, path: str) -> bool:
    """Stage the file's lines, check them, fill conversations/messages/tool_calls/boundaries.

    Returns whether rows are numbered among non-empty lines (_STAGE_JSON_SQL); False when the
    file needed the staging that keeps every line (_STAGE_SQL). Only DuckDB's reading of the
    file (a line that is not JSON, invalid UTF-8, a line too long...) means "give up": every
    later statement reads staged, typed columns, so an error there is lexkeep's, and it
    propagates instead of silently taking the slow path.
    """
    for macro in TEXT_MACROS:
        con.execute(macro)
    by_content = True
    try:
        updates = _stage(con, path, _STAGE_JSON_SQL)
    except _NeedsLines:
        _drop_staging(con)
        by_content = False
        updates = _stage(con, path, _STAGE_SQL)
    drop_keys(con, _UNKEYED)
    for sql in _INSERTS:
        con.execute(sql, {"file": path} if "$file" in sql else None)
    if updates:
        con.execute(
            "UPDATE tool_calls t SET arguments_raw = u.raw, arguments_kind = u.kind"
            " FROM (SELECT unnest(?) AS conv, unnest(?) AS id, unnest(?) AS raw,"
            " unnest(?) AS kind) u WHERE t.conversation_id = u.conv AND t.call_id = u.id",
            updates,
        )
    # Staging is most of the memory: free it before extraction and the audit add theirs.
    _drop_staging(con)
    return by_content


class _NeedsLines(_GiveUp):
    """The read_json staging cannot give what the reader keeps (arguments whose numbers only
    the line has): stage with the lines."""


def _stage(
    con: duckdb.DuckDBPyConnection, path: str, statements: tuple[str, str]
) -> list[list[str]] | None:
    """Stage and check the file with `statements`, and number the timeline; the UPDATE
    parameters of arguments given as a JSON value (see _object_arguments). Writes no store
    table."""
    try:
        staged = run_stage(con, statements, path)
    except duckdb.Error as exc:
        raise _GiveUp(str(exc)) from exc
    if not staged:
        raise _GiveUp("DuckDB's plan would not keep the file's line order")
    if con.execute("SELECT count(*) FROM lexkeep_fast_lines WHERE NOT ok").fetchone()[0]:
        raise _GiveUp("a record the reader rejects")
    if con.execute(_DUPLICATES_SQL).fetchone()[0]:
        raise _GiveUp("duplicate ids")
    if con.execute(_UNKNOWN_TYPES_SQL).fetchone()[0]:
        # Skipped by the reader, and named in the audit's notes: the normal ingest counts them.
        raise _GiveUp("records of an unknown type")
    con.execute(_TIMELINE_SQL)
    return _object_arguments(con, lines=statements is _STAGE_SQL)


def renumber_lines(store: Store, empty: list[int]) -> None:
    """Turn the source lines of a `by_content` load (counted among non-empty lines) into the
    file's physical lines, given its empty lines (`LineCheck.empty_lines()`, ascending)."""
    if not empty:
        return
    # The k-th empty line (from 1) follows empty[k] - k non-empty lines: every row numbered
    # above that moves down by one line more.
    after = [line - k for k, line in enumerate(empty, start=1)]
    con = store.con
    con.execute(
        "CREATE OR REPLACE TEMP TABLE lexkeep_fast_gaps AS SELECT unnest(?::BIGINT[]) AS after",
        [after],
    )
    try:
        for table in ("messages", "tool_calls", "boundaries", "conversations"):
            con.execute(
                f"UPDATE {table} SET source_line = source_line"
                " + (SELECT count(*) FROM lexkeep_fast_gaps g WHERE g.after < source_line)"
            )
    finally:
        con.execute("DROP TABLE IF EXISTS lexkeep_fast_gaps")


# Tables the audit's private store fills once. Their keys were checked on the staged lines
# (_DUPLICATES_SQL), and each message is scanned once: the primary-key indexes would only
# cost memory (about a sixth of the store) and insert time.
_UNKEYED = (
    "conversations",
    "messages",
    "tool_calls",
    "boundaries",
    "identifiers",
    "identifier_scans",
)


def _drop_staging(con: duckdb.DuckDBPyConnection) -> None:
    drop_stage(con, "lexkeep_fast_lines")
    con.execute("DROP TABLE IF EXISTS lexkeep_fast_timeline")


def _object_arguments(con: duckdb.DuckDBPyConnection, *, lines: bool) -> list[list[str]] | None:
    """Arguments recorded as JSON values, not strings: their JSON text, as the reader keeps them
    (core.fastload.object_arguments: numbers as the line writes them).

    Returns the UPDATE parameters (conversations, call ids, raw texts, kinds), or None.
    `lines`: the staging kept the lines that such numbers need; without them, _NeedsLines.
    """
    rows = con.execute(
        "SELECT x_conv, x_id, x_args_json, x_args_line, x_args_kind FROM lexkeep_fast_lines"
        " WHERE type = 'tool_call' AND x_args_json IS NOT NULL"
    ).fetchall()
    if not rows:
        return None
    convs, ids, raws, kinds = [], [], [], []
    for conv, call_id, text, line, explicit in rows:
        got = object_arguments(text, line)
        if got is None:
            if not lines:  # a fraction, a long integer, NaN...: the line decides
                raise _NeedsLines("arguments whose numbers only their line gives")
            raise _GiveUp("arguments this path cannot write as the reader does")
        raw, value = got
        convs.append(conv)
        ids.append(call_id)
        raws.append(raw)
        default = ArgumentsKind.ARRAY if isinstance(value, list) else ArgumentsKind.OBJECT
        kinds.append(explicit or default.value)
    return [convs, ids, raws, kinds]


# -- the identifier sidecar ----------------------------------------------------------------------


def _index(con: duckdb.DuckDBPyConnection, rules: RuleSet, parallel_min_chars: int) -> None:
    """Fill identifiers and identifier_scans as core.sidecar.index_pending does."""
    try:
        scan_query(
            con, "SELECT * FROM lexkeep_fast_pending", [], rules, parallel_min_chars, keyed=False
        )
    finally:
        con.execute("DROP TABLE IF EXISTS lexkeep_fast_pending")


# -- lines DuckDB and the reader read differently --------------------------------------------------


def read_alike(path: str) -> bool:
    """True when orjson (the reader's parser) decodes every non-blank line of `path` to an
    object that DuckDB read alike, whose fields the staging read as text are strings where the
    reader wants them (STRING_FIELDS); False on the first line that is not so, or when the file
    cannot be read.

    DuckDB's JSON reader also takes NaN, Infinity and inf in any case, numbers beyond a double
    (1e999) and trailing commas, which the reader reports as invalid JSON; and it reads the
    first of a repeated key where orjson reads the last (`one_of_each_key`). The staging reads
    a number, a boolean, an array or an object as its JSON text, where the reader refuses it
    (or, for an id given as a number, stores it otherwise). Empty lines are the staging's
    business (see `empty_lines`); a whitespace-only line is not JSON, so not read alike.
    """
    return check_lines(path)[0]


def check_lines(path: str) -> tuple[bool, list[int]]:
    """(`read_alike(path)`, the numbers of its empty lines, ascending: `renumber_lines` needs
    them after a `by_content` load). The empty lines are complete only when the first is True.
    """
    loads = orjson.loads
    fields_of = STRING_FIELDS.get
    empty: list[int] = []
    try:
        with open(path, "rb", buffering=1 << 20) as stream:
            for number, raw in enumerate(stream, start=1):
                if raw == b"\n" or raw == b"\r\n":
                    empty.append(number)
                    continue
                value = loads(raw)
                if type(value) is not dict or not one_of_each_key(raw, value):
                    return False, empty
                record = value.get("type")
                fields = fields_of(record) if type(record) is str else None
                if fields is not None:
                    for field in fields:
                        got = value.get(field)
                        if got is not None and type(got) is not str:
                            return False, empty
    except (OSError, orjson.JSONDecodeError):
        return False, empty
    return True, empty


def _check_in_worker(path: str, send: Connection, parent: int) -> None:
    exit_with_parent(parent)  # a killed audit leaves no reader of a big file behind
    ignore_interrupts()  # the parent stops this worker itself
    with contextlib.suppress(OSError):
        os.nice(10)  # idle cycles first: the audit's own threads come before this check
    try:
        send.send(check_lines(path))
    finally:
        send.close()


class LineCheck:
    """`check_lines(path)`, computed in a forked process from the moment it is made.

    The audit after the fast path's load runs on one thread and leaves a core idle; the check
    (about 4 CPU-seconds per GB) runs there, at low priority. Without fork, or when
    $LEXKEEP_READ_WORKERS asks for no worker processes, `passed()` computes it in this
    process. Use as a context manager: leaving it stops a worker whose answer was not taken.
    """

    def __init__(self, path: str) -> None:
        self.path = path
        self._worker: Any = None
        self._answer: Connection | None = None
        self._result: tuple[bool, list[int]] | None = None
        if read_workers() > 1:
            context = get_context("fork")
            self._answer, send = context.Pipe(duplex=False)
            self._worker = context.Process(target=_check_in_worker, args=(path, send, os.getpid()))
            self._worker.start()
            send.close()  # the worker holds the other end: EOF when it dies without answering

    def _checked(self) -> tuple[bool, list[int]]:
        if self._result is None:
            answer = None
            if self._answer is not None:
                try:
                    answer = self._answer.recv()
                except EOFError:  # the worker died (killed?): check here instead
                    answer = None
                self.close()
            self._result = check_lines(self.path) if answer is None else answer
        return self._result

    def passed(self) -> bool:
        """`read_alike(path)` (waits for the worker)."""
        return bool(self._checked()[0])

    def empty_lines(self) -> list[int]:
        """The file's empty lines, ascending (waits for the worker); complete when passed()."""
        return self._checked()[1]

    def close(self) -> None:
        """Stop the worker, if it still runs."""
        if self._worker is not None:
            if self._worker.is_alive():
                self._worker.kill()  # it ignores SIGTERM (`ignore_interrupts`)
            self._worker.join()
            self._worker = None
        if self._answer is not None:
            self._answer.close()
            self._answer = None

    def __enter__(self) -> LineCheck:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
