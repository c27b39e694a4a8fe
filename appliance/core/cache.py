"""What a process keeps in memory to use again: bounded, the least recently used out first, shared by threads.

Every cache of the engine is a `Cache` (cachetools' LRU under a lock: every stream's worker thread commits and
writes through the same ones), so how much is kept and what goes first is decided in one place. The catalog's
metadata (`tables/fastpath/sql_catalog.py`) and the small files' rows (`tables/fastpath/recent.py`) keep their
own: what goes there also updates an index of what remains.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Hashable, Iterator
from typing import Generic, TypeVar

from cachetools import LRUCache

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


class Cache(Generic[K, V]):
    """At most `limit` values; with `weigh`, values that weigh at most `limit` together. A value weighs at least 1
    and at most `limit`: one heavier than all the rest together is kept alone rather than not at all (a table's
    one merged manifest of 10^5 files is still read once, not at each commit)."""

    def __init__(self, limit: int, weigh: Callable[[V], int] | None = None) -> None:
        self.limit = limit
        self._lock = threading.Lock()
        self._values: LRUCache = LRUCache(
            limit, getsizeof=None if weigh is None else lambda v: min(limit, max(1, weigh(v))))

    def get(self, key: K) -> V | None:
        """The value kept for `key` (now the most recently used), or None."""
        with self._lock:
            try:
                return self._values[key]  # the key hashed twice (found, then moved), not three times as by `get`
            except KeyError:
                return None

    def put(self, key: K, value: V) -> None:
        """Keep `value` for `key`, the least recently used going while there is no room."""
        with self._lock:
            self._values[key] = value

    def make(self, key: K, make: Callable[[], V]) -> V:
        """The value kept for `key`, made (outside the lock) and kept at its first use."""
        found = self.get(key)
        if found is None:
            found = make()
            self.put(key, found)
        return found

    def pop(self, key: K) -> V | None:
        with self._lock:
            return self._values.pop(key, None)

    def clear(self) -> None:
        with self._lock:
            self._values.clear()

    def __len__(self) -> int:
        return len(self._values)

    def __iter__(self) -> Iterator[K]:
        """The keys kept now, in no particular order (a copy: others may keep and drop meanwhile)."""
        with self._lock:
            return iter(list(self._values.keys()))

    def items(self) -> list[tuple[K, V]]:
        """The keys and values kept now, in no particular order (a copy)."""
        with self._lock:
            return list(self._values.items())

    def weight(self) -> int:
        """What the kept values weigh together (their number, without `weigh`)."""
        return int(self._values.currsize)
