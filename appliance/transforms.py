"""Floe's decoding as Spark DataFrame -> DataFrame functions, for pipelines tested in pytest.

The engine runs the same `decode_batch` fused with reading and writing inside its tasks
(see `batch.py`), so message bytes never cross into the JVM; these functions give the
same routing to anyone holding raw Kafka records in a DataFrame (columns as in
`decode.RAW_SCHEMA`: _kafka_partition, _kafka_offset, _kafka_timestamp, key, value, headers).
"""

from __future__ import annotations

import datetime as dt
from typing import Iterator

import pyarrow as pa
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from appliance.decode import DEAD_LETTER_SCHEMA, RawBatch, decode_batch, target_schema
from appliance.mapping import Mapping

_DEAD_ONLY = ["raw_key", "raw_value", "headers", "error_stage", "error_message"]


def decoded_schema(mapping: Mapping) -> pa.Schema:
    """Target columns, then the dead-letter ones: `error_stage` is null on a good row."""
    return pa.schema(list(target_schema(mapping)) + [DEAD_LETTER_SCHEMA.field(n) for n in _DEAD_ONLY])


def decode_json(raw: DataFrame, mapping: Mapping, max_message_bytes: int = 1024 * 1024) -> DataFrame:
    """Every raw record once, decoded to the mapping's columns or marked with why it could not be."""
    schema = decoded_schema(mapping)

    def decode(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for batch in batches:
            out = decode_batch(RawBatch.from_arrow(batch), mapping, max_message_bytes, dt.datetime.now(dt.timezone.utc))
            good = out.target
            for name in _DEAD_ONLY:
                good = good.append_column(schema.field(name), pa.nulls(good.num_rows, schema.field(name).type))
            bad = out.dead_letter
            for field in target_schema(mapping):
                if field.name not in bad.column_names:
                    bad = bad.append_column(field, pa.nulls(bad.num_rows, field.type))
            yield from pa.concat_tables([good, bad.select(good.column_names)]).to_batches()

    from pyspark.sql.pandas.types import from_arrow_schema

    return raw.mapInArrow(decode, from_arrow_schema(schema))


def target_rows(decoded: DataFrame, mapping: Mapping) -> DataFrame:
    return decoded.where(F.col("error_stage").isNull()).select(*target_schema(mapping).names)


def dead_letter_rows(decoded: DataFrame) -> DataFrame:
    return decoded.where(F.col("error_stage").isNotNull()).select(*DEAD_LETTER_SCHEMA.names)
