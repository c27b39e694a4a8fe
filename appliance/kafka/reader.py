"""Reading offset ranges of Kafka partitions, inside Spark tasks (or the engine's process, for a small job).

Consumers are kept per Python worker and reused across tasks, because creating
one costs a broker round trip while Spark reuses its workers between batches (the engine keeps its own,
closed when it stops).
A piece that cannot be read to its end says why with a typed, picklable error,
so the engine can tell a timeout from an unreachable broker or a refused login.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass

from confluent_kafka import Consumer, KafkaError, TopicPartition

from appliance.core.errors import FloeError, ReadTimeout
from appliance.kafka.errors import kafka_error
from appliance.kafka.logs import KAFKA_LOG
from appliance.kafka.records import RawBatch
from appliance.kafka.settings import KafkaSettings

# Each cluster's consumer, with the options (secret references resolved) it was made with.
Consumers = dict[KafkaSettings, tuple[dict[str, str], Consumer]]
_CONSUMERS: Consumers = {}  # a Python worker's
_THROTTLED: dict[KafkaSettings, int] = {}  # the longest throttle a cluster's brokers reported, ms

# In a Spark worker nobody configures logging: without a handler, librdkafka's
# reconnect chatter would reach the terminal. Read errors travel in task results.
KAFKA_LOG.addHandler(logging.NullHandler())


@dataclass(frozen=True)
class Piece:
    """Offsets [start, end) of one partition for one task to read."""

    partition: int
    start: int
    end: int

    @property
    def size(self) -> int:
        return self.end - self.start


@dataclass
class PieceResult:
    partition: int
    start: int
    next_offset: int  # the first offset not read: resume here
    error: FloeError | None = None


READER_GROUP = "floe.reader"  # a label for the broker's logs: offsets are assigned, never committed


def _consumer(settings: KafkaSettings, consumers: Consumers) -> Consumer:
    # Secret references are resolved here, in the task, at each read: the worker's environment and
    # files, never values shipped with the task; a rotated secret gets a consumer of its own.
    resolved = settings.resolved_options()
    kept = consumers.get(settings)
    if kept is not None and kept[0] == resolved:
        return kept[1]
    if kept is not None:
        del consumers[settings]
        kept[1].close()

    def throttled(event) -> None:  # a broker's quota slowed the fetches: an alert rule looks at it
        _THROTTLED[settings] = max(_THROTTLED.get(settings, 0), int(event.throttle_time * 1000))

    consumer = Consumer(settings.consumer_config(
        READER_GROUP, logger=KAFKA_LOG, resolved=resolved, throttle_cb=throttled,
        **{"fetch.wait.max.ms": 50, "queued.max.messages.kbytes": 32768, "max.partition.fetch.bytes": 4194304},
    ))
    consumers[settings] = (resolved, consumer)
    return consumer


def close_consumers(consumers: Consumers) -> None:
    """Close the consumers a caller kept (`read_topics`' `consumers`): a process that outlives its reads (the
    engine's) leaves no connection behind to reconnect to a broker gone since."""
    while consumers:
        _, (_, consumer) = consumers.popitem()
        consumer.close()


@dataclass
class _Range:
    """One piece being read: where it stands, and where its messages go."""

    piece: Piece
    result: PieceResult
    raw: RawBatch
    progress_at: float


def read_topics(settings: KafkaSettings, reads: list[tuple[str, list[Piece]]], fetch_timeout: float,
                consumer: Consumer | None = None, consumers: Consumers | None = None
                ) -> list[tuple[RawBatch, list[PieceResult]]]:
    """The messages of each (topic, pieces) of one cluster, read with one consumer and one assignment.

    Several streams' small batches in one task cost one fetch round trip, not one per
    partition and stream. Two reads of the same topic (two streams of one topic) are read
    one after the other. `consumer`: one of the caller's (a sample's), instead of the worker's own;
    `consumers`: where the caller keeps one per cluster (the engine's, for the jobs it runs itself), instead of
    the worker's.
    """
    out: list[tuple[RawBatch, list[PieceResult]] | None] = [None] * len(reads)
    pending = list(range(len(reads)))
    while pending:
        topics: set[str] = set()
        now = [i for i in pending if not (reads[i][0] in topics or topics.add(reads[i][0]))]
        pending = [i for i in pending if i not in now]
        reader = consumer or _consumer(settings, _CONSUMERS if consumers is None else consumers)
        for i, done in zip(now, _read_round(reader, settings, [reads[i] for i in now], fetch_timeout)):
            out[i] = done
    return out


def _read_round(consumer: Consumer, settings: KafkaSettings, reads: list[tuple[str, list[Piece]]],
                fetch_timeout: float) -> list[tuple[RawBatch, list[PieceResult]]]:
    started = time.monotonic()
    queues: dict[tuple[str, int], list[_Range]] = {}
    out: list[tuple[RawBatch, list[PieceResult]]] = []
    for topic, pieces in reads:
        raw, results = RawBatch(), []
        for piece in pieces:
            result = PieceResult(piece.partition, piece.start, piece.start)
            results.append(result)
            if piece.size > 0:
                queues.setdefault((topic, piece.partition), []).append(_Range(piece, result, raw, started))
        out.append((raw, results))
    for queue in queues.values():
        queue.sort(key=lambda r: r.piece.start)
    try:
        if queues:
            consumer.assign([TopicPartition(t, p, q[0].piece.start) for (t, p), q in queues.items()])
            _consume(consumer, settings, queues, fetch_timeout)
    finally:
        consumer.unassign()  # stop prefetching for partitions this worker may not get next time
    throttle = _THROTTLED.pop(settings, 0)
    for raw, _ in out:
        raw.throttle_ms = throttle
    return out


def _consume(consumer: Consumer, settings: KafkaSettings, queues: dict[tuple[str, int], list[_Range]],
             fetch_timeout: float) -> None:
    while queues:
        batch = consumer.consume(min(10000, sum(q[0].piece.end - q[0].result.next_offset for q in queues.values())),
                                 timeout=0.5)
        now = time.monotonic()
        if not batch:
            _check_positions(consumer, queues, fetch_timeout, now)
            continue
        for msg in batch:
            err = msg.error()
            if err is not None:
                if err.code() != KafkaError._PARTITION_EOF:
                    _fail(consumer, queues, kafka_error(err, settings, f"partition {msg.partition()}"),
                          (msg.topic(), msg.partition()))
                continue
            key = (msg.topic(), msg.partition())
            queue = queues.get(key)
            if not queue:
                continue  # a partition already read to its end, still prefetched
            current = queue[0]
            offset = msg.offset()
            if offset < current.result.next_offset or offset >= current.piece.end:
                continue  # prefetched beyond the piece, or a stale record after a seek
            raw = current.raw
            raw.partitions.append(key[1])
            raw.offsets.append(offset)
            ts_type, ts = msg.timestamp()
            raw.timestamps.append(ts if ts_type else None)
            raw.keys.append(msg.key())
            raw.values.append(msg.value())
            raw.headers.append(msg.headers())
            current.result.next_offset = offset + 1
            current.progress_at = now
            if offset + 1 >= current.piece.end:
                _next_range(consumer, queues, key)


def _check_positions(consumer: Consumer, queues: dict[tuple[str, int], list[_Range]], fetch_timeout: float,
                     now: float) -> None:
    """Ranges that nothing more arrives for: read to their end past a gap, or timed out."""
    keys = list(queues)
    positions = consumer.position([TopicPartition(t, p) for t, p in keys])
    for key, position in zip(keys, positions):
        current = queues[key][0]
        # Transaction markers and compacted-away records leave gaps: the position, not
        # the last offset seen, says how far the log was read.
        if position.offset >= current.piece.end:
            current.result.next_offset = current.piece.end
            _next_range(consumer, queues, key)
        elif now - current.progress_at > fetch_timeout:
            current.result.error = ReadTimeout(f"partition {key[1]}: no message at offset "
                                               f"{current.result.next_offset} within {fetch_timeout:.0f}s")
            _drop(consumer, queues, key)


def _next_range(consumer: Consumer, queues: dict[tuple[str, int], list[_Range]], key: tuple[str, int]) -> None:
    queue = queues[key]
    queue.pop(0)
    if not queue:
        _drop(consumer, queues, key)
        return
    queue[0].progress_at = time.monotonic()
    consumer.seek(TopicPartition(key[0], key[1], queue[0].piece.start))


def _drop(consumer: Consumer, queues: dict[tuple[str, int], list[_Range]], key: tuple[str, int]) -> None:
    """Stop reading a partition: later ranges of it are not read (they would leave a gap)."""
    del queues[key]
    consumer.incremental_unassign([TopicPartition(key[0], key[1])])


def _fail(consumer: Consumer, queues: dict[tuple[str, int], list[_Range]], error: FloeError,
          key: tuple[str | None, int]) -> None:
    """A read error: the partition's range stops there; an error of no partition stops them all."""
    for k in [key] if key in queues else list(queues):
        queues[k][0].result.error = error
        _drop(consumer, queues, k)
