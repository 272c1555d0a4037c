"""The library as a script calls it: paths as `pathlib.Path`, one path alone, the results
usable by every renderer."""

from __future__ import annotations

import io
import json
import re
import shutil
import subprocess
import sys
from functools import partial
from pathlib import Path

import pytest
from conftest import SAMPLE_TRACES

from lexkeep.audit.engine import run_audit
from lexkeep.audit.render import render
from lexkeep.audit.settings import AuditSettings
from lexkeep.core.errors import LexkeepError
from lexkeep.core.ingest import ingest_paths
from lexkeep.core.store import Store

INVOICE = SAMPLE_TRACES / "invoice_altered.jsonl"


def _json(report) -> dict:
    out = io.StringIO()
    render(report, "json", out)
    return json.loads(out.getvalue())


@pytest.mark.parametrize(
    "paths",
    [
        [
            INVOICE
        ],  # a pathlib.Path: was AttributeError: 'PosixPath' object has no attribute 'encode'
        INVOICE,  # one Path alone
        str(INVOICE),  # one str alone: was read letter by letter, "/" first (the whole disk)
    ],
    ids=["list-of-path", "path", "str"],
)
def test_audit_takes_paths_as_pathlib_paths_or_one_path_alone(paths):
    report = run_audit(paths=paths)
    assert (report.totals.audited, report.totals.altered) == (1, 1)
    assert report.inputs == (str(INVOICE),)
    assert _json(report)["inputs"] == [str(INVOICE)]  # was: PosixPath is not JSON serializable


def test_audit_of_a_store_named_by_a_pathlib_path_renders_as_json(tmp_path):
    db = tmp_path / "traces.duckdb"
    with Store.open(db) as store:
        ingest_paths(store, [SAMPLE_TRACES])  # a folder as a Path
    report = run_audit(db=db)
    assert report.inputs == (str(db),)
    data = _json(report)
    assert data["inputs"] == [str(db)] and data["totals"]["audited"] == 6


@pytest.mark.parametrize("alone", [False, True], ids=["list-of-path", "path"])
def test_ingest_takes_pathlib_paths(tmp_path, alone):
    trace = shutil.copy(INVOICE, tmp_path / "t.jsonl")
    paths = Path(trace) if alone else [Path(trace)]
    with Store.open(tmp_path / "s.duckdb") as store:
        (counts,) = ingest_paths(store, paths)
        assert (counts.path, counts.status, counts.boundaries) == (str(trace), "ingested", 1)
        (again,) = ingest_paths(store, paths)
    assert again.status == "unchanged"


def test_writing_through_a_store_opened_read_only_is_a_store_error(tmp_path):
    """A script that opened the store with `read_only=True` (as the agent loop does) and then
    ingested or compacted through it got DuckDB's `InvalidInputException: Cannot execute
    statement of type "INSERT" … attached in read-only mode`, no LexkeepError. Both say what
    to do instead, and leave the store as it was."""
    from lexkeep.compaction.engine import run_compaction
    from lexkeep.core.errors import StoreError

    db = tmp_path / "traces.duckdb"
    with Store.open(db) as store:
        ingest_paths(store, [SAMPLE_TRACES / "claude_lost_path.jsonl"])
        assert not store.read_only
    with Store.open(db, read_only=True) as store:
        assert store.read_only
        with pytest.raises(StoreError, match="is open read-only: ingest_paths writes") as err:
            ingest_paths(store, [INVOICE])
        assert "Store.open" in err.value.hint
        with pytest.raises(StoreError, match="is open read-only: run_compaction writes"):
            run_compaction(store)
        assert run_compaction(store, dry_run=True).planned == 0  # a dry run only reads
    with Store.open(db, read_only=True) as store:
        (files,) = store.con.execute("SELECT count(*) FROM ingest_runs").fetchone()
    assert files == 1
    with Store.open(None) as memory:
        assert not memory.read_only


def test_every_package_ships_its_type_hints():
    """Without a `py.typed` marker (PEP 561) a type checker ignores an installed package's
    hints: a batch script's mypy said `Cannot find implementation or library stub for module
    named "lexkeep.audit.engine"`. Each package has the marker and installs it."""
    import tomllib

    repo = Path(__file__).resolve().parents[1]
    setuptools = tomllib.loads((repo / "pyproject.toml").read_text(encoding="utf-8"))["tool"][
        "setuptools"
    ]
    for package in setuptools["packages"]:
        folder = repo / setuptools["package-dir"][package]
        assert (folder / "py.typed").is_file(), folder
        assert "py.typed" in setuptools["package-data"].get(package, []), package


def _library_error(call) -> LexkeepError:
    with pytest.raises(LexkeepError) as caught:
        call()
    return caught.value


def _command_says(command: list, words: str, cwd: Path) -> None:
    """`lexkeep COMMAND` exits 2 and its stderr holds `words` (the command's own wording)."""
    done = subprocess.run(
        [sys.executable, "-m", "lexkeep.cli.main", *map(str, command)],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=cwd,
    )
    assert done.returncode == 2, done.stderr
    assert words in done.stderr, done.stderr


def test_errors_from_library_calls_name_keyword_arguments_not_flags(tmp_path):
    """An error raised to a Python caller told it to `pass --skip-invalid` or that `--db` and
    trace files cannot both be given: options of a command it never ran. It names the keyword
    argument of the call now (`skip_invalid=True`); the commands keep their flags' names."""
    db = tmp_path / "s.duckdb"
    with Store.open(db) as store:
        ingest_paths(store, [INVOICE])
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"type": "conversation", "id": "c1"}\n{"type": "message", oops\n')
    mixed = tmp_path / "mixed.jsonl"
    mixed.write_bytes(
        (SAMPLE_TRACES / "codex_kept_verbatim.jsonl").read_bytes()
        + (SAMPLE_TRACES / "claude_lost_path.jsonl").read_bytes()
    )

    def ingest(paths: list[Path]) -> None:
        with Store.open(None) as store:
            ingest_paths(store, paths)

    # (call, what the error or its hint says instead of the flag, the command's words)
    n = tmp_path / "n.duckdb"
    none = tmp_path / "none.duckdb"
    cases = [
        (
            lambda: run_audit(db=db, skip_invalid=True),
            "skip_invalid=True only applies",
            ["audit", "--db", db, "--skip-invalid"],
            "--skip-invalid only applies",
        ),
        (
            lambda: run_audit(db=db, input_format="codex"),
            "input_format only applies",
            ["audit", "--db", db, "--input-format", "codex"],
            "--input-format only applies",
        ),
        (
            lambda: run_audit(paths=[INVOICE], db=db),
            "give paths or db, not both",
            ["audit", INVOICE, "--db", db],
            "give trace files or --db, not both",
        ),
        (
            lambda: run_audit(db=db, rules="x.toml"),
            "rules only applies",
            ["audit", "--db", db, "--rules", "x.toml"],
            "--rules only applies",
        ),
        (lambda: run_audit(), "run_audit(paths=", None, None),
        (lambda: ingest([bad]), "skip_invalid=True", ["ingest", bad, "--db", n], "--skip-invalid"),
        (lambda: run_audit(paths=[bad]), "skip_invalid=True", ["audit", bad], "--skip-invalid"),
        (lambda: ingest([mixed]), "format=", ["ingest", mixed, "--db", n], "--input-format"),
        (lambda: run_audit(paths=[mixed]), "input_format=", ["audit", mixed], "--input-format"),
        (
            lambda: Store.open(tmp_path),
            "Store.open takes",
            ["stats", "--db", tmp_path],
            "--db names",
        ),
        (lambda: Store.open(INVOICE), "Store.open takes", ["stats", "--db", INVOICE], "--db names"),
        (
            lambda: Store.open(none, read_only=True),
            "ingest_paths(",
            ["stats", "--db", none],
            "lexkeep ingest TRACES...",
        ),
    ]
    for call, library_words, command, command_words in cases:
        err = _library_error(call)
        text = f"{err} (hint: {err.hint})"
        assert library_words in text, text
        assert not re.search(r"(?<![\w-])--[a-z]", text), text  # no flag named
        commands = r"lexkeep (ingest|audit|extract|stats|show|compact|context|guard)\b"
        assert not re.search(commands, text), text  # nor a command to run
        if command is not None:
            _command_says(command, command_words, tmp_path)
    # Compaction and context take keyword arguments too.
    from test_compaction_support import build

    from lexkeep.compaction.context import build_context
    from lexkeep.compaction.engine import run_compaction
    from lexkeep.compaction.summarizers import SummarizerOptions

    missing = tmp_path / "no-such-program"
    pairs = tmp_path / "pairs.duckdb"  # segments to summarise: the program must be run
    with Store.open(pairs) as store:
        build(store, {"c1": 40})
    url = "ftp://example.test/v1"
    for call, library_words, command, command_words in (
        (lambda: run_compaction(str(db), workers=0), "workers must be at least 1, got 0", [], ""),
        (lambda: run_compaction(str(db), max_running=0), "max_running must be at least 1", [], ""),
        (lambda: run_compaction(str(none)), "ingest_paths(", [], ""),
        (
            lambda: run_compaction(str(db), summarizer="openai:m"),
            "needs a base_url",
            ["-s", "openai:m"],
            "needs --base-url",
        ),
        (
            lambda: run_compaction(
                str(db), summarizer="openai", summarizer_options=SummarizerOptions(base_url=url)
            ),
            "needs a model",
            ["-s", "openai", "--base-url", url],
            "needs --model",
        ),
        (
            lambda: run_compaction(
                str(db), summarizer="openai:m", summarizer_options=SummarizerOptions(base_url=url)
            ),
            f"base_url={url!r} is not",
            ["-s", "openai:m", "--base-url", url],
            f"--base-url {url!r} is not",
        ),
        (
            lambda: run_compaction(str(pairs), summarizer=f"command:{missing}"),
            "path in summarizer='command:...'",
            ["-s", f"command:{missing}"],
            "path in --summarizer 'command:...'",
        ),
    ):
        err = _library_error(call)
        assert library_words in f"{err} {err.hint}" and "--" not in f"{err} {err.hint}", err
        if command:
            target = pairs if "command:" in command[1] else db
            _command_says(["compact", "--db", target, *command], command_words, tmp_path)
    with Store.open(db, read_only=True) as store:
        conversation = store.con.execute("SELECT min(id) FROM conversations").fetchone()[0]
        for budget, words in ((0, "budget_bytes must be"), (10, "pass budget_bytes=")):
            err = _library_error(partial(build_context, store, conversation, budget))
            assert words in f"{err} {err.hint}" and "--" not in f"{err} {err.hint}", err
    # A gate's reasons name the setting as the call gave it.
    report = run_audit(paths=[INVOICE], settings=AuditSettings(min_ratio=0.9))
    assert report.gate.reasons == ("ratio 0.000 (0/1 kept) is below min_ratio=0.9",)


def test_an_audit_of_a_folder_walks_it_once(tmp_path, monkeypatch):
    """run_audit walked its folders twice, once to check the paths and once to read them:
    twice the look-ups on a big tree, and a file written between the two walks was read
    without having been found. One walk now gives the files the audit reads."""
    import os

    folder = tmp_path / "traces"
    folder.mkdir()
    for name in ("invoice_altered.jsonl", "codex_kept_verbatim.jsonl"):
        shutil.copy(SAMPLE_TRACES / name, folder / name)
    walks: list[str] = []
    real_walk = os.walk

    def walk(top, *args, **kwargs):
        walks.append(str(top))
        yield from real_walk(top, *args, **kwargs)
        # A session file written just after the folder was walked.
        late = folder / "claude_lost_path.jsonl"
        if not late.exists():
            shutil.copy(SAMPLE_TRACES / "claude_lost_path.jsonl", late)

    monkeypatch.setattr(os, "walk", walk)
    report = run_audit(paths=[folder])
    assert walks == [str(folder)]
    # What the walk found, and only that: the invoice and the Codex story.
    assert {f.value for f in report.findings} == {
        "INV-2025-08-44719",
        "ERR_CONN_RESET",
        "https://registry.example.test/pkg/left-pad/-/left-pad-1.3.0.tgz",
        "src/net/retry.py",
    }
