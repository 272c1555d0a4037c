"""`lexkeep context` and `lexkeep guard`: what the next run sees, and a check before a tool call."""

import sys
from pathlib import Path
from typing import Annotated

import orjson
import typer

from lexkeep.cli.common import EXIT_OK, DbOption, db_path, note_terminal_stdin, reader_gone
from lexkeep.compaction.contextformat import DEFAULT_ANSWER_BYTES, MAX_BYTES, ContextFormat
from lexkeep.core.controls import visible_json
from lexkeep.core.errors import InputError

# The store and the context builder are imported by the command that runs: they import DuckDB
# and the compaction modules (~0.1 s), which `lexkeep --help` and `--version` never need.


def _names_a_file(text: str) -> bool:
    """True when ARGUMENTS_JSON is the name of an existing file (a mistake for `- < FILE`)."""
    try:
        return len(text) < 4096 and "\n" not in text and Path(text).is_file()
    except (OSError, ValueError):
        return False


def _at_most_64_bits(value: int) -> int:
    """Refuse a size beyond MAX_BYTES (the output names it in JSON, a 64-bit integer).

    Checked here rather than as the option's `max`: help would print the range with its
    19 digits.
    """
    if value > MAX_BYTES:
        raise typer.BadParameter(f"{value} is more than the largest size, {MAX_BYTES} (2**63-1).")
    return value


def _format(raw: str) -> ContextFormat:
    """--format of `context` and `guard`: text or json (`table` names text too)."""
    from lexkeep.core.config import output_format

    return ContextFormat(output_format(raw, tuple(f.value for f in ContextFormat)))


def register(app: typer.Typer) -> None:
    """Add this module's commands to `app`."""

    @app.command()
    def context(
        conversation: Annotated[
            str, typer.Argument(help="Conversation id.", metavar="CONVERSATION")
        ],
        budget_bytes: Annotated[
            int,
            typer.Option(
                "--budget-bytes",
                min=1,
                callback=_at_most_64_bits,
                help="Hard limit on the UTF-8 bytes printed (the whole output, newline included).",
                metavar="BYTES",
            ),
        ],
        fmt: Annotated[
            str,
            typer.Option(
                "--format", "-f", help="json (machines) or text (a prompt).", metavar="FORMAT"
            ),
        ] = ContextFormat.JSON.value,
        answer_bytes: Annotated[
            int,
            typer.Option(
                "--answer-bytes",
                min=0,
                callback=_at_most_64_bits,
                help="Bound on each assistant answer in a bounded projection of raw pairs.",
                metavar="BYTES",
            ),
        ] = DEFAULT_ANSWER_BYTES,
        db: DbOption = None,
    ) -> None:
        """Print the next run's context of a conversation, never more than --budget-bytes.

        Pinned identifiers first, then the newest raw pairs, then older 10-pair segments as
        "user messages + assistant-history summary" (valid summaries only), else a bounded
        projection, else omitted; every omitted range is listed with its reason.

        Example: lexkeep context support-4471 --budget-bytes 8000 --db traces.duckdb
        """
        from lexkeep.compaction.context import build_context
        from lexkeep.core.store import Store

        format = _format(fmt)
        with Store.open(db_path(db), read_only=True) as store:
            ctx = build_context(
                store, conversation, budget_bytes, format=format, answer_bytes=answer_bytes
            )
        # The exact bytes that were counted: no console, no wrapping, no extra newline, and
        # UTF-8 whatever the locale says.
        sys.stdout.flush()
        binary = getattr(sys.stdout, "buffer", None)
        if binary is not None:
            binary.write(ctx.output.encode("utf-8"))
            binary.flush()
        else:
            sys.stdout.write(ctx.output)
            sys.stdout.flush()
        raise typer.Exit(EXIT_OK)

    @app.command()
    def guard(
        conversation: Annotated[
            str, typer.Argument(help="Conversation id.", metavar="CONVERSATION")
        ],
        arguments_json: Annotated[
            str,
            typer.Argument(
                metavar="ARGUMENTS_JSON", help="Proposed tool arguments as JSON, or - for stdin."
            ),
        ],
        fmt: Annotated[
            str,
            typer.Option(
                "--format", "-f", help="text (people) or json (machines).", metavar="FORMAT"
            ),
        ] = ContextFormat.TEXT.value,
        rules: Annotated[
            Path | None,
            typer.Option(
                "--rules",
                metavar="FILE",
                help="Identifier rules TOML [default: [tool.lexkeep.identifiers], else built-in].",
            ),
        ] = None,
        strict: Annotated[
            bool,
            typer.Option(
                "--strict",
                help="Exit 1 also when a value's identifier scan ran out of time (its rest "
                "went unchecked).",
            ),
        ] = False,
        db: DbOption = None,
    ) -> None:
        """Check proposed tool arguments: exit 1 when an identifier was never supplied verbatim.

        Every identifier-shaped value in the arguments must occur verbatim in a user message or
        a tool result of the conversation; each one that does not is reported with the nearest
        known value and how it differs (truncated, case, separator, edit). Exit 0: all supplied;
        1: some were not (or, with --strict, a scan was incomplete); 2: bad JSON, unknown
        conversation, or no store.

        Example: lexkeep guard support-4471 '{"invoice_id": "INV-2025-08-44719"}' --db traces.duckdb
        """
        # Imported here: the guard pulls in the identifier rules, which `context` never needs.
        from lexkeep.compaction.guard import guard_arguments, guard_to_json, guard_to_text
        from lexkeep.core.rules import load_rules
        from lexkeep.core.store import Store

        format = _format(fmt)
        source = "-" if arguments_json == "-" else "ARGUMENTS_JSON"  # "-" as ingest names stdin
        # Standard input as bytes: the guard skips a byte-order mark and names bad UTF-8's place.
        if arguments_json == "-":
            from lexkeep.core.ingest import stdin_stream

            stdin = stdin_stream()
            note_terminal_stdin()
            raw = stdin.read()
        else:
            raw = arguments_json
        with Store.open(db_path(db), read_only=True) as store:
            try:
                report = guard_arguments(
                    store, conversation, raw, rules=load_rules(rules), arguments_path=source
                )
            except InputError as err:
                if err.path == "ARGUMENTS_JSON" and _names_a_file(arguments_json):
                    err.hint = (
                        f"{arguments_json} is a file: pass its JSON on standard input,"
                        f" lexkeep guard {conversation} - < {arguments_json}"
                    )
                raise
        # An incomplete scan checked only part of a value: by default that passes with a note
        # (`passed`); a gate that must not pass what it did not see asks for --strict (`ok`).
        code = report.exit_code if strict else (0 if report.passed else 1)
        try:
            if format is ContextFormat.JSON:
                doc = visible_json(orjson.dumps(guard_to_json(report)))  # as `context` does
                sys.stdout.write(doc.decode() + "\n")
            else:
                sys.stdout.write(guard_to_text(report))
            sys.stdout.flush()
        except BrokenPipeError:
            raise reader_gone(code) from None
        raise typer.Exit(code)
