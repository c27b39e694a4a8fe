"""The Events pane: errors and notable events of the engine and its streams, newest first, live.

It shows what the engine recorded (`StateStore.events`) and the dead-letter bursts
`appliance.observe` derives from the recorded batches, filtered by stream.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from rich.markup import escape
from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.message import Message
from textual.widgets import DataTable, Label, Select, Static
from textual.worker import get_current_worker

from appliance import observe
from tui.components.stream_detail import clock, one_line, put_row, trim_rows

ALL = "*"  # the filter's "All streams": no stream is named so (a-z, 0-9, _ and - only)
LIMIT = 200
COLUMNS = [("time", "Time"), ("level", "Level"), ("stream", "Stream"), ("kind", "Event"), ("message", "Message")]
LEVEL_STYLE = {"error": "bold red", "warning": "yellow", "info": "green"}


@dataclass
class EventsLoaded(Message):
    stream: str  # the filter this answers: a stream name or ALL
    feed: Any  # appliance.observe.EventsFeed, or None with `error`
    error: str = ""


class EventsPane(Vertical):
    BINDINGS = [Binding("f", "filter", "Filter by stream")]
    DEFAULT_CSS = """
    EventsPane #events-bar {
        height: auto;
        padding: 0 1;
    }
    EventsPane #events-bar Label {
        padding: 1 1 0 0;
    }
    EventsPane #events-filter {
        width: 40;
    }
    EventsPane #events-count {
        width: 1fr;
        padding: 1 0 0 2;
        color: $text-muted;
    }
    EventsPane #events-table {
        height: 1fr;
    }
    EventsPane #events-empty {
        padding: 1 2;
        color: $text-muted;
    }
    EventsPane #events-message {
        height: auto;
        max-height: 5;
        padding: 0 1;
        background: $boost;
    }
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.stream_filter = ALL
        self.streams: list[str] = []
        self.keys: list[str] = []  # event keys, in row order
        self.events: list[Any] = []
        self.texts: dict[str, str] = {}

    def compose(self) -> ComposeResult:
        with Horizontal(id="events-bar"):
            yield Label("Stream")
            yield Select([("All streams", ALL)], value=ALL, allow_blank=False, id="events-filter")
            yield Static("", id="events-count")
        yield Static("Loading events…", id="events-empty")
        table = DataTable(id="events-table", cursor_type="row", zebra_stripes=True)
        for key, label in COLUMNS:
            table.add_column(label, key=key)
        yield table
        yield Static("", id="events-message")

    def on_mount(self) -> None:
        self.reload()
        self.set_interval(1.0, self.reload)

    def reload(self) -> None:
        self.load(self.stream_filter)

    @work(thread=True, exclusive=True, group="events-load", exit_on_error=False)
    def load(self, stream: str) -> None:
        try:
            feed = observe.events_feed(self.app.settings, None if stream == ALL else stream, LIMIT)
        except Exception as exc:
            self.post_message(EventsLoaded(stream, None, str(exc)))
            return
        if not get_current_worker().is_cancelled:
            self.post_message(EventsLoaded(stream, feed))

    @on(Select.Changed, "#events-filter")
    def filter_changed(self, event: Select.Changed) -> None:
        value = event.value if isinstance(event.value, str) else ALL
        if value != self.stream_filter:
            self.stream_filter = value
            self.reload()

    def action_filter(self) -> None:
        select = self.query_one("#events-filter", Select)
        select.focus()
        select.expanded = True

    @on(EventsLoaded)
    def show(self, message: EventsLoaded) -> None:
        if message.stream != self.stream_filter:
            return  # answers a filter no longer chosen
        if message.feed is None:
            self._set("#events-count", f"[red]cannot read events: {escape(message.error)}[/]")
            return
        self._options(message.feed.streams)
        events = message.feed.events
        table = self.query_one("#events-table", DataTable)
        # Keep the cursor on the event it was on, unless it was on the newest (then follow new ones).
        followed = self.keys[table.cursor_row] if table.row_count and table.cursor_row > 0 else None
        for i, e in enumerate(events):
            style = LEVEL_STYLE.get(e.level, "")
            put_row(table, str(i), {
                "time": clock(e.at),
                "level": f"[{style}]{escape(e.level)}[/]" if style else escape(e.level),
                "stream": escape(e.stream or "(engine)"),
                "kind": f"[{style}]{escape(e.kind)}[/]" if e.level in ("error", "warning") else escape(e.kind),
                "message": escape(one_line(e.message, 160)),
            })
        trim_rows(table, len(events))
        self.keys = [e.key for e in events]
        self.events = events
        if followed is not None and followed in self.keys and self.keys.index(followed) != table.cursor_row:
            table.move_cursor(row=self.keys.index(followed), animate=False)
        empty = self.query_one("#events-empty", Static)
        empty.display = not events
        self._set("#events-empty", "No events yet." if self.stream_filter == ALL else f"No events for stream {escape(self.stream_filter)}.")
        errors = sum(e.level == "error" for e in events)
        text = f"{len(events)} event{'s' if len(events) != 1 else ''}" + (f", [red]{errors} error{'s' if errors != 1 else ''}[/]" if errors else "")
        self._set("#events-count", text + (f" (newest {LIMIT})" if len(events) >= LIMIT else ""))
        self._show_message(table.cursor_row if table.row_count else None)

    def _set(self, selector: str, text: str) -> None:
        """Update a Static only when its text changes."""
        if self.texts.get(selector) != text:
            self.texts[selector] = text
            self.query_one(selector, Static).update(text)

    def _options(self, streams: list[str]) -> None:
        """Refresh the filter's choices when the streams changed, keeping what is chosen."""
        if self.stream_filter != ALL and self.stream_filter not in streams:
            streams = sorted([*streams, self.stream_filter])
        if streams == self.streams:
            return
        self.streams = streams
        select = self.query_one("#events-filter", Select)
        with select.prevent(Select.Changed):
            select.set_options([("All streams", ALL)] + [(name, name) for name in streams])
            select.value = self.stream_filter

    @on(DataTable.RowHighlighted, "#events-table")
    def highlighted(self, event: DataTable.RowHighlighted) -> None:
        self._show_message(event.cursor_row)

    def _show_message(self, index: int | None) -> None:
        box = self.query_one("#events-message", Static)
        if index is None or not 0 <= index < len(self.events):
            box.display = False
            return
        e = self.events[index]
        box.display = True
        self._set("#events-message", f"[b]{escape(e.kind)}[/b] {escape(e.stream or '(engine)')} at {clock(e.at)}: {escape(e.message)}")
