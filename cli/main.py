"""The `lexkeep` console script: one Typer app, each command from its own module."""

import gc
import inspect
import os
import sys
from collections.abc import Callable
from typing import Annotated, Any

import typer
from typer.core import TyperGroup

from lexkeep.cli.common import (
    EXIT_INTERRUPTED,
    EXIT_TERMINATED,
    handle_errors,
    interrupted_by,
    interrupted_exit,
    stop_on_sigterm,
)
from lexkeep.core import __version__
from lexkeep.core.collector import single_shot


class _StopsAsInterrupted(TyperGroup):
    """The command group, whose Ctrl-C or SIGTERM while the command line is read (before a
    command's own handling: an option's callback, `--help` written into a slow pipe) stops
    as it does during a command: `Interrupted.`, exit 130 (143). Typer would exit 130 without
    a word, after SIGTERM too."""

    def make_context(self, *args: Any, **kwargs: Any) -> Any:
        try:
            return super().make_context(*args, **kwargs)
        except KeyboardInterrupt:
            raise interrupted_exit() from None

    def invoke(self, ctx: Any) -> Any:
        try:
            return super().invoke(ctx)
        except KeyboardInterrupt:
            raise interrupted_exit() from None


class LexkeepTyper(typer.Typer):
    """A Typer app whose every command maps errors to the exit-code contract (2 = could not run)."""

    def command(
        self, *args: Any, **kwargs: Any
    ) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
        def decorator(fn: Callable[..., Any]) -> Callable[..., Any]:
            options = dict(kwargs)
            if "help" not in options and "epilog" not in options and fn.__doc__:
                options["help"], options["epilog"] = _split_example(inspect.cleandoc(fn.__doc__))
            super(LexkeepTyper, self).command(*args, **options)(handle_errors(fn))
            return fn

        return decorator


def _split_example(doc: str) -> tuple[str, str | None]:
    """Move the docstring's trailing "Example:" paragraph to the epilog, so --help ends with it."""
    head, sep, example = doc.rpartition("\nExample")
    if not sep:
        return doc, None
    # "\b" keeps Click from re-wrapping the example lines.
    return head.rstrip(), "\b\nExample" + example.rstrip()


app = LexkeepTyper(
    name="lexkeep",
    cls=_StopsAsInterrupted,
    help=(
        "Audit whether identifiers typed by users survive agent-history compaction verbatim, "
        "and compact history under source-bound, immutable rules."
    ),
    epilog="\b\nExample: lexkeep audit sample_traces/",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
    context_settings={"help_option_names": ["-h", "--help"]},
)


def _version(value: bool) -> None:
    if value:
        typer.echo(f"lexkeep {__version__}")
        raise typer.Exit(0)


@app.callback()
def _root(
    version: Annotated[
        bool,
        typer.Option(
            "--version", callback=_version, is_eager=True, help="Show the version and exit."
        ),
    ] = False,
) -> None:
    """lexkeep: identifiers must survive compaction verbatim."""


def _register_commands() -> None:
    # Imported here so `lexkeep --version` stays fast and each area owns its module.
    from lexkeep.cli import audit, compact, context, extract, ingest

    for module in (ingest, extract, audit, compact, context):
        module.register(app)


_register_commands()


def _utf8_output() -> None:
    """Write UTF-8 to a file or a pipe whatever the locale says, and never fail on a
    character a terminal's encoding lacks.

    A report is read by programs (JSON, JUnit XML, Markdown for $GITHUB_STEP_SUMMARY), which
    take UTF-8; in a legacy encoding (a Windows runner, a Latin-1 locale) a trace file named
    `ünï.jsonl` or the Markdown verdict's mark stopped the command. A terminal keeps its
    encoding, with what it cannot show written as \\uXXXX escapes.
    """
    for stream in (sys.stdout, sys.stderr):
        encoding = (getattr(stream, "encoding", None) or "").lower().replace("_", "-")
        if encoding in ("utf-8", "utf8") or not hasattr(stream, "reconfigure"):
            continue
        try:
            if stream.isatty():
                stream.reconfigure(errors="backslashreplace")
            else:
                # Its error handler stays (stderr's writes what it cannot encode as escapes);
                # reconfigure would otherwise make it strict.
                stream.reconfigure(encoding="utf-8", errors=stream.errors)
        except (OSError, ValueError):
            pass  # closed, or already written to in a way that cannot change


def _closed_outputs_to_null() -> None:
    """Give a standard output or error that was closed (`>&-`, `2>&-`, pythonw) the null
    device. Python has no sys.stdout then, so the first print crashed; and the descriptor is
    free, so the next file opened (the store) would take it, and a stray write to it (a
    summariser's stderr, inherited) would land in that file."""
    for fd, name in ((1, "stdout"), (2, "stderr")):
        try:
            os.fstat(fd)
            continue
        except OSError:
            pass
        null = os.open(os.devnull, os.O_WRONLY)  # the lowest free descriptor: maybe not fd
        if null != fd:
            os.dup2(null, fd)
            os.close(null)
        errors = "backslashreplace" if fd == 2 else "strict"  # as Python's own streams
        stream = open(fd, "w", encoding="utf-8", errors=errors, closefd=False)  # noqa: SIM115
        setattr(sys, name, stream)


def main() -> None:
    """Console-script entry point."""
    stop_on_sigterm()  # a CI job cancelled or `timeout`: stop as on Ctrl-C, exit 143
    _closed_outputs_to_null()
    _utf8_output()
    # Everything made so far (imports) and by the command lives until exit. Frozen, it is
    # skipped by the collector during the command and by the full collection at interpreter
    # shutdown: about 50 ms of every call, a tenth of a quick one.
    gc.freeze()
    single_shot()  # and so is what each command's heavy phases leave alive
    try:
        app()
    except KeyboardInterrupt:
        # Ctrl-C or SIGTERM while Typer sets the command up, before its own handling is in
        # place: the same line and exit status as during the command.
        raise SystemExit(interrupted_exit().exit_code) from None
    except SystemExit as end:
        # SIGTERM in what little of Typer's own code the command group does not cover: Typer
        # exits 130 on it (Click: `Aborted!`, exit 1).
        if end.code in (1, EXIT_INTERRUPTED) and interrupted_by() == "SIGTERM":
            raise SystemExit(EXIT_TERMINATED) from None
        raise
    finally:
        gc.freeze()


if __name__ == "__main__":
    main()
