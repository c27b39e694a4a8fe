"""Fast tests of the registry formats' parts: the wire format, the embedded registry's REST API,
registry settings, schema layouts, value conversion, new-field detection and schema comparison.
The registry is Floe's embedded one, served over HTTP in this process."""

from __future__ import annotations

import datetime as dt
import decimal
import json
import uuid

import orjson
import pytest
from confluent_kafka.schema_registry import Schema, SchemaRegistryClient

from appliance.core.errors import RegistryConfigError, RegistryUnavailable
from appliance.decode import wire
from appliance.decode.avro import layout
from appliance.decode.convert import convert_column
from appliance.decode.json_format import JsonFormat, new_fields
from appliance.decode.registered import AvroFormat, ProtobufFormat
from appliance.decode.rows import decode_batch
from appliance.kafka.records import RawBatch
from appliance.kafka.settings import RegistrySettings
from appliance.model.changes import SchemaChange
from appliance.model.mapping import Column, Mapping
from appliance.model.types import parse_type
from appliance.standins.registry import EmbeddedRegistry

from proto_helpers import avro_serializer


@pytest.fixture(scope="module")
def local_registry():
    served = EmbeddedRegistry()
    yield served
    served.close()


def test_the_wire_format_header_and_protobuf_message_indexes():
    assert wire.header(b"\x00\x00\x00\x01\x02rest") == (258, 5)
    assert wire.message_indexes(b"\x00", 0) == ((0,), 1)
    assert wire.message_indexes(wire.encode_indexes((1, 2)) + b"x", 0) == ((1, 2), 3)
    for bad, reason in ((b"\x01\x00\x00\x00\x01", "magic byte 1"), (b"\x00\x00", "too short"),
                        (b"{}", "too short")):
        with pytest.raises(wire.Malformed, match=reason):
            wire.header(bad)
    with pytest.raises(wire.Malformed, match="run past the end"):
        wire.message_indexes(b"\x04\x02", 0)


def test_the_embedded_registry_speaks_the_rest_api_clients_use(local_registry):
    client = SchemaRegistryClient({"url": local_registry.url})
    a = Schema(json.dumps({"type": "record", "name": "A", "fields": [{"name": "x", "type": "long"}]}), "AVRO")
    b = Schema(json.dumps({"type": "record", "name": "B", "fields": [{"name": "y", "type": "string"}]}), "AVRO")
    first = client.register_schema("s-value", a)
    assert client.register_schema("s-value", a) == first  # the same schema keeps its id
    second = client.register_schema("s-value", b)
    assert client.register_schema("other-value", a) == first  # one id per schema, across subjects
    assert client.get_schema(second).schema_str == b.schema_str
    assert client.get_latest_version("s-value").version == 2
    assert client.get_version("s-value", 1).schema_id == first
    assert client.lookup_schema("s-value", b).version == 2
    assert sorted((v.subject, v.version) for v in client.get_schema_versions(first)) == [("other-value", 1),
                                                                                          ("s-value", 1)]
    assert {"other-value", "s-value"} <= set(client.get_subjects())
    from confluent_kafka.schema_registry.error import SchemaRegistryError

    with pytest.raises(SchemaRegistryError) as missing:
        client.get_schema(999)
    assert missing.value.http_status_code == 404


def test_registry_settings_mask_secrets_and_refuse_bad_values():
    settings = RegistrySettings.create("https://user:pw@reg.example:8081/",
                                       {"basic.auth.user.info": "key:secret", "timeout": "3"})
    assert settings.url == "https://user:pw@reg.example:8081"
    assert settings.display_url == "https://user:***@reg.example:8081"
    assert "secret" not in repr(settings) and "pw" not in repr(settings)
    assert settings.scrub("failed: key:secret at https://user:pw@reg") == "failed: *** at https://user:***@reg"
    assert settings.client_config()["timeout"] == 3
    for url, options, problem in (("reg:8081", {}, r"must be http\(s\)://"), ("http://r", {"bogus": "1"}, "'bogus'"),
                                  ("http://r", {"max.retries": "many"}, "must be a number")):
        with pytest.raises(RegistryConfigError, match=problem):
            RegistrySettings.create(url, options)


def test_avro_layouts_flatten_records_and_keep_unflattenable_shapes_as_json():
    schema = {"type": "record", "name": "R", "fields": [
        {"name": "lines", "type": {"type": "array", "items": {"type": "record", "name": "L", "fields": [
            {"name": "sku", "type": "string"}]}}},
        {"name": "byName", "type": {"type": "map", "values": "L"}},
        {"name": "nums", "type": {"type": "array", "items": ["null", "int"]}},
        {"name": "inner", "type": ["null", {"type": "record", "name": "I", "fields": [
            {"name": "deep", "type": {"type": "record", "name": "D", "fields": [{"name": "v", "type": "double"}]}}]}]},
    ]}
    assert [(c.name, c.type, c.source) for c in layout(schema).columns] == [
        ("lines", "json", ("lines",)), ("by_name", "json", ("byName",)), ("nums", "list<int>", ("nums",)),
        ("inner_deep_v", "double", ("inner", "deep", "v"))]


@pytest.mark.parametrize("type_, values, expected, problems", [
    ("decimal(6,2)", [1.5, "2.25", decimal.Decimal("3.10"), 10], ["1.50", "2.25", "3.10", "10.00"], {}),
    ("decimal(6,2)", [1.005, "abc"], [None, None], {0: "convert", 1: "schema"}),
    ("uuid", [str(uuid.UUID(int=5)), uuid.UUID(int=6), "nope"], [uuid.UUID(int=5), uuid.UUID(int=6), None],
     {2: "convert"}),
    ("time", ["01:02:03.456789", dt.time(4, 5)], [dt.time(1, 2, 3, 456789), dt.time(4, 5)], {}),
    ("binary", ["AAE=", b"\x02", 7], [b"\x00\x01", b"\x02", None], {2: "schema"}),
    ("list<long>", [[1, "2"], "x", [1.5]], [[1, 2], None, None], {1: "schema", 2: "convert"}),
    ("map<string,double>", [{"a": 1}, [1]], [[("a", 1.0)], None], {1: "schema"}),
])
def test_values_convert_exactly_or_say_whether_the_data_or_the_schema_is_wrong(type_, values, expected, problems):
    errors = {}
    array = convert_column(Column("c", type_, ("c",)), values, errors)
    got = array.to_pylist()
    if type_.startswith("decimal"):
        got = [None if v is None else str(v) for v in got]
    if type_ == "map<string,double>":
        got = [None if v is None else list(v) for v in got]
    assert got == expected
    assert {i: p.stage for i, p in errors.items()} == problems


def test_an_int_column_receiving_64_bit_values_asks_to_widen_or_dead_letters_them():
    col = Column("n", "int", ("n",))
    wider: dict = {}
    errors: dict = {}
    convert_column(col, [1, 2**40], errors, wider)
    assert wider == {"n": parse_type("long")} and errors[1].stage == "widen"
    errors = {}
    convert_column(col, [1, 2**40], errors)
    assert errors[1].stage == "schema" and "needs long where column 'n' is int (schema evolution is off)" in \
        errors[1].message


def test_new_json_fields_are_proposed_once_named_and_typed_and_ignored_ones_stay_out():
    mapping = Mapping((Column("id", "long", ("id",)), Column("geo_lat", "double", ("geo", "lat"))),
                      ignored=(("dropped",),))
    objects = [{"id": 1, "geo": {"lat": 1.0, "lon": 2.5}, "dropped": 1, "later": None},
               {"id": 2, "geo": {"lat": 1.0}, "new": "x", "deep": {"a": {"b": True}}},
               {"id": 3, "geo_lat": "clash"}]
    found = {c.name: (c.type, c.source) for c in new_fields(objects, mapping)}
    assert found == {"geo_lon": ("double", ("geo", "lon")), "new": ("string", ("new",)),
                     "deep_a_b": ("boolean", ("deep", "a", "b")), "geo_lat_2": ("string", ("geo_lat",))}


def test_a_batch_with_new_fields_asks_for_them_with_evolution_on_and_lands_without_them_off():
    mapping = Mapping((Column("id", "long", ("id",)),))
    raw = RawBatch([0, 0], [0, 1], [1, 1], [None, None], [b'{"id": 1}', b'{"id": 2, "tag": "t"}'], [None, None])
    on = decode_batch(raw, mapping, 1000, fmt=JsonFormat(), evolve=True)
    assert [c.name for c in on.evolution.add] == ["tag"]
    off = decode_batch(raw, mapping, 1000, fmt=JsonFormat(), evolve=False)
    assert not off.evolution and off.target.num_rows == 2
    assert off.changes == {SchemaChange.ignored("tag", "string", "tag")}


def test_avro_messages_decode_with_their_writer_schemas_and_schema_changes_are_compared(local_registry, topic):
    v1 = {"type": "record", "name": "T", "fields": [{"name": "a", "type": "int"}, {"name": "b", "type": "long"}]}
    v2 = {"type": "record", "name": "T", "fields": [{"name": "a", "type": "long"}, {"name": "b", "type": "string"},
                                                    {"name": "c", "type": ["null", "double"], "default": None}]}
    values = [avro_serializer(local_registry, v1, topic)({"a": 1, "b": 2}),
              avro_serializer(local_registry, v2, topic)({"a": 2**40, "b": "x", "c": 0.5})]
    mapping = Mapping((Column("a", "int", ("a",)), Column("b", "long", ("b",))))
    parsed = AvroFormat(RegistrySettings.create(local_registry.url)).parse(values, 1000, mapping)
    assert parsed.good == [0, 1] and len(parsed.schemas) == 2
    assert [(c.name, c.type) for c in parsed.proposed] == [("c", "double")]
    assert parsed.wider == {"a": parse_type("long")}
    assert parsed.changes == {"b": SchemaChange.incompatible("b", "long", "string")}
    assert parsed.values(list(mapping.columns)) == [[1, 2**40], [2, "x"]]


def test_avro_decoded_in_columns_equals_avro_decoded_message_by_message(local_registry, topic):
    from test_formats import AVRO_SCHEMA, avro_record

    from appliance.decode.avro_columns import MIN_MESSAGES

    schema = {**AVRO_SCHEMA, "fields": [f for f in AVRO_SCHEMA["fields"] if f["name"] != "either"]}
    serialize = avro_serializer(local_registry, schema, topic)
    values = []
    for i in range(MIN_MESSAGES + 50):
        record = avro_record(i % 200)
        record.pop("either")
        values.append(serialize(record))
    fmt = AvroFormat(RegistrySettings.create(local_registry.url))
    mapping = Mapping(fmt.build((int.from_bytes(values[0][1:5], "big"),)).layout.columns)
    raw = RawBatch([0] * len(values), list(range(len(values))), [0] * len(values), [None] * len(values), values,
                   [None] * len(values))
    fast = decode_batch(raw, mapping, 1 << 20, fmt=fmt)
    assert fmt.build((int.from_bytes(values[0][1:5], "big"),)).columnar is not None

    import appliance.decode.registered as registered

    slow_fmt = AvroFormat(RegistrySettings.create(local_registry.url))
    original, registered.MIN_COLUMNAR = registered.MIN_COLUMNAR, 10**9
    try:
        slow = decode_batch(raw, mapping, 1 << 20, fmt=slow_fmt)
    finally:
        registered.MIN_COLUMNAR = original
    assert fast.dead_letter.num_rows == slow.dead_letter.num_rows == 0
    assert fast.target.drop_columns(["_ingested_at"]).equals(slow.target.drop_columns(["_ingested_at"]))

    # A truncated body in a large batch: that message is dead-lettered, its neighbours land.
    broken = list(values)
    broken[7] = values[7][:-5]
    raw = RawBatch([0] * len(broken), list(range(len(broken))), [0] * len(broken), [None] * len(broken), broken,
                   [None] * len(broken))
    mixed = decode_batch(raw, mapping, 1 << 20, fmt=fmt)
    assert mixed.target.num_rows == len(values) - 1
    assert mixed.dead_letter.column("_kafka_offset").to_pylist() == [7]


def test_a_url_that_is_not_a_registry_holds_the_batch_while_an_unknown_id_dead_letters(local_registry, topic):
    schema = {"type": "record", "name": "N", "fields": [{"name": "n", "type": "long"}]}
    value = avro_serializer(local_registry, schema, topic)({"n": 1})
    mapping = Mapping((Column("n", "long", ("n",)),))
    # Under a wrong path the server answers 404 without a registry's "not found" code, as a proxy or
    # another service would: that says nothing about the message, so it is not dead-lettered.
    wrong = AvroFormat(RegistrySettings.create(local_registry.url + "/not-the-api"))
    with pytest.raises(RegistryUnavailable, match="no schema registry error code: is the URL a schema registry"):
        wrong.parse([value], 1000, mapping)
    right = AvroFormat(RegistrySettings.create(local_registry.url))
    parsed = right.parse([value, b"\x00\x00\x00\x7f\xff" + value[5:]], 1000, mapping)
    assert parsed.good == [0]
    assert parsed.bad == [(1, "decode", f"schema id {0x7fff} is not in the schema registry {local_registry.url}")]


def test_json_in_the_registry_wire_format_reads_as_json(local_registry, topic):
    from confluent_kafka.schema_registry.json_schema import JSONSerializer
    from confluent_kafka.serialization import MessageField, SerializationContext

    schema = {"type": "object", "properties": {"id": {"type": "integer"}, "tag": {"type": "string"}}}
    serialize = JSONSerializer(json.dumps(schema), SchemaRegistryClient({"url": local_registry.url}))
    framed = serialize({"id": 7, "tag": "x"}, SerializationContext(topic, MessageField.VALUE))
    assert framed[0] == 0 and framed[5:6] == b"{"  # confluent-kafka's own framing of a JSON value
    mapping = Mapping((Column("id", "long", ("id",)), Column("tag", "string", ("tag",))))
    raw = RawBatch([0, 0], [0, 1], [1, 1], [None, None], [framed, b'{"id": 8, "tag": "y"}'], [None, None])
    decoded = decode_batch(raw, mapping, 1000, fmt=JsonFormat())
    assert decoded.target.select(["id", "tag"]).to_pylist() == [{"id": 7, "tag": "x"}, {"id": 8, "tag": "y"}]


def test_headers_are_grouped_by_their_bytes_and_malformed_ones_named():
    one = b"\x00\x00\x00\x00\x01"
    two = b"\x00\x00\x00\x00\x02"
    values = [one + b"a", two + b"b", b"\x05junk", one + b"c", b"\x00", two + b"d"]
    groups, bad = wire.grouped(values, list(range(len(values))), wire.avro_header)
    assert groups == [((1,), 5, [0, 3]), ((2,), 5, [1, 5])]
    assert [i for i, _ in bad] == [2, 4] and "magic byte 5" in bad[0][1] and "too short" in bad[1][1]
    # Protobuf's first message type, written as the shorthand 0 or in full: one key, two starts.
    short, full = one + b"\x00", one + b"\x02\x00"  # [0]: the shorthand, or a count of 1 and index 0
    groups, _ = wire.grouped([short + b"p", full + b"q"], [0, 1], wire.protobuf_header)
    assert groups == [((1, (0,)), 6, [0]), ((1, (0,)), 7, [1])]
    # Many distinct headers (garbage, mostly) are read one by one past the first few groups.
    many = [b"\x00" + i.to_bytes(4, "big") + b"x" for i in range(wire.MAX_GROUPS + 10)]
    groups, bad = wire.grouped(many, list(range(len(many))), wire.avro_header)
    assert [g[0] for g in groups] == [(i,) for i in range(len(many))] and not bad


def test_many_protobuf_messages_parse_as_one_and_a_bad_one_is_set_apart():
    from appliance.decode import protobuf_batch
    from appliance.decode.protobuf_batch import batch_class, parse_many

    from proto_helpers import F, message_class, proto_file

    proto_file("floe_test/batch.proto", "floe_test", {"Item": [("n", 1, F.TYPE_INT64), ("s", 2, F.TYPE_STRING)]})
    item = message_class("floe_test.Item")
    batch = batch_class(item.DESCRIPTOR)
    assert batch is not None
    header = b"\x00\x00\x00\x00\x09\x00"
    values = [header + item(n=i, s="x" * (20_000 if i == 3 else i)).SerializeToString() for i in range(10)]
    values[6] = header + b"\xff\xff\xff"  # not a message: a bad tag
    rejected = []
    good, messages = parse_many(item, batch, list(range(10)), len(header), values,
                                lambda i, why: rejected.append(i))
    assert good == [0, 1, 2, 3, 4, 5, 7, 8, 9] and rejected == [6]
    assert [m.n for m in messages] == good and len(messages[3].s) == 20_000  # a 20 KB payload framed too
    # Chunks smaller than the batch: the bad one's chunk is parsed one by one, the others at once.
    original, protobuf_batch.CHUNK = protobuf_batch.CHUNK, 4
    try:
        again = parse_many(item, batch, list(range(10)), len(header), values, lambda i, why: None)
    finally:
        protobuf_batch.CHUNK = original
    assert again[0] == good and [m.n for m in again[1]] == good


def test_protobuf_values_keep_the_batch_order_across_headers(local_registry, topic):
    from proto_helpers import F, message_class, proto_file, protobuf_serializer

    proto_file("floe_test/order_kept.proto", "floe_test", {"Kept": [("n", 1, F.TYPE_INT64)]})
    kept = message_class("floe_test.Kept")
    serialize = protobuf_serializer(local_registry, kept, topic)
    short = [serialize(kept(n=i)) for i in range(6)]
    assert short[0][5] == 0  # the serializer writes index [0] as the shorthand
    values = [v if i % 2 == 0 else v[:5] + b"\x02\x00" + v[6:] for i, v in enumerate(short)]  # and in full
    fmt = ProtobufFormat(RegistrySettings.create(local_registry.url))
    parsed = fmt.parse(values, 1000, Mapping((Column("n", "long", ("n",)),)))
    assert parsed.good == list(range(6)) and not parsed.bad
    assert parsed.values([Column("n", "long", ("n",))]) == [list(range(6))]


def test_values_no_column_can_hold_are_dead_lettered_never_raised():
    mapping = Mapping((Column("id", "long", ("id",)), Column("amount", "decimal(10,2)", ("amount",))))
    values = [b'{"id": 1, "amount": 1e100}', b'{"id": 2, "amount": "1e400"}', b'{"id": 3, "amount": 2.5}']
    raw = RawBatch([0] * 3, [0, 1, 2], [1] * 3, [None] * 3, values, [None] * 3)
    decoded = decode_batch(raw, mapping, 1000, fmt=JsonFormat())
    assert decoded.target.column("id").to_pylist() == [3]
    assert decoded.dead_letter.column("error_stage").to_pylist() == ["convert", "convert"]


def test_protobuf_timestamps_out_of_range_are_dead_lettered_with_their_reason(local_registry, topic):
    from proto_helpers import F, message_class, proto_file, protobuf_serializer

    proto_file("floe_test/times.proto", "floe_test", {
        "Inner": [("at", 1, F.TYPE_MESSAGE, None, ".google.protobuf.Timestamp")],
        "Times": [("id", 1, F.TYPE_INT64), ("at", 2, F.TYPE_MESSAGE, None, ".google.protobuf.Timestamp"),
                  ("ats", 3, F.TYPE_MESSAGE, F.LABEL_REPEATED, ".google.protobuf.Timestamp"),
                  ("inners", 4, F.TYPE_MESSAGE, F.LABEL_REPEATED, ".floe_test.Inner")]},
        deps=("google/protobuf/timestamp.proto",))
    times = message_class("floe_test.Times")
    serialize = protobuf_serializer(local_registry, times, topic)
    good = times(id=1)
    good.at.seconds = 1_700_000_000
    too_late = times(id=2)
    too_late.at.seconds = 10**13  # would wrap around in microseconds
    in_list = times(id=3)
    in_list.ats.add(seconds=-10**12)
    in_json = times(id=4)
    in_json.inners.add().at.seconds = 10**13
    values = [serialize(m) for m in (good, too_late, in_list, in_json)]
    fmt = ProtobufFormat(RegistrySettings.create(local_registry.url))
    key = wire.protobuf_header(values[0])[0]
    mapping = Mapping(fmt.build(key).layout.columns)
    assert [(c.name, c.type) for c in mapping.columns] == [
        ("id", "long"), ("at", "timestamptz"), ("ats", "list<timestamptz>"), ("inners", "json")]
    raw = RawBatch([0] * 4, [0, 1, 2, 3], [1] * 4, [None] * 4, values, [None] * 4)
    decoded = decode_batch(raw, mapping, 1000, fmt=fmt)
    assert decoded.target.column("id").to_pylist() == [1]
    assert str(decoded.target.column("at")[0].as_py()) == "2023-11-14 22:13:20+00:00"
    dead = decoded.dead_letter.select(["_kafka_offset", "error_stage", "error_message"]).to_pylist()
    assert [(d["_kafka_offset"], d["error_stage"]) for d in dead] == [(1, "convert"), (2, "convert"), (3, "convert")]
    assert "outside google.protobuf.Timestamp's range" in dead[0]["error_message"]
    assert "outside google.protobuf.Timestamp's range" in dead[1]["error_message"]
    assert "cannot be written as JSON" in dead[2]["error_message"]


class _FailsOnBoom(JsonFormat):
    """A format with a bug that one message sets off, as any decoder's could."""

    def parse(self, values, max_message_bytes, mapping):
        if any(v and b"boom" in v for v in values):
            raise ZeroDivisionError("division by zero")
        return super().parse(values, max_message_bytes, mapping)


def test_a_message_that_makes_decoding_fail_is_dead_lettered_alone_and_the_rest_land():
    mapping = Mapping((Column("id", "long", ("id",)),))
    values = [orjson.dumps({"id": i}) for i in range(40)]
    values[13] = b'{"id": 13, "boom": 1}'
    values[29] = b'{"boom": 2}'
    raw = RawBatch([0] * 40, list(range(40)), [1] * 40, [None] * 40, values, [None] * 40)
    decoded = decode_batch(raw, mapping, 1000, fmt=_FailsOnBoom())
    assert decoded.target.column("id").to_pylist() == [i for i in range(40) if i not in (13, 29)]
    dead = decoded.dead_letter.select(["_kafka_offset", "error_message"]).to_pylist()
    assert [d["_kafka_offset"] for d in dead] == [13, 29]
    assert dead[0]["error_message"].startswith("Floe failed to decode this message (ZeroDivisionError")
