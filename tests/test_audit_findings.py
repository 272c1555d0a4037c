"""Findings kept on disk: a big audit holds KEEP_IN_MEMORY flat findings in memory and pickles the
rest in chunks; every reader of the report must see exactly the findings an all-in-memory
report holds, in order."""

from __future__ import annotations

import copy
import io
import pickle
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from lexkeep.audit import render as render_module
from lexkeep.audit import report as report_module
from lexkeep.audit.engine import run_audit
from lexkeep.audit.render import render
from lexkeep.audit.report import Evidence, Finding, Findings, redact, tally_keys
from lexkeep.audit.settings import FORMATS, AuditSettings
from lexkeep.core.model import Source, Verdict

GENERATE = Path(__file__).resolve().parent.parent / "benchmarks" / "generate.py"


def _finding(i: int) -> Finding:
    verdict = list(Verdict)[i % 4]
    evidence = None
    if verdict is Verdict.KEPT:
        evidence = Evidence(f"call-{i}", "lookup", f"ORD_{i}", Source("t.jsonl", 100 + i))
    elif verdict is Verdict.ALTERED:
        evidence = Evidence(f"call-{i}", "refund", f"ord-{i}", Source("t.jsonl", 7), "case", 0)
    return Finding(
        conversation_id=f"c{i // 5}",
        message_id=f"m{i}",
        kind=("order_id", "ticket", "é-kind")[i % 3],
        value=f"ORD_{i}",
        verdict=verdict,
        message=Source("t.jsonl", i + 1),
        boundary_id=f"b{i // 5}",
        boundary_kind="local",
        boundary=Source("t.jsonl", 1000 + i // 5),
        evidence=evidence,
        in_summary=(None, True, False)[i % 3],
        in_kept_verbatim=i % 2 == 0,
        used_before=i % 5 == 0,
        scan_complete=verdict is not Verdict.UNVERIFIED,
    )


@pytest.fixture
def spill(monkeypatch):
    """Findings beyond the third go to disk, four at a time."""
    monkeypatch.setattr(report_module, "KEEP_IN_MEMORY", 3)
    monkeypatch.setattr(report_module, "SPILL_CHUNK", 4)


def test_findings_on_disk_read_back_in_order(spill):
    items = [_finding(i) for i in range(23)]
    findings = Findings(items[:10])
    findings.extend(items[10:])
    assert "5 chunks on disk" in repr(findings)
    assert list(findings) == items
    assert list(findings) == items  # read again: the chunks stay
    assert len(findings) == 23
    assert [findings[i] for i in range(-23, 23)] == items + items
    for cut in (slice(2, 9), slice(None, None, 2), slice(None, None, -3), slice(20, 40)):
        assert findings[cut] == tuple(items)[cut]
    with pytest.raises(IndexError):
        findings[23]
    assert findings == tuple(items) and tuple(items) == findings
    assert findings != tuple(items[:-1]) and findings != tuple(items[:-1] + items[:1])
    keys = [(f.conversation_id, f.kind, f.verdict.value) for f in items]
    assert list(findings.tally_keys()) == keys
    assert list(tally_keys(findings)) == keys == list(tally_keys(items))  # a plain list too
    assert pickle.loads(pickle.dumps(findings)) == items  # a report can cross processes
    assert copy.deepcopy(findings) == items
    findings.close()


def test_a_spilled_report_renders_byte_for_byte_as_one_in_memory(tmp_path, monkeypatch):
    out = tmp_path / "d"
    subprocess.run(
        [sys.executable, str(GENERATE), "--format", "lexkeep", "--size", "256KB"]
        + ["--out", str(out)],
        check=True,
        capture_output=True,
        timeout=120,
    )
    dump = str(out / "dump.jsonl")
    whole = run_audit(paths=[dump], settings=AuditSettings(fail_on=("missing",)))
    assert isinstance(whole.findings, Findings) and len(whole.findings) > 40
    monkeypatch.setattr(report_module, "KEEP_IN_MEMORY", 7)
    monkeypatch.setattr(report_module, "SPILL_CHUNK", 5)
    spilled = run_audit(paths=[dump], settings=AuditSettings(fail_on=("missing",)))
    assert "chunks on disk" in repr(spilled.findings) and "0 chunks" not in repr(spilled.findings)
    assert spilled == whole
    for a, b in ((whole, spilled), (redact(whole), redact(spilled))):
        for fmt in FORMATS:
            texts = []
            for rep in (a, b):
                stream = io.StringIO()
                render(rep, fmt, stream)
                texts.append(stream.getvalue())
            assert texts[0] == texts[1], fmt


def test_flat_findings_render_and_rebuild_as_the_objects_do():
    """The JSON report reads flat findings; each gives the finding's fields, and rebuilds to
    the Finding it stands for — also without a message, boundary or evidence location."""
    items = [_finding(i) for i in range(12)]
    items.append(replace(items[0], message=None, boundary=None))
    items.append(replace(items[1], evidence=replace(items[1].evidence, source=None)))
    for f in items:
        row = report_module._flat(f)
        assert len(row) == len(report_module.FLAT_FIELDS)
        assert report_module._unflat(row) == f
    findings = Findings(items)
    assert list(report_module.flat_rows(findings)) == [report_module._flat(f) for f in items]
    assert list(report_module.flat_rows(items)) == list(report_module.flat_rows(findings))
    assert render_module.finding_dict(items[1]) == {  # altered, with its evidence
        "conversation_id": "c0",
        "message_id": "m1",
        "kind": "ticket",
        "value": "ORD_1",
        "verdict": "altered",
        "message": {"file": "t.jsonl", "line": 2},
        "boundary": {"id": "b0", "kind": "local", "file": "t.jsonl", "line": 1000},
        "evidence": {
            "call_id": "call-1",
            "tool": "refund",
            "found": "ord-1",
            "difference": "case",
            "distance": 0,
            "file": "t.jsonl",
            "line": 7,
        },
        "flags": {"in_summary": True, "in_kept_verbatim": False, "used_before_boundary": False},
        "scan_complete": True,
    }
    located_nowhere = render_module.finding_dict(items[-2])
    assert located_nowhere["message"] is None
    assert located_nowhere["boundary"] == {"id": "b0", "kind": "local"}
    assert "file" not in render_module.finding_dict(items[-1])["evidence"]
