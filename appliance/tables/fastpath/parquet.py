"""Writing a table's data files from Arrow, as PyIceberg's `_dataframe_to_data_files` does, with the
schema conversions done once per worker and no thread hand-off: a stream's task writes a small file
every second, and those were most of its cost. A partitioned table's rows are split by partition
first (Iceberg's transforms, on Arrow arrays), each partition into files of its own: never more
than one partition in a file, and its values in the file's description.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from pyiceberg.manifest import DataFile, DataFileContent

from appliance.core.cache import Cache
from appliance.tables.fastpath.files import is_local, write_new
from appliance.tables.fastpath.internals import parquet_writer_kwargs, to_requested_schema
from appliance.tables.fastpath.recent import RECENT
from appliance.tables.fastpath.statistics import StatisticsPlan

# Spark hands any task to any worker, so each worker writes for every table of every stream, in turn.
# With room for fewer tables than that, each table's entry is gone by its next batch and made again:
# the 64 of before made 200 trickling streams convert their schemas on most writes, half of a
# worker's CPU. An entry is about 60 KB (the parsed metadata, the converted schemas).
TABLES_PER_WORKER = 1024


def write_files(meta: Any, key_json: str, io_properties: dict[str, str], table: pa.Table) -> list[DataFile]:
    """`table` as data files under the table's location; `key_json` names the metadata for the cache."""
    w = _writer(meta, key_json, io_properties, table.schema)
    return [f for record, rows in partitions(meta, table) for f in _write(w, rows, record)]


def partitions(meta: Any, table: pa.Table) -> list[tuple[Any, pa.Table]]:
    """`table`'s rows by partition of the table's current spec: (partition values, rows), rows in
    their order. One (empty Record) for an unpartitioned table."""
    from pyiceberg.typedef import Record

    spec, schema = meta.spec(), meta.schema()
    if spec.is_unpartitioned() or not table.num_rows:
        return [(Record(), table)] if table.num_rows else []
    values = [_transformed(schema.find_field(f.source_id), f.transform, table) for f in spec.fields]
    if all(pc.count_distinct(v, mode="all").as_py() == 1 for v in values):
        # A trickle's rows are mostly of one partition (one day): no grouping, no filtering.
        return [(Record(*(v[0].as_py() for v in values)), table)]
    keys = pa.table({f"p{i}": v for i, v in enumerate(values)})
    found = keys.group_by(keys.column_names, use_threads=False).aggregate([])
    out = []
    for combo in found.to_pylist():
        mask = None
        for name, value in combo.items():
            hit = pc.is_null(keys.column(name)) if value is None else pc.equal(keys.column(name), value)
            mask = hit if mask is None else pc.and_(mask, hit)
        out.append((Record(*combo.values()), table.filter(pc.fill_null(mask, False))))
    return out


def _transformed(source: Any, transform: Any, table: pa.Table) -> pa.Array:
    """A partition field's values for the rows: the transform of its source column, in the partition's
    own representation (a date or a time as the integer Iceberg stores)."""
    from pyiceberg.transforms import IdentityTransform

    column = table.column(source.name).combine_chunks()
    if isinstance(transform, IdentityTransform):
        kind = column.type
        if pa.types.is_timestamp(kind) or pa.types.is_time64(kind):
            return column.cast(pa.int64())
        if pa.types.is_date32(kind) or pa.types.is_time32(kind):
            return column.cast(pa.int32())
        return column
    return transform.pyarrow_transform(source.field_type)(column)


# A file whose rows take less than this in Arrow is written uncompressed and without dictionaries, whatever the
# table's codec: a trickle's few rows compress to nothing less (a 3-row file of 12 columns is 3.4 KB either way), zstd
# costs more than the rest of the write (375 against 150 us: Arrow makes a zstd context for each column chunk), and a
# dictionary page for each column of a few values a quarter of what is left (280 against 210 us). Compaction writes
# a merged file of 16 KiB or more with the table's options.
SMALL_FILE_BYTES = 16 * 1024
SMALL_FILE_OPTIONS = {"compression": "none", "compression_level": None, "use_dictionary": False}


@dataclass(frozen=True)
class _Writer:
    """What writing data files of one Arrow schema into one table needs, worked out once per worker."""

    metadata: Any
    io: Any
    file_schema: Any
    task_schema: Any
    location: Any
    properties: dict[str, str]
    target_size: int
    parquet_options: dict[str, Any]
    small_options: dict[str, Any]  # a small file's: uncompressed, no dictionaries
    row_group_size: int
    statistics: StatisticsPlan
    file_arrow: pa.Schema  # what PyIceberg's projection makes of the task's Arrow schema, with field ids
    required: tuple[int, ...]  # the positions of its columns that may hold no null (most tables: none)
    folders: Cache[str, str] = field(default_factory=lambda: Cache(64))  # partition values -> their files' folder


# Keyed by the table's slim metadata JSON itself (`TableTarget.metadata_json`: schemas, specs, properties,
# location, uuid), never by a name or an id: a table changed in any way writing depends on has another key; and by
# the rows' Arrow schema as its IPC bytes (7 us), whose hash is kept with them: a pa.Schema is hashed afresh each
# time, 20 us, and a cache's look-up hashes its key three times.
_WRITERS: Cache[tuple[str, bytes], _Writer] = Cache(TABLES_PER_WORKER)


def _writer(meta: Any, key_json: str, io_properties: dict[str, str], schema: pa.Schema) -> _Writer:
    return _WRITERS.make((key_json, schema.serialize().to_pybytes()), lambda: _new_writer(meta, io_properties, schema))


def _new_writer(meta: Any, io_properties: dict[str, str], schema: pa.Schema) -> _Writer:
    from pyiceberg.io import load_file_io
    from pyiceberg.io.pyarrow import compute_statistics_plan, parquet_path_to_id_mapping, pyarrow_to_schema
    from pyiceberg.schema import sanitize_column_names
    from pyiceberg.table import TableProperties
    from pyiceberg.table.locations import load_location_provider
    from pyiceberg.utils.properties import property_as_int

    props = meta.properties
    options = parquet_writer_kwargs(props)
    file_schema = sanitize_column_names(meta.schema())
    task_schema = pyarrow_to_schema(schema, name_mapping=meta.schema().name_mapping, format_version=meta.format_version)
    file_arrow = _project(file_schema, task_schema, schema.empty_table().to_batches() or
                          [pa.RecordBatch.from_pylist([], schema=schema)]).schema
    return _Writer(
        metadata=meta, io=load_file_io(io_properties, meta.location), file_schema=file_schema,
        task_schema=task_schema,
        location=load_location_provider(table_location=meta.location, table_properties=props),
        properties=props,
        target_size=property_as_int(props, TableProperties.WRITE_TARGET_FILE_SIZE_BYTES,
                                    TableProperties.WRITE_TARGET_FILE_SIZE_BYTES_DEFAULT),
        parquet_options=options, small_options={**options, **SMALL_FILE_OPTIONS},
        row_group_size=property_as_int(props, TableProperties.PARQUET_ROW_GROUP_LIMIT,
                                       TableProperties.PARQUET_ROW_GROUP_LIMIT_DEFAULT),
        statistics=StatisticsPlan(compute_statistics_plan(file_schema, props), parquet_path_to_id_mapping(file_schema)),
        file_arrow=file_arrow, required=tuple(i for i, f in enumerate(file_arrow) if not f.nullable),
    )


def _project(file_schema: Any, task_schema: Any, batches: list[pa.RecordBatch]) -> pa.RecordBatch:
    from pyiceberg.io.pyarrow import ParquetFormatModel

    return to_requested_schema(requested_schema=file_schema, file_schema=task_schema, batch=batches[0],
                                include_field_ids=True, format_model=ParquetFormatModel())


def _to_file(w: _Writer, batch: pa.RecordBatch) -> pa.RecordBatch:
    """A batch as the file's schema has it: its columns as they are when they are the file's already (a stream's
    batch), else the same cast every time when the batch holds every column of the table (in any order);
    PyIceberg's projection when not (it fills in nulls)."""
    if batch.schema.equals(w.file_arrow) and all(batch.column(i).null_count == 0 for i in w.required):
        # The same columns, types and nullability, metadata aside, and no null where none may be (which the cast
        # refuses): the cast would only attach the field ids, a cast per column, 50 us a trickle's batch.
        return pa.RecordBatch.from_arrays(batch.columns, schema=w.file_arrow)
    names = w.file_arrow.names
    if batch.schema.names != names:
        if not set(names) <= set(batch.schema.names):
            return _project(w.file_schema, w.task_schema, [batch])
        batch = batch.select(names)
    return batch.cast(w.file_arrow)


def _folder(w: _Writer, partition: Any) -> str:
    """Where a partition's files go under the data folder: the same few values (a day) come again and
    again, and PyIceberg's path builds the spec's partition type every time."""
    key = repr(tuple(partition[i] for i in range(len(partition))))  # as its path has them: -0.0 is not 0.0
    return w.folders.make(key, lambda: _path(w.metadata.spec(), w, partition))


def _path(spec: Any, w: _Writer, partition: Any) -> str:
    return "" if spec.is_unpartitioned() else spec.partition_to_path(partition, w.metadata.schema()) + "/"


def _parquet(stream: Any, data: pa.Table, w: _Writer, options: dict[str, Any]) -> Any:
    """`data` written to `stream` as one Parquet file; the writer, whose metadata describes the file."""
    import pyarrow.parquet as pq

    writer = pq.ParquetWriter(stream, schema=data.schema, store_decimal_as_integer=True, **options)
    writer.write(data, row_group_size=w.row_group_size)
    writer.close()
    return writer


def _write(w: _Writer, table: pa.Table, partition: Any) -> list[DataFile]:
    """The rows of one partition (`partition`: its values) as data files near the target size."""
    from pyiceberg.io.pyarrow import bin_pack_arrow_table
    from pyiceberg.manifest import FileFormat

    write_uuid = uuid.uuid4()
    folder = _folder(w, partition)
    files = []
    # What fits in one file is one bin, as PyIceberg's packing would make it (a trickle's every write)
    # Sizes by buffers, not `nbytes` (25 us for a table of a few rows: it walks each array's slices): a slice of a
    # larger table counts its whole buffers, a buffer shared by columns once. Either way only how a file is encoded
    # (compressed or not) and packed changes, never what it holds.
    bins = ([table.to_batches()] if table.get_total_buffer_size() <= w.target_size
            else bin_pack_arrow_table(table, w.target_size))
    for n, batches in enumerate(bins):
        # PyIceberg projects every batch through a schema visitor; for one Arrow schema that is
        # always the same cast, worked out once (`_Writer.file_arrow`).
        data = pa.Table.from_batches([_to_file(w, batch) for batch in batches], schema=w.file_arrow)
        path = w.location.new_data_location(data_file_name=f"{folder}00000-{n}-{write_uuid}.parquet")
        small = data.get_total_buffer_size() < SMALL_FILE_BYTES
        options = w.small_options if small else w.parquet_options
        if small and is_local(w.io, path):
            # A trickle's file made in memory and written by one call under a name never used (O_EXCL): PyIceberg's
            # output makes the file's folder again and goes through PyArrow's file system, 50-80 us a file.
            with pa.BufferOutputStream() as stream:
                writer = _parquet(stream, data, w, options)
                body = stream.getvalue()
            write_new(w.io, path, body)
            size = body.size
        else:
            with w.io.new_output(path).create(overwrite=True) as stream:
                writer = _parquet(stream, data, w, options)
                size = stream.tell()  # what was written: PyIceberg's len(output) asks the file system again
        data_file = DataFile.from_args(
            content=DataFileContent.DATA, file_path=path, file_format=FileFormat.PARQUET, partition=partition,
            file_size_in_bytes=size, sort_order_id=None, equality_ids=None, key_metadata=None,
            **w.statistics.serialized(writer.writer.metadata),
        )
        data_file.spec_id = w.metadata.default_spec_id  # not a field of the struct: from_args drops it
        files.append(data_file)
        if small:  # a trickle's: compaction will read it back (`recent`)
            RECENT.keep(path, data)
    return files
