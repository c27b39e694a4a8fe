"""One stream's batches, from Kafka to a committed Iceberg snapshot.

A step: read where the stream's tables say it is (`Committed`, from the snapshot
summaries, never a side file) and the partitions' watermarks; plan the pieces
(`planning`); run them as one Spark job (`batch`); commit the files with the end
offsets (`commit`); record the batch for whoever watches.
"""

from __future__ import annotations

import json
import logging
import time
import weakref
from dataclasses import dataclass

from appliance.config.settings import Settings
from appliance.core.clock import now
from appliance.core.errors import SchemaError
from appliance.core.failpoints import failpoint
from appliance.core.vocabulary import EventKind, EventLevel
from appliance.decode.formats import format_of
from appliance.decode.keys import Keyed
from appliance.ingest.batch import BatchResult, BatchSpec, run_batch
from appliance.ingest.batch_commit import Snapshots, StreamTables, commit_batch, landed_dead_letters
from appliance.ingest.indexes import index_for
from appliance.ingest.jobs import BatchJobs
from appliance.ingest.planning import (
    Committed,
    Expired,
    Plan,
    advance,
    caught_up,
    lag,
    plan_batch,
    plan_tasks,
)
from appliance.ingest.stream_schema import StreamSchema
from appliance.ingest.watermarks import WatermarkPollers
from appliance.kafka.client import KafkaClient, Watermarks
from appliance.model.stream import StreamDef
from appliance.spark.session import parallelism
from appliance.state.records import BatchRecord
from appliance.state.store import StateStore
from appliance.tables.catalog import Catalog, warehouse_io
from appliance.tables.datafiles import TableTarget
from appliance.tables.snapshots import committed_offsets, offsets_json

log = logging.getLogger(__name__)

PARTITIONS_TTL = 30.0  # seconds a topic's partition list is kept: partitions are rarely added
CORES_TTL = 30.0  # seconds Spark's core count is kept: a cluster's executors come and go
# A SparkSession -> (asked at, its default parallelism); held weakly, so a session that ends takes its count with it
# (keyed by id(), a new session given a dead one's id would have seen its count).
_CORES: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def session_cores(spark) -> int:
    """Spark's default parallelism: a question to the JVM, asked again now and then as a cluster's executors come
    and go; once for every stream of the session (200 streams asked it 7 times a second)."""
    found = _CORES.get(spark)
    if found is None or time.monotonic() - found[0] > CORES_TTL:
        found = _CORES[spark] = (time.monotonic(), parallelism(spark))
    return found[1]


MAX_EVOLUTIONS = 3  # schema updates one batch may ask for before it is given up and read again


@dataclass(frozen=True)
class Prepared:
    """A batch planned, before its tasks run."""

    plan: Plan
    tasks: list[list]
    started: float  # monotonic
    started_at: str


@dataclass(frozen=True)
class BatchOutcome:
    messages: int
    rows: int
    dead_letter_rows: int
    lag: int
    committed: bool
    newest_kafka_ts: int | None = None  # epoch ms, of the newest message committed


class StreamRunner:
    """Runs the batches of one stream. Not thread-safe: one worker thread owns it."""

    def __init__(self, settings: Settings, spark, catalog: Catalog, state: StateStore, stream: StreamDef,
                 jobs: BatchJobs | None = None, pollers: WatermarkPollers | None = None,
                 kafka: KafkaClient | None = None, member: bool = False) -> None:
        """`kafka`: a client shared with other runners (a pattern stream's), which this one never closes;
        `member`: a pattern stream's topic (`StreamSchema`'s `member`)."""
        self.settings = settings
        # The cluster's shared poller asks the watermarks; without one, the stream asks them itself.
        self.poller = pollers.of(stream.kafka) if pollers is not None else None
        self.spark = spark
        self.jobs = jobs  # shared with other streams' runners; without it, a job of its own
        self.catalog = catalog
        self.state = state
        self.stream = stream
        self._kafka: KafkaClient | None = kafka
        self._owns_kafka = kafka is None
        self.tables: StreamTables | None = None
        self.committed: Committed | None = None  # None: read it from the tables before the next batch
        self.landed: dict[int, frozenset[int]] = {}  # dead letters of an interrupted batch (`landed_dead_letters`)
        self.marks: dict[int, Watermarks] = {}  # the watermarks the last step saw
        self._reported: set[Expired] = set()
        self._partitions: tuple[float, list[int]] | None = None  # (looked up at, partitions)
        self._targets: dict[tuple, tuple[tuple, TableTarget]] = {}
        self.schema = StreamSchema(settings, state, stream, member=member)
        self._format = format_of(stream)
        self._keyed = Keyed(stream.key, tombstones_delete=not stream.cdc) if stream.upserts else None

    @property
    def kafka(self) -> KafkaClient:
        if self._kafka is None:
            self._kafka = KafkaClient(self.stream.kafka, group=self.stream.group, timeout=10.0)
        return self._kafka

    def close(self) -> None:
        if self._kafka is not None and self._owns_kafka:
            self._kafka.close()
            self._kafka = None

    def reset(self) -> None:
        """Forget what the tables held: after a failure the next batch reads it again."""
        self.committed = None
        self._partitions = None

    def positions(self) -> dict[int, int]:
        """Where each partition is read from next."""
        if self.committed is None:
            self._load()
        return self.committed.read_from(self.stream.start_positions)

    def _load(self) -> None:
        target = self.schema.prepared(self.catalog.table(self.stream.table))
        dead_letter = self.catalog.table(self.stream.dead_letter_table)
        self.tables = StreamTables(target, dead_letter,
                                   index_for(self.settings.home, self.stream, target) if self.stream.upserts else None)
        self.committed = Committed(committed_offsets(target, self.stream.id),
                                   committed_offsets(dead_letter, self.stream.id))
        self.landed = landed_dead_letters(dead_letter, self.committed.replayed(self.stream.start_positions),
                                          self.stream.created_at)

    def watermarks(self, fresh: bool = False) -> dict[int, Watermarks]:
        """The topic's partitions' watermarks; `fresh`: asked after this call (a one-off run's goal)."""
        if self.poller is not None:
            self.marks = self.poller.watermarks(self.stream.topic, fresh)
            return self.marks
        # The topic's partitions are looked up again every PARTITIONS_TTL, not every poll:
        # partitions are rarely added, and a metadata request per poll and stream adds up.
        if self._partitions is None or time.monotonic() - self._partitions[0] > PARTITIONS_TTL:
            self._partitions = (time.monotonic(), self.kafka.partitions(self.stream.topic))
        self.marks = self.kafka.watermarks(self.stream.topic, self._partitions[1])
        return self.marks

    def lag(self) -> int:
        return lag(self.positions(), self.marks)

    def caught_up(self, goal: dict[int, int]) -> bool:
        return caught_up(self.positions(), self.marks, goal)

    def step(self) -> BatchOutcome:
        with warehouse_io(self.settings, f"write stream {self.stream.name}'s tables"):
            return self._step()

    def _step(self) -> BatchOutcome:
        prepared = self.prepare()
        if prepared is None:
            return BatchOutcome(0, 0, 0, 0, False)
        return self.finish(prepared, self._run(prepared.tasks))

    def prepare(self) -> Prepared | None:
        """The next batch planned, its tasks cut, the target's schema as the catalog has it now; None: nothing
        to read. Run its tasks (`spec()`: alone or in a job with other batches), then `finish` it."""
        started, started_at = time.monotonic(), now()
        plan = plan_batch(self.positions(), self.watermarks(), self.settings.engine.max_batch_messages)
        self._report_expired(plan.expired)
        if not plan.pieces:
            return None
        # Another client may have changed the table's schema: this batch follows it.
        self.tables.target = self.catalog.current(self.tables.target)
        return Prepared(plan, plan_tasks(plan.pieces, self._parallelism(), split=not self.stream.upserts), started,
                        started_at)

    def finish(self, prepared: Prepared, result: BatchResult) -> BatchOutcome:
        """A batch whose tasks ran: schema changes first (their tasks run again), then the commit."""
        plan, started, started_at = prepared.plan, prepared.started, prepared.started_at
        for _ in range(MAX_EVOLUTIONS):
            if not result.evolution:
                break
            # The messages need the table to change first: the schema update commits before
            # the data, and only the tasks that asked for it run again.
            self.tables.target = self.schema.evolve(self.tables.target, result.evolution)
            failpoint("after_schema_commit")
            result = result.replaced(self._run([r.read for r in result.tasks if r.evolution]))
        if result.evolution:
            raise SchemaError(f"stream {self.stream.name}: the batch still asks for schema changes after "
                              f"{MAX_EVOLUTIONS} of them; it will be read again")
        failpoint("before_commit")
        offsets, read_errors = advance(plan.start, result.pieces)
        committing = time.monotonic()
        self.committed, snapshots = commit_batch(self.settings, self.stream, self.tables, self.committed, offsets,
                                                 result)
        self.landed = {p: kept for p, kept in ((p, frozenset(o for o in landed if o >= offsets.get(p, 0)))
                                                for p, landed in self.landed.items()) if kept}
        if result.truncated is not None:
            p, o = result.truncated
            self.state.add_event(EventKind.TABLE_TRUNCATED, f"a truncate event (partition {p}, offset {o}) emptied "
                                 f"{self.stream.table}: the rows committed before it are deleted", self.stream.name,
                                 EventLevel.WARNING)
        if read_errors:
            self.state.add_event(EventKind.PARTIAL_BATCH, "committed what was read; " + "; ".join(map(str, read_errors)),
                                 self.stream.name, EventLevel.WARNING)
        self.schema.report(result.changes, result.schemas)
        outcome = BatchOutcome(int(result.total("messages")), int(result.total("rows")),
                               int(result.total("dead_letter_rows")), self.lag(), True, result.newest_timestamp)
        self._record(outcome, result, snapshots, offsets, started_at, time.monotonic() - started,
                     commit_seconds=time.monotonic() - committing)
        return outcome

    def _run(self, tasks: list[list]) -> BatchResult:
        spec = self.spec()
        return self.jobs.run(spec, tasks) if self.jobs else run_batch(self.spark, spec, tasks)

    def _parallelism(self) -> int:
        return session_cores(self.spark)

    def _target(self, table) -> TableTarget:
        """What tasks need to write `table`'s files: the same while its schema, spec and properties are."""
        meta = table.metadata
        key = (meta.location, meta.current_schema_id, meta.default_spec_id, tuple(sorted(meta.properties.items())))
        found = self._targets.get(table.name())
        if found is None or found[0] != key:
            found = self._targets[table.name()] = (key, TableTarget.of(table))
        return found[1]

    def spec(self) -> BatchSpec:
        stream, engine = self.stream, self.settings.engine
        return BatchSpec(
            stream=stream.name, stream_id=stream.id, topic=stream.topic, kafka=stream.kafka, group=stream.group,
            mapping=self.schema.mapping(self.tables.target),
            target=self._target(self.tables.target), dead_letter=self._target(self.tables.dead_letter),
            landed=self.landed,
            max_message_bytes=engine.max_message_bytes, fetch_timeout=engine.fetch_timeout,
            fmt=self._format, evolve=stream.evolves, keyed=self._keyed,
        )

    def _report_expired(self, expired: list[Expired]) -> None:
        for gap in expired:
            if gap not in self._reported:  # once: with nothing to read, nothing commits the skip
                self._reported.add(gap)
                # Before the commit that skips it, so that an audit never takes the skip for a loss.
                self.state.note_expired(self.stream.id, gap.partition, gap.first, gap.low)
                self.state.add_event(EventKind.DATA_EXPIRED, gap.describe(), self.stream.name, EventLevel.WARNING)

    def _record(self, outcome: BatchOutcome, result: BatchResult, snapshots: Snapshots, offsets: dict[int, int],
                started_at: str, seconds: float, route_tables: int | None = None,
                table_rows: dict[str, int] | None = None, commit_seconds: float | None = None) -> None:
        """The batch's record; `table_rows`: the rows each table took (a routed batch's), else the target's."""
        table_rows = table_rows if table_rows is not None else {self.stream.table: outcome.rows}
        self.state.record_batch(BatchRecord(
            stream=self.stream.name, started_at=started_at, committed_at=now(), duration_ms=int(seconds * 1000),
            messages=outcome.messages, rows=outcome.rows, dead_letter_rows=outcome.dead_letter_rows,
            bytes=int(result.total("bytes")), target_snapshot_id=snapshots.target,
            dead_letter_snapshot_id=snapshots.dead_letter, offsets=offsets_json(offsets), lag=outcome.lag,
            newest_kafka_ts=result.newest_timestamp, median_kafka_ts=result.median_timestamp,
            throttle_ms=result.throttle_ms, route_tables=route_tables,
            table_rows=json.dumps(table_rows, sort_keys=True),
        ))
        if log.isEnabledFor(logging.DEBUG):  # 50 a second with 200 trickles: the engine sums them up once a minute
            log.debug(
                "%s: batch of %d messages (%d rows, %d dead letters) in %.2fs; read %.2fs decode %.2fs write %.2fs%s",
                self.stream.name, outcome.messages, outcome.rows, outcome.dead_letter_rows, seconds,
                result.total("read_seconds"), result.total("decode_seconds"), result.total("write_seconds"),
                "" if commit_seconds is None else f"; commit {commit_seconds:.2f}s",
            )
