"""Alerts in the engine: every `evaluate_interval`, each alert's rule is read for each of its
subjects; an incident opens when it breaks (and has for the rule's `for`), and resolves once it
has held again for the cooldown. One notification when an incident opens, one when it resolves.

Incidents live in the state database: a restarted engine carries on with those open, and never
notifies them again.
"""

from __future__ import annotations

import datetime as dt
import logging
import threading
import time
from dataclasses import dataclass, replace

from appliance.config.alerts import WINDOWED, AlertDef, Measure
from appliance.config.settings import Settings
from appliance.core.clock import utcnow
from appliance.core.vocabulary import EventKind, EventLevel, RunOutcome, StreamPhase
from appliance.observe.measures import Reading, Window, stream_reading
from appliance.observe.notify import Message, Notifier
from appliance.state.observe import Incident, all_alerts
from appliance.state.store import StateStore

log = logging.getLogger(__name__)

ENGINE = "engine"  # the subject of engine-level incidents

HINTS = {
    Measure.LAG_MESSAGES: "Look at the stream's rate and errors (floe stream show {s}) and the topic's producers.",
    Measure.LAG_SECONDS: "Look at the stream's rate and errors (floe stream show {s}).",
    Measure.FRESHNESS_SECONDS: "Look at the stream's batches and lag (floe stream show {s}).",
    Measure.DEAD_LETTER_RATIO: "Look at the dead letters: floe query \"select error_stage, error, count(*) "
                               "from {dlq} group by all\".",
    Measure.FAILED: "Look at the stream's last error: floe stream show {s}.",
    Measure.STALLED: "Is the broker up and reachable? floe stream show {s}.",
    Measure.THROTTLED: "The broker's quotas slow Floe's reads: look at the client quotas for its principal.",
    Measure.AUTH_FAILED: "The cluster refuses the stream's credentials or topic: check them (floe stream show {s}).",
    Measure.MAINTENANCE_FAILED: "Look at the table's maintenance runs: floe table runs {s}.",
    Measure.ENGINE_DOWN: "Start it again (floe run), and look at its log in FLOE_HOME/logs/floe.log.",
}


def message(alert: AlertDef, subject: str, reading: Reading | None, resolved: bool, dlq: str = "") -> Message:
    measure = alert.rule.measure
    what = "the engine" if subject == ENGINE else (f"table {subject}" if measure is Measure.MAINTENANCE_FAILED
                                                  else f"stream {subject}")
    state = "RESOLVED" if resolved else "OPEN"
    title = f"[Floe] {state}: {alert.name} ({alert.rule}) on {what}"
    value = reading.shown() if reading else ""
    window = f" over {alert.window:g}s" if measure in WINDOWED else ""
    if resolved:
        body = f"{alert.rule} no longer holds for {what}" + (f" (now {value})." if value else ".")
    else:
        found = f"measured {value}" if alert.rule.threshold is not None or measure is Measure.STALLED else value
        body = (f"{alert.rule}{window} for {what}: {found or 'yes'}. "
                + HINTS[measure].format(s=subject, dlq=dlq or "the dead-letter table"))
    return Message(tuple(alert.notify), title, body, failure=not resolved, subject=subject)


@dataclass
class Tracked:
    """What the alerter remembers of one (alert, subject) between evaluations."""

    breached_since: float | None = None  # monotonic
    clear_since: float | None = None


class Alerter:
    """One evaluation at a time (`evaluate`); the engine's AlertThread calls it on a schedule."""

    def __init__(self, settings: Settings, state: StateStore, notifier: Notifier | None,
                 clock=time.monotonic) -> None:
        self.settings = settings
        self.state = state
        self.notifier = notifier
        self.clock = clock
        self.tracked: dict[tuple[str, str], Tracked] = {}
        self._stall: dict[str, tuple[str | None, float]] = {}  # stream -> (last commit seen, waiting since)

    def evaluate(self) -> None:
        alerts = [a for a in all_alerts(self.settings, self.state) if a.rule.measure is not Measure.ENGINE_DOWN]
        open_now = {(i.alert, i.subject): i for i in self.state.open_incidents()}
        seen: set[tuple[str, str]] = set()
        readings = self._readings(alerts)
        for alert, subject, reading in readings:
            key = (alert.name, subject)
            seen.add(key)
            self._step(alert, subject, reading, open_now.get(key))
        for key, incident in open_now.items():  # its alert removed, its stream deleted, or the engine's
            if key not in seen and incident.subject != ENGINE:
                self.state.resolve_incident(incident.id, "gone")
                self.state.add_event(EventKind.INCIDENT_RESOLVED, f"{incident.alert} on {incident.subject}: "
                                     "resolved (the alert or its subject no longer exists)", None)
        self.tracked = {k: v for k, v in self.tracked.items() if k in seen}

    def _step(self, alert: AlertDef, subject: str, reading: Reading, incident: Incident | None) -> None:
        now = self.clock()
        tracked = self.tracked.setdefault((alert.name, subject), Tracked())
        cooldown = self.settings.alerting.cooldown
        if reading.breached:
            tracked.clear_since = None
            if incident is not None:
                return
            tracked.breached_since = tracked.breached_since or now
            holds = alert.rule.measure in WINDOWED or alert.rule.measure is Measure.MAINTENANCE_FAILED
            if not holds and now - tracked.breached_since < alert.window:
                return
            last = self.state.last_resolved(alert.name, subject)
            if last and (utcnow() - dt.datetime.fromisoformat(last)).total_seconds() < cooldown:
                return  # it just resolved: wait out the cooldown before opening again
            self._open(alert, subject, reading)
        else:
            tracked.breached_since = None
            if incident is None:
                return
            tracked.clear_since = tracked.clear_since or now
            if now - tracked.clear_since >= cooldown:
                self._resolve(alert, subject, reading, incident)

    def _open(self, alert: AlertDef, subject: str, reading: Reading) -> None:
        note = message(alert, subject, reading, resolved=False, dlq=self._dlq(alert, subject))
        incident = self.state.open_incident(alert.name, subject, str(alert.rule), reading.shown(), note.body)
        self.state.add_event(EventKind.INCIDENT_OPENED, f"{alert.name}: {note.body}",
                             subject if subject != ENGINE else None, EventLevel.ERROR)
        self._send(note, incident.id, resolved=False)

    def _resolve(self, alert: AlertDef, subject: str, reading: Reading, incident: Incident) -> None:
        self.state.resolve_incident(incident.id, reading.shown())
        note = message(alert, subject, reading, resolved=True)
        self.state.add_event(EventKind.INCIDENT_RESOLVED, f"{alert.name}: {note.body}",
                             subject if subject != ENGINE else None)
        self._send(note, incident.id, resolved=True)

    def _send(self, note: Message, incident: int, resolved: bool) -> None:
        if self.notifier is not None:
            self.notifier.send(replace(note, incident=incident, resolved=resolved))

    def _dlq(self, alert: AlertDef, subject: str) -> str:
        if alert.rule.measure is not Measure.DEAD_LETTER_RATIO:
            return ""
        try:
            return self.state.stream(subject).dead_letter_table
        except Exception:
            return ""

    # ---- readings ----

    def _readings(self, alerts: list[AlertDef]) -> list[tuple[AlertDef, str, Reading]]:
        out: list[tuple[AlertDef, str, Reading]] = []
        streams = {s.name: s for s in self.state.streams()}
        statuses = self.state.statuses()
        at = utcnow()
        stalled = self._stalled(streams, statuses, at)
        for alert in alerts:
            if alert.rule.measure is Measure.MAINTENANCE_FAILED:
                out += [(alert, table, reading) for table, reading in self._maintenance().items()]
                continue
            names = [alert.stream] if alert.stream else sorted(streams)
            since = (at - dt.timedelta(seconds=alert.window)).isoformat(timespec="milliseconds")
            for name in names:
                if name not in streams:
                    continue
                status = statuses.get(name) or self.state.status(name)
                windowed = alert.rule.measure in (Measure.DEAD_LETTER_RATIO, Measure.THROTTLED)
                window = Window(*self.state.batch_totals(name, since)) if windowed else Window()
                out.append((alert, name, stream_reading(alert, status, window, stalled.get(name),
                                                        streams[name].paused)))
        return out

    def _stalled(self, streams: dict, statuses: dict, at: dt.datetime) -> dict[str, float]:
        """Seconds each stream has gone without a commit while it had messages waiting or could
        not read its topic (a frozen broker gives no lag to measure)."""
        out: dict[str, float] = {}
        wall = at.timestamp()
        for name, stream in streams.items():
            status = statuses.get(name)
            waiting = status is not None and not stream.paused and (
                bool(status.lag) or status.phase is StreamPhase.FAILED)
            if not waiting:
                self._stall.pop(name, None)
                continue
            commit = status.last_commit_at
            seen = self._stall.get(name)
            if seen is None or seen[0] != commit:
                # Waiting just began (measured from now), or the stream committed since: from then.
                start = wall if seen is None or commit is None else dt.datetime.fromisoformat(commit).timestamp()
                seen = self._stall[name] = (commit, start)
            out[name] = wall - seen[1]
        return out

    def _maintenance(self) -> dict[str, Reading]:
        """Tables whose latest run of some task failed (a later success resolves it)."""
        out: dict[str, Reading] = {}
        for table, task, outcome, detail in self.state.latest_maintenance():
            failed = outcome == RunOutcome.FAILED
            if failed or table not in out:
                out[table] = Reading(failed, f"{task} failed: {detail}" if failed else None)
        return out


class AlertThread(threading.Thread):
    """The engine's alerter: its own state connection and notifier; never raises into the engine."""

    def __init__(self, settings: Settings, stopping: threading.Event) -> None:
        super().__init__(name="floe-alerts", daemon=True)
        self.settings = settings
        self.stopping = stopping
        self.notifier = Notifier(settings, stopping)

    def run(self) -> None:
        self.notifier.start()
        state = StateStore(self.settings.state_db, durable=False)
        alerter = Alerter(self.settings, state, self.notifier)
        try:
            while not self.stopping.wait(self.settings.alerting.evaluate_interval):
                try:
                    alerter.evaluate()
                except Exception:  # a bad row, a locked database: the next round tries again
                    log.exception("alert evaluation failed")
        finally:
            state.close()
            self.notifier.join(timeout=10)
