"""`tables/fastpath/avro_records`: a record schema's encoder makes fastavro's bytes, type by type, on the data file
records of Floe's manifests, and leaves to fastavro what it does not take as it is."""

from __future__ import annotations

import datetime as dt
import io
import json
import math
import random

import fastavro
import pyarrow as pa
import pytest
from pyiceberg.partitioning import UNPARTITIONED_PARTITION_SPEC, PartitionField, PartitionSpec
from pyiceberg.schema import Schema
from pyiceberg.transforms import DayTransform, IdentityTransform
from pyiceberg.types import DoubleType, LongType, NestedField, StringType, TimestamptzType

from appliance.config.settings import ensure_home, load_settings
from appliance.tables.catalog import Catalog
from appliance.tables.datafiles import TableTarget, write_data_files
from appliance.tables.fastpath import entries
from appliance.tables.fastpath.avro_records import Unusual, compile_record, encode
from appliance.tables.fastpath.entries import data_file_record, file_body
from appliance.tables.fastpath.manifests import Manifests

EVERY_TYPE = {"type": "record", "name": "r", "fields": [
    {"name": "i", "type": "int"},
    {"name": "l", "type": "long"},
    {"name": "s", "type": "string"},
    {"name": "b", "type": "bytes"},
    {"name": "t", "type": "boolean"},
    {"name": "d", "type": "double"},
    {"name": "f", "type": "float"},
    {"name": "day", "type": ["null", {"type": "int", "logicalType": "date"}], "default": None},
    {"name": "at", "type": [{"type": "long", "logicalType": "timestamp-micros"}, "null"]},
    {"name": "pairs", "type": ["null", {"type": "array", "logicalType": "map", "items": {
        "type": "record", "name": "kv", "fields": [{"name": "key", "type": "int"}, {"name": "value", "type": "bytes"}]}}],
     "default": None},
    {"name": "offsets", "type": ["null", {"type": "array", "items": "long"}], "default": None},
    {"name": "inner", "type": {"type": "record", "name": "in", "fields": [
        {"name": "x", "type": ["null", "string"], "default": None}]}},
]}


def a_table(schema: Schema, spec: PartitionSpec = UNPARTITIONED_PARTITION_SPEC):
    settings = load_settings()
    ensure_home(settings)
    catalog = Catalog(settings)
    catalog.iceberg.create_namespace("n")
    return catalog.iceberg.create_table("n.t", schema, partition_spec=spec)


def fastavro_bytes(schema: dict, record: dict) -> bytes:
    out = io.BytesIO()
    fastavro.schemaless_writer(out, fastavro.parse_schema(schema), record)
    return out.getvalue()


def a_record(rng: random.Random) -> dict:
    def some(make):
        return None if rng.random() < 0.3 else make()

    def long() -> int:
        return rng.choice([0, 1, -1, 63, 64, -64, -65, 2**31 - 1, -2**31, 2**62, -2**63, 2**63 - 1,
                           rng.randint(-2**63, 2**63 - 1)])
    return {
        "i": rng.choice([0, -1, 1, 2**31 - 1, -2**31, rng.randint(-2**31, 2**31 - 1)]),
        "l": long(),
        "s": rng.choice(["", "a", "é€😀", "x" * 200, "nul\x00byte"]),
        "b": bytes(rng.randrange(256) for _ in range(rng.choice([0, 1, 8, 130]))),
        "t": rng.random() < 0.5,
        "d": rng.choice([0.0, -0.0, 1.5, -2.25e300, math.inf, -math.inf, math.nan, rng.random()]),
        "f": rng.choice([0.0, 1.5, -3.25, math.inf, rng.random()]),
        "day": some(lambda: rng.randint(-100_000, 100_000)),
        "at": some(long),
        "pairs": some(lambda: [{"key": rng.randint(1, 2000), "value": bytes(rng.randrange(256) for _ in range(8))}
                               for _ in range(rng.choice([0, 1, 12, 70]))]),
        "offsets": some(lambda: [long() for _ in range(rng.choice([0, 1, 3, 130]))]),
        "inner": {"x": some(lambda: "y" * rng.randint(0, 70))},
    }


def test_every_type_encodes_as_fastavro_does():
    encoder = compile_record(EVERY_TYPE)
    assert encoder is not None
    rng = random.Random(7)
    for _ in range(2_000):
        record = a_record(rng)
        assert encode(encoder, record) == fastavro_bytes(EVERY_TYPE, record), record
    # A field left out takes its default, as fastavro's writer does.
    record = a_record(rng)
    del record["day"], record["offsets"]
    assert encode(encoder, record) == fastavro_bytes(EVERY_TYPE, record)
    # Keys the schema does not name are left out, as fastavro's writer leaves them.
    assert encode(encoder, {**record, "extra": object()}) == fastavro_bytes(EVERY_TYPE, record)
    # A required field missing: fastavro refuses it, so the encoder leaves it to fastavro.
    del record["s"]
    with pytest.raises(Unusual):
        encode(encoder, record)


@pytest.mark.parametrize("field, value", [
    ("i", 2**31), ("i", True), ("l", 1.0), ("l", dt.date(2026, 1, 1)), ("d", 1), ("s", b"bytes"),
    ("b", "text"), ("t", 1), ("day", dt.date(2026, 11, 28)), ("offsets", (x for x in [1])), ("f", 1e40),
    ("inner", None), ("l", 2**63), ("at", -2**63 - 1), ("offsets", (1, 2)), ("pairs", ("array", [])),
    ("inner", {"x": "y", "-type": "other"}),
])
def test_a_value_it_does_not_take_as_it_is_is_left_to_fastavro(field, value):
    record = a_record(random.Random(1))
    record[field] = value
    with pytest.raises(Unusual):
        encode(compile_record(EVERY_TYPE), record)


def test_a_schema_with_a_type_it_leaves_to_fastavro_has_no_encoder():
    for kind in [{"type": "fixed", "name": "f16", "size": 16},
                 {"type": "bytes", "logicalType": "decimal", "precision": 9, "scale": 2},
                 {"type": "string", "logicalType": "uuid"}, ["null", "int", "string"],
                 {"type": "map", "values": "long"}, {"type": "enum", "name": "e", "symbols": ["a"]}]:
        assert compile_record({"type": "record", "name": "r", "fields": [{"name": "x", "type": kind}]}) is None


def test_the_data_files_of_a_partitioned_table_encode_as_fastavro_does(floe_home):
    """Floe's manifests: a day and an identity partition (a null among them), each column's statistics."""
    schema = Schema(NestedField(1, "id", LongType(), required=False), NestedField(2, "name", StringType(), required=False),
                    NestedField(3, "amount", DoubleType(), required=False),
                    NestedField(4, "at", TimestamptzType(), required=False))
    spec = PartitionSpec(PartitionField(4, 1000, DayTransform(), "at_day"),
                         PartitionField(2, 1001, IdentityTransform(), "name"))
    table = a_table(schema, spec)
    files = write_data_files(TableTarget.of(table), pa.table({
        "id": [1, 2, 3, -4], "name": ["a", None, "a", "é"], "amount": [1.5, math.nan, None, -0.0],
        "at": pa.array([0, 86_400_000_000, None, -1], pa.timestamp("us", "UTC"))}))
    fmt = Manifests()._entry_format(table.metadata, table.metadata.spec())
    assert fmt.data_file_encoder is not None and len(files) >= 4  # the fast path is the one Floe's manifests take
    for f in files:
        whole = fastavro_bytes(json.loads(fmt.data_file_json), data_file_record(f, fmt.partition_names))
        assert file_body(fmt, f) == whole
        # A value it leaves to fastavro (a date object where the days are expected): fastavro's bytes still.
        f.partition[0] = None if f.partition[0] is None else dt.date(1970, 1, 1) + dt.timedelta(days=f.partition[0])
        assert file_body(fmt, f) == whole


def test_without_an_encoder_a_data_file_is_encoded_by_fastavro(floe_home, monkeypatch):
    monkeypatch.setattr(entries, "encode", lambda *a: pytest.fail("the encoder ran"))
    table = a_table(Schema(NestedField(1, "id", LongType(), required=False)))
    [f] = write_data_files(TableTarget.of(table), pa.table({"id": [1, 2]}))
    fmt = Manifests()._entry_format(table.metadata, table.metadata.spec())
    fastavro_only = entries.EntryFormat(**{**fmt.__dict__, "data_file_encoder": None})
    assert file_body(fastavro_only, f) == fastavro_bytes(json.loads(fmt.data_file_json),
                                                         data_file_record(f, fmt.partition_names))
