"""The `lexkeep` Typer app: one command group, each command from its own module."""

import importlib
import inspect
import sys
from collections.abc import Callable
from typing import Annotated, Any

import typer
from typer.core import TyperGroup

from lexkeep.cli.common import handle_errors, interrupted_exit
from lexkeep.core import __version__

# The error of a command line that cannot be parsed (an unknown option or command, a value
# of the wrong type, a missing argument): the base of typer.BadParameter. Found through it, so
# no module of Typer's own (or of the Click it vendors) is named here.
_USAGE_ERROR: type[Exception] = next(
    c for c in typer.BadParameter.__mro__ if c.__name__ == "UsageError"
)


class _StopsAsInterrupted(TyperGroup):
    """The command group, whose Ctrl-C or SIGTERM while the command line is read (before a
    command's own handling: an option's callback, `--help` written into a slow pipe) stops
    as it does during a command: `Interrupted.`, exit 130 (143). Typer would exit 130 without
    a word, after SIGTERM too.

    A command line that cannot be parsed is also an `::error` annotation on stdout when the
    audit's report format is github (see annotate_usage_error); Typer writes its `Usage:`
    and `Error:` lines on stderr and exits 2 as always."""

    def make_context(self, info_name: Any, args: Any, *rest: Any, **kwargs: Any) -> Any:
        self.command_line = list(args)
        try:
            return super().make_context(info_name, args, *rest, **kwargs)
        except KeyboardInterrupt:
            raise interrupted_exit() from None
        except _USAGE_ERROR as err:
            from lexkeep.cli.audit import annotate_usage_error

            annotate_usage_error(err, self.command_line, self.commands)
            raise

    def invoke(self, ctx: Any) -> Any:
        try:
            return super().invoke(ctx)
        except KeyboardInterrupt:
            raise interrupted_exit() from None
        except _USAGE_ERROR as err:  # the command's own options, read here
            from lexkeep.cli.audit import annotate_usage_error

            annotate_usage_error(err, getattr(self, "command_line", []), self.commands)
            raise


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


def _version(value: bool) -> None:
    if value:
        typer.echo(f"lexkeep {__version__}")
        raise typer.Exit(0)


def _root(
    version: Annotated[
        bool,
        typer.Option(
            "--version", callback=_version, is_eager=True, help="Show the version and exit."
        ),
    ] = False,
) -> None:
    """lexkeep: identifiers must survive compaction verbatim."""


# Each command and the module that defines it; `lexkeep --help` lists them in this order.
COMMAND_MODULES = {
    "ingest": "ingest",
    "stats": "ingest",
    "show": "ingest",
    "extract": "extract",
    "audit": "audit",
    "compact": "compact",
    "compactions": "compact",
    "context": "context",
    "guard": "context",
}


def make_app(command: str | None = None) -> LexkeepTyper:
    """The `lexkeep` command group: every command, or only those of the module that defines
    `command` (what a call of that command needs: Typer builds every command it is given at
    each start, ~7 ms for all of them, and each module is imported here)."""
    app = LexkeepTyper(
        name="lexkeep",
        cls=_StopsAsInterrupted,
        help=(
            "Audit whether identifiers typed by users survive agent-history compaction "
            "verbatim, and compact history under source-bound, immutable rules."
        ),
        epilog="\b\nExample: lexkeep audit sample_traces/",
        no_args_is_help=True,
        add_completion=False,
        pretty_exceptions_enable=False,
        rich_markup_mode=None,
        context_settings={"help_option_names": ["-h", "--help"]},
    )
    app.callback()(_root)
    # Imported here so `lexkeep --version` stays fast and each area owns its module.
    names = dict.fromkeys(COMMAND_MODULES.values())
    if command is not None:
        names = {COMMAND_MODULES[command]: None}
    for name in names:
        importlib.import_module(f"lexkeep.cli.{name}").register(app)
    return app


def app_for(args: list[str]) -> Any:
    """The group to run the command line `args` (the words after `lexkeep`) with: the one of
    its command alone when the first word names a command, else `app`, the whole group."""
    if args and args[0] in COMMAND_MODULES:
        return make_app(args[0])
    return sys.modules[__name__].app


def __getattr__(name: str) -> object:
    """`app`, the whole group, built when first asked for."""
    if name == "app":
        app = globals()["app"] = make_app()
        return app
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
