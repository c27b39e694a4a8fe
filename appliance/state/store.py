"""The appliance's own state in SQLite (sqlite-utils): stream definitions and runtime status.

It is also the control path between processes: the CLI (and the terminal UI)
write definitions and pause/resume flags here; a running engine reads them
between batches and writes back status, batches and events. Offsets are NOT
kept here: they live in the Iceberg snapshots, committed with the data.
"""

from __future__ import annotations

import json
import os
import sqlite3
import uuid
from dataclasses import fields
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterable

from appliance.core import hints
from appliance.core.clock import now
from appliance.core.errors import StreamExists, StreamNotFound
from appliance.core.vocabulary import (
    EngineState,
    EventKind,
    EventLevel,
    MaintenanceTask,
    RunOutcome,
)
from appliance.core.wal import use_wal
from appliance.state.alerting import AlertRecords
from appliance.state.history import HistoryRecords
from appliance.state.members import MemberRecords
from appliance.state.outages import OutageRecords
from appliance.state.queue import QueueRecords
from appliance.state.records import (
    BatchRecord,
    EngineRecord,
    EventRecord,
    RequestRecord,
    RunRecord,
    StreamStatus,
    StreamSummary,
)
from appliance.state.requests import EngineRequests
from appliance.state.routes import RouteRecords
from appliance.state.schema import migrate, prepare, up_to_date
from appliance.state.sqlite import Database
from appliance.state.stages import StageRecords
from appliance.state.stream_rows import stream_of_row, stream_row
from appliance.state.upkeep import UpkeepRecords

if TYPE_CHECKING:  # a definition's mapping is Arrow's and PyIceberg's types: `floe status` and lists need neither
    from appliance.model.stream import StreamDef

_BATCH_COLUMNS = [f.name for f in fields(BatchRecord) if f.name != "id"]
_INSERT_BATCH = (f"insert into batches ({', '.join(_BATCH_COLUMNS)}) "
                 f"values ({', '.join('?' * len(_BATCH_COLUMNS))})")


class StateStore(StageRecords, MemberRecords, RouteRecords, EngineRequests, AlertRecords, HistoryRecords, UpkeepRecords,
                 OutageRecords, QueueRecords):
    def __init__(self, path: Path, durable: bool = True) -> None:
        """`durable=False`: commits need not reach the disk before returning (SQLite's
        `synchronous=NORMAL`, safe in WAL mode). For the engine's frequent status, batch and
        event writes, which the next batch rewrites anyway; the offsets live in Iceberg."""
        path.parent.mkdir(parents=True, exist_ok=True)
        fresh = not path.exists()
        conn = sqlite3.connect(str(path), timeout=30, check_same_thread=False, isolation_level=None)
        if fresh:
            os.chmod(path, 0o600)  # it holds Kafka credentials
        # No sqlite-utils plugins: Floe has none, and looking for them scans every installed package's metadata
        # (a tenth of `floe status`), and one would change the connection the engine writes with.
        self.db = Database(conn, execute_plugins=False)
        self.db.execute("PRAGMA busy_timeout=30000")
        prepare(conn)
        use_wal(conn)
        if not durable:
            self.db.execute("PRAGMA synchronous=NORMAL")
        if not fresh and up_to_date(conn):
            return
        # One writer migrates at a time: the engine, the UI's workers and a CLI call may all
        # open a fresh database at once. BEGIN IMMEDIATE waits on the busy timeout, where a
        # check-then-create in autocommit would fail with "database is locked".
        conn.execute("BEGIN IMMEDIATE")
        try:
            migrate(self.db)
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        conn.execute("COMMIT")

    def close(self) -> None:
        self.db.conn.close()

    def __enter__(self) -> StateStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _rows(self, table: str, where: str | None = None, args: list[Any] | None = None,
              order_by: str | None = None, limit: int | None = None):
        """Rows of `table` as dicts. One query: sqlite-utils' `rows_where` first asks `sqlite_master` whether the
        table exists, a query more for every state read of every batch (every table exists once opened)."""
        sql = (f"select * from [{table}]" + (f" where {where}" if where else "")
               + (f" order by {order_by}" if order_by else "") + (f" limit {int(limit)}" if limit is not None else ""))
        return self.db.query(sql, args or [])

    # ---- stream definitions ----

    def add_stream(self, stream: StreamDef) -> None:
        try:
            self.db["streams"].insert(stream_row(stream))
        except sqlite3.IntegrityError:
            raise StreamExists(f"stream {stream.name!r} already exists") from None

    def stream(self, name: str) -> StreamDef:
        rows = list(self._rows("streams", "name = ?", [name]))
        if not rows:
            raise StreamNotFound(f"no stream named {name!r} (see `{hints.LIST_STREAMS}`)")
        return stream_of_row(rows[0])

    def streams(self) -> list[StreamDef]:
        return [stream_of_row(r) for r in self._rows("streams", order_by="name")]

    def stream_summaries(self) -> list[StreamSummary]:
        """Every stream's name, topic, tables and pause, by name: what `floe status` and lists need, without
        parsing hundreds of mappings."""
        return [StreamSummary(*row) for row in self.db.execute(
            "select name, topic, target_table, dead_letter_table, paused = 1, coalesce(route_by, '') from streams "
            "order by name").fetchall()]

    def stream_keys(self) -> list[tuple[Any, ...]]:
        """Each stream's name, id, pause and schema evolution, by name: what the engine starts and stops workers
        by, read at every tick without parsing hundreds of definitions (`streams()`)."""
        return self.db.execute("select name, id, paused, coalesce(schema_evolution, 'auto') from streams "
                               "order by name").fetchall()

    def set_paused(self, name: str, paused: bool) -> None:
        self.stream(name)
        self.db["streams"].update(name, {"paused": int(paused), "updated_at": now()})

    def update_stream(self, name: str, **fields: Any) -> None:
        """Change a stream's definition in place (`mapping` as a Mapping; other fields as stored)."""
        self.stream(name)
        if "mapping" in fields:
            fields["mapping"] = fields["mapping"].to_toml()
        self.db["streams"].update(name, {**fields, "updated_at": now()})

    # ---- what a stream met: writer schemas, schema changes ----

    def saw_schemas(self, stream: str, counts: dict[str, int], versions: dict[str, tuple[str, int]]) -> None:
        """Count messages per writer schema; `versions`: subject and version of the schemas new here, or of those
        met before whose version was not known then."""
        at = now()
        with self.db.conn:
            for schema, n in counts.items():
                subject, version = versions.get(schema, ("", None))
                self.db.conn.execute(
                    "insert into stream_schemas (stream, schema, subject, version, messages, first_seen_at, "
                    "last_seen_at) values (?, ?, ?, ?, ?, ?, ?) on conflict(stream, schema) do update set "
                    "messages = messages + excluded.messages, last_seen_at = excluded.last_seen_at, "
                    # a version looked up later (the registry could not be asked when the schema was first met)
                    "subject = case when subject = '' and excluded.subject != '' then excluded.subject else subject "
                    "end, version = case when subject = '' and excluded.subject != '' then excluded.version else "
                    "version end",
                    [stream, schema, subject, version, n, at, at])

    def seen_schemas(self, stream: str) -> list[dict[str, Any]]:
        """In the order they were first met; those first met in one batch in version order (a batch's count of
        them comes in whatever order its tasks ended)."""
        return list(self._rows("stream_schemas", "stream = ?", [stream],
                               order_by="first_seen_at, version is null, version, schema"))

    def note_change(self, stream: str, change: str) -> bool:
        """Remember a schema change; True the first time it is noted for the stream."""
        cursor = self.db.conn.execute("insert or ignore into schema_changes (stream, change, at) values (?, ?, ?)",
                                      [stream, change, now()])
        return cursor.rowcount == 1

    def remove_stream(self, name: str) -> None:
        self.stream(name)
        with self.db.conn:
            self.forget_members(name)
            self.forget_routes(name)
            self.db["expired_offsets"].delete_where("stream_id = (select id from streams where name = ?)", [name])
            self.db["streams"].delete(name)
            self.db["stream_status"].delete_where("name = ?", [name])
            self.db["stream_schemas"].delete_where("stream = ?", [name])
            self.db["schema_changes"].delete_where("stream = ?", [name])

    def note_expired(self, stream_id: str, partition: int, first: int, low: int) -> None:
        """Offsets [first, low) expired before they were read; a later, higher `low` widens the note."""
        with self.db.conn:
            self.db.execute(
                "INSERT INTO expired_offsets (stream_id, partition, first, low, noted_at) VALUES (?, ?, ?, ?, ?) "
                "ON CONFLICT (stream_id, partition, first) DO UPDATE SET low = max(low, excluded.low)",
                [stream_id, partition, first, low, now()])

    def expired_offsets(self, stream_id: str) -> list[tuple[int, int, int]]:
        """(partition, first, low) of every range that expired before this stream read it."""
        return [(r["partition"], r["first"], r["low"])
                for r in self._rows("expired_offsets", "stream_id = ?", [stream_id], order_by="partition, first")]

    @staticmethod
    def new_id() -> str:
        return uuid.uuid4().hex

    # ---- runtime status, batches, events ----

    def status(self, name: str) -> StreamStatus:
        cursor = self.db.conn.execute("select * from stream_status where name = ?", [name])
        row = cursor.fetchone()
        return StreamStatus.of(dict(zip([c[0] for c in cursor.description], row))) if row else StreamStatus(name)

    def statuses(self) -> dict[str, StreamStatus]:
        return {r["name"]: StreamStatus.of(r) for r in self._rows("stream_status")}

    # The two writes every batch makes, as plain statements: through sqlite-utils, which looks
    # up the table's columns on each call, they cost more than the rest of the bookkeeping.

    def update_status(self, name: str, added: dict[str, int] | None = None, **fields: Any) -> None:
        """`added`: counts added to the row's own (to 0 for a new row) in the same statement, no read before."""
        added = added or {}
        row = {"name": name, **fields, **added, "updated_at": now()}
        columns = ", ".join(row)
        updates = ", ".join(f"{c} = coalesce(stream_status.{c}, 0) + excluded.{c}" if c in added
                            else f"{c} = excluded.{c}" for c in row if c != "name")
        self.db.conn.execute(f"insert into stream_status ({columns}) values ({', '.join('?' * len(row))}) "
                             f"on conflict(name) do update set {updates}", list(row.values()))

    def record_batch(self, batch: BatchRecord) -> None:
        # Its fields read one by one: `asdict` copies each value deeply, a twentieth of a trickle's driver CPU.
        self.db.conn.execute(_INSERT_BATCH, [getattr(batch, c) for c in _BATCH_COLUMNS])

    def batches_after(self, after: int) -> list[tuple[int, str, int, int, int, int]]:
        """(id, stream, duration_ms, messages, rows, dead_letter_rows) of every batch after the id `after`, by id."""
        return self.db.conn.execute("select id, stream, duration_ms, messages, rows, dead_letter_rows from batches "
                                    "where id > ? order by id", [after]).fetchall()

    def recent_batches(self, stream: str, limit: int = 20) -> list[BatchRecord]:
        """The stream's newest batches, newest first."""
        return [BatchRecord.of(r) for r in self._rows("batches", "stream = ?", [stream], order_by="id desc",
                                                        limit=limit)]

    def batches_since(self, stream: str, since: str) -> list[BatchRecord]:
        """The stream's batches committed at or after `since`, oldest first."""
        return [BatchRecord.of(r) for r in self._rows("batches", "stream = ? and committed_at >= ?",
                                                        [stream, since], order_by="id")]

    def recent_batches_by_stream(self, since: str) -> dict[str, list[BatchRecord]]:
        """Every stream's batches committed at or after `since`, oldest first: one query, not one per stream, on
        the index of `committed_at` (ordered by id, SQLite would scan every batch the state database keeps)."""
        out: dict[str, list[BatchRecord]] = {}
        for r in self._rows("batches", "committed_at >= ?", [since], order_by="committed_at, id"):
            out.setdefault(r["stream"], []).append(BatchRecord.of(r))
        return out

    def id_ranges(self) -> tuple[int, int, int, int]:
        """The oldest and newest events' ids, and batches' (0 with none): what a reader of what is new starts
        from, and what it may still show (older rows were pruned)."""
        return self.db.execute("select (select coalesce(min(id), 0) from events), (select coalesce(max(id), 0) "
                               "from events), (select coalesce(min(id), 0) from batches), "
                               "(select coalesce(max(id), 0) from batches)").fetchone()

    def heavy_dead_letter_batches(self, min_messages: int, min_share: float, newest: int,
                                  stream: str | None = None, after: int = 0) -> list[BatchRecord]:
        """Batches among the `newest` (and after the batch id `after`) whose dead-letter rows are at least
        `min_share` of their messages."""
        top = self.db.execute("select coalesce(max(id), 0) from batches").fetchone()[0]
        where = "id > ? and messages >= ? and dead_letter_rows * 1000 >= messages * ?"
        args: list[Any] = [max(top - newest, after), min_messages, int(min_share * 1000)]
        if stream:
            where += " and stream = ?"
            args.append(stream)
        return [BatchRecord.of(r) for r in self._rows("batches", where, args, order_by="id")]

    def add_event(self, kind: EventKind, message: str, stream: str | None = None,
                  level: EventLevel = EventLevel.INFO, table: str | None = None) -> None:
        self.db.conn.execute("insert into events (at, stream, level, kind, message, table_name) "
                             "values (?, ?, ?, ?, ?, ?)", [now(), stream, str(level), str(kind), message, table])

    def events(self, stream: str | None = None, limit: int = 100, after: int = 0) -> list[EventRecord]:
        """The newest events (of one stream, or all; after the event id `after`), newest first."""
        where, args = ("stream = ? and id > ?", [stream, after]) if stream else ("id > ?", [after])
        return [EventRecord.of(r) for r in self._rows("events", where, args, order_by="id desc", limit=limit)]

    def event_streams(self) -> set[str]:
        """Every stream that has events, deleted ones included."""
        return {r[0] for r in self.db.execute("select distinct stream from events where stream is not null")}

    def streams_version(self) -> tuple[Any, ...]:
        """Changes whenever a stream is created or deleted (its new row, with a later creation, or one row
        fewer): tells a reader of the list of streams when to read it again."""
        return tuple(self.db.execute("select count(*), max(rowid), max(created_at) from streams").fetchone())

    def engine_heartbeat(self, pid: int, spark_master: str, state: EngineState, started_at: str,
                         answers: Iterable[str] = ()) -> None:
        """`answers`: the requests the engine takes now (`engine_requests`)."""
        self.db["engine"].upsert(
            {"id": 1, "pid": pid, "started_at": started_at, "heartbeat_at": now(), "spark_master": spark_master,
             "state": state, "answers": ",".join(sorted(str(a) for a in answers))},
            pk="id",
        )

    def engine(self) -> EngineRecord | None:
        rows = list(self._rows("engine", "id = 1"))
        return EngineRecord.of(rows[0]) if rows else None

    # ---- maintenance: policies, runs, requests from the UI ----

    def policy(self, scope: str, name: str) -> dict[str, Any]:
        rows = list(self._rows("policies", "scope = ? and name = ?", [scope, name]))
        return json.loads(rows[0]["settings"]) if rows else {}

    def set_policy(self, scope: str, name: str, values: dict[str, Any]) -> None:
        if values:
            self.db["policies"].upsert(
                {"scope": scope, "name": name, "settings": json.dumps(values, sort_keys=True), "updated_at": now()},
                pk=("scope", "name"),
            )
        else:
            self.db["policies"].delete_where("scope = ? and name = ?", [scope, name])

    def forget_table(self, table: str) -> None:
        """A dropped table's maintenance runs and pending requests: a table made again under its name
        starts with none (those exported stay in `floe.maintenance`)."""
        for kind in ("maintenance_runs", "maintenance_requests", "maintenance_queue"):
            if self.db[kind].exists():
                self.db[kind].delete_where("table_name = ?", [table])

    def record_run(self, run: RunRecord) -> int:
        run.id = self.db["maintenance_runs"].insert(run.row()).last_pk
        return run.id

    def runs(self, table: str | None = None, task: MaintenanceTask | None = None, limit: int = 50) -> list[RunRecord]:
        """The newest runs (of one table, of one task, or all), newest first."""
        clauses, args = [], []
        for column, value in (("table_name", table), ("task", task)):
            if value is not None:
                clauses.append(f"{column} = ?")
                args.append(value)
        where = " and ".join(clauses) or None
        return [RunRecord.of(r) for r in self._rows("maintenance_runs", where, args, order_by="id desc", limit=limit)]

    def last_run(self, table: str, task: MaintenanceTask,
                 outcomes: tuple[RunOutcome, ...] = (RunOutcome.OK, RunOutcome.NOTHING_TO_DO)) -> RunRecord | None:
        """The newest real (not dry) run of the task on the table that ended in one of `outcomes`."""
        marks = ", ".join("?" for _ in outcomes)
        rows = list(self._rows(
            "maintenance_runs", f"table_name = ? and task = ? and dry_run = 0 and outcome in ({marks})",
            [table, task, *outcomes], order_by="id desc", limit=1,
        ))
        return RunRecord.of(rows[0]) if rows else None

    def request_maintenance(self, table: str, task: MaintenanceTask) -> int:
        return self.db["maintenance_requests"].insert(
            {"table_name": table, "task": task, "requested_at": now(), "taken_at": None}
        ).last_pk

    def take_requests(self) -> list[RequestRecord]:
        """Pending requests, each marked taken by exactly one caller so that it runs once."""
        taken = []
        for row in self._rows("maintenance_requests", "taken_at is null", order_by="id"):
            at = now()
            cursor = self.db.execute(
                "update maintenance_requests set taken_at = ? where id = ? and taken_at is null", [at, row["id"]]
            )
            if cursor.rowcount == 1:
                taken.append(RequestRecord.of({**row, "taken_at": at}))
        return taken

    def pending_requests(self, table: str | None = None) -> list[RequestRecord]:
        """Requests no engine has taken yet, oldest first."""
        where, args = ("taken_at is null and table_name = ?", [table]) if table else ("taken_at is null", [])
        return [RequestRecord.of(r) for r in self._rows("maintenance_requests", where, args, order_by="id")]

    def taken_unrecorded(self, table: str, since: str) -> list[RequestRecord]:
        """Requests of `table` taken at or after `since` whose run is not recorded yet, oldest first."""
        return [RequestRecord.of(dict(r)) for r in self.db.query(
            "select * from maintenance_requests r where r.table_name = ? and r.taken_at is not null"
            " and r.taken_at >= ? and not exists (select 1 from maintenance_runs m where"
            " m.table_name = r.table_name and m.task = r.task and m.trigger = 'request'"
            " and m.started_at >= r.taken_at) order by r.id",
            [table, since],
        )]
