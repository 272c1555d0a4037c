"""Record or check the extractor's exact output on a fixed corpus (a speed-work safety net).

    python benchmarks/identifiers/oracle.py record /tmp/oracle.json   # before a change
    python benchmarks/identifiers/oracle.py check  /tmp/oracle.json   # after: same spans?
    python benchmarks/identifiers/oracle.py bench                     # MB/s on both corpora

The corpus: every tau-bench user message, every user_text message of the claude-code-log
traces (read with lexkeep's own readers), the hard-negative bank, and, as a wider net for
code-heavy text, every other message text of the claude-code-log traces (assistant text, tool
output carried as messages; each cut to 4,000 characters so the 50 ms budget never runs out).
The oracle file stays outside the repository: it holds trace text.
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import orjson

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from corpus import SHARED, conversations  # noqa: E402

from lexkeep.core.identifiers import extract, extract_many  # noqa: E402
from lexkeep.core.model import Message, MessageKind  # noqa: E402
from lexkeep.core.rules import RuleSet, build_rules, default_rules  # noqa: E402

CLAUDE = SHARED / "claude-code-log"
WIDE_CHARS = 4000


def tau_texts() -> list[str]:
    """Every tau-bench user message, in corpus order."""
    return [text for conv in conversations() for _, text in conv.users]


def claude_messages() -> Iterator[Message]:
    """Every message record of every readable claude-code-log trace, in path order."""
    from lexkeep.core.ingest import read_records  # only `record` and `bench` need the readers

    for path in sorted(CLAUDE.rglob("*.jsonl")):
        try:
            records = list(read_records(path))
        except Exception:  # noqa: BLE001 - fixtures include deliberately malformed files
            continue
        for record in records:
            if isinstance(record, Message) and record.text:
                yield record


def synthetic(count: int = 4000) -> list[str]:
    """Every kind's examples, then seeded mixes of examples, hard negatives and glue."""
    rules = default_rules()
    pieces = [ex.text for kind in rules.kinds for ex in (*kind.positive, *kind.negative)]
    hard = [
        orjson.loads(line)["text"]
        for line in (HERE / "hard_negatives.jsonl").read_text().splitlines()
        if line.strip()
    ]
    words = [*pieces, *hard, "zip", "order", "ending in", "HTTP", "on", "version", "the", "#"]
    glue = [" ", " ", " ", ", ", "\n", "/", "-", ".", "(", ")", "'", "`", ":", "_", ""]
    rng = random.Random(20261130)
    out = list(pieces)
    for _ in range(count):
        parts = [rng.choice(words) for _ in range(rng.randint(1, 8))]
        out.append("".join(p + rng.choice(glue) for p in parts))
    return out


def corpora() -> dict[str, list[str]]:
    """The named text sets the oracle covers."""
    claude = list(claude_messages())
    hard = [
        orjson.loads(line)["text"]
        for line in (HERE / "hard_negatives.jsonl").read_text().splitlines()
        if line.strip()
    ]
    return {
        "synthetic": synthetic(),
        "tau_user": tau_texts(),
        "claude_user": [m.text for m in claude if m.kind == MessageKind.USER_TEXT],
        "hard_negatives": hard,
        "claude_other": [m.text[:WIDE_CHARS] for m in claude if m.kind != MessageKind.USER_TEXT],
    }


def wide_rules() -> RuleSet:
    """The built-in kinds with a 10 s budget: spans that never depend on the machine's load."""
    return build_rules({"settings": {"timeout_ms": 10_000}})


def outputs(texts: list[str], rules: RuleSet) -> list[list]:
    """[complete, [[kind, value, start, end], ...]] per text."""
    out = []
    for text in texts:
        ex = extract(text, rules)
        out.append([ex.complete, [[i.kind, i.value, i.start, i.end] for i in ex.identifiers]])
    return out


def record(path: Path) -> None:
    """Write the current extractor's output (10 s budget) for every corpus text to `path`."""
    rules = wide_rules()
    data: dict = {"rules_digest": default_rules().digest, "sets": {}}
    for name, texts in corpora().items():
        data["sets"][name] = {"texts": texts, "out": outputs(texts, rules)}
        print(f"{name}: {len(texts)} texts")
    path.write_bytes(orjson.dumps(data))


def check(path: Path) -> int:
    """Compare the current extractor with the recording; print every difference.

    Strict with the 10 s budget (every span and flag equal). With the default 50 ms budget a
    text may come back incomplete on a busy machine; that is counted, not failed, but a
    complete scan must equal the recording.
    """
    data = orjson.loads(path.read_bytes())
    bad = 0
    for label, rules in (("10 s budget", wide_rules()), ("default budget", default_rules())):
        for name, entry in data["sets"].items():
            now = outputs(entry["texts"], rules)
            diffs = [i for i, (a, b) in enumerate(zip(entry["out"], now, strict=True)) if a != b]
            budget = [i for i in diffs if label == "default budget" and not now[i][0]]
            diffs = [i for i in diffs if i not in budget]
            print(f"{label:14} {name:14} {len(entry['texts']):5} texts, {len(diffs)} differ"
                  f" ({len(budget)} incomplete: out of budget)")  # fmt: skip
            for i in diffs[:10]:
                was = {tuple(x) for x in entry["out"][i][1]}
                got = {tuple(x) for x in now[i][1]}
                text = entry["texts"][i]
                print(f"  text {i} ({len(text)} chars): {text[:100]!r}")
                print(f"    complete was {entry['out'][i][0]}, now {now[i][0]}")
                print(f"    lost {sorted(was - got, key=lambda x: x[2])[:8]}")
                print(f"    new  {sorted(got - was, key=lambda x: x[2])[:8]}")
            bad += len(diffs)
    print("ORACLE-EXACT" if not bad else f"ORACLE MISMATCH: {bad} texts")
    return 1 if bad else 0


def bench(repeat: int = 7) -> None:
    """CPU-time MB/s (median and best of `repeat`) on tau-bench and claude-code-log user text."""
    sets = corpora()
    rules = default_rules()
    print(f"load average {os.getloadavg()}")
    for name in ("tau_user", "claude_user", "claude_other"):
        texts = sets[name]
        size = sum(len(t.encode()) for t in texts)
        for text in texts[:200]:
            extract(text, rules)
        runs = []
        # Small corpora are repeated inside one timed run so the timer's resolution does not matter.
        inner = max(1, 400_000 // max(size, 1))
        for _ in range(repeat):
            cpu = time.process_time()
            for _ in range(inner):
                extract_many(texts, rules)  # as ingest and audit call it
            runs.append((time.process_time() - cpu) / inner)
        med = statistics.median(runs)
        print(
            f"{name:13} {len(texts):6} texts {size:9} bytes (avg {size / len(texts):.0f}): "
            f"{size / med / 1e6:5.2f} MB/s median, {size / min(runs) / 1e6:5.2f} best, "
            f"{med / len(texts) * 1e6:.1f} µs/text"
        )


def main() -> int:
    """Command-line entry point."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("action", choices=["record", "check", "bench"])
    parser.add_argument("path", nargs="?", type=Path, default=Path("/work/c3/oracle.json"))
    args = parser.parse_args()
    if args.action == "record":
        record(args.path)
        return 0
    if args.action == "check":
        return check(args.path)
    bench()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
