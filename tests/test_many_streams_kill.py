"""A hundred streams through a SIGKILL (issue 32): every table exact afterwards."""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess

import orjson

from appliance.config.settings import load_settings
from appliance.control.streams import create_stream
from appliance.query.connection import run_query

from conftest import FLOE, ROOT, run_until_caught_up, wait_for
from many_streams import MAPPING

STREAMS = 100


def produce_round(broker, topics: list[str], start: int, n: int) -> None:
    producer = broker.producer()
    for topic in topics:
        for i in range(start, start + n):
            producer.produce(topic, value=orjson.dumps({"id": i}), partition=0)
        producer.poll(0)
    assert producer.flush(30) == 0


def committed_streams(settings) -> int:
    with sqlite3.connect(f"file:{settings.state_db}?mode=ro", uri=True, timeout=5) as db:
        return db.execute("select count(distinct stream) from batches").fetchone()[0]


def test_a_hundred_streams_committing_through_a_sigkill_lose_and_double_nothing(broker, topic, floe_home, spark):
    floe_home.mkdir(parents=True, exist_ok=True)
    (floe_home / "floe.toml").write_text('[engine]\ncommit_interval = "200ms"\ntrickle_interval = "200ms"\n')
    settings = load_settings()
    topics = [f"{topic}_{i:03d}" for i in range(STREAMS)]
    produce_round(broker, topics, 0, 20)
    for i, name in enumerate(topics):
        create_stream(settings, f"s{i:03d}", bootstrap=broker.bootstrap, topic=name, table=f"many.s{i:03d}",
                      mapping=MAPPING)
    engine = subprocess.Popen(FLOE + ["run"], cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                              start_new_session=True)
    try:
        # Killed while streams commit: a third of them have, the others are between batches or in one.
        wait_for(lambda: engine.poll() is not None or committed_streams(settings) >= STREAMS // 3, 180,
                 what="a third of the streams committing")
        assert engine.poll() is None, "the engine exited by itself"
        produce_round(broker, topics, 20, 20)  # arriving while the engine commits
        os.killpg(engine.pid, signal.SIGKILL)
        engine.wait(30)
    finally:
        if engine.poll() is None:
            os.killpg(engine.pid, signal.SIGKILL)
            engine.wait(30)
    produce_round(broker, topics, 40, 10)  # while it is down
    run_until_caught_up(spark)
    counts = run_query(settings, " union all ".join(
        f"select '{i:03d}' as s, count(*) as n, count(distinct id) as ids, min(id) as lo, max(id) as hi "
        f"from many.s{i:03d}" for i in range(STREAMS)), [f"many.s{i:03d}" for i in range(STREAMS)]).to_pylist()
    wrong = [c for c in counts if (c["n"], c["ids"], c["lo"], c["hi"]) != (50, 50, 0, 49)]
    assert len(counts) == STREAMS and wrong == [], wrong[:5]
