"""Data files: writing them where a table keeps its data, finding the ones a snapshot uses, deleting.

`TableTarget` is what a Spark task needs to write data files for a table without a
catalog connection: the table's metadata as JSON and its storage properties.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from typing import Any, Iterable

import pyarrow as pa
from pyiceberg.manifest import (
    DataFile,
    DataFileContent,
    ManifestEntry,
    ManifestEntryStatus,
)
from pyiceberg.table import Table
from pyiceberg.table.snapshots import Snapshot

from appliance.tables.storage import describe, storage_errors


@dataclass(frozen=True)
class TableTarget:
    """What a task needs to write data files for one table, without a catalog."""

    metadata_json: str
    io_properties: dict[str, str] = field(repr=False)  # may hold S3 keys
    metadata_location: str = ""

    @classmethod
    def of(cls, table: Table) -> TableTarget:
        # Writing needs the schema, spec, properties and location, not the snapshot history:
        # without it the JSON stays small, and the same from one commit to the next, so a
        # worker parses it once, however many snapshots the table gathers.
        slim = table.metadata.model_copy(update={"snapshots": [], "snapshot_log": [], "metadata_log": [],
                                                 "refs": {}, "current_snapshot_id": None, "statistics": [],
                                                 "partition_statistics": [], "last_updated_ms": 0,
                                                 "last_sequence_number": 0})
        return cls(slim.model_dump_json(), dict(table.io.properties), table.metadata_location)

    def where(self) -> str:
        """The table's location as errors name it (never its keys)."""
        return describe(table_metadata(self).location, self.io_properties.get("s3.endpoint", ""))


_METADATA_CACHE: dict[str, object] = {}


def table_metadata(target: TableTarget):
    """The parsed metadata of `target`, parsed once per schema and properties in each Python worker."""
    from pyiceberg.table.metadata import TableMetadataUtil

    meta = _METADATA_CACHE.get(target.metadata_json)
    if meta is None:
        if len(_METADATA_CACHE) > 64:
            _METADATA_CACHE.clear()
        meta = TableMetadataUtil.parse_raw(target.metadata_json)
        _METADATA_CACHE[target.metadata_json] = meta
    return meta


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
    row_group_size: int
    stats_columns: Any
    column_ids: dict[str, int]
    file_arrow: pa.Schema  # what PyIceberg's projection makes of the task's Arrow schema, with field ids


_WRITERS: dict[tuple[str, pa.Schema], _Writer] = {}


def _writer(target: TableTarget, schema: pa.Schema) -> _Writer:
    key = (target.metadata_json, schema)
    found = _WRITERS.get(key)
    if found is None:
        from pyiceberg.io import load_file_io
        from pyiceberg.io.pyarrow import (
            _get_parquet_writer_kwargs,
            compute_statistics_plan,
            parquet_path_to_id_mapping,
            pyarrow_to_schema,
        )
        from pyiceberg.schema import sanitize_column_names
        from pyiceberg.table import TableProperties
        from pyiceberg.table.locations import load_location_provider
        from pyiceberg.utils.properties import property_as_int

        meta = table_metadata(target)
        props = meta.properties
        file_schema = sanitize_column_names(meta.schema())
        task_schema = pyarrow_to_schema(schema, name_mapping=meta.schema().name_mapping,
                                        format_version=meta.format_version)
        found = _Writer(
            metadata=meta, io=load_file_io(target.io_properties, meta.location), file_schema=file_schema,
            task_schema=task_schema,
            location=load_location_provider(table_location=meta.location, table_properties=props),
            properties=props,
            target_size=property_as_int(props, TableProperties.WRITE_TARGET_FILE_SIZE_BYTES,
                                        TableProperties.WRITE_TARGET_FILE_SIZE_BYTES_DEFAULT),
            parquet_options=_get_parquet_writer_kwargs(props),
            row_group_size=property_as_int(props, TableProperties.PARQUET_ROW_GROUP_LIMIT,
                                           TableProperties.PARQUET_ROW_GROUP_LIMIT_DEFAULT),
            stats_columns=compute_statistics_plan(file_schema, props),
            column_ids=parquet_path_to_id_mapping(file_schema),
            file_arrow=_project(file_schema, task_schema, schema.empty_table().to_batches() or
                                [pa.RecordBatch.from_pylist([], schema=schema)]).schema,
        )
        if len(_WRITERS) > 64:
            _WRITERS.clear()
        _WRITERS[key] = found
    return found


def _project(file_schema: Any, task_schema: Any, batches: list[pa.RecordBatch]) -> pa.RecordBatch:
    from pyiceberg.io.pyarrow import ParquetFormatModel, _to_requested_schema

    return _to_requested_schema(requested_schema=file_schema, file_schema=task_schema, batch=batches[0],
                                include_field_ids=True, format_model=ParquetFormatModel())


def write_data_files(target: TableTarget, table: pa.Table) -> list[DataFile]:
    """Iceberg DataFile descriptions of `table` written under the table's location (not committed).

    What PyIceberg's `_dataframe_to_data_files` does for an unpartitioned table, with the
    schema conversions done once per worker and no thread hand-off: a stream's task
    writes a small file every second, and those were most of its cost.
    """
    if table.num_rows == 0:
        return []
    meta = table_metadata(target)
    with storage_errors(target.where(), "write data files"):
        if not meta.spec().is_unpartitioned():
            from pyiceberg.io import load_file_io
            from pyiceberg.io.pyarrow import _dataframe_to_data_files

            io = load_file_io(target.io_properties, meta.location)
            return list(_dataframe_to_data_files(table_metadata=meta, df=table, io=io, write_uuid=uuid.uuid4()))
        return _write_unpartitioned(_writer(target, table.schema), table)


def _to_file(w: _Writer, batch: pa.RecordBatch) -> pa.RecordBatch:
    """A batch as the file's schema has it: the same cast every time, when the batch holds every
    column of the table (in any order); PyIceberg's projection when not (it fills in nulls)."""
    names = w.file_arrow.names
    if batch.schema.names != names:
        if not set(names) <= set(batch.schema.names):
            return _project(w.file_schema, w.task_schema, [batch])
        batch = batch.select(names)
    return batch.cast(w.file_arrow)


def _write_unpartitioned(w: _Writer, table: pa.Table) -> list[DataFile]:
    import pyarrow.parquet as pq
    from pyiceberg.io.pyarrow import bin_pack_arrow_table, data_file_statistics_from_parquet_metadata
    from pyiceberg.manifest import FileFormat
    from pyiceberg.typedef import Record

    write_uuid = uuid.uuid4()
    files = []
    for n, batches in enumerate(bin_pack_arrow_table(table, w.target_size)):
        # PyIceberg projects every batch through a schema visitor; for one Arrow schema that is
        # always the same cast, worked out once (`_Writer.file_arrow`).
        data = pa.Table.from_batches([_to_file(w, batch) for batch in batches], schema=w.file_arrow)
        path = w.location.new_data_location(data_file_name=f"00000-{n}-{write_uuid}.parquet")
        output = w.io.new_output(path)
        with output.create(overwrite=True) as stream:
            writer = pq.ParquetWriter(stream, schema=data.schema, store_decimal_as_integer=True, **w.parquet_options)
            writer.write(data, row_group_size=w.row_group_size)
            writer.close()
        stats = data_file_statistics_from_parquet_metadata(
            parquet_metadata=writer.writer.metadata, stats_columns=w.stats_columns, parquet_column_mapping=w.column_ids)
        files.append(DataFile.from_args(
            content=DataFileContent.DATA, file_path=path, file_format=FileFormat.PARQUET, partition=Record(),
            file_size_in_bytes=len(output), sort_order_id=None, spec_id=w.metadata.default_spec_id,
            equality_ids=None, key_metadata=None, **stats.to_serialized_dict(),
        ))
    return files


def live_entries(table: Table, snapshot: Snapshot | None = None) -> list[ManifestEntry]:
    snapshot = snapshot or table.current_snapshot()
    if snapshot is None:
        return []
    return [e for m in snapshot.manifests(table.io) for e in m.fetch_manifest_entry(table.io, discard_deleted=True)]


def live_data_files(table: Table, snapshot: Snapshot | None = None) -> list[DataFile]:
    return [e.data_file for e in live_entries(table, snapshot) if e.data_file.content == DataFileContent.DATA]


@dataclass
class Reachable:
    """Every file some set of snapshots needs: manifest lists, manifests, data and delete files."""

    manifest_lists: set[str]
    manifests: set[str]
    content: set[str]

    def all(self) -> set[str]:
        return self.manifest_lists | self.manifests | self.content


def reachable_files(table: Table, snapshots: Iterable[Snapshot]) -> Reachable:
    out = Reachable(set(), set(), set())
    read: set[str] = set()  # manifests are shared between snapshots: read each once
    for snapshot in snapshots:
        out.manifest_lists.add(snapshot.manifest_list)
        for manifest in snapshot.manifests(table.io):
            out.manifests.add(manifest.manifest_path)
            if manifest.manifest_path in read:
                continue
            read.add(manifest.manifest_path)
            for entry in manifest.fetch_manifest_entry(table.io, discard_deleted=False):
                # A DELETED entry records a removal: the file is not part of that snapshot.
                if entry.status != ManifestEntryStatus.DELETED:
                    out.content.add(entry.data_file.file_path)
    return out


def delete_files(table: Table, paths: Iterable[str]) -> tuple[int, list[str]]:
    """Delete files from storage; the number deleted and the failures (one line each)."""
    deleted, failed = 0, []
    for path in sorted(paths):
        try:
            table.io.delete(path)
            deleted += 1
        except FileNotFoundError:
            deleted += 1  # gone already: an earlier run was interrupted after deleting it
        except OSError as exc:
            failed.append(f"{path}: {' '.join(str(exc).split())}")
    return deleted, failed
