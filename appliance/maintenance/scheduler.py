"""The engine's background maintenance: requests from the UI at once, due tasks at each check."""

from __future__ import annotations

import contextlib
import logging
import sqlite3
import threading
import time
from typing import Any

from appliance.config.settings import Settings
from appliance.core.activity import Activity, Gate
from appliance.core.vocabulary import RunTrigger
from appliance.maintenance.maintainer import Maintainer
from appliance.maintenance.queue import ordered
from appliance.maintenance.rewrite import JOB_GROUP
from appliance.tables.catalog import Catalog

log = logging.getLogger(__name__)


def rest_after(seconds: float, share: float) -> float:
    """The rest after a scheduled task of `seconds` that keeps maintenance to `share` of the time: hundreds of
    tables due at once are maintained over a longer while, never as one burst that starves the streams."""
    return seconds * (1 - share) / share


class MaintenanceScheduler(threading.Thread):
    def __init__(self, settings: Settings, spark: Any, stop: threading.Event, poll: float = 1.0,
                 catalog: Catalog | None = None, activity: Activity | None = None) -> None:
        """`activity`: the engine's streams' steps, which its tasks (scheduled and asked for) give way to
        (`core.activity`)."""
        super().__init__(name="floe-maintenance", daemon=True)
        self.settings = settings
        self.spark = spark
        self.stop_event = stop
        self.poll = poll
        self.catalog = catalog  # the engine's: its metadata cache is shared (`Maintainer`)
        self.gate = Gate(activity) if activity is not None else None

    def run(self) -> None:
        maintainer = Maintainer(self.settings, spark=self.spark, stopping=self.stop_event, catalog=self.catalog,
                                gate=self.gate)
        next_check = 0.0
        trouble: str | None = None  # the state database's error while it cannot be written (a full disk)
        try:
            while not self.stop_event.is_set():
                try:
                    for request in maintainer.state.take_requests():
                        if self.stop_event.is_set():
                            return
                        maintainer.run(request.table_name, request.task, trigger=RunTrigger.REQUEST)
                    if self.settings.maintenance.enabled and time.monotonic() >= next_check:
                        next_check = time.monotonic() + self.settings.maintenance.check_interval
                        self._scheduled(maintainer)
                    trouble = None
                except sqlite3.Error as exc:  # the thread carries on: the next look tries again
                    if trouble != str(exc):
                        log.warning("maintenance: the state database cannot be written: %s", exc)
                    trouble = str(exc)
                self.stop_event.wait(self.poll)
        finally:
            with contextlib.suppress(sqlite3.Error):  # nothing is queued once the engine is gone
                maintainer.state.set_maintenance_queue([])
            maintainer.state.close()

    def _scheduled(self, maintainer: Maintainer) -> None:
        """Every table looked at, then what is due run one task at a time, in the queue's order
        (`maintenance/queue.py`); the queue is in the state database meanwhile, for `floe table runs`."""
        try:
            tables = maintainer.catalog.list_tables()
        except Exception as exc:
            log.warning("maintenance: cannot list tables: %s", exc)
            return
        dues = []
        for table in tables:
            if self.stop_event.is_set():
                return
            self._give_way()  # hundreds of tables looked at: between the streams' batches too
            try:
                dues.append(maintainer.assess(table))
            except Exception as exc:  # a table dropped meanwhile, storage trouble: next check
                log.warning("maintenance: cannot check %s: %s", table, exc)
        queue = [(due.table, task, due.reason) for due in ordered(dues) for task in due.tasks]
        maintainer.state.set_maintenance_queue(queue)
        for table, task, _ in queue:
            if self.stop_event.is_set():
                return
            if maintainer.state.pending_requests():
                return  # a user is waiting: their request goes first, the next check queues again
            maintainer.state.dequeue_maintenance(table, task)
            self._give_way()  # started in a gap between the streams' batches where there is one
            started, waited = time.monotonic(), self._waited()
            maintainer.run(table, task, trigger=RunTrigger.SCHEDULE)
            # Its share counts its work, not the waits at its safe points (`core.activity`).
            working = time.monotonic() - started - (self._waited() - waited)
            if not self._rest(maintainer, rest_after(working, self.settings.maintenance.share)):
                return
        if queue and self.gate is not None:
            log.info("maintenance: %d tasks run; since the engine started, it found the streams in a batch %d times, "
                     "waited %.1f s in all for them, and went on beside them %d times", len(queue), self.gate.waits,
                     self.gate.waited, self.gate.ran_out)

    def _give_way(self) -> None:
        if self.gate is not None:
            self.gate.give_way()

    def _waited(self) -> float:
        return self.gate.waited if self.gate is not None else 0.0

    def _rest(self, maintainer: Maintainer, seconds: float) -> bool:
        """Wait `seconds` before the next scheduled task; False when the pass must end (the engine stops, or a
        user's request waits: it is taken at once, and the next check queues the rest again)."""
        deadline = time.monotonic() + seconds
        while (left := deadline - time.monotonic()) > 0:
            if self.stop_event.wait(min(left, self.poll)) or maintainer.state.pending_requests():
                return False
        return True

    def cancel(self) -> None:
        """Stop a rewrite in flight: its files are never committed and age into orphans."""
        try:
            self.spark.sparkContext.cancelJobGroup(JOB_GROUP)
        except Exception:  # no job in flight, or the JVM is going away with the engine
            pass
