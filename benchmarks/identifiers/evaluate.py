"""Evaluate the identifier extractor: recall, precision, hard negatives, throughput.

    python benchmarks/identifiers/evaluate.py            # everything, human-readable
    python benchmarks/identifiers/evaluate.py --json     # the same figures as JSON
    python benchmarks/identifiers/evaluate.py --misses   # also list every miss / false hit

1. Recall on load-bearing identifiers: tool-call argument values in ../shared/data (tau-bench)
   that also occur verbatim, as a whole token, in the same conversation's user messages.
   Computed by script (corpus.py), never by hand. Target >= 0.97.
2. Precision on hand-labelled user messages (labels.jsonl; >= 300 messages). Target >= 0.95.
3. Hard negatives (hard_negatives.jsonl): sentences that must yield nothing, apart from the
   listed exceptions, each with its reason. Target: zero unexplained reports.
4. Throughput: MB/s of user text on one core (CPU time, median of 7 runs) over every
   tau-bench user message, with the best run, wall time and the machine's load average.
"""

from __future__ import annotations

import argparse
import collections
import os
import statistics
import sys
import time
from pathlib import Path

import orjson
import regex

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from corpus import (  # noqa: E402
    PLAIN_NUMBER,
    SHAPE,
    SPECIAL,
    VERSION,
    conversations,
    text_sha,
)

from lexkeep.core.identifiers import extract, extract_many  # noqa: E402
from lexkeep.core.rules import default_rules  # noqa: E402

# A label must be a whole token in the user text: not glued to a letter, digit or _, and not a
# piece of a longer path, host, code or date ("/var/log" inside "/var/log/app", "2025-08"
# inside "2025-08-23"). A leading sigil (#, @) or quote is fine.
_BEFORE = r"(?<![\p{L}\p{N}_\-./\\])"
_AFTER = r"(?![\p{L}\p{N}_]|[\-./\\:@][\p{L}\p{N}])"
SIGILS = ("#", "@")


def whole_token(value: str, text: str) -> bool:
    """`value` occurs in `text` as a whole token (see _BEFORE/_AFTER)."""
    return regex.search(_BEFORE + regex.escape(value) + _AFTER, text) is not None


def load_bearing() -> dict:
    """Recall on script-computed load-bearing labels, per kind of the value found."""
    labels = found = 0
    excluded_numbers: collections.Counter[str] = collections.Counter()
    per_kind: collections.Counter[str] = collections.Counter()
    misses: list[tuple[str, str, int]] = []
    for conv in conversations():
        extracted: dict[str, str] | None = None
        for value in sorted(conv.argument_values):
            if not SHAPE.match(value) or not SPECIAL.search(value):
                continue
            if not any(whole_token(value, text) for _, text in conv.users):
                continue
            if PLAIN_NUMBER.match(value) or VERSION.match(value):
                excluded_numbers[value] += 1
                continue
            if extracted is None:
                extracted = {}
                for _, text in conv.users:
                    for ident in extract(text).identifiers:
                        extracted.setdefault(ident.value, ident.kind)
            labels += 1
            # The user's exact span may carry a sigil the tool argument drops (#W4817420).
            hit = next((s + value for s in ("", *SIGILS) if s + value in extracted), None)
            if hit is not None:
                found += 1
                per_kind[extracted[hit]] += 1
            else:
                misses.append((value, conv.file, conv.run))
    return {
        "labels": labels,
        "found": found,
        "recall": round(found / labels, 4) if labels else None,
        "found_by_kind": dict(per_kind.most_common()),
        "excluded_numbers_and_versions": sum(excluded_numbers.values()),
        "misses": misses,
    }


def precision() -> dict:
    """Precision/recall against the hand-labelled messages, per kind and overall (strict spans)."""
    path = HERE / "labels.jsonl"
    texts = _message_index()
    tp = fp = fn = 0
    kind_tp: collections.Counter[str] = collections.Counter()
    kind_fp: collections.Counter[str] = collections.Counter()
    false_hits: list[tuple[str, str, str]] = []
    missed: list[tuple[str, str]] = []
    messages = stale = 0
    for line in path.read_text(encoding="utf-8").splitlines():
        if not line.strip():
            continue
        row = orjson.loads(line)
        key = (row["file"], row["run"], row["index"])
        text = texts.get(key)
        if text is None or text_sha(text) != row["sha"]:
            stale += 1
            continue
        messages += 1
        expected = {(s["start"], s["end"]) for s in row["spans"]}
        for s in row["spans"]:
            assert text[s["start"] : s["end"]] == s["value"], (key, s)
        for ident in extract(text).identifiers:
            if (ident.start, ident.end) in expected:
                tp += 1
                kind_tp[ident.kind] += 1
                expected.discard((ident.start, ident.end))
            else:
                fp += 1
                kind_fp[ident.kind] += 1
                false_hits.append((ident.kind, ident.value, text[:160]))
        fn += len(expected)
        missed.extend((text[a:b], text[:160]) for a, b in expected)
    kinds = sorted(set(kind_tp) | set(kind_fp))
    return {
        "messages": messages,
        "stale_labels": stale,
        "true_positives": tp,
        "false_positives": fp,
        "false_negatives": fn,
        "precision": round(tp / (tp + fp), 4) if tp + fp else None,
        "recall": round(tp / (tp + fn), 4) if tp + fn else None,
        "per_kind": {
            k: {
                "tp": kind_tp[k],
                "fp": kind_fp[k],
                "precision": round(kind_tp[k] / (kind_tp[k] + kind_fp[k]), 4),
            }
            for k in kinds
        },
        "false_hits": false_hits,
        "missed": missed,
    }


def hard_negatives() -> dict:
    """Reports on the hard-negative bank; every one must be a listed exception."""
    rows = [orjson.loads(x) for x in (HERE / "hard_negatives.jsonl").read_text().splitlines() if x]
    unexplained = []
    exceptions = []
    for row in rows:
        allowed = {e["value"]: e["reason"] for e in row.get("exceptions", [])}
        for ident in extract(row["text"]).identifiers:
            if ident.value in allowed:
                exceptions.append((ident.value, allowed[ident.value]))
            else:
                unexplained.append((ident.kind, ident.value, row["text"]))
    return {
        "sentences": len(rows),
        "unexplained_reports": len(unexplained),
        "listed_exceptions": len(exceptions),
        "unexplained": unexplained,
        "exceptions": exceptions,
    }


def throughput(repeat: int = 7) -> dict:
    """MB/s of user text (UTF-8 bytes) over every tau-bench user message: median and best run.

    Measured in CPU time of this process (one core, time.process_time): on a shared machine
    wall time also counts time spent waiting for the CPU. Wall time and the machine's load
    average are reported alongside, because a loaded machine also slows CPU time (shared caches).
    """
    texts = [text for conv in conversations() for _, text in conv.users]
    size = sum(len(t.encode("utf-8")) for t in texts)
    rules = default_rules()
    for text in texts[:200]:
        extract(text, rules)  # warm the plan and the compiled patterns
    # extract_many() is what ingest and audit call; extract() one text at a time is reported
    # beside it (it skips the batched fast reject).
    cpu_runs, wall_runs, single_runs = [], [], []
    for _ in range(repeat):
        wall, cpu = time.perf_counter(), time.process_time()
        extract_many(texts, rules)
        cpu_runs.append(time.process_time() - cpu)
        wall_runs.append(time.perf_counter() - wall)
        cpu = time.process_time()
        for text in texts:
            extract(text, rules)
        single_runs.append(time.process_time() - cpu)
    median_cpu = statistics.median(cpu_runs)
    return {
        "mb_per_s_one_at_a_time": round(size / statistics.median(single_runs) / 1e6, 2),
        "messages": len(texts),
        "bytes": size,
        "runs": repeat,
        "cpu_seconds_median": round(median_cpu, 4),
        "mb_per_s": round(size / median_cpu / 1e6, 2),
        "mb_per_s_best": round(size / min(cpu_runs) / 1e6, 2),
        "mb_per_s_wall": round(size / statistics.median(wall_runs) / 1e6, 2),
        "mean_us_per_message": round(median_cpu / len(texts) * 1e6, 2),
        "load_average_1m": round(os.getloadavg()[0], 2),
        "cpus": os.cpu_count(),
    }


def _message_index() -> dict[tuple[str, int, int], str]:
    return {
        (conv.file, conv.run, index): text for conv in conversations() for index, text in conv.users
    }


def main() -> int:
    """Run every evaluation and print the figures."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="print JSON")
    parser.add_argument("--misses", action="store_true", help="list misses and false hits")
    args = parser.parse_args()
    result = {
        "rules_digest": default_rules().digest,
        "load_bearing": load_bearing(),
        "hand_labelled": precision(),
        "hard_negatives": hard_negatives(),
        "throughput": throughput(),
    }
    if not args.misses:
        result["load_bearing"].pop("misses")
        for key in ("false_hits", "missed"):
            result["hand_labelled"].pop(key)
        result["hard_negatives"].pop("exceptions")
    if args.json:
        sys.stdout.write(orjson.dumps(result, option=orjson.OPT_INDENT_2).decode() + "\n")
        return 0
    lb, hl, hn, tp = (result[k] for k in ("load_bearing", "hand_labelled", "hard_negatives",
                                          "throughput"))  # fmt: skip
    print(f"rules digest {result['rules_digest']}")
    print(f"load-bearing recall   {lb['recall']}  ({lb['found']}/{lb['labels']} labels; "
          f"{lb['excluded_numbers_and_versions']} plain numbers/versions excluded)")  # fmt: skip
    print(f"  found by kind: {lb['found_by_kind']}")
    print(f"hand-labelled         precision {hl['precision']}  recall {hl['recall']}  "
          f"({hl['messages']} messages, tp {hl['true_positives']} fp {hl['false_positives']} "
          f"fn {hl['false_negatives']}, stale {hl['stale_labels']})")  # fmt: skip
    for kind, row in hl["per_kind"].items():
        print(f"  {kind:15} precision {row['precision']:.3f}  (tp {row['tp']}, fp {row['fp']})")
    print(f"hard negatives        {hn['unexplained_reports']} unexplained reports in "
          f"{hn['sentences']} sentences ({hn['listed_exceptions']} listed exceptions)")  # fmt: skip
    print(f"throughput            {tp['mb_per_s']} MB/s CPU time (median of {tp['runs']}; best "
          f"{tp['mb_per_s_best']}), {tp['mb_per_s_wall']} MB/s wall ({tp['messages']} messages, "
          f"{tp['bytes']} bytes, {tp['mean_us_per_message']} µs CPU/message, one core; "
          f"load average {tp['load_average_1m']} on {tp['cpus']} CPUs); one message at a time "
          f"(extract): {tp['mb_per_s_one_at_a_time']} MB/s")  # fmt: skip
    if args.misses:
        for value, file, run in lb["misses"]:
            print(f"MISS load-bearing {value!r}  {file}#{run}")
        for kind, value, text in hl["false_hits"]:
            print(f"FALSE {kind} {value!r}  | {text!r}")
        for value, text in hl["missed"]:
            print(f"MISSED {value!r}  | {text!r}")
        for kind, value, text in hn["unexplained"]:
            print(f"HARD-NEGATIVE {kind} {value!r}  | {text!r}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
