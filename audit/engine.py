"""The audit: do identifiers typed by users survive compaction verbatim in later tool calls?

Semantics (DESIGN.md "The audit", issue 4): in every conversation with at least one boundary,
each sidecar identifier of a real user message is audited once, at the first boundary after
the message. The evidence is every tool call after that boundary. A value is *kept* when a
decoded argument string holds it with no letter or digit directly around it (for a value
shaped like a key name, `cycle_id`, an object key of the arguments too), *altered* when
only a near miss is found, *missing* otherwise (*unverified* instead of missing when the
message's identifier scan ran out of time).

The joins run in DuckDB: identifier x first later boundary (ASOF join), then identifier x later
tool calls whose raw arguments contain the value (or, for near misses, a folded probe of it).
SQL also settles the calls whose raw text surely keeps the value (see _SURE_CALL, most of
them); Python decodes and confirms only the rest, so the store is never loaded whole.
"""

from __future__ import annotations

import dataclasses
import datetime
import json
import os
import re
import sys
from collections import Counter, defaultdict
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from functools import cache
from typing import TYPE_CHECKING, Any, NamedTuple

import orjson

if TYPE_CHECKING:
    import duckdb

from lexkeep.audit.fastload import LineCheck, fast_load, renumber_lines
from lexkeep.audit.report import (
    AuditReport,
    ConversationResult,
    Counts,
    Finding,
    Findings,
    Gate,
    KindResult,
    distribution,
    flat_rows,
    gc_paused,
    redact,
    redact_key,
    redact_value,
    tally_keys,
)
from lexkeep.audit.settings import AuditSettings, resolve
from lexkeep.core.errors import ConfigError, InputError
from lexkeep.core.fastload import READER_FIELDS
from lexkeep.core.formats import get_reader
from lexkeep.core.ingest import (
    HEADER_ONLY,
    PathsArg,
    crash_left,
    crash_left_text,
    expand_paths,
    ingest_paths,
    nothing_yet,
    path_list,
)
from lexkeep.core.inspect import ID_CONFLICT, left_out
from lexkeep.core.model import ArgumentsKind, FileCounts, Format, Source, Verdict
from lexkeep.core.nearmiss import (
    _EDGE_PUNCT,
    Difference,
    GroupedRun,
    NearMiss,
    ascii_grouped_run,
    ascii_run_spans,
    bounded_distance,
    candidates,
    date_near_miss,
    fold,
    grouped_edit_search,
    grouped_near_miss,
    grouped_runs,
    is_kept,
    skeleton,
    textual_date,
    typed_day,
)
from lexkeep.core.store import Store, default_db_path

# -- calls that surely keep a value, decided in SQL ---------------------------------------------
#
# `_keeps` (decode the arguments, then `is_kept` on every decoded string) is exact but costs a
# Python decode per candidate call. A call *surely* keeps value V when V's first occurrence p in
# the raw arguments has, on both sides, the start/end of the text or an ASCII character that is
# neither a letter, a digit nor a backslash, and (for JSON arguments) V and the raw text pass
# the checks below. Why that implies `_keeps` is true:
# - freeform arguments, or JSON that Python cannot parse: the only decoded string is the raw
#   text, and both neighbours are non-word characters (is_kept's rule).
# - JSON that Python parses. V holds no '"', no '\' and no control character (_SURE_VALUE), so
#   V lies wholly inside one JSON string or wholly outside strings, and no escape sequence lies
#   inside V. Outside strings valid JSON only has digits, '+-.eE', the letters of true, false,
#   null, NaN, Infinity, whitespace and ',:[]{}': so V is in a string unless it only has such
#   characters; an all-digit V may also be (part of) a number, which the decoder keeps as its
#   JSON text (integers by str(int), equal for valid JSON; floats re-read as text). Inside a
#   string, V decodes to itself; its neighbour before is not '\', so it is the string's opening
#   quote or a character standing for itself (an escape sequence cannot end in an ASCII
#   non-alphanumeric other than '"' and '/', which decode to themselves); its neighbour after is
#   not '\', so it is the closing quote or itself. So the decoded string holds V with non-word
#   neighbours, and that string is a decoded leaf unless it is an object key or a value hidden
#   by a duplicate key (Python keeps the last). _SURE_CALL rules both out: either the raw text
#   has no '{' (no object at all), or its only '{' opens the top-level object (valid for DuckDB,
#   which parses standard JSON as Python does) whose keys (json_keys, escapes decoded) are
#   distinct and none contains V (a key that held V in its raw text holds it decoded: V is not
#   preceded by '\' and has none inside).
# Anything else is left to `_keeps`, so the answer is the same, only cheaper.
_SURE_VALUE = r"""(
    length(ids.value) > 0
    AND NOT regexp_matches(ids.value, '[[:cntrl:]"\\]')
    AND (regexp_matches(ids.value, '[^0-9+\-.eEtrufalsnNIiy \t\n\r,:\[\]{}]')
         OR regexp_full_match(ids.value, '[0-9]+'))
)"""
# Longest JSON arguments, in bytes, whose keys SQL checks (_SURE_CALL); longer ones are decoded
# in Python. strlen (bytes) is the string's stored size; length (characters) reads the text.
SURE_JSON_MAX_BYTES = 1 << 20
_PLAIN = r"(ord({ch}) < 128 AND NOT regexp_matches({ch}, '[0-9A-Za-z\\]'))"
_SURE_CALL = (
    "(p > 0"
    " AND (p = 1 OR " + _PLAIN.format(ch="substr(arguments_raw, p - 1, 1)") + ")"
    " AND (p + length(value) > length(arguments_raw) OR "
    + _PLAIN.format(ch="substr(arguments_raw, p + length(value), 1)")
    + ")"
    " AND (arguments_kind = 'freeform' OR (sure_value AND CASE"
    "  WHEN NOT contains(arguments_raw, '{') THEN true"
    # DuckDB keeps each JSON parse of one row's text until the row is done: five parses of a
    # 24 MB argument outgrew a 512 MB store. Python decodes such a call once instead.
    f"  WHEN strlen(arguments_raw) > {SURE_JSON_MAX_BYTES} THEN false"
    "  WHEN length(arguments_raw) - length(replace(arguments_raw, '{', '')) <> 1 THEN false"
    # One test per branch, and try(): DuckDB may reorder an AND's terms, and json_type or
    # json_keys on text that is not JSON raise an error instead of answering.
    "  WHEN NOT json_valid(arguments_raw) THEN false"
    "  WHEN coalesce(try(json_type(arguments_raw)), '') <> 'OBJECT' THEN false"
    "  ELSE coalesce(try("
    "   len(json_keys(arguments_raw)) = len(list_distinct(json_keys(arguments_raw)))"
    "   AND len(list_filter(json_keys(arguments_raw), lambda k: contains(k, value))) = 0"
    "  ), false) END)))"
)

# Identifier x first boundary after its message (ASOF picks the nearest later boundary).
_AUDIT_IDS_SQL = (
    """
CREATE OR REPLACE TEMP TABLE lexkeep_audit_ids AS
WITH times AS (
    -- A user message without a time of its own was typed no earlier than its conversation's
    -- first recorded one (a date typed without a year is read near it: core.nearmiss).
    SELECT conversation_id, min(time) AS first_time FROM messages
    WHERE kind = 'user_text' AND time IS NOT NULL GROUP BY 1
),
ids AS (
    SELECT i.conversation_id, i.message_id, i.kind, i.value, i.span_start,
           m.position AS mpos, m.source_file AS m_file, m.source_line AS m_line,
           coalesce(s.complete, true) AS complete,
           coalesce(m.time, t.first_time) AS m_time
    FROM identifiers i
    JOIN messages m
      ON m.id = i.message_id AND m.conversation_id = i.conversation_id AND m.kind = 'user_text'
    LEFT JOIN identifier_scans s ON s.message_id = i.message_id
    LEFT JOIN times t ON t.conversation_id = i.conversation_id
    -- A value typed twice in one message is one identifier, audited once (its first span).
    QUALIFY row_number() OVER (PARTITION BY i.message_id, i.value ORDER BY i.span_start) = 1
)
SELECT row_number() OVER (ORDER BY ids.conversation_id, ids.mpos, ids.span_start) - 1 AS rid,
       ids.*,
       b.id AS boundary_id, b.position AS bpos, b.kind AS bkind,
       b.source_file AS b_file, b.source_line AS b_line,
       substr(to_json(ids.value)::VARCHAR, 2, length(to_json(ids.value)::VARCHAR) - 2)
           AS value_json,
       value_json AS value_ascii,
       """
    + _SURE_VALUE
    + """ AS sure_value
FROM ids ASOF JOIN boundaries b
  ON ids.conversation_id = b.conversation_id AND ids.mpos < b.position
"""
)

# Candidate calls of each identifier, after its boundary and before it (`after`), in position
# order, each with whether it surely keeps the value (`sure`, see _SURE_CALL): Python decodes
# only the calls before the first sure one on each side, and passes over the rest. Arguments
# are sent only for calls that are not sure. No window cuts the rows after the first sure
# call: it cost a tenth of the query, and such rows are rare (none in the benchmark dumps).
# One query for both sides: the join and the substring tests run once (two queries, one per
# side, cost about a tenth more).
# JSON arguments with \\u or \\/ escapes as DuckDB writes them back (escapes of plain
# characters decoded), else NULL: a writer that escapes '&' (Go), every non-ASCII character
# (Python) or '/' (PHP, some Java encoders) hides the value from the raw text.
_UNESCAPED = """CASE WHEN arguments_kind <> 'freeform'
                          AND (contains(arguments_raw, '\\u') OR contains(arguments_raw, '\\/'))
                     THEN try(json(arguments_raw)::VARCHAR) END"""

_FIRST_SQL = (
    """
WITH hits AS (
    SELECT a.rid, a.value, a.sure_value, t.call_id, t.name, t.arguments_raw, t.arguments_kind,
           t.source_file, t.source_line, t.position, instr(t.arguments_raw, a.value) AS p,
           t.position > a.bpos AS after
    FROM (SELECT * FROM lexkeep_audit_ids WHERE rid >= $lo AND rid < $hi) a
    JOIN (
        SELECT *, """
    + _UNESCAPED
    + """ AS unescaped FROM tool_calls
        WHERE conversation_id BETWEEN
            (SELECT conversation_id FROM lexkeep_audit_ids WHERE rid = $lo)
            AND (SELECT conversation_id FROM lexkeep_audit_ids WHERE rid = $hi - 1)
    ) t ON t.conversation_id = a.conversation_id AND t.position <> a.bpos
    WHERE (contains(t.arguments_raw, a.value) OR contains(t.arguments_raw, a.value_json)
           OR contains(t.arguments_raw, a.value_ascii) OR contains(t.unescaped, a.value_json))
),
judged AS (
    SELECT *, coalesce("""
    + _SURE_CALL
    + """, false) AS sure FROM hits
)
SELECT rid, after, call_id, name, CASE WHEN sure THEN NULL ELSE arguments_raw END,
       arguments_kind, source_file, source_line, sure
FROM judged
ORDER BY rid, position
"""
)

# lower(arguments) without the separators of core.nearmiss (RE2's \s is [\t\n\f\r ]): the
# same text as regexp_replace(lower(t.arguments_raw), '[\s\-_.:/#\\+()]+', '', 'g'), a few times
# faster as plain replaces (tests/test_audit_speed.py compares both on every character).
_FOLDED_ARGS = "lower(t.arguments_raw)"
for _sep in "\t\n\f\r -_.:/#\\+()":
    _FOLDED_ARGS = f"replace({_FOLDED_ARGS}, chr({ord(_sep)}), '')"

# Calls after the boundary whose folded arguments contain a probe of a not-kept value: each
# call once, in (conversation, position) order, with the identifiers it may be a near miss of
# (Python passes over those whose two-character pieces it holds too few of: _near_grams).
# Pairs are found on the call's key alone; the call's columns are joined afterwards,
# so the grouping never hashes argument texts.
_NEAR_SQL = (
    """
WITH probes AS (SELECT unnest($rids) AS rid, unnest($probes) AS probe),
calls AS (
    SELECT t.conversation_id, t.call_id, t.position, """
    + _FOLDED_ARGS
    + """ AS folded
    FROM (  -- escaped arguments folded as they decode (the tokens come from decoded ones)
        SELECT conversation_id, call_id, position,
               coalesce("""
    + _UNESCAPED
    + """, arguments_raw) AS arguments_raw
        FROM tool_calls
    ) t
    WHERE t.conversation_id BETWEEN  -- the batch's conversations (rids are in their order)
            (SELECT conversation_id FROM lexkeep_audit_ids WHERE rid = $lo)
            AND (SELECT conversation_id FROM lexkeep_audit_ids WHERE rid = $hi - 1)
),
pairs AS (
    SELECT c.conversation_id, c.call_id, list(DISTINCT a.rid) AS rids
    FROM probes p
    JOIN lexkeep_audit_ids a ON a.rid = p.rid
    JOIN calls c ON c.conversation_id = a.conversation_id AND c.position > a.bpos
    WHERE contains(c.folded, p.probe)
    GROUP BY c.conversation_id, c.call_id
)
SELECT t.call_id, t.name, t.arguments_raw, t.arguments_kind, t.source_file, t.source_line, p.rids
FROM pairs p JOIN tool_calls t USING (conversation_id, call_id)
ORDER BY t.conversation_id, t.position
"""
)


# A tool call as evidence: (call_id, tool name, source file, source line).
_Call = tuple[str, str, str, int]
# A row of lexkeep_audit_ids, indexed by rid: see _audit_rows for the columns.
_Row = tuple[Any, ...]


def audit_command(
    *,
    paths: Sequence[str] = (),
    db: str | None = None,
    rules: str | None = None,
    skip_invalid: bool = False,
    input_format: str | None = None,
    flags: Mapping[str, Any] | None = None,
    on_progress: Callable[[int], None] | None = None,
    on_phase: Callable[[str], None] | None = None,
    output: str | None = None,
) -> tuple[AuditReport, AuditSettings]:
    """What `lexkeep audit` runs: resolve the settings (`output`: the report's file, whose
    extension names a format no setting names), then audit files or the store."""
    settings = resolve(flags or {}, output=output)
    if not paths and db is None:
        db = default_db_path()
        if not os.environ.get("LEXKEEP_DB") and not os.path.exists(db):
            # `lexkeep audit` alone, with no store here: say both ways to audit something
            raise ConfigError(
                f"nothing to audit: no trace files given, and no lexkeep store at {db}",
                hint="name trace files or folders (lexkeep audit TRACES...), or a store filled"
                " by lexkeep ingest (lexkeep audit --db FILE)",
            )
    try:
        report = run_audit(
            paths=paths,
            db=db,
            rules=rules,
            skip_invalid=skip_invalid,
            input_format=input_format,
            settings=settings,
            on_progress=on_progress,
            on_phase=on_phase,
        )
    except InputError as exc:
        if settings.redact:
            redact_error(exc, _load_rules(rules))
        raise
    return report, settings


# A quoted literal in an error message: `repr` of a value read from a trace ('...' or "...").
_QUOTED = re.compile(r"'(?:[^'\\]|\\.)*'|\"(?:[^\"\\]|\\.)*\"")
# Field names the lexkeep reader's errors quote (`'arguments_kind': unknown value …`): the
# schema's words, not trace data, so redaction leaves them readable.
_FIELD_NAMES = frozenset({*READER_FIELDS, "is_error", "type"})


def redact_error(exc: InputError, rules: Any = None, key: bytes | None = None) -> None:
    """Under --redact, hash the identifiers an input error quotes from the trace, in place.

    Messages quote trace values as Python literals (`'status': unknown value 'ORD_88412'`);
    each identifier the rules find inside a literal becomes its keyed hash, as in the
    report. Field names, ids without an identifier's shape and the file:line stay readable.
    """
    from lexkeep.core.identifiers import extract

    key = key if key is not None else redact_key()

    def literal(match: re.Match[str]) -> str:
        text = match.group()
        if text[1:-1] in _FIELD_NAMES:
            return text
        for ident in sorted(extract(text, rules).identifiers, key=lambda i: -i.start):
            text = text[: ident.start] + redact_value(ident.value, key) + text[ident.end :]
        return text

    exc.message = _QUOTED.sub(literal, exc.message)
    exc.args = (exc.message,)


def run_audit(
    *,
    paths: PathsArg = (),
    db: str | os.PathLike[str] | None = None,
    rules: str | os.PathLike[str] | None = None,
    skip_invalid: bool = False,
    input_format: str | None = None,
    settings: AuditSettings | None = None,
    fast: bool = True,
    on_progress: Callable[[int], None] | None = None,
    on_phase: Callable[[str], None] | None = None,
) -> AuditReport:
    """Audit trace files (ingested into an in-memory store) or an existing store (read-only).

    `paths`: files, folders, globs or '-' (str or `pathlib.Path`, a sequence or one alone);
    `db`: a store's path instead. `settings` is used as given (default: every identifier must
    be kept); `lexkeep.audit.settings.resolve` reads the environment and settings file.

    One lexkeep JSONL file takes the DuckDB fast path (audit/fastload.py) unless `fast` is
    False or `input_format` forces a format; anything it cannot reproduce exactly goes through
    the normal ingest. `input_format` (a format name) reads every file as that format, as
    `lexkeep ingest --input-format` does.
    `on_progress(n)` is told the bytes of trace input read; `on_phase(text)` what the audit
    does now, when that changes (a progress bar's description).
    """
    phase = on_phase or (lambda text: None)
    settings = settings or AuditSettings()
    paths = path_list(paths)
    db = None if db is None else os.fspath(db)
    if skip_invalid and not paths:
        raise ConfigError(
            "skip_invalid=True only applies when auditing trace files (paths=)",
            wording="audit.skip_invalid_without_paths",
        )
    if input_format is not None and not paths:
        raise ConfigError(
            "input_format only applies when auditing trace files (paths=)",
            hint="a store's files were read at ingest: ingest_paths(store, paths, format=...)",
            wording="audit.input_format_without_paths",
        )
    if paths and db:
        raise ConfigError(
            "give paths or db, not both",
            hint="run_audit(paths=[...]) audits trace files, run_audit(db=...) a store",
            wording="audit.paths_and_db",
        )
    if paths:
        loaded_rules = _load_rules(rules)
        report = None
        # One walk: what it finds is what is read (a file written after it is not).
        files = expand_paths(list(paths))
        if not files:
            raise _no_traces(paths, ())
        if input_format is not None:
            get_reader(input_format)  # an unknown format fails before any file is read
        if fast and len(files) == 1 and input_format is None:
            with Store.open(None, memory_limit=AUDIT_MEMORY_LIMIT) as store:
                phase("loading the file (DuckDB)")
                loaded = fast_load(
                    store, files[0][0], loaded_rules, on_phase=phase, on_progress=on_progress
                )
                if loaded:
                    phase("auditing identifiers")
                    with LineCheck(files[0][0]) as check:
                        report = audit_store(store, settings, inputs=tuple(paths), of_files=True)
                        if not check.passed():
                            # A line the reader reads otherwise: the normal ingest decides.
                            report = None
                        elif loaded.by_content and check.empty_lines():
                            # Rows were numbered among non-empty lines: number them as the
                            # file's lines, and audit again (rare: the check ends after the
                            # audit, and most files have no empty line).
                            report = None  # its findings go before the second audit's come
                            renumber_lines(store, check.empty_lines())
                            report = audit_store(
                                store, settings, inputs=tuple(paths), of_files=True
                            )
        if report is None:
            phase("reading traces")
            with Store.open(None, memory_limit=AUDIT_MEMORY_LIMIT) as store:
                # Files, folders (walked; non-trace files skipped) and globs, as `lexkeep ingest`.
                counts = ingest_paths(
                    store,
                    list(paths),
                    format=input_format,
                    skip_invalid=skip_invalid,
                    rules=loaded_rules,
                    on_progress=on_progress,
                    lean=True,  # the audit reads user text, tool calls and boundaries only
                    on_phase=phase,
                    files=files,
                )
                if all(c.status in ("unrecognised", "empty") for c in counts):
                    # A gate pointed at the wrong folder (or at files not written yet) must
                    # not pass on nothing.
                    raise _no_traces(paths, counts)
                phase("auditing identifiers")
                report = audit_store(store, settings, inputs=tuple(paths), of_files=True)
                report = _with_incomplete_documents(report, counts)
                report = _with_unknown_records(report, counts)
    else:
        if rules:
            raise ConfigError(
                "rules only applies when auditing trace files (paths=)",
                hint="a store's identifiers were extracted at ingest; re-extract them with"
                " lexkeep.core.sidecar.reindex_path(db, load_rules(rules))",
                wording="audit.rules_without_paths",
                fields={"db": db or "FILE", "rules": rules},
            )
        if db is None:
            raise ConfigError(
                "nothing to audit",
                hint="run_audit(paths=[...]) for trace files, or run_audit(db=...) for a store",
                wording="audit.nothing",
            )
        with Store.open(db, read_only=True) as store:
            phase("auditing identifiers")
            report = audit_store(store, settings, inputs=(db,))
    return redact(report) if settings.redact else report


def _with_incomplete_documents(report: AuditReport, counts: Sequence[FileCounts]) -> AuditReport:
    """`report` with a note when JSON documents were still being written (read with
    --skip-invalid): only their values complete so far were audited; one when JSONL files
    end in a line still being written: only their complete lines were; and one when files
    had nothing complete yet: none of them was."""
    documents = [c.path for c in counts if c.truncated_document and c.status != "empty"]
    lines = [
        (c.path, c.truncated_line) for c in counts if c.truncated_last_line and c.status != "empty"
    ]
    notes = _still_being_written_notes(documents, lines)
    read = [c for c in counts if c.status != "empty"]
    notes += _crash_notes(
        [(c.path, c.nul_tail) for c in read if c.nul_tail is not None],
        [(c.path, c.nul_gaps[0][:2]) for c in read if c.nul_gaps],
    )
    # Files of which nothing was read, not even one value or line (a document cut before its
    # first value ends, a file whose only line is not complete): out of the audit, and said.
    waiting = [(c.path, why) for c in counts if (why := nothing_yet(c)) is not None]
    if waiting:
        notes.append(
            f"{len(waiting)} file(s) had no complete record yet and are not in this audit"
            f" (first: {waiting[0][0]}: {waiting[0][1]})"
        )
    # Files a crash left with nothing readable (NUL bytes only, or a first line it cut).
    notes += _crash_left_notes([(c.path, why) for c in counts if (why := crash_left(c))])
    if not notes:
        return report
    return dataclasses.replace(report, notes=(*report.notes, *notes))


def _crash_left_notes(crashed: Sequence[tuple[str, str]]) -> list[str]:
    """The note on the files a crash left with nothing readable (`crashed`: file, what it
    holds, as crash_left_text says it), none when there are none."""
    if not crashed:
        return []
    return [
        f"{len(crashed)} file(s) hold nothing a crash left readable and are not in this"
        f" audit (first: {crashed[0][0]}: {crashed[0][1]})"
    ]


def _still_being_written_notes(
    documents: Sequence[str], lines: Sequence[tuple[str, int | None]]
) -> list[str]:
    """The notes on the JSON `documents` and on the files ending in `lines` (file, the line's
    number when known) still being written when they were read, in that order."""
    notes = []
    if documents:
        notes.append(
            f"{len(documents)} JSON document(s) were still being written"
            f" (first: {documents[0]}); only their values complete so far are in this audit"
        )
    if lines:
        # FILE:LINE of that line, so it can be opened (the line is known once the file is read).
        path, line = lines[0]
        first = path + (f":{line}" if line else "")
        notes.append(
            f"{len(lines)} file(s) end in a line still being written (first: {first});"
            " only their complete lines are in this audit"
        )
    return notes


def _crash_notes(
    tails: Sequence[tuple[str, tuple[int, int]]], gaps: Sequence[tuple[str, tuple[int, int]]]
) -> list[str]:
    """The notes on files ending in NUL bytes a crash left (`tails`: file, (NUL bytes, the line
    after which they start)) and on files holding such bytes with lines after them that a
    restarted writer appended (`gaps`: file, the first such run), in that order."""
    notes = []
    if tails:
        path, (nuls, after) = tails[0]
        notes.append(
            f"{len(tails)} file(s) end in NUL bytes, as a crash leaves (first: {path}:"
            f"{after + 1}, {nuls} NUL bytes after line {after}); those bytes are not read, only"
            " the complete lines before them are in this audit"
        )
    if gaps:
        path, (nuls, after) = gaps[0]
        notes.append(
            f"{len(gaps)} file(s) hold NUL bytes a crash left, then lines written after them"
            f" (first: {path}:{after + 1}, {nuls} NUL bytes after line {after}); the NUL bytes"
            " are not read, the lines after them are in this audit"
        )
    return notes


def _with_unknown_records(report: AuditReport, counts: Sequence[FileCounts]) -> AuditReport:
    """`report` with a note when records of a type their file's reader does not know were
    skipped (`unknown_type`: a misspelt lexkeep type, a newer agent build's line, another
    format pasted into the file): whatever they held was not audited."""
    files = [c for c in counts if c.skipped.get("unknown_type")]
    if not files:
        return report
    total = sum(c.skipped["unknown_type"] for c in files)
    first = files[0]
    note = _unknown_records_note(
        total, len(files), first.path, first.unknown_type_line, first.format
    )
    return dataclasses.replace(report, notes=(*report.notes, note))


def _unknown_records_note(total: int, files: int, path: str, line: int | None, fmt: str) -> str:
    """The note on `total` records of an unknown type in `files` files, the first in `path`
    at `line` (FILE:LINE, so it can be opened), read as `fmt`."""
    where = path + (f":{line}" if line else "")
    return (
        f"{total} record(s) of a type their file's reader does not know were skipped"
        f" (unknown_type) in {files} file(s) (first: {where}, read as {fmt});"
        " whatever they held is not in this audit"
    )


# Each input's latest ingest_runs row (its count covers the whole file read so far; every
# standard input is an input of its own), in the order the inputs were first ingested.
_LATEST_RUNS_SQL = """
SELECT path, format, {columns}
FROM ingest_runs
QUALIFY path = '-' OR row_number() OVER (PARTITION BY path ORDER BY id DESC) = 1
ORDER BY min(id) OVER (PARTITION BY path), id
"""


def _stored_unknown_records(store: Store, shown: Mapping[str, str]) -> list[str]:
    """The notes `audit FILE` gives on records of an unknown type (_with_unknown_records),
    from what ingest kept of them (migration 005), and one on the files it kept nothing of
    (ingested by an older lexkeep, or a store not migrated since): whether they held any is
    not known."""
    have = {name for name, _ in store.columns("ingest_runs")}
    columns = (
        "unknown_types, first_unknown_type_line"
        if {"unknown_types", "first_unknown_type_line"} <= have
        else "NULL, NULL"
    )
    rows = store.con.execute(_LATEST_RUNS_SQL.format(columns=columns)).fetchall()
    notes = []
    found = [row for row in rows if row[2]]
    if found:
        path, fmt, _, line = found[0]
        total = sum(row[2] for row in found)
        notes.append(_unknown_records_note(total, len(found), shown[path], line, fmt))
    not_known = [row for row in rows if row[2] is None]
    if not_known:
        notes.append(
            f"whether {len(not_known)} file(s) held records of a type their reader does not"
            f" know is not known (first: {shown[not_known[0][0]]}): they were ingested before"
            " lexkeep kept that count; ingest them into a new store to count them"
        )
    return notes


def _stored_still_being_written(store: Store, shown: Mapping[str, str]) -> list[str]:
    """The notes `audit FILE` gives on files still being written (_with_incomplete_documents),
    from each file's latest ingest (migration 005): a file ingested again once whole has none.
    Rows written before ingest kept this (or a store not migrated since) say nothing of it."""
    have = {name for name, _ in store.columns("ingest_runs")}
    if not {"truncated_line", "truncated_document"} <= have:
        return []
    rows = store.con.execute(
        _LATEST_RUNS_SQL.format(columns="truncated_line, truncated_document")
    ).fetchall()
    documents = [shown[path] for path, _, _, cut in rows if cut]
    lines = [(shown[path], line) for path, _, line, _ in rows if line is not None]
    return _still_being_written_notes(documents, lines) + _stored_crash_notes(store, shown)


def _stored_crash_notes(store: Store, shown: Mapping[str, str]) -> list[str]:
    """The notes `audit FILE` gives on NUL bytes a crash left (_crash_notes), from each file's
    latest ingest (migration 007). Rows written before ingest kept them (or a store not
    migrated since) say nothing of them."""
    have = {name for name, _ in store.columns("ingest_runs")}
    if "nul_gaps" not in have:
        return []
    cut = "nul_tail_cut" if "nul_tail_cut" in have else "NULL"
    rows = store.con.execute(
        _LATEST_RUNS_SQL.format(
            columns="nul_tail_bytes, nul_tail_after_line, nul_gaps, first_nul_gap_bytes,"
            f" first_nul_gap_after_line, bytes_consumed, {cut}"
        )
    ).fetchall()
    # A file a crash left with nothing readable: its NUL bytes start its first line, and its
    # row consumed nothing (migration 009); the others' NUL bytes follow lines that were read.
    empty = [r for r in rows if r[2] is not None and r[3] == 0 and r[7] == 0]
    tails = [(shown[r[0]], (r[2], r[3])) for r in rows if r[2] is not None and r not in empty]
    gaps = [(shown[r[0]], (r[5], r[6])) for r in rows if r[4]]
    crashed = [(shown[r[0]], crash_left_text(r[2], r[8])) for r in empty]
    return _crash_notes(tails, gaps) + _crash_left_notes(crashed)


def _no_traces(paths: Sequence[str], counts: Sequence[FileCounts]) -> InputError:
    """Nothing to audit in `paths`: the files found (`counts`) are empty, have nothing
    complete to read yet (why, as the ingest says it, for the first of them) or no trace."""
    where = ", ".join(paths)
    files = len(counts)
    empty = sum(c.status == "empty" for c in counts)
    waiting = [(c.path, why) for c in counts if (why := nothing_yet(c)) is not None]
    writing = len(waiting)
    crashed = [(c.path, why) for c in counts if (why := crash_left(c)) is not None]
    if files == empty and files:
        if writing == files == 1:
            path, why = waiting[0]
            found = f"1 file(s) found, none with a complete record yet: {path}: {why}"
        elif writing == files:
            path, why = waiting[0]
            found = f"{files} file(s) found, none with a complete record yet (first: {path}: {why})"
        elif len(crashed) == files == 1:
            path, why = crashed[0]
            found = f"1 file(s) found, none with a record: {path}: {why}"
        elif len(crashed) == files:
            path, why = crashed[0]
            found = f"{files} file(s) found, none with a record (first: {path}: {why})"
        elif writing or crashed:
            kinds = ["empty"]
            if writing:
                kinds.append(f"still being written ({writing})")
            if crashed:
                kinds.append(f"left empty by a crash ({len(crashed)})")
            found = f"{files} file(s) found, all of them {', '.join(kinds[:-1])} or {kinds[-1]}"
        elif files == 1 and counts[0].header_only:  # standard input: read once, never again
            found = f"1 file(s) found, none with a record: {counts[0].path}: {HEADER_ONLY}"
        else:
            found = f"{files} file(s) found, all of them empty"
    elif files:
        found = f"{files} file(s) found, none of them a trace lexkeep reads"
        if empty:
            found += f" ({empty} empty)"
    else:
        found = "no files found"
    return InputError(
        f"no trace files in {where} ({found})",
        hint="point the audit at trace files or folders holding them; formats: "
        + ", ".join(f.value for f in Format),
    )


def _load_rules(rules: str | None) -> Any:
    if rules is None:
        return None
    from lexkeep.core.rules import load_rules  # imported only when --rules is given

    return load_rules(rules)


def audit_store(
    store: Store,
    settings: AuditSettings,
    inputs: tuple[str, ...] = (),
    *,
    of_files: bool = False,
) -> AuditReport:
    """Run the audit over everything in `store` and judge it against the gate settings.

    `of_files`: `store` is an audit's private store of trace files, which holds only what the
    audit reads (its notes say so where that makes a count differ from a store's).
    """
    with gc_paused():
        return _audit_store(store, settings, inputs, of_files)


# DuckDB's share of an audit of trace files (its private store spills beyond it): the findings
# live in Python next to it, and the whole process should stay within about 1.5 GB.
AUDIT_MEMORY_LIMIT = "512MB"

# Identifiers audited at a time: the Python side (rows, probes, token forms) holds one batch,
# so an audit's memory does not grow with the dump beyond its findings.
AUDIT_BATCH = 100_000


def _audit_store(
    store: Store, settings: AuditSettings, inputs: tuple[str, ...], of_files: bool
) -> AuditReport:
    con = store.con
    # lexkeep shows its own progress on stderr; DuckDB's bar would land on a terminal's stdout.
    con.execute("SET enable_progress_bar = false")
    con.execute(_AUDIT_IDS_SQL)
    try:
        _add_ascii_escapes(store)
        total_ids = con.execute("SELECT count(*) FROM lexkeep_audit_ids").fetchone()[0]
        findings = Findings()  # beyond KEEP_IN_MEMORY, on disk until rendered
        # Source files as the report names them (relative to the current folder when a store
        # on disk holds them under it: core.paths).
        shown = store.shown_paths()
        for lo in range(0, total_ids, AUDIT_BATCH):
            findings.extend_flat(_audit_batch(store, lo, min(lo + AUDIT_BATCH, total_ids), shown))
        conv_rows = con.execute(
            """
            SELECT c.id, c.source_file, c.source_line, count(b.id)
            FROM conversations c JOIN boundaries b ON b.conversation_id = c.id
            GROUP BY ALL ORDER BY c.id
            """
        ).fetchall()
        conv_rows = [(cid, shown[file], line, n) for cid, file, line, n in conv_rows]
        total = con.execute("SELECT count(*) FROM conversations").fetchone()[0]
        # User messages before a boundary that the sidecar never scanned (e.g. a store
        # ingested before identifier extraction existed): their identifiers are unknown.
        # The count, and the first such message's FILE:LINE so the user can look at it.
        unscanned, first_unscanned = _count_and_first(
            con,
            """
            SELECT count(*) OVER (), m.source_file, m.source_line FROM messages m
            WHERE m.kind = 'user_text'
              AND m.position < (SELECT max(b.position) FROM boundaries b
                                WHERE b.conversation_id = m.conversation_id)
              AND NOT EXISTS (SELECT 1 FROM identifier_scans s WHERE s.message_id = m.id)
            ORDER BY m.source_file, m.source_line LIMIT 1
            """,
            [],
            shown,
        )
        # A scan that ran out of its time budget may have stopped before some identifiers:
        # those are in no finding at all, so the report must say how many messages that hit.
        # The count, and the first such message's FILE:LINE so the user can look at it.
        incomplete, first_incomplete = _count_and_first(
            con,
            """
            SELECT count(*) OVER (), m.source_file, m.source_line
            FROM messages m JOIN identifier_scans s ON s.message_id = m.id
            WHERE m.kind = 'user_text' AND NOT s.complete
              AND m.position < (SELECT max(b.position) FROM boundaries b
                                WHERE b.conversation_id = m.conversation_id)
            ORDER BY m.source_file, m.source_line LIMIT 1
            """,
            [],
            shown,
        )
        # Lines dropped by --skip-invalid may have held user identifiers or tool calls: a
        # report that passes without saying so would overstate what was checked.
        # The count, and the first such line's FILE:LINE so the user can open and fix it.
        skipped, first_skipped = _count_and_first(
            con,
            "SELECT count(*) OVER (), path, line FROM ingest_errors WHERE reason <> ?"
            " ORDER BY ingest_run_id, line LIMIT 1",
            [ID_CONFLICT],
            shown,
        )
        # Records left out for an id their conversation held with other content: not invalid,
        # but not in the store either (recorded by the ingest, also one of an earlier run).
        # Those the audit reads (user messages, tool calls, compactions) are missing from it;
        # the others (tool results, other messages) it never reads.
        conflicts = left_out(store, read=True)
        unread_conflicts = left_out(store, read=False)
        # An audit of files says these from its own reading of them (_with_incomplete_documents,
        # _with_unknown_records).
        stored_notes = (
            []
            if of_files
            else _stored_still_being_written(store, shown) + _stored_unknown_records(store, shown)
        )
    finally:
        con.execute("DROP TABLE IF EXISTS lexkeep_audit_ids")
    report = build_report(
        findings,
        conv_rows,
        total,
        settings,
        inputs,
        unscanned=unscanned,
        first_unscanned=first_unscanned,
        incomplete_scans=incomplete,
        first_incomplete_scan=first_incomplete,
        skipped_lines=skipped,
        first_skipped_line=first_skipped,
        left_out=conflicts,
        left_out_unread=unread_conflicts,
        of_files=of_files,
    )
    if stored_notes:
        report = dataclasses.replace(report, notes=(*report.notes, *stored_notes))
    return report


def _audit_batch(store: Store, lo: int, hi: int, shown: Mapping[str, str]) -> list[tuple[Any, ...]]:
    """The findings of identifiers lo <= rid < hi, flat (each identifier is judged on its
    own); `shown` maps a stored source file to the name the report gives it."""
    batch = _Batch(lo, _audit_rows(store, lo, hi))
    kept, before = _first_kept(store, batch)
    near = _near_misses(store, batch, [r[0] for r in batch.rows if r[0] not in kept])
    return _findings(batch.rows, kept, near, before, _boundary_texts(store, lo, hi), shown)


def build_report(
    findings: Sequence[Finding],
    conv_rows: list[tuple[str, str, int, int]],
    conversations_total: int,
    settings: AuditSettings,
    inputs: tuple[str, ...] = (),
    *,
    unscanned: int = 0,
    first_unscanned: str | None = None,
    incomplete_scans: int = 0,
    first_incomplete_scan: str | None = None,
    skipped_lines: int = 0,
    first_skipped_line: str | None = None,
    left_out: tuple[int, str | None] = (0, None),
    left_out_unread: tuple[int, str | None] = (0, None),
    of_files: bool = False,
) -> AuditReport:
    """Aggregate findings per conversation, per kind and overall, and judge the gate.

    `left_out`: records the audit reads that ingests left out for an id their conversation
    held with other content (how many, the first); `left_out_unread`: those it does not read.
    `of_files`: the store is an audit's private store of trace files (see audit_store).
    """
    # Plain tallies first: building frozen Counts per finding would copy 60k+ objects.
    tally: Counter[tuple[str, str, str]] = Counter(tally_keys(findings))
    conv_tally: dict[str, Counter[str]] = defaultdict(Counter)
    kind_tally: dict[str, Counter[str]] = defaultdict(Counter)
    for (cid, kind, verdict), n in tally.items():
        conv_tally[cid][verdict] += n
        kind_tally[kind][verdict] += n
    per_conv = {cid: _counts(t) for cid, t in conv_tally.items()}
    per_kind = {kind: _counts(t) for kind, t in kind_tally.items()}
    overall: Counter[str] = Counter()
    for t in kind_tally.values():
        overall.update(t)
    totals = _counts(overall)
    conversations = tuple(
        ConversationResult(cid, Source(file, line), n, per_conv.get(cid, Counts()))
        for cid, file, line, n in conv_rows
    )
    kinds = tuple(KindResult(k, per_kind[k]) for k in sorted(per_kind))
    notes = []
    if totals.unverified:
        # Where the first was typed (FILE:LINE), in the findings' order, so it can be opened.
        first = next(
            (f"{row[5]}:{row[6]}" for row in flat_rows(findings) if row[4] == "unverified"), None
        )
        notes.append(
            f"{totals.unverified} identifier(s) unverified"
            + (f" (first: {first})" if first else "")
            + ": their message's identifier scan ran out of time, so they are never reported"
            " missing and stay outside the ratio"
        )
    if unscanned:
        notes.append(
            f"{unscanned} user message(s) before a boundary were never scanned for identifiers"
            + (f" (first: {first_unscanned})" if first_unscanned else "")
            + "; re-ingest the traces to audit them"
        )
    if incomplete_scans:
        notes.append(
            f"{incomplete_scans} user message(s) before a boundary were scanned only in part"
            + (f" (first: {first_incomplete_scan})" if first_incomplete_scan else "")
            + " (the scan's time budget ran out, or the text is longer than the rules' max_chars);"
            " identifiers the scan did not reach are not in this audit"
        )
    if skipped_lines:
        notes.append(
            f"{skipped_lines} invalid trace line(s) were skipped by --skip-invalid"
            + (f" (first: {first_skipped_line})" if first_skipped_line else "")
            + "; whatever they held is not in this audit"
        )
    if left_out[0]:
        note = (
            f"{left_out[0]} record(s) the audit reads (user messages, tool calls, compactions)"
            " were left out because their conversation already held their id with other"
            f" content (first: {left_out[1]}); whatever they held is not in this audit"
        )
        if of_files and not left_out_unread[0]:
            # Why `lexkeep ingest` (and audit --db) may count more over the same files: the
            # private store holds no message of another kind, so no id one of them held.
            note += (
                " (an audit of files stores only user messages, tool calls and compactions, so"
                " it counts only records left out for an id one of those held: a user message"
                " under the id of an earlier message of another kind is audited here, where"
                " lexkeep ingest leaves it out and audit --db counts it; tool results and other"
                " messages left out are counted by lexkeep ingest and stats)"
            )
        notes.append(note)
    if left_out_unread[0]:
        notes.append(
            f"{left_out_unread[0]} other record(s) were left out because their conversation"
            f" already held their id with other content (first: {left_out_unread[1]}): tool"
            " results or messages other than users' own text, which the audit does not read"
        )
    if not totals.audited:
        # Say which of the three reasons it is: a CI job pointed at the wrong folder passes
        # too, and "no identifier typed before a boundary" would hide that nothing was read.
        if not conversations_total:
            reason = "the input holds no conversations"
        elif not conv_rows:
            reason = (
                f"none of the {conversations_total} conversation(s) crosses a compaction boundary"
            )
        else:
            reason = "no identifier was typed before a compaction boundary"
        notes.append(f"nothing audited: {reason}")
    return AuditReport(
        findings=findings,
        conversations=conversations,
        kinds=kinds,
        totals=totals,
        distribution=distribution(conversations),
        conversations_total=conversations_total,
        gate=judge(totals, settings),
        inputs=inputs,
        notes=tuple(notes),
    )


def _counts(tally: Counter[str]) -> Counts:
    return Counts(
        kept=tally["kept"],
        altered=tally["altered"],
        missing=tally["missing"],
        unverified=tally["unverified"],
    )


def judge(totals: Counts, settings: AuditSettings) -> Gate:
    """The gate: ratio >= min_ratio (nothing audited passes) and no --fail-on verdicts."""
    reasons = []
    ratio = totals.ratio
    if ratio is not None and ratio < settings.min_ratio:
        reasons.append(
            f"ratio {ratio:.3f} ({totals.kept}/{totals.audited} kept) is below"
            f" {settings.shown('min_ratio', settings.min_ratio)}"
        )
    for verdict in settings.fail_on:
        n = getattr(totals, Verdict(verdict).value)
        if n:
            reasons.append(f"{n} {verdict} identifier(s) and {settings.shown('fail_on', verdict)}")
    return Gate(
        min_ratio=settings.min_ratio,
        fail_on=settings.fail_on,
        exit_zero=settings.exit_zero,
        passed=not reasons,
        reasons=tuple(reasons),
    )


# -- the steps --------------------------------------------------------------------------------


def _add_ascii_escapes(store: Store) -> None:
    """For non-ASCII values, the form an ASCII-only JSON writer (json.dumps) leaves in raw text."""
    rows = store.con.execute(
        "SELECT rid, value FROM lexkeep_audit_ids WHERE NOT regexp_matches(value, '^[ -~]*$')"
    ).fetchall()
    if rows:
        store.con.execute(
            "UPDATE lexkeep_audit_ids a SET value_ascii = e.escaped"
            " FROM (SELECT unnest(?) AS rid, unnest(?) AS escaped) e WHERE a.rid = e.rid",
            [[r for r, _ in rows], [json.dumps(v)[1:-1] for _, v in rows]],
        )


@dataclass(frozen=True, slots=True)
class _Batch:
    """Rows of lexkeep_audit_ids with lo <= rid < lo + len(rows); rows[rid - lo] is rid's."""

    lo: int
    rows: list[_Row]

    @property
    def hi(self) -> int:
        return self.lo + len(self.rows)

    def row(self, rid: int) -> _Row:
        return self.rows[rid - self.lo]


def _audit_rows(store: Store, lo: int, hi: int) -> list[_Row]:
    """The audited identifiers with lo <= rid < hi, in rid order (rids are 0..n-1)."""
    return store.con.execute(
        """
        SELECT rid, conversation_id, message_id, kind, value, complete, m_file, m_line,
               boundary_id, bkind, b_file, b_line, m_time
        FROM lexkeep_audit_ids WHERE rid >= ? AND rid < ? ORDER BY rid
        """,
        [lo, hi],
    ).fetchall()


def _stream(result: Any, size: int = 4096) -> Iterator[tuple]:
    """Rows of a query in chunks: a whole fetchall() of arguments grows with the dump."""
    while rows := result.fetchmany(size):
        yield from rows


def _first_kept(store: Store, batch: _Batch) -> tuple[dict[int, _Call], dict[int, _Call]]:
    """rid -> the first call after the boundary that keeps the value verbatim, and rid -> the
    first such call before it."""
    after: dict[int, _Call] = {}
    before: dict[int, _Call] = {}
    leaves: dict[str, list[str]] = {}  # one decode per call, shared by identifiers
    keys: dict[str, list[str]] = {}  # the same for object keys, decoded when first asked
    conversation = None
    for rid, is_after, call_id, name, raw, kind, file, line, sure in _stream(
        store.con.execute(_FIRST_SQL, {"lo": batch.lo, "hi": batch.hi})
    ):
        found = after if is_after else before
        if rid in found:
            continue
        if not sure:  # SQL could not tell: decode and check, as the definition says
            row = batch.row(rid)
            if row[1] != conversation:  # rows come conversation by conversation
                conversation = row[1]
                leaves.clear()
                keys.clear()
            got = leaves.get(call_id)
            if got is None:
                got = leaves[call_id] = decode_arguments(raw, kind)
            value = row[4]
            if not any(is_kept(value, leaf) for leaf in got):
                if not is_key_name(value):
                    continue
                names = keys.get(call_id)
                if names is None:
                    names = keys[call_id] = decode_keys(raw, kind)
                if not any(is_kept(value, name) for name in names):
                    continue
        found[rid] = (call_id, name, file, line)
    return after, before


def _near_misses(store: Store, batch: _Batch, rids: list[int]) -> dict[int, tuple[NearMiss, _Call]]:
    """rid -> the closest near miss (earliest call on ties) among calls after the boundary.

    `rids` are the identifiers not kept. Each candidate call is tokenised once, for all the
    identifiers it may hold a near miss of; calls come in position order, so keeping the first
    strictly better miss gives the earliest call on ties.
    """
    probe_rids: list[int] = []
    probes: list[str] = []
    expected: dict[str, _Expected] = {}  # per distinct value: its forms, pieces and probes
    dated: dict[tuple[str, str | None], _Expected] = {}  # ... of a date typed without a year
    wanted: dict[int, _Expected] = {}  # per rid
    tested: dict[int, _Expected] = {}  # rids whose near misses hold some pieces (_near_grams)
    for rid in rids:
        row = batch.row(rid)
        want = expected.get(row[4])
        if want is None:
            want = expected[row[4]] = _Expected.of(row[4])
        if want.date is not None and want.date[0] is None:
            # The time it was typed decides which year such a date means (core.nearmiss).
            key = (row[4], row[12])
            day = dated.get(key)
            if day is None:
                day = dated[key] = want._replace(when=typed_day(row[12]))
            want = day
        wanted[rid] = want
        for probe in _skeleton_probes(want.skeleton):  # near_probes(value)
            probe_rids.append(rid)
            probes.append(probe)
        if want.date is not None:
            probe_rids.append(rid)
            probes.append(_date_probe(want.date))
        elif want.near_needed:
            tested[rid] = want
    if not probe_rids:
        return {}
    best: dict[int, tuple[NearMiss, _Call]] = {}
    best_key: dict[int, tuple[int, int]] = {}
    settled: set[int] = set()  # rids with a case miss: no later call can do better
    # Folded forms of a token string are computed once per audit.
    forms: dict[str, _Token] = {}
    result = store.con.execute(
        _NEAR_SQL, {"rids": probe_rids, "probes": probes, "lo": batch.lo, "hi": batch.hi}
    )
    for call_id, name, raw, kind, file, line, call_rids in _stream(result):
        if raw.isascii() and "\\" not in raw and "\v" not in raw:
            # Plain ASCII: the near miss of a value holds enough of its pieces (_near_grams).
            holds = raw.encode().lower().translate(None, _FOLDED_BYTES).decode().__contains__
            call_rids = [
                rid
                for rid in call_rids
                if (want := tested.get(rid)) is None
                or sum(map(holds, want.near_grams)) >= want.near_needed
            ]
            if not call_rids:
                continue
        leaves = decode_arguments(raw, kind)
        # Each distinct token once, in the order of its first occurrence: a repeat cannot be a
        # nearer miss than the token's first occurrence (the first of the nearest wins), and a
        # long argument (a file written whole) repeats the same few words a million times.
        tokens = list(dict.fromkeys(_leaf_tokens(leaves, forms)))
        if not tokens:
            continue
        runs: _GroupedLeaves | None = _GroupedLeaves(leaves)
        if not runs.found():
            runs = None  # no grouped run in any argument: no grouped near miss to look for
        for rid in call_rids:
            if rid in settled:
                continue
            miss = fast_best_near_miss(wanted[rid], tokens, runs)
            if miss is None:
                continue
            key = (_RANK[miss.difference], miss.distance)
            old = best_key.get(rid)
            if old is None or key < old:
                best_key[rid] = key
                best[rid] = (miss, (call_id, name, file, line))
                if key == (0, 0):
                    settled.add(rid)
    return best


# A token of a tool argument: (text, fold(text), skeleton(text)).
_Token = tuple[str, str, str]


class _GroupedLeaves:
    """The grouped token runs (`core.nearmiss.grouped_runs`) of a call's argument strings
    that may hold one of the needles (the value's skeleton, or pieces that any edit of it
    leaves whole), in order. Found when first asked for: most identifiers find their near
    miss, or none, without them, and most calls hold no run at all. In ASCII strings only
    the runs whose join holds a needle are built and given: `grouped_near_miss` and
    `grouped_edit_search` pass over the others, and keep the order of those left."""

    __slots__ = ("built", "items", "leaves")

    def __init__(self, leaves: list[str]) -> None:
        self.leaves = leaves
        # Per string with runs, in order: (its index, the spans of its runs with each one's
        # join as bytes, for ASCII; None and all its runs, for a string that is not ASCII).
        self.items: list[tuple[int, list[tuple[int, int, bytes]] | None, list[GroupedRun]]] = []
        self.built: dict[tuple[int, int], GroupedRun] | None = None  # None: items not found yet

    def _find(self) -> None:
        for index, leaf in enumerate(self.leaves):
            if leaf.isascii():
                spans = ascii_run_spans(leaf)
                if spans:
                    # A run's join: its text lower-cased without white space, brackets and
                    # -_.:/#\+ (ascii_grouped_run).
                    lowered = leaf.encode().lower()
                    joins = [(a, b, lowered[a:b].translate(None, _ASCII_BARE)) for a, b in spans]
                    self.items.append((index, joins, []))
            else:
                runs = grouped_runs(leaf)
                if runs:
                    self.items.append((index, None, runs))
        self.built = {}

    def found(self) -> bool:
        """Whether any argument string holds a grouped run."""
        if self.built is None:
            self._find()
        return bool(self.items)

    def __call__(
        self, needles: Sequence[str], grams: Sequence[bytes] = (), needed: int = 0
    ) -> list[GroupedRun]:
        """The runs whose join holds one of `needles`; none at all when `needed` > 0 and no
        such run is a string of ASCII whose join holds `needed` of `grams` (_edit_grams: then
        no span of any run is within the edit limit, and the edit search would find nothing)."""
        built = self.built
        if built is None:
            self._find()
            built = self.built
            assert built is not None
        if not self.items:
            return []
        # A needle not ASCII is in no ASCII join, in either form.
        keys = [needle.encode("utf-8", "surrogatepass") for needle in needles]
        chosen: list[tuple[int, list[tuple[int, int, bytes]] | None, int]] = []
        may_hold = needed <= 0
        for item, (_index, joins, _runs) in enumerate(self.items):
            if joins is None:
                chosen.append((item, None, 0))
                may_hold = True  # not ASCII: no test
                continue
            for number, (_start, _end, joined) in enumerate(joins):
                for key in keys:
                    if key in joined:
                        break
                else:
                    continue
                chosen.append((item, joins, number))
                if not may_hold:
                    held = 0
                    for gram in grams:
                        if gram in joined:
                            held += 1
                    may_hold = held >= needed
        if not may_hold:
            return []
        out: list[GroupedRun] = []
        for item, joins, number in chosen:
            index, _joins, runs = self.items[item]
            if joins is None:
                out.extend(runs)
                continue
            run = built.get((index, number))
            if run is None:
                start, end, _joined = joins[number]
                run = built[index, number] = ascii_grouped_run(self.leaves[index], start, end)
            out.append(run)
        return out


# ASCII white space (what `regex`'s \s matches there) and the separators of a skeleton.
_ASCII_BARE = b" \t\n\v\f\r-_.:/#\\+()"


def _call_tokens(raw: str, kind: str, forms: dict[str, _Token]) -> list[_Token]:
    """The tokens of a call's decoded arguments (`core.nearmiss.candidates`), with their forms."""
    return _leaf_tokens(decode_arguments(raw, kind), forms)


def _leaf_tokens(leaves: list[str], forms: dict[str, _Token]) -> list[_Token]:
    """The tokens of argument strings (`core.nearmiss.candidates`), with their forms."""
    out = []
    for leaf in leaves:
        if not leaf.isascii():
            for token in candidates(leaf):
                got = forms.get(token)
                if got is None:
                    got = forms[token] = (token, fold(token), skeleton(token))
                out.append(got)
            continue
        # ASCII text (most arguments): the same tokens and forms with `re` and str methods.
        # In ASCII, \p{L}\p{N} is [A-Za-z0-9], NFKC and the dash/invisible maps change nothing,
        # casefold() is lower(), and a token holds no whitespace nor parenthesis, so its
        # separators are -_.:/#\+.
        for token in _ASCII_TOKEN.findall(leaf):
            token = token.strip(_EDGE_PUNCT)
            if not token:
                continue
            got = forms.get(token)
            if got is None:
                folded = token.lower()
                skel = folded.encode().translate(None, _ASCII_SEPARATOR_BYTES).decode()
                skel = skel.lstrip("0")
                got = forms[token] = (token, folded, skel)
            out.append(got)
    return out


_ASCII_TOKEN = re.compile(r"[A-Za-z0-9\-_.:/#\\@+~]+")
# Deleting characters is several times faster on bytes than with str.translate (which looks
# every character up in a dict): ASCII text takes the bytes route.
_ASCII_SEPARATOR_BYTES = b"-_.:/#\\+()"


class _Expected(NamedTuple):
    """A value's forms for the near-miss search (a tuple: one is built per audited value)."""

    value: str
    folded: str
    skeleton: str
    pieces: tuple[tuple[str, int], ...]  # see _may_be_within
    sizes: frozenset[int]  # see _skeleton_sizes
    date: tuple[int | None, int, int] | None = None  # core.nearmiss.textual_date
    when: datetime.date | None = None  # the day it was typed (core.nearmiss.typed_day)
    grouped: bool = False  # core.nearmiss.may_be_grouped(skeleton)
    edited: bool = False  # core.nearmiss.may_be_edited(skeleton)
    grams: tuple[bytes, ...] = ()  # an edited ASCII skeleton's two-character pieces
    grams_needed: int = 0  # how many of them a grouped edit holds (_edit_grams; 0: no test)
    near_grams: tuple[str, ...] = ()  # an ASCII skeleton's pieces, when tested (_near_grams)
    near_needed: int = 0  # how many of them any near miss holds (_near_grams; 0: no test)

    @classmethod
    def of(cls, value: str) -> _Expected:
        """`value`'s forms (`when` is set apart, for a date typed without a year only)."""
        folded, skel = _value_forms(value)
        size = len(skel)
        pieces: tuple[tuple[str, int], ...] = ()
        if size >= 6:
            step = size // (3 if size < 12 else 5)
            pieces = tuple(
                [(skel[i : i + step], i) for i in range(0, step * (3 if size < 12 else 5), step)]
            )
        date = textual_date(value) if _DIGIT_IN.search(value) else None
        # may_be_grouped and may_be_edited: 4 and 6 characters or more, with an ASCII digit
        # and at least half ASCII digits.
        if skel.isascii():
            digits = size - len(skel.encode().translate(None, b"0123456789"))
        else:
            digits = size - len(skel.translate(_NO_ASCII_DIGITS))
        grouped = size >= 4 and digits > 0
        edited = size >= 6 and 2 * digits >= size
        # The pieces of _near_grams and _edit_grams, as text and as bytes.
        near: tuple[str, ...] = ()
        near_needed = 0
        grams: tuple[bytes, ...] = ()
        edit_needed = 0
        if size >= 4 and skel.isascii():
            near = tuple([skel[i : i + 2] for i in range(size - 1)])
            if date is None:
                near_needed = _grams_needed(size)
            if edited:
                grams = tuple([gram.encode() for gram in near])
                edit_needed = max(0, size - 1 - 3 * (1 if size < 12 else 2))
        return cls(
            value,
            folded,
            skel,
            pieces,
            _skeleton_sizes(size),
            date,
            None,
            grouped,
            edited,
            grams,
            edit_needed,
            near if near_needed else (),
            near_needed,
        )


def _edit_grams(want: str) -> tuple[tuple[bytes, ...], int]:
    """The two-character pieces of skeleton `want`, one per position (repeats kept), and how
    many of them any text within its edit limit (1 under 12 characters, else 2) holds.

    The q-gram lemma for the optimal-string-alignment distance: a substitution or a deletion
    breaks the 2 pieces that hold its character, an insertion the 1 it splits, a transposition
    the 3 that hold either character; every other piece stays whole and in the text. So a text
    within `limit` edits holds at least len(want) - 1 - 3 * limit of them (0: no test).
    """
    limit = 1 if len(want) < 12 else 2
    data = want.encode()
    grams = tuple(data[i : i + 2] for i in range(len(data) - 1))
    return grams, max(0, len(grams) - 3 * limit)


_NO_ASCII_DIGITS = str.maketrans("", "", "0123456789")
_DIGIT_IN = re.compile("[0-9]")


def _value_forms(value: str) -> tuple[str, str]:
    """(fold(value), skeleton(value)), without `unicodedata` and `regex` for plain ASCII.

    Printable ASCII without spaces: NFKC and the dash/invisible maps change nothing,
    casefold() is lower(), and the only separators are -_.:/#\\+().
    """
    if value.isascii() and value.isprintable() and " " not in value:
        folded = value.lower()
        skel = folded.encode().translate(None, _ASCII_SEPARATOR_BYTES).decode()
        return folded, skel.lstrip("0")
    return fold(value), skeleton(value)


@cache
def _skeleton_sizes(lw: int) -> frozenset[int]:
    """Skeleton lengths for which `_classify` can find a separator, truncation or edit miss.

    The same tests as `_classify` on the lengths alone (a case miss has equal folds, checked
    apart): a token whose skeleton length is not in here is no near miss unless its fold
    equals the value's.
    """
    if not lw:
        return frozenset()
    sizes = {lw}
    for lg in range(1, 2 * lw + 10):
        if lw >= 4 and lg >= 4:
            shorter, longer = min(lw, lg), max(lw, lg)
            if shorter / longer >= 0.6:
                sizes.add(lg)
        if lw >= 6 and abs(lw - lg) <= (1 if lw < 12 else 2):
            sizes.add(lg)
    return frozenset(sizes)


def _may_be_within(got: str, pieces: tuple[tuple[str, int], ...], limit: int) -> bool:
    """False only when `got` is surely more than `limit` edits from the skeleton of `pieces`.

    Pigeonhole: each edit (substitution, insertion, deletion, adjacent transposition) touches
    at most 2 of the 2*limit+1 disjoint pieces, so one piece is left whole, shifted by at most
    `limit` places. A C-speed `find` per piece spares most calls of the Python DP.
    """
    for piece, start in pieces:
        if got.find(piece, max(0, start - limit), start + len(piece) + limit) != -1:
            return True
    return False


def _count_and_first(
    con: duckdb.DuckDBPyConnection, sql: str, params: list[Any], shown: Mapping[str, str]
) -> tuple[int, str | None]:
    """Run `sql` (`count(*) OVER (), file, line … LIMIT 1`): how many rows, and the first
    one's FILE:LINE as the report shows files (None when there is none)."""
    row = con.execute(sql, params).fetchone()
    return (0, None) if row is None else (row[0], f"{shown[row[1]]}:{row[2]}")


def fast_best_near_miss(
    expected: _Expected,
    tokens: Sequence[_Token],
    runs: Callable[[Sequence[str]], list[GroupedRun]] | None = None,
) -> NearMiss | None:
    """`core.nearmiss.best_near_miss` over pre-tokenised, pre-folded argument text.

    Same answer (tests/test_audit_fastload.py checks it against the original): the first
    token with the lowest (difference rank, distance), or a value written in groups over
    several tokens (`runs`: the texts' `grouped_runs`, asked for only when such a near miss
    could still win; None when the texts hold no grouped run); it only skips work that
    cannot match.
    """
    best: NearMiss | None = None
    best_key = (9, 0)
    value, e_fold, want = expected.value, expected.folded, expected.skeleton
    want_len = len(want)
    low, high = 0.5 * want_len, 2.5 * want_len + 4
    sizes = expected.sizes
    date = expected.date
    for token, t_fold, got in tokens:
        # A date typed in words may come back as an ISO date (core.nearmiss.classify checks
        # that right after a case change, which cannot hold for a token of digits).
        miss = None if date is None else date_near_miss(date, token, expected.when)
        if miss is None:
            if want_len and not (low <= len(token) <= high):
                continue
            if len(got) not in sizes and t_fold != e_fold:
                continue  # cannot be a near miss: spare the call
            miss = _classify(value, e_fold, want, token, t_fold, got, expected.pieces)
            if miss is None:
                continue
        key = (_RANK[miss.difference], miss.distance)
        if key < best_key:
            best, best_key = miss, key
            if key[0] == 0:
                return best
    if runs is None or not expected.grouped:
        return best  # core.nearmiss.with_grouped would look no further
    return _with_grouped(best, expected, runs)


def _with_grouped(
    best: NearMiss | None,
    expected: _Expected,
    runs: Callable[[Sequence[str]], list[GroupedRun]],
) -> NearMiss | None:
    """`core.nearmiss.with_grouped` for a value that may be grouped, with the value's tests
    done once (`_Expected`) and no search of texts that hold none of the needles."""
    if best is not None and _RANK[best.difference] < _RANK[Difference.SEPARATOR]:
        return best
    value, want = expected.value, expected.skeleton
    found = runs((want,))
    grouped = grouped_near_miss(value, want, found) if found else None
    if grouped is not None and (best is None or _RANK[grouped.difference] < _RANK[best.difference]):
        return grouped
    if best is not None and _RANK[best.difference] <= _RANK[Difference.TRUNCATED]:
        return best  # a grouped truncation or edit would not rank before it
    if not expected.edited:
        return best  # no texts to split into runs
    pieces = [piece for piece, _offset in expected.pieces]  # edit_pieces(want)
    if isinstance(runs, _GroupedLeaves):  # it skips the runs when none may hold an edit
        found = runs(pieces, expected.grams, expected.grams_needed)
    else:
        found = runs(pieces)
    grouped = grouped_edit_search(value, want, found) if found else None
    if grouped is not None and (best is None or _RANK[grouped.difference] < _RANK[best.difference]):
        return grouped
    return best


_RANK = {
    Difference.CASE: 0,
    Difference.SEPARATOR: 1,
    Difference.DATE: 1,
    Difference.TRUNCATED: 2,
    Difference.EXTENDED: 2,
    Difference.EDIT: 3,
}


def _classify(
    value: str,
    e_fold: str,
    want: str,
    token: str,
    t_fold: str,
    got: str,
    pieces: tuple[tuple[str, int], ...],
) -> NearMiss | None:
    """`core.nearmiss.classify` with the folded forms given; cheap rejects before the DP."""
    if value == token:
        return None
    if e_fold == t_fold:
        return NearMiss(token, Difference.CASE, 0)
    if not want or not got:
        return None
    if want == got:
        return NearMiss(token, Difference.SEPARATOR, 0)
    lw, lg = len(want), len(got)
    if lw >= 4 and lg >= 4:
        shorter, longer = (want, got) if lw <= lg else (got, want)
        if len(shorter) / len(longer) >= 0.6 and (
            longer.startswith(shorter) or longer.endswith(shorter)
        ):
            kind = Difference.TRUNCATED if lg < lw else Difference.EXTENDED
            return NearMiss(token, kind, len(longer) - len(shorter))
    if lw >= 6:
        limit = 1 if lw < 12 else 2
        if abs(lw - lg) > limit or not _may_be_within(got, pieces, limit):
            return None
        distance = bounded_distance(want, got, limit)
        if distance <= limit:
            return NearMiss(token, Difference.EDIT, distance)
    return None


def near_probes(value: str) -> list[str]:
    """Short pieces of `skeleton(value)`, at least one of which survives any near miss of it.

    They are matched against the lower-cased argument text with the same separators removed.
    A case or separator change keeps every piece; a truncation or extension keeps the head or
    the tail (at least 60% of the value); an edit distance of 1 (6-11 characters) or 2 (12+)
    touches at most 2 or 4 adjacent pieces of 3 or 5 non-overlapping ones. A date typed in
    words also gets its ISO form (see `_date_probe`).
    """
    probes = _skeleton_probes(_value_forms(value)[1])
    date = textual_date(value)
    return probes if date is None else [*probes, _date_probe(date)]


# What _FOLDED_ARGS removes from the lower-cased arguments.
_FOLDED_BYTES = b"\t\n\f\r -_.:/#\\+()"


def _near_grams(want: str) -> tuple[tuple[str, ...], int]:
    """The two-character pieces of skeleton `want` (one per position), and how many of them
    the folded arguments (`_FOLDED_ARGS`) hold at least when a call's plain ASCII arguments
    (no escape, no vertical tab) hold a near miss of a value of that skeleton (0: no test).

    In such arguments every token's skeleton, and every grouped run's, lies whole in the folded
    text: a case or separator change, an extension and a grouped case or separator change hold
    every piece of `want`; a truncation the pieces of its part of at least 60% of `want` (and 4
    characters); an edit (alone or over grouped tokens) all but 3 per edit (_edit_grams). A
    date typed in words is not tested (its near miss is an ISO date), nor is a skeleton that
    is not ASCII.
    """
    if not want.isascii():
        return (), 0
    return tuple(want[i : i + 2] for i in range(len(want) - 1)), _grams_needed(len(want))


@cache
def _grams_needed(size: int) -> int:
    """_near_grams' count for a skeleton of `size` characters (the bounds of `_classify`)."""
    if size < 4:
        return 0
    shortest = next(n for n in range(4, size + 1) if n / size >= 0.6)  # a truncation's
    count = shortest - 1
    if size >= 6:
        count = min(count, size - 1 - 3 * (1 if size < 12 else 2))  # an edit's
    return max(count, 0)


def _date_probe(date: tuple[int | None, int, int]) -> str:
    """A date typed in words as its ISO date folded (20250305), or its month and day (0305)
    when no year was typed: a DATE near miss holds it."""
    year, month, day = date
    return ("" if year is None else f"{year:04d}") + f"{month:02d}{day:02d}"


def _skeleton_probes(skel: str) -> list[str]:
    if len(skel) <= 3:
        return [skel] if skel else []
    if len(skel) < 6:
        return list(dict.fromkeys([skel[:3], skel[-3:]]))
    pieces = 3 if len(skel) < 12 else 5
    size = max(2, len(skel) // pieces)
    probes = [skel[i * size : (i + 1) * size] for i in range(pieces)]
    probes.append(skel[-size:])
    return list(dict.fromkeys(probes))


def _boundary_texts(
    store: Store, lo: int, hi: int
) -> dict[str, tuple[str | None, tuple[str, ...]]]:
    rows = store.con.execute(
        """
        SELECT b.id, b.summary_text, b.kept_verbatim FROM boundaries b
        WHERE b.id IN (SELECT DISTINCT boundary_id FROM lexkeep_audit_ids
                       WHERE rid >= ? AND rid < ?)
        """,
        [lo, hi],
    ).fetchall()
    return {bid: (summary, tuple(kept or ())) for bid, summary, kept in rows}


def _findings(
    rows: list[_Row],
    kept: dict[int, _Call],
    near: dict[int, tuple[NearMiss, _Call]],
    before: dict[int, _Call],
    texts: dict[str, tuple[str | None, tuple[str, ...]]],
    shown: Mapping[str, str],
) -> list[tuple[Any, ...]]:
    """The batch's findings, flat (audit.report.FLAT_FIELDS): the report keeps them so, and
    the JSON report reads them so, without a Finding object each. `shown` gives each stored
    source file its name in the report (one shared string per file)."""
    out = []
    # Every row brings its own copy of strings that repeat across findings (conversation,
    # kind, file and tool names): one shared copy each keeps 700,000 findings ~100 MB smaller.
    intern = sys.intern
    kept_value = Verdict.KEPT.value
    altered_value = Verdict.ALTERED.value
    missing_value = Verdict.MISSING.value
    unverified_value = Verdict.UNVERIFIED.value
    for rid, cid, mid, kind, value, complete, m_file, m_line, bid, bkind, b_file, b_line, _ in rows:
        evidence = None
        c = kept.get(rid)
        if c is not None:
            verdict = kept_value
            evidence = (c[0], intern(c[1]), value, shown[c[2]], c[3], None, None)
        elif rid in near:
            miss, c = near[rid]
            verdict = altered_value
            evidence = (
                c[0],
                intern(c[1]),
                miss.found,
                shown[c[2]],
                c[3],
                miss.difference.value,
                miss.distance,
            )
        else:
            verdict = missing_value if complete else unverified_value
        summary, kept_verbatim = texts.get(bid, (None, ()))
        in_kept_verbatim = False
        for text in kept_verbatim:  # a loop, not any(genexpr): most findings have some
            if value in text and is_kept(value, text):
                in_kept_verbatim = True
                break
        out.append(
            (
                intern(cid),
                mid,
                intern(kind),
                value,
                verdict,
                shown[m_file],
                m_line,
                intern(bid),
                intern(bkind),
                shown[b_file],
                b_line,
                evidence,
                # `in` first: is_kept's own search, without a Python call when it fails.
                None if summary is None else value in summary and is_kept(value, summary),
                in_kept_verbatim,
                rid in before,
                complete,
            )
        )
    return out


# -- argument decoding ------------------------------------------------------------------------


# A value shaped like a key name: snake_case or SCREAMING_SNAKE (letters or digits joined by
# '_'), or camelCase (a lower-case start, then a capital): `cycle_id`, `MAX_RETRIES`, `cycleId`.
_KEY_NAME = re.compile(r"[A-Za-z][A-Za-z0-9]*(?:_[A-Za-z0-9]+)+|[a-z][a-z0-9]*(?:[A-Z][a-z0-9]*)+")


def is_key_name(value: str) -> bool:
    """Whether `value` is shaped like a key name (snake_case, SCREAMING_SNAKE, camelCase):
    only such values are also looked for among the object keys of tool arguments."""
    return len(value) <= 128 and _KEY_NAME.fullmatch(value) is not None


def decode_keys(raw: str, kind: str) -> list[str]:
    """The object keys of a tool call's JSON arguments, at every depth (none for free text
    or invalid JSON, whose raw text decode_arguments gives whole)."""
    if kind == ArgumentsKind.FREEFORM:
        return []
    try:
        value = orjson.loads(raw)
    except orjson.JSONDecodeError:
        try:
            value = json.loads(raw, parse_int=str, parse_float=str, parse_constant=str)
        except (ValueError, RecursionError):
            return []
    out: list[str] = []
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            out.extend(item)
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    return out


def decode_arguments(raw: str, kind: str) -> list[str]:
    """The strings a tool call's arguments hold: JSON string leaves, numbers as JSON text.

    Invalid JSON and free text are used raw; an argv array gives each element.
    """
    if kind == ArgumentsKind.FREEFORM:
        return [raw]
    try:
        value = orjson.loads(raw)
    except orjson.JSONDecodeError:
        try:  # orjson refuses what stdlib json reads (NaN, integers beyond 64 bits)
            value = json.loads(raw, parse_int=str, parse_float=str, parse_constant=str)
        except (ValueError, RecursionError):
            return [raw]
    leaves: list[str] = []
    if not _leaves(value, leaves):
        # A float's JSON text may differ from Python's (1.50 vs 1.5): re-read keeping the text.
        leaves = []
        _leaves(json.loads(raw, parse_float=str, parse_constant=str), leaves)
    return leaves


def _leaves(value: Any, out: list[str]) -> bool:
    """Collect string leaves (integers as their text); False when a float was seen."""
    if type(value) is dict:
        # The usual arguments: an object of strings and lists of strings, taken in one pass
        # (the same leaves in the same order as the walk below, which handles the rest).
        start = len(out)
        for item in value.values():
            kind = type(item)
            if kind is str:
                out.append(item)
            elif kind is list and all(type(x) is str for x in item):
                out.extend(item)
            else:
                del out[start:]
                return _walk_leaves(value, out)
        return True
    return _walk_leaves(value, out)


def _walk_leaves(value: Any, out: list[str]) -> bool:
    exact = True
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            out.append(item)
        elif isinstance(item, dict):
            stack.extend(reversed(list(item.values())))
        elif isinstance(item, list):
            stack.extend(reversed(item))
        elif isinstance(item, bool) or item is None:
            continue  # booleans and null hold no identifier
        elif isinstance(item, int):
            out.append(str(item))
        else:
            exact = False
    return exact
