"""The benchmark in miniature: generated dumps with known outcomes, audited end to end.

The generator (benchmarks/generate.py) writes a dump and expected.json with the verdict the
audit must reach for every identifier; `lexkeep audit --format json` must report exactly those
counts, verdicts and flags. The full-size runs (benchmarks/run.py) stay out of the test suite.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import orjson
import pytest
from typer.testing import CliRunner

from lexkeep.cli.main import app

REPO = Path(__file__).resolve().parent.parent
GENERATE = REPO / "benchmarks" / "generate.py"
BASELINE = REPO / "benchmarks" / "baseline.py"
FORMATS = ("lexkeep", "codex", "claude")
SIZE = "2MB"


def _generate(out: Path, fmt: str, size: str = SIZE, seed: int = 11) -> dict:
    proc = subprocess.run(
        [
            sys.executable,
            str(GENERATE),
            "--format",
            fmt,
            "--size",
            size,
            "--out",
            str(out),
            "--seed",
            str(seed),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    return json.loads((out / "expected.json").read_text())


@pytest.fixture(scope="module", params=FORMATS)
def dump(request, tmp_path_factory) -> tuple[str, Path, dict]:
    """(format, dump folder, expected.json) for one small generated dump per format."""
    out = tmp_path_factory.mktemp(f"bench-{request.param}")
    return request.param, out, _generate(out, request.param)


def _audit_target(fmt: str, out: Path) -> Path:
    return out / "dump.jsonl" if fmt == "lexkeep" else out


@pytest.fixture(scope="module")
def audited(dump) -> tuple[dict, dict]:
    """(expected.json, the audit's JSON report) for the module's dump: one audit per format."""
    fmt, out, expected = dump
    runner = CliRunner()
    if runner.invoke(app, ["audit", "--help"]).exit_code != 0:
        pytest.skip("the `lexkeep audit` command does not exist yet")
    result = runner.invoke(
        app, ["audit", str(_audit_target(fmt, out)), "--format", "json"], catch_exceptions=False
    )
    # findings exist by construction, so the gate fails with exit 1 (never 2)
    assert result.exit_code == 1, result.stderr
    return expected, json.loads(result.stdout)


def test_generator_writes_valid_json_lines_with_the_promised_totals(dump):
    fmt, out, expected = dump
    files = [out / f for f in expected["files"]]
    lines = 0
    size = 0
    for path in files:
        data = path.read_bytes()
        size += len(data)
        assert data.endswith(b"\n")
        for raw in data.splitlines():
            orjson.loads(raw)  # every line is one JSON value
            lines += 1
    totals = expected["totals"]
    assert (lines, size, len(files)) == (totals["lines"], totals["bytes"], totals["files"])
    assert size >= 2 * 1024 * 1024
    assert totals["audited"] == totals["kept"] + totals["altered"] + totals["missing"]
    # every outcome and every alteration is represented, so the comparison below means something
    assert min(totals["kept"], totals["altered"], totals["missing"], totals["not_audited"]) > 0
    assert set(expected["by_alteration"]) == {"case", "separator", "truncation", "digit_edit"}
    verdicts = expected["identifiers"]
    assert len(verdicts) == totals["identifiers_typed"]
    values = [(r["conversation"], r["value"]) for r in verdicts]
    assert len(values) == len(set(values)), "identifier values must be unique per conversation"


def test_generator_is_deterministic(tmp_path):
    a = _generate(tmp_path / "a", "codex", "300KB", seed=5)
    b = _generate(tmp_path / "b", "codex", "300KB", seed=5)
    c = _generate(tmp_path / "c", "codex", "300KB", seed=6)
    assert a["totals"] == b["totals"]
    first = a["files"][0]
    assert (tmp_path / "a" / first).read_bytes() == (tmp_path / "b" / first).read_bytes()
    assert a["identifiers"] != c["identifiers"]


def test_audit_counts_equal_the_generators_known_outcomes(audited):
    expected, report = audited
    totals = {k: report["totals"][k] for k in ("audited", "kept", "altered", "missing")}
    want = {k: expected["totals"][k] for k in ("audited", "kept", "altered", "missing")}
    assert totals == want
    assert (
        report["totals"]["conversations_with_boundary"]
        == (expected["totals"]["conversations_with_boundary"])
    )


def test_audit_verdicts_and_flags_match_identifier_by_identifier(audited):
    expected, report = audited
    got = {(f["conversation_id"], f["value"]): f for f in report["findings"]}
    want = {
        (r["conversation"], r["value"]): r
        for r in expected["identifiers"]
        if r["verdict"] != "not_audited"
    }
    assert got.keys() == want.keys()
    mismatches = []
    for key, w in want.items():
        g = got[key]
        seen = (
            g["verdict"],
            g["message"]["line"],
            g["flags"]["in_summary"],
            g["flags"]["in_kept_verbatim"],
            g["flags"]["used_before_boundary"],
        )
        wanted = (w["verdict"], w["line"], w["in_summary"], w["in_kept_verbatim"], w["used_before"])
        if seen != wanted:
            mismatches.append((key, w["kind"], w["alteration"], seen, wanted))
        elif w["verdict"] == "altered":
            assert g["evidence"]["found"] == w["evidence"], key
    assert not mismatches, mismatches[:5]


def test_baseline_kept_count_equals_the_known_outcome(tmp_path):
    expected = _generate(tmp_path, "lexkeep")
    proc = subprocess.run(
        [sys.executable, str(BASELINE), str(tmp_path / "dump.jsonl"), "--json"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    counts = json.loads(proc.stdout)
    t = expected["totals"]
    assert counts["kept"] == t["kept"]
    assert counts["not_kept"] == t["altered"] + t["missing"]
    assert counts["not_audited"] == t["not_audited"]


def test_audit_without_the_compiled_selection_gives_the_same_report(audited, dump):
    """A fresh process with LEXKEEP_PREFILTER=off (the pure-Python extraction path)."""
    fmt, out, _ = dump
    _, report = audited
    env = {**os.environ, "LEXKEEP_PREFILTER": "off"}
    proc = subprocess.run(
        [sys.executable, "-m", "lexkeep.cli.main", "audit", str(_audit_target(fmt, out)),
         "--format", "json"],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
    )  # fmt: skip
    assert proc.returncode == 1, proc.stderr
    pure = json.loads(proc.stdout)
    assert pure["totals"] == report["totals"]
    assert pure["findings"] == report["findings"]


def test_audit_memory_names_the_reading_phase_and_the_whole_run(dump):
    """benchmarks/audit_memory.py on each format's small dump: the reading phase ends before
    the whole run, and its peak is at most the whole run's."""
    fmt, out, _ = dump
    proc = subprocess.run(
        [
            sys.executable,
            str(REPO / "benchmarks" / "audit_memory.py"),
            str(_audit_target(fmt, out)),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    reading, whole = proc.stdout.splitlines()
    assert reading.startswith("reading: ") and whole.startswith("audit: ")
    read_s, read_peak = float(reading.split()[1]), int(reading.split()[4])
    whole_s, whole_peak = float(whole.split()[1]), int(whole.split()[4])
    assert 0 < read_s <= whole_s
    assert 0 < read_peak <= whole_peak
