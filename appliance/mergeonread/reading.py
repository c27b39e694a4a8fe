"""Reading an upsert table's data files back: their key columns and Kafka positions, by the table's schema.

The one place the index reads rows, through `tables/reading` (by field id into the table's current
schema, in Floe's Arrow types whichever writer wrote the file); a column a file lacks (written before
Floe's columns were added, or by another writer) comes back as nulls.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
from pyiceberg.io import FileIO
from pyiceberg.manifest import DataFile
from pyiceberg.table.metadata import TableMetadata

from appliance.mergeonread.precedence import UNKNOWN
from appliance.model.columns import KAFKA_OFFSET, KAFKA_PARTITION, KAFKA_TIMESTAMP
from appliance.tables.reading import arrow_schema, file_tasks, read_table
from appliance.tables.storage import storage_errors

POSITIONS = (KAFKA_PARTITION.name, KAFKA_OFFSET.name, KAFKA_TIMESTAMP.name)


def read_columns(metadata: TableMetadata, io: FileIO, data_file: DataFile, columns: tuple[str, ...]) -> pa.Table:
    """Every row of `data_file` (deleted ones too), in file order, with `columns` as the table's
    schema has them."""
    schema = metadata.schema()
    wanted = tuple(c for c in columns if c in {f.name for f in schema.fields})
    if not wanted:  # a table of another writer, without Floe's columns
        return pa.table({c: pa.nulls(data_file.record_count, pa.int64()) for c in columns})
    if not data_file.record_count:
        return arrow_schema(schema.select(*wanted)).empty_table()
    with storage_errors(data_file.file_path, "read the key columns of a data file"):
        rows = read_table(metadata, io, schema.select(*wanted), file_tasks([data_file]))
    for name in columns:  # Floe's columns, in a table of another writer that lacks them
        if name not in rows.column_names:
            rows = rows.append_column(name, pa.nulls(rows.num_rows, pa.int64()))
    return rows


def partitions_of(rows: pa.Table) -> np.ndarray:
    """Each row's Kafka partition, -1 for a row without one (another writer's)."""
    return rows.column(KAFKA_PARTITION.name).cast(pa.int64()).fill_null(-1).to_numpy().astype(np.int32)


def positions_at(metadata: TableMetadata, io: FileIO, data_file: DataFile,
                 rows: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(partition, offset, timestamp in µs) of the rows at positions `rows` of `data_file`: -1 for no
    partition or offset, UNKNOWN for no timestamp."""
    found = read_columns(metadata, io, data_file, POSITIONS).take(pa.array(rows, pa.int64()))
    partitions = partitions_of(found)
    offsets = found.column(KAFKA_OFFSET.name).cast(pa.int64()).fill_null(-1).to_numpy()
    stamps = found.column(KAFKA_TIMESTAMP.name)
    if pa.types.is_timestamp(stamps.type):
        stamps = stamps.cast(pa.timestamp("us", tz=stamps.type.tz))
    timestamps = stamps.cast(pa.int64()).fill_null(UNKNOWN).to_numpy()
    return partitions, offsets, timestamps
