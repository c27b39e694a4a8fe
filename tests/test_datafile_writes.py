"""A task's data files as PyIceberg's own writer makes them (same Parquet schema with field ids, same
statistics, same partition values), whatever each Python worker remembers of the tables it wrote before:
a table changed in any way writing depends on is never written with what was worked out for it before."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pyiceberg.schema import Schema
from pyiceberg.types import (
    BinaryType,
    BooleanType,
    DateType,
    DecimalType,
    DoubleType,
    FloatType,
    IntegerType,
    ListType,
    LongType,
    MapType,
    NestedField,
    StringType,
    StructType,
    TimestampType,
    TimestamptzType,
    TimeType,
)

from appliance.config.settings import ensure_home, load_settings
from appliance.model.partitioning import Partitioning
from appliance.tables.catalog import Catalog
from appliance.tables.datafiles import TableTarget, write_data_files
from appliance.tables.fastpath import parquet
from appliance.tables.fastpath.transactions import transaction

from conftest import pyiceberg_files

SCHEMA = Schema(
    NestedField(1, "id", LongType(), required=False),
    NestedField(2, "ts", TimestamptzType(), required=False),
    NestedField(3, "region", StringType(), required=False),
    NestedField(4, "amount", DoubleType(), required=False),
    NestedField(5, "customer", StructType(NestedField(6, "tier", StringType(), required=False),
                                          NestedField(7, "since", LongType(), required=False)), required=False),
)
DAY = dt.datetime(2026, 11, 1, tzinfo=dt.timezone.utc)
STATS = ("record_count", "file_size_in_bytes", "column_sizes", "value_counts", "null_value_counts", "nan_value_counts",
         "lower_bounds", "upper_bounds", "split_offsets", "file_format", "content", "partition")


def rows(n: int, hours: int = 0, start: int = 0) -> pa.Table:
    """`n` rows `hours` apart (0: all of one day), some values missing."""
    return pa.table({
        "id": pa.array(range(start, start + n), pa.int64()),
        "ts": pa.array([DAY + dt.timedelta(hours=hours * i, minutes=i) for i in range(n)], pa.timestamp("us", "UTC")),
        "region": [None if i % 5 == 0 else f"r{i % 3}" * (i % 40) for i in range(n)],
        "amount": [float("nan") if i % 7 == 0 else i / 3 for i in range(n)],
        "customer": pa.array([None if i % 4 == 0 else {"tier": "gold", "since": i} for i in range(n)],
                             pa.struct([("tier", pa.string()), ("since", pa.int64())])),
    })


@pytest.fixture
def catalog(floe_home):
    settings = load_settings()
    ensure_home(settings)
    return Catalog(settings)


def codec(table, data_file) -> str:
    with table.io.new_input(data_file.file_path).open() as f:
        return pq.ParquetFile(f).metadata.row_group(0).column(0).compression


def dictionary(table, data_file) -> bool:
    """Whether any column of the file has a dictionary page."""
    with table.io.new_input(data_file.file_path).open() as f:
        group = pq.ParquetFile(f).metadata.row_group(0)
        return any(group.column(i).has_dictionary_page for i in range(group.num_columns))


def file_schema(table, data_file) -> pa.Schema:
    with table.io.new_input(data_file.file_path).open() as f:
        return pq.read_schema(f)


def read_bytes(table, data_file) -> bytes:
    with table.io.new_input(data_file.file_path).open() as f:
        return f.read()


def assert_same_files(table, ours, theirs):
    """Floe's files and PyIceberg's, matched by partition: the same descriptions and Parquet schemas."""
    assert len(ours) == len(theirs)
    by_partition = {repr(f.partition): f for f in theirs}
    for mine in ours:
        other = by_partition[repr(mine.partition)]
        for name in STATS:
            assert getattr(mine, name) == getattr(other, name), name
        assert mine.spec_id == table.metadata.default_spec_id  # PyIceberg's own leaves it to its commit
        assert file_schema(table, mine).equals(file_schema(table, other), check_metadata=True)
        # The very bytes, whether Floe made the file in memory (a small one on a local warehouse) or streamed it
        assert read_bytes(table, mine) == read_bytes(table, other)
        assert len(read_bytes(table, mine)) == mine.file_size_in_bytes
        folder = other.file_path.rsplit("/", 1)[0]
        assert mine.file_path.rsplit("/", 1)[0] == folder


@pytest.mark.parametrize("layout, hours", [("none", 0), ("day(ts)", 0), ("day(ts)", 7), ("day(ts), bucket(4, id)", 5),
                                           ("region", 0), ("region", 1)])
def test_data_files_are_the_ones_pyiceberg_writes(catalog, layout, hours):
    table, _ = catalog.ensure_table("n.t", SCHEMA, Partitioning.parse(layout))
    for attempt in range(2):  # the second from what this worker remembers of the table
        data = rows(60, hours, start=100 * attempt)
        assert_same_files(table, write_data_files(TableTarget.of(table), data), pyiceberg_files(table, data))


def test_rows_of_another_column_order_or_without_a_column_are_written_as_the_table_has_them(catalog):
    table, _ = catalog.ensure_table("n.t", SCHEMA, Partitioning.parse("day(ts)"))
    data = rows(20)
    for variant in (data.select(["customer", "amount", "region", "ts", "id"]), data.drop_columns(["amount"])):
        assert_same_files(table, write_data_files(TableTarget.of(table), variant), pyiceberg_files(table, variant))


def test_a_schema_change_is_never_written_with_the_old_conversion(catalog):
    table, _ = catalog.ensure_table("n.t", SCHEMA, Partitioning.parse("day(ts)"))
    write_data_files(TableTarget.of(table), rows(5))  # remembered: the table as it was, for these rows' columns
    with transaction(table) as tx:
        with tx.update_schema() as update:
            update.add_column("note", StringType())
    table = catalog.iceberg.load_table("n.t")
    [ours] = write_data_files(TableTarget.of(table), rows(5))  # the same Arrow schema, another table schema
    assert file_schema(table, ours).names == ["id", "ts", "region", "amount", "customer", "note"]
    assert_same_files(table, [ours], pyiceberg_files(table, rows(5)))
    with transaction(table) as tx:
        with tx.update_schema() as update:
            update.rename_column("region", "area")
    table = catalog.iceberg.load_table("n.t")
    data = rows(5).rename_columns(["id", "ts", "area", "amount", "customer"])
    [ours] = write_data_files(TableTarget.of(table), data)
    assert file_schema(table, ours).names == ["id", "ts", "area", "amount", "customer", "note"]
    assert_same_files(table, [ours], pyiceberg_files(table, data))


def test_a_property_or_partitioning_change_is_never_written_with_the_old_one(catalog):
    table, _ = catalog.ensure_table("n.t", SCHEMA, Partitioning.parse("day(ts)"))
    write_data_files(TableTarget.of(table), rows(5))
    with transaction(table) as tx:
        tx.set_properties({"write.parquet.compression-codec": "snappy", "write.metadata.metrics.default": "counts"})
    table = catalog.iceberg.load_table("n.t")
    [ours] = write_data_files(TableTarget.of(table), rows(1000))  # big enough to be compressed
    assert codec(table, ours) == "SNAPPY"
    assert not ours.lower_bounds  # counts only, as the table now says
    assert_same_files(table, [ours], pyiceberg_files(table, rows(1000)))
    with transaction(table) as tx:
        with tx.update_spec() as spec:
            spec.add_identity("region")
    table = catalog.iceberg.load_table("n.t")
    ours = write_data_files(TableTarget.of(table), rows(9))
    assert {f.spec_id for f in ours} == {table.metadata.default_spec_id} != {0}
    assert_same_files(table, ours, pyiceberg_files(table, rows(9)))


def test_two_tables_of_the_same_schema_keep_their_own_locations(catalog):
    first, _ = catalog.ensure_table("n.a", SCHEMA)
    second, _ = catalog.ensure_table("n.b", SCHEMA)
    for table in (first, second, first):
        [f] = write_data_files(TableTarget.of(table), rows(3))
        assert f.file_path.startswith(table.metadata.location + "/data/")


WIDE = Schema(
    NestedField(1, "i", IntegerType(), required=False), NestedField(2, "l", LongType(), required=False),
    NestedField(3, "f", FloatType(), required=False), NestedField(4, "d", DoubleType(), required=False),
    NestedField(5, "b", BooleanType(), required=False), NestedField(6, "s", StringType(), required=False),
    NestedField(7, "bin", BinaryType(), required=False), NestedField(8, "day", DateType(), required=False),
    NestedField(9, "t", TimeType(), required=False), NestedField(10, "ts", TimestampType(), required=False),
    NestedField(11, "tstz", TimestamptzType(), required=False),
    NestedField(13, "tags", ListType(14, StringType(), element_required=False), required=False),
    NestedField(15, "attrs", MapType(16, StringType(), 17, LongType(), value_required=False), required=False),
)
DECIMAL = NestedField(12, "dec", DecimalType(9, 2), required=False)  # PyIceberg's own statistics, always


def wide_rows(schema: Schema, n: int) -> pa.Table:
    from pyiceberg.io.pyarrow import schema_to_pyarrow

    top = "\U0010ffff" * 20  # no upper bound can be truncated from it
    columns = {
        "i": [None if k % 6 == 0 else k - 40 for k in range(n)], "l": [k * 10**12 for k in range(n)],
        "f": [float("nan") if k % 9 == 0 else k / 7 for k in range(n)], "d": [-k / 3 for k in range(n)],
        "b": [k % 2 == 0 for k in range(n)],
        "s": [top if k == n - 1 else (None if k % 5 == 0 else f"{'é' * (k % 30)}x{k}") for k in range(n)],
        "bin": [b"\xff" * 30 if k == 3 else bytes([k % 256]) * (k % 25) for k in range(n)],
        "day": [dt.date(2026, 1, 1) + dt.timedelta(days=k) for k in range(n)],
        "t": [dt.time(k % 24, k % 60) for k in range(n)],
        "ts": [dt.datetime(2026, 1, 1) + dt.timedelta(minutes=k) for k in range(n)],
        "tstz": [DAY + dt.timedelta(seconds=k) for k in range(n)],
        "dec": [Decimal(k) / 4 for k in range(n)],
        "tags": [[f"t{k}", None] for k in range(n)], "attrs": [[("a", k), ("b", None)] for k in range(n)],
    }
    plain = pa.schema([f.remove_metadata() for f in schema_to_pyarrow(schema, include_field_ids=False)])
    return pa.table({f.name: columns[f.name] for f in plain}, schema=plain)  # as decoding makes rows: no field ids


@pytest.mark.parametrize("properties", [
    {}, {"write.metadata.metrics.default": "full"}, {"write.metadata.metrics.default": "truncate(3)"},
    {"write.metadata.metrics.default": "counts", "write.metadata.metrics.column.s": "truncate(2)"},
    {"write.metadata.metrics.default": "none", "write.metadata.metrics.column.l": "full"},
    {"write.parquet.row-group-limit": "7"},  # several row groups: bounds and counts folded over them
])
@pytest.mark.parametrize("decimals", [False, True])
def test_statistics_of_every_type_and_metrics_mode_are_pyiceberg_s(catalog, properties, decimals, monkeypatch):
    from appliance.tables.fastpath import statistics

    schema = Schema(*WIDE.fields, DECIMAL) if decimals else WIDE
    catalog.iceberg.create_namespace("n")
    table = catalog.iceberg.create_table("n.wide", schema, properties={"format-version": "2", **properties})
    data = wide_rows(schema, 40)
    with monkeypatch.context() as patch:
        if not decimals:  # Floe's own statistics, not PyIceberg's called when they are not the plain case
            patch.setattr(statistics, "data_file_statistics_from_parquet_metadata", None)
        ours = write_data_files(TableTarget.of(table), data)
    assert_same_files(table, ours, pyiceberg_files(table, data))


def test_a_file_without_statistics_is_described_by_pyiceberg_itself(tmp_path):
    from pyiceberg.io.pyarrow import (
        compute_statistics_plan,
        data_file_statistics_from_parquet_metadata,
        parquet_path_to_id_mapping,
        schema_to_pyarrow,
    )

    from appliance.tables.fastpath.statistics import StatisticsPlan

    plan, ids = compute_statistics_plan(SCHEMA, {}), parquet_path_to_id_mapping(SCHEMA)
    data = rows(10).cast(schema_to_pyarrow(SCHEMA))
    for options in ({}, {"write_statistics": ["id", "region"]}, {"write_statistics": False}):
        pq.write_table(data, tmp_path / "f.parquet", **options)
        metadata = pq.read_metadata(tmp_path / "f.parquet")
        theirs = data_file_statistics_from_parquet_metadata(metadata, plan, ids).to_serialized_dict()
        assert StatisticsPlan(plan, ids).serialized(metadata) == theirs
        assert bool(theirs["lower_bounds"]) == (options.get("write_statistics") is not False)


def test_bounds_read_as_stored_are_pyiceberg_s_whatever_units_and_types_the_file_has(tmp_path):
    """Bounds are read as the file stores them (microseconds, UTF-8 bytes) only where that is what PyIceberg's
    reading of PyArrow's logical values comes to: a file of another unit, or of strings stored as plain binary,
    is described as PyIceberg describes it, by one plan whatever file came before."""
    from pyiceberg.io.pyarrow import (
        compute_statistics_plan,
        data_file_statistics_from_parquet_metadata,
        parquet_path_to_id_mapping,
        schema_to_pyarrow,
    )

    from appliance.tables.fastpath.statistics import StatisticsPlan

    schema = Schema(*SCHEMA.fields, NestedField(8, "day", DateType(), required=False),
                    NestedField(9, "t", TimeType(), required=False), NestedField(10, "local", TimestampType(),
                                                                                   required=False))
    plan, ids = compute_statistics_plan(schema, {}), parquet_path_to_id_mapping(schema)
    ours = StatisticsPlan(plan, ids)
    base = rows(10)
    data = pa.table({**{name: base.column(name) for name in base.column_names},
                     "day": [dt.date(2026, 1, 1) + dt.timedelta(days=k) for k in range(10)],
                     "t": pa.array([dt.time(k, k, k, 1000 * k + 7) for k in range(10)], pa.time64("us")),
                     "local": [dt.datetime(2026, 1, 1, k, 0, 0, 123457) for k in range(10)]}).cast(
        schema_to_pyarrow(schema))
    as_binary = data.set_column(2, "region", data.column("region").cast(pa.binary()))
    nanos = data.cast(pa.schema([f.with_type(pa.timestamp("ns", f.type.tz)) if pa.types.is_timestamp(f.type) else f
                                 for f in data.schema]))
    refused = []
    for name, table, options in (("us", data, {}), ("ms", data, {"coerce_timestamps": "ms",
                                                                  "allow_truncated_timestamps": True}),
                                 ("us again", data, {}), ("ns", nanos, {}), ("binary", as_binary, {})):
        pq.write_table(table, tmp_path / "f.parquet", **options)
        metadata = pq.read_metadata(tmp_path / "f.parquet")
        try:
            theirs = data_file_statistics_from_parquet_metadata(metadata, plan, ids).to_serialized_dict()
        except Exception as exc:  # PyIceberg fails on the bounds of strings stored as binary, and so does Floe
            with pytest.raises(type(exc)):
                ours.serialized(metadata)
            refused.append(name)
            continue
        assert ours.serialized(metadata) == theirs, name
        assert theirs["lower_bounds"][2] != theirs["upper_bounds"][2]  # the timestamps' bounds are there
    assert refused == ["binary"]


def test_a_small_file_is_written_uncompressed_a_bigger_one_with_the_tables_codec(catalog):
    table, _ = catalog.ensure_table("n.t", SCHEMA, Partitioning.parse("none"))
    small, big = rows(20), rows(1000)
    assert small.nbytes < parquet.SMALL_FILE_BYTES <= big.nbytes
    [few] = write_data_files(TableTarget.of(table), small)
    [many] = write_data_files(TableTarget.of(table), big)
    assert codec(table, few) == "UNCOMPRESSED" and not dictionary(table, few)
    assert codec(table, many) == "ZSTD" and dictionary(table, many)  # the table's default codec, dictionaries
    assert_same_files(table, [few], pyiceberg_files(table, small))
    assert_same_files(table, [many], pyiceberg_files(table, big))


def test_a_null_in_a_required_column_is_refused_whether_or_not_the_batch_says_so(catalog):
    required = Schema(NestedField(1, "id", LongType(), required=True), NestedField(2, "region", StringType(),
                                                                                   required=False))
    table, _ = catalog.ensure_table("n.r", required, Partitioning.parse("none"))
    target = TableTarget.of(table)
    fine = pa.table({"id": pa.array([1, 2], pa.int64()), "region": ["a", None]},
                    schema=pa.schema([pa.field("id", pa.int64(), nullable=False), pa.field("region", pa.string())]))
    [written] = write_data_files(target, fine)  # its columns as the file's: taken as they are
    assert written.record_count == 2 and written.null_value_counts == {1: 0, 2: 1}
    # The same declared schema, a null where none may be: refused before any file is made, as the cast refuses it
    holed = pa.Table.from_arrays([pa.array([1, None], pa.int64()), pa.array(["a", "b"])], schema=fine.schema)
    folder = Path(written.file_path.removeprefix("file://")).parent
    with pytest.raises(Exception, match="null"):
        write_data_files(target, holed)
    assert [p.name for p in folder.iterdir()] == [Path(written.file_path).name], "no file left behind"
