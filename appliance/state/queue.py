"""What the engine's scheduled maintenance has queued, in the state database: written at each check, each entry
taken off as its run starts, so that `floe table runs` (and the UI) can say what waits, and since when."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from appliance.core.clock import now


@dataclass(frozen=True)
class QueuedTask:
    position: int
    table_name: str
    task: str
    reason: str
    queued_at: str


class QueueRecords:
    """`StateStore`'s part for the maintenance queue; it uses the store's `db` and `_rows`."""

    db: Any

    def _rows(self, table: str, where: str | None = None, args: list[Any] | None = None, **kwargs: Any):
        raise NotImplementedError

    def set_maintenance_queue(self, entries: list[tuple[str, str, str]]) -> None:
        """The queue a check made: (table, task, reason) in the order they will run; the last one's replaced."""
        at = now()
        with self.db.conn:
            self.db.execute("delete from maintenance_queue")
            if entries:
                self.db["maintenance_queue"].insert_all(
                    [{"position": i + 1, "table_name": t, "task": task, "reason": reason, "queued_at": at}
                     for i, (t, task, reason) in enumerate(entries)])

    def dequeue_maintenance(self, table: str, task: str) -> None:
        self.db.execute("delete from maintenance_queue where table_name = ? and task = ?", [table, task])

    def maintenance_queue(self, table: str | None = None) -> list[QueuedTask]:
        where, args = ("table_name = ?", [table]) if table else (None, [])
        return [QueuedTask(**row) for row in self._rows("maintenance_queue", where, args, order_by="position")]
