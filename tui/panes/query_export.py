"""The Query pane's export bar: the last result to CSV or Parquet, whole, in a worker."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
from textual import on, work
from textual.app import ComposeResult
from textual.containers import Horizontal
from textual.message import Message
from textual.widgets import Button, Input, Label

from appliance.query.export import (
    default_export_path,
    export_path,
    export_table,
    format_for,
)
from tui.format import first_line
from tui.workers import ReportsFailures


@dataclass
class ExportFinished(Message):
    path: str
    fmt: str
    rows: int
    error: str = ""


class ExportBar(ReportsFailures, Horizontal):
    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.result: pa.Table | None = None  # the last result
        self._default = ""  # the path suggested last; a path the user typed is kept

    def compose(self) -> ComposeResult:
        yield Label("Export last result to")
        yield Input(placeholder="$FLOE_HOME/exports/query.csv", id="export-path", compact=True)
        yield Button("CSV", id="export-csv", compact=True)
        yield Button("Parquet", id="export-parquet", compact=True)

    def offer(self, result: pa.Table) -> None:
        """A new result to export; the suggested path moves on unless the user typed one."""
        self.result = result
        self.suggest_path()

    def suggest_path(self) -> None:
        box = self.query_one("#export-path", Input)
        if box.value and box.value != self._default:
            return  # the user typed their own
        self._default = str(default_export_path(self.app.settings, dt.datetime.now().strftime("%Y%m%d-%H%M%S")))
        box.value = self._default

    def focus_path(self) -> None:
        self.query_one("#export-path", Input).focus()

    @on(Button.Pressed, "#export-csv")
    def export_csv(self) -> None:
        self.export("csv")

    @on(Button.Pressed, "#export-parquet")
    def export_parquet(self) -> None:
        self.export("parquet")

    @on(Input.Submitted, "#export-path")
    def export_submitted(self, event: Input.Submitted) -> None:
        self.export(format_for(event.value))

    def export(self, fmt: str) -> None:
        if self.result is None:
            self.notify("Run a query first: export saves the last result", severity="warning")
            return
        box = self.query_one("#export-path", Input)
        raw = box.value.strip() or self._default
        if not raw:
            self.suggest_path()
            raw = box.value
        path = export_path(self.app.settings, raw, fmt)
        if box.value == self._default:
            self._default = str(path)
        box.value = str(path)
        self.write(self.result, path, fmt)

    @work(thread=True, group="query-export", exit_on_error=False)
    def write(self, table: pa.Table, path: Path, fmt: str) -> None:
        try:
            export_table(table, path, fmt)
        except Exception as exc:
            self.post_message(ExportFinished(str(path), fmt, 0, error=first_line(exc)))
            return
        self.post_message(ExportFinished(str(path), fmt, table.num_rows))

    @on(ExportFinished)
    def finished(self, message: ExportFinished) -> None:
        if message.error:
            self.notify(f"Export to {message.path} failed: {message.error}", severity="error", markup=False,
                        timeout=8)
        else:
            self.notify(f"Exported {message.rows:,} rows as {message.fmt.upper()} to {message.path}", markup=False)
