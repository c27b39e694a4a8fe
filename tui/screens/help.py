"""The help screen: every key binding of the app and of the screen below it.

The table is the one thing that scrolls, and it has the focus: ↑/↓, PgUp/PgDn, Home/End and the
mouse wheel reach its last row however short the terminal (a scrolling box around a table that
scrolled too left the last keys out of reach)."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import DataTable, Static

TITLE = "[b]Floe keys[/b]   ↑↓ PgDn End, wheel: scroll · Esc: close · Ctrl+P: palette"


class KeysTable(DataTable):
    """A list to read down: Home and End go to its first and last rows (a DataTable's go sideways)."""

    BINDINGS = [Binding("home", "scroll_top", "First", show=False),
                Binding("end", "scroll_bottom", "Last", show=False)]


class HelpScreen(ModalScreen[None]):
    BINDINGS = [Binding("escape,q,question_mark,f1", "dismiss", "Close")]
    AUTO_FOCUS = "#help-table"

    def __init__(self, bindings: list[tuple[str, str, str]]) -> None:
        super().__init__()
        self.rows = bindings

    def compose(self) -> ComposeResult:
        with Vertical(id="help-box"):
            yield Static(TITLE, id="help-title")
            table = KeysTable(id="help-table", cursor_type="row", zebra_stripes=True)
            table.add_columns("Key", "Action", "Where")
            for key, action, where in self.rows:
                table.add_row(key, action, where)
            yield table
