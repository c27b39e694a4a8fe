"""Decoding Kafka messages into typed rows, and routing the ones that do not fit.

`decode_batch` is the hot path: it runs inside Spark tasks on the messages a task read,
and splits them into target rows and dead-letter rows, losing none. With schema
evolution on, a batch whose messages need the table to change first (new fields, a
wider type) says so (`Decoded.evolution`) and is written only once the table has changed.
"""

from __future__ import annotations

import datetime as dt
import gc
import logging
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from appliance.core.errors import FloeError
from appliance.decode.convert import Problem, convert_values
from appliance.decode.json_format import JsonFormat
from appliance.decode.kafka_sources import column_values, headers_array, value_mapping
from appliance.decode.keys import CODES, OP, Keyed, missing_key, newest_per_key, tombstone_keys, tombstones
from appliance.decode.parsed import Conflict, MessageFormat, Op
from appliance.kafka.records import RawBatch
from appliance.model.changes import Evolution, SchemaChange
from appliance.model.columns import (
    DEAD_LETTER_SCHEMA,
    INGESTED_AT,
    KAFKA_OFFSET,
    KAFKA_PARTITION,
    KAFKA_TIMESTAMP,
    UTC_MICROS,
)
from appliance.model.mapping import Column, Mapping
from appliance.model.sources import describe, from_kafka

UTC = dt.timezone.utc
SOURCE = "__floe_source"  # while an upsert batch is reduced: a row of the target, or -1 - a tombstone
log = logging.getLogger(__name__)


SMALL_BATCH = 256  # messages a batch's Python list is converted by itself under (a trickle's every batch)


def _millis_to_ts(millis: list[int | None]) -> pa.Array:
    if len(millis) < SMALL_BATCH:
        # Three Arrow calls cost 45 us whatever a batch holds; a few values multiplied here, 7 us.
        try:
            return pa.array([None if m is None else m * 1000 for m in millis], UTC_MICROS)
        except (OverflowError, pa.ArrowException):
            pass  # a timestamp beyond 64 bits of microseconds: wrapped, as Arrow's multiply does
    arr = pa.array(millis, pa.int64())
    return pc.multiply(arr, 1000).cast(UTC_MICROS)


@dataclass
class Decoded:
    target: pa.Table
    dead_letter: pa.Table
    evolution: Evolution = field(default_factory=Evolution)
    changes: set[SchemaChange] = field(default_factory=set)  # schema changes met, each told once per stream
    schemas: dict[str, int] = field(default_factory=dict)  # writer schemas seen -> messages
    ops: list[Op] | None = None  # what each target row does (before an upsert stream's reduction)
    # Upsert streams: the keys whose newest message deletes them (key columns and Kafka position),
    # and the last truncate (partition, offset): the rows committed before it go.
    deleted: pa.Table | None = None
    truncated: tuple[int, int] | None = None
    skipped: int = 0  # tombstones that are no-ops (Debezium's, after its delete)


@contextmanager
def _collector_paused() -> Iterator[None]:
    """Decoding makes a batch's worth of objects (parsed messages, their values), none in a cycle;
    the garbage collector's passes over them while they pile up are wasted work, about half the
    time of a decode. It runs again once the batch's objects are mostly freed."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def decode_batch(raw: RawBatch, mapping: Mapping, max_message_bytes: int, ingested_at: dt.datetime | None = None,
                 fmt: MessageFormat | None = None, evolve: bool = False, keyed: Keyed | None = None) -> Decoded:
    """Split raw messages into typed target rows and dead-letter rows, losing none.

    `evolve`: new fields and wider values become `Decoded.evolution` (then the rows are not
    to be written); otherwise new fields are ignored and wider values are schema problems.
    `keyed` (upsert streams): the target holds each key's newest row, `Decoded.deleted` the keys
    whose newest message deletes them; a message without its key is a dead letter.
    """
    at = ingested_at or dt.datetime.now(UTC)

    def attempt(part: RawBatch) -> Decoded:
        if keyed is not None:
            return _keyed(part, mapping, max_message_bytes, at, fmt, evolve, keyed)
        return _decode(part, mapping, max_message_bytes, at, fmt, evolve)

    with _collector_paused():
        try:
            return attempt(raw)
        except FloeError:
            raise  # about the world (a registry that does not answer): the batch waits and is retried
        except Exception:  # a message Floe fails on: it alone is dead-lettered, never the stream stopped
            log.exception("decoding a batch failed; looking for the messages that make it fail")
            return _isolated(raw, attempt, at)


def _culprits(raw: RawBatch, indexes: list[int], attempt: Callable[[RawBatch], Decoded]
              ) -> list[tuple[int, Exception]]:
    """The messages among `indexes` that make decoding fail, found by halving."""
    try:
        attempt(raw.take(indexes))
        return []
    except FloeError:
        raise
    except Exception as exc:
        if len(indexes) == 1:
            return [(indexes[0], exc)]
        half = len(indexes) // 2
        return _culprits(raw, indexes[:half], attempt) + _culprits(raw, indexes[half:], attempt)


def _isolated(raw: RawBatch, attempt: Callable[[RawBatch], Decoded], ingested_at: dt.datetime) -> Decoded:
    """The batch decoded without the messages that make decoding fail, those as dead letters."""
    culprits = _culprits(raw, list(range(len(raw))), attempt)
    failed = {i for i, _ in culprits}
    rest = [i for i in range(len(raw)) if i not in failed]
    decoded = attempt(raw.take(rest))  # fails again when no single message is the cause: the batch is retried
    reasons = [(i, "decode", f"Floe failed to decode this message ({type(exc).__name__}: {exc}); please report it")
               for i, exc in culprits]
    decoded.dead_letter = pa.concat_tables([decoded.dead_letter, dead_letter_rows(raw, reasons, ingested_at)])
    return decoded


def _decode(raw: RawBatch, mapping: Mapping, max_message_bytes: int, ingested_at: dt.datetime,
            fmt: MessageFormat | None, evolve: bool) -> Decoded:
    parsed = (fmt or JsonFormat()).parse(raw.values, max_message_bytes, value_mapping(mapping))
    good, bad = parsed.good, list(parsed.bad)
    errors: dict[int, Problem] = {}
    wider = dict(parsed.wider) if evolve else None
    columns = list(mapping.columns)
    found = column_values(mapping, parsed, raw, fmt, max_message_bytes, errors)
    values = _settled(columns, found, parsed.conflicts, errors, evolve)
    # A key's or header's text has no writer schema: any value it holds may widen its column.
    arrays = [convert_values(c, v, len(good), errors, wider,
                             parsed.widen_by_value or c.name in parsed.wider or from_kafka(c.source))
              for c, v in zip(columns, values)]
    changes = set(parsed.changes.values())
    if not evolve:  # a field that became a record or a union: with evolution, its parts are new columns
        changes |= {SchemaChange.incompatible(c.column, c.ours, c.theirs) for c in parsed.conflicts if c.nested}
    changes |= {p.change for p in errors.values() if p.change}
    if not evolve:
        changes |= {SchemaChange.ignored(c.name, c.type, ".".join(c.source)) for c in parsed.proposed}
        changes |= {SchemaChange.incompatible(name, mapping_type(mapping, name), t.name)
                    for name, t in parsed.wider.items()}
    evolution = Evolution(tuple(parsed.proposed), tuple(sorted((k, v.name) for k, v in wider.items()))) \
        if evolve else Evolution()
    ops = parsed.ops
    if errors:
        keep = pa.array([i not in errors for i in range(len(good))])
        arrays = [pc.filter(a, keep) for a in arrays]
        for j in sorted(errors):
            bad.append((good[j], errors[j].stage, errors[j].message))
        ops = None if ops is None else [op for j, op in enumerate(ops) if j not in errors]
        good = [g for j, g in enumerate(good) if j not in errors]
    target = pa.Table.from_arrays(
        arrays + _meta_arrays(raw, good) + [pa.array([ingested_at] * len(good), INGESTED_AT.arrow_type)],
        schema=mapping.arrow_schema(),
    )
    return Decoded(target, dead_letter_rows(raw, sorted(bad), ingested_at), evolution, changes, parsed.schemas, ops)


def _keyed(raw: RawBatch, mapping: Mapping, max_message_bytes: int, ingested_at: dt.datetime,
           fmt: MessageFormat | None, evolve: bool, keyed: Keyed) -> Decoded:
    """An upsert stream's batch: each key's newest row, the keys deleted, the messages without a key
    as dead letters. Tombstones (null values, or JSON's wrapped nulls) name their key in the Kafka key."""
    stones = tombstones(raw.values, fmt)
    gone = set(stones)
    rest = [i for i in range(len(raw.values)) if i not in gone]
    part = raw.take(rest) if stones else raw
    decoded = _decode(part, mapping, max_message_bytes, ingested_at, fmt, evolve)
    if decoded.evolution:
        return decoded  # written once the table has changed: nothing to reduce yet
    key_columns = keyed.key_columns(mapping)
    keys = [c.name for c in key_columns]
    target, ops = decoded.target, decoded.ops or [Op.UPSERT] * decoded.target.num_rows
    unkeyed = {i: why for i, why in missing_key(target, key_columns) if ops[i] is not Op.TRUNCATE}
    bad = []
    if unkeyed:
        partitions = target.column(KAFKA_PARTITION.name).to_pylist()
        offsets = target.column(KAFKA_OFFSET.name).to_pylist()
        position = {(p, o): rest[k] if stones else k for k, (p, o) in enumerate(zip(part.partitions, part.offsets))}
        bad = [(position[(partitions[i], offsets[i])], "key", why) for i, why in unkeyed.items()]
    # Every keyed message: its key, position and op, and where it comes from (a row of `target`, or
    # -1 - n: the n-th tombstone whose key the Kafka key gave).
    position = [KAFKA_PARTITION.name, KAFKA_OFFSET.name, KAFKA_TIMESTAMP.name]
    entries = _entries(target.select(keys + position), [CODES[op] for op in ops], np.arange(target.num_rows))
    if unkeyed:
        entries = entries.filter(pa.array([i not in unkeyed for i in range(target.num_rows)]))
    if stones and keyed.tombstones_delete:
        arrays, held, why = tombstone_keys([raw.keys[i] for i in stones], fmt, key_columns, max_message_bytes,
                                           [raw.headers[i] for i in stones])
        bad += [(stones[j], "key", reason) for j, reason in why.items()]
        found = pa.Table.from_arrays(arrays + [pa.array([raw.partitions[stones[j]] for j in held], pa.int32()),
                                               pa.array([raw.offsets[stones[j]] for j in held], pa.int64()),
                                               _millis_to_ts([raw.timestamps[stones[j]] for j in held])],
                                     names=keys + position)
        entries = pa.concat_tables([entries, _entries(found, [CODES[Op.DELETE]] * len(held),
                                                      -1 - np.arange(len(held)))], promote_options="default")
        # the tombstones among the rows, in each partition's offset order
        entries = entries.take(pc.sort_indices(entries, [(KAFKA_PARTITION.name, "ascending"),
                                                         (KAFKA_OFFSET.name, "ascending")]))
    write, delete, truncated = newest_per_key(entries, keys)
    rows = entries.column(SOURCE).to_numpy()[write]
    return Decoded(target.take(pa.array(rows)),
                   pa.concat_tables([decoded.dead_letter, dead_letter_rows(raw, sorted(bad), ingested_at)]),
                   decoded.evolution, decoded.changes, decoded.schemas, None,
                   entries.select(keys + position).take(pa.array(delete)), truncated,
                   0 if keyed.tombstones_delete else len(stones))


def _entries(keyed: pa.Table, codes: list[int], sources: np.ndarray) -> pa.Table:
    return keyed.append_column(OP, pa.array(codes, pa.int8())).append_column(SOURCE, pa.array(sources, pa.int64()))


def _settled(columns: list[Column], values: list[Any], conflicts: list[Conflict], errors: dict[int, Problem],
             evolve: bool) -> list[Any]:
    """Each column's values, without those its writer schema gave another type: those rows go to the
    dead-letter table (stage `schema`), except where a field became a record or a union and schema
    evolution puts its parts in columns of their own."""
    where = {c.name: k for k, c in enumerate(columns)}
    values = list(values)
    for conflict in conflicts:
        k = where.get(conflict.column)
        if k is None or values[k] is None:
            continue
        column = values[k].to_pylist() if isinstance(values[k], (pa.Array, pa.ChunkedArray)) else list(values[k])
        field_path = describe(columns[k].source)
        for position in conflict.positions:
            if column[position] is None:
                continue
            column[position] = None
            if not (conflict.nested and evolve):
                errors.setdefault(position, Problem(
                    "schema", f"field {field_path}: {conflict.writer} has {conflict.theirs} where column "
                              f"{conflict.column!r} is {conflict.ours}",
                    SchemaChange.incompatible(conflict.column, conflict.ours, conflict.theirs)))
        values[k] = column
    return values


def mapping_type(mapping: Mapping, name: str) -> str:
    return next((c.type for c in mapping.columns if c.name == name), "")


def dead_letter_rows(raw: RawBatch, bad: list[tuple[int, str, str]], ingested_at: dt.datetime) -> pa.Table:
    if not bad:  # most batches: one empty table (immutable) rather than nine empty arrays built each time
        return _NO_DEAD_LETTERS
    return _dead_letter_rows(raw, bad, ingested_at)


def _dead_letter_rows(raw: RawBatch, bad: list[tuple[int, str, str]], ingested_at: dt.datetime) -> pa.Table:
    rows = [b[0] for b in bad]
    return pa.Table.from_arrays(
        _meta_arrays(raw, rows)
        + [
            pa.array([raw.keys[i] for i in rows], pa.binary()),
            pa.array([raw.values[i] for i in rows], pa.binary()),
            headers_array([raw.headers[i] for i in rows]),
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


_NO_DEAD_LETTERS = _dead_letter_rows(RawBatch(), [], dt.datetime(1970, 1, 1, tzinfo=UTC))
