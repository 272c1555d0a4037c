"""`lexkeep compact` and `lexkeep compactions`, and point 12: ingest → compact → ingest more →
audit sees the lexkeep summary as a boundary."""

from __future__ import annotations

import json
import os
import re
import sys
import threading
from pathlib import Path

import pytest
from conftest import undo_migrations_after
from test_compaction_support import TerminalReader, build

from lexkeep.core.store import Store


def _lines(records: list[dict]) -> str:
    return "".join(json.dumps(r) + "\n" for r in records)


def first_part() -> list[dict]:
    records = []
    for i in range(30):
        text = {
            0: "Please check invoice INV-2025-08-44719 for me",
            1: "And the order ORD_55555 too",
        }.get(i, f"please continue with step {i}")
        records.append(
            {
                "type": "message",
                "id": f"u{i}",
                "conversation_id": "c1",
                "role": "user",
                "text": text,
            }
        )
        records.append(
            {
                "type": "message",
                "id": f"a{i}",
                "conversation_id": "c1",
                "role": "assistant",
                "text": f"Done with step {i}.",
            }
        )
    return records


LATER_PART = [
    {
        "type": "message",
        "id": "u30",
        "conversation_id": "c1",
        "role": "user",
        "text": "now file both",
    },
    {
        "type": "message",
        "id": "a30",
        "conversation_id": "c1",
        "role": "assistant",
        "text": "Filing.",
    },
    {
        "type": "tool_call",
        "id": "call_1",
        "conversation_id": "c1",
        "message_id": "a30",
        "name": "lookup_invoice",
        "arguments": json.dumps({"invoice_id": "INV-2025-08-44719"}),
    },
    {
        "type": "tool_call",
        "id": "call_2",
        "conversation_id": "c1",
        "message_id": "a30",
        "name": "lookup_order",
        "arguments": json.dumps({"order_id": "ORD_5555"}),
    },
]


def test_compacted_summary_is_a_boundary_for_the_audit(cli, tmp_path, db_file):
    trace = tmp_path / "t.jsonl"
    trace.write_text(_lines(first_part()), encoding="utf-8")
    r = cli("ingest", trace, "--db", db_file)
    assert r.exit_code == 0, r.stderr
    r = cli("compact", "--db", db_file)
    assert r.exit_code == 0, r.stderr
    assert "planned 1, claimed 1, completed 1, failed 0, skipped 0" in r.stdout

    # the live session grows: a later part whose tool calls use one identifier verbatim and
    # one altered (ORD_55555 -> ORD_5555)
    with trace.open("a", encoding="utf-8") as fh:
        fh.write(_lines(LATER_PART))
    r = cli("ingest", trace, "--db", db_file)
    assert r.exit_code == 0, r.stderr
    with Store.open(db_file) as store:
        boundary_pos = store.con.execute(
            "SELECT position FROM boundaries WHERE kind = 'lexkeep'"
        ).fetchone()[0]
        call_pos = store.con.execute("SELECT min(position) FROM tool_calls").fetchone()[0]
        last_summarised = store.con.execute(
            "SELECT max(position) FROM messages WHERE id IN ('u29', 'a29')"
        ).fetchone()[0]
    assert last_summarised < boundary_pos < call_pos

    r = cli("audit", "--db", db_file, "--format", "json")
    assert r.exit_code == 1, r.stderr  # 1 of 2 kept: below the default --min-ratio 1.0
    report = json.loads(r.stdout)
    verdicts = {f["value"]: f["verdict"] for f in report["findings"]}
    assert verdicts == {"INV-2025-08-44719": "kept", "ORD_55555": "altered"}
    assert {f["boundary"]["kind"] for f in report["findings"]} == {"lexkeep"}
    assert all(f["flags"]["in_kept_verbatim"] for f in report["findings"])


def test_compact_counts_and_share(cli, db_file):
    with Store.open(db_file) as store:
        build(store, {"c1": 41, "c2": 29})
    r = cli("compact", "--db", db_file)
    assert r.exit_code == 0, r.stderr
    assert r.stdout.splitlines()[0] == (
        "2 conversations: planned 2, claimed 2, completed 2, failed 0, skipped 0"
    )
    assert "kept verbatim: 40/40 (100.0%)" in r.stdout
    r = cli("compact", "--db", db_file, "--format", "json")
    doc = json.loads(r.stdout)
    assert doc["schema_version"] == 1
    assert (doc["planned"], doc["claimed"], doc["skipped"]) == (2, 0, 2)
    assert doc["skipped_reasons"] == {"completed": 2}


def test_compact_with_nothing_old_enough_says_why_nothing_was_planned(cli, db_file):
    """README's `lexkeep compact --db traces.duckdb` on the sample traces answered `planned 0`
    and nothing else: a new user could not tell a working run from a broken one."""
    with Store.open(db_file) as store:
        build(store, {"c1": 29, "c2": 12})
    why = (
        "Nothing to compact: a 10-pair segment is summarised once at least 20 newer eligible"
        " pairs follow it (the first one at 30 pairs); see docs/compaction.md\n"
    )
    for args in ((), ("--dry-run",), ("--format", "json")):
        r = cli("compact", "--db", db_file, *args)
        assert r.exit_code == 0, r.stderr
        assert r.stderr == why, args
    with Store.open(db_file) as store:
        build(store, {"c3": 30})
    r = cli("compact", "--db", db_file)
    assert r.exit_code == 0 and r.stderr == "", r.stderr
    r = cli("compact", "--db", db_file)  # planned again, skipped as completed: no such line
    assert r.exit_code == 0 and r.stderr == "", r.stderr


def test_compact_dry_run_claims_nothing(cli, db_file):
    with Store.open(db_file) as store:
        build(store, {"c1": 30})
    r = cli("compact", "--db", db_file, "--dry-run", "--format", "json")
    assert r.exit_code == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["dry_run"] and doc["planned"] == 1 and doc["claimed"] == 0
    with Store.open(db_file) as store:
        assert store.con.execute("SELECT count(*) FROM compactions").fetchone()[0] == 0


def test_compact_only_named_conversations_and_unknown_ones_are_errors(cli, db_file):
    with Store.open(db_file) as store:
        build(store, {"c1": 30, "c2": 30})
    r = cli("compact", "--db", db_file, "--conversation", "c2")
    assert r.exit_code == 0, r.stderr
    assert "planned 1" in r.stdout
    r = cli("compact", "--db", db_file, "--conversation", "ghost")
    assert r.exit_code == 2
    assert r.stderr.startswith("Error: no conversation ghost in the store")


def test_compact_unknown_summarizer_is_an_error_with_a_hint(cli, db_file):
    with Store.open(db_file) as store:
        build(store, {"c1": 30})
    r = cli("compact", "--db", db_file, "--summarizer", "magic")
    assert r.exit_code == 2
    assert "Error: unknown summarizer 'magic'" in r.stderr
    assert "Hint: use one of: command, extractive, openai" in r.stderr


def test_compact_with_a_failing_command_reports_failed(cli, db_file, tmp_path):
    with Store.open(db_file) as store:
        build(store, {"c1": 30})
    script = tmp_path / "bad.py"
    script.write_text("import sys\nsys.stdin.read()\nsys.exit(4)\n", encoding="utf-8")
    spec = f'command:"{sys.executable} {script}"'
    r = cli("compact", "--db", db_file, "--summarizer", spec)
    assert r.exit_code == 1, r.stderr  # a failed attempt is not a success for a script
    assert "completed 0, failed 1" in r.stdout
    assert "exit status 4" in r.stdout
    r = cli("compactions", "--db", db_file, "--format", "json")
    jobs = json.loads(r.stdout)["jobs"]
    assert [(j["status"], j["attempts"]) for j in jobs] == [("failed", 1)]
    assert "exit status 4" in jobs[0]["last_error"]
    assert jobs[0]["model_id"] == f"command:{sys.executable} {script}"


@pytest.mark.parametrize("fmt", ["text", "json"])
def test_a_failed_compaction_whose_reader_stops_early_still_exits_1(db_file, tmp_path, fmt):
    """`lexkeep compact ... | head -1` under pipefail: a run whose summariser failed exited 0
    when its counts could not be written to the closed pipe, and so passed for a success."""
    import subprocess

    with Store.open(db_file) as store:
        build(store, {"c1": 30})
    script = tmp_path / "bad.py"
    script.write_text("import sys\nsys.stdin.read()\nsys.exit(4)\n", encoding="utf-8")
    spec = f'command:"{sys.executable} {script}"'
    env = {k: v for k, v in os.environ.items() if not k.startswith("LEXKEEP_")}
    read, write = os.pipe()
    os.close(read)  # the reader is gone before anything is written
    try:
        run = subprocess.run(
            [sys.executable, "-m", "lexkeep.cli.main", "compact", "--db", str(db_file),
             "--summarizer", spec, "--format", fmt],
            stdout=write, stderr=subprocess.PIPE, text=True, env=env, timeout=120,
        )  # fmt: skip
    finally:
        os.close(write)
    assert run.returncode == 1, run.stderr
    assert "Traceback" not in run.stderr and "Exception ignored" not in run.stderr


def test_compactions_lists_identity_status_attempts(cli, db_file):
    with Store.open(db_file) as store:
        build(store, {"c1": 30})
    assert cli("compact", "--db", db_file).exit_code == 0
    r = cli("compactions", "--db", db_file, "--format", "json")
    assert r.exit_code == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["schema_version"] == 1
    (job,) = doc["jobs"]
    assert job["conversation_id"] == "c1" and (job["from_pair"], job["to_pair"]) == (0, 9)
    assert job["status"] == "completed" and job["attempts"] == 1
    assert job["prompt_version"] == "conversation-compaction@3"
    assert len(job["source_digest"]) == 64 and len(job["id"]) == 64
    r = cli("compactions", "--db", db_file)
    assert r.exit_code == 0
    assert job["id"][:12] in r.stdout and "completed" in r.stdout


def test_compactions_marks_a_summary_context_no_longer_uses_as_stale(cli, db_file):
    """A completed summary whose source changed is listed as stale, as `context` decides."""
    with Store.open(db_file) as store:
        build(store, {"c1": 40, "c2": 30})
    assert cli("compact", "--db", db_file).exit_code == 0
    with Store.open(db_file) as store:
        # source_message_ids: user0, answer0, user1, answer1, ...: the answer of pair 13
        (answer,) = store.con.execute(
            "SELECT source_message_ids[8] FROM compactions "
            "WHERE conversation_id = 'c1' AND from_pair = 10"
        ).fetchone()
        store.con.execute("UPDATE messages SET text = text || ' (edited)' WHERE id = ?", [answer])
    r = cli("compactions", "--db", db_file, "--format", "json")
    assert r.exit_code == 0, r.stderr
    jobs = {(j["conversation_id"], j["from_pair"]): j for j in json.loads(r.stdout)["jobs"]}
    assert set(jobs) == {("c1", 0), ("c1", 10), ("c2", 0)}
    assert all(j["status"] == "completed" for j in jobs.values())
    assert jobs["c1", 10]["stale"] is True
    assert "the source changed since it was summarised" in jobs["c1", 10]["stale_reason"]
    for key in (("c1", 0), ("c2", 0)):
        assert jobs[key]["stale"] is False and jobs[key]["stale_reason"] is None
    # The same verdict as the next-run context, which lists the range and does not use it.
    ctx = json.loads(cli("context", "c1", "--budget-bytes", "100000", "--db", db_file).stdout)
    assert [(s["from_pair"], s["to_pair"]) for s in ctx["stale_summaries"]] == [(10, 19)]
    table = cli("compactions", "--db", db_file, env={"COLUMNS": "200"}).stdout
    (row,) = [line for line in table.splitlines() if jobs["c1", 10]["id"][:12] in line]
    assert "stale" in row and "source changed" in row
    (fresh,) = [line for line in table.splitlines() if jobs["c1", 0]["id"][:12] in line]
    assert "stale" not in fresh


def test_compactions_of_an_unknown_conversation_is_an_error_as_for_compact(cli, db_file):
    with Store.open(db_file) as store:
        build(store, {"c1": 30, "c2": 5})
    assert cli("compact", "--db", db_file).exit_code == 0
    for args in (["compact"], ["compactions"], ["compactions", "--format", "json"]):
        r = cli(*args, "--db", db_file, "-c", "ghost")
        assert r.exit_code == 2, r.stderr
        assert r.stderr == (
            "Error: no conversation ghost in the store\n"
            "Hint: the store holds 2 conversation(s), e.g. c1, c2;"
            " lexkeep show --db FILE lists them all\n"
        )
        assert r.stdout == ""
    r = cli("compactions", "--db", db_file, "-c", "c1", "-c", "ghost")
    assert r.exit_code == 2 and "no conversation ghost" in r.stderr
    # a known conversation without jobs is not an error
    r = cli("compactions", "--db", db_file, "-c", "c2")
    assert r.exit_code == 0, r.stderr
    assert r.stdout == "No compaction jobs.\n"
    r = cli("compactions", "--db", db_file, "-c", "c2", "--format", "json")
    assert r.exit_code == 0, r.stderr
    assert json.loads(r.stdout)["jobs"] == []


def test_compactions_table_in_a_pipe_is_140_columns(cli, db_file, monkeypatch):
    """Piped (a log, a file) the table is 140 columns wide unless $COLUMNS says otherwise."""
    long_id = "support-2025-08-14-ORD_884213"
    with Store.open(db_file) as store:
        build(store, {long_id: 30})
    assert cli("compact", "--db", db_file).exit_code == 0
    monkeypatch.delenv("COLUMNS", raising=False)
    lines = cli("compactions", "--db", db_file).stdout.splitlines()
    assert any(long_id in line for line in lines)
    assert max(map(len, lines)) <= 140
    narrow = cli("compactions", "--db", db_file, env={"COLUMNS": "80"}).stdout.splitlines()
    assert max(map(len, narrow)) <= 80
    assert f"  conversation  {long_id}" in narrow  # whole: a block a job where no table fits


def test_compactions_show_each_id_path_and_word_whole_at_any_width(cli, db_file, tmp_path):
    """Below about 70 columns the conversation column folded an id a character a line, and at
    80-140 the model and the failure's detail (a summariser's error naming its log) came out
    in pieces. A job is a row where the table holds its ids whole, else a block of lines."""
    long_id = "support-2025-08-14-ORD_884213-claude-code-session-0f3a9e"
    log = "/var/log/summariser/2025-08-14/worker-3.log:1882"
    script = tmp_path / "fails.py"
    script.write_text(
        "import sys\nsys.stdin.read()\n"
        f"sys.stderr.write('upstream error 429: rate limit exceeded, retry after 20s; see {log}')"
        "\nsys.exit(1)\n",
        encoding="utf-8",
    )
    with Store.open(db_file) as store:
        build(store, {"c1": 30, long_id: 30})
    assert cli("compact", "--db", db_file, "-c", "c1").exit_code == 0
    spec = f'command:"{sys.executable} {script}"'
    assert cli("compact", "--db", db_file, "-c", long_id, "--summarizer", spec).exit_code == 1
    r = cli("compactions", "--db", db_file, "--format", "json")
    jobs = {j["conversation_id"]: j for j in json.loads(r.stdout)["jobs"]}
    model = jobs[long_id]["model_id"]
    assert len(model) > 40 and " " in model
    whole = [long_id, "c1", model, log, *(j["id"][:12] for j in jobs.values())]
    words = " ".join(j["last_error"] or "" for j in jobs.values()).split()
    for width in (40, 50, 60, 70, 80, 100, 120, 140, 200):
        out = cli("compactions", "--db", db_file, env={"COLUMNS": str(width)}).stdout
        lines = out.splitlines()
        for value in whole:
            assert any(value in line for line in lines), (width, value, out)
        assert set(words) <= set(out.split()), (width, out)
        for line in lines:  # a value wider than the terminal is a line of its own
            assert len(line) <= width or line.strip() in whole, (width, line)
    table = cli("compactions", "--db", db_file, env={"COLUMNS": "80"}).stdout
    assert re.search(f"\n  model\n *{re.escape(model)}\n", table), table  # too long beside
    assert table.startswith(jobs["c1"]["id"][:12] + "  completed\n  conversation  c1\n")
    assert "\n\n" + jobs[long_id]["id"][:12] + "  failed\n" in table
    table = cli("compactions", "--db", db_file, env={"COLUMNS": "300"}).stdout
    assert table.split()[:2] == ["job", "conversation"]  # wide enough: the table
    (row,) = [line for line in table.splitlines() if jobs[long_id]["id"][:12] in line]
    assert long_id in row and model in row
    # the detail (the last column) wraps at spaces to fit: its last word, the log, stays whole
    assert any(line.rstrip().endswith(f" {log}") for line in table.splitlines()), table


def test_compactions_on_a_missing_store_is_an_error(cli, tmp_path):
    r = cli("compactions", "--db", tmp_path / "none.duckdb")
    assert r.exit_code == 2 and "no lexkeep store" in r.stderr


def test_help_ends_with_an_example(cli):
    for command in ("compact", "compactions"):
        r = cli(command, "--help")
        assert r.exit_code == 0
        assert "Example: lexkeep " + command in r.stdout


def test_compact_on_a_missing_store_is_an_error_and_creates_nothing(cli, tmp_path):
    target = tmp_path / "none.duckdb"
    r = cli("compact", "--db", target)
    assert r.exit_code == 2 and "no lexkeep store" in r.stderr
    assert not target.exists()


def test_compact_with_an_unbalanced_quote_in_the_command_is_a_usage_error(cli, db_file):
    """`command:'llm -m x` (a quote left open) was an "internal error: ValueError: No closing
    quotation" asking for a bug report; it is a mistake in the option, named as such."""
    with Store.open(db_file) as store:
        build(store, {"c1": 30})
    r = cli("compact", "--db", db_file, "--summarizer", "command:'llm -m x")
    assert r.exit_code == 2, r.stderr
    assert "internal error" not in r.stderr
    assert "Error: command: cannot split 'llm -m x into a program" in r.stderr, r.stderr
    assert "No closing quotation" in r.stderr
    r = cli("compactions", "--db", db_file, "--format", "json")
    assert json.loads(r.stdout)["jobs"] == []  # nothing was claimed


def test_compact_openai_with_a_base_url_that_is_not_http_is_a_usage_error(cli, db_file):
    """`--base-url localhost:8000/v1` (no scheme) failed every segment's attempt with "unknown
    url type", and `ftp://…` waited the whole --timeout per segment: each burnt one of the two
    attempts of every range in the store. It is refused before anything is claimed."""
    with Store.open(db_file) as store:
        build(store, {"c1": 30})
    for url in ("127.0.0.1:8000/v1", "ftp://127.0.0.1:8000/v1", "file:///etc", "http://"):
        r = cli(
            "compact", "--db", db_file, "--summarizer", "openai", "--base-url", url, "--model", "m"
        )
        assert r.exit_code == 2, (url, r.stdout, r.stderr)
        assert f"Error: --base-url {url!r} is not an http:// or https:// URL" in r.stderr
        assert "Hint: e.g. --base-url https://api.openai.com/v1" in r.stderr
    r = cli("compactions", "--db", db_file, "--format", "json")
    assert json.loads(r.stdout)["jobs"] == []  # no attempt was spent


def test_compact_shows_a_failed_summariser_s_escape_sequences_instead_of_sending_them(
    cli, db_file, tmp_path
):
    """A `command:` program's stderr is part of the failure detail; its ESC sequences reached
    the terminal through the `failed:` line."""
    with Store.open(db_file) as store:
        build(store, {"c1": 30})
    script = tmp_path / "fails.py"
    script.write_text(
        "import sys\nsys.stdin.read()\n"
        "sys.stderr.write('quota \\x1b]0;pwned\\x07 \\x1b[31mred \\x9b2J')\nsys.exit(1)\n",
        encoding="utf-8",
    )
    r = cli("compact", "--db", db_file, "--summarizer", f'command:"{sys.executable} {script}"')
    assert r.exit_code == 1, r.stderr
    (line,) = [x for x in r.stdout.splitlines() if x.startswith("failed:")]
    assert "quota \\u001b]0;pwned\\u0007 \\u001b[31mred \\u009b2J" in line
    assert not any(c in r.stdout for c in "\x1b\x07\x9b")
    # the store keeps the error as it was; JSON escapes it
    with Store.open(db_file, read_only=True) as store:
        (error,) = store.con.execute("SELECT last_error FROM compactions").fetchone()
    assert "\x1b]0;pwned\x07" in error


def test_compact_json_shows_a_failed_summariser_s_c1_controls_and_overrides_escaped(
    cli, db_file, tmp_path
):
    """The JSON of `compact` and `compactions` carried a summariser's stderr with its CSI
    (U+009B) and right-to-left override as they were: orjson escapes only the C0 controls."""
    with Store.open(db_file) as store:
        build(store, {"c1": 30})
    script = tmp_path / "fails.py"
    script.write_text(
        "import sys\nsys.stdin.read()\n"
        "sys.stderr.write('quota \\x9b2J \\u202eevil\\x7f')\nsys.exit(1)\n",
        encoding="utf-8",
    )
    spec = f'command:"{sys.executable} {script}"'
    r = cli("compact", "--db", db_file, "--summarizer", spec, "--format", "json")
    assert r.exit_code == 1, r.stderr
    assert not any(c in r.stdout for c in "\x9b\u202e\x7f"), r.stdout
    (segment,) = json.loads(r.stdout)["segments"]
    assert "quota \x9b2J \u202eevil\x7f" in segment["detail"]  # the same text, escaped
    r = cli("compactions", "--db", db_file, "--format", "json")
    assert r.exit_code == 0, r.stderr
    assert not any(c in r.stdout for c in "\x9b\u202e\x7f"), r.stdout
    (job,) = json.loads(r.stdout)["jobs"]
    assert "quota \x9b2J \u202eevil\x7f" in job["last_error"]
    table = cli("compactions", "--db", db_file, env={"COLUMNS": "250"}).stdout
    assert not any(c in table for c in "\x9b\u202e\x7f"), table
    assert "quota \\u009b2J \\u202eevil\\u007f" in table


def test_compact_with_an_unreachable_summariser_stops_and_spends_no_attempt(cli, db_file, tmp_path):
    from http.server import ThreadingHTTPServer

    from test_compaction_summarizers import FakeOpenAI, refusing_url

    with Store.open(db_file) as store:
        build(store, {"c1": 30})
    down = refusing_url()
    for _ in range(3):  # was: two failed attempts, then "skipped: exhausted" for good
        r = cli(
            "compact",
            "--db",
            db_file,
            "--summarizer",
            "openai",
            "--base-url",
            down,
            "--model",
            "m",
            "--timeout",
            "5",
        )
        assert r.exit_code == 2, r.stdout + r.stderr
        assert f"Error: cannot reach {down}/chat/completions" in r.stderr
        assert "Hint: start the server or fix --base-url" in r.stderr
        jobs = json.loads(cli("compactions", "--db", db_file, "--format", "json").stdout)["jobs"]
        assert jobs == []
    r = cli("compact", "--db", db_file, "--summarizer", f'command:"{tmp_path / "missing"}"')
    assert r.exit_code == 2 and f"Error: cannot run {tmp_path / 'missing'}" in r.stderr
    # A server that answers: the same range is summarised on the first attempt.
    server = ThreadingHTTPServer(("127.0.0.1", 0), FakeOpenAI)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        up = f"http://127.0.0.1:{server.server_address[1]}/v1"
        r = cli(
            "compact",
            "--db",
            db_file,
            "--summarizer",
            "openai",
            "--base-url",
            up,
            "--model",
            "m",
            "--timeout",
            "5",
        )
    finally:
        server.shutdown()
        server.server_close()
    assert r.exit_code == 0, r.stdout + r.stderr
    jobs = json.loads(cli("compactions", "--db", db_file, "--format", "json").stdout)["jobs"]
    assert [(j["status"], j["attempts"]) for j in jobs] == [("completed", 1)]


def _as_schema_1(db_file) -> None:
    """Make the store what lexkeep wrote before migration 002: no compaction tables, and no
    table of a later migration."""
    from lexkeep.core.store import migrations

    assert [v for v, _, _ in migrations()][:2] == [1, 2]
    with Store.open(db_file) as store:
        for table in ("compaction_attempts", "compaction_gate", "compactions"):
            store.con.execute(f"DROP TABLE {table}")
        undo_migrations_after(store, 1)


def test_compact_dry_run_leaves_an_old_store_unmigrated_and_says_so(cli, db_file):
    """docs/compaction.md: `--dry-run` writes nothing. It migrated a schema-1 store."""
    from lexkeep.core.store import migrations

    with Store.open(db_file) as store:
        build(store, {"c1": 30})
    _as_schema_1(db_file)
    before = Path(db_file).read_bytes()
    for args in ((), ("--format", "json")):
        r = cli("compact", "--db", db_file, "--dry-run", *args)
        assert r.exit_code == 0, r.stderr
        if args:
            doc = json.loads(r.stdout)
            assert (doc["planned"], doc["claimed"]) == (1, 0)
            assert doc["pending_migrations"] == len(migrations()) - 1
        else:
            assert r.stdout.startswith("1 conversation"), r.stdout
            assert "planned 1, would claim 1" in r.stdout
        assert f"{db_file} is at schema 1 of {len(migrations())}" in r.stderr
        assert "a run without --dry-run migrates it first" in r.stderr
    assert Path(db_file).read_bytes() == before
    with Store.open(db_file) as store:  # a real run migrates it, and compacts
        assert store.schema_version() == len(migrations())
    r = cli("compact", "--db", db_file, "--format", "json")
    assert r.exit_code == 0, r.stderr
    assert json.loads(r.stdout)["completed"] == 1


def test_the_old_store_note_shows_control_characters_of_its_path_escaped(cli, tmp_path):
    """The dry run's note names the --db path as it was: an ESC or a bidirectional override
    in a file name reached the terminal."""
    db_file = tmp_path / "store\u202e\x1b[2J.duckdb"
    with Store.open(db_file) as store:
        build(store, {"c1": 30})
    _as_schema_1(db_file)
    r = cli("compact", "--db", db_file, "--dry-run")
    assert r.exit_code == 0, r.stderr
    assert "\u202e" not in r.stderr and "\x1b" not in r.stderr, r.stderr
    shown = str(db_file).replace("\u202e", "\\u202e").replace("\x1b", "\\u001b")
    assert r.stderr.startswith(f"Note: {shown} is at schema 1 of "), r.stderr


def test_compact_dry_run_of_a_current_store_says_nothing_of_migrations(cli, db_file):
    with Store.open(db_file) as store:
        build(store, {"c1": 30})
    r = cli("compact", "--db", db_file, "--dry-run", "--format", "json")
    assert r.exit_code == 0 and r.stderr == "", r.stderr
    assert json.loads(r.stdout)["pending_migrations"] == 0


def test_compact_refuses_a_lease_shorter_than_the_summariser_s_timeout(cli, db_file, tmp_path):
    """`--lease-seconds 30 --timeout 120` with a summariser taking 40 s: every summary arrived
    after its lease and was refused, and both attempts of every range were spent. The lease
    must cover the call, so that combination is refused before anything is claimed."""
    with Store.open(db_file) as store:
        build(store, {"c1": 30})
    script = tmp_path / "echo.py"
    script.write_text("import sys\nsys.stdout.write('s ' + sys.stdin.read()[:20])\n")
    spec = f'command:"{sys.executable} {script}"'
    r = cli("compact", "--db", db_file, "-s", spec, "--lease-seconds", "30", "--timeout", "120")
    assert r.exit_code == 2, r.stderr
    assert (
        "Error: --lease-seconds 30 cannot cover a summariser call of up to --timeout 120 s and "
        "5 s to store its outcome\n" in r.stderr
    ), r.stderr
    assert "Hint: pass --lease-seconds 125 or more, or a --timeout of at most 25;" in r.stderr
    r = cli("compactions", "--db", db_file, "--format", "json")
    assert json.loads(r.stdout)["jobs"] == []  # nothing was claimed
    # a lease that covers the call, or the default (--timeout + 60), runs
    r = cli("compact", "--db", db_file, "-s", spec, "--lease-seconds", "30", "--timeout", "25")
    assert r.exit_code == 0, r.stderr
    assert "completed 1" in r.stdout


def test_compact_extractive_takes_any_lease(cli, db_file):
    """The offline summariser answers at once: no --timeout applies to it."""
    with Store.open(db_file) as store:
        build(store, {"c1": 30})
    r = cli("compact", "--db", db_file, "--lease-seconds", "5", "--timeout", "120")
    assert r.exit_code == 0, r.stderr
    assert "completed 1" in r.stdout


@pytest.mark.skipif(sys.platform == "win32", reason="a pseudo-terminal is POSIX")
def test_compact_progress_on_a_terminal_shows_a_conversation_id_as_it_is(tmp_path):
    """The progress bar (stderr on a terminal) read its description as Rich markup: the id
    `c[/x]` stopped the run with `internal error: MarkupError`."""
    import subprocess

    db = tmp_path / "store.duckdb"
    with Store.open(db) as store:
        build(store, {"c[/x]": 30})
    terminal = TerminalReader()
    proc = subprocess.run(
        [sys.executable, "-m", "lexkeep.cli.main", "compact", "--db", str(db)],
        stdout=subprocess.PIPE,
        stderr=terminal.follower,
        text=True,
        timeout=120,
    )
    terminal.started()
    terminal.close()
    assert proc.returncode == 0, terminal.text()
    assert "completed 1" in proc.stdout
    assert b"MarkupError" not in terminal.seen, terminal.text()


@pytest.mark.parametrize("fmt", ["text", "json"])
def test_a_plugin_that_cancelled_its_calls_stops_the_run_with_the_counts(cli, db_file, fmt):
    """A plugin whose calls end `cancelled` (its own cancel() was called) stops the run: the
    first segment is stored, the cancelled call's claim is given back with no attempt, and
    the counts come before the error (exit 2), as for the other ways a run stops."""
    from lexkeep.compaction.summarizers import Generation, Summarizer, register

    class CancelledAfterOne(Summarizer):
        name = "cancelled-after-one"
        model_id = "test/cancelled-after-one"

        def __init__(self) -> None:
            self.calls = 0

        def summarize(self, request):
            self.calls += 1
            if self.calls > 1:
                return Generation("", "cancelled", error="cancelled")
            return Generation("Summary: ORD_88400.")

    register("cancelled-after-one-test", lambda argument, options: CancelledAfterOne())
    with Store.open(db_file) as store:
        build(store, {"c1": 60})  # four segments
    r = cli("compact", "--db", db_file, "-s", "cancelled-after-one-test", "--format", fmt)
    assert r.exit_code == 2, r.stdout + r.stderr
    assert r.stderr.startswith(
        "Error: the summariser was cancelled (its cancel() was called), so the run stopped\n"
        "Hint: nothing was counted as an attempt for the calls it cancelled;"
    ), r.stderr
    if fmt == "json":
        doc = json.loads(r.stdout)
        counts = ("planned", "claimed", "completed", "failed", "remaining", "claims_held")
        assert [doc[k] for k in counts] == [4, 1, 1, 0, 3, 0], doc
        assert doc["error"] == r.stderr.splitlines()[0].removeprefix("Error: ")
        assert doc["interrupted"] is False and doc["unreachable"] is None
    else:
        assert r.stdout.splitlines()[0] == (
            "1 conversation: planned 4, claimed 1, completed 1, failed 0, skipped 0"
        )
        assert r.stdout.splitlines()[-1] == (
            "stopped: the summariser was cancelled; these counts are what finished before it;"
            " 3 planned segments were not summarised (no attempt was counted), and a later run"
            " takes them up"
        ), r.stdout
    with Store.open(db_file, read_only=True) as store:
        assert store.con.execute("SELECT status FROM compactions").fetchall() == [("completed",)]


def test_a_crash_mid_run_prints_the_counts_before_the_internal_error(cli, db_file, monkeypatch):
    """A crash storing the second batch's summaries exited 2 with the internal error alone:
    the first batch's summaries were stored, but nothing said so."""
    from lexkeep.compaction import engine, jobs

    with Store.open(db_file) as store:
        build(store, {"c1": 30, "c2": 30})  # one segment each
    monkeypatch.setattr(engine, "BATCH_CONVERSATIONS", 1)  # one write per conversation
    real, calls = jobs.complete_many, []

    def complete_many(con, items, **kwargs):  # injected fault: the second write crashes
        calls.append(items)
        if len(calls) == 2:
            raise RuntimeError("the write crashed")
        return real(con, items, **kwargs)

    monkeypatch.setattr(jobs, "complete_many", complete_many)
    monkeypatch.delenv("LEXKEEP_DEBUG", raising=False)
    result = cli("compact", "--db", str(db_file))
    assert result.exit_code == 2, result.stderr
    assert result.stderr == (
        "Error: internal error: RuntimeError: the write crashed\n"
        "Hint: set LEXKEEP_DEBUG=1 for the traceback, and report it\n"
    )
    assert result.stdout.splitlines() == [
        "2 conversations: planned 2, claimed 1, completed 1, failed 0, skipped 0",
        "identifiers of the summarised answers kept verbatim: 20/20 (100.0%)",
        "stopped: an error stopped the run; these counts are what finished before it; 1 planned"
        " segment was not summarised (no attempt was counted), and a later run takes it up",
    ]
    with Store.open(db_file, read_only=True) as store:
        rows = store.con.execute(
            "SELECT conversation_id, status FROM compactions ORDER BY ALL"
        ).fetchall()
    assert rows == [("c1", "completed")]  # c2's claim was given back
