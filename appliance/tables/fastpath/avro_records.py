"""An Avro record schema compiled into an encoder of its records: the bytes fastavro's `schemaless_writer` makes,
for the types a manifest's data file record holds, at a fraction of its cost.

A trickle's commit encodes its data file's record once or twice (the new manifest's entry; the dead letters'):
fastavro spends about 190 us on one of 12 columns, most of it telling each union's branch by `isinstance` against
abstract classes (40 of them a record). Here each field's encoder is chosen once per schema, and a value of a type
it does not expect raises `Unusual`, for the caller to encode that record with fastavro: what fastavro would do
with such a value (a `datetime.date` in a date field, an int in a double) stays fastavro's to decide.
tests/test_avro_records.py checks the bytes against fastavro's, type by type and on real data files.
"""

from __future__ import annotations

import struct
from typing import Any, Callable

from appliance.core.avrofile import avro_long

Encoder = Callable[[Any, list], None]  # appends the value's bytes to the list

# Logical types whose values Floe hands over in their Avro form (a date as days, a timestamp as micros; a map as
# its array of key-value records). Any other (decimal, uuid, fixed...) is left to fastavro for the whole schema.
_PLAIN_LOGICAL = {None, "map", "date", "time-millis", "time-micros", "timestamp-millis", "timestamp-micros",
                  "timestamp-nanos", "local-timestamp-millis", "local-timestamp-micros", "local-timestamp-nanos"}


class Unusual(Exception):
    """A value this encoder does not take as it is: encode the record with fastavro."""


def compile_record(schema: dict) -> Encoder | None:
    """The encoder of `schema`'s records (a record schema as JSON, not fastavro-parsed), or None when it holds a
    type left to fastavro."""
    try:
        return _encoder(schema)
    except _Unsupported:
        return None


def encode(encoder: Encoder, record: Any) -> bytes:
    out: list = []
    encoder(record, out)
    return b"".join(out)


class _Unsupported(Exception):
    pass


def _encoder(schema: Any) -> Encoder:
    if isinstance(schema, list):
        return _union(schema)
    if isinstance(schema, str):
        schema = {"type": schema}
    if schema.get("logicalType") not in _PLAIN_LOGICAL:
        raise _Unsupported
    kind = schema["type"]
    if isinstance(kind, (dict, list)):
        return _encoder(kind)
    if kind == "record":
        return _record(schema)
    if kind == "array":
        return _array(_encoder(schema["items"]))
    found = _PRIMITIVES.get(kind)
    if found is None:
        raise _Unsupported
    return found


def _record(schema: dict) -> Encoder:
    fields = [(f["name"], f.get("default"), "default" in f or _nullable(f["type"]), _encoder(f["type"]))
              for f in schema["fields"]]

    def record(value: Any, out: list) -> None:
        if type(value) is not dict or "-type" in value:
            raise Unusual  # fastavro reads "-type" as the name of a union's record
        for name, default, optional, field in fields:
            if name not in value and not optional:
                raise Unusual  # fastavro raises its own error
            field(value.get(name, default), out)
    return record


def _nullable(kind: Any) -> bool:
    return isinstance(kind, list) and "null" in kind


def _union(branches: list) -> Encoder:
    if len(branches) != 2 or "null" not in branches:
        raise _Unsupported
    null = branches.index("null")
    other = 1 - null
    inner = _encoder(branches[other])
    null_tag, other_tag = avro_long(null), avro_long(other)

    def union(value: Any, out: list) -> None:
        if value is None:
            out.append(null_tag)
        else:
            out.append(other_tag)
            inner(value, out)
    return union


def _array(items: Encoder) -> Encoder:
    def array(value: Any, out: list) -> None:
        if type(value) is not list:
            raise Unusual  # fastavro reads a tuple in a union as (branch, value)
        if value:
            out.append(avro_long(len(value)))
            for item in value:
                items(item, out)
        out.append(b"\x00")
    return array


def _long(value: Any, out: list) -> None:
    if type(value) is not int or not -2**63 <= value < 2**63:
        raise Unusual  # a bool, a date, a float, more than 64 bits...
    out.append(avro_long(value))


def _int(value: Any, out: list) -> None:
    if type(value) is not int or not -2**31 <= value < 2**31:
        raise Unusual
    out.append(avro_long(value))


def _string(value: Any, out: list) -> None:
    if type(value) is not str:
        raise Unusual
    data = value.encode()
    out.append(avro_long(len(data)))
    out.append(data)


def _bytes(value: Any, out: list) -> None:
    if type(value) is not bytes:
        raise Unusual
    out.append(avro_long(len(value)))
    out.append(value)


def _boolean(value: Any, out: list) -> None:
    if type(value) is not bool:
        raise Unusual
    out.append(b"\x01" if value else b"\x00")


def _double(value: Any, out: list) -> None:
    if type(value) is not float:
        raise Unusual
    out.append(struct.pack("<d", value))


def _float(value: Any, out: list) -> None:
    if type(value) is not float:
        raise Unusual
    try:
        out.append(struct.pack("<f", value))
    except OverflowError:  # beyond a float's range: fastavro's to decide
        raise Unusual from None


def _null(value: Any, out: list) -> None:
    if value is not None:
        raise Unusual


_PRIMITIVES: dict[str, Encoder] = {"int": _int, "long": _long, "string": _string, "bytes": _bytes,
                                   "boolean": _boolean, "double": _double, "float": _float, "null": _null}
