"""Give memory that was freed back to the operating system, where the C library keeps it.

A pass over a million block files allocates and frees a chunk's worth of buffers a few hundred
times, between allocations that live on (the compact columns). glibc's allocator keeps the
freed space between them for reuse instead of returning it, which showed as ~200 MB of
resident memory that no object held at a million blocks. :func:`release_free_memory` asks it
to return that space (``malloc_trim``); elsewhere (another C library, another system) it does
nothing.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import sys
from collections.abc import Callable


@functools.cache
def _trim() -> Callable[[int], int] | None:
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        trim = libc.malloc_trim  # glibc only: musl has none
    except (OSError, AttributeError):
        return None
    trim.argtypes, trim.restype = [ctypes.c_size_t], ctypes.c_int
    return trim


def release_free_memory() -> None:
    """Return the allocator's free space to the system (cheap: milliseconds)."""
    trim = _trim()
    if trim is not None:
        trim(0)
