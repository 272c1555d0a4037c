"""Builders shared by the context and guard tests: lexkeep JSONL conversations in a real store.

Conversations are written as lexkeep JSONL files and loaded with the real ingest
(`lexkeep.core.ingest.ingest_paths`), which also fills the identifier sidecar. Completed
summaries are written through the real claim/complete path of `lexkeep.compaction.jobs`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import orjson

from lexkeep.compaction.binding import identity
from lexkeep.compaction.jobs import PROMPT_VERSION, Claim, Completion, claim, complete
from lexkeep.compaction.pairs import eligible_pairs
from lexkeep.core.store import Store

TextFn = Callable[[int], str]


def pair_records(
    cid: str,
    n_pairs: int,
    *,
    user: TextFn = lambda i: f"question {i}: please check order ORD_{88400 + i}",
    answer: TextFn = lambda i: (
        f"answer {i}: order ORD_{88400 + i} shipped on 2025-08-{i % 28 + 1:02d}"
    ),
    first: int = 0,
) -> list[dict[str, Any]]:
    """lexkeep JSONL records for `n_pairs` completed user/assistant pairs (ids u{i}, a{i})."""
    records: list[dict[str, Any]] = []
    if first == 0:
        records.append({"type": "conversation", "id": cid, "title": f"test {cid}"})
    for i in range(first, first + n_pairs):
        run = f"{cid}-r{i}"
        records += [
            {"type": "run", "id": run, "conversation_id": cid, "status": "completed"},
            {
                "type": "message",
                "id": f"{cid}-u{i}",
                "conversation_id": cid,
                "run_id": run,
                "role": "user",
                "text": user(i),
            },
            {
                "type": "message",
                "id": f"{cid}-a{i}",
                "conversation_id": cid,
                "run_id": run,
                "role": "assistant",
                "text": answer(i),
                "status": "completed",
            },
        ]
    return records


def write_jsonl(path: Path, records: Iterable[dict[str, Any]]) -> Path:
    """Write records as one JSON object per line."""
    path.write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in records))
    return path


def ingest(store: Store, path: Path) -> None:
    """Load a lexkeep JSONL file with the real ingest (which fills the sidecar too)."""
    from lexkeep.core.ingest import ingest_paths

    ingest_paths(store, [str(path)])


def load(store: Store, tmp_path: Path, records: list[dict[str, Any]], name: str = "t") -> Path:
    """Write `records` to a fresh JSONL file under tmp_path and ingest it."""
    path = write_jsonl(tmp_path / f"{name}.jsonl", records)
    ingest(store, path)
    return path


def summarise(
    store: Store,
    cid: str,
    from_pair: int,
    summary: str,
    *,
    prompt_version: str = PROMPT_VERSION,
) -> str:
    """Complete a compaction job for one segment through the real claim/complete path."""
    pairs = eligible_pairs(store.con, cid)[from_pair : from_pair + 10]
    ident = identity(
        cid, from_pair, from_pair + 9, pairs, model_id="test-model", prompt_version=prompt_version
    )
    got = claim(store.con, ident, owner="test")
    assert isinstance(got, Claim), got
    complete(
        store.con,
        got,
        Completion(
            summary=summary,
            input_sha256="0" * 64,
            kept_verbatim=[p.user.text for p in pairs],
            identifiers_total=0,
            identifiers_kept=0,
        ),
    )
    return got.job_id
