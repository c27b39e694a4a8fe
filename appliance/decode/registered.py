"""Avro and Protobuf messages in the schema registry's wire format, decoded with their writer schemas.

Each task asks the registry once per schema id (the decoders are kept per Python worker):
a message's schema id says which writer schema decodes it. A message that is not in the
wire format, names an id the registry does not have, or does not match its schema is
dead-lettered with the reason; a registry that cannot be reached fails the batch, which
waits and is retried, so that no good message is ever dead-lettered for it.
"""

from __future__ import annotations

import json
import logging
import time
from dataclasses import dataclass
from operator import itemgetter
from typing import Any

import pyarrow as pa

from appliance.core.errors import SchemaError, SchemaNotFound
from appliance.decode import avro, protobuf, wire
from appliance.decode.avro_columns import MIN_MESSAGES as MIN_COLUMNAR
from appliance.decode.parsed import Conflict, Parsed, extract_columns, validate
from appliance.decode.protobuf_batch import batch_class, parse_many
from appliance.kafka.registry import Registry, registry
from appliance.kafka.settings import RegistrySettings
from appliance.model.changes import SchemaChange
from appliance.model.mapping import Column, Mapping
from appliance.model.types import parse_type, widens

log = logging.getLogger(__name__)


NOT_FOUND_TTL = 30.0  # seconds an id the registry did not know stays unknown before it is asked again


@dataclass(frozen=True)
class _Unknown:
    """A schema id the registry does not know, or one Floe cannot read: its messages' reason. Not
    knowing an id may pass (a registry replica catching up, a restore), so that is asked again after
    a while; a schema Floe cannot read stays so."""

    reason: str
    until: float = float("inf")  # monotonic time

    def stale(self) -> bool:
        return time.monotonic() >= self.until


def compare(columns: tuple[Column, ...], mapping: Mapping, parsed: Parsed, writer: str) -> list[Conflict]:
    """What a writer schema's columns mean for the mapping: new ones and wider ones (noted in `parsed`),
    and the columns whose field it changed incompatibly (returned, its rows still to be placed)."""
    by_source = {c.source: c for c in mapping.columns}
    known = mapping.sources()
    taken = {c.name for c in mapping.columns} | {c.name for c in parsed.proposed}
    conflicts = []
    for col in columns:
        mine = by_source.get(col.source)
        if mine is None:
            if col.source not in known and all(p.source != col.source for p in parsed.proposed):
                name, n = col.name, 2
                while name in taken:
                    name, n = f"{col.name}_{n}", n + 1
                taken.add(name)
                parsed.proposed.append(Column(name, col.type, col.source))
            continue
        if mine.type == col.type or mine.type == "json":
            continue
        ours, theirs = mine.ctype, parse_type(col.type)
        if widens(ours, theirs):
            parsed.wider[mine.name] = theirs
        elif not widens(theirs, ours):  # a narrower writer type fits the column as it is
            conflicts.append(Conflict(mine.name, ours.name, theirs.name, writer))
    # A field that became a record or a union: its parts are new columns; the old one holds none of it.
    inner = {c.source[:k] for c in columns for k in range(1, len(c.source))}
    for conflict in conflicts:
        parsed.changes[conflict.column] = SchemaChange.incompatible(conflict.column, conflict.ours, conflict.theirs)
    # (whether that is a change to tell depends on schema evolution: `decode` says)
    conflicts += [Conflict(c.name, c.type, "a record or a union", writer, nested=True)
                  for c in mapping.columns if c.source in inner and c.type != "json"]
    return conflicts


def _place(parsed: Parsed, conflicts: list[Conflict], positions: list[int]) -> None:
    for conflict in conflicts:
        conflict.positions = positions
        parsed.conflicts.append(conflict)


class _Registered:
    """What Avro and Protobuf share: the header, one decoder per schema, dead letters for bad ids."""

    name = ""

    def __init__(self, settings: RegistrySettings) -> None:
        self.settings = settings

    @property
    def registry(self) -> Registry:
        return registry(self.settings)

    def _decoder(self, key: tuple) -> Any:
        def make() -> Any:
            try:
                return self.build(key)
            except SchemaNotFound:
                return _Unknown(f"schema id {key[0]} is not in the schema registry {self.settings.display_url}",
                                time.monotonic() + NOT_FOUND_TTL)
            except SchemaError as exc:
                return _Unknown(str(exc))
        found = self.registry.parsed((self.name, *key), make)
        if isinstance(found, _Unknown) and found.stale():
            self.registry.forget((self.name, *key))
            found = self.registry.parsed((self.name, *key), make)
        return found

    def build(self, key: tuple) -> Any:
        raise NotImplementedError


class AvroFormat(_Registered):
    name = "avro"

    def build(self, key: tuple) -> avro.AvroDecoder:
        from confluent_kafka.schema_registry._sync.avro import _resolve_named_schema

        schema_id = key[0]
        raw = self.registry.raw(schema_id)
        if (raw.schema_type or "AVRO") != "AVRO":
            raise SchemaError(f"schema id {schema_id} is a {raw.schema_type} schema, not Avro")
        named = self.registry.call(lambda: _resolve_named_schema(raw, self.registry.client),
                                   f"references of schema id {schema_id}")
        try:
            return avro.AvroDecoder(json.loads(raw.schema_str), named)
        except (ValueError, KeyError, TypeError) as exc:
            raise SchemaError(f"schema id {schema_id}: Avro schema Floe cannot read: {exc}") from None

    def parse(self, values: list[bytes | None], max_message_bytes: int, mapping: Mapping) -> Parsed:
        ok, bad = validate(values, max_message_bytes)
        headers, malformed = wire.grouped(values, ok, wire.avro_header)
        bad += [(i, "decode", reason) for i, reason in malformed]
        groups: dict[int, list[int]] = {}
        for (schema_id,), _, members in headers:
            groups.setdefault(schema_id, []).extend(members)
        decoders: dict[int, avro.AvroDecoder] = {}
        for schema_id, members in list(groups.items()):
            decoder = self._decoder((schema_id,))
            if isinstance(decoder, _Unknown):
                bad += [(i, "decode", decoder.reason) for i in groups.pop(schema_id)]
            else:
                decoders[schema_id] = decoder
        parsed = _columnar(groups, decoders, values, mapping) if len(groups) == 1 else None
        writers = None  # the schema id of each parsed message, when there are several
        if parsed is None:
            parsed, writers = _one_by_one(groups, decoders, values)
        parsed.bad = bad + parsed.bad
        parsed.widen_by_value = False
        for schema_id, decoder in decoders.items():
            conflicts = compare(decoder.layout.columns, mapping, parsed, f"schema id {schema_id}")
            if conflicts:
                _place(parsed, conflicts, list(range(len(parsed.good))) if writers is None
                       else [k for k, w in enumerate(writers) if w == schema_id])
        return parsed


def _columnar(groups: dict[int, list[int]], decoders: dict[int, avro.AvroDecoder], values: list,
              mapping: Mapping) -> Parsed | None:
    """The one writer schema's messages decoded at once into columns, when they are many and
    DuckDB's reader takes the schema; None when not, or when some body does not decode."""
    [(schema_id, members)] = groups.items()
    decoder = decoders[schema_id]
    columnar = decoder.columnar
    if columnar is None or len(members) < MIN_COLUMNAR:
        return None
    if any(len(values[i]) == wire.HEADER for i in members):
        return None  # an empty body: DuckDB's reader would repeat the record before it, not fail
    inner = {path[:k] for c in decoder.layout.columns for path in (c.source,) for k in range(1, len(path))}
    if any(c.source in inner for c in mapping.columns):
        return None  # a column holding a whole record (as JSON): only decoded records have those
    try:
        columns = columnar.columns([values[i][wire.HEADER:] for i in members])
    except Exception as exc:  # DuckDB's errors, of its own kinds: decode them one by one instead
        log.info("schema id %s: columnar read failed (%s); decoding message by message", schema_id, exc)
        return None
    return Parsed(list(members), [], lambda cols: [columns.get(c.source) for c in cols],
                  schemas={str(schema_id): len(members)})


def _one_by_one(groups: dict[int, list[int]], decoders: dict[int, avro.AvroDecoder], values: list
                ) -> tuple[Parsed, list[int]]:
    """The messages decoded one by one (the bad ones dead-lettered), and each one's schema id."""
    good: list[int] = []
    records: list[dict[str, Any]] = []
    writers: list[int] = []
    bad: list = []
    counts: dict[str, int] = {}
    for schema_id, members in groups.items():
        decode = decoders[schema_id].decode
        for i in members:
            try:
                records.append(decode(values[i][wire.HEADER:]))
            except Exception as exc:  # fastavro raises what the bytes make it raise: EOF, UnicodeError...
                why = str(exc) or "the payload ends before the record does"
                bad.append((i, "decode", f"payload does not match writer schema id {schema_id}: "
                                         f"{type(exc).__name__}: {why}"))
                continue
            good.append(i)
            writers.append(schema_id)
            counts[str(schema_id)] = counts.get(str(schema_id), 0) + 1
    order = sorted(range(len(good)), key=good.__getitem__)  # back in the batch's order
    good, records, writers = [good[k] for k in order], [records[k] for k in order], [writers[k] for k in order]
    parsed = Parsed(good, bad, lambda columns: extract_columns(records, [c.source for c in columns]), schemas=counts)
    return parsed, writers


@dataclass(frozen=True)
class _MessageType:
    message_class: Any
    batch_class: Any  # many of them parsed in one call (`protobuf_batch`); None: one by one
    layout: protobuf.ProtobufLayout


class ProtobufFormat(_Registered):
    name = "protobuf"

    def build(self, key: tuple) -> _MessageType:
        from confluent_kafka.schema_registry._sync.protobuf import _resolve_named_schema
        from confluent_kafka.schema_registry.common.protobuf import _init_pool, _str_to_proto
        from google.protobuf.descriptor_pool import DescriptorPool
        from google.protobuf.message_factory import GetMessageClass

        schema_id, indexes = key
        raw = self.registry.raw(schema_id, fmt="serialized")
        if raw.schema_type != "PROTOBUF":
            raise SchemaError(f"schema id {schema_id} is a {raw.schema_type or 'AVRO'} schema, not Protobuf")
        pool = DescriptorPool()
        _init_pool(pool)
        self.registry.call(lambda: _resolve_named_schema(raw, self.registry.client, pool),
                           f"references of schema id {schema_id}")
        try:
            file = pool.Add(_str_to_proto("default", raw.schema_str))
        except Exception as exc:  # a descriptor protobuf cannot build: its own error kinds
            raise SchemaError(f"schema id {schema_id}: Protobuf schema Floe cannot read: {exc}") from None
        descriptor = _message_at(file, indexes, schema_id)
        return _MessageType(GetMessageClass(descriptor), batch_class(descriptor), protobuf.layout(descriptor))

    def parse(self, values: list[bytes | None], max_message_bytes: int, mapping: Mapping) -> Parsed:
        ok, bad = validate(values, max_message_bytes)
        headers, malformed = wire.grouped(values, ok, wire.protobuf_header)
        bad += [(i, "decode", reason) for i, reason in malformed]
        types: dict[tuple, _MessageType] = {}
        decoded: dict[tuple, tuple[list[int], list[Any]]] = {}
        merged = False
        for key, at, members in headers:
            found = self._decoder(key)
            if isinstance(found, _Unknown):
                bad += [(i, "decode", found.reason) for i in members]
                continue
            types[key] = found
            good, messages = parse_many(
                found.message_class, found.batch_class, members, at, values,
                lambda i, why, schema_id=key[0]: bad.append(
                    (i, "decode", f"payload does not match writer schema id {schema_id}: {why}")))
            if key in decoded:  # the same header written two ways (index [0] in full or as 0)
                merged = True
                good, messages = decoded[key][0] + good, decoded[key][1] + messages
            decoded[key] = (good, messages)
        if len(decoded) == 1 and not merged:  # one header: its messages are in the batch's order
            [(key, (order, messages))] = decoded.items()
            groups = {key: list(enumerate(messages))}
        else:
            order = sorted(i for members, _ in decoded.values() for i in members)
            position = {i: n for n, i in enumerate(order)}
            groups = {k: sorted(((position[i], m) for i, m in zip(members, messages)), key=itemgetter(0))
                      for k, (members, messages) in decoded.items()}
        parsed = Parsed(order, bad, lambda columns: _values(groups, types, columns, len(order)),
                        schemas={_label(k): len(v) for k, v in groups.items()}, widen_by_value=False)
        for key, found in types.items():
            writer = f"schema id {key[0]}" + ("" if key[1] == (0,) else f" (message {'.'.join(map(str, key[1]))})")
            conflicts = compare(found.layout.columns, mapping, parsed, writer)
            if conflicts and key in groups:
                _place(parsed, conflicts, [position for position, _ in groups[key]])
        return parsed


def _label(key: tuple) -> str:
    """A Protobuf writer schema as the wire format names it: its id, and the message indexes."""
    return f"{key[0]}:{'.'.join(map(str, key[1]))}"


def _values(groups: dict[tuple, list[tuple[int, Any]]], types: dict[tuple, _MessageType], columns: list[Column],
            n: int) -> list[Any]:
    if len(groups) == 1:  # one message type: its columns as the getters read them, in order already
        [(key, members)] = groups.items()
        getters = {c.source: g for c, g in zip(types[key].layout.columns, types[key].layout.getters)}
        messages, parents = [m for _, m in members], {}
        return [getters[c.source].values(messages, parents) if c.source in getters else None for c in columns]
    out = [[None] * n for _ in columns]
    for key, members in groups.items():
        getters = {c.source: g for c, g in zip(types[key].layout.columns, types[key].layout.getters)}
        messages = [m for _, m in members]
        for col, values in zip(columns, out):
            getter = getters.get(col.source)
            if getter is not None:
                found = getter.values(messages)
                if isinstance(found, pa.Array):
                    found = found.to_pylist()
                for (position, _), value in zip(members, found):
                    values[position] = value
    return out


def _message_at(file: Any, indexes: tuple[int, ...], schema_id: int) -> Any:
    """The message type that the wire format's indexes name within the schema's file."""
    types = file.message_types_by_name
    candidates = list(file.message_types_by_name.values()) if types else []
    descriptor = None
    for depth, index in enumerate(indexes):
        if not 0 <= index < len(candidates):
            raise SchemaError(f"message index {'.'.join(map(str, indexes))} does not exist in schema id {schema_id} "
                              f"(level {depth} has {len(candidates)} message types)")
        descriptor = candidates[index]
        candidates = list(descriptor.nested_types)
    return descriptor
