"""Windowed alerts over many streams: every stream's batches summed in one query a round, the readings the same
as one query per stream gave, and the cost of a round not growing with the streams. Fast, on a real state DB."""

from __future__ import annotations

import datetime as dt

import pytest

from appliance.config.alerts import make_alert
from appliance.config.settings import load_settings
from appliance.core.clock import utcnow
from appliance.kafka.settings import KafkaSettings
from appliance.model.mapping import Column, Mapping
from appliance.model.stream import StreamDef
from appliance.observe.alerts import Alerter
from appliance.state.records import BatchRecord
from appliance.state.store import StateStore

HOOK = ("json://h/x",)


def add_streams(state: StateStore, count: int, start: int = 0) -> list[str]:
    names = [f"s{i:03d}" for i in range(start, start + count)]
    for name in names:
        state.add_stream(StreamDef(name=name, id=name, topic=name, kafka=KafkaSettings.create("h:9092"),
                                   format="json", table=f"ns.{name}", dead_letter_table=f"ns.{name}_dlq",
                                   mapping=Mapping((Column("id", "long", ("id",)),)), starting_offsets="earliest",
                                   start_positions={}, paused=False, created_at=utcnow().isoformat()))
    return names


def add_batch(state: StateStore, stream: str, age_s: float, messages: int, dead: int, throttle: int) -> None:
    at = (utcnow() - dt.timedelta(seconds=age_s)).isoformat(timespec="milliseconds")
    state.record_batch(BatchRecord(stream, at, at, 10, messages, messages - dead, dead, 0, None, None, "{}", 0,
                                   throttle_ms=throttle))


def per_stream(state: StateStore, stream: str, window: float) -> tuple[int, int, int]:
    """The query the alerter made before, once per stream and alert: the reference its readings must equal."""
    since = (utcnow() - dt.timedelta(seconds=window)).isoformat(timespec="milliseconds")
    row = state.db.execute("select coalesce(sum(messages), 0), coalesce(sum(dead_letter_rows), 0), "
                           "coalesce(max(throttle_ms), 0) from batches where stream = ? and committed_at >= ?",
                           [stream, since]).fetchone()
    return int(row[0]), int(row[1]), int(row[2])


@pytest.fixture
def state(floe_home):
    with StateStore(load_settings().state_db) as store:
        yield store


ALERTS = [make_alert("dlq", "dead_letter_ratio > 0.05", notify=HOOK),  # over 300 s
          make_alert("dlq2m", "dead_letter_ratio > 0.2", for_="2m", notify=HOOK),
          make_alert("slow", "throttled", notify=HOOK),  # over 60 s
          make_alert("one", "dead_letter_ratio > 0.5", "s002", "90s", HOOK),
          make_alert("lag", "lag_messages > 10", notify=HOOK)]  # no window: reads no batches


def test_each_streams_windowed_readings_equal_one_query_per_stream(state):
    names = add_streams(state, 6)
    # Batches at ages inside 60 s, inside 2 min, inside 5 min and older, different for each stream; s005 has none.
    for i, name in enumerate(names[:-1]):
        add_batch(state, name, 10, 100 * (i + 1), 3 * i, 50 * i)
        add_batch(state, name, 100, 40, 30 - i, 900 + i)
        add_batch(state, name, 200, 10 * i, i, 7)
        add_batch(state, name, 1000, 1000, 1000, 9999)
    for alert in ALERTS:
        state.add_alert(alert)
    readings = Alerter(load_settings(), state, None)._readings(ALERTS)
    windows = {"dlq": 300.0, "dlq2m": 120.0, "slow": 60.0, "one": 90.0}
    got = {(a.name, s): r for a, s, r in readings}
    assert sorted(got) == sorted([(a, n) for a in ("dlq", "dlq2m", "slow", "lag") for n in names] + [("one", "s002")])
    for (alert, name), reading in got.items():
        if alert == "lag":
            assert reading.value is None or reading.value == 0.0
            continue
        messages, dead, throttle = per_stream(state, name, windows[alert])
        expected = float(throttle) if alert == "slow" else (round(dead / messages, 4) if messages else None)
        assert reading.value == expected, (alert, name)
    # The windows tell apart: s001's throttle inside 60 s is 50 ms; its 901 ms throttle is older than that.
    assert got[("slow", "s001")].value == 50.0 and got[("slow", "s005")].value == 0.0
    assert got[("dlq2m", "s000")].value == round(30 / 140, 4) and got[("dlq", "s005")].value is None


def statements(state: StateStore, alerter: Alerter) -> list[str]:
    seen: list[str] = []
    state.db.conn.set_trace_callback(seen.append)
    try:
        alerter.evaluate()
    finally:
        state.db.conn.set_trace_callback(None)
    return seen


def test_a_round_makes_the_same_statements_for_5_streams_as_for_100(state):
    for alert in ALERTS:
        state.add_alert(alert)
    alerter = Alerter(load_settings(), state, None)
    names = add_streams(state, 5)
    for name in names:
        add_batch(state, name, 5, 100, 0, 0)
    few = statements(state, alerter)
    names += add_streams(state, 95, start=5)
    for name in names:
        add_batch(state, name, 5, 100, 0, 0)
    many = statements(state, alerter)
    assert len(many) == len(few), "a round's statements do not grow with the streams"
    [sums] = [s for s in many if "from batches" in s]  # every windowed alert's sums in one query
    plan = " ".join(row[3] for row in state.db.execute(f"explain query plan {sums}"))
    assert "SEARCH batches USING INDEX idx_batches_committed_at" in plan, "it reads the window's batches alone"
    assert state.open_incidents() == []
