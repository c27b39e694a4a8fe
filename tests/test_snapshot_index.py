"""Snapshots found by id through an index (`appliance/tables/fastpath/snapshot_index.py`) answer as PyIceberg's
walk of the list does: on a table that commits as a stream does (each list its parent's and one more), on a list
an expiry shortened, on a list appended to in place, and with the kept indexes bounded."""

from pyiceberg.table.metadata import TableMetadataCommonFields

from appliance.config.settings import load_settings
from appliance.core.cache import Cache
from appliance.tables.catalog import Catalog
from appliance.tables.fastpath import snapshot_index

from conftest import committed_again


def stream_table(floe_home, commits: int):
    """`committed_again`'s table, with the metadata of each of its commits."""
    lists = []
    catalog, table = committed_again(floe_home, commits, seen=lists)
    return catalog, table, lists


def same_as_the_walk(metadata, ids) -> None:
    walk = snapshot_index._walk
    for i in ids:
        assert metadata.snapshot_by_id(i) is walk(metadata, i), i


def test_the_index_answers_as_pyicebergs_walk_and_commits_use_it(floe_home, monkeypatch):
    assert TableMetadataCommonFields.snapshot_by_id is snapshot_index.snapshot_by_id  # installed by the commits
    built = []
    original = snapshot_index.one_appended
    monkeypatch.setattr(snapshot_index, "one_appended", lambda b, a: built.append(original(b, a)) or built[-1])
    catalog, table, lists = stream_table(floe_home, snapshot_index.WALKED + 30)
    assert built.count(True) >= 20, "a commit's lists are indexed from their parents'"
    for metadata in lists[-25:]:  # every metadata a stream went through, each against its own list
        same_as_the_walk(metadata, [s.snapshot_id for s in metadata.snapshots] + [12345])
    metadata = table.metadata
    snapshots = metadata.snapshots
    assert table.current_snapshot() is snapshots[-1]
    # An expiry's list: shorter, its first snapshot rewritten (its parent gone), then a commit on it.
    first = snapshots[5].model_copy(update={"parent_snapshot_id": None})
    expired = metadata.model_copy(update={"snapshots": [first, *snapshots[6:]]})
    same_as_the_walk(expired, [s.snapshot_id for s in snapshots])
    assert expired.snapshot_by_id(first.snapshot_id).parent_snapshot_id is None
    # A list changed in place (PyIceberg never does): its length differs, it is indexed again.
    twin = snapshots[0].model_copy(update={"snapshot_id": 12345})
    snapshots.append(twin)
    try:
        assert metadata.snapshot_by_id(12345) is twin
    finally:
        snapshots.pop()
    assert metadata.snapshot_by_id(12345) is None
    # Read back from its metadata file: other objects, their own index.
    again = Catalog(load_settings()).table("n.t").metadata
    assert again.snapshots is not snapshots
    assert [again.snapshot_by_id(s.snapshot_id).snapshot_id for s in snapshots] == [s.snapshot_id for s in snapshots]


def test_the_kept_indexes_are_bounded(floe_home, monkeypatch):
    monkeypatch.setattr(snapshot_index, "_indexes", Cache(200, weigh=snapshot_index.indexed))
    _, table, lists = stream_table(floe_home, snapshot_index.WALKED + 15)
    for metadata in lists[-10:]:
        metadata.snapshot_by_id(0)
    assert snapshot_index._indexes.weight() <= 200
    assert snapshot_index._indexes.weight() == sum(len(index) for _, (_, index) in snapshot_index._indexes.items())
    same_as_the_walk(lists[-12], [s.snapshot_id for s in lists[-12].snapshots])  # evicted: indexed again


def test_a_stream_keeps_two_versions_of_its_index_and_builds_none_from_scratch(floe_home, monkeypatch):
    """Each commit's index is its parent's and one more, and the grandparent's is then dropped: a table's older
    lists (and the snapshots an expiry removed from them) are not held by the index, and no commit walks its
    list (a commit stages its list twice, each from the parent's: the parent's is kept)."""
    built = []
    original = snapshot_index.one_appended
    monkeypatch.setattr(snapshot_index, "one_appended", lambda b, a: built.append(original(b, a)) or built[-1])
    snapshot_index._indexes.clear()
    scratch = []
    index_of = snapshot_index._index_of

    def counting(snapshots):
        kept = snapshot_index._indexes.get((len(snapshots), id(snapshots[-1])))
        before = len(built)
        found = index_of(snapshots)
        if not (kept is not None and kept[0] is snapshots) and not (len(built) > before and built[-1]):
            scratch.append(len(snapshots))
        return found

    monkeypatch.setattr(snapshot_index, "_index_of", counting)
    _, table, lists = stream_table(floe_home, snapshot_index.WALKED + 40)
    mine = [k for k, (snapshots, _) in snapshot_index._indexes.items() if snapshots[0] is table.metadata.snapshots[0]]
    assert len(mine) == 2, f"versions of one table's index kept: {len(mine)}"
    assert snapshot_index._indexes.weight() == 2 * len(table.metadata.snapshots) - 1
    # The first list long enough is indexed whole (and each version found again after it, from the index).
    assert scratch.count(snapshot_index.WALKED) >= 1 and set(scratch) == {snapshot_index.WALKED}, scratch
