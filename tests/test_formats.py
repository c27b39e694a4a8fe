"""Avro and Protobuf topics from a schema registry, end to end as a user runs them: every type
lands exactly, every malformed kind is dead-lettered with its reason, and a registry that is
down makes the batch wait rather than dead-letter good messages.

Real parts: `floe broker` and `floe registry` processes reached over TCP, messages produced
with confluent-kafka's own AvroSerializer and ProtobufSerializer, `floe` commands, real Spark.
"""

from __future__ import annotations

import datetime as dt
import decimal
import json
import os
import signal
import threading
import uuid

from appliance.config.settings import load_settings
from appliance.state.store import StateStore

from conftest import RegistryProcess, floe, run_until_caught_up
from proto_helpers import F, avro_serializer, message_class, proto_file, protobuf_serializer

UTC = dt.timezone.utc


def query_json(sql):
    result = floe("query", sql, "--format", "json")
    assert result.returncode == 0, result.stderr
    return [json.loads(line) for line in result.stdout.splitlines()]


AVRO_SCHEMA = {"type": "record", "name": "Order", "namespace": "shop", "fields": [
    {"name": "ok", "type": "boolean"}, {"name": "qty", "type": "int"}, {"name": "order_id", "type": "long"},
    {"name": "ratio", "type": "float"}, {"name": "amount", "type": "double"}, {"name": "note", "type": "string"},
    {"name": "blob", "type": "bytes"}, {"name": "code", "type": {"type": "fixed", "name": "Code", "size": 4}},
    {"name": "price", "type": {"type": "bytes", "logicalType": "decimal", "precision": 12, "scale": 3}},
    {"name": "total", "type": {"type": "fixed", "name": "Total", "size": 8, "logicalType": "decimal",
                               "precision": 18, "scale": 4}},
    {"name": "day", "type": {"type": "int", "logicalType": "date"}},
    {"name": "at_ms", "type": {"type": "int", "logicalType": "time-millis"}},
    {"name": "at_us", "type": {"type": "long", "logicalType": "time-micros"}},
    {"name": "ts_ms", "type": {"type": "long", "logicalType": "timestamp-millis"}},
    {"name": "ts_us", "type": {"type": "long", "logicalType": "timestamp-micros"}},
    {"name": "local_us", "type": {"type": "long", "logicalType": "local-timestamp-micros"}},
    {"name": "id", "type": {"type": "string", "logicalType": "uuid"}},
    {"name": "status", "type": {"type": "enum", "name": "Status", "symbols": ["NEW", "PAID"]}},
    {"name": "maybe", "type": ["null", "long"], "default": None},
    {"name": "either", "type": ["null", "string", "long"], "default": None},
    {"name": "tags", "type": {"type": "array", "items": "string"}},
    {"name": "scores", "type": {"type": "map", "values": "double"}},
    {"name": "customer", "type": {"type": "record", "name": "Customer", "fields": [
        {"name": "id", "type": "long"}, {"name": "firstName", "type": "string"}]}},
]}


def avro_record(i: int) -> dict:
    return {
        "ok": i % 2 == 0, "qty": i, "order_id": 2**40 + i, "ratio": 0.5, "amount": i * 1.25, "note": f"é{i}",
        "blob": bytes([0, i]), "code": b"ab" + bytes([i, 255]), "price": decimal.Decimal(f"123456789.{i:03d}"),
        "total": decimal.Decimal(f"-12345678901234.{i:04d}"), "day": dt.date(2026, 1, 1) + dt.timedelta(days=i),
        "at_ms": dt.time(1, 2, 3, 4000), "at_us": dt.time(23, 59, 59, 999999),
        "ts_ms": dt.datetime(2026, 1, 2, 3, 4, 5, 6000, tzinfo=UTC),
        "ts_us": dt.datetime(2026, 1, 2, 3, 4, 5, 123456 + i, tzinfo=UTC),
        "local_us": dt.datetime(2026, 1, 2, 3, 4, 5, 654321), "id": uuid.UUID(int=i), "status": "PAID",
        "maybe": None if i % 2 else i, "either": f"s{i}" if i % 2 else i, "tags": ["a", f"t{i}"],
        "scores": {"x": 1.5, "y": float(i)}, "customer": {"id": i, "firstName": "Ada"},
    }


def test_avro_every_type_lands_exactly_and_malformed_messages_are_dead_lettered(broker, registry, topic, floe_home,
                                                                              spark):
    serialize = avro_serializer(registry, AVRO_SCHEMA, topic)
    good = [serialize(avro_record(i)) for i in range(4)]
    malformed = [
        b"\x01" + good[0][1:],  # a wrong magic byte
        b"\x00\x00\x00\x7f\xffrest",  # a schema id the registry does not have (404)
        good[1][:-6],  # truncated
        b'{"order_id": 1}',  # not in the wire format at all
        b"\x00\x00",  # too short for a header
    ]
    broker.produce(topic, good + malformed, partition=0)
    created = floe("stream", "create", "av", "--bootstrap", broker.bootstrap, "--topic", topic, "--table",
                   "ingest.av", "--format", "avro", "--schema-registry", registry.url)
    assert created.returncode == 0, created.stderr
    assert "from the registry's schema" in created.stderr and f"subject {topic}-value" in created.stderr
    assert 'name = "customer_first_name", type = "long"' not in created.stdout
    assert 'name = "either_long", type = "long", source = "either.long"' in created.stdout

    run_until_caught_up(spark)
    rows = query_json("select * exclude (_ingested_at, _kafka_timestamp, _kafka_partition) from ingest.av "
                      "order by _kafka_offset")
    assert [r["_kafka_offset"] for r in rows] == [0, 1, 2, 3]
    row = rows[1]
    assert row == {
        "ok": False, "qty": 1, "order_id": 2**40 + 1, "ratio": 0.5, "amount": 1.25, "note": "é1",
        "blob": "\u0000\u0001", "code": "ab\u0001\\xff", "price": "123456789.001", "total": "-12345678901234.0001",
        "day": "2026-01-02", "at_ms": "01:02:03.004000", "at_us": "23:59:59.999999",
        "ts_ms": "2026-01-02 03:04:05.006000+00:00", "ts_us": "2026-01-02 03:04:05.123457+00:00",
        "local_us": "2026-01-02 03:04:05.654321", "id": "00000000-0000-0000-0000-000000000001", "status": "PAID",
        "maybe": None, "either_string": "s1", "either_long": None, "tags": ["a", "t1"],
        "scores": [["x", 1.5], ["y", 1.0]], "customer_id": 1, "customer_first_name": "Ada", "_kafka_offset": 1,
    }
    assert rows[2]["maybe"] == 2 and rows[2]["either_long"] == 2 and rows[2]["either_string"] is None
    [types] = query_json("select typeof(price) p, typeof(total) t, typeof(id) u, typeof(at_us) tm, typeof(ts_us) ts,"
                         " typeof(local_us) l, typeof(tags) a, typeof(scores) m, typeof(blob) b from ingest.av limit 1")
    assert types == {"p": "DECIMAL(12,3)", "t": "DECIMAL(18,4)", "u": "UUID", "tm": "TIME",
                     "ts": "TIMESTAMP WITH TIME ZONE", "l": "TIMESTAMP", "a": "VARCHAR[]",
                     "m": "MAP(VARCHAR, DOUBLE)", "b": "BLOB"}

    dead = query_json("select _kafka_offset o, error_stage s, error_message m from ingest.av_dlq order by o")
    assert [d["o"] for d in dead] == [4, 5, 6, 7, 8] and {d["s"] for d in dead} == {"decode"}
    reasons = [d["m"] for d in dead]
    assert "magic byte 1 is not the schema registry wire format's 0" in reasons[0]
    assert f"schema id {0x7fff} is not in the schema registry" in reasons[1]
    assert "payload does not match writer schema id" in reasons[2]
    assert "magic byte 123" in reasons[3] and "too short" in reasons[4]


def _order_proto():
    proto_file("shop/customer.proto", "shop", {"Customer": [("id", 1, F.TYPE_INT64), ("tier", 2, F.TYPE_STRING)]})
    proto_file(
        "shop/order.proto", "shop",
        {"Order": [
            ("order_id", 1, F.TYPE_INT64), ("big", 2, F.TYPE_UINT64), ("small", 3, F.TYPE_UINT32),
            ("amount", 4, F.TYPE_DOUBLE), ("ratio", 5, F.TYPE_FLOAT), ("ok", 6, F.TYPE_BOOL),
            ("note", 7, F.TYPE_STRING), ("blob", 8, F.TYPE_BYTES), ("qty", 9, F.TYPE_SINT32),
            ("status", 10, F.TYPE_ENUM, None, ".shop.Status"),
            ("at", 11, F.TYPE_MESSAGE, None, ".google.protobuf.Timestamp"),
            ("discount", 12, F.TYPE_MESSAGE, None, ".google.protobuf.DoubleValue"),
            ("tags", 13, F.TYPE_STRING, F.LABEL_REPEATED),
            ("customer", 14, F.TYPE_MESSAGE, None, ".shop.Customer"),
            ("card", 15, F.TYPE_STRING, None, None, "payment"), ("cash", 16, F.TYPE_BOOL, None, None, "payment"),
        ]},
        deps=("google/protobuf/timestamp.proto", "google/protobuf/wrappers.proto", "shop/customer.proto"),
        enums={"Status": ["NEW", "PAID"]}, maps={"Order": [("attrs", 17, F.TYPE_STRING, F.TYPE_INT64)]},
    )
    return message_class("shop.Order")


def test_protobuf_every_type_lands_with_its_imports_resolved_through_the_registry(broker, registry, topic,
                                                                                   floe_home, spark):
    order = _order_proto()
    serialize = protobuf_serializer(registry, order, topic)
    full = order(order_id=7, big=2**64 - 1, small=2**32 - 1, amount=2.5, ratio=0.25, ok=True, note="né",
                 blob=b"\x00\x01", qty=-3, status=1, tags=["a", "b"], card="visa")
    full.at.seconds, full.at.nanos = 1_700_000_000, 123_456_789
    full.discount.value = 0.5
    full.customer.id, full.customer.tier = 9, "gold"
    full.attrs["k"] = 3
    good = [serialize(full), serialize(order(order_id=8, cash=False))]
    header = good[0][:5]
    bad_index = header + b"\x02\x0a" + good[0][6:]  # message index 5: the file has one message type
    broker.produce(topic, good + [bad_index, good[0][:-4], b"plain text"], partition=0)
    created = floe("stream", "create", "pb", "--bootstrap", broker.bootstrap, "--topic", topic, "--table",
                   "ingest.pb", "--format", "protobuf", "--schema-registry", registry.url)
    assert created.returncode == 0, created.stderr
    run_until_caught_up(spark)
    rows = query_json("select * exclude (_ingested_at, _kafka_timestamp, _kafka_partition) from ingest.pb "
                      "order by _kafka_offset")
    assert rows == [
        {"order_id": 7, "big": 18446744073709551615, "small": 4294967295, "amount": 2.5, "ratio": 0.25,
         "ok": True, "note": "né", "blob": "\u0000\u0001", "qty": -3, "status": "PAID",
         "at": "2023-11-14 22:13:20.123456+00:00", "discount": 0.5, "tags": ["a", "b"], "customer_id": 9,
         "customer_tier": "gold", "card": "visa", "cash": None, "attrs": [["k", 3]], "_kafka_offset": 0},
        {"order_id": 8, "big": 0, "small": 0, "amount": 0.0, "ratio": 0.0, "ok": False, "note": "", "blob": "",
         "qty": 0, "status": "NEW", "at": None, "discount": None, "tags": [], "customer_id": None,
         "customer_tier": None, "card": None, "cash": False, "attrs": [], "_kafka_offset": 1},
    ]
    dead = query_json("select _kafka_offset o, error_stage s, error_message m from ingest.pb_dlq order by o")
    assert [(d["o"], d["s"]) for d in dead] == [(2, "decode"), (3, "decode"), (4, "decode")]
    assert "message index 5 does not exist" in dead[0]["m"]
    assert "payload does not match writer schema id" in dead[1]["m"]
    assert "magic byte 112" in dead[2]["m"]


def test_a_registry_that_is_down_holds_the_batch_and_dead_letters_nothing(broker, topic, floe_home, spark):
    own = RegistryProcess()  # frozen below: the session's registry must stay up
    try:
        serialize = avro_serializer(own, {"type": "record", "name": "R", "fields": [{"name": "n", "type": "long"}]},
                                    topic)
        broker.produce(topic, [serialize({"n": i}) for i in range(50)], partition=0)
        floe_home.mkdir(parents=True, exist_ok=True)
        (floe_home / "floe.toml").write_text('[engine]\nretry_backoff = "1s"\n')
        created = floe("stream", "create", "down", "--bootstrap", broker.bootstrap, "--topic", topic, "--table",
                       "ingest.down", "--format", "avro", "--schema-registry", own.url,
                       "--schema-registry-option", "timeout=1", "--schema-registry-option", "max.retries=0")
        assert created.returncode == 0, created.stderr
        # A second writer schema (another id, the same field), first met by the engine while the registry is down:
        # the first one this process already read, sampling the topic for `stream create`.
        again = avro_serializer(own, {"type": "record", "name": "R", "doc": "the second writer",
                                      "fields": [{"name": "n", "type": "long"}]}, topic)
        broker.produce(topic, [again({"n": i}) for i in range(50, 80)], partition=0)
        os.kill(own.proc.pid, signal.SIGSTOP)
        thaw = threading.Timer(6.0, os.kill, (own.proc.pid, signal.SIGCONT))
        thaw.start()
        run_until_caught_up(spark)
        thaw.join()
        [counts] = query_json("select (select count(*) from ingest.down) t, (select count(*) from ingest.down_dlq) d,"
                              " (select sum(n) from ingest.down) s")
        assert counts == {"t": 80, "d": 0, "s": sum(range(80))}
        with StateStore(load_settings().state_db) as state:
            kinds = [e.kind for e in state.events("down")]
        assert "registry_unreachable" in kinds and "stream_recovered" in kinds
    finally:
        os.kill(own.proc.pid, signal.SIGCONT)
        own.stop()


def test_the_registry_is_asked_once_per_schema_id_per_worker_not_per_message(broker, topic, spark, floe_home):
    from appliance.control.streams import create_stream
    from appliance.ingest.engine import Engine
    from appliance.standins.registry import EmbeddedRegistry

    served = EmbeddedRegistry()  # in this process, to count what Spark's workers ask of it over HTTP
    try:
        settings = load_settings()
        v1 = {"type": "record", "name": "P", "fields": [{"name": "n", "type": "long"}]}
        v2 = {**v1, "fields": [*v1["fields"], {"name": "s", "type": ["null", "string"], "default": None}]}
        one, two = avro_serializer(served, v1, topic), avro_serializer(served, v2, topic)
        broker.produce(topic, [one({"n": i}) for i in range(3000)])
        create_stream(settings, "asked", bootstrap=broker.bootstrap, topic=topic, table="ingest.asked",
                      format="avro", schema_registry=served.url)
        for _ in range(3):
            broker.produce(topic, [two({"n": i, "s": "x"}) if i % 2 else one({"n": i}) for i in range(3000)])
            Engine(settings, spark=spark).run(until_caught_up=True)
        assert query_json("select count(*) n, count(s) s from ingest.asked") == [{"n": 12000, "s": 4500}]
        ids = {int.from_bytes(one({"n": 0})[1:5], "big"), int.from_bytes(two({"n": 0})[1:5], "big")}
        asked = {i: served.served(f"/schemas/ids/{i}") for i in ids}
        # Each Python worker asks once per id (the driver once more, to map the stream): never per message.
        workers = spark.sparkContext.defaultParallelism
        assert all(1 <= n <= workers + 1 for n in asked.values()), asked
    finally:
        served.close()
