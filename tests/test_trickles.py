"""Trickles commit every `trickle_interval`, not every commit interval, and lose or double nothing; a
quiet stream's first message commits at once (issue 32: hundreds of trickles on one VM)."""

from __future__ import annotations

import datetime as dt
import json
import threading
import time

from appliance.config.settings import load_settings
from appliance.control.streams import create_stream
from appliance.state.store import StateStore
from appliance.tables.catalog import Catalog

from conftest import pizza_values, wait_for


INTERVAL = 4  # seconds: the trickle interval of this test


def committed(settings, stream: str) -> list[tuple[float, dict]]:
    with StateStore(settings.state_db) as state:
        return [(b.messages, json.loads(b.offsets)) for b in reversed(state.recent_batches(stream, limit=1000))]


def test_trickles_commit_every_trickle_interval_and_land_every_message_once(broker, topic, floe_home,
                                                                            running_engine):
    floe_home.mkdir(exist_ok=True)
    (floe_home / "floe.toml").write_text(f'[engine]\ntrickle_interval = "{INTERVAL}s"\n')
    settings = load_settings()
    topics = [f"{topic}_{i}" for i in range(3)]
    for t in topics:
        broker.produce(t, pizza_values(5), partition=0)
        create_stream(settings, t, bootstrap=broker.bootstrap, topic=t, table=f"ingest.{t}")
    running_engine()
    wait_for(lambda: all(sum(n for n, _ in committed(settings, t)) == 5 for t in topics), 120, what="the samples")
    before = {t: len(committed(settings, t)) for t in topics}

    # A quiet stream's first message: committed at once, not after a trickle interval. Quiet: its last batch
    # (the samples', itself a trickle's, which lingers an interval for more) is an interval old.
    with StateStore(settings.state_db) as state:
        last = dt.datetime.fromisoformat(state.recent_batches(topics[0], limit=1)[0].committed_at)
    wait_for(lambda: (dt.datetime.now(dt.UTC) - last).total_seconds() > INTERVAL + 0.5, 30, what="a quiet stream")
    started = time.monotonic()
    broker.produce(topics[0], pizza_values(1, start=5), partition=0)
    wait_for(lambda: sum(n for n, _ in committed(settings, topics[0])) == 6, 30, what="the first message")
    first = time.monotonic() - started

    # Then five messages a second to each stream for 9 s: three or four commits each, not nine.
    stop = threading.Event()
    sent = {t: 6 if t == topics[0] else 5 for t in topics}

    def trickle() -> None:
        producer = broker.producer()
        while not stop.is_set():
            for t in topics:
                producer.produce(t, value=pizza_values(1, start=sent[t])[0], partition=0)
                sent[t] += 1
            producer.flush(10)
            stop.wait(0.2)  # paces the producer: five messages a second per stream

    thread = threading.Thread(target=trickle)
    thread.start()
    time.sleep(9)
    stop.set()
    thread.join()
    wait_for(lambda: all(sum(n for n, _ in committed(settings, t)) == sent[t] for t in topics), 60,
             what="every message committed")
    catalog = Catalog(settings)
    for t in topics:
        batches = committed(settings, t)[before[t]:]
        assert len(batches) <= (9 / INTERVAL) + 3, (t, batches)  # with one commit a second: nine or more
        rows = catalog.table(f"ingest.{t}").scan(selected_fields=("order_id",)).to_arrow().column(0).to_pylist()
        assert sorted(rows) == list(range(sent[t])), t  # none lost, none doubled
    assert first < INTERVAL - 0.5, first  # not held for an interval as a trickle's next batch is
