"""The engine: one worker thread per active stream, each running batches on a shared SparkSession,
and beside them the maintenance scheduler, the stage thread, the observers and, given by whoever runs
it (`floe run`: `control/answers.py`), the thread answering what commands and the UI ask of it.

It reconciles with the state database every half second: a new active stream gets a
worker; a paused, deleted or redefined stream's worker stops after its current batch.
`engine.lock` (flock) keeps one engine per FLOE_HOME.

It never exits because a dependency is down: it opens the catalog before Spark starts, and a catalog
that is down is waited for (`Outages`, looked at again with `polling.backoff`) while everything else
starts; each stream's worker waits out the outages it meets. Only what a person must fix (a setting, a
refused credential) stops it, in one line.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sqlite3
import threading
import time
from typing import Any, Callable, Iterator, Protocol

from appliance.config.settings import Settings, ensure_home
from appliance.core.activity import Activity
from appliance.core.clock import now
from appliance.core.collector import Collector
from appliance.core.errors import EngineBusy, FloeError
from appliance.core.locks import FileLock
from appliance.core.polling import backoff
from appliance.core.vocabulary import EngineState, EventKind, StreamPhase
from appliance.ingest.indexes import keep_only, preload, save_all
from appliance.ingest.jobs import BatchJobs
from appliance.ingest.outages import Outages, close_left_over
from appliance.ingest.patterns import Discover
from appliance.ingest.summary import EngineSummary
from appliance.ingest.watermarks import WatermarkPollers
from appliance.ingest.worker import OUTAGE_BACKOFF, Shared, StreamWorker
from appliance.maintenance.scheduler import MaintenanceScheduler
from appliance.model.stream import StreamDef
from appliance.observe.alerts import AlertThread
from appliance.observe.metrics import MetricsServer
from appliance.observe.systables import SystemTablesThread
from appliance.spark.session import spark_session
from appliance.stages.scheduler import StageScheduler
from appliance.state.store import StateStore
from appliance.tables.catalog import Catalog
from appliance.tables.fastpath.recent import keep_in_this_process

log = logging.getLogger(__name__)

TICK = 0.5  # seconds between looks at the state database
# An engine that owns its process freezes what has lived this long out of the garbage collector's walks, and
# collects the whole heap this often (`core/collector`).
FREEZE_EVERY = 60.0
FULL_COLLECTION_EVERY = 600.0
YOUNG_COLLECTION = 10_000  # objects made and not freed between young collections (CPython's default: 700)
ENGINE = "engine"  # who waits on the catalog when the engine opens it


class AnswerThread(Protocol):
    """What commands and the UI ask of a long-running engine, answered on its session (`control/answers.py`,
    above this package: the engine only starts, advertises and stops it)."""

    asks: frozenset

    def start(self) -> None: ...
    def cancel(self) -> None: ...
    def is_alive(self) -> bool: ...
    def join(self, timeout: float | None = None) -> None: ...


class EngineLock(FileLock):
    """One engine per FLOE_HOME."""

    def __init__(self, settings: Settings) -> None:
        super().__init__(settings.engine_lock, EngineBusy(f"another floe engine is already running on {settings.home}"),
                         str(os.getpid()))


class Engine:
    def __init__(self, settings: Settings, spark=None, on_tick: Callable[[Engine], None] | None = None,
                 metrics_port: int | None = None,
                 answers: Callable[[Settings, Any, threading.Event], AnswerThread] | None = None,
                 discover: Discover | None = None) -> None:
        """`spark`: a session to run on (tests share one); by default the engine starts and stops its own.
        `metrics_port`: serve Prometheus metrics there (0: a free port), over `[observe] metrics_port`.
        `answers`: makes the thread answering requests (not in a one-off run); without it, none are taken.
        `discover`: takes the topics that match a pattern stream (`control/patterns.py`, given by `floe run`);
        without it, a pattern stream reads only the topics it has taken already."""
        self.discover = discover
        self.settings = settings
        ensure_home(settings)
        self.state = StateStore(settings.state_db)
        self.catalog = Catalog(settings)
        self.stopping = threading.Event()
        self.wake = threading.Event()  # a worker ended: look again without waiting out the tick
        self.spark = spark
        self._owns_spark = spark is None
        self.workers: dict[str, StreamWorker] = {}
        self.on_tick = on_tick
        self.collector: Collector | None = None
        self.started_at = now()
        self.maintenance: MaintenanceScheduler | None = None
        self.stages: StageScheduler | None = None
        self._answers = answers
        self.answers: AnswerThread | None = None  # what commands and the UI ask of the engine
        self.committed = threading.Event()  # a stream committed: the stages look at their sources
        self.jobs: BatchJobs | None = None
        self.activity = Activity()  # the streams' steps under way: maintenance runs in the gaps between them
        self.pollers = WatermarkPollers(settings.engine.poll_interval, self.stopping, settings.engine.commit_interval)
        # None: no endpoint. `[observe] metrics_port` 0 means off; a port given here, 0 means any free one.
        self.metrics_port = metrics_port if metrics_port is not None else (settings.observe.metrics_port or None)
        self.metrics: MetricsServer | None = None
        self.system_tables: SystemTablesThread | None = None
        self.alerts: AlertThread | None = None
        self._observers_stop = threading.Event()  # set after the engine's last event, so it is exported
        self.outages = Outages()
        self._catalog_retry: tuple[float, Iterator[float]] | None = None  # (next look, pauses) while it is down
        self._reconciled: list[tuple[Any, ...]] | None = None  # the streams' keys the workers were last matched to
        self.summary: EngineSummary | None = None  # floe.log's lines a minute: what the streams and stages did

    def _heartbeat(self, state: EngineState) -> None:
        taking = self.answers is not None and self.answers.is_alive() and state is EngineState.RUNNING \
            and not self.stopping.is_set()
        self.state.engine_heartbeat(os.getpid(), self.settings.spark_master, state, self.started_at,
                                    self.answers.asks if taking else ())

    def start_spark(self) -> None:
        if self.spark is None:
            self._heartbeat(EngineState.STARTING)
            started = time.monotonic()
            self.spark = spark_session(self.settings)
            log.info("spark session started in %.2f s", time.monotonic() - started)

    def stop(self) -> None:
        self.stopping.set()
        self.wake.set()

    def run(self, until_caught_up: bool = False) -> None:
        """Run every active stream until `stop()`; with until_caught_up, until each has read
        everything its topic held when the engine started, then return."""
        with EngineLock(self.settings):
            with contextlib.suppress(sqlite3.Error):  # a full disk: the rows follow once it can write
                close_left_over(self.state, "the engine that waited is gone; this one looks again")
            self._open_catalog()  # a setting or a credential a person must fix: one line, before Spark starts
            if not until_caught_up and self.metrics_port is not None:
                # Before Spark: a port in use is one line at once, not after a JVM's start.
                self.metrics = MetricsServer(self.settings, self.metrics_port, self.settings.observe.metrics_host)
            try:
                self._run(until_caught_up)
            finally:
                if self.metrics is not None:
                    self.metrics.close()

    def _run(self, until_caught_up: bool) -> None:
        # The upsert streams' key indexes load while Spark starts (seconds each at 10^8 keys).
        preload(self.settings.home, [s for s in self.state.streams() if not s.paused],
                lambda stream: self.catalog.table(stream.table))
        self.start_spark()
        if self._owns_spark:
            # What start-up made (Spark's gateway, PyIceberg, pydantic) lives as long as the engine, and what
            # lives a minute mostly lives long: out of the collections' walks (a test's engine owns no process).
            self.collector = Collector(FULL_COLLECTION_EVERY, FREEZE_EVERY, young=YOUNG_COLLECTION)
            self.collector.collect()
        with contextlib.suppress(sqlite3.Error):  # before any worker; or at the first tick that reads the database
            self.summary = EngineSummary(self.state)
        metrics = f", metrics at {self.metrics.url}" if self.metrics else ""
        self.state.add_event(EventKind.ENGINE_STARTED,
                             f"engine started (pid {os.getpid()}, spark {self.settings.spark_master}{metrics})")
        if until_caught_up:
            for stream in self.state.streams():
                if not stream.paused:
                    self._start_worker(stream, until_caught_up=True)
        else:
            # Its compactions read back what its trickles wrote: the small files' rows are kept for them.
            keep_in_this_process()
            # Requests from the UI are served even with scheduled maintenance turned off.
            self.maintenance = MaintenanceScheduler(self.settings, self.spark, self.stopping, catalog=self.catalog,
                                                    activity=self.activity)
            self.maintenance.start()
            self.stages = StageScheduler(self.settings, self.spark, self.catalog, self.stopping, self.committed)
            self.stages.start()
            if self._answers is not None:
                self.answers = self._answers(self.settings, self.spark, self.stopping)
                self.answers.start()
            self._start_observers()
        failed: list[str] = []
        try:
            self._loop(until_caught_up)
            failed = [f"{name}: {w.error}" for name, w in sorted(self.workers.items()) if w.error]
            if until_caught_up and not self.stopping.is_set():
                # The streams have read what their topics held: now every stage, upstream first.
                failed += StageScheduler(self.settings, self.spark, self.catalog, self.stopping,
                                         self.committed).catch_up(self.state)
        finally:
            self._shut_down()
        if failed:
            raise FloeError("; ".join(failed))

    def _loop(self, until_caught_up: bool) -> None:
        unwritable: str | None = None  # the state database's error while it cannot be written
        while not self.stopping.is_set():
            if until_caught_up and all(w.done for w in self.workers.values()):
                return
            try:
                if not until_caught_up:
                    self._reconcile()
                if self._catalog_retry is not None and time.monotonic() >= self._catalog_retry[0]:
                    self._open_catalog()
                self._heartbeat(EngineState.RUNNING)
                unwritable = None
                if self.summary is None:
                    self.summary = EngineSummary(self.state)
                elif self.summary.due():
                    self.summary.log()
            except sqlite3.Error as exc:  # a full disk: the engine carries on, and writes again once it can
                if unwritable != str(exc):
                    log.warning("the state database cannot be written (%s): the engine carries on", exc)
                unwritable = str(exc)
            if self.collector is not None and self.collector.due():
                self.collector.collect()
            if self.on_tick:
                self.on_tick(self)
            self.wake.wait(TICK)
            self.wake.clear()

    def _shut_down(self) -> None:
        self.stopping.set()
        with contextlib.suppress(sqlite3.Error):  # a full disk: the stop goes on all the same
            self._heartbeat(EngineState.RUNNING)  # takes no more requests: an asker does the work itself at once
        if self.maintenance is not None:
            # Cancel until it ends: a rewrite may submit its Spark job just after a cancel.
            while self.maintenance.is_alive():
                self.maintenance.cancel()
                self.maintenance.join(1.0)
        for thread in (self.stages, self.answers):
            while thread is not None and thread.is_alive():  # a run in flight commits nothing once cancelled
                thread.cancel()
                thread.join(1.0)
        for worker in self.workers.values():
            worker.stop()
        for worker in self.workers.values():
            worker.join()
        self.pollers.close()
        if self.summary is not None:
            with contextlib.suppress(sqlite3.Error):
                self.summary.log()  # what was committed since the last line
        save_all()  # the upsert streams' key indexes: the next start loads them
        if self.jobs is not None:
            self.jobs.close()
        with contextlib.suppress(sqlite3.Error):
            self._heartbeat(EngineState.STOPPED)
            close_left_over(self.state, "the engine stopped")
            self.state.add_event(EventKind.ENGINE_STOPPED, "engine stopped")
        self._observers_stop.set()  # the system tables export what is left, the engine's stop included
        for thread in (self.system_tables, self.alerts):
            if thread is not None:
                thread.join(timeout=30)
        if self._owns_spark and self.spark is not None:
            self.spark.stop()  # also ends the Python workers and their Kafka consumers
            self.spark = None

    def _open_catalog(self) -> None:
        """Open the catalog, or note that it is down and when to look again; raise what a person must fix."""
        try:
            self.catalog.iceberg
        except FloeError as exc:
            if not exc.retryable:
                raise
            self.outages.failed(self.state, ENGINE, exc)
            pauses = self._catalog_retry[1] if self._catalog_retry else backoff(TICK, OUTAGE_BACKOFF)
            self._catalog_retry = (time.monotonic() + next(pauses), pauses)
            return
        self._catalog_retry = None
        self.outages.got_through(self.state, ENGINE)

    def _start_observers(self) -> None:
        """System tables (with the state database's upkeep) and alerts: threads of their own, on their own
        state connections."""
        self.system_tables = SystemTablesThread(self.settings, Catalog(self.settings), self._observers_stop)
        self.system_tables.start()
        self.alerts = AlertThread(self.settings, self._observers_stop)
        self.alerts.start()

    def _start_worker(self, stream: StreamDef, until_caught_up: bool = False) -> None:
        if self.jobs is None:
            self.jobs = BatchJobs(self.spark, self.settings.engine.batch_in_engine, self.activity)
        shared = Shared(self.settings, self.spark, self.catalog, self.stopping, self.wake, self.jobs, self.committed,
                        self.pollers, self.outages, self.discover)
        worker = StreamWorker(shared, stream, until_caught_up)
        self.state.update_status(stream.name, phase=StreamPhase.STARTING)  # may fail: then no worker, yet
        self.workers[stream.name] = worker
        worker.start()

    def _reconcile(self) -> None:
        """Start workers for active streams; stop those paused, deleted or redefined."""
        keys = self.state.stream_keys()
        if keys == self._reconciled and not any(w.done for w in self.workers.values()):
            # Nothing the decisions below depend on changed: a tick costs O(changes), not a parse of every
            # stream's definition (1.4 ms at 200 streams, twice a second).
            return
        streams = {s.name: s for s in self.state.streams()}
        keep_only(self.settings.home, {s.id for s in streams.values()} | {m.id for m in self.state.all_members()})
        for name, worker in list(self.workers.items()):
            current = streams.get(name)
            # A redefined stream (another id, another schema evolution setting) gets a new worker;
            # its mapping follows the table by itself.
            if current is None or current.paused or current.id != worker.stream.id \
                    or current.schema_evolution != worker.stream.schema_evolution:
                worker.stop()
            if worker.done:
                del self.workers[name]
        for name, stream in streams.items():
            if stream.paused:
                if name not in self.workers and self.state.status(name).phase != StreamPhase.PAUSED:
                    self.state.update_status(name, phase=StreamPhase.PAUSED)
            elif name not in self.workers:
                self._start_worker(stream)
        self._reconciled = keys  # only once every worker matched them: a failed start is tried again next tick
