"""The Streams pane: every stream's state, rates, totals, lag and errors, live, for hundreds of streams.

A worker reads every stream once a second (`streams_overview`: a few queries, whatever their number); the
pane keeps what it read, and picks and orders the rows by `select_streams`, the rule `floe stream list
--name/--sort` follows, when it arrives and as a filter is typed. Rows are updated in place, cell by cell,
so the cursor and the scroll stay where they were. Above them, one line of totals and problems.
"""

from __future__ import annotations

from dataclasses import dataclass

from rich.markup import escape
from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.message import Message
from textual.widgets import DataTable, Input, Static

from appliance.control.streams import delete_stream, set_paused
from appliance.views.streams import SORTS, StreamTotals, StreamView, select_streams, stream_totals, streams_overview
from tui.format import age, count, plural, sparkline
from tui.messages import ActionDone
from tui.screens.confirm import ConfirmScreen
from tui.screens.sections import REFRESH
from tui.styles import PHASE_STYLE, phase_text, styled
from tui.widgets.name_filter import NameFilter
from tui.widgets.rows import put_ordered_rows, selected_key
from tui.widgets.texts import Texts
from tui.workers import Refresh, ReportsFailures

COLUMNS = [
    ("stream", "Stream"), ("state", "State"), ("rate", "Msg/s"), ("rows_1m", "Rows 1m"),
    ("dlq_1m", "DLQ 1m"), ("rows", "Rows"), ("dlq", "DLQ"), ("lag", "Lag"),
    ("commit", "Last commit"), ("spark", "Throughput (2 min)"), ("error", "Last error"),
]

SORT_CYCLE = ("name", "rate", "lag", "errors")  # `s` goes round these orders of `floe stream list --sort`
assert set(SORT_CYCLE) <= set(SORTS)


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


def summary_text(totals: StreamTotals) -> str:
    """The line above the rows: how many streams in each state, their msg/s and lag, those with errors."""
    if not totals.streams:
        return ""
    states = " · ".join(f"{n:,} {styled(state, PHASE_STYLE.get(state, ''))}" for state, n in totals.states.items())
    errors = plural(totals.with_errors, "stream") + " with errors"
    return (f"[b]{plural(totals.streams, 'stream')}[/b]: {states}   [b]{count(totals.messages_per_s)}[/b] msg/s"
            f"   lag [b]{count(totals.lag)}[/b]   " + (f"[bold red]{errors}[/]" if totals.with_errors else errors))


class StreamsPane(ReportsFailures, Vertical):
    BINDINGS = [
        Binding("enter", "open", "Detail"),
        Binding("p", "pause", "Pause"),
        Binding("r", "resume", "Resume"),
        Binding("d", "delete", "Delete"),
        Binding("slash", "filter", "Filter"),
        Binding("s", "sort", "Sort"),
        Binding("escape", "clear_filter", "Clear filter", show=False),
    ]

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.views: list[StreamView] | None = None  # every stream, as last read; None before the first read
        self.sort = SORT_CYCLE[0]
        self.texts = Texts(self)

    def compose(self) -> ComposeResult:
        yield Static("", id="streams-summary")
        with Horizontal(id="streams-bar"):
            yield NameFilter(id="streams-filter")
            yield Static("", id="streams-order")
        yield Static("Loading streams…", id="streams-empty")
        table = DataTable(id="streams-table", cursor_type="row", zebra_stripes=True)
        for key, label in COLUMNS:
            table.add_column(label, key=key)
        yield table

    def on_mount(self) -> None:
        self.reading = Refresh(self.load)
        self.reading.now()
        self.set_interval(1.0, self.refresh_due, name=REFRESH)

    def refresh_due(self) -> None:
        """Read again while the section can be seen: not behind a stream's detail nor another section."""
        if self.screen.is_current and self.parent is not None and self.parent.display:
            self.reading.due()

    @work(thread=True, exclusive=True, group="streams-load", exit_on_error=False)
    def load(self) -> None:
        self.post_message(StreamsLoaded(streams_overview(self.app.settings)))

    @on(StreamsLoaded)
    def show(self, message: StreamsLoaded) -> None:
        if message.streams == self.views:
            return  # an unchanged second (idle streams that never committed): the rows on screen say it already
        self.views = message.streams
        self.present()

    def present(self) -> None:
        """The rows the filter picks, in the chosen order, and the lines above them; on the UI thread."""
        if self.views is None:
            return
        pattern = self.query_one(NameFilter).value.strip()
        picked = select_streams(self.views, pattern or None, sort=self.sort)
        put_ordered_rows(self.query_one(DataTable), {s.name: stream_cells(s) for s in picked}, "stream")
        empty = self.query_one("#streams-empty", Static)
        empty.display = not picked
        self.texts.set("#streams-empty", f"No stream's name matches [b]{escape(pattern)}[/b] (Esc clears the filter)."
                       if self.views else "No streams yet. Press [b]n[/b] to create one.")
        self.texts.set("#streams-summary", summary_text(stream_totals(self.views)))
        shown = f"[b]{len(picked):,}[/b] of {len(self.views):,} shown · " if pattern else ""
        self.texts.set("#streams-order", f"{shown}sorted by [b]{self.sort}[/b] ([b]s[/b]: next) · "
                       f"[b]/[/b]: filter by name" + (", [b]Esc[/b]: clear" if pattern else ""))

    def action_sort(self) -> None:
        self.sort = SORT_CYCLE[(SORT_CYCLE.index(self.sort) + 1) % len(SORT_CYCLE)]
        self.present()

    def action_filter(self) -> None:
        self.query_one(NameFilter).open()

    def action_clear_filter(self) -> None:
        name_filter = self.query_one(NameFilter)
        if name_filter.value or name_filter.has_focus:
            name_filter.close()
            self.query_one(DataTable).focus()

    @on(Input.Changed, "#streams-filter")
    def filter_changed(self) -> None:
        self.present()

    @on(Input.Submitted, "#streams-filter")
    def filter_kept(self) -> None:
        self.query_one(DataTable).focus()

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
        self.app.call_from_thread(self.reading.now)

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
        self.app.call_from_thread(self.reading.now)
