"""Fast tests of mapped columns read from the Kafka key and headers: the sources as a mapping writes them,
`--kafka-columns`, a batch's values from keys and headers (JSON and registry-encoded keys), their dead
letters, upsert keys and tombstones keyed by them, and the key's fields proposed by inference."""

from __future__ import annotations

import tomllib

import orjson
import pytest

from appliance.core.errors import MappingError
from appliance.decode.keys import Keyed
from appliance.decode.registered import AvroFormat, ProtobufFormat
from appliance.decode.rows import decode_batch
from appliance.kafka.records import RawBatch
from appliance.kafka.settings import RegistrySettings
from appliance.model.columns import HEADERS_TYPE
from appliance.model.kafka_columns import parse_kafka_columns, with_kafka_columns, with_key_fields
from appliance.model.mapping import Column, Mapping
from appliance.model.sources import describe, parse_source, source_text
from appliance.model.types import of_iceberg, parse_type
from appliance.standins.registry import EmbeddedRegistry
from appliance.tables.iceberg_schemas import target_iceberg_schema

from proto_helpers import avro_serializer

MAPPING = Mapping.from_toml('''
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
''')


def batch(values, keys, headers) -> RawBatch:
    n = len(values)
    return RawBatch(partitions=[0] * n, offsets=list(range(n)), timestamps=[1_700_000_000_000] * n,
                    keys=keys, values=values, headers=headers)


@pytest.mark.parametrize("text, path", [
    ("customer.id", ("customer", "id")), ("@key", ("", "key")), ("@key.id", ("", "key", "id")),
    ("@key.a.b", ("", "key", "a", "b")), ("@header.tenant", ("", "header", "tenant")),
    ("@header.trace.id", ("", "header", "trace.id")), ("@headers", ("", "headers")),
])
def test_sources_parse_and_print_back(text, path):
    assert parse_source(text) == path
    assert source_text(path) == text and describe(path) == text


@pytest.mark.parametrize("text", ["@nope", "@key.", "@header", "@headers.x", "@key..id", "@"])
def test_an_unknown_kafka_source_says_what_is_allowed(text):
    with pytest.raises(MappingError, match=r"must be @key, @key\.FIELD, @header\.NAME or @headers"):
        parse_source(text)
    toml = f'[[columns]]\nname = "x"\ntype = "string"\nsource = "{text}"\n'
    with pytest.raises(MappingError, match=r"^mapping: column 'x': source '.*': a source starting with @ must be"):
        Mapping.from_toml(toml)


def test_a_value_field_named_with_an_at_sign_is_written_as_a_list_and_read_back():
    mapping = Mapping((Column("type", "string", ("@type",)), Column("k", "string", parse_source("@key"))))
    text = mapping.to_toml()
    assert [c["source"] for c in tomllib.loads(text)["columns"]] == [["@type"], "@key"]
    assert Mapping.from_toml(text) == mapping


def test_the_headers_type_goes_with_the_headers_source_only():
    with pytest.raises(MappingError, match="only @headers fills a column of type headers"):
        Mapping((Column("h", "headers", ("h",)),))
    with pytest.raises(MappingError, match="only @headers fills a column of type headers"):
        Mapping((Column("h", "string", parse_source("@headers")),))
    assert parse_type("headers").arrow == HEADERS_TYPE


def test_kafka_columns_option_parses_and_names_the_allowed_values():
    assert parse_kafka_columns("headers, key") == ("key", "headers")
    assert parse_kafka_columns("key") == ("key",)
    assert parse_kafka_columns(None) == ()
    with pytest.raises(MappingError, match=r"^kafka columns 'foo' not allowed: use key, headers or key,headers$"):
        parse_kafka_columns("key,foo")
    mapping = with_kafka_columns(Mapping((Column("a", "long", ("a",)),)), ("key", "headers"))
    assert [(c.name, c.type, describe(c.source)) for c in mapping.columns] == [
        ("a", "long", "a"), ("_kafka_key", "binary", "@key"), ("_kafka_headers", "headers", "@headers")]
    # the table's schema: a list of key/value structs, read back as the headers type
    schema = target_iceberg_schema(mapping)
    assert of_iceberg(schema.find_field("_kafka_headers").field_type).name == "headers"
    assert Mapping.from_toml(mapping.to_toml()) == mapping


def test_key_and_header_bytes_land_exactly_and_key_fields_and_headers_fill_columns():
    mapping = with_kafka_columns(MAPPING, ("key", "headers"))
    key = orjson.dumps({"id": 7})
    headers = [("tenant", b"acme"), ("bin", b"\xff\x00\xfe"), ("tenant", b"globex"), ("empty", None)]
    out = decode_batch(batch([orjson.dumps({"amount": 1.5})], [key], [headers]), mapping, 1000)
    assert out.dead_letter.num_rows == 0
    row = out.target.to_pylist()[0]
    assert row["id"] == 7 and row["amount"] == 1.5
    assert row["tenant"] == "globex"  # the last header of the name, as Kafka's lastHeader reads it
    assert row["_kafka_key"] == key
    assert row["_kafka_headers"] == [{"key": k, "value": v} for k, v in headers]
    assert out.target.schema.field("_kafka_headers").type == HEADERS_TYPE


def test_unreadable_keys_and_headers_are_dead_letters_naming_their_source():
    values = [orjson.dumps({"amount": i}) for i in range(5)]
    keys = [b'{"id": 1}', b'{"id": "abc"}', b"not json", None, b'{"id": 5}']
    headers = [[("tenant", b"a")], [("tenant", b"b")], [("tenant", b"c")], None, [("tenant", b"\xff")]]
    out = decode_batch(batch(values, keys, headers), MAPPING, 1000)
    rows = out.target.to_pylist()
    assert [(r["id"], r["tenant"]) for r in rows] == [(1, "a"), (None, None)]  # a missing key or header: null
    reasons = dict(zip(out.dead_letter.column("_kafka_offset").to_pylist(),
                       zip(out.dead_letter.column("error_stage").to_pylist(),
                           out.dead_letter.column("error_message").to_pylist())))
    assert reasons[1] == ("schema", "field @key.id: a string ('abc') where column 'id' is long")
    assert reasons[2][0] == "decode" and reasons[2][1].startswith("@key.id: the Kafka key is not JSON")
    assert reasons[4] == ("decode", "column 'tenant': @header.tenant is not UTF-8 text "
                                    "(invalid start byte at byte 0)")
    assert out.dead_letter.column("raw_key").to_pylist() == [keys[1], keys[2], keys[4]]


def test_an_upsert_key_from_the_key_and_a_header_dead_letters_a_message_without_the_header():
    values = [orjson.dumps({"amount": 1}), orjson.dumps({"amount": 2}), orjson.dumps({"amount": 3}), None, None]
    keys = [b'{"id": 1}', b'{"id": 1}', b'{"id": 2}', b'{"id": 1}', b'{"id": 9}']
    headers = [[("tenant", b"a")], [("tenant", b"a")], None, [("tenant", b"a")], None]
    out = decode_batch(batch(values, keys, headers), MAPPING, 1000, keyed=Keyed(("tenant", "id")))
    assert out.target.num_rows == 0  # key (a, 1) is deleted by its tombstone, the newest message
    assert out.deleted.select(["tenant", "id"]).to_pylist() == [{"tenant": "a", "id": 1}]
    reasons = dict(zip(out.dead_letter.column("_kafka_offset").to_pylist(),
                       out.dead_letter.column("error_message").to_pylist()))
    assert reasons == {
        2: "key column 'tenant' is null (source @header.tenant has no value): the row has no key",
        4: "tombstone's @header.tenant is missing: it names no row to delete",
    }


@pytest.fixture(scope="module")
def served():
    registry = EmbeddedRegistry()
    yield registry
    registry.close()


def test_a_registry_encoded_key_is_read_as_values_are(served, topic):
    key_schema = {"type": "record", "name": "K", "fields": [{"name": "id", "type": "long"}]}
    value_schema = {"type": "record", "name": "V", "fields": [{"name": "amount", "type": "double"}]}
    keys = [avro_serializer(served, key_schema, topic + "-key")({"id": i}) for i in range(3)] + [b"\0\0\0\x7f\xff"]
    values = [avro_serializer(served, value_schema, topic)({"amount": i / 2}) for i in range(4)]
    fmt = AvroFormat(RegistrySettings.create(served.url))
    out = decode_batch(batch(values, keys, [None] * 4), MAPPING, 1000, fmt=fmt)
    assert [(r["id"], r["amount"]) for r in out.target.to_pylist()] == [(0, 0.0), (1, 0.5), (2, 1.0)]
    [reason] = out.dead_letter.column("error_message").to_pylist()
    assert reason.startswith("@key.id: the Kafka key does not decode: schema id 32767 is not in the schema registry")


def test_inference_proposes_the_key_fields_the_value_lacks_named_apart_from_value_columns():
    value = Mapping((Column("id", "long", ("id",)), Column("user_id", "string", ("user", "id"))))
    keys = [{"id": 1, "user_id": 5, "region": {"code": "eu"}}, {"id": 2, "user_id": 6, "region": {"code": "us"}}]
    mapping = with_key_fields(value, keys + [None, "bare"])
    extra = [(c.name, c.type, describe(c.source)) for c in mapping.columns[2:]]
    assert extra == [("key_user_id", "long", "@key.user_id"), ("region_code", "string", "@key.region.code")]
    assert with_key_fields(value, [None, 3, "x"]) == value


def test_a_batch_without_kafka_sources_reads_only_the_value():
    # the common path is untouched: the format gets the mapping itself, and no key is looked at
    seen = []

    class Spy:
        name = "json"

        def parse(self, values, max_message_bytes, mapping):
            from appliance.decode.json_format import JsonFormat
            seen.append(mapping)
            return JsonFormat().parse(values, max_message_bytes, mapping)

    plain = Mapping((Column("amount", "double", ("amount",)),))
    decode_batch(batch([b'{"amount": 1}'], [b"\xff"], [None]), plain, 1000, fmt=Spy())
    assert seen == [plain]
    decode_batch(batch([b'{"amount": 1}'], [b'{"id": 1}'], [None]), MAPPING, 1000, fmt=Spy())
    assert [c.name for c in seen[1].columns] == ["amount"]


def test_protobuf_values_with_a_protobuf_key_a_header_and_the_kafka_columns(served, topic):
    from proto_helpers import F, message_class, proto_file, protobuf_serializer

    proto_file("floe_test/kafka_sources.proto", "floe_test", {
        "SourceKey": [("id", 1, F.TYPE_INT64)], "SourceValue": [("amount", 1, F.TYPE_DOUBLE)]})
    key_type, value_type = message_class("floe_test.SourceKey"), message_class("floe_test.SourceValue")
    keys = [protobuf_serializer(served, key_type, topic + "-k")(key_type(id=i)) for i in range(3)]
    values = [protobuf_serializer(served, value_type, topic)(value_type(amount=i + 0.5)) for i in range(3)]
    mapping = with_kafka_columns(MAPPING, ("key", "headers"))
    fmt = ProtobufFormat(RegistrySettings.create(served.url))
    headers = [[("tenant", b"t%d" % i)] for i in range(3)]
    out = decode_batch(batch(values, keys, headers), mapping, 1000, fmt=fmt)
    assert out.dead_letter.num_rows == 0
    assert [(r["id"], r["tenant"], r["amount"], r["_kafka_key"]) for r in out.target.to_pylist()] == [
        (i, f"t{i}", i + 0.5, keys[i]) for i in range(3)]


def test_debezium_avro_events_keyed_by_an_avro_key_field(served, topic):
    from appliance.decode.debezium import DebeziumFormat

    row = {"type": "record", "name": "Row", "fields": [{"name": "name", "type": ["null", "string"]}]}
    envelope = {"type": "record", "name": "Envelope", "fields": [
        {"name": "before", "type": ["null", row], "default": None},
        {"name": "after", "type": ["null", "Row"], "default": None}, {"name": "op", "type": "string"}]}
    serialize = avro_serializer(served, envelope, topic)
    key_of = avro_serializer(served, {"type": "record", "name": "Key", "fields": [{"name": "id", "type": "long"}]},
                             topic + "-key")
    events = [("c", None, {"name": "a"}), ("u", {"name": "a"}, {"name": "b"}), ("d", {"name": "b"}, None)]
    values = [serialize({"op": op, "before": before, "after": after}) for op, before, after in events]
    keys = [key_of({"id": 1}), key_of({"id": 2}), key_of({"id": 1})]
    mapping = with_kafka_columns(Mapping.from_toml(
        '[[columns]]\nname = "id"\ntype = "long"\nsource = "@key.id"\n'
        '[[columns]]\nname = "name"\ntype = "string"\nsource = "name"\n'), ("key",))
    fmt = DebeziumFormat(AvroFormat(RegistrySettings.create(served.url)), ("id",))
    out = decode_batch(batch(values, keys, [None] * 3), mapping, 1000, fmt=fmt,
                       keyed=Keyed(("id",), tombstones_delete=False))
    assert out.dead_letter.num_rows == 0
    assert [(r["id"], r["name"], r["_kafka_key"]) for r in out.target.to_pylist()] == [(2, "b", keys[1])]
    assert out.deleted.column("id").to_pylist() == [1]


def test_the_stream_detail_says_which_kafka_columns_the_table_keeps():
    from appliance.views.streams import SourceView
    from tui.screens.stream_detail import source_text as detail_source

    view = SourceView("json", "", {}, "", "auto", (), "append", ("key", "headers"))
    assert "kafka columns [b]key, headers[/b]" in detail_source(view)
    assert "kafka columns" not in detail_source(SourceView("json", "", {}, "", "auto", ()))


def test_a_mapping_floe_stored_before_kafka_sources_keeps_its_at_sign_value_fields():
    # Before sources starting with @ named the key and headers, an inferred JSON-LD field was saved so.
    old = '[[columns]]\nname = "type"\ntype = "string"\nsource = "@type"\n'
    assert Mapping.from_toml(old, stored=True).columns[0].source == ("@type",)
    with pytest.raises(MappingError, match=r"""write.*\['@type'\]|as a list: \['@type'\]"""):
        Mapping.from_toml(old)
