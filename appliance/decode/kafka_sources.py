"""Each mapped column's values for a batch's parsed messages: from the value (the format's), or from the
message's Kafka key and headers (`model.sources` says which), in one place for ingestion, replay and audit.

The key's and a header's bytes fill a binary column as they are; any other column gets them as UTF-8 text,
converted to its type as a value's field would be. `@key.FIELD` reads a JSON key (Kafka Connect's
`{"schema", "payload"}` wrapper taken off), or a key in the registry's wire format with the stream's own
format (Avro, Protobuf), as values are read. A key or header that cannot be read as its column needs sends
its message to the dead-letter table (stage `decode`) with a reason naming the source.
"""

from __future__ import annotations

from itertools import accumulate
from typing import Any

import orjson
import pyarrow as pa

from appliance.decode.convert import Problem
from appliance.decode.parsed import MessageFormat, Parsed, extract_columns
from appliance.kafka.records import RawBatch
from appliance.model.columns import HEADERS_TYPE
from appliance.model.mapping import Column, Mapping
from appliance.model.sources import KEY, Origin, describe, from_kafka, origin

REGISTERED = ("avro", "protobuf")


def headers_array(headers: list[Any]) -> pa.Array:
    """Messages' headers as the `headers` type; a message without headers has an empty list. Built from
    flat arrays of names and values and each message's offset into them, not a dict per header."""
    flat = [h for hs in headers if hs for h in hs]
    offsets = pa.array([0, *accumulate(len(hs) if hs else 0 for hs in headers)], pa.int32())
    pairs = pa.StructArray.from_arrays([pa.array([h[0] for h in flat], pa.string()),
                                        pa.array([h[1] for h in flat], pa.binary())],
                                       fields=list(HEADERS_TYPE.value_type))
    return pa.ListArray.from_arrays(offsets, pairs, type=HEADERS_TYPE)


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
            name = col.source[2]
            out.append(_bytes_or_text(col, [dict(hs).get(name) if hs else None for hs in
                                            (raw.headers[i] for i in good)], errors))
    return out


def last_header(headers: list[tuple[str, bytes | None]] | None, name: str) -> bytes | None:
    """The value of the last header called `name` (Kafka's `Headers.lastHeader`: a dict keeps the last
    value of a name), None without one."""
    return dict(headers).get(name) if headers else None


def _bytes_or_text(col: Column, found: list[bytes | None], errors: dict[int, Problem]) -> Any:
    array = pa.array(found, pa.binary())
    if col.ctype.kind == "binary":
        return array
    try:
        return array.cast(pa.string())  # checks that every value is UTF-8, in C
    except pa.ArrowInvalid:
        pass  # some value is not: find which
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
    objects = _json_keys(keys, set(framed), names, errors)
    found = extract_columns(objects, [c.source[len(KEY):] for c in columns])
    for column, values in zip(out, found):
        if framed:
            for j in framed:
                values[j] = column[j]
        column[:] = values
    return out


def _json_keys(keys: list[bytes | None], skip: set[int], names: str, errors: dict[int, Problem]) -> list[dict]:
    """The keys as JSON objects (Kafka Connect's wrapper taken off); {} for a key that is none, or not an
    object, or not JSON (then with a `Problem` naming the sources `names`), or is to be `skip`ped."""
    loads = orjson.loads
    try:
        if skip:
            raise TypeError
        objects = [loads(k) for k in keys]  # the usual batch: every key JSON, in one pass
    except (orjson.JSONDecodeError, TypeError):
        objects = []
        for j, key in enumerate(keys):
            if j in skip or not key:
                objects.append(None)
                continue
            try:
                objects.append(loads(key[5:] if key[0] == 0 and len(key) >= 5 else key))
            except orjson.JSONDecodeError as exc:
                errors.setdefault(j, Problem("decode", f"{names}: the Kafka key is not JSON: {exc}"))
                objects.append(None)
    return [(o["payload"] if len(o) == 2 and "payload" in o and "schema" in o else o) if o.__class__ is dict
            else _NONE for o in objects]


_NONE: dict = {}  # a key without fields
