"""What the running engine waits for: a dependency down (the catalog, the warehouse, a broker, a schema
registry), since when, and what it last said. `ingest/outages.py` writes them; `floe status` and the
`dependency_down` alert read them."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from appliance.core.clock import now


@dataclass(frozen=True)
class Outage:
    dependency: str
    since: str  # ISO 8601, UTC
    message: str


class OutageRecords:
    """`StateStore`'s outage part: it uses the store's `db`."""

    db: Any

    def outage_began(self, dependency: str, message: str, since: str | None = None) -> None:
        self.db.conn.execute("insert or replace into outages (dependency, since, message) values (?, ?, ?)",
                             [dependency, since or now(), message])

    def outage_ended(self, dependency: str) -> None:
        self.db.conn.execute("delete from outages where dependency = ?", [dependency])

    def clear_outages(self) -> None:
        self.db.conn.execute("delete from outages")

    def outages(self) -> list[Outage]:
        return [Outage(*row) for row in
                self.db.conn.execute("select dependency, since, message from outages order by since, dependency")]
