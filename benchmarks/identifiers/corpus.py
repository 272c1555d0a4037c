"""Read the shared tau-bench results directly (orjson): user messages and tool-call arguments.

Used by evaluate.py and label_tool.py. Messages are addressed as (file name, run index,
trajectory index) so the labelled set never has to copy trace text into the repository.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import orjson
import regex

REPO = Path(__file__).resolve().parents[2]
SHARED = REPO.parent / "shared" / "data"
TAU = SHARED / "apollo-tau-bench" / "tau" / "results"

# A load-bearing label must look like an identifier: no whitespace, at least 4 characters,
# and a digit or one of _ # @ / \ - : (reference §6.1's silver-label rule, plus : and \).
SHAPE = regex.compile(r"\A\S{4,}\Z")
SPECIAL = regex.compile(r"[0-9_#@/\\:\-]")
# Plain numbers are quantities, prices, scores and years, not identifiers: the extractor
# suppresses them on purpose (money/percent/quantity/version suppressors, "years are never
# identifiers on their own"), so they are not recall labels. Listed by evaluate.py.
PLAIN_NUMBER = regex.compile(r"\A[+\-]?[0-9]+(?:\.[0-9]+)?\Z")
# Version numbers (1.0.0, v2.3) are hard negatives by design, so they are not recall labels.
VERSION = regex.compile(r"\A[vV]?[0-9]+(?:\.[0-9]+){1,3}\Z")


@dataclass(frozen=True, slots=True)
class Conversation:
    """One tau-bench run: its user messages (with addresses) and its tool-call argument leaves."""

    file: str
    run: int
    users: tuple[tuple[int, str], ...]  # (trajectory index, text)
    argument_values: frozenset[str]


def conversations(root: Path = TAU) -> Iterator[Conversation]:
    """Every run of every results file, in file-name order."""
    for path in sorted(root.glob("*.json")):
        runs = orjson.loads(path.read_bytes())
        if not isinstance(runs, list):
            continue
        for run_index, run in enumerate(runs):
            traj = run.get("traj") if isinstance(run, dict) else None
            if not isinstance(traj, list):
                continue
            users = []
            values: set[str] = set()
            for index, message in enumerate(traj):
                if not isinstance(message, dict):
                    continue
                if message.get("role") == "user" and isinstance(message.get("content"), str):
                    users.append((index, message["content"]))
                for call in message.get("tool_calls") or []:
                    raw = (call.get("function") or {}).get("arguments")
                    try:
                        args = orjson.loads(raw) if isinstance(raw, str) else raw
                    except orjson.JSONDecodeError:
                        continue
                    values.update(leaves(args))
            yield Conversation(path.name, run_index, tuple(users), frozenset(values))


def leaves(value: object) -> Iterator[str]:
    """String leaves of decoded JSON; numbers as their JSON text (the audit's rule)."""
    if isinstance(value, str):
        yield value
    elif isinstance(value, bool) or value is None:
        return
    elif isinstance(value, int | float):
        yield orjson.dumps(value).decode()
    elif isinstance(value, list):
        for item in value:
            yield from leaves(item)
    elif isinstance(value, dict):
        for item in value.values():
            yield from leaves(item)


def occurs(value: str, text: str) -> bool:
    """`value` occurs in `text` with no letter or digit directly before or after it."""
    pattern = r"(?<![\p{L}\p{N}])" + regex.escape(value) + r"(?![\p{L}\p{N}])"
    return regex.search(pattern, text) is not None


def text_sha(text: str) -> str:
    """Short content hash that pins a labelled message to the exact text it was labelled on."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]
