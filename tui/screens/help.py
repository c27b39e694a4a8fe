"""The help screen: every key binding of the app and of the screen below it."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import DataTable, Static


class HelpScreen(ModalScreen[None]):
    BINDINGS = [Binding("escape,q,question_mark,f1", "dismiss", "Close")]

    def __init__(self, bindings: list[tuple[str, str, str]]) -> None:
        super().__init__()
        self.rows = bindings

    def compose(self) -> ComposeResult:
        with VerticalScroll(id="help-box"):
            yield Static("[b]Floe keys[/b]  (Esc to close; Ctrl+P opens the command palette)", id="help-title")
            table = DataTable(id="help-table", cursor_type="row", zebra_stripes=True)
            table.add_columns("Key", "Action", "Where")
            for key, action, where in self.rows:
                table.add_row(key, action, where)
            yield table
