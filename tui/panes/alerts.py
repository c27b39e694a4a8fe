"""The Alerts pane: every alert (floe.toml's and those added with `floe alert` or here) and the
incidents open now, live; add, remove and test alerts.

Notify URLs carry secrets: only their masked form (`appliance.views.alerts`) is ever shown.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from rich.markup import escape
from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.message import Message
from textual.widgets import DataTable, Static

from appliance.control.alerts import remove_alert, send_test
from appliance.views.alerts import AlertView, alerts_overview
from tui.format import clock, one_line, plural
from tui.messages import ActionDone
from tui.screens.confirm import ConfirmScreen
from tui.screens.sections import REFRESH
from tui.widgets.rows import put_rows, selected_key
from tui.widgets.texts import Texts
from tui.workers import Refresh, ReportsFailures

if TYPE_CHECKING:  # the UI reads incidents from the views, it never opens the state database itself
    from appliance.state.alerting import Incident

COLUMNS = [
    ("name", "Alert"), ("rule", "Rule"), ("subject", "Subject"), ("for", "For"), ("open", "Open"),
    ("from", "From"), ("notify", "Notify"),  # last: it may be long
]
INCIDENT_COLUMNS = [
    ("alert", "Alert"), ("subject", "Subject"), ("rule", "Rule"), ("value", "Measured"), ("opened", "Opened at"),
    ("message", "Message"),
]
EMPTY = ("No alerts yet. Press [b]n[/b] to add one: a rule over the streams' lag, freshness or dead letters, "
         "a stage failing or stalled, or the engine's health, and where to notify.")


@dataclass
class AlertsLoaded(Message):
    """The alerts and the open incidents; it bubbles to the app, which counts the incidents."""

    alerts: list[AlertView]
    incidents: list[Incident]


def alert_cells(a: AlertView) -> dict[str, str]:
    s = a.summary()
    return {
        "name": escape(a.name),
        "rule": escape(a.rule),
        "subject": escape(s["subject"]),
        "for": s["for"],
        "open": f"[bold red]{len(a.open)}[/]" if a.open else "0",
        "from": s["from"],
        "notify": escape(s["notify"]),  # masked
    }


def incident_cells(i: Incident) -> dict[str, str]:
    return {
        "alert": escape(i.alert),
        "subject": escape(i.subject or "(engine)"),
        "rule": escape(i.rule),
        "value": f"[bold red]{escape(i.value)}[/]",
        "opened": clock(i.opened_at),
        "message": escape(one_line(i.message, 120)),
    }


def tested(name: str, deliveries) -> tuple[str, bool]:
    """A test's outcome as a toast: ok or FAILED per masked target, and whether any failed."""
    lines = [f"ok  {d.target}" if d.ok else f"FAILED  {d.target}: {d.reason or 'Apprise gave no reason'}"
             for d in deliveries]
    failed = sum(not d.ok for d in deliveries)
    head = (f"Test of alert {name}: {failed} of {plural(len(deliveries), 'target')} FAILED" if failed
            else f"Test of alert {name}: sent to {plural(len(deliveries), 'target')}")
    return escape("\n".join([head, *lines])), bool(failed)


class AlertsPane(ReportsFailures, Vertical):
    BINDINGS = [
        Binding("n", "new", "New alert"),
        Binding("d", "remove", "Remove"),
        Binding("t", "test", "Send a test"),
    ]

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.alerts: dict[str, AlertView] = {}
        self.texts = Texts(self)

    def compose(self) -> ComposeResult:
        yield Static("Loading alerts…", id="alerts-empty")
        table = DataTable(id="alerts-table", cursor_type="row", zebra_stripes=True)
        for key, label in COLUMNS:
            table.add_column(label, key=key)
        yield table
        yield Static("Open incidents", id="incidents-title")
        yield Static("", id="incidents-empty")
        incidents = DataTable(id="incidents-table", cursor_type="row", zebra_stripes=True)
        for key, label in INCIDENT_COLUMNS:
            incidents.add_column(label, key=key)
        yield incidents

    def on_mount(self) -> None:
        self.reading = Refresh(self.load)
        self.reading.now()
        self.set_interval(1.0, self.reading.due, name=REFRESH)

    @work(thread=True, exclusive=True, group="alerts-load", exit_on_error=False)
    def load(self) -> None:
        self.post_message(AlertsLoaded(*alerts_overview(self.app.settings)))

    @on(AlertsLoaded)
    def show(self, message: AlertsLoaded) -> None:
        self.alerts = {a.name: a for a in message.alerts}
        self.query_one("#alerts-empty", Static).display = not message.alerts
        self.texts.set("#alerts-empty", EMPTY)
        put_rows(self.query_one("#alerts-table", DataTable), {a.name: alert_cells(a) for a in message.alerts})
        n = len(message.incidents)
        self.texts.set("#incidents-title", f"[b]Open incidents[/b] ({n})" if n else "[b]Open incidents[/b]")
        self.query_one("#incidents-empty", Static).display = not n
        self.texts.set("#incidents-empty", "None: every alert holds.")
        put_rows(self.query_one("#incidents-table", DataTable),
                 {str(i.id): incident_cells(i) for i in message.incidents})

    def selected(self) -> str | None:
        return selected_key(self.query_one("#alerts-table", DataTable))

    def action_new(self) -> None:
        from tui.screens.alert_form import AlertFormScreen

        self.app.push_screen(AlertFormScreen(), self._added)

    def _added(self, said: str | None) -> None:
        if said:
            self.notify(said)
            self.reading.now()

    def action_remove(self) -> None:
        name = self.selected()
        if not name:
            return
        alert = self.alerts.get(name)
        if alert is not None and alert.origin == "config":
            self.notify(f"Alert {name} is defined in floe.toml: remove it there", severity="warning")
            return

        def answered(remove: bool | None) -> None:
            if remove:
                self.delete_alert(name)

        opened = f" Its {plural(len(alert.open), 'open incident')} close without a notification." \
            if alert is not None and alert.open else ""
        self.app.push_screen(ConfirmScreen(f"Remove alert {name}?{opened}", yes="Remove"), answered)

    @work(thread=True, group="alerts-action", exit_on_error=False)
    def delete_alert(self, name: str) -> None:
        try:
            remove_alert(self.app.settings, name)
            self.post_message(ActionDone(f"Removed alert {name}"))
        except Exception as exc:
            self.post_message(ActionDone(str(exc), error=True))
        self.app.call_from_thread(self.reading.now)

    def action_test(self) -> None:
        if name := self.selected():
            self.notify(f"Sending a test notification for alert {name}…")
            self.test_alert(name)

    @work(thread=True, group="alerts-action", exit_on_error=False)
    def test_alert(self, name: str) -> None:
        try:
            text, failed = tested(name, send_test(self.app.settings, name))
            self.post_message(ActionDone(text, error=failed))
        except Exception as exc:
            self.post_message(ActionDone(str(exc), error=True))
