"""The engine's stages: each runs when its source has new appended rows, upstream before downstream.

One thread runs them all, one at a time, on the engine's SparkSession (in a FAIR pool of their
own beside the streams'). It wakes when a stream commits, or every `POLL`; with no stage to run, only
every `POLL` (a stream's commit gives it nothing to do, and a new stage is seen as soon). A failing stage is
told once per distinct error and tried again with a growing pause; a new query (`floe stage
update`) is tried at once.
"""

from __future__ import annotations

import logging
import sqlite3
import threading
import time
from dataclasses import dataclass

from appliance.config.settings import Settings
from appliance.core import hints
from appliance.core.clock import now
from appliance.core.errors import FloeError, UnforeseenError
from appliance.core.vocabulary import EventKind, EventLevel, StagePhase
from appliance.model.stage import StageDef
from appliance.stages.runner import JOB_GROUP, RunResult, StageRunner, describe
from appliance.state.records import StageRunRecord
from appliance.state.store import StateStore
from appliance.tables.catalog import Catalog, warehouse_io
from appliance.tables.snapshots import appended_since, stage_position, totals

log = logging.getLogger(__name__)

POLL = 0.25  # seconds between looks at the stages' sources when nothing wakes the thread
FIRST_BACKOFF, MAX_BACKOFF = 1.0, 60.0


@dataclass
class _Failing:
    message: str
    retry_at: float
    backoff: float


def in_order(stages: list[StageDef]) -> list[StageDef]:
    """Stages with each after the one whose table it reads (its upstream), otherwise by name."""
    by_table = {s.table: s for s in stages}

    def depth(stage: StageDef, seen: frozenset = frozenset()) -> int:
        upstream = by_table.get(stage.source)
        return 0 if upstream is None or upstream.name in seen else 1 + depth(upstream, seen | {stage.name})

    return sorted(stages, key=lambda s: (depth(s), s.name))


class StageScheduler(threading.Thread):
    def __init__(self, settings: Settings, spark, catalog: Catalog, stopping: threading.Event,
                 changed: threading.Event) -> None:
        super().__init__(name="floe-stages", daemon=True)
        self.settings = settings
        self.spark = spark
        self.catalog = catalog
        self.stopping = stopping
        self.changed = changed  # set when a stream commits: a stage may have rows to read
        self._runners: dict[str, tuple[tuple, StageRunner]] = {}
        self._failing: dict[str, _Failing] = {}
        self._shown: dict[str, dict] = {}
        self._looked: dict[str, tuple] = {}  # each stage's definition and source as last run up to date
        self._any = True  # whether the last look found a stage: without one, commits do not wake the thread

    def run(self) -> None:
        with StateStore(self.settings.state_db, durable=False) as state:
            while not self.stopping.is_set():
                self.changed.clear()
                try:
                    self.tick(state)
                except sqlite3.Error as exc:  # the state database cannot be written (a full disk): look again
                    log.warning("stages: the state database cannot be written: %s", exc)
                    self.stopping.wait(1.0)
                (self.changed if self._any else self.stopping).wait(POLL)

    def cancel(self) -> None:
        self.spark.sparkContext.cancelJobGroup(JOB_GROUP)

    def tick(self, state: StateStore) -> list[str]:
        """Run each active stage that has new rows, once; the errors of those that failed."""
        errors = []
        stages = state.stages()
        self._any = bool(stages)
        for stage in in_order(stages):
            if self.stopping.is_set():
                break
            if stage.paused:
                self._status(state, stage.name, phase=StagePhase.PAUSED)
                continue
            failing = self._failing.get(stage.name)
            if failing is not None and time.monotonic() < failing.retry_at:
                errors.append(f"{stage.name}: {failing.message}")
                continue
            # An idle stage costs one catalog query a look: nothing more until its source commits.
            looked = (stage.id, stage.sql, stage.updated_at, self._location(stage.source))
            if failing is None and looked[-1] is not None and self._looked.get(stage.name) == looked:
                continue
            error = self._run(state, stage)[1]
            if error:
                errors.append(f"{stage.name}: {error}")
            else:
                self._looked[stage.name] = looked
        return errors

    def _location(self, table: str) -> str | None:
        """Where the table's current metadata is: it moves with every commit."""
        try:
            return self.catalog.location(table)
        except Exception:  # noqa: BLE001 - a table gone or the catalog busy: the run says what is wrong
            return None

    def catch_up(self, state: StateStore) -> list[str]:
        """Bring every active stage up to date with its source (upstream first); their errors."""
        for stage in in_order(state.stages()):
            if stage.paused:
                continue
            while not self.stopping.is_set():
                ran, error = self._run(state, stage)
                if error:
                    return [f"stage {stage.name}: {error}"]
                if not ran:
                    break
        return []

    def _runner(self, stage: StageDef) -> StageRunner:
        key = (stage.id, stage.sql, stage.updated_at)
        found = self._runners.get(stage.name)
        if found is None or found[0] != key:
            if found is not None:
                self._failing.pop(stage.name, None)  # a new definition is tried at once
            found = self._runners[stage.name] = (key, StageRunner(self.settings, self.spark, self.catalog, stage))
        return found[1]

    def _run(self, state: StateStore, stage: StageDef) -> tuple[bool, str | None]:
        started_at = now()
        try:
            with warehouse_io(self.settings, f"run stage {stage.name}"):
                runner = self._runner(stage)
                result = runner.run()
                self._lag(state, stage)
        except Exception as exc:  # every failure is reported; the stage is tried again later
            self._failed(state, stage, exc, started_at)
            return False, describe(exc)
        if result is not None:
            self._succeeded(state, stage, result, started_at)
        elif stage.name in self._failing:
            self._recovered(state, stage)
        return result is not None, None

    def _lag(self, state: StateStore, stage: StageDef) -> None:
        source, target = self.catalog.table(stage.source), self.catalog.table(stage.table)
        position = stage_position(target, stage.id)
        head = source.current_snapshot()
        if head is None or position == head.snapshot_id:
            snapshots, rows = 0, 0
        elif position is None:
            snapshots, rows = appended_since(source.metadata, None)[0], int(
                head.summary.additional_properties.get("total-records", 0)) if head.summary else 0
        else:
            snapshots, rows = appended_since(source.metadata, position)
        phase = StagePhase.RUNNING if snapshots else StagePhase.UP_TO_DATE
        self._status(state, stage.name, phase=phase, position=position, lag_snapshots=snapshots, lag_rows=rows,
                     table_rows=totals(target).rows)

    def _status(self, state: StateStore, name: str, **fields) -> None:
        if self._shown.get(name) != fields:  # a look that changes nothing writes nothing
            state.update_stage_status(name, **fields)
            self._shown[name] = fields

    def _succeeded(self, state: StateStore, stage: StageDef, result: RunResult, started_at: str) -> None:
        status = state.stage_status(stage.name)
        state.update_stage_status(stage.name, last_run_at=now(), rows_in_total=status.rows_in_total + result.rows_in,
                                  rows_out_total=status.rows_out_total + result.rows_out, runs=status.runs + 1)
        state.record_stage_run(StageRunRecord(stage.name, started_at, now(), int(result.seconds * 1000),
                                              result.from_snapshot, result.to_snapshot, result.rows_in,
                                              result.rows_out, "ok"))
        # A stage over a trickle runs every few seconds: the engine sums its runs up once a minute (`ingest.summary`).
        log.debug("stage %s: %d rows in, %d out in %.2fs (source snapshot %s -> %s)", stage.name, result.rows_in,
                  result.rows_out, result.seconds, result.from_snapshot, result.to_snapshot)
        if stage.name in self._failing:
            self._recovered(state, stage)

    def _recovered(self, state: StateStore, stage: StageDef) -> None:
        failing = self._failing.pop(stage.name)
        state.add_event(EventKind.STAGE_RECOVERED, f"recovered after: {failing.message}", stage.name)

    def _failed(self, state: StateStore, stage: StageDef, exc: Exception, started_at: str) -> None:
        message = describe(exc)
        if not isinstance(exc, FloeError):
            log.exception("stage %s failed", stage.name)
        failing = self._failing.get(stage.name)
        if failing is None or failing.message != message:
            if isinstance(exc, UnforeseenError):  # raised in a Spark task: its traceback came with it
                log.error("stage %s failed: %s\n%s", stage.name, message, exc.detail)
            state.add_event(EventKind.STAGE_FAILED, f"{message}; nothing was committed: the stage goes on from its "
                            f"last committed point once fixed (`{hints.UPDATE_STAGE.format(stage=stage.name)}`)",
                            stage.name, EventLevel.ERROR)
        backoff = FIRST_BACKOFF if failing is None else min(failing.backoff * 2, MAX_BACKOFF)
        retryable = isinstance(exc, FloeError) and exc.retryable
        self._failing[stage.name] = _Failing(message, time.monotonic() + (0.0 if retryable else backoff), backoff)
        self._shown.pop(stage.name, None)
        state.update_stage_status(stage.name, phase=StagePhase.FAILED, last_error=message, last_error_at=now())
        state.record_stage_run(StageRunRecord(stage.name, started_at, now(), 0, None, None, 0, 0, "failed", message))
