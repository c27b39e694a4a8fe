"""A table's snapshots found by id through an index, not a walk of the list.

PyIceberg's `TableMetadata.snapshot_by_id` walks the snapshot list, and a commit asks it about eleven times (a new
id checked unused, the new snapshot checked absent and then found by each of the two stagings, the current
snapshot, the last of the list): 0.5 ms of a commit's CPU at 1,200 snapshots, where a stream's table is after an
hour. Table metadata is never changed in place: a commit makes new lists, each its parent's and one snapshot more.
So a list's index is its parent list's index copied with that snapshot added (a dict copy, 15 us at 1,200), and
only a list that is not one more than a list of its table's seen (the first one read, an expiry's) is indexed
from scratch.
`install()` (by `changes`, the commits' module) puts it in PyIceberg's place, process-wide; the index answers as
the walk does (tests/test_snapshot_index.py).
"""

from __future__ import annotations

from uuid import UUID

from pyiceberg.table.metadata import TableMetadataCommonFields
from pyiceberg.table.snapshots import Snapshot

from appliance.core.cache import Cache
from appliance.tables.fastpath.metadatafile import one_appended

WALKED = 32  # a list this short is walked: an index would cost more than it saves
# Each table's newest lists and their indexes: a commit stages its list twice, each from its parent's, and a
# compaction's commit may stage from the same parent meanwhile; the next commit starts from one of them.
VERSIONS = 4
# Snapshots indexed, over every table's kept indexes, the least recently used table out (about 40 bytes each): a
# trickling table's lists must outlive those of the others that commit between two of its commits.
KEPT = 500_000

_walk = TableMetadataCommonFields.snapshot_by_id
# A list, its length when indexed (a list appended to in place, which PyIceberg never does, is indexed again), and
# its index.
Versions = tuple[tuple[list[Snapshot], int, dict[int, Snapshot]], ...]


def indexed(versions: Versions) -> int:
    """What a table's kept indexes weigh: their snapshots."""
    return sum(len(index) for _, _, index in versions)


# Table uuid -> its newest lists and their indexes, newest first. Kept by table, not by list: a list is dropped
# once its table has VERSIONS newer ones, so the lists an expiry replaced (and the snapshots it removed, which
# only they still held) go within a few commits. Kept by list, those orphans stayed until the cache was full
# (500,000 snapshots): the engine grew by every snapshot it made for half an hour, 3-4 MiB a minute.
_indexes: Cache[UUID, Versions] = Cache(KEPT, weigh=indexed)


def snapshot_by_id(metadata: TableMetadataCommonFields, snapshot_id: int) -> Snapshot | None:
    snapshots = metadata.snapshots
    if len(snapshots) < WALKED:
        return _walk(metadata, snapshot_id)
    return _index_of(metadata.table_uuid, snapshots).get(snapshot_id)


def _index_of(table: UUID, snapshots: list[Snapshot]) -> dict[int, Snapshot]:
    versions = _indexes.get(table) or ()
    for kept, length, index in versions:
        if kept is snapshots and length == len(snapshots):
            return index
    parent = next((index for kept, length, index in versions
                   if length == len(kept) and one_appended(kept, snapshots)), None)
    if parent is not None:
        index = parent.copy()
        index.setdefault(snapshots[-1].snapshot_id, snapshots[-1])
    else:
        index = {}
        for s in snapshots:
            index.setdefault(s.snapshot_id, s)  # the first of an id, as the walk finds it
    # A new tuple, not one changed in place: another thread may be walking the old one.
    _indexes.put(table, ((snapshots, len(snapshots), index), *versions)[:VERSIONS])
    return index


def install() -> None:
    TableMetadataCommonFields.snapshot_by_id = snapshot_by_id  # type: ignore[method-assign]
