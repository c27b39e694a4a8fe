"""A task's data files as PyIceberg's own writer makes them (same Parquet schema with field ids, same
statistics, same partition values), whatever each Python worker remembers of the tables it wrote before:
a table changed in any way writing depends on is never written with what was worked out for it before."""

from __future__ import annotations

import datetime as dt
from collections import OrderedDict

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pyiceberg.schema import Schema
from pyiceberg.types import DoubleType, LongType, NestedField, StringType, StructType, TimestamptzType

from appliance.config.settings import ensure_home, load_settings
from appliance.model.partitioning import Partitioning
from appliance.tables.catalog import Catalog
from appliance.tables.datafiles import TableTarget, write_data_files
from appliance.tables.fastpath import parquet
from appliance.tables.fastpath.parquet import remembered
from appliance.tables.fastpath.transactions import transaction

SCHEMA = Schema(
    NestedField(1, "id", LongType(), required=False),
    NestedField(2, "ts", TimestamptzType(), required=False),
    NestedField(3, "region", StringType(), required=False),
    NestedField(4, "amount", DoubleType(), required=False),
    NestedField(5, "customer", StructType(NestedField(6, "tier", StringType(), required=False),
                                          NestedField(7, "since", LongType(), required=False)), required=False),
)
DAY = dt.datetime(2026, 11, 1, tzinfo=dt.timezone.utc)
STATS = ("record_count", "column_sizes", "value_counts", "null_value_counts", "nan_value_counts", "lower_bounds",
         "upper_bounds", "split_offsets", "file_format", "content", "partition")


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


def pyiceberg_files(table, data: pa.Table):
    from pyiceberg.io.pyarrow import _dataframe_to_data_files

    return list(_dataframe_to_data_files(table_metadata=table.metadata, df=data, io=table.io))


def file_schema(table, data_file) -> pa.Schema:
    with table.io.new_input(data_file.file_path).open() as f:
        return pq.read_schema(f)


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
    [ours] = write_data_files(TableTarget.of(table), rows(5))
    with table.io.new_input(ours.file_path).open() as f:
        assert pq.ParquetFile(f).metadata.row_group(0).column(0).compression == "SNAPPY"
    assert not ours.lower_bounds  # counts only, as the table now says
    assert_same_files(table, [ours], pyiceberg_files(table, rows(5)))
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


def test_a_worker_remembers_as_many_tables_as_it_writes_in_turn():
    made: list[int] = []
    kept: OrderedDict = OrderedDict()

    def use(key: int) -> int:
        return remembered(kept, key, lambda: made.append(key) or key * 10, limit=3)

    assert [use(k) for k in (1, 2, 3, 1, 2, 3)] == [10, 20, 30, 10, 20, 30] and made == [1, 2, 3]
    use(4)  # 1 is the least recently used: it goes
    assert list(kept) == [2, 3, 4]
    use(2), use(1)
    assert made == [1, 2, 3, 4, 1] and list(kept) == [4, 2, 1]
    assert parquet.TABLES_PER_WORKER >= 400  # 200 streams' tables and their dead-letter tables
