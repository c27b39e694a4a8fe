"""Partitioning as a user writes it: parsed, checked against the columns, made an Iceberg spec and read
back from one; and a task's rows split by partition, one partition per file (no broker, no Spark)."""

from __future__ import annotations

import datetime as dt

import pyarrow as pa
import pytest
from pyiceberg.schema import Schema
from pyiceberg.transforms import BucketTransform, DayTransform, IdentityTransform
from pyiceberg.types import DoubleType, LongType, NestedField, StringType, TimestamptzType

from appliance.config.settings import ensure_home, load_settings
from appliance.core.errors import InvalidPartitioning
from appliance.model.partitioning import Partitioning, proposed
from appliance.tables.catalog import Catalog
from appliance.tables.datafiles import TableTarget, table_metadata, write_data_files
from appliance.tables.fastpath.appends import append_files

SCHEMA = Schema(NestedField(1, "id", LongType(), required=False), NestedField(2, "ts", TimestamptzType(),
                                                                             required=False),
                NestedField(3, "region", StringType(), required=False), NestedField(4, "amount", DoubleType(),
                                                                                    required=False))


def test_a_partitioning_reads_as_written_and_back_from_its_spec():
    layout = Partitioning.parse("day(ts), bucket(16, id),region , truncate(3, region)")
    assert str(layout) == "day(ts), bucket(16, id), region, truncate(3, region)"
    spec = layout.spec(SCHEMA)
    assert [(f.name, type(f.transform), f.source_id) for f in spec.fields] == [
        ("ts_day", DayTransform, 2), ("id_bucket_16", BucketTransform, 1), ("region", IdentityTransform, 3),
        ("region_trunc_3", type(spec.fields[3].transform), 3)]
    assert Partitioning.of(spec, SCHEMA) == layout
    assert not Partitioning.parse("none") and str(Partitioning.parse("")) == "none"


@pytest.mark.parametrize("text, said", [
    ("week(ts)", "is not one of"), ("bucket(0, id)", "at least 1"), ("day(nope)", "no column 'nope'"),
    ("day(amount)", "amount' is double, which day cannot take"), ("day(ts), day(ts)", "twice"),
    ("bucket(16 id)", "is not one of")])
def test_a_partitioning_that_cannot_be_used_is_one_line_naming_the_part(text, said):
    with pytest.raises(InvalidPartitioning, match=said):
        Partitioning.parse(text).check(SCHEMA)


def test_the_proposed_partitioning_is_day_of_the_event_time():
    assert proposed([("id", "long"), ("ordered_at", "timestamptz")]) == "day(ordered_at)"
    assert proposed([("id", "long"), ("name", "string")]) == "day(_kafka_timestamp)"


def test_a_tasks_rows_are_written_one_partition_per_file(floe_home):
    settings = load_settings()
    ensure_home(settings)
    catalog = Catalog(settings)
    table, _ = catalog.ensure_table("n.p", SCHEMA, Partitioning.parse("day(ts), bucket(4, id)"))
    day = dt.datetime(2026, 11, 1, tzinfo=dt.timezone.utc)
    rows = pa.table({"id": pa.array(range(200), pa.int64()),
                     "ts": pa.array([day + dt.timedelta(hours=7 * i) for i in range(200)], pa.timestamp("us", "UTC")),
                     "region": ["eu"] * 200, "amount": [1.0] * 200})
    files = write_data_files(TableTarget.of(table), rows)
    meta = table_metadata(TableTarget.of(table))
    seen = set()
    for f in files:
        days, bucket = f.partition[0], f.partition[1]
        assert (days, bucket) not in seen, "one file per partition"
        seen.add((days, bucket))
        low, high = f.lower_bounds[2], f.upper_bounds[2]
        first, last = int.from_bytes(low, "little") // 86_400_000_000, int.from_bytes(high, "little") // 86_400_000_000
        assert first == last == days, "every row of the file is in its day"
        assert f"ts_day={dt.date(1970, 1, 1) + dt.timedelta(days=days)}" in f.file_path
    assert sum(f.record_count for f in files) == 200 and meta.spec().spec_id == 0
    table = append_files(table, files, {})  # Floe's own manifests, for a partitioned table too
    assert table.scan().to_arrow().num_rows == 200
    read = table.inspect.partitions().column("partition").to_pylist()  # PyIceberg reads our manifests' values
    assert {((p["ts_day"] - dt.date(1970, 1, 1)).days, p["id_bucket_4"]) for p in read} == seen
