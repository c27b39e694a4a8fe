"""A table's data files read into Arrow: the one place Floe does it, whoever wrote the files.

PyIceberg's Arrow reader (`ArrowScan`) projects each file onto the schema asked for by field id (a
column renamed, added or promoted since the file was written is found, a missing one is null), but
keeps the Arrow types the file's writer chose: PyIceberg writes Arrow's large types (`large_string`,
`large_binary`, `large_list`) into its files' schema, where Floe and Java Iceberg write `string`,
`binary` and `list`. Batches of two writers then do not go into one table or one file (`ArrowInvalid:
Schema at index N was different`). Every batch read here is cast to the table's schema in Floe's
Arrow types, so compaction, retention, a replay, stages and the key index read a table that a team
loaded with PyIceberg or Spark as they read Floe's own files. A file already in those types (every
file Floe wrote) is passed on as it is read: nothing is copied.

PyIceberg's reader costs about 2 ms of CPU a file however small (a thread pool, the file's schema
converted and projected each time): compacting a trickling stream's table, 240 files of a few rows
every ten minutes, was half a second of it. A file read whole (no deletes, no filter) whose columns are
those asked for as written (each primitive, found by field id under the same name, in the same type)
is read here with PyArrow alone; any other file, or one whose footer says otherwise, goes through
PyIceberg (tests/test_reading.py compares both on files of each writer and schema change). A small file this
process wrote and still keeps the rows of (`fastpath/recent.py`: a trickle's, until a compaction rewrites it) is
not opened at all: its rows are taken as written, under the same check of its columns.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

import pyarrow as pa
from pyiceberg.expressions import AlwaysTrue, BooleanExpression
from pyiceberg.schema import Schema

from appliance.tables.fastpath.recent import RECENT


def arrow_schema(schema: Schema) -> pa.Schema:
    """`schema` in Arrow as Floe writes it: PyIceberg's types, without the large ones."""
    from pyiceberg.io.pyarrow import schema_to_pyarrow

    # A table's schema is one object while its metadata is: a rewrite reads hundreds of files with it.
    known = _ARROW.get(id(schema))
    if known is not None and known[0] is schema:
        return known[1]
    arrow = schema_to_pyarrow(schema, include_field_ids=False)
    arrow = pa.schema([f.with_type(_small(f.type)) for f in arrow])
    if len(_ARROW) >= 256:
        _ARROW.clear()
    _ARROW[id(schema)] = (schema, arrow)
    return arrow


_ARROW: dict[int, tuple[Schema, pa.Schema]] = {}  # id -> (the schema, kept alive while here, its Arrow schema)


def _small(t: pa.DataType) -> pa.DataType:
    if pa.types.is_large_string(t) or pa.types.is_string_view(t):
        return pa.string()
    if pa.types.is_large_binary(t) or pa.types.is_binary_view(t):
        return pa.binary()
    if pa.types.is_large_list(t) or pa.types.is_list(t):
        return pa.list_(t.value_field.with_type(_small(t.value_type)))
    if pa.types.is_map(t):
        return pa.map_(t.key_field.with_type(_small(t.key_type)), t.item_field.with_type(_small(t.item_type)))
    if pa.types.is_struct(t):
        return pa.struct([f.with_type(_small(f.type)) for f in t])
    return t


def conform(batch: pa.RecordBatch, arrow: pa.Schema) -> pa.RecordBatch:
    """`batch` with each column in the type `arrow` gives its name: cast only where the file's writer
    chose another (a large type, another name for a list's element)."""
    types = [arrow.field(name).type if name in arrow.names else column.type
             for name, column in zip(batch.schema.names, batch.columns)]
    if all(column.type == t for column, t in zip(batch.columns, types)):
        return batch
    columns = [column if column.type == t else column.cast(t) for column, t in zip(batch.columns, types)]
    return pa.RecordBatch.from_arrays(columns, schema=pa.schema(
        [f.with_type(t) for f, t in zip(batch.schema, types)], metadata=batch.schema.metadata))


def read_batches(meta: Any, io: Any, schema: Schema, tasks: Iterable[Any],
                 row_filter: BooleanExpression | None = None) -> Iterator[pa.RecordBatch]:
    """The rows of PyIceberg's scan `tasks` (`FileScanTask`s: a data file and the deletes that apply to
    it), file after file in file order, projected onto `schema` by field id, less those `row_filter`
    leaves out, in `arrow_schema(schema)`'s types."""
    from pyiceberg.io.pyarrow import ArrowScan

    arrow = arrow_schema(schema)
    pending: list[Any] = []  # tasks for PyIceberg, read together (its pool reads them at once)

    def by_pyiceberg() -> Iterator[pa.RecordBatch]:
        scan = ArrowScan(meta, io, schema, row_filter if row_filter is not None else AlwaysTrue())
        yield from (conform(batch, arrow) for batch in scan.to_record_batches(pending))

    for task in tasks:
        as_written = None if row_filter is not None or task.delete_files else _as_written(io, task.file, schema, arrow)
        if as_written is None:
            pending.append(task)
            continue
        if pending:
            yield from by_pyiceberg()
            pending = []
        yield from as_written
    if pending:
        yield from by_pyiceberg()


def held_rows(files: list[Any], schema: Schema) -> tuple[pa.Table, list[int]] | None:
    """The rows of `files` one after the other, as `read_batches` reads them with no delete and no filter, and each
    file's row count, when every one is a small file this process wrote and keeps (`recent`) in the schema asked;
    None otherwise. A compaction of a trickle's table merges a few hundred files of a few rows: read one at a time,
    their setting up (a task, a generator, a schema check, a batch each) cost more than their rows."""
    if not _plain(schema, files):
        return None
    found = RECENT.rows_of([f.file_path for f in files])
    if found is None:
        return None
    parts, counts = found
    arrow = arrow_schema(schema)
    checked: list[pa.Schema] = []  # the schemas of parts found as asked: almost always one
    out = []
    for part in parts:
        if not any(part.schema.equals(s, check_metadata=True) for s in checked):
            if not _as_asked(part.schema, schema, arrow):
                return None
            checked.append(part.schema)
        out.append(pa.Table.from_arrays(part.select(arrow.names).columns, schema=arrow))
    return (pa.concat_tables(out) if out else arrow.empty_table()), counts


FIELD_ID = b"PARQUET:field_id"
BATCH_ROWS = 131_072  # as PyArrow's scanner, which PyIceberg's reader uses
THREADED_BYTES = 1 << 20  # a file this large is decoded a column per thread; a small one costs more so


def _as_written(io: Any, data_file: Any, schema: Schema, arrow: pa.Schema) -> Iterator[pa.RecordBatch] | None:
    """The file's batches read by PyArrow alone, or None when PyIceberg's reader must project it."""
    import pyarrow.parquet as pq

    if not _plain(schema, [data_file]):
        return None
    kept = RECENT.rows(data_file.file_path)  # a small file this process wrote: its rows as written
    if kept is not None and _as_asked(kept.schema, schema, arrow):
        return (pa.RecordBatch.from_arrays(b.columns, schema=arrow) for b in kept.select(arrow.names).to_batches()
                if b.num_rows)
    parquet = pq.ParquetFile(io.new_input(data_file.file_path).open())
    if not _as_asked(parquet.schema_arrow, schema, arrow):
        parquet.close()
        return None  # added, renamed or promoted since, or another writer's types: projected by PyIceberg
    return _batches(parquet, arrow, threads=data_file.file_size_in_bytes >= THREADED_BYTES)


def _plain(schema: Schema, files: list[Any]) -> bool:
    """Whether PyArrow alone may read `files` for `schema` (Parquet files, no nested field to project), if each
    file's own schema is the one asked (`_as_asked`)."""
    from pyiceberg.manifest import FileFormat

    return all(f.file_format == FileFormat.PARQUET for f in files) and all(f.field_type.is_primitive
                                                                          for f in schema.fields)


def _as_asked(written: pa.Schema, schema: Schema, arrow: pa.Schema) -> bool:
    """Whether a file of Arrow schema `written` holds each field of `schema` by its id, under its name, in the
    type `arrow` gives it."""
    by_id = {(f.metadata or {}).get(FIELD_ID): f for f in written}
    for field, wanted in zip(schema.fields, arrow):
        found = by_id.get(str(field.field_id).encode())
        if found is None or found.name != wanted.name or found.type != wanted.type:
            return False
    return True


def _batches(parquet: Any, arrow: pa.Schema, threads: bool) -> Iterator[pa.RecordBatch]:
    with parquet:
        for batch in parquet.iter_batches(batch_size=BATCH_ROWS, columns=arrow.names, use_threads=threads):
            if batch.num_rows:
                yield pa.RecordBatch.from_arrays(batch.columns, schema=arrow)


def read_table(meta: Any, io: Any, schema: Schema, tasks: Iterable[Any],
               row_filter: BooleanExpression | None = None) -> pa.Table:
    """`read_batches` as one table (empty, with the schema's columns, when there is no row)."""
    return pa.Table.from_batches(list(read_batches(meta, io, schema, tasks, row_filter)), schema=arrow_schema(schema))


def file_tasks(files: Iterable[Any]) -> list[Any]:
    """Data files as scan tasks without deletes: every row each file holds."""
    from pyiceberg.table import FileScanTask

    return [FileScanTask(f) for f in files]
