"""Renderers of an AuditReport: table, json, junit, github, markdown, html.

Every renderer takes the same report object and writes text to a stream. Machine formats
bypass Rich. Values are printed as they are in the report, so a redacted report (see
`lexkeep.audit.report.redact`) is redacted in every format.
"""

from __future__ import annotations

import codecs
import html
import io
import json
import os
import re
import xml.etree.ElementTree as ET
from collections.abc import Callable, Iterator
from itertools import islice
from typing import Any, TextIO

import orjson
from rich.cells import cell_len
from rich.console import Console
from rich.table import Table
from rich.text import Text

from lexkeep.audit.report import (
    SCHEMA_VERSION,
    AuditReport,
    Counts,
    Finding,
    flat_rows,
    gc_paused,
    problem_findings,
)
from lexkeep.core import __version__
from lexkeep.core.controls import visible, visible_json
from lexkeep.core.errors import ConfigError
from lexkeep.core.layout import (
    PROSE,
    WHOLE,
    fit_widths,
    longest_word,
    record_groups,
    record_lines,
    wrap_words,
)
from lexkeep.core.model import Source, Verdict

HTML_KEPT_ROWS = 500
# Human formats list at most this many problems (GitHub caps a step summary at 1 MiB);
# json, junit and github list every one.
MAX_PROBLEM_ROWS = 200


def render(report: AuditReport, fmt: str, stream: TextIO, *, color: bool = False) -> None:
    """Write `report` to `stream` in format `fmt` (one of settings.FORMATS); an unknown `fmt`
    is a ConfigError, before anything is written."""
    renderer = RENDERERS.get(fmt)
    if renderer is None:
        raise ConfigError(f"unknown format {fmt!r}", hint="choose from: " + ", ".join(RENDERERS))
    renderer(report, stream, color)


# -- shared wording -----------------------------------------------------------------------------


def loc(source: Source | None) -> str:
    """`file:line`, or an empty string."""
    return f"{source.file}:{source.line}" if source else ""


def pct(ratio: float | None) -> str:
    """A ratio as a percentage, or 'n/a' when nothing was audited."""
    return "n/a" if ratio is None else f"{100 * ratio:.1f}%"


def verdict_line(report: AuditReport) -> str:
    """One sentence: the gate outcome and why."""
    t = report.totals
    head = (
        f"{t.kept}/{t.audited} identifiers kept verbatim after compaction ({pct(t.ratio)}) in "
        f"{len(report.audited_conversations)} audited conversation(s)"
    )
    if report.gate.passed:
        return f"PASS: {head}."
    suffix = " (--exit-zero: exit 0)" if report.gate.exit_zero else ""
    return f"FAIL: {head}; " + "; ".join(report.gate.reasons) + suffix + "."


def describe(f: Finding) -> str:
    """What happened to one identifier, in words."""
    if f.verdict == Verdict.KEPT:
        return f"{f.kind} {f.value} kept verbatim"
    if f.verdict == Verdict.ALTERED and f.evidence:
        return (
            f"{f.kind} {f.value} was altered to {f.evidence.found} "
            f"({f.evidence.difference}) in tool call {f.evidence.tool}"
        )
    if f.verdict == Verdict.UNVERIFIED:
        return (
            f"{f.kind} {f.value} not found after the compaction, but the message's identifier "
            "scan was incomplete: unverified"
        )
    return f"{f.kind} {f.value} is missing from every tool call after the compaction"


def flags(f: Finding) -> list[str]:
    """The finding's flags as short words."""
    out = []
    if f.in_summary:
        out.append("in summary")
    elif f.in_summary is None:
        out.append("summary opaque")
    if f.in_kept_verbatim:
        out.append("kept verbatim by compaction")
    if f.used_before:
        out.append("used before boundary")
    return out


def counts_dict(c: Counts) -> dict[str, Any]:
    """Counts as JSON-ready data."""
    return {
        "audited": c.audited,
        "kept": c.kept,
        "altered": c.altered,
        "missing": c.missing,
        "unverified": c.unverified,
        "ratio": c.ratio,
    }


def _source_dict(source: Source | None) -> dict[str, Any] | None:
    return None if source is None else {"file": source.file, "line": source.line}


def finding_dict(f: Finding) -> dict[str, Any]:
    """One finding as JSON-ready data."""
    return _flat_data(next(flat_rows([f])), {}, {})


def _flat_data(
    row: tuple[Any, ...],
    boundaries: dict[tuple[Any, ...], dict[str, Any]],
    flag_sets: dict[tuple[Any, ...], dict[str, Any]],
) -> dict[str, Any]:
    """A finding as JSON-ready data, from its flat tuple (audit.report.FLAT_FIELDS): the JSON
    report reads its findings so, without a Finding object each.

    Spelled out (no helpers, no ** merges): this runs once per identifier of a big dump. The
    boundary and flags parts repeat across findings: one dict each, shared (the JSON text is
    the same; orjson writes a shared dict each time it appears).
    """
    (cid, mid, kind, value, verdict, m_file, m_line, bid, bkind, b_file, b_line, ev,
     in_summary, in_kept_verbatim, used_before, scan_complete) = row  # fmt: skip
    key = (bid, bkind, b_file, b_line)
    boundary = boundaries.get(key)
    if boundary is None:
        boundary = {"id": bid, "kind": bkind}
        if b_file is not None:
            boundary["file"] = b_file
            boundary["line"] = b_line
        boundaries[key] = boundary
    key = (in_summary, in_kept_verbatim, used_before)
    flags = flag_sets.get(key)
    if flags is None:
        flags = flag_sets[key] = {
            "in_summary": in_summary,
            "in_kept_verbatim": in_kept_verbatim,
            "used_before_boundary": used_before,
        }
    evidence = None
    if ev is not None:
        evidence = {
            "call_id": ev[0],
            "tool": ev[1],
            "found": ev[2],
            "difference": ev[5],
            "distance": ev[6],
        }
        if ev[3] is not None:
            evidence["file"] = ev[3]
            evidence["line"] = ev[4]
    return {
        "conversation_id": cid,
        "message_id": mid,
        "kind": kind,
        "value": value,
        "verdict": verdict,
        "message": None if m_file is None else {"file": m_file, "line": m_line},
        "boundary": boundary,
        "evidence": evidence,
        "flags": flags,
        "scan_complete": scan_complete,
    }


def report_dict(report: AuditReport, *, findings: bool = True) -> dict[str, Any]:
    """The whole report as JSON-ready data (the `json` format); without its last two keys,
    findings and notes, when `findings` is False (render_json writes those in chunks)."""
    g = report.gate
    boundaries: dict[tuple[Any, ...], dict[str, Any]] = {}
    flag_sets: dict[tuple[Any, ...], dict[str, Any]] = {}
    return {
        "schema_version": SCHEMA_VERSION,
        "tool": {"name": "lexkeep", "version": __version__},
        "inputs": list(report.inputs),
        "redacted": report.redacted,
        "gate": {
            "passed": g.passed,
            "exit_code": report.exit_code,
            "min_ratio": g.min_ratio,
            "fail_on": list(g.fail_on),
            "exit_zero": g.exit_zero,
            "reasons": list(g.reasons),
        },
        "totals": {
            **counts_dict(report.totals),
            "conversations": report.conversations_total,
            "conversations_with_boundary": len(report.conversations),
            "conversations_audited": len(report.audited_conversations),
        },
        "per_kind": [{"kind": k.kind, **counts_dict(k.counts)} for k in report.kinds],
        "conversations": [
            {
                "conversation_id": c.conversation_id,
                **_source_dict(c.source),
                "boundaries": c.boundaries,
                **counts_dict(c.counts),
            }
            for c in report.conversations
        ],
        "distribution": [{"bin": label, "conversations": n} for label, n in report.distribution],
        **(
            {
                "findings": [
                    _flat_data(row, boundaries, flag_sets) for row in flat_rows(report.findings)
                ],
                "notes": list(report.notes),
            }
            if findings
            else {}
        ),
    }


# -- json -------------------------------------------------------------------------------------


def render_json(report: AuditReport, stream: TextIO, color: bool = False) -> None:
    """Write the report as one JSON document (the bytes of json.dump(indent=2,
    ensure_ascii=False), written a chunk of findings at a time)."""
    with gc_paused():
        parts = _json_parts(report, _dumps(report_dict(report, findings=False)))
        buffer = _utf8_buffer(stream)
        if buffer is not None:
            # The UTF-8 bytes as they are: decoding a big report only for the text layer to
            # encode it again costs time and a second copy in memory.
            stream.flush()
            for part in parts:
                buffer.write(part)
        else:
            for part in parts:
                stream.write(part.decode())


def _dumps(value: Any) -> bytes:
    """json.dumps(value, ensure_ascii=False, indent=2) as UTF-8: orjson's indenting gives the
    same bytes (json's indenting encoder is pure Python: seconds on a big dump's findings),
    with DEL, the C1 controls, bidirectional overrides and hidden characters as \\uXXXX
    escapes (lexkeep.core.controls: both write them as they are)."""
    try:
        data = orjson.dumps(value, option=orjson.OPT_INDENT_2)
    except TypeError:  # e.g. an integer beyond 64 bits: json writes it, orjson cannot
        data = json.dumps(value, ensure_ascii=False, indent=2).encode()
    return visible_json(data)


JSON_CHUNK = 10_000  # findings encoded at a time


# What orjson writes around a chunk of findings given as {"findings": chunk}.
_CHUNK_HEAD = b'{\n  "findings": ['
_CHUNK_TAIL = b"\n  ]\n}"


def _json_parts(report: AuditReport, head: bytes) -> Iterator[bytes]:
    """The document in pieces: `head` (every key but the last two) reopened, the findings
    JSON_CHUNK at a time, and the notes; a chunk's findings are not kept as dicts after it.

    Each chunk is encoded as the document holds it, one level deep (under a "findings" key),
    and cut out of that: indenting a chunk encoded alone would copy its bytes once more.
    """
    yield head[: -len(b"\n}")] + b',\n  "findings": ['
    boundaries: dict[tuple[Any, ...], dict[str, Any]] = {}
    flag_sets: dict[tuple[Any, ...], dict[str, Any]] = {}
    rows = flat_rows(report.findings)  # read once, in order (big reports wait on disk)
    first = True
    while chunk := [_flat_data(row, boundaries, flag_sets) for row in islice(rows, JSON_CHUNK)]:
        body = _dumps({"findings": chunk})[len(_CHUNK_HEAD) : -len(_CHUNK_TAIL)]
        yield body if first else b"," + body
        first = False
    yield b"]," if first else b"\n  ],"
    notes = _dumps(list(report.notes)).replace(b"\n", b"\n  ")
    yield b'\n  "notes": ' + notes + b"\n}\n"


def _utf8_buffer(stream: TextIO) -> Any:
    """The byte stream under `stream` when writing bytes there gives the same file, else None.

    That is a UTF-8 TextIOWrapper on a system whose line separator is "\\n" (the CLI's -o file
    and stdout there). TextIOWrapper does not tell its `newline` argument, so a stream opened
    with an explicit newline="\\r\\n" would get "\\n" line ends: the same JSON.
    """
    if not isinstance(stream, io.TextIOWrapper):
        return None
    try:
        utf8 = codecs.lookup(stream.encoding).name == "utf-8"
    except LookupError:
        return None
    return stream.buffer if utf8 and os.linesep == "\n" else None


# -- table (Rich) -----------------------------------------------------------------------------


PROBLEM_COLUMNS = ("verdict", "kind", "value", "typed at", "boundary", "evidence", "flags")


def _problem_cells(f: Finding) -> tuple[tuple[str, ...], tuple[int, ...]]:
    """A finding's table cells, and the width each needs for nothing in it to be broken: a
    value, a `path:line` and an altered value whole; the difference and the flags may wrap
    at spaces."""
    ev = f.evidence
    found = visible(f"{ev.found} ({ev.difference})") if ev else ""
    where = visible(loc(ev.source)) if ev else ""
    cells = (
        f.verdict.value,
        visible(f.kind),
        visible(f.value),
        visible(loc(f.message)),
        visible(loc(f.boundary)),
        f"{found}\n{where}" if ev else "",
        ", ".join(flags(f)),
    )
    evidence = (
        max(
            cell_len(visible(ev.found)), longest_word(visible(ev.difference or "")), cell_len(where)
        )
        if ev
        else 0
    )
    floors = (*map(cell_len, cells[:5]), evidence, longest_word(cells[6]))
    return cells, floors


def _problem_widths(
    cells: list[tuple[str, ...]], floors: list[tuple[int, ...]], total: int
) -> list[int] | None:
    """Column widths (without padding) for the problems table in `total` columns, or None
    when it cannot hold every value and `path:line` whole (then each finding is a record).

    Rich folds a cell wider than its column at any character (a `path:line` came out as
    slivers of ten), and a column minimum pushes the right-hand columns off the edge;
    widths fixed here cannot. A title stays whole too.
    """
    room = total - (3 * len(PROBLEM_COLUMNS) + 1)  # one space either side, and the borders
    natural = [
        max(len(title), *(cell_len(line) for row in cells for line in row[i].splitlines() or [""]))
        for i, title in enumerate(PROBLEM_COLUMNS)
    ]
    needed = [
        max(len(title), *(row[i] for row in floors)) for i, title in enumerate(PROBLEM_COLUMNS)
    ]
    return fit_widths(natural, needed, room)


def _problem_record(f: Finding, width: int | None) -> list[Text]:
    """One finding as a block of lines: the verdict and value, then its kind, places, what it
    became and flags, one a line (see lexkeep.core.layout.record_lines)."""
    ev = f.evidence
    fields = [("kind", visible(f.kind), WHOLE)]
    for label, source in (("typed at", f.message), ("boundary", f.boundary)):
        if source is not None:
            fields.append((label, visible(loc(source)), WHOLE))
    if ev is not None:
        fields.append(("became", visible(f"{ev.found} ({ev.difference})"), WHOLE))
        if ev.source is not None:
            fields.append(("evidence", visible(loc(ev.source)), WHOLE))
    if marks := flags(f):
        fields.append(("flags", ", ".join(marks), PROSE))
    verdict = f.verdict.value
    head = record_lines([(verdict, visible(f.value), WHOLE)], width, indent=0)
    lines = [Text(line) for line in head + record_lines(fields, width)]
    lines[0].stylize("red" if f.verdict == Verdict.MISSING else "yellow", 0, len(verdict))
    return lines


def _first_problems(report: AuditReport) -> tuple[list[Finding], int]:
    """The first MAX_PROBLEM_ROWS findings not kept, and how many more there are."""
    problems = list(islice(problem_findings(report.findings), MAX_PROBLEM_ROWS))
    t = report.totals
    return problems, t.altered + t.missing + t.unverified - len(problems)


class _ReportConsole(Console):
    """A Console that lets a closed pipe surface as BrokenPipeError, as every other format's
    write does: Rich's own answer is SystemExit(1), which would decide the exit code."""

    def on_broken_pipe(self) -> None:
        self.quiet = True
        raise BrokenPipeError


def render_table(report: AuditReport, stream: TextIO, color: bool = False) -> None:
    """Rich tables: problems, per kind, per-conversation ratio histogram, and the verdict."""
    sized = color or os.environ.get("COLUMNS", "").isdigit()
    console = _ReportConsole(
        file=stream,
        highlight=False,
        markup=False,
        soft_wrap=False,
        force_terminal=color,
        # On a terminal Rich decides, so NO_COLOR (no-color.org) leaves the colours out as
        # it does for every other command; elsewhere there are none.
        no_color=None if color else True,
        # A pipe or file (a CI log) gets 140 columns unless $COLUMNS says otherwise (Rich
        # reads it); a terminal its own width.
        width=None if sized else 140,
    )
    # In a pipe or file the width is only the tables': each note and the verdict stay one
    # line, so a log search for `FAIL:` finds every reason and a FILE:LINE stays whole.
    prose_whole = not sized
    problems, more = _first_problems(report)
    if problems:
        title = "Identifiers not kept verbatim after compaction"
        cells, floors = zip(*map(_problem_cells, problems), strict=True)
        widths = _problem_widths(list(cells), list(floors), console.width)
        if widths is not None:
            table = Table(title=title, title_justify="left")
            for index, col in enumerate(PROBLEM_COLUMNS):
                # Whole words wrap inside their cell; none is cut with "…" or folded.
                table.add_column(col, overflow="fold", width=widths[index])
            for row in cells:
                style = "red" if row[0] == Verdict.MISSING.value else "yellow"
                table.add_row(Text(row[0], style=style), *row[1:])
            console.print(table)
        else:
            # No room for a table with every value and path:line whole: a record a finding.
            console.print(Text(title, style="italic"))  # as a table's title
            for f in problems:
                console.print()
                for line in _problem_record(f, console.width if sized else None):
                    console.print(line, soft_wrap=True)
            console.print()
        if more:
            console.print(Text(f"... and {more} more; --format json lists every finding"))
    columns = ("kind", "audited", "kept", "altered", "missing", "unverified", "ratio")
    per_kind = [
        (
            visible(name),
            *map(str, (c.audited, c.kept, c.altered, c.missing, c.unverified)),
            pct(c.ratio),
        )
        for name, c in ((k.kind, k.counts) for k in report.kinds)
    ]
    t = report.totals
    per_kind.append(
        ("all", *map(str, (t.audited, t.kept, t.altered, t.missing, t.unverified)), pct(t.ratio))
    )
    natural = (
        max(len(col), *(cell_len(row[i]) for row in per_kind)) for i, col in enumerate(columns)
    )
    if sum(natural) + 3 * len(columns) + 1 <= console.width:  # one space either side, borders
        kinds = Table(title="Per identifier kind", title_justify="left")
        for col in columns:
            kinds.add_column(col, justify="left" if col == "kind" else "right")
        for row in per_kind:
            kinds.add_row(Text(row[0], style="bold") if row is per_kind[-1] else row[0], *row[1:])
        console.print(kinds)
    else:
        # Narrower than the table, Rich cut each cell with "…" (`path_…` was path_posix and
        # path_rel alike): a kind a line instead, each count named.
        console.print(Text("Per identifier kind", style="italic"))
        fields = []
        for name, *counts, ratio in per_kind:
            named = ", ".join(f"{n} {col}" for n, col in zip(counts, columns[1:6], strict=True))
            fields.append((name, f"{named}, ratio {ratio}", PROSE))
        groups = record_groups(fields, console.width if sized else None)
        for index, group in enumerate(groups):
            # The `all` line is bold, as the table's last row is.
            style = "bold" if index == len(groups) - 1 else ""
            for line in group:
                console.print(Text(line, style=style), soft_wrap=True)
    console.print(Text("Per-conversation ratio (kept/audited)", style="italic"))
    top = max((n for _, n in report.distribution), default=0) or 1
    # A bar a line: narrower than 30 cells where the width asks (Rich would wrap the line,
    # the bucket's count alone on the next one), at least one cell.
    room = console.width - len(f"  {'':>8} |  {top}")
    bars = max(1, min(30, room)) if sized else 30
    for label, n in report.distribution:
        bar = "#" * round(bars * n / top) if n else ""
        console.print(Text(f"  {label:>8} | {bar:<{bars}} {n}"), soft_wrap=True)
    for note in report.notes:
        text = visible(f"Note: {note}")
        # Wrapped by a width between words only: Rich folds a word wider than the width, and
        # a FILE:LINE in a note came out in pieces.
        for line in [text] if prose_whole else wrap_words(text, console.width):
            console.print(Text(line, style="dim"), soft_wrap=True)
    # Broken between words only, as a note is: Rich breaks a word wider than the width (an
    # environment variable, a file name) and leaves spaces at the ends of lines.
    verdict = visible(verdict_line(report))
    style = "bold green" if report.gate.passed else "bold red"
    for line in [verdict] if prose_whole else wrap_words(verdict, console.width):
        console.print(Text(line, style=style), soft_wrap=True)


# -- junit ------------------------------------------------------------------------------------


def render_junit(report: AuditReport, stream: TextIO, color: bool = False) -> None:
    """JUnit XML: one test case per audited conversation; altered/missing make it fail."""
    by_conv: dict[str, list[Finding]] = {}
    for f in problem_findings(report.findings):  # the only ones listed
        by_conv.setdefault(f.conversation_id, []).append(f)
    cases = report.audited_conversations
    failed = [c for c in cases if c.counts.altered or c.counts.missing]
    suites = ET.Element("testsuites", name="lexkeep audit")
    suite = ET.SubElement(
        suites,
        "testsuite",
        name="lexkeep audit",
        tests=str(len(cases)),
        failures=str(len(failed)),
        errors="0",
        skipped=str(sum(1 for c in cases if not c.counts.audited)),
    )
    props = ET.SubElement(suite, "properties")
    for name, value in (
        ("schema_version", SCHEMA_VERSION),
        ("ratio", pct(report.totals.ratio)),
        ("gate", "pass" if report.gate.passed else "fail"),
        ("redacted", str(report.redacted).lower()),
    ):
        ET.SubElement(props, "property", name=name, value=str(value))
    for conv in cases:
        c = conv.counts
        case = ET.SubElement(
            suite,
            "testcase",
            classname="lexkeep.audit",
            name=conv.conversation_id,
            file=conv.source.file,
            line=str(conv.source.line),
        )
        lines = [
            f"{describe(f)}; typed at {loc(f.message)}, boundary {loc(f.boundary)}"
            + (f", evidence {loc(f.evidence.source)}" if f.evidence else "")
            for f in by_conv.get(conv.conversation_id, [])
        ]
        if c.altered or c.missing:
            failure = ET.SubElement(
                case,
                "failure",
                type="lexkeep.audit",
                message=f"{c.kept}/{c.audited} identifiers kept ({pct(c.ratio)})",
            )
            failure.text = "\n".join(lines)
        elif not c.audited:
            ET.SubElement(case, "skipped", message="only unverified identifiers")
        if c.unverified and (c.altered or c.missing or c.audited):
            ET.SubElement(case, "system-out").text = "\n".join(
                line for line in lines if "unverified" in line
            )
    if report.notes:  # why nothing was audited, what was skipped or cut short
        ET.SubElement(suite, "system-out").text = "\n".join(report.notes)
    ET.indent(suites)
    stream.write('<?xml version="1.0" encoding="utf-8"?>\n')
    stream.write(_xml_visible(ET.tostring(suites, encoding="unicode")))
    stream.write("\n")


# A trace may hold anything in an id, a file name or a tool name: control characters (in a CI
# log ESC, CSI and the rest drive the terminal), bidirectional overrides that make a reader see
# another text than the one a program reads, and invisible tag characters. Every format shows
# them as \uXXXX text by one rule, lexkeep.core.controls.visible (JSON as escapes that decode
# to the same values). XML 1.0 also forbids the noncharacters U+FFFE and U+FFFF; ElementTree
# writes them as they are and the file no longer parses, so JUnit escapes them too.
_XML_NONCHARACTERS = re.compile("[\ufffe\uffff]")


def _xml_visible(text: str) -> str:
    """`text` (an XML document) as `visible` shows it, and without XML's noncharacters."""
    return _XML_NONCHARACTERS.sub(lambda m: f"\\u{ord(m.group()):04x}", visible(text))


# -- github -----------------------------------------------------------------------------------


def _gh_data(text: str) -> str:
    return visible(text).replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def _gh_prop(text: str) -> str:
    return _gh_data(text).replace(":", "%3A").replace(",", "%2C")


def render_github(report: AuditReport, stream: TextIO, color: bool = False) -> None:
    """GitHub Actions workflow commands: one annotation per identifier not kept."""
    for f in problem_findings(report.findings):
        level = "warning" if f.verdict == Verdict.UNVERIFIED else "error"
        where = f"boundary {loc(f.boundary)}"
        if f.evidence:
            where += f", evidence {loc(f.evidence.source)}"
        extra = flags(f)
        msg = f"{describe(f)} ({where})" + (f" [{', '.join(extra)}]" if extra else "")
        title = f"lexkeep audit: {f.verdict.value} {f.kind}"
        stream.write(
            f"::{level} file={_gh_prop(f.message.file)},line={f.message.line},"
            f"title={_gh_prop(title)}::{_gh_data(msg)}\n"
        )
    for note in report.notes:  # why nothing was audited, what was skipped or cut short
        stream.write(f"::notice title=lexkeep audit note::{_gh_data(note)}\n")
    level = "notice" if report.gate.passed else "error"
    stream.write(f"::{level} title=lexkeep audit::{_gh_data(verdict_line(report))}\n")


def github_error_line(
    message: str,
    *,
    path: str | None = None,
    line: int | None = None,
    col: int | None = None,
    title: str = "lexkeep audit could not run",
) -> str:
    """One `::error` workflow command for an audit that could not run (exit 2), naming the
    file (and line, column) when the error has one, escaped as the annotations above are."""
    props = []
    if path is not None:
        props.append(f"file={_gh_prop(path)}")
        if line is not None:
            props.append(f"line={line}")
            if col is not None:
                props.append(f"col={col}")
    props.append(f"title={_gh_prop(title)}")
    return f"::error {','.join(props)}::{_gh_data(message)}\n"


# -- markdown ---------------------------------------------------------------------------------


# Characters Markdown (GitHub's included) could read as markup in running text: escaped with a
# backslash, which CommonMark allows before any ASCII punctuation. An underscore between two
# letters or digits never starts emphasis, so `claude_lost_path` stays as it is.
_MD_MARKUP = re.compile(r"[\\`*\[\]<>|~&!#]|(?<![^\W_])_|_(?![^\W_])")
_BACKTICKS = re.compile("`+")


def _md(text: object) -> str:
    """`text` for a Markdown table cell or paragraph: shown as it is, never read as markup."""
    return _MD_MARKUP.sub(lambda m: "\\" + m.group(), visible(str(text)).replace("\n", " "))


def _md_code(text: object) -> str:
    """`text` as a Markdown code span in a table cell: every character shown as it is.

    Backslashes mean nothing in a code span, so they stay single; a backtick in the value gets
    a longer fence; a pipe is escaped, which GitHub's tables undo inside code spans too.
    """
    text = visible(str(text)).replace("\n", " ").replace("|", "\\|")
    fence = "`" * (max((len(run) for run in _BACKTICKS.findall(text)), default=0) + 1)
    if text.startswith("`") or text.endswith("`") or (text[:1] == text[-1:] == " "):
        text = f" {text} "
    return f"{fence}{text}{fence}"


def render_markdown(report: AuditReport, stream: TextIO, color: bool = False) -> None:
    """A Markdown summary for $GITHUB_STEP_SUMMARY."""
    w = stream.write
    icon = "✅" if report.gate.passed else "❌"
    w(f"## {icon} lexkeep audit\n\n{_md(verdict_line(report))}\n\n")
    w("| kind | audited | kept | altered | missing | unverified | ratio |\n")
    w("|---|---:|---:|---:|---:|---:|---:|\n")
    for k in report.kinds:
        c = k.counts
        w(
            f"| {_md(k.kind)} | {c.audited} | {c.kept} | {c.altered} | {c.missing} | "
            f"{c.unverified} | {pct(c.ratio)} |\n"
        )
    t = report.totals
    w(
        f"| **all** | {t.audited} | {t.kept} | {t.altered} | {t.missing} | {t.unverified} | "
        f"**{pct(t.ratio)}** |\n\n"
    )
    w("Per-conversation ratio distribution:\n\n| ratio | conversations |\n|---|---:|\n")
    for label, n in report.distribution:
        w(f"| {label} | {n} |\n")
    problems, more = _first_problems(report)
    if problems:
        w("\n### Identifiers not kept verbatim\n\n")
        w("| verdict | kind | value | typed at | boundary | evidence | flags |\n")
        w("|---|---|---|---|---|---|---|\n")
        for f in problems:
            ev = f.evidence
            evidence = ""
            if ev is not None:
                evidence = f"{_md_code(ev.found)} ({ev.difference}) at {_md(loc(ev.source))}"
            w(
                f"| {f.verdict.value} | {_md(f.kind)} | {_md_code(f.value)} | "
                f"{_md(loc(f.message))} | {_md(loc(f.boundary))} | {evidence} | "
                f"{_md(', '.join(flags(f)))} |\n"
            )
    if more:
        w(f"\n... and {more} more; --format json lists every finding.\n")
    for note in report.notes:
        w(f"\n> {_md(note)}\n")


# -- html -------------------------------------------------------------------------------------

_CSS = """
body{font:14px/1.4 system-ui,sans-serif;margin:2em;color:#222}
table{border-collapse:collapse;margin:1em 0}td,th{border:1px solid #ccc;padding:3px 8px}
th{background:#f3f3f3}.pass{color:#176b2c}.fail{color:#b00020}
.altered{background:#fff4d6}.missing{background:#fde2e4}.unverified{background:#eef}
code{font-family:ui-monospace,monospace}
"""


def distribution_svg(report: AuditReport) -> str:
    """An inline SVG bar chart of the per-conversation ratio distribution."""
    bins = report.distribution
    width, height, pad, bar_w = 560, 220, 30, 40
    top = max((n for _, n in bins), default=0) or 1
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" id="ratio-chart" width="{width}" '
        f'height="{height}" role="img" aria-label="per-conversation ratio distribution">'
    ]
    for i, (label, n) in enumerate(bins):
        h = round((height - 2 * pad) * n / top)
        x = pad + i * (bar_w + 6)
        y = height - pad - h
        fill = "#2e7d32" if label == "100%" else "#c62828"
        parts.append(
            f'<rect class="bar" x="{x}" y="{y}" width="{bar_w}" height="{h}" fill="{fill}">'
            f"<title>{html.escape(label)}: {n}</title></rect>"
        )
        parts.append(
            f'<text x="{x + bar_w / 2}" y="{height - pad + 14}" font-size="9" '
            f'text-anchor="middle">{html.escape(label)}</text>'
        )
        parts.append(
            f'<text x="{x + bar_w / 2}" y="{y - 3}" font-size="10" text-anchor="middle">{n}</text>'
        )
    parts.append("</svg>")
    return "".join(parts)


def render_html(report: AuditReport, stream: TextIO, color: bool = False) -> None:
    """One self-contained HTML page: verdict, ratio chart (inline SVG), per-kind table, findings."""

    def e(text: str) -> str:
        # a browser applies a bidirectional override too: shown as \\uXXXX, as elsewhere
        return html.escape(visible(text))

    w = stream.write
    status = "pass" if report.gate.passed else "fail"
    w('<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8"/>')
    w(f"<title>lexkeep audit</title><style>{_CSS}</style></head><body>\n")
    w(
        f'<h1>lexkeep audit</h1>\n<p class="{status}">'
        f"<strong>{e(verdict_line(report))}</strong></p>\n"
    )
    w("<h2>Per-conversation ratio distribution</h2>\n")
    w(distribution_svg(report) + "\n")
    w(
        "<h2>Per identifier kind</h2>\n<table><tr><th>kind</th><th>audited</th><th>kept</th>"
        "<th>altered</th><th>missing</th><th>unverified</th><th>ratio</th></tr>\n"
    )
    rows = [(k.kind, k.counts) for k in report.kinds] + [("all", report.totals)]
    for name, c in rows:
        w(
            f"<tr><td>{e(name)}</td><td>{c.audited}</td><td>{c.kept}</td><td>{c.altered}</td>"
            f"<td>{c.missing}</td><td>{c.unverified}</td><td>{pct(c.ratio)}</td></tr>\n"
        )
    w(
        "</table>\n<h2>Findings</h2>\n<table><tr><th>verdict</th><th>kind</th><th>value</th>"
        "<th>typed at</th><th>boundary</th><th>evidence</th><th>flags</th></tr>\n"
    )
    # Every problem, and kept findings up to a cap so a big audit stays a page, not a dump.
    for f in problem_findings(report.findings, kept_cap=HTML_KEPT_ROWS):
        ev = f.evidence
        evidence = (
            f"<code>{e(ev.found)}</code> {e(ev.difference or '')} at {e(loc(ev.source))}"
            if ev
            else ""
        )
        w(
            f'<tr class="{f.verdict.value}"><td>{f.verdict.value}</td><td>{e(f.kind)}</td>'
            f"<td><code>{e(f.value)}</code></td><td>{e(loc(f.message))}</td>"
            f"<td>{e(loc(f.boundary))}</td><td>{evidence}</td>"
            f"<td>{e(', '.join(flags(f)))}</td></tr>\n"
        )
    w("</table>\n")
    if report.totals.kept > HTML_KEPT_ROWS:
        w(f"<p><em>{report.totals.kept - HTML_KEPT_ROWS} more kept findings not shown; ")
        w("--format json lists every finding.</em></p>\n")
    for note in report.notes:
        w(f"<p><em>{e(note)}</em></p>\n")
    w("</body></html>\n")


RENDERERS: dict[str, Callable[[AuditReport, TextIO, bool], None]] = {
    "table": render_table,
    "json": render_json,
    "junit": render_junit,
    "github": render_github,
    "markdown": render_markdown,
    "html": render_html,
}
