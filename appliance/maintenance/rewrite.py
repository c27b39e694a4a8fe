"""Rewriting data files into files of about a target size, in Spark tasks.

Compaction rewrites every row of its groups; retention rewrites only the rows at or
after a cutoff. A group's files (one partition) are read by `tables/reading.py` (PyIceberg's
Arrow reader, which maps old files onto the current schema by field id, in the table's
Arrow types whichever writer wrote them), and written by a
rolling Parquet writer that closes each file once it reaches the target size on
disk. One Spark task per group, so more Spark cores rewrite more groups at once.
"""

from __future__ import annotations

import contextvars

import datetime as dt
import time
import uuid
from dataclasses import dataclass, field
from typing import Any, Iterable

import pyarrow as pa
from pyiceberg.manifest import DataFile, DataFileContent, FileFormat
from pyiceberg.typedef import Record

from appliance.core.activity import give_way
from appliance.core.failpoints import failpoint
from appliance.mergeonread.folding import Kept
from appliance.spark.tasks import run_in_tasks
from appliance.tables.datafiles import TableTarget, table_metadata
from appliance.tables.fastpath.recent import RECENT
from appliance.tables.reading import file_tasks, held_rows, read_batches
from appliance.tables.storage import storage_errors

REWRITTEN = "floe-rewrite-"  # the start of the name of every file a rewrite writes
ROW_GROUP_BYTES = 32 * 1024 * 1024  # a Parquet row group holds at most about this much, on disk
POSITION = "__floe_position"  # a row's position in the file it is read from, while it is rewritten


@dataclass(frozen=True)
class KeepFilter:
    """Rows to keep: `column` at or after `cutoff`, or null (an unknown event time is not old)."""

    column: str
    cutoff: dt.datetime

    def expression(self, field_type: Any):
        from pyiceberg.expressions import GreaterThanOrEqual, IsNull, Or
        from pyiceberg.types import DateType, TimestampType

        if isinstance(field_type, DateType):
            literal = self.cutoff.date().isoformat()
        elif isinstance(field_type, TimestampType):
            literal = self.cutoff.astimezone(dt.timezone.utc).replace(tzinfo=None).isoformat()
        else:
            literal = self.cutoff.isoformat()
        return Or(GreaterThanOrEqual(self.column, literal), IsNull(self.column))


@dataclass(frozen=True)
class RewriteGroup:
    files: tuple[DataFile, ...]  # all of one spec and partition
    spec_id: int
    partition: Record
    deleted: tuple[Any, ...] = ()  # per file: the positions its delete files remove (np.ndarray), or None

    @property
    def bytes(self) -> int:
        return sum(f.file_size_in_bytes for f in self.files)

    @property
    def rows(self) -> int:
        """The rows a reader sees in the group's files (less those deleted by position)."""
        gone = sum(len(d) for d in self.deleted if d is not None)
        return sum(f.record_count for f in self.files) - gone

    def deleted_of(self, i: int) -> Any:
        return self.deleted[i] if i < len(self.deleted) else None


@dataclass
class RewriteResult:
    files: list[DataFile] = field(default_factory=list)
    # Per input file, in order: which of its rows were written (in their order), a `Kept` bitmap.
    kept: list[Kept] = field(default_factory=list)
    rows_in: int = 0
    rows_out: int = 0
    bytes_in: int = 0
    bytes_out: int = 0
    seconds: float = 0.0


class _TrackedOutput:
    """An OutputFile whose stream we keep, to see how many bytes a file has so far."""

    def __init__(self, inner) -> None:
        self.inner = inner
        self.stream = None

    def create(self, overwrite: bool = False):
        self.stream = self.inner.create(overwrite=overwrite)
        return self.stream


class RollingWriter:
    """Writes Arrow batches into data files that close once they reach `target` bytes."""

    def __init__(self, target: TableTarget, group: RewriteGroup, target_bytes: int, bytes_per_row: float) -> None:
        from pyiceberg.io import load_file_io
        from pyiceberg.io.pyarrow import sanitize_column_names
        from pyiceberg.table.locations import load_location_provider

        self.meta = table_metadata(target)
        self.io = load_file_io(target.io_properties, self.meta.location)
        self.locations = load_location_provider(self.meta.location, self.meta.properties)
        self.schema = self.meta.schema()
        self.file_schema = sanitize_column_names(self.schema)
        self.group = group
        self.target = target_bytes
        self.bytes_per_row = max(1.0, bytes_per_row)
        self.prefix = f"{REWRITTEN}{uuid.uuid4()}"
        self.files: list[DataFile] = []
        self.rows = 0
        self._buffer: list[pa.RecordBatch] = []
        self._buffered = 0
        self._writer = None
        self._output: _TrackedOutput | None = None
        self._path = ""
        self._rows_in_file = 0

    def add(self, batch: pa.RecordBatch) -> None:
        if batch.num_rows:
            self._buffer.append(batch)
            self._buffered += batch.num_rows
            self._drain(final=False)

    def close(self) -> list[DataFile]:
        self._drain(final=True)
        self._close_file()
        return self.files

    def _written(self) -> int:
        return self._output.stream.tell() if self._output and self._output.stream else 0

    def _drain(self, final: bool) -> None:
        while self._buffered:
            if self._writer is not None and self._written() >= self.target * 0.95:
                self._close_file()
            room = self.target - self._written()
            rows = max(1, min(int(room / self.bytes_per_row), int(ROW_GROUP_BYTES / self.bytes_per_row)))
            if self._buffered < rows and not final:
                return  # wait for more rows: bigger row groups compress and scan better
            self._write(self._take(rows))

    def _take(self, rows: int) -> pa.Table:
        buffered = pa.Table.from_batches(self._buffer)  # zero-copy, as are the slices
        taken = buffered.slice(0, rows)
        self._buffer = buffered.slice(rows).to_batches()
        self._buffered -= taken.num_rows
        return taken

    def _write(self, table: pa.Table) -> None:
        from pyiceberg.io.fileformat import FileFormatFactory

        from appliance.tables.fastpath.internals import to_requested_schema

        fmt = FileFormatFactory.get(FileFormat.PARQUET)
        if self._writer is None:
            spec = self.meta.specs()[self.group.spec_id]
            folder = "" if spec.is_unpartitioned() else spec.partition_to_path(self.group.partition, self.schema) + "/"
            self._path = self.locations.new_data_location(f"{folder}{self.prefix}-{len(self.files):05d}.parquet")
            self._output = _TrackedOutput(self.io.new_output(self._path))
            self._writer = fmt.create_writer(self._output, self.file_schema, self.meta.properties)
            self._rows_in_file = 0
        batches = [
            to_requested_schema(
                requested_schema=self.file_schema, file_schema=self.schema, batch=b,
                downcast_ns_timestamp_to_us=True, include_field_ids=True, format_model=fmt,
            )
            for b in table.combine_chunks().to_batches()  # one conversion, not one per file read
        ]
        self._writer.write(pa.Table.from_batches(batches))
        self._rows_in_file += table.num_rows
        self.rows += table.num_rows
        # Learn the real size of a row on disk from this file, to place the next cut well.
        self.bytes_per_row = max(1.0, self._written() / self._rows_in_file)

    def _close_file(self) -> None:
        if self._writer is None:
            return
        stats = self._writer.close()
        data_file = DataFile.from_args(
            content=DataFileContent.DATA,
            file_path=self._path,
            file_format=FileFormat.PARQUET,
            partition=self.group.partition,
            file_size_in_bytes=len(self.io.new_input(self._path)),
            sort_order_id=None,
            equality_ids=None,
            key_metadata=None,
            **stats.to_serialized_dict(),
        )
        data_file.spec_id = self.group.spec_id  # not a field of the struct: from_args drops it
        self.files.append(data_file)
        self._writer = None
        self._output = None


def rewrite_group(target: TableTarget, group: RewriteGroup, target_bytes: int,
                  keep: KeepFilter | None) -> RewriteResult:
    """Rewrite one group; the new files are written but not committed. Each file is read whole, in
    its own order, less the rows its delete files remove and those `keep` does not keep; which of
    its positions were kept is returned (`RewriteResult.kept`), for deletes committed meanwhile."""
    from pyiceberg.io import load_file_io
    from pyiceberg.io.pyarrow import expression_to_pyarrow

    failpoint("rewrite_group")
    started = time.perf_counter()
    meta = table_metadata(target)
    io = load_file_io(target.io_properties, meta.location)
    schema = meta.schema()
    kept_rows = None
    if keep is not None:
        from pyiceberg.expressions.visitors import bind

        kept_rows = expression_to_pyarrow(bind(schema, keep.expression(schema.find_field(keep.column).field_type),
                                               case_sensitive=True))
    bytes_per_row = group.bytes / max(1, group.rows)
    writer: RollingWriter | Repartitioner = RollingWriter(target, group, target_bytes, bytes_per_row)
    if repartitions(meta, group):
        writer = Repartitioner(target, meta, target_bytes, bytes_per_row)
    # Every row kept, in order, into one writer: the files whose rows this process keeps are taken a run at a time.
    whole = keep is None and not isinstance(writer, Repartitioner) and all(d is None for d in group.deleted)
    try:
        with storage_errors(target.where(), "rewrite data files"):
            kept: list[Kept] = []
            for run in (_runs_held(group.files) if whole else [list(group.files)]):
                held = held_rows(run, schema) if whole and len(run) > 1 else None
                if held is not None:
                    for batch in held[0].to_batches():
                        writer.add(batch)
                    kept += [Kept.every(rows) for rows in held[1]]
                    continue
                for f in run:
                    kept.append(_copy(read_batches(meta, io, schema, file_tasks([f])), group.deleted_of(len(kept)),
                                      kept_rows, writer))
            files = writer.close()
    except BaseException:
        for f in writer.files:  # written but never to be committed
            io.delete(f.file_path)
        raise
    return RewriteResult(
        files=files,
        kept=kept,
        rows_in=group.rows,
        rows_out=writer.rows,
        bytes_in=group.bytes,
        bytes_out=sum(f.file_size_in_bytes for f in files),
        seconds=time.perf_counter() - started,
    )


def _runs_held(files: Iterable[DataFile]) -> list[list[DataFile]]:
    """`files` in runs, in order, of those whose rows this process keeps (`recent`) and of those it does not: a
    trickle's compaction merges a hundred new small files with the file its last compaction wrote."""
    runs: list[list[DataFile]] = []
    was = None
    for f in files:
        held = RECENT.holds(f.file_path)
        if held is not was:
            runs.append([])
            was = held
        runs[-1].append(f)
    return runs


def repartitions(meta: Any, group: RewriteGroup) -> bool:
    """Whether the group's files are of an older partition spec, to be rewritten in the current one.
    Not when some of their rows are deleted by position: those deletes must keep mapping onto the
    new files, which only a rewrite in order (one partition into one) allows."""
    return group.spec_id != meta.default_spec_id and not any(d is not None for d in group.deleted)


class Repartitioner:
    """Rows of an older spec's files into files of the current spec: each batch split by partition,
    each partition to a rolling writer of its own."""

    def __init__(self, target: TableTarget, meta: Any, target_bytes: int, bytes_per_row: float) -> None:
        self.target, self.meta, self.target_bytes, self.bytes_per_row = target, meta, target_bytes, bytes_per_row
        self.writers: dict[tuple, RollingWriter] = {}
        self.rows = 0

    @property
    def files(self) -> list[DataFile]:
        return [f for writer in self.writers.values() for f in writer.files]

    def add(self, batch: pa.RecordBatch) -> None:
        from appliance.tables.fastpath.parquet import partitions

        for record, rows in partitions(self.meta, pa.Table.from_batches([batch])):
            key = tuple(record)
            if key not in self.writers:
                group = RewriteGroup((), self.meta.default_spec_id, record)
                self.writers[key] = RollingWriter(self.target, group, self.target_bytes, self.bytes_per_row)
            for part in rows.to_batches():
                self.writers[key].add(part)
            self.rows += rows.num_rows

    def close(self) -> list[DataFile]:
        for writer in self.writers.values():
            writer.close()
        return self.files


def _copy(batches: Iterable[pa.RecordBatch], gone: Any, keep: Any, writer: Any) -> Kept:
    """One file's rows into the writer, in order, less those at the positions `gone` and those `keep`
    (an Arrow expression) leaves out; which rows were written."""
    import numpy as np

    start, written = 0, []
    for batch in batches:
        batch = batch.append_column(POSITION, pa.array(np.arange(start, start + batch.num_rows)))
        start += batch.num_rows
        if gone is not None and len(gone):
            batch = batch.filter(pa.array(~np.isin(batch.column(POSITION).to_numpy(), gone)))
        if keep is not None:
            batch = batch.filter(keep)
        written.append(batch.column(POSITION).to_numpy())
        writer.add(batch.drop_columns([POSITION]))
    mask = np.zeros(start, dtype=bool)
    if written:
        mask[np.concatenate(written)] = True
    return Kept.of(mask)


JOB_GROUP = "floe-maintenance"

# Set while the engine's maintenance runs (`Maintainer` in the engine): its rewrites share the Spark session with
# the streams' batches, and leave them a task slot at all times (see `at_once`).
SHARING = contextvars.ContextVar("floe_rewrites_share_spark", default=False)


def at_once(slots: int, groups: int, sharing: bool) -> int:
    """How many rewrite tasks run at a time: all of them in a session of their own; beside the engine's streams,
    never more than the session's task slots less one. Spark cannot take a slot back from a running task (FAIR
    scheduling only decides who gets the next free one), so a rewrite that took every slot would hold a busy
    stream's batch until one of its tasks ended: with one slot always left, a batch never waits for a rewrite."""
    return max(1, min(groups, slots - 1 if sharing else groups))


def rewrite_groups(
    spark, target: TableTarget, groups: list[RewriteGroup], target_bytes: int, keep: KeepFilter | None = None,
    in_process: int = 0,
) -> list[RewriteResult]:
    """Rewrite `groups`, one Spark task each, or here, in order, when there is no Spark or they come to at most
    `in_process` bytes (`maintenance.rewrite_in_engine`: a trickle's 240 files of a few rows, about 1 MB, cost
    150 ms of CPU here and 210-430 ms over the engine's processes as a Spark job, its tasks started, the files sent
    to them and the results back; 200 such tables every 10 minutes made compaction waves of 0.2 cores). Results
    in order."""
    if not groups:
        return []
    if spark is None or sum(g.bytes for g in groups) <= in_process:
        results = []
        for g in groups:
            give_way()  # in the engine, a rewrite here shares the interpreter with the streams' commits
            results.append(rewrite_group(target, g, target_bytes, keep))
        return results
    context = spark.sparkContext
    # The engine's streams share this SparkSession: FAIR scheduling in a pool of its own, and a slot always
    # left to them (`at_once`), keep a long rewrite from holding back their batches; the job group lets a
    # stopping engine cancel it.
    context.setLocalProperty("spark.scheduler.pool", "maintenance")
    context.setJobGroup(JOB_GROUP, "floe table maintenance", interruptOnCancel=True)
    step = at_once(context.defaultParallelism, len(groups), SHARING.get())
    try:
        results: list[RewriteResult] = []
        for start in range(0, len(groups), step):
            wave = groups[start:start + step]
            results += run_in_tasks(spark, lambda i, wave=wave: rewrite_group(target, wave[i], target_bytes, keep),
                                    len(wave))
        return results
    finally:
        context.setLocalProperty("spark.scheduler.pool", None)
        context.setLocalProperty("spark.jobGroup.id", None)
