"""A request log logrotate rotated between two ingests: the timeline is what its requests say.

`requests.jsonl` ingested, then renamed `requests.jsonl.1` by logrotate while the client went
on in a new `requests.jsonl`: the store held the old file's records under the name the new file
now has, and the new file, whose first bytes changed, was read again from its start as a file
whose lines had been fixed. Its records were put in line order among the old file's records of
the same conversation: the new file's line 1 went before the old file's line 2, so a call made
after a compaction stood before it and the user's later turns before their earlier ones
(`lexkeep show`), and the audit judged the wrong tool calls. The new file's records now follow
the old file's, as one ingest of the whole log places them, whatever order the files are
ingested in.
"""

from __future__ import annotations

import gzip
import json
import re
import sys
from collections import Counter
from pathlib import Path

import pytest
from conftest import COMPACTED_LOG, COMPACTED_LOG_VERDICTS

from lexkeep.core.store import Store

COMPACTED = COMPACTED_LOG  # one conversation, two compactions (conftest)
EXPECTED = COMPACTED_LOG_VERDICTS  # one ingest of the whole log

CUT = 4  # the rotation: the first four requests in the old file, the others in the new one


def _records(ids: bool) -> list[dict]:
    records = [json.loads(line) for line in COMPACTED.read_text().splitlines()]
    if not ids:
        for record in records:
            del record["conversation_id"]
    return records


def _write(path: Path, records: list[dict]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


def _timeline(db: Path) -> list[tuple]:
    """Every record of the store's one conversation in timeline order: (table, id, text),
    the conversation's id written `C`, positions 0, 1, 2... without a gap."""
    with Store.open(db) as store:
        con = store.con
        (conv,), *more = con.execute("SELECT id FROM conversations").fetchall()
        assert not more
        rows = con.execute(
            "SELECT position, 'message', id, text FROM messages"
            " UNION ALL SELECT position, 'call', call_id, arguments_raw FROM tool_calls"
            " UNION ALL SELECT position, 'result', call_id, text FROM tool_results"
            " UNION ALL SELECT position, 'boundary', id, summary_text FROM boundaries"
            " ORDER BY position"
        ).fetchall()
    assert [r[0] for r in rows] == list(range(len(rows)))
    return [(kind, key.replace(conv, "C"), text) for _, kind, key, text in rows]


def _findings(cli, db: Path) -> dict[str, tuple]:
    """Each identifier's verdict, the boundary it was audited at and its evidence call (ids,
    the conversation's written `C`)."""
    audited = cli("audit", "--db", db, "--format", "json", "--exit-zero")
    assert audited.exit_code == 0, audited.stderr
    out = {}
    for f in json.loads(audited.stdout)["findings"]:
        conv = f["conversation_id"]
        evidence = f["evidence"] and f["evidence"]["call_id"]
        out[f["value"]] = (f["verdict"], f["boundary"]["id"].replace(conv, "C"), evidence)
    return out


def _check_lines(db: Path) -> None:
    """Every stored message and tool call names a file and line that hold it: the line
    `lexkeep show` and the audit's evidence send the reader to."""
    with Store.open(db) as store:
        rows = store.con.execute(
            "SELECT text, source_file, source_line FROM messages WHERE text <> ''"
            " UNION ALL SELECT call_id, source_file, source_line FROM tool_calls"
        ).fetchall()
    assert rows
    for text, file, line in rows:
        held = Path(file).read_text().splitlines()[line - 1]
        assert json.dumps(text.split("#")[0])[1:-1] in held, (text, file, line)


_PLACE = ("source_file", "source_line")


def _shown(cli, db: Path) -> list[dict]:
    """The entries `lexkeep show` prints, in its order, and the runs, without the file and
    line each was read from (the old file's are stored under the name it had when first
    read)."""
    with Store.open(db) as store:
        (conv,) = store.con.execute("SELECT id FROM conversations").fetchone()
    shown = cli("show", conv, "--db", db, "--format", "json")
    assert shown.exit_code == 0, shown.stderr
    got = json.loads(shown.stdout.replace(conv, "C"))
    entries = [{k: v for k, v in e.items() if k not in _PLACE} for e in got["entries"]]
    return [got["runs"], *entries]


def _ingest(cli, db: Path, *targets: Path) -> str:
    done = cli("ingest", *targets, "--db", db)
    assert done.exit_code == 0, done.stderr
    assert "left out" not in done.stderr
    return done.stderr


# How the two files reach the store: "one command" reads both files of a store that held
# nothing; the others ingested `requests.jsonl` before logrotate renamed it, then read the
# rotated log by one command ("folder") or by one command per file, the renamed file first
# or last ("renamed first", "renamed last").
CASES = ["one command", "folder", "renamed first", "renamed last"]


@pytest.mark.parametrize("case", CASES)
def test_a_log_with_ids_keeps_its_timeline_across_logrotate(cli, tmp_path, case):
    _check_rotation(cli, tmp_path, case, ids=True)


@pytest.mark.parametrize("case", ["one command", "folder"])
def test_a_log_without_ids_keeps_its_timeline_across_logrotate(cli, tmp_path, case):
    """Without ids the new file's requests go on with the old file's conversation only when
    one command reads both (docs/formats.md, *Requests without ids*)."""
    _check_rotation(cli, tmp_path, case, ids=False)


def _check_rotation(cli, tmp_path: Path, case: str, ids: bool) -> None:
    records = _records(ids)
    whole = tmp_path / "whole.duckdb"
    _ingest(cli, whole, _write(tmp_path / "one" / "requests.jsonl", records))
    expected = _timeline(whole)

    logs = tmp_path / "logs"
    current, renamed = logs / "requests.jsonl", logs / "requests.jsonl.1"
    db = tmp_path / "s.duckdb"
    _write(current, records[:CUT])
    if case == "one command":
        current.rename(renamed)
        _write(current, records[CUT:])
        _ingest(cli, db, logs)
    else:
        _ingest(cli, db, logs)
        current.rename(renamed)
        _write(current, records[CUT:])
        if case == "folder":
            _ingest(cli, db, logs)
        elif case == "renamed first":
            _ingest(cli, db, renamed)
            _ingest(cli, db, current)
        else:
            _ingest(cli, db, current)
            assert _timeline(db) == expected
            _ingest(cli, db, renamed)
    got = _timeline(db)
    assert got == expected
    _check_lines(db)
    assert _shown(cli, db) == _shown(cli, whole)
    findings = _findings(cli, db)
    assert findings == _findings(cli, whole)
    assert {value: found[0] for value, found in findings.items()} == EXPECTED
    if not ids:
        with Store.open(db) as store:
            (conv,) = store.con.execute("SELECT id FROM conversations").fetchone()
        assert re.fullmatch(r"requests\.jsonl#[0-9a-f]{16}", conv)


@pytest.mark.parametrize("commands", [1, 2])
def test_an_answer_in_the_next_file_completes_the_turn_it_answers(cli, tmp_path, commands):
    """The user's turn ends the old file with a tool call, its answer begins the new one: the
    answer had no run and the turn stayed `running`, the status of a turn still waiting.
    Read by one command or by two (the store's turn goes on), it is the one file's turn."""
    call = {"id": "call_1", "type": "function", "function": {"name": "lookup", "arguments": "{}"}}
    user = {"role": "user", "content": "Refund ORD-77812"}
    called = {"role": "assistant", "content": None, "tool_calls": [call]}
    result = {"role": "tool", "tool_call_id": "call_1", "content": "ok"}
    done = {"role": "assistant", "content": "Done."}
    requests = [
        {"session_id": "s", "messages": [user], "response": {"choices": [{"message": called}]}},
        {
            "session_id": "s",
            "messages": [user, called, result],
            "response": {"choices": [{"message": done}]},
        },
    ]
    logs = tmp_path / "logs"
    db = tmp_path / "s.duckdb"
    current = _write(logs / "requests.jsonl", requests[:1])
    if commands == 2:
        _ingest(cli, db, logs)
    current.rename(logs / "requests.jsonl.1")
    _write(current, requests[1:])
    _ingest(cli, db, logs)
    with Store.open(db) as store:
        runs = store.con.execute("SELECT id, status FROM runs").fetchall()
        messages = store.con.execute(
            "SELECT text, run_id FROM messages ORDER BY position"
        ).fetchall()
    assert runs == [("s/0/run", "completed")]
    assert messages == [("Refund ORD-77812", "s/0/run"), ("", "s/0/run"), ("Done.", "s/0/run")]


def _places(db: Path) -> list[tuple]:
    """(table, file name, line) of every row that names where it was read, in a stable order."""
    with Store.open(db) as store:
        rows = store.con.execute(
            "SELECT 'conversation', id, source_file, source_line FROM conversations"
            " UNION ALL SELECT 'run', id, source_file, source_line FROM runs"
            " UNION ALL SELECT 'message', id, source_file, source_line FROM messages"
            " UNION ALL SELECT 'call', call_id, source_file, source_line FROM tool_calls"
            " UNION ALL SELECT 'result', call_id, source_file, source_line FROM tool_results"
            " ORDER BY ALL"
        ).fetchall()
    return [(kind, key, Path(file).name, line) for kind, key, file, line in rows]


# The old file's records, by the line of `requests.jsonl` they were read from: two requests.
_OLD = [
    {"session_id": "s", "messages": [{"role": "user", "content": "Refund ORD-77812"}],
     "response": {"choices": [{"message": {"role": "assistant", "content": "Which card?"}}]}},
    {"session_id": "s", "messages": [
        {"role": "user", "content": "Refund ORD-77812"},
        {"role": "assistant", "content": "Which card?"},
        {"role": "user", "content": "The card ending 4242"}],
     "response": {"choices": [{"message": {"role": "assistant", "content": "Refunded."}}]}},
]  # fmt: skip
_NEW = [
    {"session_id": "s", "messages": [
        *_OLD[1]["messages"],
        {"role": "assistant", "content": "Refunded."},
        {"role": "user", "content": "Thanks"}],
     "response": {"choices": [{"message": {"role": "assistant", "content": "Bye."}}]}},
]  # fmt: skip


@pytest.mark.parametrize(
    "case",
    [
        "folder",
        "renamed first",
        "renamed last",
        "current only",
        "compressed",
        "renamed alone",
        "moved",
        "olddir, renamed last",
        "olddir, one command",
        "copytruncate, copy last",
    ],
)
def test_records_of_a_renamed_log_name_the_file_their_line_is_in_now(cli, tmp_path, case):
    """logrotate renamed `requests.jsonl` to `requests.jsonl.1` after an ingest: the records
    stored from it still named `requests.jsonl:2`, a line that file no longer holds, so
    `lexkeep show` and the audit's evidence sent the reader to the wrong line. An ingest that
    finds the renamed copy by its first bytes (reading the copy, or the new file beside it)
    now has them name `requests.jsonl.1`, the file and line they are in now. So does a copy
    in another folder (logrotate's olddir) ingested after the new file, by a later command
    or by the same one, and a copy logrotate's copytruncate made, ingested after the file it
    emptied."""
    logs = tmp_path / "logs"
    db = tmp_path / "s.duckdb"
    current = _write(logs / "requests.jsonl", _OLD)
    _ingest(cli, db, logs)
    before = _places(db)
    renamed = logs / "requests.jsonl.1"
    if case == "moved":  # moved to another folder, under its own name, no new file
        renamed = logs / "old" / "requests.jsonl"
        renamed.parent.mkdir()
    if case.startswith("olddir"):  # logrotate's olddir: the copy is in another folder
        renamed = tmp_path / "old" / "requests.jsonl.1"
        renamed.parent.mkdir()
    if case.startswith("copytruncate"):  # copied, then the file emptied in place
        renamed.write_bytes(current.read_bytes())
        current.write_bytes(b"")
    elif case == "compressed":  # logrotate's compress: requests.jsonl.1.gz, the new file beside
        renamed = logs / "requests.jsonl.1.gz"
        renamed.write_bytes(gzip.compress(current.read_bytes()))
        current.unlink()
    else:
        current.rename(renamed)
    if case not in ("renamed alone", "moved", "copytruncate, copy last"):
        _write(current, _NEW)
    if case in ("folder", "compressed"):
        _ingest(cli, db, logs)
    elif case in (
        "renamed last",
        "current only",
        "olddir, renamed last",
        "copytruncate, copy last",
    ):
        _ingest(cli, db, current)
        if case != "current only":
            _ingest(cli, db, renamed)
    elif case == "olddir, one command":
        _ingest(cli, db, current, renamed)
    else:
        _ingest(cli, db, renamed)
        if case == "renamed first":
            _ingest(cli, db, current)
    expected = [(kind, key, renamed.name, line) for kind, key, _, line in before]
    if case not in ("renamed alone", "moved", "copytruncate, copy last"):
        expected += [
            ("message", "s/4", "requests.jsonl", 1),
            ("message", "s/5", "requests.jsonl", 1),
            ("run", "s/4/run", "requests.jsonl", 1),
        ]
    assert sorted(_places(db)) == sorted(expected)
    if case == "moved":
        assert {file for _, _, file, _ in _places(db)} == {"requests.jsonl"}
        with Store.open(db) as store:
            files = {r[0] for r in store.con.execute("SELECT source_file FROM messages").fetchall()}
        assert files == {str(renamed)}
    shown = cli("show", "s", "--db", db)
    assert shown.exit_code == 0, shown.stderr
    assert f"user run=completed  {renamed}:2\n    The card ending 4242" in shown.stdout


def test_a_copy_beside_its_file_leaves_the_records_naming_the_file(cli, tmp_path):
    """A copy of a file that is still there (a backup) is no rename: the records keep naming
    the file they were read from."""
    logs = tmp_path / "logs"
    db = tmp_path / "s.duckdb"
    current = _write(logs / "requests.jsonl", _OLD)
    _ingest(cli, db, logs)
    before = _places(db)
    backup = tmp_path / "backup" / "requests.jsonl.1"
    backup.parent.mkdir()
    backup.write_bytes(current.read_bytes())
    _ingest(cli, db, backup)
    assert _places(db) == before


@pytest.mark.parametrize("commands", [1, 2])
def test_a_turn_the_next_file_leaves_unanswered_fails_as_in_one_file(cli, tmp_path, commands):
    """The user's turn ends the old file unanswered (the request got no answer), and the new
    file's first request of the conversation sends it again with the user's next message: the
    turn was never answered, which one file of the whole log calls `failed`, but it stayed
    `running` (the status of a file's last turn, still waiting), read by one command or two."""
    user = {"role": "user", "content": "Refund ORD-77812"}
    again = {"role": "user", "content": "Hello? Refund ORD-77812"}
    done = {"role": "assistant", "content": "Refunded."}
    requests = [
        {"session_id": "s", "messages": [user]},
        {
            "session_id": "s",
            "messages": [user, again],
            "response": {"choices": [{"message": done}]},
        },
    ]
    whole = tmp_path / "whole.duckdb"
    _ingest(cli, whole, _write(tmp_path / "one" / "requests.jsonl", requests))
    logs = tmp_path / "logs"
    db = tmp_path / "s.duckdb"
    current = _write(logs / "requests.jsonl", requests[:1])
    if commands == 2:
        _ingest(cli, db, logs)
    current.rename(logs / "requests.jsonl.1")
    _write(current, requests[1:])
    _ingest(cli, db, logs)
    runs = []
    for store_file in (whole, db):
        with Store.open(store_file) as store:
            runs.append(store.con.execute("SELECT id, status FROM runs ORDER BY id").fetchall())
    assert runs[0] == [("s/0/run", "failed"), ("s/1/run", "completed")]
    assert runs[1] == runs[0]


def test_an_old_file_read_after_the_new_one_leaves_the_statuses_as_they_are(cli, tmp_path):
    """The rotated copy of a log without ids ingested after the new file, each by its own
    command: the new file's conversation is one of its own (it sends the copy's history, which
    no file it was read with holds), and reading the copy again (its records stored already)
    changes the status of no turn: the copy's turn still waits, the new file's is answered."""
    user = {"role": "user", "content": "Refund ORD-77812"}
    called = {"role": "assistant", "content": "Which card?"}
    again = {"role": "user", "content": "The card ending 4242"}
    done = {"role": "assistant", "content": "Refunded."}
    logs = tmp_path / "logs"
    db = tmp_path / "s.duckdb"
    current = _write(logs / "requests.jsonl", [{"messages": [user, called, again]}])
    _ingest(cli, db, current)
    current.rename(logs / "requests.jsonl.1")
    _write(
        current, [{"messages": [user, called, again], "response": {"choices": [{"message": done}]}}]
    )
    _ingest(cli, db, current)
    with Store.open(db) as store:
        before = store.con.execute("SELECT id, status FROM runs ORDER BY ALL").fetchall()
    _ingest(cli, db, logs / "requests.jsonl.1")
    with Store.open(db) as store:
        after = store.con.execute("SELECT id, status FROM runs ORDER BY ALL").fetchall()
    assert sorted(status for _, status in after) == [
        "completed",
        "completed",
        "completed",
        "running",
    ]
    assert after == before


@pytest.mark.parametrize("case", ["renamed alone", "moved", "renamed, then the new file"])
def test_the_ingest_notes_of_a_renamed_log_name_the_file_once(cli, tmp_path, case):
    """What an ingest noted of a file (records of an unknown type, here) stayed under its old
    name after an ingest found it renamed, while the renamed file's own read noted the same
    lines again: `lexkeep audit --db` counted them twice, in two files, and `stats` counted
    two files. They name the renamed file, once."""
    logs = tmp_path / "logs"
    db = tmp_path / "s.duckdb"
    current = _write(logs / "requests.jsonl", [_OLD[0], {"type": "bogus"}, _OLD[1]])
    _ingest(cli, db, logs)
    renamed = logs / "requests.jsonl.1"
    if case == "moved":
        renamed = tmp_path / "old" / "requests.jsonl"
        renamed.parent.mkdir()
    current.rename(renamed)
    _ingest(cli, db, renamed)
    if case == "renamed, then the new file":
        _write(current, _NEW)
        _ingest(cli, db, logs)
    audited = cli("audit", "--db", db, "--format", "json", "--exit-zero")
    assert audited.exit_code == 0, audited.stderr
    unknown = [n for n in json.loads(audited.stdout)["notes"] if "unknown_type" in n]
    assert unknown == [
        "1 record(s) of a type their file's reader does not know were skipped (unknown_type)"
        f" in 1 file(s) (first: {renamed}:2, read as openai); whatever they held is not in"
        " this audit"
    ]
    stats = cli("stats", "--db", db, "--format", "json")
    files = 2 if case == "renamed, then the new file" else 1
    assert json.loads(stats.stdout)["files_ingested"] == files, stats.stdout


_OPENED: list[str] | None = None  # the files opened while a test listens (_listen)
_LISTENING = False


def _note_open(event: str, args: tuple) -> None:
    if event == "open" and _OPENED is not None and isinstance(args[0], str):
        _OPENED.append(args[0])


def _listen() -> None:
    """Hear every file this process opens (an audit hook cannot be removed: it is added once,
    and hears only while _OPENED is a list)."""
    global _LISTENING
    if not _LISTENING:
        sys.addaudithook(_note_open)
        _LISTENING = True


def test_each_file_of_a_rotated_log_is_read_once_to_find_the_copies(cli, tmp_path):
    """logrotate rotated a log of many files ingested before (each `requests.jsonl.N` now holds
    what `.N-1` held): finding the renamed copy of each file read every sibling again, once per
    file of the log (8 files: each opened up to 9 times). Each file is read once for all of
    them now, and the records name the file and line that hold them."""
    global _OPENED
    _listen()
    logs = tmp_path / "logs"
    db = tmp_path / "s.duckdb"
    files = 8

    def name(n: int) -> Path:
        return logs / ("requests.jsonl" if n == 0 else f"requests.jsonl.{n}")

    def requests(k: int) -> list[dict]:
        return [
            {
                "session_id": f"s{k}",
                "messages": [{"role": "user", "content": f"Refund ORD-{k}{i:04d} please"}],
                "response": {"choices": [{"message": {"role": "assistant", "content": f"{i}"}}]},
            }
            for i in range(3)
        ]

    for n in range(files):
        _write(name(n), requests(files - n))
    _ingest(cli, db, logs)
    for n in range(files - 1, -1, -1):
        name(n).rename(name(n + 1))
    _write(name(0), requests(files + 1))
    _OPENED = []
    try:
        _ingest(cli, db, logs)
        opened = Counter(Path(path).name for path in _OPENED if Path(path).parent == logs)
    finally:
        _OPENED = None
    assert set(opened) == {name(n).name for n in range(files + 1)}
    assert max(opened.values()) <= 3, opened  # checked unchanged, read, hashed for copies
    _check_lines(db)
    with Store.open(db) as store:
        named = store.con.execute(
            "SELECT DISTINCT conversation_id, source_file FROM messages ORDER BY ALL"
        ).fetchall()
    assert [(conv, Path(file).name) for conv, file in named] == sorted(
        (f"s{files + 1 - n}", name(n).name) for n in range(files + 1)
    )


def test_a_copy_in_another_folder_that_fails_to_ingest_changes_no_record(cli, tmp_path):
    """The records of a log's old content are renamed in the transaction of the ingest that
    reads its copy: a copy with a bad line stops that ingest (exit 2) and leaves every record,
    and what is kept of the old content's rows, as it was; once fixed, the copy is found."""
    logs = tmp_path / "logs"
    db = tmp_path / "s.duckdb"
    current = _write(logs / "requests.jsonl", _OLD)
    _ingest(cli, db, logs)
    renamed = tmp_path / "old" / "requests.jsonl.1"
    renamed.parent.mkdir()
    current.rename(renamed)
    _write(current, _NEW)
    _ingest(cli, db, current)
    before = _places(db)

    def kept() -> list[tuple]:
        with Store.open(db) as store:
            return store.con.execute("SELECT * FROM renamed_away ORDER BY ALL").fetchall()

    away = kept()
    assert away
    old = renamed.read_bytes()
    renamed.write_bytes(old + b"{not json\n")
    failed = cli("ingest", renamed, "--db", db)
    assert failed.exit_code == 2, failed.stderr
    assert f"{renamed}:3" in failed.stderr
    assert _places(db) == before
    assert kept() == away
    renamed.write_bytes(old)
    _ingest(cli, db, renamed)
    assert kept() == []
    moved = {(kind, key) for kind, key, file, _ in _places(db) if file == renamed.name}
    new = {("message", "s/4"), ("message", "s/5"), ("run", "s/4/run")}  # the new file's
    assert moved == {(kind, key) for kind, key, _, _ in before} - new
    assert {(kind, key) for kind, key, file, _ in _places(db) if file != renamed.name} == new
