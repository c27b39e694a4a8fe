"""A table's files read as PyIceberg's reader reads them: the PyArrow-only fast path for files whose columns are
as written, against PyIceberg's own reader on files of each writer and schema change."""

import datetime as dt
import decimal

import pyarrow as pa
from pyiceberg.io.pyarrow import ArrowScan
from pyiceberg.expressions import AlwaysTrue, EqualTo
from pyiceberg.schema import Schema
from pyiceberg.types import (
    BinaryType, BooleanType, DateType, DecimalType, DoubleType, IntegerType, ListType, LongType, NestedField,
    StringType, TimestamptzType, TimestampType,
)

from appliance.config.settings import load_settings
from appliance.tables.catalog import Catalog
from appliance.tables.datafiles import TableTarget, write_data_files
from appliance.tables.reading import _as_written, arrow_schema, conform, file_tasks, read_batches, read_table

SCHEMA = Schema(
    NestedField(1, "id", LongType(), required=True), NestedField(2, "name", StringType()),
    NestedField(3, "amount", DecimalType(10, 2)), NestedField(4, "paid", BooleanType()),
    NestedField(5, "at", TimestamptzType()), NestedField(6, "local", TimestampType()), NestedField(7, "day", DateType()),
    NestedField(8, "raw", BinaryType()), NestedField(9, "score", DoubleType()), NestedField(10, "qty", IntegerType()),
)


def rows(start: int, n: int) -> pa.Table:
    at = dt.datetime(2026, 11, 27, tzinfo=dt.timezone.utc)
    return pa.Table.from_pylist([
        {"id": i, "name": None if i % 3 == 0 else f"n{i}", "amount": decimal.Decimal(i) / 4, "paid": i % 2 == 0,
         "at": at + dt.timedelta(seconds=i), "local": dt.datetime(2026, 1, 1) + dt.timedelta(minutes=i),
         "day": dt.date(2026, 1, 1) + dt.timedelta(days=i), "raw": bytes([i % 256]) * 3, "score": i / 7, "qty": i}
        for i in range(start, start + n)], schema=arrow_schema(SCHEMA))


def by_pyiceberg(table, schema, files) -> pa.Table:
    """PyIceberg's reader alone, as `read_batches` read every file before its fast path."""
    arrow = arrow_schema(schema)
    scan = ArrowScan(table.metadata, table.io, schema, AlwaysTrue())
    return pa.Table.from_batches([conform(b, arrow) for b in scan.to_record_batches(file_tasks(files))], schema=arrow)


def read(table, schema, files) -> pa.Table:
    return read_table(table.metadata, table.io, schema, file_tasks(files))


def test_floes_files_are_read_by_pyarrow_alone_as_pyiceberg_reads_them(floe_home):
    floe_home.mkdir(parents=True)
    table, _ = Catalog(load_settings()).ensure_table("n.t", SCHEMA)
    files = write_data_files(TableTarget.of(table), rows(0, 5)) + write_data_files(TableTarget.of(table), rows(5, 3000))
    schema = table.schema()
    assert all(_as_written(table.io, f, schema, arrow_schema(schema)) is not None for f in files)
    assert read(table, schema, files).equals(by_pyiceberg(table, schema, files))
    assert read(table, schema, files).num_rows == 3005
    projected = schema.select("qty", "id", "at")  # the stages' and the offsets' reads: some columns, any order
    assert _as_written(table.io, files[0], projected, arrow_schema(projected)) is not None
    assert read(table, projected, files).equals(by_pyiceberg(table, projected, files))
    filtered = read_table(table.metadata, table.io, schema, file_tasks(files), EqualTo("qty", 7))
    assert filtered.column("id").to_pylist() == [7]  # a filter: PyIceberg's reader, as before


def test_files_of_another_writer_or_an_older_schema_go_through_pyiceberg_and_read_the_same(floe_home):
    floe_home.mkdir(parents=True)
    catalog = Catalog(load_settings())
    table, _ = catalog.ensure_table("n.t", SCHEMA)
    floe_file = write_data_files(TableTarget.of(table), rows(0, 4))
    table.append(rows(4, 4))  # PyIceberg's writer: large strings and binaries in the file
    pyiceberg_files = [t.file for t in table.scan().plan_files()]
    with table.update_schema() as update:  # since then: a column renamed, one added, one promoted
        update.rename_column("name", "title")
        update.add_column("note", StringType())
        update.update_column("qty", LongType())
    table = catalog.table("n.t")
    schema = table.schema()
    arrow = arrow_schema(schema)
    assert _as_written(table.io, floe_file[0], schema, arrow) is None
    assert all(_as_written(table.io, f, schema, arrow) is None for f in pyiceberg_files)
    both = floe_file + pyiceberg_files
    got = read(table, schema, both)
    assert got.equals(by_pyiceberg(table, schema, both))
    assert got.column("title").to_pylist()[:3] == [None, "n1", "n2"] and got.column("note").null_count == 8
    # A file read as written between two that are not: the rows stay in file order.
    newer = write_data_files(TableTarget.of(table), rows(8, 2).rename_columns(
        ["id", "title", "amount", "paid", "at", "local", "day", "raw", "score", "qty"]).cast(pa.schema(
            [arrow.field(n) for n in ["id", "title", "amount", "paid", "at", "local", "day", "raw", "score", "qty"]]))
        .append_column(arrow.field("note"), pa.array(["x", None])))
    assert _as_written(table.io, newer[0], schema, arrow) is not None
    mixed = floe_file + newer + pyiceberg_files
    assert read(table, schema, mixed).equals(by_pyiceberg(table, schema, mixed))
    assert read(table, schema, mixed).column("id").to_pylist() == [0, 1, 2, 3, 8, 9, 4, 5, 6, 7]


def test_a_table_with_nested_columns_is_read_by_pyiceberg(floe_home):
    floe_home.mkdir(parents=True)
    schema = Schema(NestedField(1, "id", LongType()), NestedField(2, "tags", ListType(3, StringType())))
    table, _ = Catalog(load_settings()).ensure_table("n.t", schema)
    files = write_data_files(TableTarget.of(table), pa.table({"id": [1, 2], "tags": [["a"], []]},
                                                             schema=arrow_schema(table.schema())))
    assert _as_written(table.io, files[0], table.schema(), arrow_schema(table.schema())) is None
    assert read(table, table.schema(), files).equals(by_pyiceberg(table, table.schema(), files))


def test_a_file_from_before_a_rename_alone_is_projected_by_pyiceberg(floe_home):
    floe_home.mkdir(parents=True)
    catalog = Catalog(load_settings())
    table, _ = catalog.ensure_table("n.t", SCHEMA)
    files = write_data_files(TableTarget.of(table), rows(0, 4))
    with table.update_schema() as update:
        update.rename_column("name", "title")
    table = catalog.table("n.t")
    schema = table.schema()
    assert _as_written(table.io, files[0], schema, arrow_schema(schema)) is None
    assert read(table, schema, files).column("title").to_pylist() == [None, "n1", "n2", None]
