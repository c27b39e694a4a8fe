"""One stream in detail: header, rate and lag charts, recent batches and dead letters, live.

A worker reads the state database once a second; the dead-letter table is read through
DuckDB only when the stream's dead-letter total changes. Widgets are updated in place:
a cell, a line or a chart changes only when its value did.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from rich.markup import escape
from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.message import Message
from textual.widgets import Button, DataTable, Header, Sparkline, Static
from textual.worker import get_current_worker

from appliance.control.streams import set_paused
from appliance.core.vocabulary import StreamPhase
from appliance.state.records import BatchRecord
from appliance.views.dead_letters import DeadLetter, dead_letters
from appliance.views.streams import StreamDetail, StreamView, stream_detail, target_committed
from tui.format import age, clock, count, number, one_line
from tui.messages import ActionDone
from tui.screens.audit_report import AuditScreen
from tui.screens.detail_replay import ReplaysDeadLetters
from tui.styles import phase_text
from tui.widgets.footer import Footer
from tui.widgets.rows import put_row, trim_rows
from tui.widgets.texts import Texts
from tui.widgets.topic_tables import TopicTablesList
from tui.workers import Refresh, ReportsFailures

BATCH_COLUMNS = [
    ("time", "Committed"), ("messages", "Messages"), ("rows", "Rows"), ("dead", "Dead letters"),
    ("duration", "Duration"), ("rate", "Msg/s"), ("lag", "Lag after"), ("snapshot", "Snapshot id"),
    ("dead_snapshot", "Dead-letter snapshot"),
]
DEAD_COLUMNS = [
    ("time", "Ingested"), ("where", "Partition/offset"), ("stage", "Stage"), ("error", "Error"), ("value", "Raw value"),
]
DEAD_LETTER_LIMIT = 20
TABLES_SHOWN = 8  # a pattern stream's tables named in the title; the rest counted
DLQ_RETRY_SECONDS = 10.0


@dataclass
class DetailLoaded(Message):
    stream: str
    detail: StreamDetail | None  # None with `error`
    error: str = ""


@dataclass
class DeadLettersLoaded(Message):
    stream: str
    total: int | None  # the dead-letter total this read answers
    rows: list[DeadLetter]  # newest first
    error: str = ""


def source_text(source) -> str:
    """Format, registry, subject and the writer schema versions met; and the evolution setting."""
    if source is None:
        return ""
    parts = [f"format [b]{escape(source.format)}[/b]", f"mode [b]{escape(source.mode)}[/b]"]
    if source.registry:
        parts.append(f"registry {escape(source.registry)}")
    if source.subject:
        parts.append(f"subject [b]{escape(source.subject)}[/b]")
    if source.schemas:
        seen = ", ".join(f"v{s.version}" if s.version is not None else f"id {s.schema}" for s in source.schemas)
        parts.append(f"versions seen {escape(seen)}")
    if source.kafka_columns:
        parts.append(f"kafka columns [b]{escape(', '.join(source.kafka_columns))}[/b]")
    parts.append(f"schema evolution [b]{escape(source.schema_evolution)}[/b]")
    return "   ".join(parts)


def title_text(v: StreamView, bootstrap: str) -> str:
    """Topic and tables; a pattern stream's: its pattern and every table its topics landed in; a routed stream's:
    its topic, field and the tables its values named."""
    if v.tables:
        shown = ", ".join(v.tables[:TABLES_SHOWN]) + (f" and {len(v.tables) - TABLES_SHOWN} more"
                                                      if len(v.tables) > TABLES_SHOWN else "")
        if v.route_by:
            return (f"[b]{escape(v.name)}[/b]  topic [b]{escape(v.topic)}[/b] routed by [b]{escape(v.route_by)}[/b] → "
                    f"{len(v.tables)} tables: [b]{escape(shown)}[/b]  [dim](dead letters → "
                    f"{escape(v.dead_letter_table)}; broker {escape(bootstrap)})[/]")
        return (f"[b]{escape(v.name)}[/b]  topics matching [b]{escape(v.topic)}[/b] → {len(v.tables)} tables: "
                f"[b]{escape(shown)}[/b]  [dim](each with its dead-letter table; broker {escape(bootstrap)})[/]")
    return (f"[b]{escape(v.name)}[/b]  topic [b]{escape(v.topic)}[/b] → table [b]{escape(v.table)}[/b]"
            f"  [dim](dead letters → {escape(v.dead_letter_table)}; broker {escape(bootstrap)})[/]")


class StreamDetailScreen(ReplaysDeadLetters, ReportsFailures):
    BINDINGS = [
        Binding("escape", "back", "Back"),
        Binding("p", "pause", "Pause"),
        Binding("r", "resume", "Resume"),
        Binding("a", "audit", "Audit"),
        Binding("d", "replay", "Replay dead letters"),
    ]
    AUTO_FOCUS = "#batches-table"

    def __init__(self, name: str) -> None:
        super().__init__()
        self.stream_name = name
        self.paused: bool | None = None
        # The dead-letter table is read through DuckDB once per change of the stream's
        # dead-letter total, one read at a time: `dead_seen` is the newest total, `dead_read`
        # the one the last (or running) read answers.
        self.dead_seen: int | None = None
        self.dead_read: int | None = None
        self.dead_reading = False
        self.dead_retry_at = 0.0
        self.dead_rows: list[DeadLetter] = []
        self.dead_letter_table = ""
        self.texts = Texts(self)

    def compose(self) -> ComposeResult:
        yield Header()
        with Horizontal(id="detail-head"):
            yield Static(f"[b]{escape(self.stream_name)}[/b]  loading…", id="detail-title")
            with Horizontal(id="detail-buttons"):
                yield Button("Pause", id="pause", variant="warning")
                yield Button("Resume", id="resume", variant="success")
                yield Button("Audit", id="audit")
                yield Button("Back", id="back")
        yield Static("", id="detail-stats")
        yield Static("", id="detail-source")
        error = Static("", id="detail-error")
        error.display = False
        yield error
        yield TopicTablesList(id="topic-tables")
        with Horizontal(id="detail-charts"):
            with Vertical(classes="chart"):
                yield Static("Messages/s", id="rate-label")
                yield Sparkline([], id="rate-chart")
            with Vertical(classes="chart"):
                yield Static("Lag", id="lag-label")
                yield Sparkline([], id="lag-chart")
        yield Static("Recent batches", classes="section-title", id="batches-title")
        batches = DataTable(id="batches-table", cursor_type="row", zebra_stripes=True)
        for key, label in BATCH_COLUMNS:
            batches.add_column(label, key=key)
        yield batches
        yield Static("Dead letters: loading…", classes="section-title", id="dead-letters-title")
        dead = DataTable(id="dead-letters-table", cursor_type="row", zebra_stripes=True)
        for key, label in DEAD_COLUMNS:
            dead.add_column(label, key=key)
        yield dead
        yield Static("", id="dead-letter-full")
        yield Footer()

    def on_mount(self) -> None:
        self.sub_title = f"stream {self.stream_name}"
        self.reading = Refresh(self.load)
        self.reading.now()
        self.set_interval(1.0, self.reading.due)

    # ---- reading, in workers ----

    @work(thread=True, exclusive=True, group="detail-load", exit_on_error=False)
    def load(self) -> None:
        try:
            detail = stream_detail(self.app.settings, self.stream_name)
        except Exception as exc:
            self.post_message(DetailLoaded(self.stream_name, None, str(exc)))
            return
        if not get_current_worker().is_cancelled:
            self.post_message(DetailLoaded(self.stream_name, detail))

    @work(thread=True, exclusive=True, group="detail-dead-letters", exit_on_error=False)
    def load_dead_letters(self, total: int | None) -> None:
        try:
            rows = dead_letters(self.app.settings, self.stream_name, limit=DEAD_LETTER_LIMIT)
        except Exception as exc:
            self.post_message(DeadLettersLoaded(self.stream_name, total, [], str(exc)))
            return
        if not get_current_worker().is_cancelled:
            self.post_message(DeadLettersLoaded(self.stream_name, total, rows))

    # ---- showing, on the UI thread ----

    @on(DetailLoaded)
    def show(self, message: DetailLoaded) -> None:
        if message.detail is None:
            self.texts.set("#detail-title", f"[b]{escape(self.stream_name)}[/b]  [red]{escape(message.error)}[/]")
            return
        d = message.detail
        v = d.view
        self.paused = v.phase == StreamPhase.PAUSED
        self.dead_letter_table = v.dead_letter_table
        self.texts.set("#detail-title", title_text(v, d.kafka_bootstrap))
        state = phase_text(v.phase)
        self.texts.set(
            "#detail-stats",
            f"state {state}   lag [b]{number(v.lag)}[/b]   msg/s [b]{count(v.messages_per_s)}[/b]"
            f"   rows [b]{number(v.rows_total)}[/b]   dead letters [b]{number(v.dead_letters_total)}[/b]"
            f"   last minute: {number(v.rows_last_minute)} rows, {number(v.dead_letters_last_minute)} dead letters"
            f"   last commit {age(v.last_commit_age)}",
        )
        self.texts.set("#detail-source", source_text(d.source))
        self.query_one(TopicTablesList).show(d.topics)
        error = self.query_one("#detail-error", Static)
        error.display = bool(v.last_error)
        self.texts.set("#detail-error", f"last error: {escape(v.last_error)}")
        pause, resume = self.query_one("#pause", Button), self.query_one("#resume", Button)
        pause.disabled, resume.disabled = self.paused, not self.paused
        self._charts(d)
        self._batches(d.batches)
        self.dead_seen = v.dead_letters_total
        self._read_dead_letters()

    def _read_dead_letters(self) -> None:
        if self.dead_reading:
            return
        due = self.dead_retry_at and time.monotonic() >= self.dead_retry_at
        if due or self.dead_seen != self.dead_read:
            self.dead_reading = True
            self.dead_retry_at = 0.0
            self.dead_read = self.dead_seen
            self.load_dead_letters(self.dead_seen)

    def _charts(self, d: StreamDetail) -> None:
        minutes = len(d.rate_series) * d.series_width / 60
        rate_now = d.view.messages_per_s
        self.texts.set("#rate-label", f"[b]Messages/s[/b], last {minutes:.0f} min: now {count(rate_now)},"
                                 f" peak {count(max(d.rate_series, default=0))}")
        self.texts.set("#lag-label", f"[b]Lag[/b] (messages behind), last {minutes:.0f} min: now {number(d.view.lag)},"
                                f" peak {number(int(max(d.lag_series, default=0)))}")
        for selector, data in (("#rate-chart", d.rate_series), ("#lag-chart", d.lag_series)):
            chart = self.query_one(selector, Sparkline)
            if list(chart.data or []) != data:
                chart.data = data

    def _batches(self, batches: list[BatchRecord]) -> None:
        table = self.query_one("#batches-table", DataTable)
        for i, b in enumerate(batches):
            put_row(table, str(i), {
                "time": clock(b.committed_at),
                "messages": number(b.messages),
                "rows": number(b.rows),
                "dead": f"[yellow]{number(b.dead_letter_rows)}[/]" if b.dead_letter_rows else "0",
                "duration": f"{b.duration_ms / 1000:.2f}s",
                "rate": count(b.messages_per_s),
                "lag": number(b.lag),
                "snapshot": target_committed(b.route_tables, b.target_snapshot_id),
                "dead_snapshot": str(b.dead_letter_snapshot_id or "–"),
            })
        trim_rows(table, len(batches))
        self.texts.set("#batches-title", f"Recent batches ({len(batches)} newest)" if batches
                  else "Recent batches: none yet")

    @on(DeadLettersLoaded)
    def show_dead_letters(self, message: DeadLettersLoaded) -> None:
        self.dead_reading = False
        if message.error:
            self.texts.set("#dead-letters-title", f"Dead letters: [red]cannot read them: {escape(message.error)}[/]")
            self.dead_retry_at = time.monotonic() + DLQ_RETRY_SECONDS
            return
        self._read_dead_letters()  # the total moved on while this read ran: read again
        self.dead_rows = message.rows
        table = self.query_one("#dead-letters-table", DataTable)
        for i, d in enumerate(message.rows):
            put_row(table, str(i), {
                "time": clock(d.ingested_at),
                "where": f"{d.partition}/{d.offset}",
                "stage": f"[yellow]{escape(d.error_stage)}[/]",
                "error": escape(one_line(d.error_message, 70)),
                "value": escape(self._value(d, 60)),
            })
        trim_rows(table, len(message.rows))
        total = message.total or 0
        if message.rows:
            self.texts.set("#dead-letters-title", f"Dead letters: newest {len(message.rows)} of {number(max(total, len(message.rows)))}"
                      f"  [dim](table {escape(self.dead_letter_table)})[/]")
        else:
            self.texts.set("#dead-letters-title", "Dead letters: none")
        self._show_full(table.cursor_row if table.row_count else None)

    @staticmethod
    def _value(d: DeadLetter, width: int) -> str:
        if d.value_bytes is None:
            return "(null)"
        if d.value_bytes == 0:
            return "(empty)"
        text = one_line(d.value_preview, width)
        return text + (f" … ({d.value_bytes:,} bytes)" if d.truncated else "")

    @on(DataTable.RowHighlighted, "#dead-letters-table")
    def highlighted(self, event: DataTable.RowHighlighted) -> None:
        self._show_full(event.cursor_row)

    def _show_full(self, index: int | None) -> None:
        if index is None or not 0 <= index < len(self.dead_rows):
            self.texts.set("#dead-letter-full", "")
            return
        d = self.dead_rows[index]
        self.texts.set(
            "#dead-letter-full",
            f"[b]{escape(d.error_stage)}[/b] at partition {d.partition} offset {d.offset}: {escape(d.error_message)}\n"
            f"value: {escape(self._value(d, 400))}",
        )

    # ---- actions ----

    def action_back(self) -> None:
        self.app.pop_screen()

    def action_pause(self) -> None:
        if self.paused is not True:
            self.set_paused(True)

    def action_resume(self) -> None:
        if self.paused is not False:
            self.set_paused(False)

    def action_audit(self) -> None:
        """Exactly-once, checked on the live tables (`floe audit`): reads only, so safe while ingesting."""
        self.app.push_screen(AuditScreen(self.stream_name))

    def replay_topic(self) -> str | None:
        """The topic picked in a pattern stream's list of tables: `d` replays its dead letters alone."""
        return self.query_one(TopicTablesList).picked

    @on(Button.Pressed)
    def pressed(self, event: Button.Pressed) -> None:
        event.stop()
        if event.button.id == "audit":
            self.action_audit()
        elif event.button.id == "pause":
            self.set_paused(True)
        elif event.button.id == "resume":
            self.set_paused(False)
        elif event.button.id == "back":
            self.action_back()

    @work(thread=True, group="detail-action", exit_on_error=False)
    def set_paused(self, paused: bool) -> None:
        try:
            set_paused(self.app.settings, self.stream_name, paused)
            self.post_message(ActionDone(f"{'Paused' if paused else 'Resumed'} {self.stream_name}"))
        except Exception as exc:
            self.post_message(ActionDone(str(exc), error=True))
        self.app.call_from_thread(self.reading.now)
