"""Generate large agent-trace dumps with compaction boundaries and known audit outcomes.

    python benchmarks/generate.py --format lexkeep|codex|claude --size 1GB --out DIR [--seed N]

Writes the dump (lexkeep: DIR/dump.jsonl; codex: DIR/sessions/YYYY/MM/DD/rollout-*.jsonl, one
rollout per session; claude: DIR/projects/-home-dev-shop/<session>.jsonl) and DIR/expected.json
with the outcome counts the audit must report (and, for small sizes, one verdict per
identifier).

How the outcomes are right by construction:
- every identifier value is unique in its conversation, and its kind is unambiguous (codes with
  an upper-case prefix, UUIDs, absolute paths, emails, ...); user text around them holds only
  hard negatives (prices, percentages, versions, sizes, clock times) and lower-case prose;
- within one conversation, two values of the same kind differ in *every* digit of their random
  core (digit p of value i is base_p + i * step_p mod 10 with step_p odd and not 5), so a
  one-digit edit, a truncation by 1-2 characters or a case/separator change of one value is
  never a near miss of another value (up to 10 values per kind per conversation);
- an identifier typed before boundary k is audited at boundary k; it is *kept* when a tool call
  after that boundary carries it verbatim, *altered* when a tool call after it carries exactly
  one altered form (case, separator, truncation, one-digit edit) and *missing* otherwise;
  identifiers typed after the last boundary are not audited;
- traps that must not change the counts: verbatim use in tool calls before the boundary,
  identifiers repeated in assistant text, tool results and summaries (Claude's summary is a
  `user` line), Codex `replacement_history` copies and `<environment_context>` injections.
"""

from __future__ import annotations

import argparse
import json
import random
import re
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

FORMATS = ("lexkeep", "codex", "claude")
VERDICT_LIST_LIMIT = 64 * 1024 * 1024  # per-identifier verdicts only for dumps up to 64 MiB
MAX_PER_KIND = 10  # the digit-stepping construction gives 10 mutually distant values per kind

_SIZE = re.compile(r"^\s*([0-9]+(?:\.[0-9]+)?)\s*([KMGT]?i?B?)\s*$", re.IGNORECASE)


def parse_size(text: str) -> int:
    """Bytes from '256MB', '1GB', '1.5G', '500KB' or a plain number (binary units)."""
    m = _SIZE.match(text)
    if not m:
        raise argparse.ArgumentTypeError(f"not a size: {text!r} (try 256MB, 1GB, 4GB)")
    unit = m.group(2).upper().rstrip("B").rstrip("I")
    scale = {"": 1, "K": 1024, "M": 1024**2, "G": 1024**3, "T": 1024**4}[unit]
    return int(float(m.group(1)) * scale)


# --------------------------------------------------------------------------------------------
# Identifier kinds. Each maker takes (rng, core digits) and returns the value; the core is the
# per-conversation stepped digit string that keeps same-kind values far apart.

FIRST = ("ana", "yusuf", "mei", "omar", "lena", "tariq", "sofia", "ivan", "noor", "kofi")
LAST = ("lopez", "rossi", "tanaka", "haddad", "berg", "okafor", "novak", "silva", "kaur", "moreau")
SERVICES = ("billing", "checkout", "gateway", "ledger", "search", "shipping", "auth", "media")
LOGWORDS = ("worker", "daemon", "replica", "batch", "sync", "export")
PROJECTS = ("PAY", "OPS", "WEB", "CORE", "DATA", "INFRA")
# Letters far from every ticket project letter and not hex (A-F), so alnum codes never look
# like a truncated ticket or a hex hash.
ALNUM_LETTERS = "HJKQXZVGMLU"
# Pairwise edit distance >= 3 and no word a prefix/suffix of another: two const codes of one
# conversation always use different first words, so they are never near misses of each other.
CONST_A = (
    "CONN",
    "DISK",
    "QUOTA",
    "TOKEN",
    "LOCK",
    "SCHEMA",
    "PAYMENT",
    "UPSTREAM",
    "CACHE",
    "RATE",
)
CONST_B = ("RESET", "FULL", "EXPIRED", "DENIED", "TIMEOUT", "MISMATCH", "DECLINED", "STALE")


class FastRandom(random.Random):
    """random.Random with cheaper choice/randint/randrange (float-based; fine for test data)."""

    def choice(self, seq):  # type: ignore[override]
        return seq[int(self.random() * len(seq))]

    def randint(self, a: int, b: int) -> int:  # type: ignore[override]
        return a + int(self.random() * (b - a + 1))

    def randrange(self, n: int) -> int:  # type: ignore[override]
        return int(self.random() * n)


def _core(rng_bases: list[int], steps: list[int], i: int) -> str:
    return "".join(str((b + i * s) % 10) for b, s in zip(rng_bases, steps, strict=True))


@dataclass(slots=True)
class Kind:
    """One identifier kind: name, core length, how to build and which alterations apply."""

    name: str
    core_len: int
    alterations: tuple[str, ...]
    phrase: tuple[str, ...]  # how a user introduces it; {v} is the value


KINDS: tuple[Kind, ...] = (
    Kind(
        "invoice",
        4,
        ("case", "separator", "truncation", "digit_edit"),
        ("invoice {v}", "the invoice {v}", "{v} (the invoice)"),
    ),
    Kind(
        "order",
        6,
        ("case", "separator", "truncation", "digit_edit"),
        ("order {v}", "my order {v}", "the order {v}"),
    ),
    Kind(
        "uuid",
        0,
        ("case", "separator", "truncation"),
        ("request id {v}", "trace {v}", "the job {v}"),
    ),
    Kind(
        "path",
        5,
        ("case", "truncation", "digit_edit"),
        ("the log at {v} ", "see {v} ", "the file {v} "),
    ),
    Kind(
        "email",
        5,
        ("case", "truncation", "digit_edit"),
        ("the customer email {v} ", "contact {v} ", "from {v} "),
    ),
    Kind(
        "const",
        0,
        ("case", "separator", "truncation"),
        ("the error {v}", "it fails with {v}", "we got {v}"),
    ),
    Kind(
        "hash_ref",
        7,
        ("separator", "truncation", "digit_edit"),
        ("reference {v}", "booking {v}", "the reservation {v}"),
    ),
    Kind(
        "ticket",
        4,
        ("case", "separator", "truncation", "digit_edit"),
        ("ticket {v}", "the issue {v}", "as tracked in {v}"),
    ),
    Kind(
        "digit_run",
        8,
        ("truncation", "digit_edit"),
        ("account number {v}", "the tracking number {v}", "customer number {v}"),
    ),
    Kind(
        "snake",
        4,
        ("case", "separator", "truncation", "digit_edit"),
        ("user {v}", "the profile {v}", "the user id {v}"),
    ),
    Kind(
        "alnum",
        3,
        ("case", "truncation", "digit_edit"),
        ("flight {v}", "the code {v}", "voucher {v}"),
    ),
    Kind("url", 6, ("truncation", "digit_edit"), ("the page {v} ", "this link {v} ", "{v} ")),
    Kind("sha", 0, ("case", "truncation"), ("commit {v}", "the build from {v}", "revision {v}")),
)
KIND_BY_NAME = {k.name: k for k in KINDS}
SPACED = frozenset(("path", "email", "url"))


def make_value(kind: str, rng: random.Random, core: str, slot: int) -> str:
    """The identifier value of `kind` built around `core` (slot = its index in the conversation)."""
    if kind == "invoice":
        # first core digit 4-9 so the tail never reads as an ISO day (INV-2025-08-1...)
        return f"INV-{rng.randint(2019, 2026)}-{rng.randint(1, 12):02d}-{rng.randint(4, 9)}{core}"
    if kind == "order":
        return f"ORD_{core}"
    if kind == "uuid":
        h = f"{rng.getrandbits(128):032x}"
        return f"{h[:8]}-{h[8:12]}-4{h[13:16]}-{'89ab'[rng.randrange(4)]}{h[17:20]}-{h[20:32]}"
    if kind == "path":
        return f"/var/log/{rng.choice(SERVICES)}/{rng.choice(LOGWORDS)}-{core}.log"
    if kind == "email":
        return f"{rng.choice(FIRST)}.{rng.choice(LAST)}{core}@example.com"
    if kind == "const":
        return f"ERR_{CONST_A[slot]}_{rng.choice(CONST_B)}"
    if kind == "hash_ref":
        return f"#W{core}"
    if kind == "ticket":
        return f"{rng.choice(PROJECTS)}-{rng.randint(1, 9)}{core}"
    if kind == "digit_run":
        return f"{rng.randint(1, 9)}{core}"
    if kind == "snake":
        return f"{rng.choice(FIRST)}_{rng.choice(LAST)}_{core}"
    if kind == "alnum":
        letters = "".join(rng.choice(ALNUM_LETTERS) for _ in range(3))
        return f"{letters}{core}"
    if kind == "url":
        return f"https://shop.example.com/orders/{core}"
    if kind == "sha":
        return f"{rng.getrandbits(160):040x}"
    raise ValueError(kind)


def _edit_last_digit(value: str) -> str:
    for i in range(len(value) - 1, -1, -1):
        c = value[i]
        if c.isdigit():
            return value[:i] + str((int(c) + 3) % 10) + value[i + 1 :]
    raise ValueError(value)


def alter(value: str, how: str) -> str:
    """A near miss of `value`: case or separator change, truncation, or a one-digit edit."""
    if how == "case":
        low = value.lower()
        return low if low != value else value.upper()
    if how == "separator":
        if value.startswith("#"):
            return value[1:]  # the sigil dropped (#W2378156 -> W2378156)
        if "-" in value:
            return value.replace("-", "_")
        return value.replace("_", "-")
    if how == "truncation":
        return value[: -(1 if len(value) < 10 else 2)]
    if how == "digit_edit":
        # the last digit of the value is always in its random core (or the UUID/hex tail)
        return _edit_last_digit(value)
    raise ValueError(how)


_SEP = re.compile(r"[\s\-_.:/#\\+()]+")


def _skel(text: str) -> str:
    """Lower case, separators and sigils removed, leading zeros stripped."""
    return _SEP.sub("", text.lower()).lstrip("0")


def _osa(a: str, b: str, limit: int) -> int:
    """Optimal-string-alignment distance, capped at limit + 1."""
    if abs(len(a) - len(b)) > limit:
        return limit + 1
    prev2: list[int] = []
    prev = list(range(len(b) + 1))
    for i in range(1, len(a) + 1):
        cur = [i] + [0] * len(b)
        ai = a[i - 1]
        for j in range(1, len(b) + 1):
            v = min(prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (ai != b[j - 1]))
            if i > 1 and j > 1 and ai == b[j - 2] and a[i - 2] == b[j - 1]:
                v = min(v, prev2[j - 2] + 1)
            cur[j] = v
        if min(cur) > limit:
            return limit + 1
        prev2, prev = prev, cur
    return prev[-1]


def too_close(a: str, sa: str, b: str, sb: str) -> bool:
    """Could an audit take `b` for a near miss of `a` (or the reverse)? With a safety margin.

    Mirrors the design's near-miss rules (case/separator folding, truncation or extension,
    edit distance 1 for 6-11 characters and 2 for 12+), each loosened by one step.
    """
    if sa == sb or a.lower() == b.lower():
        return True
    short, long_ = (sa, sb) if len(sa) <= len(sb) else (sb, sa)
    if (
        len(short) >= 3
        and len(short) * 2 >= len(long_)
        and (long_.startswith(short) or long_.endswith(short))
    ):
        return True
    if len(short) >= 5:
        limit = 2 if len(long_) < 12 else 3
        return _osa(sa, sb, limit) <= limit
    return False


def _near_any(a: str, sa: str, others: list[tuple[str, str]]) -> bool:
    """True when `a` is too close to any of `others` ((string, skeleton) pairs)."""
    n = len(sa)
    lo, hi = n // 2, 2 * n
    for b, sb in others:
        m = len(sb)
        # cheap length filter: no prefix/suffix relation and no small edit distance possible
        if (m < lo or m > hi) and abs(m - n) > 3:
            continue
        if too_close(a, sa, b, sb):
            return True
    return False


# --------------------------------------------------------------------------------------------
# Prose. Lower-case words and hard negatives only: nothing here may be identifier-shaped.

OPENERS = (
    "hi, quick one.",
    "hello again.",
    "ok so",
    "thanks for the help earlier.",
    "one more thing:",
    "sorry to bother you,",
    "good morning.",
    "following up on this,",
    "hey,",
    "right, next:",
)
ASKS = (
    "can you check {x} for me",
    "please look into {x}",
    "something is off with {x}",
    "i need a refund for {x}",
    "could you verify {x} again",
    "what happened to {x}",
    "the customer is asking about {x}",
    "make sure {x} is handled",
    "can you compare {x}",
)
NEGATIVES = (
    "it was charged $1,249.00 twice",
    "the total came to $89.95 after tax",
    "about 12.5% of requests fail",
    "we upgraded to v2.4.1 last week",
    "the export was 144.2 MB",
    "it started around 10:30 this morning",
    "the refund of $42.10 never arrived",
    "latency went up by 35% after the deploy",
    "the image is 2.0 GB now",
    "the client runs v3.11.4",
    "this happened next to a 250 ms timeout",
    "they were promised a 15% discount",
    "it took 40 minutes to finish",
)
TAILS = (
    "thanks!",
    "let me know what you find.",
    "no rush, but today would be nice.",
    "i think it is related to the migration.",
    "the customer is pretty upset.",
    "it worked fine yesterday.",
    "keep me posted.",
    "this is blocking the release.",
    "",
    "",
    "",
)
ANSWERS = (
    "I checked the records and everything lines up now.",
    "Done. The entry was updated and the customer was notified.",
    "I looked into it: the failure came from a stale cache entry, which I cleared.",
    "The refund is queued and should settle within three business days.",
    "I could not reproduce the problem; the latest run finished cleanly.",
    "I updated the record and added a note to the history.",
    "The job was retried and completed without errors this time.",
)
PREAMBLES = (
    "Let me look that up.",
    "Checking the records now.",
    "I'll search the logs first.",
    "Looking into it.",
    "Let me pull the details.",
)
SUMMARY_HEAD = (
    "Goal: resolve the customer's billing and order problems. Progress: looked up several "
    "records, fixed a stale cache entry, queued one refund. Critical data: "
)
CODEX_SUMMARY_PREFIX = (
    "Another language model started to solve this problem and produced a summary of its "
    "thinking process. You also have access to the state of the tools that were used by that "
    "language model. Use this to build on the work that has already been done and avoid "
    "duplicating work. Here is the summary produced by the other language model, use the "
    "information in this summary to assist with your own analysis:"
)
CLAUDE_SUMMARY_PREFIX = (
    "This session is being continued from a previous conversation that ran out of context. "
    "The summary below covers the earlier portion of the conversation.\\n\\nSummary:\\n"
    "1. Primary Request and Intent: the user asked to fix billing and order problems.\\n"
)
FILLER_RESULTS = (
    "ok",
    "no matches",
    "3 rows",
    "status: active",
    "updated",
    "queued",
    "exit code 0",
)


def _blobs(n: int = 64) -> tuple[str, ...]:
    """Bulky tool output (log excerpts, 0.2-8 KB) so user text is a few percent of the bytes."""
    r = random.Random(0)
    words = (
        "processed",
        "batch",
        "retry",
        "cache",
        "miss",
        "hit",
        "queue",
        "flushed",
        "connection",
        "pool",
        "idle",
        "scheduled",
        "payload",
        "accepted",
        "latency",
    )
    out = []
    for _ in range(n):
        lines = []
        for _ in range(int(r.lognormvariate(2.6, 0.9)) + 2):
            lvl = r.choice(("info", "info", "info", "warn", "debug"))
            msg = " ".join(r.choice(words) for _ in range(r.randint(4, 12)))
            lines.append(
                f"2025-08-14 {r.randint(0, 23):02d}:{r.randint(0, 59):02d}:{r.randint(0, 59):02d}"
                f" {lvl} worker-{r.randint(1, 8)} {msg} in {r.randint(1, 900)} ms"
            )
        out.append("\\n".join(lines))
    return tuple(out)


BLOBS = _blobs()


# --------------------------------------------------------------------------------------------
# Book-keeping of what the audit must find.


@dataclass(slots=True)
class IdRec:
    """One identifier typed by the user, and the outcome the audit must report for it."""

    conversation: str
    file: str
    line: int
    value: str
    kind: str
    segment: int
    verdict: str  # kept | altered | missing | not_audited
    alteration: str | None = None
    evidence: str | None = None
    used_before: bool = False
    in_summary: bool = False
    in_kept_verbatim: bool = False


@dataclass(slots=True)
class Totals:
    """Counts over the whole dump."""

    conversations: int = 0
    conversations_with_boundary: int = 0
    files: int = 0
    lines: int = 0
    bytes: int = 0
    user_messages: int = 0
    assistant_messages: int = 0
    tool_calls: int = 0
    boundaries: int = 0
    identifiers_typed: int = 0
    audited: int = 0
    kept: int = 0
    altered: int = 0
    missing: int = 0
    not_audited: int = 0
    used_before: int = 0
    in_summary: int = 0
    in_kept_verbatim: int = 0
    redrawn: int = 0  # values re-drawn because they came too close to another one
    by_kind: dict[str, dict[str, int]] = field(default_factory=dict)
    by_alteration: dict[str, int] = field(default_factory=dict)


# --------------------------------------------------------------------------------------------
# Tool calls: (tool, key, text). Writers render them in each format's own shape.
#   tool "lookup": an MCP-style lookup whose JSON arguments are {key: text}
#   tool "shell":  a shell command line in `text`
#   tool "patch":  a free-form patch body (Codex custom_tool_call apply_patch)

LOOKUPS = {
    "invoice": ("get_invoice", "invoice_id"),
    "order": ("get_order_details", "order_id"),
    "uuid": ("get_job", "job_id"),
    "email": ("find_customer", "email"),
    "hash_ref": ("get_reservation", "reservation_id"),
    "ticket": ("get_issue", "issue_key"),
    "digit_run": ("get_account", "account_number"),
    "snake": ("get_user_details", "user_id"),
    "alnum": ("get_flight_status", "flight_number"),
    "url": ("fetch_page", "url"),
    "sha": ("get_build", "commit"),
    "const": ("search_errors", "code"),
    "path": ("read_log", "path"),
}


def _call_for(kind: str, text: str, rng: random.Random) -> tuple[str, str, str]:
    r = rng.random()
    if kind == "path":
        if r < 0.4:
            return ("shell", "", f"tail -n 200 {text} | grep -i warn")
        if r < 0.6:
            return ("patch", "", text)
    elif r < 0.25:
        return ("shell", "", f"grep -rn {text} /srv/app/logs --include=*.log")
    name, key = LOOKUPS[kind]
    return ("lookup", f"{name}\x00{key}", text)


FILLER_CALLS = (
    ("shell", "", "git status --short"),
    ("shell", "", "ls -la src/billing"),
    ("shell", "", "pytest -q tests/test_refunds.py"),
    ("lookup", "list_recent_orders\x00limit", "20"),
    ("shell", "", "cat config/settings.toml"),
)


# --------------------------------------------------------------------------------------------
# Writers: one per format. Each appends lines for one conversation and returns line numbers.
# Strings we generate hold no quotes, backslashes or control characters except "\n", which
# the generator writes already escaped ("\\n"), so JSON is built with templates, not dumps.


def _esc2(json_text: str) -> str:
    """JSON text as the body of a JSON string (quotes escaped; our text has no backslashes)."""
    return json_text.replace("\\", "\\\\").replace('"', '\\"')


class Clock:
    """Monotonic ISO-8601 timestamps, cheap to format."""

    def __init__(self, start: float) -> None:
        self.t = int(start)
        self._minute = -1
        self._prefix = ""

    def tick(self, rng: random.Random) -> str:
        self.t += 1 + int(rng.random() * 40)
        minute, sec = divmod(self.t, 60)
        if minute != self._minute:  # strftime once a minute, not once a line
            self._minute = minute
            self._prefix = time.strftime("%Y-%m-%dT%H:%M:", time.gmtime(minute * 60))
        return f"{self._prefix}{sec:02d}.{int(rng.random() * 1000):03d}Z"


def _uuid(rng: random.Random) -> str:
    h = f"{rng.getrandbits(128):032x}"
    return f"{h[:8]}-{h[8:12]}-4{h[13:16]}-a{h[17:20]}-{h[20:32]}"


class LexkeepWriter:
    """The canonical lexkeep JSONL, all conversations in one file."""

    fmt = "lexkeep"

    def __init__(self, rel_file: str) -> None:
        self.rel_file = rel_file
        self.lines: list[str] = []
        self.base = 0  # lines written to the file before this conversation

    def start(self, conv: str, rng: random.Random, clock: Clock) -> None:
        self.conv = conv
        self.n = 0
        self.lines = []
        self.lines.append(
            f'{{"type":"conversation","id":"{conv}","title":"support session {conv}",'
            f'"parent_id":null}}'
        )

    def _id(self, prefix: str) -> str:
        self.n += 1
        return f"{self.conv}-{prefix}{self.n}"

    def user(self, text: str, clock: Clock, rng: random.Random) -> int:
        mid = self._id("m")
        self.lines.append(
            f'{{"type":"message","id":"{mid}","conversation_id":"{self.conv}","role":"user",'
            f'"text":"{text}","time":"{clock.tick(rng)}"}}'
        )
        return self.base + len(self.lines)

    def assistant(
        self,
        pre: str,
        calls: list[tuple[str, str, str, str]],
        answer: str,
        clock: Clock,
        rng: random.Random,
    ) -> None:
        conv = self.conv
        if calls:
            mid = self._id("m")
            self.lines.append(
                f'{{"type":"message","id":"{mid}","conversation_id":"{conv}","role":"assistant",'
                f'"text":"{pre}","time":"{clock.tick(rng)}"}}'
            )
            for tool, spec, text, result in calls:
                cid = self._id("call")
                name, args = _render_args(tool, spec, text)
                self.lines.append(
                    f'{{"type":"tool_call","id":"{cid}","conversation_id":"{conv}",'
                    f'"message_id":"{mid}","name":"{name}","arguments":"{_esc2(args)}"}}'
                )
                self.lines.append(
                    f'{{"type":"tool_result","call_id":"{cid}","conversation_id":"{conv}",'
                    f'"text":"{result}","is_error":false}}'
                )
        mid = self._id("m")
        self.lines.append(
            f'{{"type":"message","id":"{mid}","conversation_id":"{conv}","role":"assistant",'
            f'"text":"{answer}","time":"{clock.tick(rng)}"}}'
        )

    def boundary(
        self, summary: str, kept_texts: list[str], clock: Clock, rng: random.Random
    ) -> None:
        bid = self._id("b")
        kept = ",".join(f'"{t}"' for t in kept_texts)
        self.lines.append(
            f'{{"type":"compaction","id":"{bid}","conversation_id":"{self.conv}",'
            f'"summary":"{summary}","kept_verbatim":[{kept}],"trigger":"auto"}}'
        )


def _render_args(tool: str, spec: str, text: str) -> tuple[str, str]:
    """(tool name, JSON arguments text) in the generic OpenAI/lexkeep shape."""
    if tool == "lookup":
        name, key = spec.split("\x00")
        return name, f'{{"{key}":"{text}"}}'
    if tool == "shell":
        return "shell", f'{{"command":["bash","-lc","{text}"],"workdir":"/srv/app"}}'
    # a patch as plain JSON arguments for formats without free-form tools
    return "apply_patch", f'{{"input":"*** Begin Patch\\n*** Update File: {text}\\n*** End Patch"}}'


class CodexWriter:
    """Codex CLI rollout files (wrapped era): one file per session."""

    fmt = "codex"

    def start(self, conv: str, rng: random.Random, clock: Clock) -> None:
        self.conv = conv
        self.n = 0
        self.lines: list[str] = []
        self.user_texts: list[str] = []
        t = clock.tick(rng)
        self.base = 0
        self.lines.append(
            f'{{"timestamp":"{t}","type":"session_meta","payload":{{"id":"{conv}",'
            f'"timestamp":"{t}","cwd":"/home/dev/shop","originator":"codex_cli_rs",'
            f'"cli_version":"0.120.0","source":"cli","model_provider":"openai",'
            f'"git":{{"commit_hash":"{rng.getrandbits(160):040x}","branch":"main"}}}}}}'
        )
        # injected context that looks like a user message: never audited
        self.lines.append(
            f'{{"timestamp":"{t}","type":"response_item","payload":{{"type":"message",'
            f'"role":"user","content":[{{"type":"input_text","text":"<environment_context>\\n'
            f"  <cwd>/home/dev/shop</cwd>\\n  <approval_policy>on-request</approval_policy>\\n"
            f'  <sandbox_mode>workspace-write</sandbox_mode>\\n</environment_context>"}}]}}}}'
        )

    def user(self, text: str, clock: Clock, rng: random.Random) -> int:
        t = clock.tick(rng)
        self.lines.append(
            f'{{"timestamp":"{t}","type":"turn_context","payload":{{"cwd":"/home/dev/shop",'
            f'"approval_policy":"on-request","sandbox_policy":{{"type":"workspace-write"}},'
            f'"model":"gpt-5-codex","effort":"medium","summary":"auto"}}}}'
        )
        self.lines.append(
            f'{{"timestamp":"{t}","type":"response_item","payload":{{"type":"message",'
            f'"role":"user","content":[{{"type":"input_text","text":"{text}"}}]}}}}'
        )
        line = len(self.lines)
        self.lines.append(
            f'{{"timestamp":"{t}","type":"event_msg","payload":{{"type":"user_message",'
            f'"message":"{text}","images":[],"local_images":[],"text_elements":[]}}}}'
        )
        self.user_texts.append(text)
        return line

    def assistant(
        self,
        pre: str,
        calls: list[tuple[str, str, str, str]],
        answer: str,
        clock: Clock,
        rng: random.Random,
    ) -> None:
        lines = self.lines
        for tool, spec, text, result in calls:
            t = clock.tick(rng)
            self.n += 1
            cid = f"call_{self.n:04d}{rng.getrandbits(40):010x}"
            lines.append(
                f'{{"timestamp":"{t}","type":"response_item","payload":{{"type":"reasoning",'
                f'"summary":[{{"type":"summary_text","text":"**{pre}**"}}],'
                f'"content":null,"encrypted_content":"gAAAAB{rng.getrandbits(256):064x}"}}}}'
            )
            if tool == "patch":
                body = (
                    f"*** Begin Patch\\n*** Update File: {text}\\n@@\\n-level = info\\n"
                    "+level = debug\\n*** End Patch"
                )
                lines.append(
                    f'{{"timestamp":"{t}","type":"response_item","payload":{{"type":'
                    f'"custom_tool_call","status":"completed","call_id":"{cid}",'
                    f'"name":"apply_patch","input":"{body}"}}}}'
                )
                lines.append(
                    f'{{"timestamp":"{t}","type":"response_item","payload":{{"type":'
                    f'"custom_tool_call_output","call_id":"{cid}","output":"{result}"}}}}'
                )
                continue
            if tool == "lookup":
                name, key = spec.split("\x00")
                name = "mcp__shop__" + name
                args = f'{{"{key}":"{text}"}}'
            else:
                name = "shell"
                args = f'{{"command":["bash","-lc","{text}"],"workdir":"/home/dev/shop"}}'
            lines.append(
                f'{{"timestamp":"{t}","type":"response_item","payload":{{"type":"function_call",'
                f'"name":"{name}","arguments":"{_esc2(args)}","call_id":"{cid}"}}}}'
            )
            lines.append(
                f'{{"timestamp":"{t}","type":"response_item","payload":{{"type":'
                f'"function_call_output","call_id":"{cid}","output":"{result}"}}}}'
            )
        t = clock.tick(rng)
        lines.append(
            f'{{"timestamp":"{t}","type":"event_msg","payload":{{"type":"agent_message",'
            f'"message":"{answer}"}}}}'
        )
        lines.append(
            f'{{"timestamp":"{t}","type":"response_item","payload":{{"type":"message",'
            f'"role":"assistant","content":[{{"type":"output_text","text":"{answer}"}}]}}}}'
        )
        lines.append(
            f'{{"timestamp":"{t}","type":"event_msg","payload":{{"type":"token_count",'
            f'"info":{{"total_token_usage":{{"input_tokens":{rng.randint(1000, 90000)},'
            f'"output_tokens":{rng.randint(10, 900)}}}}},"rate_limits":null}}}}'
        )

    def boundary(
        self, summary: str, kept_texts: list[str], clock: Clock, rng: random.Random
    ) -> None:
        t = clock.tick(rng)
        message = f"{CODEX_SUMMARY_PREFIX}\\n{summary}"
        history = "".join(
            f'{{"type":"message","role":"user","content":[{{"type":"input_text","text":"{u}"}}]}},'
            for u in kept_texts
        )
        history += (
            f'{{"type":"message","role":"user","content":[{{"type":"input_text",'
            f'"text":"{message}"}}]}}'
        )
        self.lines.append(
            f'{{"timestamp":"{t}","type":"compacted","payload":{{"message":"{message}",'
            f'"replacement_history":[{history}]}}}}'
        )
        self.lines.append(
            f'{{"timestamp":"{t}","type":"event_msg","payload":{{"type":"context_compacted"}}}}'
        )


class ClaudeWriter:
    """Claude Code session transcripts: one file per session, uuid chain, split responses."""

    fmt = "claude"

    def start(self, conv: str, rng: random.Random, clock: Clock) -> None:
        self.conv = conv
        self.lines: list[str] = []
        self.base = 0
        self.parent = "null"
        self.rng = rng
        t = clock.tick(rng)
        self._line(
            "user",
            t,
            '"isMeta":true,"message":{"role":"user","content":"<local-command-caveat>Caveat: The '
            "messages below were generated by the user while running local commands. DO NOT "
            "respond to these messages or otherwise consider them in your response unless the "
            'user explicitly asks you to.</local-command-caveat>"}',
        )

    def _line(self, typ: str, t: str, body: str, parent: str | None = None) -> str:
        uid = _uuid(self.rng)
        p = self.parent if parent is None else parent
        self.lines.append(
            f'{{"parentUuid":{p},"isSidechain":false,"userType":"external",'
            f'"cwd":"/home/dev/shop","sessionId":"{self.conv}","version":"2.1.39",'
            f'"gitBranch":"main","type":"{typ}",{body},"uuid":"{uid}","timestamp":"{t}"}}'
        )
        self.parent = f'"{uid}"'
        return uid

    def user(self, text: str, clock: Clock, rng: random.Random) -> int:
        self._line("user", clock.tick(rng), f'"message":{{"role":"user","content":"{text}"}}')
        return len(self.lines)

    def assistant(
        self,
        pre: str,
        calls: list[tuple[str, str, str, str]],
        answer: str,
        clock: Clock,
        rng: random.Random,
    ) -> None:
        usage = (
            f'"usage":{{"input_tokens":{rng.randint(3, 900)},"cache_read_input_tokens":'
            f'{rng.randint(1000, 90000)},"output_tokens":{rng.randint(10, 900)}}}'
        )
        if calls:
            msg = f"msg_01{rng.getrandbits(96):024x}"
            req = f"req_011{rng.getrandbits(96):024x}"
            t = clock.tick(rng)
            # one API response split over several lines with the same message.id
            self._line(
                "assistant",
                t,
                f'"requestId":"{req}","message":{{"id":"{msg}","type":"message",'
                f'"role":"assistant","model":"claude-sonnet-4-5","content":[{{"type":"text",'
                f'"text":"{pre}"}}],"stop_reason":null,{usage}}}',
            )
            for tool, spec, text, result in calls:
                tid = f"toolu_01{rng.getrandbits(96):024x}"
                if tool == "lookup":
                    name, key = spec.split("\x00")
                    name = "mcp__shop__" + name
                    inp = f'{{"{key}":"{text}"}}'
                elif tool == "shell":
                    name = "Bash"
                    inp = f'{{"command":"{text}","description":"Inspect the records"}}'
                else:
                    name = "Read"
                    inp = f'{{"file_path":"{text}","limit":200}}'
                auuid = self._line(
                    "assistant",
                    t,
                    f'"requestId":"{req}","message":{{"id":"{msg}","type":"message",'
                    f'"role":"assistant","model":"claude-sonnet-4-5","content":[{{"type":'
                    f'"tool_use","id":"{tid}","name":"{name}","input":{inp}}}],'
                    f'"stop_reason":"tool_use",{usage}}}',
                )
                self._line(
                    "user",
                    clock.tick(rng),
                    f'"message":{{"role":"user","content":[{{"tool_use_id":"{tid}",'
                    f'"type":"tool_result","content":"{result}"}}]}},"toolUseResult":'
                    f'{{"stdout":"{result}","stderr":"","interrupted":false}},'
                    f'"sourceToolAssistantUUID":"{auuid}"',
                )
        msg = f"msg_01{rng.getrandbits(96):024x}"
        self._line(
            "assistant",
            clock.tick(rng),
            f'"requestId":"req_011{rng.getrandbits(96):024x}","message":{{"id":"{msg}",'
            f'"type":"message","role":"assistant","model":"claude-sonnet-4-5","content":'
            f'[{{"type":"text","text":"{answer}"}}],"stop_reason":"end_turn",{usage}}}',
        )

    def boundary(
        self, summary: str, kept_texts: list[str], clock: Clock, rng: random.Random
    ) -> None:
        t = clock.tick(rng)
        logical = self.parent
        self._line(
            "system",
            t,
            f'"subtype":"compact_boundary","content":"Conversation compacted","level":"info",'
            f'"isMeta":false,"logicalParentUuid":{logical},"compactMetadata":{{"trigger":"auto",'
            f'"preTokens":{rng.randint(150000, 190000)}}}',
            parent="null",
        )
        users = "".join(f"\\n   - {u}" for u in kept_texts)
        body = (
            f"{CLAUDE_SUMMARY_PREFIX}2. Key data: {summary}\\n6. All user messages:{users}\\n"
            "9. Optional Next Step: continue with the remaining refunds."
        )
        # the summary is a `user` line: a reader must not take it for the user speaking
        self._line(
            "user",
            clock.tick(rng),
            f'"isCompactSummary":true,"isVisibleInTranscriptOnly":true,'
            f'"message":{{"role":"user","content":"{body}"}}',
        )


# --------------------------------------------------------------------------------------------
# The generator proper.

SHAPES = {
    # (boundary-count weights for 0,1,2,3,4 boundaries), turns per segment range
    "lexkeep": ((10, 40, 30, 15, 5), (3, 10)),
    "codex": ((5, 25, 30, 25, 15), (12, 36)),
    "claude": ((5, 25, 30, 25, 15), (12, 36)),
}
VERDICT_WEIGHTS = (("kept", 60), ("altered", 20), ("missing", 20))


class Generator:
    """Stream one dump of a given format and size, recording the expected audit outcomes."""

    def __init__(self, fmt: str, size: int, out: Path, seed: int, verdicts: bool) -> None:
        self.fmt = fmt
        self.size = size
        self.out = out
        self.rng = FastRandom(seed)
        self.seed = seed
        self.keep_verdicts = verdicts
        self.totals = Totals()
        self.records: list[IdRec] = []
        self.verdict_pop = [v for v, _ in VERDICT_WEIGHTS]
        self.verdict_w = [w for _, w in VERDICT_WEIGHTS]

    # -- one conversation ------------------------------------------------------------------

    def conversation(self, writer, conv: str, rel_file: str, clock: Clock) -> list[str]:
        """Write one conversation through `writer`; returns its lines."""
        rng = self.rng
        pick = rng.choice
        tot = self.totals
        weights, (tmin, tmax) = SHAPES[self.fmt]
        n_boundaries = rng.choices(range(len(weights)), weights)[0]
        segments = n_boundaries + 1
        turns = [rng.randint(tmin, tmax) for _ in range(segments)]
        # evidence[seg][turn] -> calls to place there
        evidence: list[list[list[tuple[str, str, str, str]]]] = [
            [[] for _ in range(n)] for n in turns
        ]
        # per-kind stepping parameters: value i of a kind uses core digit p = b_p + i*s_p mod 10
        bases: dict[str, tuple[list[int], list[int]]] = {}
        used = dict.fromkeys(KIND_BY_NAME, 0)
        # every string this conversation's tool calls may carry (values and altered forms),
        # with its skeleton; a new value must be far from all of them
        placed: list[tuple[str, str]] = []
        exposed: list[tuple[str, str]] = []  # audited values that are not kept
        writer.start(conv, rng, clock)
        tot.conversations += 1
        if n_boundaries:
            tot.conversations_with_boundary += 1
        last_seg = segments - 1
        for seg in range(segments):
            seg_recs: list[IdRec] = []
            seg_user_texts: list[str] = []
            for turn in range(turns[seg]):
                # --- the user speaks, typing 0-3 identifiers
                k = rng.choices((0, 1, 2, 3), (30, 40, 20, 10))[0]
                kinds = [kd for kd in rng.sample(KINDS, k) if used[kd.name] < MAX_PER_KIND]
                parts = [rng.choice(OPENERS)]
                new_recs: list[IdRec] = []
                for kd in kinds:
                    made = self._new_value(kd, rng, used, bases, placed, exposed, seg < last_seg)
                    if made is None:
                        continue  # no value far enough from the others: type none
                    value, verdict, how, shown = made
                    rec = IdRec(conv, rel_file, 0, value, kd.name, seg, verdict)
                    if how is not None:
                        rec.alteration, rec.evidence = how, shown
                    new_recs.append(rec)
                    ask = rng.choice(ASKS).format(x=rng.choice(kd.phrase).format(v=value))
                    ask = " ".join(ask.split())
                    # keep a space between greedy kinds (path, email, url) and punctuation so
                    # the expected counts never depend on trailing-punctuation trimming
                    parts.append(ask + (" ," if ask.endswith(value) and kd.name in SPACED else ","))
                if rng.random() < 0.7:
                    parts.append(rng.choice(NEGATIVES) + ".")
                if not kinds:
                    parts.append(rng.choice(ASKS).format(x="the last refund") + ".")
                parts.append(rng.choice(TAILS))
                text = " ".join(p for p in parts if p)
                line = writer.user(text, clock, rng)
                tot.user_messages += 1
                seg_user_texts.append(text)
                for rec in new_recs:
                    rec.line = line
                    seg_recs.append(rec)
                # --- the assistant works: verbatim uses now (before the boundary) + evidence
                calls: list[tuple[str, str, str, str]] = []
                for rec in new_recs:
                    if rng.random() < 0.5:
                        rec.used_before = True
                        tool, spec, txt = _call_for(rec.kind, rec.value, rng)
                        calls.append(
                            (tool, spec, txt, f"found {rec.value}, status: active\\n{pick(BLOBS)}")
                        )
                    if rec.verdict in ("kept", "altered"):
                        target = rng.randint(seg + 1, last_seg)
                        shown = rec.evidence if rec.verdict == "altered" else rec.value
                        tool, spec, txt = _call_for(rec.kind, shown, rng)
                        # the tool result repeats the shown value: results are not evidence
                        evidence[target][rng.randrange(turns[target])].append(
                            (tool, spec, txt, f"not found: {shown}\\n{pick(BLOBS)}")
                        )
                calls.extend(evidence[seg][turn])
                if not calls and rng.random() < 0.6:
                    tool, spec, txt = rng.choice(FILLER_CALLS)
                    calls.append((tool, spec, txt, f"{pick(FILLER_RESULTS)}\\n{pick(BLOBS)}"))
                answer = rng.choice(ANSWERS)
                if new_recs and rng.random() < 0.5:
                    # assistant prose repeating what the user typed is not evidence either
                    answer = f"{answer} Noted: {new_recs[0].value} ."
                writer.assistant(rng.choice(PREAMBLES), calls, answer, clock, rng)
                tot.tool_calls += len(calls)
                tot.assistant_messages += 2 if calls else 1
            if seg < last_seg:
                # summary: mentions some identifiers verbatim, and the altered form of some
                mentions = []
                for rec in seg_recs:
                    r = rng.random()
                    if r < 0.4:
                        mentions.append(rec.value)
                        rec.in_summary = True
                    elif r < 0.6 and rec.evidence:
                        mentions.append(rec.evidence)
                summary = SUMMARY_HEAD + (", ".join(mentions) if mentions else "none") + "."
                kept_texts = seg_user_texts[-2:] if rng.random() < 0.7 else []
                kept_lines = set(kept_texts)
                for rec in seg_recs:
                    # values are unique, so "value in a kept text" means "its message was kept"
                    if any(rec.value in t for t in kept_lines):
                        if self.fmt == "claude":
                            rec.in_summary = True  # Claude lists user messages in the summary
                        else:
                            rec.in_kept_verbatim = True
                writer.boundary(summary, kept_texts, clock, rng)
                tot.boundaries += 1
            for rec in seg_recs:
                self._count(rec)
        return writer.lines

    def _new_value(
        self,
        kd: Kind,
        rng: random.Random,
        used: dict[str, int],
        bases: dict[str, tuple[list[int], list[int]]],
        placed: list[tuple[str, str]],
        exposed: list[tuple[str, str]],
        audited: bool,
    ) -> tuple[str, str, str | None, str | None] | None:
        """(value, verdict, alteration, altered form) far from everything placed, or None."""
        for _attempt in range(4):
            slot = used[kd.name]
            if slot >= MAX_PER_KIND:
                return None
            used[kd.name] = slot + 1
            if kd.core_len:
                if kd.name not in bases:
                    bases[kd.name] = (
                        [rng.randrange(10) for _ in range(kd.core_len)],
                        [rng.choice((1, 3, 7, 9)) for _ in range(kd.core_len)],
                    )
                b, s = bases[kd.name]
                core = _core(b, s, slot)
            else:
                core = ""
            value = make_value(kd.name, rng, core, slot)
            verdict = rng.choices(self.verdict_pop, self.verdict_w)[0] if audited else "not_audited"
            how = shown = None
            if verdict == "altered":
                how = rng.choice(kd.alterations)
                shown = alter(value, how)
            # Only an audited value that is not kept can be misjudged (kept wins before any
            # near-miss search): such a value must be far from every string placed in this
            # conversation, and every new string far from every such value.
            sv = _skel(value)
            forms = [(value, sv)] if shown is None else [(value, sv), (shown, _skel(shown))]
            fragile = verdict in ("altered", "missing")
            if (fragile and _near_any(value, sv, placed)) or any(
                _near_any(f, fs, exposed) for f, fs in forms
            ):
                self.totals.redrawn += 1
                continue
            placed.extend(forms)
            if fragile:
                exposed.append((value, sv))
            return value, verdict, how, shown
        return None

    def _count(self, rec: IdRec) -> None:
        tot = self.totals
        tot.identifiers_typed += 1
        v = rec.verdict
        per = tot.by_kind.setdefault(
            rec.kind, {"kept": 0, "altered": 0, "missing": 0, "not_audited": 0}
        )
        per[v] += 1
        if v == "not_audited":
            tot.not_audited += 1
        else:
            tot.audited += 1
            setattr(tot, v, getattr(tot, v) + 1)
            tot.used_before += rec.used_before
            tot.in_summary += rec.in_summary
            tot.in_kept_verbatim += rec.in_kept_verbatim
            if rec.alteration:
                tot.by_alteration[rec.alteration] = tot.by_alteration.get(rec.alteration, 0) + 1
        if self.keep_verdicts:
            self.records.append(rec)

    # -- the whole dump --------------------------------------------------------------------

    def run(self) -> dict:
        """Write the dump and expected.json; returns the expected document."""
        self.out.mkdir(parents=True, exist_ok=True)
        started = time.perf_counter()
        clock = Clock(1755165000.0)  # 2025-08-14T09:50:00Z
        tot = self.totals
        files: list[str] = []
        if self.fmt == "lexkeep":
            rel = "dump.jsonl"
            files.append(rel)
            writer = LexkeepWriter(rel)
            line_no = 0
            with open(
                self.out / rel, "w", encoding="utf-8", newline="\n", buffering=4 * 1024 * 1024
            ) as fh:
                n = 0
                while tot.bytes < self.size:
                    n += 1
                    writer.base = line_no
                    lines = self.conversation(writer, f"c{n}", rel, clock)
                    chunk = "\n".join(lines) + "\n"
                    fh.write(chunk)
                    line_no += len(lines)
                    tot.bytes += len(chunk)  # ASCII only, so characters == bytes
            tot.lines = line_no
            tot.files = 1
        else:
            writer = CodexWriter() if self.fmt == "codex" else ClaudeWriter()
            while tot.bytes < self.size:
                conv = _uuid(self.rng)
                day = time.gmtime(clock.t + 60)
                if self.fmt == "codex":
                    stamp = time.strftime("%Y-%m-%dT%H-%M-%S", day)
                    rel = time.strftime("sessions/%Y/%m/%d/", day) + f"rollout-{stamp}-{conv}.jsonl"
                else:
                    rel = f"projects/-home-dev-shop/{conv}.jsonl"
                lines = self.conversation(writer, conv, rel, clock)
                path = self.out / rel
                path.parent.mkdir(parents=True, exist_ok=True)
                chunk = "\n".join(lines) + "\n"
                with open(path, "w", encoding="utf-8", newline="\n") as fh:
                    fh.write(chunk)
                files.append(rel)
                tot.lines += len(lines)
                tot.bytes += len(chunk)
                clock.t += 3600  # sessions start an hour apart
            tot.files = len(files)
        elapsed = time.perf_counter() - started
        expected = {
            "schema_version": 1,
            "generator": {
                "format": self.fmt,
                "size_requested": self.size,
                "seed": self.seed,
                "seconds": round(elapsed, 3),
                "mb_per_s": round(tot.bytes / 1e6 / elapsed, 1) if elapsed else None,
            },
            "files": files if len(files) <= 10_000 else files[:10_000],
            "dump": "dump.jsonl" if self.fmt == "lexkeep" else None,
            "totals": {
                k: getattr(tot, k)
                for k in (
                    "conversations",
                    "conversations_with_boundary",
                    "files",
                    "lines",
                    "bytes",
                    "user_messages",
                    "assistant_messages",
                    "tool_calls",
                    "boundaries",
                    "identifiers_typed",
                    "audited",
                    "kept",
                    "altered",
                    "missing",
                    "not_audited",
                    "used_before",
                    "in_summary",
                    "in_kept_verbatim",
                    "redrawn",
                )
            },
            "by_kind": tot.by_kind,
            "by_alteration": tot.by_alteration,
            "identifiers": [
                {
                    "conversation": r.conversation,
                    "file": r.file,
                    "line": r.line,
                    "value": r.value,
                    "kind": r.kind,
                    "verdict": r.verdict,
                    "alteration": r.alteration,
                    "evidence": r.evidence,
                    "used_before": r.used_before,
                    "in_summary": r.in_summary,
                    "in_kept_verbatim": r.in_kept_verbatim,
                }
                for r in self.records
            ]
            if self.keep_verdicts
            else None,
        }
        (self.out / "expected.json").write_text(json.dumps(expected, indent=1) + "\n")
        return expected


def write_pairs(
    path: Path, conversations: int, pairs: int, seed: int = 7, prefix: str = "p"
) -> dict:
    """A lexkeep JSONL of `conversations` x `pairs` completed (user, assistant) pairs.

    For the compaction and context benchmarks: no tool calls and no boundaries, every pair
    eligible (one derived run per user message, completed by a non-empty answer). Returns
    counts, including the 10-pair segments a compaction may summarise (n >= 10k + 30).
    """
    rng = FastRandom(seed)
    pick = rng.choice
    clock = Clock(1755165000.0)
    path.parent.mkdir(parents=True, exist_ok=True)
    size = 0
    with open(path, "w", encoding="utf-8", newline="\n", buffering=4 * 1024 * 1024) as fh:
        for c in range(1, conversations + 1):
            conv = f"{prefix}{c}"
            out = [
                f'{{"type":"conversation","id":"{conv}","title":"pairs {conv}","parent_id":null}}'
            ]
            for i in range(pairs):
                kd = pick(KINDS)
                # slot i % 10 keeps the stepping construction meaningful; values need not be
                # unique here, nothing is audited
                value = make_value(
                    kd.name, rng, "48213"[: kd.core_len].ljust(kd.core_len, "7"), i % MAX_PER_KIND
                )
                ask = pick(ASKS).format(x=pick(kd.phrase).format(v=value))
                text = f"{pick(OPENERS)} {' '.join(ask.split())} , {pick(NEGATIVES)}."
                answer = " ".join(pick(ANSWERS) for _ in range(1 + int(rng.random() * 4)))
                out.append(
                    f'{{"type":"message","id":"{conv}-u{i}","conversation_id":"{conv}",'
                    f'"role":"user","text":"{text}","time":"{clock.tick(rng)}"}}'
                )
                out.append(
                    f'{{"type":"message","id":"{conv}-a{i}","conversation_id":"{conv}",'
                    f'"role":"assistant","text":"{answer} Checked {value} .",'
                    f'"time":"{clock.tick(rng)}"}}'
                )
            chunk = "\n".join(out) + "\n"
            fh.write(chunk)
            size += len(chunk)
    segments = max(0, (pairs - 20) // 10) if pairs >= 30 else 0
    return {
        "conversations": conversations,
        "pairs": pairs,
        "segments_per_conversation": segments,
        "segments": segments * conversations,
        "bytes": size,
    }


def generate(fmt: str, size: int, out: Path, seed: int = 7, verdicts: bool | None = None) -> dict:
    """Write a dump of `fmt` of about `size` bytes into `out`; returns expected.json's content."""
    if fmt not in FORMATS:
        raise ValueError(f"unknown format {fmt!r}; choose one of {', '.join(FORMATS)}")
    if verdicts is None:
        verdicts = size <= VERDICT_LIST_LIMIT
    return Generator(fmt, size, out, seed, verdicts).run()


def main(argv: list[str] | None = None) -> int:
    """Command-line entry point."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--format", choices=FORMATS, default="lexkeep")
    ap.add_argument("--size", type=parse_size, default=parse_size("256MB"))
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument(
        "--verdicts",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="write one verdict per identifier (default: only up to 64 MiB)",
    )
    args = ap.parse_args(argv)
    exp = generate(args.format, args.size, args.out, args.seed, args.verdicts)
    t = exp["totals"]
    g = exp["generator"]
    sys.stderr.write(
        f"{args.format}: {t['bytes'] / 1e6:.1f} MB, {t['files']} file(s), {t['lines']} lines, "
        f"{t['conversations']} conversations, {t['boundaries']} boundaries; audited "
        f"{t['audited']} (kept {t['kept']}, altered {t['altered']}, missing {t['missing']}), "
        f"not audited {t['not_audited']}; {g['seconds']} s ({g['mb_per_s']} MB/s)\n"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
