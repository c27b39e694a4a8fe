"""The state database's tables, declared once, and how a database is opened and brought up to date."""

from __future__ import annotations

import sqlite3

from appliance.state.sqlite import Database

# Every table of the state database: columns, primary key, indexes. Created or completed
# when a StateStore opens, under one lock, never by an insert while others read and write.
SCHEMA: dict[str, tuple[dict[str, type], str | tuple[str, ...], list[list[str]]]] = {
    "streams": (
        {
            "name": str, "id": str, "topic": str, "bootstrap": str, "kafka_options": str,
            "format": str, "target_table": str, "dead_letter_table": str, "mapping": str,
            "starting_offsets": str, "start_positions": str, "paused": int,
            "created_at": str, "updated_at": str,
            "schema_registry": str, "registry_options": str, "subject": str, "schema_evolution": str,
            # upsert streams: the mode, the key columns (JSON list), Debezium change events, _cdc_* columns
            "mode": str, "key_columns": str, "cdc": str, "cdc_columns": int,
            # the Kafka key and headers kept as columns: "key", "headers" or "key,headers"
            "kafka_columns": str,
            # pattern streams: the regular expression, the table template, the partitioning of later topics' tables
            "topic_pattern": str, "table_template": str, "partition_by": str,
            # routed streams: the field whose value names each message's table (`target_table`: the template)
            "route_by": str,
        },
        "name", [],
    ),
    # A pattern stream's topics, each with its own tables, id (its offsets' key), mapping and key; a topic gone
    # from the cluster keeps its row, with `removed_at`.
    "stream_members": (
        {"stream": str, "topic": str, "id": str, "target_table": str, "dead_letter_table": str, "mapping": str,
         "start_positions": str, "key_columns": str, "subject": str, "created_at": str, "removed_at": str},
        ("stream", "topic"), [],
    ),
    # A routed stream's tables, one per table a field's value named: the value that first named it, its mapping
    # as inferred then, where each partition was when it was recorded; `refused`: why it cannot be made.
    "stream_routes": (
        {"stream": str, "table_name": str, "value": str, "mapping": str, "created_at": str,
         "start_positions": str, "refused": str},
        ("stream", "table_name"), [],
    ),
    "stream_status": (
        {
            "name": str, "phase": str, "last_error": str, "last_error_at": str,
            "last_commit_at": str, "lag": int, "rows_total": int, "dead_letter_total": int,
            "messages_per_s": float, "updated_at": str,
            # What alerts and `floe status` measure: the kind of the last error, since when the
            # stream has messages waiting, its newest committed Kafka timestamp (epoch ms), the
            # freshness of its last batch (ms: commit time minus the newest Kafka timestamp).
            "error_kind": str, "behind_since": str, "newest_kafka_ts": int, "freshness_ms": int,
            "failures_total": int,
        },
        "name", [],
    ),
    "batches": (
        {
            "id": int, "stream": str, "started_at": str, "committed_at": str, "duration_ms": int,
            "messages": int, "rows": int, "dead_letter_rows": int, "bytes": int,
            "target_snapshot_id": int, "dead_letter_snapshot_id": int, "offsets": str, "lag": int,
            # Kafka timestamps (epoch ms) of the batch's newest message and its median, and the
            # longest the broker throttled a read (ms).
            "newest_kafka_ts": int, "median_kafka_ts": int, "throttle_ms": int,
            # A routed stream's batch: how many route tables it committed (null for any other stream's).
            "route_tables": int,
            # The rows the batch committed to each table, as JSON {table: rows}: a stream's target, a pattern
            # stream's topic's table, a routed stream's route tables (for per-table metrics).
            "table_rows": str,
        },
        # committed_at alone: every stream's last two minutes, read each second by the UI and `floe stream list`,
        # without scanning the day of batches hundreds of streams keep.
        "id", [["stream", "id"], ["stream", "committed_at"], ["committed_at"]],
    ),
    "events": ({"id": int, "at": str, "stream": str, "level": str, "kind": str, "message": str, "table_name": str},
               "id", [["stream", "id"]]),
    "engine": (
        # `answers`: the requests it takes (comma-separated asks); none while starting, nor in a one-off run.
        {"id": int, "pid": int, "started_at": str, "heartbeat_at": str, "spark_master": str, "state": str,
         "answers": str},
        "id", [],
    ),
    # What the running engine waits for (the catalog, the warehouse, a broker, a registry): one row per
    # dependency down now, since when, and what it last said. Cleared when the engine starts and stops.
    "outages": ({"dependency": str, "since": str, "message": str}, "dependency", []),
    "policies": ({"scope": str, "name": str, "settings": str, "updated_at": str}, ("scope", "name"), []),
    "maintenance_runs": (
        {
            "id": int, "task": str, "table_name": str, "trigger": str, "started_at": str,
            "finished_at": str, "duration_ms": int, "outcome": str, "dry_run": int,
            "files_before": int, "files_after": int, "bytes_before": int, "bytes_after": int,
            "rows_deleted": int, "snapshots_expired": int, "files_deleted": int,
            "rows_rewritten": int, "snapshot_id": int, "detail": str,
        },
        "id", [["table_name", "task", "id"]],
    ),
    # The writer schemas each stream has met (registry formats), for the stream's detail.
    "stream_schemas": (
        {"stream": str, "schema": str, "subject": str, "version": int, "messages": int,
         "first_seen_at": str, "last_seen_at": str},
        ("stream", "schema"), [],
    ),
    # Schema changes a stream has reported (one event each, not one per message).
    "schema_changes": ({"stream": str, "change": str, "at": str}, ("stream", "change"), []),
    # Offsets [first, low) of a partition that left the topic before the stream read them: noted
    # before the commit that skips them, never pruned, so `floe audit` tells expiry from loss.
    "expired_offsets": ({"stream_id": str, "partition": int, "first": int, "low": int, "noted_at": str},
                        ("stream_id", "partition", "first"), []),
    "stages": (
        {"name": str, "id": str, "source": str, "sql": str, "target_table": str, "kind": str, "paused": int,
         "created_at": str, "updated_at": str},
        "name", [],
    ),
    "stage_status": (
        {"name": str, "phase": str, "position": int, "last_run_at": str, "last_error": str, "last_error_at": str,
         "rows_in_total": int, "rows_out_total": int, "runs": int, "lag_snapshots": int, "lag_rows": int,
         "updated_at": str,
         # The rows its table holds as the engine last looked (rows_out_total counts every run's: a
         # grouping stage writes its whole table each run).
         "table_rows": int},
        "name", [],
    ),
    "stage_runs": (
        {"id": int, "stage": str, "started_at": str, "finished_at": str, "duration_ms": int, "from_snapshot": int,
         "to_snapshot": int, "rows_in": int, "rows_out": int, "outcome": str, "error": str},
        "id", [["stage", "id"]],
    ),
    # Alerts made with `floe alert add` or the UI ([[alerts]] of floe.toml live in the file).
    "alerts": (
        {"name": str, "rule": str, "stream": str, "stage": str, "for_seconds": float, "notify": str,
         "created_at": str},
        "name", [],
    ),
    # An alert's incidents: opened when its rule breaks, resolved when it holds again.
    "incidents": (
        {"id": int, "alert": str, "subject": str, "rule": str, "opened_at": str, "resolved_at": str,
         "value": str, "message": str, "notified_open": int, "notified_resolved": int},
        "id", [["resolved_at", "alert"]],
    ),
    # Every change made through the CLI or the UI, secrets masked.
    "audit": (
        {"id": int, "at": str, "user": str, "host": str, "via": str, "action": str, "target": str,
         "arguments": str, "outcome": str, "detail": str},
        "id", [],
    ),
    # This database's own identity: the system tables' export positions are kept per database,
    # so a new or restored one starts its own instead of skipping rows under another's position.
    "meta": ({"key": str, "value": str}, "key", []),
    "maintenance_requests": (
        {"id": int, "table_name": str, "task": str, "requested_at": str, "taken_at": str}, "id", [],
    ),
    # What the engine's scheduled maintenance will run next, in order (`maintenance/queue.py`): rewritten at each
    # check, an entry taken off as its run starts.
    "maintenance_queue": (
        {"position": int, "table_name": str, "task": str, "reason": str, "queued_at": str}, "position", [],
    ),
    # Work a command or the UI asks of the running engine (`control/requests.py`): what (`ask`, its `args`
    # as JSON) and for whom (`who`: user, host, via, for the audit trail); taken by one engine (its pid);
    # answered with `answer` (JSON: long work writes its progress there before it is answered), `result`
    # (a preview's rows, Arrow IPC), or one line of error and the error's kind; withdrawn by an asker that
    # stopped waiting before any engine took it; abandoned by an engine that stopped before it was done
    # (the asker then does it itself). Kept a day, for the record.
    "engine_requests": (
        {"id": int, "ask": str, "args": str, "who": str, "requested_at": str, "withdrawn_at": str,
         "taken_at": str, "taken_by": int, "answered_at": str, "abandoned_at": str, "answer": str,
         "result": bytes, "error": str, "error_kind": str},
        "id", [["taken_at", "withdrawn_at"]],
    ),
}


def prepare(conn: sqlite3.Connection) -> None:
    """A new database hands the space of pruned rows back to the file system when asked (incremental
    auto-vacuum: set before its first table, a no-op on an older one, which `reclaim_space` rewrites
    once); the write-ahead log is cut back to 16 MiB after each checkpoint rather than kept at its peak."""
    if conn.execute("PRAGMA auto_vacuum").fetchone()[0] != 2:  # setting it again would wait for a writer
        conn.execute("PRAGMA auto_vacuum = INCREMENTAL")
    conn.execute(f"PRAGMA journal_size_limit = {16 * 1024 * 1024}")


def _index_name(table: str, columns: list[str]) -> str:
    return f"idx_{table}_{'_'.join(columns)}"  # the name sqlite-utils gives `create_index(columns)`


def up_to_date(conn: sqlite3.Connection) -> bool:
    """Whether every table, column and index of SCHEMA is there, read in two statements and without a lock: every
    open but the first after an upgrade then skips `migrate`, which takes the write lock (a `floe status` or a UI
    worker would wait for the engine's writes) and asks for each table's columns one table at a time."""
    have = set(conn.execute("select m.name, p.name from sqlite_master m join pragma_table_info(m.name) p "
                            "where m.type = 'table'").fetchall())
    indexes = {row[0] for row in conn.execute("select name from sqlite_master where type = 'index'").fetchall()}
    return all((name, column) in have for name, (columns, _, _) in SCHEMA.items() for column in columns) and \
        all(_index_name(name, index) in indexes for name, (_, _, wanted) in SCHEMA.items() for index in wanted)


def migrate(db: Database) -> None:
    """Create what is missing: tables, and the columns a newer Floe added to them."""
    for name, (columns, pk, indexes) in SCHEMA.items():
        table = db[name]
        if not table.exists():
            table.create(columns, pk=pk)
            for index in indexes:
                table.create_index(index)
            continue
        for column, kind in columns.items():
            if column not in table.columns_dict:
                table.add_column(column, kind)
        for index in indexes:  # an index a newer Floe added
            table.create_index(index, if_not_exists=True)
