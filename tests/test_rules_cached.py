"""Rules checked in an earlier process: remembered in the cache folder, compiled when used.

A kind whose checks passed once (the same kind, deny list, lexkeep code, Python and `regex`)
is not checked again, and its patterns are compiled on first use: a command that loads the
rules and never extracts (an ingest with nothing new) compiles none. What is remembered must
never change an answer: the spans found, the refusals of a bad or changed rules file.
"""

from __future__ import annotations

import os
import pickle
import subprocess
import sys
import tomllib
from pathlib import Path

import orjson
import pytest
import regex

from lexkeep.core import rules as rules_module
from lexkeep.core.errors import RuleError
from lexkeep.core.identifiers import extract
from lexkeep.core.rules import Kind, default_rules, load_rules

ACME = """
[lists]
acme_words = ["ACME-999999"]

[[kinds]]
id = "acme_invoice"
tier = "B"
priority = 85
keywords = ["acme-"]
deny_list = "acme_words"
regex = '''(?<![\\p{L}\\p{N}_-])ACME-[0-9]{6}(?![\\p{L}\\p{N}_]|-[\\p{L}\\p{N}])'''
gate = 'ACME-'
tests.positive = ["ACME-123456", { text = "see ACME-123456.", value = "ACME-123456" }]
tests.negative = ["ACME-12345", "XACME-123456"]
"""

# What one process finds with the rules: every kind's patterns as compiled, the rule set's
# digest, and the spans extraction finds in every example text of every kind. Run with and
# without what an earlier process remembered, it must print the same.
ANSWERS = r"""
import sys, orjson, regex
import lexkeep.core.identifiers as identifiers
from lexkeep.core.rules import load_rules
compiled = []
real = regex.compile
def counting(*args, **kwargs):
    compiled.append(args[0])
    return real(*args, **kwargs)
regex.compile = counting
rules = load_rules(sys.argv[1] if len(sys.argv) > 1 else None)
sources = {k.regex for k in rules.kinds}
compiled_at_load = sorted(s for s in compiled if s in sources)
texts = [e.text for k in rules.kinds for e in k.positive + k.negative]
found = [
    [(i.kind, i.value, i.start, i.end) for i in identifiers.extract(t, rules).identifiers]
    for t in texts
]
batch = [[(i.kind, i.value) for i in x.identifiers] for x in identifiers.extract_many(texts, rules)]
patterns = [
    (k.id, k.pattern.pattern, k.pattern.flags, k.pattern.groups,
     k.gate_pattern and (k.gate_pattern.pattern, k.gate_pattern.flags),
     k.plain_pattern and (k.plain_pattern.pattern, k.plain_pattern.flags))
    for k in rules.kinds
]
compiled_in_all = sorted(s for s in compiled if s in sources)
print(orjson.dumps({"compiled_at_load": compiled_at_load, "compiled_in_all": compiled_in_all,
                    "digest": rules.digest, "found": found, "batch": batch,
                    "patterns": patterns}).decode())
"""


def answers(cache: str, *args: str) -> dict:
    env = {**os.environ, "LEXKEEP_CACHE_DIR": cache}
    proc = subprocess.run(
        [sys.executable, "-c", ANSWERS, *args], env=env, capture_output=True, text=True
    )
    assert proc.returncode == 0, proc.stderr
    return orjson.loads(proc.stdout)


@pytest.mark.parametrize("user_rules", [False, True], ids=["built-in", "rules-file"])
def test_remembered_checks_give_the_answers_of_a_full_check(
    tmp_path: Path, user_rules: bool
) -> None:
    args = [str(tmp_path / "rules.toml")] if user_rules else []
    if user_rules:
        (tmp_path / "rules.toml").write_text(ACME, encoding="utf-8")
    cache = str(tmp_path / "cache")
    unchecked = answers("", *args)  # no cache folder: every check runs, every pattern compiled
    first = answers(cache, *args)  # checks run, and are remembered
    again = answers(cache, *args)  # remembered: compiled when extraction needs them, and kept
    kept = answers(cache, *args)  # the compiled patterns read back
    n = len(unchecked["patterns"])
    assert len(unchecked["compiled_at_load"]) == len(first["compiled_at_load"]) == n
    assert again["compiled_at_load"] == []
    assert len(set(again["compiled_in_all"])) == len({p[1] for p in again["patterns"]})
    assert kept["compiled_in_all"] == []
    for key in ("digest", "found", "batch", "patterns"):
        assert unchecked[key] == first[key] == again[key] == kept[key], key
    if user_rules:
        assert any(["acme_invoice", "ACME-123456", 4, 15] in f for f in unchecked["found"])


def test_a_remembered_pattern_is_compiled_once(tmp_path: Path) -> None:
    # Extraction tells the engine's own patterns from their stdlib translations by identity.
    (tmp_path / "rules.toml").write_text(ACME, encoding="utf-8")
    cache = str(tmp_path / "cache")
    answers(cache, str(tmp_path / "rules.toml"))
    probe = (
        "import sys; from lexkeep.core.rules import load_rules;"
        " k = load_rules(sys.argv[1]).kind('acme_invoice');"
        " print(k.pattern is k.pattern, k.gate_pattern is k.gate_pattern,"
        " k.pattern.search('x ACME-123456').group(0))"
    )
    env = {**os.environ, "LEXKEEP_CACHE_DIR": cache}
    out = subprocess.run(
        [sys.executable, "-c", probe, str(tmp_path / "rules.toml")],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    assert out == ["True", "True", "ACME-123456"]


# Each one changes a kind that passed before so that it no longer does: remembered under the
# old content, it must be checked again and refused, naming the file and the kind.
BROKEN = {
    "regex": (
        "ACME-[0-9]{6}(?!",
        "ACME-[0-9]{7}(?!",
        "positive example 'ACME-123456': expected 'ACME-123456', found nothing",
    ),
    "examples": (
        'tests.negative = ["ACME-12345",',
        'tests.negative = ["ACME-654321",',
        "negative example 'ACME-654321' matched 'ACME-654321'",
    ),
    "deny-list": (
        'acme_words = ["ACME-999999"]',
        'acme_words = ["ACME-123456"]',
        "positive example 'ACME-123456': expected 'ACME-123456', found nothing",
    ),
    "gate": ("gate = 'ACME-'", "gate = 'ACMX-'", "does not contain a match of its gate"),
    "keywords": ('keywords = ["acme-"]', 'keywords = ["acme-", "zz"]', "keyword 'zz'"),
}


@pytest.mark.parametrize("change", sorted(BROKEN))
def test_a_changed_rules_file_is_checked_again(tmp_path: Path, change: str) -> None:
    cache = tmp_path / "cache"
    path = tmp_path / "rules.toml"
    path.write_text(ACME, encoding="utf-8")
    answers(str(cache), str(path))  # passed, and remembered
    assert list((cache / "checked-ok").iterdir())
    old, new, message = BROKEN[change]
    assert old in ACME
    path.write_text(ACME.replace(old, new), encoding="utf-8")
    for _ in range(2):  # and a refusal is never remembered as a pass
        proc = subprocess.run(
            [sys.executable, "-m", "lexkeep.cli.main", "extract", "-", "--rules", str(path)],
            input="ACME-123456",
            env={**os.environ, "LEXKEEP_CACHE_DIR": str(cache)},
            capture_output=True,
            text=True,
        )
        assert proc.returncode == 2, proc.stderr
        assert f"Error: {path}: kind 'acme_invoice': " in proc.stderr
        assert message in proc.stderr


def test_a_bad_rules_file_is_refused_with_a_warm_cache(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("LEXKEEP_CACHE_DIR", str(tmp_path / "cache"))
    default_rules()
    bad = tmp_path / "rules.toml"
    bad.write_text(ACME.replace("ACME-[0-9]{6}", "ACME-[0-9]{6}("), encoding="utf-8")
    for _ in range(2):
        with pytest.raises(RuleError) as info:
            load_rules(bad)
        assert str(info.value).startswith(f"{bad}: kind 'acme_invoice': regex does not compile")


def test_what_is_remembered_names_the_code_that_checked_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A marker written by other extraction code (an upgrade, an edited checkout) is not
    # honoured: the marker's name holds a digest of the code the checks ran.
    monkeypatch.setenv("LEXKEEP_CACHE_DIR", str(tmp_path / "cache"))
    (tmp_path / "rules.toml").write_text(ACME, encoding="utf-8")
    monkeypatch.setattr(rules_module, "_CHECKED", {})
    load_rules(tmp_path / "rules.toml")
    markers = set((tmp_path / "cache" / "checked-ok").iterdir())
    assert markers
    monkeypatch.setattr(rules_module, "_CHECKED", {})
    monkeypatch.setattr(rules_module, "code_digest", lambda: "other code")
    load_rules(tmp_path / "rules.toml")
    assert set((tmp_path / "cache" / "checked-ok").iterdir()) > markers


def test_kind_patterns_compile_from_their_sources() -> None:
    kinds = [k for k in default_rules().kinds if isinstance(k, Kind)]
    assert kinds
    for k in kinds:
        assert k.pattern.pattern == k.regex
        assert (k.gate_pattern is None) == (k.gate == "")
        assert k.gate_pattern is None or k.gate_pattern.pattern == k.gate
        assert (k.plain_pattern is None) == (k.engine != "re" or not rules_module.STDLIB_RE_SOUND)
    assert extract("order ORD-88412 at https://x.io/a?b=1").identifiers


def test_the_parsed_builtin_kinds_are_remembered_by_their_text(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("LEXKEEP_CACHE_DIR", str(tmp_path / "cache"))
    text = (Path(rules_module.__file__).parent / "kinds.toml").read_text(encoding="utf-8")
    want = tomllib.loads(text)
    assert rules_module.parsed_toml(text) == want  # parsed, and remembered
    (entry,) = (tmp_path / "cache" / "parsed-toml").iterdir()
    assert orjson.loads(entry.read_bytes()) == want
    assert rules_module.parsed_toml(text) == want  # read back
    # Another text (an upgrade's kinds) is parsed, never answered with the old one's table.
    other = text.replace('id = "url"', 'id = "web_address"', 1)
    assert other != text
    assert rules_module.parsed_toml(other) == tomllib.loads(other)
    # An entry cut short (a full disk) is parsed again.
    entry.write_bytes(entry.read_bytes()[:100])
    assert rules_module.parsed_toml(text) == want


def test_a_toml_document_json_cannot_hold_is_not_remembered(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("LEXKEEP_CACHE_DIR", str(tmp_path / "cache"))
    text = "when = 2025-08-14\nn = 1\n"
    for _ in range(2):
        assert rules_module.parsed_toml(text) == tomllib.loads(text)
    assert not (tmp_path / "cache" / "parsed-toml").exists()


class Planted:
    """What a kept pattern's file must never run when it is read back."""

    def __reduce__(self) -> tuple:
        return (os.system, ("touch planted",))


def test_a_kept_pattern_is_only_ever_read_back_as_a_pattern(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("LEXKEEP_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.chdir(tmp_path)
    source = "(?<![0-9])ZQ-[0-9]{3}"
    monkeypatch.setattr(rules_module, "_REGEX_PATTERNS", {})
    compiled = rules_module.regex_pattern(source)
    (entry,) = (tmp_path / "cache" / "compiled").iterdir()
    other = regex.compile("ZX-[0-9]{3}", regex.V1)
    for planted in (
        pickle.dumps(Planted()),  # anything but a pattern: never unpickled
        pickle.dumps(other),  # another pattern (a collision, a copied file)
        pickle.dumps(regex.compile(source)),  # the same source without V1
        entry.read_bytes()[:20],  # cut short
    ):
        entry.write_bytes(planted)
        monkeypatch.setattr(rules_module, "_REGEX_PATTERNS", {})
        again = rules_module.regex_pattern(source)
        assert (again.pattern, again.flags) == (compiled.pattern, compiled.flags)
        assert again.search("a ZQ-123").group(0) == "ZQ-123"
        assert not (tmp_path / "planted").exists()
