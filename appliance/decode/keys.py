"""Keys of an upsert stream: each message's key, the tombstones' keys read from the Kafka key, and a
batch reduced to the newest message of each key.

Each message of an upsert stream is its key's full new row, or its deletion. Inside a task (which
holds every message of its partitions' ranges: a key maps to one partition) only the newest message
of a key matters (`mergeonread.precedence` says which): an upsert's row is written, a delete's key is
handed to the driver, which places both against the table's index. Keys travel as plain Python values,
as Arrow's `to_pylist` gives
them (a tuple when there are several key columns), which is also how the index reads them back.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import orjson
import pyarrow as pa
import pyarrow.compute as pc

from appliance.decode.convert import Problem, convert_values
from appliance.decode.kafka_sources import last_header
from appliance.decode.parsed import MessageFormat, Op
from appliance.mergeonread.precedence import UNKNOWN, newest
from appliance.model.columns import KAFKA_OFFSET, KAFKA_PARTITION, KAFKA_TIMESTAMP
from appliance.model.mapping import Column, Mapping
from appliance.model.sources import KEY, Origin, describe, from_kafka, origin


@dataclass(frozen=True)
class Keyed:
    """How an upsert stream's messages are keyed: its key columns (mapped columns, in order), and
    whether a tombstone (a null value) deletes its key (`upsert`) or is a no-op (Debezium's, after a
    delete)."""

    columns: tuple[str, ...]
    tombstones_delete: bool = True

    def key_columns(self, mapping: Mapping) -> list[Column]:
        by_name = {c.name: c for c in mapping.columns}
        return [by_name[name] for name in self.columns if name in by_name]


# Kafka Connect's JsonConverter with schemas.enable=true wraps every value as {"schema": ..., "payload": ...};
# a tombstone comes out as {"schema": null, "payload": null} (as Debezium's tutorial prints it). Only a value
# with "payload" in its last bytes is parsed, and those are found for the whole batch at once, in Arrow.
_PAYLOAD = '"payload"'
_TAIL = 32  # bytes at a value's end where an envelope's "payload" key sits
_NULL_PAYLOAD_MAX = 64 * 1024  # a schema wrapped around a null is a few KB at most


def tombstones(values: list[bytes | None], fmt: MessageFormat | None) -> list[int]:
    """Positions of the tombstones among `values`: a null value, or, in a JSON stream (Debezium's
    too), a null wrapped by Kafka Connect's JsonConverter. One rule for ingestion, replay and audit."""
    inner = getattr(fmt, "inner", None) if fmt is not None and fmt.name == "debezium" else fmt
    if inner is not None and inner.name != "json":
        return [i for i, v in enumerate(values) if v is None]
    array = pa.array(values, pa.binary())
    nulls = np.flatnonzero(array.is_null().to_numpy(zero_copy_only=False))
    near_end = pc.match_substring(pc.binary_slice(array, -_TAIL), _PAYLOAD)
    wrapped = [i for i in np.flatnonzero(pc.fill_null(near_end, False).to_numpy(zero_copy_only=False)).tolist()
               if _null_payload(values[i])]
    return sorted(nulls.tolist() + wrapped)


def is_tombstone(value: bytes | None) -> bool:
    """A null value, or JsonConverter's envelope of a null."""
    return value is None or (value.find(_PAYLOAD.encode(), -_TAIL) >= 0 and _null_payload(value))


def _null_payload(value: bytes) -> bool:
    if len(value) > _NULL_PAYLOAD_MAX:
        return False
    try:
        event = orjson.loads(value[5:] if value[:1] == b"\0" and len(value) >= 5 else value)
    except orjson.JSONDecodeError:
        return False
    return isinstance(event, dict) and event.keys() == {"schema", "payload"} and event["payload"] is None


def missing_key(table: pa.Table, columns: list[Column]) -> list[tuple[int, str]]:
    """Rows whose key is incomplete (a key column null), with the reason (naming a Kafka source)."""
    out: list[tuple[int, str]] = []
    for col in columns:
        nulls = table.column(col.name).is_null().to_pylist()
        where = f" (source {describe(col.source)} has no value)" if from_kafka(col.source) else ""
        out += [(i, f"key column {col.name!r} is null{where}: the row has no key") for i, null in enumerate(nulls)
                if null]
    return sorted(dict(out).items())


def tombstone_keys(keys: list[bytes | None], fmt: MessageFormat | None, columns: list[Column],
                   max_message_bytes: int, headers: list[Any] | None = None
                   ) -> tuple[list[pa.Array], list[int], dict[int, str]]:
    """The key columns' values of tombstones, read from their Kafka keys: a JSON object holding them
    (by the column's source path, else its name), the bare JSON value when there is one key column,
    or a registry-framed Avro or Protobuf record; a column whose source is the key itself or a header
    (`@key`, `@header.NAME`) as ingestion reads it. Returns the arrays, the positions (in `keys`) they
    hold, and the positions whose key cannot be read, with the reason."""
    whole = {k: c for k, c in enumerate(columns) if origin(c.source) in (Origin.KEY, Origin.HEADER)}
    if whole:  # read from the raw key and headers, the others from the key's fields as below
        return _with_raw_sources(keys, fmt, columns, max_message_bytes, headers, whole)
    columns = [Column(c.name, c.type, c.source[len(KEY):]) if from_kafka(c.source) else c for c in columns]
    bad: dict[int, str] = {}
    rows: dict[int, list[Any]] = {}
    framed = [i for i, k in enumerate(keys) if k and k[0] == 0 and fmt is not None and fmt.name != "json"]
    if framed:
        parsed = fmt.parse([keys[i] for i in framed], max_message_bytes,
                           Mapping(tuple(Column(c.name, c.type, c.source) for c in columns)))
        found = parsed.values(columns)
        found = [f.to_pylist() if isinstance(f, (pa.Array, pa.ChunkedArray)) else f for f in found]
        for j, reason in ((j, reason) for j, _, reason in parsed.bad):
            bad[framed[j]] = f"Kafka key: {reason}"
        for n, j in enumerate(parsed.good):
            rows[framed[j]] = [None if f is None else f[n] for f in found]
    for i, key in enumerate(keys):
        if i in rows or i in bad or i in framed:
            continue
        row, reason = _json_key(key, columns)
        if reason:
            bad[i] = reason
        else:
            rows[i] = row
    for i, row in rows.items():
        missing = [c.name for c, v in zip(columns, row) if v is None]
        if missing:
            bad[i] = f"tombstone's Kafka key has no {', '.join(missing)}: it names no row to delete"
    order = sorted(i for i in rows if i not in bad)
    errors: dict[int, Problem] = {}
    arrays = [convert_values(c, [rows[i][k] for i in order], len(order), errors) for k, c in enumerate(columns)]
    for j, problem in errors.items():
        bad[order[j]] = f"tombstone's Kafka key: {problem.message}"
    if errors:
        keep = pa.array([j not in errors for j in range(len(order))])
        arrays = [a.filter(keep) for a in arrays]
        order = [i for j, i in enumerate(order) if j not in errors]
    return arrays, order, bad


def _with_raw_sources(keys: list[bytes | None], fmt: MessageFormat | None, columns: list[Column],
                      max_message_bytes: int, headers: list[Any] | None, whole: dict[int, Column]
                      ) -> tuple[list[pa.Array], list[int], dict[int, str]]:
    rest = [c for k, c in enumerate(columns) if k not in whole]
    arrays, order, bad = tombstone_keys(keys, fmt, rest, max_message_bytes) if rest else \
        ([], list(range(len(keys))), {})
    headers = headers or [None] * len(keys)
    errors: dict[int, Problem] = {}
    raw = {k: [keys[i] if c.source == KEY else last_header(headers[i], c.source[2]) for i in order]
           for k, c in whole.items()}
    texts = {k: v if c.ctype.kind == "binary" else [_text(b, c, j, errors) for j, b in enumerate(v)]
             for (k, c), v in zip(whole.items(), raw.values())}
    arrays_of = iter(arrays)
    out = [convert_values(c, texts[k], len(order), errors) if k in whole else next(arrays_of)
           for k, c in enumerate(columns)]
    missing = {j for k in whole for j, v in enumerate(raw[k]) if v is None}
    for j in sorted(missing | set(errors)):
        bad[order[j]] = (f"tombstone's {describe(next(c.source for k, c in whole.items() if raw[k][j] is None))} "
                         "is missing: it names no row to delete") if j in missing else \
            f"tombstone's key: {errors[j].message}"
    keep = [j for j in range(len(order)) if j not in missing and j not in errors]
    return [a.take(pa.array(keep, pa.int64())) for a in out], [order[j] for j in keep], bad


def _text(value: bytes | None, col: Column, j: int, errors: dict[int, Problem]) -> str | None:
    try:
        return None if value is None else value.decode()
    except UnicodeDecodeError as exc:
        errors.setdefault(j, Problem("decode", f"{describe(col.source)} is not UTF-8 text ({exc.reason})"))
        return None


def _json_key(key: bytes | None, columns: list[Column]) -> tuple[list[Any], str]:
    if not key:
        return [], "tombstone without a Kafka key: it names no row to delete"
    try:
        value = orjson.loads(key[5:] if key[0] == 0 and len(key) >= 5 else key)
    except orjson.JSONDecodeError as exc:
        return [], f"tombstone's Kafka key is not JSON: {exc}"
    if isinstance(value, dict) and "payload" in value and "schema" in value:  # Kafka Connect's JsonConverter
        value = value["payload"]
    if isinstance(value, dict):
        return [_at(value, c.source) if _at(value, c.source) is not None else value.get(c.name) for c in columns], ""
    if len(columns) == 1 and not isinstance(value, (list, dict)):
        return [value], ""
    return [], f"tombstone's Kafka key is {type(value).__name__}, not an object holding the key columns"


def _at(obj: dict, path: tuple[str, ...]) -> Any:
    for step in path:
        if not isinstance(obj, dict):
            return None
        obj = obj.get(step)
    return obj


OP = "__floe_op"  # each message's `Op`, as an int8 code, while a batch is reduced
CODES = {Op.UPSERT: 0, Op.DELETE: 1, Op.TRUNCATE: 2}


def newest_per_key(entries: pa.Table, keys: list[str]) -> tuple[np.ndarray, np.ndarray, tuple[int, int] | None]:
    """Which entries to write (each key's newest is an upsert) and whose key to delete (its newest is a
    delete), as positions in `entries`, ascending; and the last truncate, as (partition, offset).

    `entries` holds the key columns, `_kafka_partition`, `_kafka_offset`, `_kafka_timestamp` and the op
    code (`OP`), in each partition's offset order. A key's newest entry is the one `precedence` says.
    Entries before a truncate in its partition are dropped; those of other partitions in the batch are
    kept (Kafka orders no two partitions). Arrow and numpy calls: no Python loop over the messages.
    """
    ops = entries.column(OP).to_numpy()
    partitions = entries.column(KAFKA_PARTITION.name).to_numpy()
    offsets = entries.column(KAFKA_OFFSET.name).to_numpy()
    keep = ops != CODES[Op.TRUNCATE]
    truncate = None
    if not keep.all():
        last = int(np.flatnonzero(~keep)[-1])
        truncate = (int(partitions[last]), int(offsets[last]))
        keep &= ~((partitions == truncate[0]) & (offsets < truncate[1]))
    kept = np.flatnonzero(keep)
    stamps = entries.column(KAFKA_TIMESTAMP.name).cast(pa.int64()).fill_null(UNKNOWN).to_numpy()
    groups = labels(entries.select(keys).take(pa.array(kept)))
    newest_ones = np.sort(kept[newest(groups, partitions[kept], offsets[kept], stamps[kept])])
    return (newest_ones[ops[newest_ones] == CODES[Op.UPSERT]], newest_ones[ops[newest_ones] == CODES[Op.DELETE]],
            truncate)


def labels(table: pa.Table) -> np.ndarray:
    """A label per row, the same for rows of equal values in every column (none null)."""
    n = table.num_rows
    if not n:
        return np.empty(0, dtype=np.int64)
    order = pc.sort_indices(table, [(c, "ascending") for c in table.column_names]).to_numpy()
    ordered = table.take(pa.array(order))
    change = np.zeros(n, dtype=bool)
    change[0] = True
    for name in table.column_names:
        column = ordered.column(name).combine_chunks()
        change[1:] |= pc.not_equal(column.slice(1), column.slice(0, n - 1)).fill_null(True).to_numpy(
            zero_copy_only=False)
    out = np.empty(n, dtype=np.int64)
    out[order] = np.cumsum(change) - 1
    return out
