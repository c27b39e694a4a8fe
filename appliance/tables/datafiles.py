"""Data files: writing them where a table keeps its data, finding the ones a snapshot uses, deleting.

`TableTarget` is what a Spark task needs to write data files for a table without a
catalog connection: the table's metadata as JSON and its storage properties.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterable

import pyarrow as pa
from pyiceberg.manifest import (
    DataFile,
    DataFileContent,
    ManifestContent,
    ManifestEntry,
    ManifestEntryStatus,
)
from pyiceberg.io import FileIO
from pyiceberg.table import Table
from pyiceberg.table.snapshots import Snapshot

from appliance.core.activity import give_way
from appliance.core.cache import Cache
from appliance.tables.fastpath.changes import MANIFESTS
from appliance.tables.fastpath.files import delete_file
from appliance.tables.fastpath.manifests import Listed
from appliance.tables.fastpath.parquet import TABLES_PER_WORKER, partitions, write_files
from appliance.tables.storage import describe, storage_errors


@dataclass(frozen=True)
class TableTarget:
    """What a task needs to write data files for one table, without a catalog."""

    metadata_json: str
    io_properties: dict[str, str] = field(repr=False)  # may hold S3 keys
    metadata_location: str = ""

    @classmethod
    def of(cls, table: Table) -> TableTarget:
        # Writing needs the schema, spec, properties and location, not the snapshot history:
        # without it the JSON stays small, and the same from one commit to the next, so a
        # worker parses it once, however many snapshots the table gathers.
        slim = table.metadata.model_copy(update={"snapshots": [], "snapshot_log": [], "metadata_log": [],
                                                 "refs": {}, "current_snapshot_id": None, "statistics": [],
                                                 "partition_statistics": [], "last_updated_ms": 0,
                                                 "last_sequence_number": 0})
        return cls(slim.model_dump_json(), dict(table.io.properties), table.metadata_location)

    def where(self) -> str:
        """The table's location as errors name it (never its keys)."""
        return describe(table_metadata(self).location, self.io_properties.get("s3.endpoint", ""))


# Keyed by the JSON itself: whatever changes in the table's schemas, specs or properties is another key.
_METADATA_CACHE: Cache[str, object] = Cache(TABLES_PER_WORKER)


def table_metadata(target: TableTarget):
    """The parsed metadata of `target`, parsed once per schema and properties in each Python worker."""
    from pyiceberg.table.metadata import TableMetadataUtil

    json = target.metadata_json
    return _METADATA_CACHE.make(json, lambda: TableMetadataUtil.parse_raw(json))


def write_data_files(target: TableTarget, table: pa.Table) -> list[DataFile]:
    """Iceberg DataFile descriptions of `table` written under the table's location (not committed)."""
    if table.num_rows == 0:
        return []
    with storage_errors(target.where(), "write data files"):
        return write_files(table_metadata(target), target.metadata_json, target.io_properties, table)


def in_file_order(target: TableTarget, table: pa.Table) -> pa.Table:
    """`table`'s rows in the order `write_data_files` lays them out in its files (partition by partition,
    each in its order), so that the files' rows, one file after the other, are the table's rows."""
    if table.num_rows == 0:
        return table
    import numpy as np

    numbered = table.append_column("__floe_row", pa.array(np.arange(table.num_rows)))
    groups = partitions(table_metadata(target), numbered)
    if len(groups) < 2:
        return table
    return table.take(pa.concat_arrays([rows.column("__floe_row").combine_chunks() for _, rows in groups]))


def live_entries(table: Table, snapshot: Snapshot | None = None) -> list[ManifestEntry]:
    snapshot = snapshot or table.current_snapshot()
    if snapshot is None:
        return []
    return [e for m in snapshot.manifests(table.io) for e in m.fetch_manifest_entry(table.io, discard_deleted=True)]


def live_data_files(table: Table, snapshot: Snapshot | None = None) -> list[DataFile]:
    return [e.data_file for e in live_entries(table, snapshot) if e.data_file.content == DataFileContent.DATA]


def live_data_paths(table: Table) -> set[str]:
    """The paths of the data files live in the current snapshot, as `live_data_files` without decoding their
    descriptions: each manifest's entries as this process kept them, else only their paths and statuses (a
    compaction's commit decoded every entry of a trickle's table whole, 35 ms, to learn which files are live)."""
    snapshot = table.current_snapshot()
    if snapshot is None:
        return set()
    return {path for m in MANIFESTS.manifests(table.io, snapshot.manifest_list) if m.content == ManifestContent.DATA
            for path in MANIFESTS.live_paths(table.io, m.manifest_path)}


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
    for snapshot in snapshots:
        out.manifest_lists.add(snapshot.manifest_list)
        for manifest in MANIFESTS.listed_paths(table.io, snapshot.manifest_list):
            if manifest not in out.manifests:  # manifests are shared between snapshots: read each once
                give_way()
                out.manifests.add(manifest)
                out.content.update(MANIFESTS.live_paths(table.io, manifest))
    return out


def unreachable_files(table: Table, gone: Iterable[Snapshot], kept: Iterable[Snapshot],
                      parents: dict[int, int | None] | None = None) -> set[str]:
    """The files the `gone` snapshots reference and no `kept` one does: `reachable_files(gone).all() -
    reachable_files(kept).all()`, without reading what cannot tell (`table`: its current snapshot is kept;
    `parents`: each snapshot's parent as committed, where an expiry has since dropped a kept one's).

    When the gone and kept snapshots are one line of ancestry back from the current snapshot, the gone ones its
    oldest part (a stream's table expired by the cap), `_dropped_on_the_line` reads only the lists and the
    manifests that remove files. Otherwise a manifest both sets list holds nothing to delete, so only the gone
    snapshots' own manifests are read for candidates, and the kept snapshots' manifests for the candidates they
    still hold."""
    io = table.io
    gone, kept = list(gone), list(kept)
    if not gone:
        return set()
    line = _the_line(table, gone, kept, parents or {})
    if line is not None:
        return _dropped_on_the_line(io, line[:len(kept)], line[len(kept):])
    kept_manifests = {p for s in kept for p in MANIFESTS.listed_paths(io, s.manifest_list)}
    out = {s.manifest_list for s in gone} - {s.manifest_list for s in kept}
    candidates: set[str] = set()
    for snapshot in gone:
        for manifest in MANIFESTS.listed_paths(io, snapshot.manifest_list):
            if manifest in kept_manifests or manifest in out:
                continue
            give_way()
            out.add(manifest)
            candidates.update(MANIFESTS.live_paths(io, manifest))
    for manifest in kept_manifests:
        if not candidates:
            break
        give_way()
        candidates.difference_update(MANIFESTS.live_paths(io, manifest))
    return out | candidates


def _dropped_on_the_line(io: FileIO, kept: list[Snapshot], gone: list[Snapshot]) -> set[str]:
    """`unreachable_files` of a line (`kept` its newest part, from the current snapshot back; `gone` the rest),
    as Java Iceberg's incremental cleanup finds them: every writer makes a snapshot's manifest list from its
    parent's and the manifests it adds, never lists a manifest again once it has dropped it, and records a file it
    removes as a DELETED entry, with its own snapshot id, in a manifest it adds. So what the gone snapshots share
    with any kept one they share with the oldest kept; they list the oldest gone one's manifests and those each
    later one added; and a file live in a gone snapshot and in no kept one is one that a snapshot after the oldest
    gone, up to the oldest kept, removed: its DELETED entry is in a manifest that snapshot added. Only those
    manifests are read, and of the lists only the oldest gone and oldest kept ones where this process wrote the
    others (`Manifests.new_in`); never the merged manifests of every live file (an expiry's cost when it read
    them: 0.4-0.55 ms a snapshot at a cap of 100). A file removed and then added again under the same path (which
    no writer of Floe's does) would be deleted: Java's cleanup does the same."""
    oldest_kept, current = kept[-1], kept[0]
    kept_manifests = {m.path for s in {oldest_kept.snapshot_id: oldest_kept, current.snapshot_id: current}.values()
                      for m in MANIFESTS.listed(io, s.manifest_list)}
    out = {s.manifest_list for s in gone} - {s.manifest_list for s in kept}
    listed = [*MANIFESTS.listed(io, gone[-1].manifest_list)]
    # The oldest gone snapshot's removals were live only before it: in no gone snapshot.
    removers = [*gone[:-1], oldest_kept]
    for snapshot in removers:
        listed += MANIFESTS.new_in(io, snapshot.manifest_list)
    removing: dict[str, Listed] = {}
    by = {s.snapshot_id for s in removers}
    for manifest in listed:
        if manifest.path not in kept_manifests:
            out.add(manifest.path)
        if manifest.added_by in by and manifest.deleted != 0:
            removing[manifest.path] = manifest
    for manifest in removing.values():
        give_way()
        out.update(path for remover, path in MANIFESTS.deleted_paths(io, manifest) if remover in by)
    return out


def forget_expired(snapshots: Iterable[Snapshot]) -> None:
    """Snapshots an expiry committed away: what their lists added is not asked again."""
    MANIFESTS.forget_lists(s.manifest_list for s in snapshots)


def _the_line(table: Table, gone: list[Snapshot], kept: list[Snapshot],
              parents: dict[int, int | None]) -> list[Snapshot] | None:
    """Every snapshot of `gone` and `kept`, from the table's current one back, when they are one line of ancestry
    from it, the kept ones its newest part; None otherwise (branches, tags elsewhere, snapshots expired between
    kept ones)."""
    by_id = {s.snapshot_id: s for s in (*gone, *kept)}
    walk, at = [], table.metadata.current_snapshot_id
    while at is not None and at in by_id and len(walk) < len(by_id):
        walk.append(at)
        at = parents[at] if at in parents else by_id[at].parent_snapshot_id
    if not kept or len(walk) != len(by_id) or set(walk[:len(kept)]) != {s.snapshot_id for s in kept}:
        return None
    return [by_id[i] for i in walk]


def delete_files(table: Table, paths: Iterable[str]) -> tuple[int, list[str]]:
    """Delete files from storage; the number deleted and the failures (one line each)."""
    deleted, failed = 0, []
    for path in sorted(paths):
        try:
            delete_file(table.io, path)  # unlinked directly on local disk: expiry deletes thousands an hour
            deleted += 1
        except FileNotFoundError:
            deleted += 1  # gone already: an earlier run was interrupted after deleting it
        except OSError as exc:
            failed.append(f"{path}: {' '.join(str(exc).split())}")
    return deleted, failed
