"""A file that mixes trace formats (e.g. `cat *.jsonl > all.jsonl`) is refused, not half read.

Each format's reader reads a whole file (the Claude Code and Codex readers keep per-file state),
so a line positively recognised as another format than the file was detected as stops
`ingest` and `audit` with exit 2, naming FILE:LINE, both formats and the way out; nothing of
the file is stored. Forcing a format with --input-format still reads every line as that one.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import SAMPLE_TRACES, SHARED_DATA, ingest_rows

from lexkeep.core.errors import InputError
from lexkeep.core.fastload import drop_staging, stage
from lexkeep.core.ingest import ingest_paths, read_records
from lexkeep.core.store import Store

CLAUDE = SAMPLE_TRACES / "claude_lost_path.jsonl"
CODEX = SAMPLE_TRACES / "codex_kept_verbatim.jsonl"
INVOICE = SAMPLE_TRACES / "invoice_altered.jsonl"


def _cat(out: Path, *files: Path) -> Path:
    out.write_bytes(b"".join(f.read_bytes() for f in files))
    return out


def _lines(path: Path) -> int:
    return len(path.read_bytes().splitlines())


def _assert_refused(result, path: Path, line: int, found: str, read_as: str) -> None:
    assert result.exit_code == 2, (result.stdout, result.stderr)
    error, hint = result.stderr.splitlines()[-2:]
    assert error.startswith(f"Error: {path}:{line}: "), error
    assert found in error and read_as in error, error
    assert hint.startswith("Hint:") and "split the file" in hint and "--input-format" in hint


def test_ingest_refuses_claude_lines_in_a_file_read_as_lexkeep(cli, db_file, tmp_path):
    mixed = _cat(tmp_path / "m.jsonl", CLAUDE, INVOICE)
    result = cli("ingest", mixed, "--db", db_file)
    _assert_refused(result, mixed, 1, "claude", "lexkeep")
    with Store.open(db_file) as store:
        assert not any(ingest_rows(store).values())  # nothing half written


def test_skip_invalid_does_not_skip_another_format_s_lines(cli, db_file, tmp_path):
    mixed = _cat(tmp_path / "m.jsonl", CLAUDE, INVOICE)
    result = cli("ingest", mixed, "--db", db_file, "--skip-invalid")
    _assert_refused(result, mixed, 1, "claude", "lexkeep")


def test_the_line_named_is_the_first_of_the_other_format(cli, db_file, tmp_path):
    mixed = _cat(tmp_path / "m.jsonl", INVOICE, CODEX)
    result = cli("ingest", mixed, "--db", db_file)
    _assert_refused(result, mixed, _lines(INVOICE) + 1, "codex", "lexkeep")
    mixed = _cat(tmp_path / "n.jsonl", CODEX, CLAUDE)
    result = cli("ingest", mixed, "--db", db_file)
    _assert_refused(result, mixed, _lines(CODEX) + 1, "claude", "codex")


def test_audit_refuses_a_mixed_file_and_the_gate_does_not_pass(cli, tmp_path):
    mixed = _cat(tmp_path / "m.jsonl", CLAUDE, INVOICE)
    result = cli("audit", mixed, "-f", "json")
    _assert_refused(result, mixed, 1, "claude", "lexkeep")
    assert "INV-2025-08-44719" not in result.stdout


def test_files_before_a_mixed_one_stay_stored(cli, db_file, tmp_path):
    folder = tmp_path / "traces"
    folder.mkdir()
    (folder / "a.jsonl").write_bytes(INVOICE.read_bytes())
    mixed = _cat(folder / "b.jsonl", INVOICE, CLAUDE)
    result = cli("ingest", folder, "--db", db_file)
    _assert_refused(result, mixed, _lines(INVOICE) + 1, "claude", "lexkeep")
    report = json.loads(cli("stats", "--db", db_file, "--format", "json").stdout)
    assert report["files_ingested"] == 1


def test_fast_path_refuses_a_mixed_file_too(tmp_path):
    """DuckDB's load of a lexkeep file hands a mixed one to the general path, which refuses it."""
    mixed = _cat(tmp_path / "m.jsonl", INVOICE, CLAUDE)
    alone = _cat(tmp_path / "alone.jsonl", INVOICE)
    with Store.open(tmp_path / "s.duckdb") as store:
        assert stage(store, str(alone)) is not None  # the fast path takes the file alone
        drop_staging(store.con)
        assert stage(store, str(mixed)) is None
        with pytest.raises(InputError) as err:
            ingest_paths(store, [str(mixed)], fast_min_bytes=0)
        assert err.value.line == _lines(INVOICE) + 1
        assert "claude" in err.value.message and "lexkeep" in err.value.message
        assert not any(ingest_rows(store).values())


def test_forced_format_still_reads_every_line_as_that_format(cli, db_file, tmp_path):
    mixed = _cat(tmp_path / "m.jsonl", CLAUDE, INVOICE)
    result = cli("ingest", mixed, "--db", db_file, "--input-format", "lexkeep")
    assert result.exit_code == 0, result.stderr
    assert "unknown_type=" in result.stderr


def test_read_records_refuses_a_mixed_file(tmp_path):
    mixed = _cat(tmp_path / "m.jsonl", CLAUDE, INVOICE)
    with pytest.raises(InputError) as err:
        list(read_records(mixed))
    assert err.value.path == str(mixed) and err.value.line == 1


@pytest.mark.skipif(not SHARED_DATA.is_dir(), reason="shared corpus not available")
def test_no_real_claude_or_codex_session_is_called_mixed():
    """Real sessions hold line types no reader knows yet: none of them is another format."""
    checked = 0
    # .json too: tau-bench result documents are OpenAI chat records (with `tool_calls`)
    for path in sorted([*SHARED_DATA.rglob("*.jsonl"), *SHARED_DATA.rglob("*.json")]):
        try:
            for _ in read_records(path):
                pass
        except InputError as exc:
            assert "is read as" not in exc.message, f"{path}: {exc}"
            assert "mixes formats" not in exc.message, f"{path}: {exc}"
        checked += 1
    assert checked > 100


RESPONSES_REQUESTS = Path(__file__).resolve().parent / "fixtures" / "responses"
RESPONSES_LOG = RESPONSES_REQUESTS / "responses_requests.jsonl"
ANTHROPIC_LOG = Path(__file__).resolve().parent / "fixtures" / "request_logs"
ANTHROPIC_LOG = ANTHROPIC_LOG / "anthropic_compaction.jsonl"
# One OpenAI chat request as a proxy logs it: its tool call is OpenAI's alone.
CHAT_REQUEST = {
    "id": "chat-1",
    "model": "gpt-4o",
    "messages": [
        {"role": "user", "content": "Refund ORD-77812"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "call_1",
                    "type": "function",
                    "function": {"name": "refund", "arguments": '{"order":"ORD-77812"}'},
                }
            ],
        },
    ],
}
STREAM_EVENT = {
    "type": "response.output_item.done",
    "output_index": 0,
    "sequence_number": 4,
    "item": {
        "id": "fc_1",
        "type": "function_call",
        "call_id": "call_1",
        "name": "refund",
        "arguments": '{"order":"ORD-77812"}',
        "status": "completed",
    },
}


def _line(value: dict) -> bytes:
    return json.dumps(value).encode() + b"\n"


@pytest.mark.parametrize(
    ("first", "appended", "found", "read_as"),
    [
        (CLAUDE, RESPONSES_LOG.read_bytes().splitlines()[2] + b"\n", "openai", "claude"),
        (CODEX, ANTHROPIC_LOG.read_bytes().splitlines()[3] + b"\n", "anthropic", "codex"),
        (INVOICE, _line(CHAT_REQUEST), "openai", "lexkeep"),
        (CLAUDE, _line(STREAM_EVENT), "openai", "claude"),
        (ANTHROPIC_LOG, RESPONSES_LOG.read_bytes().splitlines()[0] + b"\n", "openai", "anthropic"),
        (ANTHROPIC_LOG, _line(CHAT_REQUEST), "openai", "anthropic"),
    ],
    ids=[
        "responses-in-claude",
        "anthropic-in-codex",
        "chat-in-lexkeep",
        "stream-in-claude",
        "responses-in-anthropic",
        "chat-in-anthropic",
    ],
)
def test_request_log_lines_in_another_format_s_file_are_refused(
    cli, db_file, tmp_path, first, appended, found, read_as
):
    """A request-log or Responses line appended to another format's file was counted as an
    `unknown_type` note and its user text and tool calls never read: it is refused like a
    Claude Code or Codex line, at its own line."""
    mixed = tmp_path / "m.jsonl"
    mixed.write_bytes(first.read_bytes() + appended)
    result = cli("ingest", mixed, "--db", db_file)
    _assert_refused(result, mixed, _lines(first) + 1, found, read_as)
    with Store.open(db_file) as store:
        assert not any(ingest_rows(store).values())


def test_an_anthropic_log_read_as_openai_chat_is_not_refused(cli, db_file, tmp_path):
    """An Anthropic request log whose first requests hold only text (and no system prompt)
    is detected as OpenAI chat, which reads `messages` records of both: a later request with
    a `tool_use` block is not another format's line there."""
    text_only = {
        "id": "s1",
        "model": "claude-sonnet-4-5",
        "messages": [{"role": "user", "content": "Refund ORD-77812"}],
    }
    with_tool = {
        **text_only,
        "messages": [
            {"role": "user", "content": "Refund ORD-77812"},
            {
                "role": "assistant",
                "content": [
                    {"type": "tool_use", "id": "toolu_1", "name": "refund", "input": {"o": 1}}
                ],
            },
        ],
    }
    log = tmp_path / "log.jsonl"
    log.write_bytes(b"".join(_line(text_only) for _ in range(25)) + _line(with_tool))
    result = cli("ingest", log, "--db", db_file)
    assert result.exit_code == 0, result.stderr
    assert f"{log}: ingested (openai)" in result.stderr, result.stderr
