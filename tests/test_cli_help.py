"""Every command's --help ends with an example line, and --version answers."""

from __future__ import annotations

import re

import typer

from lexkeep.cli.main import app
from lexkeep.core import __version__


def _command_names() -> list[str]:
    group = typer.main.get_command(app)
    return sorted(group.commands)


def test_every_command_is_registered():
    expected = {"ingest", "stats", "show", "extract", "audit", "compact", "compactions"}
    expected |= {"context", "guard"}
    assert expected <= set(_command_names())


def test_every_help_ends_with_an_example(cli):
    for args in [[], *([name] for name in _command_names())]:
        result = cli(*args, "--help")
        assert result.exit_code == 0, (args, result.stderr)
        last = result.stdout.rstrip().splitlines()[-1].strip()
        assert last.startswith("Example: lexkeep"), (args, last)


def test_version(cli):
    result = cli("--version")
    assert result.exit_code == 0
    assert result.stdout.strip() == f"lexkeep {__version__}"


def test_every_value_has_a_named_placeholder():
    """--help shows `--db FILE`, not the Python type (`--db <str>`) some Typer versions print."""
    group = typer.main.get_command(app)
    missing = []
    for name, command in group.commands.items():
        for param in command.params:
            takes_value = not getattr(param, "is_flag", False) and not getattr(
                param, "count", False
            )
            if takes_value and not param.metavar:
                missing.append(f"{name} {param.name}")
            elif param.metavar and not param.metavar.isupper():
                missing.append(f"{name} {param.name}: {param.metavar!r} is not upper case")
    assert not missing, missing


def test_version_is_the_one_in_pyproject():
    import tomllib
    from pathlib import Path

    pyproject = Path(__file__).resolve().parents[1] / "pyproject.toml"
    assert __version__ == tomllib.loads(pyproject.read_text())["project"]["version"]


def test_command_modules_do_not_postpone_annotations():
    """Typer resolves every command's annotations at each start: postponed ones cost ~11 ms."""
    from pathlib import Path

    cli = Path(__file__).resolve().parents[1] / "cli"
    postponed = [
        p.name for p in cli.glob("*.py") if "\nfrom __future__ import" in "\n" + p.read_text()
    ]
    assert postponed == []


def test_starting_the_cli_does_not_import_rich():
    """Rich is imported where a console is made: `context` and `guard` print plain bytes."""
    import subprocess
    import sys

    code = "import sys, lexkeep.cli.main; print(sorted(m for m in sys.modules if 'rich' in m))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


# What a quick call (`--help`, `--version`, a command's `--help`) must not import, and why:
# each is only needed once a command runs, and scripts and CI jobs call lexkeep many times.
HEAVY_MODULES = {
    "duckdb": "the store's engine, ~90 ms",
    "lexkeep.core.store": "opens DuckDB",
    "lexkeep.core.model": "builds a dozen frozen dataclasses, ~20 ms",
    "lexkeep.compaction.context": "imports the store and the compaction modules, ~30 ms",
    "lexkeep.core.inspect": "imports the store",
    "rich": "consoles are made when a report is printed, ~40 ms",
    "regex": "identifier rules are compiled when identifiers are extracted",
    "hyperscan": "the identifier prefilter",
}


def _imported_by(*args: str) -> set[str]:
    """Every module a `lexkeep ARGS` process imports (from `python -X importtime`)."""
    import subprocess
    import sys

    # As the console script starts: `main()` with the arguments in sys.argv.
    code = f"import sys; sys.argv = ['lexkeep', *{list(args)!r}]\n"
    code += "from lexkeep.cli.main import main; main()"
    done = subprocess.run(
        [sys.executable, "-X", "importtime", "-c", code], capture_output=True, text=True
    )
    assert done.returncode == 0, (args, done.stderr[-2000:])
    return {
        line.rsplit("|", 1)[1].strip()
        for line in done.stderr.splitlines()
        if line.startswith("import time:") and "|" in line
    }


def test_quick_calls_import_neither_duckdb_nor_the_rest_of_the_engine():
    """`lexkeep --help`, `--version` and each command's `--help` start in a fraction of the time
    a command that opens a store takes: they import what parses the command line, no more."""
    for args in [("--help",), ("--version",), *((name, "--help") for name in _command_names())]:
        imported = _imported_by(*args)
        heavy = {
            name: why
            for name, why in HEAVY_MODULES.items()
            if any(m == name or m.startswith(name + ".") for m in imported)
        }
        assert heavy == {}, (args, heavy)


# What `lexkeep context` (a script's call before each run of an agent) must not import: it
# reads the store and prints bytes; no settings file, no identifier rules, no console.
CONTEXT_NEEDS_NONE_OF = {
    "tomllib": "settings and rules files are read by the commands that take them, ~5 ms",
    "lexkeep.core.rules": "identifier rules",
    "regex": "identifier rules",
    "hyperscan": "the identifier prefilter",
    "rich": "consoles are made when a report is printed, ~40 ms",
}


def test_the_context_call_imports_only_what_it_uses(cli, tmp_path):
    from pathlib import Path

    db = tmp_path / "store.duckdb"
    sample = Path(__file__).resolve().parents[1] / "sample_traces" / "invoice_altered.jsonl"
    assert cli("ingest", sample, "--db", db).exit_code == 0
    for fmt in ("json", "text"):
        imported = _imported_by(
            "context", "support-4471", "--budget-bytes", "4000", "-f", fmt, "--db", str(db)
        )
        assert "duckdb" in imported  # the check reads what the command imported
        extra = {
            name: why
            for name, why in CONTEXT_NEEDS_NONE_OF.items()
            if any(m == name or m.startswith(name + ".") for m in imported)
        }
        assert extra == {}, (fmt, extra)


def test_the_import_check_sees_what_a_command_imports():
    """The check above would pass on a list it failed to read: a command that runs imports
    DuckDB."""
    assert "duckdb" in _imported_by("stats", "--db", ":memory:")


def test_the_console_script_freezes_the_collector_before_the_command(monkeypatch):
    """Objects made by the imports are frozen (the collector skips them, also at shutdown)."""
    import gc

    from lexkeep.cli import app as commands
    from lexkeep.cli import main as entry
    from lexkeep.core import collector

    seen: list[int] = []
    monkeypatch.setattr(commands, "app", lambda: seen.append(gc.get_freeze_count()))
    # main() declares the process single-shot: undone after this test (tests/test_collector.py)
    monkeypatch.setattr(collector, "_freeze_survivors", False)
    gc.unfreeze()
    try:
        entry.main()
        assert seen and seen[0] > 0
        assert gc.get_freeze_count() > 0
    finally:
        gc.unfreeze()


def test_every_help_example_runs_in_order_on_the_sample_traces(cli, tmp_path, monkeypatch):
    """Each --help example, run where sample_traces/ is, after the ingest example: a user who
    copies them one by one gets answers, not "no conversation 'c1'"."""
    import shlex
    import shutil

    from conftest import SAMPLE_TRACES

    shutil.copytree(SAMPLE_TRACES, tmp_path / "sample_traces")
    monkeypatch.chdir(tmp_path)
    examples = {}
    for name in ["", *_command_names()]:
        text = cli(*([name] if name else []), "--help").stdout
        examples[name] = text.rstrip().splitlines()[-1].strip().removeprefix("Example: ")
    ingest = examples.pop("ingest")
    expected = {"audit": 1, "": 1}  # the sample stories hold the altered and missing ones
    for name, line in [("ingest", ingest), *examples.items()]:
        args = shlex.split(line)
        assert args[0] == "lexkeep", line
        result = cli(*args[1:])
        assert result.exit_code == expected.get(name, 0), (line, result.stdout, result.stderr)


def test_no_help_shows_a_19_digit_range():
    """`context --help` showed `[1<=x<=9223372036854775807]`: the 64-bit limit is checked, but
    not printed as a range nobody can read."""
    group = typer.main.get_command(app)
    shown = []
    for name, command in group.commands.items():
        ctx = typer.Context(command, info_name=name)
        for param in command.params:
            record = param.get_help_record(ctx)
            if record and any(len(digits) > 12 for digits in re.findall(r"\d+", record[1])):
                shown.append((name, record))
    assert shown == []


def test_a_command_call_builds_only_its_own_module_s_commands():
    """`lexkeep CMD ...` imports and builds the commands of CMD's module alone (Typer builds
    every registered command at each start): each other command module is not imported."""
    import subprocess
    import sys

    from lexkeep.cli.app import COMMAND_MODULES

    def loaded(*args: str) -> set[str]:
        code = (
            "import atexit, sys; atexit.register(lambda: print(*sys.modules, file=sys.stderr));"
            f" sys.argv = ['lexkeep', *{list(args)!r}];"
            " from lexkeep.cli.main import main; main()"
        )
        run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
        assert run.returncode == 0, run.stderr
        return {m.removeprefix("lexkeep.cli.") for m in run.stderr.split()}

    modules = set(COMMAND_MODULES.values())
    for name, module in COMMAND_MODULES.items():
        assert loaded(name, "--help") & modules == {module}, name
    assert loaded("--help") & modules == modules


def test_one_command_s_group_answers_as_the_whole_group():
    """The group `main()` builds for one command prints what the whole group prints for it:
    its help, its usage errors (and the audit's ::error annotation), its output."""
    from typer.testing import CliRunner

    from lexkeep.cli.app import COMMAND_MODULES, make_app

    runner = CliRunner()
    calls = [[name, "--help"] for name in COMMAND_MODULES]
    calls += [[name, "--no-such-option"] for name in COMMAND_MODULES]
    calls += [
        ["audit", "--format", "github", "--bogus"],
        ["context"],
        ["context", "c", "--budget-bytes", "x"],
        ["extract", "--format", "json", "order #W2378156"],
        ["stats", "--db", ""],
    ]
    whole = make_app()
    for args in calls:
        want = runner.invoke(whole, args)
        got = runner.invoke(make_app(args[0]), args)
        assert (got.exit_code, got.stdout, got.stderr) == (
            want.exit_code,
            want.stdout,
            want.stderr,
        ), args
        assert want.stdout or want.stderr
