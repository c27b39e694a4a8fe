"""Alerts and their incidents as `floe alert` and the UI's Alerts section show them."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from appliance.config.alerts import AlertDef, describe_window, masked_url
from appliance.config.settings import Settings
from appliance.state.alerting import Incident, all_alerts
from appliance.state.store import StateStore


@dataclass(frozen=True)
class AlertView:
    name: str
    rule: str
    stream: str  # "" : every stream (or the engine), unless it names a stage
    window: float  # seconds: the rule's window, or how long it must hold
    notify: list[str]  # masked
    origin: str  # cli (floe alert add, the UI) or config (floe.toml)
    open: list[Incident]
    stage: str = ""  # the one stage it watches
    stages: bool = False  # it watches every stage (failed and stalled naming no stream nor stage)
    default_window: bool = False  # added without `for`: the window is the rule's default

    @property
    def subject(self) -> str:
        """What it watches: `stream NAME`, `stage NAME`, or `*` (every stream, and stage or table, or the engine)."""
        return f"stream {self.stream}" if self.stream else f"stage {self.stage}" if self.stage else "*"

    @property
    def shown_window(self) -> str:
        """`2m` as given, or the rule's default said as one: `5m (default)`, `at once (default)`."""
        return f"{describe_window(self.window)} (default)" if self.default_window else describe_window(self.window)

    def summary(self) -> dict[str, Any]:
        # "stream" as before stages had alerts; "stage" beside it, `*` when it watches every stage too.
        return {"name": self.name, "rule": self.rule, "subject": self.subject,
                "stream": self.stream or ("" if self.stage else "*"),
                "stage": self.stage or ("*" if self.stages else ""),
                "for": self.shown_window, "notify": ", ".join(self.notify),
                "from": "floe.toml" if self.origin == "config" else "floe alert", "open": len(self.open)}


def _view(alert: AlertDef, incidents: list[Incident], masker) -> AlertView:
    return AlertView(alert.name, str(alert.rule), alert.stream or "", alert.window,
                     [masker(u) for u in alert.notify], alert.origin, [i for i in incidents if i.alert == alert.name],
                     alert.stage or "", alert.covers_stages and not alert.stage, alert.for_seconds is None)


def alerts_overview(settings: Settings, masker=None) -> tuple[list[AlertView], list[Incident]]:
    """Every alert, and every open incident (of alerts that exist or not)."""
    with StateStore(settings.state_db) as state:
        alerts, incidents = all_alerts(settings, state), state.open_incidents()
    return [_view(a, incidents, masker or masked_url) for a in alerts], incidents


def alert_history(settings: Settings, name: str, limit: int = 20) -> list[Incident]:
    with StateStore(settings.state_db) as state:
        return state.incidents(name, limit)
