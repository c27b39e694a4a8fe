"""The new-stream wizard (being built)."""

from textual.screen import Screen
from textual.widgets import Static


class NewStreamScreen(Screen):
    def compose(self):
        yield Static("New stream")
