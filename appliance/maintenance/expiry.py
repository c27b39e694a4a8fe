"""Snapshot expiry that also deletes the files only expired snapshots referenced.

Kept whatever their age: the newest `min_snapshots` ancestors of the current snapshot,
branch and tag heads, the chain from the current snapshot down to the one holding the
stream's offsets, so exactly-once resumption never loses its place, and, for each stage
that reads the table, the snapshot it has read up to and every one after it: the appended
files it has yet to read are found through them. Past `max_snapshots` the oldest go whatever their
age, but never one younger than `min_snapshot_age`: a reader that started on it finds its files.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from pyiceberg.exceptions import CommitFailedException
from pyiceberg.table import Table
from pyiceberg.table.update.snapshot import ExpireSnapshots

from appliance.config.policy import Policy
from appliance.config.settings import Settings
from appliance.core.activity import give_way
from appliance.core.errors import CommitConflict
from appliance.core.retry import retrying
from appliance.core.vocabulary import RunOutcome
from appliance.core.words import plural
from appliance.maintenance.job import Job, delete_giving_way
from appliance.maintenance.queue import spread
from appliance.state.store import StateStore
from appliance.tables.catalog import Catalog
from appliance.tables.commits import commit_lock
from appliance.tables.datafiles import forget_expired, unreachable_files
from appliance.tables.fastpath.transactions import LeanTransaction
from appliance.tables.snapshots import ancestors, lineage_since, offsets_snapshot_chain, stage_position


@dataclass
class ExpiryPlan:
    snapshots: int
    expire: list[int] = field(default_factory=list)
    files_to_delete: set[str] = field(default_factory=set)


@dataclass
class ExpiryResult:
    plan: ExpiryPlan
    files_deleted: int = 0
    failures: list[str] = field(default_factory=list)


def stage_positions(settings: Settings, catalog: Catalog, name: str,
                    state: StateStore | None = None) -> frozenset[int | None]:
    """The snapshots of table `name` that the stages reading it have read up to; None for a stage that
    has read none yet (its first run reads whatever the table is then: nothing may go meanwhile).
    `state`: an open state store to ask (the engine's maintainer's), rather than one opened for this."""
    if state is None:
        with StateStore(settings.state_db) as opened:
            return stage_positions(settings, catalog, name, opened)
    readers = [s for s in state.stages() if s.source == name]
    found: set[int | None] = set()
    for stage in readers:
        found.add(stage_position(catalog.table(stage.table), stage.id) if catalog.exists(stage.table) else None)
    return frozenset(found)


def over_cap(snapshots: int, policy: Policy, table: str = "") -> bool:
    """Whether a table's snapshots are enough over `max_snapshots` for an expiry to be due now, whatever the
    expiry interval: a fifth over (at least 10), and up to a tenth more for each table its own (`queue.spread`),
    so that a stream's table is expired in batches, each a commit and a walk of its manifests, not at every check
    once past the cap, and tables that reached the cap together do not stay in step."""
    return snapshots > policy.max_snapshots + max(10, policy.max_snapshots // 5) * (1 + spread(table) / 2)


def _young_from(policy: Policy, now_ms: int) -> int:
    """The timestamp from which a snapshot is too young for the cap to expire (`min_snapshot_age`)."""
    return now_ms - int(policy.min_snapshot_age * 1000)


def capped(table: Table, policy: Policy, now_ms: int) -> int:
    """The table's snapshots as the cap counts them: those younger than `min_snapshot_age` only up to the cap, as
    the cap cannot expire them (a stream committing every second holds about 300 such; without this it would be
    over its cap at every check, each planning an expiry that finds the few aged since the last one)."""
    floor = _young_from(policy, now_ms)
    young = sum(1 for s in table.metadata.snapshots if s.timestamp_ms >= floor)
    return len(table.metadata.snapshots) - young + min(young, policy.max_snapshots)


def may_expire(table: Table, policy: Policy, now_ms: int) -> bool:
    """Whether `plan_expiry` can find anything: a table within its cap (as `capped` counts) whose snapshots are all
    younger than `keep_snapshots` has none to expire, whatever it keeps. Hundreds of tables are assessed every
    check, each plan a walk of the table's ancestry and a look at the stages reading it."""
    meta = table.metadata
    cutoff = now_ms - int(policy.keep_snapshots * 1000)
    return capped(table, policy, now_ms) > policy.max_snapshots or any(s.timestamp_ms < cutoff for s in meta.snapshots)


def plan_expiry(table: Table, policy: Policy, now_ms: int | None = None,
                stages: frozenset[int] = frozenset()) -> ExpiryPlan:
    """`stages`: the snapshots stages reading the table have read up to (`stage_positions`)."""
    meta = table.metadata
    now_ms = now_ms if now_ms is not None else int(time.time() * 1000)
    if None in stages:  # a stage's first run is due: every snapshot stays until it has read one
        return ExpiryPlan(snapshots=len(meta.snapshots))
    keep = set(offsets_snapshot_chain(meta))
    for position in stages:
        keep |= set(lineage_since(meta, position))
    keep |= {s.snapshot_id for s in ancestors(meta)[: policy.min_snapshots]}
    keep |= {ref.snapshot_id for ref in meta.refs.values()}
    cutoff = now_ms - int(policy.keep_snapshots * 1000)
    expire = {s.snapshot_id for s in meta.snapshots if s.timestamp_ms < cutoff} - keep
    remaining = sorted(
        (s for s in meta.snapshots if s.snapshot_id not in expire), key=lambda s: s.timestamp_ms, reverse=True
    )
    if len(remaining) > policy.max_snapshots:
        # Beyond the cap the oldest go, young or not, but never a kept one nor one within `min_snapshot_age`: a
        # query or an incremental reader that started on a snapshot that young still finds its files.
        floor = _young_from(policy, now_ms)
        expire |= {s.snapshot_id for s in remaining[policy.max_snapshots:] if s.timestamp_ms < floor} - keep
    return ExpiryPlan(snapshots=len(meta.snapshots), expire=sorted(expire))


def files_only_in(table: Table, expired: list[int]) -> set[str]:
    """Files referenced by the `expired` snapshots and by no other snapshot of the table."""
    meta = table.metadata
    gone = [s for s in meta.snapshots if s.snapshot_id in set(expired)]
    kept = [s for s in meta.snapshots if s.snapshot_id not in set(expired)]
    return unreachable_files(table, gone, kept)


def expire(settings: Settings, table: Table, policy: Policy, dry_run: bool = False,
           stages: frozenset[int] = frozenset()) -> ExpiryResult:
    plan = plan_expiry(table, policy, stages=stages)
    result = ExpiryResult(plan)
    if not plan.expire:
        return result
    if dry_run:
        plan.files_to_delete = files_only_in(table, plan.expire)
        return result
    name = ".".join(table.name())
    pre, ids = table.metadata, []
    give_way()  # the commit is Python work too: in a gap, and before the lock, never while holding it
    try:
        for attempt in retrying(CommitFailedException, f"snapshot expiry of {name}", attempts=10):
            with attempt, commit_lock(settings, name):
                table = table.refresh()  # refresh() updates `table` in place; `pre` keeps what it was
                pre = table.metadata
                ids = [i for i in plan.expire if table.metadata.snapshot_by_id(i) is not None]
                if set(offsets_snapshot_chain(table.metadata)) & set(ids):
                    # The table moved on under us in a way that matters: plan again from it.
                    plan.expire = plan_expiry(table, policy, stages=stages).expire
                    ids = plan.expire
                if ids:
                    # PyIceberg's own transaction copies the whole metadata twice per id (4 s for 60 of 360).
                    ExpireSnapshots(LeanTransaction(table, autocommit=True)).by_ids(ids).commit()
    except CommitFailedException as exc:
        raise CommitConflict(f"table {name}: snapshot expiry lost 10 races: {exc}") from None
    table = table.refresh()
    # What is gone is judged against the table as committed, which includes anything
    # other writers committed meanwhile: they can only reference files the kept snapshots have.
    plan.expire = ids
    expired_snapshots = [s for s in pre.snapshots if s.snapshot_id in set(ids)]
    doomed = unreachable_files(table, expired_snapshots, table.metadata.snapshots,
                               {s.snapshot_id: s.parent_snapshot_id for s in pre.snapshots})
    plan.files_to_delete = doomed
    forget_expired(expired_snapshots)
    result.files_deleted, result.failures = delete_giving_way(table, doomed)
    return result


def perform(job: Job) -> None:
    """Expire snapshots (or, dry, say which) and describe it on the run."""
    run = job.run
    # The maintainer's state store: opening one cost more than the rest of a trickle's expiry plan (2.7 ms).
    stages = stage_positions(job.settings, job.catalog, ".".join(job.table.name()), job.state)
    result = expire(job.settings, job.table, job.policy, dry_run=job.dry_run, stages=stages)
    run.snapshots_expired = len(result.plan.expire)
    run.files_deleted = result.files_deleted
    if not result.plan.expire:
        floor = capped(job.table, job.policy, int(time.time() * 1000)) < result.plan.snapshots
        young = f" (those past max_snapshots are younger than min_snapshot_age, {job.policy.min_snapshot_age:g}s)" \
            if floor else ""
        run.outcome, run.detail = RunOutcome.NOTHING_TO_DO, f"{result.plan.snapshots} snapshots, none to expire{young}"
        return
    what = "would delete" if job.dry_run else "deleted"
    count = len(result.plan.files_to_delete) if job.dry_run else result.files_deleted
    run.detail = f"{len(result.plan.expire)} of {result.plan.snapshots} snapshots expired; {what} {plural(count, 'file')}"
    if result.failures:
        run.outcome = RunOutcome.FAILED
        run.detail += f"; {len(result.failures)} could not be deleted, first: {result.failures[0]}"
