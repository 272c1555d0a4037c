"""Settings files: which one is read, and what in it is refused instead of ignored."""

from __future__ import annotations

import re
import warnings
from pathlib import Path

import pytest
from conftest import REPO

from lexkeep.audit.settings import resolve
from lexkeep.core.config import SECTIONS, load_section
from lexkeep.core.errors import ConfigError, SettingsWarning
from lexkeep.core.rules import default_rules, load_rules

NO_FLAGS = {"min_ratio": None, "fail_on": None, "exit_zero": None, "format": None, "redact": None}
SECTION_HINT = "known keys: audit, identifiers"


def write(folder: Path, name: str, body: str) -> Path:
    path = folder / name
    path.write_text(body, encoding="utf-8")
    return path


@pytest.mark.parametrize(
    ("name", "body", "message", "hint"),
    [
        (
            "lexkeep.toml",
            '[identifier]\ndisabled = ["digit_run"]\n',
            "unknown key 'identifier' in lexkeep.toml",
            "did you mean 'identifiers'? " + SECTION_HINT,
        ),
        (
            "pyproject.toml",
            '[project]\nname = "x"\n[tool.lexkeep.identifers]\ndisabled = ["digit_run"]\n',
            "unknown key 'identifers' in [tool.lexkeep]",
            "did you mean 'identifiers'? " + SECTION_HINT,
        ),
        (
            "pyproject.toml",
            "[tool.lexkeep.Audit]\nmin_ratio = 0.5\n",
            "unknown key 'Audit' in [tool.lexkeep]",
            "did you mean 'audit'? " + SECTION_HINT,
        ),
        (
            "pyproject.toml",
            "[tool.lexkeep]\nmin_ratio = 0.5\n",
            "unknown key 'min_ratio' in [tool.lexkeep]",
            SECTION_HINT,
        ),
        (
            # A rules file's content pasted into lexkeep.toml without its [identifiers] header.
            "lexkeep.toml",
            'disabled = ["digit_run"]\n',
            "unknown key 'disabled' in lexkeep.toml",
            SECTION_HINT,
        ),
        (
            "lexkeep.toml",
            "[compaction]\nworkers = 2\n",
            "unknown key 'compaction' in lexkeep.toml",
            SECTION_HINT,
        ),
        (
            # Two forms in one lexkeep.toml: the top-level table would be ignored.
            "lexkeep.toml",
            '[tool.lexkeep.audit]\nmin_ratio = 0.5\n[identifiers]\ndisabled = ["digit_run"]\n',
            "unknown key 'identifiers' beside [tool.lexkeep]",
            "lexkeep.toml holds its tables either at the top level ([audit], [identifiers]) "
            "or all of them under [tool.lexkeep]",
        ),
    ],
    ids=[
        "lexkeep-toml-singular", "pyproject-misspelled", "pyproject-capitalised",
        "pyproject-key-without-table", "lexkeep-toml-bare-rules", "lexkeep-toml-unread-table",
        "lexkeep-toml-two-forms",
    ],
)  # fmt: skip
def test_an_unknown_settings_table_is_an_error_naming_file_and_key(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str, body: str, message: str, hint: str
) -> None:
    path = write(tmp_path, name, body)
    monkeypatch.chdir(tmp_path)
    # Both readers of the file refuse it, whichever table they came for.
    for read in (load_rules, lambda: resolve(NO_FLAGS, env={})):
        with pytest.raises(ConfigError) as info:
            read()
        assert (info.value.message, info.value.hint) == (message, hint)
        assert info.value.path == str(path.resolve())


def test_known_tables_in_either_form_are_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    write(tmp_path, "lexkeep.toml", '[tool.lexkeep.identifiers]\ndisabled = ["handle"]\n')
    assert "handle" not in {k.id for k in load_rules().kinds}
    write(tmp_path, "lexkeep.toml", "[audit]\nmin_ratio = 0.5\n[identifiers]\n")
    assert resolve(NO_FLAGS, env={}).min_ratio == 0.5
    assert load_rules() is default_rules()
    (tmp_path / "lexkeep.toml").unlink()
    write(tmp_path, "pyproject.toml", '[project]\nname = "x"\n[tool.lexkeep]\n')
    assert load_section("identifiers") == ({}, tmp_path.resolve() / "pyproject.toml")


def test_every_table_the_code_reads_is_a_known_section() -> None:
    # A new settings table must join SECTIONS, or every file that holds it would be refused.
    sources = [p for d in ("audit", "cli", "compaction", "core") for p in (REPO / d).glob("*.py")]
    read = {m for p in sources for m in re.findall(r'load_section\(\s*"(\w+)"', p.read_text())}
    assert read == set(SECTIONS)
    with pytest.raises(ValueError):
        load_section("compaction")


def test_lexkeep_toml_wins_over_pyproject_in_the_same_folder_and_says_so(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pyproject = write(
        tmp_path, "pyproject.toml", '[tool.lexkeep.identifiers]\ndisabled = ["email"]\n'
    )
    write(tmp_path, "lexkeep.toml", '[identifiers]\ndisabled = ["handle"]\n')
    monkeypatch.chdir(tmp_path)
    with pytest.warns(SettingsWarning) as record:
        rules = load_rules()
    assert rules.disabled == ("handle",)
    assert [str(w.message) for w in record] == [
        f"{pyproject.resolve()}: [tool.lexkeep] is ignored: lexkeep.toml beside it takes "
        "precedence (keep the settings in one of the two)"
    ]


@pytest.mark.parametrize(
    "pyproject",
    [
        '[project]\nname = "x"\n',  # no [tool.lexkeep]: not a lexkeep settings file
        "[project\n",  # broken, but shadowed: lexkeep.toml is what is read
    ],
)
def test_a_pyproject_without_lexkeep_settings_beside_lexkeep_toml_is_quiet(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, pyproject: str
) -> None:
    write(tmp_path, "pyproject.toml", pyproject)
    write(tmp_path, "lexkeep.toml", '[identifiers]\ndisabled = ["handle"]\n')
    monkeypatch.chdir(tmp_path)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert load_rules().disabled == ("handle",)


def test_the_nearest_settings_file_wins_without_a_warning(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    write(tmp_path, "lexkeep.toml", '[identifiers]\ndisabled = ["handle"]\n')
    sub = tmp_path / "sub"
    sub.mkdir()
    write(sub, "pyproject.toml", '[tool.lexkeep.identifiers]\ndisabled = ["email"]\n')
    monkeypatch.chdir(sub)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert load_rules().disabled == ("email",)


def test_a_pyproject_whose_tool_is_not_a_table_holds_no_lexkeep_settings(tmp_path: Path) -> None:
    """`tool = "lexkeep"` is not [tool.lexkeep] (a substring test said it was, and crashed)."""
    from lexkeep.core.config import find_settings_file

    (tmp_path / "pyproject.toml").write_text('tool = "lexkeep"\n', encoding="utf-8")
    assert find_settings_file(tmp_path) is None


def test_an_unknown_audit_key_in_lexkeep_toml_names_the_table_as_that_file_writes_it(
    tmp_path: Path,
) -> None:
    own = tmp_path / "lexkeep.toml"
    own.write_text("[audit]\nmin_ration = 0.5\n", encoding="utf-8")
    with pytest.raises(ConfigError, match=r"unknown key 'min_ration' in \[audit\]$"):
        resolve({}, env={}, settings_file=own)
