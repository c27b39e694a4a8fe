"""The index's keys and locations: sorted numpy arrays in 256 shards, cut by the top bits of a key's
spread high word (`keyforms.mix`).

Each shard holds its keys sorted (the high word, and for two-word keys the low word beside it) with one
location each, 16 or 24 bytes a key, and a small sorted delta of new keys, merged in once it passes an
eighth of the shard: one shard's copy at a time, never the whole index's. A deleted key keeps its place
with the location DEAD (or a tombstone, `segments.TOMB`) until that merge, so a key that comes back
costs nothing; a merge drops tombstones older than every partition's clock (no message can come that
they would beat). Lookups are `np.searchsorted`, one call per shard for a whole batch.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from appliance.mergeonread.segments import DEAD, TOMB_TIME_BITS, live

SHARD_BITS = 8
SHARDS = 1 << SHARD_BITS
MIN_DELTA = 4096  # a shard's delta merges once it holds this many keys, or an eighth of the shard


def _empty() -> np.ndarray:
    return np.empty(0, dtype=np.uint64)


def _search(h: np.ndarray, low: np.ndarray | None, qh: np.ndarray, ql: np.ndarray | None) -> np.ndarray:
    """The slot of each query key in sorted (h, low), or -1. Keys sharing a high word (rare: two-word keys
    only) are compared one by one."""
    n = len(h)
    at = np.searchsorted(h, qh)
    ok = at < n
    ok[ok] = h[at[ok]] == qh[ok]
    if low is not None:
        same = ok.copy()
        same[ok] = low[at[ok]] == ql[ok]
        for i in np.flatnonzero(ok & ~same):  # another key with this high word sits first
            j = at[i] + 1
            while j < n and h[j] == qh[i]:
                if low[j] == ql[i]:
                    same[i], at[i] = True, j
                    break
                j += 1
        ok = same
    return np.where(ok, at, -1)


class Shard:
    __slots__ = ("dh", "dirty", "dloc", "dlow", "h", "loc", "low", "sequence")

    def __init__(self, wide: bool) -> None:
        self.h, self.loc = _empty(), _empty()
        self.low = _empty() if wide else None
        self.dh, self.dloc = _empty(), _empty()
        self.dlow = _empty() if wide else None
        self.dirty = True  # changed since it was last saved (a new shard has no saved copy)
        self.sequence = -1  # the sequence number of the snapshot its saved copy reflects

    def __len__(self) -> int:
        return len(self.h) + len(self.dh)

    def put(self, where: np.ndarray, slot: np.ndarray, locations: np.ndarray) -> None:
        """Set the locations of keys found (`where` 1 or 2)."""
        main, delta = where == 1, where == 2
        if main.any():
            if not self.loc.flags.writeable:
                self.loc = self.loc.copy()
            self.loc[slot[main]] = locations[main]
        if delta.any():
            self.dloc[slot[delta]] = locations[delta]
        self.dirty = True

    def insert(self, qh: np.ndarray, ql: np.ndarray | None, locations: np.ndarray, watermark: int = 0) -> None:
        """New keys (none present), into the delta."""
        if not len(qh):
            return
        h = np.concatenate([self.dh, qh])
        order = np.argsort(h, kind="stable")
        self.dh, self.dloc = h[order], np.concatenate([self.dloc, locations])[order]
        if ql is not None:
            self.dlow = np.concatenate([self.dlow, ql])[order]
        self.dirty = True
        if len(self.dh) >= max(MIN_DELTA, len(self.h) // 8):
            self.merge(watermark)

    def merge(self, watermark: int = 0) -> None:
        """The delta into the sorted keys; deleted keys out, and tombstones older than `watermark` (ms)."""
        keep, dkeep = _kept(self.loc, watermark), _kept(self.dloc, watermark)
        if not len(self.dh) and keep.all():
            return
        h, loc, dh = self.h[keep], self.loc[keep], self.dh[dkeep]
        at = np.searchsorted(h, dh)
        self.h, self.loc = np.insert(h, at, dh), np.insert(loc, at, self.dloc[dkeep])
        if self.low is not None:
            self.low = np.insert(self.low[keep], at, self.dlow[dkeep])
            self.dlow = _empty()
        self.dh, self.dloc = _empty(), _empty()
        self.dirty = True

    def locations(self) -> list[np.ndarray]:
        return [self.loc, self.dloc]

    def replace_locations(self, main: np.ndarray, delta: np.ndarray) -> None:
        self.loc, self.dloc = main, delta
        self.dirty = True

    def nbytes(self) -> int:
        arrays = (self.h, self.low, self.loc, self.dh, self.dlow, self.dloc)
        return sum(a.nbytes for a in arrays if a is not None)


def _kept(locations: np.ndarray, watermark: int) -> np.ndarray:
    """Rows, and tombstones at or after `watermark` (ms)."""
    stale = locations == DEAD
    if watermark > 0:
        tomb = ~live(locations) & ~stale
        if tomb.any():
            stale |= tomb & ((locations & np.uint64((1 << TOMB_TIME_BITS) - 1)).astype(np.int64) < watermark)
    return ~stale


def shard_of(h: np.ndarray) -> np.ndarray:
    return (h >> np.uint64(64 - SHARD_BITS)).astype(np.int64)


@dataclass
class Found:
    """Where a batch's keys are: per key, its shard, where in it (0 absent, 1 main, 2 delta), its slot,
    and its location (DEAD when absent, a tombstone when deleted)."""

    shard: np.ndarray
    where: np.ndarray
    slot: np.ndarray
    location: np.ndarray

    @property
    def present(self) -> np.ndarray:
        """Keys with a row."""
        return live(self.location)


class Shards:
    """All of an index's shards, and the operations over a batch of keys that route to them."""

    def __init__(self, wide: bool) -> None:
        self.wide = wide
        self.parts = [Shard(wide) for _ in range(SHARDS)]
        self.watermark = 0  # ms: tombstones older than this are let go at merges

    def __len__(self) -> int:
        return sum(len(s) for s in self.parts)

    def keys(self) -> int:
        """Keys with a row (not counting tombstones)."""
        return sum(int(np.count_nonzero(live(a))) for s in self.parts for a in s.locations())

    def _groups(self, h: np.ndarray):
        """(shard, the rows of `h` in it, in order of h): one sort of the batch, then a slice per shard."""
        order = np.argsort(h)
        top = h[order] >> np.uint64(64 - SHARD_BITS)
        bounds = np.searchsorted(top, np.arange(SHARDS + 1, dtype=np.uint64))
        for s in np.flatnonzero(np.diff(bounds)).tolist():
            yield s, order[bounds[s]:bounds[s + 1]]

    def find(self, h: np.ndarray, low: np.ndarray | None) -> Found:
        """Where each key is. The batch is sorted once; per shard only what its own arrays need (a search,
        and gathers at the slots found), the comparisons once over the whole batch: at 10^8 keys a batch
        meets every shard, and its searches and gathers are what costs (`scripts/bench_keyindex_commit`)."""
        order = np.argsort(h)
        qh, ql = h[order], None if low is None else low[order]
        bounds = np.searchsorted(qh >> np.uint64(64 - SHARD_BITS), np.arange(SHARDS + 1, dtype=np.uint64)).tolist()
        busy = [s for s in range(SHARDS) if bounds[s + 1] > bounds[s]]
        n = len(h)
        slot, th = np.zeros(n, dtype=np.int64), ~qh  # the slot found in each main part, and its key's high word
        tl = None if ql is None else np.empty(n, dtype=np.uint64)
        for s in busy:
            a, b, part = bounds[s], bounds[s + 1], self.parts[s]
            if len(part.h):
                at = np.searchsorted(part.h, qh[a:b])
                slot[a:b] = np.minimum(at, len(part.h) - 1, out=at)
                th[a:b] = part.h[at]
                if tl is not None:
                    tl[a:b] = part.low[at]
        ok = th == qh
        if tl is not None:
            ok = self._beside(ok, ok & (tl == ql), bounds, qh, ql, slot)
        where, location = ok.astype(np.int8), np.full(n, DEAD, dtype=np.uint64)
        slot[~ok] = -1
        for s in busy:  # the locations of the keys found; the deltas searched for the others
            a, b, part = bounds[s], bounds[s + 1], self.parts[s]
            hit = a + np.flatnonzero(ok[a:b])
            location[hit] = part.loc[slot[hit]]
            if len(part.dh):
                rest = a + np.flatnonzero(~ok[a:b])
                at = _search(part.dh, part.dlow, qh[rest], None if ql is None else ql[rest])
                got, at = rest[at >= 0], at[at >= 0]
                slot[got], where[got], location[got] = at, 2, part.dloc[at]
        found = Found(shard_of(h), np.empty(n, dtype=np.int8), np.empty(n, dtype=np.int64), np.empty(n, np.uint64))
        found.where[order], found.slot[order], found.location[order] = where, slot, location
        return found

    def _beside(self, high: np.ndarray, same: np.ndarray, bounds: list[int], qh: np.ndarray, ql: np.ndarray,
                slot: np.ndarray) -> np.ndarray:
        """Two-word keys whose high word matched another key's first (rare): the ones after it are looked at."""
        for i in np.flatnonzero(high & ~same).tolist():
            s = int(np.searchsorted(bounds, i, side="right")) - 1
            part, j = self.parts[s], int(slot[i]) + 1
            while j < len(part.h) and part.h[j] == qh[i]:
                if part.low[j] == ql[i]:
                    same[i], slot[i] = True, j
                    break
                j += 1
        return same

    def assign(self, h: np.ndarray, low: np.ndarray | None, found: Found, locations: np.ndarray) -> None:
        """Keys (as `find` found them) to `locations`: found ones changed in place (DEAD deletes), absent
        ones inserted unless DEAD."""
        for s, rows in self._groups(h):
            part = self.parts[s]
            where = found.where[rows]
            part.put(where, found.slot[rows], locations[rows])
            new = rows[(where == 0) & (locations[rows] != DEAD)]
            if len(new):
                part.insert(h[new], None if low is None else low[new], locations[new], self.watermark)

    def nbytes(self) -> int:
        return sum(s.nbytes() for s in self.parts)
