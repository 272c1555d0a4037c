"""`lexkeep` commands for the ingest area: ingest, stats, show."""

import contextlib
import functools
import os
import sys
from collections.abc import Iterator
from typing import TYPE_CHECKING, Annotated

import orjson
import typer

from lexkeep.cli.common import (
    DbOption,
    counted,
    db_path,
    interrupted_exit,
    note_terminal_stdin,
    progress,
    stdout_console,
)
from lexkeep.cli.signals import interrupted_by
from lexkeep.core.controls import visible, visible_json
from lexkeep.core.errors import LexkeepError, doing
from lexkeep.core.formats import format_names

# The store, the data model and the ingest are imported by the command that runs: they import
# DuckDB and build the model's classes (~0.1 s), which `lexkeep --help` never needs.
if TYPE_CHECKING:
    from lexkeep.core.inspect import ConversationSummary, Stats, Timeline
    from lexkeep.core.model import FileCounts
    from lexkeep.core.store import Store

OutputFormat = Annotated[
    str,
    typer.Option(
        "--format", "-f", help="Output: text (readable) or json (for scripts).", metavar="FORMAT"
    ),
]


def summary_line(c: "FileCounts") -> str:
    """One stderr line per file: format and counts, skipped lines by reason."""
    if c.status == "unchanged":
        return f"{c.path}: unchanged ({c.format}), nothing added"
    if c.status == "empty" and c.truncated_document and c.path != "-":
        return (
            f"{c.path}: nothing to read yet: the JSON document is still being written (not one"
            " value is complete), nothing stored; it is read again when complete"
        )
    from lexkeep.core.ingest import HEADER_ONLY, nothing_yet  # not needed for --help

    waiting = nothing_yet(c)
    if waiting is not None:
        return f"{c.path}: nothing to read yet: {waiting}, left for a later ingest"
    if c.status == "empty" and c.header_only:  # standard input: read once, never again
        return f"{c.path}: nothing to read: {HEADER_ONLY}"
    from lexkeep.core.ingest import crash_left  # not needed for --help

    crashed = crash_left(c)
    if crashed is not None:
        return f"{c.path}: nothing to read: {crashed}"
    if c.status == "empty":
        return f"{c.path}: empty, nothing to read"
    if c.status == "unrecognised":
        return f"{c.path}: skipped, not a recognised trace format"
    line = (
        f"{c.path}: {c.status} ({c.format}) {counted(c.conversations, 'conversation')}, "
        f"{counted(c.messages, 'message')}{_copies(c.messages, c.messages_added)}, "
        f"{counted(c.tool_calls, 'tool call')}{_copies(c.tool_calls, c.tool_calls_added)}, "
        f"{counted(c.boundaries, 'boundary', 'boundaries')}"
        f"{_copies(c.boundaries, c.boundaries_added)}, "
        f"{counted(c.identifiers, 'identifier')}"
    )
    if c.skipped:
        line += "; skipped " + ", ".join(f"{k}={v}" for k, v in sorted(c.skipped.items()))
        # Where the first line to look at is: one that was invalid, one of an unknown type.
        where = [
            f"first {what}: {c.path}:{at}"
            for what, at in (("invalid", c.invalid_line), ("unknown_type", c.unknown_type_line))
            if at is not None
        ]
        if where:
            line += f" ({'; '.join(where)})"
    if c.truncated_last_line:
        line += "; truncated last line (file still being written?) left for a later ingest"
        if c.truncated_line is not None:
            line += f" ({c.path}:{c.truncated_line})"
    if c.nul_tail is not None:
        from lexkeep.core.ingest import nul_tail_note  # not needed for --help

        line += "; " + nul_tail_note(*c.nul_tail, c.path, c.nul_tail_cut)
    if c.nul_gaps:
        from lexkeep.core.ingest import nul_gap_note  # not needed for --help

        line += "; " + nul_gap_note(c.nul_gaps, c.path)
    if c.truncated_document:
        line += (
            "; the JSON document is still being written (it ends before it is complete):"
            " the values complete so far are stored, the document is read again when complete"
        )
    left_out, first = c.conflicts
    if left_out:
        line += (
            f"; {left_out} record(s) left out: their conversation already holds their id with"
            f" other content (first: {first})"
        )
    return line


def _copies(read: int, added: int | None) -> str:
    """' (N already stored)' when fewer records were written than read."""
    if added is None or added >= read:
        return ""
    return f" ({read - added} already stored)"


def _print_line(line: str) -> None:
    # Plain stderr writes: summary lines stay one line each (no wrapping) for log readers.
    # A file name may hold ESC sequences or a bidirectional override: shown as \\uXXXX.
    sys.stderr.write(visible(line) + "\n")
    sys.stderr.flush()


def _totals_line(counts: list["FileCounts"], stored: list[int] | None) -> str:
    """The last line of an ingest: files by outcome, then the messages and tool calls read
    (and how many of them the store held already, when `stored` says what was added)."""
    added = [c for c in counts if c.status in ("ingested", "appended")]
    read = (sum(c.messages for c in added), sum(c.tool_calls for c in added))
    # empty files are neither ingested nor unchanged: count them so the numbers add up, apart
    # from the files with nothing complete yet (still being written), read again later
    from lexkeep.core.ingest import crash_left, nothing_yet  # not needed for --help

    waiting = sum(nothing_yet(c) is not None for c in counts)
    crashed = sum(crash_left(c) is not None for c in counts)
    empty = sum(c.status == "empty" for c in counts) - waiting - crashed
    # Records read that the store held already (a resumed Claude Code session copies its
    # earlier lines into the new file): kept once, so say how many were not added.
    copies = (
        [
            counted(n - new, what)
            for n, new, what in zip(read, stored, _WHAT, strict=True)
            if n > new
        ]
        if stored is not None
        else []
    )
    return (
        f"{counted(len(counts), 'file')}: {len(added)} ingested, "
        f"{sum(c.status == 'unchanged' for c in counts)} unchanged, "
        f"{sum(c.status == 'unrecognised' for c in counts)} not traces"
        + (f", {empty} empty" if empty else "")
        + (f", {waiting} still being written" if waiting else "")
        + (f", {crashed} left empty by a crash" if crashed else "")
        + f"; {counted(read[0], 'message')}, {counted(read[1], 'tool call')}"
        + (f" ({', '.join(copies)} already stored)" if copies else "")
    )


def _print_summary(counts: "FileCounts") -> None:
    _print_line(summary_line(counts))


def _write_json(value: object) -> None:
    data = orjson.dumps(value, option=orjson.OPT_INDENT_2)
    sys.stdout.write(visible_json(data).decode() + "\n")


def render_stats(report: "Stats") -> None:
    """Stats as a readable table on stdout."""
    from rich.table import Table

    table = Table(title="lexkeep store", title_justify="left")
    columns = [
        ("format", "format"),
        ("conversations", "conversations"),
        ("with boundaries", "conversations_with_boundaries"),
        ("messages", "messages"),
        ("user messages", "user_messages"),
        ("tool calls", "tool_calls"),
        ("boundaries", "boundaries"),
        ("identifiers", "identifiers"),
    ]
    rows = [*report.formats, report.totals]
    out = stdout_console()
    # The widest word of each heading or its widest count, with a space either side and a
    # border: narrower than that, Rich cuts headings to `conver…` and formats to `c…`.
    wide = 1 + sum(
        3 + max(*map(len, title.split()), *(len(str(getattr(r, attr))) for r in rows))
        for title, attr in columns
    )
    if wide <= out.width:
        for title, _ in columns:
            table.add_column(title, justify="left" if title == "format" else "right")
        for row in rows:
            table.add_row(*(str(getattr(row, attr)) for _, attr in columns))
    else:  # a narrow terminal: one row per count, one column per format
        table.add_column("", no_wrap=True)
        for row in rows:
            table.add_column(row.format, justify="right", overflow="fold")
        for title, attr in columns[1:]:
            table.add_row(title, *(str(getattr(row, attr)) for row in rows))
    out.print(table)
    errors = ", ".join(f"{k}={v}" for k, v in report.errors_by_reason.items()) or "none"
    out.print(
        f"files ingested: {report.files_ingested}; ingest errors: {report.ingest_errors} ({errors})"
    )
    if report.records_left_out:
        out.print(
            f"records left out, their conversation already holding their id with other content:"
            f" {report.records_left_out} (first: {visible(report.first_left_out or '')})",
            soft_wrap=True,
        )
    if report.invalid_lines:
        out.print(
            f"invalid lines skipped (--skip-invalid): {report.invalid_lines}"
            f" (first: {visible(report.first_invalid_line or '')})",
            soft_wrap=True,
        )
    if report.incomplete_scans:
        out.print(
            f"incomplete identifier scans: {report.incomplete_scans}"
            + (
                f" (first: {visible(report.first_incomplete_scan)})"
                if report.first_incomplete_scan
                else ""
            ),
            soft_wrap=True,
        )


_LISTED = ("messages", "tool calls", "boundaries", "identifiers")


def render_conversations(listed: "list[ConversationSummary]") -> None:
    """One line per conversation, whole (never folded: an id is copied from here or grepped),
    columns aligned: id, format, counts, title."""
    if not listed:
        sys.stderr.write("The store holds no conversations.\n")
        return
    ids = [visible(c.id) for c in listed]
    id_width = max(len("conversation"), *map(len, ids))
    fmt_width = max(len("format"), *(len(c.format) for c in listed))
    head = ["conversation".ljust(id_width), "format".ljust(fmt_width), *_LISTED, "title"]
    lines = ["  ".join(head)]
    for shown_id, c in zip(ids, listed, strict=True):
        counts = (c.messages, c.tool_calls, c.boundaries, c.identifiers)
        cells = [shown_id.ljust(id_width), c.format.ljust(fmt_width)]
        cells += [str(n).rjust(len(name)) for n, name in zip(counts, _LISTED, strict=True)]
        cells.append(visible(c.title or ""))
        lines.append("  ".join(cells).rstrip())
    sys.stdout.write("\n".join(lines) + "\n")


def render_timeline(t: "Timeline") -> None:
    """A conversation's timeline, readable on a terminal."""
    from rich.text import Text

    console = stdout_console()

    def out_print(text: str, style: str = "") -> None:
        # A trace holds what an agent read: its ESC sequences must not drive the terminal.
        # soft_wrap: keep the trace's own lines; the terminal wraps.
        console.print(Text(visible(text), style=style), soft_wrap=True)

    out_print(f"conversation {t.id}  ({t.format})", "bold")
    if t.title:
        out_print(f"title: {t.title}")
    if t.parent_id:
        out_print(f"parent: {t.parent_id}")
    out_print(f"source: {t.source_file}:{t.source_line}")
    for e in t.entries:
        where = f"{e.source_file}:{e.source_line}"
        if e.type == "message":
            label = f"{e.role}" + (
                f" ({e.kind})" if e.kind not in ("user_text", "assistant_text") else ""
            )
            if e.status != "completed":
                label += f" [{e.status}]"
            run = f" run={t.runs.get(e.run_id, '?')}" if e.run_id else ""
            out_print(f"[{e.position}] {label}{run}  {where}", "bold cyan")
            if e.text:
                out_print(_indent(e.text))
        elif e.type == "tool_call":
            out_print(f"[{e.position}] tool call {e.name} ({e.id})  {where}", "bold yellow")
            out_print(_indent(e.arguments_raw or ""))
        elif e.type == "tool_result":
            err = " error" if e.is_error else ""
            out_print(f"[{e.position}] tool result{err} ({e.id})  {where}", "yellow")
            out_print(_indent(_clip(e.text or "")))
        else:
            trig = f", {e.trigger}" if e.trigger else ""
            out_print(
                f"[{e.position}] ── compaction boundary ({e.kind}{trig})  {where}", "bold magenta"
            )
            summary = (
                e.summary_text if e.summary_text is not None else "(opaque: no readable summary)"
            )
            out_print(_indent("summary: " + summary))
            for kept in e.kept_verbatim or []:
                out_print(_indent("kept verbatim: " + kept))
    if t.identifiers:
        values = ", ".join(f"{i['value']} ({i['kind']})" for i in t.identifiers)
        out_print(f"identifiers from user messages: {values}")


def _clip(text: str, limit: int = 2000) -> str:
    return (
        text if len(text) <= limit else text[:limit] + f" … [{len(text) - limit} more characters]"
    )


def _indent(text: str) -> str:
    return "\n".join("    " + line for line in text.splitlines() or [""])


def _check_output(fmt: str) -> str:
    """--format of `stats` and `show`: text or json (`table` names text too)."""
    from lexkeep.core.config import output_format

    return output_format(fmt, ("text", "json"))


_WHAT = ("message", "tool call")


def _stored(store: "Store") -> tuple[int, int]:
    """How many messages and tool calls the store holds (DuckDB counts from its metadata)."""
    row = store.con.execute(
        "SELECT (SELECT count(*) FROM messages), (SELECT count(*) FROM tool_calls)"
    ).fetchone()
    return row[0], row[1]


def _remove_store(target: str) -> None:
    for path in (target, f"{target}.wal"):
        with contextlib.suppress(OSError):
            os.remove(path)


@contextlib.contextmanager
def _removed_unless_filled(
    target: str, new_store: bool, counts: list["FileCounts"]
) -> Iterator[None]:
    """Remove the store this ingest created when it fails before any file was stored (a bad
    first line, a store named as a trace): an empty store left behind is one whose audit
    passes on nothing. Ctrl-C leaves it, as it leaves what it stored."""
    from lexkeep.core.errors import StoreLockedError

    try:
        yield
    except StoreLockedError:
        raise  # another process made the store meanwhile, and holds it: it is not this one's
    except Exception:
        if new_store and not counts:
            _remove_store(target)
        raise


def register(app: typer.Typer) -> None:
    """Add this module's commands to `app`."""

    @app.command()
    def ingest(
        paths: Annotated[
            list[str],
            typer.Argument(
                help="Trace files, folders (recursive), globs, or - for standard input.",
                metavar="PATH...",
            ),
        ],
        db: DbOption = None,
        format: Annotated[
            str | None,
            typer.Option(
                "--input-format",
                "--format",
                metavar="FORMAT",
                help="Force the input format: "
                + ", ".join(format_names())
                + " [default: detect per file].",
                show_default=False,
            ),
        ] = None,
        skip_invalid: Annotated[
            bool,
            typer.Option(
                "--skip-invalid",
                help="Skip bad lines (recorded in ingest_errors) instead of rejecting the file.",
            ),
        ] = False,
        quiet: Annotated[
            bool,
            typer.Option(
                "--quiet",
                "-q",
                help="Print only the total line, warnings and errors: no line per file and no"
                " progress bar.",
            ),
        ] = False,
    ) -> None:
        """Read agent traces into the store (idempotent; a grown file adds only its new lines).

        Formats are detected per file: lexkeep JSONL, OpenAI chat (incl. tau-bench result
        files), Codex CLI rollouts, Claude Code sessions, Anthropic Messages logs. One summary
        line per file goes to stderr (--quiet: only the total line).

        Example: lexkeep ingest sample_traces/ --db traces.duckdb
        """
        from lexkeep.core.errors import is_query_interrupt
        from lexkeep.core.ingest import (  # not needed for --help
            ingest_inputs,
            ingest_paths,
            input_size,
            require_traces,
        )
        from lexkeep.core.store import Store

        counts: list[FileCounts] = []  # every file stored, as its line is printed

        def on_file(got: "FileCounts") -> None:
            counts.append(got)
            if not quiet:
                _print_summary(got)

        interrupted = False
        failed: LexkeepError | None = None  # the error that stopped the ingest mid-way
        # Checked before the store is opened: a mistyped path or format creates no store.
        if format is not None and format.strip().lower() in ("json", "text", "table"):
            from lexkeep.core.errors import InputError

            # Every other command's --format names its output.
            raise InputError(
                f"unknown format {format!r}",
                hint="ingest's --format names the trace format (as --input-format): "
                + ", ".join(format_names())
                + "; ingest prints no report: lexkeep stats --format json describes the store",
            )
        files = ingest_inputs(paths, format)
        if "-" in paths:
            note_terminal_stdin()
        target = db_path(db)
        new_store = not os.path.exists(target)
        # The total opens every file: found only when a bar is shown.
        total = functools.partial(input_size, paths)
        with (
            _removed_unless_filled(target, new_store, counts),
            Store.open(target) as store,
            progress("ingesting", total, shown=not quiet) as advance,
        ):
            before = _stored(store)
            try:
                with doing("ingesting the traces"):
                    ingest_paths(
                        store,
                        paths,
                        files=files,
                        format=format,
                        skip_invalid=skip_invalid,
                        on_file=on_file,
                        on_progress=advance,
                        on_phase=lambda text: advance(0, description=text),
                    )
            except LexkeepError as exc:
                # A bad file stops the ingest; the files before it are committed (one
                # transaction each): say so, as for Ctrl-C, then the error (exit 2).
                if not counts:
                    raise
                failed = exc
            except BaseException as exc:
                # Ctrl-C or SIGTERM (Python's, or DuckDB's answer to it inside a query): the
                # files listed so far are committed; say what they added before exiting 130
                # (143 after SIGTERM).
                if not (isinstance(exc, KeyboardInterrupt) or is_query_interrupt(exc)):
                    raise
                interrupted = True
            try:
                stored: list[int] | None = [
                    after - was for after, was in zip(_stored(store), before, strict=True)
                ]
            except Exception:
                if not (interrupted or failed):
                    raise
                stored = None  # the interrupted connection cannot count: no "already stored"
        _print_line(_totals_line(counts, stored))
        if failed is not None:
            _print_line(
                "stopped: the files above were stored before the error below; ingest again once"
                " it is fixed (stored files are not read twice)"
            )
            raise failed
        if interrupted:
            _print_line(
                f"interrupted: the files above were stored before {interrupted_by()}; the ones"
                " being read then were not (ingest them again to add them)"
            )
            raise interrupted_exit()
        try:
            require_traces(paths, counts)
        except LexkeepError:
            if new_store:  # created by this ingest, and nothing is in it: not left behind
                _remove_store(target)
            raise

    @app.command(name="stats")
    def stats_command(db: DbOption = None, format: OutputFormat = "text") -> None:
        """Show what the store holds: counts per format, boundaries, identifiers, errors.

        Example: lexkeep stats --db traces.duckdb --format json
        """
        from lexkeep.core.inspect import stats
        from lexkeep.core.store import Store

        format = _check_output(format)
        # read-only: a mistyped --db is an error, not a new empty store that reports zeros
        with Store.open(db_path(db), read_only=True) as store:
            report = stats(store)
        if format == "json":
            _write_json(report.to_json())
        else:
            render_stats(report)

    @app.command(name="show")
    def show_command(
        conversation: Annotated[
            str | None,
            typer.Argument(
                help="Conversation id, or a unique prefix (one shared with its sub-agents"
                " names the session); none: list every conversation.",
                metavar="[CONVERSATION]",
                show_default=False,
            ),
        ] = None,
        db: DbOption = None,
        format: OutputFormat = "text",
    ) -> None:
        """Show one conversation's timeline: user, assistant, tool calls, results, boundaries.

        Without CONVERSATION, list the store's conversations: id, format, counts, title.

        Example: lexkeep show support-4471 --db traces.duckdb
        """
        from lexkeep.core.inspect import conversations, conversations_to_json, show
        from lexkeep.core.store import Store

        format = _check_output(format)
        if conversation is None:
            with Store.open(db_path(db), read_only=True) as store:
                listed = conversations(store)
            if format == "json":
                _write_json(conversations_to_json(listed))
            else:
                render_conversations(listed)
            return
        with Store.open(db_path(db), read_only=True) as store:
            timeline = show(store, conversation)
        if format == "json":
            _write_json(timeline.to_json())
        else:
            render_timeline(timeline)
