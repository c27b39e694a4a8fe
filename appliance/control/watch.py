"""`floe watch`: the `engine_down` alerts, from outside the engine (a dead engine tells no one).

Run beside the engine, or from cron as `floe watch --once`. The engine counts as down when it
stopped, its process is gone, or its heartbeat is older than `[alerting] heartbeat_timeout`.
An incident opens once (a later watch that finds it open does not notify again; a target that
failed is an event) and resolves when the engine is back.
"""

from __future__ import annotations

import datetime as dt
import logging
import threading
from dataclasses import replace
from typing import Callable

from appliance.config.alerts import Measure
from appliance.config.settings import Settings, ensure_home
from appliance.core.clock import utcnow
from appliance.core.vocabulary import EventKind, EventLevel
from appliance.observe.alerts import ENGINE, message
from appliance.observe.measures import Reading
from appliance.observe.notify import Message, deliver_recorded
from appliance.state.alerting import all_alerts
from appliance.state.store import StateStore
from appliance.views.engine import EngineHealth, engine_health

log = logging.getLogger(__name__)


def watch_once(settings: Settings) -> EngineHealth:
    """Look once; open, re-send or resolve each `engine_down` alert's incident. Notifications are
    sent here and now, each target tried `notify_attempts` times."""
    ensure_home(settings)
    with StateStore(settings.state_db) as state:
        health = engine_health(settings, state)
        reading = Reading(not health.up, health.reason)
        open_now = {i.alert: i for i in state.open_incidents() if i.subject == ENGINE}
        alerts = all_alerts(settings, state)
        for gone in set(open_now) - {a.name for a in alerts}:  # its alert was removed (from floe.toml, say)
            state.resolve_incident(open_now[gone].id, "alert removed")
        for alert in alerts:
            if alert.rule.measure is not Measure.ENGINE_DOWN:
                continue
            incident = open_now.get(alert.name)
            if health.up:
                if incident is not None:
                    state.resolve_incident(incident.id, health.reason)
                    note = message(alert, ENGINE, reading, resolved=True)
                    state.add_event(EventKind.INCIDENT_RESOLVED, f"{alert.name}: {note.body}")
                    _send(state, settings, note, incident.id, resolved=True)
                continue
            if incident is not None:
                continue  # told once: a target that failed then is an event, not a message every look
            if alert.for_seconds and health.heartbeat_age is not None and health.heartbeat_age < alert.for_seconds:
                continue
            last = state.last_resolved(alert.name, ENGINE)
            if last and (utcnow() - dt.datetime.fromisoformat(last)).total_seconds() < settings.alerting.cooldown:
                continue
            note = message(alert, ENGINE, reading, resolved=False)
            incident = state.open_incident(alert.name, ENGINE, str(alert.rule), health.reason, note.body)
            state.add_event(EventKind.INCIDENT_OPENED, f"{alert.name}: {note.body}", level=EventLevel.ERROR)
            _send(state, settings, note, incident.id, resolved=False)
    return health


def _send(state: StateStore, settings: Settings, note: Message, incident: int, resolved: bool) -> None:
    deliver_recorded(replace(note, subject="", incident=incident, resolved=resolved),
                     settings.alerting.notify_attempts, state)


def watch(settings: Settings, stop: threading.Event, told: Callable[[EngineHealth], None]) -> None:
    """Look every `evaluate_interval` until `stop`; `told` hears each change of the engine's health."""
    last: bool | None = None
    while True:
        try:
            health = watch_once(settings)
        except Exception as exc:  # a locked database, a broken target: say so, look again
            log.warning("floe watch: %s", exc)
        else:
            if health.up != last:
                told(health)
                last = health.up
        if stop.wait(settings.alerting.evaluate_interval):
            return
