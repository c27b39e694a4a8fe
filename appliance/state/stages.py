"""Stage definitions, their runtime status and their runs, in the state database (beside the streams')."""

from __future__ import annotations

import sqlite3
from dataclasses import asdict
from typing import Any

from appliance.core import hints
from appliance.core.clock import now
from appliance.core.errors import StageExists, StageNotFound
from appliance.model.stage import StageDef
from appliance.state.records import StageRunRecord, StageStatus


def _row(stage: StageDef) -> dict[str, Any]:
    return {"name": stage.name, "id": stage.id, "source": stage.source, "sql": stage.sql,
            "target_table": stage.table, "kind": stage.kind, "paused": int(stage.paused),
            "created_at": stage.created_at, "updated_at": stage.updated_at or stage.created_at}


def _stage(row: dict[str, Any]) -> StageDef:
    return StageDef(name=row["name"], id=row["id"], source=row["source"], sql=row["sql"], table=row["target_table"],
                    kind=row["kind"], paused=bool(row["paused"]), created_at=row["created_at"],
                    updated_at=row.get("updated_at") or row["created_at"])


class StageRecords:
    """`StateStore`'s stage part: definitions, status and runs; it uses the store's `db` and `_rows`."""

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
        return {r["name"]: StageStatus.of(r) for r in self._rows("stage_status")}

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

    def stage_runs_after(self, after: int) -> list[tuple[int, str, int, int, int, str]]:
        """(id, stage, duration_ms, rows_in, rows_out, outcome) of every stage run after the id `after`, by id."""
        return self.db.conn.execute("select id, stage, duration_ms, rows_in, rows_out, outcome from stage_runs "
                                    "where id > ? order by id", [after]).fetchall()

    def newest_stage_run(self) -> int:
        """The newest stage run's id (0 with none)."""
        return self.db.conn.execute("select coalesce(max(id), 0) from stage_runs").fetchone()[0]

    def stage_runs(self, stage: str, limit: int = 20) -> list[StageRunRecord]:
        return [StageRunRecord.of(r) for r in self._rows("stage_runs", "stage = ?", [stage], order_by="id desc",
                                                           limit=limit)]
