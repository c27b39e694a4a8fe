"""The parts of an upsert commit, without a broker: keys and tombstones decoded, a batch reduced to each
key's newest message, Debezium envelopes, position-delete files as the spec lays them out (read back by
PyIceberg and DuckDB), the key index, and deletes carried through a rewrite."""

from __future__ import annotations

import os

import numpy as np
import orjson
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pyiceberg.manifest import DataFileContent
from pyiceberg.schema import Schema
from pyiceberg.table.snapshots import Operation
from pyiceberg.types import LongType, NestedField, StringType

from appliance.config.settings import ensure_home, load_settings
from appliance.core.errors import MappingError
from appliance.decode.debezium import CDC_COLUMNS, DebeziumFormat
from appliance.decode.keys import CODES, OP, Keyed, newest_per_key
from appliance.decode.parsed import Op
from appliance.decode.rows import decode_batch
from appliance.kafka.records import RawBatch
from appliance.mergeonread.building import build
from appliance.mergeonread.commit import commit_upsert
from appliance.mergeonread.deletes import (
    FILE_PATH_ID,
    POS_ID,
    live_deletes,
    read_position_deletes,
    write_position_deletes,
)
from appliance.mergeonread.folding import FoldMap, Kept
from appliance.mergeonread.index import KeyIndex
from appliance.mergeonread.keyforms import KeyForm
from appliance.mergeonread.plans import KeyedRows, Keys
from appliance.model.keys import check_key
from appliance.model.mapping import Column, Mapping
from appliance.query.connection import run_query
from appliance.tables.catalog import Catalog, table_properties
from appliance.tables.datafiles import TableTarget, write_data_files
from appliance.tables.fastpath.changes import FileChanges, commit_changes

from conftest import wait_for

MAPPING = Mapping((Column("id", "long", ("id",)), Column("name", "string", ("name",))))


def batch(messages: list[tuple[int, int, bytes | None, bytes | None]]) -> RawBatch:
    """(partition, offset, key, value) each."""
    return RawBatch([m[0] for m in messages], [m[1] for m in messages], [1_700_000_000_000] * len(messages),
                    [m[2] for m in messages], [m[3] for m in messages], [[] for _ in messages])


def row(key: int, name: str) -> bytes:
    return orjson.dumps({"id": key, "name": name})


def test_a_batch_keeps_each_keys_newest_message_and_the_keys_deleted():
    decoded = decode_batch(batch([
        (0, 0, b'{"id":1}', row(1, "a")), (0, 1, b'{"id":2}', row(2, "b")), (0, 2, b'{"id":1}', row(1, "a2")),
        (0, 3, b'{"id":2}', None),  # a tombstone: its key from the Kafka key
        (1, 0, b"5", None),  # a bare Kafka key, one key column
        (1, 1, b'{"id":6}', None), (1, 2, b'{"id":6}', row(6, "back")),  # deleted, then back
        (1, 3, b'{"id":9}', orjson.dumps({"name": "keyless"})),
        (1, 4, None, None), (1, 5, b'{"other":1}', None), (1, 6, b"{bad", None),
    ]), MAPPING, 10_000, keyed=Keyed(("id",)))
    assert decoded.target.select(["id", "name", "_kafka_offset"]).to_pylist() == [
        {"id": 1, "name": "a2", "_kafka_offset": 2}, {"id": 6, "name": "back", "_kafka_offset": 2}]
    assert sorted(decoded.deleted.column("id").to_pylist()) == [2, 5]
    dead = {(r["_kafka_partition"], r["_kafka_offset"]): r["error_message"]
            for r in decoded.dead_letter.select(["_kafka_partition", "_kafka_offset", "error_message"]).to_pylist()}
    assert set(dead) == {(1, 3), (1, 4), (1, 5), (1, 6)}
    assert "key column 'id' is null" in dead[(1, 3)] and "without a Kafka key" in dead[(1, 4)]
    assert "has no id" in dead[(1, 5)] and "not JSON" in dead[(1, 6)]


NULL_WRAPPED = b'{"schema": null, "payload": null}'  # a tombstone as Kafka Connect's JsonConverter may spell it


def test_a_null_wrapped_by_kafka_connect_is_a_tombstone():
    decoded = decode_batch(batch([
        (0, 0, b'{"id":1}', row(1, "a")), (0, 1, b'{"id":2}', row(2, "b")),
        (0, 2, b'{"id":1}', NULL_WRAPPED),
        (0, 3, b'{"id":2}', b'{"schema":{"type":"struct","optional":true},\n "payload" : null }\n'),
        (0, 4, b'{"id":3}', b'{"id": 3, "name": "c", "payload": null}'),  # a row that ends alike
        (0, 5, None, NULL_WRAPPED),  # no key: it names no row
    ]), MAPPING, 10_000, keyed=Keyed(("id",)))
    assert decoded.target.select(["id", "name"]).to_pylist() == [{"id": 3, "name": "c"}]
    assert sorted(decoded.deleted.column("id").to_pylist()) == [1, 2]
    dead = decoded.dead_letter.select(["_kafka_offset", "error_stage", "error_message"]).to_pylist()
    assert [(d["_kafka_offset"], d["error_stage"]) for d in dead] == [(5, "key")]
    assert "without a Kafka key" in dead[0]["error_message"]


def test_a_truncate_drops_what_came_before_it_in_its_partition():
    entries = pa.table({"id": [1, 2, None, 3, 4, 2], "_kafka_partition": [0, 1, 0, 0, 1, 1],
                        "_kafka_offset": [0, 0, 1, 2, 1, 2], "_kafka_timestamp": pa.array([0] * 6, pa.int64()),
                        OP: pa.array([CODES[o] for o in (Op.UPSERT, Op.UPSERT, Op.TRUNCATE, Op.UPSERT, Op.UPSERT,
                                                         Op.DELETE)], pa.int8())})
    write, delete, truncate = newest_per_key(entries, ["id"])
    assert truncate == (0, 1)
    assert entries.column("id").take(pa.array(write)).to_pylist() == [3, 4]  # 1 came before the truncate
    assert entries.column("id").take(pa.array(delete)).to_pylist() == [2]  # its newest is a delete


def test_debezium_json_events_with_and_without_the_connect_wrapper():
    def event(op, before=None, after=None, wrap=False):
        body = {"op": op, "before": before, "after": after, "source": {"ts_ms": 1_700_000_000_000, "lsn": 77},
                "ts_ms": 1_700_000_000_500}
        return orjson.dumps({"schema": {"type": "struct"}, "payload": body} if wrap else body)

    mapping = Mapping((*MAPPING.columns, *CDC_COLUMNS))
    decoded = decode_batch(batch([
        (0, 0, None, event("r", after={"id": 1, "name": "snap"})),
        (0, 1, None, event("u", {"id": 1, "name": "snap"}, {"id": 1, "name": "new"}, wrap=True)),
        (0, 2, None, event("c", after={"id": 2, "name": "x"})),
        (0, 3, None, event("d", before={"id": 2, "name": 12345})),  # a bad `name` in before: still deleted
        (0, 4, b'{"id":2}', None),  # Debezium's tombstone after a delete: nothing to do
        (0, 5, None, event("z")), (0, 6, None, b'{"after": {}}'),
        (0, 7, b'{"id":2}', NULL_WRAPPED),  # the same tombstone as the Debezium tutorial prints it
    ]), mapping, 10_000, fmt=DebeziumFormat(None, ("id",), cdc_columns=True),
        keyed=Keyed(("id",), tombstones_delete=False))
    rows = decoded.target.select(["id", "name", "_cdc_op", "_cdc_position"]).to_pylist()
    assert rows == [{"id": 1, "name": "new", "_cdc_op": "u", "_cdc_position": "77"}]
    assert decoded.target.column("_cdc_ts")[0].as_py().timestamp() == 1_700_000_000
    assert decoded.deleted.column("id").to_pylist() == [2] and decoded.skipped == 2
    assert decoded.dead_letter.column("_kafka_offset").to_pylist() == [5, 6]


def test_a_key_is_mapped_columns_of_exact_types():
    assert check_key(MAPPING, ("id",)) == ("id",)
    for key, said in ((("nope",), "not a column"), (("id", "id"), "twice"), ((), "needs a key")):
        with pytest.raises(MappingError, match=said):
            check_key(MAPPING, key)
    with pytest.raises(MappingError, match="a key is one of"):
        check_key(Mapping((Column("x", "double", ("x",)),)), ("x",))


@pytest.fixture
def table(floe_home):
    settings = load_settings()
    ensure_home(settings)
    catalog = Catalog(settings)
    schema = Schema(NestedField(1, "id", LongType(), required=False), NestedField(2, "name", StringType(),
                                                                                 required=False))
    catalog.iceberg.create_namespace("n")
    return catalog.iceberg.create_table("n.t", schema, properties={"format-version": "2",
                                                                   **table_properties(settings)})


def data(table, ids: list[int], name: str):
    return write_data_files(TableTarget.of(table), pa.table({"id": pa.array(ids, pa.int64()),
                                                              "name": [f"{name}{i}" for i in ids]}))


def keys(table, ids: list[int], partition: int = 0, start: int = 100) -> Keys:
    """Keys of messages of one partition, offsets from `start` on (past anything the table holds)."""
    n = len(ids)
    return Keys(KeyForm.of(table.schema(), ("id",)).words(pa.table({"id": pa.array(ids, pa.int64())})),
                np.full(n, partition, np.int32), np.arange(start, start + n, dtype=np.int64),
                np.zeros(n, dtype=np.int64))


def rows(table, files_and_ids: list[tuple[list, list[int]]], deleted: list[int] = ()) -> KeyedRows:
    files = [f for fs, _ in files_and_ids for f in fs]
    ids = [i for _, ids in files_and_ids for i in ids]
    return KeyedRows(files, keys(table, ids), keys(table, list(deleted), start=100 + len(ids)))


def test_position_delete_files_are_as_the_spec_lays_them_out_and_every_reader_applies_them(table):
    files = data(table, [1, 2, 3, 4], "a")
    table = commit_changes(table, FileChanges(data=files), Operation.APPEND, {})
    path = files[0].file_path
    written = write_position_deletes(table.metadata, table.io, {path: [3, 1]}, table.metadata.default_spec_id,
                                     files[0].partition)
    with table.io.new_input(written.file_path).open() as stream:
        layout = pq.read_table(stream)
    assert layout.schema.field("file_path").metadata[b"PARQUET:field_id"] == str(FILE_PATH_ID).encode()
    assert layout.schema.field("pos").metadata[b"PARQUET:field_id"] == str(POS_ID).encode()
    assert layout.column("pos").to_pylist() == [1, 3], "sorted by file_path, then pos"
    assert written.content == DataFileContent.POSITION_DELETES and written.record_count == 2
    assert written.lower_bounds[FILE_PATH_ID] == written.upper_bounds[FILE_PATH_ID] == path.encode()
    assert np.array_equal(read_position_deletes(table.io, written)[path], [1, 3])
    assert written.file_size_in_bytes == os.path.getsize(written.file_path.removeprefix("file://"))
    many = write_position_deletes(table.metadata, table.io, {path: list(range(5000))}, table.metadata.default_spec_id,
                                  files[0].partition)
    # A batch's few deletes uncompressed, as a trickle's data file; many, zstd.
    assert [pq.ParquetFile(f.file_path.removeprefix("file://")).metadata.row_group(0).column(1).compression
            for f in (written, many)] == ["UNCOMPRESSED", "ZSTD"]
    table = commit_changes(table, FileChanges(deletes=[written]), Operation.DELETE, {})
    manifests = table.current_snapshot().manifests(table.io)
    assert sorted(int(m.content) for m in manifests) == [0, 1], "one data and one delete manifest"
    assert sorted(table.scan().to_arrow().column("id").to_pylist()) == [1, 3]
    found = run_query(load_settings(), "select id from n.t order by id")
    assert found.column("id").to_pylist() == [1, 3]


def test_the_key_index_is_the_table_and_a_commit_deletes_the_rows_it_replaces(table):
    table = commit_changes(table, FileChanges(data=data(table, [1, 2, 3], "a")), Operation.APPEND, {})
    index = KeyIndex(("id",))
    newer = data(table, [2, 4], "b")
    table, done = commit_upsert(table, index, rows(table, [(newer, [2, 4])], deleted=[3]), "s", "t", None, {0: 9})
    assert done.replaced == 2  # key 2's first row, and key 3
    assert sorted(table.scan().to_arrow().to_pylist(), key=lambda r: r["id"]) == [
        {"id": 1, "name": "a1"}, {"id": 2, "name": "b2"}, {"id": 4, "name": "b4"}]
    assert index.reflects(table) and index.locate(2) == (newer[0].file_path, 0)
    rebuilt = KeyIndex(("id",))
    build(rebuilt, table)
    assert {k: rebuilt.locate(k) for k in (1, 2, 3, 4)} == {k: index.locate(k) for k in (1, 2, 3, 4)}


def test_a_key_found_twice_keeps_its_newest_row_and_the_next_commit_deletes_the_other(table):
    table = commit_changes(table, FileChanges(data=data(table, [1, 2], "a")), Operation.APPEND, {})
    table = commit_changes(table, FileChanges(data=data(table, [2], "b")), Operation.APPEND, {})  # not Floe's
    index = KeyIndex(("id",))
    build(index, table)
    assert len(index) == 2 and len(index.duplicates) == 1
    table, _ = commit_upsert(table, index, rows(table, []), "s", "t", None, {0: 1})
    assert sorted(table.scan().to_arrow().to_pylist(), key=lambda r: r["id"]) == [
        {"id": 1, "name": "a1"}, {"id": 2, "name": "b2"}]


def test_deletes_committed_during_a_rewrite_are_carried_to_its_new_files(table):
    first, second = data(table, [1, 2, 3], "a"), data(table, [4, 5], "a")
    table = commit_changes(table, FileChanges(data=first + second), Operation.APPEND, {})
    # The rewrite read both files whole and wrote them into one: rows 0..4 of the new file.
    merged = data(table, [1, 2, 3, 4, 5], "a")
    fold = FoldMap(known=set())
    fold.add([first[0].file_path, second[0].file_path], [Kept.of(np.ones(3)), Kept.of(np.ones(2))], merged)
    # Meanwhile an upsert deleted key 2 (first file, row 1) and key 5 (second file, row 1).
    late = write_position_deletes(table.metadata, table.io, {first[0].file_path: [1], second[0].file_path: [1]},
                                  table.metadata.default_spec_id, first[0].partition)
    table = commit_changes(table, FileChanges(deletes=[late]), Operation.DELETE, {})
    [moved] = fold.translate(table, live_deletes(table))
    assert np.array_equal(read_position_deletes(table.io, moved)[merged[0].file_path], [1, 4])
    removed = first + second + live_deletes(table).removable({merged[0].file_path})
    table = commit_changes(table, FileChanges(data=merged, deletes=[moved], removed=removed), Operation.REPLACE, {})
    assert sorted(table.scan().to_arrow().column("id").to_pylist()) == [1, 3, 4]
    assert set(live_deletes(table).files) == {moved.file_path}, "the late delete file, naming no live file, is gone"


def test_live_deletes_of_a_table_whose_summary_says_none_read_no_manifest(table, monkeypatch):
    """An append-only table's summary says it holds no delete file: nothing is read to find none. Once one is
    committed, or when a summary does not say (another writer's), the manifests are read."""
    import appliance.mergeonread.deletes as deletes_module

    reads = []
    entries = deletes_module.live_entries
    monkeypatch.setattr(deletes_module, "live_entries", lambda t: reads.append(1) or entries(t))
    first = data(table, [1, 2, 3], "a")
    table = commit_changes(table, FileChanges(data=first), Operation.APPEND, {})
    assert table.current_snapshot().summary["total-delete-files"] == "0"
    assert not live_deletes(table).files and reads == []
    late = write_position_deletes(table.metadata, table.io, {first[0].file_path: [1]},
                                  table.metadata.default_spec_id, first[0].partition)
    table = commit_changes(table, FileChanges(deletes=[late]), Operation.DELETE, {})
    assert set(live_deletes(table).files) == {late.file_path} and reads == [1]
    del table.current_snapshot().summary.additional_properties["total-delete-files"]  # a writer that keeps none
    assert set(live_deletes(table).files) == {late.file_path} and reads == [1, 1]


def test_a_rewrite_carries_deletes_before_the_commit_lock_and_only_newer_ones_under_it(table):
    """At 10^8 keys carrying a rewrite's worth of a stream's deletes under the table's commit lock held the
    stream's batches 12 s: those committed before the commit are carried while the stream still commits,
    those committed while it waits for the lock under it; and a rewrite that does not commit leaves none."""
    import threading
    from pathlib import Path

    from appliance.core.errors import RewriteConflict
    from appliance.tables.commits import commit_lock, commit_rewrite

    settings = load_settings()
    first, second = data(table, [1, 2, 3], "a"), data(table, [4, 5], "a")
    table = commit_changes(table, FileChanges(data=first + second), Operation.APPEND, {})
    merged = data(table, [1, 2, 3, 4, 5], "a")
    fold = FoldMap(known=set())
    fold.add([first[0].file_path, second[0].file_path], [Kept.of(np.ones(3)), Kept.of(np.ones(2))], merged)

    def delete(at: dict) -> None:
        late = write_position_deletes(table.metadata, table.io, at, table.metadata.default_spec_id, first[0].partition)
        commit_changes(table.refresh(), FileChanges(deletes=[late]), Operation.DELETE, {})

    delete({first[0].file_path: [1]})  # key 2, while the rewrite ran
    done: list = []
    with commit_lock(settings, "n.t"):  # the stream's commit holds the table
        rewrite = threading.Thread(target=lambda: done.append(commit_rewrite(
            settings, table, first + second, merged, Operation.REPLACE, {}, carrier=fold)))
        rewrite.start()
        wait_for(lambda: fold.ahead, 30, what="the deletes carried ahead of the lock")
        [ahead] = fold.ahead  # carried while the lock was held by another
        assert np.array_equal(read_position_deletes(table.io, ahead)[merged[0].file_path], [1])
        delete({second[0].file_path: [1]})  # key 5, committed while the rewrite waits for the lock
    rewrite.join(30)
    [table] = done
    assert sorted(table.scan().to_arrow().column("id").to_pylist()) == [1, 3, 4]
    carried = {f.file_path: read_position_deletes(table.io, f) for f in live_deletes(table).files.values()}
    assert carried[ahead.file_path] == {merged[0].file_path: [1]}
    assert [a[merged[0].file_path].tolist() for p, a in carried.items() if p != ahead.file_path] == [[4]]

    # A rewrite that cannot commit (another of its inputs is gone) deletes what it carried: nothing references it.
    again = data(table, [1, 3, 4], "b")
    fold = FoldMap(known=set())
    fold.add([merged[0].file_path], [Kept.of(np.ones(5))], again)
    delete({merged[0].file_path: [0]})
    folder = Path(merged[0].file_path.removeprefix("file://")).parent
    before = set(folder.glob("floe-deletes-*"))
    with pytest.raises(RewriteConflict):
        commit_rewrite(settings, table, merged + first, again, Operation.REPLACE, {}, carrier=fold)
    assert set(folder.glob("floe-deletes-*")) == before and fold.ahead == []
    assert not any(Path(f.file_path.removeprefix("file://")).exists() for f in again)


def test_a_key_written_twice_in_one_commit_keeps_its_last_row_and_a_later_delete_wins(table):
    """Keys map to one partition, so one task; were a producer to break that, one commit can hold a key
    twice: the index still leaves it once."""
    index = KeyIndex(("id",))
    first, second = data(table, [1, 2], "a"), data(table, [2], "b")
    both = KeyedRows(first + second, Keys.concat([keys(table, [1, 2]), keys(table, [2], start=102)]),
                     keys(table, [1], start=103))
    table, done = commit_upsert(table, index, both, "s", "t", None, {0: 3})
    assert done.replaced == 0, "no row of an earlier commit: the two rows it beats are its own"
    assert int(table.current_snapshot().summary.additional_properties["added-position-deletes"]) == 2
    assert table.scan().to_arrow().to_pylist() == [{"id": 2, "name": "b2"}]
    assert index.locate(1) is None and index.locate(2) == (second[0].file_path, 0)


def test_an_upsert_commit_that_lost_a_race_retries_on_fresh_metadata_once_and_only_once(table):
    """Another writer committed after the batch loaded the table: the commit is retried on fresh
    metadata (the index brought to it) while the table holds the offsets the batch was planned from;
    a commit that had landed before its error is not made twice; a table past those offsets is a
    second engine's."""
    from appliance.core.errors import OffsetsConflict
    from appliance.tables.snapshots import committed_offsets

    index = KeyIndex(("id",))
    table, _ = commit_upsert(table, index, rows(table, [(data(table, [1, 2], "a"), [1, 2])]), "s", "t", None, {0: 2})
    catalog = Catalog(load_settings())
    stale, landed_stale, moved_stale = (catalog.table("n.t") for _ in range(3))  # (`refresh` changes a table)
    commit_changes(table, FileChanges(data=data(table, [7], "other")), Operation.APPEND, {})  # not Floe's
    newer = data(stale, [2], "b")
    table, done = commit_upsert(stale, index, rows(stale, [(newer, [2])]), "s", "t", {0: 2}, {0: 3})
    assert done.replaced == 1 and committed_offsets(table, "s") == {0: 3}
    assert sorted(table.scan().to_arrow().to_pylist(), key=lambda r: r["id"]) == [
        {"id": 1, "name": "a1"}, {"id": 2, "name": "b2"}, {"id": 7, "name": "other7"}]
    at = table.current_snapshot().snapshot_id
    again, done = commit_upsert(landed_stale, index, rows(landed_stale, [(data(landed_stale, [2], "c"), [2])]),
                                "s", "t", {0: 2}, {0: 3})
    assert (done.snapshot_id, done.replaced) == (at, 0) and again.current_snapshot().snapshot_id == at
    with pytest.raises(OffsetsConflict):
        commit_upsert(moved_stale, index, rows(moved_stale, [(data(moved_stale, [2], "d"), [2])]), "s", "t",
                      {0: 2}, {0: 4})
    table = catalog.table("n.t")
    assert table.current_snapshot().snapshot_id == at and len(table.scan().to_arrow()) == 3


def test_segments_of_file_and_partition_pairs_are_those_a_row_wise_unique_gives():
    """`Segments.locations_of_pairs` packs each pair into one int64 for numpy's unique (a plain sort), instead
    of its unique over rows: the same segments, numbered in the same order, for partitions -1 (a row another
    writer loaded without a Kafka position) to the largest."""
    from appliance.mergeonread.segments import ROW_BITS, Segments

    rng = np.random.default_rng(7)
    files = rng.integers(0, 40, 20_000)
    partitions = rng.choice(np.array([-1, 0, 1, 5, 2**31 - 1]), 20_000)
    rows = rng.integers(0, 1 << 30, 20_000)
    fast = Segments().locations_of_pairs(files, partitions, rows)
    slow = Segments()
    pairs, inverse = np.unique(np.stack([files, partitions], axis=1), axis=0, return_inverse=True)
    ids = np.array([slow.segment(int(f), int(p)) for f, p in pairs], dtype=np.uint64)
    assert np.array_equal(fast, (ids[inverse.reshape(-1)] << np.uint64(ROW_BITS)) | rows.astype(np.uint64))
    again = Segments()
    again.locations_of_pairs(files, partitions, rows)
    assert again._pairs == slow._pairs  # the same pair got the same segment number
