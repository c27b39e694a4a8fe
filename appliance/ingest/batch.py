"""One micro-batch as a Spark job: tasks read Kafka, decode, route and write Parquet data files (a job of a
few messages: the same work in the engine's process, `run_batches`).

Each task reads its pieces of the topic with confluent-kafka, decodes them with
`decode_batch`, and writes target and dead-letter rows as Iceberg data files in the
tables' own locations. Only the small file descriptions travel back to the driver,
which commits them (`ingest.batch_commit`). More Spark cores mean more tasks in parallel.
"""

from __future__ import annotations

import datetime as dt
import time
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

from appliance.core.errors import FloeError, UnforeseenError
from appliance.core.failpoints import failpoint
from appliance.decode.keys import Keyed
from appliance.decode.parsed import MessageFormat
from appliance.decode.rows import decode_batch
from appliance.ingest.planning import pack_tasks
from appliance.kafka.reader import Consumers, Piece, PieceResult, read_topics
from appliance.kafka.records import RawBatch
from appliance.kafka.settings import KafkaSettings
from appliance.mergeonread.keyforms import KeyForm
from appliance.mergeonread.plans import KeyedRows, Keys
from appliance.model.changes import Evolution, SchemaChange
from appliance.model.mapping import Mapping
from appliance.spark.tasks import run_in_tasks
from appliance.tables.datafiles import TableTarget, in_file_order, table_metadata, write_data_files


@dataclass(frozen=True)
class BatchSpec:
    stream: str  # its name, as errors name it
    stream_id: str
    topic: str
    kafka: KafkaSettings
    group: str
    mapping: Mapping
    target: TableTarget
    dead_letter: TableTarget
    # Offsets (per partition) that landed as dead letters in an attempt interrupted between its two
    # commits: written again to neither table, wherever they would go now.
    landed: dict[int, frozenset[int]]
    max_message_bytes: int
    fetch_timeout: float
    fmt: MessageFormat | None = None  # how messages are parsed; None: JSON
    evolve: bool = False  # new fields and wider values ask for a schema change instead of landing
    keyed: Keyed | None = None  # an upsert stream's keys: each task keeps the newest message of each key
    # A routed stream's tables (`ingest/routing.Router`): its messages split by a field among them; `mapping`
    # and `target` are then unused.
    router: Any = None


@dataclass
class TaskResult:
    pieces: list[PieceResult]
    read: list[Piece] = field(default_factory=list)  # the pieces it was given: a rerun reads them again
    evolution: Evolution = field(default_factory=Evolution)  # set: nothing written, the table must change first
    changes: set[SchemaChange] = field(default_factory=set)  # schema changes met
    schemas: dict[str, int] = field(default_factory=dict)  # writer schemas seen -> messages
    target_files: list = field(default_factory=list)
    dead_letter_files: list = field(default_factory=list)
    rows: int = 0
    dead_letter_rows: int = 0
    messages: int = 0
    bytes: int = 0
    read_seconds: float = 0.0
    decode_seconds: float = 0.0
    write_seconds: float = 0.0
    # The messages' Kafka timestamps (epoch ms): evenly spaced order statistics standing for all of
    # them (each for messages/len of them), the newest, and the longest throttle of the reads.
    timestamps: list[int] = field(default_factory=list)
    throttle_ms: int = 0
    # Upsert streams: the key and Kafka position of each row of the target files (in the files' order),
    # the keys whose newest message deletes them, and the last truncate (partition, offset).
    keys: Keys | None = None
    deleted: Keys | None = None
    truncated: tuple[int, int] | None = None
    # Routed streams: each route's table's files; the tables met without a route yet (set: nothing written),
    # each with its value and a sample of its messages; what route tables must become first (nothing written).
    routed_files: dict[str, list] = field(default_factory=dict)
    new_routes: dict[str, tuple[str, list[bytes]]] = field(default_factory=dict)
    evolutions: dict[str, Evolution] = field(default_factory=dict)
    route_changes: dict[str, set[SchemaChange]] = field(default_factory=dict)  # each route table's, told as its own
    # A routed upsert stream's: each route table's rows' keys (in its files' order) and the keys its messages delete.
    routed_keys: dict[str, Keys] = field(default_factory=dict)
    routed_deleted: dict[str, Keys] = field(default_factory=dict)


SAMPLE = 256  # order statistics a task returns: the batch's median is exact up to this many per task


def timestamp_sample(timestamps: list[int | None]) -> list[int]:
    """Evenly spaced order statistics of the known timestamps, the newest always among them."""
    known = sorted(t for t in timestamps if t is not None and t > 0)
    if len(known) <= SAMPLE:
        return known
    step = (len(known) - 1) / (SAMPLE - 1)
    return [known[round(i * step)] for i in range(SAMPLE)]


def weighted_median(samples: list[tuple[list[int], int]]) -> int | None:
    """The median of several tasks' timestamps, each sample standing for `count` messages."""
    points = sorted((t, count / len(sample)) for sample, count in samples if sample for t in sample)
    if not points:
        return None
    half, seen = sum(w for _, w in points) / 2, 0.0
    for t, w in points:
        seen += w
        if seen >= half:
            return t
    return points[-1][0]


@dataclass
class BatchResult:
    """What a batch's tasks did, summed."""

    tasks: list[TaskResult]

    @property
    def pieces(self) -> list[PieceResult]:
        return [pr for r in self.tasks for pr in r.pieces]

    @property
    def target_files(self) -> list:
        return [f for r in self.tasks for f in r.target_files]

    @property
    def dead_letter_files(self) -> list:
        return [f for r in self.tasks for f in r.dead_letter_files]

    def total(self, name: str) -> float:
        return sum(getattr(r, name) for r in self.tasks)

    @property
    def truncated(self) -> tuple[int, int] | None:
        """The (partition, offset) of a truncate event the batch read, if any."""
        return next((r.truncated for r in self.tasks if r.truncated is not None), None)

    def keyed_rows(self) -> KeyedRows:
        """An upsert batch's new files with their rows' keys, the keys deleted, and whether it truncates."""
        return KeyedRows([f for r in self.tasks for f in r.target_files],
                         Keys.concat([r.keys for r in self.tasks if r.keys is not None]),
                         Keys.concat([r.deleted for r in self.tasks if r.deleted is not None]),
                         any(r.truncated for r in self.tasks))

    @property
    def evolution(self) -> Evolution:
        out = Evolution()
        for r in self.tasks:
            out = out.merged(r.evolution)
        return out

    @property
    def changes(self) -> set[SchemaChange]:
        return {c for r in self.tasks for c in r.changes}

    @property
    def schemas(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for r in self.tasks:
            for k, n in r.schemas.items():
                out[k] = out.get(k, 0) + n
        return out

    @property
    def newest_timestamp(self) -> int | None:
        return max((r.timestamps[-1] for r in self.tasks if r.timestamps), default=None)

    @property
    def median_timestamp(self) -> int | None:
        return weighted_median([(r.timestamps, r.messages) for r in self.tasks])

    @property
    def throttle_ms(self) -> int:
        return max((r.throttle_ms for r in self.tasks), default=0)

    def replaced(self, redone: BatchResult) -> BatchResult:
        """This result with the tasks that asked for a schema change replaced by their rerun."""
        return BatchResult([r for r in self.tasks if not r.evolution] + redone.tasks)


def run_items(items: list[tuple[BatchSpec, list[Piece]]], ingested_at: dt.datetime,
              consumers: Consumers | None = None) -> list[TaskResult | FloeError]:
    """One task's work: every item's pieces read together (one consumer and one assignment per
    cluster), then each stream's messages decoded and written. An error is its item's alone:
    whatever a stream's work raises becomes that stream's result, and the other items go on.
    `consumers`: the caller's, when it runs the work itself (not a Spark task)."""
    reads: list[tuple[RawBatch, list[PieceResult]] | FloeError | None] = [None] * len(items)
    clusters: dict[KafkaSettings, list[int]] = {}
    for i, (spec, _) in enumerate(items):
        clusters.setdefault(spec.kafka, []).append(i)
    t0 = time.perf_counter()
    for kafka, indexes in clusters.items():
        timeout = min(items[i][0].fetch_timeout for i in indexes)
        try:
            done = read_topics(kafka, [(items[i][0].topic, items[i][1]) for i in indexes], timeout,
                               consumers=consumers)
        except FloeError as exc:
            done = [exc] * len(indexes)
        except Exception as exc:  # the reader's bug: the streams of this cluster retry
            done = [UnforeseenError.of(exc, f"reading {kafka.bootstrap}")] * len(indexes)
        for i, read in zip(indexes, done):
            reads[i] = read
    read_seconds = (time.perf_counter() - t0) / max(1, len(items))
    out: list[TaskResult | FloeError] = []
    for (spec, pieces), read in zip(items, reads):
        if isinstance(read, FloeError):
            out.append(read)
            continue
        try:
            failpoint("stream_task", spec.stream)
            write = spec.router.write if spec.router is not None else _write
            out.append(write(spec, pieces, *read, ingested_at, read_seconds))
        except FloeError as exc:
            out.append(exc)
        except Exception as exc:  # a bug, or a batch no single message makes fail: this stream retries
            out.append(UnforeseenError.of(exc, f"stream {spec.stream}"))
    return out


def _write(spec: BatchSpec, pieces: list[Piece], raw: RawBatch, results: list[PieceResult],
           ingested_at: dt.datetime, read_seconds: float) -> TaskResult:
    t1 = time.perf_counter()
    messages, size = len(raw), sum(len(v) for v in raw.values if v)
    if spec.keyed is not None:  # before decoding: a landed message takes no part in choosing a key's newest
        raw = _unlanded(raw, spec.landed)
    decoded = decode_batch(raw, spec.mapping, spec.max_message_bytes, ingested_at, spec.fmt, spec.evolve, spec.keyed)
    if decoded.evolution:  # written once the table has the columns these messages need
        return TaskResult(pieces=results, read=pieces, evolution=decoded.evolution, changes=decoded.changes,
                          schemas=decoded.schemas, messages=messages, read_seconds=read_seconds)
    target, dead = _not_landed(decoded.target, spec.landed), _not_landed(decoded.dead_letter, spec.landed)
    if spec.keyed is not None:  # its rows' keys are handed back in the files' order
        target = in_file_order(spec.target, target)
    t2 = time.perf_counter()
    result = TaskResult(
        pieces=results, read=pieces, changes=decoded.changes, schemas=decoded.schemas,
        target_files=write_data_files(spec.target, target),
        dead_letter_files=write_data_files(spec.dead_letter, dead),
        rows=target.num_rows,
        dead_letter_rows=dead.num_rows,
        messages=messages,
        bytes=size,
        timestamps=timestamp_sample(raw.timestamps),
        throttle_ms=raw.throttle_ms,
    )
    if spec.keyed is not None:  # the rows' keys as the index keeps them, in the files' order
        form = KeyForm.of(table_metadata(spec.target).schema(), spec.keyed.columns)
        result.keys, result.deleted = Keys.of(form, target), Keys.of(form, decoded.deleted)
        result.truncated = decoded.truncated
    result.read_seconds, result.decode_seconds = read_seconds, t2 - t1
    result.write_seconds = time.perf_counter() - t2
    return result


def _unlanded(raw: RawBatch, landed: dict[int, frozenset[int]]) -> RawBatch:
    """The messages an earlier, interrupted attempt did not already land as dead letters."""
    if not landed:
        return raw
    none: frozenset[int] = frozenset()
    return raw.take([i for i, (p, o) in enumerate(zip(raw.partitions, raw.offsets)) if o not in landed.get(p, none)])


def _not_landed(rows: pa.Table, landed: dict[int, frozenset[int]]) -> pa.Table:
    """The rows whose message an earlier, interrupted attempt did not already land as a dead letter."""
    if not landed or not rows.num_rows:
        return rows
    parts = rows.column("_kafka_partition").to_pylist()
    offs = rows.column("_kafka_offset").to_pylist()
    none: frozenset[int] = frozenset()
    return rows.filter(pa.array([o not in landed.get(p, none) for p, o in zip(parts, offs)]))


def run_batch(spark, spec: BatchSpec, tasks: list[list[Piece]]) -> BatchResult:
    """Run one Spark job with a task per entry of `tasks`."""
    result = run_batches(spark, [(spec, tasks)], parallelism=max(1, len(tasks)))[0]
    if isinstance(result, BaseException):
        raise result
    return result


def run_batches(spark, batches: list[tuple[BatchSpec, list[list[Piece]]]], parallelism: int,
                consumers: Consumers | None = None) -> list[BatchResult | FloeError]:
    """Several streams' batches as one Spark job: what each batch did, or the error that stopped it.

    A Spark job costs tens of milliseconds of CPU whatever it holds, so streams that are
    due together share one, and their small batches share tasks (`pack_tasks`). One
    stream's failure (a read timeout, say) is that stream's alone. Given `consumers` (the engine's own), the
    job is one task's work run here, in this thread, not in Spark (`engine.batch_in_engine`): for a few hundred
    messages the job's start, the round trip to a Python worker and the results back cost more than the work.
    """
    items = [(b, pieces) for b, (_, tasks) in enumerate(batches) for pieces in tasks]
    if not items:
        return [BatchResult([]) for _ in batches]
    specs = [spec for spec, _ in batches]
    ingested_at = dt.datetime.now(dt.UTC)
    if consumers is not None:
        groups = [items]
    else:
        groups = [[items[i] for i in group]
                  for group in pack_tasks([sum(p.size for p in pieces) for _, pieces in items], parallelism)]

    def work(task: int) -> list[tuple[int, TaskResult | FloeError]]:
        group = groups[task]
        return list(zip([b for b, _ in group],
                        run_items([(specs[b], pieces) for b, pieces in group], ingested_at, consumers)))

    per_batch: list[list] = [[] for _ in batches]
    for task_results in ([work(0)] if consumers is not None else run_in_tasks(spark, work, len(groups))):
        for b, result in task_results:
            per_batch[b].append(result)
    return [next((r for r in results if isinstance(r, FloeError)), None) or BatchResult(results)
            for results in per_batch]
