"""A table's snapshots found by id through an index, not a walk of the list.

PyIceberg's `TableMetadata.snapshot_by_id` walks the snapshot list, and a commit asks it about eleven times (a new
id checked unused, the new snapshot checked absent and then found by each of the two stagings, the current
snapshot, the last of the list): 0.5 ms of a commit's CPU at 1,200 snapshots, where a stream's table is after an
hour. Table metadata is never changed in place: a commit makes new lists, each its parent's and one snapshot more.
So a list's index is its parent list's index copied with that snapshot added (a dict copy, 15 us at 1,200), and
only a list that is not one more than a list seen (the first one read, an expiry's) is indexed from scratch.
`install()` (by `changes`, the commits' module) puts it in PyIceberg's place, process-wide; the index answers as
the walk does (tests/test_snapshot_index.py).
"""

from __future__ import annotations

from pyiceberg.table.metadata import TableMetadataCommonFields
from pyiceberg.table.snapshots import Snapshot

from appliance.core.cache import Cache
from appliance.tables.fastpath.metadatafile import one_appended

WALKED = 32  # a list this short is walked: an index would cost more than it saves
# Snapshots indexed, over every kept index, the least recently used out (about 40 bytes each): a trickling
# table's list must outlive those of the others that commit between two of its commits (500 tables of 600).
KEPT = 500_000

_walk = TableMetadataCommonFields.snapshot_by_id
# (length, id of the last snapshot) -> (the list, its index). The entry keeps the list and its snapshots alive,
# so no other list has the same key while it is kept; a list appended to in place has another length.
def indexed(kept: tuple[list[Snapshot], dict[int, Snapshot]]) -> int:
    """What a kept index weighs: its snapshots."""
    return len(kept[1])


_indexes: Cache[tuple[int, int], tuple[list[Snapshot], dict[int, Snapshot]]] = Cache(KEPT, weigh=indexed)


def snapshot_by_id(metadata: TableMetadataCommonFields, snapshot_id: int) -> Snapshot | None:
    snapshots = metadata.snapshots
    if len(snapshots) < WALKED:
        return _walk(metadata, snapshot_id)
    return _index_of(snapshots).get(snapshot_id)


def _index_of(snapshots: list[Snapshot]) -> dict[int, Snapshot]:
    key = (len(snapshots), id(snapshots[-1]))
    found = _indexes.get(key)
    if found is not None and found[0] is snapshots:
        return found[1]
    parent = _indexes.get((len(snapshots) - 1, id(snapshots[-2])))
    derived = parent is not None and one_appended(parent[0], snapshots)
    if derived:
        index = parent[1].copy()
        index.setdefault(snapshots[-1].snapshot_id, snapshots[-1])
        # The grandparent's goes: a commit stages its list twice, each time from the parent's, and the table's
        # next commit starts from this one; older versions each held their own list and index (8 KB a commit at
        # 500 snapshots, over a million entries for 200 tables) and kept expired snapshots alive.
        _indexes.pop((len(snapshots) - 2, id(snapshots[-3])))
    else:
        index = {}
        for s in snapshots:
            index.setdefault(s.snapshot_id, s)  # the first of an id, as the walk finds it
    _indexes.put(key, (snapshots, index))
    return index


def install() -> None:
    TableMetadataCommonFields.snapshot_by_id = snapshot_by_id  # type: ignore[method-assign]
