"""Retention: rows whose event time is older than the table's period are deleted.

Whole files are dropped when their column statistics show every row is old; files
that straddle the cutoff are rewritten without their old rows; files of new rows are
not touched. Rows with no event time are kept: they are not known to be old.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field

from pyiceberg.conversions import from_bytes
from pyiceberg.manifest import DataFileContent
from pyiceberg.table import Table
from pyiceberg.table.snapshots import Operation
from pyiceberg.types import DateType, TimestampType, TimestamptzType

from appliance.config.policy import Policy
from appliance.config.settings import Settings
from appliance.core.errors import ConfigError
from appliance.core.failpoints import failpoint
from appliance.core.vocabulary import RunOutcome
from appliance.maintenance.job import Job
from appliance.maintenance.rewrite import KeepFilter, RewriteGroup, rewrite_groups
from appliance.mergeonread.deletes import LiveDeletes, live_deletes
from appliance.mergeonread.folding import REWRITE_KEY, FoldMap, Kept
from appliance.mergeonread.store import index_directory
from appliance.tables.catalog import Catalog
from appliance.tables.commits import commit_rewrite
from appliance.tables.datafiles import TableTarget, delete_files, live_entries
from appliance.tables.snapshots import MAINTENANCE_KEY, totals

EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.timezone.utc)
TIME_TYPES = (TimestamptzType, TimestampType, DateType)


def check_retention_column(table: Table, column: str) -> None:
    try:
        field_type = table.schema().find_field(column).field_type
    except ValueError:
        raise ConfigError(f"table {'.'.join(table.name())} has no column {column!r} for retention") from None
    if not isinstance(field_type, TIME_TYPES):
        raise ConfigError(
            f"retention column {column!r} of {'.'.join(table.name())} is {field_type}, not a timestamp or a date"
        )


def _cutoff_value(cutoff: dt.datetime, field_type) -> int:
    """The cutoff in the units Iceberg stores the column's bounds in."""
    if isinstance(field_type, DateType):
        return (cutoff.date() - EPOCH.date()).days
    delta = cutoff.astimezone(dt.timezone.utc) - EPOCH
    return (delta.days * 86400 + delta.seconds) * 1_000_000 + delta.microseconds


@dataclass
class RetentionPlan:
    cutoff: dt.datetime | None
    drop: list = field(default_factory=list)  # every row old
    rewrite: list = field(default_factory=list)  # some rows old, or not known
    rows_dropped: int = 0
    deletes: LiveDeletes = field(default_factory=LiveDeletes)  # the table's position deletes, if any


@dataclass
class RetentionResult:
    plan: RetentionPlan
    rows_deleted: int = 0
    files_before: int = 0
    bytes_before: int = 0
    files_after: int = 0
    bytes_after: int = 0
    snapshot_id: int | None = None


def plan_retention(table: Table, policy: Policy, now: dt.datetime) -> RetentionPlan:
    cutoff = policy.retention.cutoff(now)
    plan = RetentionPlan(cutoff)
    if cutoff is None:
        return plan
    check_retention_column(table, policy.retention_column)
    column = table.schema().find_field(policy.retention_column)
    limit = _cutoff_value(cutoff, column.field_type)
    entries = live_entries(table)
    plan.deletes = live_deletes(table, entries)
    for f in (e.data_file for e in entries if e.data_file.content == DataFileContent.DATA):
        lower, upper = f.lower_bounds.get(column.field_id), f.upper_bounds.get(column.field_id)
        nulls = f.null_value_counts.get(column.field_id)
        low = from_bytes(column.field_type, lower) if lower is not None else None
        high = from_bytes(column.field_type, upper) if upper is not None else None
        if low is not None and low >= limit:
            continue  # every row is new (nulls are kept anyway)
        if high is not None and high < limit and nulls == 0:
            plan.drop.append(f)
            plan.rows_dropped += f.record_count - len(plan.deletes.positions.get(f.file_path, ()))
        elif f.record_count and not (low is None and high is None and nulls == f.record_count):
            plan.rewrite.append(f)  # straddles the cutoff, or has no statistics to tell
    return plan


def apply_retention(
    settings: Settings, catalog: Catalog, table: Table, policy: Policy, spark, now: dt.datetime, dry_run: bool = False,
    plan: RetentionPlan | None = None,
) -> RetentionResult:
    plan = plan or plan_retention(table, policy, now)
    # From the summary, as the figures after are: the plan has read the manifests already.
    before = totals(table)
    result = RetentionResult(plan, files_before=before.data_files, bytes_before=before.size_bytes,
                             files_after=before.data_files, bytes_after=before.size_bytes)
    if plan.cutoff is None or not (plan.drop or plan.rewrite):
        return result
    keep = KeepFilter(policy.retention_column, plan.cutoff)
    if dry_run:
        result.rows_deleted = plan.rows_dropped + _old_rows(table, plan.rewrite, keep)
        return result
    groups = [RewriteGroup((f,), f.spec_id, f.partition, (plan.deletes.of(f.file_path),)) for f in plan.rewrite]
    results = rewrite_groups(spark, TableTarget.of(table), groups, policy.target_file_size, keep,
                             in_process=settings.maintenance.rewrite_in_engine)
    changed = [(g, r) for g, r in zip(groups, results) if r.rows_out != r.rows_in]
    # A straddling file none of whose rows turned out old stays as it is.
    delete_files(table, [f.file_path for r in results if r.rows_out == r.rows_in for f in r.files])
    added = [f for _, r in changed for f in r.files]
    removed = plan.drop + [g.files[0] for g, _ in changed]
    if not removed:
        return result
    fold = FoldMap(known=set(plan.deletes.files))
    for g, r in changed:
        fold.add([g.files[0].file_path], r.kept, r.files)
    for f in plan.drop:  # removed whole: none of its rows is anywhere any more
        fold.add([f.file_path], [Kept.none(f.record_count)], [])
    label = Operation.OVERWRITE if added else Operation.DELETE
    properties = {MAINTENANCE_KEY: "retention"}
    rewrite_id = fold.save(index_directory(settings.home, table))
    if rewrite_id:  # the table's key index follows its rows through this map (mergeonread/lineage.py)
        properties[REWRITE_KEY] = rewrite_id
    failpoint("rewrite_map_saved", "retention")
    table = commit_rewrite(settings, table, removed, added, label, properties, carrier=fold)
    failpoint("rewrite_committed", "retention")
    result.rows_deleted = plan.rows_dropped + sum(r.rows_in - r.rows_out for _, r in changed)
    after = totals(table)
    result.snapshot_id, result.files_after, result.bytes_after = after.snapshot_id, after.data_files, after.size_bytes
    return result


def _old_rows(table: Table, files: list, keep: KeepFilter) -> int:
    """How many rows of `files` are older than the cutoff, reading only the event-time column."""
    if not files:
        return 0
    from pyiceberg.expressions import Not

    from appliance.tables.reading import file_tasks, read_batches

    schema = table.schema()
    old = Not(keep.expression(schema.find_field(keep.column).field_type))
    return sum(b.num_rows for b in read_batches(table.metadata, table.io, schema.select(keep.column),
                                                file_tasks(files), old))


def perform(job: Job) -> None:
    """Delete the rows older than the period (or, dry, count them) and describe it on the run."""
    run, policy = job.run, job.policy
    moment = dt.datetime.now(dt.timezone.utc)
    if policy.retention.forever:
        run.outcome, run.detail = RunOutcome.NOTHING_TO_DO, "retention is forever"
        return
    plan = plan_retention(job.table, policy, moment)
    spark = job.spark() if plan.rewrite and not job.dry_run else None
    result = apply_retention(job.settings, job.catalog, job.table, policy, spark, moment, dry_run=job.dry_run,
                             plan=plan)
    run.files_before, run.bytes_before = result.files_before, result.bytes_before
    run.files_after, run.bytes_after = result.files_after, result.bytes_after
    run.rows_deleted, run.snapshot_id = result.rows_deleted, result.snapshot_id
    cutoff = result.plan.cutoff.isoformat(timespec="seconds") if result.plan.cutoff else "-"
    if not result.rows_deleted:
        run.outcome = RunOutcome.NOTHING_TO_DO
        run.detail = f"no rows with {policy.retention_column} before {cutoff} ({policy.retention})"
        return
    what = "would delete" if job.dry_run else "deleted"
    run.detail = f"{what} {result.rows_deleted:,} rows with {policy.retention_column} before {cutoff} ({policy.retention})"
