"""Peak memory of `lexkeep audit` while reading its input and over the whole run.

`benchmarks/run.py` gives each step's peak RSS (`/usr/bin/time -v`); this says which phase it is
in. The audit runs in this process (as `lexkeep audit PATHS --format json` does, the report
written to a temporary file); when its reading ends (the store is filled, the audit of
identifiers starts) the peak so far and the current RSS are printed, then the whole run's peak.

    $ python benchmarks/audit_memory.py /work/bench6/codex-4096MB-s7/sessions
    reading: 115.4 s, peak 665 MB, 445 MB when it ended
    audit: 162.3 s, peak 991 MB

Run it on a snapshot with PYTHONPATH (see run.py --snapshot). Linux only (/proc).
"""

from __future__ import annotations

import argparse
import resource
import tempfile
import time
from pathlib import Path


def _rss_mb() -> int:
    pages = int(Path("/proc/self/statm").read_text().split()[1])
    return pages * resource.getpagesize() >> 20


def _peak_mb() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss >> 10  # KiB on Linux


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("paths", nargs="+", help="trace files or folders, as for lexkeep audit")
    args = ap.parse_args()

    from lexkeep.audit.engine import run_audit
    from lexkeep.audit.render import render

    start = time.perf_counter()

    def phase(text: str) -> None:
        if text == "auditing identifiers":  # the store is filled: reading has ended
            took = time.perf_counter() - start
            print(f"reading: {took:.1f} s, peak {_peak_mb()} MB, {_rss_mb()} MB when it ended")

    report = run_audit(paths=args.paths, on_phase=phase)
    with tempfile.TemporaryFile("w", encoding="utf-8") as stream:
        render(report, "json", stream)
    print(f"audit: {time.perf_counter() - start:.1f} s, peak {_peak_mb()} MB")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
