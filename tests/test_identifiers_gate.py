"""Kind gates: the cheap stdlib-re precheck is checked at load and never changes what is found."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lexkeep.core.errors import RuleError
from lexkeep.core.identifiers import _plan, extract
from lexkeep.core.rules import default_rules, load_rules

HEAD = "[[kinds]]\nid = \"k\"\ntier = \"B\"\npriority = 50\nregex = '''ACME-[0-9]{6}'''\n"
TESTS = 'tests.positive = ["ACME-123456"]\ntests.negative = ["ACME-1"]\n'
TEXTS = [
    "refund order #W2378156 to ann@example.org, it cost $12.50 on 2025-08-14T10:30:00Z",
    "device plug_kt_coffee, MAC 00:1A:2B:3C:4D:5E, fe80::1ff:fe23:4567:890a db.internal:5432",
    "ticket PROJ-1234, branch feature/new-renderer, file src/foo/bar.py and offer_letter.pdf",
    "uuid 123e4567-e89b-12d3-a456-426614174000 sha 9fceb02d0ae598e95dc970b74767f19372d61af8",
    "call +1 415-555-0132 at 10:30am, zip 19122, HTTP 503, 144.2 MB, code HAT136, rm-de-10",
    "customer cus_NffrFeUfNV2Hib in #ops-alerts, ERR_CONN_RESET, 10.0.0.12:8080, CVE-2024-3094",
    "host server-prod-01.company.com, x.io and db.internal:5432, not os.system or e.g. Node.js",
    "phones (415) 555-0199, +4930123456, 555.123.4567 and 415-555-0132, not 555-0132 or 2025-08",
]


def refusal(tmp_path: Path, body: str) -> str:
    path = tmp_path / "rules.toml"
    path.write_text(body, encoding="utf-8")
    with pytest.raises(RuleError) as info:
        load_rules(path)
    return str(info.value).replace(str(path), "FILE")


@pytest.mark.parametrize(
    ("gate", "message"),
    [
        ("INV-", "FILE: kind 'k': positive example 'ACME-123456' does not contain a match of "
                 "its gate 'INV-'; the prefilter would skip it"),
        ("-[0-9]+", "FILE: kind 'k': unbounded quantifier '+' at position 6 in gate"),
        ("-[0-9", "FILE: kind 'k': gate does not compile: unterminated character set at "
                  "position 1"),
        ("(?i)acme", "FILE: kind 'k': global ignore-case flag (?i) is not allowed in gate"),
        ("(?<=E)-", "FILE: kind 'k': gate must not use look-arounds, anchors or \\b"),
        ("^ACME", "FILE: kind 'k': gate must not use look-arounds, anchors or \\b"),
        ("[a-z]{0,4000}[0-9]{1,2}c|E-",
         "FILE: kind 'k': gate takes longer than 50 ms on the adversarial string 'letters'"),
    ],
)  # fmt: skip
def test_bad_gate_is_refused_by_name(tmp_path: Path, gate: str, message: str) -> None:
    body = HEAD + f"gate = '''{gate}'''\n" + TESTS
    assert refusal(tmp_path, body).startswith(message)


def test_good_gate_loads_and_finds(tmp_path: Path) -> None:
    path = tmp_path / "rules.toml"
    path.write_text(HEAD + "gate = '''E-[0-9]'''\n" + TESTS, encoding="utf-8")
    rules = load_rules(path)
    assert rules.kind("k").gate == "E-[0-9]"
    assert rules.digest != default_rules().digest
    assert [i.value for i in extract("bill ACME-123456 now", rules).identifiers] == ["ACME-123456"]


def test_gates_never_change_what_is_found() -> None:
    rules = default_rules()
    assert sum(k.gate_pattern is not None for k in rules.kinds) >= 10
    ungated = dataclasses.replace(
        rules,
        kinds=tuple(dataclasses.replace(k, gate="", gate_pattern=None) for k in rules.kinds),
        digest="ungated",
    )
    for text in TEXTS:
        found = extract(text, rules).identifiers
        assert found == extract(text, ungated).identifiers
        assert len(found) >= 2, (text, found)


# Texts around the fast reject's edges: its trigger words in random case, Unicode letters
# whose case mapping is unusual, and '.', '-', ':' next to letters.
_WORDS = ["www", "cve-", "ghsa-", "://", "w", "c", "-", ":", ".", " ", "x", "ſ", "İ", "K", "é"]
_TOKENS = st.sampled_from(_WORDS).flatmap(
    lambda word: st.lists(st.booleans(), min_size=len(word), max_size=len(word)).map(
        lambda flips: "".join(c.upper() if f else c for c, f in zip(word, flips, strict=True))
    )
)


@settings(max_examples=200, deadline=None)
@given(st.lists(_TOKENS, max_size=8).map("".join))
def test_fast_reject_never_hides_a_window(text: str) -> None:
    plan = _plan(default_rules())
    if plan.windows(text, 0.05, triggered=True):  # the windows without the pre-check
        assert plan.may_trigger(text), text


def test_medium_window_without_engine_timeout_stays_in_budget() -> None:
    # Windows up to 1 KB run without arming the engine timeout; dense adversarial text of
    # that size still finishes well inside the 50 ms budget.
    rules = default_rules()
    for chunk in ("1-" * 450, "a_" * 450, "1 " * 450, "9." * 450, "A1" * 450):
        result = extract(chunk, rules)
        assert result.complete, chunk[:10]
        assert all(chunk[i.start : i.end] == i.value for i in result.identifiers)
