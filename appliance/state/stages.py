"""Stage definitions, their runtime status and their runs, in the state database (beside the streams')."""

from __future__ import annotations

import datetime as dt
import sqlite3
from dataclasses import asdict
from typing import Any

from appliance.core.clock import now, utcnow
from appliance.core import hints
from appliance.core.errors import StageExists, StageNotFound
from appliance.core.vocabulary import StageAsk
from appliance.model.stage import StageDef
from appliance.state.records import StageRequestRecord, StageRunRecord, StageStatus

REQUESTS_KEPT = dt.timedelta(days=1)  # how long a preview or check asked of the engine stays on record


def _row(stage: StageDef) -> dict[str, Any]:
    return {"name": stage.name, "id": stage.id, "source": stage.source, "sql": stage.sql,
            "target_table": stage.table, "kind": stage.kind, "paused": int(stage.paused),
            "created_at": stage.created_at, "updated_at": stage.updated_at or stage.created_at}


def _stage(row: dict[str, Any]) -> StageDef:
    return StageDef(name=row["name"], id=row["id"], source=row["source"], sql=row["sql"], table=row["target_table"],
                    kind=row["kind"], paused=bool(row["paused"]), created_at=row["created_at"],
                    updated_at=row.get("updated_at") or row["created_at"])


class StageRecords:
    """`StateStore`'s stage part: it uses the store's `db` and `_rows`. Besides definitions, status and
    runs: the previews and checks the UI asks of the running engine (`stage_requests`)."""

    db: Any

    def _rows(self, table: str, where: str | None = None, args: list[Any] | None = None, **kwargs: Any):
        raise NotImplementedError

    def add_stage(self, stage: StageDef) -> None:
        try:
            self.db["stages"].insert(_row(stage))
        except sqlite3.IntegrityError:
            raise StageExists(f"stage {stage.name!r} already exists") from None

    def stage(self, name: str) -> StageDef:
        rows = list(self._rows("stages", "name = ?", [name]))
        if not rows:
            raise StageNotFound(f"no stage named {name!r} (see `{hints.LIST_STAGES}`)")
        return _stage(rows[0])

    def stages(self) -> list[StageDef]:
        return [_stage(r) for r in self._rows("stages", order_by="name")]

    def update_stage(self, name: str, **fields: Any) -> None:
        self.stage(name)
        if "table" in fields:
            fields["target_table"] = fields.pop("table")
        if "paused" in fields:
            fields["paused"] = int(fields["paused"])
        self.db["stages"].update(name, {**fields, "updated_at": now()})

    def remove_stage(self, name: str) -> None:
        self.stage(name)
        with self.db.conn:
            self.db["stages"].delete(name)
            self.db["stage_status"].delete_where("name = ?", [name])

    def stage_status(self, name: str) -> StageStatus:
        rows = list(self._rows("stage_status", "name = ?", [name]))
        return StageStatus.of(rows[0]) if rows else StageStatus(name)

    def stage_statuses(self) -> dict[str, StageStatus]:
        return {r["name"]: StageStatus.of(r) for r in self.db["stage_status"].rows}

    def update_stage_status(self, name: str, **fields: Any) -> None:
        row = {"name": name, **fields, "updated_at": now()}
        updates = ", ".join(f"{c} = excluded.{c}" for c in row if c != "name")
        self.db.conn.execute(f"insert into stage_status ({', '.join(row)}) values ({', '.join('?' * len(row))}) "
                             f"on conflict(name) do update set {updates}", list(row.values()))

    def record_stage_run(self, run: StageRunRecord) -> None:
        row = asdict(run)
        row.pop("id")
        self.db.conn.execute(f"insert into stage_runs ({', '.join(row)}) values ({', '.join('?' * len(row))})",
                             list(row.values()))

    def stage_runs(self, stage: str, limit: int = 20) -> list[StageRunRecord]:
        return [StageRunRecord.of(r) for r in self._rows("stage_runs", "stage = ?", [stage], order_by="id desc",
                                                           limit=limit)]

    # ---- previews and checks asked of the running engine ----

    def ask_stage(self, ask: StageAsk, source: str, sql: str, rows: int = 0) -> int:
        """Ask the engine (a request row); requests older than REQUESTS_KEPT go."""
        old = (utcnow() - REQUESTS_KEPT).isoformat(timespec="milliseconds")
        self.db.conn.execute("delete from stage_requests where requested_at < ?", [old])
        cursor = self.db.conn.execute(
            "insert into stage_requests (ask, source, sql, rows, requested_at) values (?, ?, ?, ?, ?)",
            [str(ask), source, sql, rows, now()])
        return int(cursor.lastrowid)

    def stage_request(self, request_id: int) -> StageRequestRecord | None:
        rows = list(self._rows("stage_requests", "id = ?", [request_id]))
        return StageRequestRecord.of(rows[0]) if rows else None

    def take_stage_requests(self, pid: int, within: float = 120.0) -> list[StageRequestRecord]:
        """Requests of the last `within` seconds nobody took or withdrew (older ones: their asker is gone),
        oldest first, each marked taken by `pid` (exactly one taker)."""
        taken = []
        since = (utcnow() - dt.timedelta(seconds=within)).isoformat(timespec="milliseconds")
        for row in self._rows("stage_requests", "taken_at is null and withdrawn_at is null and requested_at >= ?",
                              [since], order_by="id"):
            at = now()
            cursor = self.db.execute("update stage_requests set taken_at = ?, taken_by = ? where id = ? and "
                                     "taken_at is null and withdrawn_at is null", [at, pid, row["id"]])
            if cursor.rowcount == 1:
                taken.append(StageRequestRecord.of({**row, "taken_at": at, "taken_by": pid}))
        return taken

    def withdraw_stage_request(self, request_id: int) -> bool:
        """Stop waiting for a request no engine has taken; False when one took it meanwhile."""
        cursor = self.db.execute("update stage_requests set withdrawn_at = ? where id = ? and taken_at is null",
                                 [now(), request_id])
        return cursor.rowcount == 1

    def answer_stage_request(self, request_id: int, *, query_kind: str = "", columns: str = "",
                             table_schema: str = "", result: bytes | None = None, error: str = "") -> None:
        self.db.execute("update stage_requests set answered_at = ?, query_kind = ?, columns = ?, table_schema = ?, "
                        "result = ?, error = ? where id = ?",
                        [now(), query_kind, columns, table_schema, result, error, request_id])
