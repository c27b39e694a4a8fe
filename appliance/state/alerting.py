"""Alerts made with `floe alert add` or the UI, their incidents, and the sums alert rules read, in the
state database."""

from __future__ import annotations

import json
import sqlite3
from dataclasses import dataclass
from typing import Any

from appliance.config.alerts import AlertDef, make_alert
from appliance.config.settings import Settings
from appliance.core import hints
from appliance.core.clock import now
from appliance.core.errors import AlertExists, AlertNotFound


@dataclass(frozen=True)
class Incident:
    """An alert broken for one subject (a stream, `stage NAME`, a table, the engine): open until resolved.
    `notified_resolved` is also set when it was closed with nothing to tell (its alert or subject gone)."""

    id: int
    alert: str
    subject: str
    rule: str
    opened_at: str
    resolved_at: str | None
    value: str
    message: str
    notified_open: bool
    notified_resolved: bool

    @property
    def open(self) -> bool:
        return self.resolved_at is None

    @classmethod
    def of(cls, row: dict[str, Any]) -> Incident:
        return cls(id=row["id"], alert=row["alert"], subject=row.get("subject") or "", rule=row.get("rule") or "",
                   opened_at=row["opened_at"], resolved_at=row.get("resolved_at"), value=row.get("value") or "",
                   message=row.get("message") or "", notified_open=bool(row.get("notified_open")),
                   notified_resolved=bool(row.get("notified_resolved")))


class AlertRecords:
    """`StateStore`'s alerting part: it uses the store's `db` and `_rows`."""

    db: Any

    def _rows(self, table: str, where: str | None = None, args: list[Any] | None = None, **kwargs: Any):
        raise NotImplementedError

    # ---- alerts made with `floe alert add` or the UI ----

    def add_alert(self, alert: AlertDef) -> None:
        try:
            self.db["alerts"].insert({"name": alert.name, "rule": alert.rule.text, "stream": alert.stream,
                                      "stage": alert.stage, "for_seconds": alert.for_seconds,
                                      "notify": json.dumps(list(alert.notify)), "created_at": now()})
        except sqlite3.IntegrityError:
            raise AlertExists(f"alert {alert.name!r} already exists") from None

    def remove_alert(self, name: str) -> None:
        if not list(self._rows("alerts", "name = ?", [name])):
            raise AlertNotFound(f"no alert named {name!r} (`{hints.LIST_ALERTS}` shows them)")
        self.db["alerts"].delete(name)

    def stored_alerts(self) -> list[AlertDef]:
        return [make_alert(r["name"], r["rule"], r["stream"], r["for_seconds"], tuple(json.loads(r["notify"])),
                           stage=r.get("stage")) for r in self._rows("alerts", order_by="name")]

    # ---- incidents ----

    def open_incident(self, alert: str, subject: str, rule: str, value: str, message: str) -> Incident:
        row = {"alert": alert, "subject": subject, "rule": rule, "opened_at": now(), "value": value,
               "message": message, "notified_open": 0, "notified_resolved": 0}
        row["id"] = self.db["incidents"].insert(row).last_pk
        return Incident.of(row)

    def resolve_incident(self, incident_id: int, value: str, silent: bool = False) -> None:
        """`silent`: closed with nothing to tell (its alert or subject is gone), so no resolution is owed,
        and none is sent after a restart."""
        told = ", notified_resolved = 1" if silent else ""
        self.db.conn.execute(f"update incidents set resolved_at = ?, value = ?{told} where id = ?",
                             [now(), value, incident_id])

    def mark_notified(self, incident_id: int, resolved: bool) -> None:
        column = "notified_resolved" if resolved else "notified_open"
        self.db.conn.execute(f"update incidents set {column} = 1 where id = ?", [incident_id])

    def open_incidents(self) -> list[Incident]:
        return [Incident.of(r) for r in self._rows("incidents", "resolved_at is null", order_by="id")]

    def unnotified_incidents(self) -> list[Incident]:
        """Open incidents whose opening was never delivered, and resolved ones whose opening was but whose
        resolution was not."""
        return [Incident.of(r) for r in self._rows(
            "incidents", "(resolved_at is null and coalesce(notified_open, 0) = 0) or (resolved_at is not null "
            "and coalesce(notified_open, 0) = 1 and coalesce(notified_resolved, 0) = 0)", order_by="id")]

    def incident(self, incident_id: int) -> Incident | None:
        rows = list(self._rows("incidents", "id = ?", [incident_id]))
        return Incident.of(rows[0]) if rows else None

    def incidents(self, alert: str | None = None, limit: int = 50) -> list[Incident]:
        where, args = ("alert = ?", [alert]) if alert else (None, [])
        return [Incident.of(r) for r in self._rows("incidents", where, args, order_by="id desc", limit=limit)]

    def last_resolved(self, alert: str, subject: str) -> str | None:
        row = self.db.execute("select max(resolved_at) from incidents where alert = ? and subject = ?",
                              [alert, subject]).fetchone()
        return row[0] if row else None

    # ---- what alerts measure, summed in SQL (they look every few seconds) ----

    def batch_totals(self, since: list[str]) -> list[dict[str, tuple[int, int, int]]]:
        """For each of `since`: every stream's messages, dead letters and longest throttle (ms) over its
        batches committed since then (streams with none left out). One statement, whatever the streams: it
        reads only the batches of the longest window, through the `committed_at` index."""
        if not since:
            return []
        sums = ", ".join("coalesce(sum(case when committed_at >= ? then messages end), 0), "
                         "coalesce(sum(case when committed_at >= ? then dead_letter_rows end), 0), "
                         "coalesce(max(case when committed_at >= ? then throttle_ms end), 0), "
                         "count(case when committed_at >= ? then 1 end)" for _ in since)
        args = [value for s in since for value in (s, s, s, s)]
        # `+stream`: grouped by the (stream, committed_at) index, SQLite would scan every batch the day keeps.
        rows = self.db.execute(f"select stream, {sums} from batches where committed_at >= ? group by +stream",
                               [*args, min(since)]).fetchall()
        out: list[dict[str, tuple[int, int, int]]] = [{} for _ in since]
        for row in rows:
            for i, totals in enumerate(out):
                messages, dead, throttle, batches = row[1 + 4 * i:5 + 4 * i]
                if batches:
                    totals[row[0]] = (int(messages), int(dead), int(throttle))
        return out

    def latest_maintenance(self) -> list[tuple[str, str, str, str]]:
        """(table, task, outcome, detail) of each table's latest real run of each task."""
        return [tuple(r) for r in self.db.execute(
            "select table_name, task, outcome, detail from maintenance_runs where id in (select max(id) from "
            "maintenance_runs where dry_run = 0 and outcome not in ('cancelled', 'busy') group by table_name, task)")]


def all_alerts(settings: Settings, state: AlertRecords) -> list[AlertDef]:
    """floe.toml's `[[alerts]]` and those of `floe alert add`, by name."""
    return sorted([*settings.alerting.alerts, *state.stored_alerts()], key=lambda a: a.name)
