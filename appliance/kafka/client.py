"""The driver's connection to a Kafka cluster: topics, partitions, watermarks and samples."""

from __future__ import annotations

from dataclasses import dataclass

from confluent_kafka import OFFSET_BEGINNING, OFFSET_END, Consumer, KafkaError, KafkaException, TopicPartition

from appliance.core.cache import Cache
from appliance.core.errors import FloeError, ReadTimeout, TopicNotFound
from appliance.kafka.errors import kafka_error
from appliance.kafka.logs import KAFKA_LOG
from appliance.kafka.reader import Piece, PieceResult, read_topics
from appliance.kafka.records import RawBatch
from appliance.kafka.settings import KafkaSettings


# Partitions asked in one request of `many_watermarks`: librdkafka's offsets_for_times costs the caller's thread
# time growing with the square of the partitions it is given (2.9 ms of CPU for 800, 0.1 ms for 100), so
# hundreds of streams' partitions go as several requests of this many.
WATERMARKS_AT_ONCE = 100
ASKING_KEPT = 8  # sets of partitions whose requests `many_watermarks` keeps built


@dataclass(frozen=True)
class Watermarks:
    low: int
    high: int


@dataclass(frozen=True)
class SampledMessage:
    partition: int
    offset: int
    timestamp_ms: int | None
    key: bytes | None
    value: bytes | None


class KafkaClient:
    """The driver's connection to one cluster: metadata, watermarks and samples."""

    def __init__(self, settings: KafkaSettings, group: str = "floe", timeout: float = 10.0) -> None:
        self.settings = settings
        self.group = group
        self.timeout = timeout
        self._resolved = settings.resolved_options()
        self._consumer = self._connect(self._resolved)
        # The requests of the last few sets `many_watermarks` was asked: a poller asks the same partitions four
        # times a second, and building hundreds of TopicPartitions each time was a fifth of its cost. A few, not
        # the last: between two polls of every topic a poller asks for those of the streams not lingering.
        # (partitions -> their requests WATERMARKS_AT_ONCE at a time, all of them in one)
        self._asking: Cache[tuple, tuple[list[dict], list[dict]]] = Cache(ASKING_KEPT)

    def _connect(self, resolved: dict[str, str]) -> Consumer:
        try:
            return Consumer(self.settings.consumer_config(self.group, logger=KAFKA_LOG, resolved=resolved))
        except (KafkaException, ValueError, TypeError) as exc:
            raise kafka_error(exc, self.settings, "kafka client") from None

    def _fresh(self) -> None:
        """Secret references resolved again at each use: a rotated secret (a file rewritten, say)
        reconnects with its new value; one that no longer resolves fails the use, naming it."""
        if not self.settings.has_references:
            return
        resolved = self.settings.resolved_options()
        if resolved != self._resolved:
            consumer = self._connect(resolved)
            self._consumer.close()
            self._consumer, self._resolved = consumer, resolved

    def close(self) -> None:
        self._consumer.close()

    def __enter__(self) -> KafkaClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def topics(self) -> list[str]:
        self._fresh()
        try:
            meta = self._consumer.list_topics(timeout=self.timeout)
        except KafkaException as exc:
            raise kafka_error(exc, self.settings, "listing topics") from None
        return sorted(t for t in meta.topics if not t.startswith("__"))

    def partitions(self, topic: str) -> list[int]:
        self._fresh()
        try:
            meta = self._consumer.list_topics(topic, timeout=self.timeout)
        except KafkaException as exc:
            raise kafka_error(exc, self.settings, f"topic {topic!r}") from None
        found = self._partitions_of(topic, meta.topics.get(topic))
        if isinstance(found, FloeError):
            raise found
        return found

    def partitions_of(self, topics: list[str]) -> dict[str, list[int] | FloeError]:
        """Each topic's partitions from one metadata request for the whole cluster; a topic's error in its place."""
        self._fresh()
        try:
            meta = self._consumer.list_topics(timeout=self.timeout)
        except KafkaException as exc:
            raise kafka_error(exc, self.settings, "listing topics") from None
        return {topic: self._partitions_of(topic, meta.topics.get(topic)) for topic in topics}

    def _partitions_of(self, topic: str, info) -> list[int] | FloeError:
        if info is None or info.error is not None and info.error.code() == KafkaError.UNKNOWN_TOPIC_OR_PART:
            return TopicNotFound(f"topic {topic!r} not found on {self.settings.bootstrap}")
        if info.error is not None:
            return kafka_error(info.error, self.settings, f"topic {topic!r}")
        if not info.partitions:
            return TopicNotFound(f"topic {topic!r} has no partitions on {self.settings.bootstrap}")
        return sorted(info.partitions)

    def watermarks(self, topic: str, partitions: list[int] | None = None) -> dict[int, Watermarks]:
        partitions = partitions if partitions is not None else self.partitions(topic)
        self._fresh()
        out = {}
        for p in partitions:
            try:
                low, high = self._consumer.get_watermark_offsets(
                    TopicPartition(topic, p), timeout=self.timeout, cached=False
                )
            except KafkaException as exc:
                raise kafka_error(exc, self.settings, f"topic {topic!r} partition {p}") from None
            out[p] = Watermarks(low, high)
        return out

    def many_watermarks(self, partitions: list[tuple[str, int]]) -> dict[tuple[str, int], Watermarks | FloeError]:
        """The watermarks of many topics' partitions in two requests per broker and WATERMARKS_AT_ONCE partitions
        (the earliest and the latest offsets, asked as offsets for the special times -2 and -1), not two per
        partition; a partition's own error in its place, a failure of the whole request raised."""
        self._fresh()
        key = tuple(partitions)
        asking = self._asking.get(key)
        if asking is None:
            every = [partitions]
            chunks = [partitions[i:i + WATERMARKS_AT_ONCE] for i in range(0, len(partitions), WATERMARKS_AT_ONCE)]
            chunked, whole = [[{end: [TopicPartition(t, p, end) for t, p in chunk]
                                for end in (OFFSET_BEGINNING, OFFSET_END)} for chunk in lists]
                              for lists in (chunks, every)]
            asking = (chunked, whole)
            self._asking.put(key, asking)
        try:
            return self._watermarks_of(asking[0])
        except KafkaException as exc:
            if len(asking[0]) < 2:
                raise kafka_error(exc, self.settings, "watermarks") from None
        # A request fails whole when none of its partitions is known (a deleted topic's, alone in a request):
        # asked all in one, as a partition's own error.
        try:
            return self._watermarks_of(asking[1])
        except KafkaException as exc:
            raise kafka_error(exc, self.settings, "watermarks") from None

    def _watermarks_of(self, requests: list[dict[int, list[TopicPartition]]]
                       ) -> dict[tuple[str, int], Watermarks | FloeError]:
        out: dict[tuple[str, int], Watermarks | FloeError] = {}
        for request in requests:
            lows, highs = (self._consumer.offsets_for_times(request[end], timeout=self.timeout)
                           for end in (OFFSET_BEGINNING, OFFSET_END))
            for low, high in zip(lows, highs):
                error = low.error or high.error
                if error is not None:
                    out[low.topic, low.partition] = kafka_error(error, self.settings,
                                                                f"topic {low.topic!r} partition {low.partition}")
                else:
                    out[low.topic, low.partition] = Watermarks(low.offset, high.offset)
        return out

    def read(self, topic: str, pieces: list[Piece], timeout: float) -> tuple[RawBatch, list[PieceResult]]:
        """The messages of `pieces` as the engine reads them, with a consumer of the caller's; each
        piece says how far it got (`timeout`: at most this long without a message arriving)."""
        try:
            consumer = Consumer(self.settings.consumer_config("floe-sample", logger=KAFKA_LOG))
        except (KafkaException, ValueError, TypeError) as exc:
            raise kafka_error(exc, self.settings, "kafka client") from None
        try:
            [(raw, results)] = read_topics(self.settings, [(topic, pieces)], timeout, consumer=consumer)
            return raw, results
        except KafkaException as exc:
            raise kafka_error(exc, self.settings, f"reading {topic!r}") from None
        finally:
            consumer.close()

    def sample(self, topic: str, count: int, timeout: float) -> list[SampledMessage]:
        """Up to `count` of the newest messages, spread over the partitions, read as the engine
        reads (past transaction markers and compacted gaps); `timeout`: at most this long without
        a message arriving."""
        marks = self.watermarks(topic)
        nonempty = {p: w for p, w in marks.items() if w.high > w.low}
        if not nonempty:
            return []
        per_partition = max(1, count // len(nonempty))
        pieces = [Piece(p, max(w.low, w.high - per_partition), w.high) for p, w in sorted(nonempty.items())]
        raw, results = self.read(topic, pieces, timeout)
        errors = [r.error for r in results if r.error is not None]
        if errors and (not len(raw) or not isinstance(errors[0], ReadTimeout)):
            raise errors[0]  # nothing came, or not for want of time (a refused login, say)
        return sorted((SampledMessage(p, o, ts, k, v) for p, o, ts, k, v in zip(
            raw.partitions, raw.offsets, raw.timestamps, raw.keys, raw.values)), key=lambda m: (m.partition, m.offset))
