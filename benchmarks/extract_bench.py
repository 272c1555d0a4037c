"""Time identifier extraction in-process, and check that its output does not change.

    python benchmarks/extract_bench.py prepare                  # write the text corpora (once)
    python benchmarks/extract_bench.py run --passes 3           # CPU seconds a pass, digest
    python benchmarks/extract_bench.py ab OTHER_PYTHON --rounds 5   # interleaved A/B
    python benchmarks/extract_bench.py inproc OTHER_CHECKOUT dump256  # A/B in one process

The corpora are the user texts the audit and ingest extract: every user message of the
generated dumps (DUMPS, lexkeep JSONL, read with orjson and never written to), and
every message text of the shared traces (all formats, read with lexkeep's own readers; the
real user texts, and as a wider net the other messages, cut to 4,000 characters). They are
cached as JSON under `--cache` (default $LEXKEEP_BENCH_CACHE, else
/tmp/lexkeep-extract-bench: trace text stays out of the repository).

`run` feeds each corpus to `extract_many()` in batches of `core.sidecar.BATCH_MESSAGES`, as
the extraction workers do, and reports the CPU time of each pass (`time.process_time`) and
a digest of the full output (every identifier's kind, value and span, and each text's
completeness flag) from an untimed pass under a 10 s budget, so that it does not depend on
the machine's load. The first pass also builds what extraction caches; the medians use
every pass. `ab` runs `run` alternately under this interpreter and OTHER_PYTHON (another
checkout's virtual environment, say), one process per round, and prints the medians of
both and whether the digests agree. `inproc` loads the other checkout's
core/identifiers.py and core/prefilter.py beside this one's and alternates the two batch by
batch in one process: on a busy machine the only comparison whose ratio holds still.
Benchmarks of the whole commands stay in run.py.
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.util
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import orjson

REPO = Path(__file__).resolve().parents[1]
SHARED = Path(os.environ.get("LEXKEEP_SHARED_DATA") or REPO.parent / "shared" / "data")
DUMPS = {
    "slice64": Path("/work/bench7/slice64/dump.jsonl"),
    "dump256": Path("/work/bench7/lexkeep-256MB-s7/dump.jsonl"),
}
CACHE = Path(os.environ.get("LEXKEEP_BENCH_CACHE", "/tmp/lexkeep-extract-bench"))
WIDE_CHARS = 4000


def dump_texts(path: Path) -> list[str]:
    """The text of every user message of a lexkeep JSONL dump, in file order."""
    texts = []
    with path.open("rb") as lines:
        for line in lines:
            if b'"role":"user"' not in line:
                continue
            record = orjson.loads(line)
            if record.get("type") == "message" and record.get("role") == "user":
                texts.append(record["text"])
    return texts


def shared_texts(root: Path) -> tuple[list[str], list[str]]:
    """(user_text messages, every other message cut to WIDE_CHARS) of the shared traces."""
    from lexkeep.core.ingest import read_records
    from lexkeep.core.model import Message, MessageKind

    users: list[str] = []
    others: list[str] = []
    for path in sorted(p for p in root.rglob("*") if p.suffix in (".json", ".jsonl")):
        try:
            records = list(read_records(path))
        except Exception:  # noqa: BLE001 - the corpus holds deliberately malformed files
            continue
        for record in records:
            if isinstance(record, Message) and record.text:
                if record.kind == MessageKind.USER_TEXT:
                    users.append(record.text)
                else:
                    others.append(record.text[:WIDE_CHARS])
    return users, others


def prepare(cache: Path, dumps: dict[str, Path]) -> None:
    """Write every corpus to `cache` as a JSON list of texts."""
    cache.mkdir(parents=True, exist_ok=True)
    for name, path in dumps.items():
        texts = dump_texts(path)
        (cache / f"{name}.json").write_bytes(orjson.dumps(texts))
        print(f"{name}: {len(texts)} texts, {sum(map(len, texts))} chars")
    users, others = shared_texts(SHARED)
    for name, texts in (("shared_user", users), ("shared_other", others)):
        (cache / f"{name}.json").write_bytes(orjson.dumps(texts))
        print(f"{name}: {len(texts)} texts, {sum(map(len, texts))} chars")


def load(cache: Path, names: list[str]) -> dict[str, list[str]]:
    """The cached corpora called `names`."""
    missing = [name for name in names if not (cache / f"{name}.json").is_file()]
    if missing:
        raise SystemExit(f"no corpus {missing} in {cache}: run `prepare` first")
    return {name: orjson.loads((cache / f"{name}.json").read_bytes()) for name in names}


def outputs(texts: list[str], rules: object) -> list:
    """extract_many() over `texts` in the workers' batches."""
    from lexkeep.core.identifiers import extract_many
    from lexkeep.core.sidecar import BATCH_MESSAGES

    out: list = []
    for first in range(0, len(texts), BATCH_MESSAGES):
        out += extract_many(texts[first : first + BATCH_MESSAGES], rules)  # type: ignore[arg-type]
    return out


def digest(out: list) -> str:
    """A digest of every text's completeness flag and identifiers (kind, value, span)."""
    hasher = hashlib.sha256()
    for extraction in out:
        found = [[i.kind, i.value, i.start, i.end] for i in extraction.identifiers]
        hasher.update(orjson.dumps([extraction.complete, found]))
    return hasher.hexdigest()[:16]


def run(corpora: dict[str, list[str]], passes: int, check: bool = True) -> dict[str, object]:
    """CPU seconds of each pass per corpus (default rules), the texts whose scan ran out of
    its budget in the last pass, and (`check`) a digest of each corpus's output under a 10 s
    budget, so that it does not depend on the machine's load (an untimed pass)."""
    from lexkeep.core.rules import build_rules, default_rules

    rules = default_rules()
    times: dict[str, list[float]] = {name: [] for name in corpora}
    incomplete: dict[str, int] = {}
    for _ in range(passes):
        for name, texts in corpora.items():
            cpu = time.process_time()
            out = outputs(texts, rules)
            times[name].append(time.process_time() - cpu)
            incomplete[name] = sum(not extraction.complete for extraction in out)
    digests: dict[str, str] = {}
    if check:
        wide = build_rules({"settings": {"timeout_ms": 10_000}})
        digests = {name: digest(outputs(texts, wide)) for name, texts in corpora.items()}
    return {
        "times": times,
        "digests": digests,
        "incomplete": incomplete,
        "load": os.getloadavg()[0],
    }


def ab(other: str, rounds: int, passes: int, names: list[str], cache: Path) -> None:
    """Interleaved rounds of `run` under this interpreter ("A") and `other` ("B")."""
    results: dict[str, list[dict]] = {"A": [], "B": []}
    for round_ in range(rounds):
        order = ("A", "B") if round_ % 2 == 0 else ("B", "A")
        for side in order:
            python = sys.executable if side == "A" else other
            command = [python, __file__, "run", "--json", "--passes", str(passes)]
            command += ["--cache", str(cache), *names]
            done = subprocess.run(command, capture_output=True, text=True, check=True)
            result = json.loads(done.stdout)
            results[side].append(result)
            line = "  ".join(
                f"{name} {statistics.median(t):.3f}" for name, t in result["times"].items()
            )
            print(f"round {round_} {side}: {line}  (load {result['load']:.1f})", flush=True)
    for name in names:
        for side in ("A", "B"):
            every = [t for r in results[side] for t in r["times"][name]]
            per_process = [statistics.median(r["times"][name]) for r in results[side]]
            print(
                f"{name:12} {side}: median {statistics.median(every):.3f} CPU-s a pass "
                f"(process medians {', '.join(f'{t:.3f}' for t in per_process)})"
            )
        same = {r["digests"][name] for side in "AB" for r in results[side]}
        print(f"{name:12} digests {'equal' if len(same) == 1 else 'DIFFER'}: {sorted(same)}")


def _module_from(path: Path, name: str) -> Any:
    """The Python file `path` loaded as a module called `name` (not in sys.modules)."""
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def inproc(base: Path, rounds: int, names: list[str], cache: Path) -> None:
    """This checkout's extract_many ("A") against the one of the checkout at `base` ("B"),
    batch by batch in one process, so both see the same moment of a busy machine.

    B is `base`'s core/identifiers.py and core/prefilter.py loaded beside this checkout's
    modules (everything else, the rules included, is shared). Each round runs every batch
    under both, in alternating order, and adds each side's CPU time.
    """
    import lexkeep.core.identifiers as mine
    from lexkeep.core.rules import default_rules
    from lexkeep.core.sidecar import BATCH_MESSAGES

    old_prefilter = _module_from(base / "core" / "prefilter.py", "base_prefilter")
    old = _module_from(base / "core" / "identifiers.py", "base_identifiers")
    old.prefilter = old_prefilter  # its selector, compiled by its own code
    rules = default_rules()
    corpora = load(cache, names)
    sides = {"A": mine.extract_many, "B": old.extract_many}
    for name, texts in corpora.items():
        batches = [texts[i : i + BATCH_MESSAGES] for i in range(0, len(texts), BATCH_MESSAGES)]
        for extract_many in sides.values():  # build what each side caches
            extract_many(batches[0], rules)
        totals: dict[str, list[float]] = {"A": [], "B": []}
        same = True
        for round_ in range(rounds):
            spent = {"A": 0.0, "B": 0.0}
            for index, batch in enumerate(batches):
                order = ("A", "B") if (index + round_) % 2 == 0 else ("B", "A")
                got = {}
                for side in order:
                    cpu = time.process_time()
                    got[side] = sides[side](batch, rules)
                    spent[side] += time.process_time() - cpu
                same = same and got["A"] == got["B"]
            for side in spent:
                totals[side].append(spent[side])
        a, b = statistics.median(totals["A"]), statistics.median(totals["B"])
        print(
            f"{name:12} A {a:.3f}  B {b:.3f} CPU-s a pass (medians of {rounds}; A/B {a / b:.3f});"
            f" A {', '.join(f'{t:.3f}' for t in totals['A'])};"
            f" B {', '.join(f'{t:.3f}' for t in totals['B'])};"
            f" outputs {'equal' if same else 'DIFFER'}",
            flush=True,
        )


def main() -> int:
    """Command-line entry point."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("action", choices=["prepare", "run", "ab", "inproc"])
    parser.add_argument(
        "other", nargs="?", help="ab: the other checkout's python; inproc: its folder"
    )
    parser.add_argument("names", nargs="*", help="corpora (default: all four)")
    parser.add_argument("--cache", type=Path, default=CACHE)
    parser.add_argument("--passes", type=int, default=3)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--no-check", action="store_true", help="run: no digest pass")
    parser.add_argument("--json", action="store_true", help="run: print the result as JSON")
    args = parser.parse_intermixed_args()
    names = list(args.names)
    if args.action == "run" and args.other is not None:
        names.insert(0, args.other)  # `run` takes no interpreter: the first name is a corpus
    names = names or ["slice64", "dump256", "shared_user", "shared_other"]
    if args.action == "prepare":
        prepare(args.cache, DUMPS)
        return 0
    if args.action == "inproc":
        if args.other is None:
            parser.error("inproc needs the other checkout's folder")
        inproc(Path(args.other), args.rounds, names, args.cache)
        return 0
    if args.action == "ab":
        if args.other is None:
            parser.error("ab needs the other interpreter")
        ab(args.other, args.rounds, args.passes, names, args.cache)
        return 0
    result = run(load(args.cache, names), args.passes, check=not args.no_check)
    if args.json:
        print(json.dumps(result))
        return 0
    for name, times in result["times"].items():  # type: ignore[union-attr]
        print(
            f"{name:12} {statistics.median(times):.3f} CPU-s median of "
            f"{', '.join(f'{t:.3f}' for t in times)}; digest {result['digests'].get(name)}"  # type: ignore[union-attr]
            f", {result['incomplete'][name]} incomplete"  # type: ignore[index]
        )
    print(f"load average {result['load']:.1f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
