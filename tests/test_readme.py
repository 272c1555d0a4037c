"""The README stays true: every `lexkeep` command it shows runs, and its snippets parse."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

from conftest import REPO, SAMPLE_TRACES

README = (REPO / "README.md").read_text(encoding="utf-8")
# Commands that need a program or server lexkeep does not ship say so on their line.
NEEDS_OUTSIDE = "# needs"
# Exit 1 is the documented answer for these (findings), everything else must exit 0.
EXPECT_FINDINGS = ("lexkeep audit sample_traces/", "lexkeep guard ", "lexkeep audit --db")


def _blocks(language: str) -> list[str]:
    return re.findall(rf"```{language}\n(.*?)```", README, flags=re.S)


def _commands() -> list[str]:
    lines = []
    for block in _blocks("console"):
        for line in block.splitlines():
            if line.startswith("$ lexkeep") and NEEDS_OUTSIDE not in line:
                lines.append(line[2:])
    return lines


def _run(command: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ)
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    env.pop("LEXKEEP_DB", None)
    return subprocess.run(
        ["bash", "-c", command], cwd=cwd, env=env, capture_output=True, text=True, timeout=120
    )


def test_every_console_command_runs(tmp_path):
    shutil.copytree(SAMPLE_TRACES, tmp_path / "sample_traces")
    commands = _commands()
    assert len(commands) >= 12
    for command in commands:
        proc = _run(command, tmp_path)
        expected = 1 if command.startswith(EXPECT_FINDINGS) else 0
        assert proc.returncode == expected, (command, proc.stdout[-2000:], proc.stderr[-2000:])


def test_jsonl_example_ingests(tmp_path):
    (example,) = _blocks("json")
    (tmp_path / "example.jsonl").write_text(example, encoding="utf-8")
    command = "lexkeep ingest example.jsonl --db x.duckdb && lexkeep audit --db x.duckdb"
    proc = _run(command, tmp_path)
    # The example's invoice is typed before the compaction and never used after it: missing.
    assert proc.returncode == 1, proc.stderr
    assert "1 conversation, 2 messages, 1 tool call, 1 boundary" in proc.stderr


def test_audit_settings_snippet_is_accepted(tmp_path):
    (toml,) = _blocks("toml")
    (tmp_path / "pyproject.toml").write_text(toml, encoding="utf-8")
    shutil.copytree(SAMPLE_TRACES, tmp_path / "sample_traces")
    proc = _run("lexkeep audit sample_traces/ --format json", tmp_path)
    assert proc.returncode == 1, proc.stderr  # missing findings fail the gate
    assert "0.98" in proc.stdout  # the configured ratio is the one the gate used


def _python_block(uses: str) -> str:
    (block,) = [b for b in _blocks("python") if uses in b]
    return block


def test_python_agent_loop_runs_against_the_sample_store(tmp_path, monkeypatch):
    example = _python_block("guard_arguments(")
    shutil.copytree(SAMPLE_TRACES, tmp_path / "sample_traces")
    proc = _run("lexkeep ingest sample_traces/ --db lexkeep.duckdb", tmp_path)
    assert proc.returncode == 0, proc.stderr
    monkeypatch.chdir(tmp_path)

    class Call:
        name = "lookup_invoice"
        arguments = '{"invoice_id": "INV-2025-08-4471"}'

    class Reply:
        tool_calls = [Call()]

    seen: dict[str, object] = {}

    def model(**kw: object) -> Reply:
        seen.setdefault("context", kw["system"])
        # While the model answers, the agent's hook stores the new messages (docs/context.md:
        # ingest before guarding): the loop must not hold the store then, or DuckDB refuses
        # the writing process.
        ingest = _run("lexkeep ingest sample_traces/ --db lexkeep.duckdb", tmp_path)
        assert ingest.returncode == 0, ingest.stderr
        return Reply()

    namespace = {
        "model": model,
        "user_text": "Was it charged twice?",
        "run_tool": lambda name, args: seen.setdefault("ran", (name, args)),
        "report_back": lambda rows: seen.setdefault("reported", rows),
    }
    exec(compile(example, "README.md", "exec"), namespace)
    assert "INV-2025-08-44719" in seen["context"]  # the pinned sidecar reaches the model
    assert "ran" not in seen  # the guard stopped the altered identifier
    assert seen["reported"] == [("INV-2025-08-4471", "INV-2025-08-44719", "truncated")]


def test_python_batch_script_runs_on_the_sample_traces(tmp_path, monkeypatch, capsys):
    """The library section's script, as written: it ingests, compacts, audits, writes the
    JSON report and exits with the gate's code (1: the sample traces lose identifiers)."""
    example = _python_block("run_audit(")
    shutil.copytree(SAMPLE_TRACES, tmp_path / "sample_traces")
    monkeypatch.chdir(tmp_path)
    for name in ("LEXKEEP_MIN_RATIO", "LEXKEEP_FAIL_ON", "LEXKEEP_EXIT_ZERO", "LEXKEEP_DB"):
        monkeypatch.delenv(name, raising=False)
    try:
        exec(compile(example, "README.md", "exec"), {})
    except SystemExit as stop:
        code = stop.code
    else:
        code = None
    out = capsys.readouterr()
    assert code == 1, out
    report = json.loads((tmp_path / "audit.json").read_text(encoding="utf-8"))
    assert report["gate"]["min_ratio"] == 0.98 and report["gate"]["fail_on"] == ["missing"]
    assert report["totals"]["audited"] == 6 and report["totals"]["missing"] == 2
    assert "0 range(s) summarised; audit: 3 of 6 identifier(s) kept" in out.out
    assert "altered INV-2025-08-44719 sample_traces/invoice_altered.jsonl:2" in out.out
    assert out.err == ""  # the library prints nothing of its own


def test_python_batch_script_reports_a_bad_trace_as_an_error(tmp_path, monkeypatch, capsys):
    """Its `except LexkeepError` is where a bad line ends up: file, line and column, and the
    hint, in the message it exits with."""
    example = _python_block("run_audit(")
    (tmp_path / "sample_traces").mkdir()
    bad = '{"type": "conversation", "id": "c1"}\n{"type": "message", oops\n'
    (tmp_path / "sample_traces" / "bad.jsonl").write_text(bad, encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    try:
        exec(compile(example, "README.md", "exec"), {})
    except SystemExit as stop:
        message = stop.code
    assert isinstance(message, str), message
    assert message.startswith("Error: sample_traces/bad.jsonl:2:21: invalid JSON"), message
    assert "\nHint: " in message
