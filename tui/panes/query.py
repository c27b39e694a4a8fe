"""The Query pane: a SQL editor over DuckDB, results, history and export.

Tables are named `namespace.table` (`appliance.query.QuerySession`). A statement runs in a
thread worker on the pane's own session; Escape or Cancel interrupts it from the UI
thread. Workers never touch widgets: they post the messages below and the handlers
update the screen. History lives in `$FLOE_HOME/query_history.jsonl`, exports under
`$FLOE_HOME/exports/`.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import pyarrow as pa
from rich.text import Text
from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.message import Message
from textual.timer import Timer
from textual.widgets import Button, DataTable, Input, Static, TextArea

from appliance.core import hints
from appliance.core.errors import QueryCancelled
from appliance.query.formatting import cell_text
from appliance.query.history import HISTORY_LIMIT, append_history, load_history
from appliance.query.session import QuerySession
from appliance.views.tables import table_names
from tui.format import first_line, seconds
from tui.panes.query_export import ExportBar
from tui.workers import ReportsFailures

MAX_SHOWN = 1000  # rows put in the grid; the whole result stays available for export
CELL_WIDTH = 120  # characters of one cell shown in the grid
HINT = "Ctrl+J / F5 runs (the selection, if any) · Esc cancels, or leaves the editor · Ctrl+↑/↓ history"


@dataclass
class QueryFinished(Message):
    sql: str
    table: pa.Table  # the whole result
    rows: list[list[Text]]  # the first MAX_SHOWN rows, ready for the grid
    elapsed: float


@dataclass
class QueryFailed(Message):
    sql: str
    error: str  # DuckDB's message, one line
    elapsed: float
    cancelled: bool = False


@dataclass
class HistoryLoaded(Message):
    entries: list[str]
    error: str = ""


def grid_rows(table: pa.Table, limit: int = MAX_SHOWN) -> list[list[Text]]:
    """The first `limit` rows as grid cells: text as is (never markup), numbers to the right."""
    shown = table.slice(0, limit)
    columns = []
    for field, column in zip(shown.schema, shown.columns):
        t = field.type
        right = pa.types.is_integer(t) or pa.types.is_floating(t) or pa.types.is_decimal(t)
        cells = []
        for value in column.to_pylist():
            if value is None:
                cells.append(Text("NULL", style="dim italic", justify="right" if right else "left"))
                continue
            text = cell_text(value).replace("\n", "⏎")
            if len(text) > CELL_WIDTH:
                text = text[: CELL_WIDTH - 1] + "…"
            cells.append(Text(text, justify="right" if right else "left", no_wrap=True))
        columns.append(cells)
    return [list(row) for row in zip(*columns)]


def column_widths(names: list[str], rows: list[list[Text]]) -> list[int]:
    """Each column's width in cells: its widest cell or its name."""
    return [max([Text(name).cell_len, *(row[i].cell_len for row in rows)]) for i, name in enumerate(names)]


class QueryPane(ReportsFailures, Vertical):
    BINDINGS = [
        Binding("ctrl+enter,ctrl+j,f5", "run_query", "Run"),
        # A priority binding so that it wins over the editor's own Escape (leave the editor),
        # but only while a statement runs: check_action hides it otherwise.
        Binding("escape", "cancel_query", "Cancel", priority=True),
        # Otherwise Escape leaves the editor for the results, so the section keys work again.
        # Explicit rather than the editor's own focus_next, which lands wherever the chain says.
        Binding("escape", "leave_editor", "Leave editor", show=False, priority=True),
        Binding("ctrl+up", "history(-1)", "Older query"),
        Binding("ctrl+down", "history(1)", "Newer query"),
        Binding("ctrl+s", "export", "Export"),
    ]

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.session: QuerySession | None = None
        self.running = False
        self.history: list[str] = []  # oldest first, newest last
        self._history_pos: int | None = None  # where Ctrl+↑/↓ is; None: at the draft
        self._draft = ""
        self._started = 0.0
        self._cancelling = False
        self._ticker: Timer | None = None
        self._nagger: Timer | None = None  # re-sends the interrupt until the worker stops

    def compose(self) -> ComposeResult:
        editor = TextArea.code_editor("", language="sql", id="query-editor",
                                      placeholder=hints.TABLE_SAMPLE_SYNTAX)
        yield editor
        with Horizontal(id="query-bar"):
            yield Button("▶ Run", id="query-run", variant="primary", compact=True)
            yield Button("■ Cancel", id="query-cancel", variant="error", compact=True, disabled=True)
            yield Static(HINT, id="query-status")
        yield DataTable(id="query-results", zebra_stripes=True)
        yield ExportBar(id="query-export")

    def on_mount(self) -> None:
        for button in self.query("#query-bar Button"):
            button.can_focus = False  # a click runs or cancels; the keys stay in the editor
        self.session = QuerySession(self.app.settings)
        self._ticker = self.set_interval(0.25, self._tick, pause=True)
        self._nagger = self.set_interval(0.2, self._interrupt, pause=True)
        self.watch(self.app, "theme", self._theme_changed)
        self.load_history()

    def on_unmount(self) -> None:
        if self.session is not None:
            self.session.close()  # interrupts a running statement; the worker then closes it

    def on_show(self) -> None:
        self.load_placeholder()
        focused = self.app.focused
        if focused is None or self not in focused.ancestors_with_self:
            self.query_one("#query-editor", TextArea).focus()

    def _theme_changed(self, _theme: str) -> None:
        dark = self.app.current_theme.dark if self.app.current_theme else True
        self.query_one("#query-editor", TextArea).theme = "monokai" if dark else "github_light"

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if action == "cancel_query":
            return self.running  # False: Escape goes on to the next binding or the focused widget
        if action == "leave_editor":
            return not self.running and self.app.focused is self.query_one("#query-editor", TextArea)
        return True

    def action_leave_editor(self) -> None:
        self.query_one("#query-results", DataTable).focus()

    # Running and cancelling.

    def action_run_query(self) -> None:
        editor = self.query_one("#query-editor", TextArea)
        sql = (editor.selected_text or editor.text).strip()
        if not sql:
            self.notify("Type a SQL statement first", severity="warning")
            return
        if self.running:
            self.notify("A query is running; Esc cancels it", severity="warning")
            return
        self.running = True
        self._cancelling = False
        self._started = time.monotonic()
        self._remember(sql)
        self._set_status(Text("Running…  Esc cancels"), "-running")
        self._buttons()
        self._ticker.resume()
        self.execute(sql)

    @work(thread=True, exclusive=True, group="query-run", exit_on_error=False)
    def execute(self, sql: str) -> None:
        settings = self.app.settings
        try:
            append_history(settings, sql)
        except OSError:
            pass  # history is a convenience; the query still runs
        started = time.perf_counter()
        try:
            table = self.session.run(sql)
        except QueryCancelled:
            self.post_message(QueryFailed(sql, "cancelled", time.perf_counter() - started, cancelled=True))
            return
        except Exception as exc:
            self.post_message(QueryFailed(sql, first_line(exc), time.perf_counter() - started))
            return
        elapsed = time.perf_counter() - started
        try:
            rows = grid_rows(table)
        except Exception as exc:
            self.post_message(QueryFailed(sql, f"cannot show the result: {first_line(exc)}", elapsed))
            return
        self.post_message(QueryFinished(sql, table, rows, elapsed))

    def action_cancel_query(self) -> None:
        if not self.running:
            return
        self._cancelling = True
        self._set_status(Text("Cancelling…"), "-running")
        self._interrupt()
        self._nagger.resume()  # an interrupt sent just before DuckDB starts the statement is lost

    def _interrupt(self) -> None:
        if self.running and self.session is not None:
            self.session.interrupt()

    def _tick(self) -> None:
        if self.running and not self._cancelling:
            self._set_status(Text(f"Running… {seconds(time.monotonic() - self._started)}  Esc cancels"), "-running")

    def _finished(self) -> None:
        self.running = False
        self._ticker.pause()
        self._nagger.pause()
        self._buttons()

    def _buttons(self) -> None:
        self.query_one("#query-run", Button).disabled = self.running
        self.query_one("#query-cancel", Button).disabled = not self.running
        self.refresh_bindings()

    def _set_status(self, text: Text, kind: str = "") -> None:
        status = self.query_one("#query-status", Static)
        status.update(text)
        status.set_classes(kind)

    @on(QueryFinished)
    def show_result(self, message: QueryFinished) -> None:
        self._finished()
        table = message.table
        grid = self.query_one("#query-results", DataTable)
        grid.clear(columns=True)
        # Each column as wide as its widest cell from the start: a column of auto width is measured only when
        # the grid is next idle, and a frame drawn before that showed every cell cut to its header's width
        # (a count of 400 under the header "n" read "4").
        for name, width in zip(table.column_names, column_widths(table.column_names, message.rows)):
            grid.add_column(Text(name, style="bold"), width=width)
        grid.add_rows(message.rows)
        n = table.num_rows
        if table.num_columns == 0:
            text = f"Done in {seconds(message.elapsed)} (no result set)"
        else:
            text = f"{n:,} row{'s' if n != 1 else ''} in {seconds(message.elapsed)}"
            if n > len(message.rows):
                text += f" — showing the first {len(message.rows):,}; export saves all of them"
        self._set_status(Text(text), "-done")
        self.query_one(ExportBar).offer(table)

    @on(QueryFailed)
    def show_failure(self, message: QueryFailed) -> None:
        self._finished()
        if message.cancelled:
            self._set_status(Text(f"Query cancelled after {seconds(message.elapsed)}"), "-error")
            self.notify("Query cancelled", severity="warning")
            return
        self._set_status(Text(message.error), "-error")
        self.notify(message.error, title="Query failed", severity="error", markup=False, timeout=8)

    @on(Button.Pressed, "#query-run")
    def run_pressed(self) -> None:
        self.action_run_query()

    @on(Button.Pressed, "#query-cancel")
    def cancel_pressed(self) -> None:
        self.action_cancel_query()

    # History.

    @work(thread=True, exclusive=True, group="query-history", exit_on_error=False)
    def load_history(self) -> None:
        try:
            entries = load_history(self.app.settings)
        except OSError as exc:
            self.post_message(HistoryLoaded([], error=first_line(exc)))
            return
        self.post_message(HistoryLoaded(entries))

    @on(HistoryLoaded)
    def history_loaded(self, message: HistoryLoaded) -> None:
        if message.error:
            self.notify(f"Cannot read the query history: {message.error}", severity="warning", markup=False)
        ran_here = self.history  # statements run before the file was read
        self.history = []
        for sql in message.entries + ran_here:
            self._remember(sql)

    def _remember(self, sql: str) -> None:
        if not self.history or self.history[-1] != sql:
            self.history.append(sql)
            del self.history[:-HISTORY_LIMIT]
        self._history_pos = None

    def action_history(self, step: int) -> None:
        if not self.history:
            self.notify("No query history yet")
            return
        editor = self.query_one("#query-editor", TextArea)
        if self._history_pos is None:
            if step > 0:
                return
            self._draft = editor.text
            pos = len(self.history) + step
        else:
            pos = self._history_pos + step
        if pos >= len(self.history):
            self._history_pos = None
            self._load_editor(self._draft)
            return
        self._history_pos = max(0, pos)
        self._load_editor(self.history[self._history_pos])

    def _load_editor(self, text: str) -> None:
        editor = self.query_one("#query-editor", TextArea)
        editor.load_text(text)
        editor.move_cursor(editor.document.end)
        editor.focus()

    def action_export(self) -> None:
        """The last result exported in one step: the format asked, the path suggested (or the one typed)."""
        from tui.screens.export_format import ExportFormatScreen

        bar = self.query_one(ExportBar)
        if bar.result is None:
            self.notify("Run a query first: export saves the last result", severity="warning")
            return
        bar.suggest_path()
        path = self.query_one("#export-path", Input).value

        def chosen(fmt: str | None) -> None:
            if fmt:
                bar.export(fmt)

        self.app.push_screen(ExportFormatScreen(bar.result.num_rows, path), chosen)

    def set_sql(self, text: str) -> None:
        """`text` in the editor, ready to run (the command palette's "open a table in Query")."""
        self._history_pos = None
        self._load_editor(text)

    @work(thread=True, exclusive=True, group="query-placeholder", exit_on_error=False)
    def load_placeholder(self) -> None:
        # A table that exists, a stream's first: the placeholder is an example the user can run.
        names = table_names(self.app.settings)
        ours = [n for n in names if not n.startswith("floe.")] or names
        if ours:
            self.app.call_from_thread(self._set_placeholder, hints.TABLE_SAMPLE.format(table=ours[0]))

    def _set_placeholder(self, text: str) -> None:
        self.query_one("#query-editor", TextArea).placeholder = text
