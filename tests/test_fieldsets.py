"""Snapshots, summaries and log entries share their set of given field names (`appliance/tables/fastpath/
fieldsets.py`): what pydantic does with them (dumps, copies with updates, comparisons) is unchanged, and a
table's snapshots, whether its commits made them or its metadata file was read, hold one set between them."""

from pyiceberg.table.snapshots import Operation, Snapshot, SnapshotLogEntry, Summary

from appliance.config.settings import load_settings
from appliance.tables.catalog import Catalog
from appliance.tables.fastpath import fieldsets

from conftest import committed_again


def made(i: int) -> Snapshot:
    return Snapshot(snapshot_id=i, parent_snapshot_id=i - 1, sequence_number=i, timestamp_ms=1_000 + i,
                    manifest_list=f"s3://b/m{i}.avro", summary=Summary(operation=Operation.APPEND, **{"x": str(i)}),
                    schema_id=0)


def test_shared_sets_change_nothing_pydantic_does_with_the_models():
    a, b, twin = made(1), made(2), made(1)
    before = [a.model_dump_json(), a.model_dump_json(exclude_unset=True), a.model_dump(by_alias=True), repr(a)]
    fieldsets.share_snapshots([a, b], [SnapshotLogEntry(snapshot_id=1, timestamp_ms=5)])
    assert a.__pydantic_fields_set__ is b.__pydantic_fields_set__ and a.summary.__pydantic_fields_set__ is \
        b.summary.__pydantic_fields_set__
    assert [a.model_dump_json(), a.model_dump_json(exclude_unset=True), a.model_dump(by_alias=True), repr(a)] == before
    assert a == twin and a != b and a.model_fields_set == twin.model_fields_set
    shared = set(a.__pydantic_fields_set__)
    # A copy with an update (expiry's parent id dropped) has its own set: the shared one is left as it was.
    orphan = a.model_copy(update={"parent_snapshot_id": None, "first_row_id": 7})
    assert orphan.parent_snapshot_id is None and orphan.first_row_id == 7
    assert "first_row_id" in orphan.model_fields_set and a.__pydantic_fields_set__ == shared
    assert b.model_dump_json(exclude_unset=True) == made(2).model_dump_json(exclude_unset=True)
    # A model given other names gets another set.
    lone = Snapshot(snapshot_id=9, manifest_list="m")
    fieldsets.share(lone)
    assert lone.__pydantic_fields_set__ == {"snapshot_id", "manifest_list"} and lone.model_dump_json(
        exclude_unset=True) == Snapshot(snapshot_id=9, manifest_list="m").model_dump_json(exclude_unset=True)


def test_a_tables_snapshots_share_one_set_as_committed_and_as_read(floe_home):
    _, table = committed_again(floe_home, 40)
    snapshots = table.metadata.snapshots[1:]  # the first one PyIceberg's own append made
    assert len({id(s.__pydantic_fields_set__) for s in snapshots}) == 1
    assert len({id(s.summary.__pydantic_fields_set__) for s in snapshots}) == 1
    assert len({id(e.__pydantic_fields_set__) for e in table.metadata.snapshot_log[1:]}) == 1
    read = Catalog(load_settings()).table("n.t").metadata  # another catalog: read from the file
    assert read.snapshots is not table.metadata.snapshots
    assert len({id(s.__pydantic_fields_set__) for s in read.snapshots[1:]}) == 1
    assert len({id(e.__pydantic_fields_set__) for e in read.snapshot_log}) == 1
    assert read.snapshots == table.metadata.snapshots
