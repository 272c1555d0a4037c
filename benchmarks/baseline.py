"""The naive baseline: one Python process, orjson + stdlib `re`, one pass, the literal check only.

    python benchmarks/baseline.py DUMP.jsonl [--json]

Reads a lexkeep JSONL dump once. Identifiers are taken from user messages with one `re`
alternation (a reduced taxonomy, no suppressors or guards); each is audited at the next
compaction record of its conversation and counted *kept* when its exact text is a substring of
some tool call's arguments after that record. No near-miss search, no flags, no store. This is
the yardstick `lexkeep audit` must beat while doing the full taxonomy and verdicts.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import re
import sys
import time
from typing import Any

import orjson

# One alternation, most specific first; ASCII only. Deliberately naive: no suppressors, no
# context words, no validation.
IDENT = re.compile(
    r"https?://[^\s\"'<>]+[^\s\"'<>.,;:!?)]"
    r"|[A-Za-z0-9._%+-]+@[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)*\.[A-Za-z]{2,}"
    r"|[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}"
    r"|(?<![\w/])/(?:[\w.-]+/)+[\w.-]*\w"
    r"|(?<![\w-])[A-Z][A-Z0-9]*(?:[-_][A-Z0-9]+)+(?![\w-])"
    r"|#[A-Za-z0-9]*[0-9][A-Za-z0-9]*"
    r"|(?<!\w)[a-z]+(?:_[a-z]+)*_[0-9]{2,}(?!\w)"
    r"|(?<![\w.,$-])[0-9]{6,30}(?![\w%])"
    r"|(?<![\w-])(?=[A-Z0-9]*[A-Z])(?=[A-Z0-9]*[0-9])[A-Z0-9]{5,24}(?![\w-])"
    r"|(?<![\w-])(?=[0-9a-f]*[a-f])(?=[0-9a-f]*[0-9])[0-9a-f]{7,64}(?![\w-])"
)


def _leaves(value: Any, out: list[str]) -> None:
    """Collect every string leaf (numbers as JSON text) of a decoded argument value."""
    if isinstance(value, str):
        out.append(value)
    elif isinstance(value, dict):
        for v in value.values():
            _leaves(v, out)
    elif isinstance(value, list):
        for v in value:
            _leaves(v, out)
    elif value is not None and not isinstance(value, bool):
        out.append(str(value))


def audit_file(path: str) -> dict[str, Any]:
    """One pass over a lexkeep JSONL dump; returns the counts."""
    # Per conversation: identifiers typed since its last boundary (waiting for the next one),
    # and identifiers already past a boundary that no tool call has carried yet (pending).
    waiting: dict[str, list[str]] = {}
    pending: dict[str, set[str]] = {}
    kept = 0
    lines = 0
    loads = orjson.loads
    findall = IDENT.findall
    with open(path, "rb") as fh:
        for raw in fh:
            lines += 1
            rec = loads(raw)
            typ = rec.get("type")
            if typ == "message":
                if rec.get("role") == "user" and rec.get("kind", "user_text") == "user_text":
                    found = findall(rec.get("text") or "")
                    if found:
                        waiting.setdefault(rec["conversation_id"], []).extend(found)
            elif typ == "tool_call":
                todo = pending.get(rec["conversation_id"])
                if not todo:
                    continue
                args = rec.get("arguments")
                if isinstance(args, str):
                    # invalid JSON is searched as raw text
                    with contextlib.suppress(orjson.JSONDecodeError):
                        args = loads(args)
                leaves: list[str] = []
                _leaves(args, leaves)
                text = "\x00".join(leaves)
                hits = [v for v in todo if v in text]
                for v in hits:
                    todo.discard(v)
                kept += len(hits)
            elif typ == "compaction":
                conv = rec["conversation_id"]
                moved = waiting.pop(conv, None)
                if moved:
                    pending.setdefault(conv, set()).update(moved)
    audited_not_kept = sum(len(s) for s in pending.values())
    return {
        "lines": lines,
        "audited": kept + audited_not_kept,
        "kept": kept,
        "not_kept": audited_not_kept,
        "not_audited": sum(len(v) for v in waiting.values()),
    }


def main(argv: list[str] | None = None) -> int:
    """Command-line entry point: print counts and elapsed time."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("dump", help="a lexkeep JSONL dump")
    ap.add_argument("--json", action="store_true", help="print one JSON object")
    args = ap.parse_args(argv)
    started = time.perf_counter()
    counts = audit_file(args.dump)
    counts["seconds"] = round(time.perf_counter() - started, 3)
    if args.json:
        sys.stdout.write(json.dumps(counts) + "\n")
    else:
        sys.stdout.write(
            f"audited {counts['audited']}: kept {counts['kept']}, not kept {counts['not_kept']} "
            f"({counts['not_audited']} after the last boundary) in {counts['seconds']} s\n"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
