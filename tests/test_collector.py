"""core/collector: what survives a collection is frozen out of the next ones, and the whole heap is collected
again on its schedule (cycles that died frozen freed then)."""

import gc
import weakref

import pytest

from appliance.core.collector import Collector


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class Node:
    def __init__(self) -> None:
        self.other = self


@pytest.fixture
def thawed():
    gc.unfreeze()
    thresholds = gc.get_threshold()
    yield
    gc.unfreeze()  # the test process's heap is collected as before
    gc.set_threshold(*thresholds)


def test_freezes_what_survives_and_frees_dead_frozen_cycles_at_the_whole_collection(thawed):
    clock = Clock()
    collector = Collector(full_every=600, freeze_every=60, clock=clock)
    cycle = Node()  # a cycle: only a collection frees it once unreferenced
    freed = []
    weakref.finalize(cycle, freed.append, True)

    collector.collect()
    assert gc.get_freeze_count() > 0 and not any(o is cycle for o in gc.get_objects())  # frozen
    del cycle
    gc.collect()
    assert freed == []  # frozen: no collection walks it

    clock.now += 300
    collector.collect()  # the last whole collection is 300 s old of 600: still frozen
    assert freed == []

    clock.now += 300
    collector.collect()
    assert freed == [True] and collector.full_collections == 1


def test_a_cycle_that_dies_before_the_freeze_is_collected_then(thawed):
    collector = Collector(full_every=600, freeze_every=60, clock=Clock())
    cycle = Node()
    freed = []
    weakref.finalize(cycle, freed.append, True)
    del cycle
    collector.collect()
    assert freed == [True]


def test_due_every_freeze_interval_after_the_last_collection(thawed):
    clock = Clock()
    collector = Collector(full_every=600, freeze_every=60, clock=clock)
    assert not collector.due()
    clock.now += 59.9
    assert not collector.due()
    clock.now += 0.1
    assert collector.due()
    collector.collect()
    assert not collector.due()
    clock.now += 60
    assert collector.due()


def test_young_collections_made_rarer_when_asked(thawed):
    older = gc.get_threshold()[1:]
    Collector(full_every=600, young=10_000, clock=Clock())
    assert gc.get_threshold() == (10_000, *older)
