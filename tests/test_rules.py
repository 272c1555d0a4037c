"""Rule files: merging with the built-ins, and every refusal pinned by its exact message."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import sysconfig
import tempfile
import unicodedata
import warnings
from pathlib import Path

import pytest
import regex

from lexkeep.core.errors import ConfigError, RuleError, SettingsWarning
from lexkeep.core.identifiers import extract
from lexkeep.core.rules import (
    STDLIB_RE_SOUND,
    build_rules,
    cache_dir,
    default_rules,
    load_rules,
    plain_source,
)

ACME = """
[[kinds]]
id = "acme_invoice"
tier = "B"
priority = 85
keywords = ["acme-"]
regex = '''(?<![\\p{L}\\p{N}_-])ACME-[0-9]{6}(?![\\p{L}\\p{N}_]|-[\\p{L}\\p{N}])'''
tests.positive = ["ACME-123456", { text = "see ACME-123456.", value = "ACME-123456" }]
tests.negative = ["ACME-12345", "XACME-123456"]
"""


def write(tmp_path: Path, body: str, name: str = "rules.toml") -> Path:
    path = tmp_path / name
    path.write_text(body, encoding="utf-8")
    return path


def refusal(tmp_path: Path, body: str) -> str:
    path = write(tmp_path, body)
    with pytest.raises(RuleError) as info:
        load_rules(path)
    return str(info.value).replace(str(path), "FILE")


def test_builtin_kinds_pass_their_own_checks() -> None:
    rules = default_rules()
    assert len(rules.kinds) >= 30
    assert {"url", "email", "uuid", "short_number", "money"} <= {k.id for k in rules.kinds}
    assert all(k.positive and k.negative for k in rules.kinds)


def test_user_kind_is_added_and_found(tmp_path: Path) -> None:
    rules = load_rules(write(tmp_path, ACME))
    assert rules.digest != default_rules().digest
    [ident] = extract("bill ACME-123456 now", rules).identifiers
    assert (ident.kind, ident.value) == ("acme_invoice", "ACME-123456")


def test_disabled_kinds_allowlist_and_context_words(tmp_path: Path) -> None:
    body = """
disabled = ["hash_ref", "alnum_code"]
allowlist = ["ann@example.org"]
[context]
short_number = ["locker"]
"""
    rules = load_rules(write(tmp_path, body))
    text = "order #W2378156 from ann@example.org, locker 4412"
    assert [(i.kind, i.value) for i in extract(text, rules).identifiers] == [
        ("short_number", "4412")
    ]
    assert [i.value for i in extract(text).identifiers] == ["#W2378156", "ann@example.org"]


def test_override_changes_only_the_given_fields(tmp_path: Path) -> None:
    rules = load_rules(write(tmp_path, '[[kinds]]\nid = "digit_run"\npriority = 49\n'))
    kind = rules.kind("digit_run")
    assert kind.priority == 49
    assert kind.regex == default_rules().kind("digit_run").regex


def test_pyproject_table_is_used(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    write(tmp_path, '[tool.lexkeep.identifiers]\ndisabled = ["email"]\n', "pyproject.toml")
    monkeypatch.chdir(tmp_path)
    rules = load_rules()
    assert "email" not in {k.id for k in rules.kinds}
    assert rules.disabled == ("email",)


def test_lexkeep_toml_table_is_used(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    write(tmp_path, '[identifiers]\ndisabled = ["handle"]\n', "lexkeep.toml")
    monkeypatch.chdir(tmp_path)
    assert "handle" not in {k.id for k in load_rules().kinds}


def test_no_settings_file_gives_the_defaults(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    assert load_rules() is default_rules()


KIND_HEAD = 'id = "k"\ntier = "B"\npriority = 50\n'
GOOD_TESTS = 'tests.positive = ["ACME-123456"]\ntests.negative = ["ACME-1"]\n'
GOOD_REGEX = "regex = '''ACME-[0-9]{6}'''\n"


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (
            "[[kinds]]\n" + KIND_HEAD + GOOD_REGEX
            + 'keywords = ["acme-"]\ntests.positive = ["ACME-12345"]\ntests.negative = ["x"]\n',
            "FILE: kind 'k': positive example 'ACME-12345': expected 'ACME-12345', found nothing",
        ),
        (
            "[[kinds]]\n" + KIND_HEAD + GOOD_REGEX
            + 'keywords = ["acme-"]\ntests.positive = ["ACME-123456"]\n'
            + 'tests.negative = ["ACME-654321"]\n',
            "FILE: kind 'k': negative example 'ACME-654321' matched 'ACME-654321'",
        ),
        (
            "[[kinds]]\n" + KIND_HEAD + GOOD_REGEX + 'keywords = ["invoice"]\n' + GOOD_TESTS,
            "FILE: kind 'k': positive example 'ACME-123456' does not contain any of its keywords"
            " ['invoice']; the prefilter would skip it",
        ),
        (
            "[[kinds]]\n" + KIND_HEAD + "regex = '''(?i)acme-[0-9]{6}'''\n" + GOOD_TESTS,
            "FILE: kind 'k': global ignore-case flag (?i) is not allowed",
        ),
        (
            "[[kinds]]\n" + KIND_HEAD
            + "regex = '''(?:a|aa){1,9000}b|ACME-[0-9]{6}'''\n" + GOOD_TESTS,
            "FILE: kind 'k': pattern takes longer than 50 ms on the adversarial string 'letters'",
        ),
        (  # nested repeats of a character no fixed string pumps: its own examples name it
            "[[kinds]]\n" + KIND_HEAD + "regex = '''(?:q{1,40}){1,40}!'''\n"
            + 'keywords = ["q"]\ntests.positive = ["qq!"]\ntests.negative = ["zzz"]\n',
            "FILE: kind 'k': pattern takes longer than 50 ms on the adversarial string"
            " \"'q' repeated\"",
        ),
        (
            "[[kinds]]\n" + KIND_HEAD + "regex = '''ACME-[0-9]+'''\n" + GOOD_TESTS,
            "FILE: kind 'k': unbounded quantifier '+' at position 10",
        ),
        (
            "[[kinds]]\n" + KIND_HEAD + "regex = '''ACME-[0-9'''\n" + GOOD_TESTS,
            "FILE: kind 'k': regex does not compile: unterminated character set at position 9",
        ),
        (
            "[[kinds]]\n" + KIND_HEAD + GOOD_REGEX,
            "FILE: kind 'k': needs tests.positive and tests.negative examples",
        ),
        (
            '[[kinds]]\nid = "k"\ntier = "C"\npriority = 50\n' + GOOD_REGEX + GOOD_TESTS,
            "FILE: kind 'k': tier C kinds need a context gate with mode = \"require\"",
        ),
        ('disabled = ["nope"]\n', "FILE: disabled: unknown kind 'nope'"),
        ("colour = 1\n", "FILE: unknown key 'colour' in the identifiers rules"),
        (
            '[context]\nemail = ["mail"]\n',
            "FILE: context: kind 'email' has no context gate to add words to",
        ),
        (
            "[settings]\ntimeout_ms = 0\n",
            "FILE: settings.timeout_ms must be a number from 1 to 10000",
        ),
        (
            '[[kinds]]\nid = "url"\nregex = 5\n',
            "FILE: kind 'url': regex must be a non-empty string",
        ),
    ],
    ids=[
        "positive-fails", "negative-matches", "keyword-absent", "global-ignore-case", "redos",
        "redos-own-material",
        "unbounded",
        "no-compile", "no-examples", "tier-c-without-context", "unknown-disabled", "unknown-key",
        "context-without-gate", "bad-timeout", "bad-regex-type",
    ],
)  # fmt: skip
def test_refusals_name_the_rule(tmp_path: Path, body: str, message: str) -> None:
    assert refusal(tmp_path, body) == message


def test_invalid_toml_names_file_line_and_column_like_a_settings_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    body = 'disabled = ["alnum_code"]\n\n[settings]\ntimeout_ms = 50\nmax_chars = \n'
    path = write(tmp_path, body)
    with pytest.raises(RuleError) as info:
        load_rules(path)
    assert str(info.value) == f"{path}:5:13: invalid TOML: Invalid value"
    assert (info.value.line, info.value.col) == (5, 13)
    assert info.value.hint == (
        "a rules file holds the rules at its top level (disabled, allowlist, [[kinds]], ...); "
        "fix the TOML syntax at that position"
    )
    # The same mistake in a settings file reads the same way, with its own hint.
    settings = write(tmp_path, "[identifiers]\n" + body, "lexkeep.toml")
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ConfigError) as info:
        load_rules()
    assert str(info.value) == f"{settings.resolve()}:6:13: invalid TOML: Invalid value"
    assert "fix the TOML syntax at that position" in (info.value.hint or "")


@pytest.mark.parametrize(
    "body",
    ['[[kinds]]\nid = "digit_run"\nallowlist = ["1656367028"]\n', 'allowlist = ["1656367028"]\n'],
    ids=["kind-allowlist", "global-allowlist"],
)
def test_allowlisting_a_builtin_example_value_keeps_the_kind(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, body: str
) -> None:
    # digit_run's own positive example: the allowlist hides it from reports, and the kind's
    # examples (which the user never wrote) must still pass. No cache: every check runs.
    assert "1656367028" in [e.value for e in default_rules().kind("digit_run").positive]
    monkeypatch.setenv("LEXKEEP_CACHE_DIR", "")
    rules = load_rules(write(tmp_path, body))
    found = extract("ts 1656367028 and 1656367029", rules).identifiers
    assert [(i.kind, i.value) for i in found] == [("digit_run", "1656367029")]


def test_a_deny_listed_example_value_still_fails_the_examples(tmp_path: Path) -> None:
    body = '[lists]\nacme_words = ["ACME-123456"]\n' + ACME.replace(
        'keywords = ["acme-"]', 'keywords = ["acme-"]\ndeny_list = "acme_words"'
    )
    assert refusal(tmp_path, body) == (
        "FILE: kind 'acme_invoice': positive example 'ACME-123456': expected 'ACME-123456', "
        "found nothing"
    )


def test_a_deny_list_given_as_values_is_refused_with_the_kind_named(tmp_path: Path) -> None:
    # deny_list names a [lists] entry; a list of values written in its place crashed the
    # loader with "unhashable type: 'list'" instead of naming the file and the kind.
    body = ACME.replace('keywords = ["acme-"]', 'keywords = ["acme-"]\ndeny_list = ["ACME-1"]')
    assert refusal(tmp_path, body) == (
        "FILE: kind 'acme_invoice': deny_list must name a list of [lists] (a string), not a list"
    )


def test_scoped_ignore_case_is_allowed() -> None:
    body = {
        "kinds": [
            {
                "id": "k",
                "tier": "B",
                "priority": 50,
                "keywords": ["acme-"],
                "regex": "(?i:acme)-[0-9]{6}",
                "tests": {"positive": ["acme-123456", "ACME-123456"], "negative": ["acme-1"]},
            }
        ]
    }
    rules = build_rules(body, origin="inline")
    assert rules.kind("k").regex == "(?i:acme)-[0-9]{6}"


def test_digest_is_stable_and_tracks_changes() -> None:
    assert build_rules(None).digest == default_rules().digest
    assert build_rules({"disabled": ["hex"]}, origin="x").digest != default_rules().digest


def test_redos_pass_is_cached_on_disk(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    default_rules()  # the built-in kinds, checked once per process: only the new kind is counted
    monkeypatch.setenv("LEXKEEP_CACHE_DIR", str(tmp_path / "cache"))
    body = {
        "kinds": [
            {
                "id": "cached_kind",
                "tier": "B",
                "priority": 50,
                "keywords": ["zq-"],
                "regex": "ZQ-[0-9]{7}",
                "tests": {"positive": ["ZQ-1234567"], "negative": ["ZQ-1"]},
            }
        ]
    }
    build_rules(body, origin="inline")
    assert len(list((tmp_path / "cache" / "redos-ok").iterdir())) == 1


CACHED_KIND = {
    "kinds": [
        {
            "id": "fallback_kind",
            "tier": "B",
            "priority": 50,
            "keywords": ["zf-"],
            "regex": "ZF-[0-9]{7}",
            "tests": {"positive": ["ZF-1234567"], "negative": ["ZF-1"]},
        }
    ]
}


def _unwritable(tmp_path: Path, name: str) -> Path:
    """A folder that cannot be made, even by root: its parent is a regular file."""
    blocker = tmp_path / f"{name}-is-a-file"
    blocker.write_text("not a folder\n")
    return blocker / name


def test_an_unwritable_cache_folder_falls_back_to_one_under_the_temporary_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A read-only home or mount: the checks that passed are remembered in the user's own
    # folder under the temporary folder, not re-run by every command.
    temp = tmp_path / "tmp"
    temp.mkdir()
    monkeypatch.setenv("LEXKEEP_CACHE_DIR", str(_unwritable(tmp_path, "cache")))
    monkeypatch.setattr(tempfile, "tempdir", str(temp))
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # nothing to say: a cache is kept
        build_rules(CACHED_KIND, origin="inline")
    (own,) = temp.iterdir()
    assert own.name == f"lexkeep-{os.getuid()}"
    assert own.stat().st_mode & 0o777 == 0o700
    assert len(list((own / "redos-ok").iterdir())) >= 1


def test_a_temporary_folder_of_another_owner_or_a_link_is_not_used(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Someone else could have made it (or a link to their folder) to plant passed checks.
    temp = tmp_path / "tmp"
    temp.mkdir()
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (temp / f"lexkeep-{os.getuid()}").symlink_to(elsewhere)
    monkeypatch.setenv("LEXKEEP_CACHE_DIR", str(_unwritable(tmp_path, "cache")))
    monkeypatch.setattr(tempfile, "tempdir", str(temp))
    with pytest.warns(SettingsWarning, match="no cache folder can be written"):
        assert cache_dir() is None
    assert list(elsewhere.iterdir()) == []


def test_no_writable_cache_folder_is_said_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    configured = _unwritable(tmp_path, "cache")
    monkeypatch.setenv("LEXKEEP_CACHE_DIR", str(configured))
    monkeypatch.setattr(tempfile, "tempdir", str(_unwritable(tmp_path, "tmp")))
    with pytest.warns(SettingsWarning) as record:
        assert cache_dir() is None
        assert cache_dir() is None
        build_rules(CACHED_KIND, origin="inline")  # still loads: its checks just run again
    messages = [str(w.message) for w in record if issubclass(w.category, SettingsWarning)]
    assert len(messages) == 1, messages
    assert str(configured) in messages[0]
    assert "LEXKEEP_CACHE_DIR" in messages[0]


def test_the_cli_says_once_when_no_cache_can_be_written(tmp_path: Path) -> None:
    # A real process whose temporary folder cannot be written either (Python's own setting:
    # $TMPDIR falls back to /tmp when it cannot be used).
    program = (
        f"import sys, tempfile; tempfile.tempdir = {str(_unwritable(tmp_path, 'tmp'))!r};"
        " sys.argv = ['lexkeep', 'extract', '--format', 'json', 'order #W2378156'];"
        " from lexkeep.cli.main import main; main()"
    )
    env = {**os.environ, "LEXKEEP_CACHE_DIR": str(_unwritable(tmp_path, "cache"))}
    run = subprocess.run(
        [sys.executable, "-c", program], capture_output=True, text=True, timeout=120, env=env
    )
    assert run.returncode == 0, run.stderr
    assert json.loads(run.stdout)["identifiers"][0]["value"] == "#W2378156"
    lines = run.stderr.splitlines()
    assert len(lines) == 1, run.stderr
    assert lines[0].startswith("Warning: no cache folder can be written (")


def test_the_cli_keeps_its_cache_under_tmpdir_when_the_cache_folder_is_read_only(
    tmp_path: Path,
) -> None:
    temp = tmp_path / "tmp"
    temp.mkdir()
    env = {
        **os.environ,
        "LEXKEEP_CACHE_DIR": str(_unwritable(tmp_path, "cache")),
        "TMPDIR": str(temp),
    }
    run = subprocess.run(
        [sys.executable, "-m", "lexkeep.cli.main", "extract", "--format", "json", "#W2378156"],
        capture_output=True, text=True, timeout=120, env=env,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr
    assert run.stderr == ""
    assert len(list((temp / f"lexkeep-{os.getuid()}" / "redos-ok").iterdir())) > 1


@pytest.mark.parametrize(
    ("pattern", "position"),
    [("a+", 1), ("(?:ab)*", 6), ("[a+*]{1,3}+", -1), (r"\+x", -1), ("a{1,9}+", -1), ("[]+]x", -1)],
)
def test_unbounded_quantifier_lint(pattern: str, position: int) -> None:
    from lexkeep.core.rules import unbounded_quantifier

    assert unbounded_quantifier(pattern) == position


# -- engine = "re" -------------------------------------------------------------------------


def test_plain_source_translates_only_what_both_engines_read_alike() -> None:
    assert plain_source(r"(?<![\p{L}\p{N}_\-])[A-Z]{2}[0-9]{4}(?![\p{L}\p{N}])") == (
        r"(?<![\w_\-])[A-Z]{2}[0-9]{4}(?![^\W_])"
    )
    assert plain_source(r"(?<=[^\p{L}\p{N}])x") == r"(?<=[\W_])x"
    # \w, \b, other properties, set operations, fuzzy matching, a class without '_':
    for source in (r"\w+", r"\bx", r"\p{Lu}x", r"[[a-z]--[aeiou]]", r"(?:ab){e<=1}",
                   r"[\p{L}\p{N}.]x", r"(?i:é)x"):  # fmt: skip
        assert plain_source(source) is None, source


@pytest.mark.skipif(not STDLIB_RE_SOUND, reason="stdlib re before 3.11.5: engine re not used")
def test_engine_re_kinds_find_what_the_regex_engine_finds() -> None:
    rules = default_rules()
    fast = [k for k in rules.kinds if k.engine == "re"]
    assert {"snake_id", "file_name", "email", "hostname"} <= {k.id for k in fast}
    for kind in fast:
        for example in kind.positive + kind.negative:
            if example.text.isascii():
                want = [m.span(kind.group) for m in kind.pattern.finditer(example.text)]
                got = [m.span(kind.group) for m in kind.plain_pattern.finditer(example.text)]
                assert got == want, (kind.id, example.text)


def test_engine_re_refusals(tmp_path: Path) -> None:
    body = ACME.replace("priority = 85", 'priority = 85\nengine = "re"')
    plain = load_rules(write(tmp_path, body)).kind("acme_invoice").plain_pattern
    assert (plain is not None) == STDLIB_RE_SOUND
    assert refusal(tmp_path, ACME.replace("priority = 85", 'priority = 85\nengine = "pcre"')) == (
        "FILE: kind 'acme_invoice': engine must be one of regex, re, not 'pcre'"
    )
    untranslatable = ACME.replace("priority = 85", 'priority = 85\nengine = "re"').replace(
        "ACME-[0-9]{6}", r"\p{Lu}CME-[0-9]{6}"
    )
    assert refusal(tmp_path, untranslatable) == (
        "FILE: kind 'acme_invoice': engine \"re\" needs a pattern stdlib re can run on ASCII text"
    )


# Stdlib re of Python 3.11.0-3.11.4 (Debian 12 ships 3.11.2) lets a possessive repeat keep an
# alternative whose look-ahead failed: path_rel's translation finds 'src/app.ts.Then' whole.
_OLD_RE = "import re, sys; sys.exit(re.fullmatch(r'(?:x|\\.(?!X))*+', '.X') is None)"


def _python_with_old_re() -> str | None:
    """A Python 3.11 interpreter on this machine whose stdlib re has that bug, if any."""
    for name in ("python3.11", "python3"):
        for folder in ("/usr/bin", "/usr/local/bin"):
            candidate = Path(folder) / name
            if candidate.is_file() and subprocess.run(
                [candidate, "-c", _OLD_RE], capture_output=True, timeout=30
            ).returncode == 0:  # fmt: skip
                version = subprocess.run(
                    [candidate, "-c", "import sys; print(sys.version_info[:2])"],
                    capture_output=True, text=True, timeout=30,
                )  # fmt: skip
                if version.stdout.strip() == "(3, 11)":  # wheels of this environment fit it
                    return str(candidate)
    return None


def test_builtin_rules_load_on_a_python_whose_re_misreads_possessive_repeats() -> None:
    python = _python_with_old_re()
    if python is None:
        pytest.skip("no Python 3.11.0-3.11.4 on this machine")
    site_packages = sysconfig.get_paths()["purelib"]
    program = (
        f"import site, sys; site.addsitedir({site_packages!r}); sys.argv = ['lexkeep', 'extract',"
        " '--format', 'json', 'open src/app.ts.Then and order #W2378156']; from lexkeep.cli.main"
        " import main; main()"
    )
    run = subprocess.run(
        [python, "-c", program], capture_output=True, text=True, timeout=120,
        env={**os.environ, "LEXKEEP_CACHE_DIR": ""},
    )  # fmt: skip
    assert run.returncode == 0, run.stderr
    values = [(i["kind"], i["value"]) for i in json.loads(run.stdout)["identifiers"]]
    assert values == [("path_rel", "src/app.ts"), ("hash_ref", "#W2378156")]


def test_where_stdlib_re_is_unsound_engine_re_kinds_run_on_the_regex_engine(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from lexkeep.core import rules

    monkeypatch.setattr(rules, "STDLIB_RE_SOUND", False)
    monkeypatch.setattr(rules, "_CHECKED", {})  # kinds checked earlier in this process
    unsound = build_rules(None)
    assert {k.id for k in unsound.kinds if k.engine == "re"} >= {"path_rel", "email"}
    assert all(k.plain_pattern is None for k in unsound.kinds)
    texts = [example.text for kind in unsound.kinds for example in kind.positive + kind.negative]
    for text in texts:
        assert extract(text, unsound).identifiers == extract(text, default_rules()).identifiers


@pytest.mark.skipif(not STDLIB_RE_SOUND, reason="stdlib re before 3.11.5: engine re not used")
def test_engine_re_times_the_translation(tmp_path: Path) -> None:
    # Nested repetition that the regex engine runs fast and stdlib re in exponential time.
    body = """
[[kinds]]
id = "nested"
tier = "B"
priority = 10
keywords = ["a"]
engine = "re"
regex = '''(?:a{1,3}+|a){1,30}b'''
tests.positive = ["aab"]
tests.negative = ["b"]
"""
    message = refusal(tmp_path, body)
    assert message.startswith(
        "FILE: kind 'nested': engine \"re\": pattern takes longer than 50 ms on "
    ), message


def test_a_new_regex_for_a_builtin_kind_drops_its_engine(tmp_path: Path) -> None:
    body = """
[[kinds]]
id = "snake_id"
regex = '''(?<![\\p{Lu}])[a-z]{1,9}_[a-z]{1,9}(?![\\p{L}\\p{N}_])'''
tests.positive = ["in_progress"]
tests.negative = ["plain"]
"""
    kind = load_rules(write(tmp_path, body)).kind("snake_id")
    assert (kind.engine, kind.plain_pattern) == ("regex", None)


def test_both_engines_read_neutral_characters_alike() -> None:
    """Every assigned punctuation or symbol character of the Basic Multilingual Plane (what
    core.prefilter may call neutral and scan as plain text): the translated classes agree."""
    pairs = [
        (regex.compile(r"[\p{L}\p{N}]"), re.compile(r"[^\W_]")),
        (regex.compile(r"[\p{L}\p{N}_]"), re.compile(r"\w")),
        (regex.compile(r"\s", regex.V1), re.compile(r"\s")),
        (regex.compile(r"[0-9]"), re.compile(r"[0-9]")),
    ]
    for code in range(0x80, 0x10000):
        char = chr(code)
        if unicodedata.category(char)[0] in "PS":
            for new, old in pairs:
                assert (new.match(char) is None) == (old.match(char) is None), hex(code)


LONG_TITLE = """
[[kinds]]
id = "release_title"
tier = "B"
priority = 60
keywords = ["release:"]
regex = '''release: [A-Z][a-z]{{1,12}}(?: [A-Z][a-z]{{1,12}}){{{repeat}}}'''
tests.positive = [{{ text = "ship {title} today", value = "{title}" }}]
tests.negative = ["release: alpha"]
"""


def test_user_kind_reaching_beyond_the_scan_window_is_found_whole_on_every_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Extraction scans the built-in kinds only REACH (24) characters around their keywords
    and digits. A user pattern may match further than that (here a title of up to 13 words
    after its only keyword, longer than its example shows): it runs over the whole text once
    its conditions hold, so every path finds it whole, never cut to a partial span."""
    from lexkeep.core import identifiers
    from lexkeep.core.prefilter import available

    short = "release: Alpha Bravo Charlie"
    rules = load_rules(write(tmp_path, LONG_TITLE.format(repeat="2,12", title=short)))
    (kind,) = [k for k in rules.kinds if k.id == "release_title"]
    assert kind.wide and not any(k.wide for k in rules.kinds if k is not kind)
    title = "release: Alpha Bravo Charlie Delta Echo Foxtrot Golf Hotel India Juliet"
    text = f"ship {title} today, with ORD_12345 and v2.0.1"
    expected = [title, "ORD_12345"]

    def values(found: identifiers.Extraction) -> list[str]:
        return [i.value for i in found.identifiers]

    assert values(extract(text, rules)) == expected  # one text: the windows
    many = identifiers.extract_many([text] * (identifiers.SELECT_AFTER + 2), rules)
    assert {tuple(values(found)) for found in many} == {tuple(expected)}  # compiled selection
    filler = " ".join(["nothing to see here"] * 600)  # > SEGMENT_TEXT_MIN: in segments
    long_text = f"{filler} {text} {filler}"
    assert len(long_text) > identifiers.SEGMENT_TEXT_MIN
    assert values(extract(long_text, rules)) == expected
    if available():
        monkeypatch.setenv("LEXKEEP_PREFILTER", "off")  # the same without the selector
        identifiers.forget(rules)
        assert values(extract(long_text, rules)) == expected
        assert values(extract(text, rules)) == expected


def test_only_kinds_whose_reach_a_rule_file_changed_are_wide(tmp_path: Path) -> None:
    builtin = default_rules()
    assert not any(k.wide for k in builtin.kinds)
    same_matches = builtin.kind("compound_code").regex + "(?:)"  # another pattern text
    body = f"""
[[kinds]]
id = "ticket"
priority = 99

[[kinds]]
id = "compound_code"
regex = '''{same_matches}'''
"""
    rules = load_rules(write(tmp_path, body))
    # A new pattern may reach further; a new priority changes no reach.
    assert {k.id for k in rules.kinds if k.wide} == {"compound_code"}
    assert rules.digest != builtin.digest


def test_a_rule_that_slips_past_the_load_check_is_cut_off_at_its_budget(tmp_path: Path) -> None:
    """No fixed set of strings proves a pattern someone else wrote. This one backtracks only on
    runs of v/w, which neither the fixed strings nor its own material ('!') pump; on a short
    text the engine's timeout is still armed, so the scan ends incomplete instead of running
    for minutes (it did: a user pattern on texts under 1 KB ran unarmed)."""
    import subprocess
    import sys

    rules = write(
        tmp_path,
        '[[kinds]]\nid = "bang"\ntier = "B"\npriority = 85\nkeywords = ["!"]\n'
        "regex = '''(?:(?:v|w){1,40}){1,40}!|!'''\n"
        'tests.positive = ["!"]\ntests.negative = ["zzz"]\n',
    )
    load_rules(rules)  # passes its load-time checks
    text = "w" * 60 + " !"
    done = subprocess.run(
        [sys.executable, "-m", "lexkeep.cli.main", "extract", "--rules", str(rules)]
        + ["--format", "json", text],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert json.loads(done.stdout)["complete"] is False, done.stderr


CONTEXT_KIND = """
[[kinds]]
id = "acme_ref"
tier = "C"
priority = 85
keywords = ["acme-"]
regex = '''(?<![\\p{L}\\p{N}_-])ACME-[0-9]{4}(?![\\p{L}\\p{N}_])'''
context = { words = ["ref", "order number"], window = 1, mode = "require" }
tests.positive = [{ text = "ref ACME-1234", value = "ACME-1234" }]
tests.negative = ["ACME-1234"]
"""


@pytest.mark.parametrize(
    ("text", "found"),
    [
        ("ref ACME-1234", True),
        ("ref = ACME-1234", True),  # an operator between them is no word
        ("ref: -> ACME-1234", True),
        ("ref x ACME-1234", False),
        ("ref - ACME-1234", False),  # a dash (a bullet, a range) still counts as a word
        ("order number ACME-1234", True),  # a phrase is one word of the window
        ("the order number = ACME-1234", True),
        ("order number x ACME-1234", False),
        ("number ACME-1234", False),
    ],
)
def test_context_window_counts_phrases_as_one_word_and_skips_punctuation(
    tmp_path: Path, text: str, found: bool
) -> None:
    rules = load_rules(write(tmp_path, CONTEXT_KIND))
    got = [i.value for i in extract(text, rules).identifiers if i.kind == "acme_ref"]
    assert got == (["ACME-1234"] if found else [])
