"""The Iceberg catalog (PyIceberg on SQLite) and the schemas of Floe's tables."""

from __future__ import annotations

import json
import logging
import time
from contextlib import contextmanager
from typing import Any, Iterator

from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.exceptions import CommitFailedException, NamespaceAlreadyExistsError, NoSuchTableError
from pyiceberg.schema import Schema
from pyiceberg.table import Table
from pyiceberg.types import (
    BinaryType,
    IntegerType,
    ListType,
    LongType,
    NestedField,
    StringType,
    StructType,
    TimestamptzType,
)

from appliance.batch import TableTarget
from appliance.errors import CommitConflict, OffsetsConflict, TableConflict, WarehouseError
from appliance.mapping import Mapping
from appliance.names import check_table_name
from appliance.settings import Settings

log = logging.getLogger(__name__)

# Snapshot-summary keys: the offsets committed with the data, per stream.
STREAM_KEY = "floe.stream-id"
OFFSETS_KEY = "floe.offsets"
TOPIC_KEY = "floe.topic"


def _meta_fields(start: int) -> list[NestedField]:
    return [
        NestedField(start, "_kafka_partition", IntegerType(), required=False),
        NestedField(start + 1, "_kafka_offset", LongType(), required=False),
        NestedField(start + 2, "_kafka_timestamp", TimestamptzType(), required=False),
    ]


def target_iceberg_schema(mapping: Mapping) -> Schema:
    fields = [NestedField(i, c.name, c.iceberg_type, required=False) for i, c in enumerate(mapping.columns, 1)]
    n = len(fields) + 1
    fields += _meta_fields(n)
    fields.append(NestedField(n + 3, "_ingested_at", TimestamptzType(), required=False))
    return Schema(*fields)


def dead_letter_iceberg_schema() -> Schema:
    header = StructType(
        NestedField(10, "key", StringType(), required=False), NestedField(11, "value", BinaryType(), required=False)
    )
    return Schema(
        *_meta_fields(1),
        NestedField(4, "raw_key", BinaryType(), required=False),
        NestedField(5, "raw_value", BinaryType(), required=False),
        NestedField(6, "headers", ListType(9, header, element_required=False), required=False),
        NestedField(7, "error_stage", StringType(), required=False),
        NestedField(8, "error_message", StringType(), required=False),
        NestedField(12, "_ingested_at", TimestamptzType(), required=False),
    )


def table_properties(settings: Settings) -> dict[str, str]:
    """Properties every Floe table carries: a stream commits every second, and each commit
    writes a metadata file; without these they would pile up in the table's folder."""
    return {
        "write.metadata.delete-after-commit.enabled": "true",
        "write.metadata.previous-versions-max": str(settings.maintenance.metadata_versions),
    }


def _same_columns(a: Schema, b: Schema) -> bool:
    return [(f.name, str(f.field_type)) for f in a.fields] == [(f.name, str(f.field_type)) for f in b.fields]


def open_catalog(settings: Settings) -> SqlCatalog:
    return SqlCatalog("floe", **settings.catalog_properties())


@contextmanager
def warehouse_io(settings: Settings, what: str) -> Iterator[None]:
    """Storage failures as one line naming the warehouse, not a PyArrow traceback.

    PyArrow's messages name the bucket, key and endpoint, never the credentials.
    """
    try:
        yield
    except OSError as exc:
        where = settings.warehouse
        if settings.warehouse.startswith(("s3://", "s3a://")) and settings.s3.endpoint:
            where += f" (endpoint {settings.s3.endpoint})"
        detail = " ".join(str(exc).split())
        raise WarehouseError(f"warehouse {where}: cannot {what}: {detail}") from None


class Catalog:
    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.iceberg = open_catalog(settings)

    def table(self, name: str) -> Table:
        return self.iceberg.load_table(name)

    def exists(self, name: str) -> bool:
        return self.iceberg.table_exists(name)

    def check_can_create(self, name: str, schema: Schema) -> bool:
        """True when the table must be created, False when an existing one fits; raises otherwise."""
        check_table_name(name)
        try:
            with warehouse_io(self.settings, f"read table {name}"):
                existing = self.iceberg.load_table(name)
        except NoSuchTableError:
            return True
        if not _same_columns(existing.schema(), schema):
            raise TableConflict(
                f"table {name} exists with other columns; choose another table or a mapping that matches it"
            )
        return False

    def ensure_table(self, name: str, schema: Schema) -> tuple[Table, bool]:
        namespace, _ = check_table_name(name)
        try:
            self.iceberg.create_namespace(namespace)
        except NamespaceAlreadyExistsError:
            pass
        if self.check_can_create(name, schema):
            with warehouse_io(self.settings, f"create table {name}"):
                properties = {"format-version": "2", **table_properties(self.settings)}
                return self.iceberg.create_table(name, schema, properties=properties), True
        with warehouse_io(self.settings, f"read table {name}"):
            return self.iceberg.load_table(name), False

    def drop(self, name: str) -> None:
        try:
            self.iceberg.purge_table(name)
        except NoSuchTableError:
            pass

    def list_tables(self) -> list[str]:
        out = []
        for ns in self.iceberg.list_namespaces():
            out += [".".join(t) for t in self.iceberg.list_tables(ns)]
        return sorted(out)

    def task_target(self, table: Table) -> TableTarget:
        return TableTarget(table.metadata.model_dump_json(), dict(table.io.properties), table.metadata_location)


def committed_offsets(table: Table, stream_id: str) -> dict[int, int] | None:
    """Next offsets to read per partition, from the newest snapshot this stream committed."""
    snapshot = table.current_snapshot()
    while snapshot is not None:
        summary = snapshot.summary.additional_properties if snapshot.summary else {}
        if summary.get(STREAM_KEY) == stream_id and OFFSETS_KEY in summary:
            return {int(p): int(o) for p, o in json.loads(summary[OFFSETS_KEY]).items()}
        if snapshot.parent_snapshot_id is None:
            break
        snapshot = table.snapshot_by_id(snapshot.parent_snapshot_id)
    return None


def commit_files(
    table: Table,
    files: list[Any],
    stream_id: str,
    topic: str,
    expected: dict[int, int] | None,
    offsets: dict[int, int],
    attempts: int = 5,
) -> tuple[Table, int]:
    """Append `files` with `offsets` in the same snapshot; returns the table and the snapshot id.

    A lost race with another writer (maintenance, say) is retried on fresh
    metadata, but only while the table still holds the offsets this batch was
    planned from: anything else means a second engine writes the stream.
    """
    props = {
        STREAM_KEY: stream_id,
        TOPIC_KEY: topic,
        OFFSETS_KEY: json.dumps({str(p): o for p, o in sorted(offsets.items())}),
    }
    for attempt in range(attempts):
        if attempt:
            table = table.refresh()
            found = committed_offsets(table, stream_id)
            if found == offsets:
                return table, _snapshot_with(table, stream_id, offsets)  # our commit landed before the error
            if found != expected:
                raise OffsetsConflict(
                    f"table {'.'.join(table.name())} holds offsets {found} for this stream, expected {expected}"
                )
        try:
            tx = table.transaction()
            with tx.update_snapshot(snapshot_properties=props).fast_append() as append:
                for data_file in files:
                    append.append_data_file(data_file)
            table = tx.commit_transaction()
            return table, table.current_snapshot().snapshot_id
        except CommitFailedException as exc:
            log.info("commit to %s lost a race (%s), retrying", table.name(), exc)
            time.sleep(min(0.05 * 2**attempt, 1.0))
    raise CommitConflict(f"table {'.'.join(table.name())}: commit failed {attempts} times in a row")


def _snapshot_with(table: Table, stream_id: str, offsets: dict[int, int]) -> int:
    snapshot = table.current_snapshot()
    while snapshot is not None:
        summary = snapshot.summary.additional_properties if snapshot.summary else {}
        if summary.get(STREAM_KEY) == stream_id:
            return snapshot.snapshot_id
        snapshot = table.snapshot_by_id(snapshot.parent_snapshot_id) if snapshot.parent_snapshot_id else None
    return -1
