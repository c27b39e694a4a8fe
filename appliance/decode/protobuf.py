"""Protobuf: the columns a message type maps to, and the values of each column read from parsed messages.

Nested messages are flattened to snake_case columns (`customer.id` becomes `customer_id`);
`google.protobuf.Timestamp` is a timestamptz, the wrapper types nullable scalars, enums
their names, `uint64` a decimal(20,0) so that no value wraps; repeated fields are lists,
maps are maps, and the fields of a oneof nullable columns. Repeated messages and maps of
messages, which have no flat shape, are kept as JSON text.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from operator import attrgetter
from typing import Any, Callable

import orjson
import pyarrow as pa
import pyarrow.compute as pc

from appliance.decode.values import Invalid
from appliance.model.mapping import Column
from appliance.model.names import snake_case

UTC = dt.timezone.utc
EPOCH = dt.datetime(1970, 1, 1, tzinfo=UTC)

# FieldDescriptor.TYPE_* numbers -> column type
SCALARS = {
    1: "double", 2: "float", 3: "long", 4: "decimal(20,0)", 5: "int", 6: "decimal(20,0)", 7: "long", 8: "boolean",
    9: "string", 12: "binary", 13: "long", 14: "string", 15: "int", 16: "long", 17: "int", 18: "long",
}
TYPE_MESSAGE, TYPE_ENUM = 11, 14
TIMESTAMP = "google.protobuf.Timestamp"
WRAPPERS = {
    "google.protobuf.DoubleValue": "double", "google.protobuf.FloatValue": "float",
    "google.protobuf.Int64Value": "long", "google.protobuf.UInt64Value": "decimal(20,0)",
    "google.protobuf.Int32Value": "int", "google.protobuf.UInt32Value": "long",
    "google.protobuf.BoolValue": "boolean", "google.protobuf.StringValue": "string",
    "google.protobuf.BytesValue": "binary",
}


# google.protobuf.Timestamp's own range: 0001-01-01T00:00:00Z to 9999-12-31T23:59:59.999999999Z.
MIN_SECONDS, MAX_SECONDS = -62_135_596_800, 253_402_300_799


def _timestamp(ts: Any) -> dt.datetime | Invalid:
    seconds, nanos = ts.seconds, ts.nanos
    if not (MIN_SECONDS <= seconds <= MAX_SECONDS and 0 <= nanos < 1_000_000_000):
        return Invalid(f"timestamp of {seconds} s and {nanos} ns is outside google.protobuf.Timestamp's range")
    return EPOCH + dt.timedelta(seconds=seconds, microseconds=nanos // 1000)


def _same(value: Any) -> Any:
    return value


def _enum_name(field: Any) -> Callable[[int], str]:
    names = {v.number: v.name for v in field.enum_type.values}
    return lambda n: names.get(n, str(n))


def _as_json(message: Any) -> Any:
    from google.protobuf.json_format import MessageToDict

    return MessageToDict(message, preserving_proto_field_name=True)


def _json_text(to_json: Callable[[Any], Any]) -> Callable[[Any], str | Invalid]:
    """A collection as JSON text; one that protobuf cannot write as JSON (a timestamp out of range
    inside it, say) is bad data, its message dead-lettered."""
    def text(value: Any) -> str | Invalid:
        try:
            return orjson.dumps(to_json(value)).decode()
        except Exception as exc:  # noqa: BLE001 - json_format's own errors, of several kinds
            return Invalid(f"cannot be written as JSON: {exc}")
    return text


def _value_reader(field: Any) -> tuple[str | None, Callable[[Any], Any]]:
    """A singular field's column type and how a value of it becomes the column's value (None: flatten)."""
    if field.type == TYPE_ENUM:
        return "string", _enum_name(field)
    if field.type != TYPE_MESSAGE:
        return SCALARS[field.type], _same
    name = field.message_type.full_name
    if name == TIMESTAMP:
        return "timestamptz", _timestamp
    if name in WRAPPERS:
        return WRAPPERS[name], lambda v: v.value
    return None, lambda v: v


def _collection(field: Any) -> tuple[str, Callable[[Any], Any]]:
    """A repeated field's or a map's column type and value."""
    if field.message_type is not None and field.message_type.GetOptions().map_entry:
        key_field, value_field = field.message_type.fields_by_name["key"], field.message_type.fields_by_name["value"]
        key_type, read_key = _value_reader(key_field)
        value_type, read_value = _value_reader(value_field)
        if value_type is None:
            return "json", _json_text(lambda m: {str(k): _as_json(v) for k, v in m.items()})
        return f"map<{key_type},{value_type}>", lambda m: {read_key(k): read_value(v) for k, v in m.items()}
    element_type, read = _value_reader(field)
    if element_type is None:
        return "json", _json_text(lambda items: [_as_json(v) for v in items])
    return f"list<{element_type}>", lambda items: [read(v) for v in items]


@dataclass(frozen=True)
class Getter:
    """How one column's values are read from parsed messages: the attribute path, which steps of it
    may be unset (then the value is null), and what is done with the leaf."""

    path: tuple[str, ...]
    present: tuple[bool, ...]  # per step: whether an unset field there reads as null
    convert: Callable[[Any], Any] | None  # per value; None: as Protobuf gives it
    timestamps: bool = False  # google.protobuf.Timestamp leaves: converted all at once

    def values(self, messages: list[Any], parents: dict | None = None) -> list[Any] | pa.Array:
        """The column's values; `parents`, shared by the getters of one batch, keeps each top-level
        message field read once for all the columns under it."""
        leaves = self._leaves(messages, {} if parents is None else parents)
        if self.timestamps:
            return _timestamps(leaves)
        convert = self.convert
        if convert is None:
            return leaves
        return [None if v is None else convert(v) for v in leaves]

    def _leaves(self, messages: list[Any], parents: dict) -> list[Any]:
        get = attrgetter(".".join(self.path))
        checked = [i for i, check in enumerate(self.present) if check]
        if not checked:
            return list(map(get, messages))
        if checked == [0]:  # the common case: a top-level message (or optional field), then plain fields
            name = self.path[0]
            top = parents.get(name)
            if top is None:
                top = parents[name] = [getattr(m, name) if m.HasField(name) else None for m in messages]
            if len(self.path) == 1:
                return top
            rest = attrgetter(".".join(self.path[1:]))
            return [None if p is None else rest(p) for p in top]
        out = []
        for m in messages:
            node = m
            for name, check in zip(self.path, self.present):
                if check and not node.HasField(name):
                    node = None
                    break
                node = getattr(node, name)
            out.append(node)
        return out


def _timestamps(values: list[Any]) -> pa.Array | list[Any]:
    """Timestamp messages as one Arrow column, computed in Arrow rather than value by value; when
    one is out of range, value by value, so that only its message is dead-lettered."""
    seconds = pa.array([None if v is None else v.seconds for v in values], pa.int64())
    nanos = pa.array([None if v is None else v.nanos for v in values], pa.int64())
    spread, fractions = pc.min_max(seconds), pc.min_max(nanos)
    if spread["min"].is_valid and (spread["min"].as_py() < MIN_SECONDS or spread["max"].as_py() > MAX_SECONDS
                                   or fractions["min"].as_py() < 0 or fractions["max"].as_py() >= 1_000_000_000):
        return [None if v is None else _timestamp(v) for v in values]
    micros = pc.add(pc.multiply(seconds, 1_000_000), pc.divide(nanos, 1000))
    return micros.cast(pa.timestamp("us", tz="UTC"))


@dataclass(frozen=True)
class ProtobufLayout:
    columns: tuple[Column, ...]
    getters: tuple[Getter, ...]  # aligned with columns


def layout(descriptor: Any) -> ProtobufLayout:
    """The columns of a message type (a `Descriptor` from the registry's schema)."""
    columns: list[Column] = []
    getters: list[Getter] = []
    _walk(descriptor, (), (), (), columns, getters, set())
    return ProtobufLayout(tuple(columns), tuple(getters))


def _walk(descriptor: Any, path: tuple[str, ...], present: tuple[bool, ...], name: tuple[str, ...],
          columns: list[Column], getters: list[Getter], seen: set[str]) -> None:
    if descriptor.full_name in seen:  # a recursive message: its inner levels have no flat shape
        return
    seen = seen | {descriptor.full_name}
    for field in descriptor.fields:
        fpath, fname = path + (field.name,), name + (snake_case(field.name),)
        if field.is_repeated:
            kind, convert = _collection(field)
            columns.append(Column("_".join(fname), kind, fpath))
            getters.append(Getter(fpath, present + (False,), convert))
            continue
        kind, convert = _value_reader(field)
        # Messages, oneof members and `optional` scalars say whether they are set; plain proto3
        # scalars are their default value when unset, as Protobuf defines.
        check = present + (bool(field.has_presence),)
        if kind is None:
            _walk(field.message_type, fpath, check, fname, columns, getters, seen)
            continue
        columns.append(Column("_".join(fname), kind, fpath))
        stamp = convert is _timestamp
        getters.append(Getter(fpath, check, None if stamp or convert is _same else convert, stamp))
