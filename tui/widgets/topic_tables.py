"""A pattern stream's topics and their tables, in its detail: one can be picked (Enter), and what acts on one
topic then acts on it alone (the dead-letter replay, `d`); Enter on it again, or on another, changes the pick."""

from __future__ import annotations

from rich.markup import escape
from textual import on
from textual.app import ComposeResult
from textual.containers import Vertical
from textual.widgets import DataTable, Static

from appliance.views.streams import TopicTables
from tui.format import clock
from tui.widgets.rows import put_ordered_rows

COLUMNS = [("picked", " "), ("topic", "Topic"), ("table", "Table"), ("dead", "Dead-letter table"),
           ("state", "State")]
PICK = "▶"


class TopicTablesList(Vertical):
    """Hidden for a stream that is not a pattern's. `picked`: the topic chosen, None for every topic."""

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self.picked: str | None = None
        self.count = 0
        self._shown = ""

    def compose(self) -> ComposeResult:
        yield Static("", classes="section-title", id="topics-title")
        table = DataTable(id="topics-table", cursor_type="row", zebra_stripes=True)
        for key, label in COLUMNS:
            table.add_column(label, key=key)
        yield table

    def show(self, topics: list[TopicTables]) -> None:
        self.display = bool(topics)
        self.count = len(topics)
        if self.picked is not None and self.picked not in {t.topic for t in topics}:
            self.picked = None
        put_ordered_rows(self.query_one(DataTable), {t.topic: {
            "picked": PICK if t.topic == self.picked else " ",
            "topic": t.topic,
            "table": escape(t.table),
            "dead": escape(t.dead_letter_table),
            "state": f"[dim]gone since {clock(t.removed_at)}[/]" if t.removed_at else "reading",
        } for t in topics}, "topic")
        self._title()

    @on(DataTable.RowSelected, "#topics-table")
    def selected(self, event: DataTable.RowSelected) -> None:
        event.stop()
        topic = event.row_key.value
        self.picked = None if topic == self.picked else topic
        table = event.data_table
        for key in table.rows:
            mark = PICK if key.value == self.picked else " "
            if str(table.get_cell(key, "picked")) != mark:
                table.update_cell(key, "picked", mark)
        self._title()

    def _title(self) -> None:
        if self.picked is None:
            text = (f"Tables of {self.count} topics  [dim](Enter on one picks it: [b]d[/b] then replays its "
                    "dead letters alone)[/]")
        else:
            text = (f"Tables of {self.count} topics: picked [b]{escape(self.picked)}[/b]  [dim]([b]d[/b] "
                    "replays its dead letters alone; Enter on it again: every topic's)[/]")
        if text != self._shown:
            self._shown = text
            self.query_one("#topics-title", Static).update(text)
