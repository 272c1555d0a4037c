"""Benchmark runner: lexkeep against DuckDB's own floor, in one run on the same files.

    python benchmarks/run.py --size 256MB --size 1GB [--format lexkeep] [--reps 3]
                             [--work /work/bench] [--results results.json]

For each size it generates a dump (benchmarks/generate.py, cached in --work), then runs every
step as a subprocess under `/usr/bin/time -v` (wall time and peak RSS), --reps times:

  floor     DuckDB `SELECT count(*) FROM read_json(...)`         (the ratio denominator)
  ctas      DuckDB `CREATE TABLE AS SELECT * FROM read_json(...)` into a DuckDB file
  ingest    `lexkeep ingest FILES --db fresh.duckdb`
  audit     `lexkeep audit FILES --format json` (its counts are checked against expected.json)
  baseline  benchmarks/baseline.py (lexkeep format only)

then, once per run: `lexkeep compact --summarizer extractive` on --compact-conversations x 50
pairs (segments per second), and `lexkeep context` on a 500-pair conversation added to the
largest ingested store (median in-process latency over --context-reps calls).
Prints a table (medians, ratio to the floor, peak RSS) and writes every measurement as JSON.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import re
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import generate  # noqa: E402  (a sibling script, not a package)

TIME_BIN = "/usr/bin/time"
STEP_TIMEOUT = 3 * 3600

FLOOR_SQL = (
    "import duckdb,sys; con=duckdb.connect(); "
    "print(con.execute(\"SELECT count(*) FROM read_json(?, format='newline_delimited', "
    'union_by_name=true, maximum_object_size=268435456)", [sys.argv[1]]).fetchone()[0])'
)
CTAS_SQL = (
    "import duckdb,sys; con=duckdb.connect(sys.argv[2]); "
    "con.execute(\"CREATE TABLE dump AS SELECT * FROM read_json(?, format='newline_delimited', "
    'union_by_name=true, maximum_object_size=268435456)", [sys.argv[1]]); '
    "con.execute('CHECKPOINT'); print(con.execute('SELECT count(*) FROM dump').fetchone()[0])"
)
# In-process latency of `lexkeep context`: the command itself (open the store, assemble,
# render), without interpreter start-up, which is a property of Python, not of lexkeep. Also
# its two parts: opening (and closing) the store, which starts a DuckDB instance, and the
# library call an agent makes on a store it keeps open (`build_context`).
CONTEXT_TIMER = r"""
import json, statistics, sys, time
from typer.testing import CliRunner
from lexkeep.cli.main import app
from lexkeep.compaction.context import build_context
from lexkeep.core.store import Store
db, conv, budget, reps = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
runner = CliRunner()
args = ["context", conv, "--budget-bytes", budget, "--db", db]
first = runner.invoke(app, args)
if first.exit_code != 0:
    sys.stderr.write(first.stderr or first.stdout)
    raise SystemExit(2)
times, opens, library = [], [], []
with Store.open(db, read_only=True) as store:
    assert build_context(store, conv, int(budget)).output.encode() == first.stdout.encode()
for _ in range(reps):
    t = time.perf_counter()
    r = runner.invoke(app, args)
    times.append(time.perf_counter() - t)
    assert r.exit_code == 0, r.stderr
    t = time.perf_counter()
    Store.open(db, read_only=True).close()
    opens.append(time.perf_counter() - t)
with Store.open(db, read_only=True) as store:
    for _ in range(reps):
        t = time.perf_counter()
        build_context(store, conv, int(budget))
        library.append(time.perf_counter() - t)
print(json.dumps({"times": times, "open": opens, "library": library,
                  "bytes": len(first.stdout.encode())}))
"""


# --------------------------------------------------------------------------------------------
# Measuring one subprocess.


def measure(cmd: list[str], log: Path, env: dict[str, str] | None = None) -> dict[str, Any]:
    """Run `cmd` under /usr/bin/time -v; wall seconds, peak RSS (MB), exit code, stdout."""
    timing = log.with_suffix(".time")
    full = [TIME_BIN, "-v", "-o", str(timing), *cmd]
    started = time.perf_counter()
    proc = subprocess.run(
        full, capture_output=True, text=True, timeout=STEP_TIMEOUT, env=env or SNAPSHOT_ENV
    )
    wall = time.perf_counter() - started
    log.write_text(
        f"$ {' '.join(cmd)}\n--- stdout\n{proc.stdout[-20000:]}\n--- stderr\n"
        f"{proc.stderr[-20000:]}\n"
    )
    text = timing.read_text() if timing.exists() else ""
    rss = re.search(r"Maximum resident set size \(kbytes\): (\d+)", text)
    user = re.search(r"User time \(seconds\): ([\d.]+)", text)
    system = re.search(r"System time \(seconds\): ([\d.]+)", text)
    return {
        "wall_s": round(wall, 3),
        "cpu_s": round(float(user.group(1)) + float(system.group(1)), 3)
        if user and system
        else None,
        "peak_rss_mb": round(int(rss.group(1)) / 1024, 1) if rss else None,
        "exit": proc.returncode,
        "stdout": proc.stdout,
        "stderr_tail": proc.stderr[-2000:],
    }


REPO = HERE.parent
# Set by --snapshot: run lexkeep from an exported commit, not from files being edited.
SNAPSHOT_ENV: dict[str, str] | None = None


def make_snapshot(work: Path, rev: str) -> tuple[str, dict[str, str]]:
    """Export `rev` of the repo and lay it out as the `lexkeep` package; returns (sha, env)."""
    sha = subprocess.run(
        ["git", "-C", str(REPO), "rev-parse", rev], capture_output=True, text=True, check=True
    ).stdout.strip()
    root = work / f"snapshot-{sha[:12]}"
    if not root.exists():
        src = root / "src"
        src.mkdir(parents=True)
        archive = subprocess.run(
            ["git", "-C", str(REPO), "archive", sha], capture_output=True, check=True
        ).stdout
        subprocess.run(["tar", "-x", "-C", str(src)], input=archive, check=True)
        pkg = root / "lexkeep"
        pkg.mkdir()
        for name in ("core", "cli", "audit", "compaction"):
            (pkg / name).symlink_to(src / name, target_is_directory=True)
    env = dict(os.environ)
    env["PYTHONPATH"] = str(root) + os.pathsep + env.get("PYTHONPATH", "")
    return sha, env


def lexkeep_cmd() -> list[str]:
    """How to call the CLI: the snapshot, the console script beside this Python, or -m."""
    if SNAPSHOT_ENV is not None:
        return [sys.executable, "-m", "lexkeep.cli.main"]
    exe = Path(sys.executable).with_name("lexkeep")
    if exe.exists():
        return [str(exe)]
    found = shutil.which("lexkeep")
    return [found] if found else [sys.executable, "-m", "lexkeep.cli.main"]


def dump_target(fmt: str, folder: Path) -> tuple[list[str], str]:
    """(paths for lexkeep commands, path/glob for DuckDB read_json) of a generated dump."""
    if fmt == "lexkeep":
        path = str(folder / "dump.jsonl")
        return [path], path
    sub = "sessions" if fmt == "codex" else "projects"
    return [str(folder / sub)], str(folder / sub / "**" / "*.jsonl")


def ensure_dump(fmt: str, size: int, work: Path, seed: int) -> tuple[Path, dict]:
    """Generate (or reuse) the dump of `fmt` and `size`; returns (folder, expected)."""
    folder = work / f"{fmt}-{size // (1024 * 1024)}MB-s{seed}"
    exp_path = folder / "expected.json"
    if exp_path.exists():
        expected = json.loads(exp_path.read_text())
        if expected["generator"]["size_requested"] == size:
            return folder, expected
    if folder.exists():
        shutil.rmtree(folder)
    sys.stderr.write(f"generating {fmt} {size / 2**20:.0f} MB in {folder} ...\n")
    expected = generate.generate(fmt, size, folder, seed)
    sys.stderr.write(
        f"  {expected['totals']['bytes'] / 1e6:.0f} MB in {expected['generator']['seconds']} s "
        f"({expected['generator']['mb_per_s']} MB/s)\n"
    )
    return folder, expected


def _rm_db(path: Path) -> None:
    for p in (path, path.with_name(path.name + ".wal")):
        if p.exists():
            p.unlink()


# --------------------------------------------------------------------------------------------
# The run.


def bench_size(fmt: str, size: int, args: argparse.Namespace, logs: Path) -> dict[str, Any]:
    """All file-level steps for one dump size, --reps times each; returns the results."""
    folder, expected = ensure_dump(fmt, size, args.work, args.seed)
    paths, glob = dump_target(fmt, folder)
    lk = lexkeep_cmd()
    dbs = args.work / "dbs"
    dbs.mkdir(parents=True, exist_ok=True)
    tag = f"{fmt}-{size // 2**20}MB"
    steps: dict[str, list[dict[str, Any]]] = {}
    audit_check: dict[str, Any] = {}
    keep_store = dbs / f"{tag}-ingest.duckdb"
    plan = ["floor", "ctas", "ingest", "audit"] + (["baseline"] if fmt == "lexkeep" else [])
    plan = [s for s in plan if s not in args.skip]
    for rep in range(args.reps):
        # steps interleaved per repetition, so drift on a shared machine hits all of them
        for step in plan:
            log = logs / f"{tag}-{step}-{rep}.log"
            if step == "floor":
                r = measure([sys.executable, "-c", FLOOR_SQL, glob], log)
            elif step == "ctas":
                db = dbs / f"{tag}-ctas.duckdb"
                _rm_db(db)
                r = measure([sys.executable, "-c", CTAS_SQL, glob, str(db)], log)
                r["db_mb"] = round(db.stat().st_size / 2**20, 1) if db.exists() else None
                _rm_db(db)
            elif step == "ingest":
                _rm_db(keep_store)
                r = measure([*lk, "ingest", *paths, "--db", str(keep_store)], log)
                r["db_mb"] = (
                    round(keep_store.stat().st_size / 2**20, 1) if keep_store.exists() else None
                )
            elif step == "audit":
                out = logs / f"{tag}-audit-{rep}.json"
                r = measure(
                    [*lk, "audit", *paths, "--format", "json", "-o", str(out), "--exit-zero"], log
                )
                if out.exists():
                    audit_check = check_audit(json.loads(out.read_text()), expected)
                    out.unlink()
            else:
                r = measure([sys.executable, str(HERE / "baseline.py"), paths[0], "--json"], log)
                try:
                    counts = json.loads(r["stdout"])
                    r["kept"] = counts["kept"]
                    r["kept_matches_expected"] = counts["kept"] == expected["totals"]["kept"]
                except (ValueError, KeyError):
                    pass
            r.pop("stdout", None)
            steps.setdefault(step, []).append(r)
            sys.stderr.write(
                f"  {tag} {step:<8} rep {rep + 1}: {r['wall_s']:8.2f} s  "
                f"{r['peak_rss_mb'] or 0:8.0f} MB  exit {r['exit']}\n"
            )
    return {
        "format": fmt,
        "size_requested": size,
        "bytes": expected["totals"]["bytes"],
        "lines": expected["totals"]["lines"],
        "files": expected["totals"]["files"],
        "dump": str(folder),
        "steps": summarise(steps),
        "audit_check": audit_check,
        "store": str(keep_store) if keep_store.exists() else None,
    }


def check_audit(report: dict[str, Any], expected: dict[str, Any]) -> dict[str, Any]:
    """The audit's totals against the generator's known outcomes."""
    keys = ("audited", "kept", "altered", "missing")
    got = {k: report.get("totals", {}).get(k) for k in keys}
    want = {k: expected["totals"][k] for k in keys}
    return {"got": got, "expected": want, "equal": got == want}


def summarise(steps: dict[str, list[dict[str, Any]]]) -> dict[str, Any]:
    """Median wall time, ratio to the floor's median, max peak RSS per step."""
    out: dict[str, Any] = {}
    floor = steps.get("floor")
    floor_med = statistics.median(r["wall_s"] for r in floor) if floor else None
    floor_cpu = statistics.median(r["cpu_s"] for r in floor if r.get("cpu_s")) if floor else None
    for name, runs in steps.items():
        ok = [r for r in runs if r["exit"] in (0, 1)]
        med = statistics.median(r["wall_s"] for r in ok) if ok else None
        rss = [r["peak_rss_mb"] for r in runs if r["peak_rss_mb"] is not None]
        cpu = [r["cpu_s"] for r in ok if r.get("cpu_s") is not None]
        out[name] = {
            "median_s": med,
            # CPU seconds (user + system): steadier than wall time on a shared machine
            "median_cpu_s": statistics.median(cpu) if cpu else None,
            "cpu_ratio_to_floor": (
                round(statistics.median(cpu) / floor_cpu, 2) if cpu and floor_cpu else None
            ),
            "ratio_to_floor": round(med / floor_med, 2) if med and floor_med else None,
            "peak_rss_mb": max(rss) if rss else None,
            "failed_runs": len(runs) - len(ok),
            "runs": runs,
        }
    return out


# Used only while `lexkeep compact` is not registered yet: the same library call it makes.
COMPACT_LIBRARY = (
    "import sys; from lexkeep.core.store import Store; "
    "from lexkeep.compaction.engine import run_compaction; "
    "s = Store.open(sys.argv[1]); r = run_compaction(s); s.close(); "
    "print(r.completed, r.failed, r.skipped)"
)
COUNT_COMPLETED = (
    "import duckdb,sys; con=duckdb.connect(sys.argv[1], read_only=True); print(con.execute("
    "\"SELECT count(*) FROM compactions WHERE status='completed'\").fetchone()[0])"
)
COMPACT_ONE = (
    "import sys; from lexkeep.core.store import Store; "
    "from lexkeep.compaction.engine import run_compaction; "
    "s = Store.open(sys.argv[1]); r = run_compaction(s, conversation_ids=[sys.argv[2]]); "
    "s.close(); print(r.completed, r.failed, r.skipped)"
)


def compact_cmd(db: Path) -> tuple[list[str], str]:
    """(command, how) to compact every segment of `db` with the extractive summariser."""
    lk = lexkeep_cmd()
    probe = subprocess.run(
        [*lk, "compact", "--help"], capture_output=True, text=True, env=SNAPSHOT_ENV
    )
    if probe.returncode == 0:
        return [*lk, "compact", "--summarizer", "extractive", "--db", str(db)], "cli"
    return [sys.executable, "-c", COMPACT_LIBRARY, str(db)], "library (no compact command yet)"


def completed_segments(db: Path) -> int | None:
    """Completed compaction jobs in `db` (checks that the segments really were summarised)."""
    proc = subprocess.run(
        [sys.executable, "-c", COUNT_COMPLETED, str(db)], capture_output=True, text=True
    )
    return int(proc.stdout) if proc.returncode == 0 and proc.stdout.strip() else None


def bench_compact(args: argparse.Namespace, logs: Path) -> dict[str, Any]:
    """`lexkeep compact --summarizer extractive` on N conversations x 50 pairs: segments/s."""
    n = args.compact_conversations
    dump = args.work / f"pairs-{n}x50.jsonl"
    info = generate.write_pairs(dump, n, 50, seed=args.seed, prefix="p")
    db = args.work / "dbs" / f"compact-{n}.duckdb"
    db.parent.mkdir(parents=True, exist_ok=True)
    lk = lexkeep_cmd()
    cmd, how = compact_cmd(db)
    runs = []
    ingest_s = []
    for rep in range(args.reps):
        # a fresh store each time: completed summaries are never redone
        _rm_db(db)
        ing = measure(
            [*lk, "ingest", str(dump), "--db", str(db)], logs / f"compact-ingest-{rep}.log"
        )
        ingest_s.append(ing["wall_s"])
        r = measure(cmd, logs / f"compact-{rep}.log")
        done = completed_segments(db)
        r["completed"] = done
        r["segments_per_s"] = round(done / r["wall_s"], 1) if r["exit"] == 0 and done else None
        r.pop("stdout", None)
        runs.append(r)
        sys.stderr.write(
            f"  compact rep {rep + 1}: {r['wall_s']:.2f} s, {done} segments completed, "
            f"{r['segments_per_s']} segments/s, exit {r['exit']}\n"
        )
    _rm_db(db)
    dump.unlink()
    ok = [r["segments_per_s"] for r in runs if r["segments_per_s"]]
    return {
        **info,
        "how": how,
        "ingest_s": ingest_s,
        "median_segments_per_s": round(statistics.median(ok), 1) if ok else None,
        "all_segments_completed": all(r["completed"] == info["segments"] for r in runs),
        "runs": runs,
    }


def bench_context(store: Path, args: argparse.Namespace, logs: Path) -> dict[str, Any]:
    """`lexkeep context` on a 500-pair conversation added to a large store: median latency."""
    dump = args.work / "context-500.jsonl"
    generate.write_pairs(dump, 1, args.context_pairs, seed=args.seed, prefix="ctx-long-")
    lk = lexkeep_cmd()
    conv = "ctx-long-1"
    ing = measure([*lk, "ingest", str(dump), "--db", str(store)], logs / "context-ingest.log")
    # summaries for the long conversation only, so the context is assembled from valid
    # summaries (the path a real next run takes) without compacting the whole store
    cmd, how = compact_cmd(store)
    if how == "cli":
        cmd = [*cmd, "--conversation", conv]
    else:
        cmd = [sys.executable, "-c", COMPACT_ONE, str(store), conv]
    comp = measure(cmd, logs / "context-compact.log")
    r = measure(
        [
            sys.executable,
            "-c",
            CONTEXT_TIMER,
            str(store),
            conv,
            str(args.context_budget),
            str(args.context_reps),
        ],
        logs / "context.log",
    )
    cold = measure(
        [*lk, "context", conv, "--budget-bytes", str(args.context_budget), "--db", str(store)],
        logs / "context-cold.log",
    )
    dump.unlink()
    result: dict[str, Any] = {
        "store": str(store),
        "store_mb": round(store.stat().st_size / 2**20, 1),
        "pairs": args.context_pairs,
        "budget_bytes": args.context_budget,
        "ingest_exit": ing["exit"],
        "compact_exit": comp["exit"],
        "compact_out": comp["stdout"].strip(),
        "cold_cli_s": cold["wall_s"],
        "exit": r["exit"],
    }
    if r["exit"] == 0:
        data = json.loads(r["stdout"])
        result["median_ms"] = round(statistics.median(data["times"]) * 1000, 2)
        result["p90_ms"] = round(sorted(data["times"])[int(0.9 * len(data["times"]))] * 1000, 2)
        result["open_median_ms"] = round(statistics.median(data["open"]) * 1000, 2)
        result["library_median_ms"] = round(statistics.median(data["library"]) * 1000, 2)
        result["output_bytes"] = data["bytes"]
    else:
        result["stderr_tail"] = r["stderr_tail"]
    sys.stderr.write(
        f"  context: {result.get('median_ms')} ms median (store open"
        f" {result.get('open_median_ms')} ms, build_context {result.get('library_median_ms')} ms;"
        f" cold CLI {cold['wall_s']:.2f} s)\n"
    )
    return result


def machine() -> dict[str, Any]:
    """What the numbers were measured on."""
    import duckdb

    mem = ""
    with contextlib.suppress(OSError, StopIteration):
        mem = next(
            line
            for line in Path("/proc/meminfo").read_text().splitlines()
            if line.startswith("MemTotal")
        )
    try:
        from lexkeep.core import __version__ as lk_version
    except ImportError:
        lk_version = None
    return {
        "nproc": os.cpu_count(),
        "cpu": platform.processor() or platform.machine(),
        "memory": mem.split(":", 1)[-1].strip(),
        "python": platform.python_version(),
        "duckdb": duckdb.__version__,
        "lexkeep": lk_version,
        "platform": platform.platform(),
    }


def evaluate(results: dict[str, Any]) -> list[dict[str, Any]]:
    """The issue's targets, each with the measured value and met / not met."""
    out: list[dict[str, Any]] = []

    def add(name: str, value: Any, limit: str, met: bool | None) -> None:
        out.append({"target": name, "value": value, "limit": limit, "met": met})

    by_size = results["sizes"]
    for s in by_size:
        tag = f"{s['format']} {s['bytes'] / 1e9:.2f} GB"
        st = s["steps"]
        a, c, i, b = (st.get(k, {}) for k in ("audit", "ctas", "ingest", "baseline"))
        if a.get("ratio_to_floor") is not None:
            add(f"audit / floor ({tag})", a["ratio_to_floor"], "<= 5", a["ratio_to_floor"] <= 5)
        if a.get("median_s") and b.get("median_s"):
            add(
                f"audit faster than baseline ({tag})",
                round(a["median_s"] / b["median_s"], 2),
                "< 1 (audit/baseline)",
                a["median_s"] < b["median_s"],
            )
        if i.get("median_s") and c.get("median_s"):
            r = round(i["median_s"] / c["median_s"], 2)
            add(f"ingest / CTAS ({tag})", r, "<= 1.5", r <= 1.5)
        for step in ("audit", "ingest"):
            rss = st.get(step, {}).get("peak_rss_mb")
            if rss is not None and s["bytes"] >= 0.9e9:
                add(f"{step} peak RSS ({tag})", rss, "<= 1536 MB", rss <= 1536)
        if s.get("audit_check"):
            add(
                f"audit counts == known outcomes ({tag})",
                s["audit_check"]["got"],
                str(s["audit_check"]["expected"]),
                s["audit_check"]["equal"],
            )
    for fmt in {s["format"] for s in by_size}:
        same = sorted((s for s in by_size if s["format"] == fmt), key=lambda s: s["bytes"])
        if len(same) >= 2:
            for step in ("audit", "ingest"):
                lo, hi = same[0]["steps"].get(step, {}), same[-1]["steps"].get(step, {})
                if lo.get("median_s") and hi.get("median_s"):
                    per_lo = lo["median_s"] / same[0]["bytes"]
                    per_hi = hi["median_s"] / same[-1]["bytes"]
                    r = round(per_hi / per_lo, 2)
                    add(
                        f"{step} time/GB at {same[-1]['bytes'] / 1e9:.2f} GB vs "
                        f"{same[0]['bytes'] / 1e9:.2f} GB ({fmt})",
                        r,
                        "<= 1.3",
                        r <= 1.3,
                    )
    comp = results.get("compact")
    if comp and comp.get("median_segments_per_s") is not None:
        v = comp["median_segments_per_s"]
        add(f"compact segments/s ({comp['conversations']} x 50 pairs)", v, ">= 500", v >= 500)
        # every generated pair is eligible: a missing segment means pairs or positions broke
        done = [r["completed"] for r in comp["runs"]]
        add(
            "compact completed every segment",
            done,
            f"== {comp['segments']}",
            comp["all_segments_completed"],
        )
    ctx = results.get("context")
    if ctx and ctx.get("median_ms") is not None:
        add(
            f"context median ({ctx['pairs']} pairs, {ctx['store_mb']} MB store)",
            ctx["median_ms"],
            "<= 20 ms",
            ctx["median_ms"] <= 20,
        )
    if ctx and ctx.get("library_median_ms") is not None:
        # What an agent that keeps its store open pays per run (not a target of its own).
        add(
            "context build_context median, store kept open",
            ctx["library_median_ms"],
            "<= 20 ms",
            ctx["library_median_ms"] <= 20,
        )
    return out


def _num(value: float | None, width: int, digits: int) -> str:
    return f"{'-':>{width}}" if value is None else f"{value:>{width}.{digits}f}"


def print_table(results: dict[str, Any]) -> None:
    """The results as a plain-text table on stdout."""
    w = sys.stdout.write
    for s in results["sizes"]:
        w(
            f"\n{s['format']} dump: {s['bytes'] / 1e6:.0f} MB, {s['lines']} lines, "
            f"{s['files']} file(s)\n"
        )
        w(
            f"{'step':<10}{'median s':>10}{'x floor':>9}{'MB/s':>8}{'cpu s':>9}"
            f"{'peak RSS MB':>13}{'runs':>6}\n"
        )
        for name, st in s["steps"].items():
            med = st["median_s"]
            cells = (
                _num(med, 10, 2),
                _num(st["ratio_to_floor"], 9, 2),
                _num(s["bytes"] / 1e6 / med if med else None, 8, 0),
                _num(st.get("median_cpu_s"), 9, 2),
                _num(st["peak_rss_mb"], 13, 0),
            )
            w(f"{name:<10}{''.join(cells)}{len(st['runs']):>6}\n")
        if s.get("audit_check"):
            w(
                f"audit counts equal the known outcomes: {s['audit_check']['equal']} "
                f"{s['audit_check']['got']}\n"
            )
    if results.get("compact"):
        c = results["compact"]
        w(
            f"\ncompact: {c['conversations']} conversations x 50 pairs = {c['segments']} segments, "
            f"median {c['median_segments_per_s']} segments/s\n"
        )
    if results.get("context"):
        c = results["context"]
        w(
            f"context: {c['pairs']}-pair conversation in a {c['store_mb']} MB store, median "
            f"{c.get('median_ms')} ms (in-process; of it, opening the store "
            f"{c.get('open_median_ms')} ms), build_context on an open store "
            f"{c.get('library_median_ms')} ms, cold CLI {c['cold_cli_s']} s\n"
        )
    w("\ntargets:\n")
    for t in results["targets"]:
        mark = {True: "met", False: "NOT MET", None: "?"}[t["met"]]
        w(f"  {mark:<8} {t['target']}: {t['value']} (target {t['limit']})\n")


def main(argv: list[str] | None = None) -> int:
    """Command-line entry point."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument(
        "--size",
        type=generate.parse_size,
        action="append",
        help="dump size (repeatable): 256MB, 1GB, 4GB [default: 256MB]",
    )
    ap.add_argument(
        "--format",
        choices=generate.FORMATS,
        action="append",
        help="dump format (repeatable) [default: lexkeep]",
    )
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument(
        "--work",
        type=Path,
        default=Path("/work/bench"),
        help="dumps, stores and logs go here (keep an eye on the disk)",
    )
    ap.add_argument(
        "--results",
        type=Path,
        default=None,
        help="JSON results file [default: WORK/results-<time>.json]",
    )
    ap.add_argument(
        "--skip",
        action="append",
        default=[],
        choices=("floor", "ctas", "ingest", "audit", "baseline", "compact", "context"),
    )
    ap.add_argument("--compact-conversations", type=int, default=1000)
    ap.add_argument("--context-pairs", type=int, default=500)
    ap.add_argument("--context-reps", type=int, default=30)
    ap.add_argument("--context-budget", type=int, default=32_000)
    ap.add_argument("--clean", action="store_true", help="delete generated dumps afterwards")
    ap.add_argument(
        "--snapshot",
        metavar="REV",
        help="benchmark lexkeep as committed at REV (e.g. HEAD), not the working tree",
    )
    args = ap.parse_args(argv)
    if not Path(TIME_BIN).exists():
        sys.stderr.write("error: /usr/bin/time is missing (apt-get install -y time)\n")
        return 2
    sizes = args.size or [generate.parse_size("256MB")]
    formats = args.format or ["lexkeep"]
    args.work.mkdir(parents=True, exist_ok=True)
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    logs = args.work / f"logs-{stamp}"
    logs.mkdir()
    global SNAPSHOT_ENV
    commit = None
    if args.snapshot:
        commit, SNAPSHOT_ENV = make_snapshot(args.work, args.snapshot)
        sys.stderr.write(f"benchmarking lexkeep at commit {commit}\n")
    results: dict[str, Any] = {
        "schema_version": 1,
        "started": stamp,
        "machine": machine(),
        "reps": args.reps,
        "lexkeep_commit": commit,
        "sizes": [],
    }
    for fmt in formats:
        for size in sorted(sizes):
            results["sizes"].append(bench_size(fmt, size, args, logs))
    if "compact" not in args.skip:
        results["compact"] = bench_compact(args, logs)
    stores = [s for s in results["sizes"] if s.get("store")]
    if "context" not in args.skip and stores:
        largest = max(stores, key=lambda s: s["bytes"])
        results["context"] = bench_context(Path(largest["store"]), args, logs)
    for s in results["sizes"]:
        if s.get("store"):
            _rm_db(Path(s["store"]))
        if args.clean:
            shutil.rmtree(s["dump"], ignore_errors=True)
    results["targets"] = evaluate(results)
    results["finished"] = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    target = args.results or (args.work / f"results-{stamp}.json")
    target.write_text(json.dumps(results, indent=1) + "\n")
    print_table(results)
    sys.stdout.write(f"\nresults: {target}\nlogs: {logs}\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
