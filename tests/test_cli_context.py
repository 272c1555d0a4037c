"""`lexkeep context` and `lexkeep guard` on real store files (exit codes, exact bytes)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import orjson
import pytest
from test_context_support import load, pair_records, summarise
from test_guard import INVOICE, invoice_records

from lexkeep.compaction.context import build_context
from lexkeep.core.store import Store


@pytest.fixture
def db(db_file: Path, tmp_path: Path) -> Path:
    """A closed store file with c1 (30 pairs, pairs 0-9 summarised) and the invoice case s1."""
    with Store.open(db_file) as store:
        load(store, tmp_path, pair_records("c1", 30), name="c1")
        summarise(store, "c1", 0, "The assistant confirmed ten orders shipped.")
        load(store, tmp_path, invoice_records("s1"), name="s1")
    return db_file


def test_context_json_fits_the_budget_and_matches_the_library(cli, db):
    result = cli("context", "c1", "--budget-bytes", "3000", "--db", db)
    assert result.exit_code == 0, result.stderr
    assert len(result.stdout_bytes) <= 3000
    doc = orjson.loads(result.stdout_bytes)
    assert doc["schema_version"] == 1 and doc["conversation_id"] == "c1"
    assert doc["omitted"], "3000 bytes cannot hold 30 pairs"
    with Store.open(db, read_only=True) as store:
        assert result.stdout == build_context(store, "c1", 3000).output


def test_context_text_says_what_the_next_run_will_not_see(cli, db):
    result = cli("context", "c1", "--budget-bytes", "2500", "--format", "text", "--db", db)
    assert result.exit_code == 0, result.stderr
    assert len(result.stdout_bytes) <= 2500
    assert "## NOT INCLUDED: the next run will not see these earlier exchanges" in result.stdout
    assert "- pairs 0-9: neither the summary candidate" in result.stdout


def test_context_budget_too_small_even_for_the_sidecar(cli, db):
    result = cli("context", "s1", "--budget-bytes", "50", "--db", db)
    assert result.exit_code == 2, result.stdout
    assert result.stdout == ""
    lines = result.stderr.splitlines()
    assert lines[0].startswith("Error: a budget of 50 bytes is too small for conversation s1:")
    assert lines[1].startswith("Hint: pass --budget-bytes ")


def test_context_budget_too_small_counts_one_identifier_in_the_singular(cli, tmp_path):
    db = tmp_path / "t.duckdb"
    trace = Path(__file__).resolve().parent.parent / "sample_traces" / "invoice_altered.jsonl"
    assert cli("ingest", trace, "--db", db).exit_code == 0
    result = cli("context", "support-4471", "--budget-bytes", "50", "--db", db)
    assert result.exit_code == 2, result.stdout
    assert "the pinned identifier sidecar (1 identifier) and" in result.stderr, result.stderr


def test_context_unknown_conversation_and_missing_store(cli, db, tmp_path):
    result = cli("context", "nope", "--budget-bytes", "5000", "--db", db)
    assert result.exit_code == 2
    assert result.stderr.startswith("Error: no conversation 'nope' in the store")
    result = cli("context", "c1", "--budget-bytes", "5000", "--db", tmp_path / "none.duckdb")
    assert result.exit_code == 2
    assert "no lexkeep store at" in result.stderr


@pytest.mark.parametrize("option", ["--budget-bytes", "--answer-bytes"])
def test_context_number_beyond_64_bits_is_a_usage_error_not_a_crash(cli, db, option):
    """ "Any budget, as large as you like" crashed: the output names the budget (and each
    projection its answer bytes) in JSON, which orjson cannot write beyond 64 bits."""
    args = {"--budget-bytes": "5000", "--answer-bytes": "240"}
    args[option] = str(2**64)
    flat = [x for pair in args.items() for x in pair]
    result = cli("context", "c1", *flat, "--db", db)
    assert result.exit_code == 2, result.stdout
    assert "internal error" not in result.stderr
    assert f"Invalid value for '{option}': {2**64} is more than the largest size" in result.stderr
    largest = str(2**63 - 1)
    args[option] = largest
    flat = [x for pair in args.items() for x in pair]
    result = cli("context", "c1", *flat, "--db", db)
    assert result.exit_code == 0, result.stderr
    assert orjson.loads(result.stdout_bytes)["conversation_id"] == "c1"


def test_context_prints_exactly_the_counted_bytes_in_a_real_process(db):
    env = {**os.environ, "LEXKEEP_DB": str(db)}
    done = subprocess.run(
        [sys.executable, "-m", "lexkeep.cli.main", "context", "c1", "--budget-bytes", "4000"],
        capture_output=True,
        env=env,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    with Store.open(db, read_only=True) as store:
        expected = build_context(store, "c1", 4000)
    assert done.stdout == expected.output.encode("utf-8")
    assert len(done.stdout) == expected.bytes <= 4000


def test_guard_seed_invoice_exits_1_and_names_the_nearest_value(cli, db):
    result = cli("guard", "s1", '{"invoice_id": "INV-2025-08-4471"}', "--db", db)
    assert result.exit_code == 1, result.stderr
    assert "NOT SUPPLIED" in result.stdout
    assert f"nearest known '{INVOICE}' (truncated, from user)" in result.stdout


def test_guard_given_a_file_name_says_to_pipe_the_file(cli, db, tmp_path, monkeypatch):
    """`lexkeep guard s1 args.json` read the file's name as the JSON, and the hint only said to
    pass a JSON object."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "args.json").write_bytes(orjson.dumps({"invoice_id": INVOICE}))
    result = cli("guard", "s1", "args.json", "--db", db)
    assert result.exit_code == 2
    assert result.stderr == (
        "Error: ARGUMENTS_JSON:1:1: proposed arguments are not valid JSON (unexpected"
        " character, expected a JSON value)\n"
        "Hint: args.json is a file: pass its JSON on standard input, lexkeep guard s1 -"
        " < args.json\n"
    )
    piped = cli("guard", "s1", "-", "--db", db, input=(tmp_path / "args.json").read_text())
    assert piped.exit_code == 0, piped.stderr
    # Text that names no file keeps the general hint
    result = cli("guard", "s1", "not json", "--db", db)
    assert result.exit_code == 2
    assert "Hint: pass a JSON object" in result.stderr


def test_guard_text_shows_values_as_they_are_not_as_python_reprs(cli, db):
    """A Windows path was shown as Python's repr, every backslash doubled: not the value, and
    copying it gives a wrong path. Plain values are shown between quotes as they are."""
    path = r"C:\Users\bob\report.txt"
    result = cli("guard", "s1", orjson.dumps({"p": path}).decode(), "--db", db)
    assert result.exit_code == 1, result.stderr
    assert f"  $.p: '{path}' [path_win] — no known value is close" in result.stdout.splitlines()


# What a terminal acts on, or shows reordered, and orjson writes as it is: DEL, a C1 control
# (U+009B is CSI, "ESC [" in one character), a right-to-left override and isolate.
RAW_UNSAFE = "\x7f\x9b\u202e\u2067"


def test_guard_shows_a_key_s_terminal_controls_and_bidi_overrides_escaped(cli, db):
    """A key holding a CSI or a right-to-left override reached the terminal as it was in the
    text report's `$["…"]` path (and in the JSON): orjson escapes the C0 controls only."""
    key = "k\x9b2J\u202eq\x7f\u2067"
    arguments = orjson.dumps({key: "INV-2025-08-4471"}).decode()
    for fmt in ("text", "json"):
        result = cli("guard", "s1", arguments, "--format", fmt, "--db", db)
        assert result.exit_code == 1, result.stderr
        assert not any(c in result.stdout for c in RAW_UNSAFE), (fmt, result.stdout)
        if fmt == "text":
            (line,) = [x for x in result.stdout.splitlines() if "INV-2025-08-4471" in x]
            assert line.startswith('  $["k\\u009b2J\\u202eq\\u007f\\u2067"]: ')
        else:
            (found,) = orjson.loads(result.stdout)["unsupplied"]
            assert found["path"] == '$["k\\u009b2J\\u202eq\\u007f\\u2067"]'
            assert orjson.loads(found["path"][2:-1]) == key  # the key, as JSON spells it


def test_guard_json_format_and_stdin(cli, db):
    result = cli(
        "guard", "s1", "-", "--format", "json", "--db", db, input='{"id": "inv-2025-08-44719"}'
    )
    assert result.exit_code == 1, result.stderr
    doc = orjson.loads(result.stdout)
    assert doc["unsupplied"][0]["difference"] == "case"
    assert doc["unsupplied"][0]["nearest"] == INVOICE


def _guard_stdin(db: Path, data: bytes) -> subprocess.CompletedProcess[bytes]:
    env = {**os.environ, "LEXKEEP_DB": str(db)}
    command = [sys.executable, "-m", "lexkeep.cli.main", "guard", "s1", "-"]
    return subprocess.run(command, input=data, capture_output=True, env=env, timeout=60)


def test_guard_stdin_bom_is_skipped_and_bad_utf8_is_named_where_it_is(db):
    """As ingest reads standard input: a UTF-8 byte-order mark (PowerShell's Out-File writes
    one) is skipped, and invalid UTF-8 is reported at its byte, not as "surrogates not allowed"
    at column 1."""
    done = _guard_stdin(db, b'\xef\xbb\xbf{"invoice_id": "INV-2025-08-4471"}')
    assert done.returncode == 1, done.stderr
    assert b"nearest known 'INV-2025-08-44719'" in done.stdout
    done = _guard_stdin(db, b'{"invoice_id":\n "INV-\xff"}')
    assert done.returncode == 2, done.stdout
    assert done.stderr.decode().splitlines()[0] == (
        "Error: -:2:7: proposed arguments are not valid JSON (invalid UTF-8, byte 0xff)"
    )


def test_guard_passes_verbatim_arguments(cli, db):
    result = cli("guard", "s1", f'{{"invoice_id": "{INVOICE}"}}', "--db", db)
    assert result.exit_code == 0, result.stderr
    assert result.stdout.startswith("ok: 1 identifier(s)")


def test_guard_bad_json_and_unknown_conversation_exit_2(cli, db):
    result = cli("guard", "s1", '{"invoice_id": ', "--db", db)
    assert result.exit_code == 2
    assert result.stderr.startswith("Error: ARGUMENTS_JSON")
    assert "not valid JSON" in result.stderr
    result = cli("guard", "s1", "-", "--db", db, input="[1,")
    assert result.exit_code == 2
    assert result.stderr.startswith("Error: -:")
    result = cli("guard", "nope", "{}", "--db", db)
    assert result.exit_code == 2
    assert "no conversation 'nope'" in result.stderr


# A number the user typed that orjson alone reads as a float (1.2345678901234568e+22).
ACCOUNT = "12345678901234567890123"


@pytest.mark.parametrize(
    ("arguments", "checked"),
    [
        # once scanned as 1.2345678901234568e+22: '2345678901234568e' [hex], not supplied
        (f'{{"account": {ACCOUNT}}}', [ACCOUNT]),
        # a long decimal, once 9.876543210987654e+19: a hex value that is not in the arguments
        (f'{{"account": "{ACCOUNT}", "rate": 98765432109876543210.25}}', [ACCOUNT]),
    ],
)
def test_guard_scans_numbers_as_the_arguments_write_them(cli, tmp_path, arguments, checked):
    db = tmp_path / "g.duckdb"
    records = [
        {"type": "message", "id": "g-u0", "conversation_id": "g", "role": "user",
         "text": f"My account number is {ACCOUNT}, please look it up"},
    ]  # fmt: skip
    with Store.open(db) as store:
        load(store, tmp_path, records, name="g")
    result = cli("guard", "g", arguments, "--format", "json", "--db", db)
    assert result.exit_code == 0, result.stdout + result.stderr
    doc = orjson.loads(result.stdout)
    assert (doc["checked"], doc["unsupplied"]) == (checked, [])


def test_guard_counts_a_big_number_a_tool_returned_inside_a_json_object(cli, tmp_path):
    """A tool result recorded as a JSON object kept its numbers as orjson's floats, so a
    20-digit id the tool returned read as 9.876543210987654e+19 and a call using it was
    blocked as never supplied."""
    account = "98765432109876543210"
    db = tmp_path / "t.duckdb"
    records = [
        {"type": "message", "id": "t-u0", "conversation_id": "t", "role": "user",
         "text": "Which account is on file for me?"},
        {"type": "tool_call", "id": "call-1", "conversation_id": "t", "name": "lookup",
         "arguments": "{}"},
    ]  # fmt: skip
    with Store.open(db) as store:
        path = tmp_path / "t.jsonl"
        lines = [orjson.dumps(r).decode() for r in records]
        lines.append(
            '{"type": "tool_result", "call_id": "call-1", "conversation_id": "t",'
            f' "text": {{"account": {account}, "balance": 12.50}}}}'
        )
        path.write_text("\n".join(lines) + "\n")
        from lexkeep.core.ingest import ingest_paths

        ingest_paths(store, [str(path)])
    result = cli("guard", "t", f'{{"account": "{account}"}}', "--format", "json", "--db", db)
    assert result.exit_code == 0, result.stdout + result.stderr
    assert orjson.loads(result.stdout)["unsupplied"] == []


RULES = """
[[kinds]]
id = "acme_badge"
tier = "B"
priority = 50
keywords = ["badge-"]
description = "ACME badge ids, e.g. badge-kq"
regex = '''(?<![\\p{L}\\p{N}])badge-[a-z]{2}(?![\\p{L}\\p{N}])'''
tests.positive = ["badge-kq", { text = "my badge-zz works", value = "badge-zz" }]
tests.negative = ["badge-kqx", "badge-12"]
"""


def test_guard_uses_the_given_identifier_rules(cli, db, tmp_path):
    rules = tmp_path / "rules.toml"
    rules.write_text(RULES, encoding="utf-8")
    args = '{"badge": "badge-kx"}'
    plain = cli("guard", "s1", args, "--format", "json", "--db", db)
    assert plain.exit_code == 0, plain.stderr  # not identifier-shaped for the built-in kinds
    assert orjson.loads(plain.stdout)["checked"] == []
    custom = cli("guard", "s1", args, "--format", "json", "--rules", rules, "--db", db)
    assert custom.exit_code == 1, custom.stderr
    [finding] = orjson.loads(custom.stdout)["unsupplied"]
    assert (finding["kind"], finding["value"]) == ("acme_badge", "badge-kx")


def test_guard_strict_fails_when_a_scan_was_incomplete(cli, db, tmp_path):
    """A value whose scan ran out of time was checked only in part: exit 0 with a note, or
    exit 1 with --strict, for a gate that must not pass what it did not see."""
    rules = tmp_path / "tight.toml"
    rules.write_text("[settings]\ntimeout_ms = 1\n", encoding="utf-8")
    # the supplied invoice, then digits that keep the number kinds busy and are no identifier
    # (docs/identifiers.md: the densest text there is, ~8 ms for these 16 KB at best)
    dense = INVOICE + " " + "1 " * 8000
    args = orjson.dumps({"note": dense}).decode()
    plain = cli("guard", "s1", args, "--format", "json", "--rules", rules, "--db", db)
    assert plain.exit_code == 0, plain.stderr
    report = orjson.loads(plain.stdout)
    assert report["complete"] is False and report["unsupplied"] == [], report
    strict = cli("guard", "s1", args, "--strict", "--rules", rules, "--db", db)
    assert strict.exit_code == 1, strict.stderr
    assert "ran out of time" in strict.stdout
    assert strict.stdout.startswith("incomplete: "), strict.stdout  # not "ok:"
    # a complete scan with everything supplied still passes
    ok = cli("guard", "s1", '{"q": "no identifiers here"}', "--strict", "--db", db)
    assert ok.exit_code == 0, ok.stderr


def test_context_text_header_counts_one_earlier_exchange_in_the_singular(cli, db_file, tmp_path):
    with Store.open(db_file) as store:
        load(store, tmp_path, pair_records("one", 1), name="one")
        load(store, tmp_path, pair_records("two", 2), name="two")
    for cid, counted in (("one", "1 earlier exchange;"), ("two", "2 earlier exchanges;")):
        result = cli("context", cid, "--budget-bytes", "5000", "--format", "text", "--db", db_file)
        assert result.exit_code == 0, result.stderr
        header = result.stdout.splitlines()[0]
        assert header == f"# Conversation {cid}: context for the next run ({counted}" + (
            " budget 5000 bytes)"
        ), header
