import datetime as dt

import orjson
import pytest

from appliance.decode.rows import decode_batch
from appliance.kafka.records import RawBatch
from appliance.model.columns import DEAD_LETTER_SCHEMA
from appliance.model.mapping import Column, Mapping

UTC = dt.timezone.utc
MAPPING = Mapping((
    Column("id", "long", ("id",)),
    Column("amount", "double", ("amount",)),
    Column("ok", "boolean", ("ok",)),
    Column("name", "string", ("customer", "name")),
    Column("at", "timestamptz", ("at",)),
    Column("day", "date", ("day",)),
    Column("extra", "json", ("extra",)),
))


def batch(values, headers=None) -> RawBatch:
    n = len(values)
    return RawBatch(
        partitions=[1] * n, offsets=list(range(100, 100 + n)), timestamps=[1_700_000_000_000] * n,
        keys=[f"k{i}".encode() for i in range(n)], values=values, headers=headers or [None] * n,
    )


def test_good_messages_become_typed_rows():
    values = [orjson.dumps({"id": 1, "amount": 2, "ok": True, "customer": {"name": "Ada"},
                            "at": "2024-05-01T12:00:00+02:00", "day": "2024-05-01", "extra": {"a": [1]}})]
    out = decode_batch(batch(values), MAPPING, 1000, dt.datetime(2026, 1, 1, tzinfo=UTC))
    assert out.dead_letter.num_rows == 0
    assert out.target.schema == MAPPING.arrow_schema()
    row = out.target.to_pylist()[0]
    assert row["id"] == 1 and row["amount"] == 2.0 and row["ok"] is True and row["name"] == "Ada"
    assert row["at"] == dt.datetime(2024, 5, 1, 10, 0, tzinfo=UTC)
    assert row["day"] == dt.date(2024, 5, 1)
    assert row["extra"] == '{"a":[1]}'
    assert row["_kafka_partition"] == 1 and row["_kafka_offset"] == 100
    assert row["_kafka_timestamp"] == dt.datetime.fromtimestamp(1_700_000_000, UTC)
    assert row["_ingested_at"] == dt.datetime(2026, 1, 1, tzinfo=UTC)


def test_lenient_casts_that_lose_nothing_are_accepted():
    values = [orjson.dumps({"id": "42", "amount": "1.5", "ok": "false", "customer": {"name": 7},
                            "at": "2024-05-01 12:00:00", "day": 19844}),
              orjson.dumps({"id": 3.0, "at": 1_700_000_000_000})]
    out = decode_batch(batch(values), MAPPING, 1000)
    assert out.dead_letter.num_rows == 0
    a, b = out.target.to_pylist()
    assert (a["id"], a["amount"], a["ok"], a["name"]) == (42, 1.5, False, "7")
    assert a["at"] == dt.datetime(2024, 5, 1, 12, tzinfo=UTC) and a["day"] == dt.date(2024, 5, 1)
    assert b["id"] == 3 and b["at"] == dt.datetime.fromtimestamp(1_700_000_000, UTC)


@pytest.mark.parametrize(
    "value, stage, message",
    [
        (b"{not json", "decode", "invalid JSON"),
        (b'"just a string"', "decode", "JSON value is a string, not an object"),
        (b"[1, 2]", "decode", "JSON value is an array, not an object"),
        (b"42", "decode", "JSON value is a number, not an object"),
        (b'{"name": "caf\xe9"}', "decode", "invalid UTF-8"),
        (b"", "validate", "empty message"),
        (None, "validate", "empty message"),
        (b'{"pad": "' + b"x" * 200 + b'"}', "validate", "exceeds max_message_bytes"),
        # A value of another kind is a change of the source's schema; one of the right kind that
        # does not fit is bad data.
        (b'{"id": "abc"}', "schema", "field id: a string ('abc') where column 'id' is long"),
        (b'{"id": 1.5}', "convert", "column 'id' (long): cannot convert 1.5"),
        (b'{"id": true}', "schema", "field id: a boolean (true) where column 'id' is long"),
        (b'{"id": 99999999999999999999}', "convert", "column 'id' (long)"),
        (b'{"amount": [1]}', "schema", "field amount: an array ([1]) where column 'amount' is double"),
        (b'{"ok": 1}', "schema", "field ok: an integer (1) where column 'ok' is boolean"),
        (b'{"at": "yesterday"}', "convert", "column 'at' (timestamptz)"),
        (b'{"day": "2024-13-45"}', "convert", "column 'day' (date)"),
    ],
)
def test_bad_messages_go_to_the_dead_letter_rows_with_their_bytes_and_reason(value, stage, message):
    good = orjson.dumps({"id": 7})
    out = decode_batch(batch([good, value, good], headers=[None, [("h", b"v")], None]), MAPPING, 100)
    assert out.target.column("_kafka_offset").to_pylist() == [100, 102]
    assert out.dead_letter.schema == DEAD_LETTER_SCHEMA
    dead = out.dead_letter.to_pylist()
    assert len(dead) == 1
    assert dead[0]["_kafka_offset"] == 101 and dead[0]["_kafka_partition"] == 1
    assert dead[0]["raw_value"] == value and dead[0]["raw_key"] == b"k1"
    assert dead[0]["headers"] == [{"key": "h", "value": b"v"}]
    assert dead[0]["error_stage"] == stage
    assert message in dead[0]["error_message"]


def test_every_message_lands_once_in_a_mixed_batch():
    values = []
    for i in range(3000):
        values.append(orjson.dumps({"id": i}) if i % 10 else [b"{", b"[]", b'{"id": "x"}', b""][i % 4])
    out = decode_batch(batch(values), MAPPING, 1000)
    offsets = out.target.column("_kafka_offset").to_pylist() + out.dead_letter.column("_kafka_offset").to_pylist()
    assert sorted(offsets) == list(range(100, 3100))
    assert out.dead_letter.num_rows == 300


@pytest.mark.parametrize("millis", [[1_700_000_000_123, None, -1, 0], [1_700_000_000_000 + i for i in range(300)],
                                    [2**62, 5]])
def test_a_batchs_kafka_timestamps_convert_as_arrows_multiply_does_small_or_large(millis):
    import pyarrow as pa
    import pyarrow.compute as pc

    from appliance.decode.rows import UTC_MICROS, _millis_to_ts

    # Arrow's multiply, which every batch went through before small ones were converted in Python (and which a
    # timestamp past 64 bits of microseconds still takes: wrapped, not an error)
    expected = pc.multiply(pa.array(millis, pa.int64()), 1000).cast(UTC_MICROS)
    assert _millis_to_ts(millis).equals(expected)


def test_a_column_already_of_its_type_is_the_array_arrow_inferred_and_the_rows_schema_is_made_once():
    values = [orjson.dumps({"id": i, "amount": i / 2, "ok": i % 2 == 0, "customer": {"name": f"n{i}"},
                            "at": "2024-05-01T12:00:00+02:00", "day": "2024-05-01", "extra": [i]}) for i in range(4)]
    mapping = Mapping(MAPPING.columns)
    at = dt.datetime(2026, 1, 1, tzinfo=UTC)
    first, second = (decode_batch(batch(values), mapping, 1000, at) for _ in range(2))
    assert first.target.equals(second.target) and first.target.schema == mapping.arrow_schema()
    assert first.target.column("id").to_pylist() == [0, 1, 2, 3]
    assert first.target.column("amount").to_pylist() == [0.0, 0.5, 1.0, 1.5]
    assert mapping.arrow_schema() is mapping.arrow_schema() and mapping == Mapping(MAPPING.columns)
    assert hash(mapping) == hash(Mapping(MAPPING.columns))
