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


@contextmanager
def paused() -> Iterator[None]:
    """Disable the cyclic collector for the block; re-enable it after (if it was enabled)."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()
