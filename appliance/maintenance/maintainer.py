"""Running maintenance tasks under a per-table lock, recording every run, and telling which are due.

The same `Maintainer` serves `floe maintain` (on demand), the engine's scheduler (in the
background, while streams write) and the terminal UI's "run now" buttons (a request
in the state database that the engine picks up). Every run, dry or real, failed or
not, is recorded in the state database with its figures.
"""

from __future__ import annotations

import datetime as dt
import logging
import threading
import time
from typing import Any, Callable

from pyiceberg.exceptions import NoSuchNamespaceError, NoSuchTableError

from appliance.config.policy import Policy
from appliance.config.settings import Settings
from appliance.core.activity import Gate, giving_way
from appliance.core.clock import now
from appliance.core.errors import FloeError, MaintenanceBusy
from appliance.core.locks import FileLock
from appliance.core.vocabulary import (
    EventKind,
    EventLevel,
    MaintenanceTask,
    RunOutcome,
    RunTrigger,
)
from appliance.maintenance import compaction, expiry, orphans, retention
from appliance.maintenance.job import Job
from appliance.maintenance.policies import effective_policy
from appliance.maintenance.queue import Due, commits_since, stretch
from appliance.maintenance.rewrite import SHARING
from appliance.state.records import RunRecord
from appliance.state.store import StateStore
from appliance.tables.catalog import Catalog, warehouse_io
from appliance.tables.snapshots import totals

log = logging.getLogger(__name__)

PERFORM: dict[MaintenanceTask, Callable[[Job], None]] = {
    MaintenanceTask.RETENTION: retention.perform,
    MaintenanceTask.COMPACT: compaction.perform,
    MaintenanceTask.EXPIRE: expiry.perform,
    MaintenanceTask.ORPHANS: orphans.perform,
}
MIN_FILES_TO_COMPACT = 5


def table_lock(settings: Settings, table: str) -> FileLock:
    """One maintenance task at a time per table, across processes."""
    busy = MaintenanceBusy(f"table {table}: another maintenance run is under way")
    return FileLock(settings.home / "locks" / f"{table}.maintain.lock", busy)


class Maintainer:
    """Runs maintenance tasks. `spark` is a SparkSession or a function that makes one when a
    rewrite first needs it: expiry and orphan removal never start Spark."""

    def __init__(self, settings: Settings, spark: Any = None, state: StateStore | None = None,
                 stopping: threading.Event | None = None, catalog: Catalog | None = None,
                 gate: Gate | None = None) -> None:
        """`catalog`: the engine's, whose metadata cache its streams' commits keep current (one of its own would
        parse every busy table's whole metadata again at each check); `gate`: the engine's streams', where the
        tasks give way to their batches (`core.activity`)."""
        self.settings = settings
        self._spark = spark
        self.stopping = stopping  # the engine's: once set, a task that breaks off was cancelled, not failed
        self.sharing = stopping is not None  # in the engine: rewrites share its Spark with the streams' batches
        self.gate = gate
        self.catalog = catalog or Catalog(settings)
        self.state = state or StateStore(settings.state_db)

    @property
    def spark(self):
        if callable(self._spark) and not hasattr(self._spark, "sparkContext"):
            self._spark = self._spark()
        return self._spark

    def policy(self, table: str) -> Policy:
        return effective_policy(self.settings, self.state, table)[0]

    def run(self, table: str, task: MaintenanceTask, trigger: RunTrigger = RunTrigger.CLI,
            dry_run: bool = False) -> RunRecord:
        task = MaintenanceTask(task)
        run = RunRecord(task=task, table_name=table, trigger=RunTrigger(trigger), dry_run=dry_run, started_at=now())
        started = time.monotonic()
        try:
            with table_lock(self.settings, table):
                self._perform(run)
        except MaintenanceBusy as exc:
            run.outcome, run.detail = RunOutcome.BUSY, str(exc)
        except FloeError as exc:
            run.outcome, run.detail = RunOutcome.FAILED, str(exc)
        except (NoSuchTableError, NoSuchNamespaceError):
            run.outcome, run.detail = RunOutcome.FAILED, f"table {table} was dropped"
        except Exception as exc:
            if self.stopping is not None and self.stopping.is_set():
                # The engine cancelled the rewrite's Spark job on its way out: nothing was
                # committed, and the files it had written age into orphans.
                run.outcome = RunOutcome.CANCELLED
                run.detail = "the engine stopped before the task ended; nothing was committed"
            else:  # a bug or the storage: recorded and reported, the caller carries on
                log.exception("maintenance %s of %s failed", task, table)
                run.outcome, run.detail = RunOutcome.FAILED, f"{type(exc).__name__}: {' '.join(str(exc).split())}"
        run.duration_ms = int((time.monotonic() - started) * 1000)
        run.finished_at = now()
        self.state.record_run(run)
        if run.outcome not in (RunOutcome.NOTHING_TO_DO, RunOutcome.DRY_RUN) and not dry_run:
            self.state.add_event(EventKind.maintenance(task),
                                 f"{table}: {task.title.lower()} {run.outcome}" + (f": {run.detail}" if run.detail else ""),
                                 None, EventLevel.WARNING if run.failed else EventLevel.INFO, table=table)
        return run

    def _perform(self, run: RunRecord) -> None:
        shared = SHARING.set(self.sharing)
        try:
            with giving_way(self.gate):
                self._perform_task(run)
        finally:
            SHARING.reset(shared)

    def _perform_task(self, run: RunRecord) -> None:
        policy = self.policy(run.table_name)
        with warehouse_io(self.settings, f"maintain table {run.table_name}"):
            table = self.catalog.table(run.table_name)
            if not run.dry_run:
                table = self.catalog.ensure_properties(table)
            PERFORM[run.task](Job(self.settings, self.catalog, table, policy, run, lambda: self.spark, self.state))
        if run.dry_run and run.outcome == RunOutcome.OK:
            run.outcome = RunOutcome.DRY_RUN

    def due(self, table: str, clock: Callable[[], float] = time.time) -> list[MaintenanceTask]:
        """The tasks the table needs now, in the order they should run."""
        return list(self.assess(table, clock).tasks)

    def assess(self, table: str, clock: Callable[[], float] = time.time) -> Due:
        """The tasks the table needs now, in the order they should run, and what places it in the scheduler's
        queue (`maintenance/queue.py`)."""
        cfg = self.settings.maintenance
        policy = self.policy(table)
        t = self.catalog.table(table)
        out = []
        merge = 0
        if not policy.retention.forever and self._older_than(table, MaintenanceTask.RETENTION,
                                                             cfg.retention_interval, clock):
            out.append(MaintenanceTask.RETENTION)
        held = totals(t)
        if (held.data_files >= MIN_FILES_TO_COMPACT or held.delete_files) and self._older_than(
                table, MaintenanceTask.COMPACT, policy.compact_interval, clock):
            # The summary tells most tables apart; the manifests are read only when it cannot (hundreds of
            # tables are assessed each check, and the compaction plans its rewrite again anyway).
            verdict, merge = compaction.summary_verdict(held, policy)
            if verdict is None:
                plan = compaction.plan_compaction(t, policy)
                verdict, merge = plan.triggered(policy), plan.small_files + plan.delete_files
            if verdict:
                out.append(MaintenanceTask.COMPACT)
            else:
                merge = 0
        snapshots = len(t.metadata.snapshots)
        now_ms = int(clock() * 1000)
        if snapshots > policy.min_snapshots and expiry.may_expire(t, policy, now_ms) and (
                expiry.over_cap(expiry.capped(t, policy, now_ms), policy, table)
                or self._older_than(table, MaintenanceTask.EXPIRE, cfg.expire_interval, clock)):
            stages = expiry.stage_positions(self.settings, self.catalog, table, self.state)
            if expiry.plan_expiry(t, policy, now_ms, stages).expire:
                out.append(MaintenanceTask.EXPIRE)
        if self._older_than(table, MaintenanceTask.ORPHANS, cfg.orphans_interval, clock):
            out.append(MaintenanceTask.ORPHANS)
        busy = commits_since([s.timestamp_ms for s in t.metadata.snapshots], int((clock() - 3600) * 1000))
        return Due(table, tuple(out), merge, busy)

    def _older_than(self, table: str, task: MaintenanceTask, seconds: float, clock: Callable[[], float]) -> bool:
        """Whether the task last ran (or was found with nothing to do) at least the table's own stretch of
        `seconds` ago (`queue.stretch`)."""
        last = self.state.last_run(table, task, outcomes=(RunOutcome.OK, RunOutcome.NOTHING_TO_DO, RunOutcome.FAILED))
        if last is None:
            return True
        finished = dt.datetime.fromisoformat(last.finished_at).timestamp()
        return clock() - finished >= stretch(table, seconds)

