"""The appliance's own state in SQLite (sqlite-utils): stream definitions and runtime status.

It is also the control path between processes: the CLI (and the terminal UI)
write definitions and pause/resume flags here; a running engine reads them
between batches and writes back status, batches and events. Offsets are NOT
kept here: they live in the Iceberg snapshots, committed with the data.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import sqlite3
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

import sqlite_utils

from appliance.errors import StreamExists, StreamNotFound
from appliance.kafka_client import KafkaSettings
from appliance.mapping import Mapping


def now() -> str:
    return dt.datetime.now(dt.timezone.utc).isoformat(timespec="milliseconds")


@dataclass(frozen=True)
class StreamDef:
    name: str
    id: str
    topic: str
    kafka: KafkaSettings
    format: str
    table: str
    dead_letter_table: str
    mapping: Mapping
    starting_offsets: str  # "earliest" or "latest"
    start_positions: dict[int, int]  # resolved at creation: where a fresh stream begins
    paused: bool
    created_at: str

    @property
    def group(self) -> str:
        return f"floe.{self.name}"


# Every table of the state database: columns, primary key, indexes. Created or completed
# when a StateStore opens, under one lock, never by an insert while others read and write.
SCHEMA: dict[str, tuple[dict[str, type], str | tuple[str, ...], list[list[str]]]] = {
    "streams": (
        {
            "name": str, "id": str, "topic": str, "bootstrap": str, "kafka_options": str,
            "format": str, "target_table": str, "dead_letter_table": str, "mapping": str,
            "starting_offsets": str, "start_positions": str, "paused": int,
            "created_at": str, "updated_at": str,
        },
        "name", [],
    ),
    "stream_status": (
        {
            "name": str, "phase": str, "last_error": str, "last_error_at": str,
            "last_commit_at": str, "lag": int, "rows_total": int, "dead_letter_total": int,
            "messages_per_s": float, "updated_at": str,
        },
        "name", [],
    ),
    "batches": (
        {
            "id": int, "stream": str, "started_at": str, "committed_at": str, "duration_ms": int,
            "messages": int, "rows": int, "dead_letter_rows": int, "bytes": int,
            "target_snapshot_id": int, "dead_letter_snapshot_id": int, "offsets": str, "lag": int,
        },
        "id", [["stream", "id"]],
    ),
    "events": ({"id": int, "at": str, "stream": str, "level": str, "kind": str, "message": str}, "id", [["stream", "id"]]),
    "engine": (
        {"id": int, "pid": int, "started_at": str, "heartbeat_at": str, "spark_master": str, "state": str},
        "id", [],
    ),
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
    "maintenance_requests": (
        {"id": int, "table_name": str, "task": str, "requested_at": str, "taken_at": str}, "id", [],
    ),
}


def _use_wal(conn: sqlite3.Connection, timeout: float = 30.0) -> None:
    """Put the database in WAL mode (it stays so, in the file).

    Switching modes ignores the busy timeout, so two processes opening a fresh database
    together can see "database is locked": retry until one of them has switched it.
    """
    deadline = time.monotonic() + timeout
    while True:
        try:
            if conn.execute("PRAGMA journal_mode").fetchone()[0] != "wal":
                conn.execute("PRAGMA journal_mode=WAL")
            return
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc) or time.monotonic() > deadline:
                raise
            time.sleep(0.02)


class StateStore:
    def __init__(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        fresh = not path.exists()
        conn = sqlite3.connect(str(path), timeout=30, check_same_thread=False, isolation_level=None)
        if fresh:
            os.chmod(path, 0o600)  # it holds Kafka credentials
        self.db = sqlite_utils.Database(conn)
        self.db.execute("PRAGMA busy_timeout=30000")
        _use_wal(conn)
        # One writer migrates at a time: the engine, the UI's workers and a CLI call may all
        # open a fresh database at once. BEGIN IMMEDIATE waits on the busy timeout, where a
        # check-then-create in autocommit would fail with "database is locked".
        conn.execute("BEGIN IMMEDIATE")
        try:
            self._migrate()
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        conn.execute("COMMIT")

    def close(self) -> None:
        self.db.conn.close()

    def _migrate(self) -> None:
        """Create what is missing: tables, and the columns a newer Floe added to them."""
        db = self.db
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

    # ---- stream definitions ----

    def add_stream(self, stream: StreamDef) -> None:
        try:
            self.db["streams"].insert(self._row(stream))
        except sqlite3.IntegrityError:
            raise StreamExists(f"stream {stream.name!r} already exists") from None

    @staticmethod
    def _row(stream: StreamDef) -> dict[str, Any]:
        return {
            "name": stream.name,
            "id": stream.id,
            "topic": stream.topic,
            "bootstrap": stream.kafka.bootstrap,
            "kafka_options": json.dumps(dict(stream.kafka.options)),
            "format": stream.format,
            "target_table": stream.table,
            "dead_letter_table": stream.dead_letter_table,
            "mapping": stream.mapping.to_toml(),
            "starting_offsets": stream.starting_offsets,
            "start_positions": json.dumps({str(k): v for k, v in stream.start_positions.items()}),
            "paused": int(stream.paused),
            "created_at": stream.created_at,
            "updated_at": now(),
        }

    @staticmethod
    def _stream(row: dict[str, Any]) -> StreamDef:
        return StreamDef(
            name=row["name"],
            id=row["id"],
            topic=row["topic"],
            kafka=KafkaSettings(row["bootstrap"], tuple(sorted(json.loads(row["kafka_options"]).items()))),
            format=row["format"],
            table=row["target_table"],
            dead_letter_table=row["dead_letter_table"],
            mapping=Mapping.from_toml(row["mapping"], origin=f"stream {row['name']} mapping"),
            starting_offsets=row["starting_offsets"],
            start_positions={int(k): v for k, v in json.loads(row["start_positions"]).items()},
            paused=bool(row["paused"]),
            created_at=row["created_at"],
        )

    def stream(self, name: str) -> StreamDef:
        rows = list(self.db["streams"].rows_where("name = ?", [name]))
        if not rows:
            raise StreamNotFound(f"no stream named {name!r} (see `floe stream list`)")
        return self._stream(rows[0])

    def streams(self) -> list[StreamDef]:
        return [self._stream(r) for r in self.db["streams"].rows_where(order_by="name")]

    def set_paused(self, name: str, paused: bool) -> None:
        self.stream(name)
        self.db["streams"].update(name, {"paused": int(paused), "updated_at": now()})

    def remove_stream(self, name: str) -> None:
        self.stream(name)
        with self.db.conn:
            self.db["streams"].delete(name)
            self.db["stream_status"].delete_where("name = ?", [name])

    @staticmethod
    def new_id() -> str:
        return uuid.uuid4().hex

    # ---- runtime status, batches, events ----

    def status(self, name: str) -> dict[str, Any]:
        rows = list(self.db["stream_status"].rows_where("name = ?", [name]))
        return rows[0] if rows else {}

    def statuses(self) -> dict[str, dict[str, Any]]:
        return {r["name"]: r for r in self.db["stream_status"].rows}

    def update_status(self, name: str, **fields: Any) -> None:
        self.db["stream_status"].upsert({"name": name, **fields, "updated_at": now()}, pk="name", alter=False)

    def record_batch(self, stream: str, **fields: Any) -> None:
        self.db["batches"].insert({"stream": stream, **fields})

    def recent_batches(self, stream: str, limit: int = 20) -> list[dict[str, Any]]:
        return list(self.db["batches"].rows_where("stream = ?", [stream], order_by="id desc", limit=limit))

    def add_event(self, kind: str, message: str, stream: str | None = None, level: str = "info") -> None:
        self.db["events"].insert({"at": now(), "stream": stream, "level": level, "kind": kind, "message": message})

    def events(self, stream: str | None = None, limit: int = 100) -> list[dict[str, Any]]:
        where, args = ("stream = ?", [stream]) if stream else (None, [])
        return list(self.db["events"].rows_where(where, args, order_by="id desc", limit=limit))

    def engine_heartbeat(self, pid: int, spark_master: str, state: str, started_at: str) -> None:
        self.db["engine"].upsert(
            {"id": 1, "pid": pid, "started_at": started_at, "heartbeat_at": now(), "spark_master": spark_master, "state": state},
            pk="id",
        )

    def engine(self) -> dict[str, Any]:
        rows = list(self.db["engine"].rows_where("id = 1"))
        return rows[0] if rows else {}

    # ---- maintenance: policies, runs, requests from the UI ----

    def policy(self, scope: str, name: str) -> dict[str, Any]:
        rows = list(self.db["policies"].rows_where("scope = ? and name = ?", [scope, name]))
        return json.loads(rows[0]["settings"]) if rows else {}

    def set_policy(self, scope: str, name: str, values: dict[str, Any]) -> None:
        if values:
            self.db["policies"].upsert(
                {"scope": scope, "name": name, "settings": json.dumps(values, sort_keys=True), "updated_at": now()},
                pk=("scope", "name"),
            )
        else:
            self.db["policies"].delete_where("scope = ? and name = ?", [scope, name])

    def record_run(self, **fields: Any) -> int:
        return self.db["maintenance_runs"].insert(fields).last_pk

    def runs(self, table: str | None = None, task: str | None = None, limit: int = 50) -> list[dict[str, Any]]:
        clauses, args = [], []
        for column, value in (("table_name", table), ("task", task)):
            if value is not None:
                clauses.append(f"{column} = ?")
                args.append(value)
        where = " and ".join(clauses) or None
        return list(self.db["maintenance_runs"].rows_where(where, args, order_by="id desc", limit=limit))

    def last_run(self, table: str, task: str, outcomes: tuple[str, ...] = ("ok", "nothing to do")) -> dict[str, Any]:
        marks = ", ".join("?" for _ in outcomes)
        rows = list(self.db["maintenance_runs"].rows_where(
            f"table_name = ? and task = ? and dry_run = 0 and outcome in ({marks})", [table, task, *outcomes],
            order_by="id desc", limit=1,
        ))
        return rows[0] if rows else {}

    def request_maintenance(self, table: str, task: str) -> int:
        return self.db["maintenance_requests"].insert(
            {"table_name": table, "task": task, "requested_at": now(), "taken_at": None}
        ).last_pk

    def take_requests(self) -> list[dict[str, Any]]:
        """Pending requests, each marked taken by exactly one caller so that it runs once."""
        taken = []
        for row in self.db["maintenance_requests"].rows_where("taken_at is null", order_by="id"):
            cursor = self.db.execute(
                "update maintenance_requests set taken_at = ? where id = ? and taken_at is null", [now(), row["id"]]
            )
            if cursor.rowcount == 1:
                taken.append(row)
        return taken

    def pending_requests(self, table: str | None = None) -> list[dict[str, Any]]:
        where, args = ("taken_at is null and table_name = ?", [table]) if table else ("taken_at is null", [])
        return list(self.db["maintenance_requests"].rows_where(where, args, order_by="id"))

    def iter_rows(self, table: str) -> Iterator[dict[str, Any]]:
        return self.db[table].rows
