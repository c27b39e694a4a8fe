"""Reading offset ranges of Kafka partitions, inside Spark tasks.

Consumers are kept per Python worker and reused across tasks, because creating
one costs a broker round trip while Spark reuses its workers between batches.
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

_CONSUMERS: dict[tuple, Consumer] = {}

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


def _consumer(settings: KafkaSettings, group: str) -> Consumer:
    key = (settings, group)
    consumer = _CONSUMERS.get(key)
    if consumer is None:
        consumer = Consumer(settings.consumer_config(
            group, logger=KAFKA_LOG,
            **{"fetch.wait.max.ms": 50, "queued.max.messages.kbytes": 32768, "max.partition.fetch.bytes": 4194304},
        ))
        _CONSUMERS[key] = consumer
    return consumer


def read_pieces(
    settings: KafkaSettings, group: str, topic: str, pieces: list[Piece], fetch_timeout: float
) -> tuple[RawBatch, list[PieceResult]]:
    """Every message of `pieces`, or as much as the broker gave within `fetch_timeout`."""
    raw = RawBatch()
    consumer = _consumer(settings, group)
    results = [_read_piece(consumer, settings, topic, piece, fetch_timeout, raw) for piece in pieces]
    consumer.unassign()  # stop prefetching for partitions this worker may not get next time
    return raw, results


def _read_piece(consumer: Consumer, settings: KafkaSettings, topic: str, piece: Piece, fetch_timeout: float,
                raw: RawBatch) -> PieceResult:
    result = PieceResult(piece.partition, piece.start, piece.start)
    if piece.size <= 0:
        return result
    parts, offs, stamps, keys, values, headers = (
        raw.partitions, raw.offsets, raw.timestamps, raw.keys, raw.values, raw.headers
    )
    tp = TopicPartition(topic, piece.partition, piece.start)
    consumer.assign([tp])
    last_progress = time.monotonic()
    end, next_offset = piece.end, piece.start
    while next_offset < end and result.error is None:
        batch = consumer.consume(min(10000, end - next_offset), timeout=0.5)
        if not batch:
            # Transaction markers and compacted-away records leave gaps: the
            # position, not the last offset seen, says how far the log was read.
            if consumer.position([tp])[0].offset >= end:
                next_offset = end
            elif time.monotonic() - last_progress > fetch_timeout:
                result.error = ReadTimeout(
                    f"partition {piece.partition}: no message at offset {next_offset} within {fetch_timeout:.0f}s")
            continue
        for msg in batch:
            err = msg.error()
            if err is not None:
                if err.code() != KafkaError._PARTITION_EOF:
                    result.error = kafka_error(err, settings, f"partition {piece.partition}")
                continue
            offset = msg.offset()
            if offset < next_offset or offset >= end:
                continue  # prefetched beyond the piece, or a stale record after a reassign
            parts.append(piece.partition)
            offs.append(offset)
            ts_type, ts = msg.timestamp()
            stamps.append(ts if ts_type else None)
            keys.append(msg.key())
            values.append(msg.value())
            headers.append(msg.headers())
            next_offset = offset + 1
        last_progress = time.monotonic()
    result.next_offset = next_offset
    return result
