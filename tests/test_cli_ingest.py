"""CLI: lexkeep ingest / stats / show with CliRunner against real DuckDB files."""

from __future__ import annotations

import gzip
import json
import sys
from pathlib import Path

import pytest
from conftest import bound_cli, on_terminal, run_writing_at_most, shared_data

from lexkeep.core.controls import first_control

FIXTURES = Path(__file__).resolve().parent / "fixtures"
INVOICE = FIXTURES / "lexkeep" / "invoice.jsonl"
SAMPLE_TRACES = Path(__file__).resolve().parent.parent / "sample_traces"


def ok(result):
    assert result.exit_code == 0, result.stderr
    return result


def test_ingest_prints_one_summary_line_per_file(cli, db_file):
    result = ok(cli("ingest", FIXTURES / "lexkeep", FIXTURES / "openai", "--db", db_file))
    assert result.stdout == ""  # summaries go to stderr
    lines = result.stderr.splitlines()
    invoice = next(line for line in lines if line.startswith(str(INVOICE)))
    assert invoice == (
        f"{INVOICE}: ingested (lexkeep) 1 conversation, 7 messages, 3 tool calls, "
        f"1 boundary, 5 identifiers; skipped unknown_type=1 (first unknown_type: {INVOICE}:8)"
    )
    assert lines[-1].startswith("5 files: 5 ingested, 0 unchanged, 0 not traces;")
    again = ok(cli("ingest", INVOICE, "--db", db_file))
    assert "unchanged (lexkeep), nothing added" in again.stderr


def test_stats_json(cli, db_file):
    ok(cli("ingest", FIXTURES / "lexkeep", FIXTURES / "anthropic", "--db", db_file))
    report = json.loads(ok(cli("stats", "--db", db_file, "--format", "json")).stdout)
    assert report["schema_version"] == 1
    per = {f["format"]: f for f in report["formats"]}
    assert per["lexkeep"]["conversations"] == 2
    assert per["lexkeep"]["conversations_with_boundaries"] == 1
    assert per["lexkeep"]["tool_calls"] == 3
    assert per["anthropic"]["boundaries"] == 2
    assert report["totals"]["messages"] == 7 + 4 + 4 + 4
    assert report["files_ingested"] == 4 and report["ingest_errors"] == 0
    text = ok(cli("stats", "--db", db_file)).stdout
    assert "lexkeep" in text and "anthropic" in text and "ingest errors: 0" in text
    # -f is --format on every command that prints a report
    assert json.loads(ok(cli("stats", "--db", db_file, "-f", "json")).stdout) == report


def test_stats_names_the_first_message_whose_scan_is_incomplete(cli, tmp_path, db_file):
    """`stats` said how many identifier scans were incomplete but not where: it now names
    the first such message (FILE:LINE), as the audit's notes name theirs."""

    def line(**fields: object) -> str:
        return json.dumps(fields) + "\n"

    long_text = "ORD_88412 " + "word " * 50_000  # past the rules' max_chars: scanned in part
    a, b = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    a.write_text(
        line(type="message", id="a1", conversation_id="c1", role="user", text="INV-7 please")
        + line(type="message", id="a2", conversation_id="c1", role="user", text=long_text)
    )
    b.write_text(line(type="message", id="b1", conversation_id="c2", role="user", text=long_text))
    ok(cli("ingest", b, a, "--db", db_file))
    report = json.loads(ok(cli("stats", "--db", db_file, "--format", "json")).stdout)
    assert report["incomplete_scans"] == 2
    assert report["first_incomplete_scan"] == f"{a}:2"
    text = ok(cli("stats", "--db", db_file)).stdout
    assert f"incomplete identifier scans: 2 (first: {a}:2)" in text


def test_stats_names_the_first_invalid_line_skipped(cli, tmp_path, db_file):
    """`stats` counted the lines --skip-invalid skipped per reason but not where: it now names
    the first (FILE:LINE), apart from the records left out for their id, which have their
    own line."""
    lines = INVOICE.read_text().splitlines(keepends=True)
    bad = tmp_path / "bad.jsonl"
    bad.write_text("".join(lines[:2]) + "{broken\n" + "".join(lines[2:]) + "[1]\n")
    ok(cli("ingest", bad, "--skip-invalid", "--db", db_file))
    report = json.loads(ok(cli("stats", "--db", db_file, "--format", "json")).stdout)
    assert report["errors_by_reason"] == {"invalid_json": 1, "not_an_object": 1}
    assert (report["invalid_lines"], report["first_invalid_line"]) == (2, f"{bad}:3")
    text = ok(cli("stats", "--db", db_file)).stdout
    assert f"invalid lines skipped (--skip-invalid): 2 (first: {bad}:3)" in text


def test_show_text_and_json(cli, db_file):
    ok(cli("ingest", INVOICE, "--db", db_file))
    text = ok(cli("show", "c-inv", "--db", db_file)).stdout
    assert "Please look up invoice INV-2025-08-44719 for account acct_7731." in text
    assert "tool call lookup_invoice (call_1)" in text
    assert '{"invoice_id":"INV-2025-08-44719"}' in text
    assert "compaction boundary (local, auto)" in text
    assert "summary: User disputes an open invoice of $412.00." in text
    assert "tool result error (call_2)" in text
    data = json.loads(ok(cli("show", "c-in", "--db", db_file, "--format", "json")).stdout)
    assert data["id"] == "c-inv" and data["title"] == "Invoice dispute"
    types = [e["type"] for e in data["entries"]]
    assert types.count("message") == 7 and types.count("boundary") == 1
    assert [e["position"] for e in data["entries"]] == list(range(13))
    assert data["runs"]["m7/run"] == "running"


def test_bad_line_exit_2_with_location_and_hint(cli, db_file, tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_text(INVOICE.read_text().replace('"id":"m4"', '"id":m4', 1))
    result = cli("ingest", bad, "--db", db_file)
    assert result.exit_code == 2, result.stderr
    first, hint = result.stderr.splitlines()[-2:]
    assert first.startswith(f"Error: {bad}:7:") and "invalid JSON" in first
    assert hint.startswith("Hint:") and "--skip-invalid" in hint
    skipped = ok(cli("ingest", bad, "--db", db_file, "--skip-invalid"))
    # where the first skipped line is, so it can be opened and fixed
    assert (
        f"skipped invalid_json=1, unknown_type=1 (first invalid: {bad}:7;"
        f" first unknown_type: {bad}:8)"
    ) in skipped.stderr
    report = json.loads(ok(cli("stats", "--db", db_file, "--format", "json")).stdout)
    assert report["errors_by_reason"] == {"invalid_json": 1}


def test_files_stored_before_a_bad_one_get_their_lines(cli, db_file, tmp_path):
    """The files before a bad one stay stored: the user must see which (the lines were lost)."""
    folder = tmp_path / "traces"
    folder.mkdir()
    (folder / "a.jsonl").write_text(INVOICE.read_text())
    (folder / "b.jsonl").write_text(INVOICE.read_text().replace('"id":"m4"', '"id":m4', 1))
    result = cli("ingest", folder, "--db", db_file)
    assert result.exit_code == 2, result.stderr
    lines = result.stderr.splitlines()
    assert lines[0].startswith(f"{folder / 'a.jsonl'}: ingested (lexkeep) 1 conversation,")
    assert lines[-2].startswith(f"Error: {folder / 'b.jsonl'}:7:")
    report = json.loads(ok(cli("stats", "--db", db_file, "--format", "json")).stdout)
    assert report["files_ingested"] == 1


def test_an_ingest_stopped_by_a_bad_file_says_what_it_stored_as_ctrl_c_does(cli, db_file, tmp_path):
    """A bad line stops the ingest after the files before it were stored, and the log said
    nothing of them: no total line (with --quiet, the only line an ingest prints), so a CI
    log showed an error and no sign that anything was stored. Ctrl-C already said it."""
    folder = tmp_path / "traces"
    folder.mkdir()
    (folder / "a.jsonl").write_text(INVOICE.read_text())
    (folder / "b.jsonl").write_text(INVOICE.read_text().replace('"id":"m4"', '"id":m4', 1))
    result = cli("ingest", folder, "--db", db_file, "--quiet")
    assert result.exit_code == 2, result.stderr
    lines = result.stderr.splitlines()
    assert lines[0].startswith("1 file: 1 ingested, 0 unchanged, 0 not traces; 7 messages"), lines
    assert lines[1] == (
        "stopped: the files above were stored before the error below; ingest again once it is"
        " fixed (stored files are not read twice)"
    )
    assert lines[2].startswith(f"Error: {folder / 'b.jsonl'}:7:") and len(lines) == 4, lines
    # a bad first file: nothing stored, nothing to say but the error
    bad_only = tmp_path / "bad.jsonl"
    bad_only.write_text((folder / "b.jsonl").read_text())
    result = cli("ingest", bad_only, "--db", tmp_path / "other.duckdb", "--quiet")
    assert result.exit_code == 2 and result.stderr.startswith("Error: "), result.stderr
    assert not (tmp_path / "other.duckdb").exists()


def test_stdin_twice_adds_nothing(cli, db_file):
    data = INVOICE.read_text()
    first = ok(cli("ingest", "-", "--db", db_file, input=data))
    assert "-: ingested (lexkeep)" in first.stderr
    second = ok(cli("ingest", "-", "--db", db_file, input=data))
    assert "-: unchanged" in second.stderr
    report = json.loads(ok(cli("stats", "--db", db_file, "--format", "json")).stdout)
    assert report["totals"]["messages"] == 7
    assert report["files_ingested"] == 1
    other = data.replace('"c-inv"', '"c-other"').replace('"id":"', '"id":"o-')
    ok(cli("ingest", "-", "--db", db_file, input=other))  # other bytes: another input
    report = json.loads(ok(cli("stats", "--db", db_file, "--format", "json")).stdout)
    assert report["files_ingested"] == 2


def test_gzip_on_stdin_is_decompressed(cli, db_file):
    import gzip

    packed = gzip.compress(INVOICE.read_bytes())
    first = ok(cli("ingest", "-", "--db", db_file, input=packed))
    assert "-: ingested (lexkeep) 1 conversation, 7 messages" in first.stderr
    again = ok(cli("ingest", "-", "--db", db_file, input=INVOICE.read_bytes()))
    assert "-: unchanged" in again.stderr  # the same bytes, once decompressed
    audit = cli("audit", "-", "--format", "json", input=packed)
    assert audit.exit_code in (0, 1), audit.stderr
    assert json.loads(audit.stdout)["totals"]["conversations"] == 1


def test_a_file_cut_in_its_last_line_names_that_line(cli, db_file, tmp_path):
    """The summary said a truncated last line was left for a later ingest, not which line: it
    now names it (FILE:LINE), as the audit's note does."""
    lines = INVOICE.read_text().splitlines(keepends=True)
    live = tmp_path / "live.jsonl"
    live.write_text("".join(lines[:4]) + lines[4][:30])
    result = ok(cli("ingest", live, "--db", db_file))
    assert (
        f"; truncated last line (file still being written?) left for a later ingest ({live}:5)"
    ) in result.stderr


def test_stdin_cut_in_its_last_line_is_an_error_not_a_line_left_for_later(cli, db_file):
    """A file's incomplete last line is read by a later ingest; a pipe is read once."""
    lines = INVOICE.read_text().splitlines(keepends=True)
    cut = "".join(lines[:4]) + lines[4][:30]
    result = cli("ingest", "-", "--db", db_file, input=cut)
    assert result.exit_code == 2, result.stderr
    assert "Error: -:5: the last line is incomplete" in result.stderr
    assert "--skip-invalid" in result.stderr
    skipped = ok(cli("ingest", "-", "--db", db_file, "--skip-invalid", input=cut))
    assert "skipped truncated_last_line=1" in skipped.stderr
    assert "left for a later ingest" not in skipped.stderr
    report = json.loads(ok(cli("stats", "--db", db_file, "--format", "json")).stdout)
    assert report["errors_by_reason"] == {"truncated_last_line": 1}


def test_show_unknown_conversation(cli, db_file):
    ok(cli("ingest", INVOICE, "--db", db_file))
    result = cli("show", "nope", "--db", db_file)
    assert result.exit_code == 2
    assert "Error: no conversation 'nope' in the store" in result.stderr


def test_show_without_a_conversation_lists_the_store_s_conversations(cli, db_file, tmp_path):
    """`context`, `guard` and `show` take a conversation id, and no command told what the ids
    were (an unknown one's hint named five): `lexkeep show` alone lists them all, one line
    each, with their counts, title and first line."""
    ok(cli("ingest", SAMPLE_TRACES, "--db", db_file))
    text = ok(cli("show", "--db", db_file)).stdout
    lines = text.splitlines()
    assert lines[0].split()[:2] == ["conversation", "format"], text
    rows = {line.split()[0]: line for line in lines[1:]}
    assert len(rows) == 4 and "support-4471" in rows, text
    invoice = rows["support-4471"].split()
    # id, format, messages, tool calls, boundaries, identifiers, then the title
    assert invoice[1:6] == ["lexkeep", "6", "3", "1", "1"], text
    assert "Duplicate charge on an invoice" in rows["support-4471"], text
    assert "sample_traces/invoice_altered.jsonl:1" not in text  # the place is in the JSON
    doc = json.loads(ok(cli("show", "--db", db_file, "--format", "json")).stdout)
    assert doc["schema_version"] == 1
    by_id = {c["id"]: c for c in doc["conversations"]}
    assert set(by_id) == set(rows)
    assert by_id["support-4471"] | {"source_file": None} == {
        "id": "support-4471",
        "format": "lexkeep",
        "title": "Duplicate charge on an invoice",
        "parent_id": None,
        "source_file": None,
        "source_line": 1,
        "messages": 6,
        "tool_calls": 3,
        "boundaries": 1,
        "identifiers": 1,
    }
    assert by_id["support-4471"]["source_file"].endswith("sample_traces/invoice_altered.jsonl")
    # each listed id is one `show` takes
    for conv in by_id:
        ok(cli("show", conv, "--db", db_file))
    # an unknown id's hint says where the full list is
    result = cli("context", "nope", "--budget-bytes", "900", "--db", db_file)
    assert result.exit_code == 2 and "lexkeep show --db" in result.stderr, result.stderr
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    store = tmp_path / "none.duckdb"
    ok(cli("ingest", empty, "--db", store))
    listed = ok(cli("show", "--db", store))
    assert listed.stdout == "" and "no conversations" in listed.stderr


def test_show_text_never_writes_a_trace_s_control_characters_to_the_terminal(
    cli, db_file, tmp_path
):
    """A trace holds whatever an agent read (a web page, a file): ESC sequences in a title or
    a message set the terminal's title, colours or worse when `show` printed them as they are.
    They are written as \\uXXXX, as the audit's reports write them; lines stay."""
    records = [
        {"type": "conversation", "id": "c\x1b[2J", "title": "\x1b[31mred\x1b[0m"},
        {
            "type": "message",
            "id": "m1",
            "conversation_id": "c\x1b[2J",
            "role": "user",
            "text": "see \x1b]0;pwned\x07 a\tb\nnext line",
        },
        {
            "type": "tool_call",
            "id": "k1",
            "conversation_id": "c\x1b[2J",
            "name": "f\x9b",
            "arguments": '{"a": "\\u001b[1m"}',
        },
    ]
    trace = tmp_path / "esc.jsonl"
    trace.write_text("".join(json.dumps(r) + "\n" for r in records))
    ok(cli("ingest", trace, "--db", db_file))
    out = ok(cli("show", "c", "--db", db_file)).stdout
    assert "\x1b" not in out and "\x9b" not in out and "\x07" not in out
    assert "conversation c\\u001b[2J" in out
    assert "title: \\u001b[31mred\\u001b[0m" in out
    assert "    see \\u001b]0;pwned\\u0007 a" in out and "b\n    next line" in out
    assert "tool call f\\u009b (k1)" in out
    # the JSON format is for programs: the values as stored
    doc = json.loads(ok(cli("show", "c", "--db", db_file, "--format", "json")).stdout)
    assert doc["title"] == "\x1b[31mred\x1b[0m"


def test_ingest_and_show_escape_bidi_overrides_and_hidden_characters(cli, db_file, tmp_path):
    """U+202E next to an identifier (Trojan Source) or in a file name reorders what a reader
    sees, and tag characters hide text: ingest's summary lines and `show` write them as
    \\uXXXX; `show --format json` too, as escapes that decode to the stored values."""
    title = "t\u202eitle\U000e0041"
    records = [
        {"type": "conversation", "id": "c", "title": title},
        {
            "type": "message",
            "id": "m1",
            "conversation_id": "c",
            "role": "user",
            "text": "pay \u202eINV-2025-08-44719\u202c\x9b today",
        },
    ]
    trace = tmp_path / "b\u202eidi\x1b[2J.jsonl"
    trace.write_text("".join(json.dumps(r) + "\n" for r in records))
    result = ok(cli("ingest", trace, "--db", db_file))
    assert first_control(result.stderr) is None, result.stderr
    assert "b\\u202eidi\\u001b[2J.jsonl: ingested" in result.stderr
    out = ok(cli("show", "c", "--db", db_file)).stdout
    assert first_control(out) is None, out
    assert "title: t\\u202eitle\\U000e0041" in out
    assert "pay \\u202eINV-2025-08-44719\\u202c\\u009b today" in out
    raw = ok(cli("show", "c", "--db", db_file, "--format", "json")).stdout
    assert first_control(raw) is None, raw
    assert json.loads(raw)["title"] == title


def test_an_error_naming_a_file_escapes_its_controls_and_bidi_overrides(cli, db_file, tmp_path):
    """`Error: FILE:LINE: ...` names the file as every other message does: its ESC sequence or
    U+202E shown as \\uXXXX, never written to the terminal."""
    trace = tmp_path / "x\u202e\x1b[2J.jsonl"
    trace.write_text(
        '{"type": "message", "id": "m1", "conversation_id": "c", "role": "user", '
        '"text": "a"}\n{not json\n'
    )
    result = cli("ingest", trace, "--db", db_file)
    assert result.exit_code == 2, result.stderr
    assert first_control(result.stderr) is None, result.stderr
    assert "x\\u202e\\u001b[2J.jsonl:2" in result.stderr


def test_unknown_output_and_input_formats(cli, db_file):
    assert cli("stats", "--db", db_file, "--format", "xml").exit_code == 2
    result = cli("ingest", INVOICE, "--db", db_file, "--input-format", "yaml")
    assert result.exit_code == 2 and "unknown format 'yaml'" in result.stderr
    # --format is still read as the input format on ingest (it was its first name)
    result = cli("ingest", INVOICE, "--db", db_file, "--format", "yaml")
    assert result.exit_code == 2 and "unknown format 'yaml'" in result.stderr


@pytest.mark.parametrize("name", ["json", "text", "table", "JSON"])
def test_ingest_format_named_as_an_output_format_says_what_format_means_there(cli, tmp_path, name):
    """Every other command's --format names its output, so `ingest --format json` is asking
    for a JSON report; the hint listed the trace formats only."""
    db = tmp_path / "t.duckdb"
    result = cli("ingest", INVOICE, "--db", db, "--format", name)
    assert result.exit_code == 2, result.stderr
    error, hint = result.stderr.splitlines()[:2]
    assert error == f"Error: unknown format {name!r}"
    assert hint == (
        "Hint: ingest's --format names the trace format (as --input-format): lexkeep, openai,"
        " codex, claude, anthropic; ingest prints no report: lexkeep stats --format json"
        " describes the store"
    )
    assert not db.exists()


@pytest.mark.parametrize("command", ["ingest", "stats", "show"])
def test_help_ends_with_an_example(cli, command):
    result = ok(cli(command, "--help"))
    assert f"Example: lexkeep {command}" in result.stdout


def test_identifier_counts_are_per_file_even_for_stdin(cli, db_file, tmp_path):
    first = "INV-2025-08-44719 and ORD_88412"
    second = "ticket PROJ-1234"
    for n, text in enumerate((first, second)):
        line = json.dumps(
            {"type": "message", "id": f"s{n}", "conversation_id": "c", "role": "user", "text": text}
        )
        result = ok(cli("ingest", "-", "--db", db_file, input=line + "\n"))
        counted = "2 identifiers" if n == 0 else "1 identifier"
        assert f", {counted}\n" in result.stderr  # only this input's identifiers


def test_a_wrong_forced_format_is_an_error_and_does_not_lock_the_file_out(cli, db_file):
    sample = str(SAMPLE_TRACES / "codex_kept_verbatim.jsonl")
    wrong = cli("ingest", sample, "--db", db_file, "--input-format", "claude")
    assert wrong.exit_code == 2, wrong.stderr
    assert "no line is a claude record" in wrong.stderr
    assert "Hint: drop --input-format" in wrong.stderr
    right = cli("ingest", sample, "--db", db_file)
    assert right.exit_code == 0, right.stderr
    assert "ingested (codex)" in right.stderr


def test_copied_lines_of_a_resumed_session_are_counted_as_already_stored(cli, db_file, tmp_path):
    """A resumed Claude Code session starts a new file with earlier lines copied into it: they
    are stored once, and the total line says how many of the records read were copies."""
    session = SAMPLE_TRACES / "claude_lost_path.jsonl"
    lines = session.read_text(encoding="utf-8").splitlines(keepends=True)
    resumed = tmp_path / "resumed.jsonl"
    resumed.write_text("".join(lines[:6]), encoding="utf-8")  # the copied head of the session
    result = cli("ingest", session, resumed, "--db", db_file)
    assert result.exit_code == 0, result.stderr
    *_, copy_line, total = result.stderr.strip().splitlines()
    # the copy's own line says that all it holds was stored already
    assert copy_line.startswith(f"{resumed}: ingested (claude)")
    read = int(copy_line.split(" messages")[0].rsplit(" ", 1)[1])
    assert f"{read} messages ({read} already stored)" in copy_line
    assert "tool calls (" in copy_line and "already stored), " in copy_line
    first = cli("stats", "--db", db_file, "--format", "json")
    stored = json.loads(first.stdout)["totals"]["messages"]
    read = int(total.split("; ")[1].split(" messages")[0])
    assert read > stored  # the copies were read ...
    assert f"({read - stored} messages" in total and "already stored)" in total  # ... and said
    again = cli("ingest", session, "--db", db_file)  # nothing new: nothing to explain
    assert "already stored" not in again.stderr


def test_a_copy_under_another_name_says_what_was_already_stored(cli, db_file, tmp_path):
    copy = tmp_path / "copy.jsonl"
    copy.write_text(INVOICE.read_text())
    ok(cli("ingest", INVOICE, "--db", db_file))
    again = ok(cli("ingest", copy, "--db", db_file))
    assert (
        "7 messages (7 already stored), 3 tool calls (3 already stored), "
        "1 boundary (1 already stored)"
    ) in again.stderr


def test_a_json_document_still_being_written_is_left_for_a_later_ingest(cli, db_file, tmp_path):
    """A hook ingests a tau-bench results file (one JSON array) while its writer is busy:
    with --skip-invalid that says so and exits 0, records no error, and once the file is
    whole `stats` reports no error either."""
    full = (FIXTURES / "openai" / "results.json").read_bytes()
    live = tmp_path / "results.json"
    live.write_bytes(full[: full.index(b'"task_id": 3') + 5])  # inside the first value
    refused = cli("ingest", live, "--db", db_file)
    assert refused.exit_code == 2
    assert "Hint: wait until the writer has finished the file" in refused.stderr
    first = ok(cli("ingest", live, "--db", db_file, "--skip-invalid"))
    assert (
        f"{live}: nothing to read yet: the JSON document is still being written (not one value"
        " is complete), nothing stored; it is read again when complete"
    ) in first.stderr
    live.write_bytes(full[: full.index(b'"task_id": 4')])  # inside the second value
    second = ok(cli("ingest", live, "--db", db_file, "--skip-invalid"))
    assert "ingested (openai) 1 conversation," in second.stderr
    assert "the JSON document is still being written (it ends before it is complete)" in (
        second.stderr
    )
    report = json.loads(ok(cli("stats", "--db", db_file, "--format", "json")).stdout)
    assert report["ingest_errors"] == 0
    live.write_bytes(full)
    done = ok(cli("ingest", live, "--db", db_file, "--skip-invalid"))
    assert "appended (openai) 2 conversations" in done.stderr
    assert "still being written" not in done.stderr
    report = json.loads(ok(cli("stats", "--db", db_file, "--format", "json")).stdout)
    assert report["ingest_errors"] == 0 and report["totals"]["conversations"] == 2


def test_a_stale_truncated_document_error_goes_once_the_document_is_read_whole(
    cli, db_file, tmp_path
):
    """Stores written before a document still being written stopped being an error hold a
    `truncated_document` row for it; the read of the whole document removes it."""
    import duckdb

    full = (FIXTURES / "openai" / "results.json").read_bytes()
    live = tmp_path / "results.json"
    live.write_bytes(full[: full.index(b'"task_id": 4')])
    ok(cli("ingest", live, "--db", db_file, "--skip-invalid"))
    # The row such a store holds: the cut at the document's last line, on that read's run.
    con = duckdb.connect(str(db_file))
    con.execute(
        "INSERT INTO ingest_errors SELECT id, ?, 45, NULL, 'truncated_document',"
        " 'the JSON document ends before it is complete (file still being written?)'"
        " FROM ingest_runs",
        [str(live)],
    )
    con.close()
    stale = json.loads(ok(cli("stats", "--db", db_file, "--format", "json")).stdout)
    assert stale["errors_by_reason"] == {"truncated_document": 1}
    live.write_bytes(full)
    ok(cli("ingest", live, "--db", db_file))
    report = json.loads(ok(cli("stats", "--db", db_file, "--format", "json")).stdout)
    assert report["ingest_errors"] == 0 and report["errors_by_reason"] == {}
    assert "ingest errors: 0 (none)" in ok(cli("stats", "--db", db_file)).stdout


def test_progress_finds_its_total_only_when_it_shows_a_bar(monkeypatch: pytest.MonkeyPatch) -> None:
    """The total of a progress bar (input_size opens every file) is found only for a bar."""
    import io
    import sys

    from lexkeep.cli.common import progress

    asked: list[int] = []

    def total() -> int:
        asked.append(1)
        return 10

    monkeypatch.setattr(sys, "stderr", io.StringIO())  # not a terminal: no bar
    with progress("reading", total) as advance:
        advance(5)
    assert asked == []

    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    monkeypatch.setattr(sys, "stderr", Terminal())
    with progress("reading", total) as advance:
        advance(5)
    assert asked == [1]


@pytest.mark.parametrize("audit", [False, True])
def test_the_progress_bar_reaches_its_total_over_files_that_are_no_trace(tmp_path, audit):
    """The bar's total counts every file a folder brings; the files that are no trace (other
    JSON) or hold nothing yet were never counted as read, so the bar stopped short of its end
    (42.0/45.2 MB for a dump folder holding the generator's expected.json)."""
    from lexkeep.core.ingest import ingest_paths, input_size
    from lexkeep.core.store import Store

    folder = tmp_path / "traces"
    folder.mkdir()
    (folder / "a.jsonl").write_bytes(INVOICE.read_bytes())
    (folder / "expected.json").write_text('{"verdicts": [1, 2, 3]}\n' * 50)
    (folder / "live.jsonl").write_text('{"type":"message","id":"m9","conv')  # being written
    (folder / "new.jsonl").write_text("")
    told: list[int] = []
    with Store.open(None if audit else tmp_path / "t.duckdb") as store:
        ingest_paths(store, [str(folder)], on_progress=told.append, lean=audit)
    assert sum(told) == input_size([str(folder)])


@pytest.mark.skipif(sys.platform == "win32", reason="RLIMIT_FSIZE is POSIX")
def test_a_write_that_runs_out_of_room_is_a_clear_error_and_keeps_the_store(
    cli, db_file: Path, tmp_path: Path
) -> None:
    ok(cli("ingest", SAMPLE_TRACES, "--db", db_file))
    before = json.loads(ok(cli("stats", "--db", db_file, "--format", "json")).stdout)
    big = tmp_path / "big.jsonl"
    with big.open("w", encoding="utf-8") as out:
        for c in range(60):
            out.write(json.dumps({"type": "conversation", "id": f"big{c}"}) + "\n")
            for m in range(20):
                role = "user" if m % 2 == 0 else "assistant"
                text = f"order ORD-{c}{m}77 " + "lorem ipsum " * 500
                record = {"type": "message", "id": f"big{c}/{m}", "conversation_id": f"big{c}"}
                out.write(json.dumps({**record, "role": role, "text": text}) + "\n")
    assert big.stat().st_size > 4 << 20
    result = run_writing_at_most(2 << 20, "ingest", "--db", db_file, big)
    assert result.returncode == 2, result.stderr
    assert "internal error" not in result.stderr
    assert "Error: cannot write " in result.stderr and "File too large" in result.stderr
    assert "Hint: " in result.stderr
    after = json.loads(ok(cli("stats", "--db", db_file, "--format", "json")).stdout)
    assert after == before  # nothing of the failed file, everything from before


@pytest.mark.skipif(sys.platform == "win32", reason="RLIMIT_FSIZE is POSIX")
def test_a_new_store_that_cannot_be_created_is_not_left_half_made(
    cli, db_file: Path, tmp_path: Path
) -> None:
    """A first ingest on a full disk left a store file cut short, which every later command,
    the same ingest run again after freeing space included, refused as unreadable."""
    result = run_writing_at_most(4096, "ingest", "--db", db_file, SAMPLE_TRACES)
    assert result.returncode == 2, result.stderr
    assert f'Could not write file "{db_file}": File too large' in result.stderr
    assert "Hint: free space" in result.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == []
    ok(cli("ingest", SAMPLE_TRACES, "--db", db_file))  # once there is room
    stats = json.loads(ok(cli("stats", "--db", db_file, "--format", "json")).stdout)
    assert stats["files_ingested"] == 4


def test_a_store_file_cut_short_says_what_to_do(cli, db_file: Path) -> None:
    ok(cli("ingest", SAMPLE_TRACES, "--db", db_file))
    with db_file.open("r+b") as store:  # as a copy that did not finish leaves it
        store.truncate(4096)
    for args in (("stats",), ("audit",), ("ingest", SAMPLE_TRACES)):
        result = cli(*args, "--db", db_file)
        assert result.exit_code == 2, result.stderr
        assert "Could not read enough bytes" in result.stderr
        assert result.stderr.splitlines()[-1] == (
            f"Hint: {db_file} is cut short (a copy or a creation that did not finish): restore"
            " it, or remove it and ingest the traces again"
        )


def test_a_line_read_again_after_a_fix_takes_its_place_in_the_file_order(
    cli, db_file: Path, tmp_path: Path
) -> None:
    # The tool call before the compaction (line 4) is broken, skipped, then fixed: read again,
    # it must sit before the boundary, or the audit would take it for a call made after it.
    story = SAMPLE_TRACES / "invoice_altered.jsonl"
    lines = story.read_text(encoding="utf-8").splitlines(keepends=True)
    trace = tmp_path / "story.jsonl"
    trace.write_text("".join(lines[:3] + ["{x" + lines[3][1:]] + lines[4:]), encoding="utf-8")
    ok(cli("ingest", trace, "--db", db_file, "--skip-invalid"))
    trace.write_text("".join(lines), encoding="utf-8")
    ok(cli("ingest", trace, "--db", db_file))
    shown = json.loads(ok(cli("show", "support-4471", "--db", db_file, "--format", "json")).stdout)
    lines_in_order = [e["source_line"] for e in shown["entries"]]
    assert lines_in_order == sorted(lines_in_order)
    audit = cli("audit", "--db", db_file, "--format", "json")
    assert audit.exit_code == 1, audit.stderr
    verdicts = {f["value"]: f["verdict"] for f in json.loads(audit.stdout)["findings"]}
    assert verdicts == {"INV-2025-08-44719": "altered"}  # as an audit of the file says


@pytest.mark.parametrize("encoding", ["utf-16", "utf-32"])
def test_a_utf16_or_utf32_file_is_named_as_such_with_the_conversion(
    cli, db_file: Path, tmp_path: Path, encoding: str
) -> None:
    # Windows PowerShell's `>` writes UTF-16 with a byte-order mark.
    trace = tmp_path / "story.jsonl"
    trace.write_text(INVOICE.read_text(encoding="utf-8"), encoding=encoding)
    for args in (("ingest", trace, "--db", db_file), ("audit", trace)):
        result = cli(*args)
        assert result.exit_code == 2, result.stderr
        assert f"Error: {trace}:1:1: {encoding.upper()} text, not UTF-8" in result.stderr
        assert f"iconv -f {encoding.upper()} -t UTF-8" in result.stderr


def test_a_broken_link_in_a_folder_is_named_and_skipped(cli, db_file, tmp_path):
    folder = tmp_path / "traces"
    folder.mkdir()
    (folder / "invoice.jsonl").write_bytes(INVOICE.read_bytes())
    target = tmp_path / "moved-away.jsonl"
    (folder / "gone.jsonl").symlink_to(target)
    for args in (("ingest", folder, "--db", db_file), ("audit", folder, "-f", "json")):
        result = cli(*args)
        assert result.exit_code in (0, 1), result.stderr  # the other file is still read
        warning = (
            f"Warning: {folder / 'gone.jsonl'}: skipped, a broken symbolic link (its target"
            f" {target} does not exist)"
        )
        assert result.stderr.count(warning) == 1, result.stderr
    # The same through a glob
    result = cli("ingest", str(folder / "*.jsonl"), "--db", db_file)
    assert result.exit_code == 0 and "a broken symbolic link" in result.stderr
    # Named directly, the broken link is an error (nothing else was asked for)
    for args in (
        ("ingest", folder / "gone.jsonl", "--db", db_file),
        ("audit", folder / "gone.jsonl"),
    ):
        result = cli(*args)
        assert result.exit_code == 2
        assert result.stderr.startswith(
            f"Error: {folder / 'gone.jsonl'}: a broken symbolic link: its target {target}"
            " does not exist"
        ), result.stderr


def test_an_ingest_of_paths_holding_no_trace_is_an_error(cli, tmp_path):
    # `lexkeep ingest traces/ --db s.duckdb && lexkeep audit --db s.duckdb`: an ingest pointed
    # at the wrong folder must fail, as `lexkeep audit traces/` does, not leave an empty store
    # whose audit passes on nothing.
    empty = tmp_path / "empty"
    empty.mkdir()
    db = tmp_path / "new.duckdb"
    result = cli("ingest", empty, "--db", db)
    assert result.exit_code == 2, result.stderr
    assert f"Error: no trace files in {empty} (no files found)" in result.stderr
    assert "Hint: point the ingest at trace files or folders holding them" in result.stderr
    assert not db.exists()  # refused before the store was created
    # Nor does a mistyped path or format leave a new, empty store behind
    for args in (
        (tmp_path / "no-such-folder",),
        (INVOICE, "--input-format", "yaml"),
    ):
        result = cli("ingest", *args, "--db", db)
        assert result.exit_code == 2, result.stderr
        assert not db.exists(), args
    # A folder of other JSON: each file is named, and the ingest fails
    other = tmp_path / "other"
    other.mkdir()
    (other / "settings.json").write_text('{"theme": "dark"}')
    result = cli("ingest", other, "--db", db)
    assert result.exit_code == 2, result.stderr
    lines = result.stderr.splitlines()
    assert f"{other / 'settings.json'}: skipped, not a recognised trace format" in lines
    assert (
        f"Error: no trace files in {other} (1 file(s) found, none of them a trace lexkeep reads)"
        in lines
    )
    assert not db.exists()  # the store this ingest created, with nothing in it, is not left
    # A store that was there before stays, as it was
    ok(cli("ingest", INVOICE, "--db", db))
    assert cli("ingest", other, "--db", db).exit_code == 2
    assert cli("stats", "--db", db, "-f", "json").exit_code == 0
    # A trace beside them is enough; so is a session file not written yet (nothing to read
    # yet, as before), and a folder ingested already (unchanged)
    (other / "live-session.jsonl").write_text("")
    assert cli("ingest", other, "--db", db).exit_code == 0
    (other / "invoice.jsonl").write_bytes(INVOICE.read_bytes())
    for _ in range(2):
        result = cli("ingest", other, "--db", db)
        assert result.exit_code == 0, result.stderr


def test_an_ingest_that_fails_before_storing_anything_leaves_no_new_store(cli, tmp_path):
    """`lexkeep ingest notes.md --db s.duckdb` failed, and left an empty s.duckdb whose audit
    passed on nothing; only a store with files in it, or one that was there, stays."""
    db = tmp_path / "new.duckdb"
    bad = tmp_path / "notes.jsonl"
    bad.write_text("# not JSON\n")
    store = tmp_path / "old.duckdb"
    ok(cli("ingest", INVOICE, "--db", store))
    for given in (bad, store):  # a bad first line; a store named as a trace
        result = cli("ingest", given, "--db", db)
        assert result.exit_code == 2, result.stderr
        assert not db.exists(), given
        assert not Path(f"{db}.wal").exists(), given
    result = cli("ingest", INVOICE, bad, "--db", db)  # a file stored before the bad one stays
    assert result.exit_code == 2, result.stderr
    stats = json.loads(ok(cli("stats", "--db", db, "--format", "json")).stdout)
    assert stats["files_ingested"] == 1


def test_summary_lines_stay_whole_under_the_progress_bar_of_a_narrow_terminal(tmp_path):
    """On a terminal the progress bar takes over stderr, and Rich wrapped each summary line at
    the terminal's width with real line breaks: a long path came out in pieces, which a copy
    and paste (or a grep of the scrollback) no longer finds."""
    folder = tmp_path / ("a-rather-long-folder-name-for-traces-" * 2)
    folder.mkdir()
    trace = folder / "invoice.jsonl"
    trace.write_bytes(INVOICE.read_bytes())
    text = on_terminal(["ingest", str(trace), "--db", str(tmp_path / "t.duckdb")], cols=60)
    lines = [part for line in text.split("\n") for part in line.split("\r")]
    expected = f"{trace}: ingested (lexkeep) 1 conversation, 7 messages"
    assert len(expected) > 60
    assert any(line.startswith(expected) for line in lines), text
    assert any(line.startswith("1 file: 1 ingested") for line in lines), text
    assert "ingesting" in text  # the bar was there


def test_quiet_ingest_prints_only_the_total_line_and_what_needs_a_reader(cli, db_file, tmp_path):
    """A folder of a thousand sessions printed a thousand lines into a CI log, with no way to
    keep only the outcome."""
    folder = tmp_path / "traces"
    folder.mkdir()
    (folder / "invoice.jsonl").write_bytes(INVOICE.read_bytes())
    (folder / "settings.json").write_text('{"theme": "dark"}')
    (folder / "gone.jsonl").symlink_to(tmp_path / "moved-away.jsonl")
    for flag in ("--quiet", "-q"):
        result = ok(cli("ingest", folder, "--db", db_file, flag))
        lines = result.stderr.splitlines()
        assert len(lines) == 2, result.stderr
        assert lines[0].startswith(f"Warning: {folder / 'gone.jsonl'}: skipped, a broken")
        assert lines[1].startswith("2 files: ")
        assert result.stdout == ""
    # Errors are never quiet
    bad = tmp_path / "bad.jsonl"
    bad.write_text(INVOICE.read_text().replace('"id":"m4"', '"id":m4', 1))
    result = cli("ingest", bad, "--db", db_file, "-q")
    assert result.exit_code == 2
    assert result.stderr.startswith(f"Error: {bad}:7:"), result.stderr
    # Nor is there a progress bar on a terminal
    text = on_terminal(["ingest", str(INVOICE), "--db", str(tmp_path / "t.duckdb"), "-q"], cols=80)
    assert text.replace("\r", "").splitlines() == [
        "1 file: 1 ingested, 0 unchanged, 0 not traces; 7 messages, 3 tool calls"
    ]


def test_show_a_prefix_of_a_session_and_its_sub_agents_names_the_session(cli, db_file, tmp_path):
    """Claude Code sub-agents are `<session>/agent-…`: the first characters of a session id
    matched the session and each of its sub-agents, and `show` called the prefix ambiguous."""
    rows = [
        {"type": "conversation", "id": "7acd37a8-main"},
        {"type": "conversation", "id": "7acd37a8-main/agent-1", "parent_id": "7acd37a8-main"},
        {"type": "conversation", "id": "7acd37a8-main/agent-2", "parent_id": "7acd37a8-main"},
        {"type": "conversation", "id": "7b-other"},
    ]
    for conv in rows:
        message = {"type": "message", "id": f"{conv['id']}#m", "conversation_id": conv["id"]}
        rows = [*rows, {**message, "role": "user", "text": f"hello from {conv['id']}"}]
    trace = tmp_path / "sessions.jsonl"
    trace.write_text("".join(json.dumps(r) + "\n" for r in rows))
    ok(cli("ingest", trace, "--db", db_file))
    shown = json.loads(ok(cli("show", "7acd", "--db", db_file, "-f", "json")).stdout)
    assert shown["id"] == "7acd37a8-main"
    sub = json.loads(ok(cli("show", "7acd37a8-main/agent-2", "--db", db_file, "-f", "json")).stdout)
    assert sub["id"] == "7acd37a8-main/agent-2"
    # Two sessions (or a sub-agent beside another session) stay ambiguous
    result = cli("show", "7", "--db", db_file)
    assert result.exit_code == 2
    assert "Error: conversation '7' is ambiguous" in result.stderr
    assert "7acd37a8-main, 7acd37a8-main/agent-1" in result.stderr


def test_a_store_that_cannot_be_written_says_what_to_make_writable(tmp_path: Path) -> None:
    cli = bound_cli(tmp_path)
    folder = tmp_path / "shared"
    folder.mkdir()
    store = folder / "traces.duckdb"
    ok(cli("ingest", SAMPLE_TRACES, "--db", store))
    store.chmod(0o444)
    folder.chmod(0o555)
    try:
        cases = (
            (store, f"Hint: make {store} writable, or copy it to a folder you can write and pass"
             " --db the copy; audit --db, stats, show, context, guard and compactions only read"
             " it"),
            (folder / "new.duckdb", f"Hint: make the folder {folder} writable (a store is"
             " written with new.duckdb.wal beside it), or pass --db a file in a folder you can"
             " write"),
        )  # fmt: skip
        for db, hint in cases:
            result = cli("ingest", SAMPLE_TRACES, "--db", db)
            assert result.exit_code == 2, result.stderr
            assert "Permission denied" in result.stderr
            assert result.stderr.splitlines()[-1] == hint
        ok(cli("stats", "--db", store))  # reading needs no more
        store.chmod(0)
        for args in (("stats",), ("ingest", SAMPLE_TRACES)):
            result = cli(*args, "--db", store)
            assert result.exit_code == 2, result.stderr
            assert result.stderr.splitlines()[-1] == (
                f"Hint: make {store} readable (and writable, for ingest, compact and extract"
                " --db), or ask its owner for a copy"
            )
    finally:
        folder.chmod(0o755)


# A gzip header, then a deflate block of a type that does not exist: zlib refuses it.
_DAMAGED_GZIP = b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\xff\x07" + bytes(16)
_CUT = (
    "the gzip file ends before its end-of-stream marker: it is cut short (a copy or a"
    " compression that did not finish, or one still being written)"
)
_CUT_HINT = (
    "Hint: restore the whole file, or let its writer finish (gzip -t FILE checks one);"
    " nothing of it was stored"
)
_DAMAGED_HINT = (
    "Hint: restore the file from a good copy (gzip -t FILE checks one); nothing of it was stored"
)


def test_a_gzip_file_cut_short_or_damaged_is_named_never_a_crash(cli, db_file, tmp_path):
    """A damaged gzip file (`invalid block type`) was an internal error; one cut short said
    only `Compressed file ended before the end-of-stream marker was reached`, and was an
    internal error when it replaced a file ingested before."""
    packed = gzip.compress(INVOICE.read_bytes() * 40)
    cut, damaged = tmp_path / "cut.jsonl.gz", tmp_path / "damaged.jsonl.gz"
    cut.write_bytes(packed[: len(packed) // 2])
    damaged.write_bytes(_DAMAGED_GZIP)
    for args in (("audit",), ("audit", "--skip-invalid"), ("ingest", "--db", db_file)):
        result = cli(*args, cut)
        assert result.exit_code == 2, result.stderr
        assert result.stderr.splitlines()[-2:] == [f"Error: {cut}: {_CUT}", _CUT_HINT]
        result = cli(*args, damaged)
        assert result.exit_code == 2, result.stderr
        assert result.stderr.splitlines()[-2:] == [
            f"Error: {damaged}: the gzip file is damaged (Error -3 while decompressing data:"
            " invalid block type)",
            _DAMAGED_HINT,
        ]
    # A file ingested whole, then replaced by a copy cut short or damaged.
    again = tmp_path / "again.jsonl.gz"
    again.write_bytes(packed)
    ok(cli("ingest", again, "--db", db_file))
    for broken, message in ((packed[: len(packed) // 2], _CUT), (_DAMAGED_GZIP, None)):
        again.write_bytes(broken)
        result = cli("ingest", again, "--db", db_file)
        assert result.exit_code == 2, result.stderr
        assert "internal error" not in result.stderr
        if message is not None:
            assert result.stderr.splitlines()[-2:] == [f"Error: {again}: {message}", _CUT_HINT]


def test_a_byte_order_mark_inside_a_file_is_named_not_called_invalid_utf8(cli, db_file, tmp_path):
    """Two files joined (`cat a.jsonl b.jsonl`), the second written with a byte-order mark:
    its line was refused as `invalid UTF-8`, which a BOM is not."""
    lines = INVOICE.read_bytes().splitlines(keepends=True)
    joined = tmp_path / "joined.jsonl"
    joined.write_bytes(b"".join(lines[:3]) + b"\xef\xbb\xbf" + b"".join(lines[3:]))
    for args in (("audit", joined), ("ingest", joined, "--db", db_file)):
        result = cli(*args)
        assert result.exit_code == 2, result.stderr
        assert result.stderr.splitlines()[-2] == (
            f"Error: {joined}:4:1: a byte-order mark (U+FEFF) starts the line, which only the"
            " start of a file may hold: files joined together?"
        )


def test_a_loop_of_symbolic_links_is_named_as_a_loop(cli, db_file, tmp_path):
    """Two links pointing at each other were `a broken symbolic link: its target ... does
    not exist`, though the target exists: it is a link in the same loop."""
    folder = tmp_path / "traces"
    folder.mkdir()
    (folder / "story.jsonl").write_bytes(INVOICE.read_bytes())
    (folder / "a.jsonl").symlink_to("b.jsonl")
    (folder / "b.jsonl").symlink_to("a.jsonl")
    result = cli("ingest", folder, "--db", db_file)
    assert result.exit_code == 0, result.stderr
    for name in ("a.jsonl", "b.jsonl"):
        assert (
            f"Warning: {folder / name}: skipped, a loop of symbolic links (it leads back to itself)"
        ) in result.stderr.splitlines()
    result = cli("audit", folder / "a.jsonl")
    assert result.exit_code == 2
    assert result.stderr.splitlines() == [
        f"Error: {folder / 'a.jsonl'}: a loop of symbolic links (it leads back to itself)",
        "Hint: point the link at an existing trace file, or name the file itself",
    ]


def test_a_json_document_cut_short_on_standard_input_asks_for_the_whole_document(cli, db_file):
    """Piped in, a JSON document cut short was told to wait for its writer and be ingested
    again, which standard input cannot be."""
    run = [{"task_id": 0, "traj": [{"role": "user", "content": "order #W2378156 please"}]}]
    cut = json.dumps(run, indent=1)[:60]
    for args in (("audit", "-"), ("ingest", "-", "--db", db_file)):
        result = cli(*args, input=cut)
        assert result.exit_code == 2, result.stderr
        assert result.stderr.splitlines()[-1] == (
            "Hint: pipe the whole document: standard input cannot be read again for the rest of it"
        )


def test_a_file_ending_in_nul_bytes_after_a_crash_reads_its_lines_and_says_so(
    cli, db_file, tmp_path
):
    """A crash leaves NUL bytes at the end of a file on some file systems: every ingest said
    a last line was still being written, forever. The complete lines are read, the NUL bytes
    are named as what they are, and a writer that goes on over them has its lines read."""
    trace = SAMPLE_TRACES / "claude_lost_path.jsonl"
    lines = trace.read_bytes().splitlines(keepends=True)
    crashed = tmp_path / "crashed.jsonl"
    crashed.write_bytes(b"".join(lines[:10]) + b"\0" * 100)
    note = f"ends in 100 NUL bytes after line 10 ({crashed}:11), as a crash leaves: not read"
    for flags in ((), ("--skip-invalid",), ()):
        result = ok(cli("ingest", crashed, "--db", db_file, *flags))
        assert note in result.stderr
        assert "still being written" not in result.stderr
        assert "truncated" not in result.stderr
    cut = tmp_path / "cut.jsonl"  # the same lines without the NUL bytes, in a store of their own
    cut.write_bytes(b"".join(lines[:10]))
    ok(cli("ingest", cut, "--db", tmp_path / "cut.duckdb"))

    def totals(db):
        return json.loads(ok(cli("stats", "--db", db, "--format", "json")).stdout)["totals"]

    assert totals(db_file) == totals(tmp_path / "cut.duckdb")  # nothing stored twice
    assert json.loads(ok(cli("stats", "--db", db_file, "-f", "json")).stdout)["ingest_errors"] == 0
    # The session resumed: its writer went on over the NUL bytes.
    crashed.write_bytes(b"".join(lines))
    resumed = ok(cli("ingest", crashed, "--db", db_file))
    assert resumed.stderr.startswith(f"{crashed}: appended (claude)")
    assert "NUL" not in resumed.stderr
    ok(cli("ingest", trace, "--db", tmp_path / "whole.duckdb"))
    assert totals(db_file) == totals(tmp_path / "whole.duckdb")


def test_a_file_of_nul_bytes_only_is_named_as_a_crash_left_it(cli, db_file, tmp_path):
    """A file a crash left before its first line reached the disk holds only NUL bytes: the
    total line counted it as empty. It says what it is, exit 0 as for a file ending in NUL
    bytes, and a file beside it is read as usual."""
    crashed = tmp_path / "crashed.jsonl"
    crashed.write_bytes(b"\0" * 50)
    result = ok(cli("ingest", crashed, "--db", db_file))
    assert result.stderr.splitlines() == [
        f"{crashed}: nothing to read: a file of 50 NUL bytes, as a crash leaves before"
        " anything was written",
        "1 file: 0 ingested, 0 unchanged, 0 not traces, 1 left empty by a crash;"
        " 0 messages, 0 tool calls",
    ]
    empty = tmp_path / "empty.jsonl"
    empty.write_bytes(b"")
    both = ok(cli("ingest", crashed, empty, INVOICE, "--db", tmp_path / "both.duckdb"))
    assert both.stderr.splitlines()[-1].startswith(
        "3 files: 1 ingested, 0 unchanged, 0 not traces, 1 empty, 1 left empty by a crash;"
    ), both.stderr


def test_an_old_style_codex_rollout_cut_after_its_header_has_nothing_to_read_yet(
    cli, db_file, tmp_path
):
    """A bare-era Codex rollout whose writer has put down its header line and is busy with the
    next was "not a recognised trace format" (exit 2); other formats say nothing is complete
    yet, and a later ingest reads the file once its lines are."""
    folder = shared_data() / "claude-code-log" / "test" / "test_data" / "codex" / "sessions"
    rollout = next(folder.glob("rollout-44444444-*.jsonl"))
    data = rollout.read_bytes()
    header = data.index(b"\n") + 1
    live = tmp_path / "rollout-live.jsonl"
    live.write_bytes(data[: header + 20])
    result = ok(cli("ingest", live, "--db", db_file))
    assert result.stderr.startswith(
        f"{live}: nothing to read yet: line 2 is not complete and the lines before it hold no"
        " record (file still being written?), left for a later ingest"
    ), result.stderr
    audit = cli("audit", live)
    assert audit.exit_code == 2
    # Line 1 is complete: "none with a complete line yet" was not so.
    assert audit.stderr.startswith(
        f"Error: no trace files in {live} (1 file(s) found, none with a complete record yet:"
        f" {live}: line 2 is not complete and the lines before it hold no record (file still"
        " being written?))"
    ), audit.stderr
    live.write_bytes(data[:header])
    audit = cli("audit", live)
    assert audit.exit_code == 2
    assert audit.stderr.startswith(
        f"Error: no trace files in {live} (1 file(s) found, none with a complete record yet:"
        f" {live}: line 1 is a Codex rollout's header and no record follows it yet (file still"
        " being written?))"
    ), audit.stderr
    live.write_bytes(data)
    done = ok(cli("ingest", live, "--db", db_file))
    assert done.stderr.startswith(f"{live}: ingested (codex)"), done.stderr


def test_a_broken_chain_of_links_names_its_missing_end(cli, db_file, tmp_path):
    """a -> b -> (missing) said "its target b does not exist" although b is there, as a link:
    the message names the end of the chain that is missing."""
    folder = tmp_path / "traces"
    folder.mkdir()
    (folder / "invoice.jsonl").write_bytes(INVOICE.read_bytes())
    missing = tmp_path / "moved-away.jsonl"
    middle = tmp_path / "middle.jsonl"
    middle.symlink_to(missing)
    link = folder / "gone.jsonl"
    link.symlink_to(middle)
    named = cli("ingest", link, "--db", db_file)
    assert named.exit_code == 2
    assert named.stderr.startswith(
        f"Error: {link}: a broken symbolic link: its target {middle} is a link to {missing},"
        " which does not exist"
    ), named.stderr
    walked = ok(cli("ingest", folder, "--db", db_file))
    assert (
        f"Warning: {link}: skipped, a broken symbolic link (its target {middle} is a link to"
        f" {missing}, which does not exist)"
    ) in walked.stderr
    # Longer chains name the missing end too
    first = tmp_path / "first.jsonl"
    first.symlink_to(middle)
    link.unlink()
    link.symlink_to(first)
    longer = cli("ingest", link, "--db", db_file)
    assert (
        f"its target {first} leads through links to {missing}, which does not exist"
    ) in longer.stderr


CRASH_SAMPLES = [
    SAMPLE_TRACES / "invoice_altered.jsonl",
    SAMPLE_TRACES / "claude_lost_path.jsonl",
    SAMPLE_TRACES / "codex_kept_verbatim.jsonl",
]


@pytest.mark.parametrize("trace", CRASH_SAMPLES, ids=["lexkeep", "claude", "codex"])
def test_lines_appended_after_the_nul_bytes_of_a_crash_are_read(cli, db_file, tmp_path, trace):
    """A writer that restarted after a crash appends its lines after the NUL bytes the crash
    left: the line holding them stopped the ingest as invalid JSON (only --skip-invalid read
    on, and recorded the line as bad). The NUL bytes are named as a crash gap and the lines
    written after them are read, in one ingest or in two (the second after the restart)."""
    lines = trace.read_bytes().splitlines(keepends=True)
    crashed = tmp_path / "crashed.jsonl"
    crashed.write_bytes(b"".join(lines[:5]) + b"\0" * 100 + b"".join(lines[5:]))
    result = ok(cli("ingest", crashed, "--db", db_file))
    assert (
        f"; 100 NUL bytes after line 5 ({crashed}:6), as a crash leaves: not read, the lines"
        " written after them are"
    ) in result.stderr, result.stderr
    assert "invalid" not in result.stderr

    def stats(db):
        return json.loads(ok(cli("stats", "--db", db, "--format", "json")).stdout)

    ok(cli("ingest", trace, "--db", tmp_path / "whole.duckdb"))
    assert stats(db_file)["totals"] == stats(tmp_path / "whole.duckdb")["totals"]
    assert stats(db_file)["ingest_errors"] == 0
    # The same in two steps: the crash, an ingest, then the writer's restart.
    crashed.write_bytes(b"".join(lines[:5]) + b"\0" * 100)
    two = tmp_path / "two.duckdb"
    assert "ends in 100 NUL bytes after line 5" in ok(cli("ingest", crashed, "--db", two)).stderr
    crashed.write_bytes(b"".join(lines[:5]) + b"\0" * 100 + b"".join(lines[5:]))
    resumed = ok(cli("ingest", crashed, "--db", two))
    assert resumed.stderr.startswith(f"{crashed}: appended ("), resumed.stderr
    assert f"100 NUL bytes after line 5 ({crashed}:6)" in resumed.stderr
    assert stats(two)["totals"] == stats(tmp_path / "whole.duckdb")["totals"]


def test_a_line_the_crash_cut_before_its_nul_bytes_is_part_of_the_gap(cli, db_file, tmp_path):
    """A crash may cut a line part way (a disk block written, the next not) and leave NUL
    bytes after it; the restarted writer's lines follow. The cut start is lost with the gap
    (said, with its size), not an invalid line that stops the ingest."""
    lines = (SAMPLE_TRACES / "invoice_altered.jsonl").read_bytes().splitlines(keepends=True)
    crashed = tmp_path / "crashed.jsonl"
    crashed.write_bytes(b"".join(lines[:5]) + lines[5][:17] + b"\0" * 30 + b"".join(lines[6:]))
    result = ok(cli("ingest", crashed, "--db", db_file))
    assert (
        f"; 30 NUL bytes after line 5 and 17 bytes of a line they cut ({crashed}:6), as a crash"
        " leaves: not read, the lines written after them are"
    ) in result.stderr, result.stderr
    without = tmp_path / "without.jsonl"
    without.write_bytes(b"".join(lines[:5]) + b"".join(lines[6:]))
    ok(cli("ingest", without, "--db", tmp_path / "without.duckdb"))

    def totals(db):
        return json.loads(ok(cli("stats", "--db", db, "--format", "json")).stdout)["totals"]

    assert totals(db_file) == totals(tmp_path / "without.duckdb")


@pytest.mark.parametrize("trace", CRASH_SAMPLES, ids=["lexkeep", "claude", "codex"])
def test_a_line_a_crash_cut_before_the_nul_bytes_it_ends_in_is_a_crash_tail(
    cli, db_file, tmp_path, trace
):
    """A crash may cut the last line part way (its first disk block written) and extend the
    file with NUL bytes: every ingest said the file was still being written, forever. It is
    a crash tail: said with its file and line, the lines before it read, nothing recorded as
    an error; a writer that goes on after the NUL bytes has its lines read by the next ingest."""
    lines = trace.read_bytes().splitlines(keepends=True)
    crashed = tmp_path / "crashed.jsonl"
    crashed.write_bytes(b"".join(lines[:5]) + lines[5][:17] + b"\0" * 30)
    note = (
        f"ends in 30 NUL bytes after line 5 and 17 bytes of a line they cut ({crashed}:6),"
        " as a crash leaves: not read"
    )
    for flags in ((), ("--skip-invalid",), ()):
        result = ok(cli("ingest", crashed, "--db", db_file, *flags))
        assert note in result.stderr, result.stderr
        assert "still being written" not in result.stderr
        assert "truncated" not in result.stderr

    def stats(db):
        return json.loads(ok(cli("stats", "--db", db, "--format", "json")).stdout)

    five = tmp_path / "five.jsonl"  # the complete lines alone, in a store of their own
    five.write_bytes(b"".join(lines[:5]))
    ok(cli("ingest", five, "--db", tmp_path / "five.duckdb"))
    assert stats(db_file)["totals"] == stats(tmp_path / "five.duckdb")["totals"]
    assert stats(db_file)["ingest_errors"] == 0
    # The writer restarted and wrote the lost line again, and the rest, after the NUL bytes.
    crashed.write_bytes(b"".join(lines[:5]) + lines[5][:17] + b"\0" * 30 + b"".join(lines[5:]))
    resumed = ok(cli("ingest", crashed, "--db", db_file))
    assert resumed.stderr.startswith(f"{crashed}: appended ("), resumed.stderr
    assert f"30 NUL bytes after line 5 and 17 bytes of a line they cut ({crashed}:6)" in (
        resumed.stderr
    )
    ok(cli("ingest", trace, "--db", tmp_path / "whole.duckdb"))
    assert stats(db_file)["totals"] == stats(tmp_path / "whole.duckdb")["totals"]


def test_a_file_whose_only_line_a_crash_cut_has_nothing_to_read(cli, db_file, tmp_path):
    """A crash that cut the first line and left NUL bytes after it: the file was "still
    being written" forever. Nothing of it can be read, and the crash is named."""
    crashed = tmp_path / "crashed.jsonl"
    crashed.write_bytes(INVOICE.read_bytes()[:17] + b"\0" * 30)
    result = ok(cli("ingest", crashed, "--db", db_file))
    assert result.stderr.splitlines() == [
        f"{crashed}: nothing to read: a crash cut its first line after 17 bytes and left 30 NUL"
        " bytes after them",
        "1 file: 0 ingested, 0 unchanged, 0 not traces, 1 left empty by a crash;"
        " 0 messages, 0 tool calls",
    ]


def _bare_rollout() -> bytes:
    """A bare-era Codex rollout of the shared corpus (header line, then records)."""
    folder = shared_data() / "claude-code-log" / "test" / "test_data" / "codex" / "sessions"
    return next(folder.glob("rollout-44444444-*.jsonl")).read_bytes()


def test_a_codex_rollout_of_its_header_alone_says_the_same_from_a_file_and_on_stdin(
    cli, db_file, tmp_path
):
    """A bare-era Codex rollout whose writer has put down its header line only was "not a
    recognised trace format" (exit 2), from a file and piped; cut inside its next line it was
    "nothing to read yet" from a file but still "not a recognised trace format" piped. A file
    has nothing to read yet (exit 0, read by a later ingest); piped, the header alone has
    nothing to read, and a line cut short is the incomplete last line it is in any format."""
    data = _bare_rollout()
    header = data[: data.index(b"\n") + 1]
    alone = tmp_path / "rollout-alone.jsonl"
    alone.write_bytes(header)
    result = ok(cli("ingest", alone, "--db", db_file))
    assert result.stderr.splitlines()[0] == (
        f"{alone}: nothing to read yet: line 1 is a Codex rollout's header and no record follows"
        " it yet (file still being written?), left for a later ingest"
    )
    assert result.stderr.splitlines()[-1].endswith(
        "1 still being written; 0 messages, 0 tool calls"
    )
    piped = ok(cli("ingest", "-", "--db", db_file, input=header))
    assert piped.stderr.splitlines()[0] == (
        "-: nothing to read: line 1 is a Codex rollout's header and no record follows it"
    )
    audit = cli("audit", "-", input=header)
    assert audit.exit_code == 2
    assert audit.stderr.startswith(
        "Error: no trace files in - (1 file(s) found, none with a record: -: line 1 is a Codex"
        " rollout's header and no record follows it)"
    ), audit.stderr
    cut = header + data[len(header) : len(header) + 20]
    piped = cli("ingest", "-", "--db", db_file, input=cut)
    assert piped.exit_code == 2
    assert piped.stderr.splitlines() == [
        "Error: -:2: the last line is incomplete (no newline, and not whole JSON); standard"
        " input cannot be read again for the rest of it",
        "Hint: pipe the whole trace",
    ]
    # Any format's first line cut short, piped, says so too (it was "not a recognised format").
    first = (SAMPLE_TRACES / "claude_lost_path.jsonl").read_bytes()[:40]
    for args in (("ingest", "-", "--db", db_file), ("audit", "-")):
        piped = cli(*args, input=first)
        assert piped.exit_code == 2
        assert piped.stderr.startswith("Error: -:1: the last line is incomplete"), piped.stderr
    # The file grows into a whole rollout: read then.
    alone.write_bytes(data)
    assert ok(cli("ingest", alone, "--db", db_file)).stderr.startswith(f"{alone}: ingested (codex)")
