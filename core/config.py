"""Settings files: `[tool.lexkeep.*]` in pyproject.toml, or a `lexkeep.toml` beside it.

Precedence everywhere is: command-line flag, then `LEXKEEP_*` environment variable, then the
settings file, then the built-in default. Unknown keys are errors, never silently ignored.
"""

from __future__ import annotations

import difflib
import errno
import re
import warnings
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from lexkeep.core.errors import ConfigError, SettingsWarning, doing
from lexkeep.core.paths import search_hint, unsearchable_folder

# The tables lexkeep reads from a settings file, one per `load_section` caller (audit/settings.py
# reads "audit", core/rules.py "identifiers"). Any other name there is a typo to report: a
# misspelled table would otherwise leave the built-in defaults in force without a word.
SECTIONS = ("audit", "identifiers")


def find_settings_file(start: Path | None = None) -> Path | None:
    """The nearest `lexkeep.toml` or `pyproject.toml` (with a [tool.lexkeep] table) upwards.

    In one folder lexkeep.toml wins, as ruff.toml does over pyproject.toml: a file made for
    the tool says more than a table in a shared one. A [tool.lexkeep] table it shadows is
    reported with a SettingsWarning, since none of it is read.
    """
    if start is None:
        try:
            start = Path.cwd()
        except OSError:  # the current folder was removed: there is nothing above it to find
            return None
    here = start.resolve()
    folders = (here, *here.parents)
    blocked = unsearchable_folder(here / "lexkeep.toml")
    if blocked is not None:
        # The current folder lies in a folder that may not be searched (another user's home):
        # nothing in it can be read, so the look-up goes on above it, and says so.
        warnings.warn(
            f"{blocked} may not be searched: lexkeep.toml or pyproject.toml in it or below it"
            " is not looked for (Permission denied)",
            SettingsWarning,
            stacklevel=2,
        )
        folders = tuple(Path(blocked).parents)
    for folder in folders:
        own = folder / "lexkeep.toml"
        pyproject = folder / "pyproject.toml"
        if own.is_file():
            if pyproject.is_file() and _has_lexkeep_table(pyproject):
                warnings.warn(
                    f"{pyproject}: [tool.lexkeep] is ignored: {own.name} beside it takes "
                    "precedence (keep the settings in one of the two)",
                    SettingsWarning,
                    stacklevel=2,
                )
            return own
        if pyproject.is_file() and _has_lexkeep_table(pyproject, strict=True):
            return pyproject
    return None


def _has_lexkeep_table(pyproject: Path, *, strict: bool = False) -> bool:
    """Whether pyproject.toml holds [tool.lexkeep]; unreadable counts as no unless `strict`."""
    try:
        tool = read_toml(pyproject).get("tool", {})
        return isinstance(tool, dict) and "lexkeep" in tool
    except ConfigError:
        if strict:
            raise
        return False  # a shadowed pyproject.toml is not read: its errors are not ours to report


@doing("reading settings")
def load_section(section: str, path: Path | None = None) -> tuple[dict[str, Any], Path | None]:
    """The table `section` (e.g. "audit") and the file it came from; empty when absent.

    In `lexkeep.toml` the table is `[section]` (or `[tool.lexkeep.section]`); in
    pyproject.toml it is `[tool.lexkeep.section]`.
    """
    if section not in SECTIONS:
        raise ValueError(f"settings section {section!r} is not in SECTIONS")
    path = path or find_settings_file()
    if path is None:
        return {}, None
    value = _lexkeep_table(read_toml(path), path).get(section, {})
    if not isinstance(value, dict):
        raise ConfigError(f"[tool.lexkeep.{section}] must be a table", path=str(path))
    return value, path


def _lexkeep_table(data: dict[str, Any], path: Path) -> dict[str, Any]:
    """The lexkeep settings of a parsed settings file, every key checked against SECTIONS.

    pyproject.toml holds them in [tool.lexkeep]; lexkeep.toml at its top level, or all of them
    in [tool.lexkeep] like pyproject.toml (one form per file: the other would be ignored).
    """
    if path.name == "pyproject.toml":
        table, where = data.get("tool", {}).get("lexkeep", {}), "[tool.lexkeep]"
    elif "tool" in data:
        tool = data["tool"]
        if not isinstance(tool, dict):
            raise ConfigError("tool must be a table, [tool.lexkeep]", path=str(path))
        beside = [k for k in data if k != "tool"] + [f"tool.{k}" for k in tool if k != "lexkeep"]
        if beside:
            raise ConfigError(
                f"unknown key {beside[0]!r} beside [tool.lexkeep]",
                path=str(path),
                hint="lexkeep.toml holds its tables either at the top level ([audit], "
                "[identifiers]) or all of them under [tool.lexkeep]",
            )
        table, where = tool.get("lexkeep", {}), "[tool.lexkeep]"
    else:
        table, where = data, "lexkeep.toml"
    if not isinstance(table, dict):
        raise ConfigError("[tool.lexkeep] must be a table", path=str(path))
    check_keys(table, set(SECTIONS), where, path)
    return table


# The readable output of every command answers to both names: `audit`, `extract` and
# `compactions` print tables, `stats`, `show`, `compact`, `guard` and `context` text, and a
# user who learnt one command's name types it to the next.
READABLE_FORMATS = ("table", "text")


def output_format(
    raw: object,
    choices: tuple[str, ...],
    where: str = "--format",
    path: str | Path | None = None,
) -> str:
    """`raw` as one of `choices` (case ignored; `table` and `text` name the same readable
    output), else a ConfigError naming `where` and the choices."""
    value = str(raw).strip().lower()
    if value in READABLE_FORMATS and value not in choices:
        value = next((c for c in READABLE_FORMATS if c in choices), value)
    if value not in choices:
        raise ConfigError(
            f"{where}: unknown format {raw!r}", path=path, hint="choose from: " + ", ".join(choices)
        )
    return value


def check_keys(values: dict[str, Any], allowed: set[str], where: str, path: Path | None) -> None:
    """Raise ConfigError naming the first key of `values` that is not in `allowed`."""
    for key in values:
        if key not in allowed:
            raise ConfigError(
                f"unknown key {key!r} in {where}",
                path=str(path) if path else None,
                hint=unknown_key_hint(key, allowed),
            )


def unknown_key_hint(key: str, allowed: Iterable[str]) -> str:
    """`did you mean 'x'? ` when a known key is close to `key`, then every known key."""
    known = sorted(allowed)
    close = difflib.get_close_matches(key.lower(), known, n=1)
    guess = f"did you mean {close[0]!r}? " if close else ""
    return guess + "known keys: " + ", ".join(known)


SETTINGS_HINT = (
    "the lexkeep settings live in [tool.lexkeep.audit] and [tool.lexkeep.identifiers]"
    " (in lexkeep.toml: [audit] and [identifiers]); fix the TOML syntax at that position"
)


def read_toml(
    path: Path,
    *,
    error: type[ConfigError] = ConfigError,
    what: str = "settings",
    hint: str = SETTINGS_HINT,
) -> dict[str, Any]:
    """The parsed TOML file; invalid TOML is `error` at path:line:col with `hint`.

    Settings files and --rules files both read through here, so a syntax error reads the
    same in either.
    """
    import tomllib  # imported by the commands that read a file: `lexkeep context` reads none

    try:
        with path.open("rb") as fh:
            return tomllib.load(fh)
    except tomllib.TOMLDecodeError as exc:
        # tomllib puts the position in the message ("(at line 1, column 20)") before 3.14;
        # move it into file:line:col like every other error.
        where = re.search(r" \(at line (\d+), column (\d+)\)$", str(exc))
        line, col = (int(where[1]), int(where[2])) if where else (None, None)
        reason = str(exc)[: where.start()] if where else str(exc)
        raise error(
            f"invalid TOML: {reason}", path=str(path), line=line, col=col, hint=hint
        ) from exc
    except OSError as exc:
        blocked = unsearchable_folder(path) if exc.errno in (errno.EACCES, errno.EPERM) else None
        refused = exc.errno in (errno.EACCES, errno.EPERM) and blocked is None
        raise error(
            f"cannot read {what}: {exc.strerror}",
            path=str(path),
            hint=search_hint(blocked) if blocked else f"make {path} readable" if refused else None,
        ) from exc
