"""Reading offset ranges from a real broker, and read errors that keep their type through a Spark task."""

from __future__ import annotations

import time
import uuid

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from appliance.core.errors import KafkaConfigError, ReadTimeout, SparkTaskLost
from appliance.kafka.client import KafkaClient
from appliance.kafka.reader import Piece, read_topics
from appliance.kafka.settings import KafkaSettings
from appliance.spark.tasks import run_in_tasks


def high_watermark(bootstrap: str, topic: str, partition: int = 0) -> int:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "test-marks", "log_level": 0})
    try:
        return consumer.get_watermark_offsets(TopicPartition(topic, partition), timeout=10)[1]
    finally:
        consumer.close()


def transactional(bootstrap: str, topic: str, batches: list[tuple[list[bytes], bool]]) -> None:
    """Each batch in its own transaction, committed or aborted: every end leaves a marker in the log."""
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": f"tx-{topic}", "log_level": 0})
    producer.init_transactions(10)
    for values, commit in batches:
        producer.begin_transaction()
        for value in values:
            producer.produce(topic, value=value, partition=0)
        producer.flush(10)
        (producer.commit_transaction if commit else producer.abort_transaction)(10)


def test_a_piece_is_read_past_transaction_markers(broker, topic):
    # (The embedded broker does not index aborted transactions, so only commits are tried here.)
    transactional(broker.bootstrap, topic, [([b"a1", b"a2"], True), ([b"b1"], True)])
    high = high_watermark(broker.bootstrap, topic)
    assert high == 5  # a1 a2 marker b1 marker

    [(raw, [result])] = read_topics(KafkaSettings.create(broker.bootstrap), [(topic, [Piece(0, 0, high)])], 10.0)
    assert raw.values == [b"a1", b"a2", b"b1"] and raw.offsets == [0, 1, 3]
    assert result.next_offset == high and result.error is None  # not stuck on the marker at 4


def test_a_sample_of_a_transactional_topic_is_read_past_its_markers(broker, topic):
    """Sampling reads as the engine does: it returns at once, not after waiting out its timeout for
    an offset that is a transaction marker."""
    transactional(broker.bootstrap, topic, [([b"a1", b"a2"], True), ([b"b1"], True)])
    started = time.monotonic()
    with KafkaClient(KafkaSettings.create(broker.bootstrap)) as client:
        sampled = client.sample(topic, 10, timeout=60.0)
    assert [(m.offset, m.value) for m in sampled] == [(0, b"a1"), (1, b"a2"), (3, b"b1")]
    assert time.monotonic() - started < 30, "the sample waited for the marker at offset 4"


def test_a_piece_that_does_not_arrive_is_a_read_timeout(broker, topic):
    broker.produce(topic, [b"x"], partition=0)
    high = high_watermark(broker.bootstrap, topic)
    [(raw, [result])] = read_topics(KafkaSettings.create(broker.bootstrap), [(topic, [Piece(0, high, high + 5)])],
                                    fetch_timeout=1.0)
    assert len(raw) == 0 and result.next_offset == high
    assert isinstance(result.error, ReadTimeout) and result.error.retryable
    assert f"no message at offset {high}" in str(result.error)


@pytest.mark.parametrize("error", [ReadTimeout("partition 3: no message at offset 9 within 10s"),
                                   KafkaConfigError("kafka configuration: bad property")])
def test_an_error_in_a_spark_task_reaches_the_driver_as_itself(spark, error):
    def work(i: int) -> int:
        if i == 1:
            raise error
        return i

    with pytest.raises(type(error)) as raised:
        run_in_tasks(spark, work, 2)
    assert str(raised.value) == str(error) and raised.value.retryable == error.retryable
    assert run_in_tasks(spark, lambda i: i * 10, 3) == [0, 10, 20]


def test_a_task_whose_python_worker_dies_is_a_retryable_loss_and_the_session_goes_on(spark):
    import os

    def work(i: int) -> int:
        if i == 1:
            os._exit(3)  # the worker process dies under the task, as an OOM kill or a broken channel would
        return i

    with pytest.raises(SparkTaskLost) as raised:
        run_in_tasks(spark, work, 2)
    assert raised.value.retryable and "\n" not in str(raised.value)
    assert str(raised.value).startswith("a Spark task was lost, the batch runs again: ")
    assert run_in_tasks(spark, lambda i: i * 10, 3) == [0, 10, 20]


def test_one_read_serves_several_topics_the_same_topic_twice_and_ranges_apart(broker):
    from appliance.kafka.reader import read_topics

    a, b = f"ra_{uuid.uuid4().hex[:8]}", f"rb_{uuid.uuid4().hex[:8]}"
    broker.produce(a, [f"a{i}".encode() for i in range(10)], partition=0)
    broker.produce(b, [f"b{i}".encode() for i in range(6)], partition=1)
    kafka = KafkaSettings.create(broker.bootstrap)
    done = read_topics(kafka, [
        (a, [Piece(0, 0, 3), Piece(0, 5, 8)]),  # two ranges of one partition, a gap between them
        (b, [Piece(1, 2, 6)]),
        (a, [Piece(0, 8, 10)]),  # a second stream of the same topic, in the same task
    ], fetch_timeout=10.0)
    (raw_a, res_a), (raw_b, res_b), (raw_a2, res_a2) = done
    assert raw_a.values == [b"a0", b"a1", b"a2", b"a5", b"a6", b"a7"] and raw_a.offsets == [0, 1, 2, 5, 6, 7]
    assert [(r.start, r.next_offset, r.error) for r in res_a] == [(0, 3, None), (5, 8, None)]
    assert raw_b.values == [b"b2", b"b3", b"b4", b"b5"] and raw_b.partitions == [1] * 4
    assert raw_a2.values == [b"a8", b"a9"] and res_a2[0].next_offset == 10
