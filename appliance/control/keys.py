"""An upsert stream's columns and key, from a sample of its topic.

A Debezium stream's columns are its events' rows (`after`), not the envelope's; its key defaults to
the Kafka key's fields (the table's primary key, as Debezium writes it), as does a plain upsert
stream's when its Kafka keys are records. The wizard proposes the same key.
"""

from __future__ import annotations

from typing import Any

import orjson

from appliance.decode.debezium import CDC_COLUMNS, row_columns_of, unwrapped
from appliance.kafka.client import SampledMessage
from appliance.kafka.settings import RegistrySettings
from appliance.model.mapping import Column, Mapping
from appliance.model.sources import KEY


def change_rows(sampled: list[SampledMessage]) -> list[dict[str, Any]]:
    """The rows of sampled Debezium JSON events: `after`, or `before` for a delete."""
    rows = []
    for message in sampled:
        if not message.value:
            continue
        try:
            event = unwrapped(orjson.loads(message.value))
        except orjson.JSONDecodeError:
            continue
        if isinstance(event, dict):
            row = event.get("after") if event.get("op") != "d" else event.get("before")
            if isinstance(row, dict):
                rows.append(row)
    return rows


def row_columns(envelope: Mapping, cdc_columns: bool) -> Mapping:
    """A Debezium envelope's mapping (from the registry's schema) as its row's: the columns under
    `after`, their sources relative to it; with `cdc_columns`, the _cdc_* columns after them."""
    return with_cdc_columns(Mapping(tuple(row_columns_of(envelope.columns))), cdc_columns)


def with_cdc_columns(mapping: Mapping, cdc_columns: bool) -> Mapping:
    if not cdc_columns:
        return mapping
    names = {c.name for c in mapping.columns}
    return Mapping(tuple(mapping.columns) + tuple(c for c in CDC_COLUMNS if c.name not in names))


def json_keys(sampled: list[SampledMessage]) -> list[Any]:
    """The sampled messages' Kafka keys that are JSON (Kafka Connect's wrapper taken off), decoded."""
    out = []
    for message in sampled:
        key = message.key
        if not key or (key[0] == 0 and len(key) < 5):
            continue
        try:
            out.append(unwrapped(orjson.loads(key[5:] if key[0] == 0 else key)))
        except orjson.JSONDecodeError:
            continue
    return out


def kafka_key_fields(sampled: list[SampledMessage], fmt: str, registry: RegistrySettings | None) -> list[str]:
    """The field names of the sampled messages' Kafka keys, when they are records (JSON objects, or
    registry-framed Avro or Protobuf); empty when they are bare values or absent."""
    for message in sorted(sampled, key=lambda m: m.offset, reverse=True):
        key = message.key
        if not key:
            continue
        if key[0] == 0 and fmt != "json" and registry is not None:
            return _registered_fields(key, fmt, registry)
        try:
            value = unwrapped(orjson.loads(key[5:] if key[0] == 0 and len(key) >= 5 else key))
        except orjson.JSONDecodeError:
            return []
        return [str(k) for k in value] if isinstance(value, dict) else []
    return []


def _registered_fields(key: bytes, fmt: str, registry: RegistrySettings) -> list[str]:
    from appliance.decode.registered import AvroFormat, ProtobufFormat

    nothing = Mapping((Column("__key", "string", ("__key",)),))  # every field of the key's schema is then new
    parsed = (AvroFormat if fmt == "avro" else ProtobufFormat)(registry).parse([key], len(key) + 1, nothing)
    return [c.source[0] for c in parsed.proposed if len(c.source) == 1]


def proposed_key(mapping: Mapping, key_fields: list[str]) -> tuple[str, ...]:
    """The mapped columns that hold the Kafka key's fields (by the value's field, by the key's, else by
    name); empty unless every field has one."""
    by_source = {c.source: c.name for c in mapping.columns}
    names = {c.name for c in mapping.columns}
    found = [by_source.get((f,)) or by_source.get((*KEY, f)) or (f if f in names else None) for f in key_fields]
    return tuple(found) if found and all(found) else ()
