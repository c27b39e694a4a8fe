"""Alerts in the engine: every `evaluate_interval`, each alert's rule is read for each of its
subjects (streams, stages, tables); an incident opens when it breaks (and has for the rule's `for`),
and resolves once it has held again for the cooldown. One notification when an incident opens,
one when it resolves.

Incidents live in the state database: a restarted engine carries on with those open, and never
notifies them again; what it had not got through before it stopped is queued again at start.
"""

from __future__ import annotations

import datetime as dt
import logging
import threading
import time
from dataclasses import dataclass, replace

from appliance.config.alerts import WINDOWED, AlertDef, Measure
from appliance.config.settings import Settings
from appliance.core import hints
from appliance.core.clock import utcnow
from appliance.core.errors import StreamNotFound
from appliance.core.vocabulary import EventKind, EventLevel, RunOutcome, StagePhase, StreamPhase
from appliance.observe.measures import Reading, Window, stage_reading, stream_reading
from appliance.observe.notify import Message, Notifier
from appliance.state.alerting import Incident, all_alerts
from appliance.state.records import StageStatus, StreamStatus
from appliance.state.store import StateStore

log = logging.getLogger(__name__)

_SUMMED = (Measure.DEAD_LETTER_RATIO, Measure.THROTTLED)  # the measures of a stream's batches over a window

ENGINE = "engine"  # the subject of engine-level incidents
STAGE = "stage "  # a stage's incidents are about `stage NAME` (a stage's name holds no space)

_STREAM = f"`{hints.SHOW_STREAM.format(stream='{s}')}`"
HINTS = {
    Measure.LAG_MESSAGES: f"Look at the stream's rate and errors ({_STREAM}) and the topic's producers.",
    Measure.LAG_SECONDS: f"Look at the stream's rate and errors ({_STREAM}).",
    Measure.FRESHNESS_SECONDS: f"Look at the stream's batches and lag ({_STREAM}).",
    Measure.DEAD_LETTER_RATIO: f"Look at the dead letters: `{hints.DEAD_LETTER_REASONS.format(dead_letters='{dlq}')}`.",
    Measure.FAILED: f"Look at the stream's last error: {_STREAM}.",
    Measure.STALLED: f"Is the broker up and reachable? {_STREAM}.",
    Measure.THROTTLED: "The broker's quotas slow Floe's reads: look at the client quotas for its principal.",
    Measure.AUTH_FAILED: f"The cluster refuses the stream's credentials or topic: check them ({_STREAM}).",
    Measure.MAINTENANCE_FAILED: f"Look at the table's maintenance runs: `{hints.TABLE_RUNS.format(table='{s}')}`.",
    Measure.DEPENDENCY_DOWN: f"The engine resumes by itself once it is back: bring it back (`{hints.STATUS}` says "
                             "what it waits for).",
    Measure.ENGINE_DOWN: f"Start it again (`{hints.START_ENGINE}`), and look at its log in FLOE_HOME/logs/floe.log.",
}
STAGE_HINTS = {
    Measure.FAILED: f"Look at the stage's last error: `{hints.SHOW_STAGE.format(stage='{s}')}`.",
    Measure.STALLED: "Its source has rows it has not processed: is the engine running, is its source table "
                     f"readable? `{hints.SHOW_STAGE.format(stage='{s}')}`.",
}


def stage_subject(name: str) -> str:
    return f"{STAGE}{name}"


def event_subject(subject: str) -> str | None:
    """What an incident's events name in their stream column: the stream or stage (they share names), the
    table; nothing for the engine."""
    if subject == ENGINE:
        return None
    return subject.removeprefix(STAGE)


def _what(measure: Measure, subject: str) -> str:
    if subject == ENGINE:
        return "the engine"
    if subject.startswith(STAGE):
        return subject
    return f"table {subject}" if measure is Measure.MAINTENANCE_FAILED else f"stream {subject}"


def _title(name: str, rule: object, what: str, resolved: bool) -> str:
    return f"[Floe] {'RESOLVED' if resolved else 'OPEN'}: {name} ({rule}) on {what}"


def _resolved_body(rule: object, what: str, value: str) -> str:
    return f"{rule} no longer holds for {what}" + (f" (now {value})." if value else ".")


def message(alert: AlertDef, subject: str, reading: Reading | None, resolved: bool, dlq: str = "") -> Message:
    measure = alert.rule.measure
    what = _what(measure, subject)
    value = reading.shown() if reading else ""
    window = f" over {alert.window:g}s" if measure in WINDOWED else ""
    if resolved:
        body = _resolved_body(alert.rule, what, value)
    else:
        found = f"measured {value}" if alert.rule.threshold is not None or measure is Measure.STALLED else value
        hint = (STAGE_HINTS[measure].format(s=subject.removeprefix(STAGE)) if subject.startswith(STAGE)
                else HINTS[measure].format(s=subject, dlq=dlq) if dlq or measure is not Measure.DEAD_LETTER_RATIO
                else "Look at the stream's dead letters.")  # the stream is gone: no table to name
        body = f"{alert.rule}{window} for {what}: {found or 'yes'}. {hint}"
    return Message(tuple(alert.notify), _title(alert.name, alert.rule, what, resolved), body, failure=not resolved,
                   subject=event_subject(subject) or "")


def unsent(settings: Settings, state: StateStore) -> list[Message]:
    """The notifications that never got through (the engine stopped first, or every attempt failed), as
    they were first made: an open incident's opening, a resolved one's resolution. Not those of alerts
    removed since (nowhere to send them), nor `engine_down`'s (`floe watch` sends its own)."""
    alerts = {a.name: a for a in all_alerts(settings, state)}
    out: list[Message] = []
    for incident in state.unnotified_incidents():
        alert = alerts.get(incident.alert)
        if alert is None or alert.rule.measure is Measure.ENGINE_DOWN:
            continue
        what, resolved = _what(alert.rule.measure, incident.subject), not incident.open
        body = _resolved_body(incident.rule, what, incident.value) if resolved else incident.message
        out.append(Message(tuple(alert.notify), _title(alert.name, incident.rule, what, resolved), body,
                           failure=not resolved, subject=event_subject(incident.subject) or "",
                           incident=incident.id, resolved=resolved))
    return out


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
        # subject -> (a stream's last commit or a stage's last run, as last seen; waiting since)
        self._stall: dict[str, tuple[str | None, float]] = {}

    def evaluate(self) -> None:
        alerts = [a for a in all_alerts(self.settings, self.state) if a.rule.measure is not Measure.ENGINE_DOWN]
        open_now = {(i.alert, i.subject): i for i in self.state.open_incidents()}
        seen: set[tuple[str, str]] = set()
        readings = self._readings(alerts)
        for alert, subject, reading in readings:
            key = (alert.name, subject)
            seen.add(key)
            self._step(alert, subject, reading, open_now.get(key))
        for key, incident in open_now.items():  # its alert removed, its stream or stage deleted, or the engine's
            if key not in seen and incident.subject != ENGINE:
                self.state.resolve_incident(incident.id, "gone", silent=True)
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
        self.state.add_event(EventKind.INCIDENT_OPENED, f"{alert.name}: {note.body}", event_subject(subject),
                             EventLevel.ERROR)
        self._send(note, incident.id, resolved=False)

    def _resolve(self, alert: AlertDef, subject: str, reading: Reading, incident: Incident) -> None:
        self.state.resolve_incident(incident.id, reading.shown())
        note = message(alert, subject, reading, resolved=True)
        self.state.add_event(EventKind.INCIDENT_RESOLVED, f"{alert.name}: {note.body}", event_subject(subject))
        self._send(note, incident.id, resolved=True)

    def _send(self, note: Message, incident: int, resolved: bool) -> None:
        if self.notifier is not None:
            self.notifier.send(replace(note, incident=incident, resolved=resolved))

    def _dlq(self, alert: AlertDef, subject: str) -> str:
        if alert.rule.measure is not Measure.DEAD_LETTER_RATIO:
            return ""
        try:
            return self.state.stream(subject).dead_letter_table
        except StreamNotFound:  # deleted since it was read: the message names no table
            log.info("alert %s: stream %s is gone; its message names no dead-letter table", alert.name, subject)
            return ""

    # ---- readings ----

    def _readings(self, alerts: list[AlertDef]) -> list[tuple[AlertDef, str, Reading]]:
        out: list[tuple[AlertDef, str, Reading]] = []
        # Names and pauses only: the definitions' mappings are not parsed each round for hundreds of streams.
        streams = {s.name: s for s in self.state.stream_summaries()}
        statuses = self.state.statuses()
        stages = {s.name: s for s in self.state.stages()}
        stage_statuses = self.state.stage_statuses()
        at = utcnow()
        stalled = self._stalled(self._waiting(streams, statuses, stages, stage_statuses), at)
        windows = self._windows(alerts, at)
        for alert in alerts:
            if alert.rule.measure is Measure.MAINTENANCE_FAILED:
                out += [(alert, table, reading) for table, reading in self._maintenance().items()]
                continue
            if alert.rule.measure is Measure.DEPENDENCY_DOWN:  # one incident per outage, however long
                down = self.state.outages()
                out.append((alert, ENGINE, Reading(bool(down), "; ".join(
                    f"{o.dependency} down since {o.since[:19]}: {o.message}" for o in down) or None)))
                continue
            if alert.covers_streams:
                totals = windows.get(alert.window, {}) if alert.rule.measure in _SUMMED else {}
                for name in [alert.stream] if alert.stream else sorted(streams):
                    if name in streams:
                        window = Window(*totals[name]) if name in totals else Window()
                        out.append((alert, name, stream_reading(alert, statuses.get(name) or StreamStatus(name),
                                                                window, stalled.get(name), streams[name].paused)))
            if alert.covers_stages:
                for name in [alert.stage] if alert.stage else sorted(stages):
                    if name in stages:
                        subject, status = stage_subject(name), stage_statuses.get(name) or StageStatus(name)
                        out.append((alert, subject, stage_reading(alert, status, stalled.get(subject),
                                                                  stages[name].paused)))
        return out

    def _windows(self, alerts: list[AlertDef], at: dt.datetime) -> dict[float, dict[str, tuple[int, int, int]]]:
        """Each window the streams' windowed alerts read (seconds): every stream's batches summed over it, all
        in one query a round, which reads the batches of the longest window and nothing per stream."""
        spans = sorted({a.window for a in alerts if a.covers_streams and a.rule.measure in _SUMMED})
        since = [(at - dt.timedelta(seconds=s)).isoformat(timespec="milliseconds") for s in spans]
        return dict(zip(spans, self.state.batch_totals(since)))

    @staticmethod
    def _waiting(streams: dict, statuses: dict, stages: dict, stage_statuses: dict) -> dict[str, tuple]:
        """Each subject: (whether it has work waiting, when it last got some done). A stream waits while it
        has messages waiting or cannot read its topic (a frozen broker gives no lag to measure); a stage
        while its source has snapshots it has not processed, or it fails. A paused one never waits."""
        out: dict[str, tuple[bool, str | None]] = {}
        for name, stream in streams.items():
            status = statuses.get(name)
            if status is None:
                out[name] = (False, None)
                continue
            waits = not stream.paused and (bool(status.lag) or status.phase is StreamPhase.FAILED)
            out[name] = (waits, status.last_commit_at)
        for name, stage in stages.items():
            run = stage_statuses.get(name)
            if run is None:
                out[stage_subject(name)] = (False, None)
                continue
            waits = not stage.paused and (bool(run.lag_snapshots) or run.phase is StagePhase.FAILED)
            out[stage_subject(name)] = (waits, run.last_run_at)
        return out

    def _stalled(self, waiting: dict[str, tuple], at: dt.datetime) -> dict[str, float]:
        """Seconds each subject has waited without a stream's commit or a stage's completed run."""
        out: dict[str, float] = {}
        wall = at.timestamp()
        for subject, (waits, last) in waiting.items():
            if not waits:
                self._stall.pop(subject, None)
                continue
            seen = self._stall.get(subject)
            if seen is None or seen[0] != last:
                # Waiting just began (measured from now), or it got work done since: from then.
                start = wall if seen is None or last is None else dt.datetime.fromisoformat(last).timestamp()
                seen = self._stall[subject] = (last, start)
            out[subject] = wall - seen[1]
        self._stall = {k: v for k, v in self._stall.items() if k in waiting}  # deleted ones
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
            self.requeue(state)
            while not self.stopping.wait(self.settings.alerting.evaluate_interval):
                try:
                    alerter.evaluate()
                except Exception:  # a bad row, a locked database: the next round tries again
                    log.exception("alert evaluation failed")
        finally:
            state.close()
            self.notifier.join(timeout=10)

    def requeue(self, state: StateStore) -> int:
        """Queue again what never got through before the engine last stopped; how many."""
        notes: list[Message] = []
        try:
            notes = unsent(self.settings, state)
            for note in notes:
                self.notifier.send(note)
            if notes:
                state.add_event(EventKind.NOTIFICATION_REQUEUED, f"queued again {len(notes)} notification"
                                f"{'s' if len(notes) > 1 else ''} that had not got through before the engine stopped")
        except Exception:  # a locked database: the incidents keep what they owe, for the next start
            log.exception("queueing undelivered notifications again failed")
        return len(notes)
