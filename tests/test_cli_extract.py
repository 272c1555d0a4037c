"""`lexkeep extract`: text, stdin, JSON, rule files, and --db re-extraction."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from conftest import on_terminal

from lexkeep.core.store import Store


def test_table_output(cli) -> None:
    result = cli("extract", "refund order #W2378156 to ann@example.org")
    assert result.exit_code == 0, result.stderr
    assert "hash_ref" in result.stdout and "#W2378156" in result.stdout
    assert "ann@example.org" in result.stdout


def test_json_output(cli) -> None:
    result = cli("extract", "--format", "json", "zip 19122, costs $12.50")
    assert result.exit_code == 0, result.stderr
    payload = json.loads(result.stdout)
    assert payload["schema_version"] == 1
    assert payload["complete"] is True
    assert payload["identifiers"] == [
        {"kind": "short_number", "value": "19122", "start": 4, "end": 9}
    ]


def test_stdin(cli) -> None:
    result = cli("extract", "-f", "json", "-", input="invoice INV-2025-08-44719\n")
    assert result.exit_code == 0, result.stderr
    assert [i["value"] for i in json.loads(result.stdout)["identifiers"]] == ["INV-2025-08-44719"]


def test_stdin_skips_a_byte_order_mark_and_names_bad_utf8(cli) -> None:
    result = cli("extract", "-f", "json", "-", input=b"\xef\xbb\xbfINV-2025-08-44719 x")
    assert result.exit_code == 0, result.stderr
    [found] = json.loads(result.stdout)["identifiers"]
    assert (found["value"], found["start"], found["end"]) == ("INV-2025-08-44719", 0, 17)
    result = cli("extract", "-", input=b"ok\nINV-1\xc3\xa9\xff x")
    assert result.exit_code == 2
    assert "-:2:7: standard input is not UTF-8 text (byte 0xff)" in result.stderr


def test_nothing_to_scan_is_an_error(cli) -> None:
    result = cli("extract")
    assert result.exit_code == 2
    assert result.stderr.startswith("Error: nothing to scan\nHint: ")


def test_bad_rules_file_exits_2_naming_the_rule(cli, tmp_path: Path) -> None:
    rules = tmp_path / "rules.toml"
    rules.write_text("[[kinds]]\nid = \"k\"\ntier = \"B\"\npriority = 5\nregex = '''(?i)x'''\n"
                     "tests.positive = [\"x\"]\ntests.negative = [\"y\"]\n")  # fmt: skip
    result = cli("extract", "--rules", rules, "x")
    assert result.exit_code == 2
    assert result.stderr.splitlines()[0] == (
        f"Error: {rules}: kind 'k': global ignore-case flag (?i) is not allowed"
    )


def test_invalid_toml_rules_file_names_file_line_and_column(cli, tmp_path: Path) -> None:
    rules = tmp_path / "rules.toml"
    rules.write_text('disabled = ["alnum_code"]\n\n[settings]\ntimeout_ms = 50\nmax_chars = \n')
    result = cli("extract", "--rules", rules, "x")
    assert result.exit_code == 2, result.stderr
    assert result.stderr == (
        f"Error: {rules}:5:13: invalid TOML: Invalid value\n"
        "Hint: a rules file holds the rules at its top level (disabled, allowlist, [[kinds]], ...);"
        " fix the TOML syntax at that position\n"
    )


def test_user_rules_file_is_applied(cli, tmp_path: Path) -> None:
    rules = tmp_path / "rules.toml"
    rules.write_text('disabled = ["email"]\n')
    result = cli("extract", "-f", "json", "--rules", rules, "ann@example.org")
    assert result.exit_code == 0, result.stderr
    assert json.loads(result.stdout)["identifiers"] == []


def test_kind_allowlist_of_a_builtin_example_value_hides_only_that_value(
    cli, tmp_path: Path
) -> None:
    rules = tmp_path / "rules.toml"
    rules.write_text('[[kinds]]\nid = "digit_run"\nallowlist = ["1656367028"]\n')
    result = cli("extract", "-f", "json", "--rules", rules, "ts 1656367028 and 1656367029")
    assert result.exit_code == 0, result.stderr
    assert [i["value"] for i in json.loads(result.stdout)["identifiers"]] == ["1656367029"]


def test_misspelled_settings_table_exits_2_instead_of_using_the_defaults(
    cli, tmp_path: Path, monkeypatch
) -> None:
    settings = tmp_path / "lexkeep.toml"
    settings.write_text('[identifier]\ndisabled = ["digit_run"]\n')
    monkeypatch.chdir(tmp_path)
    result = cli("extract", "-f", "json", "ts 1656367028")
    assert result.exit_code == 2, result.stderr
    assert result.stdout == ""
    assert result.stderr == (
        f"Error: {settings.resolve()}: unknown key 'identifier' in lexkeep.toml\n"
        "Hint: did you mean 'identifiers'? known keys: audit, identifiers\n"
    )


def _store_with_messages(db_file: Path) -> None:
    with Store.open(db_file) as store:
        store.bulk_insert(
            "messages",
            [("id", "VARCHAR"), ("conversation_id", "VARCHAR"), ("position", "BIGINT"),
             ("role", "VARCHAR"), ("kind", "VARCHAR"), ("status", "VARCHAR"),
             ("text", "VARCHAR"), ("source_file", "VARCHAR"), ("source_line", "BIGINT")],
            [("m1", "c1", 0, "user", "user_text", "completed", "order #W2378156", "t", 1),
             ("m2", "c1", 1, "tool", "tool_result", "completed", "order #W1", "t", 2)],
        )  # fmt: skip


def test_db_reextract_is_idempotent(cli, db_file: Path) -> None:
    _store_with_messages(db_file)
    outputs = []
    for _ in range(2):
        result = cli("extract", "--db", db_file, "-f", "json")
        assert result.exit_code == 0, result.stderr
        outputs.append(json.loads(result.stdout))
    assert outputs[0] == outputs[1]
    assert (outputs[0]["messages"], outputs[0]["identifiers"]) == (1, 1)
    with Store.open(db_file) as store:
        rows = store.con.execute("SELECT message_id, value FROM identifiers").fetchall()
    assert rows == [("m1", "#W2378156")]


def test_db_missing_file_is_an_error(cli, tmp_path: Path) -> None:
    result = cli("extract", "--db", tmp_path / "none.duckdb")
    assert result.exit_code == 2
    assert "no lexkeep store at" in result.stderr


def test_real_subprocess_reads_stdin() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "lexkeep.cli.main", "extract", "-f", "json", "-"],
        input="ticket PROJ-1234.",
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["identifiers"][0]["value"] == "PROJ-1234"


def _line(**fields: object) -> str:
    return json.dumps(fields) + "\n"


def test_db_reextract_names_the_first_message_whose_scan_is_incomplete(
    cli, tmp_path: Path, db_file: Path
) -> None:
    """`extract --db` said "2 incomplete scans" and not where: it names the first (FILE:LINE),
    as `stats` does."""
    long_text = "ORD_88412 " + "word " * 50_000  # past the rules' max_chars: scanned in part
    a, b = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    a.write_text(
        _line(type="message", id="a1", conversation_id="c1", role="user", text="INV-7 please")
        + _line(type="message", id="a2", conversation_id="c1", role="user", text=long_text)
    )
    b.write_text(_line(type="message", id="b1", conversation_id="c2", role="user", text=long_text))
    assert cli("ingest", b, a, "--db", db_file).exit_code == 0
    result = cli("extract", "--db", db_file, "-f", "json")
    assert result.exit_code == 0, result.stderr
    payload = json.loads(result.stdout)
    assert (payload["incomplete"], payload["first_incomplete"]) == (2, f"{a}:2")
    result = cli("extract", "--db", db_file)
    assert result.exit_code == 0, result.stderr
    assert f"2 incomplete scans (first: {a}:2) (rules " in result.stdout
    a.unlink()
    b.unlink()
    ok = tmp_path / "ok.jsonl"
    ok.write_text(_line(type="message", id="o1", conversation_id="c3", role="user", text="hi"))
    clean = tmp_path / "clean.duckdb"
    assert cli("ingest", ok, "--db", clean).exit_code == 0
    payload = json.loads(cli("extract", "--db", clean, "-f", "json").stdout)
    assert (payload["incomplete"], payload["first_incomplete"]) == (0, None)
    assert "0 incomplete scans (rules " in cli("extract", "--db", clean).stdout


def test_db_reextract_shows_progress_on_a_terminal_only(cli, tmp_path: Path, db_file: Path):
    """Re-extracting a large store took minutes with nothing on the screen."""
    trace = tmp_path / "t.jsonl"
    trace.write_text(
        "".join(
            _line(type="message", id=f"m{i}", conversation_id="c1", role="user", text=f"INV-{i}")
            for i in range(50)
        )
    )
    assert cli("ingest", trace, "--db", db_file).exit_code == 0
    text = on_terminal(["extract", "--db", str(db_file)])
    assert "re-extracting" in text and "50/50" in text, text
    result = cli("extract", "--db", db_file)  # not a terminal: no bar
    assert result.exit_code == 0 and result.stderr == "", result.stderr


def test_an_identifier_holding_a_bidirectional_override_is_shown_escaped(cli) -> None:
    """A URL (or Windows path) with U+202E inside is one identifier; the table printed the
    override as it is, and the terminal then showed the rest of the line reversed."""
    text = "url https://x.io/a\u202eb?c=1 ok"
    table = cli("extract", text)
    assert table.exit_code == 0, table.stderr
    assert "https://x.io/a\\u202eb?c=1" in table.stdout
    assert "\u202e" not in table.stdout
    as_json = cli("extract", "--format", "json", text)
    assert as_json.exit_code == 0, as_json.stderr
    assert "\u202e" not in as_json.stdout  # escaped, \u202e: the same value once decoded
    [found] = json.loads(as_json.stdout)["identifiers"]
    assert found["value"] == "https://x.io/a\u202eb?c=1"
