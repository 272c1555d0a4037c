"""Point 10: summarisers — the registry, `command:` with real subprocesses, `openai` against a
real HTTP server on 127.0.0.1 (stop, length, tool_calls, HTTP 500, a stalled or dripping
response, a call cancelled from another thread)."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from test_compaction_support import gone

from lexkeep.compaction import summarizers
from lexkeep.compaction.summarizers import (
    AssistantAnswer,
    CommandSummarizer,
    Generation,
    Summarizer,
    SummarizerOptions,
    SummaryRequest,
    check_generation,
    create,
    prompt_text,
    register,
)
from lexkeep.core.errors import BackendUnreachableError, ConfigError


def request() -> SummaryRequest:
    answers = tuple(
        AssistantAnswer(f"a{i}", f"answer {i} about ORD_{88400 + i}") for i in range(10)
    )
    return SummaryRequest("c1", 0, 9, answers, "conversation-compaction@3", prompt_text())


def test_prompt_v3_ships_in_the_package_and_asks_for_identifiers_verbatim():
    text = prompt_text("conversation-compaction@3")
    assert "identifier" in text and "exactly" in text and "character for character" in text
    assert "Do not call tools" in text
    with pytest.raises(ConfigError):
        prompt_text("conversation-compaction@9")


def test_builtins_are_registered_like_plugins_and_unknown_names_are_refused():
    assert {"extractive", "command", "openai"} <= set(summarizers.available())
    assert create("extractive").name == "extractive"
    with pytest.raises(ConfigError, match="unknown summarizer 'nope'") as err:
        create("nope")
    assert "extractive" in err.value.hint


def test_a_plugin_registers_through_the_same_door():
    class Upper(Summarizer):
        name = "upper"
        model_id = "test/upper"

        def summarize(self, req: SummaryRequest) -> Generation:
            return Generation(req.answers_block().upper())

    register("upper-test", lambda argument, options: Upper())
    assert isinstance(create("upper-test"), Upper)


# -- command: ---------------------------------------------------------------------------------


def _script(tmp_path, body: str) -> str:
    path = tmp_path / "summ.py"
    path.write_text(body, encoding="utf-8")
    return f'command:"{sys.executable} {path}"'


def test_command_gets_the_prompt_on_stdin_and_stdout_is_the_summary(tmp_path):
    seen = tmp_path / "stdin.txt"
    spec = _script(
        tmp_path,
        "import sys\n"
        f"data = sys.stdin.read(); open({str(seen)!r}, 'w').write(data)\n"
        "print('SUMMARY lines:', len(data.splitlines()))\n",
    )
    s = create(spec, SummarizerOptions(timeout=30))
    gen = s.summarize(request())
    assert check_generation(gen) is None
    assert gen.text.startswith("SUMMARY lines:")
    assert seen.read_text(encoding="utf-8") == request().render()
    assert s.model_id.startswith("command:")


def test_command_output_with_crlf_line_ends_is_a_normal_summary(tmp_path):
    """A program that ends its lines with CRLF (a Windows program, Python's print on Windows)
    always failed: its last line end lost only the line feed, and the carriage return left
    behind broke the generation contract, twice, so the range stayed raw for good."""
    spec = _script(
        tmp_path,
        "import sys\nsys.stdin.read()\n"
        "sys.stdout.buffer.write(b'\\r\\nSummary line one\\r\\nline two ORD_88400\\r\\n\\r\\n')\n",
    )
    gen = create(spec, SummarizerOptions(timeout=30)).summarize(request())
    assert check_generation(gen) is None, check_generation(gen)
    assert gen.text == "Summary line one\r\nline two ORD_88400"


def test_command_non_zero_exit_is_a_failure(tmp_path):
    spec = _script(
        tmp_path, "import sys\nprint('looks fine')\nsys.stderr.write('quota')\nsys.exit(3)\n"
    )
    gen = create(spec).summarize(request())
    problem = check_generation(gen)
    assert problem is not None and "exit status 3" in problem and "quota" in problem


def test_command_timeout_is_a_failure(tmp_path):
    spec = _script(tmp_path, "import time\ntime.sleep(30)\n")
    started = time.monotonic()
    gen = create(spec, SummarizerOptions(timeout=0.5)).summarize(request())
    assert time.monotonic() - started < 10
    assert gen.finish_reason == "timeout" and check_generation(gen) is not None


@pytest.mark.skipif(not hasattr(os, "killpg"), reason="process groups are POSIX")
def test_command_timeout_stops_the_programs_children_too(tmp_path):
    # A wrapper script whose real work runs in a child process, as many model CLIs do.
    pids = tmp_path / "pids"
    wrapper = tmp_path / "wrapper.sh"
    wrapper.write_text(
        'cat >/dev/null\nsleep 30 &\necho "$$ $!" > "$1.tmp" && mv "$1.tmp" "$1"\nwait\n',
        encoding="utf-8",
    )
    started = time.monotonic()
    gen = CommandSummarizer(f"sh {wrapper} {pids}", 1).summarize(request())
    assert time.monotonic() - started < 10
    shell, child = map(int, pids.read_text(encoding="utf-8").split())
    try:
        assert gen.finish_reason == "timeout" and gen.error == "no answer within 1 s"
        assert gone(shell, 5)
        assert gone(child, 5), "the wrapper's child outlived the timeout"
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(child, signal.SIGKILL)


@pytest.mark.skipif(not hasattr(os, "killpg"), reason="process groups are POSIX")
def test_command_that_answers_and_leaves_a_child_holding_its_pipes_ends_at_once(tmp_path):
    """`sh -c 'sleep 60 & echo …'`: the program answered and exited, but the child it left in
    the background holds its standard output and error open. The call waited for them to
    close until the --timeout, and so failed an answered call as a timeout."""
    pids = tmp_path / "pids"
    program = f"sh -c 'cat >/dev/null; sleep 60 & echo $! > {pids}; echo Summary: ORD_88400.'"
    started = time.monotonic()
    gen = CommandSummarizer(program, 30).summarize(request())
    took = time.monotonic() - started
    child = int(pids.read_text(encoding="utf-8"))
    try:
        assert check_generation(gen) is None, gen
        assert gen.text == "Summary: ORD_88400."
        assert took < 5, took
        assert gone(child, 5), "the program's background child outlived the call"
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(child, signal.SIGKILL)


def _open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="counts fds in /proc")
@pytest.mark.skipif(shutil.which("setsid") is None, reason="needs setsid(1)")
def test_command_calls_leak_no_pipe_when_a_process_outside_the_group_holds_them(tmp_path):
    """A program whose child left its process group (setsid) and kept the pipes: killing the
    group could not end it, the reading threads waited on the pipes for ever, and every call
    leaked two file descriptors and two threads."""
    pids = tmp_path / "pids"
    program = (
        f"sh -c 'cat >/dev/null; setsid sleep 60 & echo $! >> {pids}; echo Summary: ORD_88400.'"
    )
    summarizer = CommandSummarizer(program, 30)
    summarizer.summarize(request())  # the first call: whatever is opened once and kept
    fds, threads = _open_fds(), threading.active_count()
    try:
        for _ in range(8):
            started = time.monotonic()
            gen = summarizer.summarize(request())
            assert time.monotonic() - started < 5
            assert gen.text == "Summary: ORD_88400.", gen
        # (fewer is fine: a thread of an earlier test may have ended meanwhile)
        assert _open_fds() <= fds
        assert threading.active_count() <= threads
    finally:
        for pid in map(int, pids.read_text(encoding="utf-8").split()):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


def test_command_output_beyond_the_limit_is_a_failure_and_stops_the_program(tmp_path):
    """A runaway program printing without end filled memory until the --timeout: stdout is
    read up to MAX_OUTPUT_BYTES (far above a 6,000-character summary), then the program is
    stopped and the attempt fails, naming the limit."""
    pid = tmp_path / "pid"
    spec = _script(
        tmp_path,
        "import os, sys\n"
        f"open({str(pid)!r}, 'w').write(str(os.getpid()))\n"
        "sys.stdin.read()\n"
        "while True:\n    sys.stdout.write('ORD_88400 ' * 6554)\n",
    )
    started = time.monotonic()
    gen = create(spec, SummarizerOptions(timeout=30)).summarize(request())
    assert time.monotonic() - started < 10
    assert check_generation(gen) == (
        "error: the program wrote more than 1,048,576 bytes to its standard output "
        "(the summary is at most 6,000 characters)"
    )
    assert gone(int(pid.read_text()), 5)


def test_command_keeps_only_the_tail_of_a_flood_on_standard_error(tmp_path):
    """A program logging 24 MB to stderr was read whole into memory; only its last line
    is shown, so only a tail is kept."""
    import tracemalloc

    spec = _script(
        tmp_path,
        "import sys\nsys.stdin.read()\n"
        "for _ in range(3000):\n    sys.stderr.write('x' * 8191 + '\\n')\n"
        "sys.stderr.write('quota exceeded')\nsys.exit(3)\n",
    )
    tracemalloc.start()
    try:
        gen = create(spec, SummarizerOptions(timeout=60)).summarize(request())
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert gen.error is not None and gen.error.startswith("exit status 3: ")
    assert gen.error.endswith("x\nquota exceeded") and len(gen.error) < 320
    assert peak < 4_000_000, peak


def test_command_missing_program_is_unreachable_not_a_failed_generation(tmp_path):
    missing = tmp_path / "no-such-program"
    with pytest.raises(BackendUnreachableError, match=f"cannot run {missing}"):
        CommandSummarizer(str(missing), 5).summarize(request())


@pytest.mark.skipif(sys.platform == "win32", reason="exit statuses 126/127 are a POSIX shell's")
@pytest.mark.parametrize(
    ("make", "status", "what"),
    [
        (lambda tmp: "llm-not-installed-here", 127, "a command was not found"),
        (lambda tmp: str(tmp / "not-executable"), 126, "a command is not executable"),
    ],
)
def test_command_a_shell_that_cannot_run_the_program_is_unreachable(tmp_path, make, status, what):
    """`command:"sh -c 'llmx -m m'"` (or `env`, or a wrapper script) with a typo: the shell
    starts, cannot run the program and exits 127 (126: not executable). That was a failed
    attempt of every segment, so a typo spent both attempts of every range."""
    (tmp_path / "not-executable").write_text("echo hi\n", encoding="utf-8")
    target = make(tmp_path)
    s = CommandSummarizer(f"sh -c '{target}'", 5)
    with pytest.raises(BackendUnreachableError) as err:
        s.summarize(request())
    message = str(err.value)
    assert message.startswith(f"cannot run sh -c {target}: exit status {status} ({what}): ")
    assert target in message.partition(f"({what}): ")[2]  # the shell's own words
    assert "nothing was counted as an attempt" in err.value.hint


def test_command_without_program_is_a_config_error():
    with pytest.raises(ConfigError, match="needs a program"):
        create('command:""')


# -- openai ---------------------------------------------------------------------------------


class FakeOpenAI(BaseHTTPRequestHandler):
    """Answers /v1/chat/completions according to the model name it is sent."""

    requests: list[dict] = []

    def log_message(self, *args: object) -> None:  # keep test output quiet
        pass

    def do_POST(self) -> None:  # noqa: N802 (http.server API)
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        FakeOpenAI.requests.append(
            {"path": self.path, "body": body, "auth": self.headers.get("Authorization")}
        )
        mode = body["model"]
        if mode == "stall":
            time.sleep(3)
        if mode in ("endless", "endless500"):  # a body that never ends
            self.send_response(500 if mode == "endless500" else 200)
            self.send_header("Content-Type", "application/json")
            self.end_headers()
            try:
                self.wfile.write(b'{"choices": [{"message": {"content": "')
                while True:
                    self.wfile.write(b"ORD_88400 " * 6554)
            except (BrokenPipeError, ConnectionResetError):
                pass  # the client stopped reading
            self.close_connection = True
            return
        if mode == "http500":
            self.send_response(500)
            self.end_headers()
            self.wfile.write(b'{"error": "overloaded"}')
            return
        message = {"role": "assistant", "content": "Summary: [a0] ORD_88400."}
        if mode == "surrogate":  # valid JSON (a lone \\ud800 escape), but no UTF-8 text
            message["content"] = "Summary: [a0] ORD_\ud80088400."
        finish = {"stop": "stop", "length": "length", "tools": "tool_calls"}.get(mode, "stop")
        if mode == "cancelled":  # the server's own word for a generation it stopped
            finish = "cancelled"
        if mode == "tools":
            message["tool_calls"] = [
                {"id": "t1", "type": "function", "function": {"name": "x", "arguments": "{}"}}
            ]
        payload = json.dumps(
            {"choices": [{"index": 0, "message": message, "finish_reason": finish}]}
        ).encode()
        if mode.startswith("drip"):
            self._drip(payload, headers_too=mode == "drip-all")
            return
        if mode == "cut":  # promises the whole answer, sends a tenth of it and hangs up
            self.send_response(200)
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload[: len(payload) // 10])
            self.wfile.flush()
            self.close_connection = True
            return
        try:
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the stalled client gave up

    def _drip(self, payload: bytes, *, headers_too: bool) -> None:
        """Send the answer a byte every 0.25 s: the socket is never idle for a second."""
        head = (
            "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(payload)}\r\nConnection: close\r\n\r\n"
        ).encode()
        if not headers_too:
            self.wfile.write(head)
            self.wfile.flush()
        try:
            for byte in (head if headers_too else b"") + payload:
                self.wfile.write(bytes([byte]))
                self.wfile.flush()
                time.sleep(0.25)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the client gave up at its deadline
        self.close_connection = True


@pytest.fixture
def openai_url():
    server = ThreadingHTTPServer(("127.0.0.1", 0), FakeOpenAI)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    FakeOpenAI.requests = []
    yield f"http://127.0.0.1:{server.server_address[1]}/v1"
    server.shutdown()
    server.server_close()


def _openai(url: str, model: str, timeout: float = 10) -> Summarizer:
    return create("openai", SummarizerOptions(base_url=url, model=model, timeout=timeout))


def test_openai_stop_is_a_success_and_no_tools_are_offered(openai_url, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-key")
    gen = _openai(openai_url, "stop").summarize(request())
    assert check_generation(gen) is None and gen.text == "Summary: [a0] ORD_88400."
    sent = FakeOpenAI.requests[0]
    assert sent["path"] == "/v1/chat/completions"
    assert sent["auth"] == "Bearer sk-test-key"
    assert "tools" not in sent["body"] and "functions" not in sent["body"]
    # assistant answers with their ids are the only material sent
    assert "=== assistant message a3 ===" in sent["body"]["messages"][1]["content"]


def test_openai_without_a_key_sends_no_authorization(openai_url, monkeypatch):
    """The key is optional (README): a local server that wants none is asked without one."""
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    gen = _openai(openai_url, "stop").summarize(request())
    assert check_generation(gen) is None and gen.text == "Summary: [a0] ORD_88400."
    assert [sent["auth"] for sent in FakeOpenAI.requests] == [None]


@pytest.mark.parametrize(
    ("model", "fragment"),
    [
        ("length", "not a normal stop"),
        ("tools", "tool call"),
        ("http500", "HTTP 500"),
        ("cut", "connection to http://127.0.0.1"),  # was "summarizer crashed: IncompleteRead"
    ],
)
def test_openai_abnormal_ends_are_failures(openai_url, model, fragment):
    gen = _openai(openai_url, model).summarize(request())
    problem = check_generation(gen)
    assert problem is not None and fragment in problem


def test_a_server_that_says_cancelled_fails_the_attempt_and_the_run_goes_on(openai_url, db_file):
    """`cancelled` is how a summariser tells the run its own `cancel()` stopped a call (the run
    then stops); a server that ends a generation with finish reason `cancelled` has not been
    cancelled by lexkeep: that is a failed attempt like `length`, and the run goes on."""
    from test_compaction_support import build

    from lexkeep.compaction.engine import run_compaction
    from lexkeep.core.store import Store

    gen = _openai(openai_url, "cancelled").summarize(request())
    assert gen.finish_reason != "cancelled"
    assert check_generation(gen) == (
        "error: the server ended the generation with finish reason 'cancelled'"
    )
    with Store.open(db_file) as store:
        build(store, {"c1": 40})  # two segments
    report = run_compaction(db_file, summarizer=_openai(openai_url, "cancelled"))
    assert (report.claimed, report.failed, report.remaining) == (2, 2, 0)
    assert report.segments[0].detail.endswith("finish reason 'cancelled'")


def test_openai_stalled_response_times_out(openai_url):
    started = time.monotonic()
    gen = _openai(openai_url, "stall", timeout=0.5).summarize(request())
    assert time.monotonic() - started < 2.5
    assert gen.finish_reason == "timeout" and check_generation(gen) is not None


@pytest.mark.parametrize("model", ["drip-body", "drip-all"])
def test_openai_timeout_is_a_deadline_for_the_whole_call(openai_url, model):
    # Each byte arrives well within the 1 s timeout, the whole answer only after about 30 s
    # (headers and body, or the body alone): the call must end at 1 s, as a failed attempt.
    started = time.monotonic()
    gen = _openai(openai_url, model, timeout=1).summarize(request())
    elapsed = time.monotonic() - started
    assert gen.finish_reason == "timeout", gen
    assert gen.error == "no complete answer within 1 s"
    assert check_generation(gen) == "timeout: no complete answer within 1 s"
    assert 0.9 < elapsed < 2.5, elapsed


def test_openai_response_beyond_the_limit_is_a_failure(openai_url):
    """A server sending without end filled memory until --timeout: the body is read up to
    MAX_OUTPUT_BYTES, then the attempt fails naming the limit."""
    started = time.monotonic()
    gen = _openai(openai_url, "endless", timeout=30).summarize(request())
    assert time.monotonic() - started < 10
    assert check_generation(gen) == (
        "error: the response from "
        f"{openai_url}/chat/completions is larger than 1,048,576 bytes "
        "(the summary is at most 6,000 characters)"
    )
    # an error status's body is read only as far as the message shows it
    started = time.monotonic()
    gen = _openai(openai_url, "endless500", timeout=30).summarize(request())
    assert time.monotonic() - started < 10
    assert gen.error is not None and gen.error.startswith(f"HTTP 500 from {openai_url}")
    assert "ORD_88400" in gen.error and len(gen.error) < 400


def test_openai_input_digest_is_that_of_the_two_messages_sent(openai_url, tmp_path):
    """The stored input digest is the SHA-256 of the rendered prompt: the instructions, a
    blank line, the answers and a line feed, which is what `command:` reads on stdin. `openai`
    sends those two parts as its system and user messages, so the digest can be checked from
    them; the system message used to keep the prompt's final line feed, which render() drops,
    so no digest of what was sent matched the stored one."""
    import hashlib

    from test_compaction_support import build

    from lexkeep.compaction.engine import run_compaction
    from lexkeep.core.store import Store

    db = tmp_path / "store.duckdb"
    with Store.open(db) as store:
        build(store, {"c1": 30})
        report = run_compaction(store, summarizer=_openai(openai_url, "stop"))
        assert report.completed == 1, report
        (stored,) = store.con.execute("SELECT input_sha256 FROM compactions").fetchone()
    system, user = (m["content"] for m in FakeOpenAI.requests[0]["body"]["messages"])
    sent = f"{system}\n\n{user}\n".encode()
    assert hashlib.sha256(sent).hexdigest() == stored


def refusing_url() -> str:
    """A loopback URL whose port refuses connections (bound once, then closed)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return f"http://127.0.0.1:{port}/v1"


def test_openai_refused_connection_is_unreachable_not_a_failed_generation():
    url = refusing_url()
    with pytest.raises(BackendUnreachableError, match=f"cannot reach {url}/chat/completions"):
        _openai(url, "stop", timeout=2).summarize(request())


def test_openai_unknown_host_is_unreachable():
    with pytest.raises(BackendUnreachableError, match="cannot reach http://no-such-host.invalid"):
        _openai("http://no-such-host.invalid/v1", "stop", timeout=5).summarize(request())


def test_openai_unreachable_through_the_engine_spends_no_attempt(openai_url, store):
    from test_compaction_support import build

    from lexkeep.compaction.engine import run_compaction

    build(store, {"c1": 30})
    down = SummarizerOptions(base_url=refusing_url(), timeout=5)
    up = SummarizerOptions(base_url=openai_url, timeout=10)
    for _ in range(3):  # a server that is down never uses up the range's two attempts
        with pytest.raises(BackendUnreachableError):
            run_compaction(store, summarizer=create("openai:length", down))
        assert store.con.execute("SELECT count(*) FROM compactions").fetchone()[0] == 0
        assert store.con.execute("SELECT count(*) FROM compaction_attempts").fetchone()[0] == 0
    # An answer that is rejected counts: attempt 1 fails ...
    assert run_compaction(store, summarizer=create("openai:length", up)).failed == 1
    # ... the server goes down: attempt 2 is given back, not spent ...
    with pytest.raises(BackendUnreachableError):
        run_compaction(store, summarizer=create("openai:length", down))
    rows = store.con.execute("SELECT status, attempts, lease_owner FROM compactions").fetchall()
    assert rows == [("failed", 1, None)]
    assert store.con.execute("SELECT attempt FROM compaction_attempts").fetchall() == [(1,)]
    # ... and comes back: attempt 2 is a real one, after which the range stays raw.
    report = run_compaction(store, summarizer=create("openai:length", up))
    assert report.failed == 1 and report.segments[0].attempt == 2
    rows = store.con.execute("SELECT status, attempts FROM compactions").fetchall()
    assert rows == [("exhausted", 2)]


def _serve(handler: type[BaseHTTPRequestHandler]) -> ThreadingHTTPServer:
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


@pytest.mark.parametrize("status", [301, 302, 303, 307, 308])
def test_openai_does_not_follow_a_redirect_with_the_api_key(status, monkeypatch):
    """A redirect from the base URL was followed: urllib turns the POST into a GET and sends
    the `Authorization` header along to wherever `Location` points (another host too). A chat
    completion is never answered by a redirect: it is a failed attempt, and nothing more is
    sent."""
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-key")
    heard: list[tuple[str, str | None]] = []

    class Elsewhere(BaseHTTPRequestHandler):
        def log_message(self, *args: object) -> None:
            pass

        def _any(self) -> None:
            heard.append((self.command, self.headers.get("Authorization")))
            self.send_response(404)
            self.send_header("Content-Length", "0")
            self.end_headers()

        do_GET = do_POST = do_HEAD = _any  # noqa: N815 (http.server API)

    elsewhere = _serve(Elsewhere)
    target = f"http://127.0.0.1:{elsewhere.server_address[1]}/steal"

    class Redirect(BaseHTTPRequestHandler):
        def log_message(self, *args: object) -> None:
            pass

        def do_POST(self) -> None:  # noqa: N802 (http.server API)
            self.rfile.read(int(self.headers["Content-Length"]))
            self.send_response(status)
            self.send_header("Location", target)
            self.send_header("Content-Length", "0")
            self.end_headers()

    redirect = _serve(Redirect)
    try:
        url = f"http://127.0.0.1:{redirect.server_address[1]}/v1"
        gen = _openai(url, "stop").summarize(request())
    finally:
        for server in (redirect, elsewhere):
            server.shutdown()
            server.server_close()
    assert heard == []  # the other server never heard of the call, nor of the key
    assert gen.finish_reason == "error" and f"HTTP {status} from {url}" in (gen.error or "")
    assert check_generation(gen) is not None


def test_openai_needs_base_url_and_model():
    # A Python caller reads the options' names (the command's flags: test_cli_compact).
    with pytest.raises(ConfigError, match="needs a base_url"):
        create("openai", SummarizerOptions(model="m"))
    with pytest.raises(ConfigError, match="needs a model"):
        create("openai", SummarizerOptions(base_url="http://127.0.0.1:1/v1"))


def test_openai_through_the_engine_tool_calls_fail_and_stop_completes(openai_url, store):
    from test_compaction_support import build

    from lexkeep.compaction.engine import run_compaction

    build(store, {"c1": 30})
    options = SummarizerOptions(base_url=openai_url, timeout=10)
    bad = run_compaction(store, summarizer=create("openai:tools", options))
    assert (bad.claimed, bad.completed, bad.failed) == (1, 0, 1)
    assert store.con.execute("SELECT summary, status FROM compactions").fetchone() == (
        None,
        "failed",
    )
    good = run_compaction(store, summarizer=create("openai:stop", options))
    assert good.completed == 1
    sent = FakeOpenAI.requests[-1]["body"]["messages"]
    assert "USER-SAYS" not in json.dumps(sent)  # no user text ever leaves for the model


def test_a_summary_with_a_lone_surrogate_breaks_the_contract():
    problem = check_generation(Generation("Summary \ud800 here"))
    assert problem == "the summary is not plain text: a lone surrogate U+D800 at character 8"
    assert check_generation(Generation("line one\n\tline two \U0001f600\r\n")) is None


def test_openai_text_with_a_lone_surrogate_is_a_failed_attempt_not_a_crash(openai_url, store):
    """A response whose content held a lone surrogate (valid JSON: "\\ud800") crashed the
    whole run with "internal error: UnicodeEncodeError", leaving its claim leased."""
    from test_compaction_support import build

    from lexkeep.compaction.engine import run_compaction

    build(store, {"c1": 30})
    report = run_compaction(store, summarizer=_openai(openai_url, "surrogate"))
    assert (report.completed, report.failed) == (0, 1)
    [row] = store.con.execute("SELECT status, last_error, summary FROM compactions").fetchall()
    assert row[0] == "failed" and "not plain text" in row[1] and row[2] is None


@pytest.mark.parametrize(
    "text, code, at",
    [
        ("Summary \x1b[2J here", "U+001B", 8),  # ESC: clear the screen
        ("order\x00 ORD_1", "U+0000", 5),  # NUL: ends a C string, a prompt
        ("x \x9b31m red", "U+009B", 2),  # CSI as one C1 character
        ("rm -rf /\rls", "U+000D", 8),  # a lone carriage return overwrites the line
        ("bell\x07", "U+0007", 4),
        ("del\x7f", "U+007F", 3),
        ("page\x0cbreak", "U+000C", 4),
    ],
)
def test_a_summary_with_a_control_character_breaks_the_contract(text, code, at):
    problem = check_generation(Generation(text))
    assert problem == f"the summary is not plain text: control character {code} at character {at}"


BIDI = "\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069"


@pytest.mark.parametrize("char", BIDI)
def test_a_summary_with_a_bidirectional_override_or_isolate_breaks_the_contract(char):
    """Trojan Source (CVE-2021-42574): an override or isolate makes a reader see the text in
    another order than a model or a program reads it. Such summaries were accepted."""
    import unicodedata

    problem = check_generation(Generation(f"Refund {char}ORD_88412 approved"))
    assert problem == (
        "the summary is not plain text: bidirectional formatting character"
        f" U+{ord(char):04X} ({unicodedata.name(char)}) at character 7"
    )


@pytest.mark.parametrize(
    "text, code, name, at",
    [
        # interlinear annotation: what follows the anchor is shown above, or not at all
        ("ok \ufff9ORD_1\ufffaORD_2\ufffb", "U+FFF9", "INTERLINEAR ANNOTATION ANCHOR", 3),
        # deprecated format characters that change how digits and mirrored signs look
        ("id 12\u206e34", "U+206E", "NATIONAL DIGIT SHAPES", 5),
        ("a < b\u206a", "U+206A", "INHIBIT SYMMETRIC SWAPPING", 5),
        # tag characters spell invisible ASCII a model still reads
        ("done\U000e0069\U000e0067\U000e006e", "U+E0069", "TAG LATIN SMALL LETTER I", 4),
        ("x\U000e0001", "U+E0001", "LANGUAGE TAG", 1),
        # a run of variation selectors carries hidden bytes; one after a character is a style
        ("ok\u2764\ufe0f\ufe00\ufe01", "U+FE00", "VARIATION SELECTOR-1", 4),
    ],
)
def test_a_summary_with_an_invisible_format_character_breaks_the_contract(text, code, name, at):
    problem = check_generation(Generation(text))
    assert problem == (
        f"the summary is not plain text: invisible format character {code} ({name})"
        f" at character {at}"
    )


@pytest.mark.parametrize(
    "text",
    [
        "family \U0001f468\u200d\U0001f469\u200d\U0001f467 and \U0001f3f3\ufe0f\u200d\U0001f308",
        "flags \U0001f3f4\U000e0067\U000e0062\U000e0065\U000e006e\U000e0067\U000e007f ok",
        "keycap 1\ufe0f\u20e3, heart \u2764\ufe0f, text style \u2764\ufe0e",
        "a doubled selector (a copy-and-paste slip) hides nothing: \u2764\ufe0f\ufe0f\ufe0f",
        "Persian \u0645\u06cc\u200c\u062e\u0648\u0627\u0647\u0645"
        " and Hebrew \u05e9\u05dc\u05d5\u05dd\u200f (3)",
        "Arabic mark \u061c\u0661\u0662, L\u200eR marks,"
        " Thai \u0e2a\u0e27\u0e31\u200b\u0e2a\u0e14\u0e35",
        "soft\u00adhyphen, word\u2060joiner, \ufeffBOM, CJK \u8fbb\U000e0100 \u4e2d\u6587",
        "\u00e9t\u00e9 \u00fcber \u0416\u0443\u043a \U0001d400 \u2028",
    ],
)
def test_ordinary_non_ascii_text_and_joiners_stay_plain_text(text):
    """Joiners inside emoji, ZWNJ in Persian, directional marks in right-to-left text, a
    subdivision flag's tags and one variation selector after a character are ordinary text."""
    assert check_generation(Generation(text)) is None


def test_a_command_printing_a_trojan_source_summary_is_a_failed_attempt(tmp_path, store):
    from test_compaction_support import build

    from lexkeep.compaction.engine import run_compaction

    build(store, {"c1": 30})
    spec = _script(
        tmp_path,
        "import sys\nsys.stdin.read()\n"
        "sys.stdout.buffer.write('Refund \u2067ORD_1\u2069 ok'.encode())\n",
    )
    report = run_compaction(store, summarizer=create(spec, SummarizerOptions(timeout=30)))
    assert (report.completed, report.failed) == (0, 1)
    [row] = store.con.execute("SELECT status, last_error, summary FROM compactions").fetchall()
    assert row[0] == "failed" and row[2] is None
    assert row[1] == (
        "the summary is not plain text: bidirectional formatting character U+2067"
        " (RIGHT-TO-LEFT ISOLATE) at character 7"
    )


def test_tabs_line_breaks_and_crlf_are_plain_text():
    assert check_generation(Generation("a\tb\nc\r\nd\r\n")) is None


def test_a_command_printing_terminal_escapes_is_a_failed_attempt(tmp_path, store):
    """A `command:` summariser whose output held ESC sequences was stored as the summary, and
    `lexkeep context --format text` sent them to the user's terminal."""
    from test_compaction_support import build

    from lexkeep.compaction.engine import run_compaction

    build(store, {"c1": 30})
    spec = _script(
        tmp_path, "import sys\nsys.stdin.read()\nprint('Summary \\x1b]0;pwned\\x07 ok')\n"
    )
    report = run_compaction(store, summarizer=create(spec, SummarizerOptions(timeout=30)))
    assert (report.completed, report.failed) == (0, 1)
    [row] = store.con.execute("SELECT status, last_error, summary FROM compactions").fetchall()
    assert row[0] == "failed" and row[2] is None
    assert row[1] == "the summary is not plain text: control character U+001B at character 8"


def test_unreachable_with_several_slots_gives_every_claim_back(db_file):
    from test_compaction_support import build

    from lexkeep.compaction.engine import run_compaction
    from lexkeep.core.store import Store

    with Store.open(db_file) as store:
        build(store, {"c1": 60, "c2": 60})  # 8 segments for 3 slots
    down = SummarizerOptions(base_url=refusing_url(), timeout=5)
    with pytest.raises(BackendUnreachableError) as stopped:
        run_compaction(db_file, summarizer=create("openai:m", down), workers=3)
    # The error carries the run's counts: every claim was given back, so none stands.
    report = stopped.value.report
    assert (report.planned, report.claimed, report.completed, report.failed) == (8, 0, 0, 0)
    assert report.remaining == 8 and report.segments == []
    with Store.open(db_file, read_only=True) as store:
        assert store.con.execute("SELECT count(*) FROM compactions").fetchone()[0] == 0
        assert store.con.execute("SELECT count(*) FROM compaction_attempts").fetchone()[0] == 0


def _cancel_and_join(summarizer: Summarizer, thread: threading.Thread, result: list):
    """Cancel `summarizer` while `thread`'s call waits; that call must end within 3 s: its
    Generation."""
    cancelled_at = time.monotonic()
    summarizer.cancel()
    thread.join(10)
    assert not thread.is_alive(), "the call did not end after cancel()"
    assert time.monotonic() - cancelled_at < 3
    [gen] = result
    assert isinstance(gen, Generation), gen
    return gen


def _call_in_thread(summarizer: Summarizer) -> tuple[threading.Thread, list]:
    """Start `summarizer.summarize(request())` in a thread; its Generation (or exception)
    lands in the returned list."""
    result: list = []

    def call() -> None:
        try:
            result.append(summarizer.summarize(request()))
        except BaseException as exc:  # reported to the test, not lost in the thread
            result.append(exc)

    thread = threading.Thread(target=call, daemon=True)
    thread.start()
    return thread, result


@pytest.mark.parametrize("stall", ["n", "d"])  # never answers; drips its answer
def test_openai_call_in_flight_is_cancelled_from_another_thread_and_resumes(stall):
    """`cancel()` did nothing for `openai`: a call to a server that took the request and then
    stalled ran on to its --timeout (here 60 s), so a run that Ctrl-C or another slot's error
    stopped hung that long. The call now ends at once as `cancelled`, its connection closed;
    calls made before `resume()` end the same way without a request, and after it they work."""
    from test_compaction_support import StallingOpenAI

    with StallingOpenAI(stall) as server:
        summarizer = _openai(server.url, "m", timeout=60)
        thread, result = _call_in_thread(summarizer)
        server.wait_for(1, 10)
        time.sleep(0.3)  # the call is waiting for the answer
        gen = _cancel_and_join(summarizer, thread, result)
        assert (gen.finish_reason, gen.error) == ("cancelled", "the run was interrupted")
        deadline = time.monotonic() + 5
        while 0 not in server.hung_up and time.monotonic() < deadline:
            time.sleep(0.02)
        assert 0 in server.hung_up, "the stalled connection was left open"
        # refused at once until resume(): no request is sent
        assert summarizer.summarize(request()).finish_reason == "cancelled"
        assert len(server.arrived) == 1
        summarizer.resume()
        server.plan = "a"
        gen = summarizer.summarize(request())
        assert check_generation(gen) is None and gen.text == "Summary: ORD_88400."


def test_openai_call_still_connecting_is_cancelled_not_unreachable():
    """A server whose connection queue is full lets a connection attempt wait: cancelled
    meanwhile, the call ends at once as `cancelled`, not at --timeout as an unreachable
    backend (which would stop the run with the wrong error)."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(0)
    port = listener.getsockname()[1]
    queued = socket.create_connection(("127.0.0.1", port), timeout=5)  # fills the queue
    try:
        summarizer = _openai(f"http://127.0.0.1:{port}/v1", "m", timeout=60)
        thread, result = _call_in_thread(summarizer)
        time.sleep(0.5)  # the connection attempt waits for the server
        assert thread.is_alive() and not result, result
        gen = _cancel_and_join(summarizer, thread, result)
        assert gen.finish_reason == "cancelled"
    finally:
        queued.close()
        listener.close()
