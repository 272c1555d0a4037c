"""Renderers: hostile values stay inert, unverified findings are reported apart, redaction."""

from __future__ import annotations

import io
import json
import re
import xml.etree.ElementTree as ET
from dataclasses import replace

import pytest
from test_audit_engine import Timeline

from lexkeep.audit.engine import audit_store
from lexkeep.audit.render import flags, loc, render
from lexkeep.audit.report import problem_findings, redact, redact_value
from lexkeep.audit.settings import FORMATS, AuditSettings

HOSTILE = "/tmp/<script>|a,b%0A:c.log"


def rendered(report, fmt: str) -> str:
    out = io.StringIO()
    render(report, fmt, out)
    return out.getvalue()


@pytest.fixture
def report(store):
    """One missing hostile path, one unverified code (incomplete scan), one kept code."""
    t = Timeline(store)
    t.user("m1", ("path", HOSTILE))
    t.user("m2", ("code", "ORD_22222"), complete=False)
    t.user("m3", ("code", "ORD_33333"))
    t.boundary("b1", summary=None)
    t.call("k1", {"q": "ORD_33333"})
    t.save()
    return audit_store(store, AuditSettings())


def test_json_keeps_every_finding_and_the_note(report):
    data = json.loads(rendered(report, "json"))
    assert {f["value"]: f["verdict"] for f in data["findings"]} == {
        HOSTILE: "missing",
        "ORD_22222": "unverified",
        "ORD_33333": "kept",
    }
    assert data["totals"]["audited"] == 2 and data["totals"]["unverified"] == 1
    assert data["findings"][0]["flags"]["in_summary"] is None
    assert any("unverified" in note for note in data["notes"])


def test_github_escapes_workflow_command_data(report):
    lines = rendered(report, "github").splitlines()
    missing = next(line for line in lines if line.startswith("::error file="))
    assert "%0A" not in HOSTILE.replace("%0A", "") and "%250A" in missing  # '%' escaped
    assert "\n" not in missing
    warning = next(line for line in lines if line.startswith("::warning file="))
    assert "ORD_22222" in warning and "unverified" in warning


def test_html_escapes_values(report):
    text = rendered(report, "html")
    assert "<script>" not in text and "&lt;script&gt;" in text
    ET.fromstring(text.split("\n", 1)[1])


def test_markdown_escapes_pipes(report):
    text = rendered(report, "markdown")
    row = next(line for line in text.splitlines() if line.startswith("| missing"))
    assert "\\|a,b" in row
    assert row.count(" | ") == 6  # seven cells: the value's pipe did not add a column


def test_junit_reports_unverified_without_failing_on_it(store):
    t = Timeline(store)
    t.user("m1", ("code", "ORD_22222"), complete=False)
    t.boundary("b1")
    t.save()
    root = ET.fromstring(rendered(audit_store(store, AuditSettings()), "junit"))
    (case,) = root.findall(".//testcase")
    assert case.find("failure") is None
    assert case.find("skipped") is not None


@pytest.mark.parametrize("fmt", FORMATS)
def test_redacted_report_hides_values_in_every_format(report, fmt):
    hidden = redact(report, b"k")
    text = rendered(hidden, fmt)
    for value in (HOSTILE, "ORD_22222", "ORD_33333", "script"):
        assert value not in text
    assert redact_value(HOSTILE, b"k") in text  # the missing one is listed in every format


def test_redact_replaces_only_the_values_and_the_evidence_found(store):
    """Redaction works on the flat findings; the same as rebuilding each finding object."""
    t = Timeline(store)
    t.user("m1", ("code", "ORD_44444"), ("code", "ORD_55555"), ("path", HOSTILE))
    t.user("m2", ("code", "ORD_44444"))  # the same value twice: hashed alike
    t.boundary("b1", summary=None)
    t.call("k1", {"q": "ORD_55555", "near": "ord_44444"})
    t.save()
    report = audit_store(store, AuditSettings())
    assert {f.verdict for f in report.findings} == {"kept", "altered", "missing"}

    def by_hand(f):
        ev = f.evidence
        if ev is not None:
            ev = replace(ev, found=redact_value(ev.found, b"k"))
        return replace(f, value=redact_value(f.value, b"k"), evidence=ev)

    hidden = redact(report, b"k")
    assert hidden.redacted and list(hidden.findings) == [by_hand(f) for f in report.findings]
    assert hidden.totals == report.totals


def test_redact_value_is_stable_and_keyed():
    assert redact_value("ORD_1", b"a") == redact_value("ORD_1", b"a")
    assert redact_value("ORD_1", b"a") != redact_value("ORD_1", b"b")
    assert redact_value("ORD_1", b"a") != redact_value("ORD_2", b"a")


def test_human_formats_cap_the_problem_rows_machine_formats_do_not(store):
    t = Timeline(store)
    t.user("m1", *[("code", f"ORD_{i:05d}") for i in range(205)])
    t.boundary("b1")
    t.save()
    report = audit_store(store, AuditSettings())
    assert "... and 5 more" in rendered(report, "markdown")
    assert "... and 5 more" in rendered(report, "table")
    assert len(json.loads(rendered(report, "json"))["findings"]) == 205
    assert rendered(report, "github").count("::error file=") == 205


def test_html_lists_every_problem_and_kept_findings_up_to_its_cap(store, monkeypatch):
    from lexkeep.audit import render as render_module

    monkeypatch.setattr(render_module, "HTML_KEPT_ROWS", 3)
    t = Timeline(store)
    t.user("m1", *[("code", f"ORD_{i:05d}") for i in range(8)])
    t.boundary("b1", summary=None)
    t.call("k1", {"q": " ".join(f"ORD_{i:05d}" for i in range(0, 8, 2))})  # 4 kept, 4 altered
    t.save()
    text = rendered(audit_store(store, AuditSettings()), "html")
    shown = re.findall(
        r'<tr class="(kept|altered)"><td>\w+</td><td>code</td><td><code>(\w+)<', text
    )
    assert shown == [
        ("kept" if i % 2 == 0 else "altered", f"ORD_{i:05d}") for i in range(8) if i != 6
    ]  # every altered one; kept ones in order up to the cap (the fourth, ORD_00006, is not)
    assert "1 more kept findings not shown" in text


def _copied(report) -> list[str]:
    """What a reader copies out of the findings not kept: each value, `path:line` (typed at,
    boundary, evidence) and altered value."""
    pieces = []
    for f in problem_findings(report.findings):
        pieces += [f.value, f.kind, loc(f.message), loc(f.boundary)]
        if f.evidence:
            pieces += [f.evidence.found, f"({f.evidence.difference})", loc(f.evidence.source)]
    return pieces


def test_findings_keep_every_value_and_path_whole_at_any_width(monkeypatch):
    """At 80-140 columns (140: a pipe's) the typed at, boundary and evidence columns folded
    every `path:line` into slivers that could be neither read nor copied. Now each value and
    `path:line` is on one line, whole, at any width, redacted or not, and nothing leaves the
    edge: a table where it fits so, one record per finding where it does not."""
    from conftest import SAMPLE_TRACES

    from lexkeep.audit.engine import run_audit

    report = run_audit(paths=[str(SAMPLE_TRACES)])
    assert {f.verdict.value for f in problem_findings(report.findings)} == {"missing", "altered"}
    for width in (*range(40, 400, 9), 80, 100, 120, 140, 200):
        monkeypatch.setenv("COLUMNS", str(width))
        for shown in (report, redact(report)):
            lines = rendered(shown, "table").splitlines()
            for piece in _copied(shown):
                assert any(piece in line for line in lines), (width, piece)
            for line in lines:  # a piece wider than the terminal is a line of its own
                assert len(line) <= width or line in _copied(shown), (width, line)
                if line[:1] and line[:1] in "│┃┏┡└":  # every table row keeps its right border
                    assert line.rstrip()[-1] in "│┃┓┩┘", (width, line)
            words = "\n".join(lines).split()
            for f in problem_findings(shown.findings):
                assert all(word in words for word in ", ".join(flags(f)).split()), width


def test_findings_are_records_where_the_table_would_break_a_path(monkeypatch):
    """Where the table cannot hold every `path:line` whole, each finding is a block: the
    verdict and value, then one field a line. Wide enough, the table as before."""
    from conftest import SAMPLE_TRACES

    from lexkeep.audit.engine import run_audit

    report = run_audit(paths=[str(SAMPLE_TRACES)])
    invoice = f"{SAMPLE_TRACES / 'invoice_altered.jsonl'}"
    monkeypatch.setenv("COLUMNS", "120")
    text = rendered(report, "table")
    assert "┃ typed at" not in text
    block = (
        "altered  INV-2025-08-44719\n"
        "  kind      compound_code\n"
        f"  typed at  {invoice}:2\n"
        f"  boundary  {invoice}:8\n"
        "  became    INV-2025-08-4471 (truncated)\n"
        f"  evidence  {invoice}:10\n"
        "  flags     used before boundary\n"
    )
    assert block in text
    assert text.startswith("Identifiers not kept verbatim after compaction\n\nmissing  ")
    assert text.count("\nmissing  ") == 2 and "\n\nPer identifier kind" in text
    monkeypatch.setenv("COLUMNS", "400")
    text = rendered(report, "table")
    assert "┃ typed at" in text and "  typed at  " not in text
    (row,) = [line for line in text.splitlines() if "INV-2025-08-44719" in line]
    assert f"│ {invoice}:2 " in row and f"│ {invoice}:8 " in row


def test_a_path_wider_than_the_terminal_is_written_whole_on_its_own_line(monkeypatch, tmp_path):
    """A Codex session's path is often wider than the terminal: it is not broken either (the
    terminal wraps it without a line break, so a copy or a click gets all of it)."""
    from conftest import SAMPLE_TRACES

    from lexkeep.audit.engine import run_audit

    folder = tmp_path / "sessions" / "2026" / "01" / "03" / ("project-" * 8)
    folder.mkdir(parents=True)
    trace = folder / "rollout-2026-01-03T04-05-06-22222222-2222-4222-8222-222222222222.jsonl"
    trace.write_bytes((SAMPLE_TRACES / "invoice_altered.jsonl").read_bytes())
    report = run_audit(paths=[str(trace)])
    assert len(f"{trace}:10") > 140
    for width in (60, 80, 140):
        monkeypatch.setenv("COLUMNS", str(width))
        lines = rendered(report, "table").splitlines()
        assert f"{trace}:2" in lines and f"{trace}:10" in lines, width  # at the left edge
        assert "  typed at" in lines and "  evidence" in lines, width
        assert max(len(line) for line in lines if str(trace) not in line) <= width
    monkeypatch.delenv("COLUMNS")  # a pipe: each field one line, however long
    lines = rendered(report, "table").splitlines()
    assert f"  typed at  {trace}:2" in lines and f"  evidence  {trace}:10" in lines


def test_per_kind_counts_are_whole_on_a_terminal_narrower_than_their_table(monkeypatch):
    """Below about 76 columns the per-kind table cut each cell with "…": `path_…` stood for
    both path_posix and path_rel, `100.…` for a ratio. Narrower than its table, a kind is a
    line of counts."""
    from conftest import SAMPLE_TRACES

    from lexkeep.audit.engine import run_audit

    report = run_audit(paths=[str(SAMPLE_TRACES)])
    for width in (40, 50, 60, 70):
        monkeypatch.setenv("COLUMNS", str(width))
        text = rendered(report, "table")
        assert "…" not in text, width
        section = text.split("Per identifier kind\n")[1].split("Per-conversation")[0]
        assert all(len(line) <= width for line in section.splitlines()), width
        counts = " ".join(section.split())
        assert "path_rel 1 audited, 1 kept, 0 altered, 0 missing, 0 unverified, ratio 100.0%" in (
            counts
        ), counts
        assert "all 6 audited, 3 kept, 1 altered, 2 missing, 0 unverified, ratio 50.0%" in counts
    monkeypatch.setenv("COLUMNS", "80")
    assert "┃ kind          ┃ audited ┃" in rendered(report, "table")  # room: the table


def test_a_pipe_lays_out_the_findings_in_140_columns_without_columns(monkeypatch, store):
    """A pipe or file is 140 columns wide: a table that fits there is a table."""
    monkeypatch.delenv("COLUMNS", raising=False)
    t = Timeline(store)
    t.user("m1", ("code", "ORD_11111"), ("code", "ORD_22222"))
    t.boundary("b1")
    t.call("k1", {"q": "ORD_1111"})
    t.save()
    lines = rendered(audit_store(store, AuditSettings()), "table").splitlines()
    assert any(line.startswith("┃ verdict") for line in lines), lines
    assert 80 < max(map(len, lines)) <= 140
    (row,) = [i for i, line in enumerate(lines) if "ORD_1111 " in line]
    assert re.search(r"│ trace\.jsonl:4 +│", lines[row + 1])  # the evidence, whole


def test_markdown_shows_values_and_evidence_as_typed(store):
    """A job summary shows a Windows path with single backslashes, a value holding a backtick
    whole, and `__init__` in an evidence path as text, not bold (as GitHub renders it)."""
    from markdown_it import MarkdownIt  # a dependency of rich

    t = Timeline(store)
    t.user("m1", ("path", r"C:\Users\bob\x.txt"), ("path", "src/pkg/__init__.py"))
    t.user("m2", ("code", "a`b|c"))
    t.boundary("b1")
    t.call("k1", {"p": "src/pkg/__init__.pyc"})
    t.save()
    text = rendered(audit_store(store, AuditSettings()), "markdown")
    html = MarkdownIt("commonmark").enable("table").render(text)
    codes = re.findall(r"<code>(.*?)</code>", html)
    assert r"C:\Users\bob\x.txt" in codes
    assert "a`b|c" in codes
    assert "src/pkg/__init__.pyc" in codes and "<strong>init</strong>" not in html


def test_an_unknown_format_is_a_config_error_naming_the_formats(report):
    """`render(report, "sarif", out)` in a script was a bare `KeyError: 'sarif'`."""
    from lexkeep.core.errors import ConfigError

    out = io.StringIO()
    with pytest.raises(ConfigError, match="unknown format 'sarif'") as err:
        render(report, "sarif", out)
    assert all(name in err.value.hint for name in FORMATS)
    assert out.getvalue() == ""


def _audit_sample(columns: str | None, *, env: dict[str, str] | None = None) -> str:
    """`lexkeep audit sample_traces/` in a pipe, with $COLUMNS at `columns` (None: unset)."""
    import os
    import subprocess
    import sys

    from conftest import SAMPLE_TRACES

    run_env = {k: v for k, v in os.environ.items() if not k.startswith("LEXKEEP_")}
    run_env.pop("COLUMNS", None)
    if columns is not None:
        run_env["COLUMNS"] = columns
    done = subprocess.run(
        [sys.executable, "-m", "lexkeep.cli.main", "audit", str(SAMPLE_TRACES)],
        capture_output=True,
        text=True,
        env=run_env | (env or {}),
        timeout=120,
    )
    assert done.returncode == 1, done.stderr
    return done.stdout


@pytest.mark.parametrize("columns", ["20", "40", "60", "80", None])
def test_the_verdict_and_histogram_keep_their_words_and_bars_whole(columns):
    """At $COLUMNS=40 the histogram's lines were re-wrapped by Rich (the count of a bucket on
    a line of its own, below ~47 columns), and the PASS/FAIL line was wrapped by Rich, which
    breaks a word wider than the width (here LEXKEEP_MIN_RATIO=1.0 at 20 columns) in the
    middle and leaves spaces at line ends. Both fit now: a bar a line, shorter when the width
    asks; the verdict broken at spaces only. In a pipe without $COLUMNS nothing changes: one
    line each."""
    from lexkeep.core.layout import wrap_words

    text = _audit_sample(columns, env={"LEXKEEP_MIN_RATIO": "1.0"})
    lines = text.splitlines()
    bars = [line for line in lines if re.match(r" +[0-9-]+% \|", line)]
    assert all(re.fullmatch(r" +[0-9-]+% \| #* *\d+", line) for line in bars), bars
    assert [int(line.split()[-1]) for line in bars] == [2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1]
    verdict = "\n".join(lines[lines.index(next(x for x in lines if x.startswith("FAIL:"))) :])
    words = " ".join(verdict.split())
    assert words.endswith("is below LEXKEEP_MIN_RATIO=1.0.") and words.startswith("FAIL: 3/6")
    if columns is None:
        assert len(verdict.splitlines()) == 1 and max(map(len, bars)) <= 140
        return
    width = int(columns)
    assert all(len(line) <= width for line in bars), bars
    assert verdict.splitlines() == wrap_words(words, width), verdict


def test_the_per_kind_all_line_stays_bold_when_kinds_are_lines():
    """A terminal narrower than the per-kind table showed the kinds a line each, the `all`
    line no longer bold as the table's last row is."""
    from conftest import SAMPLE_TRACES, on_terminal

    for cols in (40, 100):
        raw = on_terminal(
            ["audit", str(SAMPLE_TRACES)], cols=cols, stream="stdout", check=False, raw=True
        )
        section = raw.split("Per identifier kind")[1].split("Per-conversation")[0]
        plain = [(re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", x), x) for x in section.splitlines()]
        line = next(raw for text, raw in plain if re.match(r"[│ ] *all ", text))
        assert re.search(r"\x1b\[[0-9;]*\b1m[^\x1b]*all", line), (cols, line)
