"""Alerts: add, remove and test them (the CLI's `floe alert` and the UI's Alerts section)."""

from __future__ import annotations

from dataclasses import dataclass

from appliance.config.alerts import AlertDef, check_urls, make_alert, masked_url
from appliance.config.settings import Settings, ensure_home
from appliance.control.audit import audited, masked
from appliance.core import hints
from appliance.core.errors import AlertExists, AlertNotFound, AlertRuleError
from appliance.core.vocabulary import EventKind
from appliance.observe.notify import Message, deliver
from appliance.state.alerting import all_alerts
from appliance.state.store import StateStore


def _notify_masked(arguments: dict) -> dict:
    return {**masked(arguments), "notify": [masked_url(u) for u in arguments.get("notify") or ()]}


def find_alert(settings: Settings, state: StateStore, name: str) -> AlertDef:
    for alert in all_alerts(settings, state):
        if alert.name == name:
            return alert
    raise AlertNotFound(f"no alert named {name!r} (`{hints.LIST_ALERTS}` shows them)")


@audited("alert add", mask=_notify_masked)
def add_alert(settings: Settings, name: str, rule: str, notify: tuple[str, ...] | list[str],
              stream: str | None = None, for_: str | None = None, stage: str | None = None) -> AlertDef:
    """Check and save an alert; AlertRuleError (or AlertExists) names what is wrong, nothing saved."""
    alert = make_alert(name, rule, stream, for_, tuple(notify), stage=stage)
    check_urls(alert.notify, alert.name)
    ensure_home(settings)
    with StateStore(settings.state_db) as state:
        if any(a.name == name for a in settings.alerting.alerts):
            raise AlertExists(f"alert {name!r} is defined in floe.toml")
        if alert.stream and alert.stream not in {s.name for s in state.streams()}:
            raise AlertRuleError(f"alert {name}: no stream named {alert.stream!r} (`{hints.LIST_STREAMS}` shows them)")
        if alert.stage and alert.stage not in {s.name for s in state.stages()}:
            raise AlertRuleError(f"alert {name}: no stage named {alert.stage!r} (`{hints.LIST_STAGES}` shows them)")
        state.add_alert(alert)
        on = f" on stream {alert.stream}" if alert.stream else f" on stage {alert.stage}" if alert.stage else ""
        # A stage's events are filed under its name, as a stream's are (the two never share a name).
        state.add_event(EventKind.ALERT_ADDED, f"alert {name}: {alert.rule}{on}", alert.stream or alert.stage)
    return alert


@audited("alert remove")
def remove_alert(settings: Settings, name: str) -> None:
    with StateStore(settings.state_db) as state:
        if any(a.name == name for a in settings.alerting.alerts):
            raise AlertRuleError(f"alert {name!r} is defined in floe.toml: remove it there")
        state.remove_alert(name)
        for incident in state.open_incidents():
            if incident.alert == name:
                state.resolve_incident(incident.id, "alert removed", silent=True)
        state.add_event(EventKind.ALERT_REMOVED, f"alert {name} removed")


@dataclass(frozen=True)
class Delivery:
    target: str  # masked
    ok: bool
    reason: str = ""  # why it failed, as Apprise said (secrets masked)


def send_test(settings: Settings, name: str) -> list[Delivery]:
    """Send a test notification to each of the alert's targets, now; what each did."""
    with StateStore(settings.state_db) as state:
        alert = find_alert(settings, state, name)
        note = Message(alert.notify, f"[Floe] TEST: {alert.name} ({alert.rule})",
                       f"A test of alert {alert.name}: when {alert.rule} holds, Floe notifies here.", failure=False)
        reasons: dict[str, str] = {}
        results = deliver(note, settings.alerting.notify_attempts, report=lambda text: state.add_event(
            EventKind.NOTIFICATION_FAILED, text), reasons=reasons)
    return [Delivery(masked_url(url), ok, reasons.get(url, "")) for url, ok in results]
