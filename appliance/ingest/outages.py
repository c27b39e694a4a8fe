"""What the engine waits for: its dependencies that are down, told once per outage.

A stream's worker (or the engine's own look at the catalog at start) that fails because a dependency
is down (`FloeError.dependency`: the catalog, the warehouse, a broker, a schema registry) reports it
here, and its next success reports that it got through. An outage begins with the first report of a
dependency no one was waiting for (an event, a row in the state database that `floe status` and the
`dependency_down` alert read) and ends when the last one waiting on it has got through (an event saying
how long it lasted). Each waiter is in one outage at most: the one its latest failure names.
"""

from __future__ import annotations

import threading
import time

from appliance.core.clock import now
from appliance.core.errors import FloeError
from appliance.core.vocabulary import EventKind, EventLevel
from appliance.state.store import StateStore


def dependency_of(exc: BaseException) -> str | None:
    """The dependency a failure says is down, or None (a bug, a setting, bad data: not an outage)."""
    return exc.dependency if isinstance(exc, FloeError) else None


class Outages:
    """Shared by the engine and its workers; each call writes with the caller's own state connection."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._waiting: dict[str, set[str]] = {}  # dependency -> who waits on it
        self._began: dict[str, float] = {}  # dependency -> monotonic time it went down

    def down(self) -> list[str]:
        with self._lock:
            return sorted(self._waiting)

    def failed(self, state: StateStore, who: str, exc: BaseException) -> bool:
        """`who` failed on `exc`; True when it is an outage (the first report of one is told)."""
        dependency = dependency_of(exc)
        if dependency is None:
            return False
        with self._lock:
            ended = self._leave(who, keep=dependency)
            waiting = self._waiting.setdefault(dependency, set())
            began = not waiting
            waiting.add(who)
            if began:
                self._began[dependency] = time.monotonic()
        self._tell_ended(state, ended)
        if began:
            state.outage_began(dependency, str(exc), now())
            state.add_event(EventKind.DEPENDENCY_DOWN, f"{dependency} is down, the engine waits for it: {exc}",
                            level=EventLevel.ERROR)
        return True

    def got_through(self, state: StateStore, who: str) -> None:
        """`who` did its work: whatever it waited on is back, for it."""
        with self._lock:
            if not any(who in waiting for waiting in self._waiting.values()):
                return
            ended = self._leave(who)
        self._tell_ended(state, ended)

    def _leave(self, who: str, keep: str | None = None) -> list[tuple[str, float]]:
        """Take `who` out of every outage but `keep`'s; the outages left with no one waiting (under the lock)."""
        ended = []
        for dependency, waiting in list(self._waiting.items()):
            if dependency != keep and who in waiting:
                waiting.discard(who)
                if not waiting:
                    del self._waiting[dependency]
                    ended.append((dependency, time.monotonic() - self._began.pop(dependency)))
        return ended

    @staticmethod
    def _tell_ended(state: StateStore, ended: list[tuple[str, float]]) -> None:
        for dependency, lasted in ended:
            state.outage_ended(dependency)
            state.add_event(EventKind.DEPENDENCY_BACK, f"{dependency} is back after {lasted:.0f}s; the engine resumes")
