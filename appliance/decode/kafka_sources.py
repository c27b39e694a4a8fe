"""Each mapped column's values for a batch's parsed messages: from the value (the format's), or from the
message's Kafka key and headers (`model.sources` says which), in one place for ingestion, replay and audit.

The key's and a header's bytes fill a binary column as they are; any other column gets them as UTF-8 text,
converted to its type as a value's field would be. `@key.FIELD` reads a JSON key (Kafka Connect's
`{"schema", "payload"}` wrapper taken off), or a key in the registry's wire format with the stream's own
format (Avro, Protobuf), as values are read. A key or header that cannot be read as its column needs sends
its message to the dead-letter table (stage `decode`) with a reason naming the source.
"""

from __future__ import annotations

from typing import Any

import orjson
import pyarrow as pa

from appliance.decode.convert import Problem
from appliance.decode.parsed import MessageFormat, Parsed
from appliance.kafka.records import RawBatch
from appliance.model.columns import HEADERS_TYPE
from appliance.model.mapping import Column, Mapping
from appliance.model.sources import KEY, Origin, describe, from_kafka, origin

REGISTERED = ("avro", "protobuf")


def headers_array(headers: list[Any]) -> pa.Array:
    """Messages' headers as the `headers` type; a message without headers has an empty list."""
    return pa.array([[{"key": k, "value": v} for k, v in hs] if hs else [] for hs in headers], HEADERS_TYPE)


def value_mapping(mapping: Mapping) -> Mapping:
    """The columns a format reads from the value (the mapping itself when every column does)."""
    if not any(from_kafka(c.source) for c in mapping.columns):
        return mapping
    return Mapping.of_table([c for c in mapping.columns if not from_kafka(c.source)], mapping.ignored)


def column_values(mapping: Mapping, parsed: Parsed, raw: RawBatch, fmt: MessageFormat | None,
                  max_message_bytes: int, errors: dict[int, Problem]) -> list[Any]:
    """Each of `mapping`'s columns' values for the messages of `parsed.good` (positions in `raw`), in order.
    A message whose key or header its columns cannot read gets a `Problem` in `errors`, by its position in
    `parsed.good`."""
    columns = list(mapping.columns)
    kafka = [c for c in columns if from_kafka(c.source)]
    if not kafka:
        return parsed.values(columns)
    from_value = iter(parsed.values([c for c in columns if not from_kafka(c.source)]))
    good = parsed.good
    fields = [c for c in kafka if origin(c.source) is Origin.KEY_FIELD]
    key_fields = iter(_key_fields(fields, [raw.keys[i] for i in good], fmt, max_message_bytes, errors))
    out = []
    for col in columns:
        where = origin(col.source)
        if where is Origin.VALUE:
            out.append(next(from_value))
        elif where is Origin.KEY_FIELD:
            out.append(next(key_fields))
        elif where is Origin.HEADERS:
            out.append(headers_array([raw.headers[i] for i in good]))
        elif where is Origin.KEY:
            out.append(_bytes_or_text(col, [raw.keys[i] for i in good], errors))
        else:
            out.append(_bytes_or_text(col, [last_header(raw.headers[i], col.source[2]) for i in good], errors))
    return out


def last_header(headers: list[tuple[str, bytes | None]] | None, name: str) -> bytes | None:
    """The value of the last header called `name` (Kafka's `Headers.lastHeader`), None without one."""
    for key, value in reversed(headers or ()):
        if key == name:
            return value
    return None


def _bytes_or_text(col: Column, found: list[bytes | None], errors: dict[int, Problem]) -> Any:
    if col.ctype.kind == "binary":
        return pa.array(found, pa.binary())
    out: list[str | None] = []
    for j, value in enumerate(found):
        try:
            out.append(None if value is None else value.decode())
        except UnicodeDecodeError as exc:
            errors.setdefault(j, Problem("decode", f"column {col.name!r}: {describe(col.source)} is not UTF-8 text "
                                                   f"({exc.reason} at byte {exc.start})"))
            out.append(None)
    return out


def _key_fields(columns: list[Column], keys: list[bytes | None], fmt: MessageFormat | None,
                max_message_bytes: int, errors: dict[int, Problem]) -> list[list[Any]]:
    """The `@key.FIELD` columns' values: each key read once, as a JSON object or a registered record."""
    if not columns:
        return []
    names = ", ".join(describe(c.source) for c in columns)
    inner = getattr(fmt, "inner", None) if fmt is not None and fmt.name == "debezium" else fmt
    framed = [j for j, k in enumerate(keys) if k and k[0] == 0 and inner is not None and inner.name in REGISTERED]
    out: list[list[Any]] = [[None] * len(keys) for _ in columns]
    if framed:
        within = Mapping.of_table([Column(c.name, c.type, c.source[len(KEY):]) for c in columns])
        parsed = inner.parse([keys[j] for j in framed], max_message_bytes, within)
        for n, _, reason in parsed.bad:
            errors.setdefault(framed[n], Problem("decode", f"{names}: the Kafka key does not decode: {reason}"))
        for values, column in zip(parsed.values(list(within.columns)), out):
            values = values.to_pylist() if isinstance(values, (pa.Array, pa.ChunkedArray)) else values
            for n, value in zip(parsed.good, values if values is not None else [None] * len(parsed.good)):
                column[framed[n]] = value
    done = set(framed)
    for j, key in enumerate(keys):
        if j in done or not key:
            continue
        try:
            obj = orjson.loads(key[5:] if key[0] == 0 and len(key) >= 5 else key)
        except orjson.JSONDecodeError as exc:
            errors.setdefault(j, Problem("decode", f"{names}: the Kafka key is not JSON: {exc}"))
            continue
        if isinstance(obj, dict) and obj.keys() == {"schema", "payload"}:  # Kafka Connect's JsonConverter
            obj = obj["payload"]
        for c, column in zip(columns, out):
            column[j] = _at(obj, c.source[len(KEY):])
    return out


def _at(obj: Any, path: tuple[str, ...]) -> Any:
    for step in path:
        if obj.__class__ is not dict:
            return None
        obj = obj.get(step)
    return obj
