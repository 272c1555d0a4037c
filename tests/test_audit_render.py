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
from lexkeep.audit.render import render
from lexkeep.audit.report import redact, redact_value
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


def test_table_folds_and_never_crops_at_any_width(monkeypatch):
    """Long paths and evidence fold inside their cells; no column is pushed off the edge."""
    from conftest import SAMPLE_TRACES

    from lexkeep.audit.engine import run_audit

    report = run_audit(paths=[str(SAMPLE_TRACES)])
    assert any(f.verdict.value == "altered" for f in report.findings)
    for width in (*range(40, 200, 7), 120, 140, 160, 240):
        monkeypatch.setenv("COLUMNS", str(width))
        lines = rendered(report, "table").splitlines()
        assert max(map(len, lines)) <= width, width
        for line in lines:
            if line[:1] in "│┃┏┡└":  # every table row keeps its right-hand border
                assert line.rstrip()[-1] in "│┃┓┩┘", (width, line)
        if width >= 100:  # headers whole; narrower, they fold too
            assert "│ flags" in "\n".join(lines).replace("┃", "│"), width
        if width >= 110:  # room for whole redacted values, searchable in a CI log
            hidden = rendered(redact(report), "table")
            assert re.search(r"redacted:[0-9a-f]{16}", hidden), width
        if width >= 120:  # and for the altered evidence's redacted value
            hidden_report = redact(report)
            (found,) = [
                f.evidence.found for f in hidden_report.findings if f.verdict.value == "altered"
            ]
            assert found in rendered(redact(report), "table"), width
        if width == 160:  # a path wider than its column breaks before the file name
            assert any(re.search(r"│ invoice_altered\.jsonl:2 +│", line) for line in lines)


def test_table_in_a_pipe_is_140_columns_without_columns(monkeypatch):
    monkeypatch.delenv("COLUMNS", raising=False)
    from conftest import SAMPLE_TRACES

    from lexkeep.audit.engine import run_audit

    lines = rendered(run_audit(paths=[str(SAMPLE_TRACES)]), "table").splitlines()
    assert max(map(len, lines)) == 140


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
