"""Snapshots found by id through an index (`appliance/tables/fastpath/snapshot_index.py`) answer as PyIceberg's
walk of the list does: on a table that commits as a stream does (each list its parent's and one more), on a list
an expiry shortened, on a list appended to in place, and with the kept indexes bounded."""

from pyiceberg.table.metadata import TableMetadataCommonFields

from appliance.config.policy import build_policy
from appliance.config.settings import load_settings
from appliance.core.cache import Cache
from appliance.maintenance.expiry import expire
from appliance.tables.catalog import Catalog
from appliance.tables.commits import commit_files
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
    assert snapshot_index._indexes.weight() == sum(snapshot_index.indexed(v) for _, v in snapshot_index._indexes.items())
    same_as_the_walk(lists[-12], [s.snapshot_id for s in lists[-12].snapshots])  # evicted: indexed again


def test_a_stream_keeps_a_few_versions_of_its_index_and_builds_none_from_scratch(floe_home, monkeypatch):
    """Each commit's index is its parent's and one more, and a table keeps only its few newest: its older lists
    are not held by the index, and no commit walks its list (a commit stages its list twice, each from the
    parent's: the parent's is kept)."""
    built = []
    original = snapshot_index.one_appended
    monkeypatch.setattr(snapshot_index, "one_appended", lambda b, a: built.append(original(b, a)) or built[-1])
    snapshot_index._indexes.clear()
    scratch = []
    index_of = snapshot_index._index_of

    def counting(table, snapshots):
        kept = any(k is snapshots for k, _, _ in snapshot_index._indexes.get(table) or ())
        before = len(built)
        found = index_of(table, snapshots)
        if not kept and not (len(built) > before and built[-1]):
            scratch.append(len(snapshots))
        return found

    monkeypatch.setattr(snapshot_index, "_index_of", counting)
    _, table, lists = stream_table(floe_home, snapshot_index.WALKED + 40)
    versions = snapshot_index._indexes.get(table.metadata.table_uuid)
    assert len(snapshot_index._indexes) == 1 and len(versions) == snapshot_index.VERSIONS
    assert versions[0][0] is table.metadata.snapshots  # the newest first
    assert [length for _, length, _ in versions] == [len(table.metadata.snapshots) - i for i in range(len(versions))]
    # The first list long enough is indexed whole (and each version found again after it, from the index).
    assert scratch.count(snapshot_index.WALKED) >= 1 and set(scratch) == {snapshot_index.WALKED}, scratch


def test_the_lists_an_expiry_replaced_are_dropped_within_a_few_commits(floe_home):
    """An expiry's list is indexed from scratch (it is not one more than its parent's); the lists it replaced,
    which alone still hold the snapshots it removed, go once the table has made a few more, not when the index is
    full: kept by list, every snapshot an engine made stayed alive for half an hour after its expiry."""
    snapshot_index._indexes.clear()
    catalog, table = committed_again(floe_home, snapshot_index.WALKED + 40)
    settings = load_settings()
    policy = build_policy([("default", {**settings.maintenance.policy, "max_snapshots": snapshot_index.WALKED + 5,
                                        "min_snapshots": 5, "min_snapshot_age": "0s"})])[0]
    result = expire(settings, table, policy)
    gone = set(result.plan.expire)
    assert len(gone) >= 30
    table = catalog.table("n.t")
    files = [task.file for task in table.scan().plan_files()][:1]
    for i in range(snapshot_index.VERSIONS):
        table, _ = commit_files(table, files, "s", "topic", {0: 100 + i}, {0: 101 + i})
    assert not gone & {s.snapshot_id for s in table.metadata.snapshots}
    held = {i for _, versions in snapshot_index._indexes.items() for kept, _, index in versions
            for i in [*index, *(s.snapshot_id for s in kept)]}
    assert not gone & held, f"expired snapshots still held by the index: {len(gone & held)}"
    same_as_the_walk(table.metadata, [s.snapshot_id for s in table.metadata.snapshots] + sorted(gone))
