"""The column types a mapping can use, with their Iceberg and Arrow types."""

from __future__ import annotations

import pyarrow as pa
from pyiceberg.types import (
    BooleanType,
    DateType,
    DoubleType,
    FloatType,
    IcebergType,
    IntegerType,
    LongType,
    StringType,
    TimestampType,
    TimestamptzType,
)

# name -> (Iceberg type, Arrow type). `json` keeps any value as its JSON text.
TYPES: dict[str, tuple[IcebergType, pa.DataType]] = {
    "boolean": (BooleanType(), pa.bool_()),
    "int": (IntegerType(), pa.int32()),
    "long": (LongType(), pa.int64()),
    "float": (FloatType(), pa.float32()),
    "double": (DoubleType(), pa.float64()),
    "string": (StringType(), pa.string()),
    "json": (StringType(), pa.string()),
    "date": (DateType(), pa.date32()),
    "timestamp": (TimestampType(), pa.timestamp("us")),
    "timestamptz": (TimestamptzType(), pa.timestamp("us", tz="UTC")),
}
