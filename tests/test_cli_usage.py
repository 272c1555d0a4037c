"""Problems a first real user hit: clear errors (exit 2, never a crash) for ordinary mistakes."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from conftest import SAMPLE_TRACES, bound_cli, on_terminal, permission_bound, run_writing_at_most

from lexkeep.core.store import Store


def test_audit_output_into_missing_folder_is_a_clear_error(cli, tmp_path: Path):
    target = tmp_path / "no-such-folder" / "audit.json"
    result = cli("audit", SAMPLE_TRACES, "--format", "json", "-o", target)
    assert result.exit_code == 2
    assert "internal error" not in result.stderr
    assert f"Error: cannot write {target}" in result.stderr
    assert "Hint:" in result.stderr


def test_audit_output_onto_a_folder_is_a_clear_error(cli, tmp_path: Path):
    result = cli("audit", SAMPLE_TRACES, "-o", tmp_path)
    assert result.exit_code == 2
    assert "internal error" not in result.stderr
    assert "it is a folder" in result.stderr
    assert list(tmp_path.iterdir()) == []  # no temp file left behind


def test_audit_output_file_is_written_and_no_temp_remains(cli, tmp_path: Path):
    target = tmp_path / "audit.json"
    result = cli("audit", SAMPLE_TRACES, "--format", "json", "-o", target)
    assert result.exit_code == 1
    assert '"schema_version"' in target.read_text()
    assert [p.name for p in tmp_path.iterdir()] == ["audit.json"]


def test_audit_output_file_says_the_verdict_on_stderr_in_a_ci_log(cli, tmp_path: Path):
    """`lexkeep audit traces/ -f junit -o report.xml` in a CI job failed with exit 1 and not a
    word in the log: the verdict was only in the file."""
    target = tmp_path / "report.xml"
    result = cli("audit", SAMPLE_TRACES, "--format", "junit", "-o", target)
    assert result.exit_code == 1
    assert result.stdout == ""
    assert result.stderr == (
        f"Wrote {target}: FAIL: 3/6 identifiers kept verbatim after compaction (50.0%) in 3"
        " audited conversation(s); ratio 0.500 (3/6 kept) is below --min-ratio 1.0.\n"
    )
    passed = cli("audit", SAMPLE_TRACES / "codex_kept_verbatim.jsonl", "-o", target)
    assert passed.exit_code == 0
    assert passed.stderr.startswith(f"Wrote {target}: PASS: 3/3 identifiers kept"), passed.stderr
    # Into standard output the report itself holds the verdict: nothing more on stderr
    assert cli("audit", SAMPLE_TRACES, "-o", "-").stderr == ""


def test_stats_and_show_on_a_mistyped_store_are_errors_and_create_nothing(cli, tmp_path: Path):
    missing = tmp_path / "typo.duckdb"
    for args in (("stats",), ("show", "support-4471")):
        result = cli(*args, "--db", missing)
        assert result.exit_code == 2, result.stdout
        assert f"no lexkeep store at {missing}" in result.stderr
        assert not missing.exists()


@pytest.mark.parametrize(
    "args",
    [
        ("audit",),
        ("audit", str(SAMPLE_TRACES)),
        ("ingest", str(SAMPLE_TRACES)),
        ("stats",),
        ("show", "c1"),
        ("extract",),
        ("compact",),
        ("compactions",),
        ("context", "c1", "--budget-bytes", "100"),
    ],
)
def test_an_empty_db_is_refused_not_taken_for_the_default_store(
    cli, tmp_path: Path, monkeypatch, args
):
    """`--db "$UNSET"` ingested into ./lexkeep.duckdb, or was taken for a folder, without a
    word about the empty value."""
    monkeypatch.chdir(tmp_path)
    result = cli(*args, "--db", "")
    assert result.exit_code == 2, result.output
    assert "Invalid value for '--db': is empty" in result.stderr
    assert list(tmp_path.iterdir()) == []


def test_stats_and_show_read_a_store_that_ingest_filled(cli, tmp_path: Path):
    db = tmp_path / "t.duckdb"
    assert cli("ingest", SAMPLE_TRACES, "--db", db).exit_code == 0
    stats = cli("stats", "--db", db, "--format", "json")
    assert stats.exit_code == 0
    assert '"conversations": 4' in stats.stdout
    show = cli("show", "support-4471", "--db", db)
    assert show.exit_code == 0
    assert "INV-2025-08-44719" in show.stdout


def test_unknown_conversation_hint_names_stored_ids(cli, tmp_path: Path):
    db = tmp_path / "t.duckdb"
    assert cli("ingest", SAMPLE_TRACES, "--db", db).exit_code == 0
    result = cli("show", "no-such-id", "--db", db)
    assert result.exit_code == 2
    assert "Error: no conversation 'no-such-id' in the store" in result.stderr
    # the old hint sent users to `show --format json`, which itself needs an id
    assert "show --format json" not in result.stderr
    assert "Hint: the store holds 4 conversation(s), e.g. " in result.stderr
    assert "support-4471" in result.stderr


def test_ingest_summary_counts_empty_files_so_the_numbers_add_up(cli, tmp_path: Path):
    traces = tmp_path / "traces"
    traces.mkdir()
    (traces / "a.jsonl").write_bytes((SAMPLE_TRACES / "invoice_altered.jsonl").read_bytes())
    (traces / "live-session.jsonl").write_text("")  # a session file created but not written yet
    result = cli("ingest", traces, "--db", tmp_path / "t.duckdb")
    assert result.exit_code == 0, result.stderr
    last = result.stderr.splitlines()[-1]
    assert last.startswith("2 files: 1 ingested, 0 unchanged, 0 not traces, 1 empty; 6 messages")


def test_audit_with_skip_invalid_says_lines_were_skipped(cli, tmp_path: Path):
    lines = (SAMPLE_TRACES / "invoice_altered.jsonl").read_text().splitlines(keepends=True)
    bad = tmp_path / "bad.jsonl"
    bad.write_text("".join(lines[:3]) + '{"type":"message", broken\n' + "".join(lines[3:]))
    result = cli("audit", bad, "--skip-invalid", "--format", "json")
    assert result.exit_code == 1, result.stderr
    notes = json.loads(result.stdout)["notes"]
    # the count, and where the first skipped line is, so it can be opened and fixed
    note = (
        f"1 invalid trace line(s) were skipped by --skip-invalid (first: {bad}:4); whatever"
        " they held is not in this audit"
    )
    assert note in notes, notes
    # ... and an audit of a store the ingest filled says the same
    db = tmp_path / "t.duckdb"
    assert cli("ingest", bad, "--skip-invalid", "--db", db).exit_code == 0
    stored = cli("audit", "--db", db, "--format", "json")
    assert stored.exit_code == 1, stored.stderr
    assert note in json.loads(stored.stdout)["notes"]
    clean = cli("audit", SAMPLE_TRACES / "invoice_altered.jsonl", "--format", "json")
    assert not any("skipped" in n for n in json.loads(clean.stdout)["notes"])


def test_audit_rules_with_db_hint_names_a_command_that_exists(cli, tmp_path: Path):
    db = tmp_path / "t.duckdb"
    assert cli("ingest", SAMPLE_TRACES, "--db", db).exit_code == 0
    result = cli("audit", "--db", db, "--rules", tmp_path / "rules.toml")
    assert result.exit_code == 2
    # `lexkeep ingest` has no --rules; re-extraction is `lexkeep extract --db --rules`
    assert f"lexkeep extract --db {db} --rules" in result.stderr
    assert "--rules" not in cli("ingest", "--help").stdout


def test_audit_of_nothing_says_why_nothing_was_audited(cli, tmp_path: Path):
    def notes(*paths: Path) -> list[str]:
        result = cli("audit", *paths, "--format", "json")
        assert result.exit_code == 0, result.stderr  # nothing audited passes (documented)
        return json.loads(result.stdout)["notes"]

    runs_only = tmp_path / "runs.jsonl"
    runs_only.write_text('{"type":"run","id":"r1","conversation_id":"c1","status":"completed"}\n')
    assert any("the input holds no conversations" in n for n in notes(runs_only))
    no_boundary = notes(SAMPLE_TRACES / "openai_no_boundary.json")
    assert any(
        "none of the 1 conversation(s) crosses a compaction boundary" in n for n in no_boundary
    )


def test_audit_of_folders_without_a_trace_file_is_an_error(cli, tmp_path: Path):
    # A CI gate pointed at the wrong folder must not pass on nothing (exit 2, not 0).
    empty = tmp_path / "empty"
    empty.mkdir()
    result = cli("audit", empty)
    assert result.exit_code == 2
    assert f"Error: no trace files in {empty} (no files found)" in result.stderr
    other = tmp_path / "other"
    other.mkdir()
    (other / "settings.json").write_text('{"theme": "dark"}')
    (other / "notes.txt").write_text("INV-2025-08-44719")
    result = cli("audit", other, "--exit-zero")
    assert result.exit_code == 2  # --exit-zero covers a failed gate, not a run on nothing
    assert "none of them a trace lexkeep reads" in result.stderr
    # Files not written yet are no traces either (an export that produced nothing).
    blank = tmp_path / "blank"
    blank.mkdir()
    (blank / "a.jsonl").write_text("")
    (blank / "b.json").write_text("")
    for target in (blank, blank / "a.jsonl"):
        result = cli("audit", target)
        assert result.exit_code == 2, result.stderr
        assert "file(s) found, all of them empty" in result.stderr
    # A file whose first line is still being written (an audit right after the agent started).
    (blank / "c.jsonl").write_text('{"type": "message", "id": "m1", "conv')
    result = cli("audit", blank / "c.jsonl")
    assert result.exit_code == 2, result.stderr
    assert (
        f"none with a complete record yet: {blank / 'c.jsonl'}: its first line is not complete"
        " (file still being written?)"
    ) in result.stderr
    result = cli("audit", blank)
    assert "all of them empty or still being written (1)" in result.stderr
    # One trace file among them is enough.
    (other / "t.jsonl").write_text(
        json.dumps({"type": "message", "id": "m", "conversation_id": "c", "role": "user"}) + "\n"
    )
    assert cli("audit", other).exit_code == 0


def test_guard_bad_json_states_the_position_once(cli, tmp_path: Path):
    db = tmp_path / "t.duckdb"
    assert cli("ingest", SAMPLE_TRACES, "--db", db).exit_code == 0
    result = cli("guard", "support-4471", "-", "--db", db, input='{"invoice_id": \n')
    assert result.exit_code == 2
    first = result.stderr.splitlines()[0]
    assert first.startswith("Error: -:2:1: proposed arguments are not valid JSON (")
    assert "line 2 column 1" not in first and "char " not in first, first


def test_every_optional_test_import_is_in_the_test_extras():
    # A test that importorskips a module the CI install lacks is skipped forever, silently.
    import re
    import tomllib

    from conftest import REPO

    extras = tomllib.loads((REPO / "pyproject.toml").read_text())["project"][
        "optional-dependencies"
    ]["test"]
    names = {re.split(r"[<>=!~ \[]", e, maxsplit=1)[0].lower() for e in extras}
    wanted = set()
    for test in (REPO / "tests").glob("test_*.py"):
        wanted |= set(re.findall(r"importorskip\(\s*[\"']([\w.]+)", test.read_text()))
    assert {w.split(".")[0].lower() for w in wanted} <= names


def test_audit_table_on_an_80_column_terminal_keeps_every_column():
    out = on_terminal(["audit", str(SAMPLE_TRACES)], cols=80, stream="stdout", check=False)
    # Rich once cropped the table at 80 columns: no evidence, no flags. At 80 columns the
    # findings are blocks now (the table would break their paths): every field is there.
    lines = out.splitlines()
    assert any(line.startswith("  evidence ") for line in lines), out
    assert any(line.startswith("  flags     used before boundary") for line in lines), out
    assert "INV-2025-08-4471 (truncated)" in out, out
    # a path:line wider than the terminal would be a line of its own, whole
    assert all(len(line) <= 80 or re.fullmatch(r"\S+:\d+", line) for line in lines), out


# Every command with a readable --format, and the name its help gives that format.
READABLE_FORMAT = {
    "audit": ("table", ["audit", str(SAMPLE_TRACES / "codex_kept_verbatim.jsonl")]),
    "extract": ("table", ["extract", "order #W2378156"]),
    "compactions": ("table", ["compactions", "--db", "{db}"]),
    "stats": ("text", ["stats", "--db", "{db}"]),
    "show": ("text", ["show", "support-4471", "--db", "{db}"]),
    "compact": ("text", ["compact", "--db", "{db}", "--dry-run"]),
    "guard": ("text", ["guard", "support-4471", '{"invoice_id": "INV-2025-08-4471"}']),
    "context": ("text", ["context", "support-4471", "--budget-bytes", "2000", "--db", "{db}"]),
}


@pytest.fixture(scope="module")
def sample_store(tmp_path_factory) -> Path:
    """The sample traces ingested into a store of their own."""
    db = tmp_path_factory.mktemp("formats") / "traces.duckdb"
    done = subprocess.run(
        [sys.executable, "-m", "lexkeep.cli.main", "ingest", str(SAMPLE_TRACES), "--db", str(db)],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr
    return db


@pytest.mark.parametrize("command", sorted(READABLE_FORMAT))
def test_text_and_table_both_name_the_readable_format_of_every_command(cli, sample_store, command):
    """`audit`, `extract` and `compactions` called their readable output `table`; `stats`,
    `show`, `compact`, `guard` and `context` called it `text`: `lexkeep stats --format table`
    after `lexkeep audit --format table` was an error (exit 2). Either name now works
    everywhere, and prints the same as the name the help gives."""
    own, args = READABLE_FORMAT[command]
    args = [a.replace("{db}", str(sample_store)) for a in args]
    if command == "guard":
        args += ["--db", str(sample_store)]
    other = "table" if own == "text" else "text"
    expected = cli(*args, "--format", own)
    assert expected.exit_code in (0, 1), expected.stderr
    for name in (other, other.upper()):
        got = cli(*args, "--format", name)
        assert got.exit_code == expected.exit_code, got.stderr
        if command != "compact":  # its counts line holds the seconds it took
            assert got.stdout == expected.stdout


@pytest.mark.parametrize("command", sorted(READABLE_FORMAT))
def test_an_unknown_format_is_refused_alike_by_every_command(cli, sample_store, command):
    """Three wordings (Click's `Invalid value for '--format'`, `unknown --format`, `--format:
    unknown format`) and two exit paths before; now one, naming the choices."""
    args = [a.replace("{db}", str(sample_store)) for a in READABLE_FORMAT[command][1]]
    if command == "guard":
        args += ["--db", str(sample_store)]
    result = cli(*args, "--format", "yaml")
    assert result.exit_code == 2, result.stderr
    first, hint = result.stderr.splitlines()[:2]
    assert first == "Error: --format: unknown format 'yaml'", result.stderr
    assert hint.startswith("Hint: choose from: ") and "json" in hint, result.stderr


@pytest.mark.parametrize("cols", [80, 72])
def test_stats_on_an_80_column_terminal_cuts_no_heading_or_format(sample_store, cols):
    """On a terminal of 80 columns `stats` printed `conver…`, `messag…`, `ident…` for its
    headings (at 40, `c…` for both claude and codex): where the table of formats does not fit,
    each count is a row and each format a column."""
    out = on_terminal(["stats", "--db", str(sample_store)], cols=cols, stream="stdout")
    assert "…" not in out, out
    for word in ("conversations", "boundaries", "identifiers", "user messages", "tool calls"):
        assert word in out, out
    for fmt in ("claude", "codex", "lexkeep", "openai", "all"):
        assert fmt in out, out
    assert max(len(line) for line in out.splitlines()) <= cols, out
    messages = next(line for line in out.splitlines() if line.lstrip("│┃ ").startswith("messag"))
    assert messages.split("│")[1:-1] and [c.strip() for c in messages.split("│")[2:-1]] == [
        "9",
        "3",
        "6",
        "7",
        "25",
    ], out


def _colours(text: str) -> set[int]:
    """The foreground and background colour codes among `text`'s SGR sequences."""
    import re

    codes = set()
    for params in re.findall(r"\x1b\[([0-9;]*)m", text):
        codes |= {int(p) for p in params.split(";") if p}
    return {c for c in codes if 30 <= c <= 49 or 90 <= c <= 107}


def test_audit_table_on_a_terminal_honours_no_color():
    """NO_COLOR (no-color.org) asks every program for no colour: the audit's table printed
    its verdicts and its FAIL line red and yellow all the same, where `stats`, `show` and the
    progress bars left colour out."""
    args = ["audit", str(SAMPLE_TRACES)]
    coloured = on_terminal(args, cols=120, stream="stdout", check=False, raw=True)
    assert _colours(coloured), coloured  # red FAIL line: the terminal does get colour
    plain = on_terminal(
        args, cols=120, stream="stdout", check=False, raw=True, env={"NO_COLOR": "1"}
    )
    assert "FAIL:" in plain and "INV-2025-08-44719" in plain, plain
    assert not _colours(plain), plain


def test_extract_table_on_a_narrow_terminal_never_cuts_a_value():
    url = "https://registry.example.test/pkg/left-pad/-/left-pad-1.3.0.tgz"
    out = on_terminal(["extract", f"see {url} now"], cols=60, stream="stdout", check=False)
    assert "…" not in out, out
    cells = [line.split("│")[2].strip() for line in out.splitlines() if line.count("│") == 5]
    assert "".join(cells) == url, out


def _thirty_pairs(cli, tmp_path):
    """A store whose conversation c1 has 30 pairs: exactly one 10-pair segment is a candidate."""
    rows = []
    for i in range(30):
        rows.append({"type": "message", "id": f"u{i}", "conversation_id": "c1", "role": "user"})
        rows[-1]["text"] = f"question {i}"
        rows.append({"type": "message", "id": f"a{i}", "conversation_id": "c1"})
        rows[-1].update(role="assistant", text=f"answer {i}")
    traces = tmp_path / "long.jsonl"
    traces.write_text("".join(json.dumps(r) + "\n" for r in rows))
    db = tmp_path / "t.duckdb"
    assert cli("ingest", traces, "--db", db).exit_code == 0
    return db


def test_compactions_table_on_an_80_column_terminal_shows_the_failure_reason(cli, tmp_path):
    import sys

    db = _thirty_pairs(cli, tmp_path)
    failing = f"command:{sys.executable} -c 'import sys; sys.exit(3)'"
    assert cli("compact", "--db", db, "--summarizer", failing).exit_code == 1  # attempt failed
    out = on_terminal(["compactions", "--db", str(db)], cols=80, stream="stdout", check=False)
    assert "detail" in out and "…" not in out, out  # the reason column is there, nothing cut
    assert "  failed\n" in out.replace("\r\n", "\n") and "error:" in out, out  # a block a job
    # the model (the command) is whole, on a line of its own if need be
    assert all(len(line) <= 80 or line.strip() == failing for line in out.splitlines()), out


def test_compactions_table_never_sends_a_summariser_s_escape_codes_to_the_terminal(cli, tmp_path):
    """The failure reason holds the summariser's stderr, often coloured (ESC[31m): printed as
    it is, it drove the terminal. Control characters are written as \\uXXXX, as `show` does."""
    import sys

    db = _thirty_pairs(cli, tmp_path)
    code = "import sys; sys.stderr.write(chr(27) + '[31mquota' + chr(27) + '[0m'); sys.exit(3)"
    failing = f'command:{sys.executable} -c "{code}"'
    assert cli("compact", "--db", db, "--summarizer", failing).exit_code == 1
    out = cli("compactions", "--db", db).stdout
    assert "\x1b" not in out, out
    assert "\\u001b[31mquota" in out, out


@pytest.mark.parametrize(
    "args",
    [
        ("show", "no-such-id"),
        ("show", ""),
        ("context", "no-such-id", "--budget-bytes", "4000"),
        ("guard", "no-such-id", "{}"),
        ("compact", "--conversation", "no-such-id"),
    ],
)
def test_unknown_conversation_is_named_with_a_true_hint(cli, tmp_path: Path, args):
    db = tmp_path / "t.duckdb"
    assert cli("ingest", SAMPLE_TRACES, "--db", db).exit_code == 0
    result = cli(*args, "--db", db)
    assert result.exit_code == 2
    assert "no conversation" in result.stderr and "ambiguous" not in result.stderr
    # `lexkeep stats` lists no conversations; the hint names some instead
    assert "lexkeep stats" not in result.stderr
    assert "Hint: the store holds 4 conversation(s), e.g. " in result.stderr


def test_extract_db_summary_is_one_line_whatever_the_width(cli, tmp_path: Path):
    db = tmp_path / ("a-long-folder-name-for-a-store-" * 2) / "traces.duckdb"
    db.parent.mkdir()
    assert cli("ingest", SAMPLE_TRACES, "--db", db).exit_code == 0
    result = cli("extract", "--db", db)
    assert result.exit_code == 0, result.stderr
    lines = result.stdout.splitlines()
    assert len(lines) == 1, lines
    assert (
        lines[0].startswith("Re-extracted 7 user messages of ") and "incomplete scans" in lines[0]
    )


def test_extract_with_nothing_found_prints_no_empty_table(cli):
    result = cli("extract", "nothing to see here")
    assert result.exit_code == 0
    assert result.stdout == ""
    assert "No identifiers found." in result.stderr
    assert "W2378156" in cli("extract", "order #W2378156").stdout


def test_broken_pyproject_names_file_line_and_column(tmp_path: Path):
    import subprocess
    import sys

    (tmp_path / "pyproject.toml").write_text("[project]\nname = 'x'\n[tool.lexkeep.audit\n")
    result = subprocess.run(
        [sys.executable, "-m", "lexkeep.cli.main", "audit", str(SAMPLE_TRACES)],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 2
    first = result.stderr.splitlines()[0]
    assert first.startswith(f"Error: {tmp_path / 'pyproject.toml'}:3:20: invalid TOML: "), first
    assert "(at line" not in first
    assert "Hint:" in result.stderr


def test_audit_output_through_a_link_writes_the_file_it_names(cli, tmp_path: Path):
    """-o through a symlink replaces the linked file, not the link."""
    real = tmp_path / "reports" / "audit.json"
    real.parent.mkdir()
    real.write_text("old")
    link = tmp_path / "latest.json"
    link.symlink_to(real)
    assert cli("audit", SAMPLE_TRACES, "--format", "json", "-o", link).exit_code == 1
    assert link.is_symlink()
    assert json.loads(real.read_text())["schema_version"] == 1
    assert sorted(p.name for p in real.parent.iterdir()) == ["audit.json"]


def test_audit_output_to_a_fifo_is_written_into_it_not_replaced(cli, tmp_path: Path):
    """-o onto a named pipe (or a device such as /dev/null or /dev/stdout) writes into it;
    it was replaced by a regular file, which for /dev/null under root breaks the machine."""
    import contextlib
    import os
    import threading

    fifo = tmp_path / "report.fifo"
    os.mkfifo(fifo)
    got: list[bytes] = []

    def read() -> None:
        with open(fifo, "rb") as stream:
            got.append(stream.read())

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    result = cli("audit", SAMPLE_TRACES, "--format", "json", "-o", fifo)
    reader.join(10)
    if reader.is_alive():  # the command did not open the pipe: let the reader go
        # Without blocking: a reader that finished meanwhile would leave this open waiting.
        with contextlib.suppress(OSError):
            os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
        reader.join(10)
    assert result.exit_code == 1
    assert fifo.is_fifo()
    assert json.loads(got[0])["schema_version"] == 1


@pytest.mark.skipif(sys.platform == "win32", reason="RLIMIT_FSIZE is POSIX")
def test_a_report_file_that_runs_out_of_room_is_named_and_no_earlier_one_stays(tmp_path: Path):
    """-o on a full disk said `cannot write a temporary file` and told to move --db or
    $TMPDIR, neither of which the report is written to. The earlier report is not left for
    a later step to read as this run's."""
    target = tmp_path / "audit.json"
    target.write_text("the report of yesterday\n")
    # The JSON report of the sample traces takes 8 KB; what the audit stages, less.
    result = run_writing_at_most(6000, "audit", SAMPLE_TRACES, "-f", "json", "-o", target)
    assert result.returncode == 2, result.stderr
    assert result.stderr.splitlines() == [
        f"Removed {target}, an earlier run's report: this run wrote none",
        f"Error: cannot write {target}: File too large",
        f"Hint: free space (or raise the quota or file size limit) where {target} is, or pass"
        " -o a file on another disk, then run the command again",
    ]
    assert list(tmp_path.iterdir()) == []


@pytest.mark.skipif(not Path("/dev/full").exists(), reason="no /dev/full")
@pytest.mark.parametrize(
    "args",
    [
        ("audit", SAMPLE_TRACES, "-f", "json"),
        ("extract", "refund order #W2378156"),
        ("stats", "--format", "json"),
        ("show", "support-4471"),
        ("context", "support-4471", "--budget-bytes", "8000"),
    ],
    ids=lambda args: args[0],
)
def test_standard_output_on_a_full_disk_is_named(cli, tmp_path: Path, args):
    """`lexkeep stats > stats.json` on a full disk blamed only a temporary file, and told to
    move --db, which it does not write."""
    db = tmp_path / "traces.duckdb"
    assert cli("ingest", SAMPLE_TRACES, "--db", db).exit_code == 0
    store = () if args[0] in ("audit", "extract") else ("--db", db)
    with open("/dev/full", "w") as full:
        result = subprocess.run(
            [sys.executable, "-m", "lexkeep.cli.main", *map(str, args), *map(str, store)],
            stdout=full,
            stderr=subprocess.PIPE,
            text=True,
            timeout=120,
        )
    assert result.returncode == 2, result.stderr
    temp = tempfile.gettempdir()
    assert result.stderr.splitlines() == [
        f"Error: cannot write standard output or a temporary file in {temp}: No space left on"
        " device",
        "Hint: free space (or raise the quota or file size limit) where standard output goes"
        f" and in {temp}, or send standard output to another disk (and point $TMPDIR at one),"
        " then run the command again: what was stored before stays",
    ]


def test_reports_are_utf8_whatever_the_locale_says(cli, tmp_path: Path):
    """With standard output in a legacy encoding (a Windows runner writing to
    $GITHUB_STEP_SUMMARY, a Latin-1 locale) a trace named `ünï.jsonl`, a conversation title
    or the Markdown verdict's mark stopped every report with `internal error:
    UnicodeEncodeError`; JSON, JUnit and Markdown are UTF-8 by definition."""
    trace = tmp_path / "ünï.jsonl"
    trace.write_bytes((SAMPLE_TRACES / "invoice_altered.jsonl").read_bytes())
    db = tmp_path / "traces.duckdb"
    assert cli("ingest", trace, "--db", db).exit_code == 0
    env = {k: v for k, v in os.environ.items() if not k.startswith("LEXKEEP_")}
    env["PYTHONIOENCODING"] = "ascii"

    def run(*args: str | Path) -> subprocess.CompletedProcess:
        return subprocess.run(
            [sys.executable, "-m", "lexkeep.cli.main", *map(str, args)],
            capture_output=True,
            env=env,
            timeout=120,
        )

    out = {}
    for fmt in ("table", "json", "junit", "github", "markdown", "html"):
        result = run("audit", trace, "--format", fmt)
        assert result.returncode == 1, (fmt, result.stderr)
        assert "ünï.jsonl".encode() in result.stdout, fmt
        out[fmt] = result.stdout.decode("utf-8")
    assert out["markdown"].startswith("## ❌ lexkeep audit")
    report = json.loads(out["json"])
    assert report["findings"][0]["message"]["file"] == str(trace)
    for args in (("show", "support-4471"), ("stats",), ("show", "support-4471", "-f", "json")):
        result = run(*args, "--db", db)
        assert result.returncode == 0, (args, result.stderr)
        assert "internal error" not in result.stderr.decode()
    guard = run("guard", "support-4471", '{"invoice_id": "INV-2025-08-4471"}', "--db", db)
    assert guard.returncode == 1, guard.stderr
    assert "— nearest known 'INV-2025-08-44719'" in guard.stdout.decode("utf-8")
    failed = run("audit", tmp_path / "nö.jsonl")  # the error line names the file as it is
    assert failed.stderr.decode("utf-8").startswith(f"Error: {tmp_path / 'nö.jsonl'}: no such")


def test_a_trace_that_may_not_be_read_is_named_as_such(tmp_path: Path):
    """An audit of one unreadable lexkeep file said `cannot write FILE` and told to make the
    store's folder writable."""
    cli = bound_cli(tmp_path)
    trace = tmp_path / "story.jsonl"
    trace.write_bytes((SAMPLE_TRACES / "invoice_altered.jsonl").read_bytes())
    trace.chmod(0)
    for args in (("audit", trace), ("ingest", trace, "--db", tmp_path / "t.duckdb")):
        result = cli(*args)
        assert result.exit_code == 2, result.stderr
        assert result.stderr.splitlines() == [
            f"Error: {trace}: cannot open: Permission denied",
            "Hint: make the file readable, or leave it out of the paths given",
        ]


def test_a_folder_that_may_not_be_read_is_never_passed_over_in_silence(tmp_path: Path):
    """A subfolder the audit could not read was skipped without a word, so the gate passed
    on traces it never read; naming the folder itself said `no trace files`, and a glob into
    it `cannot write`."""
    cli = bound_cli(tmp_path)
    traces = tmp_path / "traces"
    (traces / "open").mkdir(parents=True)
    (traces / "locked").mkdir()
    shutil.copy(SAMPLE_TRACES / "codex_kept_verbatim.jsonl", traces / "open")
    shutil.copy(SAMPLE_TRACES / "invoice_altered.jsonl", traces / "locked")
    (traces / "locked").chmod(0)
    try:
        for args in (("audit", traces), ("ingest", traces, "--db", tmp_path / "t.duckdb")):
            result = cli(*args)
            assert result.exit_code == 0, result.stderr
            assert (
                f"Warning: {traces / 'locked'}: skipped, a folder that cannot be read"
                " (Permission denied)"
            ) in result.stderr.splitlines()
        hints = (
            "Hint: make it (and the folders above it) readable, or leave it out of the paths given",
            f"Hint: make the folder {traces / 'locked'} readable and searchable (its r and x"
            " permissions): nothing in it can be reached without it; or leave it out of the"
            " paths given",
        )
        cases = (
            (traces / "locked", "cannot read the folder", hints[0]),
            (traces / "locked" / "*.jsonl", "cannot read", hints[1]),
        )
        for given, what, hint in cases:
            result = cli("audit", given)
            assert result.exit_code == 2, result.stderr
            assert result.stderr.splitlines() == [
                f"Error: {given}: {what}: Permission denied",
                hint,
            ]
    finally:
        (traces / "locked").chmod(0o755)


@pytest.mark.parametrize(
    "args", [("audit", "no-such-folder"), ("stats", "--db", "no-such.duckdb")], ids=str
)
def test_an_error_whose_stderr_reader_is_gone_still_exits_2(tmp_path: Path, args):
    """`lexkeep audit traces/ 2>&1 | head -0`: the error line could not be written to the
    closed pipe, and the command exited 1, the gate's failure, instead of 2."""
    read, write = os.pipe()
    os.close(read)
    try:
        run = subprocess.run(
            [sys.executable, "-m", "lexkeep.cli.main", *args],
            cwd=tmp_path,
            stdout=subprocess.PIPE,
            stderr=write,
            timeout=120,
        )
    finally:
        os.close(write)
    assert run.returncode == 2


def _typed_at_a_terminal(args: tuple[str, ...], cwd: Path, typed: bytes) -> tuple[int, str]:
    """Run `lexkeep ARGS` with a terminal as standard input, type `typed` into it; its exit
    code and standard error (it must end within a minute: not wait for more input)."""
    import pty

    leader, follower = pty.openpty()
    try:
        proc = subprocess.Popen(
            [sys.executable, "-m", "lexkeep.cli.main", *args],
            cwd=cwd,
            stdin=follower,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        os.write(leader, typed)
        try:
            _, err = proc.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()  # still waiting for more input
            raise
    finally:
        os.close(follower)
        os.close(leader)
    return proc.returncode, err


@pytest.mark.parametrize(
    "args",
    [("extract", "-"), ("audit", "-"), ("ingest", "-", "--db", "t.duckdb")],
    ids=lambda args: args[0],
)
def test_a_dash_read_from_a_terminal_says_it_waits_for_typed_input(tmp_path: Path, args):
    """`lexkeep extract -` typed at a terminal sat silent (or under a progress bar at 0
    bytes) until Ctrl-D: it now says it reads what is typed, and how to end it."""
    _, err = _typed_at_a_terminal(args, tmp_path, b"\x04")  # Ctrl-D at once: nothing typed
    assert err.splitlines()[0] == (
        "Reading standard input from the terminal: type or paste, then Ctrl-D on a line of"
        " its own (to read a file, name it instead of -)"
    ), err


def test_a_trace_typed_at_a_terminal_is_read_after_one_ctrl_d(cli, tmp_path: Path):
    """Ctrl-D at a terminal ends one read, not the input: `lexkeep ingest -` read the first
    bytes, then waited for a second Ctrl-D before it went on."""
    line = (SAMPLE_TRACES / "invoice_altered.jsonl").read_bytes().splitlines()[1]
    code, err = _typed_at_a_terminal(
        ("ingest", "-", "--db", "t.duckdb"), tmp_path, line + b"\n\x04"
    )
    assert code == 0, err
    stats = json.loads(cli("stats", "--db", tmp_path / "t.duckdb", "-f", "json").stdout)
    assert stats["totals"]["messages"] == 1


@pytest.mark.skipif(sys.platform in ("win32", "darwin"), reason="file names there are text")
def test_a_trace_whose_file_name_is_not_utf8_is_named_and_refused(cli, tmp_path: Path):
    """A file named in Latin-1 (an archive from another machine) stopped the audit and the
    ingest with `internal error: ... surrogate '\\udcff' ... is not allowed`."""
    folder = tmp_path / "traces"
    folder.mkdir()
    name = os.fsencode(folder) + b"/r\xe9sum\xe9.jsonl"
    with open(name, "wb") as out:
        out.write((SAMPLE_TRACES / "invoice_altered.jsonl").read_bytes())
    db = tmp_path / "t.duckdb"
    for args in (("audit", folder), ("audit", os.fsdecode(name)), ("ingest", folder, "--db", db)):
        result = cli(*args)
        assert result.exit_code == 2, result.stderr
        assert result.stderr.splitlines() == [
            f"Error: {folder}/r\\xe9sum\\xe9.jsonl: the file name is not UTF-8 text: no"
            " report or store could name it",
            "Hint: rename it to UTF-8 (convmv -f latin1 -t utf-8 --notest FILE does), or leave"
            " it out of the paths given",
        ]
    assert not db.exists()


@pytest.mark.skipif(sys.platform == "win32", reason="POSIX file descriptors")
@pytest.mark.parametrize(
    "args",
    [("extract", "-"), ("audit", "-"), ("ingest", "-", "--db", "t.duckdb"), ("guard", "c", "-")],
    ids=lambda args: args[0],
)
def test_dash_with_standard_input_closed_is_a_clear_error(tmp_path: Path, args):
    """`lexkeep audit - <&-` (a job started with standard input closed) crashed with
    `internal error: AttributeError: 'NoneType' object has no attribute 'buffer'`."""
    run = subprocess.run(
        [sys.executable, "-m", "lexkeep.cli.main", *args],
        cwd=tmp_path,
        preexec_fn=lambda: os.close(0),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert run.returncode == 2, run.stderr
    assert run.stderr.splitlines()[-2:] == [
        "Error: -: standard input is closed: there is nothing to read",
        "Hint: pipe the input into the command (... | lexkeep ... -), or name a file instead of -",
    ]


@pytest.mark.skipif(sys.platform == "win32", reason="POSIX file descriptors")
@pytest.mark.parametrize(
    ("closed", "args", "code"),
    [
        (1, ("audit", SAMPLE_TRACES), 1),
        (1, ("audit", SAMPLE_TRACES, "-f", "json"), 1),
        (2, ("ingest", SAMPLE_TRACES, "--db", "t.duckdb"), 0),
        (2, ("audit", SAMPLE_TRACES), 1),
    ],
    ids=["stdout-table", "stdout-json", "stderr-ingest", "stderr-audit"],
)
def test_a_closed_standard_output_or_error_does_not_decide_the_exit(
    tmp_path: Path, closed, args, code
):
    """Started with standard output or error closed (`>&-`, pythonw), the audit crashed with
    `internal error: AttributeError` (exit 2, not its verdict) and a whole ingest exited 1."""
    run = subprocess.run(
        [sys.executable, "-m", "lexkeep.cli.main", *map(str, args)],
        cwd=tmp_path,
        preexec_fn=lambda: os.close(closed),
        stdout=subprocess.DEVNULL if closed == 2 else None,
        stderr=subprocess.PIPE if closed == 1 else None,
        timeout=120,
    )
    assert run.returncode == code, run.stderr
    if args[0] == "ingest":
        with Store.open(tmp_path / "t.duckdb", read_only=True) as store:
            assert store.con.execute("SELECT count(*) FROM messages").fetchone() == (25,)


def test_what_sits_in_a_folder_that_may_not_be_searched_is_read_not_written(tmp_path: Path):
    """A store or trace in a folder that may be listed but not searched (mode 600) said
    `cannot write FILE` and told to make the store's folder writable, though the command
    only read it; `-o` into it gave the store's hint."""
    prefix = permission_bound()
    shut = tmp_path / "shut"
    shut.mkdir()
    store, trace = shut / "t.duckdb", shut / "story.jsonl"
    shutil.copy(SAMPLE_TRACES / "invoice_altered.jsonl", trace)
    lexkeep = [*prefix, sys.executable, "-m", "lexkeep.cli.main"]

    def run(*args: object) -> list[str]:
        done = subprocess.run(
            [*lexkeep, *map(str, args)], cwd=tmp_path, capture_output=True, text=True,
            timeout=120,
        )  # fmt: skip
        assert done.returncode == 2, done.stderr
        return done.stderr.splitlines()

    ingested = subprocess.run([*lexkeep, "ingest", trace, "--db", store], capture_output=True)
    assert ingested.returncode == 0, ingested.stderr
    shut.chmod(0o600)
    try:
        for command in ("stats", "audit", "compactions"):
            assert run(command, "--db", store) == [
                f"Error: cannot read {store}: Permission denied",
                f"Hint: make the folder {shut} searchable (its x permission): nothing in it can"
                " be reached without it",
            ]
        for given, named in ((shut, trace), (shut / "*.jsonl", shut / "*.jsonl")):
            assert run("audit", given) == [
                f"Error: {named}: cannot read: Permission denied",
                f"Hint: make the folder {shut} searchable (its x permission): nothing in it can"
                " be reached without it; or leave it out of the paths given",
            ]
        assert run("audit", SAMPLE_TRACES / "invoice_altered.jsonl", "-o", shut / "r.txt") == [
            f"Error: cannot write {shut / 'r.txt'}: Permission denied",
            "Hint: make the folders above it searchable and its own folder writable, or pass -o"
            " another path",
        ]
    finally:
        shut.chmod(0o755)


def test_a_store_in_a_folder_that_may_not_be_searched_asks_for_search_permission(
    tmp_path: Path,
) -> None:
    """`ingest --db` into a folder that may be read and written but not searched (mode 600)
    said `cannot write` and asked for the folder to be made writable, which it was; compact
    and extract --db said `cannot write` with the hint of another failure."""
    cli = bound_cli(tmp_path)
    shut = tmp_path / "shut"
    shut.mkdir()
    store = shut / "t.duckdb"
    assert cli("ingest", SAMPLE_TRACES, "--db", store).exit_code == 0
    (tmp_path / "deep" / "inner").mkdir(parents=True)
    shut.chmod(0o600)
    (tmp_path / "deep").chmod(0o600)
    try:
        cases = (
            (("ingest", SAMPLE_TRACES, "--db", store), store, shut),
            (("ingest", SAMPLE_TRACES, "--db", shut / "new.duckdb"), shut / "new.duckdb", shut),
            (("compact", "--db", store), store, shut),
            (("extract", "--db", store), store, shut),
            (("ingest", SAMPLE_TRACES, "--db", tmp_path / "deep" / "inner" / "n.duckdb"),
             tmp_path / "deep" / "inner" / "n.duckdb", tmp_path / "deep"),
        )  # fmt: skip
        for args, db, blocked in cases:
            result = cli(*args)
            assert result.exit_code == 2, result.stderr
            assert result.stderr.splitlines()[-2:] == [
                f"Error: cannot open {db}: Permission denied",
                f"Hint: make the folder {blocked} searchable (its x permission): nothing in it"
                " can be reached without it; a store is written with"
                f" {db.name}.wal beside it, so {db.parent} must be writable too",
            ], args
    finally:
        shut.chmod(0o755)
        (tmp_path / "deep").chmod(0o755)


def test_settings_above_a_folder_that_may_not_be_searched_do_not_stop_a_command(
    tmp_path: Path,
) -> None:
    """Run from a folder whose parent may not be searched (another user's home), every
    command failed with `cannot write .../lexkeep.toml` while looking for settings."""
    prefix = permission_bound()
    home = tmp_path / "home"
    work = home / "work"
    work.mkdir(parents=True)
    shutil.copy(SAMPLE_TRACES / "invoice_altered.jsonl", work / "t.jsonl")
    (tmp_path / "lexkeep.toml").write_text("[audit]\nmin_ratio = 0.0\n")
    home.chmod(0o600)
    try:
        done = subprocess.run(
            [*prefix, sys.executable, "-m", "lexkeep.cli.main", "audit", "t.jsonl"],
            cwd=work, capture_output=True, text=True, timeout=120,
        )  # fmt: skip
    finally:
        home.chmod(0o755)
    assert done.stderr.splitlines()[0] == (
        f"Warning: {home} may not be searched: lexkeep.toml or pyproject.toml in it or below"
        " it is not looked for (Permission denied)"
    )
    # The settings above it are found and applied: min_ratio 0 lets the audit pass.
    assert done.returncode == 0, done.stderr


def test_a_report_into_a_folder_that_may_not_be_written_says_so(tmp_path: Path) -> None:
    """`-o` into a folder that exists but may not be written told to create the folder."""
    cli = bound_cli(tmp_path)
    locked = tmp_path / "locked"
    locked.mkdir()
    locked.chmod(0o555)
    try:
        result = cli("audit", SAMPLE_TRACES / "invoice_altered.jsonl", "-o", locked / "r.txt")
    finally:
        locked.chmod(0o755)
    assert result.exit_code == 2, result.stderr
    assert result.stderr.splitlines() == [
        f"Error: cannot write {locked / 'r.txt'}: Permission denied",
        f"Hint: make the folder {locked} writable, or pass -o another path",
    ]


def test_a_write_ahead_log_that_may_not_be_read_is_named(tmp_path: Path) -> None:
    """A store whose `.wal` (left by a writer that stopped before closing it) may not be read
    asked for the store itself, readable already, to be made readable."""
    cli = bound_cli(tmp_path)
    store = tmp_path / "t.duckdb"
    assert cli("ingest", SAMPLE_TRACES, "--db", store).exit_code == 0
    wal = tmp_path / "t.duckdb.wal"
    wal.write_bytes(b"")
    wal.chmod(0)
    for args in (("stats",), ("ingest", SAMPLE_TRACES)):
        result = cli(*args, "--db", store)
        assert result.exit_code == 2, result.stderr
        assert result.stderr.splitlines()[-1] == (
            f"Hint: make {wal} readable (and writable, for ingest, compact and extract --db):"
            " it is the store's write-ahead log, left by a process that stopped before"
            " closing the store"
        ), args


def test_a_rules_file_that_may_not_be_read_says_what_to_do(tmp_path: Path) -> None:
    """`--rules FILE` that may not be read, or in a folder that may not be searched, said only
    `cannot read rules: Permission denied`, with no hint."""
    cli = bound_cli(tmp_path)
    shut = tmp_path / "shut"
    shut.mkdir()
    locked, hidden = tmp_path / "locked.toml", shut / "rules.toml"
    for rules in (locked, hidden):
        rules.write_text("[identifiers]\n")
    locked.chmod(0)
    shut.chmod(0o600)
    try:
        results = [
            cli("audit", SAMPLE_TRACES / "invoice_altered.jsonl", "--rules", rules)
            for rules in (locked, hidden)
        ]
    finally:
        shut.chmod(0o755)
    assert [r.stderr.splitlines() for r in results] == [
        [f"Error: {locked}: cannot read rules: Permission denied", f"Hint: make {locked} readable"],
        [
            f"Error: {hidden}: cannot read rules: Permission denied",
            f"Hint: make the folder {shut} searchable (its x permission): nothing in it can be"
            " reached without it",
        ],
    ]


def test_a_report_onto_a_file_that_may_not_be_written_leaves_it_as_it_was(tmp_path: Path) -> None:
    """`-o FILE` onto an existing read-only file replaced it: the report is written to a
    temporary file renamed over FILE, which its folder allows whatever FILE's own permissions
    say. It is refused now, FILE untouched; a writable file is still replaced, keeping its
    permissions. (As root, in a process without the capabilities that pass over permissions.)"""
    cli = bound_cli(tmp_path)
    trace = SAMPLE_TRACES / "invoice_altered.jsonl"
    report = tmp_path / "report.json"
    report.write_text("the last release's report\n")
    report.chmod(0o444)
    result = cli("audit", trace, "-f", "json", "-o", report)
    assert result.exit_code == 2, result.stderr
    assert result.stderr.splitlines() == [
        f"Error: cannot write {report}: Permission denied",
        f"Hint: make {report} writable, or pass -o another path",
    ]
    assert report.read_text() == "the last release's report\n"
    assert oct(report.stat().st_mode & 0o777) == oct(0o444)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["report.json"]
    # A file that may be written is replaced, and keeps its mode (no report readable by all
    # where the file before it was not).
    report.chmod(0o600)
    result = cli("audit", trace, "-f", "json", "-o", report)
    assert result.exit_code == 1, result.stderr
    assert json.loads(report.read_text())["totals"]["audited"] > 0
    assert oct(report.stat().st_mode & 0o777) == oct(0o600)


def test_an_unforeseen_refusal_says_what_the_command_was_doing(tmp_path: Path) -> None:
    """A refusal no check foresaw said only `cannot access PATH`: here the lexkeep.toml beside
    the traces is a link into a folder that may not be searched, met while looking for the
    settings. The error says what was being done, and names the folder that blocks."""
    cli = bound_cli(tmp_path / "work")
    (tmp_path / "work").mkdir()
    shut = tmp_path / "shut"
    shut.mkdir()
    (shut / "lexkeep.toml").write_text("[audit]\nmin_ratio = 0.0\n")
    settings = tmp_path / "work" / "lexkeep.toml"
    settings.symlink_to(shut / "lexkeep.toml")
    shut.chmod(0o600)
    try:
        result = cli("audit", SAMPLE_TRACES / "invoice_altered.jsonl")
    finally:
        shut.chmod(0o755)
    assert result.exit_code == 2, result.stderr
    assert result.stderr.splitlines() == [
        f"Error: cannot access {settings} while reading settings: Permission denied",
        f"Hint: make the folder {shut} searchable (its x permission): nothing in it can be"
        " reached without it",
    ]


def test_audit_output_that_cannot_be_written_is_refused_before_the_traces_are_read(
    cli, tmp_path: Path
):
    """`-o reports/audit.json` in a CI job whose `reports/` was never made: the whole audit ran
    (20 s and more on a big dump) before the write failed. The folder is looked at first, so
    the error is about it even when a trace would have failed later (here a bad line)."""
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"type": "conversation", "id": "c1"}\n{"type": "message", oops\n')
    for target, error, hint in (
        (
            tmp_path / "reports" / "audit.json",
            "No such file or directory",
            "create the folder first, or pass -o a writable path",
        ),
        (tmp_path, "it is a folder", "-o takes a file name"),
    ):
        result = cli("audit", bad, "-o", target)
        assert result.exit_code == 2, result.stderr
        assert result.stderr == f"Error: cannot write {target}: {error}\nHint: {hint}\n"
        result = cli("audit", bad, "-o", target, "--format", "github")
        assert result.stdout.startswith("::error title=lexkeep audit could not run::cannot write")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bad.jsonl"]


STALE = "the report of an earlier run\n"


@pytest.mark.parametrize("fmt", ["json", "junit", "github", "markdown", "html", "table"])
def test_a_failed_audit_leaves_no_earlier_report_at_its_output_path(cli, tmp_path: Path, fmt):
    """`lexkeep audit traces/ -o report.json` that failed (a bad trace line, a store that is
    not one, a bad setting) left the previous run's report at report.json: a CI step reading
    it without the exit code read an old gate. The earlier report is removed once the audit
    starts, and stderr says so; a run that succeeds still replaces the file."""
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"type": "conversation", "id": "c1"}\n{"type": "message", oops\n')
    not_a_store = tmp_path / "not.duckdb"
    not_a_store.write_text("not a store\n")
    target = tmp_path / f"report.{fmt}"
    for args, env in (
        (("audit", bad), None),
        (("audit", "--db", not_a_store), None),
        (("audit", SAMPLE_TRACES), {"LEXKEEP_MIN_RATIO": "98%"}),
    ):
        target.write_text(STALE)
        result = cli(*args, "-f", fmt, "-o", target, env=env)
        assert result.exit_code == 2, result.stderr
        assert not target.exists(), (args, target.read_text())
        assert result.stderr.splitlines()[0] == (
            f"Removed {target}, an earlier run's report: this run wrote none"
        ), result.stderr
        assert sorted(p.name for p in tmp_path.iterdir()) == ["bad.jsonl", "not.duckdb"]
    # Nothing stood there: nothing to say beyond the error.
    result = cli("audit", bad, "-f", fmt, "-o", target)
    assert result.exit_code == 2
    assert "Removed" not in result.stderr and not target.exists()
    # A run that succeeds replaces the earlier report, as before.
    target.write_text(STALE)
    result = cli("audit", SAMPLE_TRACES, "-f", fmt, "-o", target)
    assert result.exit_code == 1, result.stderr
    assert target.read_text() != STALE and "Removed" not in result.stderr


@pytest.mark.skipif(sys.platform == "win32", reason="POSIX signals")
@pytest.mark.parametrize("sig", ["SIGINT", "SIGTERM"])
def test_an_audit_stopped_midway_leaves_no_earlier_report(tmp_path: Path, sig: str):
    """Ctrl-C (or a cancelled CI job's SIGTERM) during `audit ... -o report.json` left the
    previous run's report in place; it is removed when the audit starts."""
    import signal
    import time

    target = tmp_path / "report.json"
    target.write_text(STALE)
    # Standard input stays open: the audit waits on it until it is stopped.
    proc = subprocess.Popen(
        [sys.executable, "-m", "lexkeep.cli.main", "audit", "-", "-o", str(target)],
        stdin=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 30
        while target.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        time.sleep(0.2)  # the audit is reading standard input by now
        proc.send_signal(getattr(signal, sig))
        err = proc.communicate(timeout=60)[1]
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == (130 if sig == "SIGINT" else 143), err
    assert not target.exists()
    assert err.splitlines()[-2:] == [
        f"Removed {target}, an earlier run's report: this run wrote none",
        "Interrupted.",
    ], err
