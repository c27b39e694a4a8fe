"""The stream detail screen (being built)."""

from textual.screen import Screen
from textual.widgets import Static


class StreamDetailScreen(Screen):
    def __init__(self, name: str) -> None:
        super().__init__()
        self.stream_name = name

    def compose(self):
        yield Static(self.stream_name)
