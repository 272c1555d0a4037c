"""Start-up cost of quick lexkeep commands: median user+system CPU and wall time per call.

    python benchmarks/startup.py [--runs 20] [--db STORE --conversation ID] LEXKEEP [LEXKEEP...]

Each LEXKEEP is a `lexkeep` executable (one per install to compare, e.g. two venvs). Calls are
interleaved per round, so drift on a shared machine hits every install alike. CPU time is the
child's own user+system time (from wait4), which other processes on the machine inflate far
less than wall time.

With --db (a store every install can read) the commands that open it are timed too: `stats`,
`show`, and with --conversation `show ID` and `context ID --budget-bytes 32000`, the call a
script makes before each run of an agent.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import time

COMMANDS = (
    ("--version",),
    ("--help",),
    ("ingest", "--help"),
    ("audit", "--help"),
    ("context", "--help"),
)


def store_commands(db: str, conversation: str | None) -> tuple[tuple[str, ...], ...]:
    """The calls that open the store `db` (read-only)."""
    calls: list[tuple[str, ...]] = [("stats", "--db", db), ("show", "--db", db)]
    if conversation:
        calls += [
            ("show", conversation, "--db", db),
            ("context", conversation, "--budget-bytes", "32000", "--db", db),
        ]
    return tuple(calls)


def one_call(argv: list[str]) -> tuple[float, float]:
    """(user+system CPU seconds, wall seconds) of one call."""
    start = time.perf_counter()
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - start
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(argv)} exited {proc.returncode}")
    return usage.ru_utime + usage.ru_stime, wall


def main() -> None:
    """Print one row per command and install: median CPU and wall milliseconds."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--db", help="a store to time the commands that read one on")
    parser.add_argument("--conversation", help="a conversation of --db for show and context")
    parser.add_argument("executables", nargs="+", metavar="LEXKEEP")
    args = parser.parse_args()
    commands = COMMANDS + (store_commands(args.db, args.conversation) if args.db else ())
    samples: dict[tuple[str, tuple[str, ...]], list[tuple[float, float]]] = {}
    for exe in args.executables:  # one warm-up call each: the page cache, .pyc files
        one_call([exe, "--version"])
        if args.db:
            one_call([exe, *commands[-1]])
    for _ in range(args.runs):
        for command in commands:
            for exe in args.executables:
                samples.setdefault((exe, command), []).append(one_call([exe, *command]))
    print(f"{'command':<30} {'install':<40} {'cpu ms':>7} {'wall ms':>8}")
    for (exe, command), runs in samples.items():
        cpu = statistics.median(c for c, _ in runs) * 1000
        wall = statistics.median(w for _, w in runs) * 1000
        shown = " ".join(a for a in command if a not in (args.db, "--db"))
        print(f"{shown[:30]:<30} {exe[-40:]:<40} {cpu:7.0f} {wall:8.0f}")


if __name__ == "__main__":
    main()
