"""The audit trail in the state database, and what the system tables export from it (then prune:
the state database keeps what the live UI shows)."""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass
from typing import Any

from appliance.core.clock import now

# What the system tables read from the state database: its rows in id order, and the
# column saying when each happened (what pruning goes by).
EXPORTED = {"batches": "committed_at", "events": "at", "maintenance_runs": "started_at",
            "stage_runs": "started_at", "audit": "at"}


@dataclass(frozen=True)
class AuditRecord:
    id: int
    at: str
    user: str
    host: str
    via: str
    action: str
    target: str
    arguments: str  # JSON, secrets masked
    outcome: str  # ok, or failed
    detail: str

    @classmethod
    def of(cls, row: dict[str, Any]) -> AuditRecord:
        return cls(**{k: row.get(k) if row.get(k) is not None else ("" if k != "id" else 0)
                      for k in cls.__dataclass_fields__})


class HistoryRecords:
    """`StateStore`'s audit trail and export part: it uses the store's `db` and `_rows`."""

    db: Any

    def _rows(self, table: str, where: str | None = None, args: list[Any] | None = None, **kwargs: Any):
        raise NotImplementedError

    # ---- the audit trail ----

    def record_audit(self, user: str, host: str, via: str, action: str, target: str, arguments: dict[str, Any],
                     outcome: str, detail: str = "") -> int:
        return self.db["audit"].insert({"at": now(), "user": user, "host": host, "via": via, "action": action,
                                        "target": target, "arguments": json.dumps(arguments, sort_keys=True),
                                        "outcome": outcome, "detail": detail}).last_pk

    def audit_trail(self, limit: int = 100) -> list[AuditRecord]:
        return [AuditRecord.of(r) for r in self._rows("audit", order_by="id desc", limit=limit)]

    # ---- what the system tables export ----

    def rows_after(self, table: str, after: int, limit: int = 50_000) -> list[dict[str, Any]]:
        """`table`'s rows with an id above `after`, oldest first."""
        return list(self._rows(table, "id > ?", [after], order_by="id", limit=limit))

    def database_id(self) -> str:
        """A random id made when this state database was made (the system tables' export key)."""
        row = self.db.execute("select value from meta where key = 'database-id'").fetchone()
        if row:
            return row[0]
        self.db.conn.execute("insert or ignore into meta (key, value) values ('database-id', ?)",
                             [uuid.uuid4().hex[:12]])
        return self.db.execute("select value from meta where key = 'database-id'").fetchone()[0]

    def export_floor(self, table: str) -> int:
        """The id up to which `table`'s rows were exported before this database's id was made: 0, but for a
        database restored from a backup, whose rows up to there the system tables already hold."""
        row = self.db.execute("select value from meta where key = ?", [f"export-floor.{table}"]).fetchone()
        return int(row[0]) if row else 0

    def restored(self, exported: dict[str, int]) -> None:
        """This database was restored from a backup: it takes a new id, its new rows' ids going on from the
        backup's, below what the live database exported under the old one. `exported`: each table's last id
        the system tables hold under the old id; rows up to there (or the backup's last) are not exported again."""
        with self.db.conn:
            self.db.conn.execute("delete from meta where key = 'database-id' or key like 'export-floor.%'")
            self.db.conn.execute("insert into meta (key, value) values ('database-id', ?)", [uuid.uuid4().hex[:12]])
            for table in EXPORTED:
                floor = min(exported.get(table, 0), self.last_id(table))
                self.db.conn.execute("insert into meta (key, value) values (?, ?)",
                                     [f"export-floor.{table}", str(floor)])

    def last_id(self, table: str) -> int:
        return self.db.execute(f"select coalesce(max(id), 0) from {table}").fetchone()[0]

    def prune(self, table: str, exported: int, before: str) -> int:
        """Forget `table`'s rows that are exported (id at most `exported`) and older than `before`."""
        # The newest row stays whatever its age: SQLite hands out ids above the largest one left,
        # and an id at or below the exported position would never be exported.
        keep = (" and id not in (select max(id) from maintenance_runs group by table_name, task)"
                if table == "maintenance_runs" else "")  # when each task last ran: the scheduler needs it
        cursor = self.db.conn.execute(f"delete from {table} where id <= ? and {EXPORTED[table]} < ? "
                                      f"and id < (select max(id) from {table}){keep}", [exported, before])
        return cursor.rowcount
