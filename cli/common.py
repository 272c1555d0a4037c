"""What every command shares: the error contract, consoles, --db, output files, progress."""

import contextlib
import errno
import functools
import os
import stat
import sys
import traceback
import warnings
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, TypeVar

import typer

from lexkeep.cli.signals import say_interrupted
from lexkeep.core.controls import visible
from lexkeep.core.errors import (
    LexkeepError,
    SettingsWarning,
    doing,
    is_query_interrupt,
    storage_error,
    unnamed_write_error,
)

if TYPE_CHECKING:
    from rich.console import Console

# Rich is imported where a console or a bar is made: `lexkeep context` and `guard` print
# plain bytes, and importing it costs about 40 ms of every call.

# Exit codes shared by every command (pip-audit / ruff convention); 130 and 143 for a command
# Ctrl-C or SIGTERM stopped (`signals`).
EXIT_OK = 0
EXIT_FINDINGS = 1
EXIT_ERROR = 2


def interrupted_exit() -> typer.Exit:
    """`Interrupted.` on stderr, and the exit for a stopped command: 130 after Ctrl-C, 143
    after SIGTERM."""
    return typer.Exit(say_interrupted())


F = TypeVar("F", bound=Callable[..., Any])


def named_store(value: str | None) -> str | None:
    """--db as given, refused when empty: `--db "$UNSET"` would otherwise use the default store
    (or, for audit, no store) without a word."""
    if value is not None and not value.strip():
        raise typer.BadParameter(
            "is empty: name the store file (e.g. --db lexkeep.duckdb), or leave --db out to use"
            " $LEXKEEP_DB or ./lexkeep.duckdb."
        )
    return value


DbOption = Annotated[
    str | None,
    typer.Option(
        "--db",
        help="DuckDB store file [default: $LEXKEEP_DB or ./lexkeep.duckdb].",
        show_default=False,
        metavar="FILE",
        callback=named_store,
    ),
]


def db_path(value: str | None) -> str:
    """The store path from --db, else $LEXKEEP_DB, else ./lexkeep.duckdb."""
    # Imported here: the store module imports DuckDB (~90 ms), which --help never needs.
    from lexkeep.core.store import default_db_path

    return value or default_db_path()


def counted(n: int, noun: str, plural: str | None = None) -> str:
    """`n` and the noun in the number it takes: '1 boundary', '2 boundaries', '0 files'."""
    return f"{n} {noun if n == 1 else plural or noun + 's'}"


def note_terminal_stdin() -> None:
    """Say that `-` reads what is typed when standard input is a terminal (nothing was piped
    in): the command would otherwise wait in silence."""
    if is_terminal(sys.stdin):
        with contextlib.suppress(OSError):
            sys.stderr.write(
                "Reading standard input from the terminal: type or paste, then Ctrl-D on a"
                " line of its own (to read a file, name it instead of -)\n"
            )
            sys.stderr.flush()


def stdin_text() -> str:
    """Standard input as text: UTF-8 with a leading byte-order mark skipped (as ingest skips it).

    Bytes that are not UTF-8 are an `InputError` naming `-` and the line and column (in
    characters) where they start.
    """
    from lexkeep.core.errors import InputError
    from lexkeep.core.ingest import stdin_stream
    from lexkeep.core.readers import BOM, bad_utf8

    stdin = stdin_stream()
    note_terminal_stdin()
    data = stdin.read()
    if isinstance(data, str):  # a text stream without a buffer (a test's StringIO)
        return data.removeprefix("\ufeff")
    data = data.removeprefix(BOM)
    place = bad_utf8(data)
    if place is not None:
        byte, line, col = place
        raise InputError(
            f"standard input is not UTF-8 text (byte 0x{byte:02x})",
            path="-",
            line=line,
            col=col,
            hint="convert it first, e.g. iconv -f latin1 -t utf-8",
        )
    return data.decode("utf-8")


def stderr_console(soft_wrap: bool = False) -> "Console":
    """Console for progress and summaries: stderr, no markup or highlighting of user text.

    `soft_wrap`: print lines whole and let the terminal wrap them (no line breaks inserted).
    """
    return _console_class(True)(stderr=True, highlight=False, markup=False, soft_wrap=soft_wrap)


@functools.cache
def _console_class(stderr: bool = False) -> type["Console"]:
    """Rich's Console, but not with Rich's answer to a closed pipe, SystemExit(1), which
    decided the exit code of `lexkeep stats | head -1` under pipefail: on stdout the closed
    pipe surfaces as BrokenPipeError, as every other write's does (handle_errors,
    reader_gone); on stderr, where progress and per-file lines go, the work goes on without
    them (an ingest whose log reader stopped still ingests every file)."""
    from rich.console import Console

    class PipeConsole(Console):
        def on_broken_pipe(self) -> None:
            self.quiet = True
            if not stderr:
                raise BrokenPipeError

    return PipeConsole


# A table piped into a file or a CI log is this wide unless $COLUMNS says otherwise; Rich's
# default there, 80 columns, folds ids and paths into unreadable slivers.
PIPED_WIDTH = 140


def piped(stream: Any) -> bool:
    """True when `stream` is a pipe or file and $COLUMNS gives no width: a log, where a report
    is laid out for PIPED_WIDTH and a line is better whole than wrapped."""
    return not is_terminal(stream) and not os.environ.get("COLUMNS", "").isdigit()


def stdout_console(file: Any = None) -> "Console":
    """Console for reports on stdout (or `file`): a terminal's own width, else PIPED_WIDTH."""
    stream = sys.stdout if file is None else file
    return _console_class(False)(
        file=file,
        highlight=False,
        markup=False,
        soft_wrap=False,
        width=PIPED_WIDTH if piped(stream) else None,
    )


def print_error(err: LexkeepError) -> None:
    """`Error: file:line:col: reason` then an optional `Hint:` line, on stderr, in the
    commands' words (lexkeep.cli.wording)."""
    from lexkeep.cli.wording import as_commands_say

    err = as_commands_say(err)
    # A file name or an id from a trace may hold ESC sequences or a bidirectional override.
    text = f"Error: {visible(str(err))}\n" + (f"Hint: {visible(err.hint)}\n" if err.hint else "")
    with contextlib.suppress(OSError):  # stderr's reader gone (`2>&1 | head`): exit 2 stands
        sys.stderr.write(text)
        sys.stderr.flush()


def reader_gone(code: int) -> typer.Exit:
    """The exit for a command whose stdout reader stopped reading (`| head`): `code`, the
    verdict the command reached, stands (a gate that failed must not pass because nobody read
    all of its report). Standard output is pointed at the null device, so the interpreter's
    last flush does not fail on the closed pipe again."""
    drop_stdout()
    return typer.Exit(code)


def drop_stdout() -> None:
    """Point standard output at the null device: its reader is gone, and what is still to be
    written (and flushed at exit) goes nowhere instead of failing again."""
    with contextlib.suppress(OSError, ValueError):
        null = os.open(os.devnull, os.O_WRONLY)
        os.dup2(null, sys.stdout.fileno())
        os.close(null)


def handle_errors(fn: F) -> F:
    """Map library errors to exit 2 with a message, and a crash to exit 2 too (never 1)."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            with warnings.catch_warnings():
                # Shown once each, as one line: Python's own format adds the source line.
                warnings.simplefilter("default", SettingsWarning)
                warnings.showwarning = _show_warning
                return fn(*args, **kwargs)
        except (typer.Exit, typer.Abort, SystemExit):
            raise
        except LexkeepError as err:
            print_error(err)
            raise typer.Exit(EXIT_ERROR) from err
        except KeyboardInterrupt:
            raise interrupted_exit() from None
        except BrokenPipeError:
            # The reader of stdout is gone (`| head`): what the command printed so far was
            # read; nothing is left to flush into the closed pipe at exit.
            raise reader_gone(EXIT_OK) from None
        except Exception as err:  # a crash must read as "could not run", not as findings
            if is_query_interrupt(err):
                raise interrupted_exit() from None
            unwritten = unnamed_write_error(err)
            if unwritten is not None:
                print_error(unwritten)
                raise reader_gone(EXIT_ERROR) from err  # and drop what it could not write
            storage = storage_error(err)
            if storage is not None:  # a full disk or a read-only folder: the user's to fix
                print_error(storage)
                raise typer.Exit(EXIT_ERROR) from err
            sys.stderr.write(f"Error: internal error: {type(err).__name__}: {visible(str(err))}\n")
            if os.environ.get("LEXKEEP_DEBUG"):
                traceback.print_exc()
            else:
                sys.stderr.write("Hint: set LEXKEEP_DEBUG=1 for the traceback, and report it\n")
            raise typer.Exit(EXIT_ERROR) from err

    return wrapper  # type: ignore[return-value]


def _show_warning(
    message: Warning | str,
    category: type[Warning],
    filename: str,
    lineno: int,
    file: Any = None,
    line: str | None = None,
) -> None:
    """`Warning: text` on stderr for lexkeep's warnings; Python's format for any other."""
    stream = file or sys.stderr
    if issubclass(category, SettingsWarning):
        # It names the user's files and settings: their control characters are shown escaped.
        stream.write(f"Warning: {visible(str(message))}\n")
    else:
        stream.write(warnings.formatwarning(message, category, filename, lineno, line))
    stream.flush()


def refuse_output_over_inputs(output: str | None, paths: Sequence[str], db: str | None) -> None:
    """Refuse `-o FILE` when FILE is what the command reads: one of the trace files `paths`
    names (directly, in a folder or by a glob) or, without paths, the store. The report would
    replace it (`-o` writes a new file over the old one), and with it the traces or the store.

    Only a regular file that exists can be one of them; a missing file, `-` or a device
    (/dev/null) costs nothing here.
    """
    if output is None or output == "-" or not os.path.isfile(output):  # unreachable: -o says
        return
    hint = "pass -o a file name of its own, e.g. -o audit-report.json"
    if not paths:
        store = db_path(db)
        if _same_file(output, store):
            raise LexkeepError(
                f"-o {output} is the store the audit reads ({store}): the report would replace it",
                hint=hint,
            )
        return
    from lexkeep.core.errors import InputError
    from lexkeep.core.ingest import expand_paths

    try:
        found = expand_paths(paths)
    except InputError:
        return  # the audit itself names the path that does not exist
    for trace, _ in found:
        if trace != "-" and _same_file(output, trace):
            raise LexkeepError(
                f"-o {output} is one of the audit's input traces ({trace}): the report would"
                " replace it",
                hint=hint,
            )


def refuse_unwritable_output(output: str | None) -> None:
    """Refuse `-o FILE` before the work when the report could not be written in any case: FILE
    is a folder, or the folder it would go in does not exist. The errors are those the write
    gives (output_stream); anything else (permissions, a full disk) is found by the write."""
    if output is None or output == "-":
        return
    target = Path(output)
    try:
        if target.is_dir():
            raise LexkeepError(
                f"cannot write {output}: it is a folder", hint="-o takes a file name"
            )
        if target.exists():
            return
        # Through a dangling symlink, the file it names is the one written.
        folder = Path(os.path.realpath(target)).parent
        missing = not folder.exists()
    except OSError:  # a folder above it that may not be searched: the write says so
        return
    if missing:
        raise LexkeepError(
            f"cannot write {output}: {os.strerror(errno.ENOENT)}",
            hint="create the folder first, or pass -o a writable path",
        )


def remove_earlier_report(output: str | None) -> int | None:
    """Remove the report an earlier run left at `-o FILE`, before this run does its work, so
    that a run that fails (an unreadable trace, Ctrl-C, a killed job) leaves no file a script
    or a later CI step could read as this run's gate. Returns the removed file's permission
    bits (the new report takes them), None when there was none.

    Call it after the checks that refuse FILE (refuse_output_over_inputs: FILE may be an input;
    refuse_unwritable_output). A device or named pipe is written into, never removed; through
    a symlink the file it names is removed, and the link stays. An existing FILE that may not
    be written (read-only) or a folder that may not be written is refused here, untouched.
    """
    if output is None or output == "-":
        return None
    target = Path(os.path.realpath(output))
    try:
        if not stat.S_ISREG(os.stat(target).st_mode):
            return None
    except OSError:
        return None  # no file there (the write says what else is wrong)
    mode = _writable_mode(target, output)
    try:
        target.unlink()
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise LexkeepError(
            f"cannot write {output}: {exc.strerror}",
            hint=f"make the folder {target.parent} writable, or pass -o another path",
        ) from exc
    return mode


def say_no_report(output: str) -> None:
    """Say on stderr that the earlier report at `output` was removed and this run wrote none."""
    with contextlib.suppress(OSError, ValueError):
        sys.stderr.write(visible(f"Removed {output}, an earlier run's report: this run wrote none"))
        sys.stderr.write("\n")
        sys.stderr.flush()


def _same_file(a: str, b: str) -> bool:
    """True when both paths exist and name one file (through links, or two spellings)."""
    try:
        return os.path.samefile(a, b)
    except OSError:
        return False


@contextmanager
def output_stream(path: str | None, mode: int | None = None) -> Iterator[Any]:
    """Text stream for a report: the file named by -o (written atomically) or stdout.

    `mode`: the permission bits of the file the report replaces when remove_earlier_report
    removed it before the work (a file still there gives its own)."""
    with doing("writing the report"), _output_stream(path, mode) as stream:
        yield stream


@contextmanager
def _output_stream(path: str | None, removed_mode: int | None = None) -> Iterator[Any]:
    if path is None or path == "-":
        yield sys.stdout
        return
    target = Path(path)
    try:
        is_folder, is_other = target.is_dir(), target.exists() and not target.is_file()
    except OSError as exc:  # a folder above it that may not be searched
        raise LexkeepError(
            f"cannot write {path}: {exc.strerror}",
            hint="make the folders above it searchable and its own folder writable, or pass -o"
            " another path",
        ) from exc
    if is_folder:
        raise LexkeepError(f"cannot write {path}: it is a folder", hint="-o takes a file name")
    if is_other:
        # A device (/dev/null, /dev/stdout) or a named pipe is written into: replacing it by
        # a regular file would leave the reader of the pipe waiting, and /dev/null gone.
        try:
            stream = open(target, "w", encoding="utf-8", newline="")  # noqa: SIM115
        except OSError as exc:
            raise LexkeepError(f"cannot write {path}: {exc.strerror}") from exc
        try:
            with stream:
                yield stream
        except OSError as exc:
            named = _no_room(exc, path)
            if named is None:
                raise
            raise named from exc
        return
    # Through a symlink, the file it names is replaced, and the link stays.
    target = Path(os.path.realpath(target))
    mode = _writable_mode(target, path)
    if mode is None:
        mode = removed_mode
    tmp = target.with_name(f".{target.name}.tmp")
    try:
        fh = tmp.open("w", encoding="utf-8", newline="")
    except OSError as exc:  # a missing folder or no permission is the user's to fix, not a crash
        folder = target.parent
        hint = (
            f"make the folder {folder} writable, or pass -o another path"
            if folder.is_dir()
            else "create the folder first, or pass -o a writable path"
        )
        raise LexkeepError(f"cannot write {path}: {exc.strerror}", hint=hint) from exc
    try:
        with fh:
            yield fh
        if mode is not None:  # the report takes the permissions of the file it replaces
            os.chmod(tmp, mode)
        os.replace(tmp, target)
    except BaseException as exc:
        tmp.unlink(missing_ok=True)  # a failed report leaves neither a half file nor its temp
        named = _no_room(exc, path) if isinstance(exc, OSError) else None
        if named is None:
            raise
        raise named from exc


def _writable_mode(target: Path, path: str) -> int | None:
    """The permission bits of the existing file `target` (-o `path`, which the report is to
    replace), None when there is none; a LexkeepError when it may not be written.

    The report is written to a temporary file renamed over `target`, which only the folder's
    permissions govern: a file its owner made read-only would be replaced all the same. So it
    is opened for writing first (not truncated: nothing of it changes), as `>` would open it.
    """
    try:
        mode = stat.S_IMODE(os.stat(target).st_mode)
    except FileNotFoundError:
        return None
    except OSError:
        return None  # opening the temporary file beside it says what is wrong
    try:
        fd = os.open(target, os.O_WRONLY)
    except OSError as exc:
        if exc.errno not in (errno.EACCES, errno.EPERM, errno.EROFS):
            return mode
        raise LexkeepError(
            f"cannot write {path}: {exc.strerror}",
            hint=f"make {path} writable, or pass -o another path",
        ) from exc
    os.close(fd)
    return mode


# A write that failed for want of room: a full disk, a quota, a file size limit (ulimit -f).
_NO_ROOM = (errno.ENOSPC, errno.EDQUOT, errno.EFBIG)


def _no_room(exc: OSError, path: str) -> LexkeepError | None:
    """The report file `path` could not be written for want of room, as an error naming it
    (the OSError of a write names no file); None for any other failure."""
    if exc.filename is not None or exc.errno not in _NO_ROOM:
        return None
    return LexkeepError(
        f"cannot write {path}: {exc.strerror}",
        hint=f"free space (or raise the quota or file size limit) where {path} is, or pass -o"
        " a file on another disk, then run the command again",
    )


def is_terminal(stream: Any) -> bool:
    """True when `stream` is an interactive terminal."""
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False


@contextmanager
def progress(
    description: str,
    total: int | None | Callable[[], int | None],
    *,
    unit: str = "bytes",
    shown: bool = True,
) -> Iterator[Callable[..., None]]:
    """A Rich progress bar on stderr when it is a terminal (and `shown`, False for --quiet);
    a silent callback otherwise.

    `total` may be a function that finds it (input_size opens every file): it is called only
    when a bar is shown. Yields `advance(n=1, description=None, total=None)`; a `total` given
    there replaces the bar's (for work whose size is known only once it starts).
    """
    if not shown or not is_terminal(sys.stderr):
        yield lambda n=1, description=None, total=None: None
        return
    if callable(total):
        total = total()
    from rich.progress import (
        BarColumn,
        DownloadColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeRemainingColumn,
    )

    count_column = DownloadColumn() if unit == "bytes" else MofNCompleteColumn()
    with Progress(
        # A description may name a conversation from a trace: shown as it is, never read as
        # Rich markup (`c[/x]` raised MarkupError), its controls and overrides as \uXXXX.
        TextColumn("{task.description}", markup=False),
        BarColumn(),
        count_column,
        TimeRemainingColumn(),
        # While the bar shows, lines written to stderr (an ingest's summary per file) go
        # through this console: soft wrap keeps each one line, so a long path stays whole.
        console=stderr_console(soft_wrap=True),
        transient=True,
    ) as bar:
        task = bar.add_task(visible(description), total=total)

        def advance(n: int = 1, description: str | None = None, total: int | None = None) -> None:
            if total is not None:
                bar.update(task, total=total)
            text = visible(description) if description else bar.tasks[0].description
            bar.update(task, advance=n, description=text)

        yield advance
