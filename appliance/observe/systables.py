"""The system tables' writer: the state database's new rows, committed every ~15 s in one
snapshot per table, exactly once.

Each commit carries the id of the last state row it holds (as a stream's commit carries its
offsets), so a kill between writing and committing re-exports the same rows and nothing twice.
Once exported, rows older than `keep_in_state` leave the state database, which keeps what the
live UI shows. A failure is an event, retried next round: it never touches a stream.
"""

from __future__ import annotations

import datetime as dt
import logging
import threading
import time
from typing import Any, Callable

import pyarrow as pa

from appliance.config.settings import Settings
from appliance.core.vocabulary import EventKind, EventLevel
from appliance.model.partitioning import Partitioning
from appliance.state.store import StateStore
from appliance.tables.catalog import Catalog, warehouse_io
from appliance.tables.commits import commit_files, commit_lock
from appliance.tables.datafiles import TableTarget, write_data_files
from appliance.tables.evolution import set_partitioning
from appliance.tables.snapshots import committed_offsets
from appliance.tables.system import EXPORT_ID, SYSTEM_TABLES, SystemTable

log = logging.getLogger(__name__)

UTC = dt.timezone.utc


def _instant(text: str | None) -> dt.datetime | None:
    return dt.datetime.fromisoformat(text) if text else None


def _epoch_ms(ms: int | None) -> dt.datetime | None:
    return dt.datetime.fromtimestamp(ms / 1000, UTC) if ms else None


def _seconds_since(ms: int | None, at: dt.datetime | None) -> float | None:
    return None if ms is None or at is None else round(at.timestamp() - ms / 1000, 3)


def _batch(row: dict[str, Any]) -> dict[str, Any]:
    committed = _instant(row["committed_at"])
    return {
        "stream": row["stream"], "committed_at": committed, "started_at": _instant(row["started_at"]),
        "messages": row["messages"], "rows": row["rows"], "dead_letters": row["dead_letter_rows"],
        "bytes": row["bytes"], "duration_ms": row["duration_ms"], "lag_after": row["lag"],
        "newest_kafka_timestamp": _epoch_ms(row.get("newest_kafka_ts")),
        "median_kafka_timestamp": _epoch_ms(row.get("median_kafka_ts")),
        "freshness_newest_s": _seconds_since(row.get("newest_kafka_ts"), committed),
        "freshness_median_s": _seconds_since(row.get("median_kafka_ts"), committed),
        "throttle_ms": row.get("throttle_ms") or 0, "target_snapshot_id": row["target_snapshot_id"],
        "dead_letter_snapshot_id": row["dead_letter_snapshot_id"], "offsets": row["offsets"], "batch_id": row["id"],
    }


def _event(row: dict[str, Any]) -> dict[str, Any]:
    return {"occurred_at": _instant(row["at"]), "level": row["level"], "kind": row["kind"], "stream": row["stream"],
            "table_name": row.get("table_name"), "message": row["message"], "event_id": row["id"]}


def _run(row: dict[str, Any]) -> dict[str, Any]:
    out = {k: v for k, v in row.items() if k != "id"}
    out.update(started_at=_instant(row["started_at"]), finished_at=_instant(row["finished_at"]), run_id=row["id"])
    return out


def _audit(row: dict[str, Any]) -> dict[str, Any]:
    out = {k: v for k, v in row.items() if k not in ("id", "user", "at")}
    out.update(changed_at=_instant(row["at"]), audit_id=row["id"], os_user=row["user"])
    return out


ROWS: dict[str, Callable[[dict[str, Any]], dict[str, Any]]] = {
    "batches": _batch, "events": _event, "maintenance_runs": _run, "stage_runs": _run, "audit": _audit,
}


def arrow_rows(system: SystemTable, rows: list[dict[str, Any]]) -> pa.Table:
    schema = system.schema.as_arrow()
    converted = [ROWS[system.source](r) for r in rows]
    # By column: the rows as dicts of every field (`from_pylist`) took three times as long, a batch's row each.
    return pa.Table.from_pydict({name: [r.get(name) for r in converted] for name in schema.names}, schema=schema)


class SystemTableWriter:
    """Exports each state table's new rows to its system table; one round at a time."""

    def __init__(self, settings: Settings, catalog: Catalog, state: StateStore) -> None:
        self.settings = settings
        self.catalog = catalog
        self.state = state
        self._reported: dict[str, str] = {}  # system table -> the failure told last (once, until it heals)
        self._exported: dict[str, int] = {}  # state table -> the last id committed, once known
        self._laid_out: set[str] = set()  # system tables whose partitioning was looked at
        self.export_id = f"{EXPORT_ID}.{state.database_id()}"

    def export(self) -> dict[str, int]:
        """One round: rows exported per system table. Failures are events, never raised."""
        done: dict[str, int] = {}
        for system in SYSTEM_TABLES:
            try:
                with warehouse_io(self.settings, f"write system table {system.full_name}"):
                    done[system.full_name] = self._export(system)
                self._reported.pop(system.full_name, None)
            except Exception as exc:  # the system tables never compete with the streams
                self._report(system, f"system table {system.full_name} not written: {type(exc).__name__}: {exc}")
        return done

    def _report(self, system: SystemTable, message: str) -> None:
        log.warning(message)
        if self._reported.get(system.full_name) == message:
            return
        try:
            self.state.add_event(EventKind.SYSTEM_TABLES_FAILED, message, level=EventLevel.WARNING,
                                 table=system.full_name)
            self._reported[system.full_name] = message
        except Exception:  # the state database itself is in trouble: the log has it, next round tries
            log.exception("cannot record a system table failure")

    def _table(self, system: SystemTable):
        """The system table, partitioned by day of its time column (so retention drops whole days);
        one an older Floe made unpartitioned takes that partitioning from now on."""
        layout = Partitioning.parse(f"day({system.time_column})")
        table, created = self.catalog.ensure_table(system.full_name, system.schema, layout)
        if not created and system.full_name not in self._laid_out and not table.spec().fields:
            table = set_partitioning(self.settings, table, layout)[0]
        self._laid_out.add(system.full_name)
        return table

    def _export(self, system: SystemTable) -> int:
        known = self._exported.get(system.source)
        if known is not None and self.state.last_id(system.source) <= known:
            return 0  # nothing new: not even a look at the catalog
        table = self._table(system)
        position = committed_offsets(table, self.export_id)
        after = position[0] - 1 if position else self.state.export_floor(system.source)
        rows = self.state.rows_after(system.source, after)
        if rows:
            last = rows[-1]["id"]
            files = write_data_files(TableTarget.of(table), arrow_rows(system, rows))
            with commit_lock(self.settings, system.full_name):
                commit_files(table.refresh(), files, self.export_id, system.source, position, {0: last + 1})
            after = last
        cutoff = dt.datetime.now(UTC) - dt.timedelta(seconds=self.settings.observe.keep_in_state)
        self.state.prune(system.source, after, cutoff.isoformat(timespec="milliseconds"))
        self._exported[system.source] = after
        return len(rows)


def exported_positions(catalog: Catalog, database_id: str) -> dict[str, int]:
    """Each state table's last row id the system tables hold from the state database `database_id`."""
    exported = {}
    for system in SYSTEM_TABLES:
        if catalog.exists(system.full_name):
            position = committed_offsets(catalog.table(system.full_name), f"{EXPORT_ID}.{database_id}")
            if position:
                exported[system.source] = position[0] - 1
    return exported


def upkeep(settings: Settings, state: StateStore) -> None:
    """Runtime rows done with pruned (with the system tables off, the history too: nothing exports it),
    and the space pruning freed handed back to the file system when it is much."""
    cutoff = dt.datetime.now(UTC) - dt.timedelta(seconds=settings.observe.keep_in_state)
    state.prune_runtime(cutoff.isoformat(timespec="milliseconds"), exported_too=not settings.observe.system_tables)
    state.reclaim_space()


class SystemTablesThread(threading.Thread):
    """The engine's keeper of its history: every `system_tables_interval` (and once at stop) the state
    database's new rows exported to the system tables, when they are on, then its upkeep."""

    def __init__(self, settings: Settings, catalog: Catalog, stopping: threading.Event) -> None:
        super().__init__(name="floe-system-tables", daemon=True)
        self.settings = settings
        self.catalog = catalog
        self.stopping = stopping

    def run(self) -> None:
        state = StateStore(self.settings.state_db, durable=False)
        writer = SystemTableWriter(self.settings, self.catalog, state) if self.settings.observe.system_tables else None
        try:
            while not self.stopping.wait(self.settings.observe.system_tables_interval):
                self._round(writer, state)
            self._round(writer, state)  # what the engine did last, before it stops
        finally:
            state.close()

    def _round(self, writer: SystemTableWriter | None, state: StateStore) -> None:
        started = time.monotonic()
        try:
            if writer is not None:
                writer.export()
            upkeep(self.settings, state)
        except Exception:  # never end the thread: the next round tries again
            log.exception("system tables round failed")
        log.debug("system tables written in %.2fs", time.monotonic() - started)
