"""The Iceberg schemas of a stream's tables, with the field ids Floe has always given them."""

from __future__ import annotations

import itertools

from pyiceberg.schema import Schema
from pyiceberg.types import BinaryType, ListType, NestedField, StringType, StructType

from appliance.model.columns import (
    ERROR_MESSAGE,
    ERROR_STAGE,
    HEADERS,
    INGESTED_AT,
    KAFKA_COLUMNS,
    RAW_KEY,
    RAW_VALUE,
    MetaColumn,
)
from appliance.model.mapping import Mapping


def _field(field_id: int, column: MetaColumn) -> NestedField:
    return NestedField(field_id, column.name, column.iceberg_type, required=False)


def target_iceberg_schema(mapping: Mapping) -> Schema:
    """The mapped columns (ids 1..n), then Floe's own; the fields inside lists and maps after them all."""
    n = len(mapping.columns) + 1
    nested = itertools.count(n + len(KAFKA_COLUMNS) + 1)
    fields = [NestedField(i, c.name, c.iceberg_type(lambda: next(nested)), required=False)
              for i, c in enumerate(mapping.columns, 1)]
    fields += [_field(n + i, c) for i, c in enumerate(KAFKA_COLUMNS)]
    fields.append(_field(n + len(KAFKA_COLUMNS), INGESTED_AT))
    return Schema(*fields)


def dead_letter_iceberg_schema() -> Schema:
    header = StructType(
        NestedField(10, "key", StringType(), required=False), NestedField(11, "value", BinaryType(), required=False)
    )
    return Schema(
        *[_field(1 + i, c) for i, c in enumerate(KAFKA_COLUMNS)],
        _field(4, RAW_KEY),
        _field(5, RAW_VALUE),
        NestedField(6, HEADERS, ListType(9, header, element_required=False), required=False),
        _field(7, ERROR_STAGE),
        _field(8, ERROR_MESSAGE),
        _field(12, INGESTED_AT),
    )


def same_columns(a: Schema, b: Schema) -> bool:
    return [(f.name, str(f.field_type)) for f in a.fields] == [(f.name, str(f.field_type)) for f in b.fields]
