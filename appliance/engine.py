"""The engine: one worker thread per active stream, each running batches on a shared SparkSession.

A batch, from Kafka to a committed Iceberg snapshot:
1. the driver reads the partitions' watermarks and resumes from the offsets in
   the newest snapshot this stream committed (never from a side file);
2. `batch.run_batch` runs a Spark job whose tasks read their offset ranges,
   decode, route bad messages and write Parquet data files;
3. the driver commits the dead-letter files (if any), then the target files,
   each snapshot carrying the batch's end offsets in its summary. A crash at any
   point either loses the whole uncommitted batch (re-read on restart) or leaves
   the dead-letter half committed, which the replay then skips.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from dataclasses import dataclass
from typing import Callable

from appliance.batch import BatchSpec, TaskResult, plan_tasks, run_batch
from appliance.catalog import Catalog, commit_files, committed_offsets, warehouse_io
from appliance.errors import BrokerUnreachable, EngineBusy, FloeError
from appliance.failpoints import failpoint
from appliance.locks import FileLock
from appliance.kafka_client import KafkaClient, Watermarks
from appliance.maintenance import MaintenanceScheduler
from appliance.reader import Piece
from appliance.settings import Settings, ensure_home
from appliance.spark import parallelism, spark_session
from appliance.state import StateStore, StreamDef, now
from appliance.table_ops import commit_lock

log = logging.getLogger(__name__)


@dataclass
class BatchOutcome:
    messages: int
    rows: int
    dead_letter_rows: int
    lag: int
    committed: bool


def allocate(lags: dict[int, int], budget: int) -> dict[int, int]:
    """Split a batch's message budget over partitions, fairly: small lags are served whole."""
    out: dict[int, int] = {}
    remaining = dict((p, lag) for p, lag in lags.items() if lag > 0)
    while remaining and budget > 0:
        share = max(1, budget // len(remaining))
        for p in sorted(remaining, key=remaining.get):
            take = min(remaining[p], share, budget)
            out[p] = out.get(p, 0) + take
            budget -= take
            remaining[p] -= take
            if remaining[p] == 0:
                del remaining[p]
            if budget <= 0:
                break
    return out


class StreamRunner:
    """Runs the batches of one stream. Not thread-safe: one worker thread owns it."""

    def __init__(self, settings: Settings, spark, catalog: Catalog, state: StateStore, stream: StreamDef) -> None:
        self.settings = settings
        self.spark = spark
        self.catalog = catalog
        self.state = state
        self.stream = stream
        self._kafka: KafkaClient | None = None
        self.offsets: dict[int, int] | None = None  # committed in the target table
        self.target_found: dict[int, int] | None = None
        self.dead_letter_offsets: dict[int, int] = {}
        self.last_marks: dict[int, Watermarks] = {}

    @property
    def kafka(self) -> KafkaClient:
        if self._kafka is None:
            self._kafka = KafkaClient(self.stream.kafka, group=self.stream.group, timeout=10.0)
        return self._kafka

    def close(self) -> None:
        if self._kafka is not None:
            self._kafka.close()
            self._kafka = None

    def reset(self) -> None:
        """Forget cached positions: the next batch re-reads them from the tables."""
        self.offsets = None

    def _load_positions(self) -> None:
        self.target = self.catalog.table(self.stream.table)
        self.dead_letter = self.catalog.table(self.stream.dead_letter_table)
        self.target_found = committed_offsets(self.target, self.stream.id)
        self.offsets = dict(self.target_found) if self.target_found is not None else dict(self.stream.start_positions)
        self.dead_letter_found = committed_offsets(self.dead_letter, self.stream.id)
        self.dead_letter_offsets = dict(self.dead_letter_found or {})

    def positions(self) -> dict[int, int]:
        if self.offsets is None:
            self._load_positions()
        return dict(self.offsets or {})

    def watermarks(self) -> dict[int, Watermarks]:
        self.last_marks = self.kafka.watermarks(self.stream.topic)
        return self.last_marks

    def lag(self, marks: dict[int, Watermarks] | None = None) -> int:
        marks = marks or self.last_marks
        pos = self.offsets or {}
        return sum(max(0, w.high - max(pos.get(p, 0), w.low)) for p, w in marks.items())

    def step(self) -> BatchOutcome:
        with warehouse_io(self.settings, f"write stream {self.stream.name}'s tables"):
            return self._step()

    def _step(self) -> BatchOutcome:
        started = time.monotonic()
        started_at = now()
        stream = self.stream
        positions = self.positions()
        marks = self.watermarks()
        lags: dict[int, int] = {}
        for p, w in marks.items():
            pos = positions.get(p, stream.start_positions.get(p, 0))
            if pos < w.low:
                self.state.add_event(
                    "data_expired",
                    f"partition {p}: offsets {pos}..{w.low - 1} expired from the topic before Floe read them",
                    stream.name,
                    "warning",
                )
                pos = w.low
            if pos > w.high:
                raise FloeError(
                    f"partition {p}: committed offset {pos} is beyond the topic's end ({w.high}); "
                    "was the topic recreated? delete and recreate the stream to start over"
                )
            positions[p] = pos
            lags[p] = w.high - pos
        budget = allocate(lags, self.settings.engine.max_batch_messages)
        pieces = [Piece(p, positions[p], positions[p] + n) for p, n in sorted(budget.items())]
        if not pieces:
            return BatchOutcome(0, 0, 0, 0, False)

        spec = BatchSpec(
            stream_id=stream.id,
            topic=stream.topic,
            kafka=stream.kafka,
            group=stream.group,
            mapping=stream.mapping,
            target=self.catalog.task_target(self.target),
            dead_letter=self.catalog.task_target(self.dead_letter),
            dead_letter_floor=dict(self.dead_letter_offsets),
            max_message_bytes=self.settings.engine.max_message_bytes,
            fetch_timeout=self.settings.engine.fetch_timeout,
        )
        results = run_batch(self.spark, spec, plan_tasks(pieces, parallelism(self.spark)))
        failpoint("before_commit")
        new_offsets, read_errors = self._advance(positions, results)
        messages = sum(r.messages for r in results)
        rows = sum(r.rows for r in results)
        dead_rows = sum(r.dead_letter_rows for r in results)
        dead_files = [f for r in results for f in r.dead_letter_files]
        target_files = [f for r in results for f in r.target_files]

        dead_snapshot = None
        if dead_files:
            with commit_lock(self.settings, stream.dead_letter_table):
                self.dead_letter, dead_snapshot = commit_files(
                    self.dead_letter, dead_files, stream.id, stream.topic, self.dead_letter_found, new_offsets
                )
            self.dead_letter_found = dict(new_offsets)
            self.dead_letter_offsets = dict(new_offsets)
            failpoint("after_dead_letter_commit")
        with commit_lock(self.settings, stream.table):
            self.target, target_snapshot = commit_files(
                self.target, target_files, stream.id, stream.topic, self.target_found, new_offsets
            )
        self.target_found = dict(new_offsets)
        self.offsets = dict(new_offsets)
        failpoint("after_target_commit")
        if read_errors:
            self.state.add_event("partial_batch", "committed what was read; " + "; ".join(read_errors), stream.name, "warning")
        duration = time.monotonic() - started
        lag = self.lag(marks)
        self.state.record_batch(
            stream.name,
            started_at=started_at,
            committed_at=now(),
            duration_ms=int(duration * 1000),
            messages=messages,
            rows=rows,
            dead_letter_rows=dead_rows,
            bytes=sum(r.bytes for r in results),
            target_snapshot_id=target_snapshot,
            dead_letter_snapshot_id=dead_snapshot,
            offsets=_json_offsets(new_offsets),
            lag=lag,
        )
        log.info(
            "%s: batch of %d messages (%d rows, %d dead letters) in %.2fs; read %.2fs decode %.2fs write %.2fs",
            stream.name, messages, rows, dead_rows, duration,
            sum(r.read_seconds for r in results), sum(r.decode_seconds for r in results),
            sum(r.write_seconds for r in results),
        )
        return BatchOutcome(messages, rows, dead_rows, lag, True)

    def _advance(self, positions: dict[int, int], results: list[TaskResult]) -> tuple[dict[int, int], list[str]]:
        """Offsets to commit, as far as each partition was read without a gap, and the read errors."""
        pieces = sorted((pr for r in results for pr in r.pieces), key=lambda pr: (pr.partition, pr.start))
        new = dict(positions)
        blocked: set[int] = set()
        errors: list[str] = []
        for pr in pieces:
            if pr.partition in blocked:
                if pr.next_offset > pr.start:
                    # Rows beyond a gap were written: committing them would skip the gap,
                    # committing only up to the gap would duplicate them later. Drop the batch.
                    raise BrokerUnreachable(f"batch abandoned, will be re-read: {'; '.join(errors)}")
                continue
            new[pr.partition] = pr.next_offset
            if pr.error:
                errors.append(pr.error)
                blocked.add(pr.partition)
        if errors and new == positions:
            raise BrokerUnreachable("; ".join(errors))
        return new, errors

    def caught_up(self, goal: dict[int, int]) -> bool:
        pos = self.offsets or {}
        marks = self.last_marks
        return all(max(pos.get(p, 0), marks[p].low if p in marks else 0) >= high for p, high in goal.items())


def _json_offsets(offsets: dict[int, int]) -> str:
    import json

    return json.dumps({str(p): o for p, o in sorted(offsets.items())})


class EngineLock(FileLock):
    """One engine per FLOE_HOME."""

    def __init__(self, settings: Settings) -> None:
        path = settings.home / "engine.lock"
        super().__init__(path, EngineBusy(f"another floe engine is already running on {settings.home}"), str(os.getpid()))


class StreamWorker(threading.Thread):
    def __init__(self, engine: Engine, stream: StreamDef, until_caught_up: bool) -> None:
        super().__init__(name=f"floe-{stream.name}", daemon=True)
        self.engine = engine
        self.stream = stream
        self.until_caught_up = until_caught_up
        self.stop_event = threading.Event()
        self.done = False
        self.error: str | None = None

    def run(self) -> None:
        engine = self.engine
        settings = engine.settings
        state = StateStore(settings.state_db)
        runner = StreamRunner(settings, engine.spark, engine.catalog, state, self.stream)
        name = self.stream.name
        failing: str | None = None
        backoff = settings.engine.retry_backoff
        goal: dict[int, int] | None = None
        rate = 0.0
        failures = 0
        last_end = time.monotonic()
        try:
            while not (self.stop_event.is_set() or engine.stopping.is_set()):
                started = time.monotonic()
                try:
                    if goal is None and self.until_caught_up:
                        goal = {p: w.high for p, w in runner.watermarks().items()}
                    outcome = runner.step()
                except Exception as exc:  # every failure is reported, then retried: a stream never dies
                    message = str(exc) if isinstance(exc, FloeError) else f"{type(exc).__name__}: {exc}"
                    if not isinstance(exc, FloeError):
                        log.exception("stream %s: batch failed", name)
                    if message != failing:
                        kind = "broker_unreachable" if isinstance(exc, BrokerUnreachable) else "stream_failed"
                        state.add_event(kind, message, name, "error")
                    failing = message
                    state.update_status(name, phase="failed", last_error=message, last_error_at=now())
                    runner.reset()
                    if isinstance(exc, BrokerUnreachable):
                        runner.close()
                    failures += 1
                    retryable = isinstance(exc, FloeError) and exc.retryable
                    if self.until_caught_up and (not retryable or failures >= 5):
                        self.error = message  # a one-off run reports the failure instead of waiting on it
                        break
                    if self._wait(backoff):
                        break
                    backoff = min(backoff * 2, 60.0)
                    continue
                failures = 0
                if failing is not None:
                    state.add_event("stream_recovered", f"recovered after: {failing}", name)
                    failing = None
                    backoff = settings.engine.retry_backoff
                elapsed = time.monotonic() - last_end
                last_end = time.monotonic()
                if outcome.messages:
                    rate = outcome.messages / max(elapsed, 1e-3)
                elif elapsed > 0:
                    rate = rate * 0.5 if rate > 1 else 0.0
                status = state.status(name)
                phase = "catching_up" if outcome.lag > settings.engine.max_batch_messages // 4 else "running"
                fields = {"phase": phase, "lag": outcome.lag, "messages_per_s": round(rate, 1)}
                if outcome.committed:
                    fields["last_commit_at"] = now()
                    fields["rows_total"] = (status.get("rows_total") or 0) + outcome.rows
                    fields["dead_letter_total"] = (status.get("dead_letter_total") or 0) + outcome.dead_letter_rows
                state.update_status(name, **fields)
                if goal is not None and runner.caught_up(goal):
                    break
                pause = settings.engine.poll_interval if not outcome.messages else settings.engine.commit_interval
                if self._wait(max(0.0, pause - (time.monotonic() - started)) if outcome.messages else pause):
                    break
        finally:
            runner.close()
            state.close()
            self.done = True
            self.engine.wake.set()

    def _wait(self, seconds: float) -> bool:
        """Sleep until the next batch; True when the worker must stop instead."""
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            if self.stop_event.wait(min(0.2, max(0.0, deadline - time.monotonic()))):
                return True
            if self.engine.stopping.is_set():
                return True
        return self.stop_event.is_set() or self.engine.stopping.is_set()


class Engine:
    def __init__(self, settings: Settings, spark=None, on_tick: Callable[[Engine], None] | None = None) -> None:
        """`spark`: a session to run on (tests share one); by default the engine starts and stops its own."""
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
        self.started_at = now()
        self.maintenance: MaintenanceScheduler | None = None

    def start_spark(self) -> None:
        if self.spark is None:
            self.state.engine_heartbeat(os.getpid(), self.settings.spark_master, "starting", self.started_at)
            self.spark = spark_session(self.settings)

    def stop(self) -> None:
        self.stopping.set()
        self.wake.set()

    def run(self, until_caught_up: bool = False) -> None:
        """Run every active stream until `stop()`; with until_caught_up, until each has read
        everything its topic held when the engine started, then return."""
        with EngineLock(self.settings):
            self.start_spark()
            self.state.add_event("engine_started", f"engine started (pid {os.getpid()}, spark {self.settings.spark_master})")
            if until_caught_up:
                for stream in self.state.streams():
                    if not stream.paused:
                        self._start_worker(stream, until_caught_up=True)
            else:
                # Requests from the UI are served even with scheduled maintenance turned off.
                self.maintenance = MaintenanceScheduler(self.settings, self.spark, self.stopping)
                self.maintenance.start()
            try:
                while not self.stopping.is_set():
                    if until_caught_up:
                        if all(w.done for w in self.workers.values()):
                            break
                    else:
                        self._reconcile()
                    self.state.engine_heartbeat(os.getpid(), self.settings.spark_master, "running", self.started_at)
                    if self.on_tick:
                        self.on_tick(self)
                    self.wake.wait(0.5)
                    self.wake.clear()
            finally:
                self.stopping.set()
                if self.maintenance is not None:
                    # Cancel until it ends: a rewrite may submit its Spark job just after a cancel.
                    while self.maintenance.is_alive():
                        self.maintenance.cancel()
                        self.maintenance.join(1.0)
                for worker in self.workers.values():
                    worker.join()
                self.state.engine_heartbeat(os.getpid(), self.settings.spark_master, "stopped", self.started_at)
                self.state.add_event("engine_stopped", "engine stopped")
                if self._owns_spark and self.spark is not None:
                    self.spark.stop()  # also ends the Python workers and their Kafka consumers
                    self.spark = None
            failed = [f"{name}: {w.error}" for name, w in sorted(self.workers.items()) if w.error]
            if failed:
                raise FloeError("; ".join(failed))

    def _start_worker(self, stream: StreamDef, until_caught_up: bool = False) -> None:
        worker = StreamWorker(self, stream, until_caught_up)
        self.workers[stream.name] = worker
        self.state.update_status(stream.name, phase="starting")
        worker.start()

    def _reconcile(self) -> None:
        """Start workers for active streams; stop those paused, deleted or redefined."""
        streams = {s.name: s for s in self.state.streams()}
        for name, worker in list(self.workers.items()):
            current = streams.get(name)
            if current is None or current.paused or current.id != worker.stream.id:
                worker.stop_event.set()
            if worker.done:
                del self.workers[name]
        for name, stream in streams.items():
            if stream.paused:
                if name not in self.workers and self.state.status(name).get("phase") != "paused":
                    self.state.update_status(name, phase="paused")
            elif name not in self.workers:
                self._start_worker(stream)
