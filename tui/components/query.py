"""The Query pane (being built)."""

from textual.containers import Vertical
from textual.widgets import Static


class QueryPane(Vertical):
    def compose(self):
        yield Static("Query")
