"""Kafka access with confluent-kafka: connection settings, metadata, watermarks, sampling.

Connection settings hide their secrets whenever they are printed; Kafka errors are
turned into Floe errors that say whether trying again can help.
"""

from __future__ import annotations

import logging
import re
import time
from dataclasses import dataclass, field
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition

from appliance.errors import BrokerUnreachable, FloeError, KafkaConfigError, TopicNotFound

SECRET_KEY = re.compile(r"(password|secret|token|credentials|private\.key|key\.pem)", re.IGNORECASE)
MASK = "***"

# librdkafka properties Floe sets itself; a user-supplied value would break exactly-once.
class _Once(logging.Filter):
    """librdkafka repeats a failing connection's error many times a second: log each once a minute."""

    def __init__(self) -> None:
        super().__init__()
        self._seen: dict[str, float] = {}

    def filter(self, record: logging.LogRecord) -> bool:
        # the text after librdkafka's "[thrd:...]" prefix, without its "(after N ms ...)" tail
        key = re.sub(r"\s*\(after \d+ms.*$", "", record.getMessage())
        now = time.monotonic()
        if now - self._seen.get(key, -1e9) < 60:
            return False
        if len(self._seen) > 1000:
            self._seen.clear()
        self._seen[key] = now
        return True


KAFKA_LOG = logging.getLogger("appliance.kafka")
KAFKA_LOG.addFilter(_Once())

OWNED = {"enable.auto.commit", "enable.auto.offset.store", "auto.offset.reset", "enable.partition.eof"}


def is_secret(key: str) -> bool:
    return bool(SECRET_KEY.search(key))


@dataclass(frozen=True)
class KafkaSettings:
    bootstrap: str
    options: tuple[tuple[str, str], ...] = field(default=(), repr=False)

    @classmethod
    def create(cls, bootstrap: str, options: dict[str, str] | None = None) -> KafkaSettings:
        bootstrap = (bootstrap or "").strip()
        if not bootstrap or not all(re.match(r"^[^\s:,]+:\d{1,5}$", b.strip()) for b in bootstrap.split(",")):
            raise KafkaConfigError(f"bootstrap servers {bootstrap!r} must be HOST:PORT[,HOST:PORT...]")
        options = dict(options or {})
        for key in options:
            if key in OWNED or key == "bootstrap.servers":
                raise KafkaConfigError(f"kafka option {key!r} is set by Floe and cannot be overridden")
        return cls(bootstrap, tuple(sorted(options.items())))

    def masked_options(self) -> dict[str, str]:
        return {k: (MASK if is_secret(k) else v) for k, v in self.options}

    def __repr__(self) -> str:
        return f"KafkaSettings(bootstrap={self.bootstrap!r}, options={self.masked_options()!r})"

    def scrub(self, text: str) -> str:
        """`text` with every secret value replaced, for errors and logs."""
        for key, value in self.options:
            if is_secret(key) and value:
                text = text.replace(value, MASK)
        return text

    def consumer_config(self, group: str, **extra: Any) -> dict[str, Any]:
        conf: dict[str, Any] = {
            "bootstrap.servers": self.bootstrap,
            "group.id": group,
            "enable.auto.commit": False,
            "enable.auto.offset.store": False,
            "enable.partition.eof": False,
            # An offset out of range is decided by the engine (it compares with the
            # watermarks), never silently by the client.
            "auto.offset.reset": "error",
            "socket.connection.setup.timeout.ms": 10000,
            # librdkafka's own log lines go to Floe's log, not to the terminal.
            "logger": KAFKA_LOG,
        }
        conf.update(dict(self.options))
        conf.update(extra)
        return conf


def kafka_error(exc: BaseException, settings: KafkaSettings, what: str) -> FloeError:
    """A Floe error for a confluent-kafka failure, secrets scrubbed."""
    err = exc.args[0] if isinstance(exc, KafkaException) and exc.args else None
    text = settings.scrub(err.str() if isinstance(err, KafkaError) else str(exc))
    if isinstance(exc, (ValueError, TypeError)) or "configuration property" in text.lower():
        return KafkaConfigError(f"kafka configuration: {text}")
    if isinstance(err, KafkaError) and err.code() == KafkaError.UNKNOWN_TOPIC_OR_PART:
        return TopicNotFound(f"{what}: topic not found on {settings.bootstrap}")
    if isinstance(err, KafkaError) and err.code() in (
        KafkaError.TOPIC_AUTHORIZATION_FAILED,
        KafkaError._AUTHENTICATION,
        KafkaError.SASL_AUTHENTICATION_FAILED,
        KafkaError._SSL,
    ):
        return KafkaConfigError(f"{what}: {text}")
    return BrokerUnreachable(f"{what}: broker {settings.bootstrap} unreachable: {text}")


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
        self.timeout = timeout
        try:
            self._consumer = Consumer(settings.consumer_config(group))
        except (KafkaException, ValueError, TypeError) as exc:
            raise kafka_error(exc, settings, "kafka client") from None

    def close(self) -> None:
        self._consumer.close()

    def __enter__(self) -> KafkaClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def topics(self) -> list[str]:
        try:
            meta = self._consumer.list_topics(timeout=self.timeout)
        except KafkaException as exc:
            raise kafka_error(exc, self.settings, "listing topics") from None
        return sorted(t for t in meta.topics if not t.startswith("__"))

    def partitions(self, topic: str) -> list[int]:
        try:
            meta = self._consumer.list_topics(topic, timeout=self.timeout)
        except KafkaException as exc:
            raise kafka_error(exc, self.settings, f"topic {topic!r}") from None
        info = meta.topics.get(topic)
        if info is None or info.error is not None and info.error.code() == KafkaError.UNKNOWN_TOPIC_OR_PART:
            raise TopicNotFound(f"topic {topic!r} not found on {self.settings.bootstrap}")
        if info.error is not None:
            raise kafka_error(KafkaException(info.error), self.settings, f"topic {topic!r}")
        if not info.partitions:
            raise TopicNotFound(f"topic {topic!r} has no partitions on {self.settings.bootstrap}")
        return sorted(info.partitions)

    def watermarks(self, topic: str, partitions: list[int] | None = None) -> dict[int, Watermarks]:
        partitions = partitions if partitions is not None else self.partitions(topic)
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

    def sample(self, topic: str, count: int, timeout: float) -> list[SampledMessage]:
        """Up to `count` of the newest messages, spread over the partitions."""
        marks = self.watermarks(topic)
        nonempty = {p: w for p, w in marks.items() if w.high > w.low}
        if not nonempty:
            return []
        per_partition = max(1, count // len(nonempty))
        wanted = {p: (max(w.low, w.high - per_partition), w.high) for p, w in nonempty.items()}
        consumer = Consumer(self.settings.consumer_config("floe-sample"))
        try:
            consumer.assign([TopicPartition(topic, p, start) for p, (start, _) in wanted.items()])
            out: list[SampledMessage] = []
            remaining = {p: end for p, (_, end) in wanted.items()}
            deadline = time.monotonic() + timeout
            while remaining and time.monotonic() < deadline:
                for msg in consumer.consume(1000, timeout=0.2):
                    if msg.error():
                        if msg.error().fatal() or msg.error().code() == KafkaError._AUTHENTICATION:
                            raise kafka_error(KafkaException(msg.error()), self.settings, f"reading {topic!r}")
                        continue
                    p, o = msg.partition(), msg.offset()
                    if p in remaining and o < remaining[p]:
                        ts_type, ts = msg.timestamp()
                        out.append(SampledMessage(p, o, ts if ts_type else None, msg.key(), msg.value()))
                        if o + 1 >= remaining[p]:
                            del remaining[p]
            if not out and remaining:
                raise BrokerUnreachable(f"no message could be read from {topic!r} within {timeout:.0f}s")
            return sorted(out, key=lambda m: (m.partition, m.offset))
        except KafkaException as exc:
            raise kafka_error(exc, self.settings, f"reading {topic!r}") from None
        finally:
            consumer.close()
