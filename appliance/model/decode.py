"""Decoding Kafka messages into typed rows, and routing the ones that do not fit.

`decode_batch` is the hot path: it runs inside Spark tasks on the messages a task
read, and splits them into target rows and dead-letter rows, losing none.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from typing import Any

import orjson
import pyarrow as pa
import pyarrow.compute as pc

from appliance.kafka.records import RawBatch
from appliance.model.columns import (
    DEAD_LETTER_SCHEMA,
    HEADERS_TYPE,
    INGESTED_AT,
    UTC_MICROS,
)
from appliance.model.convert import convert_column
from appliance.model.mapping import Mapping

UTC = dt.timezone.utc


def _millis_to_ts(millis: list[int | None]) -> pa.Array:
    arr = pa.array(millis, pa.int64())
    return pc.multiply(arr, 1000).cast(UTC_MICROS)


def _headers_array(headers: list[Any]) -> pa.Array:
    # A message without headers has an empty list, as it always had in Floe's tables.
    rows = [[{"key": k, "value": v} for k, v in hs] if hs else [] for hs in headers]
    return pa.array(rows, HEADERS_TYPE)


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
    good, objects, bad = _parse(raw.values, max_message_bytes)
    errors: dict[int, str] = {}
    columns = extract_columns(objects, [c.source for c in mapping.columns])
    arrays = [convert_column(c, values, errors) for c, values in zip(mapping.columns, columns)]
    if errors:
        keep = pa.array([i not in errors for i in range(len(good))])
        arrays = [pc.filter(a, keep) for a in arrays]
        for j in sorted(errors):
            bad.append((good[j], "convert", errors[j]))
        good = [g for j, g in enumerate(good) if j not in errors]
    target = pa.Table.from_arrays(
        arrays + _meta_arrays(raw, good) + [pa.array([ingested_at] * len(good), INGESTED_AT.arrow_type)],
        schema=mapping.arrow_schema(),
    )
    return Decoded(target, _dead_letters(raw, sorted(bad), ingested_at))


def _parse(values: list[bytes | None], max_message_bytes: int) -> tuple[list[int], list[dict], list[tuple]]:
    """Indexes and objects of the messages that are JSON objects; (index, stage, reason) of the others."""
    loads = orjson.loads
    decode_error = orjson.JSONDecodeError
    good: list[int] = []
    objects: list[dict[str, Any]] = []
    bad: list[tuple[int, str, str]] = []
    for i, value in enumerate(values):
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
    return good, objects, bad


def _dead_letters(raw: RawBatch, bad: list[tuple[int, str, str]], ingested_at: dt.datetime) -> pa.Table:
    rows = [b[0] for b in bad]
    return pa.Table.from_arrays(
        _meta_arrays(raw, rows)
        + [
            pa.array([raw.keys[i] for i in rows], pa.binary()),
            pa.array([raw.values[i] for i in rows], pa.binary()),
            _headers_array([raw.headers[i] for i in rows]),
            pa.array([b[1] for b in bad], pa.string()),
            pa.array([b[2] for b in bad], pa.string()),
            pa.array([ingested_at] * len(rows), INGESTED_AT.arrow_type),
        ],
        schema=DEAD_LETTER_SCHEMA,
    )


def _meta_arrays(raw: RawBatch, rows: list[int]) -> list[pa.Array]:
    if len(rows) == len(raw):  # the common case: every row, no gather needed
        parts, offs, ts = raw.partitions, raw.offsets, raw.timestamps
    else:
        parts = [raw.partitions[i] for i in rows]
        offs = [raw.offsets[i] for i in rows]
        ts = [raw.timestamps[i] for i in rows]
    return [pa.array(parts, pa.int32()), pa.array(offs, pa.int64()), _millis_to_ts(ts)]
