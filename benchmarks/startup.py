"""Start-up cost of quick lexkeep commands: median user+system CPU and wall time per call.

    python benchmarks/startup.py [--runs 20] LEXKEEP [LEXKEEP...]

Each LEXKEEP is a `lexkeep` executable (one per install to compare, e.g. two venvs). Calls are
interleaved per round, so drift on a shared machine hits every install alike. CPU time is the
child's own user+system time (from wait4), which other processes on the machine inflate far
less than wall time.
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
    parser.add_argument("executables", nargs="+", metavar="LEXKEEP")
    args = parser.parse_args()
    samples: dict[tuple[str, tuple[str, ...]], list[tuple[float, float]]] = {}
    for exe in args.executables:  # one warm-up call each: the page cache, .pyc files
        one_call([exe, "--version"])
    for _ in range(args.runs):
        for command in COMMANDS:
            for exe in args.executables:
                samples.setdefault((exe, command), []).append(one_call([exe, *command]))
    print(f"{'command':<18} {'install':<40} {'cpu ms':>7} {'wall ms':>8}")
    for (exe, command), runs in samples.items():
        cpu = statistics.median(c for c, _ in runs) * 1000
        wall = statistics.median(w for _, w in runs) * 1000
        print(f"{' '.join(command):<18} {exe[-40:]:<40} {cpu:7.0f} {wall:8.0f}")


if __name__ == "__main__":
    main()
