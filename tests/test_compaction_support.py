"""Test helper (no tests): build conversations straight into a store with Store.bulk_insert,
tell whether a summariser's process is gone, and serve chat completions that stall."""

from __future__ import annotations

import contextlib
import json
import os
import socket
import threading
import time
from collections.abc import Callable, Iterable
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


class TerminalReader:
    """A pseudo-terminal for a child's standard error (so a progress bar is drawn): give the
    child `follower`, then call `started()`; `seen` holds what it wrote so far, read by a
    daemon thread; `close()` once the child has ended."""

    def __init__(self) -> None:
        import pty

        self.leader, self.follower = pty.openpty()
        self.seen = bytearray()
        self._reader = threading.Thread(target=self._drain, daemon=True)
        self._reader.start()

    def _drain(self) -> None:
        with contextlib.suppress(OSError):  # EIO once the child closed the terminal
            while chunk := os.read(self.leader, 65536):
                self.seen.extend(chunk)

    def started(self) -> None:
        """The child holds the follower end: close ours, so its end is the terminal's end."""
        os.close(self.follower)

    def close(self) -> None:
        """Wait for the reader to take what is left, then close the terminal."""
        self._reader.join(10)
        os.close(self.leader)

    def text(self) -> str:
        return bytes(self.seen).decode("utf-8", "replace")


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


SUMMARY_BODY = json.dumps(
    {
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": "Summary: ORD_88400."},
                "finish_reason": "stop",
            }
        ]
    }
).encode()


class StallingOpenAI:
    """A chat-completions server on 127.0.0.1 that answers each request by a plan: one letter
    per request in the order they arrive (the last letter repeats; `plan` may be changed
    between requests).

    `a` answers with a normal stop; `u` answers HTTP 401 (a missing key: the same failure
    every time); `n` takes the request and never answers (the connection stays open until the
    client closes it); `d` sends the head of an answer and then its body a byte every 0.5 s,
    so the connection is never idle for long but the answer takes minutes. `before_answer(n)`
    runs before request n gets an `a` or `u` answer. For each request the server records when
    it arrived (`arrived`), when its answer was sent (`answered`) and when the client closed
    the connection of a request it left unanswered (`hung_up`).
    """

    def __init__(self, plan: str, before_answer: Callable[[int], None] | None = None) -> None:
        self.plan = plan
        self.before_answer = before_answer
        self.arrived: list[float] = []
        self.answered: dict[int, float] = {}
        self.hung_up: dict[int, float] = {}
        self._lock = threading.Lock()
        self._connections: list[socket.socket] = []
        self._listener = socket.create_server(("127.0.0.1", 0))
        port = self._listener.getsockname()[1]
        self.url = f"http://127.0.0.1:{port}/v1"
        threading.Thread(target=self._accept, daemon=True).start()

    def __enter__(self) -> StallingOpenAI:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Stop listening and close every connection still open."""
        with contextlib.suppress(OSError):
            self._listener.close()
        with self._lock:
            for conn in self._connections:
                with contextlib.suppress(OSError):
                    conn.close()

    def wait_for(self, requests: int, seconds: float) -> None:
        """Wait until `requests` requests have arrived."""
        deadline = time.monotonic() + seconds
        while len(self.arrived) < requests:
            if time.monotonic() > deadline:
                raise AssertionError(f"{len(self.arrived)} of {requests} requests arrived")
            time.sleep(0.02)

    def _accept(self) -> None:
        with contextlib.suppress(OSError):
            while True:
                conn, _ = self._listener.accept()
                with self._lock:
                    self._connections.append(conn)
                threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        with contextlib.suppress(OSError), conn:
            data = b""
            while b"\r\n\r\n" not in data:
                chunk = conn.recv(65536)
                if not chunk:
                    return
                data += chunk
            head, _, rest = data.partition(b"\r\n\r\n")
            length = next(
                int(line.split(b":", 1)[1])
                for line in head.split(b"\r\n")
                if line.lower().startswith(b"content-length:")
            )
            while len(rest) < length:
                chunk = conn.recv(65536)
                if not chunk:
                    return
                rest += chunk
            with self._lock:
                n = len(self.arrived)
                self.arrived.append(time.time())
                mode = self.plan[min(n, len(self.plan) - 1)]
            if mode in "au":
                if self.before_answer is not None:
                    self.before_answer(n)
                if mode == "a":
                    status, body = b"200 OK", SUMMARY_BODY
                else:
                    status, body = b"401 Unauthorized", b'{"error": "no key"}'
                conn.sendall(
                    b"HTTP/1.1 "
                    + status
                    + b"\r\nContent-Type: application/json\r\n"
                    + f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n".encode()
                    + body
                )
                self.answered[n] = time.time()
                return
            try:
                if mode == "n":
                    while conn.recv(65536):  # never answers; ends when the client closes
                        pass
                else:  # "d"
                    conn.sendall(
                        b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                        + f"Content-Length: {len(SUMMARY_BODY)}\r\n\r\n".encode()
                    )
                    conn.settimeout(0.5)
                    for byte in SUMMARY_BODY:
                        conn.sendall(bytes([byte]))
                        with contextlib.suppress(TimeoutError):
                            if not conn.recv(1):  # the client closed the connection
                                break
                    else:
                        self.answered[n] = time.time()
                        return
            except OSError:  # reset by the client
                pass
            self.hung_up[n] = time.time()
