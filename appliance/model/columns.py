"""The columns Floe adds to every table, defined once: names, Arrow types, Iceberg types.

Target tables get the mapped columns, then the Kafka metadata and `_ingested_at`; the
dead-letter table keeps the raw message and why it could not be decoded.
"""

from __future__ import annotations

from dataclasses import dataclass

import pyarrow as pa
from pyiceberg.types import (
    BinaryType,
    IcebergType,
    IntegerType,
    LongType,
    StringType,
    TimestamptzType,
)

UTC_MICROS = pa.timestamp("us", tz="UTC")


@dataclass(frozen=True)
class MetaColumn:
    name: str
    arrow_type: pa.DataType
    iceberg_type: IcebergType

    @property
    def field(self) -> pa.Field:
        return pa.field(self.name, self.arrow_type)


KAFKA_PARTITION = MetaColumn("_kafka_partition", pa.int32(), IntegerType())
KAFKA_OFFSET = MetaColumn("_kafka_offset", pa.int64(), LongType())
KAFKA_TIMESTAMP = MetaColumn("_kafka_timestamp", UTC_MICROS, TimestamptzType())
INGESTED_AT = MetaColumn("_ingested_at", UTC_MICROS, TimestamptzType())

KAFKA_COLUMNS = (KAFKA_PARTITION, KAFKA_OFFSET, KAFKA_TIMESTAMP)

# A mapping may not reuse these names.
RESERVED_COLUMNS = tuple(c.name for c in (*KAFKA_COLUMNS, INGESTED_AT))

HEADERS_TYPE = pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))

# The dead-letter table's own columns, between the Kafka metadata and `_ingested_at`.
RAW_KEY = MetaColumn("raw_key", pa.binary(), BinaryType())
RAW_VALUE = MetaColumn("raw_value", pa.binary(), BinaryType())
HEADERS = "headers"  # list<struct<key string, value binary>>: its Iceberg type needs field ids (tables.schemas)
ERROR_STAGE = MetaColumn("error_stage", pa.string(), StringType())
ERROR_MESSAGE = MetaColumn("error_message", pa.string(), StringType())

DEAD_LETTER_SCHEMA = pa.schema(
    [c.field for c in KAFKA_COLUMNS]
    + [RAW_KEY.field, RAW_VALUE.field, pa.field(HEADERS, HEADERS_TYPE), ERROR_STAGE.field, ERROR_MESSAGE.field,
       INGESTED_AT.field]
)

