"""Ingestion end to end: a real broker process, a real SparkSession, a real catalog and warehouse."""

import json

import orjson
import pytest
from pyiceberg.catalog.sql import SqlCatalog

from appliance.config.settings import load_settings
from appliance.control.streams import create_stream, set_paused
from appliance.ingest.engine import Engine
from appliance.state.store import StateStore

from conftest import floe, floe_process, pizza_values, run_until_caught_up, wait_for

MALFORMED = [
    b"{broken json",
    b'"a string, not an object"',
    b"[1, 2, 3]",
    b'{"order_id": "not a number"}',
    b'{"order_id": 1, "ordered_at": "not a time"}',
    b"\xff\xfe invalid utf-8",
    b"",
    b'{"pad": "' + b"x" * 100_000 + b'"}',  # over the 64KB limit these tests set
]


def query_json(sql):
    result = floe("query", sql, "--format", "json")
    assert result.returncode == 0, result.stderr
    return [json.loads(line) for line in result.stdout.splitlines()]


@pytest.fixture
def small_messages(floe_home):
    floe_home.mkdir(parents=True, exist_ok=True)
    (floe_home / "floe.toml").write_text('[engine]\nmax_message_bytes = "64KB"\n')


def test_run_until_caught_up_lands_every_offset_once(broker, topic, small_messages, spark):
    good = pizza_values(3000)
    values = good[:1500] + MALFORMED + good[1500:]
    broker.produce(topic, values)
    created = floe("stream", "create", "orders", "--bootstrap", broker.bootstrap, "--topic", topic,
                   "--table", "ingest.orders")
    assert created.returncode == 0, created.stderr

    run_until_caught_up(spark)

    [counts] = query_json(
        "select (select count(*) from ingest.orders) as rows, (select count(*) from ingest.orders_dlq) as dead,"
        " (select count(distinct (_kafka_partition, _kafka_offset)) from ingest.orders) as distinct_rows")
    assert counts == {"rows": 3000, "dead": len(MALFORMED), "distinct_rows": 3000}
    dead = query_json("select error_stage, error_message, octet_length(raw_value) as n from ingest.orders_dlq")
    stages = sorted(d["error_stage"] for d in dead)
    assert stages == ["convert", "decode", "decode", "decode", "decode", "schema", "validate", "validate"]
    assert any(d["n"] > 100_000 for d in dead)  # raw bytes kept, even for an oversized message

    columns = {r["column_name"]: r["column_type"] for r in query_json("describe ingest.orders")}
    assert columns["_kafka_partition"] == "INTEGER" and columns["_kafka_offset"] == "BIGINT"
    assert columns["_kafka_timestamp"] == "TIMESTAMP WITH TIME ZONE"
    assert columns["_ingested_at"] == "TIMESTAMP WITH TIME ZONE"
    assert columns["store_id"] == "BIGINT" and columns["ordered_at"] == "TIMESTAMP WITH TIME ZONE"
    [sums] = query_json("select sum(order_id) as s from ingest.orders")
    assert sums["s"] == sum(range(3000))

    # The offsets live in the snapshot summary of the same commit as the data.
    settings = load_settings()
    table = SqlCatalog("floe", **settings.catalog_properties()).load_table("ingest.orders")
    summary = table.current_snapshot().summary.additional_properties
    offsets = json.loads(summary["floe.offsets"])
    assert sum(offsets.values()) == len(values)

    # floe.log sums the batches up (at the run's end here, once a minute in a long run), with no line a batch.
    log = (settings.log_dir / "floe.log").read_text()
    assert "orders: batch of" not in log
    [line] = [line for line in log.splitlines() if "ingest, the last" in line]
    assert f" of 1 stream committed {len(values):,} messages (3,000 rows, {len(MALFORMED)} dead letters)" in line, line

    # Running again finds nothing new and commits nothing.
    snapshots = len(table.snapshots())
    run_until_caught_up(spark)
    assert len(table.refresh().snapshots()) == snapshots
    assert (settings.log_dir / "floe.log").read_text().count("ingest, the last") == 1  # nothing committed: no line


def test_at_log_level_debug_floe_log_has_a_line_for_every_batch(broker, topic, floe_home, spark):
    floe_home.mkdir(parents=True, exist_ok=True)
    (floe_home / "floe.toml").write_text('[logs]\nlevel = "DEBUG"\n')
    broker.produce(topic, pizza_values(10))
    created = floe("stream", "create", "orders", "--bootstrap", broker.bootstrap, "--topic", topic,
                   "--table", "ingest.orders")
    assert created.returncode == 0, created.stderr
    run_until_caught_up(spark)
    log = (load_settings().log_dir / "floe.log").read_text()
    assert "orders: batch of 10 messages (10 rows, 0 dead letters)" in log
    assert "ingest, the last" in log and " of 1 stream committed 10 messages (10 rows, 0 dead letters)" in log
    assert "DEBUG py4j" not in log and "DEBUG pyiceberg" not in log  # a library's debug lines are never a user's


def count(table):
    return query_json(f"select count(*) as n from {table}")[0]["n"]


def test_pause_stops_reading_and_resume_continues(broker, topic, running_engine):
    settings = load_settings()
    broker.produce(topic, pizza_values(200))
    create_stream(settings, "live", bootstrap=broker.bootstrap, topic=topic, table="ingest.live")
    engine = running_engine()
    wait_for(lambda: count("ingest.live") == 200, 120, what="first rows")

    set_paused(settings, "live", True)
    state = StateStore(settings.state_db)
    wait_for(lambda: state.status("live").phase == "paused", 30, what="paused phase")
    broker.produce(topic, pizza_values(100, start=200))
    # The engine's ticks read the streams' definitions only when one changed (O(changes), not O(streams)).
    parsed, definitions = [], engine.state.streams
    engine.state.streams = lambda: parsed.append(1) or definitions()
    # Let the engine go round its loop several times with the new messages there.
    beat = state.engine().heartbeat_at
    for _ in range(4):
        beat = wait_for(lambda: (b := state.engine().heartbeat_at) != beat and b, 30, what="heartbeat")
    assert count("ingest.live") == 200
    assert parsed == []

    set_paused(settings, "live", False)
    wait_for(lambda: count("ingest.live") == 300, 60, what="rows after resume")
    assert parsed
    status = state.status("live")
    assert status.rows_total == 300 and status.lag == 0
    assert {e.kind for e in state.events("live")} >= {"stream_paused", "stream_resumed", "stream_created"}
    assert engine.workers  # still running


def test_latest_starting_offsets_skip_what_was_there(broker, topic, spark):
    settings = load_settings()
    broker.produce(topic, pizza_values(50))
    create_stream(settings, "late", bootstrap=broker.bootstrap, topic=topic, table="ingest.late",
                  starting_offsets="latest")
    broker.produce(topic, pizza_values(20, start=1000))
    Engine(settings, spark=spark).run(until_caught_up=True)
    assert query_json("select min(order_id) as lo, count(*) as n from ingest.late") == [{"lo": 1000, "n": 20}]


@pytest.mark.parametrize("point", ["before_commit", "after_target_commit"])
def test_crash_around_the_target_commit_loses_and_duplicates_nothing(broker, topic, point, spark):
    # A crash between the dead-letter commit and the target's: test_evolution's replay test kills there.
    broker.produce(topic, pizza_values(500) + MALFORMED[:2])
    assert floe("stream", "create", "c", "--bootstrap", broker.bootstrap, "--topic", topic,
                "--table", "ingest.c").returncode == 0
    assert floe_process("run", "--until-caught-up", env={"FLOE_FAILPOINTS": point}).returncode == -9
    broker.produce(topic, pizza_values(100, start=500))  # arrives while the engine is down
    run_until_caught_up(spark)
    assert count("ingest.c") == 600 and count("ingest.c_dlq") == 2
    [dups] = query_json("select count(*) - count(distinct (_kafka_partition, _kafka_offset)) as d from ingest.c")
    assert dups["d"] == 0


def test_records_with_headers_and_keys_reach_the_dead_letter_table(broker, topic, spark):
    settings = load_settings()
    producer = broker.producer()
    producer.produce(topic, value=orjson.dumps({"a": 1}), key=b"k0", partition=0)
    producer.produce(topic, value=b"oops", key=b"k1", headers=[("trace", b"abc")], partition=0)
    producer.flush(10)
    create_stream(settings, "hdr", bootstrap=broker.bootstrap, topic=topic, table="ingest.hdr")
    Engine(settings, spark=spark).run(until_caught_up=True)
    dead = query_json("select raw_key, raw_value, headers, error_stage from ingest.hdr_dlq")
    assert dead == [{"raw_key": "k1", "raw_value": "oops", "headers": [{"key": "trace", "value": "abc"}],
                     "error_stage": "decode"}]
