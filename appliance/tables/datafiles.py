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
    ManifestEntry,
    ManifestEntryStatus,
)
from pyiceberg.table import Table
from pyiceberg.table.snapshots import Snapshot

from appliance.core.activity import give_way
from appliance.core.cache import Cache
from appliance.tables.fastpath.changes import MANIFESTS
from appliance.tables.fastpath.files import delete_file
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

    A manifest both sets list holds nothing to delete, so only the gone snapshots' own manifests are read
    for candidates, and the kept snapshots' manifests for the candidates they still hold. When the gone and
    kept snapshots are one line of ancestry back from the current snapshot, the gone ones its oldest part
    (a stream's table expired by the cap: every writer makes a snapshot's manifest list from its parent's,
    and never lists a manifest again once it has dropped it, nor adds a file it has removed), what the gone
    snapshots share with any kept one they share with the oldest kept: its manifests are read, and the
    current snapshot's (a file added again since would be live there), not those of the hundreds between."""
    io = table.io
    gone, kept = list(gone), list(kept)
    boundary = _oldest_on_the_line(table, gone, kept, parents or {})
    current = table.metadata.current_snapshot()
    readers = kept if boundary is None else [s for s in (boundary, current) if s is not None]
    kept_manifests = {p for s in readers for p in MANIFESTS.listed_paths(io, s.manifest_list)}
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


def _oldest_on_the_line(table: Table, gone: list[Snapshot], kept: list[Snapshot],
                        parents: dict[int, int | None]) -> Snapshot | None:
    """The oldest kept snapshot when gone and kept are one line of ancestry back from the table's current
    snapshot, the kept ones its newest part; None otherwise (branches, tags elsewhere, snapshots expired
    between kept ones)."""
    by_id = {s.snapshot_id: s for s in (*gone, *kept)}
    walk, at = [], table.metadata.current_snapshot_id
    while at is not None and at in by_id and len(walk) < len(by_id):
        walk.append(at)
        at = parents[at] if at in parents else by_id[at].parent_snapshot_id
    if not kept or len(walk) != len(by_id) or set(walk[:len(kept)]) != {s.snapshot_id for s in kept}:
        return None
    return by_id[walk[len(kept) - 1]]


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
