"""PyIceberg's Avro reads with each file schema converted once (`fastpath/avro_readers.py`): every manifest and
manifest list reads as PyIceberg's own `AvroFile` reads it, whichever writer wrote it."""

import datetime as dt

import pyarrow as pa
from pyiceberg.avro.file import AvroFile
from pyiceberg.manifest import read_manifest_list
from pyiceberg.partitioning import PartitionField, PartitionSpec
from pyiceberg.schema import Schema
from pyiceberg.transforms import DayTransform, IdentityTransform
from pyiceberg.typedef import Record
from pyiceberg.types import LongType, NestedField, StringType, TimestamptzType

from appliance.config.settings import load_settings
from appliance.tables.catalog import Catalog, table_properties
from appliance.tables.commits import commit_files
from appliance.tables.datafiles import TableTarget, write_data_files
from appliance.tables.fastpath import avro_readers

SCHEMA = Schema(NestedField(1, "id", LongType()), NestedField(2, "store", StringType()),
                NestedField(3, "at", TimestamptzType()))


def plain(value):
    """A record's values all the way down (PyIceberg's DataFile compares by path alone)."""
    if isinstance(value, Record):
        return [plain(v) for v in value._data]
    if isinstance(value, dict):
        return {k: plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [plain(v) for v in value]
    return value


def everything_read(table, monkeypatch, enter) -> tuple[list, list]:
    """Every manifest list's manifests and every manifest's entries, read through `enter`."""
    monkeypatch.setattr(AvroFile, "__enter__", enter)
    lists, entries = [], []
    for snapshot in table.metadata.snapshots:
        manifests = list(read_manifest_list(table.io.new_input(snapshot.manifest_list)))
        lists.append(plain(manifests))
        entries += [plain(e) for m in manifests for e in m.fetch_manifest_entry(table.io, discard_deleted=False)]
    return lists, entries


def test_manifests_and_lists_of_each_writer_read_as_pyiceberg_reads_them(floe_home, monkeypatch):
    floe_home.mkdir(parents=True)
    catalog = Catalog(load_settings())
    spec = PartitionSpec(PartitionField(3, 1000, DayTransform(), "at_day"),
                         PartitionField(2, 1001, IdentityTransform(), "store"))
    catalog.iceberg.create_namespace("n")
    table = catalog.iceberg.create_table("n.t", SCHEMA, partition_spec=spec,
                                         properties={"format-version": "2", **table_properties(load_settings())})
    at = dt.datetime(2026, 11, 27, tzinfo=dt.timezone.utc)
    for i in range(1, 40):  # Floe's commits (merged every 32 manifests), then PyIceberg's own, then Floe's again
        rows = pa.table({"id": [i, i + 1], "store": ["a", "b" if i % 2 else None],
                         "at": [at + dt.timedelta(days=i % 3), at]}, schema=pa.schema([
                             pa.field("id", pa.int64()), pa.field("store", pa.string()),
                             pa.field("at", pa.timestamp("us", tz="UTC"))]))
        if i in (10, 11):
            table.append(rows)
        else:
            table, _ = commit_files(table, write_data_files(TableTarget.of(table), rows), "s", "topic",
                                    None if i == 1 else {0: i - 1}, {0: i})
    other, _ = catalog.ensure_table("n.u", SCHEMA)  # unpartitioned: its manifests' schema is another
    other, _ = commit_files(other, write_data_files(TableTarget.of(other), rows), "s", "topic", None, {0: 1})
    avro_readers.install()
    expected = [everything_read(t, monkeypatch, avro_readers.PYICEBERG_ENTER) for t in (table, other)]
    avro_readers._kept.clear()
    assert [everything_read(t, monkeypatch, avro_readers._enter) for t in (table, other)] == expected
    assert 3 <= len(avro_readers._kept) <= 6  # a list's schema, a manifest's of each writer and spec
    # And read again from what is kept.
    assert [everything_read(t, monkeypatch, avro_readers._enter) for t in (table, other)] == expected
    expected = expected[0]
    lists, entries = expected
    assert len(lists) == 39 and len(entries) > 200  # merged manifests list their files again
    partitions = [entry[4][3] for entry in entries]  # the data file's partition: (day, store)
    assert {p[1] for p in partitions} == {"a", "b", None} and all(isinstance(p[0], int) for p in partitions)


def test_a_files_header_reads_as_pyiceberg_reads_it(floe_home, monkeypatch):
    """The container header (its metadata: the schemas, the codec; the sync marker every block is checked
    against) through the one header reader kept for every file."""
    from pyiceberg.manifest import MANIFEST_ENTRY_SCHEMAS, MANIFEST_LIST_FILE_SCHEMAS

    floe_home.mkdir(parents=True)
    catalog = Catalog(load_settings())
    table, _ = catalog.ensure_table("n.h", SCHEMA)
    rows = pa.table({"id": [1], "store": ["a"], "at": [dt.datetime(2026, 11, 27, tzinfo=dt.timezone.utc)]},
                    schema=pa.schema([pa.field("id", pa.int64()), pa.field("store", pa.string()),
                                      pa.field("at", pa.timestamp("us", tz="UTC"))]))
    for i in range(1, 3):
        table, _ = commit_files(table, write_data_files(TableTarget.of(table), rows), "s", "t",
                                None if i == 1 else {0: i - 1}, {0: i})
    listed = table.current_snapshot().manifest_list
    manifest = next(iter(read_manifest_list(table.io.new_input(listed))))
    files = [(listed, MANIFEST_LIST_FILE_SCHEMAS[2]), (manifest.manifest_path, MANIFEST_ENTRY_SCHEMAS[2])]

    def headers(enter) -> list:
        monkeypatch.setattr(AvroFile, "__enter__", enter)
        out = []
        for path, schema in files:
            with AvroFile(table.io.new_input(path), schema) as f:
                out.append(plain(f.header))
        return out

    expected = headers(avro_readers.PYICEBERG_ENTER)
    assert headers(avro_readers._enter) == expected == headers(avro_readers._enter)
    assert all(h[0] == b"Obj\x01" and len(h[2]) == 16 and "avro.schema" in h[1] for h in expected)
