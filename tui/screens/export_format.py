"""Ctrl+S in the Query section: the last result exported in one step, once its format is chosen.

The format the path's suffix asks for (CSV unless it says Parquet) has the focus: Enter exports."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.screen import ModalScreen
from textual.widgets import Button, Label

from appliance.query.export import format_for


class ExportFormatScreen(ModalScreen[str | None]):
    BINDINGS = [Binding("escape", "choose(None)", "Cancel"), Binding("c", "choose('csv')", "CSV"),
                Binding("p", "choose('parquet')", "Parquet")]

    def __init__(self, rows: int, path: str) -> None:
        super().__init__()
        self.rows, self.path = rows, path
        self.likely = format_for(path)

    def compose(self) -> ComposeResult:
        with Vertical(id="confirm-box"):
            yield Label(f"Export the last result ({self.rows:,} rows) to {self.path} as:", id="confirm-question")
            with Horizontal(id="confirm-buttons"):
                for fmt, label in (("csv", "CSV (c)"), ("parquet", "Parquet (p)")):
                    yield Button(label, variant="primary" if fmt == self.likely else "default", id=fmt)
                yield Button("Cancel", id="cancel")

    def on_mount(self) -> None:
        self.query_one(f"#{self.likely}", Button).focus()

    def on_button_pressed(self, event: Button.Pressed) -> None:
        self.dismiss(None if event.button.id == "cancel" else event.button.id)

    def action_choose(self, fmt: str | None) -> None:
        self.dismiss(fmt)
