"""Test helper (no tests): build conversations straight into a store with Store.bulk_insert,
and tell whether a summariser's process is gone."""

from __future__ import annotations

import os
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from lexkeep.core.store import Store

CONVERSATION_COLUMNS = [
    ("id", "VARCHAR"),
    ("format", "VARCHAR"),
    ("max_position", "BIGINT"),
    ("source_file", "VARCHAR"),
    ("source_line", "BIGINT"),
]
TOOL_CALL_COLUMNS = [
    ("conversation_id", "VARCHAR"),
    ("call_id", "VARCHAR"),
    ("message_id", "VARCHAR"),
    ("position", "BIGINT"),
    ("name", "VARCHAR"),
    ("arguments_raw", "VARCHAR"),
    ("arguments_kind", "VARCHAR"),
    ("source_file", "VARCHAR"),
    ("source_line", "BIGINT"),
]


def user_text(cid: str, i: int) -> str:
    """The user text of turn i: a marker no answer contains, plus an identifier."""
    return f"USER-SAYS-{cid}-{i}: please look up INV-2025-08-{44700 + i}"


def answer_text(cid: str, i: int) -> str:
    """The assistant answer of turn i, with identifiers of its own."""
    return f"Answer {i} for {cid}: order ORD_{88400 + i} is on ticket PROJ-{1200 + i}. Done."


@dataclass
class Builder:
    """Accumulates rows for one or more conversations; `write(store)` bulk-inserts them."""

    conversations: list[list] = field(default_factory=list)
    runs: list[list] = field(default_factory=list)
    messages: list[list] = field(default_factory=list)
    tool_calls: list[list] = field(default_factory=list)
    positions: dict[str, int] = field(default_factory=dict)

    def conversation(self, cid: str) -> Builder:
        """Declare a conversation (once)."""
        if cid not in self.positions:
            self.positions[cid] = -1
        return self

    def _next(self, cid: str) -> int:
        self.conversation(cid)
        self.positions[cid] += 1
        return self.positions[cid]

    def run(self, cid: str, rid: str, status: str = "completed") -> Builder:
        """A run row."""
        self.runs.append([rid, cid, status, self._next(cid), "t.jsonl", len(self.runs) + 1])
        return self

    def message(
        self,
        cid: str,
        mid: str,
        run_id: str | None,
        role: str,
        text: str,
        *,
        kind: str | None = None,
        status: str = "completed",
    ) -> Builder:
        """A message row (kind defaults from role)."""
        kind = kind or {"user": "user_text", "assistant": "assistant_text"}.get(role, role)
        self.messages.append(
            [
                mid,
                cid,
                run_id,
                self._next(cid),
                role,
                kind,
                status,
                text,
                None,
                "t.jsonl",
                len(self.messages) + 1,
            ]
        )
        return self

    def tool_call(self, cid: str, call_id: str, message_id: str, arguments: str) -> Builder:
        """A tool call attached to a message."""
        self.tool_calls.append(
            [
                cid,
                call_id,
                message_id,
                self._next(cid),
                "lookup",
                arguments,
                "json_string",
                "t.jsonl",
                len(self.tool_calls) + 1,
            ]
        )
        return self

    def pair(self, cid: str, i: int, **run_kwargs: str) -> Builder:
        """One ordinary eligible turn: run r, user message u, completed answer a."""
        rid = f"{cid}-r{i}"
        self.run(cid, rid, **run_kwargs)
        self.message(cid, f"{cid}-u{i}", rid, "user", user_text(cid, i))
        self.message(cid, f"{cid}-a{i}", rid, "assistant", answer_text(cid, i))
        return self

    def pairs(self, cid: str, n: int, start: int = 0) -> Builder:
        """n ordinary turns numbered start…start+n-1."""
        for i in range(start, start + n):
            self.pair(cid, i)
        return self

    def write(self, store: Store) -> None:
        """Insert everything accumulated, in one transaction."""
        with store.transaction():
            _insert(
                store,
                "conversations",
                CONVERSATION_COLUMNS,
                ([cid, "lexkeep", pos, "t.jsonl", 1] for cid, pos in self.positions.items()),
                on_conflict="(id) DO UPDATE SET max_position = excluded.max_position",
            )
            _insert(store, "runs", None, self.runs)  # every column, schema order
            _insert(store, "messages", None, self.messages)
            _insert(store, "tool_calls", TOOL_CALL_COLUMNS, self.tool_calls)


def _insert(
    store: Store, table: str, columns: list | None, rows: Iterable, on_conflict: str = ""
) -> None:
    store.bulk_insert(table, columns, rows, on_conflict=on_conflict)


def build(store: Store, conversations: dict[str, int]) -> None:
    """Write ordinary conversations {id: number of pairs}."""
    b = Builder()
    for cid, n in conversations.items():
        b.pairs(cid, n)
    b.write(store)


def gone(pid: int, seconds: float) -> bool:
    """True once no process `pid` runs, waiting up to `seconds` (a zombie counts as gone)."""
    deadline = time.monotonic() + seconds
    while True:
        try:
            os.kill(pid, 0)
            stat = Path(f"/proc/{pid}/stat")
            # A killed orphan stays a zombie until its new parent reaps it: it runs no more.
            if stat.exists() and stat.read_text().rpartition(")")[2].split()[0] == "Z":
                return True
        except (ProcessLookupError, FileNotFoundError):  # gone (perhaps between the looks)
            return True
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
