"""Commits: a stream's data files with its offsets in one snapshot, and maintenance rewrites.

Iceberg commits are optimistic; both kinds retry on fresh metadata when another writer
won the race, each under the rule that keeps it correct (see the functions).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol, TypeVar

from pyiceberg.exceptions import CommitFailedException
from pyiceberg.manifest import DataFile, DataFileContent, ManifestEntry
from pyiceberg.table import Table
from pyiceberg.table.snapshots import Operation

from appliance.config.settings import Settings
from appliance.core.errors import CommitConflict, OffsetsConflict, RewriteConflict, StageConflict
from appliance.core.locks import FileLock
from appliance.core.retry import retrying
from appliance.tables.datafiles import delete_files, live_data_files, live_data_paths, live_entries
from appliance.tables.fastpath.appends import append_files
from appliance.tables.fastpath.changes import FileChanges, commit_changes
from appliance.tables.fastpath.recent import RECENT
from appliance.tables.snapshots import (
    MAINTENANCE_KEY,
    RETENTION_DELETED_KEY,
    committed_offsets,
    holds_no_deletes,
    offsets_properties,
    offsets_summary,
    retention_deleted,
    stage_position,
    stage_properties,
    stream_snapshot_id,
)

log = logging.getLogger(__name__)


@dataclass
class Carried:
    """What a rewrite's commit does with the table's position deletes (`mergeonread.folding` says)."""

    added: list[DataFile] = field(default_factory=list)  # deletes carried onto the rewrite's new files
    removed: list[DataFile] = field(default_factory=list)  # delete files naming no live data file any more
    deleted_rows: Callable[[str], int] = lambda path: 0  # a data file's rows deleted by position
    fresh: list[DataFile] = field(default_factory=list)  # of `added`, those written for this attempt alone


class Carrier(Protocol):
    """What a rewrite does with the position deletes an upsert stream commits while it runs
    (`mergeonread.folding.FoldMap`)."""

    def carry_ahead(self, table: Table) -> None:
        """Before the commit lock: carry those committed so far (kept for every attempt)."""

    def carry(self, table: Table, entries: list[ManifestEntry] | None, live_data: set[str]) -> Carried:
        """Under the lock, on the table as the commit finds it (`entries`: its live ones, None where its
        snapshot says it holds no delete file): all that was carried (ahead and now), and the delete files
        that name no live data file (`live_data`) any more."""

    def forget_ahead(self, table: Table) -> None:
        """The rewrite will not commit: what was carried ahead is deleted (nothing references it)."""


def commit_lock(settings: Settings, table: str) -> FileLock:
    """Serialises commits to one table between Floe's processes (the engine, `floe maintain`).

    Iceberg's optimistic commits would be correct without it, but a stream commits every
    second, and a rewrite that must rebuild its manifests on each lost race could lose
    every race. Held only while committing, never while data is rewritten.
    """
    return FileLock(settings.home / "locks" / f"{table}.commit.lock")


def commit_files(
    table: Table,
    files: list[DataFile],
    stream_id: str,
    topic: str,
    expected: dict[int, int] | None,
    offsets: dict[int, int],
    attempts: int = 5,
) -> tuple[Table, int | None]:
    """Append `files` with `offsets` in the same snapshot; returns the table and the snapshot id."""
    props = offsets_properties(stream_id, topic, offsets)

    def append(t: Table) -> tuple[Table, int | None]:
        t = append_files(t, files, props)
        return t, t.current_snapshot().snapshot_id

    return commit_with_offsets(table, stream_id, expected, offsets, "commit", append, lambda t, landed: (t, landed),
                               attempts)


Done = TypeVar("Done")  # what a batch's commit returns


def commit_with_offsets(table: Table, stream_id: str, expected: dict[int, int] | None, offsets: dict[int, int],
                        what: str, commit: Callable[[Table], Done], landed: Callable[[Table, int], Done],
                        attempts: int = 5) -> Done:
    """`commit(table)`, a batch's commit of `offsets`. A lost race with another writer (maintenance,
    say) is retried on fresh metadata, but only while the table still holds the offsets this batch was
    planned from (`expected`): if the commit landed before the error, `landed(table, its snapshot id)`;
    anything else means a second engine writes the stream."""
    name = ".".join(table.name())
    try:
        for attempt in retrying(CommitFailedException, f"{what} to {name}", attempts=attempts):
            with attempt:
                if attempt.retry_state.attempt_number > 1:
                    table = table.refresh()
                    landed_id = already_committed(table, stream_id, expected, offsets)
                    if landed_id is not None:
                        return landed(table, landed_id)
                return commit(table)
    except CommitFailedException:
        raise CommitConflict(f"table {name}: {what} failed {attempts} times in a row") from None


def already_committed(table: Table, stream_id: str, expected: dict[int, int] | None,
                      offsets: dict[int, int]) -> int | None:
    """After a lost race, on fresh metadata: the snapshot id if our commit landed before the error
    (the table holds `offsets`); None if the table still holds `expected` (retry); otherwise a second
    engine writes the stream (OffsetsConflict)."""
    found = committed_offsets(table, stream_id)
    if found == offsets:
        return stream_snapshot_id(table, stream_id)
    if found != expected:
        raise OffsetsConflict(f"table {'.'.join(table.name())} holds offsets {found} for this stream, "
                              f"expected {expected}")
    return None


def _swap(table: Table, remove: list[DataFile], add: list[DataFile], label: Operation,
          properties: dict[str, str], carrier: Carrier | None = None) -> Table:
    """One snapshot (labelled `label`) without `remove` and with `add`, carrying the parent's stream
    offsets. Position deletes committed since the rewrite read its files are carried over to the new
    ones (`carrier`), and delete files left naming no live data file are dropped in the same snapshot.
    Raises RewriteConflict when a file to remove is gone, CommitFailedException on a lost race."""
    t0 = time.monotonic()
    gone = {f.file_path for f in remove}
    if holds_no_deletes(table.current_snapshot()):  # no delete file to carry or drop: the live files' paths do
        entries, live = None, live_data_paths(table)
    else:
        entries = live_entries(table)
        live = {e.data_file.file_path for e in entries if e.data_file.content == DataFileContent.DATA}
    live = (live - gone) | {f.file_path for f in add}
    t1 = time.monotonic()
    carried = carrier.carry(table, entries, live) if carrier else Carried()
    t2 = time.monotonic()
    changes = FileChanges(data=add, deletes=carried.added, removed=remove + carried.removed)
    extra = None
    if properties.get(MAINTENANCE_KEY) == "retention":  # in the same commit as the deletes
        deleted = sum(f.record_count - carried.deleted_rows(f.file_path) for f in remove) \
            - sum(f.record_count for f in add)
        extra = {RETENTION_DELETED_KEY: str(retention_deleted(table) + deleted)}
    carried_offsets = offsets_summary(table.metadata, table.metadata.current_snapshot_id)
    try:
        table = commit_changes(table, changes, label, {**carried_offsets, **properties}, extra)
        RECENT.forget(gone)  # rewritten away: their kept rows are not read again
        log.info("%s of %s: %d live files found in %.2f s, deletes carried in %.2f s, committed in %.2f s",
                 label.value, ".".join(table.name()), len(live), t1 - t0, t2 - t1, time.monotonic() - t2)
        return table
    except BaseException:
        delete_files(table, [f.file_path for f in carried.fresh])  # never referenced
        raise


def commit_rewrite(
    settings: Settings,
    table: Table,
    remove: list[DataFile],
    add: list[DataFile],
    label: Operation,
    properties: dict[str, str],
    deadline: float = 300.0,
    carrier: Carrier | None = None,
) -> Table:
    """Commit `remove` -> `add` as one snapshot; retried on fresh metadata while others commit.

    The deletes an upsert stream committed while the rewrite ran are carried onto its new files
    before the table's commit lock is taken; under it, only those committed since (a stream commits
    every second: carrying a rewrite's worth of them under the lock held its batches for 12 s at
    10^8 keys). Raises RewriteConflict when a file to remove is gone (another task rewrote it), and
    CommitConflict when it keeps losing races; `add` and what was carried are deleted from storage
    first, as nothing references them then.
    """
    name = ".".join(table.name())
    try:
        if carrier:
            carrier.carry_ahead(table.refresh())
        for attempt in retrying(CommitFailedException, f"rewrite of {name}", seconds=deadline):
            with attempt, commit_lock(settings, name):
                return _swap(table.refresh(), remove, add, label, properties, carrier)
    except RewriteConflict as exc:
        _abandon(table, add, carrier)
        raise RewriteConflict(f"table {name}: files to rewrite changed meanwhile ({exc})") from None
    except CommitFailedException as exc:
        _abandon(table, add, carrier)
        raise CommitConflict(f"table {name}: commit kept losing races for {deadline:.0f}s: {exc}") from None


def _abandon(table: Table, add: list[DataFile], carrier: Carrier | None) -> None:
    delete_files(table, [f.file_path for f in add])
    if carrier:
        carrier.forget_ahead(table)


def commit_stage(settings: Settings, table: Table, files: list[DataFile], stage_id: str, source: str,
                 expected: int | None, position: int, replacing: list[DataFile] | None = None) -> Table:
    """A stage's output in one snapshot with the source snapshot it has read up to (`position`):
    appended, or, for `replacing` (the table's data files as the run read them), in their place.

    Retried on fresh metadata while others commit (maintenance appends nothing to a stage's table,
    but compacts it), as long as the table still holds the position the run started from
    (`expected`) and, when replacing, exactly the files the run read: otherwise the run's rows
    would not follow from the table's, and it must run again (StageConflict).
    """
    name = ".".join(table.name())
    props = stage_properties(stage_id, source, position)
    try:
        for attempt in retrying(CommitFailedException, f"stage commit to {name}", attempts=8):
            with attempt, commit_lock(settings, name):
                table = table.refresh()
                found = stage_position(table, stage_id)
                if found == position and attempt.retry_state.attempt_number > 1:
                    return table  # our commit landed before the error that made us retry
                problem = None if found == expected else f"it holds source snapshot {found}, the run read {expected}"
                if replacing is not None and problem is None:
                    now_files = {f.file_path for f in live_data_files(table)}
                    if now_files != {f.file_path for f in replacing}:
                        problem = "its files changed since the run read them (compaction, say)"
                if problem:
                    delete_files(table, [f.file_path for f in files])
                    raise StageConflict(f"stage table {name}: {problem}; the stage runs again")
                if replacing is None:
                    return append_files(table, files, props)
                return _swap(table, replacing, files, Operation.OVERWRITE, props)
    except CommitFailedException:
        delete_files(table, [f.file_path for f in files])
        raise CommitConflict(f"table {name}: stage commit lost 8 races in a row") from None
