"""`core.cache.Cache`, the one cache every part of the engine keeps things in."""

import threading

from appliance.core.cache import Cache
from appliance.tables import datafiles
from appliance.tables.fastpath import parquet, snapshot_index
from appliance.tables.fastpath.changes import MANIFESTS
from appliance.tables.fastpath.manifests import Manifests

from appliance.core.cache import Cache


def test_the_least_recently_used_goes_first():
    made: list[int] = []
    kept: Cache[int, int] = Cache(3)

    def use(key: int) -> int:
        return kept.make(key, lambda: made.append(key) or key * 10)

    assert [use(k) for k in (1, 2, 3, 1, 2, 3)] == [10, 20, 30, 10, 20, 30] and made == [1, 2, 3]
    use(4)  # 1 is the least recently used: it goes
    assert set(kept) == {2, 3, 4}
    use(2), use(1)  # 3 goes
    assert made == [1, 2, 3, 4, 1] and set(kept) == {4, 2, 1}
    use(5)  # then 4
    assert set(kept) == {2, 1, 5}
    assert kept.pop(5) == 50 and kept.pop(5) is None and set(kept) == {2, 1}
    kept.clear()
    assert len(kept) == 0 and kept.get(2) is None


def test_weighed_values_go_while_they_weigh_more_than_the_limit_and_one_too_heavy_is_kept_alone():
    kept: Cache[str, tuple] = Cache(10, weigh=len)
    kept.put("a", (1,) * 4)
    kept.put("b", (1,) * 4)
    kept.put("empty", ())  # weighs 1, never 0: a limit counts what is kept
    assert kept.weight() == 9
    kept.put("c", (1,) * 4)  # 13: a goes (the least recently used), and that is room enough
    assert set(kept) == {"b", "empty", "c"} and kept.weight() == 9
    kept.put("c", (1,) * 2)  # kept again: its new weight
    assert kept.weight() == 7
    kept.put("huge", (1,) * 11)  # heavier than the limit: kept, alone
    assert kept.get("huge") == (1,) * 11 and set(kept) == {"huge"} and kept.weight() == 10
    kept.put("a", (1,))
    assert set(kept) == {"a"}


def test_the_engines_caches_hold_what_200_streams_use_in_turn():
    assert parquet._WRITERS.limit >= 400 and datafiles._METADATA_CACHE.limit >= 400  # tables and dead-letter tables
    assert snapshot_index._indexes.limit == snapshot_index.KEPT
    assert MANIFESTS._entries.limit == Manifests.KEPT_ENTRIES and MANIFESTS._lists.limit == Manifests.KEPT_LISTS


def test_threads_share_one_without_losing_its_bound():
    kept: Cache[int, int] = Cache(50)
    errors: list[BaseException] = []

    def work(offset: int) -> None:
        try:
            for i in range(5000):
                key = (i * 7 + offset) % 200
                assert kept.make(key, lambda: key) == key
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(n,)) for n in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == [] and len(kept) <= 50
