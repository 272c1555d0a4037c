"""Gate settings for `lexkeep audit`: flag, then LEXKEEP_* environment, then settings file.

The settings file is `[tool.lexkeep.audit]` in pyproject.toml (or `[audit]` in lexkeep.toml),
found by `lexkeep.core.config`. Unknown keys and invalid values are ConfigErrors (exit 2).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from lexkeep.core.config import check_keys, load_section, output_format
from lexkeep.core.errors import ConfigError

FORMATS = ("table", "json", "junit", "github", "markdown", "html")
FAIL_ON_CHOICES = ("altered", "missing")
# The format `-o FILE` gets from FILE's extension when no flag, environment variable or
# settings file names one: `-o report.html` must not hold the terminal's table.
FORMAT_BY_SUFFIX = {
    ".json": "json",
    ".html": "html",
    ".htm": "html",
    ".xml": "junit",
    ".md": "markdown",
    ".markdown": "markdown",
}

# setting name -> environment variable
ENV = {
    "min_ratio": "LEXKEEP_MIN_RATIO",
    "fail_on": "LEXKEEP_FAIL_ON",
    "exit_zero": "LEXKEEP_EXIT_ZERO",
    "format": "LEXKEEP_FORMAT",
    "redact": "LEXKEEP_REDACT",
}
_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off", ""}


@dataclass(frozen=True, slots=True)
class AuditSettings:
    """Resolved gate and output settings."""

    min_ratio: float = 1.0
    fail_on: tuple[str, ...] = ()
    exit_zero: bool = False
    format: str = "table"
    redact: bool = False
    # Where a setting came from: setting name -> ("flag", ""), ("env", its variable) or
    # ("file", the settings file's name), so a failed gate can say; a setting given in code
    # (AuditSettings(min_ratio=0.98)) has none.
    origin: Mapping[str, tuple[str, str]] = field(default_factory=dict, compare=False)

    def __post_init__(self) -> None:
        """Check values given in code as the settings file's are checked (ConfigError), so a
        script's mistake fails here, not deep in the audit or as a gate no audit can meet."""
        ratio = self.min_ratio
        if isinstance(ratio, bool) or not isinstance(ratio, int | float) or not 0 <= ratio <= 1:
            raise ConfigError(
                f"min_ratio: expected a number from 0 to 1, e.g. 0.95, not {ratio!r}",
                hint="AuditSettings(min_ratio=0.95)",
            )
        object.__setattr__(self, "min_ratio", float(ratio))
        fail_on = self.fail_on
        if isinstance(fail_on, str | bytes) or not isinstance(fail_on, tuple | list):
            raise ConfigError(
                f"fail_on: expected a tuple of verdicts, e.g. ('missing',), not {fail_on!r}",
                hint="AuditSettings(fail_on=('altered', 'missing'))",
            )
        for verdict in fail_on:
            if verdict not in FAIL_ON_CHOICES:
                raise ConfigError(
                    f"fail_on: unknown verdict {verdict!r}",
                    hint="choose from: " + ", ".join(FAIL_ON_CHOICES),
                )
        object.__setattr__(self, "fail_on", tuple(fail_on))
        if self.format not in FORMATS:
            raise ConfigError(
                f"format: unknown format {self.format!r}", hint="choose from: " + ", ".join(FORMATS)
            )
        for name in ("exit_zero", "redact"):
            if not isinstance(getattr(self, name), bool):
                raise ConfigError(
                    f"{name}: expected True or False, not {getattr(self, name)!r}",
                    hint=f"AuditSettings({name}=True)",
                )

    def shown(self, name: str, value: object) -> str:
        """Setting `name` at `value` as the gate's reasons show it, named where it was set:
        `--min-ratio 0.98`, `LEXKEEP_MIN_RATIO=0.98`, `min_ratio = 0.98 in pyproject.toml`,
        or `min_ratio=0.98` as code gives it (a default too: resolve records every origin)."""
        where, what = self.origin.get(name, ("code", ""))
        if where == "env":
            return f"{what}={value}"
        if where == "file":
            return f"{name} = {value} in {what}"
        if where == "flag":
            return f"--{name.replace('_', '-')} {value}"
        if name == "fail_on":  # one verdict of the tuple given in code
            return f"{value!r} in fail_on"
        return f"{name}={value!r}"


def resolve(
    flags: Mapping[str, Any],
    env: Mapping[str, str] | None = None,
    settings_file: Path | None = None,
    output: str | None = None,
) -> AuditSettings:
    """Merge flags (None = not given) over the environment over the settings file; then,
    for a format none of them names, `output`'s extension (FORMAT_BY_SUFFIX)."""
    env = os.environ if env is None else env
    file_values, path = load_section("audit", settings_file)
    table = (
        "[audit]" if path is not None and path.name == "lexkeep.toml" else "[tool.lexkeep.audit]"
    )
    check_keys(file_values, set(ENV), table, path)
    where_file = str(path) if path else None
    values: dict[str, Any] = {}
    origin: dict[str, tuple[str, str]] = {}
    for name, var in ENV.items():
        if flags.get(name) is not None:
            values[name] = _parse(name, flags[name], f"--{name.replace('_', '-')}", None)
            origin[name] = ("flag", "")
        elif env.get(var, "").strip():  # empty: unset (a workflow's undefined `${{ vars.X }}`)
            values[name] = _parse(name, env[var], var, None)
            origin[name] = ("env", var)
        elif name in file_values:
            raw = file_values[name]
            _check_toml_type(name, raw, where_file)
            values[name] = _parse(name, raw, f"audit.{name}", where_file)
            origin[name] = ("file", path.name if path else table)
        else:
            origin[name] = ("flag", "")  # the command's default is its flag's
    if "format" not in values and output not in (None, "-"):
        suffix = Path(str(output)).suffix.lower()
        if suffix in FORMAT_BY_SUFFIX:
            values["format"] = FORMAT_BY_SUFFIX[suffix]
    return AuditSettings(**values, origin=origin)


# What a settings file's value must be: TOML has types, so `min_ratio = false` or
# `exit_zero = 1` is a mistake to report, not a value to coerce (flags and environment
# variables are text and are parsed).
_TOML_TYPES: dict[str, tuple[tuple[type, ...], str]] = {
    "min_ratio": ((int, float), "a number from 0 to 1, e.g. 0.95"),
    "fail_on": ((list, str), 'a list of verdicts, e.g. ["altered", "missing"]'),
    "exit_zero": ((bool,), "true or false"),
    "format": ((str,), 'a format name, e.g. "json"'),
    "redact": ((bool,), "true or false"),
}


def _check_toml_type(name: str, raw: Any, path: str | None) -> None:
    types, expected = _TOML_TYPES[name]
    if isinstance(raw, bool) and bool not in types or not isinstance(raw, types):
        raise ConfigError(
            f"audit.{name}: expected {expected}, not {raw!r}",
            path=path,
            hint=f"write {name} = {expected.split('e.g. ')[-1]}",
        )


def _parse(name: str, raw: Any, where: str, path: str | None) -> Any:
    """Validate one setting value (string from env/flag, or a TOML value)."""
    if name == "min_ratio":
        try:
            value = float(raw)
        except (TypeError, ValueError):
            raise ConfigError(
                f"{where}: not a number: {raw!r}", path=path, hint="use a ratio from 0 to 1"
            ) from None
        if not 0.0 <= value <= 1.0:
            raise ConfigError(
                f"{where}: {value} is outside 0..1", path=path, hint="e.g. 0.95 or 1.0"
            )
        return value
    if name == "fail_on":
        items = raw if isinstance(raw, list | tuple) else str(raw).split(",")
        kinds = tuple(dict.fromkeys(str(i).strip().lower() for i in items if str(i).strip()))
        for kind in kinds:
            if kind not in FAIL_ON_CHOICES:
                raise ConfigError(
                    f"{where}: unknown verdict {kind!r}",
                    path=path,
                    hint="choose from: " + ", ".join(FAIL_ON_CHOICES),
                )
        return kinds
    if name == "format":
        return output_format(raw, FORMATS, where, path)
    # booleans: exit_zero, redact
    if isinstance(raw, bool):
        return raw
    text = str(raw).strip().lower()
    if text in _TRUE:
        return True
    if text in _FALSE:
        return False
    raise ConfigError(f"{where}: not a boolean: {raw!r}", path=path, hint="use true or false")
