"""The stream workers take turns at the driver's Python work.

Hundreds of stream workers wake on the same grid tick, and each plans, then commits, its own batch. Runnable all at
once, they hand the GIL to one another at every I/O call of a commit (a file written, a SQLite statement): measured
with 200 streams, 70 context switches a batch and a third of the workers' CPU in the kernel. Taking turns, a worker
runs its Python work while the others sleep on one lock: a few switches a batch, the same work done.

The turn is a courtesy, never a condition of correctness: a worker waits for it only until its holder has held it
`patience` seconds, then goes on beside it. A worker stuck in a dependency's timeout (a catalog that does not
answer, an upsert table's key index being built) slows the others by at most that, once, not for as long as it
is stuck.
"""

from __future__ import annotations

import threading
import time
from contextlib import contextmanager
from typing import Iterator

PATIENCE = 0.5  # seconds a turn is waited for, counted from when its holder took it


class Turns:
    def __init__(self, patience: float = PATIENCE) -> None:
        self.patience = patience
        self._lock = threading.Lock()
        self._since = 0.0  # when the current holder took the turn (monotonic)
        self._mine = threading.local()
        self.waited_out = 0  # turns given up on because their holder kept them past `patience`

    @contextmanager
    def turn(self) -> Iterator[None]:
        """The calling thread's turn, for the block; re-entered by a thread that holds it, it changes nothing."""
        if self.held():
            yield
            return
        self.take()
        try:
            yield
        finally:
            self.leave()

    @contextmanager
    def given_up(self) -> Iterator[None]:
        """The block without the caller's turn (a wait for a Spark job), taken back after it if it was held."""
        held = self.held()
        if held:
            self.leave()
        try:
            yield
        finally:
            if held:
                self.take()

    def held(self) -> bool:
        return getattr(self._mine, "held", False)

    def take(self) -> None:
        wait = max(0.0, self._since + self.patience - time.monotonic())
        got = self._lock.acquire(timeout=wait) if wait > 0 else self._lock.acquire(blocking=False)
        if got:
            self._since = time.monotonic()
        else:
            self.waited_out += 1
        self._mine.held = got

    def leave(self) -> None:
        if self.held():
            self._mine.held = False
            self._lock.release()
