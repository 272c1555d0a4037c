"""A `type` field holding a list, an object or a number is odd data, not a crash.

Readers look a record's `type` up in sets of known names; a list or an object cannot be
looked up in a set (Python raises TypeError), which crashed the OpenAI reader outright and
turned Claude Code/Codex lines into `TypeError` details. Every reader must name such a line
as of an unknown type (or skip the part) like any other name it does not know.
"""

from __future__ import annotations

import subprocess
import sys

import orjson
import pytest

from lexkeep.core.ingest import read_records
from lexkeep.core.model import Skipped

ODD = [[], {}, ["message"], 1.5, True]


def lines_for(fmt: str, odd: object) -> list[dict]:
    """A small trace of `fmt` whose `type` fields, at every depth a reader looks, are `odd`."""
    if fmt == "claude":
        return [
            {"type": "user", "uuid": "u1", "sessionId": "s", "parentUuid": None,
             "message": {"role": "user", "content": [{"type": odd, "text": "ORD-1"}]}},
            {"type": odd, "uuid": "u2", "sessionId": "s", "parentUuid": "u1"},
            {"type": "assistant", "uuid": "u3", "sessionId": "s", "parentUuid": "u1",
             "message": {"role": "assistant", "content": [{"type": odd, "id": "t"}]}},
        ]  # fmt: skip
    if fmt == "codex":
        return [
            {"timestamp": "t", "type": "session_meta", "payload": {"id": "s"}},
            {"timestamp": "t", "type": odd, "payload": {"type": "message"}},
            {"timestamp": "t", "type": "response_item", "payload": {"type": odd}},
            {"timestamp": "t", "type": "event_msg", "payload": {"type": odd}},
            {"type": odd},
        ]
    if fmt == "lexkeep":
        return [{"type": "conversation", "id": "c"}, {"type": odd, "conversation_id": "c"}]
    if fmt == "openai":
        return [
            {"model": "m", "input": [{"type": odd}, {"role": "user", "content": "ORD-1"}]},
            {"model": "m", "messages": [{"role": "user", "content": [{"type": odd}]}]},
            {"type": odd},
        ]
    assert fmt == "anthropic"
    return [
        {"model": "m", "messages": [{"role": "user", "content": [{"type": odd, "text": "x"}]}]},
        {"model": "m", "messages": [{"role": "user", "content": "ORD-1"},
                                    {"role": "assistant", "content": [{"type": odd}]}]},
    ]  # fmt: skip


@pytest.mark.parametrize("odd", ODD, ids=lambda v: type(v).__name__)
@pytest.mark.parametrize("fmt", ["claude", "codex", "lexkeep", "openai", "anthropic"])
def test_an_odd_type_value_is_no_crash(tmp_path, fmt, odd):
    path = tmp_path / "trace.jsonl"
    path.write_bytes(b"".join(orjson.dumps(v) + b"\n" for v in lines_for(fmt, odd)))
    for record in read_records(path, fmt):
        if isinstance(record, Skipped):
            assert "TypeError" not in record.detail, record


def test_the_cli_names_the_line_instead_of_an_internal_error(tmp_path):
    path = tmp_path / "log.jsonl"
    path.write_bytes(b'{"type": []}\n{"type": "message", "role": "user", "content": "x"}\n')
    got = subprocess.run(
        [sys.executable, "-m", "lexkeep.cli.main", "audit", str(path), "--input-format", "openai"],
        capture_output=True,
        text=True,
    )
    assert "internal error" not in got.stderr
    assert "TypeError" not in got.stderr + got.stdout
