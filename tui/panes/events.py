"""The Events pane: errors and notable events of the engine and its streams, newest first, live.

It shows what the engine recorded and the dead-letter bursts derived from the recorded
batches (`appliance.views.events`), filtered by stream.
"""

from __future__ import annotations

from dataclasses import dataclass

from rich.markup import escape
from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.message import Message
from textual.widgets import DataTable, Label, Select, Static
from textual.worker import Worker, get_current_worker

from appliance.core.vocabulary import EventLevel
from appliance.views.events import EventsFeed, EventsFollower, EventView
from tui.format import clock, one_line
from tui.screens.sections import REFRESH
from tui.styles import LEVEL_STYLE, level_text, styled
from tui.widgets.rows import put_row, trim_rows
from tui.widgets.texts import Texts
from tui.workers import Refresh, ReportsFailures

ALL = "*"  # the filter's "All streams": no stream is named so (a-z, 0-9, _ and - only)
LIMIT = 200
COLUMNS = [("time", "Time"), ("level", "Level"), ("stream", "Stream"), ("kind", "Event"), ("message", "Message")]


@dataclass
class EventsLoaded(Message):
    stream: str  # the filter this answers: a stream name or ALL
    feed: EventsFeed | None  # None with `error`
    error: str = ""


class EventsPane(ReportsFailures, Vertical):
    BINDINGS = [Binding("f", "filter", "Filter by stream")]

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.stream_filter = ALL
        self.streams: list[str] = []
        self.keys: list[str] = []  # event keys, in row order
        self.events: list[EventView] = []
        self.texts = Texts(self)
        self.follower: EventsFollower | None = None  # the chosen filter's: each second reads what changed
        self.shown_version = 0  # the version of the feed on screen (0: none)

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
        self.reading = Refresh(self.read)
        self.reading.now()
        self.set_interval(1.0, self.reading.due, name=REFRESH)

    def read(self) -> Worker:
        if self.follower is None:
            self.follower = EventsFollower(self.app.settings, None if self.stream_filter == ALL else self.stream_filter,
                                           LIMIT)
            self.shown_version = 0
        return self.load(self.stream_filter, self.follower)

    @work(thread=True, exclusive=True, group="events-load", exit_on_error=False)
    def load(self, stream: str, follower: EventsFollower) -> None:
        try:
            feed = follower.read()
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
            self.follower = None
            self.reading.now()

    def action_filter(self) -> None:
        select = self.query_one("#events-filter", Select)
        select.focus()
        select.expanded = True

    @on(EventsLoaded)
    def show(self, message: EventsLoaded) -> None:
        if message.stream != self.stream_filter:
            return  # answers a filter no longer chosen
        if message.feed is None:
            self.texts.set("#events-count", f"[red]cannot read events: {escape(message.error)}[/]")
            self.shown_version = 0  # the count line no longer shows the feed
            return
        if message.feed.version == self.shown_version:
            return  # nothing changed since the feed on screen
        self.shown_version = message.feed.version
        self._options(message.feed.streams)
        events = message.feed.events
        table = self.query_one("#events-table", DataTable)
        # Keep the cursor on the event it was on, unless it was on the newest (then follow new ones).
        followed = self.keys[table.cursor_row] if table.row_count and table.cursor_row > 0 else None
        for i, e in enumerate(events):
            loud = e.level in (EventLevel.ERROR, EventLevel.WARNING)
            put_row(table, str(i), {
                "time": clock(e.at),
                "level": level_text(e.level),
                "stream": escape(e.stream or "(engine)"),
                "kind": styled(str(e.kind), LEVEL_STYLE.get(e.level, "") if loud else ""),
                "message": escape(one_line(e.message, 160)),
            })
        trim_rows(table, len(events))
        self.keys = [e.key for e in events]
        self.events = events
        if followed is not None and followed in self.keys and self.keys.index(followed) != table.cursor_row:
            table.move_cursor(row=self.keys.index(followed), animate=False)
        empty = self.query_one("#events-empty", Static)
        empty.display = not events
        self.texts.set("#events-empty", "No events yet." if self.stream_filter == ALL else f"No events for stream {escape(self.stream_filter)}.")
        errors = sum(e.level == EventLevel.ERROR for e in events)
        text = f"{len(events)} event{'s' if len(events) != 1 else ''}" + (f", [red]{errors} error{'s' if errors != 1 else ''}[/]" if errors else "")
        self.texts.set("#events-count", text + (f" (newest {LIMIT})" if len(events) >= LIMIT else ""))
        self._show_message(table.cursor_row if table.row_count else None)

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
        self.texts.set("#events-message", f"[b]{escape(e.kind)}[/b] {escape(e.stream or '(engine)')} at {clock(e.at)}: {escape(e.message)}")
