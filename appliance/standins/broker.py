"""An embedded Kafka-protocol broker on loopback, for the demo and for trying Floe.

It is librdkafka's mock cluster, hosted by this process: other processes reach it
over TCP like any broker. It keeps messages in memory only (about the newest
5 MiB of each partition) and gives auto-created topics 4 partitions.
"""

from __future__ import annotations

from confluent_kafka import Producer


class EmbeddedBroker:
    def __init__(self) -> None:
        self._host = Producer({"test.mock.num.brokers": 1, "bootstrap.servers": "unused", "log_level": 2})
        brokers = self._host.list_topics(timeout=10).brokers
        broker = next(iter(brokers.values()))
        self.bootstrap = f"{broker.host}:{broker.port}"

    def producer(self, **config: object) -> Producer:
        return Producer({"bootstrap.servers": self.bootstrap, "linger.ms": 20, "log_level": 2, **config})

    def close(self) -> None:
        self._host.flush(1)
