"""`lexkeep` commands for the compact area: `compact` and `compactions`."""

import sys
from typing import TYPE_CHECKING, Annotated

import orjson
import typer

from lexkeep.cli.common import (
    EXIT_FINDINGS,
    EXIT_OK,
    DbOption,
    counted,
    db_path,
    drop_stdout,
    interrupted_exit,
    piped,
    progress,
    stdout_console,
)
from lexkeep.cli.signals import interrupted_by
from lexkeep.core.controls import visible, visible_json

if TYPE_CHECKING:
    from rich.console import Console

SCHEMA_VERSION = 1


def register(app: typer.Typer) -> None:
    """Add this module's commands to `app`."""

    @app.command()
    def compact(
        db: DbOption = None,
        conversation: Annotated[
            list[str] | None,
            typer.Option(
                "--conversation",
                "-c",
                help="Only this conversation (repeatable) [default: all].",
                metavar="ID",
            ),
        ] = None,
        summarizer: Annotated[
            str,
            typer.Option(
                "--summarizer",
                "-s",
                help='extractive | command:"PROGRAM ARGS" | openai | a plugin name.',
                metavar="SUMMARIZER",
            ),
        ] = "extractive",
        workers: Annotated[
            int,
            typer.Option("--workers", "-w", min=1, help="In-process worker slots.", metavar="N"),
        ] = 1,
        max_running: Annotated[
            int | None,
            typer.Option(
                "--max-running",
                min=1,
                help="Shared admission limit: jobs running at once, counted in the store.",
                metavar="N",
            ),
        ] = None,
        dry_run: Annotated[
            bool, typer.Option("--dry-run", help="Plan only: show what would be claimed.")
        ] = False,
        base_url: Annotated[
            str | None,
            typer.Option(
                "--base-url", help="openai: chat-completions base URL (…/v1).", metavar="URL"
            ),
        ] = None,
        model: Annotated[
            str | None, typer.Option("--model", help="openai: model name.", metavar="NAME")
        ] = None,
        timeout: Annotated[
            float,
            typer.Option(
                "--timeout",
                min=0.1,
                help="Deadline in seconds for each summariser call, start to finish.",
                metavar="SECONDS",
            ),
        ] = 120.0,
        lease_seconds: Annotated[
            float | None,
            typer.Option(
                "--lease-seconds",
                min=0.1,
                help="Lease per claim: the whole time an attempt has, so at least the "
                "timeout + 5; a worker that dies frees its range after it [default: timeout + 60].",
                show_default=False,
                metavar="SECONDS",
            ),
        ] = None,
        fmt: Annotated[
            str, typer.Option("--format", "-f", help="text | json.", metavar="FORMAT")
        ] = "text",
    ) -> None:
        """Summarise old history into source-bound, immutable summaries (10-pair windows).

        Only assistant answers reach the summariser; every summary is bound to the SHA-256 of
        its 10 source pairs and written once. Counts go to stdout; progress to stderr.
        Exit 0 when every claimed segment completed, 1 when an attempt failed (recorded; a
        later run retries it), 2 when the run could not start, the summariser could not be
        reached, it failed the same way on the run's first 3 calls (no attempt is counted), or
        another error stopped the run (a store that could not be written): a run stopped
        mid-way first prints the counts of what finished before, and gives back the claims
        in progress; 130 on Ctrl-C (after those counts too; a call in progress is given back,
        no attempt counted).

        Example: lexkeep compact --db traces.duckdb --summarizer extractive --workers 4
        """
        from lexkeep.compaction.engine import (
            CompactionCancelled,
            CompactionFailed,
            CompactionInterrupted,
            CompactionStopped,
            CompactionStoreHeld,
            run_compaction,
        )
        from lexkeep.compaction.summarizers import SummarizerOptions
        from lexkeep.core.config import output_format

        fmt = output_format(fmt, ("text", "json"))
        options = SummarizerOptions(base_url=base_url, model=model, timeout=timeout)
        path = db_path(db)  # where there is no store, run_compaction creates none: exit 2
        # Given the path, the run opens the store only to read, claim and write: a model or a
        # program summarising leaves it free for `context`, `ingest` or another `compact`.
        interrupted = False
        stopped: (
            CompactionStopped | CompactionStoreHeld | CompactionFailed | CompactionCancelled | None
        ) = None
        try:
            with progress("compacting", None, unit="items") as tick:
                report = run_compaction(
                    path,
                    conversation_ids=conversation or None,
                    summarizer=summarizer,
                    summarizer_options=options,
                    workers=workers,
                    max_running=max_running,
                    dry_run=dry_run,
                    lease_seconds=lease_seconds,
                    # every segment of the run, known before the first is worked on: "N/M"
                    on_planned=lambda planned: tick(0, total=planned),
                    on_progress=lambda out: tick(1, f"compacting {out.conversation_id}"),
                )
        except CompactionInterrupted as stop:
            # Ctrl-C or SIGTERM: what finished before it is in the store; say what, then exit
            # 130 (143 after SIGTERM).
            report, interrupted = stop.report, True
        except (
            CompactionStopped,
            CompactionStoreHeld,
            CompactionFailed,
            CompactionCancelled,
        ) as stop:
            # The summariser went away mid-run or was cancelled (a plugin's own cancel()),
            # another process kept the store past a lease, or an error stopped the run (a
            # store that could not be written): what finished before is in the store, and the
            # counts say so before the error (exit 2) does.
            report, stopped = stop.report, stop
        try:
            if fmt == "json":
                doc = _report_json(report)
                doc["interrupted"] = interrupted
                held = isinstance(stopped, CompactionStoreHeld)
                unreachable = isinstance(stopped, CompactionStopped)
                doc["unreachable"] = str(stopped) if unreachable else None
                doc["store_held"] = str(stopped) if held else None
                doc["error"] = None if stopped is None else str(stopped)
                sys.stdout.write(_json(doc))
            else:
                why = None
                if isinstance(stopped, CompactionStoreHeld):
                    left = report.remaining
                    why = (
                        "another process held the store until a claim's lease expired; these"
                        " counts are what was stored before; "
                        f"{left} planned segment{'' if left == 1 else 's'}"
                        f" {'was' if left == 1 else 'were'} left for a later run (a claim whose"
                        " lease expired counts as a failed attempt)"
                    )
                elif isinstance(stopped, CompactionFailed):
                    why = "an error stopped the run; " + _unfinished(report)
                elif isinstance(stopped, CompactionCancelled):
                    why = "the summariser was cancelled; " + _unfinished(report)
                elif stopped is not None:
                    why = (
                        "the summariser failed the same way on its first calls"
                        if stopped.misconfigured
                        else "the summariser could not be reached"
                    )
                    left = report.remaining
                    why += (
                        f"; these counts are what finished before it; {left} planned"
                        f" segment{'' if left == 1 else 's'} {'was' if left == 1 else 'were'} not"
                        " summarised (no attempt was counted), and a later run takes them up"
                    )
                _print_report(report, interrupted=interrupted, stopped=why)
            sys.stdout.flush()
        except BrokenPipeError:
            # The reader of the counts is gone (`| head`): the run's outcome below still
            # decides the exit code, as a failed attempt must not pass for a success.
            drop_stdout()
        if report.pending_migrations and report.schema is not None:
            have, current = report.schema
            sys.stdout.flush()
            sys.stderr.write(
                f"Note: {visible(str(path))} is at schema {have} of {current}; a run without"
                " --dry-run migrates it first (this dry run changed nothing)\n"
            )
        if isinstance(stopped, CompactionFailed):
            sys.stdout.flush()
            # As when nothing had finished: `Error:` and `Hint:` (an internal error's own two
            # lines for a crash) on stderr, exit 2.
            raise stopped.cause
        if stopped is not None:
            sys.stdout.flush()
            raise stopped  # `Error:` and `Hint:` on stderr, exit 2
        if interrupted:
            sys.stdout.flush()
            raise interrupted_exit()
        if report.planned == 0:  # "planned 0" alone reads like a run that did not work
            sys.stderr.write(
                "Nothing to compact: a 10-pair segment is summarised once at least 20 newer"
                " eligible pairs follow it (the first one at 30 pairs); see docs/compaction.md\n"
            )
        # A failed attempt is recorded and its range can be claimed again by a later run, but
        # a script must not take a run where the summariser failed for a success.
        raise typer.Exit(EXIT_FINDINGS if report.failed else EXIT_OK)

    @app.command()
    def compactions(
        db: DbOption = None,
        conversation: Annotated[
            list[str] | None,
            typer.Option(
                "--conversation", "-c", help="Only this conversation (repeatable).", metavar="ID"
            ),
        ] = None,
        fmt: Annotated[
            str, typer.Option("--format", "-f", help="table | json.", metavar="FORMAT")
        ] = "table",
    ) -> None:
        """List lexkeep's compaction jobs: identity, status, attempts and errors.

        Example: lexkeep compactions --db traces.duckdb --format json
        """
        from lexkeep.compaction.jobs import list_jobs
        from lexkeep.core.config import output_format
        from lexkeep.core.store import Store

        fmt = output_format(fmt, ("table", "json"))
        with Store.open(db_path(db), read_only=True) as store:
            rows = list_jobs(store.con, conversation or None)
        if fmt == "json":
            doc = {"schema_version": SCHEMA_VERSION, "jobs": [_job_json(r) for r in rows]}
            sys.stdout.write(_json(doc))
            raise typer.Exit(EXIT_OK)
        console = stdout_console()
        if rows:
            _print_jobs(console, [_job_cells(r) for r in rows])
        else:
            console.print("No compaction jobs.")
        raise typer.Exit(EXIT_OK)


JOB_COLUMNS = ("job", "conversation", "pairs", "status", "attempts", "prompt", "model", "detail")


def _job_cells(r) -> tuple[str, ...]:
    """One job's cells for `lexkeep compactions`, as JOB_COLUMNS name them."""
    status = r.status
    if r.status == "completed":
        detail = f"{r.summary_chars} chars"
        if r.identifiers_total:
            detail += f", identifiers {r.identifiers_kept}/{r.identifiers_total} verbatim"
        if r.stale:
            # Completed once, but `context` no longer uses it: say so where one looks.
            status = "stale"
            detail = f"not used by context: {r.stale_reason}; {detail}"
    else:
        detail = r.last_error or ""
    return (
        r.id[:12],
        visible(r.conversation_id),
        f"{r.from_pair}–{r.to_pair}",
        status,
        str(r.attempts),
        "@" + r.prompt_version.rpartition("@")[2],
        visible(r.model_id),
        visible(detail),  # a summariser's stderr: often coloured with ESC codes
    )


def _print_jobs(console: "Console", jobs: list[tuple[str, ...]]) -> None:
    """The jobs as a table where it holds every id and model whole and the detail at least
    a few words wide; else one block of lines a job (lexkeep.core.layout), whose ids, model
    and the detail's paths are never broken (in a pipe, a field a line however long)."""
    from rich.cells import cell_len
    from rich.table import Table
    from rich.text import Text

    from lexkeep.core.layout import PROSE, WHOLE, fit_widths, longest_word, record_lines

    natural = [
        max(len(title), *(cell_len(job[i]) for job in jobs)) for i, title in enumerate(JOB_COLUMNS)
    ]
    # Every column but the detail whole; the detail wraps at spaces, in at least 24 columns.
    floors = [*natural[:-1], max(longest_word(job[-1]) for job in jobs)]
    floors[-1] = max(floors[-1], min(natural[-1], 24))
    widths = fit_widths(natural, floors, console.width - 2 * len(JOB_COLUMNS))  # padding
    if widths is not None:
        table = Table(title=None, show_lines=False, box=None)
        for title, width in zip(JOB_COLUMNS, widths, strict=True):
            table.add_column(title, width=width, overflow="fold")
        for job in jobs:
            table.add_row(*job)
        console.print(table)
        return
    whole = None if piped(console.file) else console.width
    for index, job in enumerate(jobs):
        if index:
            console.print()
        head = record_lines([(job[0], job[3], WHOLE)], whole, indent=0)
        fields = [(title, job[i], WHOLE) for i, title in enumerate(JOB_COLUMNS) if i not in (0, 3)]
        fields[-1] = ("detail", job[-1], PROSE)
        for line in head + record_lines([f for f in fields if f[1]], whole):
            console.print(Text(line), soft_wrap=True)


def _json(doc: dict) -> str:
    # A summariser's stderr or an id may hold DEL, C1 controls or bidirectional overrides,
    # which orjson writes as they are: escaped, they decode to the same text.
    return visible_json(orjson.dumps(doc)).decode() + "\n"


def _report_json(report) -> dict:
    return {
        "schema_version": SCHEMA_VERSION,
        "dry_run": report.dry_run,
        "pending_migrations": report.pending_migrations,
        "conversations": report.conversations,
        "planned": report.planned,
        "claimed": report.claimed,
        "completed": report.completed,
        "failed": report.failed,
        "skipped": report.skipped,
        "skipped_reasons": dict(report.skipped_reasons),
        "remaining": report.remaining,
        "claims_held": report.claims_held,
        "identifiers_total": report.identifiers_total,
        "identifiers_kept": report.identifiers_kept,
        "identifier_share": report.identifier_share,
        "seconds": round(report.seconds, 3),
        "segments": [
            {
                "conversation_id": s.conversation_id,
                "from_pair": s.from_pair,
                "to_pair": s.to_pair,
                "outcome": s.outcome,
                "job_id": s.job_id,
                "attempt": s.attempt,
                "detail": s.detail,
            }
            for s in report.segments
        ],
    }


def _unfinished(report) -> str:
    """What a run an error stopped left undone, for its `stopped:` line."""
    left, held = report.remaining, report.claims_held
    text = (
        f"these counts are what finished before it; {left} planned"
        f" segment{'' if left == 1 else 's'} {'was' if left == 1 else 'were'} not summarised"
    )
    later = f"a later run takes {'it' if left == 1 else 'them'} up"
    if not held:
        return f"{text} (no attempt was counted), and {later}"
    if held == 1:
        which = "it" if left == 1 else "1 of them"
        return (
            f"{text}, and {later}; {which} could not be given back and stays claimed until its"
            " lease expires (then it counts as a failed attempt)"
        )
    which = "they" if held == left else f"{held} of them"
    return (
        f"{text}, and {later}; {which} could not be given back and stay claimed until their"
        " leases expire (then each counts as a failed attempt)"
    )


def _print_report(report, *, interrupted: bool = False, stopped: str | None = None) -> None:
    # Plain writes: these lines are parsed by scripts and must never be re-wrapped.
    lines = []
    verb = "would claim" if report.dry_run else "claimed"
    claimed = report.planned - report.skipped if report.dry_run else report.claimed
    lines.append(
        f"{counted(report.conversations, 'conversation')}: planned {report.planned}, "
        f"{verb} {claimed}, "
        f"completed {report.completed}, failed {report.failed}, skipped {report.skipped}"
    )
    if report.skipped_reasons:
        reasons = ", ".join(f"{k} {v}" for k, v in sorted(report.skipped_reasons.items()))
        lines.append(f"skipped: {reasons}")
    if report.identifier_share is not None:
        lines.append(
            "identifiers of the summarised answers kept verbatim: "
            f"{report.identifiers_kept}/{report.identifiers_total} "
            f"({report.identifier_share:.1%})"
        )
    for seg in report.segments:
        if seg.outcome == "failed":
            lines.append(
                # the detail may hold a summariser's own output (a program's stderr, an
                # HTTP body): its control characters are shown, not sent to the terminal
                visible(
                    f"failed: {seg.conversation_id} pairs {seg.from_pair}–{seg.to_pair} "
                    f"(attempt {seg.attempt}): {seg.detail}"
                )
            )
    if interrupted:
        held = report.claims_held
        if not held:
            lines.append(
                f"interrupted: these counts are what finished before {interrupted_by()}; a call"
                " in progress was abandoned and its claim given back (no attempt was counted), and"
                " a later run takes up the rest"
            )
        else:  # another process held the store past $LEXKEEP_LOCK_WAIT
            claims = "1 claim" if held == 1 else f"{held} claims"
            stays = (
                "stays claimed until its lease expires (then it counts"
                if held == 1
                else "stay claimed until their leases expire (then each counts"
            )
            lines.append(
                f"interrupted: these counts are what finished before {interrupted_by()}; a call"
                " in progress was abandoned, and a later run takes up the rest;"
                f" {claims} could not be given back (the store could not be written in time) and"
                f" {stays} as a failed attempt)"
            )
    if stopped:
        lines.append(f"stopped: {stopped}")
    sys.stdout.write("".join(line + "\n" for line in lines))


def _job_json(r) -> dict:
    return {
        "id": r.id,
        "conversation_id": r.conversation_id,
        "scope": r.scope,
        "from_pair": r.from_pair,
        "to_pair": r.to_pair,
        "source_digest": r.source_digest,
        "model_id": r.model_id,
        "prompt_version": r.prompt_version,
        "status": r.status,
        "stale": r.stale,
        "stale_reason": r.stale_reason,
        "attempts": r.attempts,
        "lease_owner": r.lease_owner,
        "lease_expires_at": r.lease_expires_at,
        "summary_chars": r.summary_chars,
        "identifiers_total": r.identifiers_total,
        "identifiers_kept": r.identifiers_kept,
        "last_error": r.last_error,
        "boundary_id": r.boundary_id,
        "created_at": r.created_at,
        "completed_at": r.completed_at,
    }
