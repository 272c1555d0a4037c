"""`lexkeep` commands for the audit area."""

import contextlib
import functools
import os
import sys
import warnings
from collections.abc import Collection
from typing import TYPE_CHECKING, Annotated

import typer

from lexkeep.cli.common import (
    DbOption,
    is_terminal,
    note_terminal_stdin,
    output_stream,
    progress,
    reader_gone,
    refuse_output_over_inputs,
    refuse_unwritable_output,
    remove_earlier_report,
    say_no_report,
)
from lexkeep.core.controls import visible
from lexkeep.core.errors import LexkeepError, SettingsWarning, doing
from lexkeep.core.formats import format_names

if TYPE_CHECKING:
    from lexkeep.audit.report import AuditReport


def _requested_format(fmt: str | None) -> str | None:
    """The report format asked for (flag, then environment, then settings file), or None
    when the settings that name it cannot be read."""
    if fmt is not None:
        return fmt.strip().lower()
    from lexkeep.audit.settings import resolve

    try:
        return resolve({}).format
    except LexkeepError:
        # Another setting failed (LEXKEEP_MIN_RATIO=98%): the variable naming the format,
        # read alone, still says whether the job wants its annotation.
        return os.environ.get("LEXKEEP_FORMAT", "").strip().lower() or None


def _format_flag(args: list[str]) -> str | None:
    """The value of the last `--format`/`-f` in the command line `args` (`--format X`,
    `--format=X`, `-f X`, `-fX`), None when there is none: read from the raw words, since a
    command line that cannot be parsed has no parsed options."""
    found = None
    words = iter(args)
    for word in words:
        if word == "--":
            break
        if word in ("--format", "-f"):
            found = next(words, None)
        elif word.startswith("--format="):
            found = word.partition("=")[2]
        elif word.startswith("-f") and not word.startswith("--"):
            found = word[2:]
    return found


def annotate_usage_error(err: Exception, args: list[str], commands: Collection[str]) -> None:
    """An `::error` annotation on stdout for a command line that cannot be parsed (`err`, a
    usage error; `args`, the words after `lexkeep`), when it is the audit's (or names no
    known command) and asks for the github format by flag, LEXKEEP_FORMAT or settings file:
    the job's annotations then say why nothing ran. Other commands have no github format."""
    if type(err).__name__ == "NoArgsIsHelpError":
        return  # `lexkeep` alone: its help, asked for in effect
    command = next((word for word in args if not word.startswith("-")), None)
    if command in commands and command != "audit":
        return
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the settings file's own warnings are the audit's
        fmt = _requested_format(_format_flag(args))
    if fmt != "github":
        return
    from lexkeep.audit.render import github_error_line

    # As the console script is named (not `python -m …`), so the title is the same everywhere.
    path = "lexkeep audit" if command == "audit" else "lexkeep"
    message = f"{err.format_message()} (hint: try '{path} -h' for help)"  # type: ignore[attr-defined]
    line = github_error_line(message, title=f"{path} could not run")
    with contextlib.suppress(OSError, ValueError):
        sys.stdout.write(line)
        sys.stdout.flush()


def _annotate_error(exc: Exception) -> None:
    """An `::error` annotation on stdout for an audit that could not run (exit 2): GitHub
    Actions shows it on the job, where the `Error:` line on stderr is only in the log."""
    from lexkeep.audit.render import github_error_line
    from lexkeep.core.errors import is_query_interrupt, storage_error

    if isinstance(exc, typer.Exit | typer.Abort) or is_query_interrupt(exc):
        return  # an exit already decided, or Ctrl-C (130): not an error to annotate
    from lexkeep.cli.wording import as_commands_say

    err = exc if isinstance(exc, LexkeepError) else storage_error(exc)
    if err is not None:
        err = as_commands_say(err)
    if err is None:  # a crash: handle_errors reports it as an internal error, exit 2
        line = github_error_line(f"internal error: {type(exc).__name__}: {exc}")
    else:
        message = err.message + (f" (hint: {err.hint})" if err.hint else "")
        line = github_error_line(message, path=err.path, line=err.line, col=err.col)
    with contextlib.suppress(OSError, ValueError):  # stdout itself may be what failed
        sys.stdout.write(line)
        sys.stdout.flush()


def _run_and_write(
    *,
    paths: list[str] | None,
    db: str | None,
    rules: str | None,
    skip_invalid: bool,
    input_format: str | None,
    fmt: str | None,
    flags: dict[str, object],
    output: str | None,
    mode: int | None,
) -> "AuditReport":
    """Run the audit and write its report to `output` (stdout for None or `-`); `mode`: the
    permission bits of the earlier report removed from `output`. Returns the report."""
    from lexkeep.audit.engine import audit_command  # keeps `lexkeep --help` fast
    from lexkeep.audit.render import render
    from lexkeep.core.ingest import input_size

    try:
        if paths and "-" in paths:
            note_terminal_stdin()
        # The total opens every file: found only when a bar is shown.
        total = functools.partial(input_size, paths) if paths else None
        with (
            doing("auditing the traces" if paths else "auditing the store"),
            progress("reading traces", total) as advance,
        ):
            report, settings = audit_command(
                paths=paths or (),
                db=db,
                rules=rules,
                skip_invalid=skip_invalid,
                input_format=input_format,
                flags=flags,
                on_progress=advance,
                on_phase=lambda text: advance(0, description=text),
                output=output,
            )
    except Exception as err:  # exit 2 (handle_errors); a GitHub job must see it too
        if _requested_format(fmt) == "github":
            _annotate_error(err)
        raise
    if settings.redact:
        from lexkeep.audit.report import redact_key_is_default

        if redact_key_is_default():
            warnings.warn(
                "--redact hashed with the public default key (LEXKEEP_REDACT_KEY is not"
                " set): short identifiers can be recovered by hashing guesses; set"
                " LEXKEEP_REDACT_KEY to a secret",
                SettingsWarning,
                stacklevel=1,
            )
    try:
        with output_stream(output, mode) as stream:
            color = settings.format == "table" and output in (None, "-") and is_terminal(stream)
            render(report, settings.format, stream, color=color)
            stream.flush()
    except BrokenPipeError:
        raise reader_gone(report.exit_code) from None
    except Exception as err:  # e.g. -o names a file that cannot be written
        if settings.format == "github":
            _annotate_error(err)
        raise
    if output not in (None, "-"):
        # The report is in the file: the log (a CI job's) still says how the gate went.
        from lexkeep.audit.render import verdict_line

        sys.stderr.write(visible(f"Wrote {output}: {verdict_line(report)}") + "\n")
    return report


def register(app: typer.Typer) -> None:
    """Add this module's commands to `app`."""

    @app.command()
    def audit(
        paths: Annotated[
            list[str] | None,
            typer.Argument(
                help="Trace files or folders (ingested into a temporary in-memory store).",
                show_default=False,
                metavar="PATH...",
            ),
        ] = None,
        db: DbOption = None,
        rules: Annotated[
            str | None,
            typer.Option(
                "--rules", help="Identifier rules TOML for the extractor.", metavar="FILE"
            ),
        ] = None,
        skip_invalid: Annotated[
            bool,
            typer.Option(
                "--skip-invalid", help="Skip trace lines that cannot be read (counted, not fatal)."
            ),
        ] = False,
        input_format: Annotated[
            str | None,
            typer.Option(
                "--input-format",
                metavar="FORMAT",
                help="Force the trace format, as for ingest: "
                + ", ".join(format_names())
                + " [default: detect per file].",
                show_default=False,
            ),
        ] = None,
        fmt: Annotated[
            str | None,
            typer.Option(
                "--format",
                "-f",
                help="table | json | junit | github | markdown | html [default: table].",
                show_default=False,
                metavar="FORMAT",
            ),
        ] = None,
        output: Annotated[
            str | None,
            typer.Option(
                "--output",
                "-o",
                help="Write the report to FILE (with no --format: .json, .html, .xml (junit)"
                " and .md name theirs).",
                metavar="FILE",
            ),
        ] = None,
        min_ratio: Annotated[
            float | None,
            typer.Option(
                "--min-ratio",
                help="Fail when kept/audited is below this [default: 1.0].",
                show_default=False,
                metavar="RATIO",
            ),
        ] = None,
        fail_on: Annotated[
            list[str] | None,
            typer.Option(
                "--fail-on",
                help="Also fail on any of these verdicts: altered,missing (or the flag twice).",
                metavar="VERDICTS",
            ),
        ] = None,
        exit_zero: Annotated[
            bool | None,
            typer.Option(
                "--exit-zero/--no-exit-zero",
                help="Exit 0 even when the gate fails (errors still exit 2).",
                show_default=False,
            ),
        ] = None,
        redact: Annotated[
            bool | None,
            typer.Option(
                "--redact/--no-redact",
                help="Replace identifier values by a keyed hash (key: $LEXKEEP_REDACT_KEY).",
                show_default=False,
            ),
        ] = None,
    ) -> None:
        """Audit whether identifiers typed by users survive compaction verbatim in later tool calls.

        Exit 0 when the gate is met, 1 when it is not, 2 when the audit could not run.
        Settings: flags, then LEXKEEP_MIN_RATIO / LEXKEEP_FAIL_ON / LEXKEEP_EXIT_ZERO /
        LEXKEEP_FORMAT / LEXKEEP_REDACT, then [tool.lexkeep.audit] in pyproject.toml.

        Example: lexkeep audit sample_traces/ --format github
        """
        flags = {
            "min_ratio": min_ratio,
            # Each --fail-on adds its verdicts (a repeated flag is not the last one alone).
            "fail_on": None if fail_on is None else ",".join(fail_on),
            "exit_zero": exit_zero,
            "format": fmt,
            "redact": redact,
        }
        try:
            refuse_output_over_inputs(output, paths or (), db)
            refuse_unwritable_output(output)  # not after a long audit
            # Whatever happens next, FILE never holds an earlier run's gate: a run that fails
            # (or is stopped) leaves no report there, one that succeeds writes its own.
            replaced_mode = remove_earlier_report(output)
        except Exception as err:  # exit 2 (handle_errors); a GitHub job must see it too
            if _requested_format(fmt) == "github":
                _annotate_error(err)
            raise
        try:
            report = _run_and_write(
                paths=paths,
                db=db,
                rules=rules,
                skip_invalid=skip_invalid,
                input_format=input_format,
                fmt=fmt,
                flags=flags,
                output=output,
                mode=replaced_mode,
            )
        except BaseException:  # an error, Ctrl-C or SIGTERM: the earlier report is gone
            if replaced_mode is not None:
                say_no_report(output)  # type: ignore[arg-type]  # a file, when one was removed
            raise
        raise typer.Exit(report.exit_code)
