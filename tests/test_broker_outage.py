"""A broker that goes away and comes back: the stream reports it, waits, and then lands every offset once."""

import os
import signal

import pytest

from appliance.config.settings import load_settings
from appliance.query.connection import run_query
from appliance.state.store import StateStore

from conftest import BrokerProcess, floe, pizza_values, wait_for


@pytest.fixture
def own_broker():
    b = BrokerProcess()
    yield b
    os.kill(b.proc.pid, signal.SIGCONT)
    b.stop()


def count(table):
    [row] = run_query(load_settings(), f"select count(*) as n, count(distinct (_kafka_partition, _kafka_offset)) as d "
                                       f"from {table}").to_pylist()
    return row


@pytest.mark.slow
def test_stream_survives_a_broker_outage(own_broker, topic, floe_home, running_engine):
    floe_home.mkdir(parents=True, exist_ok=True)
    (floe_home / "floe.toml").write_text('[engine]\nfetch_timeout = "3s"\nretry_backoff = "1s"\n')
    own_broker.produce(topic, pizza_values(500))
    assert floe("stream", "create", "o", "--bootstrap", own_broker.bootstrap, "--topic", topic,
                "--table", "ingest.o").returncode == 0
    running_engine()  # in this process: the outage is the broker's, nothing here needs a process of its own
    wait_for(lambda: count("ingest.o")["n"] == 500, 120, what="first rows")

    os.kill(own_broker.proc.pid, signal.SIGSTOP)  # the broker stops answering, connections stay open
    state = StateStore(load_settings().state_db)
    wait_for(lambda: state.status("o").phase == "failed", 90, what="stream to report the outage")
    assert "unreachable" in state.status("o").last_error or "no message" in state.status("o").last_error
    assert running_engine.running(), "the engine must keep running through an outage"
    assert [o.dependency for o in state.outages()] == ["broker"]  # what `floe status` names

    os.kill(own_broker.proc.pid, signal.SIGCONT)
    own_broker.produce(topic, pizza_values(300, start=500))
    wait_for(lambda: count("ingest.o") == {"n": 800, "d": 800}, 120, what="rows after the broker returned")
    wait_for(lambda: state.status("o").phase == "running", 30, what="running phase")
    kinds = [e.kind for e in state.events("o")]
    assert "stream_recovered" in kinds
    assert "broker_unreachable" in kinds or "stream_failed" in kinds
    assert state.outages() == [] and [e.kind for e in state.events()].count("dependency_back") == 1
    running_engine.stop()
