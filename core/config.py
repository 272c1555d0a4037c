"""Settings files: `[tool.lexkeep.*]` in pyproject.toml, or a `lexkeep.toml` beside it.

Precedence everywhere is: command-line flag, then `LEXKEEP_*` environment variable, then the
settings file, then the built-in default. Unknown keys are errors, never silently ignored.
"""

from __future__ import annotations

import re
import tomllib
from pathlib import Path
from typing import Any

from lexkeep.core.errors import ConfigError


def find_settings_file(start: Path | None = None) -> Path | None:
    """The nearest `lexkeep.toml` or `pyproject.toml` (with a [tool.lexkeep] table) upwards."""
    here = (start or Path.cwd()).resolve()
    for folder in (here, *here.parents):
        own = folder / "lexkeep.toml"
        if own.is_file():
            return own
        pyproject = folder / "pyproject.toml"
        if pyproject.is_file() and "lexkeep" in _read(pyproject).get("tool", {}):
            return pyproject
    return None


def load_section(section: str, path: Path | None = None) -> tuple[dict[str, Any], Path | None]:
    """The table `section` (e.g. "audit") and the file it came from; empty when absent.

    In `lexkeep.toml` the table is `[section]` (or `[tool.lexkeep.section]`); in
    pyproject.toml it is `[tool.lexkeep.section]`.
    """
    path = path or find_settings_file()
    if path is None:
        return {}, None
    data = _read(path)
    table = data.get("tool", {}).get("lexkeep", {})
    if path.name != "pyproject.toml" and not table:
        table = data
    value = table.get(section, {})
    if not isinstance(value, dict):
        raise ConfigError(f"[tool.lexkeep.{section}] must be a table", path=str(path))
    return value, path


def check_keys(values: dict[str, Any], allowed: set[str], where: str, path: Path | None) -> None:
    """Raise ConfigError naming the first key of `values` that is not in `allowed`."""
    for key in values:
        if key not in allowed:
            raise ConfigError(
                f"unknown key {key!r} in {where}",
                path=str(path) if path else None,
                hint="known keys: " + ", ".join(sorted(allowed)),
            )


def _read(path: Path) -> dict[str, Any]:
    try:
        with path.open("rb") as fh:
            return tomllib.load(fh)
    except tomllib.TOMLDecodeError as exc:
        # tomllib puts the position in the message ("(at line 1, column 20)") before 3.14;
        # move it into file:line:col like every other error.
        where = re.search(r" \(at line (\d+), column (\d+)\)$", str(exc))
        line, col = (int(where[1]), int(where[2])) if where else (None, None)
        reason = str(exc)[: where.start()] if where else str(exc)
        raise ConfigError(
            f"invalid TOML: {reason}",
            path=str(path),
            line=line,
            col=col,
            hint="the lexkeep settings live in [tool.lexkeep.audit] and "
            "[tool.lexkeep.identifiers]; fix the TOML syntax at that position",
        ) from exc
    except OSError as exc:
        raise ConfigError(f"cannot read settings: {exc.strerror}", path=str(path)) from exc
