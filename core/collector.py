"""Pausing Python's cyclic garbage collector around allocation-heavy work.

Ingesting, auditing and pairing allocate many small objects (decoded lines, records, rows,
findings) that never form reference cycles: reference counting frees them. The cyclic
collector still walks them every time enough have been allocated, and its full collections
walk every one still alive - up to a fifth of such work's time. Inside `paused()` it does not
run; whatever cycle a library makes meanwhile is found by the next collection after it.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager

# Set by single_shot(): paused() blocks freeze what they leave alive.
_freeze_survivors = False


def single_shot() -> None:
    """Declare a process that exits when its one command is done (the CLI).

    The objects a paused block leaves alive (an audit's findings, a batch's rows) all sit in
    the youngest generation when the collector resumes, so its first collection walks every
    one of them: ~0.3 s after auditing 1 GB. In such a process every paused block ends with
    `gc.freeze()` instead, which leaves them to reference counting alone. A library caller
    that runs for long keeps the default, in which cyclic garbage made inside a block stays
    collectable; here it would only live until exit.
    """
    global _freeze_survivors
    _freeze_survivors = True


@contextmanager
def paused() -> Iterator[None]:
    """Disable the cyclic collector for the block; re-enable it after (if it was enabled)."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if _freeze_survivors:
            gc.freeze()
        if enabled:
            gc.enable()
