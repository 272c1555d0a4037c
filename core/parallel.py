"""Work handed to forked worker processes: reading many trace files ahead of the writer.

A folder of session files (Claude Code projects, Codex rollouts) is thousands of small files,
and reading each one (JSON decoding, the format's reader) used to run in the one process that
also writes the store. `ReadAhead` runs a function over the next few items in worker
processes while the caller works on the current one, and hands the results back in order.
A worker only computes: every write stays in the calling process.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ProcessPoolExecutor
from multiprocessing import get_all_start_methods, get_context
from typing import Any, Generic, TypeVar

from lexkeep.core.errors import ConfigError

T = TypeVar("T")
R = TypeVar("R")


def cpu_count() -> int:
    """The CPUs this process may use (all of the machine's where affinity is unknown)."""
    if hasattr(os, "sched_getaffinity"):  # not on macOS or Windows
        return max(1, len(os.sched_getaffinity(0)))
    return max(1, os.cpu_count() or 1)


def env_count(name: str, default: int) -> int:
    """The whole number in environment variable `name` (at least 0), else `default`."""
    given = os.environ.get(name, "").strip()
    if not given:
        return default
    try:
        return max(0, int(given))
    except ValueError:
        raise ConfigError(
            f"{name} must be a whole number of processes, not {given!r}",
            hint=f"unset {name} to use one per CPU ({cpu_count()} here)",
        ) from None


def ignore_interrupts() -> None:
    """Worker initializer: Ctrl-C reaches every process of the terminal's group, and a worker
    interrupted mid-call would print its own traceback under the command's one-line message;
    the parent stops its workers itself. SIGTERM too (`timeout` and systemd send it to the
    whole group): a worker it killed while handing a result back left a half-written message
    that the stopping command waited on for ever. A parent that is gone ends them
    (`exit_with_parent`)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)


# How often a worker looks whether the process that forked it is still there.
PARENT_POLL_SECONDS = 0.5


def exit_with_parent(parent: int) -> None:
    """Worker initializer: end this process as soon as `parent`, which forked it, is gone.

    A pool's workers wait on a pipe whose writing end they inherited themselves, so a parent
    killed by SIGTERM or SIGKILL (a CI timeout, `kill PID`) gives them no end of input: they
    would wait for ever, holding the command's stdout and stderr open, and whatever reads those
    (a CI step, a pipe) would wait with them. A daemon thread polls the parent's pid instead.
    """
    if os.getppid() != parent:
        os._exit(1)

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(PARENT_POLL_SECONDS)
        os._exit(1)

    threading.Thread(target=watch, name="lexkeep-parent-watch", daemon=True).start()


def _start_worker(
    parent: int, initializer: Callable[..., None] | None, initargs: tuple[Any, ...]
) -> None:
    exit_with_parent(parent)
    ignore_interrupts()
    if initializer is not None:
        initializer(*initargs)


def read_workers() -> int:
    """Processes that read trace files ahead: the CPUs ($LEXKEEP_READ_WORKERS overrides;
    0 or 1 reads every file in the writing process). 0 where processes cannot be forked."""
    if "fork" not in get_all_start_methods():
        return 0
    return env_count("LEXKEEP_READ_WORKERS", cpu_count())


class ReadAhead(Generic[T, R]):
    """`fn(item)` for `items` in order, computed up to `depth` items ahead by `workers` forked
    processes (each runs `initializer(*initargs)` first).

    `take(item)` returns the result for `item` when it is the next item read ahead (items the
    caller passed over are dropped), else None: the caller then does the work itself. A
    worker's failure also gives None, so `fn` should return None for anything unusual and
    let the caller's own attempt report it. Use as a context manager: leaving it stops the
    workers (running calls finish; queued ones are cancelled).
    """

    def __init__(
        self,
        fn: Callable[[T], R | None],
        items: Sequence[T],
        workers: int,
        depth: int,
        initializer: Callable[..., None] | None = None,
        initargs: tuple[Any, ...] = (),
    ) -> None:
        self._fn = fn
        self._items = list(items)
        self._index = {item: i for i, item in reversed(list(enumerate(self._items)))}
        self._next = 0  # index of the next item to submit
        self._depth = max(1, depth)
        self._queue: deque[tuple[int, Future[R | None]]] = deque()
        # fork: workers inherit the loaded modules, and `initargs` reach them unpickled; they
        # never touch the parent's store.
        self._pool: ProcessPoolExecutor | None = ProcessPoolExecutor(
            max(1, workers),
            mp_context=get_context("fork"),
            initializer=_start_worker,
            initargs=(os.getpid(), initializer, initargs),
        )
        self._fill()

    def __enter__(self) -> ReadAhead[T, R]:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _fill(self) -> None:
        pool = self._pool
        while pool is not None and len(self._queue) < self._depth and self._next < len(self._items):
            index = self._next
            try:
                future = pool.submit(self._fn, self._items[index])
            except RuntimeError:  # the pool broke (a worker was killed): read here from now
                self.close()
                return
            self._next += 1
            self._queue.append((index, future))

    def take(self, item: T) -> R | None:
        """The result of `fn(item)`, when `item` was read ahead; None otherwise."""
        index = self._index.get(item)
        if index is None or self._pool is None:
            return None
        queue = self._queue
        while queue and queue[0][0] < index:  # passed over by the caller
            queue.popleft()[1].cancel()
        if not queue or queue[0][0] != index:
            if index >= self._next:  # the caller jumped ahead: read ahead from there
                for _, future in queue:
                    future.cancel()
                queue.clear()
                self._next = index + 1
                self._fill()
            return None
        _, future = queue.popleft()
        self._fill()
        try:
            return future.result()
        except Exception:  # a worker died (BrokenProcessPool) or fn raised: read it here
            return None

    def close(self) -> None:
        """Stop the workers: queued calls are cancelled, running ones finish."""
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)
            self._pool = None
            self._queue.clear()
