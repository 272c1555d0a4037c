"""Summarisers behind one small interface, and the registry plugins join.

A summariser receives only the 10 assistant answers of a range, each with its assistant message
id (never user text), and returns a `Generation`: text plus how the generation ended. Whether a
generation is acceptable is decided by `check_generation` (the generation contract), not by the
summariser.

Built-ins are registered with `register()`, exactly as a plugin would be; plugins can also
declare an entry point in the group `lexkeep.summarizers` whose object is a factory
`(argument: str, options: SummarizerOptions) -> Summarizer`.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import http.client
import io
import json
import os
import re
import select
import selectors
import shlex
import signal
import socket
import subprocess
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass, field
from importlib import resources
from importlib.metadata import entry_points
from typing import Any

from lexkeep.compaction.jobs import MAX_SUMMARY_CHARS, PROMPT_VERSION
from lexkeep.core.controls import describe, first_control
from lexkeep.core.errors import BackendUnreachableError, ConfigError
from lexkeep.core.model import Extraction

ENTRY_POINT_GROUP = "lexkeep.summarizers"
NORMAL_STOP = "stop"
# The most a backend may send for one summary: a `command:` program's standard output, an
# `openai` response body. A summary is at most MAX_SUMMARY_CHARS (6,000) characters, 24 KB
# in UTF-8 and 72 KB as JSON \u escapes; 1 MiB leaves room for a response's other fields. A
# runaway program or server would otherwise fill memory until the --timeout; past the limit
# the attempt fails.
MAX_OUTPUT_BYTES = 1 << 20
# How much of a program's standard error is kept while reading it (its tail is shown).
_STDERR_TAIL_BYTES = 4096
_CHUNK = 65536


def prompt_text(version: str = PROMPT_VERSION) -> str:
    """The shipped prompt text of a prompt version (package data compaction/prompts/*.txt)."""
    path = resources.files("lexkeep.compaction").joinpath("prompts", f"{version}.txt")
    try:
        return path.read_text(encoding="utf-8")
    except FileNotFoundError as exc:
        raise ConfigError(f"no prompt text shipped for {version}") from exc


@dataclass(frozen=True, slots=True)
class AssistantAnswer:
    """One assistant answer as a summariser sees it: its message id and text."""

    message_id: str
    text: str
    # The engine extracts each answer's identifiers once (for the report's identifier share)
    # and hands them along so a summariser need not scan again; None means "not scanned".
    extraction: Extraction | None = None

    def identifiers(self) -> Extraction:
        """This answer's identifiers (scanned now when the engine did not pass them)."""
        if self.extraction is not None:
            return self.extraction
        from lexkeep.core.identifiers import extract

        return extract(self.text)


@dataclass(frozen=True, slots=True)
class SummaryRequest:
    """Everything a summariser gets for one range: assistant answers only, plus instructions."""

    conversation_id: str
    from_pair: int
    to_pair: int
    answers: tuple[AssistantAnswer, ...]
    prompt_version: str = PROMPT_VERSION
    instructions: str = ""

    def answers_block(self) -> str:
        """The answers, each under a header naming its assistant message id."""
        return "\n\n".join(
            f"=== assistant message {a.message_id} ===\n{a.text}" for a in self.answers
        )

    def render(self) -> str:
        """The full prompt (instructions, then the answers), as piped to `command:`."""
        return f"{self.instructions.rstrip()}\n\n{self.answers_block()}\n"

    def input_sha256(self) -> str:
        """SHA-256 of `render()` in UTF-8: the stored input digest of a summary.

        The prompt's content, whatever the backend: the bytes `command:` reads on stdin, and
        for `openai` its system message, a blank line, its user message and a line feed (not
        the HTTP body, which adds the model name, temperature and JSON escaping). So it can be
        recomputed from the shipped prompt and the stored answers.
        """
        return hashlib.sha256(self.render().encode("utf-8")).hexdigest()


@dataclass(frozen=True, slots=True)
class Generation:
    """What a summariser produced and how it ended.

    finish_reason: "stop" (normal), "length", "tool_calls", "timeout", "error", or whatever
    the backend reported; `error` explains an abnormal end.
    """

    text: str
    finish_reason: str = NORMAL_STOP
    tool_calls: int = 0
    error: str | None = None


# A lone surrogate: JSON allows "\ud800", but no UTF-8 text holds one, so such a summary can be
# neither hashed nor stored.
_LONE_SURROGATE = re.compile("[\ud800-\udfff]")


def check_generation(gen: Generation) -> str | None:
    """The generation contract: None when acceptable, else why the attempt failed."""
    if gen.error:
        return f"{gen.finish_reason}: {gen.error}"
    if gen.tool_calls:
        # Even beside perfect text: a summariser must not act, only write (seed case A).
        return f"the response carries {gen.tool_calls} tool call(s)"
    if gen.finish_reason != NORMAL_STOP:
        return f"finish reason {gen.finish_reason!r} is not a normal stop"
    if not gen.text or not gen.text.strip():
        return "the summary is empty"
    odd = _LONE_SURROGATE.search(gen.text)
    if odd is not None:
        return (
            "the summary is not plain text: a lone surrogate"
            f" U+{ord(odd.group()):04X} at character {odd.start()}"
        )
    # NUL, ESC and the other controls would reach a prompt or a terminal (`lexkeep context`);
    # a bidirectional override or hidden text would show a reader something else than a
    # model reads (core.controls).
    odd = first_control(gen.text)
    if odd is not None:
        return f"the summary is not plain text: {describe(odd)} at character {odd.start()}"
    if len(gen.text) > MAX_SUMMARY_CHARS:
        return f"the summary has {len(gen.text):,} characters (limit {MAX_SUMMARY_CHARS:,})"
    return None


class Summarizer(ABC):
    """One summariser backend."""

    name: str = ""
    model_id: str = ""
    # How many segments one worker slot claims per transaction: in-process summarisers are
    # fast, so batching commits pays; remote ones keep 1 so a lease covers one call.
    batch_size: int = 1
    # True for a backend that answers at once in-process: a run keeps the store open across
    # its calls. A backend that waits (a model, a program) leaves it False, and a run given a
    # store path closes the store while it waits, so other lexkeep processes can use it.
    quick: bool = False

    @abstractmethod
    def summarize(self, request: SummaryRequest) -> Generation:
        """Summarise the request's assistant answers; report failures in the Generation.

        Raise `lexkeep.core.errors.BackendUnreachableError` only when the backend could not be
        reached at all (nothing was generated): the run then gives its claims back without
        counting an attempt and stops with that error.
        """

    def cancel(self) -> None:  # noqa: B027 (optional: a backend without calls to stop)
        """Stop the calls in progress and refuse new ones: the run was interrupted.

        Called from another thread than the calls'; by default it does nothing.
        """

    def resume(self) -> None:  # noqa: B027 (optional: a backend without calls to stop)
        """Accept calls again after `cancel()`: the run that cancelled them has ended, and a
        later one uses the same summariser. By default it does nothing."""


@dataclass(frozen=True, slots=True)
class SummarizerOptions:
    """Settings a backend may use (flags of `lexkeep compact`)."""

    base_url: str | None = None
    model: str | None = None
    timeout: float = 120.0
    api_key: str | None = None
    extra: dict[str, str] = field(default_factory=dict)


SummarizerFactory = Callable[[str, SummarizerOptions], Summarizer]
_REGISTRY: dict[str, SummarizerFactory] = {}
_entry_points_loaded = False


def register(name: str, factory: SummarizerFactory) -> None:
    """Make a summariser available as `--summarizer NAME[:ARGUMENT]`."""
    _REGISTRY[name] = factory


def _load_entry_points() -> None:
    global _entry_points_loaded
    if _entry_points_loaded:
        return
    _entry_points_loaded = True
    for ep in entry_points(group=ENTRY_POINT_GROUP):
        if ep.name not in _REGISTRY:
            register(ep.name, ep.load())


def available() -> list[str]:
    """Names of every registered summariser (built-ins and plugins)."""
    _load_entry_points()
    return sorted(_REGISTRY)


def create(spec: str, options: SummarizerOptions | None = None) -> Summarizer:
    """Build a summariser from `NAME` or `NAME:ARGUMENT` (e.g. `command:"llm -m x"`)."""
    _load_entry_points()
    name, _, argument = spec.partition(":")
    factory = _REGISTRY.get(name.strip())
    if factory is None:
        raise ConfigError(
            f"unknown summarizer {name!r}",
            hint=f"use one of: {', '.join(available())} (plugins: entry point {ENTRY_POINT_GROUP})",
        )
    return factory(argument.strip(), options or SummarizerOptions())


# -- extractive ---------------------------------------------------------------------------------


class ExtractiveSummarizer(Summarizer):
    """Offline and deterministic: each answer's lead text plus every identifier, verbatim.

    Every answer keeps its assistant message id. When an answer does not fit its share of the
    6,000 characters, its text is cut (never inside an identifier) and the identifiers the cut
    dropped are listed after it. When the ids and identifiers alone exceed the limit, the
    generation fails honestly instead of dropping any.
    """

    name = "extractive"
    model_id = "extractive/1"
    # Claims and completions cost a DuckDB commit each (6-11 ms, more under load) and a scan of
    # the jobs: 512 per transaction cut compact's CPU by about a quarter against 64; a batch
    # takes a few seconds, far inside the 300 s lease.
    batch_size = 512
    quick = True
    HEADER = "Earlier assistant answers (extractive summary):\n"

    def summarize(self, request: SummaryRequest) -> Generation:
        """Summarise by extraction; fails when the identifiers cannot all fit."""
        items: list[tuple[AssistantAnswer, list[tuple[int, int]] | None]] = []
        for answer in request.answers:
            found = answer.identifiers()
            # An incomplete scan cannot vouch for every identifier: keep that answer whole.
            spans = [(i.start, i.end) for i in found.identifiers] if found.complete else None
            items.append((answer, spans))
        budget = MAX_SUMMARY_CHARS - len(self.HEADER)
        # What must be written whatever happens: the id prefix and all identifiers.
        fixed = [
            len(f"[{a.message_id}] ")
            + (len(a.text) if spans is None else _ids_suffix_len(a.text, spans))
            + 1
            for a, spans in items
        ]
        spare = budget - sum(fixed)
        if spare < 0:
            return Generation(
                "",
                "error",
                error=f"the answers' ids and identifiers need {sum(fixed) + len(self.HEADER):,} "
                f"characters, more than {MAX_SUMMARY_CHARS:,}",
            )
        shares = _water_fill([0 if sp is None else len(a.text) for a, sp in items], spare)
        lines = [self.HEADER.rstrip("\n")]
        for (answer, spans), share in zip(items, shares, strict=True):
            lead = answer.text if spans is None else _lead(answer.text, spans, share)
            lines.append(f"[{answer.message_id}] {lead}")
        return Generation("\n".join(lines))


def _ids_suffix(text: str, spans: list[tuple[int, int]], cut: int) -> str:
    dropped = list(dict.fromkeys(text[s:e] for s, e in spans if e > cut))
    return " …" + (f" identifiers: {' '.join(dropped)}" if dropped else "")


def _ids_suffix_len(text: str, spans: list[tuple[int, int]]) -> int:
    return len(_ids_suffix(text, spans, 0))


def _lead(text: str, spans: list[tuple[int, int]], share: int) -> str:
    if len(text) <= share:
        return text
    cut = share
    space = text.rfind(" ", 0, cut + 1)  # prefer a word boundary
    if space > 0:
        cut = space
    for start, end in sorted(spans, reverse=True):  # never cut inside an identifier
        if start < cut < end:
            cut = start
    # a cut that moved left can only drop more identifiers, all listed in the suffix
    return text[:cut].rstrip() + _ids_suffix(text, spans, cut)


def _water_fill(lengths: list[int], total: int) -> list[int]:
    """Split `total` characters over items so short items take only what they need."""
    shares = [0] * len(lengths)
    remaining = sorted(range(len(lengths)), key=lambda i: lengths[i])
    left = total
    while remaining:
        even = left // len(remaining)
        i = remaining[0]
        if lengths[i] <= even:
            shares[i] = lengths[i]
            left -= lengths[i]
            remaining.pop(0)
            continue
        for j in remaining:
            shares[j] = even
        break
    return shares


# -- command -----------------------------------------------------------------------------------


class CommandSummarizer(Summarizer):
    """Pipe the rendered prompt to a program; its stdout is the summary, exit 0 a normal stop."""

    name = "command"

    def __init__(self, command: str, timeout: float) -> None:
        try:
            argv = shlex.split(command)
        except ValueError as exc:  # a quote left open, or a backslash at the end
            raise ConfigError(
                f"command: cannot split {command} into a program and its arguments ({exc})",
                hint="close the quote, e.g. summarizer='command:\"llm -m gpt-4o-mini\"'",
                wording="summarizer.command_unsplittable",
            ) from exc
        if not argv:
            raise ConfigError(
                "command: needs a program",
                hint="e.g. summarizer='command:\"llm -m gpt-4o-mini\"'",
                wording="summarizer.command_empty",
            )
        self.argv = argv
        self.timeout = timeout
        self.model_id = "command:" + shlex.join(argv)
        # The programs running now (one per worker slot), for cancel().
        self._lock = threading.Lock()
        self._running: set[subprocess.Popen[bytes]] = set()
        self._cancelled = False

    def summarize(self, request: SummaryRequest) -> Generation:
        """Run the program once with the prompt on stdin."""
        with self._lock:  # so that cancel() either sees this program or it never starts
            if self._cancelled:
                return _CANCELLED
            try:
                # A session (and so a process group) of its own: a wrapper script's children
                # are stopped with it, not only the program we started.
                proc = subprocess.Popen(
                    self.argv,
                    stdin=subprocess.PIPE,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.PIPE,
                    start_new_session=True,
                )
            except OSError as exc:  # nothing ran, so no attempt is spent (the run stops)
                raise BackendUnreachableError(
                    f"cannot run {self.argv[0]}: {exc}",
                    hint="check the program's name and path in summarizer='command:...';"
                    " nothing was counted as an attempt",
                    wording="summarizer.command_cannot_run",
                ) from exc
            self._running.add(proc)
        try:
            stdout, stderr = _exchange(proc, request.render().encode("utf-8"), self.timeout)
        except subprocess.TimeoutExpired:
            _stop_group(proc)
            return Generation("", "timeout", error=f"no answer within {self.timeout:g} s")
        except _TooMuchOutput:
            _stop_group(proc)
            return Generation(
                "",
                "error",
                error=f"the program wrote more than {MAX_OUTPUT_BYTES:,} bytes to its standard"
                f" output (the summary is at most {MAX_SUMMARY_CHARS:,} characters)",
            )
        except BaseException:  # Ctrl-C while waiting, or any other way out: leave nothing behind
            _stop_group(proc)
            raise
        finally:
            with self._lock:
                self._running.discard(proc)
        if self._cancelled:  # killed by cancel(): whatever it printed is not an answer
            return _CANCELLED
        if proc.returncode in _CANNOT_RUN:
            # A shell, `env` or a wrapper started but could not run the program it names:
            # nothing was generated, so, as for a program that cannot be started, the run
            # stops without spending an attempt (a typo would spend every range's attempts).
            tail = stderr.decode("utf-8", "replace").strip()[-300:]
            raise BackendUnreachableError(
                f"cannot run {shlex.join(self.argv)}: exit status {proc.returncode}"
                f" ({_CANNOT_RUN[proc.returncode]})" + (f": {tail}" if tail else ""),
                hint="check the program's name and path in summarizer='command:...';"
                " nothing was counted as an attempt",
                wording="summarizer.command_cannot_run",
            )
        if proc.returncode != 0:
            tail = stderr.decode("utf-8", "replace").strip()[-300:]
            return Generation(
                "", "error", error=f"exit status {proc.returncode}" + (f": {tail}" if tail else "")
            )
        try:
            text = stdout.decode("utf-8")
        except UnicodeDecodeError as exc:
            return Generation("", "error", error=f"output is not UTF-8: {exc}")
        # The line ends around the text are the program's, not the summary's: LF or CRLF.
        return Generation(_EDGE_LINE_ENDS.sub("", text))

    def cancel(self) -> None:
        """Kill the running programs with their process groups; later calls fail at once."""
        with self._lock:
            self._cancelled = True
            running = list(self._running)
        # The calls' own threads are waiting on them: they see them end and reap them.
        for proc in running:
            if proc.returncode is None:  # not finished meanwhile
                _kill_group(proc)

    def resume(self) -> None:
        """Run programs again after `cancel()` (the run that cancelled them has ended)."""
        with self._lock:
            self._cancelled = False


_CANCELLED = Generation("", "cancelled", error="the run was interrupted")
# The exit statuses a POSIX shell (and `env`, `nohup`, `timeout`…) reserves for a command it
# could not run.
_CANNOT_RUN = {126: "a command is not executable", 127: "a command was not found"}


class _TooMuchOutput(Exception):
    """A backend sent more than MAX_OUTPUT_BYTES."""


def _exchange(proc: subprocess.Popen[bytes], data: bytes, timeout: float) -> tuple[bytes, bytes]:
    """Write `data` to `proc`'s stdin, read its stdout and stderr until both close, and wait
    for it to exit, all within `timeout` seconds; `communicate()` with bounded memory.

    Returns stdout and the last _STDERR_TAIL_BYTES of stderr. Raises `_TooMuchOutput` as soon
    as stdout passes MAX_OUTPUT_BYTES and `subprocess.TimeoutExpired` at the deadline; the
    caller then stops the program. The pipes are closed when this returns or raises.

    A program that exited while its pipes stay open (a child it left in the background holds
    them) has answered: what it wrote is read for _AFTER_EXIT seconds more, then its process
    group is killed (the child with it) and the pipes are closed, whoever still holds them.
    One thread does it all with `select`, so no reader is left blocked on a pipe a process
    outside the group keeps open.
    """
    if not hasattr(os, "waitid"):
        return _exchange_threads(proc, data, timeout)
    deadline = time.monotonic() + timeout
    out = bytearray()
    err = bytearray()
    assert proc.stdin is not None and proc.stdout is not None and proc.stderr is not None
    stdin, stdout, stderr = proc.stdin, proc.stdout, proc.stderr
    proc.stdin = proc.stdout = proc.stderr = None  # closed here (`_stop_group` skips them)
    view, sent = memoryview(data), 0
    exited_at: float | None = None
    exit_state: str | None = None
    held = False  # the program exited, and a process it left behind holds its pipes
    try:
        with selectors.DefaultSelector() as sel:
            sel.register(stdin, selectors.EVENT_WRITE)
            sel.register(stdout, selectors.EVENT_READ)
            sel.register(stderr, selectors.EVENT_READ)
            while sel.get_map():
                now = time.monotonic()
                if exited_at is None:
                    exit_state = _exit_state(proc)
                    if exit_state is not None:
                        exited_at = now
                if exited_at is not None and (now - exited_at >= _AFTER_EXIT or now >= deadline):
                    held = True
                    break
                left = deadline - now
                if left <= 0:
                    raise subprocess.TimeoutExpired(proc.args, timeout)
                for key, _ in sel.select(min(left, _POLL)):
                    pipe = key.fileobj
                    if pipe is stdin:
                        try:
                            sent += os.write(stdin.fileno(), view[sent : sent + _PIPE_BUF])
                        except OSError:  # it stopped reading (or exited): its exit tells why
                            sent = len(data)
                        if sent >= len(data):
                            sel.unregister(stdin)
                            stdin.close()
                        continue
                    chunk = os.read(pipe.fileno(), _CHUNK)  # type: ignore[union-attr]
                    if not chunk:
                        sel.unregister(pipe)
                        pipe.close()  # type: ignore[union-attr]
                    elif pipe is stdout:
                        out += chunk
                        if len(out) > MAX_OUTPUT_BYTES:
                            raise _TooMuchOutput
                    else:
                        err += chunk
                        if len(err) > 2 * _STDERR_TAIL_BYTES:
                            del err[:-_STDERR_TAIL_BYTES]
    finally:
        for pipe in (stdin, stdout, stderr):
            with contextlib.suppress(OSError):
                pipe.close()
    if held:
        # The leader is not reaped yet (`_exit_state` only looks), so its group id is still
        # its own: what it left behind in the group stops; a process that left the group
        # keeps running, but with the pipes closed on this side. (Reaped by someone else, as
        # under SIGCHLD ignored, the id may be another's by now: then nothing is killed.)
        if exit_state == "exited":
            _kill_group(proc)
        proc.wait()  # it exited already
    else:
        proc.wait(_seconds_left(deadline, proc, timeout))
    return bytes(out), bytes(err[-_STDERR_TAIL_BYTES:])


# How long a program that exited may keep its pipes open through a process it left behind,
# and how often the exchange looks whether it exited.
_AFTER_EXIT = 0.5
_POLL = 0.1
_PIPE_BUF = getattr(select, "PIPE_BUF", 512)


def _exit_state(proc: subprocess.Popen[bytes]) -> str | None:
    """None while `proc` runs; "exited" once it exited, looked at without reaping it (its pid
    stays its group's); "gone" when it was reaped elsewhere."""
    try:
        found = os.waitid(os.P_PID, proc.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
    except ChildProcessError:
        return "gone"
    return None if found is None else "exited"


def _exchange_threads(
    proc: subprocess.Popen[bytes], data: bytes, timeout: float
) -> tuple[bytes, bytes]:
    """`_exchange` with a thread per pipe, where `os.waitid` is missing (Windows, macOS).

    Returns stdout and the last _STDERR_TAIL_BYTES of stderr. Raises `_TooMuchOutput` as soon
    as stdout passes MAX_OUTPUT_BYTES and `subprocess.TimeoutExpired` at the deadline; the
    caller then stops the program. The pipes belong to the threads here, which close them
    when they end: closing a pipe another thread reads waits for that read, and a process
    that left the program's group could hold it open for ever.
    """
    deadline = time.monotonic() + timeout
    out = bytearray()
    err = bytearray()
    changed = threading.Event()  # a reader finished, or stdout passed the limit
    state = {"out": False, "err": False, "over": False}
    assert proc.stdin is not None and proc.stdout is not None and proc.stderr is not None
    stdin, stdout, stderr = proc.stdin, proc.stdout, proc.stderr
    proc.stdin = proc.stdout = proc.stderr = None  # the threads' now (`_stop_group` skips them)

    def feed() -> None:
        # A program that stops reading (or is stopped) ends the writing; its exit tells why.
        with contextlib.suppress(OSError, ValueError):
            stdin.write(data)
        with contextlib.suppress(OSError, ValueError):
            stdin.close()

    def read_out() -> None:
        with contextlib.suppress(OSError, ValueError), stdout:
            while chunk := stdout.read1(_CHUNK):
                out.extend(chunk)
                if len(out) > MAX_OUTPUT_BYTES:
                    state["over"] = True
                    break
        state["out"] = True
        changed.set()

    def read_err() -> None:
        with contextlib.suppress(OSError, ValueError), stderr:
            while chunk := stderr.read1(_CHUNK):
                err.extend(chunk)
                if len(err) > 2 * _STDERR_TAIL_BYTES:
                    del err[:-_STDERR_TAIL_BYTES]
        state["err"] = True
        changed.set()

    for target in (feed, read_out, read_err):
        threading.Thread(target=target, daemon=True, name=f"command-{target.__name__}").start()
    while not (state["out"] and state["err"]):
        if state["over"]:
            raise _TooMuchOutput
        changed.wait(_seconds_left(deadline, proc, timeout))
        changed.clear()
    if state["over"]:
        raise _TooMuchOutput
    proc.wait(_seconds_left(deadline, proc, timeout))
    return bytes(out), bytes(err[-_STDERR_TAIL_BYTES:])


def _seconds_left(deadline: float, proc: subprocess.Popen[bytes], timeout: float) -> float:
    left = deadline - time.monotonic()
    if left <= 0:
        raise subprocess.TimeoutExpired(proc.args, timeout)
    return left


_EDGE_LINE_ENDS = re.compile(r"\A(?:\r?\n)+|(?:\r?\n)+\Z")


def _kill_group(proc: subprocess.Popen[bytes]) -> None:
    """SIGKILL to `proc` and every process of its group (to `proc` alone without groups)."""
    # The group has the leader's id, which no new process gets while the leader is unreaped
    # or any member of the group is left.
    if hasattr(os, "killpg"):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)
    else:  # Windows
        proc.kill()


def _stop_group(proc: subprocess.Popen[bytes]) -> None:
    """Kill `proc` and every process of its group, then reap it and close its pipes."""
    _kill_group(proc)
    proc.wait()
    # Not communicate(): a process that left the group could hold the pipes open for ever.
    for pipe in (proc.stdin, proc.stdout, proc.stderr):
        if pipe is not None:
            with contextlib.suppress(OSError):
                pipe.close()


def _command_factory(argument: str, options: SummarizerOptions) -> Summarizer:
    # `command:"llm -m x"` and `command:llm -m x` both work: shlex removes the outer quotes.
    text = argument
    if len(text) >= 2 and text[0] == text[-1] and text[0] in "\"'":
        text = text[1:-1]
    return CommandSummarizer(text, options.timeout)


# -- openai-compatible chat completions --------------------------------------------------------

# A socket timeout bounds one operation, not a call: a server that sends a byte every half
# second never trips it and can hold a call for minutes, past the job's lease. So every call
# has a deadline, and each read of the response (status line, headers and body alike) may
# wait only for the time left before it.


def _time_left(deadline: float) -> float:
    left = deadline - time.monotonic()
    if left <= 0:
        raise TimeoutError("the call's deadline passed")
    return left


class _DeadlineReader(io.RawIOBase):
    """A response stream whose every read ends by the call's deadline."""

    def __init__(self, sock: socket.socket, deadline: float) -> None:
        super().__init__()
        self._sock = sock
        # The socket's own stream holds a reference that keeps the connection open after
        # urllib closes its end, as a plain response's stream does.
        self._raw = sock.makefile("rb", buffering=0)
        self._deadline = deadline

    def readable(self) -> bool:
        """True: this is a read stream."""
        return True

    def readinto(self, buffer: memoryview) -> int | None:  # type: ignore[override]
        """Read what has arrived, waiting at most until the deadline."""
        self._sock.settimeout(_time_left(self._deadline))
        return self._raw.readinto(buffer)

    def close(self) -> None:
        """Release the connection's socket."""
        self._raw.close()
        super().close()


class _DeadlineSocket:
    """The one thing `http.client.HTTPResponse` asks of a socket: a read stream."""

    def __init__(self, sock: socket.socket, deadline: float) -> None:
        self._sock = sock
        self._deadline = deadline

    def makefile(self, mode: str = "rb") -> io.BufferedReader:
        """A buffered stream over `_DeadlineReader`."""
        return io.BufferedReader(_DeadlineReader(self._sock, self._deadline))


class _DeadlineResponse(http.client.HTTPResponse):
    """A response read through `_DeadlineReader`."""

    def __init__(self, sock: socket.socket, *args: Any, deadline: float, **kwargs: Any) -> None:
        super().__init__(_DeadlineSocket(sock, deadline), *args, **kwargs)  # type: ignore[arg-type]


class _NotConnected(OSError):
    """The connection could not be established, so the request was never sent."""

    def __init__(self, cause: OSError) -> None:
        super().__init__(str(cause) or type(cause).__name__)
        self.cause = cause


class _Call:
    """One `openai` call in flight, as `OpenAISummarizer.cancel()` stops it.

    `cancel()` shuts down every socket the call opened. It does so through a duplicate of
    each socket's descriptor that the call owns until it ends: the socket the HTTP client
    uses may be wrapped for TLS (which takes its descriptor over) or closed meanwhile, and
    its descriptor number given to another file, but the duplicate still names the same
    connection. Shutting a connection down wakes a thread waiting on it at once — while
    connecting, sending, or reading — and makes every later read end, so the call ends and is
    reported as cancelled, whatever error the HTTP client made of it.
    """

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.cancelled = False
        self.ended = False
        self._handles: list[socket.socket] = []

    def watch(self, sock: socket.socket) -> None:
        """Let `cancel()` reach `sock`; raises `_Cancelled` when the call was cancelled."""
        with self.lock:
            if self.cancelled or self.ended:
                raise _Cancelled
            self._handles.append(sock.dup())

    def check(self) -> None:
        """Raise `_Cancelled` when the call was cancelled."""
        if self.cancelled:
            raise _Cancelled

    def cancel(self) -> None:
        """Mark the call cancelled and shut its connections down (from any thread)."""
        with self.lock:
            self.cancelled = True
            for handle in self._handles:
                with contextlib.suppress(OSError):  # not connected (yet), or reset already
                    handle.shutdown(socket.SHUT_RDWR)

    def end(self) -> None:
        """Close the duplicates: the call is over."""
        with self.lock:
            self.ended = True
            handles, self._handles = self._handles, []
        for handle in handles:
            handle.close()


class _Cancelled(OSError):
    """The call was cancelled (`OpenAISummarizer.cancel()`)."""

    def __init__(self) -> None:
        super().__init__("the call was cancelled")


def _connect_watched(
    call: _Call,
    address: tuple[str, int],
    timeout: object = None,
    source_address: tuple[str, int] | None = None,
) -> socket.socket:
    """`socket.create_connection`, with each socket made known to `call` before it connects,
    so that `cancel()` can end a connection attempt that waits (a server whose queue is full,
    a lost packet) instead of leaving it to the timeout. A `timeout` that is not a number
    (http.client's "the default" marker) leaves the socket's default."""
    host, port = address
    error: OSError | None = None
    for family, kind, proto, _, target in socket.getaddrinfo(host, port, 0, socket.SOCK_STREAM):
        sock = socket.socket(family, kind, proto)
        try:
            call.watch(sock)
            if isinstance(timeout, int | float):
                sock.settimeout(timeout)
            if source_address:
                sock.bind(source_address)
            sock.connect(target)
            call.check()  # cancelled just before connecting: shutting down did not stop it
            return sock
        except _Cancelled:
            sock.close()
            raise
        except OSError as exc:  # the next address, as create_connection tries them
            sock.close()
            call.check()
            error = exc
    raise error if error is not None else OSError("getaddrinfo returns an empty list")


class _DeadlineConnection(http.client.HTTPConnection):
    """An HTTP connection whose sending and response reading end by `deadline`, and that
    `call` can cancel."""

    def __init__(self, host: str, *, deadline: float, call: _Call, **kwargs: Any) -> None:
        super().__init__(host, **kwargs)
        self.deadline = deadline
        self.response_class = functools.partial(_DeadlineResponse, deadline=deadline)  # type: ignore[assignment]
        self._create_connection = functools.partial(_connect_watched, call)  # type: ignore[assignment]

    def connect(self) -> None:
        """Connect within the timeout, then leave sending only the time left.

        A failure before the request could be sent (name lookup, TCP connection, TLS handshake,
        a proxy's tunnel) raises `_NotConnected`: the server never saw the request.
        """
        try:
            super().connect()
        except OSError as exc:
            raise _NotConnected(exc) from exc
        self.sock.settimeout(_time_left(self.deadline))


class _DeadlineHTTPSConnection(_DeadlineConnection, http.client.HTTPSConnection):
    """`_DeadlineConnection` over TLS."""


class _DeadlineHTTPHandler(urllib.request.HTTPHandler):
    """urllib's `http:` handler with `_DeadlineConnection`."""

    def __init__(self, deadline: float, call: _Call) -> None:
        super().__init__()
        self.deadline = deadline
        self.call = call

    def http_open(self, req: urllib.request.Request) -> http.client.HTTPResponse:
        connection = functools.partial(_DeadlineConnection, deadline=self.deadline, call=self.call)
        return self.do_open(connection, req)


class _DeadlineHTTPSHandler(urllib.request.HTTPSHandler):
    """urllib's `https:` handler with `_DeadlineHTTPSConnection` (default TLS context)."""

    def __init__(self, deadline: float, call: _Call) -> None:
        super().__init__()
        self.deadline = deadline
        self.call = call

    def https_open(self, req: urllib.request.Request) -> http.client.HTTPResponse:
        connection = functools.partial(
            _DeadlineHTTPSConnection, deadline=self.deadline, call=self.call
        )
        return self.do_open(connection, req)


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    """Redirects are not followed: urllib would turn the POST into a GET and send the request's
    headers, the API key among them, to wherever `Location` points. A redirect answer becomes
    an `HTTPError` with its status."""

    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        """Follow none."""
        return None


def _post_within(req: urllib.request.Request, timeout: float, call: _Call) -> bytes:
    """The body of the response to `req`, all of it within `timeout` seconds.

    Raises `TimeoutError` when the deadline passes, `_TooMuchOutput` for a body larger than
    MAX_OUTPUT_BYTES (read no further), and what `urlopen` raises otherwise
    (proxies from the environment apply; a redirect is an `HTTPError`). Not counted: the name
    lookup, and each further address tried when connecting gets the whole timeout again.
    Once `call` is cancelled it raises whatever the closed connection makes the HTTP client
    raise (or returns what arrived before): the caller asks `call.cancelled`.
    """
    deadline = time.monotonic() + timeout
    opener = urllib.request.build_opener(
        _DeadlineHTTPHandler(deadline, call), _DeadlineHTTPSHandler(deadline, call), _NoRedirect()
    )
    with opener.open(req, timeout=timeout) as resp:
        body = resp.read(MAX_OUTPUT_BYTES + 1)
        if len(body) > MAX_OUTPUT_BYTES:
            raise _TooMuchOutput
        # read(n) ends early without IncompleteRead when the server hangs up before the end
        # its Content-Length promised; read() (no limit) would have raised it.
        if resp.length:
            raise http.client.IncompleteRead(body, resp.length)
    return body


class OpenAISummarizer(Summarizer):
    """Any OpenAI-compatible /chat/completions endpoint; no tools are offered."""

    name = "openai"

    def __init__(self, base_url: str, model: str, api_key: str | None, timeout: float) -> None:
        # Checked here, not per call: a URL urllib cannot POST to would fail (or, for ftp://,
        # wait out the deadline) on every segment, each time spending one of its two attempts.
        parts = urllib.parse.urlsplit(base_url)
        if parts.scheme.lower() not in ("http", "https") or not parts.hostname:
            raise ConfigError(
                f"base_url={base_url!r} is not an http:// or https:// URL",
                hint="e.g. base_url='https://api.openai.com/v1' or 'http://127.0.0.1:8000/v1'",
                wording="summarizer.base_url_not_http",
                fields={"base_url": repr(base_url)},
            )
        self.url = base_url.rstrip("/") + "/chat/completions"
        self.model = model
        self.api_key = api_key
        self.timeout = timeout
        self.model_id = f"openai:{model}"
        # The calls in flight (one per worker slot), for cancel().
        self._lock = threading.Lock()
        self._calls: set[_Call] = set()
        self._cancelled = False

    def summarize(self, request: SummaryRequest) -> Generation:
        """One chat completion; finish_reason must be `stop` and no tool_calls.

        A call that `cancel()` stopped returns a `cancelled` generation, whatever the server
        had sent by then: nothing it generated is used.
        """
        call = _Call()
        with self._lock:  # so that cancel() either sees this call or it never starts
            if self._cancelled:
                return _CANCELLED
            self._calls.add(call)
        try:
            gen = self._complete(request, call)
        except Exception:
            if call.cancelled:  # e.g. a connection attempt cut short looks unreachable
                return _CANCELLED
            raise
        finally:
            with self._lock:
                self._calls.discard(call)
            call.end()
        return _CANCELLED if call.cancelled else gen

    def cancel(self) -> None:
        """Close the connections of the calls in flight; later calls end at once as
        cancelled, without a request, until `resume()`."""
        with self._lock:
            self._cancelled = True
            calls = list(self._calls)
        for call in calls:  # their threads see the connections end and return
            call.cancel()

    def resume(self) -> None:
        """Make calls again after `cancel()` (the run that cancelled them has ended)."""
        with self._lock:
            self._cancelled = False

    def _complete(self, request: SummaryRequest, call: _Call) -> Generation:
        """The chat completion itself, its connections made known to `call`."""
        body = json.dumps(
            {
                "model": self.model,
                "temperature": 0,
                "messages": [
                    # render()'s two parts exactly, so the stored input digest is theirs
                    {"role": "system", "content": request.instructions.rstrip()},
                    {"role": "user", "content": request.answers_block()},
                ],
            }
        ).encode("utf-8")
        headers = {"Content-Type": "application/json"}
        if self.api_key:
            headers["Authorization"] = f"Bearer {self.api_key}"
        req = urllib.request.Request(self.url, data=body, headers=headers, method="POST")
        # The deadline covers connecting, sending and reading the whole response.
        late = f"no complete answer within {self.timeout:g} s"
        try:
            payload = json.loads(_post_within(req, self.timeout, call).decode("utf-8"))
        except urllib.error.HTTPError as exc:
            try:  # the first 300 characters are shown: at most 4 bytes each
                detail = exc.read(1200).decode("utf-8", "replace")[:300]
            except OSError:  # the error body, too, must arrive before the deadline
                detail = ""
            return Generation("", "error", error=f"HTTP {exc.code} from {self.url}: {detail}")
        except TimeoutError:
            return Generation("", "timeout", error=late)
        except _TooMuchOutput:
            return Generation(
                "",
                "error",
                error=f"the response from {self.url} is larger than {MAX_OUTPUT_BYTES:,} bytes"
                f" (the summary is at most {MAX_SUMMARY_CHARS:,} characters)",
            )
        except urllib.error.URLError as exc:
            if isinstance(exc.reason, _NotConnected):  # not reached: no attempt is spent
                cause = exc.reason.cause
                raise BackendUnreachableError(
                    f"cannot reach {self.url}: {str(cause) or type(cause).__name__}",
                    hint="start the server or fix base_url; nothing was counted as an attempt",
                    wording="summarizer.unreachable",
                ) from exc
            if isinstance(exc.reason, TimeoutError | socket.timeout):
                return Generation("", "timeout", error=late)
            return Generation("", "error", error=f"cannot reach {self.url}: {exc.reason}")
        except (http.client.IncompleteRead, ConnectionError) as exc:
            # The server closed the connection before its whole answer arrived.
            return Generation("", "error", error=f"connection to {self.url} broke: {exc!r}")
        except (ValueError, UnicodeDecodeError) as exc:
            return Generation("", "error", error=f"response is not JSON: {exc}")
        try:
            choice = payload["choices"][0]
            message = choice.get("message") or {}
            text = message.get("content") or ""
            tool_calls = len(message.get("tool_calls") or [])
            if message.get("function_call"):
                tool_calls += 1
            finish = choice.get("finish_reason") or "missing"
        except (KeyError, IndexError, TypeError, AttributeError):
            return Generation("", "error", error="response has no choices[0].message")
        if not isinstance(text, str):
            return Generation("", "error", error="message content is not a string")
        if finish == _CANCELLED.finish_reason:
            # The server's word, not cancel()'s (which stops the run): a failed attempt, as
            # any other end than `stop` is.
            return Generation(
                text,
                "error",
                tool_calls=tool_calls,
                error="the server ended the generation with finish reason 'cancelled'",
            )
        return Generation(text, finish, tool_calls=tool_calls)


def _openai_factory(argument: str, options: SummarizerOptions) -> Summarizer:
    model = argument or options.model
    if not options.base_url:
        raise ConfigError(
            "the openai summarizer needs a base_url",
            hint="e.g. SummarizerOptions(base_url='https://api.openai.com/v1',"
            " model='gpt-4o-mini')",
            wording="summarizer.needs_base_url",
        )
    if not model:
        raise ConfigError(
            "the openai summarizer needs a model",
            hint="e.g. SummarizerOptions(model='gpt-4o-mini'), or summarizer='openai:gpt-4o-mini'",
            wording="summarizer.needs_model",
        )
    api_key = options.api_key or os.environ.get("OPENAI_API_KEY")
    return OpenAISummarizer(options.base_url, model, api_key, options.timeout)


register("extractive", lambda argument, options: ExtractiveSummarizer())
register("command", _command_factory)
register("openai", _openai_factory)
