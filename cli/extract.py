"""`lexkeep extract`: show what the identifier rules find in a text, or re-extract a store."""

import sys
from enum import StrEnum
from pathlib import Path
from typing import Annotated

import orjson
import typer

from lexkeep.cli.common import (
    named_store,
    progress,
    stderr_console,
    stdin_text,
    stdout_console,
)
from lexkeep.core.controls import visible, visible_json
from lexkeep.core.errors import InputError

SCHEMA_VERSION = 1


class OutputFormat(StrEnum):
    """Output formats of `lexkeep extract`."""

    TABLE = "table"
    JSON = "json"


def register(app: typer.Typer) -> None:
    """Add this module's commands to `app`."""

    @app.command()
    def extract(
        text: Annotated[
            str | None,
            typer.Argument(
                help="Text to scan; '-' reads standard input.", show_default=False, metavar="TEXT"
            ),
        ] = None,
        db: Annotated[
            str | None,
            typer.Option(
                "--db",
                help="Re-extract every user message of this store instead of scanning TEXT.",
                show_default=False,
                metavar="FILE",
                callback=named_store,
            ),
        ] = None,
        rules: Annotated[
            Path | None,
            typer.Option(
                "--rules",
                help="Rules TOML file [default: [tool.lexkeep.identifiers] or built-in kinds].",
                show_default=False,
                metavar="FILE",
            ),
        ] = None,
        fmt: Annotated[
            str,
            typer.Option("--format", "-f", help="Output format: table or json.", metavar="FORMAT"),
        ] = OutputFormat.TABLE.value,
    ) -> None:
        """Print the identifiers the rules find in TEXT, or re-extract every user message of
        a store after a rule change (--db; idempotent, one transaction).

        Example: lexkeep extract "refund order #W2378156 to ann@example.org"
        """
        # Imported here: the extractor (regex, Hyperscan) is not needed by other commands.
        from lexkeep.core.config import output_format as choose
        from lexkeep.core.identifiers import extract as extract_identifiers
        from lexkeep.core.rules import load_rules
        from lexkeep.core.sidecar import reindex_path

        output_format = OutputFormat(choose(fmt, tuple(f.value for f in OutputFormat)))
        ruleset = load_rules(rules)
        if db is not None:
            if text is not None:
                raise InputError("give either TEXT or --db, not both")
            with progress("re-extracting", None, unit="messages") as tick:
                done = [0]

                def advance(scanned: int, total: int) -> None:
                    tick(scanned - done[0], total=total)
                    done[0] = scanned

                counts = reindex_path(db, ruleset, on_progress=advance)
            if output_format is OutputFormat.JSON:
                payload = {"schema_version": SCHEMA_VERSION, **counts.as_dict()}
                sys.stdout.write(orjson.dumps(payload).decode() + "\n")
            else:
                # one plain line: Rich wrapped it at 80 columns, breaking scripts that grep it
                sys.stdout.write(
                    f"Re-extracted {counts.messages} user messages of {visible(db)}: "
                    f"{counts.identifiers} identifiers, {counts.incomplete} incomplete scans "
                    + (f"(first: {counts.first_incomplete}) " if counts.first_incomplete else "")
                    + f"(rules {counts.rules_digest}).\n"
                )
            return
        if text is None:
            raise InputError(
                "nothing to scan",
                hint="give TEXT, '-' to read standard input, or --db FILE to re-extract a store",
            )
        source = stdin_text() if text == "-" else text
        result = extract_identifiers(source, ruleset)
        if output_format is OutputFormat.JSON:
            payload = {
                "schema_version": SCHEMA_VERSION,
                "complete": result.complete,
                "rules_digest": ruleset.digest,
                "identifiers": [
                    {"kind": i.kind, "value": i.value, "start": i.start, "end": i.end}
                    for i in result.identifiers
                ],
            }
            sys.stdout.write(visible_json(orjson.dumps(payload)).decode() + "\n")
        else:
            from rich.table import Table

            table = Table("kind")
            # an identifier is copied from here: fold a long one, never cut it to "…"
            table.add_column("value", overflow="fold")
            table.add_column("start")
            table.add_column("end")
            for ident in result.identifiers:
                # a value may hold a bidirectional override (a URL, a Windows path): shown
                # escaped, as every report shows user text
                table.add_row(
                    visible(ident.kind), visible(ident.value), str(ident.start), str(ident.end)
                )
            if result.identifiers:  # an empty table on stdout would read as output to parse
                stdout_console().print(table)
            else:
                stderr_console().print("No identifiers found.")
        if not result.complete:
            stderr_console().print(
                "Warning: the time budget ran out; the scan is incomplete (partial results)."
            )
