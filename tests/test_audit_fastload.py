"""The audit's DuckDB fast path (audit/fastload.py) gives exactly the normal path's report.

Every test audits the same file both ways (`run_audit(fast=True)` and `fast=False`, which is the
general ingest) and compares the whole report: verdicts, flags, evidence, file:line, counts.
Files the fast path cannot reproduce must fall back, so errors keep their exact file:line:col.
"""

from __future__ import annotations

import io
import itertools
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from lexkeep.audit import engine
from lexkeep.audit import fastload as fastload_module
from lexkeep.audit.engine import (
    _Expected,
    _may_be_within,
    audit_store,
    bounded_distance,
    fast_best_near_miss,
    run_audit,
)
from lexkeep.audit.fastload import LineCheck, fast_load, read_alike
from lexkeep.audit.render import render, report_dict
from lexkeep.audit.settings import AuditSettings
from lexkeep.core.errors import InputError
from lexkeep.core.nearmiss import (
    best_near_miss,
    candidates,
    edit_distance,
    fold,
    grouped_runs,
    skeleton,
)
from lexkeep.core.store import Store

REPO = Path(__file__).resolve().parent.parent
GENERATE = REPO / "benchmarks" / "generate.py"


def _generate(out: Path, seed: int, size: str = "1MB") -> Path:
    proc = subprocess.run(
        [sys.executable, str(GENERATE), "--format", "lexkeep", "--size", size, "--out", str(out)]
        + ["--seed", str(seed)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    return out / "dump.jsonl"


def _took_fast_path(path: Path) -> bool:
    with Store.open(None) as store:
        return fast_load(store, str(path))


def _both(path: Path) -> tuple:
    fast = run_audit(paths=[str(path)], fast=True)
    slow = run_audit(paths=[str(path)], fast=False)
    return fast, slow


@pytest.mark.parametrize("seed", [1])
def test_generated_dumps_same_report_both_paths(tmp_path, seed):
    dump = _generate(tmp_path / "d", seed)
    assert _took_fast_path(dump)
    fast, slow = _both(dump)
    assert slow.totals.audited > 100  # the dump exercises the audit
    assert fast.totals == slow.totals
    assert fast.findings == slow.findings  # every verdict, flag, evidence and file:line
    assert fast == slow
    expected = json.loads((dump.parent / "expected.json").read_text())["totals"]
    assert fast.totals.kept == expected["kept"]
    assert fast.totals.altered == expected["altered"]


def test_audit_in_small_batches_same_report(tmp_path, monkeypatch):
    """Identifiers are audited AUDIT_BATCH at a time: batches that split conversations (and
    the calls shared by their identifiers) must give the one-batch report."""
    dump = _generate(tmp_path / "d", 3)
    whole = run_audit(paths=[str(dump)])
    assert whole.totals.audited > 100
    monkeypatch.setattr(engine, "AUDIT_BATCH", 7)
    batched = run_audit(paths=[str(dump)])
    assert batched == whole


def test_parallel_extraction_same_report(tmp_path, monkeypatch):
    dump = _generate(tmp_path / "d", 5)
    monkeypatch.setenv("LEXKEEP_EXTRACT_WORKERS", "2")
    with Store.open(None) as store:
        assert fast_load(store, str(dump), parallel_min_chars=0)
        fast = audit_store(store, AuditSettings(), inputs=(str(dump),))
    slow = run_audit(paths=[str(dump)], fast=False)
    assert fast == slow


def _lines(*records: object) -> str:
    return "".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in records)


def _conversation(args: object = '{"invoice_id": "INV-2025-08-44719"}') -> list[object]:
    return [
        {"type": "message", "id": "m1", "conversation_id": "c1", "role": "user",
         "text": "refund INV-2025-08-44719 and ORD_88412 to /srv/app/a.log"},
        {"type": "tool_call", "id": "k0", "conversation_id": "c1", "name": "lookup",
         "arguments": '{"order": "ORD_88412"}'},
        {"type": "tool_result", "call_id": "k0", "conversation_id": "c1", "text": "ok"},
        {"type": "compaction", "id": "b1", "conversation_id": "c1", "summary": "INV-2025-08-44719",
         "kept_verbatim": ["ORD_88412"]},
        {"type": "tool_call", "id": "k1", "conversation_id": "c1", "name": "refund",
         "arguments": args},
        {"type": "tool_call", "id": "k2", "conversation_id": "c1", "name": "tail",
         "arguments": '{"path": "/srv/app/A.log", "order": "ord-88412"}'},
    ]  # fmt: skip


# Files the fast path takes: the report must be the normal path's.
FAST_CASES = {
    "plain": _lines(*_conversation()),
    "object_arguments": _lines(*_conversation({"invoice": "INV-2025-08-44719", "n": 1.50})),
    "array_arguments": _lines(*_conversation(["cat", "INV-2025-08-4471"])),
    "null_arguments": _lines(*_conversation(None)),
    "conversation_record_after_use": _lines(
        *_conversation(), {"type": "conversation", "id": "c1", "title": "t"}
    ),
    "run_record": _lines(
        {"type": "run", "id": "r1", "conversation_id": "c1", "status": "completed"},
        *_conversation(),
    ),
    "no_final_newline": _lines(*_conversation()).rstrip("\n"),
    "blank_lines": "\n\n" + _lines(*_conversation()[:3], "", *_conversation()[3:]) + "\n",
    "crlf": _lines(*_conversation()).replace("\n", "\r\n"),
    "non_ascii_and_escapes": _lines(
        {
            "type": "message",
            "id": "m1",
            "conversation_id": "c1",
            "role": "user",
            "text": "refund INV-2025-08-44719 from /srv/données/rapport.log",
        },
        {"type": "compaction", "id": "b1", "conversation_id": "c1"},
        {
            "type": "tool_call",
            "id": "k1",
            "conversation_id": "c1",
            "name": "t",
            "arguments": json.dumps({"q": "/srv/données/rapport.log"}, ensure_ascii=True),
        },
    ),  # fmt: skip
    "kind_overrides_role": _lines(
        {
            "type": "message",
            "id": "m0",
            "conversation_id": "c1",
            "role": "assistant",
            "kind": "user_text",
            "text": "ERR_CONN_RESET",
        },
        {
            "type": "message",
            "id": "m2",
            "conversation_id": "c1",
            "role": "user",
            "kind": "summary",
            "text": "ERR_DISK_FULL",
        },
        *_conversation(),
    ),  # fmt: skip
}


def test_empty_lines_anywhere_keep_every_line_number(tmp_path):
    """DuckDB's JSON reader skips empty lines, so the staging numbers rows among the others;
    the line check's empty lines turn them back into the file's lines (runs of them, at the
    start, between every record, at the end), with the check in a worker or in-process."""
    records = _conversation()
    text = "\n\n\n" + "".join(_lines(r) + "\n" * (i % 3) for i, r in enumerate(records)) + "\n\n"
    path = tmp_path / "t.jsonl"
    path.write_text(text, encoding="utf-8")
    loaded = _took_fast_path(path)
    assert loaded and loaded.by_content
    slow = run_audit(paths=[str(path)], fast=False)
    # The user message after three empty lines, the boundary after three more.
    assert {(f.message.line, f.boundary.line) for f in slow.findings} == {(4, 10)}
    assert {f.evidence.source.line for f in slow.findings if f.evidence} == {11, 13}
    for workers in ("2", "0"):
        os.environ["LEXKEEP_READ_WORKERS"] = workers
        try:
            assert run_audit(paths=[str(path)], fast=True) == slow
        finally:
            del os.environ["LEXKEEP_READ_WORKERS"]


def test_mixed_line_endings_and_empty_lines_give_the_normal_report(tmp_path):
    records = _conversation()
    text = "\r\n" + _lines(*records[:2]).replace("\n", "\r\n") + "\n\r\n" + _lines(*records[2:])
    path = tmp_path / "t.jsonl"
    path.write_text(text, encoding="utf-8")
    fast, slow = _both(path)
    assert slow.totals.audited and fast == slow


def test_arguments_with_fractions_are_staged_with_their_lines(tmp_path):
    """read_json has no line to take 1.50 from (DuckDB writes it back as 1.5): such a file is
    staged again through read_csv, which keeps every line, and still takes the fast path."""
    plain = tmp_path / "plain.jsonl"
    plain.write_text(FAST_CASES["plain"], encoding="utf-8")
    assert _took_fast_path(plain).by_content
    call = (
        '{"type": "tool_call", "id": "k1", "conversation_id": "c1", "name": "refund",'
        ' "arguments": {"invoice": "INV-2025-08-44719", "n": 1.50}}'
    )
    records = _conversation()
    path = tmp_path / "t.jsonl"
    path.write_text("\n" + _lines(*records[:4], call, *records[5:]), encoding="utf-8")
    loaded = _took_fast_path(path)
    assert loaded and not loaded.by_content
    fast, slow = _both(path)
    assert fast == slow
    with Store.open(None) as store:
        fast_load(store, str(path))
        raw = store.con.execute("SELECT arguments_raw FROM tool_calls WHERE call_id = 'k1'")
        assert raw.fetchone()[0] == '{"invoice":"INV-2025-08-44719","n":1.50}'


@pytest.mark.parametrize("name", sorted(FAST_CASES))
def test_edge_files_fast_path_same_report(tmp_path, name):
    path = tmp_path / "t.jsonl"
    path.write_text(FAST_CASES[name], encoding="utf-8")
    assert _took_fast_path(path)
    fast, slow = _both(path)
    assert fast == slow


# Files the fast path must hand to the normal ingest (same report, or the same error).
FALLBACK_CASES = {
    "duplicate_message_id": _lines(*_conversation(), _conversation()[0]),
    "truncated_last_line": _lines(*_conversation()) + '{"type": "message", "id": "m9"',
    # Skipped by the reader and named in the notes, which the normal ingest counts.
    "unknown_type_and_run": _lines(
        {"type": "weird", "x": 1},
        {"type": "run", "id": "r1", "conversation_id": "c1", "status": "completed"},
        *_conversation(),
    ),
}
ERROR_CASES = {
    "invalid_json": _lines(*_conversation()[:2], "{not json", *_conversation()[2:]),
    "missing_type": _lines(*_conversation(), {"id": "x"}),
    "bad_role": _lines({"type": "message", "id": "m0", "conversation_id": "c1", "role": "bot",
                        "text": "x"}, *_conversation()),
    "kept_verbatim_not_strings": _lines(*_conversation(), {"type": "compaction", "id": "b9",
                                        "conversation_id": "c1", "kept_verbatim": [1]}),
    "empty_id": _lines({"type": "tool_call", "id": "", "conversation_id": "c1", "name": "n"}),
}  # fmt: skip


@pytest.mark.parametrize("name", sorted(FALLBACK_CASES))
def test_files_the_fast_path_refuses_fall_back(tmp_path, name):
    path = tmp_path / "t.jsonl"
    path.write_text(FALLBACK_CASES[name], encoding="utf-8")
    assert not _took_fast_path(path)
    fast, slow = _both(path)
    assert fast == slow


def test_a_whitespace_only_line_goes_to_the_normal_ingest(tmp_path):
    """DuckDB's JSON reader skips such a line, and the line check cannot read it as JSON: the
    normal ingest decides (the same report)."""
    path = tmp_path / "t.jsonl"
    path.write_text(_lines(*_conversation()[:3], "   ", *_conversation()[3:]), encoding="utf-8")
    assert _took_fast_path(path)
    assert not read_alike(str(path))
    fast, slow = _both(path)
    assert fast == slow


def _errors_both_ways(path) -> list[tuple]:
    """(message, path, line, col) of the InputError the fast path and the general path raise."""
    errors = []
    for fast in (True, False):
        with pytest.raises(InputError) as caught:
            run_audit(paths=[str(path)], fast=fast)
        exc = caught.value
        errors.append((str(exc), exc.path, exc.line, exc.col))
    return errors


@pytest.mark.parametrize("name", sorted(ERROR_CASES))
def test_bad_lines_keep_the_exact_error(tmp_path, name):
    path = tmp_path / "t.jsonl"
    path.write_text(ERROR_CASES[name], encoding="utf-8")
    assert not _took_fast_path(path)
    errors = _errors_both_ways(path)
    assert errors[0] == errors[1]
    assert errors[0][1] == str(path) and errors[0][2] is not None


# Fields the staging reads as text (a number as its digits) where the reader wants a string:
# the staging takes the file, and LineCheck sends it to the normal ingest (same report, or the
# same error naming the line).
TYPE_CASES = {
    "integer_id": _lines(
        *_conversation(),
        {"type": "message", "id": 7, "conversation_id": "c1", "role": "user", "text": "HAT136"},
    ),
    "integer_conversation_id": _lines(
        *_conversation(),
        {"type": "tool_call", "id": "k8", "conversation_id": 1, "name": "n", "arguments": "{}"},
    ),
    "integer_call_id": _lines(
        *_conversation(), {"type": "tool_result", "call_id": 8, "conversation_id": "c1"}
    ),
    "message_text_not_string": _lines(*_conversation(), {"type": "message", "id": "m8",
                                      "conversation_id": "c1", "role": "user", "text": 5}),
    "assistant_text_an_object": _lines(*_conversation(), {"type": "message", "id": "m8",
                                       "conversation_id": "c1", "role": "assistant",
                                       "text": {"a": 1}}),
    "tool_name_a_boolean": _lines(*_conversation(), {"type": "tool_call", "id": "k8",
                                  "conversation_id": "c1", "name": True, "arguments": "{}"}),
    "summary_a_list": _lines(*_conversation(), {"type": "compaction", "id": "b8",
                             "conversation_id": "c1", "summary": ["INV-2025-08-44719"]}),
    "title_a_number": _lines(*_conversation(), {"type": "conversation", "id": "c1", "title": 3}),
    "time_a_number": _lines(*_conversation(), {"type": "message", "id": "m8",
                            "conversation_id": "c1", "role": "user", "text": "x", "time": 1}),
    "status_a_number": _lines(
        {"type": "run", "id": "r1", "conversation_id": "c1", "status": 1}, *_conversation()
    ),
}  # fmt: skip


@pytest.mark.parametrize("name", sorted(TYPE_CASES))
def test_fields_of_another_json_type_go_to_the_normal_ingest(tmp_path, name):
    path = tmp_path / "t.jsonl"
    path.write_text(TYPE_CASES[name], encoding="utf-8")
    assert not read_alike(str(path))
    outcomes = []
    for fast in (True, False):
        try:
            outcomes.append(run_audit(paths=[str(path)], fast=fast))
        except InputError as exc:
            outcomes.append((str(exc), exc.path, exc.line, exc.col))
    assert outcomes[0] == outcomes[1]


def test_string_fields_are_those_the_checks_name():
    """read_alike checks the JSON type of every field the reader's checks name."""
    for record, check in fastload_module._CHECKS.items():
        for field in fastload_module.READER_FIELDS:
            if f"({field})" in check or f"({field}," in check:
                assert field in fastload_module.STRING_FIELDS[record] or field == "kept_verbatim"
    assert "text" in fastload_module.STRING_FIELDS["message"]
    assert "name" in fastload_module.STRING_FIELDS["tool_call"]


# Lines DuckDB's JSON reader takes and orjson (the reader) refuses: Python's json.dumps writes
# NaN and Infinity for non-finite floats, so real logs hold them. The staging accepts the file;
# LineCheck must send it to the normal ingest, which names the line.
DUCKDB_ONLY_CASES = {
    "nan": '{"type": "message", "id": "m8", "conversation_id": "c1", "role": "assistant",'
    ' "text": "ok", "logprob": NaN}',
    "infinity": '{"type": "tool_result", "call_id": "k1", "conversation_id": "c1", "text": "x",'
    ' "ms": -Infinity}',
    "lower_case_inf": '{"type": "conversation", "id": "c1", "score": inf}',
    "beyond_a_double": '{"type": "conversation", "id": "c1", "score": 1e999}',
    "trailing_comma": '{"type": "conversation", "id": "c1", "title": "t",}',
    "trailing_comma_in_array": '{"type": "compaction", "id": "b9", "conversation_id": "c1",'
    ' "kept_verbatim": ["ORD_88412", ]}',
}


@pytest.mark.parametrize("name", sorted(DUCKDB_ONLY_CASES))
def test_lines_only_duckdb_reads_keep_the_exact_error(tmp_path, name, monkeypatch):
    path = tmp_path / "t.jsonl"
    lines = _conversation()
    path.write_text(_lines(*lines[:4], DUCKDB_ONLY_CASES[name], *lines[4:]), encoding="utf-8")
    assert _took_fast_path(path)  # DuckDB reads every line: only the check can tell
    assert not read_alike(str(path))
    errors = []
    for fast, workers in ((True, "2"), (True, "0"), (False, "2")):
        monkeypatch.setenv("LEXKEEP_READ_WORKERS", workers)  # "0": checked in this process
        with pytest.raises(InputError) as caught:
            run_audit(paths=[str(path)], fast=fast)
        exc = caught.value
        errors.append((str(exc), exc.path, exc.line, exc.col))
    assert errors[0] == errors[1] == errors[2]
    assert errors[0][1:3] == (str(path), 5)


# Repeated keys: DuckDB reads the first, the reader the last. Top-level ones must send the file
# to the normal ingest (same report); nested ones are read alike (orjson re-encodes arguments).
REPEATED_KEY_CASES = {
    "user_text": (
        '{"type": "message", "id": "m0", "conversation_id": "c1", "role": "user",'
        ' "text": "refund INV-2025-08-44719", "text": "refund PAY-14821"}',
        False,
    ),
    "tool_call_arguments": (
        '{"type": "tool_call", "id": "k9", "conversation_id": "c1", "name": "refund",'
        ' "arguments": "{\\"order\\": \\"ORD_88412\\"}", "arguments": "{}"}',
        False,
    ),
    "escaped_once": (
        '{"type": "tool_call", "id": "k9", "conversation_id": "c1", "n\\u0061me": "x",'
        ' "arguments": "{}"}',
        True,
    ),
    "escaped_twice": (
        '{"type": "tool_call", "id": "k9", "conversation_id": "c1", "n\\u0061me": "x",'
        ' "n\\u0061me": "y", "arguments": "{}"}',
        False,
    ),
    "nested_in_arguments": (
        '{"type": "tool_call", "id": "k9", "conversation_id": "c1", "name": "refund",'
        ' "arguments": {"id": "ORD_88411", "id": "ORD_88412"}}',
        True,
    ),
    "name_inside_a_value": (
        '{"type": "tool_result", "call_id": "k7", "conversation_id": "c1",'
        ' "text": "{\\"text\\": 1, \\"type\\": 2}"}',
        True,
    ),
}


@pytest.mark.parametrize("name", sorted(REPEATED_KEY_CASES))
def test_repeated_keys_give_the_readers_report(tmp_path, name):
    line, alike = REPEATED_KEY_CASES[name]
    path = tmp_path / "t.jsonl"
    path.write_text(_lines(line, *_conversation()), encoding="utf-8")
    # DuckDB's JSON reader refuses a key repeated at the top of a line (the normal ingest
    # then reads it); one nested in a value is neither reader's business.
    assert bool(_took_fast_path(path)) is alike
    assert read_alike(str(path)) is alike
    fast, slow = _both(path)
    assert fast == slow


def test_numbers_in_object_arguments_are_kept_on_both_paths(tmp_path):
    """A 20-digit number the user typed, sent as a JSON number in object arguments: kept on
    both paths (DuckDB and orjson alone would write it back as 9.876543210987654e+19)."""
    big = "98765432109876543210"
    user = {"type": "message", "id": "m1", "conversation_id": "c1", "role": "user",
            "text": f"refund account {big} and order 88412345"}  # fmt: skip
    call = (
        '{"type": "tool_call", "id": "k1", "conversation_id": "c1", "name": "refund",'
        f' "arguments": {{"account": {big}, "order": 88412345, "amount": 12.50}}}}'
    )
    path = tmp_path / "t.jsonl"
    path.write_text(
        _lines(user, {"type": "compaction", "id": "b1", "conversation_id": "c1"}, call),
        encoding="utf-8",
    )
    assert _took_fast_path(path)
    fast, slow = _both(path)
    assert fast == slow
    assert (fast.totals.audited, fast.totals.kept) == (2, 2)


def test_float_arguments_on_a_line_orjson_refuses_keep_the_exact_error(tmp_path):
    """Such arguments are read from their line with orjson: a line it refuses (NaN beside
    them) leaves the file to the normal ingest, which names the line."""
    bad = (
        '{"type": "tool_call", "id": "k9", "conversation_id": "c1", "name": "f",'
        ' "arguments": {"n": 1.5}, "score": NaN}'
    )
    lines = _conversation()
    path = tmp_path / "t.jsonl"
    path.write_text(_lines(*lines[:4], bad, *lines[4:]), encoding="utf-8")
    errors = _errors_both_ways(path)
    assert errors[0] == errors[1]
    assert errors[0][1:3] == (str(path), 5)


def test_line_check_passes_what_the_reader_reads_alike(tmp_path):
    path = tmp_path / "t.jsonl"
    path.write_text("\n" + _lines(*_conversation()).replace("\n", "\r\n", 1), encoding="utf-8")
    assert read_alike(str(path))
    with LineCheck(str(path)) as check:
        assert check.passed()
    assert not read_alike(str(tmp_path / "missing.jsonl"))


def test_line_check_worker_stops_with_its_context(tmp_path, monkeypatch):
    """Leaving the context before the answer (an error in the audit, Ctrl-C) stops the worker."""
    monkeypatch.setenv("LEXKEEP_READ_WORKERS", "2")
    fifo = tmp_path / "never-written"
    os.mkfifo(fifo)  # the worker blocks opening it: it would never answer by itself
    check = LineCheck(str(fifo))
    worker = check._worker
    assert worker is not None and worker.is_alive()
    with check:
        pass
    assert not worker.is_alive()


def test_settings_file_rules_apply_on_both_paths(tmp_path, monkeypatch):
    path = tmp_path / "t.jsonl"
    path.write_text(FAST_CASES["plain"], encoding="utf-8")
    settings_file = tmp_path / "pyproject.toml"
    settings_file.write_text('[tool.lexkeep.identifiers]\ndisabled = ["path_posix"]\n')
    monkeypatch.chdir(tmp_path)
    fast, slow = _both(path)
    assert fast == slow
    assert "path_posix" not in {f.kind for f in fast.findings}
    assert fast.findings


def test_gzip_and_other_formats_take_the_normal_path(tmp_path):
    codex = tmp_path / "rollout.jsonl"
    codex.write_text(_lines({"timestamp": "t", "type": "session_meta", "payload": {"id": "s"}}))
    assert not _took_fast_path(codex)


# -- the near-miss search: same answer as core.nearmiss.best_near_miss --------------------------

_alphabet = st.sampled_from("0123456789abcXYZ-_./#")
_values = st.text(_alphabet, min_size=1, max_size=20)


@settings(max_examples=250, deadline=None)
@given(
    value=_values | st.text(_alphabet | st.sampled_from(" ()"), min_size=1, max_size=20),
    texts=st.lists(st.text(_alphabet | st.sampled_from("  ()"), max_size=40), max_size=4),
)
def test_fast_best_near_miss_equals_best_near_miss(value, texts):
    tokens = [(t, fold(t), skeleton(t)) for text in texts for t in candidates(text)]
    runs = lambda _: [r for text in texts for r in grouped_runs(text)]  # noqa: E731
    assert fast_best_near_miss(_Expected.of(value), tokens, runs) == best_near_miss(value, texts)


@pytest.mark.parametrize(
    ("value", "text"),
    [("+15550109999", "+1 (555) 010-9999"), ("DE89 3704 0044", "de89 3704 0044")],
)
def test_fast_best_near_miss_finds_a_value_written_in_groups(value, text):
    tokens = [(t, fold(t), skeleton(t)) for t in candidates(text)]
    miss = fast_best_near_miss(_Expected.of(value), tokens, lambda _: grouped_runs(text))
    assert miss is not None and miss.found == text
    assert miss == best_near_miss(value, [text])


def test_the_first_of_equally_near_tokens_wins():
    # Extended and truncated by one character: the same rank and distance, so the token
    # that comes first in the arguments is the answer.
    for texts, first in (
        (["abc123456 then abc1234"], "abc123456"),
        (["abc1234 abc123456"], "abc1234"),
    ):
        tokens = [(t, fold(t), skeleton(t)) for text in texts for t in candidates(text)]
        miss = best_near_miss("abc12345", texts)
        assert miss is not None and miss.found == first
        assert fast_best_near_miss(_Expected.of("abc12345"), tokens) == miss


@settings(max_examples=250, deadline=None)
@given(
    want=st.text("1234567890ab", min_size=6, max_size=24).filter(lambda w: w[0] != "0"),
    data=st.data(),
)
def test_piece_filter_never_rejects_a_close_value(want, data):
    limit = 1 if len(want) < 12 else 2
    # Build a value within `limit` edits (substitute, insert, delete, transpose).
    got = list(want)
    for _ in range(limit):
        op = data.draw(st.sampled_from(["sub", "ins", "del", "swap"]))
        i = data.draw(st.integers(0, max(0, len(got) - 2)))
        if op == "sub":
            got[i] = data.draw(st.sampled_from("xyz"))
        elif op == "ins":
            got.insert(i, data.draw(st.sampled_from("xyz")))
        elif op == "del" and len(got) > 1:
            del got[i]
        elif op == "swap" and len(got) > 1:
            got[i], got[i + 1] = got[i + 1], got[i]
    got_text = "".join(got)
    assume(edit_distance(want, got_text, limit) <= limit)  # OSA edits a substring only once
    assert _may_be_within(got_text, _Expected.of(want).pieces, limit)


@settings(max_examples=800, deadline=None)
@given(a=st.text("abc", max_size=9), b=st.text("abc", max_size=9), limit=st.integers(0, 3))
def test_bounded_distance_equals_edit_distance(a, b, limit):
    assert bounded_distance(a, b, limit) == edit_distance(a, b, limit)


def test_bounded_distance_equals_edit_distance_on_every_short_pair():
    """Every pair of strings over two letters up to five long, for each limit up to 3."""
    words = [""] + ["".join(w) for n in range(1, 6) for w in itertools.product("ab", repeat=n)]
    for a in words:
        for b in words:
            for limit in range(4):
                assert bounded_distance(a, b, limit) == edit_distance(a, b, limit), (a, b)


def test_json_report_has_the_stdlib_layout(tmp_path):
    path = tmp_path / "t.jsonl"
    path.write_text(FAST_CASES["non_ascii_and_escapes"], encoding="utf-8")
    report = run_audit(paths=[str(path)])
    out = io.StringIO()
    render(report, "json", out)
    assert out.getvalue() == json.dumps(report_dict(report), ensure_ascii=False, indent=2) + "\n"
    assert report.findings and "/srv/données/rapport.log" in out.getvalue()


def test_progress_moves_while_duckdb_loads_and_counts_each_byte_once(tmp_path):
    from lexkeep.core.fastload import statement_progress

    dump = _generate(tmp_path / "gen", seed=3, size="24MB")
    size = dump.stat().st_size
    # DuckDB's own query progress, polled often: heard before the statement ends
    heard: list[int] = []
    with (
        Store.open(None) as store,
        statement_progress(store.con, size, heard.append, every=0.002) as told,
    ):
        store.con.execute(
            "CREATE TABLE t AS SELECT * FROM read_json(?, format = 'newline_delimited',"
            " columns = {type: 'VARCHAR', text: 'VARCHAR'})",
            [str(dump)],
        )
    assert heard and all(n > 0 for n in heard) and told() == sum(heard) <= size
    # the audit's load tells the whole file once, in steps
    steps: list[int] = []
    with Store.open(None) as store:
        assert fast_load(store, str(dump), on_progress=steps.append)
    assert sum(steps) == size and all(n > 0 for n in steps)
    # a file the normal ingest must read takes back what it was told
    bad = tmp_path / "bad.jsonl"
    bad.write_bytes(dump.read_bytes() + b'{"type": "message", "id": \n')
    steps.clear()
    with Store.open(None) as store:
        assert not fast_load(store, str(bad), on_progress=steps.append)
    assert sum(steps) == 0


def test_a_progress_callback_that_raises_is_not_lost(tmp_path):
    from lexkeep.core.fastload import statement_progress

    dump = _generate(tmp_path / "gen", seed=4, size="8MB")

    told: list[int] = []

    def broken(n: int) -> None:
        told.append(n)
        raise RuntimeError("the bar broke")

    import time

    raised = pytest.raises(RuntimeError, match="the bar broke")
    store = Store.open(None)
    progress = statement_progress(store.con, dump.stat().st_size, broken, every=0.001)
    with raised, store, progress:
        # On a busy machine one load can end before the poller sees DuckDB report progress:
        # load again until the callback has been called (and has raised) once.
        for _ in range(20):
            store.con.execute(
                "CREATE OR REPLACE TABLE t AS SELECT * FROM read_json(?,"
                " format = 'newline_delimited', columns = {type: 'VARCHAR', text: 'VARCHAR'})",
                [str(dump)],
            )
            time.sleep(0.05)  # the poller runs at least once more
            if told:
                break


@pytest.mark.parametrize(
    ("value", "texts"),
    [
        ("March 5, 2025", ["book 2025-03-05 now", "March 6, 2025"]),
        ("May 20", ["2024-05-20T10:30:00Z", "may 20"]),
        ("Sept 1", ["2026-09-01", "2026-09-02"]),
        ("June 30, 2025", ["2025-06-30-7", "June 30 2025"]),
    ],
)
def test_fast_best_near_miss_finds_a_date_as_best_near_miss_does(value, texts):
    tokens = [(t, fold(t), skeleton(t)) for text in texts for t in candidates(text)]
    runs = lambda _: [r for text in texts for r in grouped_runs(text)]  # noqa: E731
    miss = fast_best_near_miss(_Expected.of(value), tokens, runs)
    assert miss == best_near_miss(value, texts)
    assert miss is not None
