"""Creating or editing a stage: its source and table, its SQL in an editor, and a preview of the result.

Checking, previewing and saving need Spark, which the UI never hosts: a running engine answers on its
own session (a second or two); with none, each runs as a `floe stage` command of its own (a JVM's
start). Either way, in a worker, what comes back is what the command line would say: the rows, or
one line saying what is wrong.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from rich.text import Text
from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal
from textual.message import Message
from textual.screen import Screen
from textual.widgets import Button, DataTable, Header, Input, Select, Static, TextArea

from appliance.control.requests import warm_engine
from appliance.control.stages import Outcome, preview_for_ui, save_for_ui
from appliance.core import hints
from appliance.query.formatting import cell_text
from appliance.views.stages import StageInfo, StageView, stage_info
from appliance.views.tables import table_names
from tui.screens.confirm import ConfirmScreen
from tui.widgets.footer import Footer
from tui.widgets.form import field, show_error
from tui.workers import ReportsFailures

HINT = ("[b]source[/b] is the source table's rows that are new since the stage last ran; other tables are "
        "NAMESPACE.TABLE. F5 previews over a sample · Ctrl+S saves · Esc goes back")
# Shown in the empty editor, never part of its text.
EXAMPLE = hints.STAGE_EXAMPLE
# What each field holds, named when F5 or Ctrl+S finds it missing.
WHAT = {"stage-name": "a stage name", "stage-source": "the source table",
        "stage-table": "the table it writes (NAMESPACE.TABLE)", "stage-sql": "a query (a SELECT over source)"}


@dataclass
class TablesListed(Message):
    names: list[str]


@dataclass
class CommandDone(Message):
    action: str  # preview or save
    outcome: Outcome
    saved: StageView | None = None  # the stage as saved, read back by the same worker


class StageEditorScreen(ReportsFailures, Screen[str | None]):
    BINDINGS = [
        Binding("f5,ctrl+j", "preview", "Preview"),
        Binding("ctrl+s", "save", "Save"),
        Binding("escape", "back", "Back"),
    ]

    def __init__(self, stage: StageInfo | None = None, on_saved: Callable[[StageView], None] | None = None) -> None:
        """`on_saved`: called with the stage as saved before the editor closes, so the list behind it
        shows the stage the moment it is seen again."""
        super().__init__()
        self.stage = stage
        self.on_saved = on_saved
        self.busy = False
        self._opened: tuple | None = None  # what the form held when it opened: Esc asks only after a change

    def compose(self) -> ComposeResult:
        yield Header()
        title = f"Stage {self.stage.view.name} ({self.stage.view.kind})" if self.stage else "New stage"
        yield Static(f"[b]{title}[/b]", id="stage-title")
        with Horizontal(classes="row"):
            yield field("Stage name", Input(value=self.stage.view.name if self.stage else "", id="stage-name",
                                            disabled=self.stage is not None), "stage-name")
            yield field("Source table", Select([], prompt="Loading tables…", id="stage-source",
                                               disabled=self.stage is not None), "stage-source")
            yield field("Table it writes", Input(value=self.stage.view.table if self.stage else "",
                                                 placeholder="e.g. prep.hourly", id="stage-table",
                                                 disabled=self.stage is not None), "stage-table")
        yield Static(HINT, id="stage-hint")
        yield TextArea.code_editor(self.stage.sql if self.stage else "", language="sql", id="stage-sql",
                                   placeholder=EXAMPLE)
        with Horizontal(id="stage-actions", classes="actions"):
            yield Button("Preview (F5)", id="stage-preview-button")
            yield Button("Save (Ctrl+S)", id="stage-save", variant="primary")
            yield Button("Back", id="stage-back")
        yield Static("", id="stage-status")
        yield DataTable(id="stage-preview", zebra_stripes=True)
        yield Footer()

    def on_mount(self) -> None:
        self.list_tables()
        self.warm_up_engine()
        self.query_one("#stage-sql" if self.stage else "#stage-name").focus()
        self._opened = self._values()

    def _values(self) -> tuple:
        """What the user can change: an edited stage's source is set by the editor, not typed."""
        source = self.query_one("#stage-source", Select).value if self.stage is None else None
        return (self.query_one("#stage-name", Input).value, source, self.query_one("#stage-table", Input).value,
                self.query_one("#stage-sql", TextArea).text)

    @work(thread=True, exclusive=True, group="stage-warm", exit_on_error=False)
    def warm_up_engine(self) -> None:
        """A running engine gets a preview's path ready while the query is written; nothing waits for it."""
        warm_engine(self.app.settings)

    @work(thread=True, exclusive=True, group="stage-tables", exit_on_error=False)
    def list_tables(self) -> None:
        self.post_message(TablesListed(table_names(self.app.settings)))

    @on(TablesListed)
    def tables_listed(self, message: TablesListed) -> None:
        source = self.query_one("#stage-source", Select)
        source.set_options([(n, n) for n in message.names])
        if self.stage is not None and self.stage.view.source in message.names:
            source.value = self.stage.view.source
        source.prompt = "Choose a table" if message.names else "No tables yet: create a stream first"

    def _form(self, doing: str) -> tuple[str, str, str, str] | None:
        """(name, source, table, sql); or None, at once and before any worker runs: each problem under its
        field, the status line naming what `doing` still needs, the focus on the first of them."""
        name = self.query_one("#stage-name", Input).value.strip()
        source = self.query_one("#stage-source", Select).value
        table = self.query_one("#stage-table", Input).value.strip()
        sql = self.query_one("#stage-sql", TextArea).text.strip()
        problems = {"stage-name": "a name is required" if not name else "",
                    "stage-source": "choose the table it reads" if source is Select.BLANK else "",
                    "stage-table": "NAMESPACE.TABLE, e.g. prep.hourly" if table.count(".") != 1 else "",
                    "stage-sql": "" if sql else "write a SELECT over source (the example shows one)"}
        for widget, text in problems.items():
            if widget != "stage-sql":  # the editor has no line under it: the status line says it
                show_error(self, widget, text)
        missing = [widget for widget, text in problems.items() if text]
        if not missing:
            return name, str(source), table, sql
        names = [WHAT[w] if w != "stage-table" or not table else "the table it writes as NAMESPACE.TABLE"
                 for w in missing]
        needs = names[0] if len(names) == 1 else f"{', '.join(names[:-1])} and {names[-1]}"
        self._status(f"{doing} needs {needs}.", error=True)
        self.query_one(f"#{missing[0]}").focus()
        return None

    def _status(self, text: str, error: bool = False) -> None:
        self.query_one("#stage-status", Static).update(Text(text, style="bold red" if error else ""))

    def action_preview(self) -> None:
        form = self._form("A preview")
        if form is None or self.busy:
            return
        self.busy = True
        self._status(f"Previewing over a sample of {form[1]}…")
        self.run_preview(form[1], form[3])

    @work(thread=True, exclusive=True, group="stage-command", exit_on_error=False)
    def run_preview(self, source: str, sql: str) -> None:
        self.post_message(CommandDone("preview", preview_for_ui(self.app.settings, source, sql)))

    def action_save(self) -> None:
        form = self._form("Saving")
        if form is None or self.busy:
            return
        self.busy = True
        self._status("Checking the query and saving the stage…")
        self.run_save(*form)

    @work(thread=True, exclusive=True, group="stage-command", exit_on_error=False)
    def run_save(self, name: str, source: str, table: str, sql: str) -> None:
        outcome = save_for_ui(self.app.settings, name, source, sql, table, new=self.stage is None)
        saved = None
        if outcome.ok:
            try:
                saved = stage_info(self.app.settings, name, runs=1).view
            except Exception:  # noqa: BLE001 - saved all the same: the list's next read shows it
                pass
        self.post_message(CommandDone("save", outcome, saved))

    @on(CommandDone)
    def command_done(self, message: CommandDone) -> None:
        self.busy = False
        outcome = message.outcome
        if not outcome.ok:
            self._status(outcome.said, error=True)
            return
        if message.action == "save":
            if message.saved is not None and self.on_saved is not None:
                self.on_saved(message.saved)
            self.dismiss(outcome.said)
            return
        by = "the running engine" if outcome.by_engine else "a process of its own"
        self._status(f"{outcome.said} — {len(outcome.rows)} rows of the result over the sample (by {by})")
        grid = self.query_one("#stage-preview", DataTable)
        grid.clear(columns=True)
        for column in outcome.columns:
            grid.add_column(column)
        for row in outcome.rows:
            grid.add_row(*[Text("NULL", style="dim italic") if row.get(c) is None else Text(cell_text(row.get(c)))
                           for c in outcome.columns])

    @on(Button.Pressed, "#stage-preview-button")
    def preview_pressed(self) -> None:
        self.action_preview()

    @on(Button.Pressed, "#stage-save")
    def save_pressed(self) -> None:
        self.action_save()

    @on(Button.Pressed, "#stage-back")
    def back_pressed(self) -> None:
        self.action_back()

    def action_back(self) -> None:
        """Closed at once when nothing changed; otherwise only once the user says to discard."""
        if self._values() == self._opened:
            self.dismiss(None)
            return

        def answered(discard: bool | None) -> None:
            if discard:
                self.dismiss(None)

        what = f"your changes to stage {self.stage.view.name}" if self.stage else "this new stage"
        self.app.push_screen(ConfirmScreen(f"Discard {what}? It is not saved.", yes="Discard"), answered)
