"""The DataFrame -> DataFrame form of Floe's decoding, on a real local SparkSession."""

import orjson
from pyspark.testing import assertDataFrameEqual

from appliance.decode import RawBatch
from appliance.mapping import Column, Mapping
from appliance.transforms import dead_letter_rows, decode_json, target_rows

MAPPING = Mapping((Column("id", "long", ("id",)), Column("city", "string", ("address", "city"))))


def raw_frame(spark, values):
    n = len(values)
    raw = RawBatch(partitions=[0] * n, offsets=list(range(n)), timestamps=[1_700_000_000_000] * n,
                   keys=[None] * n, values=values, headers=[None] * n)
    return spark.createDataFrame(raw.to_arrow())


def test_decode_json_routes_every_record_once(spark):
    values = [orjson.dumps({"id": 1, "address": {"city": "Oslo"}}), b"{bad", orjson.dumps({"id": "x"}),
              orjson.dumps({"id": 2})]
    decoded = decode_json(raw_frame(spark, values).repartition(2), MAPPING)
    good = target_rows(decoded, MAPPING).select("id", "city", "_kafka_offset")
    assertDataFrameEqual(good, spark.createDataFrame([(1, "Oslo", 0), (2, None, 3)], "id long, city string, _kafka_offset long"))
    bad = dead_letter_rows(decoded).select("_kafka_offset", "error_stage", "raw_value")
    assertDataFrameEqual(bad, spark.createDataFrame([(1, "decode", b"{bad"), (2, "convert", b'{"id":"x"}')],
                                                    "_kafka_offset long, error_stage string, raw_value binary"))
    assert decoded.count() == len(values)
