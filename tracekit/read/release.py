"""Freed memory handed back to the operating system between the stages of a rank's analysis.

A large trace's reading and each analysis stage free many small blocks (a chunk's decoded structs, a stage's working
arrays). The C allocators keep what is freed for reuse: glibc's heap cannot shrink past a block still in use above
the free ones, and Arrow's pool (mimalloc or jemalloc) keeps its pages. Arrays of a later stage larger than glibc's
mmap threshold are mapped afresh instead of reusing that space, so the kept space adds to the peak: on a 4 GB trace,
3.55 GB with ``release_memory`` between the stages against 4.31 GB without (``benchmarks/scale.py --only large``).
Nothing here changes a value; it only returns pages that nothing uses.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools

import pyarrow as pa


@functools.cache
def _malloc_trim():
    """glibc's ``malloc_trim``, or None where the C library has none (macOS, musl)."""
    name = ctypes.util.find_library("c")
    try:
        return ctypes.CDLL(name).malloc_trim if name else None
    except (OSError, AttributeError):
        return None


def release_memory() -> None:
    """Return the pages that Arrow's memory pool and the C heap hold free to the operating system."""
    pa.default_memory_pool().release_unused()
    trim = _malloc_trim()
    if trim is not None:
        trim(0)
