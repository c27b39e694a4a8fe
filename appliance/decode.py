"""Decoding Kafka messages into typed rows, and routing the ones that do not fit.

`decode_batch` is the hot path: it runs inside Spark tasks on the messages a task
read, and splits them into target rows and dead-letter rows. Each column is
converted with one vectorised Arrow call; only a column holding a value that
does not fit falls back to value-by-value conversion, which names the culprit.
"""

from __future__ import annotations

import datetime as dt
import re
from dataclasses import dataclass, field
from typing import Any, Callable

import orjson
import pyarrow as pa
import pyarrow.compute as pc

from appliance.mapping import Column, Mapping

UTC = dt.timezone.utc

HEADERS_TYPE = pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))

META_FIELDS = [
    pa.field("_kafka_partition", pa.int32()),
    pa.field("_kafka_offset", pa.int64()),
    pa.field("_kafka_timestamp", pa.timestamp("us", tz="UTC")),
]
INGESTED_FIELD = pa.field("_ingested_at", pa.timestamp("us", tz="UTC"))

DEAD_LETTER_SCHEMA = pa.schema(
    META_FIELDS
    + [
        pa.field("raw_key", pa.binary()),
        pa.field("raw_value", pa.binary()),
        pa.field("headers", HEADERS_TYPE),
        pa.field("error_stage", pa.string()),
        pa.field("error_message", pa.string()),
        INGESTED_FIELD,
    ]
)

# Schema of the raw records a reader hands to the decoder (and of `floe`'s Spark source).
RAW_SCHEMA = pa.schema(
    META_FIELDS
    + [pa.field("key", pa.binary()), pa.field("value", pa.binary()), pa.field("headers", HEADERS_TYPE)]
)


def target_schema(mapping: Mapping) -> pa.Schema:
    return pa.schema([pa.field(c.name, c.arrow_type) for c in mapping.columns] + META_FIELDS + [INGESTED_FIELD])


@dataclass
class RawBatch:
    """Messages as parallel lists: cheap to fill from a consumer, cheap to index."""

    partitions: list[int] = field(default_factory=list)
    offsets: list[int] = field(default_factory=list)
    timestamps: list[int | None] = field(default_factory=list)  # epoch milliseconds
    keys: list[bytes | None] = field(default_factory=list)
    values: list[bytes | None] = field(default_factory=list)
    headers: list[list[tuple[str, bytes | None]] | None] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.offsets)

    @classmethod
    def from_arrow(cls, table: pa.Table | pa.RecordBatch) -> RawBatch:
        ts = table.column("_kafka_timestamp").cast(pa.int64()).to_pylist()
        return cls(
            partitions=table.column("_kafka_partition").to_pylist(),
            offsets=table.column("_kafka_offset").to_pylist(),
            timestamps=[t // 1000 if t is not None else None for t in ts],
            keys=table.column("key").to_pylist(),
            values=table.column("value").to_pylist(),
            headers=[
                [(h["key"], h["value"]) for h in hs] if hs is not None else None
                for hs in table.column("headers").to_pylist()
            ],
        )

    def to_arrow(self) -> pa.Table:
        return pa.table(
            {
                "_kafka_partition": pa.array(self.partitions, pa.int32()),
                "_kafka_offset": pa.array(self.offsets, pa.int64()),
                "_kafka_timestamp": _millis_to_ts(self.timestamps),
                "key": pa.array(self.keys, pa.binary()),
                "value": pa.array(self.values, pa.binary()),
                "headers": _headers_array(self.headers),
            },
            schema=RAW_SCHEMA,
        )


def _millis_to_ts(millis: list[int | None]) -> pa.Array:
    arr = pa.array(millis, pa.int64())
    return pc.multiply(arr, 1000).cast(pa.timestamp("us", tz="UTC"))


def _headers_array(headers: list[Any]) -> pa.Array:
    rows = [[{"key": k, "value": v} for k, v in hs] if hs else None for hs in headers]
    return pa.array(rows, HEADERS_TYPE)


# ---- value-by-value conversion: only for columns the fast path rejected ----

_INT_TEXT = re.compile(r"^\s*[-+]?\d+\s*$")
_FRACTION = re.compile(r"(\.\d{6})\d+")


class Unfit(ValueError):
    """A value cannot be converted to its column's type."""


def _short(value: Any) -> str:
    text = orjson.dumps(value).decode() if not isinstance(value, str) else repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def _to_long(value: Any, bits: int = 64) -> int:
    if isinstance(value, bool):
        raise Unfit
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    elif isinstance(value, str) and _INT_TEXT.match(value):
        value = int(value)
    if not isinstance(value, int) or not -(2 ** (bits - 1)) <= value < 2 ** (bits - 1):
        raise Unfit
    return value


def _to_double(value: Any) -> float:
    if isinstance(value, bool):
        raise Unfit
    if isinstance(value, (int, float)):
        return float(value)
    if isinstance(value, str):
        try:
            return float(value)
        except ValueError:
            raise Unfit from None
    raise Unfit


def _to_bool(value: Any) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.lower() in ("true", "false"):
        return value.lower() == "true"
    raise Unfit


def _to_string(value: Any) -> str:
    return value if isinstance(value, str) else orjson.dumps(value).decode()


def _to_json(value: Any) -> str:
    return orjson.dumps(value).decode()


def _parse_datetime(value: Any) -> dt.datetime:
    if isinstance(value, bool):
        raise Unfit
    if isinstance(value, (int, float)):  # epoch milliseconds, Kafka's own convention
        try:
            return dt.datetime.fromtimestamp(value / 1000, UTC)
        except (OverflowError, OSError, ValueError):
            raise Unfit from None
    if not isinstance(value, str):
        raise Unfit
    try:
        return dt.datetime.fromisoformat(_FRACTION.sub(r"\1", value.strip()))
    except ValueError:
        raise Unfit from None


def _to_timestamptz(value: Any) -> dt.datetime:
    parsed = _parse_datetime(value)
    return parsed.replace(tzinfo=UTC) if parsed.tzinfo is None else parsed.astimezone(UTC)


def _to_timestamp(value: Any) -> dt.datetime:
    parsed = _parse_datetime(value)
    return parsed if parsed.tzinfo is None else parsed.astimezone(UTC).replace(tzinfo=None)


def _to_date(value: Any) -> dt.date:
    if isinstance(value, int) and not isinstance(value, bool):  # days since the epoch
        try:
            return dt.date(1970, 1, 1) + dt.timedelta(days=value)
        except OverflowError:
            raise Unfit from None
    if isinstance(value, str):
        try:
            return dt.date.fromisoformat(value.strip())
        except ValueError:
            raise Unfit from None
    raise Unfit


SLOW: dict[str, Callable[[Any], Any]] = {
    "boolean": _to_bool,
    "int": lambda v: _to_long(v, 32),
    "long": _to_long,
    "float": _to_double,
    "double": _to_double,
    "string": _to_string,
    "json": _to_json,
    "date": _to_date,
    "timestamp": _to_timestamp,
    "timestamptz": _to_timestamptz,
}


def _fast(col: Column, values: list[Any]) -> pa.Array | None:
    """One vectorised conversion, or None when some value needs a closer look."""
    if col.type == "json":
        return None
    try:
        inferred = pa.array(values)
    except (pa.ArrowException, TypeError, ValueError, OverflowError):
        return None
    kind = inferred.type
    if pa.types.is_null(kind):
        return pa.nulls(len(values), col.arrow_type)
    target = col.arrow_type
    try:
        if col.type in ("long", "int"):
            return inferred.cast(target) if pa.types.is_int64(kind) else None
        if col.type in ("double", "float"):
            return inferred.cast(target) if pa.types.is_int64(kind) or pa.types.is_float64(kind) else None
        if col.type == "boolean":
            return inferred if pa.types.is_boolean(kind) else None
        if col.type == "string":
            return inferred if pa.types.is_string(kind) else None
        if col.type == "timestamptz" and pa.types.is_string(kind):
            return pc.cast(inferred, target)  # strict: strings without a zone take the slow path
        if col.type == "date" and pa.types.is_string(kind):
            return pc.cast(inferred, target)
    except (pa.ArrowException, ValueError):
        return None
    return None


# Python classes that pass into a column's Arrow type unchanged: when the fast path
# fails, only the values of other classes need the value-by-value conversion.
PASS_THROUGH: dict[str, tuple[type, ...]] = {
    "long": (int,), "int": (int,), "double": (float, int), "float": (float, int),
    "boolean": (bool,), "string": (str,),
}


def convert_column(col: Column, values: list[Any], errors: dict[int, str]) -> pa.Array:
    """Typed Arrow array for `values`; rows that do not fit get a message in `errors`."""
    fast = _fast(col, values)
    if fast is not None:
        return fast
    convert = SLOW[col.type]
    passing = PASS_THROUGH.get(col.type)
    if passing is not None:
        # `v.__class__`, not isinstance: a bool is an int to isinstance, not to a long column.
        odd = [i for i, v in enumerate(values) if v is not None and v.__class__ not in passing]
        fixed = list(values)
        found: dict[int, str] = {}
        for i in odd:
            try:
                fixed[i] = convert(values[i])
            except Unfit:
                fixed[i] = None
                found[i] = f"column {col.name!r} ({col.type}): cannot convert {_short(values[i])}"
        try:
            array = pa.array(fixed, col.arrow_type)
        except (pa.ArrowException, OverflowError, TypeError, ValueError):
            pass  # e.g. an int beyond 64 bits: fall through to the full check
        else:
            for i, message in found.items():
                errors.setdefault(i, message)
            return array
    out: list[Any] = []
    append = out.append
    for i, value in enumerate(values):
        if value is None:
            append(None)
            continue
        try:
            append(convert(value))
        except Unfit:
            append(None)
            errors.setdefault(i, f"column {col.name!r} ({col.type}): cannot convert {_short(value)}")
    return pa.array(out, col.arrow_type)


def extract_columns(objects: list[dict[str, Any]], paths: list[tuple[str, ...]]) -> list[list[Any]]:
    """Values at each path, one list per path aligned with `objects`.

    Shared parents are looked up once: `customer.id` and `customer.name` walk
    `customer` a single time. Comprehensions, not per-value function calls: this
    is the innermost loop of ingestion.
    """
    levels: dict[tuple[str, ...], list[Any]] = {(): objects}

    def at(path: tuple[str, ...]) -> list[Any]:
        found = levels.get(path)
        if found is None:
            parent, key = at(path[:-1]), path[-1]
            if len(path) == 1:
                found = [o.get(key) for o in parent]  # top level: every object is a dict
            else:
                found = [p.get(key) if p.__class__ is dict else None for p in parent]
            levels[path] = found
        return found

    return [at(path) for path in paths]


def _kind_of(value: Any) -> str:
    if isinstance(value, list):
        return "an array"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, (int, float)):
        return "a number"
    return "null"


@dataclass
class Decoded:
    target: pa.Table
    dead_letter: pa.Table


def decode_batch(
    raw: RawBatch, mapping: Mapping, max_message_bytes: int, ingested_at: dt.datetime | None = None
) -> Decoded:
    """Split raw messages into typed target rows and dead-letter rows, losing none."""
    ingested_at = ingested_at or dt.datetime.now(UTC)
    loads = orjson.loads
    decode_error = orjson.JSONDecodeError
    good: list[int] = []
    objects: list[dict[str, Any]] = []
    bad: list[tuple[int, str, str]] = []

    for i, value in enumerate(raw.values):
        if not value:
            bad.append((i, "validate", "empty message (no value)"))
            continue
        if len(value) > max_message_bytes:
            bad.append((i, "validate", f"message of {len(value)} bytes exceeds max_message_bytes ({max_message_bytes})"))
            continue
        try:
            obj = loads(value)
        except decode_error as exc:
            text = str(exc)
            if "utf-8" in text.lower() or "surrogate" in text.lower():
                bad.append((i, "decode", f"invalid UTF-8: {text}"))
            else:
                bad.append((i, "decode", f"invalid JSON: {text}"))
            continue
        if type(obj) is not dict:
            bad.append((i, "decode", f"JSON value is {_kind_of(obj)}, not an object"))
            continue
        good.append(i)
        objects.append(obj)

    errors: dict[int, str] = {}
    columns = extract_columns(objects, [c.source for c in mapping.columns])
    arrays = [convert_column(c, values, errors) for c, values in zip(mapping.columns, columns)]
    if errors:
        keep = pa.array([i not in errors for i in range(len(good))])
        arrays = [pc.filter(a, keep) for a in arrays]
        for j in sorted(errors):
            bad.append((good[j], "convert", errors[j]))
        good = [g for j, g in enumerate(good) if j not in errors]

    schema = target_schema(mapping)
    target = pa.Table.from_arrays(
        arrays + _meta_arrays(raw, good) + [pa.array([ingested_at] * len(good), INGESTED_FIELD.type)],
        schema=schema,
    )
    bad.sort()
    rows = [b[0] for b in bad]
    dead = pa.Table.from_arrays(
        _meta_arrays(raw, rows)
        + [
            pa.array([raw.keys[i] for i in rows], pa.binary()),
            pa.array([raw.values[i] for i in rows], pa.binary()),
            _headers_array([raw.headers[i] for i in rows]),
            pa.array([b[1] for b in bad], pa.string()),
            pa.array([b[2] for b in bad], pa.string()),
            pa.array([ingested_at] * len(rows), INGESTED_FIELD.type),
        ],
        schema=DEAD_LETTER_SCHEMA,
    )
    return Decoded(target, dead)


def _meta_arrays(raw: RawBatch, rows: list[int]) -> list[pa.Array]:
    if len(rows) == len(raw):  # the common case: every row, no gather needed
        parts, offs, ts = raw.partitions, raw.offsets, raw.timestamps
    else:
        parts = [raw.partitions[i] for i in rows]
        offs = [raw.offsets[i] for i in rows]
        ts = [raw.timestamps[i] for i in rows]
    return [pa.array(parts, pa.int32()), pa.array(offs, pa.int64()), _millis_to_ts(ts)]
