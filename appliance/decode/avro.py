"""Avro: the columns a writer schema maps to, and decoding messages with it.

Records are flattened to snake_case columns as JSON objects are (`customer.id` becomes
`customer_id`); `["null", X]` is a nullable X; any other union becomes one nullable column
per branch (`value_string`, `value_long`). Logical types keep their meaning: decimals,
dates, times, timestamps (UTC or local), UUIDs.
"""

from __future__ import annotations

import datetime as dt
import decimal
import io
import json
import uuid
from dataclasses import dataclass
from typing import Any, Callable

import fastavro.read as fastavro_read

from appliance.model.mapping import Column
from appliance.model.names import snake_case

PRIMITIVES = {"boolean": "boolean", "int": "int", "long": "long", "float": "float", "double": "double",
              "string": "string", "bytes": "binary"}
LOGICAL = {"date": "date", "time-millis": "time", "time-micros": "time", "timestamp-millis": "timestamptz",
           "timestamp-micros": "timestamptz", "timestamp-nanos": "timestamptz",
           "local-timestamp-millis": "timestamp", "local-timestamp-micros": "timestamp",
           "local-timestamp-nanos": "timestamp", "uuid": "uuid"}


EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.timezone.utc)


def _nanos(data: int, *_: Any) -> dt.datetime:
    return EPOCH + dt.timedelta(microseconds=data // 1000)  # floored, as for any value before the epoch


def _local_nanos(data: int, *_: Any) -> dt.datetime:
    return _nanos(data).replace(tzinfo=None)


# fastavro reads nanosecond timestamps as plain integers; its table of logical readers is the
# documented way to read them as what they are, everywhere (in unions, arrays, maps) at once.
fastavro_read.LOGICAL_READERS.setdefault("long-timestamp-nanos", _nanos)
fastavro_read.LOGICAL_READERS.setdefault("long-local-timestamp-nanos", _local_nanos)


class AvroSchemaError(ValueError):
    """A writer schema Floe cannot map (the message says which part)."""


@dataclass(frozen=True)
class Branch:
    """A branch of a union that is more than `["null", X]`: how values of it are recognised."""

    name: str  # the column suffix
    test: Callable[[Any], bool]


def _named(schema: Any, named: dict[str, Any]) -> Any:
    """A schema with a reference to a named type replaced by that type."""
    if isinstance(schema, str) and schema not in PRIMITIVES and schema != "null":
        if schema not in named:
            raise AvroSchemaError(f"unknown Avro type {schema!r}")
        return named[schema]
    return schema


def _register(schema: Any, named: dict[str, Any], namespace: str = "") -> None:
    """Every named type of `schema` by its full and its short name."""
    if isinstance(schema, list):
        for branch in schema:
            _register(branch, named, namespace)
    elif isinstance(schema, dict):
        kind = schema.get("type")
        if kind in ("record", "error", "enum", "fixed") and "name" in schema:
            name = schema["name"]
            ns = schema.get("namespace", namespace)
            full = name if "." in name or not ns else f"{ns}.{name}"
            named[full] = named[name.rsplit(".", 1)[-1]] = schema
            namespace = full.rpartition(".")[0]
        for field in schema.get("fields", ()):
            _register(field.get("type"), named, namespace)
        for key in ("items", "values"):
            if key in schema:
                _register(schema[key], named, namespace)
        if isinstance(kind, (dict, list)):
            _register(kind, named, namespace)


def leaf_type(schema: Any, named: dict[str, Any]) -> str | None:
    """The column type of a non-record Avro schema; None for a record (flattened instead)."""
    schema = _named(schema, named)
    if isinstance(schema, str):
        if schema == "null":
            raise AvroSchemaError("a field of type null alone carries nothing")
        return PRIMITIVES[schema]
    if isinstance(schema, list):
        raise AvroSchemaError("nested unions are not valid Avro")
    kind, logical = schema.get("type"), schema.get("logicalType")
    if isinstance(kind, (dict, list)) or (isinstance(kind, str) and kind in named and kind not in PRIMITIVES):
        return leaf_type(kind, named)
    if logical == "decimal" and kind in ("bytes", "fixed"):
        return f"decimal({int(schema['precision'])},{int(schema.get('scale', 0))})"
    if logical in LOGICAL and (logical != "uuid" or kind in ("string", "fixed")):
        return LOGICAL[logical]
    if kind in ("record", "error"):
        return None
    if kind == "enum":
        return "string"
    if kind == "fixed":
        return "binary"
    if kind == "array":
        inner = _element_type(schema["items"], named)
        return f"list<{inner}>" if inner else "json"
    if kind == "map":
        inner = _element_type(schema["values"], named)
        return f"map<string,{inner}>" if inner else "json"
    if kind in PRIMITIVES:
        return PRIMITIVES[kind]
    raise AvroSchemaError(f"Avro type {kind!r} has no column type")


def _element_type(schema: Any, named: dict[str, Any]) -> str | None:
    """An array's or map's element type; None (kept as JSON) for records and unions of several."""
    schema = _named(schema, named)
    if isinstance(schema, list):
        others = [b for b in schema if b != "null"]
        if len(others) != 1:
            return None
        schema = others[0]
    return leaf_type(schema, named)


def _branch_name(branch: Any, named: dict[str, Any]) -> str:
    branch = _named(branch, named)
    if isinstance(branch, str):
        return branch
    if branch.get("logicalType"):
        return snake_case(branch["logicalType"])
    if "name" in branch:
        return snake_case(branch["name"].rsplit(".", 1)[-1])
    return str(branch.get("type"))


# How a decoded value shows which branch of a union it came from, by the branch's column type:
# fastavro hands over the value alone (a logical type as its Python type: datetime, Decimal...).
_IS: dict[str, Callable[[Any], bool]] = {
    "boolean": lambda v: v.__class__ is bool,
    "int": lambda v: v.__class__ is int, "long": lambda v: v.__class__ is int,
    "float": lambda v: v.__class__ is float, "double": lambda v: v.__class__ is float,
    "string": lambda v: v.__class__ is str,
    "binary": lambda v: isinstance(v, (bytes, bytearray)),
    "uuid": lambda v: isinstance(v, uuid.UUID),
    "date": lambda v: isinstance(v, dt.date) and not isinstance(v, dt.datetime),
    "time": lambda v: isinstance(v, dt.time),
    "timestamp": lambda v: isinstance(v, dt.datetime) and v.tzinfo is None,
    "timestamptz": lambda v: isinstance(v, dt.datetime) and v.tzinfo is not None,
}


def _branch_test(branch: Any, named: dict[str, Any]) -> Callable[[Any], bool]:
    """How a decoded value shows it came from `branch`."""
    branch = _named(branch, named)
    kind = branch if isinstance(branch, str) else branch.get("type")
    name = None if isinstance(branch, str) else branch.get("name")
    column = leaf_type(branch, named)
    if column is None or column == "json":
        plain: Callable[[Any], bool] = lambda v: isinstance(v, (dict, list))  # noqa: E731
    elif column.startswith("decimal("):
        plain = lambda v: isinstance(v, decimal.Decimal)  # noqa: E731
    elif column.startswith("list<"):
        plain = lambda v: isinstance(v, list)  # noqa: E731
    elif column.startswith("map<"):
        plain = lambda v: isinstance(v, dict)  # noqa: E731
    else:
        plain = _IS[column]
    if name and kind in ("record", "error", "enum", "fixed"):
        # fastavro tags a named type's value with its name where a union holds several of them.
        short = name.rsplit(".", 1)[-1]
        return lambda v: v[0].rsplit(".", 1)[-1] == short if isinstance(v, tuple) else plain(v)
    return lambda v: not isinstance(v, tuple) and plain(v)


@dataclass(frozen=True)
class AvroLayout:
    """What a writer schema maps to: its columns, and how its unions of several branches are read."""

    columns: tuple[Column, ...]
    unions: tuple[tuple[tuple[str, ...], tuple[Branch, ...]], ...]  # (path of the union, its branches)


def layout(schema: dict[str, Any], references: dict[str, Any] | None = None) -> AvroLayout:
    """The columns of a record schema (the registry's writer schema, parsed from JSON); `references`:
    the schemas it refers to by name (the registry's references), as JSON too."""
    if not isinstance(schema, dict) or schema.get("type") not in ("record", "error"):
        raise AvroSchemaError("the writer schema must be an Avro record")
    named: dict[str, Any] = {}
    for referenced in (references or {}).values():
        _register(referenced, named)
    _register(schema, named)
    columns: list[Column] = []
    unions: list = []
    _walk(schema, (), (), named, columns, unions)
    return AvroLayout(tuple(columns), tuple(unions))


def _walk(record: dict[str, Any], path: tuple[str, ...], prefix: tuple[str, ...], named: dict[str, Any],
          columns: list[Column], unions: list) -> None:
    for field in record.get("fields", ()):
        fpath, fname = path + (field["name"],), prefix + (snake_case(field["name"]),)
        _field(_named(field["type"], named), fpath, fname, named, columns, unions)


def _field(schema: Any, path: tuple[str, ...], name: tuple[str, ...], named: dict[str, Any],
           columns: list[Column], unions: list) -> None:
    if isinstance(schema, list):
        others = [b for b in schema if b != "null"]
        if len(others) == 1:
            _field(_named(others[0], named), path, name, named, columns, unions)
            return
        branches = tuple(Branch(_branch_name(b, named), _branch_test(b, named)) for b in others)
        # Outer unions before the ones inside their branches: tagging the outer one first puts the
        # inner ones where their paths (through the branch's name) say they are.
        unions.append((path, branches))
        for branch, tagged in zip(others, branches):
            _field(_named(branch, named), path + (tagged.name,), name + (snake_case(tagged.name),), named, columns,
                   unions)
        return
    kind = leaf_type(schema, named)
    if kind is None:
        _walk(schema, path, name, named, columns, unions)
        return
    columns.append(Column("_".join(name), kind, path))


class AvroDecoder:
    """Decodes the Avro body of a message (the bytes after the wire format's header) with one writer schema."""

    def __init__(self, schema: dict[str, Any], named_schemas: dict[str, Any] | None = None) -> None:
        import fastavro

        from appliance.decode.avro_columns import ColumnarAvro, Unsupported

        self.layout = layout(schema, named_schemas)
        if named_schemas:  # references resolved as confluent-kafka's own deserializer does
            from confluent_kafka.schema_registry.common.avro import parse_schema_with_repo

            self._parsed = parse_schema_with_repo(json.dumps(schema), named_schemas)
        else:
            self._parsed = fastavro.parse_schema(schema)
        self._read = fastavro.schemaless_reader
        self._named = bool(self.layout.unions)
        # Many messages at once, when DuckDB's reader can take the schema (see `avro_columns`).
        self.columnar: ColumnarAvro | None = None
        if not named_schemas and not self._named:
            try:
                self.columnar = ColumnarAvro(schema, [c.source for c in self.layout.columns])
            except Unsupported:
                pass

    def decode(self, body: bytes) -> dict[str, Any]:
        """The record; a union of several branches as {branch: value}. Raises on a body that does not fit.

        Bytes left over after the record are ignored, as Confluent's own deserializer does."""
        record = self._read(io.BytesIO(body), self._parsed, None, return_named_type=self._named,
                            return_named_type_override=self._named)
        if self._named:
            for path, branches in self.layout.unions:
                _tag_union(record, path, branches)
        return record


def _tag_union(record: Any, path: tuple[str, ...], branches: tuple[Branch, ...]) -> None:
    parent = record
    for key in path[:-1]:
        parent = parent.get(key) if isinstance(parent, dict) else None
        if isinstance(parent, tuple):
            parent = parent[1]
    if not isinstance(parent, dict) or parent.get(path[-1]) is None:
        return
    value = parent[path[-1]]
    for branch in branches:
        if branch.test(value):
            parent[path[-1]] = {branch.name: value[1] if isinstance(value, tuple) else value}
            return
