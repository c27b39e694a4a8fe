"""Step 3 of the wizard: the columns inferred from a sample of the topic, editable.

Each column's mistakes come from the mapping's own rules (`model.mapping.column_problems`),
marked in the table as the user edits: the same rules `floe stream create --mapping` applies.
"""

from __future__ import annotations

from dataclasses import dataclass

from rich.text import Text
from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal
from textual.message import Message
from textual.widgets import Button, DataTable, Input, Label, Select
from textual.worker import get_current_worker

from appliance.control.fields import failure
from appliance.control.source import SourceForm, columns_for
from appliance.kafka.settings import KafkaSettings
from appliance.model.mapping import Column, Mapping, column_problems
from appliance.model.sources import describe
from appliance.model.types import SIMPLE
from tui.screens.new_stream.messages import (
    ColumnsInferred,
    MappingInferred,
    ResampleRequested,
)
from tui.widgets.form import FormStep, field, show_error
from tui.widgets.rows import selected_key
from tui.workers import ReportsFailures


@dataclass
class EditedColumn:
    name: str
    type: str
    source: tuple[str, ...]


class MappingTable(DataTable):
    """The editable mapping: Enter or r renames, t changes the type, Delete or x drops."""

    BINDINGS = [
        Binding("r", "edit('name')", "Rename"),
        Binding("t", "edit('type')", "Type"),
        Binding("delete,x", "edit('drop')", "Drop column"),
    ]

    @dataclass
    class Edit(Message):
        what: str  # name, type or drop

    def action_edit(self, what: str) -> None:
        self.post_message(self.Edit(what))


class MappingStep(ReportsFailures, FormStep):
    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.key: tuple | None = None  # (bootstrap, topic, format, registry) of the mapping shown
        self.subject = ""  # the registry subject of the schema the columns come from
        self.described = ""  # where the columns came from
        self.inferring = False
        self.inferred: Mapping | None = None
        self.proposed_key: tuple[str, ...] = ()  # the columns holding the sampled Kafka keys' fields
        self.sampled = 0
        self.columns: dict[str, EditedColumn] = {}  # row key -> column, in table order
        self.editing: str | None = None  # row key shown in the column editor
        self.refused = False  # Create was refused for the columns' mistakes

    def compose(self) -> ComposeResult:
        yield Label("", id="mapping-status", classes="step-intro", markup=False)
        table = MappingTable(id="mapping-table", cursor_type="row", zebra_stripes=True)
        table.add_column("Column", key="name")
        table.add_column("Type", key="type")
        table.add_column("Source field", key="source")
        yield table
        yield Label("", id="mapping-error", classes="field-error", markup=False)
        with Horizontal(id="mapping-editor", classes="row"):
            yield field("Column name", Input(id="col-name"), "col-name")
            yield field("Type", Select([(t, t) for t in SIMPLE], allow_blank=False, id="col-type"), "col-type")
        with Horizontal(classes="actions"):
            yield Button("Drop column", id="col-drop", variant="warning")
            yield Button("Reset edits", id="mapping-reset")
            yield Button("Sample again", id="mapping-resample")
        yield Label("", id="create-error", classes="field-error", markup=False)

    def status(self, text: str, error: bool = False) -> None:
        self.query_one("#mapping-status", Label).update(Text(text, style="bold red" if error else ""))

    def set_create_error(self, text: str) -> None:
        show_error(self, "create", text)

    # ---- inference ----

    def start_inference(self, kafka: KafkaSettings, topic: str, form: SourceForm, again: bool = False) -> None:
        """Infer the mapping of the topic (or read it off the registry's schema), unless it is the
        one shown (and maybe edited) already.

        New credentials alone keep the user's edits: only another cluster, topic, format or
        registry starts over.
        """
        registry = form.registry()
        key = (kafka.bootstrap, topic, form.format, registry.url if registry else "", form.cdc)
        if key == self.key and (self.inferred is not None or self.inferring) and not again:
            return
        self.key = key
        self.inferring = True
        self.inferred = None
        self.fill({})
        self.set_create_error("")
        settings = self.app.settings
        self.status(f"Sampling up to {settings.sample_messages} messages of {topic} for the columns…")
        self.infer(key, kafka, topic, form.format, registry, settings.sample_messages, settings.sample_timeout,
                   form.cdc)

    @work(thread=True, exclusive=True, exit_on_error=False, group="wizard-infer", description="wizard: infer mapping")
    def infer(self, key: tuple, kafka: KafkaSettings, topic: str, fmt: str, registry, count: int,
              timeout: float, cdc: str) -> None:
        try:
            found = columns_for(kafka, topic, fmt, registry, count, timeout, cdc)
            result = MappingInferred(key, found.mapping, found.sampled, subject=found.subject,
                                     described=found.described, proposed_key=found.key)
        except Exception as exc:
            result = MappingInferred(key, None, error=failure(exc, kafka, registry)[0])
        if not get_current_worker().is_cancelled:
            self.post_message(result)

    @on(MappingInferred)
    def mapping_inferred(self, message: MappingInferred) -> None:
        if self.key != message.key:
            return  # the source changed since this was asked for
        self.inferring = False
        if message.mapping is None:
            self.status(f"No mapping: {message.error}", error=True)
            return
        self.inferred, self.sampled = message.mapping, message.sampled
        self.subject, self.described = message.subject, message.described
        self.proposed_key = message.proposed_key
        self.reset()
        self.post_message(ColumnsInferred())

    # ---- the columns ----

    def reset(self) -> None:
        if self.inferred is not None:
            self.fill({f"c{i}": EditedColumn(c.name, c.type, c.source) for i, c in enumerate(self.inferred.columns)})

    def fill(self, columns: dict[str, EditedColumn]) -> None:
        self.columns = columns
        table = self.query_one("#mapping-table", DataTable)
        table.clear()
        for key, col in columns.items():
            table.add_row(Text(col.name), col.type, Text(describe(col.source)), key=key)
        self.check()
        self.load_editor()

    def problems(self) -> dict[str, str]:
        """Each wrong column's mistake, by row key."""
        keys = list(self.columns)
        found = column_problems((c.name, c.type, c.source) for c in self.columns.values())
        return {keys[i]: text for i, text in found.items()}

    def check(self) -> list[str]:
        """Each column's mistake, marked in the table and listed under it."""
        problems = self.problems()
        table = self.query_one("#mapping-table", DataTable)
        for key, col in self.columns.items():
            table.update_cell(key, "name", Text(col.name or "(empty)", style="bold red" if key in problems else ""))
            table.update_cell(key, "type", col.type)
        lines = list(dict.fromkeys(problems.values()))
        if self.inferred is not None and not self.columns:
            lines.append("every column was dropped: a table needs at least one (Reset edits brings them back)")
        show_error(self, "mapping", "\n".join(lines))
        if not lines and self.refused:
            self.set_create_error("")
            self.refused = False
        return lines

    def mapping(self) -> Mapping:
        """The edited columns as a mapping; MappingError when they break its rules."""
        return Mapping(tuple(Column(c.name, c.type, c.source) for c in self.columns.values()))

    # ---- the column editor ----

    def load_editor(self) -> None:
        """Show the highlighted column in the editor under the table."""
        key = selected_key(self.query_one("#mapping-table", DataTable))
        self.editing = key if key in self.columns else None
        name, kind = self.query_one("#col-name", Input), self.query_one("#col-type", Select)
        col = self.columns.get(self.editing) if self.editing else None
        with name.prevent(Input.Changed), kind.prevent(Select.Changed):
            name.value = col.name if col else ""
            if col:
                # The simple types, and the column's own when it has parameters (a schema's decimal(10,2))
                kind.set_options([(t, t) for t in dict.fromkeys([*SIMPLE, col.type, *self._schema_types()])])
                kind.value = col.type
        for widget in (name, kind, self.query_one("#col-drop", Button)):
            widget.disabled = col is None

    @on(DataTable.RowHighlighted, "#mapping-table")
    def column_highlighted(self) -> None:
        self.load_editor()

    @on(DataTable.RowSelected, "#mapping-table")
    def column_selected(self) -> None:
        self.edit_name()

    @on(MappingTable.Edit)
    def edit(self, message: MappingTable.Edit) -> None:
        {"name": self.edit_name, "type": self.edit_type, "drop": self.drop_column}[message.what]()

    def edit_name(self) -> None:
        if self.editing:
            self.query_one("#col-name", Input).focus()

    def edit_type(self) -> None:
        if self.editing:
            select = self.query_one("#col-type", Select)
            select.focus()
            select.action_show_overlay()

    @on(Input.Changed, "#col-name")
    def column_renamed(self, event: Input.Changed) -> None:
        if self.editing in self.columns:
            self.columns[self.editing].name = event.value.strip()
            self.check()

    @on(Input.Submitted, "#col-name")
    def column_rename_done(self) -> None:
        self.query_one("#mapping-table").focus()

    def _schema_types(self) -> list[str]:
        return [c.type for c in self.inferred.columns] if self.inferred is not None else []

    @on(Select.Changed, "#col-type")
    def column_retyped(self, event: Select.Changed) -> None:
        if self.editing in self.columns and event.value is not Select.NULL:
            self.columns[self.editing].type = str(event.value)
            self.check()

    @on(Button.Pressed, "#col-drop")
    def drop_column(self) -> None:
        key = self.editing
        if key not in self.columns:
            return
        del self.columns[key]
        table = self.query_one("#mapping-table", DataTable)
        table.remove_row(key)
        table.focus()
        self.check()
        self.call_after_refresh(self.load_editor)

    @on(Button.Pressed, "#mapping-reset")
    def reset_pressed(self) -> None:
        self.reset()
        self.query_one("#mapping-table").focus()

    @on(Button.Pressed, "#mapping-resample")
    def resample_pressed(self) -> None:
        self.post_message(ResampleRequested())
