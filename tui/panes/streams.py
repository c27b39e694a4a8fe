"""The Streams pane: every stream's state, rates, totals, lag and errors, live."""

from __future__ import annotations

from dataclasses import dataclass

from rich.markup import escape
from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.message import Message
from textual.widgets import DataTable, Static

from appliance.control.streams import delete_stream, set_paused
from appliance.views.streams import StreamView, streams_overview
from tui.format import age, count, sparkline
from tui.messages import ActionDone
from tui.screens.confirm import ConfirmScreen
from tui.styles import phase_text
from tui.widgets.rows import put_rows, selected_key
from tui.widgets.texts import Texts
from tui.workers import ReportsFailures

COLUMNS = [
    ("stream", "Stream"), ("state", "State"), ("rate", "Msg/s"), ("rows_1m", "Rows 1m"),
    ("dlq_1m", "DLQ 1m"), ("rows", "Rows"), ("dlq", "DLQ"), ("lag", "Lag"),
    ("commit", "Last commit"), ("spark", "Throughput (2 min)"), ("error", "Last error"),
]


@dataclass
class StreamsLoaded(Message):
    streams: list[StreamView]


def stream_cells(s: StreamView) -> dict[str, str]:
    return {
        "stream": s.name,
        "state": phase_text(s.phase),
        "rate": count(s.messages_per_s),
        "rows_1m": count(s.rows_last_minute),
        "dlq_1m": count(s.dead_letters_last_minute),
        "rows": count(s.rows_total),
        "dlq": count(s.dead_letters_total),
        "lag": count(s.lag),
        "commit": age(s.last_commit_age),
        "spark": sparkline(s.throughput),
        "error": escape(s.last_error[:80]),  # librdkafka's "[thrd:...]" is not markup
    }


class StreamsPane(ReportsFailures, Vertical):
    BINDINGS = [
        Binding("enter", "open", "Detail"),
        Binding("p", "pause", "Pause"),
        Binding("r", "resume", "Resume"),
        Binding("d", "delete", "Delete"),
    ]

    def compose(self) -> ComposeResult:
        yield Static("Loading streams…", id="streams-empty")
        table = DataTable(id="streams-table", cursor_type="row", zebra_stripes=True)
        for key, label in COLUMNS:
            table.add_column(label, key=key)
        yield table

    def on_mount(self) -> None:
        self.texts = Texts(self)  # a Static's update lays the whole screen out again: only on a change
        self.load()
        self.set_interval(1.0, self.load)

    @work(thread=True, exclusive=True, group="streams-load", exit_on_error=False)
    def load(self) -> None:
        self.post_message(StreamsLoaded(streams_overview(self.app.settings)))

    @on(StreamsLoaded)
    def show(self, message: StreamsLoaded) -> None:
        table = self.query_one(DataTable)
        empty = self.query_one("#streams-empty", Static)
        empty.display = not message.streams
        self.texts.set("#streams-empty", "No streams yet. Press [b]n[/b] to create one.")
        put_rows(table, {s.name: stream_cells(s) for s in message.streams})

    def selected(self) -> str | None:
        return selected_key(self.query_one(DataTable))

    def action_open(self) -> None:
        name = self.selected()
        if name:
            from tui.screens.stream_detail import StreamDetailScreen

            self.app.push_screen(StreamDetailScreen(name))

    @on(DataTable.RowSelected)
    def row_selected(self, event: DataTable.RowSelected) -> None:
        self.action_open()

    def action_pause(self) -> None:
        if name := self.selected():
            self.set_paused(name, True)

    def action_resume(self) -> None:
        if name := self.selected():
            self.set_paused(name, False)

    @work(thread=True, group="streams-action", exit_on_error=False)
    def set_paused(self, name: str, paused: bool) -> None:
        try:
            set_paused(self.app.settings, name, paused)
            self.post_message(ActionDone(f"{'Paused' if paused else 'Resumed'} {name}"))
        except Exception as exc:
            self.post_message(ActionDone(str(exc), error=True))
        self.load()

    def action_delete(self) -> None:
        name = self.selected()
        if not name:
            return

        def answered(drop: bool | None) -> None:
            if drop:
                self.delete(name)

        self.app.push_screen(
            ConfirmScreen(f"Delete stream {name} and drop its target and dead-letter tables?", yes="Delete"),
            answered,
        )

    @work(thread=True, group="streams-action", exit_on_error=False)
    def delete(self, name: str) -> None:
        try:
            delete_stream(self.app.settings, name, drop_tables=True)
            self.post_message(ActionDone(f"Deleted {name} and its tables"))
        except Exception as exc:
            self.post_message(ActionDone(str(exc), error=True))
        self.load()
