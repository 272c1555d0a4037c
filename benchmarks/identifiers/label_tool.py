"""Helper for hand labelling: pick the sample, show messages, turn decisions into labels.jsonl.

    python label_tool.py show START COUNT     # print sampled messages with the extractor's view
    python label_tool.py template START COUNT # pre-filled decision lines to correct by hand
    python label_tool.py build decisions.tsv  # write labels.jsonl from hand decisions

The sample is fixed (seeded) and stratified: messages with identifier-like characters
(digits, _, /, @, #, interior . or -) are over-represented, because precision is measured on
what the extractor reports. The extractor's output is shown only to speed reading; every
decision line is checked by a person who read the message. decisions.tsv holds one line per
message: its number, then a tab before each identifier value the message really contains
(every whole-token occurrence of a value is a span). `template` pre-fills the lines.
"""

from __future__ import annotations

import random
import sys
from pathlib import Path

import orjson
import regex
from corpus import conversations, text_sha

from lexkeep.core.identifiers import extract

HERE = Path(__file__).resolve().parent
BEFORE = r"(?<![\p{L}\p{N}_\-./\\])"
AFTER = r"(?![\p{L}\p{N}_]|[\-./\\:@][\p{L}\p{N}])"
INTERESTING = regex.compile(r"[0-9_/@#\\]|[\p{L}\p{N}][.\-][\p{L}\p{N}]")
SAMPLE_SIZE = 320
SEED = 20251130


def sample() -> list[tuple[str, int, int, str]]:
    """The fixed labelling sample: (file, run, trajectory index, text)."""
    seen: set[str] = set()
    rich, plain = [], []
    for conv in conversations():
        for index, text in conv.users:
            if text in seen or "###STOP###" in text:
                continue
            seen.add(text)
            (rich if INTERESTING.search(text) else plain).append((conv.file, conv.run, index, text))
    rng = random.Random(SEED)
    chosen = rng.sample(rich, 250) + rng.sample(plain, SAMPLE_SIZE - 250)
    chosen.sort()
    return chosen


def show(start: int, count: int) -> None:
    """Print messages start..start+count with what the extractor reports."""
    for n, (_, _, _, text) in enumerate(sample()[start : start + count], start):
        found = [i.value for i in extract(text).identifiers]
        print(f"[{n}] {text!r}\n     -> {found}")


def build(decisions_path: Path) -> None:
    """Write labels.jsonl (message address, text hash, expected spans) from decisions."""
    rows = sample()
    out = []
    for line in decisions_path.read_text(encoding="utf-8").splitlines():
        if not line.strip() or line.startswith("#"):
            continue
        head, *values = line.rstrip("\n").split("\t")
        n = int(head)
        file, run, index, text = rows[n]
        spans = []
        for value in filter(None, values):
            # Whole-token occurrences only (the rule evaluate.py uses for load-bearing labels).
            pattern = BEFORE + regex.escape(value) + AFTER
            hits = [m.span() for m in regex.finditer(pattern, text)]
            if not hits:  # e.g. the start of a range "…T09:00:00Z-10:00:00Z": glued, but meant
                loose = r"(?<![\p{L}\p{N}_])" + regex.escape(value) + r"(?![\p{L}\p{N}_])"
                hits = [m.span() for m in regex.finditer(loose, text)]
            if not hits:
                raise SystemExit(f"[{n}] {value!r} is not in the text")
            spans.extend({"start": a, "end": b, "value": value} for a, b in hits)
        spans.sort(key=lambda s: s["start"])
        out.append({"file": file, "run": run, "index": index, "sha": text_sha(text),
                    "spans": spans})  # fmt: skip
    target = HERE / "labels.jsonl"
    target.write_bytes(b"".join(orjson.dumps(row) + b"\n" for row in out))
    print(f"wrote {len(out)} labelled messages to {target}")


def template(start: int, count: int) -> None:
    """Print decision lines pre-filled with the extractor's output, to be corrected by hand."""
    for n, (_, _, _, text) in enumerate(sample()[start : start + count], start):
        print("\t".join([str(n), *(i.value for i in extract(text).identifiers)]))


if __name__ == "__main__":
    if sys.argv[1] == "show":
        show(int(sys.argv[2]), int(sys.argv[3]))
    elif sys.argv[1] == "template":
        template(int(sys.argv[2]), int(sys.argv[3]))
    else:
        build(Path(sys.argv[2]))
