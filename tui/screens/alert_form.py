"""Adding an alert: its name, rule, what it watches (a stream, a stage for failed and stalled, or, left
empty, every stream, and every stage for those two), window and where to notify, in a modal.

The engine checks it all (`appliance.control.alerts.add_alert`) as `floe alert add` does; what is
wrong comes back as one line under the form, and nothing is saved.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from rich.text import Text
from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.message import Message
from textual.screen import ModalScreen
from textual.widgets import Button, Input, Static

from appliance.config.alerts import Measure, default_window, describe_window
from appliance.control.alerts import add_alert
from tui.format import first_line
from tui.widgets.form import field
from tui.workers import ReportsFailures

HINT = (f"Measures: {', '.join(m.value for m in Measure)}. Thresholds compare, e.g. lag_messages > 100000, "
        "lag_seconds > 5m, dead_letter_ratio > 0.05; the others are conditions, e.g. stalled. "
        "A stage has failed and stalled. "
        "Enter or Ctrl+S adds · Esc cancels")
# URLs apart: whitespace, or a comma before the next URL's scheme (a comma inside a URL's query stays).
_SEPARATOR = re.compile(r"\s+|,\s*(?=[A-Za-z][A-Za-z0-9+.-]*://)|,\s*$")


def notify_urls(text: str) -> list[str]:
    """The notify URLs typed in one field: separated by commas, spaces or newlines."""
    return [u.strip().strip(",") for u in _SEPARATOR.split(text) if u and u.strip().strip(",")]


FOR_UNKNOWN = "the rule's default"
MEASURES = {m.value for m in Measure}


def for_placeholder(rule: str) -> str:
    """What an empty For means for `rule` (`5m`, `at once`), as the alert will be saved with it."""
    # The measure decides the default, so it shows as soon as the measure is typed, before the comparison.
    name = re.match(r"\s*([a-z_]*)", rule).group(1)
    return describe_window(default_window(Measure(name))) if name in MEASURES else FOR_UNKNOWN


@dataclass
class AlertAdded(Message):
    name: str
    error: str = ""  # one line: what the engine refused


class AlertFormScreen(ReportsFailures, ModalScreen[str | None]):
    BINDINGS = [
        Binding("ctrl+s", "save", "Add"),
        Binding("escape", "cancel", "Cancel"),
    ]

    def __init__(self) -> None:
        super().__init__()
        self.busy = False

    def compose(self) -> ComposeResult:
        with Vertical(id="alert-box"):
            yield Static("[b]New alert[/b]", id="alert-title")
            with Horizontal(classes="row"):
                yield field("Name", Input(placeholder="orders_lag", id="alert-name"), "alert-name")
                yield field("Rule", Input(placeholder="lag_messages > 100000", id="alert-rule"), "alert-rule")
                yield field("For (empty: the rule's default)", Input(placeholder=FOR_UNKNOWN, id="alert-for"),
                            "alert-for")
            with Horizontal(classes="row"):
                yield field("Stream (empty: every stream)", Input(placeholder="*", id="alert-stream"),
                            "alert-stream")
                yield field("Stage (failed and stalled only)", Input(placeholder="*", id="alert-stage"),
                            "alert-stage")
            yield field("Notify: Apprise URLs, separated by commas or spaces",
                        Input(placeholder="slack://…, mailto://…, json://host/path", id="alert-notify"),
                        "alert-notify")
            yield Static(HINT, id="alert-hint")
            yield Static("", id="alert-error")
            with Horizontal(id="alert-actions", classes="actions"):
                yield Button("Add (Ctrl+S)", id="alert-add", variant="primary")
                yield Button("Cancel", id="alert-cancel")

    def on_mount(self) -> None:
        self.query_one("#alert-name", Input).focus()

    @on(Input.Changed, "#alert-rule")
    def rule_changed(self, event: Input.Changed) -> None:
        # The placeholder is what an empty For means for this rule: what the alert is saved with.
        self.query_one("#alert-for", Input).placeholder = for_placeholder(event.value)

    def _value(self, name: str) -> str:
        return self.query_one(f"#{name}", Input).value.strip()

    def _error(self, text: str) -> None:
        self.query_one("#alert-error", Static).update(Text(text, style="bold red"))

    def action_save(self) -> None:
        if self.busy:
            return
        self.busy = True
        self._error("")
        self.save(self._value("alert-name"), self._value("alert-rule"),
                  notify_urls(self.query_one("#alert-notify", Input).value),
                  self._value("alert-stream") or None, self._value("alert-for") or None,
                  self._value("alert-stage") or None)

    @work(thread=True, exclusive=True, group="alert-save", exit_on_error=False)
    def save(self, name: str, rule: str, notify: list[str], stream: str | None, for_: str | None,
             stage: str | None) -> None:
        try:
            add_alert(self.app.settings, name, rule, notify, stream=stream, for_=for_, stage=stage)
        except Exception as exc:  # the engine's one line, never a traceback
            self.post_message(AlertAdded(name, first_line(exc)))
            return
        self.post_message(AlertAdded(name))

    @on(AlertAdded)
    def added(self, message: AlertAdded) -> None:
        self.busy = False
        if message.error:
            self._error(message.error)
        else:
            self.dismiss(f"Added alert {message.name}")

    @on(Input.Submitted)
    def submitted(self) -> None:
        self.action_save()

    @on(Button.Pressed, "#alert-add")
    def add_pressed(self) -> None:
        self.action_save()

    @on(Button.Pressed, "#alert-cancel")
    def cancel_pressed(self) -> None:
        self.action_cancel()

    def action_cancel(self) -> None:
        self.dismiss(None)
