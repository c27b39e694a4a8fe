"""A snapshot's summary (`tables/fastpath/summaries.py`) against PyIceberg's own, the code it stands in for."""

from __future__ import annotations

import pytest
from pyiceberg.manifest import DataFile, DataFileContent, FileFormat
from pyiceberg.partitioning import PartitionField, PartitionSpec
from pyiceberg.schema import Schema
from pyiceberg.table.snapshots import (
    Operation,
    Snapshot,
    SnapshotSummaryCollector,
    Summary,
    update_snapshot_summaries,
)
from pyiceberg.transforms import DayTransform, IdentityTransform
from pyiceberg.typedef import Record
from pyiceberg.types import DoubleType, NestedField, StringType, TimestampType

from appliance.core.cache import Cache
from appliance.tables.fastpath import summaries
from appliance.tables.fastpath.summaries import snapshot_summary

SCHEMA = Schema(NestedField(1, "ts", TimestampType(), required=False), NestedField(2, "region", StringType(), required=False),
                NestedField(3, "score", DoubleType(), required=False))
SPECS = {
    0: PartitionSpec(spec_id=0),
    1: PartitionSpec(PartitionField(1, 1000, DayTransform(), "ts_day"),
                     PartitionField(2, 1001, IdentityTransform(), "region"), spec_id=1),
    2: PartitionSpec(PartitionField(3, 1000, IdentityTransform(), "score"), spec_id=2),
}


def _file(n: int, rows: int, partition: tuple = (), content: DataFileContent = DataFileContent.DATA) -> DataFile:
    f = DataFile.from_args(content=content, file_path=f"file:///w/t/data/{n}.parquet", file_format=FileFormat.PARQUET,
                           partition=Record(*partition), record_count=rows, file_size_in_bytes=100 * rows)
    return f


def _parent(**totals: str) -> Snapshot:
    return Snapshot(snapshot_id=1, sequence_number=1, timestamp_ms=1, manifest_list="file:///w/t/list.avro",
                    summary=Summary(operation=Operation.APPEND, **totals))


def _pyiceberg(operation, added, removed, properties, parent) -> Summary:
    collector = SnapshotSummaryCollector()
    for f, spec_id in added:
        collector.add_file(data_file=f, partition_spec=SPECS[spec_id], schema=SCHEMA)
    for f, spec_id in removed:
        collector.remove_file(data_file=f, partition_spec=SPECS[spec_id], schema=SCHEMA)
    totalled = Operation.OVERWRITE if operation == Operation.REPLACE else operation
    summary = update_snapshot_summaries(summary=Summary(operation=totalled, **collector.build(), **properties),
                                        previous_summary=parent.summary if parent is not None else None)
    return Summary(operation=operation, **summary.additional_properties)


PARENT = dict(**{"total-data-files": "10", "total-delete-files": "2", "total-records": "500",
                 "total-files-size": "50000", "total-position-deletes": "7", "total-equality-deletes": "0"})

CASES = {
    "a first append, unpartitioned": (Operation.APPEND, [(_file(1, 3), 0)], [], {"floe.offsets": "{}"}, None),
    "an append on a parent": (Operation.APPEND, [(_file(1, 3), 0), (_file(2, 4), 0)], [], {"floe.stream-id": "s"},
                              _parent(**PARENT)),
    "an append over partitions, two files in one": (
        Operation.APPEND, [(_file(1, 3, (19000, "eu")), 1), (_file(2, 1, (19000, "eu")), 1),
                           (_file(3, 2, (19001, None)), 1)], [], {}, _parent(**PARENT)),
    "a delta: rows and position deletes": (
        Operation.OVERWRITE, [(_file(1, 3, (19000, "eu")), 1),
                              (_file(2, 2, (19000, "eu"), DataFileContent.POSITION_DELETES), 1)], [], {},
        _parent(**PARENT)),
    "a rewrite, totalled as an overwrite": (
        Operation.REPLACE, [(_file(9, 8), 0)], [(_file(1, 3), 0), (_file(2, 5), 0),
                                                (_file(3, 2, (), DataFileContent.POSITION_DELETES), 0)],
        {"floe.rewrite": "compact"}, _parent(**PARENT)),
    "a delete across specs": (Operation.DELETE, [], [(_file(1, 3), 0), (_file(2, 3, (19000, "us")), 1)], {},
                              _parent(**PARENT)),
    "a parent without some totals": (Operation.APPEND, [(_file(1, 3), 0)], [], {},
                                     _parent(**{"total-records": "5", "total-data-files": "1"})),
    "more removed than the parent had": (Operation.DELETE, [], [(_file(1, 30), 0)], {},
                                         _parent(**{"total-records": "5", "total-data-files": "0"})),
    "-0.0 and 0.0: two partitions": (Operation.APPEND, [(_file(1, 1, (-0.0,)), 2), (_file(2, 1, (0.0,)), 2)], [], {},
                                     None),
}


@pytest.mark.parametrize("case", CASES)
def test_a_summary_is_pyicebergs_key_for_key_in_its_order(case):
    operation, added, removed, properties, parent = CASES[case]
    expected = _pyiceberg(operation, added, removed, properties, parent)
    for _ in range(2):  # the second time from the kept partition paths
        got = snapshot_summary(operation, SCHEMA, SPECS, added, removed, properties, parent)
        assert got.operation == expected.operation
        assert list(got.additional_properties.items()) == list(expected.additional_properties.items())


def test_a_parents_unreadable_total_is_refused_as_pyiceberg_refuses_it():
    parent = _parent(**{**PARENT, "total-records": "many"})
    with pytest.raises(ValueError, match="total-records"):
        _pyiceberg(Operation.APPEND, [(_file(1, 3), 0)], [], {}, parent)
    with pytest.raises(ValueError, match="total-records"):
        snapshot_summary(Operation.APPEND, SCHEMA, SPECS, [(_file(1, 3), 0)], [], {}, parent)


def test_partition_paths_are_kept_per_spec_and_schema_objects_and_bounded(monkeypatch):
    monkeypatch.setattr(summaries, "_paths", Cache(3))
    spec = SPECS[1]
    twin = PartitionSpec(PartitionField(1, 1000, DayTransform(), "day"),
                         PartitionField(2, 1001, IdentityTransform(), "region"), spec_id=1)
    assert summaries.partition_path(spec, SCHEMA, Record(19000, "eu")) == "ts_day=2022-01-08/region=eu"
    assert summaries.partition_path(twin, SCHEMA, Record(19000, "eu")) == "day=2022-01-08/region=eu"
    for day in range(19001, 19005):
        summaries.partition_path(spec, SCHEMA, Record(day, "eu"))
    assert len(summaries._paths) == 3
