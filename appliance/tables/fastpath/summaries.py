"""A snapshot's summary, as PyIceberg's `SnapshotSummaryCollector` and `update_snapshot_summaries` make it.

A trickle commits a one-file snapshot every few seconds, and PyIceberg's way to its summary cost a tenth of
the commit's driver CPU: the file's partition printed as a path (only to count changed partitions), and the
parent's totals read through `Summary`'s mapping, a lower-cased key and a pydantic attribute per read. Here
the partition's path is kept per spec, schema and values, and the totals are read off the parent's plain dict.
tests/test_summaries.py checks every operation against PyIceberg's own.
"""

from __future__ import annotations

from typing import Mapping

from pyiceberg.manifest import DataFile
from pyiceberg.partitioning import PartitionSpec
from pyiceberg.schema import Schema
from pyiceberg.table.snapshots import (
    ADDED_DATA_FILES,
    ADDED_DELETE_FILES,
    ADDED_EQUALITY_DELETES,
    ADDED_FILE_SIZE,
    ADDED_POSITION_DELETES,
    ADDED_RECORDS,
    CHANGED_PARTITION_COUNT_PROP,
    DELETED_DATA_FILES,
    DELETED_RECORDS,
    REMOVED_DELETE_FILES,
    REMOVED_EQUALITY_DELETES,
    REMOVED_FILE_SIZE,
    REMOVED_POSITION_DELETES,
    TOTAL_DATA_FILES,
    TOTAL_DELETE_FILES,
    TOTAL_EQUALITY_DELETES,
    TOTAL_FILE_SIZE,
    TOTAL_POSITION_DELETES,
    TOTAL_RECORDS,
    Operation,
    Snapshot,
    Summary,
    UpdateMetrics,
)

from appliance.core.cache import Cache

# (total, added, removed): the totals a summary carries forward from its parent's, as PyIceberg sums them
TOTALS = (
    (TOTAL_DATA_FILES, ADDED_DATA_FILES, DELETED_DATA_FILES),
    (TOTAL_DELETE_FILES, ADDED_DELETE_FILES, REMOVED_DELETE_FILES),
    (TOTAL_RECORDS, ADDED_RECORDS, DELETED_RECORDS),
    (TOTAL_FILE_SIZE, ADDED_FILE_SIZE, REMOVED_FILE_SIZE),
    (TOTAL_POSITION_DELETES, ADDED_POSITION_DELETES, REMOVED_POSITION_DELETES),
    (TOTAL_EQUALITY_DELETES, ADDED_EQUALITY_DELETES, REMOVED_EQUALITY_DELETES),
)
NO_PARENT = {total: "0" for total, _, _ in TOTALS}

KEPT_PATHS = 4096
_paths: Cache[tuple, tuple[PartitionSpec, Schema, str]] = Cache(KEPT_PATHS)


def partition_path(spec: PartitionSpec, schema: Schema, partition) -> str:
    """`spec.partition_to_path(partition, schema)`, kept: a table's files fall in the same few partitions."""
    # repr, as a path prints values: -0.0 and 0.0 are equal keys of a dict, and two paths
    key = (id(spec), id(schema), repr(tuple(partition[i] for i in range(len(partition)))))
    found = _paths.get(key)
    if found is not None and found[0] is spec and found[1] is schema:
        return found[2]
    path = spec.partition_to_path(partition, schema)
    _paths.put(key, (spec, schema, path))  # the objects held: their ids cannot be reused while kept
    return path


def snapshot_summary(operation: Operation, schema: Schema, specs: Mapping[int, PartitionSpec],
                     added: list[tuple[DataFile, int]], removed: list[tuple[DataFile, int]],
                     properties: dict[str, str], parent: Snapshot | None) -> Summary:
    """The summary of a snapshot that adds and removes these files (each with its spec id), with `properties`
    besides; its totals carried forward from `parent`'s (PyIceberg sums a `replace` as an overwrite: the same
    sums)."""
    metrics, partitions = UpdateMetrics(), set()
    for files, add in ((added, True), (removed, False)):
        for data_file, spec_id in files:
            metrics.add_file(data_file) if add else metrics.remove_file(data_file)
            if len(data_file.partition) > 0:
                partitions.add(partition_path(specs[spec_id], schema, data_file.partition))
    summary = metrics.to_dict()
    if partitions:
        summary[CHANGED_PARTITION_COUNT_PROP] = str(len(partitions))
    summary.update(properties)
    previous = parent.summary if parent is not None else None
    previous = previous.additional_properties if previous else NO_PARENT
    for total, plus, minus in TOTALS:
        if before := previous.get(total):
            try:
                value = int(before)
                if value >= 0 and (more := summary.get(plus)):
                    value += int(more)
                if value >= 0 and (less := summary.get(minus)):
                    value -= int(less)
            except ValueError as exc:
                raise ValueError(f"Could not parse summary property {total} to an int: {before}") from exc
            if value >= 0:
                summary[total] = str(value)
    return Summary(operation=operation, **summary)
