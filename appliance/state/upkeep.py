"""The state database kept small for months of running: runtime rows nobody needs any more are pruned,
and the space they held is handed back to the file system.

The rows the system tables export (batches, events, maintenance and stage runs, the audit trail) are
pruned by `HistoryRecords.prune` once exported. The others are pruned here by age: resolved incidents
(their opening and resolution are events, exported), maintenance requests an engine took, the stage
editor's requests. With the system tables turned off, the exported kinds are pruned by age alone, all
but the audit trail (a row per change a person made: it stays). Stream definitions, statuses, the
writer schemas and schema changes met (removed with their stream), policies, alerts and the expired
offsets `floe audit` needs are definitions, not history: never pruned.
"""

from __future__ import annotations

import logging
import sqlite3
from typing import Any

from appliance.state.history import EXPORTED

log = logging.getLogger(__name__)

# Each runtime table that is not exported: the column saying when a row was done with, and which rows
# are done with. An incident stays while a notification is owed, and the newest of each alert and
# subject stays whatever its age (the alert's cooldown is measured from it).
RUNTIME: dict[str, tuple[str, str]] = {
    "incidents": ("resolved_at", "resolved_at is not null"
                                 " and not (coalesce(notified_open, 0) = 1 and coalesce(notified_resolved, 0) = 0)"
                                 " and id not in (select max(id) from incidents group by alert, subject)"),
    "maintenance_requests": ("taken_at", "taken_at is not null"),
    "engine_requests": ("requested_at", "1 = 1"),
}
KEPT_WITHOUT_EXPORT = ("audit",)
RECLAIM_PAGES = 2048  # free pages (8 MiB of 4 KiB pages) worth handing back, if a quarter of the file


class UpkeepRecords:
    """`StateStore`'s upkeep part: it uses the store's `db` and `HistoryRecords.prune`."""

    db: Any

    def prune(self, table: str, exported: int, before: str) -> int:
        raise NotImplementedError

    def prune_runtime(self, before: str, exported_too: bool = False) -> dict[str, int]:
        """Forget the runtime rows done with before `before` (ISO 8601, UTC); `exported_too`: also the
        kinds the system tables would have exported (they are turned off). Rows forgotten, per table."""
        gone = {}
        for table, (column, done) in RUNTIME.items():
            cursor = self.db.conn.execute(f"delete from {table} where {column} < ? and {done}", [before])
            gone[table] = cursor.rowcount
        if exported_too:
            for table in EXPORTED:
                if table not in KEPT_WITHOUT_EXPORT:
                    gone[table] = self.prune(table, 1 << 62, before)
        return gone

    def reclaim_space(self, min_pages: int = RECLAIM_PAGES) -> int:
        """Hand the file's free pages back to the file system when there are many (pruning freed them):
        at least `min_pages` and a quarter of the file. Free pages handed back (0: not worth it, or busy)."""
        free = self.db.execute("PRAGMA freelist_count").fetchone()[0]
        total = self.db.execute("PRAGMA page_count").fetchone()[0]
        if free < max(min_pages, total // 4):
            return 0
        try:
            if self.db.execute("PRAGMA auto_vacuum").fetchone()[0] != 2:
                # A database an older Floe made keeps its free pages until it is rewritten once; from then
                # on it is in incremental mode, and handing them back costs only the pages handed back.
                self.db.conn.execute("PRAGMA auto_vacuum = INCREMENTAL")
                self.db.conn.execute("VACUUM")
            else:
                self.db.conn.executescript("PRAGMA incremental_vacuum")  # every step frees a page: all of them
            self.db.conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        except sqlite3.OperationalError as exc:  # busy: the next round tries again
            log.warning("state database: free space not handed back: %s", exc)
            return 0
        return free
