"""The C heap's free memory, given back to the system before the worker forks.

Where the installation could not build the confined-start helper (`confine`), a confined command is started
by a fork of the whole worker (`spawner.ConfinedSpawner`), and a fork costs
time for every resident page of the parent: its page tables are copied, and its pages are shared
copy-on-write until the exec. Memory that Python has freed stays resident in glibc's heap, though: after a
command's output or an export has passed through in chunks, the worker keeps tens of MiB it no longer uses,
and each later confined start takes twice as long. `trim` returns that memory first.
"""

from __future__ import annotations

import ctypes
import sys
from collections.abc import Callable


def _malloc_trim() -> Callable[[int], int] | None:
    if sys.platform != "linux":
        return None
    try:
        function = ctypes.CDLL(None).malloc_trim  # glibc only: musl, for one, has none
    except AttributeError:
        return None
    function.argtypes = [ctypes.c_size_t]
    function.restype = ctypes.c_int
    trim: Callable[[int], int] = function
    return trim


_MALLOC_TRIM = _malloc_trim()


def trim() -> None:
    """Give the heap's free memory back to the system (glibc's `malloc_trim(0)`): some microseconds when
    there is none, a few milliseconds once after a large burst; nothing where the C library has no such call."""
    if _MALLOC_TRIM is not None:
        _MALLOC_TRIM(0)
