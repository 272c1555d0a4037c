"""Gate settings: flag, then LEXKEEP_* environment, then [tool.lexkeep.audit]; unknown keys fail."""

from __future__ import annotations

from pathlib import Path

import pytest

from lexkeep.audit.settings import AuditSettings, resolve
from lexkeep.core.errors import ConfigError

NO_FLAGS = {"min_ratio": None, "fail_on": None, "exit_zero": None, "format": None, "redact": None}


def pyproject(tmp_path: Path, body: str) -> Path:
    path = tmp_path / "pyproject.toml"
    path.write_text("[project]\nname = 'x'\n\n[tool.lexkeep.audit]\n" + body, encoding="utf-8")
    return path


def test_defaults_without_any_setting(tmp_path):
    empty = tmp_path / "lexkeep.toml"
    empty.write_text("", encoding="utf-8")
    assert resolve(NO_FLAGS, env={}, settings_file=empty) == AuditSettings()


def test_file_then_env_then_flag(tmp_path):
    path = pyproject(tmp_path, 'min_ratio = 0.5\nfail_on = ["missing"]\nformat = "json"\n')
    from_file = resolve(NO_FLAGS, env={}, settings_file=path)
    assert (from_file.min_ratio, from_file.fail_on, from_file.format) == (0.5, ("missing",), "json")
    env = {"LEXKEEP_MIN_RATIO": "0.8", "LEXKEEP_FAIL_ON": "altered,missing"}
    from_env = resolve(NO_FLAGS, env=env, settings_file=path)
    assert (from_env.min_ratio, from_env.fail_on, from_env.format) == (
        0.8,
        ("altered", "missing"),
        "json",
    )
    flags = {**NO_FLAGS, "min_ratio": 1.0, "format": "github"}
    from_flag = resolve(flags, env=env, settings_file=path)
    assert (from_flag.min_ratio, from_flag.fail_on, from_flag.format) == (
        1.0,
        ("altered", "missing"),
        "github",
    )


def test_booleans_from_env_and_file(tmp_path):
    path = pyproject(tmp_path, "exit_zero = true\n")
    assert resolve(NO_FLAGS, env={}, settings_file=path).exit_zero is True
    assert resolve(NO_FLAGS, env={"LEXKEEP_EXIT_ZERO": "0"}, settings_file=path).exit_zero is False
    got = resolve({**NO_FLAGS, "redact": True}, env={"LEXKEEP_REDACT": "no"}, settings_file=path)
    assert got.redact is True


def test_unknown_key_is_an_error_naming_it(tmp_path):
    path = pyproject(tmp_path, "min_ratoi = 0.5\n")
    with pytest.raises(ConfigError) as err:
        resolve(NO_FLAGS, env={}, settings_file=path)
    assert "min_ratoi" in str(err.value)
    assert err.value.path == str(path)
    assert "min_ratio" in err.value.hint


@pytest.mark.parametrize(
    ("env", "needle"),
    [
        ({"LEXKEEP_MIN_RATIO": "lots"}, "LEXKEEP_MIN_RATIO"),
        ({"LEXKEEP_MIN_RATIO": "1.5"}, "outside 0..1"),
        ({"LEXKEEP_FAIL_ON": "kept"}, "unknown verdict 'kept'"),
        ({"LEXKEEP_FORMAT": "xml"}, "unknown format 'xml'"),
        ({"LEXKEEP_EXIT_ZERO": "maybe"}, "not a boolean"),
    ],
)
def test_invalid_values_are_config_errors(tmp_path, env, needle):
    empty = tmp_path / "lexkeep.toml"
    empty.write_text("", encoding="utf-8")
    with pytest.raises(ConfigError) as err:
        resolve(NO_FLAGS, env=env, settings_file=empty)
    assert needle in str(err.value)


@pytest.mark.parametrize(
    ("body", "needle"),
    [
        ("min_ratio = false\n", "audit.min_ratio: expected a number from 0 to 1"),
        ('min_ratio = "0.5"\n', "audit.min_ratio: expected a number"),
        ("exit_zero = 1\n", "audit.exit_zero: expected true or false, not 1"),
        ('redact = "yes"\n', "audit.redact: expected true or false"),
        ("format = 1\n", "audit.format: expected a format name"),
        ("fail_on = 2\n", "audit.fail_on: expected a list of verdicts"),
    ],
)
def test_a_settings_file_value_of_the_wrong_toml_type_is_refused(tmp_path, body, needle):
    """`min_ratio = false` read as 0.0 turned the gate off without a word."""
    path = pyproject(tmp_path, body)
    with pytest.raises(ConfigError) as err:
        resolve(NO_FLAGS, env={}, settings_file=path)
    assert needle in str(err.value)
    assert err.value.path == str(path)


def test_a_whole_number_ratio_in_a_settings_file_is_a_number(tmp_path):
    path = pyproject(tmp_path, 'min_ratio = 1\nfail_on = "missing"\n')
    got = resolve(NO_FLAGS, env={}, settings_file=path)
    assert (got.min_ratio, got.fail_on) == (1.0, ("missing",))


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"fail_on": "missing"}, "fail_on: expected a tuple of verdicts"),
        ({"fail_on": ("kept",)}, "fail_on: unknown verdict 'kept'"),
        ({"min_ratio": 2}, "min_ratio: expected a number from 0 to 1"),
        ({"min_ratio": "0.9"}, "min_ratio: expected a number from 0 to 1"),
        ({"min_ratio": True}, "min_ratio: expected a number from 0 to 1"),
        ({"format": "sarif"}, "format: unknown format 'sarif'"),
        ({"exit_zero": "no"}, "exit_zero: expected True or False"),
        ({"redact": 1}, "redact: expected True or False"),
    ],
)
def test_settings_made_in_code_are_checked_as_the_settings_file_is(kwargs, message):
    """A script's `AuditSettings(fail_on="missing")` failed deep in the audit with
    `ValueError: 'm' is not a valid Verdict`, and `min_ratio=2` or `fail_on=("kept",)` were
    taken as they were (a gate no audit can meet, a verdict the command refuses): each is the
    ConfigError the command gives for the same setting, before anything is read."""
    with pytest.raises(ConfigError, match=message) as err:
        AuditSettings(**kwargs)
    assert err.value.hint


def test_settings_made_in_code_keep_their_values():
    settings = AuditSettings(min_ratio=1, fail_on=["missing", "altered"], format="json")
    assert settings.min_ratio == 1.0 and isinstance(settings.min_ratio, float)
    assert settings.fail_on == ("missing", "altered")  # a list is taken, kept as a tuple
    same = AuditSettings(min_ratio=1.0, fail_on=("missing", "altered"), format="json")
    assert settings == same and hash(settings) == hash(same)


def test_an_empty_variable_is_as_if_it_were_not_set(tmp_path):
    """`LEXKEEP_MIN_RATIO: ${{ vars.MIN_RATIO }}` in a workflow whose variable is not defined
    sets it to "": that stopped the audit (`not a number: ''`, and `unknown format ''` for
    LEXKEEP_FORMAT), while an empty LEXKEEP_EXIT_ZERO or LEXKEEP_FAIL_ON silently overrode the
    settings file with false and nothing. Each is now unset, as LEXKEEP_REDACT_KEY is."""
    path = pyproject(
        tmp_path,
        'min_ratio = 0.5\nfail_on = ["missing"]\nexit_zero = true\nformat = "json"\n'
        "redact = true\n",
    )
    for empty in ("", "  "):
        env = {
            var: empty
            for var in (
                "LEXKEEP_MIN_RATIO",
                "LEXKEEP_FAIL_ON",
                "LEXKEEP_EXIT_ZERO",
                "LEXKEEP_FORMAT",
                "LEXKEEP_REDACT",
            )
        }
        settings = resolve(NO_FLAGS, env=env, settings_file=path)
        assert settings == AuditSettings(
            min_ratio=0.5, fail_on=("missing",), exit_zero=True, format="json", redact=True
        )
        assert settings.origin["min_ratio"] == ("file", "pyproject.toml")
        empty_file = tmp_path / "lexkeep.toml"
        empty_file.write_text("", encoding="utf-8")
        assert resolve(NO_FLAGS, env=env, settings_file=empty_file) == AuditSettings()
