"""How Ctrl-C and SIGTERM stop a command: as a KeyboardInterrupt, raised where it can be taken
up. Imports nothing heavy, so `main()` puts it in place before it imports what it runs on."""

import contextlib
import os
import signal
import sys
import threading
import time
from types import FrameType

EXIT_INTERRUPTED = 130  # Ctrl-C, as a shell reports a command killed by SIGINT
EXIT_TERMINATED = 143  # SIGTERM (a CI job cancelled, `timeout`, `docker stop`), as a shell says


class Terminated(KeyboardInterrupt):
    """SIGTERM stopped the command. A KeyboardInterrupt, so it takes Ctrl-C's way out: what
    finished is kept and said, a summariser's call in progress is given back, workers end."""


_terminated = False  # SIGTERM arrived: the command stops as on Ctrl-C, and exits 143
_handler_pid = 0  # the process these signals stop as Ctrl-C does: not its forked workers
_pending = 0  # a signal taken up during an import, to be raised once the import is done
_resent = False  # the next one is that signal sent again (`_resend`), not a new one
_resending = False  # a thread sends the pending signal again (`_resend`)


def _in_an_import(frame: FrameType | None) -> bool:
    """True when `frame`, or one that called it, is an import: a compiled module being set up
    (DuckDB's) aborts the whole process on an exception raised in the Python code it calls,
    and a Python module is left half made."""
    while frame is not None:
        if frame.f_code.co_filename.startswith("<frozen importlib"):
            return True
        frame = frame.f_back
    return False


def _in_own_handling(frame: FrameType | None) -> bool:
    """True when `frame`, or one that called it, is this module putting a stop off."""
    while frame is not None:
        if frame.f_code in _OWN_HANDLING:
            return True
        frame = frame.f_back
    return False


def _defer(signum: int) -> None:
    """Raise the stop for `signum` later: it is sent to the main thread again every moment,
    from another thread (sent from a signal handler, it would be handled at once, where it
    could not be taken up), until it is raised (or `raise_pending` raised it first)."""
    global _pending, _resending
    _pending = signum
    if _resending:
        return  # the thread sending it again is still at work (an import that takes long)
    _resending = True
    again = threading.Thread(target=_resend, daemon=True)
    again.start()


def _resend() -> None:
    global _resent, _resending
    while True:
        while _pending:
            time.sleep(0.01)
            signum = _pending
            if signum:  # not raised meanwhile
                _resent = True
                signal.pthread_kill(threading.main_thread().ident or 0, signum)
        _resending = False
        if not _pending:
            return
        _resending = True  # put off again after the loop saw none pending


def _on_signal(signum: int, frame: FrameType | None) -> None:
    """Ctrl-C (SIGINT) or SIGTERM: raise KeyboardInterrupt (Terminated), or put it off while
    an import runs."""
    global _resent
    resent, _resent = _resent, False
    if os.getpid() != _handler_pid:
        # A forked worker that has not ignored the signal yet (`parallel.ignore_interrupts`):
        # its parent stops it.
        return
    if resent and _pending != signum:  # raised already, by `raise_pending`
        return
    _stop(signum, frame)


def _stop(signum: int, frame: FrameType | None) -> None:
    global _terminated, _pending
    if signum == signal.SIGTERM and _terminated:
        return  # a second one while the first stop is under way: let that stop finish
    if _in_an_import(frame):
        _defer(signum)
        return
    if _in_own_handling(frame):
        # Sent again while this module still puts the stop off (a loaded machine can run the
        # sending thread before `_defer` returns): raised there, in the hook for exceptions
        # Python drops, it would be dropped too. It stays pending and is sent again.
        _defer(signum)
        return
    _pending = 0
    if signum == signal.SIGTERM:
        _terminated = True
        raise Terminated("terminated")
    raise KeyboardInterrupt


def raise_pending() -> None:
    """Raise the stop a signal taken up during an import put off, now that the import is
    done (instead of waiting for it to be sent again)."""
    if _pending:
        _stop(_pending, None)


def _on_unraisable(unraisable: "sys.UnraisableHookArgs") -> None:
    """The stop raised where Python drops exceptions ("Exception ignored in ..."): a garbage
    collector callback, a finaliser, a fork hook. It would be lost, and the command go on
    as if no signal had come: it comes again instead, to be raised elsewhere."""
    global _terminated
    if isinstance(unraisable.exc_value, Terminated):
        _terminated = False
        _defer(signal.SIGTERM)
        return
    if isinstance(unraisable.exc_value, KeyboardInterrupt):
        _defer(signal.SIGINT)
        return
    _unraisable_before(unraisable)


_unraisable_before = sys.unraisablehook
_OWN_HANDLING = {_defer.__code__, _on_unraisable.__code__}


def stop_on_signals() -> None:
    """Make Ctrl-C and SIGTERM stop this process with a KeyboardInterrupt (SIGTERM: see
    `Terminated`, instead of killing it where it stands) raised where it can be taken up:
    not inside an import, nor where Python drops exceptions. A signal the process was started
    ignoring (a job started in the background) stays ignored. Forked workers ignore both
    (`parallel.ignore_interrupts`): their parent stops them."""
    global _handler_pid, _unraisable_before
    _handler_pid = os.getpid()
    with contextlib.suppress(ValueError, OSError, AttributeError):  # not the main thread
        for signum, default in (
            (signal.SIGINT, signal.default_int_handler),
            (signal.SIGTERM, signal.SIG_DFL),
        ):
            if signal.getsignal(signum) in (default, _on_signal):
                signal.signal(signum, _on_signal)
        if sys.unraisablehook is not _on_unraisable:
            _unraisable_before = sys.unraisablehook
            sys.unraisablehook = _on_unraisable


def interrupted_by() -> str:
    """What stopped the command, as its `interrupted:` line names it: Ctrl-C or SIGTERM."""
    return "SIGTERM" if _terminated else "Ctrl-C"


def say_interrupted() -> int:
    """`Interrupted.` on stderr; the exit status of a stopped command: 130 after Ctrl-C, 143
    after SIGTERM."""
    with contextlib.suppress(OSError, ValueError, AttributeError):  # no stderr at all
        sys.stderr.write("Interrupted.\n")
        sys.stderr.flush()
    return EXIT_TERMINATED if _terminated else EXIT_INTERRUPTED
