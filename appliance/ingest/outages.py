"""What the engine waits for: its dependencies that are down, told once per outage.

A stream's worker (or the engine's own look at the catalog at start) that fails because a dependency
is down (`FloeError.dependency`: the catalog, the warehouse, a broker, a schema registry, the disk under
FLOE_HOME) reports it here, and each of its successes reports that it got through. An outage begins with
the first report of a dependency no one was waiting for (an event, a row in the state database that
`floe status` and the `dependency_down` alert read) and ends when the last one waiting on it has got
through (an event saying how long it lasted). Each waiter is in one outage at most: the one its latest
failure names. The outages are kept here; the state database's rows follow them, written again at the
next report if a full disk refused them.
"""

from __future__ import annotations

import logging
import sqlite3
import threading
import time
from dataclasses import dataclass, field

from appliance.core.clock import now
from appliance.core.errors import FloeError
from appliance.core.vocabulary import EventKind, EventLevel
from appliance.state.store import StateStore

log = logging.getLogger(__name__)


def dependency_of(exc: BaseException) -> str | None:
    """The dependency a failure says is down, or None (a bug, a setting, bad data: not an outage)."""
    return exc.dependency if isinstance(exc, FloeError) else None


def close_left_over(state: StateStore, why: str) -> None:
    """Close the outages the state database still holds from an engine that is gone (killed while it
    waited, or stopped), each with an event: every `dependency_down` gets its end in the events. A
    dependency still down is told again by the first who meets it."""
    for outage in state.outages():
        state.add_event(EventKind.DEPENDENCY_BACK, f"{outage.dependency}: the wait since {outage.since} ended: {why}",
                        level=EventLevel.INFO)
    state.clear_outages()


@dataclass
class _Outage:
    message: str
    since: str = field(default_factory=now)
    began: float = field(default_factory=time.monotonic)
    waiting: set[str] = field(default_factory=set)


class Outages:
    """Shared by the engine and its workers; each call writes with the caller's own state connection."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._down: dict[str, _Outage] = {}
        self._unsynced = False  # the state database refused the last write: write the rows again

    def down(self) -> list[str]:
        with self._lock:
            return sorted(self._down)

    def failed(self, state: StateStore, who: str, exc: BaseException) -> bool:
        """`who` failed on `exc`; True when it is an outage (the first report of one is told)."""
        dependency = dependency_of(exc)
        if dependency is None:
            return False
        with self._lock:
            told = self._leave(who, keep=dependency)
            outage = self._down.get(dependency)
            if outage is None:
                outage = self._down[dependency] = _Outage(str(exc))
                told.append((EventKind.DEPENDENCY_DOWN, f"{dependency} is down, the engine waits for it: {exc}"))
            outage.waiting.add(who)
        self._write(state, told)
        return True

    def got_through(self, state: StateStore, who: str) -> None:
        """`who` did its work: whatever it waited on is back, for it."""
        with self._lock:
            if not self._unsynced and not any(who in o.waiting for o in self._down.values()):
                return
            told = self._leave(who)
        self._write(state, told)

    def _leave(self, who: str, keep: str | None = None) -> list[tuple[EventKind, str]]:
        """Take `who` out of every outage but `keep`'s; the events of those it leaves ended (under the lock)."""
        told = []
        for dependency, outage in list(self._down.items()):
            if dependency != keep and who in outage.waiting:
                outage.waiting.discard(who)
                if not outage.waiting:
                    del self._down[dependency]
                    lasted = time.monotonic() - outage.began
                    told.append((EventKind.DEPENDENCY_BACK, f"{dependency} is back after {lasted:.0f}s; "
                                                            "the engine resumes"))
        return told

    def _write(self, state: StateStore, told: list[tuple[EventKind, str]]) -> None:
        """The events, and the state database's rows made the same as the outages kept here."""
        with self._lock:
            down = {d: (o.since, o.message) for d, o in self._down.items()}
        try:
            for kind, message in told:
                state.add_event(kind, message, level=EventLevel.ERROR if kind is EventKind.DEPENDENCY_DOWN
                                else EventLevel.INFO)
            rows = {o.dependency for o in state.outages()}
            for dependency in rows - set(down):
                state.outage_ended(dependency)
            for dependency in set(down) - rows:
                since, message = down[dependency]
                state.outage_began(dependency, message, since)
            self._unsynced = False
        except sqlite3.Error as exc:  # a full disk: the outages stay known here, the rows follow later
            log.warning("outages not recorded (%s): %s", exc, "; ".join(m for _, m in told))
            self._unsynced = True
