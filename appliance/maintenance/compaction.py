"""Compaction: small data files rewritten into files near the target size, one `replace` snapshot.

Files are grouped partition by partition, in commit order, so that each new file holds
a contiguous stretch of the stream (good for pruning by time and for retention). Small files of
an older partition spec are rewritten into the current one (split by its partitions).
Readers see every row exactly once before, during and after: the new files become
visible in the same snapshot that removes the old ones.

A trickle's partition (a day of a few rows a second) never reaches the small-file size: rewriting it whole at
every compaction would rewrite its whole day so far every ten minutes, each row a hundred times by the evening
(and over `rewrite_in_engine`, as a Spark job). So, as an LSM tree's size tiers do, a file is left out while it
holds more rows than all the newer ones after it (`newer_worth_merging`): each row is rewritten a few times
(about the log of the compactions in its partition's day), a partition keeps a few files while written to, and
once nothing new comes to it (every small file a rewrite's) it is merged whole, once. Files of an older partition
spec are all rewritten, tiers or not: into the current spec.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from pyiceberg.manifest import DataFile, DataFileContent, ManifestEntry
from pyiceberg.table import Table
from pyiceberg.table.snapshots import Operation

from appliance.config.policy import Policy
from appliance.config.settings import Settings
from appliance.core.activity import give_way
from appliance.core.errors import RewriteConflict
from appliance.core.failpoints import failpoint
from appliance.core.vocabulary import RunOutcome
from appliance.maintenance.job import Job
from appliance.maintenance.rewrite import REWRITTEN, RewriteGroup, repartitions, rewrite_groups
from appliance.mergeonread.deletes import LiveDeletes, live_deletes
from appliance.mergeonread.folding import REWRITE_KEY, FoldMap
from appliance.mergeonread.store import index_directory
from appliance.tables.catalog import Catalog
from appliance.tables.commits import commit_rewrite
from appliance.tables.datafiles import TableTarget, delete_files, live_entries
from appliance.tables.snapshots import MAINTENANCE_KEY, Totals, totals

MIN_GROUP_FILES = 2  # rewriting one file alone into one file gains nothing
# A task rewrites up to this many target sizes of input. Its writer cuts files at the target
# on disk, so only its last file is short: bigger groups mean fewer short files, more
# groups mean more tasks at once.
GROUP_TARGETS = 8
DELETED_SHARE = 10  # position deletes of a tenth of the rows make reads slow enough to compact


@dataclass
class CompactionPlan:
    files: int  # live data files in the table
    bytes: int
    small_files: int
    small_bytes: int
    groups: list[RewriteGroup] = field(default_factory=list)
    delete_files: int = 0  # live position-delete files (an upsert table's)
    deleted_rows: int = 0  # rows they delete
    rows: int = 0  # rows in the data files, deleted ones included
    fold: FoldMap = field(default_factory=FoldMap)  # filled by the rewrite: where each row went

    @property
    def files_to_rewrite(self) -> int:
        return sum(len(g.files) for g in self.groups)

    @property
    def bytes_to_rewrite(self) -> int:
        return sum(g.bytes for g in self.groups)

    def triggered(self, policy: Policy) -> bool:
        """Whether the table needs compaction on its own (a manual run needs only groups): many small
        files, or position deletes that reads pay for (many files of them, or a tenth of the rows)."""
        if not self.groups:
            return False
        if self.delete_files >= policy.compact_small_files:
            return True
        if self.deleted_rows and self.deleted_rows * DELETED_SHARE >= self.rows:
            return True
        return _many_small(self.small_files, self.bytes / max(1, self.files), policy)


def summary_verdict(held: Totals, policy: Policy) -> tuple[bool | None, int]:
    """Whether the table needs compaction, told from its snapshot summary alone (no manifest read), and the
    small files it holds at least: True, False, or None when only the plan can tell (delete files, or a few
    large files among the small). Its data files under the small size number at least all of them less the
    total size over the small size; the summary's average is `triggered`'s. True may still find no group to
    rewrite (one small file per partition): the run then says it had nothing to do."""
    if held.delete_files:
        return None, 0
    files = held.data_files
    small = max(0, files - held.size_bytes // max(1, policy.small_file_size))
    average = held.size_bytes / max(1, files)
    if _many_small(small, average, policy):
        return True, small
    if files < policy.compact_small_files and (files < 5 or average >= policy.compact_min_average_size):
        return False, 0
    return None, small


def _many_small(small: int, average: float, policy: Policy) -> bool:
    """The small-files rule, told by a plan and by a snapshot summary alike: many small files, or a few with
    a small average size."""
    return small >= policy.compact_small_files or (small >= 5 and average < policy.compact_min_average_size)


def plan_compaction(table: Table, policy: Policy) -> CompactionPlan:
    entries = live_entries(table)
    data = [e for e in entries if e.data_file.content == DataFileContent.DATA]
    deletes = live_deletes(table, entries)
    small = {e.data_file.file_path for e in data if e.data_file.file_size_in_bytes < policy.small_file_size}
    plan = CompactionPlan(
        files=len(data),
        bytes=sum(e.data_file.file_size_in_bytes for e in data),
        small_files=len(small),
        small_bytes=sum(e.data_file.file_size_in_bytes for e in data if e.data_file.file_path in small),
        delete_files=len(deletes.files),
        deleted_rows=sum(len(p) for p in deletes.positions.values()),
        rows=sum(e.data_file.record_count for e in data),
    )
    plan.fold.known = set(deletes.files)
    # Small files, and every file some rows of which are deleted by position: rewritten, its deletes
    # are folded in and its delete files dropped once they name no live file.
    chosen = [e for e in data if e.data_file.file_path in small or e.data_file.file_path in deletes.positions]
    by_partition: dict[tuple, list[ManifestEntry]] = {}
    for e in chosen:
        key = (e.data_file.spec_id, tuple(e.data_file.partition))
        by_partition.setdefault(key, []).append(e)
    for (spec_id, _), group_entries in sorted(by_partition.items(), key=lambda kv: repr(kv[0])):
        group_entries.sort(key=lambda e: (e.sequence_number or 0, e.data_file.file_path))
        if spec_id == table.metadata.default_spec_id:  # an older spec's files all move to the current one
            group_entries = newer_worth_merging(group_entries, deletes.positions)
        current: list = []
        size = 0
        for e in group_entries:
            f = e.data_file
            if current and size + f.file_size_in_bytes > GROUP_TARGETS * policy.target_file_size:
                plan.groups.append(_group(current, spec_id, deletes))
                current, size = [], 0
            current.append(f)
            size += f.file_size_in_bytes
        if current:
            plan.groups.append(_group(current, spec_id, deletes))
    # Rewriting one file alone gains nothing, unless it folds its deletes in or moves to the current spec.
    current = table.metadata.default_spec_id
    plan.groups = [g for g in plan.groups if len(g.files) >= MIN_GROUP_FILES or g.spec_id != current
                   or any(d is not None for d in g.deleted)]
    return plan


def newer_worth_merging(entries: list[ManifestEntry], deleted: Any) -> list[ManifestEntry]:
    """A partition's small files (oldest first) less its oldest while each holds more rows than all the files
    after it: what one compaction merges (see the module's rule). All of them when none is new (every one a
    rewrite's: the partition is no longer written to); a file some rows of which are deleted by position
    (`deleted`: by path) is never left out (its deletes are folded in)."""
    if all(e.data_file.file_path.rsplit("/", 1)[-1].startswith(REWRITTEN) for e in entries):
        return entries
    after = sum(e.data_file.record_count for e in entries)
    for i, e in enumerate(entries):
        after -= e.data_file.record_count
        if e.data_file.file_path in deleted or e.data_file.record_count <= after:
            return entries[i:]
    return []


def _group(files: list[DataFile], spec_id: int, deletes: LiveDeletes) -> RewriteGroup:
    return RewriteGroup(tuple(files), spec_id, files[0].partition, tuple(deletes.of(f.file_path) for f in files))


@dataclass
class CompactionResult:
    plan: CompactionPlan
    files_after: int = 0
    bytes_after: int = 0
    files_written: int = 0
    rows: int = 0
    snapshot_id: int | None = None


def compact(
    settings: Settings, catalog: Catalog, table: Table, policy: Policy, spark, plan: CompactionPlan | None = None
) -> CompactionResult:
    plan = plan or plan_compaction(table, policy)
    result = CompactionResult(plan, files_after=plan.files, bytes_after=plan.bytes)
    if not plan.groups:
        return result
    results = rewrite_groups(spark, TableTarget.of(table), plan.groups, policy.target_file_size,
                             in_process=settings.maintenance.rewrite_in_engine)
    added = [f for r in results for f in r.files]
    removed = [f for g in plan.groups for f in g.files]
    rows_in, rows_out = sum(r.rows_in for r in results), sum(r.rows_out for r in results)
    if rows_in != rows_out:  # never commit a rewrite that would lose or invent rows
        delete_files(table, [f.file_path for f in added])
        raise RewriteConflict(f"rewrite read {rows_in} rows but wrote {rows_out}; nothing committed")
    for g, r in zip(plan.groups, results):
        plan.fold.add([f.file_path for f in g.files], r.kept, r.files)
        if repartitions(table.metadata, g):
            plan.fold.scattered.update(f.file_path for f in g.files)
    properties = {MAINTENANCE_KEY: "compaction"}
    rewrite_id = plan.fold.save(index_directory(settings.home, table))
    if rewrite_id:  # the table's key index follows its rows through this map (mergeonread/lineage.py)
        properties[REWRITE_KEY] = rewrite_id
    failpoint("rewrite_map_saved", "compaction")
    give_way()  # the commit is Python work too: in a gap, and before the lock, never while holding it
    table = commit_rewrite(settings, table, removed, added, Operation.REPLACE, properties, carrier=plan.fold)
    failpoint("rewrite_committed", "compaction")
    after = totals(table)
    result.snapshot_id, result.files_after, result.bytes_after = after.snapshot_id, after.data_files, after.size_bytes
    result.files_written = len(added)
    result.rows = rows_out
    return result


def perform(job: Job) -> None:
    """Compact the table (or, dry, say what compaction would do) and describe it on the run."""
    run, policy = job.run, job.policy
    plan = plan_compaction(job.table, policy)
    run.files_before, run.bytes_before = plan.files, plan.bytes
    if not plan.groups:
        run.files_after, run.bytes_after = plan.files, (None if job.dry_run else plan.bytes)
        run.rows_rewritten = 0
        run.outcome, run.detail = RunOutcome.NOTHING_TO_DO, f"{plan.small_files} small files, none to merge"
        return
    if job.dry_run:
        run.rows_rewritten = sum(g.rows for g in plan.groups)
        at_least = sum(-(-g.bytes // policy.target_file_size) for g in plan.groups)  # if nothing compressed better
        run.files_after = plan.files - plan.files_to_rewrite + at_least
        run.detail = _detail(plan, at_least, policy, "at most ")
        return
    result = compact(job.settings, job.catalog, job.table, policy, job.spark(), plan)
    run.files_after, run.bytes_after = result.files_after, result.bytes_after
    run.rows_rewritten, run.snapshot_id = result.rows, result.snapshot_id
    run.detail = _detail(plan, result.files_written, policy)


def _detail(plan: CompactionPlan, written: int, policy: Policy, qualifier: str = "") -> str:
    folded = (f"; {plan.deleted_rows:,} deleted rows of {plan.delete_files} delete files folded in"
              if plan.delete_files else "")
    kind = "files" if plan.delete_files else "small files"
    return (f"{plan.files_to_rewrite} {kind} ({plan.bytes_to_rewrite:,} bytes) into {qualifier}{written} "
            f"(target {policy.target_file_size:,} bytes){folded}")
