"""Trace paths in the store: how a store records them, and how reports show them.

A store on disk outlives the folder an ingest ran in, so it records every trace path absolute
(`os.path.abspath`: symlinks are kept as the user named them, only `.` and `..` go) and
standard input as '-'. A report shows such a path relative to the current folder when the file
lies under it, else absolute, so `file:line` opens from wherever the report was made. A store in
memory (`lexkeep audit FILE...`) lives in one process: it records and shows each path exactly as
it was given.

Paths a store written before this rule holds relative stay as they are (relative to the folder
that ingest ran in); pseudo paths such as `lexkeep:compactions/<id>` are never absolute and are
shown unchanged too.
"""

from __future__ import annotations

import os
import re
import sys

STDIN = "-"

# A rotated copy of a trace file: logrotate's `requests.jsonl.1`, `requests.jsonl.2.gz`, or a
# dated one (`dateext`: `requests.jsonl-20250109`).
ROTATED = re.compile(
    r"(?P<base>.+\.(?:jsonl|json|ndjson))(?P<sep>[._-])(?P<suffix>[0-9](?:[0-9._-]*[0-9])?)"
    r"(?:\.gz)?\Z",
    re.IGNORECASE,
)


def rotated_log(path: str) -> tuple[tuple[str, str], bool]:
    """The log `path` is a file of, as (absolute folder, name of its current file), and whether
    `path` is a rotated copy of it (`requests.jsonl.1` is a copy of `requests.jsonl`, which is
    the current file of its own log)."""
    folder, name = os.path.split(os.path.abspath(path))
    got = ROTATED.match(name)
    return (folder, name if got is None else got["base"]), got is not None


def log_name(path: str) -> str:
    """The name the files of `path`'s log share (`rotated_log`), without `.gz`: `requests.jsonl`
    for `requests.jsonl`, `requests.jsonl.1`, `requests.jsonl.2.gz`, `requests.jsonl-20250109`;
    'stdin' for standard input."""
    if path == STDIN:
        return "stdin"
    name = os.path.basename(path)
    got = ROTATED.match(name)
    return (name if got is None else got["base"]).removesuffix(".gz")


def stored_path(path: str) -> str:
    """How a store on disk records the trace `path`: absolute, '-' (standard input) as is."""
    return path if path == STDIN else os.path.abspath(path)


def shown_path(path: str, cwd: str | None) -> str:
    """`path` as a report shows it: relative to `cwd` when it lies under it, else unchanged.

    `cwd` None shows every path unchanged (a store that records paths as given).
    """
    if cwd is None or not os.path.isabs(path):
        return path
    prefix = cwd if cwd.endswith(os.sep) else cwd + os.sep
    if os.path.normcase(path).startswith(os.path.normcase(prefix)) and len(path) > len(prefix):
        return path[len(prefix) :]
    return path


def current_folder() -> str | None:
    """The current working folder, or None when it no longer exists (then paths stay absolute)."""
    try:
        return os.getcwd()
    except OSError:
        return None


class ShownPaths(dict[str, str]):
    """Stored path -> shown path (`shown_path`), each computed once and interned.

    Reports look up the same few file names for every finding: a dict lookup costs no more
    than the `sys.intern` it replaces.
    """

    def __init__(self, cwd: str | None) -> None:
        super().__init__()
        self.cwd = cwd

    def __missing__(self, path: str) -> str:
        shown = self[path] = sys.intern(shown_path(path, self.cwd))
        return shown


def unsearchable_folder(path: str | os.PathLike[str]) -> str | None:
    """The outermost folder above `path` that exists but may not be searched (no `x`
    permission for this process), absolute; None when every folder above it may be.

    Nothing in such a folder can be opened, looked at or created, whatever its own
    permissions: a file in a folder of mode 600 is refused though the folder is writable.
    """
    folder = os.path.dirname(os.path.abspath(path))
    chain = [folder]
    while True:
        parent = os.path.dirname(chain[-1])
        if parent == chain[-1]:
            break
        chain.append(parent)
    for candidate in reversed(chain):  # from the root down: the first refusal is the cause
        if not os.access(candidate, os.X_OK):
            return candidate if os.path.isdir(candidate) else None
    return None


def search_hint(folder: str) -> str:
    """What to do about `folder`, which may not be searched (`unsearchable_folder`); nor
    read, when it may not be listed either."""
    wanted = (
        "searchable (its x permission)"
        if os.access(folder, os.R_OK)
        else "readable and searchable (its r and x permissions)"
    )
    return f"make the folder {folder} {wanted}: nothing in it can be reached without it"
