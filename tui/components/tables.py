"""The Tables pane (being built)."""

from textual.containers import Horizontal
from textual.widgets import Static


class TablesPane(Horizontal):
    def compose(self):
        yield Static("Tables")
