"""Audit semantics on stores built row by row (DESIGN.md "The audit", issue 4 point 1)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field

import pytest
import regex
from hypothesis import given
from hypothesis import strategies as st

from lexkeep.audit.engine import audit_store, decode_arguments, judge, near_probes
from lexkeep.audit.report import Counts
from lexkeep.audit.settings import AuditSettings
from lexkeep.core.model import Verdict
from lexkeep.core.nearmiss import classify
from lexkeep.core.store import Store

FILE = "trace.jsonl"


@dataclass
class Timeline:
    """Builds one conversation's rows in timeline order; `position` = order of adding."""

    store: Store
    cid: str = "c1"
    pos: int = 0
    line: int = 1
    rows: dict[str, list[tuple]] = field(default_factory=dict)
    scans: dict[str, bool] = field(default_factory=dict)

    def _next(self) -> tuple[int, int]:
        self.pos += 1
        self.line += 1
        return self.pos, self.line

    def user(self, mid: str, *values: tuple[str, str], kind: str = "user_text", complete=True):
        """A message with the sidecar identifiers (kind, value) that the extractor found."""
        pos, line = self._next()
        text = " ".join(v for _, v in values)
        self.rows.setdefault("messages", []).append(
            (mid, self.cid, pos, "user", kind, "completed", text, FILE, line)
        )
        start = 0
        for ident_kind, value in values:
            self.rows.setdefault("identifiers", []).append(
                (self.cid, mid, ident_kind, value, start, start + len(value))
            )
            start += len(value) + 1
        self.scans[mid] = complete
        return line

    def call(self, call_id: str, arguments: object, kind: str = "json_string") -> int:
        """A tool call; non-strings are stored as their JSON text."""
        pos, line = self._next()
        raw = arguments if isinstance(arguments, str) else json.dumps(arguments)
        self.rows.setdefault("tool_calls", []).append(
            (self.cid, call_id, pos, "tool", raw, kind, FILE, line)
        )
        return line

    def boundary(self, bid: str, summary: str | None = "summary", kept: tuple[str, ...] = ()):
        """A compaction boundary."""
        pos, line = self._next()
        self.rows.setdefault("boundaries", []).append(
            (bid, self.cid, pos, "local", summary, list(kept), FILE, line)
        )
        return line

    def save(self) -> None:
        """Write the rows through Store.bulk_insert."""
        s = self.store
        s.bulk_insert(
            "conversations",
            [("id", "VARCHAR"), ("format", "VARCHAR"), ("source_file", "VARCHAR")]
            + [("source_line", "BIGINT")],
            [(self.cid, "lexkeep", FILE, 1)],
        )
        cols = {
            "messages": [
                ("id", "VARCHAR"),
                ("conversation_id", "VARCHAR"),
                ("position", "BIGINT"),
                ("role", "VARCHAR"),
                ("kind", "VARCHAR"),
                ("status", "VARCHAR"),
                ("text", "VARCHAR"),
                ("source_file", "VARCHAR"),
                ("source_line", "BIGINT"),
            ],
            "identifiers": [
                ("conversation_id", "VARCHAR"),
                ("message_id", "VARCHAR"),
                ("kind", "VARCHAR"),
                ("value", "VARCHAR"),
                ("span_start", "INTEGER"),
                ("span_end", "INTEGER"),
            ],
            "tool_calls": [
                ("conversation_id", "VARCHAR"),
                ("call_id", "VARCHAR"),
                ("position", "BIGINT"),
                ("name", "VARCHAR"),
                ("arguments_raw", "VARCHAR"),
                ("arguments_kind", "VARCHAR"),
                ("source_file", "VARCHAR"),
                ("source_line", "BIGINT"),
            ],
            "boundaries": [
                ("id", "VARCHAR"),
                ("conversation_id", "VARCHAR"),
                ("position", "BIGINT"),
                ("kind", "VARCHAR"),
                ("summary_text", "VARCHAR"),
                ("kept_verbatim", "VARCHAR[]"),
                ("source_file", "VARCHAR"),
                ("source_line", "BIGINT"),
            ],
        }
        for table, rows in self.rows.items():
            s.bulk_insert(table, cols[table], rows)
        s.bulk_insert(
            "identifier_scans",
            [
                ("message_id", "VARCHAR"),
                ("conversation_id", "VARCHAR"),
                ("complete", "BOOLEAN"),
                ("rules_digest", "VARCHAR"),
            ],
            [(mid, self.cid, ok, "test") for mid, ok in self.scans.items()],
        )


def verdicts(report) -> dict[str, str]:
    """value -> verdict."""
    return {f.value: f.verdict.value for f in report.findings}


def run(store: Store, **settings):
    return audit_store(store, AuditSettings(**settings))


def test_audited_once_at_the_first_boundary_after_the_message(store):
    t = Timeline(store)
    t.user("m1", ("code", "ORD_88412"))
    t.boundary("b1")
    t.call("k1", {"order": "ORD_88412"})
    t.user("m2", ("code", "ORD_55555"))
    t.call("k2", {"order": "ORD_55555"})  # before m2's boundary: not evidence for m2
    t.boundary("b2")
    t.call("k3", {"order": "none"})
    t.user("m3", ("code", "ORD_99999"))  # after the last boundary: not audited
    t.call("k4", {"order": "ORD_99999"})
    t.save()
    report = run(store)
    assert verdicts(report) == {"ORD_88412": "kept", "ORD_55555": "missing"}
    by_value = {f.value: f for f in report.findings}
    assert by_value["ORD_88412"].boundary_id == "b1"
    assert by_value["ORD_55555"].boundary_id == "b2"
    assert by_value["ORD_55555"].used_before is True
    assert by_value["ORD_88412"].evidence.call_id == "k1"


def test_evidence_runs_to_the_end_of_the_conversation_across_later_boundaries(store):
    t = Timeline(store)
    t.user("m1", ("code", "ORD_88412"))
    t.boundary("b1")
    t.boundary("b2")
    line = t.call("k1", {"order": "ORD_88412"})
    t.save()
    finding = run(store).findings[0]
    assert finding.verdict == Verdict.KEPT
    assert finding.boundary_id == "b1"
    assert (finding.evidence.source.file, finding.evidence.source.line) == (FILE, line)


@pytest.mark.parametrize(
    ("value", "argument", "verdict"),
    [
        ("W5061109", "#W5061109", "kept"),
        ("7091239", "gift_card_7091239", "kept"),
        ("INV-2025-08-4471", "INV-2025-08-44719", "altered"),
        ("INV-2025-08-44719", "INV-2025-08-4471", "altered"),
        ("INV-2025-08-44719", "inv-2025-08-44719", "altered"),
        ("INV-2025-08-44719", "INV202508 44719", "altered"),
        ("ERR_CONN_RESET", "ERR_CONN_RESTE", "altered"),
        ("ERR_CONN_RESET", "timeout", "missing"),
        ("abc123", "xabc123", "altered"),
    ],
)
def test_kept_altered_missing(store, value, argument, verdict):
    t = Timeline(store)
    t.user("m1", ("code", value))
    t.boundary("b1")
    t.call("k1", {"q": argument})
    t.save()
    finding = run(store).findings[0]
    assert finding.verdict.value == verdict
    if verdict == "altered":
        assert finding.evidence.found == argument.split()[-1] or argument.startswith(
            finding.evidence.found
        )
        assert finding.evidence.difference in {"case", "separator", "truncated", "extended", "edit"}
    if verdict == "missing":
        assert finding.evidence is None


def test_altered_evidence_is_the_closest_near_miss(store):
    t = Timeline(store)
    t.user("m1", ("code", "INV-2025-08-44719"))
    t.boundary("b1")
    t.call("k1", {"q": "INV-2025-08-4471"})  # truncated
    t.call("k2", {"q": "inv-2025-08-44719"})  # case only: closer
    t.save()
    evidence = run(store).findings[0].evidence
    assert (evidence.call_id, evidence.difference, evidence.found) == (
        "k2",
        "case",
        "inv-2025-08-44719",
    )


def test_argument_decoding_kinds(store):
    t = Timeline(store)
    t.user(
        "m1",
        ("phone", "6245231688"),
        ("path", "C:\\Users\\ana\\report.txt"),
        ("code", "HAT136"),
        ("code", "E0502"),
        ("code", "ERR_CONN_RESET"),
        ("code", "#W999"),
    )
    t.boundary("b1")
    t.call("k1", '{"item_ids": [6245231688], "path": "C:\\\\Users\\\\ana\\\\report.txt"}')
    t.call("k2", "{not json: HAT136", kind="json_string")  # invalid JSON: used raw
    t.call("k3", "*** Update File: E0502.md", kind="freeform")
    t.call("k4", ["grep", "-n", "ERR_CONN_RESET", "src"], kind="array")
    t.call("k5", '"#W999"')  # a bare JSON string
    t.save()
    assert set(verdicts(run(store)).values()) == {"kept"}


def test_non_ascii_values_found_behind_json_escapes(store):
    t = Timeline(store)
    t.user("m1", ("path", "/home/jürgen/Überweisung.pdf"), ("code", "ZAHLUNG-Ä123"))
    t.boundary("b1")
    t.call("k1", json.dumps({"path": "/home/jürgen/Überweisung.pdf"}))  # \u00fc escapes
    t.call("k2", json.dumps({"q": "ZAHLUNG-Ä123"}, ensure_ascii=False))
    t.save()
    assert set(verdicts(run(store)).values()) == {"kept"}


def test_values_found_behind_escaped_slashes(store):
    # "\/" is a legal JSON escape of "/" (PHP's and some Java encoders' default): the decoded
    # argument holds the value, so it is kept, used before, or a near miss like any other.
    t = Timeline(store)
    t.user(
        "m1",
        ("path", "/var/log/app.log"),
        ("url", "https://x.io/a/b.tgz"),
        ("path", "/srv/data/export.csv"),
        ("path", "/opt/app/config.yml"),
    )
    t.call("k0", r'{"path": "\/srv\/data\/export.csv"}')
    t.boundary("b1")
    t.call("k1", r'{"path": "\/var\/log\/app.log", "url": "https:\/\/x.io\/a\/b.tgz"}')
    t.call("k2", r'{"path": "\/opt\/app\/config.ym"}')
    t.save()
    by_value = {f.value: f for f in run(store).findings}
    assert by_value["/var/log/app.log"].verdict == Verdict.KEPT
    assert by_value["https://x.io/a/b.tgz"].verdict == Verdict.KEPT
    assert by_value["/srv/data/export.csv"].used_before is True
    assert by_value["/srv/data/export.csv"].verdict == Verdict.MISSING
    altered = by_value["/opt/app/config.yml"]
    assert altered.verdict == Verdict.ALTERED
    assert (altered.evidence.found, altered.evidence.difference) == (
        "/opt/app/config.ym",
        "truncated",
    )


def test_decode_arguments_numbers_keep_their_json_text():
    assert decode_arguments('{"a": 1.50, "b": [2, "x"], "c": true, "d": null}', "json_string") == [
        "1.50",
        "2",
        "x",
    ]
    assert decode_arguments('{"big": 123456789012345678901234567890}', "object") == [
        "123456789012345678901234567890"
    ]
    assert decode_arguments("rm -rf {", "json_string") == ["rm -rf {"]
    assert decode_arguments('["a", "b"]', "array") == ["a", "b"]


def test_many_candidates_inside_longer_tokens_still_find_the_verbatim_one(store):
    t = Timeline(store)
    t.user("m1", ("code", "ORD_88412"))
    t.boundary("b1")
    for i in range(30):
        t.call(f"k{i}", {"q": f"XORD_88412{i}"})  # contains the value, never at a boundary
    t.call("last", {"q": "ORD_88412"})
    t.save()
    finding = run(store).findings[0]
    assert finding.verdict == Verdict.KEPT
    assert finding.evidence.call_id == "last"


def test_flags_summary_kept_verbatim_used_before(store):
    t = Timeline(store)
    t.user("m1", ("code", "ORD_11111"), ("code", "ORD_22222"), ("code", "ORD_33333"))
    t.call("k0", {"q": "ORD_33333"})
    t.boundary("b1", summary="user asks about ORD_11111", kept=("please check ORD_22222",))
    t.save()
    by_value = {f.value: f for f in run(store).findings}
    assert (by_value["ORD_11111"].in_summary, by_value["ORD_11111"].in_kept_verbatim) == (
        True,
        False,
    )
    assert (by_value["ORD_22222"].in_summary, by_value["ORD_22222"].in_kept_verbatim) == (
        False,
        True,
    )
    assert by_value["ORD_33333"].used_before is True
    assert by_value["ORD_11111"].used_before is False
    assert all(f.verdict == Verdict.MISSING for f in by_value.values())


def test_opaque_summary_flag_is_none(store):
    t = Timeline(store)
    t.user("m1", ("code", "ORD_11111"))
    t.boundary("b1", summary=None)
    t.save()
    assert run(store).findings[0].in_summary is None


def test_incomplete_scan_is_never_missing_and_stays_outside_the_ratio(store):
    t = Timeline(store)
    t.user("m1", ("code", "ORD_11111"), ("code", "ORD_22222"), complete=False)
    t.user("m2", ("code", "ORD_33333"))
    t.boundary("b1")
    t.call("k1", {"q": "ORD_11111 ORD_33333"})
    t.save()
    report = run(store)
    assert verdicts(report) == {
        "ORD_11111": "kept",
        "ORD_22222": "unverified",
        "ORD_33333": "kept",
    }
    assert (report.totals.audited, report.totals.kept, report.totals.unverified) == (2, 2, 1)
    assert report.gate.passed
    # the count, and where the first such identifier was typed, as the other notes name theirs
    assert (
        f"1 identifier(s) unverified (first: {FILE}:2): their message's identifier scan ran out"
        " of time, so they are never reported missing and stay outside the ratio"
    ) in report.notes, report.notes


def test_only_real_user_messages_are_audited(store):
    t = Timeline(store)
    t.user("m1", ("code", "ORD_11111"), kind="summary")
    t.user("m2", ("code", "ORD_22222"), kind="injected")
    t.boundary("b1")
    t.save()
    assert run(store).findings == ()


def test_conversation_without_boundary_is_not_audited(store):
    t = Timeline(store)
    t.user("m1", ("code", "ORD_11111"))
    t.call("k1", {"q": "nothing"})
    t.save()
    report = run(store)
    assert report.findings == ()
    assert report.conversations == ()
    assert report.conversations_total == 1
    assert report.gate.passed  # nothing audited passes, and says so
    assert any("nothing audited" in note for note in report.notes)


def test_ratios_per_conversation_kind_and_distribution(store):
    a = Timeline(store, cid="a")
    a.user("a1", ("code", "ORD_11111"), ("path", "/tmp/x.log"))
    a.boundary("ab")
    a.call("ak", {"q": "ORD_11111"})
    a.save()
    b = Timeline(store, cid="b")
    b.user("b1", ("code", "ORD_22222"))
    b.boundary("bb")
    b.call("bk", {"q": "ORD_22222"})
    b.save()
    report = run(store, min_ratio=0.6)
    per_conv = {c.conversation_id: c.counts.ratio for c in report.conversations}
    assert per_conv == {"a": 0.5, "b": 1.0}
    per_kind = {k.kind: (k.counts.kept, k.counts.audited) for k in report.kinds}
    assert per_kind == {"code": (2, 2), "path": (0, 1)}
    assert report.totals.ratio == pytest.approx(2 / 3)
    dist = dict(report.distribution)
    assert (dist["50-60%"], dist["100%"], sum(dist.values())) == (1, 1, 2)
    assert report.gate.passed and report.exit_code == 0


def test_gate_min_ratio_fail_on_exit_zero():
    f = Counts(kept=9, missing=1)
    assert not judge(f, AuditSettings()).passed
    assert judge(f, AuditSettings(min_ratio=0.9)).passed
    gate = judge(f, AuditSettings(min_ratio=0.95, exit_zero=True))
    assert (gate.passed, gate.exit_code) == (False, 0)
    assert judge(Counts(), AuditSettings()).passed


def test_fail_on_altered_fails_even_above_the_ratio(store):
    t = Timeline(store)
    t.user("m1", *[("code", f"ORD_{i}0000") for i in range(1, 10)], ("code", "INV-2025-08-44719"))
    t.boundary("b1")
    t.call("k1", {"q": " ".join(f"ORD_{i}0000" for i in range(1, 10)) + " INV-2025-08-4471"})
    t.save()
    assert run(store, min_ratio=0.9).exit_code == 0
    report = run(store, min_ratio=0.9, fail_on=("altered",))
    assert report.exit_code == 1
    assert "1 altered" in report.gate.reasons[0]
    assert run(store, min_ratio=0.9, fail_on=("missing",)).exit_code == 0


def test_audit_runs_on_a_read_only_store(db_file):
    with Store.open(db_file) as s:
        t = Timeline(s)
        t.user("m1", ("code", "ORD_11111"))
        t.boundary("b1")
        t.call("k1", {"q": "ORD_11111"})
        t.save()
    with Store.open(db_file, read_only=True) as s:
        assert verdicts(run(s)) == {"ORD_11111": "kept"}


_ident = st.text(alphabet="ABCDEFGHJKLMNPQRSTUVWXYZ0123456789-_", min_size=4, max_size=24).filter(
    lambda v: sum(c.isalnum() for c in v) >= 4
)


@given(_ident, st.data())
def test_every_near_miss_hits_a_probe(value, data):
    """A near miss the classifier accepts always contains one of the SQL prefilter probes."""
    op = data.draw(st.sampled_from(["lower", "drop_last", "add", "swap", "sub"]))
    if op == "lower":
        found = value.lower()
    elif op == "drop_last":
        found = value[:-1]
    elif op == "add":
        found = value + data.draw(st.sampled_from("0123456789"))
    elif op == "swap" and len(value) > 2:
        i = data.draw(st.integers(0, len(value) - 2))
        found = value[:i] + value[i + 1] + value[i] + value[i + 2 :]
    else:
        i = data.draw(st.integers(0, len(value) - 1))
        found = value[:i] + "Q" + value[i + 1 :]
    if classify(value, found) is None:
        return
    # The same folding as the SQL prefilter: lower-case, separators removed.
    folded = regex.sub(r"[\s\-_.:/#\\+()]+", "", found.lower())
    assert any(p in folded for p in near_probes(value))


def test_unscanned_user_messages_are_noted(store):
    t = Timeline(store)
    t.user("m0", ("code", "ORD_00000"))  # scanned: not counted
    t.user("m1", ("code", "ORD_11111"))
    t.user("m2", ("code", "ORD_22222"))
    t.boundary("b1")
    t.user("m3", ("code", "ORD_33333"))  # after the last boundary: not counted
    for mid in ("m1", "m2", "m3"):
        del t.scans[mid]  # the sidecar never ran over them
    t.rows["identifiers"] = t.rows["identifiers"][:1]
    t.save()
    report = run(store)
    assert [f.value for f in report.findings] == ["ORD_00000"]
    notes = [n for n in report.notes if "never scanned" in n]
    # the count, and where the first such message is, as the other notes name theirs
    assert notes == [
        f"2 user message(s) before a boundary were never scanned for identifiers (first:"
        f" {FILE}:3); re-ingest the traces to audit them"
    ], report.notes


def test_incomplete_scans_before_a_boundary_are_noted(store):
    t = Timeline(store)
    t.user("m0", ("code", "ORD_00000"))
    t.user("m1", ("code", "ORD_11111"), complete=False)
    t.user("m2", ("code", "ORD_22222"), complete=False)
    t.boundary("b1")
    t.user("m3", ("code", "ORD_33333"), complete=False)  # after the last boundary: not counted
    t.save()
    report = run(store)
    notes = [n for n in report.notes if "scanned only in part" in n]
    assert len(notes) == 1, report.notes
    # the count, and where the first such message is, as the other notes name theirs
    assert notes[0].startswith(
        f"2 user message(s) before a boundary were scanned only in part (first: {FILE}:3)"
    ), notes[0]


def test_audit_of_files_reports_progress_in_bytes_read():
    from pathlib import Path

    from lexkeep.audit.engine import run_audit

    samples = Path(__file__).resolve().parent.parent / "sample_traces"
    for paths in ([str(samples / "invoice_altered.jsonl")], [str(samples)]):
        seen: list[int] = []
        run_audit(paths=paths, on_progress=seen.append)
        files = [Path(p) for p in paths if Path(p).is_file()] or [
            f for f in samples.iterdir() if f.suffix in (".json", ".jsonl")
        ]
        assert sum(seen) == sum(f.stat().st_size for f in files), paths


def test_audit_tells_its_phases_for_a_progress_bar(tmp_path):
    """on_phase names what the audit does now: the bar does not sit on "reading traces"
    while a big file's identifiers are extracted and audited."""
    from pathlib import Path

    from lexkeep.audit.engine import run_audit
    from lexkeep.core.ingest import ingest_paths

    samples = Path(__file__).resolve().parent.parent / "sample_traces"
    one = str(samples / "invoice_altered.jsonl")  # one lexkeep JSONL file: the DuckDB path
    phases: list[str] = []
    run_audit(paths=[one], on_phase=phases.append)
    assert phases == ["loading the file (DuckDB)", "extracting identifiers", "auditing identifiers"]
    phases.clear()
    run_audit(paths=[str(samples)], on_phase=phases.append)
    assert phases == ["reading traces", "auditing identifiers"]
    db = str(tmp_path / "s.duckdb")
    with Store.open(db) as store:
        ingest_paths(store, [str(samples)])
    phases.clear()
    run_audit(db=db, on_phase=phases.append)
    assert phases == ["auditing identifiers"]


def test_a_value_typed_twice_in_one_message_is_audited_once(store):
    """Every identifier of a message is audited once: a repeated value weighed twice in the
    ratio. Typed again in a later message, it is that message's identifier too."""
    t = Timeline(store)
    t.user("m1", ("code", "ORD_88412"), ("path", "public/a.html"), ("code", "ORD_88412"))
    t.user("m2", ("code", "ORD_88412"))
    t.boundary("b1")
    t.call("k1", {"q": "ORD_88412"})
    t.save()
    report = run(store)
    first, second = sorted({f.message.line for f in report.findings})
    assert sorted((f.message.line, f.value, f.verdict.value) for f in report.findings) == [
        (first, "ORD_88412", "kept"),
        (first, "public/a.html", "missing"),
        (second, "ORD_88412", "kept"),
    ]
    assert (report.totals.audited, report.totals.kept) == (3, 2)


@pytest.mark.parametrize(
    ("value", "argument"),
    [
        ("+1 (555) 010-9999", "+15550109999"),
        ("(555) 010-9999", "5550109999"),
        ("+44 20 7946 0958", "442079460958"),
    ],
)
def test_a_reformatted_phone_number_is_a_separator_change(store, value, argument):
    t = Timeline(store)
    t.user("m1", ("phone", value))
    t.boundary("b1")
    t.call("k1", {"to": argument})
    t.save()
    finding = run(store).findings[0]
    assert finding.verdict.value == "altered"
    assert (finding.evidence.found, finding.evidence.difference, finding.evidence.distance) == (
        argument,
        "separator",
        0,
    )


@pytest.mark.parametrize(
    ("value", "argument", "found"),
    [
        ("March 5, 2025", {"date": "2025-03-05"}, "2025-03-05"),
        ("May 20", {"flight": "HAT136", "date": "2024-05-20"}, "2024-05-20"),
        ("20th May 2024", {"at": "2024-05-20T09:00:00Z"}, "2024-05-20T09:00:00Z"),
    ],
)
def test_a_textual_date_rewritten_as_an_iso_date_is_altered(store, value, argument, found):
    t = Timeline(store)
    t.user("m1", ("date_text", value))
    t.boundary("b1")
    line = t.call("k1", argument)
    t.save()
    finding = run(store).findings[0]
    assert finding.verdict.value == "altered"
    evidence = finding.evidence
    assert (evidence.found, evidence.difference, evidence.distance) == (found, "date", 0)
    assert (evidence.call_id, evidence.source.line) == ("k1", line)


def test_a_textual_date_kept_verbatim_is_kept_and_another_date_is_missing(store):
    t = Timeline(store)
    t.user("m1", ("date_text", "March 5, 2025"), ("date_text", "June 30"))
    t.boundary("b1")
    t.call("k1", {"note": "due March 5, 2025", "date": "2025-03-05"})
    t.call("k2", {"date": "2025-07-30"})
    t.save()
    assert verdicts(run(store)) == {"March 5, 2025": "kept", "June 30": "missing"}


@pytest.mark.parametrize(
    ("kind", "value", "arguments", "verdict"),
    [
        ("snake_id", "cycle_id", {"cycle_id": "C-17", "limit": 5}, "kept"),
        ("const_code", "MAX_RETRIES", {"config": {"MAX_RETRIES": 3}}, "kept"),
        ("quoted_token", "cycle_id", [{"filter": {"cycle_id": "x"}}], "kept"),
        ("snake_id", "cycle_id", {"old_cycle_id": "C-17"}, "kept"),  # as in a value
        ("snake_id", "cycle_id", {"cycle_ids": "C-17"}, "missing"),
        # Not shaped like a key name: an order number as a key is no evidence of it.
        ("alnum_code", "W5061109", {"W5061109": "refund"}, "missing"),
        ("snake_id", "cycle_id", "cycle_id=4", "kept"),  # free text: as before
    ],
)
def test_a_key_name_the_user_typed_is_kept_by_a_key_of_the_arguments(
    store, kind, value, arguments, verdict
):
    t = Timeline(store)
    t.user("m1", (kind, value))
    t.boundary("b1")
    t.call("k1", arguments, kind="freeform" if isinstance(arguments, str) else "json_string")
    t.save()
    finding = run(store).findings[0]
    assert finding.verdict.value == verdict
    if verdict == "kept":
        assert (finding.evidence.call_id, finding.evidence.found) == ("k1", value)


def test_a_key_before_the_boundary_counts_as_used_before(store):
    t = Timeline(store)
    t.user("m1", ("snake_id", "cycle_id"))
    t.call("k0", {"cycle_id": "C-17"})
    t.boundary("b1")
    t.call("k1", {"q": "cycles"})
    t.save()
    finding = run(store).findings[0]
    assert (finding.verdict.value, finding.used_before) == ("missing", True)


def test_calls_before_the_boundary_do_not_hide_those_after_it(store):
    """The first kept call after the boundary and the first one before it (used_before) come
    from one search: a call before the boundary that keeps the value verbatim must not end the
    search after it, and the other way round."""
    t = Timeline(store)
    t.user("m1", ("code", "ORD_88412"), ("code", "ORD_55555"))
    t.call("k0", {"order": "ORD_88412"})
    t.boundary("b1")
    t.call("k1", {"order": "ORD_55555"})
    t.call("k2", {"order": "ORD_88412"})
    t.boundary("b2")
    t.user("m2", ("code", "ORD_77777"))
    t.call("k3", {"order": "ORD_77777"})
    t.boundary("b3")
    t.call("k4", {"order": "ORD_77777"})
    t.save()
    report = run(store)
    assert verdicts(report) == {"ORD_88412": "kept", "ORD_55555": "kept", "ORD_77777": "kept"}
    found = {f.value: (f.evidence.call_id, f.used_before) for f in report.findings}
    assert found == {
        "ORD_88412": ("k2", True),
        "ORD_55555": ("k1", False),
        "ORD_77777": ("k4", True),
    }
