"""Iceberg tables as Spark DataFrames read by Spark tasks, and DataFrames written back as data files.

The driver plans which files to read (PyIceberg: a snapshot's files, or those appended between
two snapshots) and hands each task its share; the tasks read them (`tables/reading.py`: older files
projected onto the table's current schema, any writer's in the table's types) and pass Arrow batches to Spark
(`mapInArrow`). Writing goes the other way: each task writes its rows as Parquet data files
under the table's location and hands back only their descriptions, for the driver to commit.
"""

from __future__ import annotations

import pickle
import uuid
from dataclasses import dataclass, field
from typing import Iterator

import pyarrow as pa
from pyiceberg.manifest import DataFile
from pyiceberg.schema import Schema
from pyiceberg.table import Table

from appliance.spark.session import parallelism
from appliance.tables.datafiles import TableTarget, table_metadata, write_data_files
from appliance.tables.reading import read_batches

TASKS_PER_CORE = 2  # read tasks a core gets, files balanced by size


def _spark_arrow_type(t: pa.DataType) -> pa.DataType:
    """The Arrow type Spark reads a column of Arrow type `t` as (it has no UUID, no large types)."""
    if isinstance(t, pa.ExtensionType) or pa.types.is_fixed_size_binary(t) and t.byte_width == 16:
        return pa.string()  # a UUID: its text
    if pa.types.is_large_string(t):
        return pa.string()
    if pa.types.is_large_binary(t) or pa.types.is_fixed_size_binary(t):
        return pa.binary()
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        return pa.list_(pa.field("element", _spark_arrow_type(t.value_type)))
    if pa.types.is_map(t):
        return pa.map_(_spark_arrow_type(t.key_type), _spark_arrow_type(t.item_type))
    if pa.types.is_struct(t):
        return pa.struct([pa.field(f.name, _spark_arrow_type(f.type)) for f in t])
    return t


def spark_arrow_schema(schema: Schema) -> pa.Schema:
    """The Arrow schema in which a table's rows reach Spark."""
    from pyiceberg.io.pyarrow import schema_to_pyarrow

    arrow = schema_to_pyarrow(schema, include_field_ids=False)
    return pa.schema([pa.field(f.name, _spark_arrow_type(f.type)) for f in arrow])


def spark_schema(schema: Schema):
    from pyspark.sql.pandas.types import from_arrow_schema

    return from_arrow_schema(spark_arrow_schema(schema), prefer_timestamp_ntz=True)


def _for_spark(batch: pa.RecordBatch, schema: pa.Schema) -> pa.RecordBatch:
    columns = []
    for column, target in zip(batch.columns, schema):
        if isinstance(column.type, pa.ExtensionType) or (pa.types.is_fixed_size_binary(column.type)
                                                          and pa.types.is_string(target.type)):
            storage = column.storage if isinstance(column, pa.ExtensionArray) else column
            column = pa.array([None if b is None else str(uuid.UUID(bytes=b)) for b in storage.to_pylist()],
                              pa.string())
        columns.append(column.cast(target.type) if column.type != target.type else column)
    return pa.RecordBatch.from_arrays(columns, schema=schema)


@dataclass(frozen=True)
class TableSource:
    """What a task needs to read files of one table, without a catalog: as `TableTarget` for writing."""

    target: TableTarget
    schema_json: str  # the schema rows are projected onto
    arrow: pa.Schema = field(repr=False)


def _read(source: TableSource, tasks: list) -> Iterator[pa.RecordBatch]:
    from pyiceberg.io import load_file_io

    meta = table_metadata(source.target)
    io = load_file_io(source.target.io_properties, meta.location)
    projected = Schema.model_validate_json(source.schema_json)
    for batch in read_batches(meta, io, projected, tasks):
        yield _for_spark(batch, source.arrow)


def _balanced(tasks: list, groups: int) -> list[list]:
    """Tasks in `groups` groups of about equal bytes (largest first, each to the lightest group)."""
    out: list[list] = [[] for _ in range(min(groups, len(tasks)))]
    sizes = [0] * len(out)
    for task in sorted(tasks, key=lambda t: t.file.file_size_in_bytes, reverse=True):
        lightest = sizes.index(min(sizes))
        out[lightest].append(task)
        sizes[lightest] += task.file.file_size_in_bytes
    return out


def rows_frame(spark, table: Table, snapshot_id: int | None, since: int | None = None):
    """The rows of `table` at `snapshot_id` (None: it has none yet), or only those appended after
    snapshot `since`, as a DataFrame that Spark tasks read."""
    schema = table.schema()
    if snapshot_id is None:
        tasks = []
    elif since is None:
        tasks = list(table.scan(snapshot_id=snapshot_id).plan_files())
    else:
        tasks = list(table.incremental_append_scan(from_snapshot_id_exclusive=since,
                                                   to_snapshot_id_inclusive=snapshot_id).plan_files())
    return tasks_frame(spark, table, schema, tasks)


def tasks_frame(spark, table: Table, schema: Schema, tasks: list):
    """The rows of PyIceberg's scan `tasks` of `table`, projected onto `schema`, read by Spark tasks."""
    struct = spark_schema(schema)
    if not tasks:
        return spark.createDataFrame([], struct)
    source = TableSource(TableTarget.of(table), schema.model_dump_json(), spark_arrow_schema(schema))
    groups = _balanced(tasks, parallelism(spark) * TASKS_PER_CORE)
    listing = spark.sparkContext.parallelize([(pickle.dumps(g),) for g in groups], len(groups))

    def read(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for batch in batches:
            for blob in batch.column(0).to_pylist():
                yield from _read(source, pickle.loads(blob))

    return spark.createDataFrame(listing, "tasks binary").mapInArrow(read, struct)


def write_frame(frame, table: Table, partitions: int | None = None) -> list[DataFile]:
    """The rows of `frame` written as data files of `table` by Spark tasks (not committed); `partitions`:
    how many tasks write (fewer, larger files), as Spark has them by default."""
    target = TableTarget.of(table)
    if partitions is not None:
        frame = frame.coalesce(partitions)

    def write(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        batches = list(batches)
        files = write_data_files(target, pa.Table.from_batches(batches)) if batches else []
        yield pa.RecordBatch.from_pydict({"files": [pickle.dumps(files)]}, schema=pa.schema([("files", pa.binary())]))

    written = frame.mapInArrow(write, "files binary").collect()
    return [f for row in written for f in pickle.loads(row.files)]
