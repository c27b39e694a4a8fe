"""Avro decoding, fast: what the writer schema says is what lands, whichever path decodes a batch
(fastavro message by message, or DuckDB's reader for many messages of one schema), and what does
not fit goes to the dead-letter table with its reason. Messages come from confluent-kafka's own
AvroSerializer through Floe's embedded registry, served over HTTP in this process."""

from __future__ import annotations

import datetime as dt
import decimal
import io
import json
import uuid

import fastavro
import pytest
from confluent_kafka.schema_registry import Schema, SchemaReference
from confluent_kafka.schema_registry.avro import AvroSerializer
from confluent_kafka.serialization import MessageField, SerializationContext

import appliance.decode.registered as registered
from appliance.decode import wire
from appliance.decode.avro_columns import MIN_MESSAGES
from appliance.decode.registered import AvroFormat
from appliance.decode.rows import decode_batch
from appliance.kafka.records import RawBatch
from appliance.kafka.settings import RegistrySettings
from appliance.model.changes import Evolution, SchemaChange
from appliance.model.mapping import Column, Mapping
from appliance.standins.registry import EmbeddedRegistry

from proto_helpers import avro_serializer

UTC = dt.timezone.utc


@pytest.fixture(scope="module")
def local_registry():
    served = EmbeddedRegistry()
    yield served
    served.close()


def batch(values: list[bytes]) -> RawBatch:
    n = len(values)
    return RawBatch([0] * n, list(range(n)), [1] * n, [None] * n, values, [None] * n)


def decoded(local_registry, values: list[bytes], mapping: Mapping | None = None, evolve: bool = False):
    fmt = AvroFormat(RegistrySettings.create(local_registry.url))
    if mapping is None:
        mapping = Mapping(fmt.build(wire.avro_header(values[0])[0]).layout.columns)
    return decode_batch(batch(values), mapping, 1 << 20, fmt=fmt, evolve=evolve), mapping


def rows(result, *names) -> list[tuple]:
    table = result.target.select(list(names))
    return [tuple(r.values()) for r in table.to_pylist()]


def test_unions_of_logical_types_and_unions_inside_unions_fill_their_branch_columns(local_registry, topic):
    money = {"type": "bytes", "logicalType": "decimal", "precision": 6, "scale": 2}
    card = {"type": "record", "name": "Card", "fields": [{"name": "kind", "type": ["null", "string", "long"]}]}
    schema = {"type": "record", "name": "U", "fields": [
        {"name": "v", "type": ["null", {"type": "long", "logicalType": "timestamp-micros"}, "string", money,
                               {"type": "int", "logicalType": "date"},
                               {"type": "string", "logicalType": "uuid"}]},
        {"name": "pay", "type": ["null", card, "string"]}]}
    serialize = avro_serializer(local_registry, schema, topic)
    at = dt.datetime(2026, 1, 2, 3, 4, 5, 123456, tzinfo=UTC)
    values = [serialize({"v": at, "pay": {"kind": 7}}), serialize({"v": "text", "pay": "cash"}),
              serialize({"v": decimal.Decimal("12.34"), "pay": {"kind": "visa"}}),
              serialize({"v": dt.date(2026, 5, 6), "pay": None}), serialize({"v": uuid.UUID(int=9), "pay": None})]
    result, mapping = decoded(local_registry, values)
    names = [c.name for c in mapping.columns]
    assert names == ["v_timestamp_micros", "v_string", "v_decimal", "v_date", "v_uuid", "pay_card_kind_string",
                     "pay_card_kind_long", "pay_string"]
    assert rows(result, *names) == [
        (at, None, None, None, None, None, 7, None),
        (None, "text", None, None, None, None, None, "cash"),
        (None, None, decimal.Decimal("12.34"), None, None, "visa", None, None),
        (None, None, None, dt.date(2026, 5, 6), None, None, None, None),
        (None, None, None, None, uuid.UUID(int=9), None, None, None),
    ]


def _many(serialize, records: list[dict], n: int) -> list[bytes]:
    return [serialize(records[i % len(records)]) for i in range(n)]


@pytest.mark.parametrize("n", [3, MIN_MESSAGES + 10], ids=["message by message", "in columns"])
def test_nanosecond_timestamps_are_exact_to_the_microsecond_whichever_path(local_registry, topic, n):
    schema = {"type": "record", "name": "Nanos", "fields": [
        {"name": "at", "type": {"type": "long", "logicalType": "timestamp-nanos"}},
        {"name": "local", "type": {"type": "long", "logicalType": "local-timestamp-nanos"}}]}
    # confluent-kafka's serializer knows no nanoseconds: the bodies are written by fastavro, as integers.
    parsed = fastavro.parse_schema(schema)
    header = avro_serializer(local_registry, schema, topic)({"at": 0, "local": 0})[:wire.HEADER]

    def serialize(record):
        body = io.BytesIO()
        fastavro.schemaless_writer(body, parsed, record)
        return header + body.getvalue()

    records = [{"at": -1500, "local": -1500}, {"at": 1_700_000_000_123_456_789, "local": 1_700_000_000_123_456_789}]
    result, _ = decoded(local_registry, _many(serialize, records, n))
    got = rows(result, "at", "local")[:2]
    before, after = dt.datetime(1969, 12, 31, 23, 59, 59, 999998), dt.datetime(2023, 11, 14, 22, 13, 20, 123456)
    assert got == [(before.replace(tzinfo=UTC), before), (after.replace(tzinfo=UTC), after)]


def test_a_batch_in_columns_dead_letters_an_empty_body_and_follows_inherited_namespaces(local_registry, topic):
    money = {"type": "record", "name": "Money", "fields": [
        {"name": "v", "type": {"type": "bytes", "logicalType": "decimal", "precision": 10, "scale": 2}},
        {"name": "t", "type": {"type": "long", "logicalType": "local-timestamp-micros"}}]}
    schema = {"type": "record", "name": "Order", "namespace": "com.x", "fields": [
        {"name": "a", "type": money}, {"name": "b", "type": "com.x.Money"}, {"name": "c", "type": "Money"}]}
    serialize = avro_serializer(local_registry, schema, topic)
    one = {"v": decimal.Decimal("1.25"), "t": dt.datetime(2026, 1, 1)}
    values = _many(serialize, [{"a": one, "b": {**one, "v": decimal.Decimal("3.50")}, "c": one}], MIN_MESSAGES + 10)
    values[1000] = values[1000][:wire.HEADER]  # a header and nothing else
    result, mapping = decoded(local_registry, values)
    assert result.dead_letter.column("_kafka_offset").to_pylist() == [1000]
    assert result.target.num_rows == len(values) - 1
    assert set(rows(result, "a_v", "b_v", "c_v", "b_t")) == {
        (decimal.Decimal("1.25"), decimal.Decimal("3.50"), decimal.Decimal("1.25"), dt.datetime(2026, 1, 1))}
    # A column that holds a whole record (as JSON) is filled whichever path decodes the batch.
    whole = Mapping((*mapping.columns, Column("b_json", "json", ("b",))))
    result, _ = decoded(local_registry, values[:999] + values[1001:], whole)
    assert json.loads(result.target.column("b_json")[0].as_py()) == {"v": "3.50", "t": "2026-01-01T00:00:00"}


def test_schemas_that_refer_to_others_in_the_registry_are_read(local_registry, topic):
    client = local_registry.client()
    money = {"type": "record", "name": "Money", "namespace": "com.common", "fields": [
        {"name": "units", "type": "long"},
        {"name": "amount", "type": {"type": "bytes", "logicalType": "decimal", "precision": 8, "scale": 2}}]}
    client.register_schema(f"{topic}-money", Schema(json.dumps(money), "AVRO"))
    order = {"type": "record", "name": "Order", "namespace": "com.shop", "fields": [
        {"name": "id", "type": "long"}, {"name": "price", "type": "com.common.Money"}]}
    refs = [SchemaReference("com.common.Money", f"{topic}-money", 1)]
    serializer = AvroSerializer(client, Schema(json.dumps(order), "AVRO", refs))
    values = [serializer({"id": 1, "price": {"units": 3, "amount": decimal.Decimal("9.99")}},
                         SerializationContext(topic, MessageField.VALUE))]
    result, mapping = decoded(local_registry, values)
    assert [(c.name, c.type) for c in mapping.columns] == [("id", "long"), ("price_units", "long"),
                                                           ("price_amount", "decimal(8,2)")]
    assert rows(result, "id", "price_units", "price_amount") == [(1, 3, decimal.Decimal("9.99"))]


def test_a_value_beyond_its_writer_schema_is_bad_data_and_widens_nothing(local_registry, topic):
    schema = {"type": "record", "name": "Pay", "fields": [
        {"name": "amount", "type": {"type": "bytes", "logicalType": "decimal", "precision": 10, "scale": 2}}]}
    good = avro_serializer(local_registry, schema, topic)({"amount": decimal.Decimal("1.50")})
    corrupt = good[:wire.HEADER] + b"\x1e" + (10**30).to_bytes(15, "big")  # 15 bytes: 32 digits in a decimal(10,2)
    result, _ = decoded(local_registry, [good, corrupt], evolve=True)
    assert not result.evolution
    assert rows(result, "amount") == [(decimal.Decimal("1.50"),)]
    assert result.dead_letter.column("error_stage").to_pylist() == ["convert"]
    assert "does not fit its writer schema's type either" in result.dead_letter.column("error_message")[0].as_py()


def test_a_writer_schema_that_changes_a_type_incompatibly_sends_its_messages_to_schema_dead_letters(
        local_registry, topic):
    v1 = {"type": "record", "name": "M", "fields": [{"name": "n", "type": "long"},
                                                    {"name": "x", "type": ["null", "string"]}]}
    v2 = {"type": "record", "name": "M", "fields": [{"name": "n", "type": "double"},
                                                    {"name": "x", "type": ["null", "string"]}]}
    v3 = {"type": "record", "name": "M", "fields": [{"name": "n", "type": "long"},
                                                    {"name": "x", "type": ["null", "string", "long"]}]}
    first, second, third = (avro_serializer(local_registry, v, topic) for v in (v1, v2, v3))
    values = [first({"n": 1, "x": "a"}), second({"n": 3.0, "x": "b"}), third({"n": 4, "x": 5}),
              first({"n": 6, "x": None})]
    mapping = Mapping((Column("n", "long", ("n",)), Column("x", "string", ("x",))))
    for evolve in (True, False):
        result, _ = decoded(local_registry, values, mapping, evolve)
        dead = result.dead_letter.select(["_kafka_offset", "error_stage", "error_message"]).to_pylist()
        v2_id = wire.avro_header(values[1])[0][0]
        assert dead[0] == {"_kafka_offset": 1, "error_stage": "schema", "error_message":
                           f"field n: schema id {v2_id} has double where column 'n' is long"}
        if evolve:  # x became a union: its branches are new columns; x itself holds none of it
            assert [d["_kafka_offset"] for d in dead] == [1]
            assert rows(result, "n", "x") == [(1, "a"), (4, None), (6, None)]
            assert {c.name for c in result.evolution.add} == {"x_string", "x_long"}
        else:
            assert [(d["_kafka_offset"], d["error_stage"]) for d in dead] == [(1, "schema"), (2, "schema")]
            assert rows(result, "n", "x") == [(1, "a"), (6, None)]
        assert SchemaChange.incompatible("n", "long", "double") in result.changes


def test_an_unknown_schema_id_is_asked_again_after_a_while(local_registry, topic, monkeypatch):
    schema = {"type": "record", "name": "Later", "fields": [{"name": "k", "type": "long"}]}
    first = avro_serializer(local_registry, schema, topic)({"k": 1})
    known = wire.avro_header(first)[0][0]
    early = first[:1] + (known + 1).to_bytes(4, "big") + first[wire.HEADER:]  # an id not registered yet
    fmt = AvroFormat(RegistrySettings.create(local_registry.url))
    mapping = Mapping((Column("k", "long", ("k",)),))
    assert fmt.parse([early], 1000, mapping).bad[0][2].startswith(f"schema id {known + 1} is not in")
    other = {"type": "record", "name": "Later2", "fields": [{"name": "k", "type": "long"}]}
    assert wire.avro_header(avro_serializer(local_registry, other, topic)({"k": 2}))[0][0] == known + 1
    assert fmt.parse([early], 1000, mapping).bad, "a 404 is kept a while: not asked for every batch"
    monkeypatch.setattr(registered, "NOT_FOUND_TTL", 0.0)
    fmt.registry.forget(("avro", known + 1))
    fmt.parse([early], 1000, mapping)  # unknown again, now kept for no time at all
    assert fmt.parse([early], 1000, mapping).good == [0]


def test_a_negative_schema_id_is_not_the_wire_format():
    with pytest.raises(wire.Malformed, match="schema id -1 is negative"):
        wire.header(b"\x00\xff\xff\xff\xffrest")


def test_tasks_asking_for_different_widths_of_a_column_get_the_widest():
    asks = [Evolution(widen=(("amount", "decimal(12,2)"),)), Evolution(widen=(("amount", "decimal(16,2)"),)),
            Evolution(widen=(("amount", "decimal(14,2)"),)), Evolution(widen=(("n", "long"),))]
    merged = Evolution()
    for ask in asks:
        merged = merged.merged(ask)
    assert dict(merged.widen) == {"amount": "decimal(16,2)", "n": "long"}
