"""The garbage collector of a process that lives long over a large heap: what has lived a while, frozen.

CPython's full collection walks every object not frozen, and runs once the objects promoted since the last
one reach a quarter of those it then found alive, after ten collections of the middle generation. In the
engine, with 200 streams committing 50 times a second, every few seconds' promotions (a commit's metadata, a
batch's rows, alive across two young collections and soon dead) made that quarter: two or three full
collections a minute, each a pause of every thread growing with the heap, 0.1 s at the start and 1 s at the
44th minute, 0.034 cores over an hour (`scripts/bench_many_streams`, BENCHMARKS.md; 0.012 with this). What has
lived a minute is mostly what lives long (tables' metadata, kept manifests, the streams' state): frozen, no
collection walks it again, and the collections between walk what is newer. The whole heap is collected again
every `full_every` seconds, so that cycles that died among the frozen objects meanwhile are freed then.

The youngest generation's collections are made rarer too (`young`: CPython's default is one every 700 objects
made and not yet freed): the engine's commits and batches build objects by the thousand that live a fraction of
a second, freed by their counts anyway, and a young collection walked them, and whatever lists they held, at
each 700.

Spark's Python worker daemon freezes after each task, the engine each minute (`Collector.due`).
"""

from __future__ import annotations

import gc
import time
from collections.abc import Callable


class Collector:
    """Collect what is not frozen and freeze what survives; now and then the whole heap first."""

    def __init__(self, full_every: float, freeze_every: float = 0.0, young: int | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        if young is not None:
            gc.set_threshold(young, *gc.get_threshold()[1:])
        self.full_every = full_every
        self.freeze_every = freeze_every
        self.clock = clock
        now = clock()
        self._full_at = now + full_every
        self._freeze_at = now + freeze_every
        self.full_collections = 0

    def due(self) -> bool:
        """Whether `freeze_every` seconds have passed since the last `collect`."""
        return self.clock() >= self._freeze_at

    def collect(self) -> int:
        """The objects found unreachable: among those made since the last freeze, or, once `full_every` seconds
        have passed since the last whole collection, among all of them."""
        now = self.clock()
        if now >= self._full_at:
            self._full_at = now + self.full_every
            self.full_collections += 1
            gc.unfreeze()
        found = gc.collect()
        gc.freeze()
        self._freeze_at = now + self.freeze_every
        return found
