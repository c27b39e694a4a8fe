"""The index's memory: what it let go of handed back to the system, so that the process's resident size is
what the index holds (`scripts/bench_keyindex_build` measures it); and its freshly mapped files' pages
brought in ahead of the lookups that need them."""

from __future__ import annotations

import ctypes
import mmap
import queue
import threading

import numpy as np
import pyarrow as pa

_WARM: queue.SimpleQueue = queue.SimpleQueue()
_WARMER: list[threading.Thread] = []
_WARMER_LOCK = threading.Lock()


def give_back() -> None:
    """Arrow's pool keeps pages of the files a build read, and glibc keeps freed heap pages (a build's
    chunks, a shard's arrays once it serves from its saved copy) until told: both told."""
    pa.default_memory_pool().release_unused()
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):  # not glibc
        pass


def warm(arrays: list[np.ndarray | None]) -> None:
    """Arrays just mapped from a checkpoint's files, read a word a page by a thread of the process's own.
    A batch's lookups at 10^8 keys meet nearly every page of the index; mapped afresh (a load, a save),
    each page would be faulted in by them, one at a time, in the commit's path (`scripts/bench_keyindex_commit`)."""
    _WARM.put([a for a in arrays if a is not None and len(a)])
    with _WARMER_LOCK:
        if not _WARMER or not _WARMER[0].is_alive():
            _WARMER[:] = [threading.Thread(target=_warming, name="key-index-warming", daemon=True)]
            _WARMER[0].start()


def _warming() -> None:
    while True:
        for a in _WARM.get():
            a[::max(1, mmap.PAGESIZE // a.itemsize)].max()  # numpy lets go of the GIL while it reads
