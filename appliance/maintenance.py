"""Table maintenance: which task is due, running it under a per-table lock, and the record of runs.

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
from dataclasses import asdict, dataclass
from typing import Any, Callable

from pyiceberg.exceptions import NoSuchNamespaceError, NoSuchTableError

from appliance.catalog import Catalog, warehouse_io
from appliance.locks import FileLock
from appliance.errors import FloeError, MaintenanceBusy, TableNotFound
from appliance.names import check_table_name
from appliance.policy import Policy, build_policy
from appliance.settings import Settings
from appliance.state import StateStore, now

log = logging.getLogger(__name__)

# The order `floe maintain` runs them in: retention first, so compaction does not rewrite
# rows about to go; expiry after compaction, so the files it replaced are deleted at once.
TASKS = ("retention", "compact", "expire", "orphans")
TASK_TITLES = {
    "retention": "Retention",
    "compact": "Compaction",
    "expire": "Snapshot expiry",
    "orphans": "Orphan files",
}


@dataclass
class Run:
    task: str
    table_name: str
    trigger: str
    outcome: str = "ok"  # ok, nothing to do, dry run, failed, busy, cancelled
    detail: str = ""
    dry_run: bool = False
    started_at: str = ""
    finished_at: str = ""
    duration_ms: int = 0
    files_before: int | None = None
    files_after: int | None = None
    bytes_before: int | None = None
    bytes_after: int | None = None
    rows_deleted: int | None = None
    rows_rewritten: int | None = None
    snapshots_expired: int | None = None
    files_deleted: int | None = None
    snapshot_id: int | None = None

    @property
    def failed(self) -> bool:
        return self.outcome in ("failed", "busy")


def effective_policy(settings: Settings, state: StateStore, table: str) -> tuple[Policy, dict[str, str], dict[str, Any]]:
    namespace = table.split(".", 1)[0]
    return build_policy([
        ("default", settings.maintenance.policy),
        (f"namespace {namespace}", state.policy("namespace", namespace)),
        (f"table {table}", state.policy("table", table)),
    ])


def table_lock(settings: Settings, table: str) -> FileLock:
    """One maintenance task at a time per table, across processes."""
    busy = MaintenanceBusy(f"table {table}: another maintenance run is under way")
    return FileLock(settings.home / "locks" / f"{table}.maintain.lock", busy)


class Maintainer:
    """Runs maintenance tasks. `spark` is a SparkSession or a function that makes one when a
    rewrite first needs it: expiry and orphan removal never start Spark."""

    def __init__(self, settings: Settings, spark: Any = None, state: StateStore | None = None,
                 stopping: threading.Event | None = None) -> None:
        self.settings = settings
        self._spark = spark
        self.stopping = stopping  # the engine's: once set, a task that breaks off was cancelled, not failed
        self.catalog = Catalog(settings)
        self.state = state or StateStore(settings.state_db)

    @property
    def spark(self):
        if callable(self._spark) and not hasattr(self._spark, "sparkContext"):
            self._spark = self._spark()
        return self._spark

    def check_table(self, name: str) -> str:
        check_table_name(name)
        if not self.catalog.exists(name):
            raise TableNotFound(f"no table named {name} in the catalog (see `floe query \"show tables\"`)")
        return name

    def policy(self, table: str) -> Policy:
        return effective_policy(self.settings, self.state, table)[0]

    # ---- running ----

    def run(self, table: str, task: str, trigger: str = "cli", dry_run: bool = False) -> Run:
        if task not in TASKS:
            raise ValueError(f"unknown maintenance task {task!r}")
        run = Run(task=task, table_name=table, trigger=trigger, dry_run=dry_run, started_at=now())
        started = time.monotonic()
        try:
            with table_lock(self.settings, table):
                self._run(run)
        except MaintenanceBusy as exc:
            run.outcome, run.detail = "busy", str(exc)
        except FloeError as exc:
            run.outcome, run.detail = "failed", str(exc)
        except (NoSuchTableError, NoSuchNamespaceError):
            run.outcome, run.detail = "failed", f"table {table} was dropped"
        except Exception as exc:
            if self.stopping is not None and self.stopping.is_set():
                # The engine cancelled the rewrite's Spark job on its way out: nothing was
                # committed, and the files it had written age into orphans.
                run.outcome, run.detail = "cancelled", "the engine stopped before the task ended; nothing was committed"
            else:  # a bug or the storage: recorded and reported, the caller carries on
                log.exception("maintenance %s of %s failed", task, table)
                run.outcome, run.detail = "failed", f"{type(exc).__name__}: {' '.join(str(exc).split())}"
        run.duration_ms = int((time.monotonic() - started) * 1000)
        run.finished_at = now()
        self.state.record_run(**{k: (int(v) if isinstance(v, bool) else v) for k, v in asdict(run).items()})
        if run.outcome not in ("nothing to do", "dry run") and not dry_run:
            level = "warning" if run.failed else "info"
            self.state.add_event(f"maintenance_{task}", f"{table}: {TASK_TITLES[task].lower()} {run.outcome}"
                                 + (f": {run.detail}" if run.detail else ""), None, level)
        return run

    def _run(self, run: Run) -> None:
        from appliance.table_ops import ensure_table_properties

        policy = self.policy(run.table_name)
        with warehouse_io(self.settings, f"maintain table {run.table_name}"):
            table = self.catalog.table(run.table_name)
            if not run.dry_run:
                table = ensure_table_properties(table, self.settings)
            getattr(self, f"_{run.task}")(run, table, policy)
        if run.dry_run and run.outcome == "ok":
            run.outcome = "dry run"

    def _compact(self, run: Run, table, policy: Policy) -> None:
        from appliance.compaction import compact, plan_compaction

        plan = plan_compaction(table, policy)
        if run.dry_run:
            run.files_before, run.bytes_before = plan.files, plan.bytes
            run.rows_rewritten = sum(g.rows for g in plan.groups)
            at_least = sum(-(-g.bytes // policy.target_file_size) for g in plan.groups)  # if nothing compressed better
            run.files_after = plan.files - plan.files_to_rewrite + at_least
            run.detail = _compaction_detail(plan.files_to_rewrite, plan.bytes_to_rewrite, at_least, policy, "at most ")
            if not plan.groups:
                run.outcome, run.detail = "nothing to do", f"{plan.small_files} small files, none to merge"
            return
        result = compact(self.settings, self.catalog, table, policy, self.spark if plan.groups else None, plan)
        run.files_before, run.bytes_before = plan.files, plan.bytes
        run.files_after, run.bytes_after = result.files_after, result.bytes_after
        run.rows_rewritten, run.snapshot_id = result.rows, result.snapshot_id
        if not plan.groups:
            run.outcome, run.detail = "nothing to do", f"{plan.small_files} small files, none to merge"
        else:
            run.detail = _compaction_detail(plan.files_to_rewrite, plan.bytes_to_rewrite, result.files_written, policy)

    def _expire(self, run: Run, table, policy: Policy) -> None:
        from appliance.expiry import expire

        result = expire(self.settings, table, policy, dry_run=run.dry_run)
        run.snapshots_expired = len(result.plan.expire)
        run.files_deleted = result.files_deleted
        run.files_before = result.plan.snapshots
        run.files_after = result.plan.snapshots - len(result.plan.expire)
        if not result.plan.expire:
            run.outcome, run.detail = "nothing to do", f"{result.plan.snapshots} snapshots, none to expire"
            return
        what = "would delete" if run.dry_run else "deleted"
        count = len(result.plan.files_to_delete) if run.dry_run else result.files_deleted
        run.detail = f"{len(result.plan.expire)} of {result.plan.snapshots} snapshots expired; {what} {count} file{'s' * (count != 1)}"
        if result.failures:
            run.outcome = "failed"
            run.detail += f"; {len(result.failures)} could not be deleted, first: {result.failures[0]}"
        run.files_before, run.files_after = None, None

    def _orphans(self, run: Run, table, policy: Policy) -> None:
        from appliance.orphans import remove_orphans

        result = remove_orphans(table, policy, dry_run=run.dry_run)
        run.files_deleted = result.files_deleted
        run.bytes_before = result.orphan_bytes
        if not result.orphans:
            run.outcome, run.detail = "nothing to do", f"{result.files_scanned} files, no orphans older than {policy.orphan_age / 3600:g}h"
            return
        what = "would delete" if run.dry_run else "deleted"
        run.detail = f"{what} {len(result.orphans)} of {result.files_scanned} files ({result.orphan_bytes:,} bytes)"
        if run.dry_run:
            run.files_deleted = len(result.orphans)
        if result.failures:
            run.outcome = "failed"
            run.detail += f"; {len(result.failures)} could not be deleted, first: {result.failures[0]}"

    def _retention(self, run: Run, table, policy: Policy) -> None:
        from appliance.retention import apply_retention, plan_retention

        moment = dt.datetime.now(dt.timezone.utc)
        if policy.retention.forever:
            run.outcome, run.detail = "nothing to do", "retention is forever"
            return
        plan = plan_retention(table, policy, moment)
        spark = self.spark if plan.rewrite and not run.dry_run else None
        result = apply_retention(self.settings, self.catalog, table, policy, spark, moment, dry_run=run.dry_run, plan=plan)
        run.files_before, run.bytes_before = result.files_before, result.bytes_before
        run.files_after, run.bytes_after = result.files_after, result.bytes_after
        run.rows_deleted, run.snapshot_id = result.rows_deleted, result.snapshot_id
        cutoff = result.plan.cutoff.isoformat(timespec="seconds") if result.plan.cutoff else "-"
        if not result.rows_deleted:
            run.outcome = "nothing to do"
            run.detail = f"no rows with {policy.retention_column} before {cutoff} ({policy.retention})"
            return
        what = "would delete" if run.dry_run else "deleted"
        run.detail = f"{what} {result.rows_deleted:,} rows with {policy.retention_column} before {cutoff} ({policy.retention})"

    # ---- scheduling ----

    def due(self, table: str, clock: Callable[[], float] = time.time) -> list[str]:
        """The tasks the table needs now, in the order they should run."""
        from appliance.compaction import plan_compaction
        from appliance.expiry import plan_expiry
        from appliance.table_ops import snapshot_totals

        cfg = self.settings.maintenance
        policy = self.policy(table)
        t = self.catalog.table(table)
        out = []
        if not policy.retention.forever and self._older_than(table, "retention", cfg.retention_interval, clock):
            out.append("retention")
        _, data_files, _ = snapshot_totals(t)
        if data_files >= 5 and self._older_than(table, "compact", policy.compact_interval, clock):
            if plan_compaction(t, policy).triggered(policy):
                out.append("compact")
        snapshots = len(t.metadata.snapshots)
        over_cap = snapshots > policy.max_snapshots + max(10, policy.max_snapshots // 10)
        if snapshots > policy.min_snapshots and (over_cap or self._older_than(table, "expire", cfg.expire_interval, clock)):
            if plan_expiry(t, policy, int(clock() * 1000)).expire:
                out.append("expire")
        if self._older_than(table, "orphans", cfg.orphans_interval, clock):
            out.append("orphans")
        return out

    def _older_than(self, table: str, task: str, seconds: float, clock: Callable[[], float]) -> bool:
        last = self.state.last_run(table, task, outcomes=("ok", "nothing to do", "failed"))
        if not last:
            return True
        finished = dt.datetime.fromisoformat(last["finished_at"]).timestamp()
        return clock() - finished >= seconds


def _compaction_detail(files: int, size: int, written: int, policy: Policy, qualifier: str = "") -> str:
    return f"{files} small files ({size:,} bytes) into {qualifier}{written} (target {policy.target_file_size:,} bytes)"


class MaintenanceScheduler(threading.Thread):
    """The engine's background maintenance: requests from the UI at once, due tasks each check."""

    def __init__(self, settings: Settings, spark: Any, stop: threading.Event, poll: float = 1.0) -> None:
        super().__init__(name="floe-maintenance", daemon=True)
        self.settings = settings
        self.spark = spark
        self.stop_event = stop
        self.poll = poll
        self.error: str = ""

    def run(self) -> None:
        maintainer = Maintainer(self.settings, spark=self.spark, stopping=self.stop_event)
        next_check = 0.0
        try:
            while not self.stop_event.is_set():
                for request in maintainer.state.take_requests():
                    if self.stop_event.is_set():
                        return
                    maintainer.run(request["table_name"], request["task"], trigger="request")
                if self.settings.maintenance.enabled and time.monotonic() >= next_check:
                    self._scheduled(maintainer)
                    next_check = time.monotonic() + self.settings.maintenance.check_interval
                self.stop_event.wait(self.poll)
        finally:
            maintainer.state.close()

    def _scheduled(self, maintainer: Maintainer) -> None:
        try:
            tables = maintainer.catalog.list_tables()
        except Exception as exc:
            log.warning("maintenance: cannot list tables: %s", exc)
            return
        for table in tables:
            if self.stop_event.is_set():
                return
            if maintainer.state.pending_requests():
                return  # a user is waiting: their request goes first, the check comes back later
            try:
                due = maintainer.due(table)
            except Exception as exc:  # a table dropped meanwhile, storage trouble: next check
                log.warning("maintenance: cannot check %s: %s", table, exc)
                continue
            for task in due:
                if self.stop_event.is_set():
                    return
                maintainer.run(table, task, trigger="schedule")

    def cancel(self) -> None:
        """Stop a rewrite in flight: its files are never committed and age into orphans."""
        from appliance.rewrite import JOB_GROUP

        try:
            self.spark.sparkContext.cancelJobGroup(JOB_GROUP)
        except Exception:
            pass


# ---- policies, as `floe table policy` and the UI set and show them ----


def policy_scope(maintainer: Maintainer, name: str) -> tuple[str, str]:
    """('table', NS.TABLE) or ('namespace', NS) for a name that exists in the catalog."""
    if "." in name:
        return "table", maintainer.check_table(name)
    namespaces = {".".join(ns) for ns in maintainer.catalog.iceberg.list_namespaces()}
    if name not in namespaces:
        raise TableNotFound(f"no namespace named {name} in the catalog")
    return "namespace", name


def set_policy(maintainer: Maintainer, name: str, values: dict[str, Any], unset: tuple[str, ...] = ()) -> None:
    """Change NAME's own policy values; checked against the catalog before anything is saved."""
    from appliance.errors import ConfigError
    from appliance.policy import PARSERS, check_values
    from appliance.retention import check_retention_column

    scope, name = policy_scope(maintainer, name)
    for key in unset:
        if key not in PARSERS:
            raise ConfigError(f"unknown policy setting {key!r} (known: {', '.join(PARSERS)})")
    own = {k: v for k, v in maintainer.state.policy(scope, name).items() if k not in unset}
    own.update(check_values(values, f"{scope} {name}"))
    tables = [name] if scope == "table" else [t for t in maintainer.catalog.list_tables() if t.startswith(name + ".")]
    # Every table the change reaches must still have a valid policy, its retention column included.
    state = maintainer.state
    for table in tables:
        layers = [("default", maintainer.settings.maintenance.policy)]
        ns = table.split(".", 1)[0]
        layers.append((f"namespace {ns}", own if scope == "namespace" else state.policy("namespace", ns)))
        layers.append((f"table {table}", own if scope == "table" else state.policy("table", table)))
        policy = build_policy(layers)[0]
        if not policy.retention.forever:
            check_retention_column(maintainer.catalog.table(table), policy.retention_column)
    state.set_policy(scope, name, own)
    state.add_event("policy_changed", f"{scope} {name}: maintenance policy " +
                    (", ".join(f"{k}={v}" for k, v in sorted(own.items())) or "back to the defaults"))


def describe_policy(maintainer: Maintainer, name: str) -> list[dict[str, str]]:
    """Each setting with its value and where the value comes from."""
    from appliance.policy import PARSERS

    scope, name = policy_scope(maintainer, name)
    if scope == "table":
        _, source, raw = effective_policy(maintainer.settings, maintainer.state, name)
    else:
        _, source, raw = build_policy([
            ("default", maintainer.settings.maintenance.policy),
            (f"namespace {name}", maintainer.state.policy("namespace", name)),
        ])
    return [{"setting": k, "value": str(raw[k]), "from": source[k]} for k in PARSERS]


def format_run(run: Run | dict[str, Any]) -> str:
    r = asdict(run) if isinstance(run, Run) else run
    seconds = (r.get("duration_ms") or 0) / 1000
    detail = r.get("detail") or ""
    return f"{r['table_name']:28} {r['task']:10} {r['outcome']:14} {seconds:6.1f}s  {detail}"
