"""What the running engine waits for: a dependency down (the catalog, the warehouse, a broker, a schema
registry), since when, and what it last said. `ingest/outages.py` writes them; `floe status` and the
`dependency_down` alert read them."""

from __future__ import annotations

import re
import sqlite3
from dataclasses import dataclass
from typing import Any

from appliance.core.clock import now
from appliance.core.errors import DiskUnwritable

# What SQLite says when its file cannot be written for now, for want of space or of write access.
_NO_SPACE = re.compile(r"full|readonly|disk I/O", re.I)


def state_error(exc: BaseException) -> BaseException:
    """The state database's failure for want of space as an outage of the disk; any other as it is."""
    if isinstance(exc, sqlite3.OperationalError) and _NO_SPACE.search(str(exc)):
        return DiskUnwritable(f"the state database cannot be written: {exc}")
    return exc


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
