"""`lexkeep audit` end to end: sample_traces/, the shared corpus, every format, the gate, exit 2."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import subprocess
import sys
import threading
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from conftest import (
    REPO,
    SAMPLE_TRACES,
    on_terminal,
    repeated_call_file,
    repeated_result_file,
    shared_data,
    undo_migrations_after,
)

from lexkeep.core.controls import first_control
from lexkeep.core.ingest import ingest_paths
from lexkeep.core.store import Store

INVOICE = SAMPLE_TRACES / "invoice_altered.jsonl"
CODEX = SAMPLE_TRACES / "codex_kept_verbatim.jsonl"
CLAUDE = SAMPLE_TRACES / "claude_lost_path.jsonl"
OPENAI = SAMPLE_TRACES / "openai_no_boundary.json"

# The stories sample_traces/README.md tells, one verdict per identifier the user typed.
EXPECTED = {
    INVOICE: {"INV-2025-08-44719": "altered"},
    CODEX: {
        "ERR_CONN_RESET": "kept",
        "https://registry.example.test/pkg/left-pad/-/left-pad-1.3.0.tgz": "kept",
        "src/net/retry.py": "kept",
    },
    CLAUDE: {"E0502": "missing", "/home/dev/shop/src/cart/checkout.rs": "missing"},
    OPENAI: {},
}
ALL_VALUES = {v: verdict for story in EXPECTED.values() for v, verdict in story.items()}
SVG = "{http://www.w3.org/2000/svg}"


@pytest.fixture(scope="module")
def sample_db(tmp_path_factory) -> Path:
    """sample_traces/ ingested once into a store file, for the many gate and format runs."""
    path = tmp_path_factory.mktemp("audit") / "samples.duckdb"
    with Store.open(path) as store:
        ingest_paths(store, [str(SAMPLE_TRACES)])
    return path


def ok(result, code: int):
    """Assert the exit code first, with stderr in the failure message."""
    assert result.exit_code == code, f"exit {result.exit_code}\nstderr:\n{result.stderr}"
    return result


def findings(stdout: str) -> dict[str, str]:
    return {f["value"]: f["verdict"] for f in json.loads(stdout)["findings"]}


def test_sample_traces_folder_verdicts_per_identifier(cli):
    result = ok(cli("audit", SAMPLE_TRACES, "--format", "json"), 1)
    data = json.loads(result.stdout)
    assert data["schema_version"] == 1
    assert findings(result.stdout) == ALL_VALUES
    assert data["totals"]["audited"] == 6 and data["totals"]["kept"] == 3
    assert data["totals"]["conversations"] == 4
    assert data["totals"]["conversations_with_boundary"] == 3
    assert data["gate"]["passed"] is False


@pytest.mark.parametrize(
    ("path", "code"), [(INVOICE, 1), (CODEX, 0), (CLAUDE, 1), (OPENAI, 0)], ids=lambda v: str(v)
)
def test_each_sample_story(cli, path, code):
    result = ok(cli("audit", path, "--format", "json"), code)
    assert findings(result.stdout) == EXPECTED[path]


def test_invoice_story_details(cli):
    data = json.loads(ok(cli("audit", INVOICE, "--format", "json"), 1).stdout)
    (f,) = data["findings"]
    assert f["evidence"]["found"] == "INV-2025-08-4471"
    assert f["evidence"]["difference"] == "truncated"
    assert f["evidence"]["tool"] == "ledger_search"
    assert (f["message"]["line"], f["boundary"]["line"], f["evidence"]["line"]) == (2, 8, 10)
    assert f["flags"] == {
        "in_summary": False,
        "in_kept_verbatim": False,
        "used_before_boundary": True,
    }


def test_codex_compaction_kept_user_messages_verbatim(cli):
    data = json.loads(ok(cli("audit", CODEX, "--format", "json"), 0).stdout)
    assert all(f["flags"]["in_kept_verbatim"] for f in data["findings"])
    assert all(f["boundary"]["line"] == 9 for f in data["findings"])


def test_default_format_is_the_table_even_when_piped(cli):
    out = ok(cli("audit", SAMPLE_TRACES), 1).stdout
    assert "Per identifier kind" in out
    assert "Per-conversation ratio" in out
    assert "FAIL: 3/6 identifiers kept" in out
    assert "INV-2025-08-4471" in out


def test_table_in_a_pipe_keeps_each_note_and_the_verdict_on_one_line(cli, tmp_path, monkeypatch):
    """A CI log is no terminal: the verdict and the notes were broken at 140 columns, so a
    `grep FAIL:` of the log got half the reasons, and a FILE:LINE in a note came out in pieces."""
    monkeypatch.delenv("COLUMNS", raising=False)
    folder = tmp_path / ("traces-of-a-rather-long-project-name-" * 3)
    folder.mkdir()
    trace = folder / "invoice.jsonl"
    lines = INVOICE.read_text().splitlines(keepends=True)
    trace.write_text("".join(lines) + lines[1].rstrip("\n")[:-5])  # a line still being written
    out = ok(cli("audit", trace, "--fail-on", "missing,altered"), 1).stdout.splitlines()
    verdict = out[-1]
    assert verdict.startswith("FAIL: 0/1 identifiers kept") and len(verdict) > 140, out
    assert verdict.endswith("1 altered identifier(s) and --fail-on altered."), out
    note = f"Note: 1 file(s) end in a line still being written (first: {trace}:{len(lines) + 1});"
    assert any(line.startswith(note) for line in out), out
    # The tables keep the width of the log
    assert max(len(line) for line in out if line[:1] in "│┃┏┡└") <= 140


def test_a_note_on_a_terminal_wraps_between_words_and_keeps_its_path_whole(cli, tmp_path):
    """With a width ($COLUMNS, a terminal) a note wraps, but a FILE:LINE in it was folded
    at the edge like any word, so it could be neither copied nor clicked."""
    folder = tmp_path / ("traces-of-a-rather-long-project-name-" * 3)
    folder.mkdir()
    trace = folder / "invoice.jsonl"
    lines = INVOICE.read_text().splitlines(keepends=True)
    trace.write_text("".join(lines) + lines[1].rstrip("\n")[:-5])  # a line still being written
    where = f"{trace}:{len(lines) + 1});"
    assert len(where) > 100
    head = "Note: 1 file(s) end in a line still being written"
    (whole,) = [line for line in ok(cli("audit", trace), 1).stdout.splitlines() if head in line]
    for width in (60, 100, 140):
        out = ok(cli("audit", trace, env={"COLUMNS": str(width)}), 1).stdout.splitlines()
        assert where in out, out  # whole, on a line of its own
        start = next(i for i, line in enumerate(out) if line.startswith(head))
        end = next(i for i, line in enumerate(out) if i > start and line[:5] in ("Note:", "FAIL:"))
        note = out[start:end]
        assert all(len(line) <= width for line in note if line != where), note
        assert " ".join(line.rstrip() for line in note) == whole  # nothing lost


def test_an_ordinary_terminal_shows_each_finding_whole(tmp_path):
    """On an 80- to 140-column terminal the findings table folded every `path:line` into
    slivers of ten characters: now each finding is a block, its paths whole (a terminal
    link, a copy), its verdict coloured as in the table."""
    folder = tmp_path / "codex" / "sessions" / "2026" / "01" / "03"
    folder.mkdir(parents=True)
    trace = folder / "rollout-2026-01-03T04-05-06-22222222-2222-4222-8222-222222222222.jsonl"
    trace.write_bytes(INVOICE.read_bytes())
    for cols in (80, 100, 140):
        raw = on_terminal(["audit", str(trace)], cols=cols, stream="stdout", check=False, raw=True)
        assert "\x1b[33maltered\x1b[0m  INV-2025-08-44719" in raw, raw  # yellow
        lines = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", raw).replace("\r\n", "\n").splitlines()
        for number in (2, 8, 10):  # typed at, boundary, evidence: each whole on a line
            assert any(line.rstrip().endswith(f"{trace}:{number}") for line in lines), lines
        assert "  became    INV-2025-08-4471 (truncated)" in lines
        assert "\nFAIL: 0/1 identifiers kept" in "\n".join(lines)


def test_junit_one_case_per_audited_conversation(cli):
    root = ET.fromstring(ok(cli("audit", SAMPLE_TRACES, "--format", "junit"), 1).stdout)
    cases = root.findall(".//testcase")
    assert len(cases) == 3
    failed = {c.get("file").rsplit("/", 1)[-1] for c in cases if c.find("failure") is not None}
    assert failed == {"invoice_altered.jsonl", "claude_lost_path.jsonl"}
    suite = root.find("testsuite")
    assert (suite.get("tests"), suite.get("failures")) == ("3", "2")


def test_github_annotations_point_at_the_user_message(cli):
    out = ok(cli("audit", SAMPLE_TRACES, "--format", "github"), 1).stdout
    lines = out.splitlines()
    pattern = re.compile(r"^::(error|warning|notice) (file=([^,]+),line=(\d+),)?title=[^:]+::.+$")
    assert all(pattern.match(line) for line in lines), lines
    located = {(Path(m.group(3)).name, int(m.group(4))) for m in map(pattern.match, lines) if m[2]}
    assert located == {("invoice_altered.jsonl", 2), ("claude_lost_path.jsonl", 1)}
    assert sum("::error file=" in line for line in lines) == 3
    assert lines[-1].startswith("::error title=lexkeep audit::FAIL")


def test_markdown_summary(cli):
    out = ok(cli("audit", SAMPLE_TRACES, "--format", "markdown"), 1).stdout
    assert out.startswith("## ❌ lexkeep audit")
    assert "| **all** | 6 | 3 | 1 | 2 | 0 | **50.0%** |" in out
    rows = [
        line for line in out.splitlines() if line.startswith("| altered") or "| missing |" in line
    ]
    assert len(rows) >= 3


def test_html_is_self_contained_with_chart(cli, tmp_path):
    target = tmp_path / "report.html"
    result = ok(cli("audit", SAMPLE_TRACES, "--format", "html", "-o", target), 1)
    assert result.stdout == ""
    text = target.read_text(encoding="utf-8")
    root = ET.fromstring(text.split("\n", 1)[1])  # well-formed after the doctype line
    bars = root.findall(f".//{SVG}svg/{SVG}rect")
    assert len(bars) == 11
    heights = {r.find(f"{SVG}title").text.split(":")[0]: int(r.get("height")) for r in bars}
    assert heights["0-10%"] > heights["100%"] > 0
    assert not re.search(r"(src|href)=|@import|url\(", text)
    assert len(root.findall(".//tr")) >= 6 + 1 + 7


@pytest.mark.parametrize("fmt", ["table", "json", "junit", "github", "markdown", "html"])
def test_redact_hides_every_value_in_every_format(cli, sample_db, fmt):
    out = ok(cli("audit", "--db", sample_db, "--format", fmt, "--redact"), 1).stdout
    raw = [*ALL_VALUES, "INV-2025-08-4471", "E0502", "left-pad-1.3.0", "retry.py"]
    leaked = [value for value in raw if value in out]
    assert leaked == []
    assert re.search(r"redacted:[0-9a-f]{16}", out)


@pytest.mark.parametrize("how", [("--redact",), ()])
def test_redact_hides_the_values_an_input_error_quotes(cli, tmp_path, how):
    from lexkeep.audit.report import redact_key, redact_value

    bad = tmp_path / "bad.jsonl"
    bad.write_text(
        '{"type":"message","id":"m1","conversation_id":"c1","role":"user","text":"hi"}\n'
        '{"type":"message","id":"m2","conversation_id":"c1","role":"user","status":"ORD_88412"}\n'
    )
    env = {} if how else {"LEXKEEP_REDACT": "true"}
    err = ok(cli("audit", bad, *how, env=env), 2).stderr
    hashed = redact_value("ORD_88412", redact_key())
    assert f"{bad}:2: 'status': unknown value '{hashed}'" in err
    assert "ORD_88412" not in err
    plain = ok(cli("audit", bad), 2).stderr  # without --redact the value is shown as it is
    assert "unknown value 'ORD_88412'" in plain


def test_redact_with_the_public_default_key_says_so(cli):
    """A CI job whose secret is missing (a fork's pull request gets an empty one) hashed with
    the documented default key without a word: short identifiers in a public log could then be
    recovered by hashing guesses."""
    warning = (
        "Warning: --redact hashed with the public default key (LEXKEEP_REDACT_KEY is not set):"
        " short identifiers can be recovered by hashing guesses; set LEXKEEP_REDACT_KEY to a"
        " secret\n"
    )
    for env, flags in (
        ({"LEXKEEP_REDACT_KEY": None}, ("--redact",)),
        ({"LEXKEEP_REDACT_KEY": ""}, ("--redact",)),  # ${{ secrets.X }} of a missing secret
        ({"LEXKEEP_REDACT_KEY": None, "LEXKEEP_REDACT": "true"}, ()),
    ):
        result = ok(cli("audit", INVOICE, "--format", "json", *flags, env=env), 1)
        assert result.stderr == warning, env
        assert json.loads(result.stdout)["redacted"] is True  # still redacted, as documented
    keyed = ok(cli("audit", INVOICE, "--redact", env={"LEXKEEP_REDACT_KEY": "s3cret"}), 1)
    assert keyed.stderr == ""
    plain = ok(cli("audit", INVOICE, env={"LEXKEEP_REDACT_KEY": None}), 1)
    assert plain.stderr == ""


def test_redaction_is_stable_and_keyed(cli):
    first = ok(cli("audit", INVOICE, "--format", "json", "--redact"), 1).stdout
    again = ok(cli("audit", INVOICE, "--format", "json", "--redact"), 1).stdout
    other = ok(
        cli(
            "audit",
            INVOICE,
            "--format",
            "json",
            "--redact",
            env={"LEXKEEP_REDACT_KEY": "another-key"},
        ),
        1,
    ).stdout
    assert findings(first) == findings(again)
    assert findings(first) != findings(other)
    (f,) = json.loads(first)["findings"]
    assert f["value"] != f["evidence"]["found"]  # the altered value is hashed on its own


@pytest.mark.parametrize(
    ("args", "env", "code"),
    [
        ((), {}, 1),
        (("--exit-zero",), {}, 0),
        (("--min-ratio", "0.5"), {}, 0),
        (("--min-ratio", "0.51"), {}, 1),
        (("--min-ratio", "0.5", "--fail-on", "altered"), {}, 1),
        (("--min-ratio", "0", "--fail-on", "missing"), {}, 1),
        (("--min-ratio", "0.5", "--fail-on", "altered", "--exit-zero"), {}, 0),
        ((), {"LEXKEEP_MIN_RATIO": "0.5"}, 0),
        (("--min-ratio", "1"), {"LEXKEEP_MIN_RATIO": "0.5"}, 1),
        ((), {"LEXKEEP_EXIT_ZERO": "true"}, 0),
        (("--no-exit-zero",), {"LEXKEEP_EXIT_ZERO": "true"}, 1),
    ],
)
def test_gate_exit_codes(cli, sample_db, args, env, code):
    ok(cli("audit", "--db", sample_db, "--format", "json", *args, env=env), code)


def test_codex_story_passes_even_with_fail_on_everything(cli):
    ok(cli("audit", CODEX, "--fail-on", "altered,missing", "--format", "json"), 0)


def _run(args: list[str], cwd: Path) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("LEXKEEP_")}
    return subprocess.run(
        [sys.executable, "-m", "lexkeep.cli.main", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_pyproject_settings_and_unknown_key(tmp_path):
    (tmp_path / "pyproject.toml").write_text(
        "[tool.lexkeep.audit]\nmin_ratio = 0.5\nformat = 'json'\n", encoding="utf-8"
    )
    result = _run(["audit", str(SAMPLE_TRACES)], tmp_path)
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["gate"]["min_ratio"] == 0.5
    (tmp_path / "pyproject.toml").write_text(
        "[tool.lexkeep.audit]\nmin_ration = 0.5\n", encoding="utf-8"
    )
    result = _run(["audit", str(SAMPLE_TRACES)], tmp_path)
    assert result.returncode == 2, result.stderr
    assert "unknown key 'min_ration'" in result.stderr
    assert "pyproject.toml" in result.stderr


def test_a_failed_gate_names_where_its_settings_came_from(tmp_path):
    """The reasons said `below --min-ratio 0.98` when no flag was given: a user looking for
    where 0.98 came from was sent to the command line, not to pyproject.toml or the
    environment."""
    (tmp_path / "pyproject.toml").write_text(
        "[tool.lexkeep.audit]\nmin_ratio = 0.98\nfail_on = ['missing']\nformat = 'json'\n",
        encoding="utf-8",
    )
    result = _run(["audit", str(SAMPLE_TRACES)], tmp_path)
    assert result.returncode == 1, result.stderr
    assert json.loads(result.stdout)["gate"]["reasons"] == [
        "ratio 0.500 (3/6 kept) is below min_ratio = 0.98 in pyproject.toml",
        "2 missing identifier(s) and fail_on = missing in pyproject.toml",
    ]
    env = {k: v for k, v in os.environ.items() if not k.startswith("LEXKEEP_")}
    result = subprocess.run(
        [sys.executable, "-m", "lexkeep.cli.main", "audit", str(SAMPLE_TRACES)],
        cwd=tmp_path,
        env={**env, "LEXKEEP_MIN_RATIO": "0.9"},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert json.loads(result.stdout)["gate"]["reasons"][0].endswith("below LEXKEEP_MIN_RATIO=0.9")
    result = _run(
        ["audit", str(SAMPLE_TRACES), "--min-ratio", "0.9", "--fail-on", "altered"], tmp_path
    )
    assert json.loads(result.stdout)["gate"]["reasons"] == [
        "ratio 0.500 (3/6 kept) is below --min-ratio 0.9",
        "1 altered identifier(s) and --fail-on altered",
    ]


def test_lexkeep_toml_beside_pyproject_wins_with_one_warning_line(tmp_path):
    (tmp_path / "pyproject.toml").write_text(
        "[project]\nname = 'x'\n[tool.lexkeep.audit]\nmin_ratio = 0.5\n", encoding="utf-8"
    )
    (tmp_path / "lexkeep.toml").write_text("[audit]\nformat = 'json'\n", encoding="utf-8")
    result = _run(["audit", str(SAMPLE_TRACES)], tmp_path)
    assert result.returncode == 1, result.stderr  # min_ratio 1.0: pyproject's 0.5 is not read
    assert json.loads(result.stdout)["gate"]["min_ratio"] == 1.0
    # The audit reads two tables ([audit], [identifiers]): the warning still comes once.
    warnings = [line for line in result.stderr.splitlines() if "Warning" in line]
    assert warnings == [
        f"Warning: {tmp_path.resolve() / 'pyproject.toml'}: [tool.lexkeep] is ignored: "
        "lexkeep.toml beside it takes precedence (keep the settings in one of the two)"
    ], result.stderr


def test_db_mode_reads_the_store_without_changing_it(cli, db_file):
    with Store.open(db_file) as store:
        ingest_paths(store, [str(SAMPLE_TRACES)])
    before = hashlib.sha256(db_file.read_bytes()).hexdigest()
    result = ok(cli("audit", "--db", db_file, "--format", "json"), 1)
    assert findings(result.stdout) == ALL_VALUES
    assert hashlib.sha256(db_file.read_bytes()).hexdigest() == before


def test_not_a_duckdb_file_exits_2(cli, tmp_path):
    bogus = tmp_path / "store.duckdb"
    bogus.write_text("this is not a database\n", encoding="utf-8")
    result = ok(cli("audit", "--db", bogus), 2)
    assert f"Error: {bogus} is not a DuckDB database\n" in result.stderr
    assert result.stdout == ""


def test_a_store_given_as_a_trace_path_exits_2_pointing_at_db(cli, sample_db):
    """`lexkeep audit lexkeep.duckdb` (a store where a trace is expected) says what to pass."""
    result = ok(cli("audit", sample_db), 2)
    assert f"Error: {sample_db}: a DuckDB database, not a trace file" in result.stderr
    assert "Hint: a lexkeep store is read with --db FILE" in result.stderr


def test_audit_with_nothing_given_and_no_store_says_how_to_audit_traces(cli, tmp_path, monkeypatch):
    """`lexkeep audit` alone, a new user's first try, only said to ingest into a store, not
    that trace files can be audited directly."""
    monkeypatch.chdir(tmp_path)
    result = ok(cli("audit", env={"LEXKEEP_DB": None}), 2)
    assert result.stderr == (
        "Error: nothing to audit: no trace files given, and no lexkeep store at lexkeep.duckdb\n"
        "Hint: name trace files or folders (lexkeep audit TRACES...), or a store filled by"
        " lexkeep ingest (lexkeep audit --db FILE)\n"
    )
    assert list(tmp_path.iterdir()) == []
    # --db, or $LEXKEEP_DB, naming a store that is not there keeps its own message
    result = ok(cli("audit", env={"LEXKEEP_DB": str(tmp_path / "typo.duckdb")}), 2)
    assert f"no lexkeep store at {tmp_path / 'typo.duckdb'}" in result.stderr
    assert "nothing to audit" not in result.stderr


def test_missing_store_exits_2(cli, tmp_path):
    result = ok(cli("audit", "--db", tmp_path / "nope.duckdb"), 2)
    assert "no lexkeep store" in result.stderr


def test_invalid_trace_line_exits_2_with_file_and_line(cli, tmp_path):
    bad = tmp_path / "bad.jsonl"
    good = INVOICE.read_text(encoding="utf-8").splitlines()
    bad.write_text("\n".join([*good[:3], "{not json", *good[3:]]) + "\n", encoding="utf-8")
    result = ok(cli("audit", bad), 2)
    assert re.search(r"^Error: .*bad\.jsonl:4", result.stderr, re.M), result.stderr
    skipped = ok(cli("audit", bad, "--skip-invalid", "--format", "json"), 1)
    assert findings(skipped.stdout) == EXPECTED[INVOICE]


def test_github_format_annotates_an_audit_that_could_not_run(cli, tmp_path):
    bad = tmp_path / "bad,run:1.jsonl"  # a comma and a colon must be escaped in file=
    good = INVOICE.read_text(encoding="utf-8").splitlines()
    bad.write_text("\n".join([*good[:3], "{not json", *good[3:]]) + "\n", encoding="utf-8")
    for how, env in ((("-f", "github"), None), ((), {"LEXKEEP_FORMAT": "github"})):
        result = ok(cli("audit", bad, *how, env=env), 2)
        assert re.search(r"^Error: .*bad,run:1\.jsonl:4", result.stderr, re.M), result.stderr
        lines = result.stdout.splitlines()
        assert len(lines) == 1, result.stdout
        escaped = str(bad).replace(":", "%3A").replace(",", "%2C")
        assert lines[0].startswith(
            f"::error file={escaped},line=4,col=2,title=lexkeep audit could not run::invalid JSON"
        ), lines[0]
    # a usage error found after parsing names no file: no file= property
    result = ok(cli("audit", INVOICE, "--min-ratio", "7", "-f", "github"), 2)
    assert result.stdout == (
        "::error title=lexkeep audit could not run::--min-ratio: 7.0 is outside 0..1"
        " (hint: e.g. 0.95 or 1.0)\n"
    )
    # a report that cannot be written (-o names a folder) is annotated too
    result = ok(cli("audit", INVOICE, "-f", "github", "-o", tmp_path), 2)
    assert result.stdout == (
        f"::error title=lexkeep audit could not run::cannot write {tmp_path}: it is a folder"
        " (hint: -o takes a file name)\n"
    )
    # other formats write nothing to stdout on exit 2, as before
    assert ok(cli("audit", bad, "-f", "json"), 2).stdout == ""


def test_github_format_annotates_a_command_line_that_cannot_be_parsed(tmp_path):
    """A usage error (an unknown option, a flag's value of the wrong type, a misspelt command)
    showed only plain `Usage:`/`Error:` lines with `--format github` or LEXKEEP_FORMAT=github:
    the job's annotations said nothing. It is an `::error` line on stdout now; stderr and the
    exit code are as before, and other formats write nothing to stdout."""

    def run(*args: object, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
        result = subprocess.run(
            [sys.executable, "-m", "lexkeep.cli.main", *map(str, args)],
            cwd=tmp_path,
            env={k: v for k, v in os.environ.items() if not k.startswith("LEXKEEP_")} | (env or {}),
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert result.returncode == 2, result.stderr
        return result

    title = "::error title=lexkeep audit could not run::"
    hint = " (hint: try 'lexkeep audit -h' for help)"
    plain = run("audit", INVOICE, "--bogus")
    assert plain.stdout == ""
    assert plain.stderr.splitlines()[-1] == "Error: No such option: --bogus"
    for how in (("-f", "github"), ("--format=github",), ("-fgithub",), ("--format", "GitHub")):
        result = run("audit", INVOICE, "--bogus", *how)
        assert result.stdout == f"{title}No such option: --bogus{hint}\n", how
        assert result.stderr == plain.stderr
    github = {"LEXKEEP_FORMAT": "github"}
    bad_ratio = run("audit", INVOICE, "--min-ratio", "98%", env=github)
    assert bad_ratio.stdout == (
        f"{title}Invalid value for '--min-ratio': '98%25' is not a valid float.{hint}\n"
    )  # % is escaped in an annotation's text (GitHub decodes it back)
    assert bad_ratio.stderr.splitlines()[-1].startswith("Error: Invalid value for '--min-ratio'")
    no_value = run("audit", INVOICE, "-f", env=github)
    assert no_value.stdout == f"{title}Option '-f' requires an argument.{hint}\n"
    empty_db = run("audit", "--db", "", "-f", "github")
    assert empty_db.stdout.startswith(f"{title}Invalid value for '--db': is empty"), empty_db.stdout
    # A misspelt command: the job still learns why nothing ran.
    typo = run("audti", INVOICE, "-f", "github")
    assert typo.stdout == (
        "::error title=lexkeep could not run::No such command 'audti'. Did you mean 'audit'?"
        " (hint: try 'lexkeep -h' for help)\n"
    )
    # Other formats, and other commands (their formats have no github), as before.
    for args, env in (
        (("audit", INVOICE, "--bogus", "-f", "json"), None),
        (("audit", INVOICE, "--bogus", "-f", "json"), github),
        (("ingest", INVOICE, "--bogus"), github),
        ((), github),  # `lexkeep` alone shows its help
    ):
        result = run(*args, env=env)
        assert result.stdout == "", args
        assert "Error: No such option: --bogus" in result.stderr or not args


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (("--format", "xml"), "unknown format 'xml'"),
        (("--min-ratio", "2"), "outside 0..1"),
        (("--fail-on", "kept"), "unknown verdict 'kept'"),
        (("--db", "x.duckdb"), "not both"),
        (("--rules",), None),
    ],
)
def test_bad_options_exit_2(cli, args, needle):
    result = cli("audit", SAMPLE_TRACES, *args)
    assert result.exit_code == 2, result.stderr
    if needle:
        assert needle in result.stderr


def test_a_crash_exits_2_never_1(cli, db_file):
    with Store.open(db_file) as store:
        ingest_paths(store, [str(INVOICE)])
        store.con.execute("DROP TABLE boundaries")  # a damaged store: the SQL itself fails
    result = ok(cli("audit", "--db", db_file), 2)
    assert "internal error" in result.stderr


def test_output_file_and_stdout(cli, tmp_path):
    target = tmp_path / "audit.json"
    result = ok(cli("audit", SAMPLE_TRACES, "--format", "json", "-o", target), 1)
    assert result.stdout == ""
    assert findings(target.read_text(encoding="utf-8")) == ALL_VALUES


def test_output_file_without_a_format_takes_the_one_its_extension_names(cli, tmp_path):
    """`lexkeep audit traces/ -o report.html` wrote the terminal table into report.html (and
    `-o audit.json` a table into audit.json): with no format named anywhere, the file's
    extension now chooses it. A format named by flag, environment or settings file wins."""
    env = {"LEXKEEP_FORMAT": None}
    for name, check in (
        ("r.json", lambda text: findings(text) == ALL_VALUES),
        ("r.html", lambda text: text.startswith("<!DOCTYPE html>")),
        ("r.HTM", lambda text: text.startswith("<!DOCTYPE html>")),
        ("r.xml", lambda text: ET.fromstring(text).tag == "testsuites"),
        ("r.md", lambda text: text.startswith("## ")),
        ("r.txt", lambda text: "Per identifier kind" in text),
    ):
        target = tmp_path / name
        ok(cli("audit", SAMPLE_TRACES, "-o", target, env=env), 1)
        assert check(target.read_text(encoding="utf-8")), (name, target.read_text()[:300])
    named = tmp_path / "named.html"
    ok(cli("audit", SAMPLE_TRACES, "--format", "json", "-o", named, env=env), 1)
    assert findings(named.read_text(encoding="utf-8")) == ALL_VALUES
    from_env = tmp_path / "env.html"
    ok(cli("audit", SAMPLE_TRACES, "-o", from_env, env={"LEXKEEP_FORMAT": "markdown"}), 1)
    assert from_env.read_text(encoding="utf-8").startswith("## ")


def test_output_naming_an_input_trace_is_refused_and_the_trace_kept(cli, tmp_path):
    folder = tmp_path / "traces"
    folder.mkdir()
    trace = folder / INVOICE.name
    trace.write_bytes(INVOICE.read_bytes())
    for given in (trace, folder):  # the file itself, or a folder that holds it
        result = ok(cli("audit", given, "--format", "json", "-o", trace), 2)
        assert f"-o {trace}" in result.stderr and "input" in result.stderr
        assert trace.read_bytes() == INVOICE.read_bytes()


def test_output_naming_the_store_is_refused_and_the_store_kept(cli, sample_db, tmp_path):
    store = tmp_path / "copy.duckdb"
    store.write_bytes(sample_db.read_bytes())
    link = tmp_path / "report.json"
    link.symlink_to(store)  # the same file under another name
    for target in (store, link):
        result = ok(cli("audit", "--db", store, "--format", "json", "-o", target), 2)
        assert "store" in result.stderr
    assert store.read_bytes() == sample_db.read_bytes()
    assert findings(ok(cli("audit", "--db", store, "--format", "json"), 1).stdout) == ALL_VALUES


def test_input_format_forces_the_reader_as_the_mixed_file_hint_says(cli, tmp_path):
    mixed = tmp_path / "mixed.jsonl"  # `cat` of a Codex rollout and a Claude Code session
    mixed.write_bytes(CODEX.read_bytes() + CLAUDE.read_bytes())
    refused = ok(cli("audit", mixed, "--format", "json"), 2)
    assert "--input-format" in refused.stderr  # the hint names the option: audit has it
    data = json.loads(
        ok(cli("audit", mixed, "--input-format", "codex", "--format", "json"), 0).stdout
    )
    assert findings(json.dumps(data)) == EXPECTED[CODEX]
    assert any("unknown_type" in note for note in data["notes"])  # the Claude lines, said
    wrong = ok(cli("audit", INVOICE, "--input-format", "claude"), 2)
    assert "no line is a claude record" in wrong.stderr
    ok(cli("audit", INVOICE, "--input-format", "nope"), 2)


def test_help_ends_with_an_example(cli):
    out = ok(cli("audit", "--help"), 0).stdout
    assert "Example: lexkeep audit" in out


# -- the shared corpus ---------------------------------------------------------------------


def test_shared_claude_code_compactions(cli):
    folder = shared_data() / "claude-code-log" / "test" / "test_data"
    files = [
        folder / "dag_compact_after_rewind.jsonl",
        folder / "dag_compact_after_rewind_preserved.jsonl",
    ]
    data = json.loads(ok(cli("audit", *files, "--format", "json"), 0).stdout)
    # Two real Claude Code compact_boundary lines; the users typed no identifier before them.
    assert data["totals"]["conversations_with_boundary"] == 2
    assert data["totals"]["audited"] == 0 and data["findings"] == []
    assert {Path(c["file"]).name for c in data["conversations"]} == {f.name for f in files}
    assert any("nothing audited" in note for note in data["notes"])


def test_shared_openai_runs_have_no_boundary(cli):
    folder = shared_data() / "apollo-tau-bench" / "tau" / "results"
    files = sorted(folder.glob("*.json"))[:5]
    data = json.loads(ok(cli("audit", *files, "--format", "json"), 0).stdout)
    assert data["totals"]["conversations"] >= 5
    assert data["totals"]["conversations_with_boundary"] == 0
    assert data["findings"] == []


def test_shared_malformed_codex_file_exits_2_unless_skipped(cli):
    folder = shared_data() / "claude-code-log" / "test" / "test_data" / "codex"
    result = ok(cli("audit", folder), 2)
    assert "malformed/rollout-" in result.stderr and ".jsonl:" in result.stderr
    data = json.loads(ok(cli("audit", folder, "--skip-invalid", "--format", "json"), 0).stdout)
    assert data["totals"]["conversations"] >= 5
    assert data["findings"] == []


def test_readme_documents_every_sample(cli):
    readme = (REPO / "sample_traces" / "README.md").read_text(encoding="utf-8")
    for path in EXPECTED:
        assert path.name in readme


def test_rules_file_reaches_the_extractor(cli, tmp_path):
    rules = tmp_path / "rules.toml"
    rules.write_text('disabled = ["alnum_code"]\n', encoding="utf-8")
    result = ok(cli("audit", CLAUDE, "--rules", rules, "--format", "json"), 1)
    assert findings(result.stdout) == {"/home/dev/shop/src/cart/checkout.rs": "missing"}
    rules.write_text('disabled = ["no_such_kind"]\n', encoding="utf-8")
    result = ok(cli("audit", CLAUDE, "--rules", rules), 2)
    assert "rules.toml" in result.stderr and "no_such_kind" in result.stderr


def test_rules_with_db_is_refused(cli, sample_db, tmp_path):
    rules = tmp_path / "rules.toml"
    rules.write_text("", encoding="utf-8")
    result = ok(cli("audit", "--db", sample_db, "--rules", rules), 2)
    assert "--rules only applies" in result.stderr


@pytest.mark.parametrize("fmt", ["lexkeep", "codex", "claude"])
def test_generated_dumps_match_their_known_verdicts(cli, tmp_path, fmt):
    """benchmarks/generate.py writes dumps whose every verdict and flag is right by construction."""
    out = tmp_path / fmt
    subprocess.run(
        [sys.executable, str(REPO / "benchmarks" / "generate.py"), "--format", fmt]
        + ["--size", "600KB", "--out", str(out), "--seed", "11"],
        check=True,
        capture_output=True,
        timeout=120,
    )
    expected = json.loads((out / "expected.json").read_text(encoding="utf-8"))
    report = json.loads(ok(cli("audit", out, "--format", "json", "--exit-zero"), 0).stdout)
    # Keyed by where the user typed it: values are unique per conversation, not per dump.
    want = {
        (Path(e["file"]).name, e["line"], e["value"]): (
            e["verdict"],
            e["used_before"],
            e["in_summary"],
            e["in_kept_verbatim"],
        )
        for e in expected["identifiers"]
        if e["verdict"] != "not_audited"
    }
    got = {
        (Path(f["message"]["file"]).name, f["message"]["line"], f["value"]): (
            f["verdict"],
            f["flags"]["used_before_boundary"],
            bool(f["flags"]["in_summary"]),
            f["flags"]["in_kept_verbatim"],
        )
        for f in report["findings"]
    }
    assert len(want) > 20
    assert got == want
    totals = expected["totals"]
    assert [report["totals"][k] for k in ("audited", "kept", "altered", "missing")] == [
        totals[k] for k in ("audited", "kept", "altered", "missing")
    ]


@pytest.mark.parametrize("workers", ["0", "2"])
@pytest.mark.parametrize("layout", ["one file", "two files"])
def test_a_compaction_id_reused_by_another_conversation_cannot_pass(cli, tmp_path, workers, layout):
    """Both conversations alter their identifier; with the second boundary left out as a
    duplicate, only the first was audited (and a kept one would have passed the gate)."""

    def conversation(conv: str, value: str) -> str:
        altered = value[:-1]
        return "".join(
            json.dumps(record) + "\n"
            for record in (
                {"type": "message", "id": f"{conv}-m1", "conversation_id": conv,
                 "role": "user", "text": f"Check {value} please"},
                {"type": "compaction", "id": "b1", "conversation_id": conv, "summary": "x"},
                {"type": "tool_call", "id": "t1", "conversation_id": conv, "name": "q",
                 "arguments": json.dumps({"o": altered})},
            )
        )  # fmt: skip

    a, b = conversation("convA", "ORD_11111"), conversation("convB", "ORD_22222")
    if layout == "one file":
        (tmp_path / "dump.jsonl").write_text(a + b)
        where = f"{tmp_path / 'dump.jsonl'}:5"
    else:
        (tmp_path / "a.jsonl").write_text(a)
        (tmp_path / "b.jsonl").write_text(b)
        where = f"{tmp_path / 'b.jsonl'}:2"
    result = ok(cli("audit", tmp_path, env={"LEXKEEP_READ_WORKERS": workers}), 2)
    assert f"Error: {where}: compaction id 'b1' is already used by conversation 'convA'" in (
        result.stderr
    )


def test_control_characters_in_ids_and_tool_names_stay_inert(cli, tmp_path):
    """JUnit must stay well-formed XML, and a CI log must not receive ESC/BEL/NUL."""
    conv, tool = "ctl\x01id\x1b[31m", "q\x00\x1b[2J\x07\x9b"
    trace = tmp_path / "ctl.jsonl"
    trace.write_text(
        "".join(
            json.dumps(r) + "\n"
            for r in (
                {
                    "type": "message",
                    "id": "m1",
                    "conversation_id": conv,
                    "role": "user",
                    "text": "Order ORD_88412 now",
                },
                {"type": "compaction", "id": "b1", "conversation_id": conv},
                {
                    "type": "tool_call",
                    "id": "t",
                    "conversation_id": conv,
                    "name": tool,
                    "arguments": '{"q": "ord_88412"}',
                },
            )
        )  # fmt: skip
    )
    controls = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f]")
    junit = ok(cli("audit", trace, "--format", "junit"), 1).stdout
    case = ET.fromstring(junit).find(".//testcase")
    assert case.get("name") == "ctl\\u0001id\\u001b[31m"
    assert "q\\u0000\\u001b[2J\\u0007\\u009b" in case.find("failure").text
    for fmt in ("github", "markdown"):
        out = ok(cli("audit", trace, "--format", fmt), 1).stdout
        assert "ord_88412" in out and not controls.search(out), fmt


def test_bidi_overrides_and_hidden_characters_are_escaped_in_every_format(cli, tmp_path):
    """A file name, conversation id or tool name holding U+202E (Trojan Source) or an invisible
    tag character must not reorder or hide what a report's reader sees; JSON keeps the values."""
    conv, tool = "conv\u202eX", "look\u2066up\U000e0041"
    trace = tmp_path / "tr\u202eace.jsonl"
    trace.write_text(
        "".join(
            json.dumps(r) + "\n"
            for r in (
                {
                    "type": "message",
                    "id": "m1",
                    "conversation_id": conv,
                    "role": "user",
                    "text": "Order \u202eORD_88412\u202c now",
                },
                {"type": "compaction", "id": "b1", "conversation_id": conv},
                {
                    "type": "tool_call",
                    "id": "t",
                    "conversation_id": conv,
                    "name": tool,
                    "arguments": '{"q": "ord_88412"}',
                },
            )
        )  # fmt: skip
    )
    for fmt in ("table", "markdown", "github", "junit", "html", "json"):
        out = ok(cli("audit", trace, "--format", fmt), 1).stdout
        assert "ORD_88412" in out and first_control(out) is None, (fmt, out)
    # shown as an escape (Markdown then escapes its backslash)
    assert "tr\\\\u202eace.jsonl:1" in ok(cli("audit", trace, "--format", "markdown"), 1).stdout
    doc = json.loads(ok(cli("audit", trace, "--format", "json"), 1).stdout)
    (finding,) = [f for f in doc["findings"] if f["value"] == "ORD_88412"]
    assert finding["conversation_id"] == conv and finding["evidence"]["tool"] == tool
    assert finding["message"]["file"] == str(trace)


def test_notes_reach_the_junit_and_github_reports(cli):
    """A CI log must say why nothing was audited, not only "PASS: 0/0"."""
    note = "nothing audited: none of the 1 conversation(s) crosses a compaction boundary"
    junit = ok(cli("audit", SAMPLE_TRACES / "openai_no_boundary.json", "-f", "junit"), 0).stdout
    assert ET.fromstring(junit).find("testsuite/system-out").text == note
    github = ok(cli("audit", SAMPLE_TRACES / "openai_no_boundary.json", "-f", "github"), 0)
    assert f"::notice title=lexkeep audit note::{note}\n" in github.stdout


# A 20-digit account number is a digit_run identifier; orjson alone reads it as a float and
# writes it back as 9.876543210987654e+19, which once made it "missing".
ACCOUNT = "98765432109876543210"


def _claude_line(kind: str, uuid: str, **fields: object) -> str:
    """A Claude Code session line (json.dumps writes Python's big integers digit for digit)."""
    envelope = {
        "type": kind,
        "uuid": uuid,
        "parentUuid": None,
        "isSidechain": False,
        "userType": "external",
        "cwd": "/r",
        "sessionId": "cccc0000-0000-4000-8000-000000000003",
        "version": "2.0.1",
        "timestamp": "2025-11-20T10:00:00.000Z",
    }
    return json.dumps({**envelope, **fields}) + "\n"


_REFUND_USE = {"type": "tool_use", "id": "toolu_1", "name": "refund",
               "input": {"account": int(ACCOUNT), "amount": 12.5}}  # fmt: skip

# The user types the account number, the history is compacted, then the agent sends the number
# exactly, as a JSON number inside the tool call's object arguments.
ACCOUNT_TRACES = {
    "claude": "".join(
        [
            _claude_line("user", "u1", message={"role": "user", "content": f"refund {ACCOUNT}"}),
            _claude_line("system", "b1", subtype="compact_boundary", content="Compacted"),
            _claude_line(
                "user",
                "s1",
                isCompactSummary=True,
                message={"role": "user", "content": "A refund was requested."},
            ),
            _claude_line(
                "assistant",
                "a1",
                message={"id": "msg_1", "role": "assistant", "content": [_REFUND_USE]},
            ),
        ]
    ),
    "lexkeep": (
        '{"type":"message","id":"m1","conversation_id":"c1","role":"user",'
        f'"text":"refund account {ACCOUNT} please"}}\n'
        '{"type":"compaction","id":"b1","conversation_id":"c1","summary":"A refund."}\n'
        '{"type":"tool_call","id":"k1","conversation_id":"c1","name":"refund",'
        f'"arguments":{{"account":{ACCOUNT},"amount":12.50}}}}\n'
    ),
}


@pytest.mark.parametrize(
    ("trace", "how"),
    [
        ("claude", "audit FILE"),
        ("lexkeep", "audit FILE"),  # the audit's DuckDB load path (audit/fastload.py)
        ("lexkeep", "ingest, then audit --db"),
    ],
)
def test_a_20_digit_number_in_object_arguments_is_kept(cli, tmp_path, trace, how):
    path = tmp_path / f"{trace}.jsonl"
    path.write_text(ACCOUNT_TRACES[trace], encoding="utf-8")
    if how == "audit FILE":
        result = cli("audit", path, "--format", "json")
    else:
        db = tmp_path / "store.duckdb"
        ok(cli("ingest", path, "--db", db), 0)
        result = cli("audit", "--db", db, "--format", "json")
    ok(result, 0)
    assert findings(result.stdout) == {ACCOUNT: "kept"}


def test_arguments_nested_deeper_than_orjson_writes_are_audited(cli, tmp_path):
    deep: object = "ORD_88412"
    for _ in range(300):
        deep = [deep]
    trace = tmp_path / "deep.jsonl"
    records = (
        {"type": "message", "id": "m1", "conversation_id": "c1", "role": "user",
         "text": "check ORD_88412"},
        {"type": "compaction", "id": "b1", "conversation_id": "c1"},
        {"type": "tool_call", "id": "t1", "conversation_id": "c1", "name": "q",
         "arguments": {"a": deep}},
    )  # fmt: skip
    trace.write_text("".join(json.dumps(r) + "\n" for r in records))
    report = json.loads(ok(cli("audit", trace, "--format", "json"), 0).stdout)
    assert report["totals"]["kept"] == 1


def left_out_note(count: int, first: str, *, files: bool) -> str:
    """The audit's note on records it reads that were left out for their id; an audit of
    files adds why it does not count the others."""
    note = (
        f"{count} record(s) the audit reads (user messages, tool calls, compactions) were left"
        " out because their conversation already held their id with other content"
        f" (first: {first}); whatever they held is not in this audit"
    )
    if files:
        note += FILES_COUNT_ONLY
    return note


# What an audit of files adds to that note: what its count covers, and why a store's may be
# higher over the same files.
FILES_COUNT_ONLY = (
    " (an audit of files stores only user messages, tool calls and compactions, so it counts"
    " only records left out for an id one of those held: a user message under the id of an"
    " earlier message of another kind is audited here, where lexkeep ingest leaves it out and"
    " audit --db counts it; tool results and other messages left out are counted by lexkeep"
    " ingest and stats)"
)


def test_the_left_out_counts_of_files_and_store_differ_only_as_the_note_says(cli, tmp_path):
    """/work/shared/data/claude-code-log: the files' audit counted 9 records left out, the
    store's 10, and nothing said why: dag_within_fork.jsonl:4 is a user message under the id
    an assistant answer of dag_fork.jsonl holds, which an audit of files (storing no
    assistant messages) audits and an ingest leaves out. The files' note now says what it
    counts, and the one record between the two counts is that user message."""
    corpus = shared_data() / "claude-code-log"
    files = ok(cli("audit", corpus, "--skip-invalid", "-f", "json", "--exit-zero"), 0)
    db = tmp_path / "s.duckdb"
    assert cli("ingest", corpus, "--skip-invalid", "--db", db, "-q").exit_code == 0
    stored = ok(cli("audit", "--db", db, "-f", "json", "--exit-zero"), 0)

    def read_note(report: str) -> tuple[int, str]:
        note = next(n for n in json.loads(report)["notes"] if "the audit reads" in n)
        return int(note.split()[0]), note

    (from_files, files_note), (from_store, store_note) = map(
        read_note, (files.stdout, stored.stdout)
    )
    assert files_note.endswith(FILES_COUNT_ONLY), files_note
    assert FILES_COUNT_ONLY not in store_note
    # The records the store's count has beyond the files': user messages whose id a message of
    # another kind held first (in the store, the id's message is of another kind).
    with Store.open(db, read_only=True) as store:
        beyond = store.con.execute(
            "SELECT e.path, e.line FROM ingest_errors e JOIN messages m"
            " ON e.detail = 'message ' || chr(39) || m.id || chr(39)"
            " WHERE e.reason = 'id_conflict' AND m.kind <> 'user_text'"
        ).fetchall()
    assert [(Path(p).name, line) for p, line in beyond] == [("dag_within_fork.jsonl", 4)]
    assert from_store - from_files == len(beyond)


def test_records_left_out_for_an_id_their_conversation_holds_are_named(cli, tmp_path):
    """Day 2 of an export restarts its ids: ingest's summary and the audit's notes say what
    was left out, instead of auditing less without a word."""

    def line(**fields: object) -> str:
        return json.dumps(fields) + "\n"

    a, b = tmp_path / "day1.jsonl", tmp_path / "day2.jsonl"
    a.write_text(line(type="message", id="m1", conversation_id="c1", role="user", text="hi"))
    b.write_text(line(type="message", id="m1", conversation_id="c1", role="user", text="INV-7"))
    result = cli("ingest", a, b, "--db", tmp_path / "s.duckdb")
    assert result.exit_code == 0, result.stderr
    assert (
        f"1 record(s) left out: their conversation already holds their id with other content"
        f" (first: message 'm1' at {b}:1, stored from {a}:1)" in result.stderr
    )
    result = cli("audit", a, b, "--format", "json", "--exit-zero")
    notes = json.loads(result.stdout)["notes"]
    assert left_out_note(1, f"message 'm1' at {b}:1, stored from {a}:1", files=True) in notes


def test_a_json_document_still_being_written_is_named_in_the_notes(cli, tmp_path):
    """With --skip-invalid a results file whose writer is busy is audited as far as its values
    are complete, and the notes say so (no error row says it any more)."""
    full = (REPO / "tests" / "fixtures" / "openai" / "results.json").read_bytes()
    live = tmp_path / "results.json"
    live.write_bytes(full[: full.index(b'"task_id": 4')])
    result = cli("audit", live, "--skip-invalid", "--format", "json", "--exit-zero")
    assert result.exit_code == 0, result.stderr
    notes = json.loads(result.stdout)["notes"]
    assert (
        f"1 JSON document(s) were still being written (first: {live}); only their values"
        " complete so far are in this audit"
    ) in notes, notes
    assert not any("invalid trace line" in n for n in notes), notes


def test_records_left_out_are_named_by_an_audit_of_the_store_and_stats(cli, tmp_path):
    """What an ingest left out for an id its conversation held is recorded in the store, so
    `audit --db` and `stats` say so later (they used to say nothing)."""

    def line(**fields: object) -> str:
        return json.dumps(fields) + "\n"

    a, b = tmp_path / "day1.jsonl", tmp_path / "day2.jsonl"
    a.write_text(line(type="message", id="m1", conversation_id="c1", role="user", text="hi"))
    b.write_text(line(type="message", id="m1", conversation_id="c1", role="user", text="INV-7"))
    db = tmp_path / "s.duckdb"
    assert cli("ingest", a, "--db", db).exit_code == 0
    assert cli("ingest", b, "--db", db).exit_code == 0
    first = f"message 'm1' at {b}:1, stored from {a}:1"
    result = cli("audit", "--db", db, "--format", "json", "--exit-zero")
    assert result.exit_code == 0, result.stderr
    notes = json.loads(result.stdout)["notes"]
    assert left_out_note(1, first, files=False) in notes, notes
    assert not any("invalid trace line" in n for n in notes), notes
    stats = json.loads(cli("stats", "--db", db, "--format", "json").stdout)
    assert stats["errors_by_reason"] == {"id_conflict": 1}
    assert stats["records_left_out"] == 1 and stats["first_left_out"] == first
    text = cli("stats", "--db", db).stdout
    assert "ingest errors: 1 (id_conflict=1)" in text
    assert (
        "records left out, their conversation already holding their id with other content:"
        f" 1 (first: {first})"
    ) in text
    # An audit of the files says the same, once.
    files = cli("audit", a, b, "--format", "json", "--exit-zero")
    notes = json.loads(files.stdout)["notes"]
    assert [n for n in notes if "left out" in n] == [left_out_note(1, first, files=True)]


@pytest.mark.parametrize("fmt", ["claude", "codex"])
def test_a_call_id_repeated_in_a_session_file_with_other_input_is_named(cli, tmp_path, fmt):
    """A Claude Code session or Codex rollout repeating a call id with other input lost the
    repeat without a word; ingest, stats and an audit of the file now name it."""
    path, conv, _ = repeated_call_file(tmp_path, fmt)
    first = f"tool_call 'call_1' in conversation '{conv}' at {path}:3, stored from {path}:2"
    db = tmp_path / "s.duckdb"
    ingest = cli("ingest", path, "--db", db)
    assert ingest.exit_code == 0, ingest.stderr
    assert (
        "1 record(s) left out: their conversation already holds their id with other content"
        f" (first: {first})"
    ) in ingest.stderr
    stats = json.loads(cli("stats", "--db", db, "--format", "json").stdout)
    assert stats["errors_by_reason"] == {"id_conflict": 1}
    files = cli("audit", path, "--format", "json", "--exit-zero")
    assert files.exit_code == 0, files.stderr
    assert left_out_note(1, first, files=True) in json.loads(files.stdout)["notes"]
    stored = cli("audit", "--db", db, "--format", "json", "--exit-zero")
    assert left_out_note(1, first, files=False) in json.loads(stored.stdout)["notes"]


@pytest.mark.parametrize("fmt", ["claude", "codex"])
def test_a_result_repeated_in_a_session_file_with_other_text_is_named(cli, tmp_path, fmt):
    """A Claude Code session or Codex rollout giving one call's result twice with other text
    lost the second without a word; ingest, stats and an audit of the store now name it. An
    audit of the file reads no tool output, so it has nothing left out to name."""
    path, conv = repeated_result_file(tmp_path, fmt)
    first = f"tool_result 'call_1' in conversation '{conv}' at {path}:4, stored from {path}:3"
    db = tmp_path / "s.duckdb"
    ingest = cli("ingest", path, "--db", db)
    assert ingest.exit_code == 0, ingest.stderr
    assert "skipped duplicate=1;" in ingest.stderr  # line 5: the first result again
    assert (
        "1 record(s) left out: their conversation already holds their id with other content"
        f" (first: {first})"
    ) in ingest.stderr
    stats = json.loads(cli("stats", "--db", db, "--format", "json").stdout)
    assert stats["errors_by_reason"] == {"id_conflict": 1}
    assert stats["first_left_out"] == first
    # The audit never reads tool output: the note says so instead of "not in this audit".
    note = (
        "1 other record(s) were left out because their conversation already held their id"
        f" with other content (first: {first}): tool results or messages other than users' own"
        " text, which the audit does not read"
    )
    store = cli("audit", "--db", db, "--format", "json", "--exit-zero")
    assert store.exit_code == 0, store.stderr
    assert [n for n in json.loads(store.stdout)["notes"] if "left out" in n] == [note]
    files = cli("audit", path, "--format", "json", "--exit-zero")
    assert files.exit_code == 0, files.stderr
    assert not [n for n in json.loads(files.stdout)["notes"] if "left out" in n]


def test_a_tool_call_left_out_for_its_id_is_named_by_ingest_stats_and_audit(cli, tmp_path):
    """A second file's tool call under a call id its conversation holds with other arguments
    was left out without a word: the store kept n:1 and nothing named b.jsonl:1."""

    def call(n: int) -> str:
        fields = {"type": "tool_call", "id": "t1", "conversation_id": "c1", "name": "f"}
        return json.dumps({**fields, "arguments": {"n": n}}) + "\n"

    a, b = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    a.write_text(call(1))
    b.write_text(call(2))
    db = tmp_path / "s.duckdb"
    assert cli("ingest", a, "--db", db).exit_code == 0
    second = cli("ingest", b, "--db", db)
    assert second.exit_code == 0, second.stderr
    first = f"tool_call 't1' in conversation 'c1' at {b}:1, stored from {a}:1"
    assert (
        "1 record(s) left out: their conversation already holds their id with other content"
        f" (first: {first})"
    ) in second.stderr
    stats = json.loads(cli("stats", "--db", db, "--format", "json").stdout)
    assert stats["errors_by_reason"] == {"id_conflict": 1}
    assert stats["records_left_out"] == 1 and stats["first_left_out"] == first
    stored = cli("audit", "--db", db, "--format", "json", "--exit-zero")
    assert left_out_note(1, first, files=False) in json.loads(stored.stdout)["notes"]
    files = cli("audit", a, b, "--format", "json", "--exit-zero")
    assert left_out_note(1, first, files=True) in json.loads(files.stdout)["notes"]


def test_an_audit_of_files_and_of_the_store_say_the_same_of_records_left_out(cli, tmp_path):
    """Day 2 restarts its ids: an assistant message, a tool result and a user message are left
    out. `audit --db` counted all three as "not in this audit", though the audit reads neither
    assistant text nor tool output, and an audit of the files counted one without saying why
    the counts differ. Both now count the records the audit reads alike (the user message), an
    audit of files says why it does not count the others, and one of the store names those as
    records the audit does not read."""

    def line(**fields: object) -> str:
        return json.dumps(fields) + "\n"

    a, b = tmp_path / "day1.jsonl", tmp_path / "day2.jsonl"
    a.write_text(
        line(type="message", id="m1", conversation_id="c1", role="user", text="ORD_88412 twice?")
        + line(type="tool_call", id="t1", conversation_id="c1", name="f", arguments="{}")
        + line(type="tool_result", call_id="t1", conversation_id="c1", text="two charges")
        + line(type="message", id="m2", conversation_id="c1", role="assistant", text="Two.")
        + line(type="compaction", id="b1", conversation_id="c1", summary="a charge")
    )
    b.write_text(
        line(type="message", id="m2", conversation_id="c1", role="assistant", text="Other.")
        + line(type="tool_result", call_id="t1", conversation_id="c1", text="other output")
        + line(type="message", id="m1", conversation_id="c1", role="user", text="And INV-7?")
    )
    db = tmp_path / "s.duckdb"
    ingest = cli("ingest", a, b, "--db", db)
    assert ingest.exit_code == 0, ingest.stderr
    assert (
        "3 record(s) left out: their conversation already holds their id with other content"
        f" (first: message 'm2' (assistant_text) at {b}:1, stored from {a}:4)"
    ) in ingest.stderr
    user = f"message 'm1' at {b}:3, stored from {a}:1"
    stored = json.loads(ok(cli("audit", "--db", db, "--format", "json", "--exit-zero"), 0).stdout)
    assert [n for n in stored["notes"] if "left out" in n] == [
        left_out_note(1, user, files=False),
        "2 other record(s) were left out because their conversation already held their id"
        f" with other content (first: message 'm2' (assistant_text) at {b}:1, stored from"
        f" {a}:4): tool results or messages other than users' own text, which the audit does"
        " not read",
    ]
    files = json.loads(ok(cli("audit", a, b, "--format", "json", "--exit-zero"), 0).stdout)
    assert [n for n in files["notes"] if "left out" in n] == [left_out_note(1, user, files=True)]


def test_a_user_message_under_an_assistant_messages_id_is_audited_only_from_the_files(
    cli, tmp_path
):
    """docs/formats.md: an audit of files does not store assistant messages, so a user message
    whose id its conversation gave an assistant answer earlier is audited; an ingest leaves it
    out, and `audit --db` counts it among the records it reads that were left out."""

    def line(**fields: object) -> str:
        return json.dumps(fields) + "\n"

    a, b = tmp_path / "day1.jsonl", tmp_path / "day2.jsonl"
    a.write_text(
        line(type="message", id="m1", conversation_id="c1", role="user", text="ORD_88412?")
        + line(type="message", id="m2", conversation_id="c1", role="assistant", text="ok")
        + line(type="compaction", id="b1", conversation_id="c1", summary="s")
    )
    b.write_text(
        line(type="message", id="m2", conversation_id="c1", role="user", text="INV-2025-08-44719")
        + line(type="compaction", id="b2", conversation_id="c1", summary="s")
        + line(type="tool_call", id="t1", conversation_id="c1", name="f", arguments="{}")
    )
    files = json.loads(ok(cli("audit", a, b, "--format", "json", "--exit-zero"), 0).stdout)
    assert findings(json.dumps(files)) == {
        "ORD_88412": "missing",
        "INV-2025-08-44719": "missing",
    }
    assert not [n for n in files["notes"] if "left out" in n]
    db = tmp_path / "s.duckdb"
    assert cli("ingest", a, b, "--db", db).exit_code == 0
    stored = json.loads(ok(cli("audit", "--db", db, "--format", "json", "--exit-zero"), 0).stdout)
    assert findings(json.dumps(stored)) == {"ORD_88412": "missing"}
    first = f"message 'm2' at {b}:1, stored from {a}:2"
    assert [n for n in stored["notes"] if "left out" in n] == [left_out_note(1, first, files=False)]


@pytest.mark.parametrize("skip_invalid", [False, True])
def test_a_jsonl_file_whose_last_line_is_still_being_written_is_named_in_the_notes(
    cli, tmp_path, skip_invalid
):
    """A session file audited while its writer is inside its last line: the complete lines
    are audited and the notes say the last one is not (they said nothing, as if the file
    were whole), as for a JSON document still being written."""
    full = INVOICE.read_bytes()
    live = tmp_path / "live.jsonl"
    live.write_bytes(full[: full.rindex(b'"text"')])  # inside the last line
    flags = ["--skip-invalid"] if skip_invalid else []
    result = cli("audit", live, *flags, "--format", "json", "--exit-zero")
    assert result.exit_code == 0, result.stderr
    notes = json.loads(result.stdout)["notes"]
    last = live.read_bytes().count(b"\n") + 1  # the line being written: FILE:LINE opens it
    assert (
        f"1 file(s) end in a line still being written (first: {live}:{last}); only their"
        " complete lines are in this audit"
    ) in notes, notes
    assert not any("invalid trace line" in n for n in notes), notes
    whole = tmp_path / "whole.jsonl"
    whole.write_bytes(full)
    result = cli("audit", whole, "--format", "json", "--exit-zero")
    assert not any("still being written" in n for n in json.loads(result.stdout)["notes"])


def _one_call_trace(tmp_path: Path, user: str, arguments: dict) -> Path:
    """A lexkeep JSONL trace: one user message, a compaction, then one tool call `write`
    with these arguments."""
    records = [
        {"type": "message", "id": "m1", "conversation_id": "c1", "role": "user", "text": user},
        {"type": "compaction", "id": "b1", "conversation_id": "c1", "summary": "s"},
        {
            "type": "tool_call",
            "id": "t1",
            "conversation_id": "c1",
            "name": "write",
            "arguments": json.dumps(arguments),
        },
    ]
    trace = tmp_path / "big.jsonl"
    trace.write_text("".join(json.dumps(r) + "\n" for r in records))
    return trace


def test_a_tool_call_with_megabytes_of_arguments_is_audited(cli, tmp_path):
    """A 24 MB argument (a file an agent wrote whole) made the audit of a trace file stop
    with DuckDB out of memory (exit 2) in its 512 MB store; it is judged like any other."""
    pad = "lorem ipsum " * 2_000_000
    trace = _one_call_trace(
        tmp_path, "Check ORD-11111 and ORD-22222", {"order": "ORD-11111", "body": pad}
    )
    result = ok(cli("audit", trace, "--format", "json"), 1)
    assert findings(result.stdout) == {"ORD-11111": "kept", "ORD-22222": "missing"}


def test_a_word_repeated_through_a_long_argument_leaves_the_near_misses_unchanged(cli, tmp_path):
    """The near-miss search weighs each distinct word of a call's arguments once (a 2 MB file
    body of a few words took half a second of CPU per missing value when every repeat was
    weighed): a near miss that comes after a million repeats is still found, and each missing
    value is still reported. The speed itself is a benchmark's business, not this test's."""
    wanted = [f"ORD-{n}" for n in range(20001, 20031)]
    user = "Check ORD-11111, INV-2025-08-44719, " + ", ".join(wanted)
    near = "INV-2025-08-4471"  # a truncation, after the repeats: still found
    body = "lorem ipsum " * 200_000 + near
    trace = _one_call_trace(tmp_path, user, {"order": "ORD-11111", "body": body})
    result = ok(cli("audit", trace, "--format", "json"), 1)
    verdicts = findings(result.stdout)
    assert verdicts == {"ORD-11111": "kept", "INV-2025-08-44719": "altered"} | {
        value: "missing" for value in wanted
    }
    report = json.loads(result.stdout)
    altered = [f for f in report["findings"] if f["verdict"] == "altered"]
    assert [(f["evidence"]["found"], f["evidence"]["difference"]) for f in altered] == [
        (near, "truncated")
    ]


def _exit_with_reader_gone(args: list[object], cwd: Path) -> tuple[int, str]:
    """(exit code, stderr) of `lexkeep ARGS` whose stdout reader is gone before it writes (a
    `| head` that stopped reading): every write to stdout fails with a broken pipe."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("LEXKEEP_")}
    read, write = os.pipe()
    os.close(read)
    try:
        proc = subprocess.run(
            [sys.executable, "-m", "lexkeep.cli.main", *map(str, args)],
            cwd=cwd,
            env=env,
            stdout=write,
            stderr=subprocess.PIPE,
            text=True,
            timeout=120,
        )
    finally:
        os.close(write)
    return proc.returncode, proc.stderr


@pytest.mark.parametrize("fmt", ["json", "github", "table"])
def test_a_reader_that_stops_early_does_not_turn_a_failed_gate_into_a_pass(tmp_path, fmt):
    """`lexkeep audit ... | head` with pipefail: the gate's exit code stands when the report
    cannot be written to a closed pipe (it was 0, a pass)."""
    code, stderr = _exit_with_reader_gone(["audit", SAMPLE_TRACES, "--format", fmt], tmp_path)
    assert code == 1, stderr
    assert "Traceback" not in stderr and "Exception ignored" not in stderr
    passing = ["audit", CODEX, "--format", fmt]
    assert _exit_with_reader_gone(passing, tmp_path)[0] == 0


@pytest.mark.parametrize(
    "args",
    [
        ["stats"],
        ["show", "support-4471"],
        ["compactions"],
        ["extract", "order #W2378156"],
        ["audit", "--format", "table"],
    ],
    ids=lambda args: args[0],
)
def test_a_report_whose_reader_stops_early_exits_as_it_would_have(tmp_path, sample_db, args):
    """`lexkeep stats | head -1` under pipefail failed with exit 1, which these commands never
    mean that way: Rich's own answer to a closed pipe. The command's exit code stands."""
    store = [] if args[0] == "extract" else ["--db", sample_db]
    code, stderr = _exit_with_reader_gone([*args, *store], tmp_path)
    assert (code, stderr) == (1 if args[0] == "audit" else 0, "")


def test_a_guard_whose_reader_stops_early_still_refuses(tmp_path, sample_db):
    """An agent loop that pipes the guard's verdict somewhere that closed: exit 1 still stops
    the tool call whose identifier nobody supplied."""
    args = ["guard", "support-4471", '{"invoice_id": "INV-2025-08-4471"}', "--db", sample_db]
    code, stderr = _exit_with_reader_gone(args, tmp_path)
    assert code == 1, stderr


def test_redact_keeps_the_field_name_an_input_error_quotes(cli, tmp_path):
    """`'arguments_kind': unknown value …` under --redact: the field name is the schema's, not
    trace data, and an error that hides it no longer says which field to fix."""
    bad = tmp_path / "bad.jsonl"
    bad.write_text(
        '{"type":"tool_call","id":"t1","conversation_id":"c1","name":"f",'
        '"arguments":"{}","arguments_kind":"ORD_88412"}\n'
        '{"type":"message","id":"m1","conversation_id":"","role":"user","text":"hi"}\n'
    )
    err = ok(cli("audit", bad, "--redact"), 2).stderr
    assert f"{bad}:1: 'arguments_kind': unknown value 'redacted:" in err
    assert "ORD_88412" not in err
    (tmp_path / "two.jsonl").write_text(bad.read_text().splitlines()[1] + "\n")
    err = ok(cli("audit", tmp_path / "two.jsonl", "--redact"), 2).stderr
    assert "'conversation_id' must be a non-empty string" in err


@pytest.mark.parametrize("workers", ["1", "2"])
def test_records_of_a_type_the_reader_does_not_know_are_named_in_the_notes(cli, tmp_path, workers):
    """A lexkeep writer's misspelt type (`compation`) is skipped as unknown_type: the audit may
    then pass on what it never read, so its notes say how many records that was and in which
    file. A Claude session pasted after a lexkeep file is no unknown type but another format's
    lines: the audit stops there (tests/test_mixed_formats.py). The note names the first such
    line, FILE:LINE, so it can be opened."""
    lines = INVOICE.read_text().splitlines(keepends=True)
    typo = tmp_path / "typo.jsonl"
    typo.write_text("".join(lines).replace('"type":"compaction"', '"type":"compation"'))
    env = {"LEXKEEP_READ_WORKERS": workers}
    result = ok(cli("audit", typo, "--format", "json", env=env), 0)  # nothing crosses one
    notes = json.loads(result.stdout)["notes"]
    at = next(i for i, t in enumerate(lines, 1) if '"type":"compaction"' in t)
    assert any("1 record(s)" in n and f"first: {typo}:{at}, read as lexkeep" in n for n in notes)
    mixed = tmp_path / "mixed.jsonl"
    mixed.write_text("".join(lines) + CLAUDE.read_text())
    err = ok(cli("audit", mixed, "--format", "json", env=env), 2).stderr
    assert f"{mixed}:{len(lines) + 1}: this line is a claude record" in err
    clean = json.loads(ok(cli("audit", INVOICE, "--format", "json", env=env), 1).stdout)
    assert clean["notes"] == []


def test_a_named_pipe_is_refused_with_the_way_to_pass_it(cli, tmp_path):
    # `lexkeep audit <(zcat dump.jsonl.gz)` names a pipe, which can be read only once.
    pipe = tmp_path / "trace.jsonl"
    os.mkfifo(pipe)

    def feed() -> None:
        with contextlib.suppress(OSError), open(pipe, "wb") as out:
            out.write(INVOICE.read_bytes())

    writer = threading.Thread(target=feed, daemon=True)
    writer.start()
    try:
        for args in (("audit", pipe), ("ingest", pipe, "--db", tmp_path / "s.duckdb")):
            result = ok(cli(*args), 2)
            assert "internal error" not in result.stderr
            assert f"Error: {pipe}: " in result.stderr and "pipe" in result.stderr
            assert "standard input" in result.stderr
    finally:  # let the writer go, whatever was read
        fd = os.open(pipe, os.O_RDONLY | os.O_NONBLOCK)
        os.close(fd)
        writer.join(5)


@pytest.mark.parametrize(
    ("typed", "written"),
    [
        ("+15550109999", "+1 (555) 010-9999"),  # typed compact, written in groups
        ("+1 (555) 010-9999", "+15550109999"),  # typed in groups, written compact
        ("+1 415-555-0132", "+1 415 555 0132"),  # other groups
    ],
)
def test_a_phone_written_in_other_groups_is_altered_not_missing(cli, tmp_path, typed, written):
    trace = tmp_path / "phone.jsonl"
    trace.write_text(
        "".join(
            json.dumps(r) + "\n"
            for r in (
                {
                    "type": "message",
                    "id": "m1",
                    "conversation_id": "c1",
                    "role": "user",
                    "text": f"Please call me at {typed} tomorrow",
                },
                {"type": "compaction", "id": "b1", "conversation_id": "c1", "summary": "x"},
                {
                    "type": "tool_call",
                    "id": "t1",
                    "conversation_id": "c1",
                    "name": "dial",
                    "arguments": json.dumps({"to": written, "when": "tomorrow 10:00"}),
                },
            )
        )  # fmt: skip
    )
    report = json.loads(ok(cli("audit", trace, "--format", "json"), 1).stdout)
    [finding] = report["findings"]
    assert (finding["kind"], finding["value"], finding["verdict"]) == ("phone", typed, "altered")
    evidence = finding["evidence"]
    assert (evidence["found"], evidence["difference"], evidence["distance"]) == (
        written,
        "separator",
        0,
    )
    assert (evidence["call_id"], evidence["line"]) == ("t1", 3)


def _audit_user_text(cli, tmp_path: Path, text: str, arguments: dict) -> list[tuple[str, str, str]]:
    """(kind, value, verdict) of every finding of one user message audited against one call."""
    trace = tmp_path / "one.jsonl"
    records = (
        {"type": "message", "id": "m1", "conversation_id": "c1", "role": "user", "text": text},
        {"type": "compaction", "id": "b1", "conversation_id": "c1", "summary": "x"},
        {"type": "tool_call", "id": "t1", "conversation_id": "c1", "name": "run",
         "arguments": json.dumps(arguments)},
    )  # fmt: skip
    trace.write_text("".join(json.dumps(r) + "\n" for r in records))
    result = cli("audit", trace, "--format", "json", "--exit-zero")
    report = json.loads(ok(result, 0).stdout)
    return [(f["kind"], f["value"], f["verdict"]) for f in report["findings"]]


def test_a_list_of_three_short_numbers_is_no_phone_to_lose(cli, tmp_path):
    """`100 200 300` read as a phone number failed the gate when the call used the sizes."""
    got = _audit_user_text(
        cli, tmp_path, "resize the icons to 100 200 300 please", {"sizes": [100, 200, 300]}
    )
    assert got == []


@pytest.mark.parametrize(
    ("text", "phone"),
    [
        ("Call 415-555-0132 2 times if busy", "415-555-0132"),
        ("Call at 10:30 415-555-0132 please", "415-555-0132"),
    ],
)
def test_a_phone_beside_a_bare_number_is_audited(cli, tmp_path, text, phone):
    """The phone was not extracted at all, so losing it could never fail the gate."""
    assert _audit_user_text(cli, tmp_path, text, {"to": phone}) == [("phone", phone, "kept")]
    lost = _audit_user_text(cli, tmp_path, text, {"to": "415-555-0199"})
    assert lost == [("phone", phone, "missing")]


@pytest.mark.parametrize(
    ("written", "verdict"),
    [
        ("MU17 BOMM 0101 1010 3030 0200 000M UR", "kept"),
        ("MU17BOMM0101101030300200000MUR", "altered"),
    ],
)
def test_a_mauritius_iban_is_audited_as_one_iban(cli, tmp_path, written, verdict):
    """Its last letters read as an amount ('000M'): the audit saw a code and a card number."""
    iban = "MU17 BOMM 0101 1010 3030 0200 000M UR"
    got = _audit_user_text(cli, tmp_path, f"Refund to {iban} today", {"iban": written})
    assert got == [("iban", iban, verdict)]


@pytest.mark.parametrize(
    ("text", "folder"),
    [
        ("The types live in node_modules/@types/node/ now", "node_modules/@types/node/"),
        ("Move the button to src/components/.", "src/components/"),
    ],
)
def test_a_folder_path_is_audited_whole(cli, tmp_path, text, folder):
    """It gave pieces (node_modules, @types) or nothing, never the folder the agent lists."""
    got = _audit_user_text(cli, tmp_path, text, {"path": folder})
    assert got == [("path_rel", folder, "kept")]
    got = _audit_user_text(cli, tmp_path, text, {"path": folder.rstrip("/")})
    assert got == [("path_rel", folder, "altered")]


def test_a_version_after_version_is_is_no_address_to_lose(cli, tmp_path):
    """`version is 7.1.17.0` read as an IPv4 address failed the gate when the agent used
    `v7.1.17.0`; right after `version` it was already no address."""
    for text in ("The version is 7.1.17.0 now", "Set version = 7.1.17.0 please"):
        assert _audit_user_text(cli, tmp_path, text, {"tag": "v7.1.17.0"}) == []
    got = _audit_user_text(cli, tmp_path, "the release is on 10.0.0.7", {"host": "10.0.0.8"})
    assert got == [("ipv4", "10.0.0.7", "missing")]


def test_a_list_of_round_numbers_is_no_identifier_to_lose(cli, tmp_path):
    """`1000 2000 3000` read as one number failed the gate when the call used the numbers."""
    got = _audit_user_text(
        cli, tmp_path, "benchmark with 1000 2000 3000 each", {"rows": [1000, 2000, 3000]}
    )
    assert got == []


def test_a_card_with_mixed_separators_gives_no_phone(cli, tmp_path):
    """`4111-1111-1111 1111` gave the phone `4111-1111-1111`, audited as a phone number."""
    got = _audit_user_text(
        cli, tmp_path, "charge card 4111-1111-1111 1111 today", {"card": "4111111111111111"}
    )
    assert [kind for kind, _, _ in got if kind == "phone"] == []


@pytest.mark.parametrize(
    ("written", "verdict"),
    [("4111-1111-1111 1111", "kept"), ("4111111111111111", "altered"), ("4242", "missing")],
)
def test_a_card_with_mixed_separators_is_audited_as_one_card(cli, tmp_path, written, verdict):
    """`4111-1111-1111 1111` was not audited at all: a call that dropped it passed."""
    got = _audit_user_text(
        cli, tmp_path, "charge card 4111-1111-1111 1111 today", {"card": written}
    )
    assert got == [("card_number", "4111-1111-1111 1111", verdict)]


def test_a_path_through_an_npm_scope_is_audited_whole(cli, tmp_path):
    """Its pieces (`node_modules`, `@types`) were audited, so another package passed."""
    text = "Read the types in node_modules/@types/node please"
    got = _audit_user_text(cli, tmp_path, text, {"path": "node_modules/@types/node"})
    assert got == [("path_rel", "node_modules/@types/node", "kept")]
    got = _audit_user_text(cli, tmp_path, text, {"path": "node_modules/@types/react"})
    assert [(kind, verdict) for kind, _, verdict in got] == [("path_rel", "missing")]


def test_a_url_whose_query_value_is_cut_off_is_kept_with_any_value(cli, tmp_path):
    """The URL ended in `?b=`, so a call writing the value in other letters never kept it."""
    text = "Fetch https://ex.example/a?b=<script> and report"
    got = _audit_user_text(cli, tmp_path, text, {"url": "https://ex.example/a?b=script"})
    assert got == [("url", "https://ex.example/a", "kept")]


@pytest.mark.parametrize(
    ("typed", "written"),
    [
        ("DE89 3704 0044 0532 0130 00", "DE89 3704 0044 0532 0131 00"),
        ("+15550109999", "+1 (555) 010-9998"),
    ],
)
def test_a_one_character_edit_inside_a_grouped_value_is_altered(cli, tmp_path, typed, written):
    """Only a case or separator change was looked for in groups: the edit read as `missing`."""
    trace = tmp_path / "one.jsonl"
    records = (
        {"type": "message", "id": "m1", "conversation_id": "c1", "role": "user",
         "text": f"Pay {typed} today"},
        {"type": "compaction", "id": "b1", "conversation_id": "c1", "summary": "x"},
        {"type": "tool_call", "id": "t1", "conversation_id": "c1", "name": "pay",
         "arguments": json.dumps({"to": written, "note": "one of 3 payments"})},
    )  # fmt: skip
    trace.write_text("".join(json.dumps(r) + "\n" for r in records))
    report = json.loads(ok(cli("audit", trace, "--format", "json", "--exit-zero"), 0).stdout)
    [finding] = report["findings"]
    assert (finding["value"], finding["verdict"]) == (typed, "altered")
    evidence = finding["evidence"]
    assert (evidence["found"], evidence["difference"], evidence["distance"]) == (written, "edit", 1)
    assert (evidence["call_id"], evidence["line"]) == ("t1", 3)


def test_a_quoted_access_token_is_audited(cli, tmp_path):
    """`access token 'abc123xyz'` gave no identifier, so a call with another token passed."""
    text = "Book it with my access token 'abc123xyz' please"
    assert _audit_user_text(cli, tmp_path, text, {"token": "abc123xyz"}) == [
        ("quoted_code", "abc123xyz", "kept")
    ]
    got = _audit_user_text(cli, tmp_path, text, {"token": "abc123xyz456"})
    assert got == [("quoted_code", "abc123xyz", "altered")]


def test_an_access_code_in_dashed_groups_is_audited(cli, tmp_path):
    """`access code 12345-67890` gave no identifier, so losing it passed the gate."""
    text = "Book it, my access code is 12345-67890."
    got = _audit_user_text(cli, tmp_path, text, {"code": "12345-67890"})
    assert got == [("dashed_number", "12345-67890", "kept")]
    got = _audit_user_text(cli, tmp_path, text, {"code": "1234567890"})
    assert got == [("dashed_number", "12345-67890", "altered")]


def test_a_bare_password_after_its_word_is_audited(cli, tmp_path):
    """`password is securePass123` gave no identifier, so a call with another one passed."""
    text = "Log in as tech_guru, my password is securePass123."
    got = _audit_user_text(cli, tmp_path, text, {"user": "tech_guru", "password": "pass123"})
    assert ("keyed_code", "securePass123", "missing") in got


def test_a_date_typed_in_words_and_sent_as_an_iso_date_is_altered(cli, tmp_path):
    """The user types "March 5, 2025"; after the compaction the agent books 2025-03-05: the
    date survived, the string did not, so it is altered with the ISO date as evidence."""
    lines = [
        {"type": "conversation", "id": "c1"},
        {"type": "message", "id": "m1", "conversation_id": "c1", "role": "user",
         "text": "Please move my appointment to March 5, 2025 in the afternoon."},
        {"type": "compaction", "id": "b1", "conversation_id": "c1", "summary": "rebooking"},
        {"type": "message", "id": "m2", "conversation_id": "c1", "role": "assistant",
         "text": "Booking it."},
        {"type": "tool_call", "id": "k1", "conversation_id": "c1", "message_id": "m2",
         "name": "book", "arguments": json.dumps({"date": "2025-03-05", "slot": "pm"})},
    ]  # fmt: skip
    trace = tmp_path / "date.jsonl"
    trace.write_text("".join(json.dumps(line) + "\n" for line in lines))
    result = ok(cli("audit", trace, "--format", "json"), 1)
    (finding,) = json.loads(result.stdout)["findings"]
    assert (finding["kind"], finding["value"], finding["verdict"]) == (
        "date_text",
        "March 5, 2025",
        "altered",
    )
    evidence = finding["evidence"]
    assert (evidence["found"], evidence["difference"], evidence["line"]) == (
        "2025-03-05",
        "date",
        5,
    )


def _unknown_notes(stdout: str) -> list[str]:
    return [n for n in json.loads(stdout)["notes"] if "unknown_type" in n or "not known" in n]


def test_audit_of_a_store_names_records_of_an_unknown_type_as_audit_of_files_does(cli, tmp_path):
    """`audit --db` says what `audit FILE` says of records their reader does not know: how
    many, in how many files, the first FILE:LINE and its format; a grown file's count covers
    the lines read before it grew."""
    lines = INVOICE.read_text().splitlines(keepends=True)
    typo = tmp_path / "typo.jsonl"
    typo.write_text("".join(lines).replace('"type":"compaction"', '"type":"compation"'))
    db = tmp_path / "store.duckdb"
    ok(cli("ingest", typo, "--db", db), 0)
    of_files = _unknown_notes(ok(cli("audit", typo, "--format", "json"), 0).stdout)
    at = next(i for i, t in enumerate(lines, 1) if '"type":"compaction"' in t)
    assert len(of_files) == 1 and f"first: {typo}:{at}, read as lexkeep" in of_files[0]
    assert _unknown_notes(ok(cli("audit", "--db", db, "--format", "json"), 0).stdout) == of_files
    # The file grows by a further unknown record: only the new lines are read, the count
    # still covers the whole file.
    with typo.open("a") as out:
        out.write('{"type":"annotation","conversation_id":"support-4471","text":"x"}\n')
    ok(cli("ingest", typo, "--db", db), 0)
    of_files = _unknown_notes(ok(cli("audit", typo, "--format", "json"), 0).stdout)
    assert len(of_files) == 1 and of_files[0].startswith("2 record(s)")
    assert _unknown_notes(ok(cli("audit", "--db", db, "--format", "json"), 0).stdout) == of_files
    # A clean store says nothing of them.
    clean = tmp_path / "clean.duckdb"
    ok(cli("ingest", INVOICE, "--db", clean), 0)
    assert _unknown_notes(ok(cli("audit", "--db", clean, "--format", "json"), 1).stdout) == []


def _as_schema_4(db: Path) -> None:
    """Make the store what lexkeep wrote before migration 005: its columns and row go."""
    with Store.open(db) as store:
        undo_migrations_after(store, 4)


def test_audit_of_a_store_from_before_the_count_says_it_is_not_known(cli, tmp_path):
    """A store written before ingest kept the count of unknown records (schema 4) opens as
    before, and its audit says plainly that whether its files held any is not known."""
    db = tmp_path / "old.duckdb"
    ok(cli("ingest", INVOICE, "--db", db), 0)
    _as_schema_4(db)
    notes = _unknown_notes(ok(cli("audit", "--db", db, "--format", "json"), 1).stdout)
    assert len(notes) == 1
    assert notes[0].startswith("whether 1 file(s) held records of a type")
    assert f"(first: {INVOICE.resolve()})" in notes[0] or "(first: " in notes[0]
    # Ingesting into it migrates it: the old file stays not known, a new one is counted.
    typo = tmp_path / "typo.jsonl"
    typo.write_text(INVOICE.read_text().replace('"type":"compaction"', '"type":"compation"'))
    ok(cli("ingest", typo, "--db", db), 0)
    notes = _unknown_notes(ok(cli("audit", "--db", db, "--format", "json"), 1).stdout)
    assert len(notes) == 2
    assert notes[0].startswith("1 record(s) of a type their file's reader does not know")
    assert notes[1].startswith("whether 1 file(s) held records of a type")


def test_warnings_and_the_wrote_line_show_control_characters_escaped(tmp_path):
    """A settings warning names a file, and `Wrote FILE` the report: both are the user's
    paths, printed as they were, so an ESC or a bidirectional override in a folder or file
    name reached the terminal (and drove it, or showed the line reversed)."""
    folder = tmp_path / "proj\u202e\x1b[31m"
    folder.mkdir()
    (folder / "pyproject.toml").write_text(
        "[project]\nname = 'x'\n[tool.lexkeep.audit]\nmin_ratio = 0.5\n", encoding="utf-8"
    )
    (folder / "lexkeep.toml").write_text("[audit]\nformat = 'json'\n", encoding="utf-8")
    result = _run(["audit", str(SAMPLE_TRACES), "-o", "report\u202e.json"], folder)
    assert result.returncode == 1, result.stderr
    assert "\u202e" not in result.stderr and "\x1b" not in result.stderr, result.stderr
    shown = str(folder.resolve()).replace("\u202e", "\\u202e").replace("\x1b", "\\u001b")
    lines = result.stderr.splitlines()
    assert lines[0] == (
        f"Warning: {shown}/pyproject.toml: [tool.lexkeep] is ignored: "
        "lexkeep.toml beside it takes precedence (keep the settings in one of the two)"
    ), result.stderr
    assert lines[-1].startswith("Wrote report\\u202e.json: "), result.stderr
    assert json.loads((folder / "report\u202e.json").read_text(encoding="utf-8"))["gate"]


def _writing_notes(stdout: str) -> list[str]:
    return [n for n in json.loads(stdout)["notes"] if "still being written" in n]


def test_audit_of_a_store_names_files_ending_in_a_line_still_being_written(cli, tmp_path):
    """`audit --db` says what `audit FILE` says of files whose last line was still being
    written when they were ingested (it said nothing, as if they were whole); a file
    completed and ingested again has no note."""
    full = INVOICE.read_bytes()
    first, second = tmp_path / "first.jsonl", tmp_path / "second.jsonl"
    whole = tmp_path / "whole.jsonl"
    first.write_bytes(full[: full.rindex(b'"text"')])  # inside the last record
    second.write_bytes(full[: full.rindex(b'"conversation_id"')])
    whole.write_bytes(full)
    db = tmp_path / "store.duckdb"
    ok(cli("ingest", first, whole, second, "--db", db), 0)
    of_files = _writing_notes(ok(cli("audit", first, whole, second, "--format", "json"), 1).stdout)
    last = first.read_bytes().count(b"\n") + 1
    assert of_files == [
        f"2 file(s) end in a line still being written (first: {first}:{last}); only their"
        " complete lines are in this audit"
    ]
    assert _writing_notes(ok(cli("audit", "--db", db, "--format", "json"), 1).stdout) == of_files
    # Ingested again while still cut: its latest row still names the line.
    ok(cli("ingest", first, "--db", db), 0)
    assert _writing_notes(ok(cli("audit", "--db", db, "--format", "json"), 1).stdout) == of_files
    # The first file is completed: only the second is still named.
    first.write_bytes(full)
    ok(cli("ingest", first, "--db", db), 0)
    last = second.read_bytes().count(b"\n") + 1
    assert _writing_notes(ok(cli("audit", "--db", db, "--format", "json"), 1).stdout) == [
        f"1 file(s) end in a line still being written (first: {second}:{last}); only their"
        " complete lines are in this audit"
    ]
    second.write_bytes(full)
    ok(cli("ingest", second, "--db", db), 0)
    assert _writing_notes(ok(cli("audit", "--db", db, "--format", "json"), 1).stdout) == []


def test_audit_of_a_store_names_json_documents_still_being_written(cli, tmp_path):
    """A results file ingested with --skip-invalid while its writer was busy: `audit --db`
    says, as `audit FILE --skip-invalid` does, that only its values complete so far are in
    the audit; once it is ingested whole, nothing."""
    full = (REPO / "tests" / "fixtures" / "openai" / "results.json").read_bytes()
    live = tmp_path / "results.json"
    live.write_bytes(full[: full.index(b'"task_id": 4')])
    db = tmp_path / "store.duckdb"
    ok(cli("ingest", live, "--db", db, "--skip-invalid"), 0)
    result = cli("audit", live, "--skip-invalid", "--format", "json", "--exit-zero")
    of_files = _writing_notes(ok(result, 0).stdout)
    assert of_files == [
        f"1 JSON document(s) were still being written (first: {live}); only their values"
        " complete so far are in this audit"
    ]
    result = cli("audit", "--db", db, "--format", "json", "--exit-zero")
    assert _writing_notes(ok(result, 0).stdout) == of_files
    live.write_bytes(full)
    ok(cli("ingest", live, "--db", db, "--skip-invalid"), 0)
    result = cli("audit", "--db", db, "--format", "json", "--exit-zero")
    assert _writing_notes(ok(result, 0).stdout) == []


def test_a_file_cut_back_to_its_last_complete_line_loses_its_note(cli, tmp_path):
    """A file ingested while its last line was being written, then cut back by its writer
    to the lines before (a writer that rolls back a line it could not finish), was
    "unchanged" on the next ingest and kept its note that a line was still being written."""
    full = INVOICE.read_bytes()
    complete = full[: full.rindex(b"\n", 0, len(full) - 1) + 1]  # all lines but the last
    live, db = tmp_path / "live.jsonl", tmp_path / "store.duckdb"
    live.write_bytes(full[: full.rindex(b'"text"')])  # inside the last record
    ok(cli("ingest", live, "--db", db), 0)
    assert len(_writing_notes(ok(cli("audit", "--db", db, "--format", "json"), 1).stdout)) == 1
    live.write_bytes(complete)
    again = ok(cli("ingest", live, "--db", db), 0)
    assert f"{live}: unchanged" in again.stdout + again.stderr
    audit = json.loads(ok(cli("audit", "--db", db, "--format", "json"), 1).stdout)
    assert _writing_notes(json.dumps(audit)) == []
    of_file = json.loads(ok(cli("audit", live, "--format", "json"), 1).stdout)
    assert audit["totals"] == of_file["totals"]  # the same lines are in both audits
    # Nothing more to say: the next ingest records nothing new.
    with Store.open(db, read_only=True) as store:
        runs = store.con.execute("SELECT count(*) FROM ingest_runs").fetchone()[0]
    ok(cli("ingest", live, "--db", db), 0)
    with Store.open(db, read_only=True) as store:
        assert store.con.execute("SELECT count(*) FROM ingest_runs").fetchone()[0] == runs


def _dated_trace(path: Path, cases: list[tuple[str | None, str, str]]) -> Path:
    """One conversation per case (message time or None, date typed, date sent after a
    boundary), in lexkeep JSONL."""
    rows: list[dict] = []
    for n, (time, typed, sent) in enumerate(cases):
        cid = f"c{n}"
        stamp = {} if time is None else {"time": time}
        rows += [
            {"type": "message", "id": f"{cid}/m1", "conversation_id": cid, "role": "user",
             "text": f"Please move the booking to {typed}.", **stamp},
            {"type": "compaction", "id": f"{cid}/b1", "conversation_id": cid, "summary": "s"},
            {"type": "tool_call", "id": f"{cid}/k1", "conversation_id": cid, "name": "rebook",
             "arguments": json.dumps({"date": sent})},
        ]  # fmt: skip
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_a_date_typed_without_a_year_is_read_near_the_time_it_was_typed(cli, tmp_path):
    """`April 3` typed in 2026 and sent as `2019-04-03` was `altered (date)`, as if it were
    the same date: a year-less date now matches only its occurrence before or after the
    message's time (any year only when the conversation records no time)."""
    cases = [
        ("2026-03-30T10:00:00Z", "April 3", "2019-04-03", "missing"),  # another year
        ("2026-03-30T10:00:00Z", "April 3", "2026-04-03", "altered"),
        ("2026-04-10T10:00:00Z", "April 3", "2027-04-03", "altered"),  # the next April 3
        ("2026-04-10T10:00:00Z", "April 3", "2025-04-03", "missing"),  # not the last one
        ("2026-12-28T23:00:00Z", "January 3", "2027-01-03", "altered"),  # over New Year
        ("2027-01-02T08:00:00Z", "28 December", "2026-12-28", "altered"),
        ("2027-01-02T08:00:00Z", "28 December", "2024-12-28", "missing"),
        (None, "April 3", "2019-04-03", "altered"),  # no time recorded: any year
        ("2026-03-30T10:00:00Z", "April 3, 2019", "2019-04-03", "altered"),  # a year typed
    ]
    trace = _dated_trace(tmp_path / "dates.jsonl", [c[:3] for c in cases])
    db = tmp_path / "dates.duckdb"
    assert cli("ingest", trace, "--db", db).exit_code == 0
    for args in ((trace,), ("--db", db)):  # the fast path of one file, and a store
        result = cli("audit", *args, "-f", "json", "--exit-zero")
        assert result.exit_code == 0, result.stderr
        found = {f["conversation_id"]: f for f in json.loads(result.stdout)["findings"]}
        for n, (_, typed, sent, verdict) in enumerate(cases):
            finding = found[f"c{n}"]
            assert (finding["value"], finding["verdict"]) == (typed, verdict), (args, sent)
            if verdict == "altered":
                assert finding["evidence"]["found"] == sent
                assert finding["evidence"]["difference"] == "date"


def test_files_with_nothing_complete_yet_are_noted_not_passed_over(cli, tmp_path):
    """A folder audit with --skip-invalid left out a JSON document cut before its first value
    and a JSONL file whose only line is not complete without a word (a note named only the
    files of which something was read), and `ingest -q` counted them as `empty`."""
    traces = tmp_path / "traces"
    traces.mkdir()
    (traces / "story.jsonl").write_bytes(INVOICE.read_bytes())
    run = [{"task_id": 0, "traj": [{"role": "user", "content": "order #W2378156 please"}]}]
    (traces / "results.json").write_text(json.dumps(run, indent=1)[:40])
    (traces / "session.jsonl").write_text('{"type": "message", "id": "m1", "conv')
    (traces / "blank.jsonl").write_text("")
    result = cli("audit", traces, "--skip-invalid", "-f", "json", "--exit-zero")
    assert result.exit_code == 0, result.stderr
    notes = json.loads(result.stdout)["notes"]
    assert (
        "2 file(s) had no complete record yet and are not in this audit (first:"
        f" {traces / 'results.json'}: the JSON document is still being written (not one value"
        " is complete))"
    ) in notes, notes
    result = cli("ingest", traces, "--skip-invalid", "-q", "--db", tmp_path / "t.duckdb")
    assert result.exit_code == 0, result.stderr
    assert result.stderr.splitlines()[-1] == (
        "4 files: 1 ingested, 0 unchanged, 0 not traces, 1 empty, 2 still being written;"
        " 6 messages, 3 tool calls"
    )


@pytest.mark.parametrize("skip_invalid", [(), ("--skip-invalid",)])
@pytest.mark.parametrize("trace", [INVOICE, CLAUDE], ids=["lexkeep-fast-path", "claude"])
def test_audit_of_a_file_ending_in_nul_bytes_notes_a_crash_not_a_line_being_written(
    cli, tmp_path, trace, skip_invalid
):
    """The audit noted the NUL bytes a crash leaves at the end of a file as a line still being
    written. The lexkeep sample takes the DuckDB fast path when whole; the Claude one does not."""
    lines = trace.read_bytes().splitlines(keepends=True)
    crashed = tmp_path / "crashed.jsonl"
    crashed.write_bytes(b"".join(lines) + b"\0" * 64)
    expected = json.loads(ok(cli("audit", trace, "-f", "json"), 1).stdout)["totals"]
    result = ok(cli("audit", crashed, *skip_invalid), 1)
    note = (
        f"Note: 1 file(s) end in NUL bytes, as a crash leaves (first: {crashed}:{len(lines) + 1},"
        f" 64 NUL bytes after line {len(lines)}); those bytes are not read"
    )
    assert note in result.stdout, result.stdout
    assert "still being written" not in result.stdout
    got = json.loads(ok(cli("audit", crashed, "-f", "json", *skip_invalid), 1).stdout)
    assert got["totals"] == expected
    assert any(note[len("Note: ") :] in n for n in got["notes"]), got["notes"]


def _crash_notes(stdout: str) -> list[str]:
    return [n for n in json.loads(stdout)["notes"] if "NUL bytes" in n]


@pytest.mark.parametrize("trace", [INVOICE, CLAUDE, CODEX], ids=["lexkeep", "claude", "codex"])
def test_audit_of_a_store_notes_the_nul_bytes_of_a_crash_as_the_audit_of_the_file(
    cli, tmp_path, trace
):
    """`audit FILE` noted the NUL bytes a crash left at the end of a file, and the ingest
    said them, but nothing of them was stored: `audit --db` said nothing. Lines a restarted
    writer appended after them were an invalid line. Both are noted, alike from the file and
    from the store, and the audit of the lines after a gap is that of the whole file."""
    lines = trace.read_bytes().splitlines(keepends=True)
    crashed = tmp_path / "crashed.jsonl"
    db = tmp_path / "store.duckdb"
    crashed.write_bytes(b"".join(lines[:6]) + b"\0" * 64)
    tail = _crash_notes(ok(cli("audit", crashed, "-f", "json"), 0).stdout)
    assert tail == [
        f"1 file(s) end in NUL bytes, as a crash leaves (first: {crashed}:7, 64 NUL bytes after"
        " line 6); those bytes are not read, only the complete lines before them are in this"
        " audit"
    ]
    ok(cli("ingest", crashed, "--db", db), 0)
    assert _crash_notes(ok(cli("audit", "--db", db, "-f", "json"), 0).stdout) == tail
    # The writer restarted and appended the rest after the NUL bytes.
    crashed.write_bytes(b"".join(lines[:6]) + b"\0" * 64 + b"".join(lines[6:]))
    whole = json.loads(cli("audit", trace, "-f", "json").stdout)
    of_file = json.loads(cli("audit", crashed, "-f", "json").stdout)
    assert of_file["totals"] == whole["totals"]
    gap = [
        f"1 file(s) hold NUL bytes a crash left, then lines written after them (first:"
        f" {crashed}:7, 64 NUL bytes after line 6); the NUL bytes are not read, the lines"
        " after them are in this audit"
    ]
    assert _crash_notes(json.dumps(of_file)) == gap
    ok(cli("ingest", crashed, "--db", db), 0)
    of_store = json.loads(cli("audit", "--db", db, "-f", "json").stdout)
    assert of_store["totals"] == whole["totals"]
    assert _crash_notes(json.dumps(of_store)) == gap
    # The table report says it too.
    assert f"Note: {gap[0]}" in cli("audit", "--db", db).stdout


@pytest.mark.parametrize("trace", [INVOICE, CLAUDE, CODEX], ids=["lexkeep", "claude", "codex"])
def test_audit_of_a_line_a_crash_cut_before_nul_bytes_notes_the_crash(cli, tmp_path, trace):
    """A file ending in the start of a line a crash cut, then NUL bytes: the audit noted a
    line still being written. It notes the crash, from the file and from the store, and
    audits the complete lines before it."""
    lines = trace.read_bytes().splitlines(keepends=True)
    crashed = tmp_path / "crashed.jsonl"
    crashed.write_bytes(b"".join(lines[:6]) + lines[6][:17] + b"\0" * 64)
    six = tmp_path / "six.jsonl"
    six.write_bytes(b"".join(lines[:6]))
    expected = json.loads(cli("audit", six, "-f", "json").stdout)["totals"]
    tail = [
        f"1 file(s) end in NUL bytes, as a crash leaves (first: {crashed}:7, 64 NUL bytes after"
        " line 6); those bytes are not read, only the complete lines before them are in this"
        " audit"
    ]
    of_file = json.loads(ok(cli("audit", crashed, "-f", "json"), 0).stdout)
    assert _crash_notes(json.dumps(of_file)) == tail
    assert not [n for n in of_file["notes"] if "still being written" in n]
    assert of_file["totals"] == expected
    db = tmp_path / "store.duckdb"
    ok(cli("ingest", crashed, "--db", db), 0)
    of_store = json.loads(ok(cli("audit", "--db", db, "-f", "json"), 0).stdout)
    assert _crash_notes(json.dumps(of_store)) == tail
    assert not [n for n in of_store["notes"] if "still being written" in n]


def test_audit_of_a_file_of_nul_bytes_only_names_the_crash(cli, tmp_path):
    """A file a crash left holding only NUL bytes was "empty" to the audit: alone, the error
    said every file found was empty; beside a trace, nothing was said of it."""
    crashed = tmp_path / "crashed.jsonl"
    crashed.write_bytes(b"\0" * 50)
    alone = ok(cli("audit", crashed), 2)
    assert alone.stderr.splitlines()[0] == (
        f"Error: no trace files in {crashed} (1 file(s) found, none with a record: {crashed}:"
        " a file of 50 NUL bytes, as a crash leaves before anything was written)"
    )
    cut = tmp_path / "cut.jsonl"
    cut.write_bytes(INVOICE.read_bytes()[:17] + b"\0" * 30)
    both = ok(cli("audit", crashed, cut), 2)
    assert both.stderr.splitlines()[0] == (
        f"Error: no trace files in {crashed}, {cut} (2 file(s) found, none with a record"
        f" (first: {crashed}: a file of 50 NUL bytes, as a crash leaves before anything was"
        " written))"
    )
    beside = json.loads(ok(cli("audit", crashed, INVOICE, "-f", "json"), 1).stdout)
    assert (
        f"1 file(s) hold nothing a crash left readable and are not in this audit (first:"
        f" {crashed}: a file of 50 NUL bytes, as a crash leaves before anything was written)"
    ) in beside["notes"], beside["notes"]


def test_audit_of_a_store_names_the_files_a_crash_left_with_nothing_readable(cli, tmp_path):
    """`lexkeep ingest` said of a file of NUL bytes only `nothing to read: a file of N NUL
    bytes, as a crash leaves ...` and kept nothing of it: `audit --db` was silent where
    `audit FILE` notes it. The ingest now keeps it (an ingest_runs row consuming nothing), so
    both audits give the same note; `stats` counts it among no files ingested."""
    crashed = tmp_path / "crashed.jsonl"
    crashed.write_bytes(b"\0" * 50)
    cut = tmp_path / "cut.jsonl"
    cut.write_bytes(INVOICE.read_bytes()[:17] + b"\0" * 30)
    inputs = (crashed, cut, INVOICE)
    of_files = json.loads(ok(cli("audit", *inputs, "-f", "json"), 1).stdout)["notes"]
    note = (
        f"2 file(s) hold nothing a crash left readable and are not in this audit (first:"
        f" {crashed}: a file of 50 NUL bytes, as a crash leaves before anything was written)"
    )
    assert note in of_files, of_files
    db = tmp_path / "s.duckdb"
    ingest = ok(cli("ingest", *inputs, "--db", db), 0)
    assert "2 left empty by a crash" in ingest.stderr
    of_store = json.loads(ok(cli("audit", "--db", db, "-f", "json"), 1).stdout)["notes"]
    assert [n for n in of_store if "crash" in n] == [note]
    assert "files ingested: 1;" in ok(cli("stats", "--db", db), 0).stdout
    # Ingested again as they are: the same, and no second row for them.
    ok(cli("ingest", *inputs, "--db", db), 0)
    again = json.loads(ok(cli("audit", "--db", db, "-f", "json"), 1).stdout)["notes"]
    assert [n for n in again if "crash" in n] == [note]
    with Store.open(db, read_only=True) as store:
        rows = store.con.execute(
            "SELECT count(*) FROM ingest_runs WHERE path = ?", [str(cut)]
        ).fetchone()[0]
    assert rows == 1
    # The cut file alone: its own wording, as the audit of the file gives it.
    cut_note = (
        f"1 file(s) hold nothing a crash left readable and are not in this audit (first: {cut}:"
        " a crash cut its first line after 17 bytes and left 30 NUL bytes after them)"
    )
    assert cut_note in json.loads(ok(cli("audit", cut, INVOICE, "-f", "json"), 1).stdout)["notes"]
    solo = tmp_path / "solo.duckdb"
    ok(cli("ingest", cut, INVOICE, "--db", solo), 0)
    solo_notes = json.loads(ok(cli("audit", "--db", solo, "-f", "json"), 1).stdout)["notes"]
    assert cut_note in solo_notes, solo_notes
    # A writer that restarts appends after the NUL bytes: then the file is read, and noted
    # as a gap, no longer as holding nothing.
    crashed.write_bytes(b"\0" * 50 + CODEX.read_bytes())
    cut.unlink()
    ok(cli("ingest", crashed, "--db", db), 0)
    later = json.loads(ok(cli("audit", "--db", db, "-f", "json"), 1).stdout)["notes"]
    assert not [n for n in later if "hold nothing a crash" in n and str(crashed) in n], later
    assert [n for n in later if "then lines written after them" in n], later


def test_audit_of_a_store_from_before_nul_bytes_were_kept_still_opens(cli, tmp_path):
    """A store written before ingest kept NUL bytes (schema 6) opens read-only as before,
    and its audit says nothing of them."""
    db = tmp_path / "old.duckdb"
    crashed = tmp_path / "crashed.jsonl"
    crashed.write_bytes(INVOICE.read_bytes() + b"\0" * 8)
    ok(cli("ingest", crashed, "--db", db), 0)
    with Store.open(db) as store:
        undo_migrations_after(store, 6)
    assert _crash_notes(ok(cli("audit", "--db", db, "-f", "json"), 1).stdout) == []
    ok(cli("ingest", crashed, "--db", db), 0)  # migrates it: the file read again is noted
    assert len(_crash_notes(ok(cli("audit", "--db", db, "-f", "json"), 1).stdout)) == 1


def test_fail_on_given_twice_fails_on_both(cli):
    """`--fail-on altered --fail-on missing` kept only the last one: a gate meant to fail on
    both passed over the altered invoice. Each flag adds its verdicts, as a comma list does."""
    result = ok(
        cli(
            "audit", SAMPLE_TRACES, "--min-ratio", "0", "--fail-on", "altered",
            "--fail-on", "missing", "--format", "json",
        ),
        1,
    )  # fmt: skip
    gate = json.loads(result.stdout)["gate"]
    assert gate["fail_on"] == ["altered", "missing"]
    assert gate["reasons"] == [
        "1 altered identifier(s) and --fail-on altered",
        "2 missing identifier(s) and --fail-on missing",
    ]
    only_altered = ok(cli("audit", INVOICE, "--min-ratio", "0", "--fail-on", "altered"), 1)
    assert only_altered.stdout.rstrip().endswith("1 altered identifier(s) and --fail-on altered.")


def test_github_format_from_the_environment_annotates_a_bad_setting_beside_it(cli):
    """`LEXKEEP_FORMAT=github` set for the job and a mistyped `LEXKEEP_MIN_RATIO`: the format
    was looked up through the same settings that failed, so the job showed no annotation of
    why the step failed. The format the variable names still gets it."""
    env = {"LEXKEEP_FORMAT": "github", "LEXKEEP_MIN_RATIO": "98%"}
    result = ok(cli("audit", INVOICE, env=env), 2)
    assert result.stdout == (
        "::error title=lexkeep audit could not run::LEXKEEP_MIN_RATIO: not a number: '98%25'"
        " (hint: use a ratio from 0 to 1)\n"
    )
    # an unknown format named there is no github format: stdout stays empty
    env = {"LEXKEEP_FORMAT": "sarif", "LEXKEEP_MIN_RATIO": "98%"}
    assert ok(cli("audit", INVOICE, env=env), 2).stdout == ""
