"""Iceberg bookkeeping that PyIceberg 0.12 does not do: rewrite commits, live and reachable files.

Every maintenance commit carries the stream offsets of its parent snapshot forward
into its own summary, so the newest snapshot of a table always holds the offsets of
the stream that writes it. That is what lets snapshot expiry drop old snapshots
without ever breaking exactly-once resumption (see `catalog.committed_offsets`).
"""

from __future__ import annotations

import logging
import random
import time
from dataclasses import dataclass
from typing import Any, Iterable

from pyiceberg.exceptions import CommitFailedException, ValidationException
from pyiceberg.manifest import DataFile, DataFileContent, ManifestEntry, ManifestEntryStatus
from pyiceberg.table import Table
from pyiceberg.table.metadata import TableMetadata
from pyiceberg.table.snapshots import Operation, Snapshot, Summary, ancestors_of
from pyiceberg.table.update.snapshot import _OverwriteFiles
from pyiceberg.typedef import EMPTY_DICT

from appliance.catalog import OFFSETS_KEY, STREAM_KEY, TOPIC_KEY, table_properties
from appliance.errors import CommitConflict, RewriteConflict
from appliance.locks import FileLock
from appliance.settings import Settings

log = logging.getLogger(__name__)

MAINTENANCE_KEY = "floe.maintenance"  # which task made a snapshot


def ensure_table_properties(table: Table, settings: Settings) -> Table:
    wanted = table_properties(settings)
    if all(table.metadata.properties.get(k) == v for k, v in wanted.items()):
        return table
    with commit_lock(settings, ".".join(table.name())):
        with table.transaction() as tx:
            tx.set_properties(wanted)
    return table.refresh()


def commit_lock(settings: Settings, table: str) -> FileLock:
    """Serialises commits to one table between Floe's processes (the engine, `floe maintain`).

    Iceberg's optimistic commits would be correct without it, but a stream commits every
    second, and a rewrite that must rebuild its manifests on each lost race could lose
    every race. Held only while committing, never while data is rewritten.
    """
    return FileLock(settings.home / "locks" / f"{table}.commit.lock")


def summary_properties(snapshot: Snapshot | None) -> dict[str, str]:
    return snapshot.summary.additional_properties if snapshot is not None and snapshot.summary else {}


def offsets_summary(metadata: TableMetadata, snapshot_id: int | None) -> dict[str, str]:
    """The stream-offset keys of the newest snapshot at or before `snapshot_id` that has them."""
    start = metadata.snapshot_by_id(snapshot_id) if snapshot_id is not None else None
    for snapshot in ancestors_of(start, metadata):
        summary = summary_properties(snapshot)
        if STREAM_KEY in summary and OFFSETS_KEY in summary:
            return {k: summary[k] for k in (STREAM_KEY, TOPIC_KEY, OFFSETS_KEY) if k in summary}
    return {}


def offsets_snapshot_chain(metadata: TableMetadata) -> list[int]:
    """The current snapshot and its ancestors down to the newest one holding stream offsets.

    Expiry keeps all of them, so that `committed_offsets`, which walks this chain, finds
    the offsets whatever was committed on top of them.
    """
    chain: list[int] = []
    for snapshot in ancestors_of(metadata.current_snapshot(), metadata):
        chain.append(snapshot.snapshot_id)
        if STREAM_KEY in summary_properties(snapshot):
            return chain
    return chain[:1]  # no offsets anywhere: only the current snapshot matters


def ancestors(metadata: TableMetadata) -> list[Snapshot]:
    """The current snapshot and its ancestors, newest first, as far as they are kept."""
    return list(ancestors_of(metadata.current_snapshot(), metadata))


def live_entries(table: Table, snapshot: Snapshot | None = None) -> list[ManifestEntry]:
    snapshot = snapshot or table.current_snapshot()
    if snapshot is None:
        return []
    return [e for m in snapshot.manifests(table.io) for e in m.fetch_manifest_entry(table.io, discard_deleted=True)]


def live_data_files(table: Table, snapshot: Snapshot | None = None) -> list[DataFile]:
    return [e.data_file for e in live_entries(table, snapshot) if e.data_file.content == DataFileContent.DATA]


@dataclass
class Reachable:
    """Every file some set of snapshots needs: manifest lists, manifests, data and delete files."""

    manifest_lists: set[str]
    manifests: set[str]
    content: set[str]

    def all(self) -> set[str]:
        return self.manifest_lists | self.manifests | self.content


def reachable_files(table: Table, snapshots: Iterable[Snapshot]) -> Reachable:
    out = Reachable(set(), set(), set())
    read: set[str] = set()  # manifests are shared between snapshots: read each once
    for snapshot in snapshots:
        out.manifest_lists.add(snapshot.manifest_list)
        for manifest in snapshot.manifests(table.io):
            out.manifests.add(manifest.manifest_path)
            if manifest.manifest_path in read:
                continue
            read.add(manifest.manifest_path)
            for entry in manifest.fetch_manifest_entry(table.io, discard_deleted=False):
                # A DELETED entry records a removal: the file is not part of that snapshot.
                if entry.status != ManifestEntryStatus.DELETED:
                    out.content.add(entry.data_file.file_path)
    return out


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
                table = table.refresh()
                tx = table.transaction()
                producer = _RewriteFiles(label, Operation.OVERWRITE, tx, table.io, snapshot_properties=properties)
                for data_file in remove:
                    producer.delete_data_file(data_file)
                for data_file in add:
                    producer.append_data_file(data_file)
                producer.commit()
                return tx.commit_transaction()
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


def delete_files(table: Table, paths: Iterable[str]) -> tuple[int, list[str]]:
    """Delete files from storage; the number deleted and the failures (one line each)."""
    deleted, failed = 0, []
    for path in sorted(paths):
        try:
            table.io.delete(path)
            deleted += 1
        except FileNotFoundError:
            deleted += 1  # gone already: an earlier run was interrupted after deleting it
        except OSError as exc:
            failed.append(f"{path}: {' '.join(str(exc).split())}")
    return deleted, failed


def snapshot_totals(table: Table) -> tuple[int | None, int, int]:
    """The current snapshot's id, data files and bytes, from its summary."""
    snapshot = table.current_snapshot()
    summary = summary_properties(snapshot)
    return (snapshot.snapshot_id if snapshot else None, int(summary.get("total-data-files", 0)),
            int(summary.get("total-files-size", 0)))
