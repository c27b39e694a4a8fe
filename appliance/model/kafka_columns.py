"""A stream's Kafka key and headers as columns of its table (`--kafka-columns key,headers`), and the key's
fields a keyed topic proposes as columns.

The columns are mapped columns like any other, filled from the Kafka sources (`model.sources`):
`_kafka_key` (binary, `@key`: the key's exact bytes) and `_kafka_headers` (`@headers`: every header, as
the dead-letter table keeps them). So the table's schema and its recorded sources carry them, evolution
and `floe table alter` treat them as the other columns, and a replayed dead letter fills them too.
"""

from __future__ import annotations

from typing import Any, Iterable

from appliance.core.errors import MappingError
from appliance.model.mapping import Column, Mapping
from appliance.model.sources import HEADERS, HEADERS_TYPE_NAME, KEY, from_kafka

BY_CHOICE = {
    "key": Column("_kafka_key", "binary", KEY),
    "headers": Column("_kafka_headers", HEADERS_TYPE_NAME, HEADERS),
}
CHOICES = tuple(BY_CHOICE)


def parse_kafka_columns(text: str | Iterable[str] | None) -> tuple[str, ...]:
    """`key,headers` (either or both) as a tuple in that order; a one-line error naming the allowed values."""
    if not text:
        return ()
    parts = [p.strip() for p in (text.split(",") if isinstance(text, str) else text)]
    wrong = [p for p in parts if p not in BY_CHOICE]
    if wrong or not parts:
        raise MappingError(f"kafka columns {wrong[0] if wrong else text!r} not allowed: use key, headers or "
                           "key,headers")
    return tuple(c for c in CHOICES if c in parts)


def with_kafka_columns(mapping: Mapping, kafka_columns: tuple[str, ...]) -> Mapping:
    """The mapping with the chosen Kafka columns after its own (those it already has by name kept as they are)."""
    names = {c.name for c in mapping.columns}
    extra = tuple(BY_CHOICE[k] for k in kafka_columns if BY_CHOICE[k].name not in names)
    return Mapping(tuple(mapping.columns) + extra, mapping.ignored) if extra else mapping


def with_key_fields(mapping: Mapping, keys: list[Any]) -> Mapping:
    """The mapping with a column for each field of the sampled keys (JSON objects) that the value does not
    carry itself under the same name: source `@key.FIELD`, named for the field (`key_FIELD` where a value
    column has that name). A key field the value holds at its top level is the same id (Debezium's key,
    most producers' keys) and is left to the value's column."""
    from appliance.model.inference import infer_mapping

    objects = [k for k in keys if isinstance(k, dict) and k]
    if not objects:
        return mapping
    found = infer_mapping(objects).columns
    value_fields = {c.source[0] for c in mapping.columns if not from_kafka(c.source)}
    names = {c.name for c in mapping.columns}
    extra = []
    for col in found:
        if col.source[0] in value_fields:
            continue
        name, n = col.name if col.name not in names else f"key_{col.name}", 2
        while name in names:
            name, n = f"key_{col.name}_{n}", n + 1
        names.add(name)
        extra.append(Column(name, col.type, (*KEY, *col.source)))
    return Mapping(tuple(mapping.columns) + tuple(extra), mapping.ignored) if extra else mapping
