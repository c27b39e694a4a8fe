"""A stream's worker thread: batch after batch, every failure reported and retried.

Outages (the catalog, the warehouse, the broker, a registry), commit races and bugs alike never end a
stream in `floe run`: a dependency that is down is reported to the engine's `Outages` and retried with a
pause bounded by OUTAGE_BACKOFF, so that the stream resumes within seconds of its return; other failures
back off to MAX_BACKOFF. A one-off `floe run --until-caught-up` gives up after a terminal error or five
retryable ones, so that it can exit non-zero.
"""

from __future__ import annotations

import logging
import sqlite3
import threading
import time
import zlib
from collections.abc import Iterator
from dataclasses import dataclass

from appliance.config.settings import Settings
from appliance.core.clock import now
from appliance.core.errors import FloeError, KafkaUnavailable, RegistryUnavailable, UnforeseenError
from appliance.core.polling import backoff
from appliance.core.secrets import scrub
from appliance.core.vocabulary import EventKind, EventLevel, StreamPhase
from appliance.ingest.jobs import BatchJobs, asked_before, next_wake, trickle_due
from appliance.ingest.outages import Outages, dependency_of
from appliance.ingest.patterns import Discover, PatternRunner
from appliance.ingest.planning import lag
from appliance.ingest.routed import RoutedRunner
from appliance.ingest.runner import BatchOutcome, StreamRunner
from appliance.ingest.watermarks import WatermarkPollers
from appliance.model.stream import StreamDef
from appliance.state.outages import state_error
from appliance.state.store import StateStore
from appliance.tables.catalog import Catalog, catalog_error

log = logging.getLogger(__name__)

MAX_BACKOFF = 60.0
IDLE_RECHECK = 10.0  # seconds an idle stream sleeps at most without its poller waking it
OUTAGE_BACKOFF = 10.0  # the longest pause between two attempts at a dependency that is down
ONE_OFF_ATTEMPTS = 5  # retryable failures in a row before `--until-caught-up` gives up


@dataclass(frozen=True)
class Shared:
    """What every stream's worker shares with the engine that runs it."""

    settings: Settings
    spark: object
    catalog: Catalog
    stopping: threading.Event  # the engine is stopping: every worker ends after its batch
    wake: threading.Event  # set when a worker ends, so the engine looks again at once
    jobs: BatchJobs  # streams due together share one Spark job
    committed: threading.Event | None = None  # set after each commit: stages may have rows to read
    pollers: WatermarkPollers | None = None  # one watermark poller per cluster, waking the streams it concerns
    outages: Outages | None = None  # the dependencies the engine waits for
    discover: Discover | None = None  # a pattern stream's members, taken as topics appear (`floe run` gives it)


@dataclass
class Failing:
    """A stream's run of failures: reported once, retried with a growing pause."""

    message: str
    attempts: int
    pauses: Iterator[float]  # the pauses before the next attempts (`polling.backoff`)


def describe(exc: BaseException) -> str:
    """What a stream's failure says in its status and events: a driver's message may carry a secret."""
    return scrub(str(exc) if isinstance(exc, FloeError) else f"{type(exc).__name__}: {exc}")


class StreamWorker(threading.Thread):
    def __init__(self, engine: Shared, stream: StreamDef, until_caught_up: bool) -> None:
        super().__init__(name=f"floe-{stream.name}", daemon=True)
        self.engine = engine
        self.stream = stream
        self.until_caught_up = until_caught_up
        self.stop_event = threading.Event()
        self.moved = threading.Event()  # set by the cluster's poller when the topic's watermarks change
        self.done = False
        self.error: str | None = None
        self.failing: Failing | None = None
        self.rate = 0.0
        self.last_end = time.monotonic()
        self.shown: dict | None = None  # the status fields this worker wrote last
        self.behind_since: str | None = None  # since when messages wait (lag_seconds is measured from it)
        self.caught_up_at: str | None = None  # when an earlier worker last saw nothing waiting
        self.slot = zlib.crc32(stream.name.encode())  # its tick in a trickle's cycle (`trickle_due`): fixed, spread

    def run(self) -> None:
        settings = self.engine.settings
        state = StateStore(settings.state_db, durable=False)
        engine = self.engine
        if self.stream.is_pattern:
            runner = PatternRunner(settings, engine.spark, engine.catalog, state, self.stream, engine.jobs,
                                   engine.discover, engine.pollers)
        else:
            kind = RoutedRunner if self.stream.is_routed else StreamRunner
            runner = kind(settings, engine.spark, engine.catalog, state, self.stream, engine.jobs, engine.pollers)
        if runner.poller is not None:
            runner.poller.subscribe(self.stream.topic, self.moved)
        # Across a restart: messages waited since then, or since the stream was last seen caught up.
        before = state.status(self.stream.name)
        self.behind_since = before.behind_since if before.lag else None
        self.caught_up_at = before.updated_at if before.lag == 0 else None
        try:
            self._loop(runner, state)
        finally:
            if runner.poller is not None:
                runner.poller.unsubscribe(self.stream.topic, self.moved)
            runner.close()
            state.close()
            self.done = True
            self.engine.wake.set()

    def _loop(self, runner: StreamRunner | PatternRunner, state: StateStore) -> None:
        goal: dict[int, int] | None = None
        engine = self.engine.settings.engine
        tick = time.monotonic()
        while not self._stopping():
            self.moved.clear()  # before the step reads the watermarks: a change after it wakes the next
            try:
                with self.engine.jobs.planning():
                    if goal is None and self.until_caught_up:
                        goal = {p: w.high for p, w in runner.watermarks(fresh=True).items()}
                    outcome = runner.step()
                    self._succeeded(outcome, state)
            except Exception as exc:  # every failure is reported, then retried: a stream never dies
                if self._failed_quietly(exc, runner, state):
                    return
                tick = time.monotonic()
                continue
            if goal is not None and runner.caught_up(goal):
                return
            if not outcome.messages and not outcome.lag and runner.poller is not None and not self.until_caught_up:
                # Nothing to read: sleep until the poller sees the topic move (streams it wakes together
                # plan together and share a job), not a step every poll interval.
                if self._idle():
                    return
                tick = time.monotonic()
                continue
            if self._trickle(outcome, runner):
                # A trickle's next batch waits to hold more (on the grid of commit intervals, so that the
                # trickles due together still share one Spark job), or until enough messages wait.
                due = trickle_due(tick, max(engine.trickle_interval, engine.commit_interval), engine.commit_interval,
                                  self.slot)
                if self._linger(runner, due):
                    return
                # Woken at its tick, however late (the GIL held by a rewrite, say), its next is a cycle after that
                # tick: counted from the wake, a late one pushed the stream a cycle further, 8 s between commits.
                tick = min(time.monotonic(), due)  # before it: woken early, enough messages wait
                continue
            tick = next_wake(tick, time.monotonic(), bool(outcome.messages), engine.commit_interval,
                             engine.poll_interval)
            if self._wait(tick - time.monotonic()):
                return

    def _failed_quietly(self, exc: Exception, runner: StreamRunner | PatternRunner, state: StateStore) -> bool:
        """`_failed`, or, when the state database cannot take the report (its disk is full), a wait before the
        next attempt; True when the worker must end."""
        try:
            return self._failed(exc, runner, state)
        except sqlite3.Error as unwritable:
            log.warning("stream %s: %s; its failure could not be recorded: %s", self.stream.name, describe(exc),
                        unwritable)
            runner.reset()
            return self._wait(next(self.failing.pauses) if self.failing else OUTAGE_BACKOFF)

    def _failed(self, exc: Exception, runner: StreamRunner | PatternRunner, state: StateStore) -> bool:
        """Report and back off; True when the worker must end instead of retrying."""
        name = self.stream.name
        exc = catalog_error(self.engine.settings, state_error(exc))  # a driver's failure as an outage or a refusal
        message = describe(exc)
        if not isinstance(exc, FloeError):
            log.exception("stream %s: batch failed", name)
        failing, first = self.failing, self.failing is None or message != self.failing.message
        if first:
            longest = OUTAGE_BACKOFF if dependency_of(exc) else MAX_BACKOFF
            failing = Failing(message, failing.attempts if failing else 0,
                              backoff(self.engine.settings.engine.retry_backoff, longest))
        failing.attempts += 1
        self.failing = failing  # before any write to the state database, which may fail too
        if self.engine.outages is not None:
            self.engine.outages.failed(state, name, exc)
        if first:
            if isinstance(exc, UnforeseenError):  # raised in a Spark task: its traceback came with it
                log.error("stream %s: batch failed: %s\n%s", name, message, exc.detail)
            kind = (EventKind.BROKER_UNREACHABLE if isinstance(exc, KafkaUnavailable)
                    else EventKind.REGISTRY_UNREACHABLE if isinstance(exc, RegistryUnavailable)
                    else EventKind.STREAM_FAILED)
            state.add_event(kind, message, name, EventLevel.ERROR)
        state.update_status(name, {"failures_total": 1}, phase=StreamPhase.FAILED, last_error=message,
                            last_error_at=now(), error_kind=type(exc).__name__)
        self.shown = None
        runner.reset()
        if isinstance(exc, KafkaUnavailable):
            runner.close()  # a fresh connection next time
        retryable = isinstance(exc, FloeError) and exc.retryable
        if self.until_caught_up and (not retryable or self.failing.attempts >= ONE_OFF_ATTEMPTS):
            self.error = message  # a one-off run reports the failure instead of waiting on it
            return True
        return self._wait(next(failing.pauses))

    def _succeeded(self, outcome: BatchOutcome, state: StateStore) -> None:
        name = self.stream.name
        if self.engine.outages is not None:
            self.engine.outages.got_through(state, name)
        if self.failing is not None:
            state.add_event(EventKind.STREAM_RECOVERED, f"recovered after: {self.failing.message}", name)
            self.failing = None
        elapsed = time.monotonic() - self.last_end
        self.last_end = time.monotonic()
        if outcome.messages:
            self.rate = outcome.messages / max(elapsed, 1e-3)
        elif elapsed > 0:
            self.rate = self.rate * 0.5 if self.rate > 1 else 0.0
        catching_up = outcome.lag > self.engine.settings.engine.max_batch_messages // 4
        if not outcome.lag:
            self.behind_since = self.caught_up_at = None
        elif self.behind_since is None:
            self.behind_since, self.caught_up_at = self.caught_up_at or now(), None
        fields = {"phase": StreamPhase.CATCHING_UP if catching_up else StreamPhase.RUNNING, "lag": outcome.lag,
                  "messages_per_s": round(self.rate, 1), "behind_since": self.behind_since}
        if outcome.committed:
            if self.engine.committed is not None:
                self.engine.committed.set()
            fields["last_commit_at"] = now()
            if outcome.newest_kafka_ts:
                fields["newest_kafka_ts"] = outcome.newest_kafka_ts
                fields["freshness_ms"] = max(0, int(time.time() * 1000) - outcome.newest_kafka_ts)
        elif fields == self.shown:
            return  # an idle poll that changes nothing writes nothing
        # The totals are added by the write itself: no read of the row first.
        added = {"rows_total": outcome.rows, "dead_letter_total": outcome.dead_letter_rows} if outcome.committed else None
        state.update_status(name, added, **fields)
        self.shown = fields

    def stop(self) -> None:
        self.stop_event.set()
        self.moved.set()

    def _trickle(self, outcome: BatchOutcome, runner: StreamRunner) -> bool:
        """A small batch with little left waiting: a trickle's (a one-off run catches up without waiting)."""
        limit = self.engine.settings.engine.trickle_messages
        return (runner.poller is not None and not self.until_caught_up
                and 0 < outcome.messages < limit and outcome.lag < limit)

    def _linger(self, runner: StreamRunner, due: float) -> bool:
        """Wait until `due`, or until the poller sees enough messages waiting; True when the worker must stop.
        The poller tells (`hold`): one wake a batch, not one at every poll that sees a message arrive."""
        try:
            positions = runner.positions()
        except FloeError:
            return self._stopping()  # the step reports it
        poller, limit = runner.poller, self.engine.settings.engine.trickle_messages
        poller.hold(self.stream.topic, self.moved, positions, limit,
                    asked_before(due, time.monotonic(), self.rate, limit))
        try:
            # `stop()` sets `moved` too, and a stopping engine stops each of its workers.
            while time.monotonic() < due and not self._stopping():
                if self.moved.wait(max(0.0, due - time.monotonic())):
                    break
        finally:
            poller.release(self.moved)
        return self._stopping()

    def _idle(self) -> bool:
        """Wait for the topic to move; True when the worker must stop instead. One wait, not a wake each second
        (hundreds of idle streams): `stop()` sets `moved`, and a stopping engine stops each of its workers."""
        self.moved.wait(IDLE_RECHECK)
        return self._stopping()

    def _stopping(self) -> bool:
        return self.stop_event.is_set() or self.engine.stopping.is_set()

    def _wait(self, seconds: float) -> bool:
        """Sleep until the next batch; True when the worker must stop instead."""
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            if self.stop_event.wait(min(0.2, max(0.0, deadline - time.monotonic()))):
                return True
            if self.engine.stopping.is_set():
                return True
        return self._stopping()
