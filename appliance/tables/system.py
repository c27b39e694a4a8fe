"""Floe's own history as Iceberg tables in the `floe` namespace: their columns, declared once.

Written by the engine (`observe/systables.py`), kept by maintenance like any table, with a
30-day retention on each table's time column unless `floe table policy floe` says otherwise.
"""

from __future__ import annotations

from dataclasses import dataclass

from pyiceberg.schema import Schema
from pyiceberg.types import (
    DoubleType,
    LongType,
    NestedField,
    StringType,
    TimestamptzType,
)

from appliance.core.errors import InvalidName

NAMESPACE = "floe"
EXPORT_ID = "floe.system"  # the "stream id" of their commits: the state row id exported up to
DEFAULT_RETENTION = "30d"

_TYPES = {"string": StringType(), "long": LongType(), "double": DoubleType(), "timestamptz": TimestamptzType()}


def _schema(*columns: tuple[str, str, str]) -> Schema:
    return Schema(*[NestedField(i, name, _TYPES[kind], required=False, doc=doc)
                    for i, (name, kind, doc) in enumerate(columns, 1)])


@dataclass(frozen=True)
class SystemTable:
    name: str  # in the `floe` namespace
    source: str  # the state database's table it exports
    schema: Schema
    time_column: str  # what retention looks at

    @property
    def full_name(self) -> str:
        return f"{NAMESPACE}.{self.name}"


SYSTEM_TABLES = (
    SystemTable("batches", "batches", _schema(
        ("stream", "string", "the stream that committed the batch"),
        ("committed_at", "timestamptz", "when its last snapshot committed"),
        ("started_at", "timestamptz", "when the batch was planned"),
        ("messages", "long", "Kafka messages read"),
        ("rows", "long", "rows committed to the target table"),
        ("dead_letters", "long", "rows committed to the dead-letter table"),
        ("bytes", "long", "bytes of message values read"),
        ("duration_ms", "long", "planning to commit"),
        ("lag_after", "long", "messages left in the topic after the commit"),
        ("newest_kafka_timestamp", "timestamptz", "Kafka timestamp of the batch's newest message"),
        ("median_kafka_timestamp", "timestamptz", "median Kafka timestamp of the batch"),
        ("freshness_newest_s", "double", "committed_at minus the newest Kafka timestamp"),
        ("freshness_median_s", "double", "committed_at minus the median Kafka timestamp"),
        ("throttle_ms", "long", "longest broker throttle met while reading"),
        ("target_snapshot_id", "long", "snapshot of the target table"),
        ("dead_letter_snapshot_id", "long", "snapshot of the dead-letter table"),
        ("offsets", "string", "JSON: partition -> next offset to read"),
        ("batch_id", "long", "the batch's id in the state database"),
    ), "committed_at"),
    SystemTable("events", "events", _schema(
        ("occurred_at", "timestamptz", "when it happened"),
        ("level", "string", "info, warning or error"),
        ("kind", "string", "what happened (stream_failed, maintenance_compact...)"),
        ("stream", "string", "the stream or stage it is about"),
        ("table_name", "string", "the table it is about"),
        ("message", "string", "what Floe said"),
        ("event_id", "long", "the event's id in the state database"),
    ), "occurred_at"),
    SystemTable("maintenance_runs", "maintenance_runs", _schema(
        ("table_name", "string", ""), ("task", "string", "retention, compact, expire or orphans"),
        ("trigger", "string", "cli, schedule or request"), ("started_at", "timestamptz", ""),
        ("finished_at", "timestamptz", ""), ("duration_ms", "long", ""), ("outcome", "string", ""),
        ("dry_run", "long", "1: nothing was changed"), ("files_before", "long", ""), ("files_after", "long", ""),
        ("bytes_before", "long", ""), ("bytes_after", "long", ""), ("rows_deleted", "long", ""),
        ("rows_rewritten", "long", ""), ("snapshots_expired", "long", ""), ("files_deleted", "long", ""),
        ("snapshot_id", "long", "the snapshot it committed"), ("detail", "string", ""),
        ("run_id", "long", "the run's id in the state database"),
    ), "started_at"),
    SystemTable("stage_runs", "stage_runs", _schema(
        ("stage", "string", ""), ("started_at", "timestamptz", ""), ("finished_at", "timestamptz", ""),
        ("duration_ms", "long", ""), ("from_snapshot", "long", "source snapshot read after"),
        ("to_snapshot", "long", "source snapshot read up to"), ("rows_in", "long", ""), ("rows_out", "long", ""),
        ("outcome", "string", "ok or failed"), ("error", "string", ""),
        ("run_id", "long", "the run's id in the state database"),
    ), "started_at"),
    SystemTable("audit", "audit", _schema(
        ("changed_at", "timestamptz", "when the change was made"),
        ("os_user", "string", "the OS user who made it"), ("host", "string", "on which machine"),
        ("via", "string", "cli or ui"), ("action", "string", "e.g. stream create, alert add"),
        ("target", "string", "the stream, stage, table or alert changed"),
        ("arguments", "string", "JSON, secrets masked"), ("outcome", "string", "ok or failed"),
        ("detail", "string", "the error, when it failed"),
        ("audit_id", "long", "the change's id in the state database"),
    ), "changed_at"),
)
BY_NAME = {t.full_name: t for t in SYSTEM_TABLES}


def refuse_system(name: str, what: str = "table") -> None:
    """Streams, stages and `floe table alter` never write Floe's own tables."""
    if name.split(".", 1)[0] == NAMESPACE:
        raise InvalidName(f"{what} {name}: the namespace {NAMESPACE!r} holds Floe's system tables; choose another")


def system_policy(table: str) -> dict[str, str]:
    """The built-in policy layer of a system table (below `floe table policy floe`)."""
    found = BY_NAME.get(table)
    return {"retention": DEFAULT_RETENTION, "retention_column": found.time_column} if found else {}
