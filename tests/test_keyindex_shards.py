"""The key index's shards: a batch looked up over every shard at once (`Shards.find`) finds what the plain
per-shard search it replaced found, and what a dictionary of the shards' contents says."""

from __future__ import annotations

import numpy as np
import pytest

from appliance.mergeonread.segments import DEAD, TOMB
from appliance.mergeonread.shards import SHARD_BITS, SHARDS, Found, Shards, _search, shard_of


def plain_find(shards: Shards, h: np.ndarray, low: np.ndarray | None) -> Found:
    """The per-shard form `Shards.find` replaced: each shard's keys searched in its main part, then its delta."""
    n = len(h)
    found = Found(shard_of(h), np.zeros(n, dtype=np.int8), np.full(n, -1, dtype=np.int64),
                  np.full(n, DEAD, dtype=np.uint64))
    for s, rows in shards._groups(h):
        part, ql = shards.parts[s], None if low is None else low[rows]
        slot = _search(part.h, part.low, h[rows], ql)
        where = np.where(slot >= 0, 1, 0).astype(np.int8)
        if len(part.dh):
            missing = np.flatnonzero(slot < 0)
            got = _search(part.dh, part.dlow, h[rows][missing], None if ql is None else ql[missing])
            slot[missing[got >= 0]], where[missing[got >= 0]] = got[got >= 0], 2
        location = np.full(len(rows), DEAD, dtype=np.uint64)
        location[where == 1] = part.loc[slot[where == 1]]
        location[where == 2] = part.dloc[slot[where == 2]]
        found.where[rows], found.slot[rows], found.location[rows] = where, slot, location
    return found


def contents(shards: Shards) -> dict[tuple[int, int], tuple[int, int, int]]:
    """Every key the shards hold -> (where, slot, location), read off their arrays one by one."""
    out = {}
    for part in shards.parts:
        for where, h, low, loc in ((1, part.h, part.low, part.loc), (2, part.dh, part.dlow, part.dloc)):
            for i in range(len(h)):
                out.setdefault((int(h[i]), 0 if low is None else int(low[i])), (where, i, int(loc[i])))
    return out


def filled(wide: bool, rng: np.random.Generator) -> tuple[Shards, np.ndarray, np.ndarray | None]:
    """Shards of keys in main parts and deltas, rows, deleted keys and tombstones, some shards empty, and
    (two-word keys) many keys sharing a high word."""
    shards = Shards(wide)
    empty = {3, 200}  # shards holding nothing
    n = 60_000
    h = rng.integers(0, 2**64, n, dtype=np.uint64)
    h = h[~np.isin(shard_of(h), list(empty))]
    if wide:
        h[: len(h) // 10] = h[len(h) // 10: 2 * (len(h) // 10)]  # a tenth share their high word with another
    low = rng.integers(0, 2**64, len(h), dtype=np.uint64) if wide else None
    locations = rng.integers(0, 2**40, len(h), dtype=np.uint64)
    locations[::7] = DEAD
    locations[1::11] = TOMB | np.uint64(12345)
    half = len(h) // 2
    for start, stop, merge in ((0, half, True), (half, len(h), False)):  # the first half merged into main parts
        for s in range(SHARDS):
            mine = np.flatnonzero(shard_of(h[start:stop]) == s) + start
            shards.parts[s].insert(h[mine], None if low is None else low[mine], locations[mine])
            if merge:
                shards.parts[s].merge()
    return shards, h, low


@pytest.mark.parametrize("wide", [False, True])
def test_a_batch_over_every_shard_finds_what_the_per_shard_search_and_the_shards_contents_say(wide):
    rng = np.random.default_rng(34)
    shards, h, low = filled(wide, rng)
    assert any(len(p.dh) for p in shards.parts) and any(len(p.h) for p in shards.parts)
    absent = rng.integers(0, 2**64, 5_000, dtype=np.uint64)
    pick = rng.permutation(len(h))[:20_000]
    qh = np.concatenate([h[pick], absent, h[:50]])  # known keys, unknown ones, and keys asked twice
    ql = None if low is None else np.concatenate([low[pick], rng.integers(0, 2**64, 5_000, dtype=np.uint64),
                                                  low[:50]])
    if wide:  # a known high word with another low word: absent
        qh, ql = np.append(qh, h[0]), np.append(ql, ~low[0])
    fast, plain = shards.find(qh, ql), plain_find(shards, qh, ql)
    for name in ("shard", "where", "slot", "location"):
        assert np.array_equal(getattr(fast, name), getattr(plain, name)), name
    truth = contents(shards)
    for i in range(len(qh)):
        expected = truth.get((int(qh[i]), 0 if ql is None else int(ql[i])), (0, -1, int(DEAD)))
        assert (int(fast.where[i]), int(fast.slot[i]), int(fast.location[i])) == expected, i
    assert (fast.where == 0).sum() >= 5_000 and (fast.where == 2).any() and (fast.where == 1).any()
    assert (shard_of(qh) == (qh >> np.uint64(64 - SHARD_BITS)).astype(np.int64)).all()


def test_an_empty_batch_and_an_empty_index():
    shards = Shards(True)
    none = shards.find(np.empty(0, dtype=np.uint64), np.empty(0, dtype=np.uint64))
    assert len(none.where) == 0
    some = shards.find(np.array([1, 2**63], dtype=np.uint64), np.array([5, 6], dtype=np.uint64))
    assert (some.where == 0).all() and (some.slot == -1).all() and (some.location == DEAD).all()
