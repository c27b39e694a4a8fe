"""Debezium change events into a table of each key's current row: JSON (with and without Kafka Connect's
schema wrapper) and Avro through the schema registry, against a real broker and Spark."""

from __future__ import annotations

import json

import orjson
import pytest
from confluent_kafka.schema_registry.avro import AvroSerializer
from confluent_kafka.serialization import MessageField, SerializationContext

from appliance.config.settings import load_settings
from appliance.state.store import StateStore

from conftest import floe, run_until_caught_up

ENVELOPE = {
    "type": "record", "name": "Envelope", "namespace": "pg.public.customers", "fields": [
        {"name": "before", "type": ["null", {"type": "record", "name": "Value", "fields": [
            {"name": "id", "type": "long"}, {"name": "name", "type": ["null", "string"], "default": None},
            {"name": "tier", "type": ["null", "string"], "default": None}]}], "default": None},
        {"name": "after", "type": ["null", "Value"], "default": None},
        {"name": "source", "type": {"type": "record", "name": "Source", "namespace": "io.debezium.connector.postgresql",
                                    "fields": [{"name": "ts_ms", "type": "long"},
                                               {"name": "lsn", "type": ["null", "long"], "default": None}]}},
        {"name": "op", "type": "string"},
        {"name": "ts_ms", "type": ["null", "long"], "default": None},
    ]}
KEY = {"type": "record", "name": "Key", "namespace": "pg.public.customers", "fields": [{"name": "id", "type": "long"}]}


def event(op: str, before: dict | None, after: dict | None, lsn: int) -> dict:
    return {"op": op, "before": before, "after": after, "source": {"ts_ms": 1_700_000_000_000 + lsn, "lsn": lsn},
            "ts_ms": 1_700_000_000_999}


def history() -> tuple[list[tuple[int, dict | None]], dict[int, dict]]:
    """(key, event or None for a tombstone) in order, and the rows the table must end with."""
    c = lambda i, name: event("c", None, {"id": i, "name": name, "tier": "std"}, i)  # noqa: E731
    out = [(i, c(i, f"n{i}")) for i in range(1, 9)]
    out += [(3, event("u", {"id": 3, "name": "n3", "tier": "std"}, {"id": 3, "name": "renamed", "tier": "gold"}, 20))]
    out += [(5, event("d", {"id": 5, "name": "n5", "tier": "std"}, None, 21)), (5, None)]  # delete, then tombstone
    out += [(9, event("r", None, {"id": 9, "name": "snapshot", "tier": None}, 22))]
    out += [(2, event("u", None, {"id": 2, "name": f"v{i}", "tier": "std"}, 30 + i)) for i in range(30)]
    rows = {i: {"id": i, "name": f"n{i}", "tier": "std"} for i in range(1, 9) if i != 5}
    rows[3] = {"id": 3, "name": "renamed", "tier": "gold"}
    rows[9] = {"id": 9, "name": "snapshot", "tier": None}
    rows[2] = {"id": 2, "name": "v29", "tier": "std"}
    return out, rows


def query(sql: str) -> list[dict]:
    result = floe("query", sql, "--format", "json")
    assert result.returncode == 0, result.stderr
    return [json.loads(line) for line in result.stdout.splitlines()]


def rows_of(table: str) -> dict[int, dict]:
    rows = query(f"select id, name, tier from {table}")
    assert len(rows) == len({r["id"] for r in rows})
    return {r["id"]: r for r in rows}


@pytest.mark.slow
def test_debezium_json_events_keep_each_rows_current_state_and_a_truncate_empties_it(broker, topic, floe_home, spark):
    producer = broker.producer()
    events, expected = history()
    for n, (key, value) in enumerate(events):
        # with and without the wrapper; the tombstone as the Debezium tutorial prints it (JsonConverter)
        body = b'{"schema": null, "payload": null}' if value is None else orjson.dumps(
            {"schema": {"type": "struct"}, "payload": value} if n % 2 else value)
        producer.produce(topic, key=orjson.dumps({"id": key}), value=body, partition=key % 2)
    producer.produce(topic, key=orjson.dumps({"id": 1}), value=b'{"op": "x"}', partition=1)  # not a change event
    assert producer.flush(30) == 0
    created = floe("stream", "create", "cdc", "--bootstrap", broker.bootstrap, "--topic", topic, "--table",
                   "pg.customers", "--cdc", "debezium", "--cdc-columns")
    assert created.returncode == 0, created.stderr
    assert "upsert by id (debezium change events)" in created.stderr, "the key: the Kafka key's field"
    run_until_caught_up(spark)
    assert rows_of("pg.customers") == expected
    [three] = query("select _cdc_op, _cdc_position, epoch_ms(_cdc_ts) ts from pg.customers where id = 3")
    assert three == {"_cdc_op": "u", "_cdc_position": "20", "ts": 1_700_000_000_020}
    assert [r["error_stage"] for r in query("select error_stage from pg.customers_dlq")] == ["decode"]
    assert floe("audit", "cdc").returncode == 0

    producer.produce(topic, key=None, value=orjson.dumps(event("t", None, None, 40)), partition=0)
    producer.produce(topic, key=orjson.dumps({"id": 11}), value=orjson.dumps(
        event("c", None, {"id": 11, "name": "after truncate", "tier": "std"}, 41)), partition=0)
    assert producer.flush(30) == 0
    run_until_caught_up(spark)
    assert rows_of("pg.customers") == {11: {"id": 11, "name": "after truncate", "tier": "std"}}
    with StateStore(load_settings().state_db) as state:
        assert [e.kind for e in state.events("cdc")].count("table_truncated") == 1


@pytest.mark.slow
def test_debezium_avro_events_through_the_registry(broker, registry, topic, floe_home, spark):
    client = registry.client()
    values = AvroSerializer(client, json.dumps(ENVELOPE))
    keys = AvroSerializer(client, json.dumps(KEY))
    producer = broker.producer()
    events, expected = history()
    for key, value in events:
        producer.produce(topic, key=keys({"id": key}, SerializationContext(topic, MessageField.KEY)),
                         value=None if value is None else values(value, SerializationContext(topic, MessageField.VALUE)),
                         partition=key % 2)
    assert producer.flush(30) == 0
    created = floe("stream", "create", "cdca", "--bootstrap", broker.bootstrap, "--topic", topic, "--table",
                   "pg.customers_avro", "--format", "avro", "--schema-registry", registry.url, "--cdc", "debezium")
    assert created.returncode == 0, created.stderr
    columns = [line.strip() for line in created.stdout.splitlines() if line.strip().startswith("{ name")]
    assert columns == ['{ name = "id", type = "long", source = "id" },',  # the row's columns, not the envelope's
                       '{ name = "name", type = "string", source = "name" },',
                       '{ name = "tier", type = "string", source = "tier" },']
    assert "upsert by id" in created.stderr
    run_until_caught_up(spark)
    assert rows_of("pg.customers_avro") == expected
    assert floe("audit", "cdca").returncode == 0
