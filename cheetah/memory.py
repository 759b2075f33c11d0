"""``release_memory``: hand freed heap memory back to the operating system.

PyTorch on CPU allocates through glibc's malloc. glibc serves blocks under its mmap threshold
from heaps it keeps, and that threshold rises (up to 32 MiB) after each large block is freed,
so the KV buffers, activations and logits of an engine or a training step end up in heaps
that never shrink: a process holds the memory of its worst moment, and neighbours (the
engine next to the trainer and the sandboxes on one machine) run out. ``malloc_trim(0)``
returns every free page, wherever it is in the heaps.
Left out: other allocators (jemalloc, tcmalloc) and other C libraries, where this does nothing.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools


@functools.cache
def _libc() -> ctypes.CDLL | None:
    name = ctypes.util.find_library("c")
    try:
        return ctypes.CDLL(name) if name else None
    except OSError:
        return None


def release_memory() -> bool:
    """Return free heap pages to the OS; whether glibc's ``malloc_trim`` was there to call."""
    libc = _libc()
    trim = getattr(libc, "malloc_trim", None) if libc is not None else None
    if trim is None:
        return False
    trim(0)
    return True
