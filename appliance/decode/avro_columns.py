"""Many Avro messages of one writer schema decoded at once, into Arrow columns, by DuckDB's Avro reader.

fastavro decodes a message into a Python dict in about 5 µs; a batch of 100,000 is half a
second of a core. DuckDB's reader (the `avro` extension Floe already carries for Iceberg)
decodes the same bodies into columns several times faster. The bodies are laid out as an
Avro object container file with one block per message, so a body that is truncated or does
not match its schema fails the read (and the caller decodes that batch message by message,
dead-lettering the bad ones), and cannot shift its neighbours.

DuckDB's reader knows most logical types but not all: the schema it is given has those
turned into their physical types (local timestamps, decimals stored as bytes, nanosecond
timestamps), converted back here. Unions of several types are left to fastavro.
"""

from __future__ import annotations

import copy
import decimal
import json
import os
import tempfile
import threading
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from appliance.core.avrofile import avro_long, container_header

MIN_MESSAGES = 2000  # below this, DuckDB's fixed cost per read outweighs what it saves
UTC_MICROS = pa.timestamp("us", tz="UTC")
_RAW = {"local-timestamp-millis", "local-timestamp-micros", "local-timestamp-nanos", "timestamp-nanos"}
_CONNECTION = threading.local()


class Unsupported(ValueError):
    """A schema with a shape this reader leaves to fastavro."""


def _connection():
    con = getattr(_CONNECTION, "con", None)
    if con is None:
        import duckdb

        from appliance.core.extensions import extension_path

        con = duckdb.connect(config={"autoinstall_known_extensions": False, "autoload_known_extensions": False,
                                     "threads": 1})  # one per Spark task: the tasks are the parallelism
        con.execute(f"LOAD '{extension_path('avro')}'")
        _CONNECTION.con = con
    return con


def _full_name(name: str, namespace: str) -> str:
    return name if "." in name or not namespace else f"{namespace}.{name}"


def _physical(schema: Any, fixes: dict[tuple[str, ...], tuple], path: tuple[str, ...], named: dict,
              namespace: str = "", expanding: frozenset[str] = frozenset()) -> Any:
    """`schema` with the logical types DuckDB lacks made physical, noting how to restore each value at
    its path. A named type is defined once and referred to by name after, as Avro requires, but the
    values to restore are noted at every path that uses it. `named` maps short and full names to
    the definitions as written (logical types and all)."""
    if isinstance(schema, str):
        full = _full_name(schema, namespace)
        definition = named.get(full, named.get(schema))
        if definition is None:
            return schema  # a primitive
        if full in expanding:
            raise Unsupported("a recursive type")
        _physical(definition, fixes, path, named, namespace, expanding | {full})  # the notes at this path
        return schema
    if isinstance(schema, list):
        others = [b for b in schema if b != "null"]
        if len(others) > 1:
            raise Unsupported("a union of several types")
        return [b if b == "null" else _physical(b, fixes, path, named, namespace, expanding) for b in schema]
    out = dict(schema)
    kind, logical = out.get("type"), out.get("logicalType")
    if isinstance(kind, (dict, list)):
        out["type"] = _physical(kind, fixes, path, named, namespace, expanding)
        return out
    if kind in ("record", "error", "enum", "fixed") and "name" in out:
        full = _full_name(out["name"], out.get("namespace", namespace))
        named.setdefault(full, schema)
        named.setdefault(out["name"].rsplit(".", 1)[-1], schema)
        namespace, expanding = full.rpartition(".")[0], expanding | {full}
    if kind in ("record", "error"):
        out["fields"] = [{**f, "type": _physical(f["type"], fixes, path + (f["name"],), named, namespace, expanding)}
                         for f in out["fields"]]
        return out
    if kind in ("array", "map"):
        key = "items" if kind == "array" else "values"
        if _has_logical(out[key], named):
            raise Unsupported("logical types inside arrays or maps")
        return out
    if logical in _RAW or (logical == "decimal" and kind == "bytes"):
        fixes[path] = (logical, out.get("precision"), out.get("scale", 0))
        out.pop("logicalType")
    return out


def _has_logical(schema: Any, named: dict) -> bool:
    if isinstance(schema, str):
        return schema in named and _has_logical(named[schema], named)
    if isinstance(schema, list):
        return any(_has_logical(b, named) for b in schema)
    return "logicalType" in schema or schema.get("type") in ("record", "error", "array", "map")


class ColumnarAvro:
    """One writer schema's columnar decoder: `columns(bodies)` gives each layout path's Arrow column."""

    def __init__(self, schema: dict[str, Any], paths: list[tuple[str, ...]]) -> None:
        self.fixes: dict[tuple[str, ...], tuple] = {}
        physical = _physical(copy.deepcopy(schema), self.fixes, (), {})
        self.paths = paths
        self._header_meta = {"avro.schema": json.dumps(physical), "avro.codec": "null"}
        self._select = ", ".join(".".join(f'"{p}"' for p in path) + f' AS "c{i}"' for i, path in enumerate(paths))

    def columns(self, bodies: list[bytes]) -> dict[tuple[str, ...], pa.Array]:
        """Each path's values; raises when any body does not decode (then decode them one by one)."""
        sync = os.urandom(16)
        parts = [container_header(self._header_meta, sync)]
        one = avro_long(1)
        for body in bodies:
            parts += (one, avro_long(len(body)), body, sync)
        fd, path = tempfile.mkstemp(suffix=".avro", prefix="floe-")
        try:
            with os.fdopen(fd, "wb") as out:
                out.write(b"".join(parts))
            table = _connection().execute(f"SELECT {self._select} FROM read_avro(?)", [path]).fetch_arrow_table()
        finally:
            os.unlink(path)
        if table.num_rows != len(bodies):
            raise ValueError(f"{table.num_rows} records read from {len(bodies)} messages")
        return {p: self._restore(p, table.column(i).combine_chunks()) for i, p in enumerate(self.paths)}

    def _restore(self, path: tuple[str, ...], column: pa.Array) -> pa.Array:
        fix = self.fixes.get(path)
        if fix is not None:
            return _restored(column, *fix)
        if pa.types.is_dictionary(column.type):
            return column.cast(column.type.value_type)
        if pa.types.is_timestamp(column.type) and column.type.tz is None:
            return column.cast(UTC_MICROS)  # DuckDB's TIMESTAMP of an Avro timestamp: UTC
        return column


def _restored(column: pa.Array, logical: str, precision: int | None, scale: int) -> pa.Array:
    if logical == "decimal":
        def value(b: bytes | None) -> decimal.Decimal | None:
            return None if b is None else decimal.Decimal(int.from_bytes(b, "big", signed=True)).scaleb(-scale)
        return pa.array([value(b) for b in column.to_pylist()], pa.decimal128(precision, scale))
    unit = logical.rsplit("-", 1)[-1]
    micros = {"millis": pc.multiply(column, 1000), "micros": column, "nanos": _floor_thousandths(column)}[unit]
    micros = micros.cast(pa.int64())
    return micros.cast(pa.timestamp("us") if logical.startswith("local") else UTC_MICROS)


def _floor_thousandths(column: pa.Array) -> pa.Array:
    """Integers divided by 1000, rounded down (Arrow's integer division rounds toward zero, which
    would move a nanosecond timestamp before the epoch a microsecond later)."""
    quotient = pc.divide(column, 1000)
    inexact = pc.and_(pc.less(column, 0), pc.not_equal(pc.multiply(quotient, 1000), column))
    return pc.if_else(inexact, pc.subtract(quotient, 1), quotient)
