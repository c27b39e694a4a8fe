"""The Events pane (being built)."""

from textual.containers import Vertical
from textual.widgets import Static


class EventsPane(Vertical):
    def compose(self):
        yield Static("Events")
