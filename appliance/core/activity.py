"""Background work that gives way to the streams: maintenance runs in the gaps between their batches.

Trickling streams work in bursts: on each tick of the commit grid a share of them plan, read and commit,
a few hundred milliseconds, and the rest of the second is quiet. Run beside a burst, maintenance's Python work
(an expiry reading manifests back, a compaction merging small files) takes the interpreter from the commits:
measured with 200 streams, a batch that overlapped a maintenance task took 0.50 s on average (p95 0.95 s) against
0.31 s (0.55 s) for one that did not. Started in a quiet gap, and pausing at its safe points while a burst runs, the same work
waits a little and the batches do not.

It is a courtesy, never a condition: a wait lasts at most `patience`, and the waits together never last longer
than the work between them (and one patience more), so that an engine never quiet (a busy stream always in a
batch) at most doubles its maintenance's time, and never stops it.
"""

from __future__ import annotations

import contextvars
import threading
import time
from contextlib import contextmanager
from typing import Iterator

PATIENCE = 1.0  # seconds a safe point waits at most for the streams' batches to end


class Activity:
    """How many stream steps are under way (planning, reading and committing a batch), and a wait for none."""

    def __init__(self) -> None:
        self._cond = threading.Condition(threading.Lock())
        self._steps = 0

    @contextmanager
    def step(self) -> Iterator[None]:
        with self._cond:
            self._steps += 1
        try:
            yield
        finally:
            with self._cond:
                self._steps -= 1
                if not self._steps:
                    self._cond.notify_all()

    @property
    def busy(self) -> bool:
        return self._steps > 0

    def wait_quiet(self, timeout: float) -> bool:
        """Wait until no step is under way, at most `timeout` seconds; whether none is."""
        with self._cond:
            return self._cond.wait_for(lambda: not self._steps, timeout)


class Gate:
    """Where background work waits for a quiet moment (`give_way`): each wait as long as the work done since the
    last one has earned (at most `patience`), so that waits take at most half of the work's time."""

    def __init__(self, activity: Activity, patience: float = PATIENCE) -> None:
        self.activity = activity
        self.patience = patience
        self._credit = patience  # seconds the next safe point may wait
        self._resumed = time.monotonic()  # when the work last went on after a safe point
        self.waits = 0  # safe points that found streams at work
        self.ran_out = 0  # of them, those that went on beside them
        self.waited = 0.0  # seconds waited at them, in all

    def give_way(self) -> None:
        now = time.monotonic()
        self._credit = min(self.patience, self._credit + now - self._resumed)
        self._resumed = now
        if not self.activity.busy or self._credit <= 0:
            return
        self.waits += 1
        if not self.activity.wait_quiet(self._credit):
            self.ran_out += 1
        self._resumed = time.monotonic()
        self._credit -= self._resumed - now
        self.waited += self._resumed - now


_GATE: contextvars.ContextVar[Gate | None] = contextvars.ContextVar("floe_background_gate", default=None)


@contextmanager
def giving_way(gate: Gate | None) -> Iterator[None]:
    """Meanwhile `give_way()` in this thread waits at `gate` (None: it never waits, as outside the engine)."""
    token = _GATE.set(gate)
    try:
        yield
    finally:
        _GATE.reset(token)


def give_way() -> None:
    """A safe point of background work (no table's commit lock held): wait for a quiet moment, if the caller is
    background work in an engine whose streams are in a batch now."""
    gate = _GATE.get()
    if gate is not None:
        gate.give_way()
