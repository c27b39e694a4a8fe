"""One micro-batch as a Spark job: tasks read Kafka, decode, route and write Parquet data files.

Each task reads its pieces of the topic with confluent-kafka, decodes them with
`decode_batch`, and writes target and dead-letter rows as Iceberg data files in the
tables' own locations. Only the small file descriptions travel back to the driver,
which commits them (see `commit.py`). More Spark cores mean more tasks in parallel.
"""

from __future__ import annotations

import datetime as dt
import uuid
from dataclasses import dataclass, field

import pyarrow as pa

from appliance.decode import decode_batch
from appliance.kafka_client import KafkaSettings
from appliance.mapping import Mapping
from appliance.reader import Piece, PieceResult, read_pieces

@dataclass(frozen=True)
class TableTarget:
    """What a task needs to write data files for one table, without a catalog."""

    metadata_json: str
    io_properties: dict[str, str] = field(repr=False)  # may hold S3 keys
    metadata_location: str = ""


@dataclass(frozen=True)
class BatchSpec:
    stream_id: str
    topic: str
    kafka: KafkaSettings
    group: str
    mapping: Mapping
    target: TableTarget
    dead_letter: TableTarget
    # Offsets below which a partition's dead-letter rows are already committed (a
    # crash between the dead-letter and the target commit leaves them there).
    dead_letter_floor: dict[int, int]
    max_message_bytes: int
    fetch_timeout: float


@dataclass
class TaskResult:
    pieces: list[PieceResult]
    target_files: list = field(default_factory=list)
    dead_letter_files: list = field(default_factory=list)
    rows: int = 0
    dead_letter_rows: int = 0
    messages: int = 0
    bytes: int = 0
    read_seconds: float = 0.0
    decode_seconds: float = 0.0
    write_seconds: float = 0.0


_METADATA_CACHE: dict[str, object] = {}


def _table_metadata(target: TableTarget):
    from pyiceberg.table.metadata import TableMetadataUtil

    meta = _METADATA_CACHE.get(target.metadata_location)
    if meta is None:
        if len(_METADATA_CACHE) > 64:
            _METADATA_CACHE.clear()
        meta = TableMetadataUtil.parse_raw(target.metadata_json)
        _METADATA_CACHE[target.metadata_location] = meta
    return meta


def write_data_files(target: TableTarget, table: pa.Table) -> list:
    """Iceberg DataFile descriptions of `table` written under the table's location."""
    if table.num_rows == 0:
        return []
    from pyiceberg.io import load_file_io
    from pyiceberg.io.pyarrow import _dataframe_to_data_files

    meta = _table_metadata(target)
    io = load_file_io(target.io_properties, meta.location)
    return list(_dataframe_to_data_files(table_metadata=meta, df=table, io=io, write_uuid=uuid.uuid4()))


def run_task(spec: BatchSpec, pieces: list[Piece], ingested_at: dt.datetime) -> TaskResult:
    import time

    t0 = time.perf_counter()
    raw, results = read_pieces(spec.kafka, spec.group, spec.topic, pieces, spec.fetch_timeout)
    t1 = time.perf_counter()
    decoded = decode_batch(raw, spec.mapping, spec.max_message_bytes, ingested_at)
    dead = decoded.dead_letter
    if spec.dead_letter_floor and dead.num_rows:
        # Skip dead-letter rows an earlier, interrupted attempt already committed.
        parts = dead.column("_kafka_partition").to_pylist()
        offs = dead.column("_kafka_offset").to_pylist()
        keep = [o >= spec.dead_letter_floor.get(p, 0) for p, o in zip(parts, offs)]
        dead = dead.filter(pa.array(keep))
    t2 = time.perf_counter()
    result = TaskResult(
        pieces=results,
        target_files=write_data_files(spec.target, decoded.target),
        dead_letter_files=write_data_files(spec.dead_letter, dead),
        rows=decoded.target.num_rows,
        dead_letter_rows=dead.num_rows,
        messages=len(raw),
        bytes=sum(len(v) for v in raw.values if v),
    )
    result.read_seconds, result.decode_seconds = t1 - t0, t2 - t1
    result.write_seconds = time.perf_counter() - t2
    return result


def plan_tasks(pieces: list[Piece], parallelism: int) -> list[list[Piece]]:
    """Split and balance pieces over about `parallelism` tasks, largest first.

    A large partition is cut into several pieces so that a topic with fewer
    partitions than cores still uses every core.
    """
    pieces = [p for p in pieces if p.size > 0]
    if not pieces:
        return []
    total = sum(p.size for p in pieces)
    slots = max(1, min(parallelism, total // 2000 or 1))  # tiny batches are not worth many tasks
    share = -(-total // slots)
    cut: list[Piece] = []
    for piece in pieces:
        start = piece.start
        while piece.end - start > share:
            cut.append(Piece(piece.partition, start, start + share))
            start += share
        cut.append(Piece(piece.partition, start, piece.end))
    bins: list[list[Piece]] = [[] for _ in range(min(slots, len(cut)))]
    loads = [0] * len(bins)
    for piece in sorted(cut, key=lambda p: -p.size):
        i = loads.index(min(loads))
        bins[i].append(piece)
        loads[i] += piece.size
    for b in bins:
        b.sort(key=lambda p: (p.partition, p.start))
    return [b for b in bins if b]


def run_batch(spark, spec: BatchSpec, tasks: list[list[Piece]]) -> list[TaskResult]:
    """Run one Spark job with a task per entry of `tasks`; results in task order."""
    from appliance.spark import run_in_tasks

    if not tasks:
        return []
    ingested_at = dt.datetime.now(dt.timezone.utc)
    return run_in_tasks(spark, lambda i: run_task(spec, tasks[i], ingested_at), len(tasks))
