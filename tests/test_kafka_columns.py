"""The Kafka key and headers as columns (`--kafka-columns key,headers`) and mapped columns read from the key
and headers (`@key.id`, `@header.tenant`), end to end: a real broker, the session's Spark, the tables read
back by DuckDB and PyIceberg, byte for byte."""

from __future__ import annotations

import json

import orjson
import pytest
from confluent_kafka.schema_registry.avro import AvroSerializer
from confluent_kafka.serialization import MessageField, SerializationContext

from appliance.config.settings import load_settings
from appliance.query.connection import run_query
from appliance.tables.catalog import Catalog

from conftest import floe, run_until_caught_up

BINARY_KEY = b"\x00\xff\xfe key \x80"  # not UTF-8, and framed like no registry would frame it
HEADERS = [("trace", b"\xff\xfe\x00\x01"), ("tenant", b"acme"), ("tenant", b"globex"), ("nil", None)]


def both_readers(table: str, columns: str) -> list[dict]:
    """The rows as DuckDB reads them, asserted equal to PyIceberg's, in offset order."""
    settings = load_settings()
    duck = run_query(settings, f"select {columns} from {table} order by _kafka_offset").to_pylist()
    names = [c.strip() for c in columns.split(",")]
    ice = Catalog(settings).table(table).scan(selected_fields=tuple(names)).to_arrow().sort_by("_kafka_offset")
    assert ice.select(names).to_pylist() == duck
    return duck


def test_key_and_headers_land_byte_for_byte_in_append_and_debezium_streams(broker, topic, spark):
    producer = broker.producer()
    producer.produce(topic, key=BINARY_KEY, value=orjson.dumps({"n": 1}), headers=HEADERS, partition=0)
    producer.produce(topic, key=None, value=orjson.dumps({"n": 2}), partition=0)
    producer.produce(topic, key=b"", value=orjson.dumps({"n": 3}), headers=[("empty", b"")], partition=0)
    cdc_topic = topic + "_cdc"
    for i, op in enumerate(("c", "u")):
        producer.produce(cdc_topic, key=orjson.dumps({"id": 7}), headers=[("step", str(i).encode()), ("bin", b"\xc3")],
                         value=orjson.dumps({"op": op, "before": None, "after": {"id": 7, "name": f"v{i}"},
                                             "source": {"ts_ms": 1, "lsn": i}}), partition=0)
    assert producer.flush(30) == 0
    created = floe("stream", "create", "kc", "--bootstrap", broker.bootstrap, "--topic", topic,
                   "--table", "ingest.kc", "--kafka-columns", "key,headers")
    assert created.returncode == 0, created.stderr
    assert '{ name = "_kafka_key", type = "binary", source = "@key" }' in created.stdout
    assert '{ name = "_kafka_headers", type = "headers", source = "@headers" }' in created.stdout
    created = floe("stream", "create", "kcd", "--bootstrap", broker.bootstrap, "--topic", cdc_topic,
                   "--table", "ingest.kcd", "--cdc", "debezium", "--kafka-columns", "headers,key")
    assert created.returncode == 0, created.stderr
    run_until_caught_up(spark)

    rows = both_readers("ingest.kc", "n, _kafka_key, _kafka_headers, _kafka_offset")
    assert [(r["n"], r["_kafka_key"]) for r in rows] == [(1, BINARY_KEY), (2, None), (3, b"")]
    assert rows[0]["_kafka_headers"] == [{"key": k, "value": v} for k, v in HEADERS]
    assert [r["_kafka_headers"] for r in rows[1:]] == [[], [{"key": "empty", "value": b""}]]
    [row] = both_readers("ingest.kcd", "id, name, _kafka_key, _kafka_headers, _kafka_offset")
    assert (row["id"], row["name"], row["_kafka_key"]) == (7, "v1", b'{"id":7}')
    assert row["_kafka_headers"] == [{"key": "step", "value": b"1"}, {"key": "bin", "value": b"\xc3"}]

    shown = floe("stream", "show", "kc")
    assert "kafka_columns      key, headers" in shown.stdout
    committed = Catalog(load_settings()).table("ingest.kc").metadata.current_snapshot_id  # by its one batch
    assert f" ms, snapshot {committed}\n" in shown.stdout, shown.stdout
    assert json.loads(floe("stream", "show", "kcd", "--format", "json").stdout)["kafka_columns"] == ["key", "headers"]


MAPPING = """
[[columns]]
name = "id"
type = "long"
source = "@key.id"
[[columns]]
name = "tenant"
type = "string"
source = "@header.tenant"
[[columns]]
name = "amount"
type = "double"
source = "amount"
"""
KEY = {"type": "record", "name": "Key", "fields": [{"name": "id", "type": "long"}]}
VALUE = {"type": "record", "name": "Value", "fields": [{"name": "amount", "type": "double"}]}


def test_an_upsert_key_from_an_avro_key_field_and_a_header_with_dead_letters_naming_the_source(
        broker, registry, topic, spark, tmp_path):
    client = registry.client()
    keys, values = AvroSerializer(client, json.dumps(KEY)), AvroSerializer(client, json.dumps(VALUE))
    producer = broker.producer()

    def send(key: int, amount: float | None, tenant: bytes | None) -> None:
        producer.produce(topic, key=keys({"id": key}, SerializationContext(topic, MessageField.KEY)),
                         value=None if amount is None else values({"amount": amount},
                                                                  SerializationContext(topic, MessageField.VALUE)),
                         headers=[("tenant", tenant)] if tenant is not None else None, partition=0)

    send(1, 1.0, b"a")
    send(1, 1.5, b"a")    # the newest of (a, 1)
    send(1, 9.0, b"b")    # another key: (b, 1)
    send(2, 2.0, None)    # no tenant header: no key, a dead letter
    send(3, 3.0, b"a")
    send(3, None, b"a")   # a tombstone deletes (a, 3)
    assert producer.flush(30) == 0
    mapping = tmp_path / "m.toml"
    mapping.write_text(MAPPING)
    created = floe("stream", "create", "kh", "--bootstrap", broker.bootstrap, "--topic", topic, "--table",
                   "ingest.kh", "--format", "avro", "--schema-registry", registry.url, "--mapping", str(mapping),
                   "--mode", "upsert", "--key", "tenant,id", "--kafka-columns", "key")
    assert created.returncode == 0, created.stderr
    run_until_caught_up(spark)

    rows = both_readers("ingest.kh", "tenant, id, amount, _kafka_key, _kafka_offset")
    assert [(r["tenant"], r["id"], r["amount"]) for r in rows] == [("a", 1, 1.5), ("b", 1, 9.0)]
    assert rows[0]["_kafka_key"] == keys({"id": 1}, SerializationContext(topic, MessageField.KEY))
    dead = run_query(load_settings(), "select _kafka_offset, error_stage, error_message from ingest.kh_dlq").to_pylist()
    assert dead == [{"_kafka_offset": 3, "error_stage": "key", "error_message":
                     "key column 'tenant' is null (source @header.tenant has no value): the row has no key"}]
    assert floe("audit", "kh").returncode == 0


def test_kafka_columns_and_sources_refuse_bad_input_in_one_line(broker, topic, tmp_path):
    wrong = floe("stream", "create", "x", "--bootstrap", broker.bootstrap, "--topic", topic, "--table", "ingest.x",
                 "--kafka-columns", "key,foo")
    assert wrong.returncode != 0
    assert "kafka columns 'foo' not allowed: use key, headers or key,headers" in wrong.stderr
    assert len(wrong.stderr.strip().splitlines()) == 1
    mapping = tmp_path / "m.toml"
    mapping.write_text('[[columns]]\nname = "x"\ntype = "string"\nsource = "@nope"\n')
    wrong = floe("stream", "create", "x", "--bootstrap", broker.bootstrap, "--topic", topic, "--table", "ingest.x",
                 "--mapping", str(mapping))
    assert wrong.returncode != 0 and len(wrong.stderr.strip().splitlines()) == 1
    assert "source '@nope': a source starting with @ must be @key, @key.FIELD, @header.NAME or @headers" \
        in wrong.stderr


@pytest.fixture
def keyed_json(broker, topic):
    producer = broker.producer()
    for i in range(4):
        producer.produce(topic, key=orjson.dumps({"id": i, "region": "eu"}), value=orjson.dumps({"id": i, "n": i}))
    assert producer.flush(30) == 0
    return topic


def test_inference_proposes_the_json_keys_fields_the_value_lacks(broker, keyed_json):
    created = floe("stream", "create", "inf", "--bootstrap", broker.bootstrap, "--topic", keyed_json,
                   "--table", "ingest.inf")
    assert created.returncode == 0, created.stderr
    assert '{ name = "region", type = "string", source = "@key.region" }' in created.stdout
    assert "@key.id" not in created.stdout  # the value's own id is the same field


def test_a_dead_letter_of_a_header_lands_by_replay_once_a_column_reads_the_header_as_text(broker, topic, spark,
                                                                                        tmp_path):
    producer = broker.producer()
    for i, tenant in enumerate((b"1", b"2", b"acme")):
        producer.produce(topic, value=orjson.dumps({"amount": i}), headers=[("tenant", tenant)], partition=0)
    assert producer.flush(30) == 0
    mapping = tmp_path / "m.toml"
    mapping.write_text('[[columns]]\nname = "amount"\ntype = "double"\n'
                       '[[columns]]\nname = "tenant"\ntype = "long"\nsource = "@header.tenant"\n')
    created = floe("stream", "create", "rp", "--bootstrap", broker.bootstrap, "--topic", topic, "--table",
                   "ingest.rp", "--mapping", str(mapping))
    assert created.returncode == 0, created.stderr
    run_until_caught_up(spark)
    settings = load_settings()
    assert run_query(settings, "select error_stage, error_message from ingest.rp_dlq").to_pylist() == [
        {"error_stage": "schema", "error_message": "field @header.tenant: a string ('acme') where column 'tenant' "
                                                   "is long"}]

    wrong = floe("table", "alter", "ingest.rp", "add-column", "tenant_name", "string", "--source", "@nope")
    assert wrong.returncode != 0 and len(wrong.stderr.strip().splitlines()) == 1 and "@key.FIELD" in wrong.stderr
    assert floe("table", "alter", "ingest.rp", "add-column", "tenant_name", "string", "--source",
                "@header.tenant").returncode == 0
    assert floe("table", "alter", "ingest.rp", "drop-column", "tenant").returncode == 0
    replayed = floe("dlq", "replay", "rp")
    assert replayed.returncode == 0, replayed.stderr
    rows = run_query(settings, "select amount, tenant_name from ingest.rp order by _kafka_offset").to_pylist()
    assert rows == [{"amount": 0.0, "tenant_name": None}, {"amount": 1.0, "tenant_name": None},
                    {"amount": 2.0, "tenant_name": "acme"}]  # rows written before the column was added: NULL
    assert run_query(settings, "select count(*) n from ingest.rp_dlq").to_pylist() == [{"n": 0}]
    assert floe("audit", "rp").returncode == 0
