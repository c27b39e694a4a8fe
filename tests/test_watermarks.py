"""One watermark poller per cluster: many topics' watermarks in one round of requests, streams woken when
their topic moves, a topic's failure its own (issue 32). No Spark."""

from __future__ import annotations

import threading
import time
import uuid

import pytest
from confluent_kafka import Consumer, TopicPartition

from appliance.core.errors import BrokerUnreachable, TopicNotFound
from appliance.ingest.jobs import next_tick
from appliance.ingest.watermarks import ClusterPoller, WatermarkPollers, tick_ahead
from appliance.kafka import client as client_module
from appliance.kafka.client import KafkaClient, Watermarks
from appliance.kafka.settings import KafkaSettings

from conftest import wait_for


def topics(n: int) -> list[str]:
    tag = uuid.uuid4().hex[:8]
    return [f"wm_{tag}_{i}" for i in range(n)]


@pytest.mark.parametrize("at_once", [100, 5, 1])  # partitions a request: one, several, each alone
def test_many_watermarks_match_the_per_partition_requests(broker, monkeypatch, at_once):
    monkeypatch.setattr(client_module, "WATERMARKS_AT_ONCE", at_once)
    names = topics(3)
    for i, name in enumerate(names):
        broker.produce(name, [b"{}"] * (5 + i), partition=0)
        broker.produce(name, [b"{}"] * i, partition=2)
    kafka = KafkaSettings.create(broker.bootstrap)
    with KafkaClient(kafka) as client:
        asked = [(n, p) for n in names for p in range(4)] + [("wm_missing", 0)]
        found = client.many_watermarks(asked)
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "t", "log_level": 0})
    try:
        for name in names:
            for p in range(4):
                low, high = consumer.get_watermark_offsets(TopicPartition(name, p), timeout=10, cached=False)
                assert found[name, p] == Watermarks(low, high)
    finally:
        consumer.close()
    assert isinstance(found["wm_missing", 0], TopicNotFound)
    with KafkaClient(kafka) as client:  # the same requests sent again (built once): what is new each time
        before = client.many_watermarks(asked)
        requests = client._asking.get(tuple(asked))
        assert requests is not None
        assert client.many_watermarks(asked[:3]) == {k: before[k] for k in asked[:3]}  # another set between
        broker.produce(names[0], [b"{}"], partition=1)
        after = client.many_watermarks(list(asked))
        assert client._asking.get(tuple(asked)) is requests  # kept through the other set
    assert (before[names[0], 1], after[names[0], 1]) == (Watermarks(0, 0), Watermarks(0, 1))
    assert {k: v for k, v in after.items() if k != (names[0], 1) and k[0] != "wm_missing"} == \
           {k: v for k, v in before.items() if k != (names[0], 1) and k[0] != "wm_missing"}


def test_one_poll_serves_every_topic_and_wakes_the_streams_whose_topic_moved(broker):
    names = topics(30)
    for name in names:
        broker.produce(name, [b"{}"], partition=0)
    stopping = threading.Event()
    poller = ClusterPoller(KafkaSettings.create(broker.bootstrap), 0.25, stopping)
    moved = {name: threading.Event() for name in names}
    for name in names:
        poller.subscribe(name, moved[name])
    poller.start()
    try:
        assert poller.watermarks(names[0], fresh=True)[0] == Watermarks(0, 1)
        rounds = poller.requests
        marks = [poller.watermarks(name) for name in names]  # what the last poll saw: no request of their own
        assert poller.requests <= rounds + 1
        assert all(m[0].high == 1 for m in marks)
        for event in moved.values():
            event.clear()
        broker.produce(names[7], [b"{}"] * 3, partition=0)
        wait_for(moved[names[7]].is_set, 10, what="the moved topic's stream woken")
        assert poller.watermarks(names[7], fresh=True)[0] == Watermarks(0, 4)
        assert not any(moved[n].is_set() for n in names if n != names[7])
        # A missing topic fails its own streams alone.
        poller.subscribe("wm_missing_topic", threading.Event())
        with pytest.raises(TopicNotFound):
            poller.watermarks("wm_missing_topic", fresh=True)
        assert poller.watermarks(names[1], fresh=True)[0].high == 1
    finally:
        stopping.set()
        poller.close()


def test_a_lingering_trickle_is_woken_only_once_enough_messages_wait(broker):
    [name, other] = topics(2)
    broker.produce(name, [b"{}"] * 2, partition=0)
    broker.produce(name, [b"{}"], partition=1)
    stopping = threading.Event()
    poller = ClusterPoller(KafkaSettings.create(broker.bootstrap), 0.05, stopping)
    moved, woken = threading.Event(), threading.Event()
    poller.subscribe(name, moved)
    poller.subscribe(name, woken)  # another stream of the topic, not lingering
    poller.subscribe(other, threading.Event())
    poller.start()
    try:
        poller.watermarks(name, fresh=True)
        moved.set()
        poller.hold(name, moved, {0: 2, 1: 1}, limit=5)  # nothing waits: cleared, and stays so
        assert not moved.is_set()
        for sent in range(1, 5):  # 1, 2, 3, 4 messages waiting: under the limit
            woken.clear()
            broker.produce(name, [b"{}"], partition=sent % 2)
            wait_for(woken.is_set, 10, what="the other stream woken")
            poller.watermarks(name, fresh=True)
            assert not moved.is_set(), sent
        broker.produce(name, [b"{}"], partition=0)  # five wait
        wait_for(moved.is_set, 10, what="the lingering stream woken")
        poller.release(moved)
        moved.clear()
        poller.hold(name, moved, {0: 0, 1: 0}, limit=5)  # enough waits already: woken at once
        assert moved.is_set()
        poller.release(moved)
        moved.clear()
        broker.produce(name, [b"{}"], partition=1)  # released: every move wakes it again
        wait_for(moved.is_set, 10, what="the released stream woken")
    finally:
        stopping.set()
        poller.close()


def test_a_cluster_down_fails_its_streams_with_the_broker_unreachable():
    stopping = threading.Event()
    pollers = WatermarkPollers(0.25, stopping)
    kafka = KafkaSettings.create("127.0.0.1:1", {"socket.connection.setup.timeout.ms": "1000"})
    poller = pollers.of(kafka)
    poller.timeout = 2.0
    assert pollers.of(kafka) is poller  # one per cluster
    moved = threading.Event()
    poller.subscribe("any", moved)
    try:
        with pytest.raises(BrokerUnreachable):
            poller.watermarks("any", fresh=True)
    finally:
        stopping.set()
        pollers.close()


def test_a_quiet_cluster_is_polled_less_often_and_at_once_again_when_a_topic_moves(broker):
    from appliance.ingest.watermarks import QUIET_INTERVAL

    names = topics(3)
    for name in names:
        broker.produce(name, [b"{}"], partition=0)
    stopping, moved = threading.Event(), threading.Event()
    poller = ClusterPoller(KafkaSettings.create(broker.bootstrap), 0.05, stopping)
    for name in names:
        poller.subscribe(name, moved)
    poller.start()
    try:
        wait_for(lambda: poller.current_interval == QUIET_INTERVAL, 10, what="the quiet cluster's longest interval")
        quiet_since = poller.requests
        moved.clear()
        broker.produce(names[1], [b"{}"], partition=0)
        wait_for(moved.is_set, QUIET_INTERVAL + 5, what="the moved topic's stream woken")
        assert poller.requests - quiet_since <= 3, "a quiet cluster is asked about once a second, not 20 times"
        wait_for(lambda: poller.current_interval == 0.05, 5, what="the poller at its own interval again")
        assert poller.watermarks(names[1])[0].high == 2
    finally:
        stopping.set()
        poller.close()


def test_a_topic_whose_streams_all_linger_is_asked_only_before_each_tick_of_the_commit_grid(broker):
    """Lingering trickles plan at the grid's ticks: their topics are asked at the last poll before each tick, with
    the watermarks as fresh then as at every poll; a topic with a stream that waits on every poll, at every poll."""
    held, busy = topics(2)
    broker.produce(held, [b"{}"], partition=0)
    broker.produce(busy, [b"{}"], partition=0)
    stopping, lingering, waiting = threading.Event(), threading.Event(), threading.Event()
    poller = ClusterPoller(KafkaSettings.create(broker.bootstrap), 0.05, stopping, grid=1.0)
    poller.subscribe(held, lingering)
    poller.subscribe(busy, waiting)
    poller.start()
    try:
        poller.watermarks(held, fresh=True)
        poller.hold(held, lingering, {0: 1}, limit=1000)
        start = dict(poller.asked)

        def busy_topic_moves():  # or the quiet cluster's longer interval asks every topic at every poll
            broker.produce(busy, [b"{}"], partition=0)
            return poller.asked[busy] - start[busy] >= 50

        wait_for(busy_topic_moves, 30, 0.02, "fifty polls")
        ticks = poller.asked[held] - start[held]
        assert 1 <= ticks <= 8, f"asked {ticks} times in fifty polls (~3 ticks of the grid, at most two polls each)"
        broker.produce(held, [b"{}"] * 3, partition=0)
        wait_for(lambda: poller.watermarks(held)[0].high == 4, 3, 0.02, "the lingering topic's new watermark")
        before = poller.asked[held]
        assert poller.watermarks(held, fresh=True)[0].high == 4  # a fresh question asks every topic
        assert poller.asked[held] > before
        poller.release(lingering)
        since = poller.asked[held]
        wait_for(lambda: poller.asked[held] - since >= 5, 5, 0.02, "the released topic at every poll")
    finally:
        stopping.set()
        poller.close()


def test_a_lingering_topic_is_asked_only_before_the_tick_its_stream_wakes_at(broker):
    """Trickles spread over their cycle's ticks: each topic is asked at the last poll before its own stream's tick,
    not before every tick; what arrives meanwhile, even past the stream's limit, waits for that tick."""
    soon, later, busy = topics(3)
    for name in (soon, later, busy):
        broker.produce(name, [b"{}"], partition=0)
    stopping = threading.Event()
    woken = {name: threading.Event() for name in (soon, later, busy)}
    poller = ClusterPoller(KafkaSettings.create(broker.bootstrap), 0.05, stopping, grid=1.0)
    for name, moved in woken.items():
        poller.subscribe(name, moved)
    poller.start()
    try:
        poller.watermarks(soon, fresh=True)
        due = next_tick(time.monotonic() + 1.5, 1.0)
        poller.hold(soon, woken[soon], {0: 1}, limit=1000, due=due)
        poller.hold(later, woken[later], {0: 1}, limit=3, due=due + 600)
        start = dict(poller.asked)
        broker.produce(later, [b"{}"] * 5, partition=0)  # past its limit: still not asked, not woken

        def past_due():  # the busy topic moving keeps every poll at the short interval
            broker.produce(busy, [b"{}"], partition=0)
            return time.monotonic() > due + 0.3

        wait_for(past_due, 10, 0.02, "the soon topic's tick")
        assert poller.asked[busy] - start[busy] >= 20
        assert poller.asked[soon] - start[soon] >= 1  # before its tick (and each one after, still held)
        assert poller.asked[later] == start[later]
        assert not woken[later].is_set()
        assert poller.watermarks(later, fresh=True)[0].high == 6  # a fresh question asks every topic
        assert woken[later].is_set()
    finally:
        stopping.set()
        poller.close()


@pytest.mark.parametrize("late", [0.0005, 0.01, 0.05, 0.1])
def test_every_tick_has_a_poll_before_it_that_asks_for_it_however_long_the_polls_take(late):
    """Polls begin `interval` after the last one ended (+ `late`: its time, a late wake): each tick of the grid still
    has a poll begun before it that asks for it, and at most two do."""
    interval, grid = 0.25, 1.0
    asked_for: dict[float, int] = {}
    at = 0.37
    while at < 300:
        tick = tick_ahead(at, grid, interval, late)
        if tick is not None:
            asked_for[tick] = asked_for.get(tick, 0) + 1
        at += interval + late
    ticks = [float(t) for t in range(1, 300)]
    assert [t for t in ticks if t not in asked_for] == [], "ticks no poll asked for"
    assert max(asked_for.values()) <= 2
