"""Trace paths: a store on disk records them absolute, reports show them from where they run.

Real `lexkeep` processes in real folders: the store is written in one folder and read from
another, as a CI job or a second terminal does.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import SAMPLE_TRACES

from lexkeep.core.errors import ReusedIdError
from lexkeep.core.ingest import ingest_paths
from lexkeep.core.paths import shown_path, stored_path
from lexkeep.core.store import Store

# Every column that names a trace file, by table.
PATH_COLUMNS = (
    ("conversations", "source_file"),
    ("runs", "source_file"),
    ("messages", "source_file"),
    ("tool_calls", "source_file"),
    ("tool_results", "source_file"),
    ("boundaries", "source_file"),
    ("ingest_errors", "path"),
)

INVOICE = "invoice_altered.jsonl"
BAD_LINE = '{"type": "message", "id": "broken"\n'


def lexkeep(*args: object, cwd: Path, stdin: str | None = None) -> subprocess.CompletedProcess:
    """Run the installed CLI in `cwd` (no LEXKEEP_* settings from the calling environment)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("LEXKEEP_")}
    return subprocess.run(
        [sys.executable, "-m", "lexkeep.cli.main", *map(str, args)],
        cwd=cwd,
        env=env,
        input=stdin,
        capture_output=True,
        text=True,
        timeout=120,
    )


def done(proc: subprocess.CompletedProcess, code: int = 0) -> subprocess.CompletedProcess:
    assert proc.returncode == code, proc.stderr
    return proc


def stored_paths(db: Path) -> set[str]:
    """Every distinct path the store's path columns hold."""
    with Store.open(db, read_only=True) as store:
        union = " UNION ".join(f"SELECT {col} FROM {table}" for table, col in PATH_COLUMNS)
        return {row[0] for row in store.con.execute(union).fetchall()}


def report_files(report: dict) -> set[str]:
    """Every file an audit JSON report names: conversations, messages, boundaries, evidence."""
    files = {c["file"] for c in report["conversations"]}
    for f in report["findings"]:
        files |= {f["message"]["file"], f["boundary"]["file"]}
        if f["evidence"] is not None:
            files.add(f["evidence"]["file"])
    return files


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """tmp/proj/traces/ holding the sample traces and one file with a bad line."""
    traces = tmp_path / "proj" / "traces"
    shutil.copytree(SAMPLE_TRACES, traces)
    (traces / "README.md").unlink()
    # Another conversation (ids of its own) whose last line is not JSON.
    other = (SAMPLE_TRACES / INVOICE).read_text().replace("support-4471", "bad-1")
    other = re.sub(r'"(id|message_id)":"([mb][0-9])"', r'"\1":"bad-\2"', other)
    (traces / "bad.jsonl").write_text(other + BAD_LINE)
    return tmp_path / "proj"


def test_ingest_records_every_path_absolute(project):
    done(lexkeep("ingest", "traces/", "--db", "store.duckdb", "--skip-invalid", cwd=project))
    paths = stored_paths(project / "store.duckdb")
    traces = project / "traces"
    expected = {str(traces / p.name) for p in traces.iterdir()}
    assert paths == expected  # ingest_errors.path included (bad.jsonl)
    with Store.open(project / "store.duckdb", read_only=True) as store:
        errors = store.con.execute("SELECT path FROM ingest_errors").fetchall()
    assert errors == [(str(traces / "bad.jsonl"),)]


def test_a_store_read_from_another_folder_names_files_that_open(project):
    done(lexkeep("ingest", "traces/", "--db", "store.duckdb", "--skip-invalid", cwd=project))
    above = project.parent
    report = json.loads(
        done(lexkeep("audit", "--db", "proj/store.duckdb", "-f", "json", cwd=above), 1).stdout
    )
    files = report_files(report)
    # Under the current folder: relative to it, as the user would type them.
    assert files == {"proj/traces/invoice_altered.jsonl", "proj/traces/claude_lost_path.jsonl",
                     "proj/traces/codex_kept_verbatim.jsonl", "proj/traces/bad.jsonl"}  # fmt: skip
    assert all((above / f).is_file() for f in files)
    # Outside it: absolute.
    elsewhere = project.parent / "elsewhere"
    elsewhere.mkdir()
    report = json.loads(
        done(
            lexkeep("audit", "--db", project / "store.duckdb", "-f", "json", cwd=elsewhere), 1
        ).stdout
    )
    files = report_files(report)
    assert files == {str(project / "traces" / Path(f).name) for f in files}
    assert all(Path(f).is_file() for f in files)
    # The other formats name the same places.
    github = done(lexkeep("audit", "--db", "proj/store.duckdb", "-f", "github", cwd=above), 1)
    assert "file=proj/traces/invoice_altered.jsonl,line=2" in github.stdout
    markdown = done(lexkeep("audit", "--db", "proj/store.duckdb", "-f", "markdown", cwd=above), 1)
    assert "| proj/traces/invoice_altered.jsonl:2 | proj/traces/invoice_altered.jsonl:8 |" in (
        markdown.stdout
    )
    table = done(lexkeep("audit", "--db", "proj/store.duckdb", cwd=above), 1).stdout
    assert "proj/traces/" in table and str(project) not in table


def test_show_names_files_relative_to_the_current_folder(project):
    done(lexkeep("ingest", "traces/invoice_altered.jsonl", "--db", "s.duckdb", cwd=project))
    traces = project / "traces"
    text = done(lexkeep("show", "support-4471", "--db", "../s.duckdb", cwd=traces)).stdout
    assert "source: invoice_altered.jsonl:1" in text
    assert "invoice_altered.jsonl:2" in text and str(traces) not in text
    data = json.loads(
        done(lexkeep("show", "support-4471", "--db", "s.duckdb", "-f", "json", cwd=project)).stdout
    )
    assert data["source_file"] == "traces/invoice_altered.jsonl"
    assert {e["source_file"] for e in data["entries"]} == {"traces/invoice_altered.jsonl"}


def test_a_grown_file_ingested_from_another_folder_is_appended(project):
    trace = project / "traces" / INVOICE
    lines = trace.read_text().splitlines(keepends=True)
    trace.write_text("".join(lines[:5]))
    done(lexkeep("ingest", f"traces/{INVOICE}", "--db", "s.duckdb", cwd=project))
    trace.write_text("".join(lines))
    appended = done(lexkeep("ingest", f"proj/traces/{INVOICE}", "--db", "proj/s.duckdb",
                            cwd=project.parent))  # fmt: skip
    assert f"proj/traces/{INVOICE}: appended (lexkeep)" in appended.stderr
    again = done(lexkeep("ingest", INVOICE, "--db", "../s.duckdb", cwd=project / "traces"))
    assert f"{INVOICE}: unchanged (lexkeep), nothing added" in again.stderr
    assert stored_paths(project / "s.duckdb") == {str(trace)}
    with Store.open(project / "s.duckdb", read_only=True) as store:
        runs = store.con.execute("SELECT path FROM ingest_runs ORDER BY id").fetchall()
    assert runs == [(str(trace.resolve()),)] * 2


def test_a_symlinked_folder_is_recorded_as_named_not_resolved(project):
    (project / "link").symlink_to(project / "traces", target_is_directory=True)
    done(lexkeep("ingest", f"link/{INVOICE}", "--db", "s.duckdb", cwd=project))
    assert stored_paths(project / "s.duckdb") == {str(project / "link" / INVOICE)}
    report = json.loads(done(lexkeep("audit", "--db", "s.duckdb", "-f", "json", cwd=project), 1)
                        .stdout)  # fmt: skip
    assert report_files(report) == {f"link/{INVOICE}"}
    # The file itself is still recognised through its real name.
    again = done(lexkeep("ingest", f"traces/{INVOICE}", "--db", "s.duckdb", cwd=project))
    assert "unchanged" in again.stderr


def test_standard_input_stays_a_dash(project):
    trace = (project / "traces" / INVOICE).read_text()
    done(lexkeep("ingest", "-", "--db", "s.duckdb", cwd=project, stdin=trace))
    assert stored_paths(project / "s.duckdb") == {"-"}
    report = json.loads(done(lexkeep("audit", "--db", "s.duckdb", "-f", "json", cwd=project), 1)
                        .stdout)  # fmt: skip
    assert report_files(report) == {"-"}


@pytest.mark.parametrize(
    "given",
    [f"traces/{INVOICE}", f"./traces/{INVOICE}", f"../proj/traces/{INVOICE}",
     f"{{project}}/traces/{INVOICE}", "traces", "traces/"],
)  # fmt: skip
def test_an_audit_of_files_names_them_as_typed(project, given):
    """No store on disk: paths stay exactly as the user typed them (one lexkeep JSONL file
    takes the DuckDB fast path, a folder the general ingest)."""
    (project / "traces" / "bad.jsonl").unlink()
    given = given.format(project=project)
    report = json.loads(done(lexkeep("audit", given, "-f", "json", cwd=project), 1).stdout)
    if given.endswith(".jsonl"):
        expected = {given}
    else:  # the traces crossing a boundary, named as the folder walk finds them
        names = (INVOICE, "claude_lost_path.jsonl", "codex_kept_verbatim.jsonl")
        expected = {os.path.join(given, name) for name in names}
    assert report_files(report) == expected


@pytest.mark.parametrize("fast_min_bytes", [0, None], ids=["duckdb-fast-path", "per-line"])
def test_both_ingest_paths_record_the_same_absolute_path(project, monkeypatch, fast_min_bytes):
    monkeypatch.chdir(project)
    with Store.open(project / "s.duckdb") as store:
        got = ingest_paths(store, [f"traces/{INVOICE}"], fast_min_bytes=fast_min_bytes)
        assert got[0].path == f"traces/{INVOICE}"  # the summary names it as given
        assert got[0].identifiers > 0 and got[0].messages_added == got[0].messages
    assert stored_paths(project / "s.duckdb") == {str(project / "traces" / INVOICE)}


def test_an_in_memory_store_records_paths_as_given(project, monkeypatch):
    monkeypatch.chdir(project)
    with Store.open(None) as store:
        ingest_paths(store, [f"traces/{INVOICE}"], fast_min_bytes=0)
        files = {r[0] for r in store.con.execute("SELECT source_file FROM messages").fetchall()}
    assert files == {f"traces/{INVOICE}"}


def test_a_reused_id_names_both_files_from_the_current_folder(project):
    traces = project / "traces"
    clash = traces / "clash.jsonl"
    clash.write_text((traces / INVOICE).read_text().replace("support-4471", "other-1"))
    done(lexkeep("ingest", f"traces/{INVOICE}", "--db", "s.duckdb", cwd=project))
    proc = done(lexkeep("ingest", "clash.jsonl", "--db", "../s.duckdb", cwd=traces), 2)
    first = proc.stderr.splitlines()[0]
    assert first.startswith("Error: clash.jsonl:2: message id 'm1' "), first
    assert first.endswith(f"already used by conversation 'support-4471' ({INVOICE}:2)")


@pytest.mark.parametrize("fast_min_bytes", [0, None], ids=["duckdb-fast-path", "per-line"])
def test_a_reused_id_error_names_the_stored_file_as_reports_do(
    project, monkeypatch, fast_min_bytes
):
    traces = project / "traces"
    (traces / "clash.jsonl").write_text(
        (traces / INVOICE).read_text().replace("support-4471", "other-1")
    )
    monkeypatch.chdir(project)
    with Store.open(project / "s.duckdb") as store:
        ingest_paths(store, [f"traces/{INVOICE}"])
        monkeypatch.chdir(traces)
        with pytest.raises(ReusedIdError) as caught:
            ingest_paths(store, ["clash.jsonl"], fast_min_bytes=fast_min_bytes)
    assert (caught.value.path, caught.value.line) == ("clash.jsonl", 2)
    assert str(caught.value).endswith(f"({INVOICE}:2)")


def test_shown_path():
    cwd = os.path.join(os.sep, "work", "proj")
    assert shown_path(os.path.join(cwd, "t", "a.jsonl"), cwd) == os.path.join("t", "a.jsonl")
    assert shown_path(os.path.join(cwd + "2", "a.jsonl"), cwd) == os.path.join(cwd + "2", "a.jsonl")
    assert shown_path(os.path.join(os.sep, "a.jsonl"), os.sep) == "a.jsonl"
    assert shown_path(os.path.join(cwd, "a.jsonl"), None) == os.path.join(cwd, "a.jsonl")
    assert shown_path("t/a.jsonl", cwd) == "t/a.jsonl"  # stored relative by an older lexkeep
    assert shown_path("-", cwd) == "-"
    assert shown_path("lexkeep:compactions/abc", cwd) == "lexkeep:compactions/abc"
    assert stored_path("-") == "-"
    assert stored_path("a/../b.jsonl") == os.path.join(os.getcwd(), "b.jsonl")


def test_audit_and_extract_run_from_a_deleted_folder(project):
    """A folder removed under a shell (a CI step's temp dir): no settings file can be found
    from it, so none is read; reports name files absolute, as `show` already did."""
    done(lexkeep("ingest", "traces/invoice_altered.jsonl", "--db", "s.duckdb", cwd=project))
    db = project / "s.duckdb"
    env = {k: v for k, v in os.environ.items() if not k.startswith("LEXKEEP_")}

    def from_deleted(*args: object) -> subprocess.CompletedProcess:
        gone = project / "gone"
        gone.mkdir()
        script = 'cd "$1" && rmdir "$1" && shift && exec "$@"'
        cli = [sys.executable, "-m", "lexkeep.cli.main", *map(str, args)]
        return subprocess.run(
            ["sh", "-c", script, "sh", str(gone), *cli],
            env=env, capture_output=True, text=True, timeout=120,
        )  # fmt: skip

    report = json.loads(done(from_deleted("audit", "--db", db, "-f", "json"), 1).stdout)
    assert report_files(report) == {str(project / "traces" / INVOICE)}
    assert "Traceback" not in from_deleted("audit", "--db", db).stderr
    found = json.loads(
        done(from_deleted("extract", "invoice INV-2025-08-44719", "-f", "json")).stdout
    )
    assert [i["value"] for i in found["identifiers"]] == ["INV-2025-08-44719"]
