"""Handing memory the index let go of back to the system, so that the process's resident size is what
the index holds (`scripts/bench_keyindex_build` measures it)."""

from __future__ import annotations

import ctypes

import pyarrow as pa


def give_back() -> None:
    """Arrow's pool keeps pages of the files a build read, and glibc keeps freed heap pages (a build's
    chunks, a shard's arrays once it serves from its saved copy) until told: both told."""
    pa.default_memory_pool().release_unused()
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):  # not glibc
        pass
