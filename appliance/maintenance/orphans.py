"""Orphan files: files under a table's location that no metadata references.

They come from work that never committed: a batch whose engine was killed, a rewrite
that lost to a conflict. Only files older than the policy's safety age are deleted,
so a commit in flight (whose files exist before its snapshot does) is never touched.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from pyarrow.fs import FileSelector, FileType
from pyiceberg.io.pyarrow import PyArrowFileIO
from pyiceberg.table import Table

from appliance.config.policy import Policy
from appliance.core.vocabulary import RunOutcome
from appliance.maintenance.job import Job, delete_giving_way
from appliance.tables.datafiles import reachable_files


@dataclass
class OrphanResult:
    files_scanned: int = 0
    orphans: list[str] = field(default_factory=list)  # as URIs
    orphan_bytes: int = 0
    files_deleted: int = 0
    failures: list[str] = field(default_factory=list)


def _key(location: str) -> str:
    """A location as the file system lists it: '/abs/path' or 'bucket/key'."""
    _, _, path = PyArrowFileIO.parse_location(location)
    return path


def referenced_files(table: Table) -> set[str]:
    meta = table.metadata
    refs = reachable_files(table, meta.snapshots).all()
    refs.add(table.metadata_location)
    refs |= {entry.metadata_file for entry in meta.metadata_log}
    refs |= {s.statistics_path for s in meta.statistics}
    refs |= {s.statistics_path for s in meta.partition_statistics}
    return {_key(r) for r in refs}


def find_orphans(table: Table, policy: Policy, now: float | None = None) -> OrphanResult:
    now = now if now is not None else time.time()
    location = table.metadata.location
    scheme, netloc, root = PyArrowFileIO.parse_location(location)
    fs = PyArrowFileIO(dict(table.io.properties)).fs_by_scheme(scheme, netloc)
    referenced = referenced_files(table)  # files newer than this read are young: the age rule keeps them
    prefix = location[: len(location) - len(root)] if location.endswith(root) else f"{scheme}://"
    result = OrphanResult()
    for info in fs.get_file_info(FileSelector(root, recursive=True, allow_not_found=True)):
        if info.type != FileType.File:
            continue
        result.files_scanned += 1
        if info.path in referenced:
            continue
        mtime = info.mtime.timestamp() if info.mtime is not None else now
        if now - mtime < policy.orphan_age:
            continue
        result.orphans.append(prefix + info.path)
        result.orphan_bytes += info.size or 0
    result.orphans.sort()
    return result


def remove_orphans(table: Table, policy: Policy, dry_run: bool = False) -> OrphanResult:
    result = find_orphans(table, policy)
    if not dry_run and result.orphans:
        result.files_deleted, result.failures = delete_giving_way(table, result.orphans)
    return result


def perform(job: Job) -> None:
    """Delete orphan files (or, dry, count them) and describe it on the run."""
    run, policy = job.run, job.policy
    result = remove_orphans(job.table, policy, dry_run=job.dry_run)
    run.files_deleted = result.files_deleted
    run.bytes_before = result.orphan_bytes
    if not result.orphans:
        run.outcome = RunOutcome.NOTHING_TO_DO
        run.detail = f"{result.files_scanned} files, no orphans older than {policy.orphan_age / 3600:g}h"
        return
    what = "would delete" if job.dry_run else "deleted"
    run.detail = f"{what} {len(result.orphans)} of {result.files_scanned} files ({result.orphan_bytes:,} bytes)"
    if job.dry_run:
        run.files_deleted = len(result.orphans)
    if result.failures:
        run.outcome = RunOutcome.FAILED
        run.detail += f"; {len(result.failures)} could not be deleted, first: {result.failures[0]}"
