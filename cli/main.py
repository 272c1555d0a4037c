"""The `lexkeep` console script. Its module imports nothing heavy: `main()` puts the handling
of Ctrl-C and SIGTERM in place first, then imports the commands (`lexkeep.cli.app`), so a
signal that comes while they load stops the command as it would later."""

import gc
import os
import sys

from lexkeep.cli.signals import (
    EXIT_INTERRUPTED,
    EXIT_TERMINATED,
    interrupted_by,
    raise_pending,
    say_interrupted,
    stop_on_signals,
)


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
    # First: a CI job cancelled or `timeout` (SIGTERM) stops as on Ctrl-C, exit 143, and
    # either one that comes while the imports below run waits for them to finish.
    stop_on_signals()
    try:
        _closed_outputs_to_null()
        _utf8_output()
        from lexkeep.cli.app import app_for
        from lexkeep.core.collector import single_shot

        # A command's call builds that command's group alone (help and errors read the same).
        app = app_for(sys.argv[1:])

        raise_pending()  # one that came during the imports
        # Everything made so far (imports) and by the command lives until exit. Frozen, it
        # is skipped by the collector during the command and by the full collection at
        # interpreter shutdown: about 50 ms of every call, a tenth of a quick one.
        gc.freeze()
        single_shot()  # and so is what each command's heavy phases leave alive
    except KeyboardInterrupt:
        # Ctrl-C or SIGTERM before the command line is read: as during the command.
        raise SystemExit(say_interrupted()) from None
    try:
        app()
    except KeyboardInterrupt:
        # Ctrl-C or SIGTERM while Typer sets the command up, before its own handling is in
        # place: the same line and exit status as during the command.
        raise SystemExit(say_interrupted()) from None
    except SystemExit as end:
        # SIGTERM in what little of Typer's own code the command group does not cover: Typer
        # exits 130 on it (Click: `Aborted!`, exit 1).
        if end.code in (1, EXIT_INTERRUPTED) and interrupted_by() == "SIGTERM":
            raise SystemExit(EXIT_TERMINATED) from None
        raise
    finally:
        gc.freeze()


def __getattr__(name: str) -> object:
    """`app`, the Typer app with every command, loaded when asked for
    (`from lexkeep.cli.main import app`)."""
    if name == "app":
        from lexkeep.cli.app import app

        return app
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


if __name__ == "__main__":
    main()
