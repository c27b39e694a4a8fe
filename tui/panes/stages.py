"""The Stages pane: every stage's state, lineage, lag, last run, rows in and out, and errors, live."""

from __future__ import annotations

from dataclasses import dataclass

from rich.markup import escape
from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.message import Message
from textual.widgets import DataTable, Static

from appliance.control.stages import delete_stage, set_stage_paused
from appliance.views.stages import StageView, stage_info, stages_overview
from tui.format import count
from tui.messages import ActionDone
from tui.screens.confirm import ConfirmScreen
from tui.screens.sections import REFRESH
from tui.styles import phase_text
from tui.widgets.rows import put_row, put_rows, selected_key
from tui.widgets.texts import Texts
from tui.workers import Refresh, ReportsFailures

COLUMNS = [
    ("stage", "Stage"), ("kind", "Kind"), ("state", "State"), ("lag", "Lag rows"), ("snapshots", "Lag snaps"),
    # Rows in and out are totals over every run (a grouping stage writes its whole table each run): the
    # rows its table holds now are a column of their own.
    ("last_run", "Last run (UTC)"), ("rows_in", "Rows in, all runs"), ("rows_out", "Rows out, all runs"),
    ("table_rows", "Table rows"), ("error", "Error"),
    ("lineage", "Lineage"),  # last: it may be long
]
KIND = {"append": "append", "group": "grouping"}


@dataclass
class StagesLoaded(Message):
    stages: list[StageView]


def stage_cells(s: StageView) -> dict[str, str]:
    return {
        "stage": s.name,
        "kind": KIND.get(s.kind, s.kind),
        "state": phase_text(s.phase),
        "lag": count(s.lag_rows),
        "snapshots": count(s.lag_snapshots),
        "last_run": (s.last_run_at or "never")[:19].replace("T", " "),
        "rows_in": count(s.rows_in_total),
        "rows_out": count(s.rows_out_total),
        "table_rows": count(s.table_rows),
        "error": escape(s.last_error[:100]),
        "lineage": escape(" → ".join(s.lineage)),
    }


class StagesPane(ReportsFailures, Vertical):
    BINDINGS = [
        Binding("n", "new", "New stage"),
        Binding("enter,e", "edit", "Edit"),
        Binding("p", "pause", "Pause"),
        Binding("r", "resume", "Resume"),
        Binding("d", "delete", "Delete"),
    ]

    def compose(self) -> ComposeResult:
        yield Static("Loading stages…", id="stages-empty")
        table = DataTable(id="stages-table", cursor_type="row", zebra_stripes=True)
        for key, label in COLUMNS:
            table.add_column(label, key=key)
        yield table

    def on_mount(self) -> None:
        self.texts = Texts(self)  # a Static's update lays the whole screen out again: only on a change
        self.reading = Refresh(self.load)
        self.reading.now()
        self.set_interval(1.0, self.reading.due, name=REFRESH)

    @work(thread=True, exclusive=True, group="stages-load", exit_on_error=False)
    def load(self) -> None:
        self.post_message(StagesLoaded(stages_overview(self.app.settings)))

    @on(StagesLoaded)
    def show(self, message: StagesLoaded) -> None:
        table = self.query_one(DataTable)
        empty = self.query_one("#stages-empty", Static)
        empty.display = not message.stages
        self.texts.set("#stages-empty",
                       "No stages yet. Press [b]n[/b] to create one: Spark SQL over the new rows of a table.")
        put_rows(table, {s.name: stage_cells(s) for s in message.stages})

    def selected(self) -> str | None:
        return selected_key(self.query_one(DataTable))

    def action_new(self) -> None:
        from tui.screens.stage_editor import StageEditorScreen

        self.app.push_screen(StageEditorScreen(on_saved=self.show_saved), self._saved)

    def action_edit(self) -> None:
        if name := self.selected():
            self.open_editor(name)

    @on(DataTable.RowSelected)
    def row_selected(self, event: DataTable.RowSelected) -> None:
        self.action_edit()

    @work(thread=True, group="stages-action", exit_on_error=False)
    def open_editor(self, name: str) -> None:
        info = stage_info(self.app.settings, name)
        self.app.call_from_thread(self._push_editor, info)

    def _push_editor(self, info) -> None:
        from tui.screens.stage_editor import StageEditorScreen

        self.app.push_screen(StageEditorScreen(info, on_saved=self.show_saved), self._saved)

    def show_saved(self, stage: StageView) -> None:
        """The stage just saved, in the list before the editor closes, and under the cursor."""
        table = self.query_one(DataTable)
        self.query_one("#stages-empty", Static).display = False
        put_row(table, stage.name, stage_cells(stage))
        table.move_cursor(row=table.get_row_index(stage.name))

    def _saved(self, said: str | None) -> None:
        if said:
            self.notify(said)
            self.reading.now()

    def action_pause(self) -> None:
        if name := self.selected():
            self.set_paused(name, True)

    def action_resume(self) -> None:
        if name := self.selected():
            self.set_paused(name, False)

    @work(thread=True, group="stages-action", exit_on_error=False)
    def set_paused(self, name: str, paused: bool) -> None:
        try:
            set_stage_paused(self.app.settings, name, paused)
            self.post_message(ActionDone(f"{'Paused' if paused else 'Resumed'} stage {name}"))
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

        self.app.push_screen(ConfirmScreen(f"Delete stage {name} and drop its table?", yes="Delete"), answered)

    @work(thread=True, group="stages-action", exit_on_error=False)
    def delete(self, name: str) -> None:
        try:
            delete_stage(self.app.settings, name, drop_table=True)
            self.post_message(ActionDone(f"Deleted stage {name} and its table"))
        except Exception as exc:
            self.post_message(ActionDone(str(exc), error=True))
        self.app.call_from_thread(self.reading.now)
