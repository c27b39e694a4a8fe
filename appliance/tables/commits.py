"""Commits: a stream's data files with its offsets in one snapshot, and maintenance rewrites.

Iceberg commits are optimistic; both kinds retry on fresh metadata when another writer
won the race, each under the rule that keeps it correct (see the functions).
"""

from __future__ import annotations

import logging
import random
import time
from typing import Any

from pyiceberg.exceptions import CommitFailedException, ValidationException
from pyiceberg.manifest import DataFile
from pyiceberg.table import Table
from pyiceberg.table.snapshots import Operation, Summary
from pyiceberg.table.update.snapshot import _OverwriteFiles
from pyiceberg.typedef import EMPTY_DICT

from appliance.config.settings import Settings
from appliance.core.errors import CommitConflict, OffsetsConflict, RewriteConflict, StageConflict
from appliance.core.locks import FileLock
from appliance.tables.appends import append_files
from appliance.tables.datafiles import delete_files, live_data_files
from appliance.tables.snapshots import (
    MAINTENANCE_KEY,
    RETENTION_DELETED_KEY,
    committed_offsets,
    offsets_properties,
    offsets_summary,
    retention_deleted,
    stage_position,
    stage_properties,
    stream_snapshot_id,
)
from appliance.tables.transactions import transaction

log = logging.getLogger(__name__)


def commit_lock(settings: Settings, table: str) -> FileLock:
    """Serialises commits to one table between Floe's processes (the engine, `floe maintain`).

    Iceberg's optimistic commits would be correct without it, but a stream commits every
    second, and a rewrite that must rebuild its manifests on each lost race could lose
    every race. Held only while committing, never while data is rewritten.
    """
    return FileLock(settings.home / "locks" / f"{table}.commit.lock")


def commit_files(
    table: Table,
    files: list[Any],
    stream_id: str,
    topic: str,
    expected: dict[int, int] | None,
    offsets: dict[int, int],
    attempts: int = 5,
) -> tuple[Table, int | None]:
    """Append `files` with `offsets` in the same snapshot; returns the table and the snapshot id.

    A lost race with another writer (maintenance, say) is retried on fresh
    metadata, but only while the table still holds the offsets this batch was
    planned from: anything else means a second engine writes the stream.
    """
    props = offsets_properties(stream_id, topic, offsets)
    for attempt in range(attempts):
        if attempt:
            table = table.refresh()
            found = committed_offsets(table, stream_id)
            if found == offsets:
                return table, stream_snapshot_id(table, stream_id)  # our commit landed before the error
            if found != expected:
                raise OffsetsConflict(
                    f"table {'.'.join(table.name())} holds offsets {found} for this stream, expected {expected}"
                )
        try:
            table = append_files(table, files, props)
            return table, table.current_snapshot().snapshot_id
        except CommitFailedException as exc:
            log.info("commit to %s lost a race (%s), retrying", table.name(), exc)
            time.sleep(min(0.05 * 2**attempt, 1.0))
    raise CommitConflict(f"table {'.'.join(table.name())}: commit failed {attempts} times in a row")


class _RewriteFiles(_OverwriteFiles):
    """Removes and adds whole data files in one snapshot: `replace` for compaction (same
    rows), `overwrite` or `delete` for retention (fewer rows).

    PyIceberg computes summary totals only for append/overwrite/delete, so a `replace` is
    totalled as an overwrite and then labelled. The stream offsets are copied from the
    parent when the snapshot is built, so a retried commit carries the newest ones.
    """

    def __init__(self, label: Operation, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._label = label

    def _summary(self, snapshot_properties: dict[str, str] = EMPTY_DICT) -> Summary:
        carried = offsets_summary(self._transaction.table_metadata, self._parent_snapshot_id)
        self._operation = Operation.OVERWRITE if self._label == Operation.REPLACE else self._label
        summary = super()._summary({**carried, **snapshot_properties})
        self._operation = self._label
        return Summary(operation=self._label, **summary.additional_properties)

    def _validate_concurrency(self) -> None:
        # Appends committed meanwhile do not conflict with removing other files; that the
        # removed files are all still there is checked when the deletes are planned.
        return None


def _swap(table: Table, remove: list[DataFile], add: list[DataFile], label: Operation,
          properties: dict[str, str]) -> Table:
    """One snapshot (labelled `label`) without `remove` and with `add`; raises as PyIceberg does."""
    tx = transaction(table)
    producer = _RewriteFiles(label, Operation.OVERWRITE, tx, table.io, snapshot_properties=properties)
    for data_file in remove:
        producer.delete_data_file(data_file)
    for data_file in add:
        producer.append_data_file(data_file)
    producer.commit()
    if properties.get(MAINTENANCE_KEY) == "retention":  # in the same commit as the deletes
        deleted = sum(f.record_count for f in remove) - sum(f.record_count for f in add)
        tx.set_properties({RETENTION_DELETED_KEY: str(retention_deleted(table) + deleted)})
    return tx.commit_transaction()


def commit_rewrite(
    settings: Settings,
    table: Table,
    remove: list[DataFile],
    add: list[DataFile],
    label: Operation,
    properties: dict[str, str],
    deadline: float = 300.0,
) -> Table:
    """Commit `remove` -> `add` as one snapshot; retried on fresh metadata while others commit.

    Raises RewriteConflict when a file to remove is gone (another task rewrote it), and
    CommitConflict when it keeps losing races; `add` is deleted from storage first, as
    nothing references it then.
    """
    name = ".".join(table.name())
    started = time.monotonic()
    attempt = 0
    while True:
        try:
            with commit_lock(settings, name):
                return _swap(table.refresh(), remove, add, label, properties)
        except ValidationException as exc:
            delete_files(table, [f.file_path for f in add])
            raise RewriteConflict(f"table {name}: files to rewrite changed meanwhile ({exc})") from None
        except CommitFailedException as exc:
            attempt += 1
            if time.monotonic() - started > deadline:
                delete_files(table, [f.file_path for f in add])
                raise CommitConflict(f"table {name}: commit lost {attempt} races in {deadline:.0f}s: {exc}") from None
            log.info("rewrite of %s lost a race (%s); retrying", name, exc)
            time.sleep(random.uniform(0.05, min(2.0, 0.1 * 2**attempt)))


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
    for attempt in range(8):
        with commit_lock(settings, name):
            table = table.refresh()
            found = stage_position(table, stage_id)
            if found == position and attempt:
                return table  # our commit landed before the error that made us retry
            problem = None if found == expected else f"it holds source snapshot {found}, the run read {expected}"
            if replacing is not None and problem is None:
                now_files = {f.file_path for f in live_data_files(table)}
                if now_files != {f.file_path for f in replacing}:
                    problem = "its files changed since the run read them (compaction, say)"
            if problem:
                delete_files(table, [f.file_path for f in files])
                raise StageConflict(f"stage table {name}: {problem}; the stage runs again")
            try:
                if replacing is None:
                    return append_files(table, files, props)
                return _swap(table, replacing, files, Operation.OVERWRITE, props)
            except CommitFailedException as exc:
                log.info("stage commit to %s lost a race (%s); retrying", name, exc)
        time.sleep(min(0.05 * 2**attempt, 1.0))
    delete_files(table, [f.file_path for f in files])
    raise CommitConflict(f"table {name}: stage commit lost 8 races in a row")
