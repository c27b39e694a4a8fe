"""The new-stream wizard: Source (Kafka), Target (Iceberg tables), Mapping (columns), Key (for a stream that
keeps each key's newest row), Create.

The screen walks the steps (one module each) and creates the stream through
`appliance.control.streams`, in a worker; a failure is shown next to the field it
concerns, on whichever step that field is, and the form keeps every edit.
"""

from __future__ import annotations

from rich.text import Text
from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal
from textual.screen import Screen
from textual.widgets import (
    Button,
    ContentSwitcher,
    Header,
    Input,
    Label,
    Select,
    Static,
)

from appliance.config.settings import Settings
from appliance.control.fields import TARGET_FIELDS, Field, failure
from appliance.control.streams import StreamRequest
from appliance.control.streams import create as create_stream
from appliance.core.errors import MappingError
from appliance.model.partitioning import proposed
from tui.screens.new_stream.key import KeyStep
from tui.screens.new_stream.mapping import MappingStep
from tui.screens.new_stream.messages import (
    ColumnsInferred,
    NamesChecked,
    ResampleRequested,
    StreamCreateDone,
    TopicChosen,
)
from tui.screens.new_stream.source import SourceStep
from tui.screens.new_stream.target import TargetStep
from tui.widgets.footer import Footer
from tui.widgets.form import show_error
from tui.workers import ReportsFailures

STEPS = ("source", "target", "mapping", "key")
STEP_TITLES = ("Source", "Target", "Mapping", "Key")
HINTS = (
    "Enter in a field loads the topics · Tab moves · Ctrl+N next · Esc cancels",
    "Checked as you type · Ctrl+B back · Ctrl+N next · Esc cancels",
    "Enter/r rename · t type · Delete/x drop · Ctrl+N next or Ctrl+S create · Esc cancels",
    "Checked as you type · Ctrl+B back · Ctrl+S create · Esc cancels",
)
FIRST_FOCUS = ("#bootstrap", "#table", "#mapping-table", "#key")


class NewStreamScreen(ReportsFailures, Screen[str | None]):
    """Dismissed with the created stream's name, or None when cancelled."""

    BINDINGS = [
        Binding("escape", "cancel", "Cancel"),
        Binding("ctrl+b", "back", "Back"),
        Binding("ctrl+n", "next", "Next"),
        Binding("ctrl+s", "create", "Create"),
        # The app's `q` would throw the form away on a stray key while a list or a button has the
        # focus; Ctrl+Q still quits. (The app keeps its section keys to its own screen.)
        Binding("q", "ignore", "Ignored in the wizard", show=False),
    ]

    def __init__(self) -> None:
        super().__init__()
        self.step = 0
        self.creating = False
        self.next_when_checked = False  # Next waits for the state database to say whether the names are taken

    def compose(self) -> ComposeResult:
        yield Header()
        yield Static(id="wizard-steps")
        with ContentSwitcher(initial="source", id="wizard-switcher"):
            yield SourceStep(id="source", classes="step")
            yield TargetStep(id="target", classes="step")
            yield MappingStep(id="mapping", classes="step")
            yield KeyStep(id="key-step", classes="step")
        with Horizontal(id="wizard-nav"):  # Cancel last: Tab from the last field reaches Next first
            yield Label("", id="nav-hint", markup=False)
            yield Button("Back", id="back")
            yield Button("Next", id="next", variant="primary")
            yield Button("Create", id="create", variant="success")
            yield Button("Cancel", id="cancel")
        yield Footer()

    @property
    def settings(self) -> Settings:
        return self.app.settings

    @property
    def source(self) -> SourceStep:
        return self.query_one(SourceStep)

    @property
    def target(self) -> TargetStep:
        return self.query_one(TargetStep)

    @property
    def columns(self) -> MappingStep:
        return self.query_one(MappingStep)

    @property
    def keys(self) -> KeyStep:
        return self.query_one(KeyStep)

    @property
    def last(self) -> int:
        """The last step: Mapping for an append stream, Key for one that keeps each key's newest row."""
        modes = self.query("#mode")
        upsert = bool(modes) and str(modes.first(Select).value) != "append"
        return len(STEPS) - 1 if upsert else len(STEPS) - 2

    @property
    def closing(self) -> MappingStep | KeyStep:
        """The step that creates the stream, and says how that went."""
        return self.keys if self.last == len(STEPS) - 1 else self.columns

    def kafka_options(self) -> dict[str, str]:
        """The librdkafka options the source step's form stands for."""
        return self.source.form().options()

    def on_mount(self) -> None:
        self.show_step(0)

    # ---- steps and navigation ----

    def show_step(self, step: int) -> None:
        self.step = step
        self.query_one(ContentSwitcher).current = "key-step" if STEPS[step] == "key" else STEPS[step]
        self.show_steps()
        self.query_one("#back", Button).disabled = step == 0
        self.query_one("#nav-hint", Label).update(HINTS[step])
        self.query_one(FIRST_FOCUS[step]).focus()

    def show_steps(self) -> None:
        """The steps in the header (a Key step for a stream that keeps each key's newest row), and the
        buttons of the step shown."""
        parts = []
        for i, title in enumerate(STEP_TITLES[:self.last + 1]):
            style = "bold reverse" if i == self.step else ("" if i < self.step else "dim")
            parts.append(Text(f" {i + 1} {title} ", style=style))
        self.query_one("#wizard-steps", Static).update(Text(" New stream   ").append_text(Text(" › ").join(parts)))
        self.query_one("#next", Button).display = self.step < self.last
        self.query_one("#create", Button).display = self.step == self.last
        self.refresh_bindings()

    @on(Select.Changed, "#mode")
    def mode_changed(self) -> None:
        self.show_steps()

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if action == "back":
            return self.step > 0
        if action == "next":
            return self.step < self.last
        if action == "create":
            return self.step == self.last
        return True

    def action_ignore(self) -> None:
        pass

    def action_cancel(self) -> None:
        if self.creating:
            self.notify("The stream is being created; wait for it to finish.", severity="warning")
            return
        self.dismiss(None)

    def action_back(self) -> None:
        if self.step > 0 and not self.creating:
            self.show_step(self.step - 1)

    def action_next(self) -> None:
        if self.step == 0:
            kafka, problems = self.source.check(need_topic=True)
            if problems or kafka is None:
                self.source.focus_first(problems)
                return
            topic = self.source.topic() or ""
            self.columns.start_inference(kafka, topic, self.source.form())
            self.target.set_intro(f"Where the rows go: topic {topic} on {kafka.bootstrap} → an Iceberg table.")
            self.show_step(1)
            self.target.check()
        elif self.step == 1:
            problems = self.target.check()
            if problems:
                self.target.focus_first(problems)
                return
            if self.target.pending:
                self.next_when_checked = True
                return
            self.show_step(2)
            self.show_mapping_summary()
        elif self.step == 2 and self.last == 3:
            if self.columns.check():
                self.columns.set_create_error("fix the columns marked in red first")
                return
            form = self.source.form()
            self.keys.prepare(self.columns.mapping() if self.columns.inferred is not None else None,
                              self.columns.proposed_key, form.cdc)
            self.show_step(3)

    @on(Button.Pressed, "#wizard-nav Button")
    def nav_pressed(self, event: Button.Pressed) -> None:
        {"cancel": self.action_cancel, "back": self.action_back, "next": self.action_next,
         "create": self.action_create}[event.button.id or ""]()

    @on(NamesChecked)
    def names_checked(self) -> None:
        """Carry on with a Next that waited for the names' check (it refuses when one is taken)."""
        if self.next_when_checked and self.step == 1 and not self.target.pending:
            self.next_when_checked = False
            self.action_next()

    @on(Input.Changed, "#namespace, #table, #dlq, #stream")
    def names_edited(self) -> None:
        self.next_when_checked = False  # typing on after Next: the next Next says when

    @on(TopicChosen)
    def topic_chosen(self, message: TopicChosen) -> None:
        self.target.suggest_for_topic(message.topic)

    @on(ColumnsInferred)
    def show_mapping_summary(self) -> None:
        columns = self.columns
        if columns.inferred is None:
            return
        self.target.propose_partitioning(proposed([(c.name, c.type) for c in columns.inferred.columns]))
        target, dlq = self.target.names()
        columns.status(f"Stream {self.target.stream_name()}: {self.source.topic()} → {target} "
                       f"(dead letters: {dlq}). Columns {columns.described}; edit them below.")

    @on(ResampleRequested)
    def resample(self) -> None:
        kafka, problems = self.source.check(need_topic=True)
        if kafka is None:
            self.columns.set_create_error("; ".join(problems.values()))
            return
        self.columns.start_inference(kafka, self.source.topic() or "", self.source.form(), again=True)

    @on(Input.Submitted, "#namespace, #table, #dlq, #stream, #partitioning")
    def target_submitted(self) -> None:
        self.action_next()

    # ---- create ----

    def action_create(self) -> None:
        if self.step != self.last or self.creating:
            return
        request = self._request()
        if request is None:
            return
        self.creating = True
        self.query_one("#create", Button).disabled = True
        self.closing.set_create_error("")
        self.closing.status(f"Creating stream {request.name} and its tables…")
        self.create(self.settings, request)

    def _request(self) -> StreamRequest | None:
        """The stream the form describes, or None with the reasons shown."""
        columns = self.columns
        if columns.inferred is None:
            columns.set_create_error("the columns are not inferred yet (see above)")
            return None
        if columns.check():
            columns.set_create_error("fix the columns marked in red first")
            columns.refused = True
            self.query_one("#mapping-table").focus()
            return None
        kafka, source_problems = self.source.check(need_topic=True)
        target_problems = self.target.check()
        if kafka is None or target_problems:
            columns.set_create_error("; ".join([*source_problems.values(), *target_problems.values()]))
            return None
        try:
            mapping = columns.mapping()
        except MappingError as exc:
            columns.set_create_error(str(exc))
            return None
        table, dead_letter_table = self.target.names()
        form = self.source.form()
        upsert = form.mode != "append"
        if upsert and self.keys.check():
            self.keys.set_create_error(f"the key: {self.keys.check()}")
            return None
        return StreamRequest(name=self.target.stream_name(), kafka=kafka, topic=self.source.topic() or "",
                             table=table, dead_letter_table=dead_letter_table, mapping=mapping,
                             starting_offsets=self.target.starting_offsets(), format=form.format,
                             registry=form.registry(), subject=columns.subject,
                             mode="upsert" if upsert else "append", key=self.keys.key() if upsert else (),
                             cdc=form.cdc, cdc_columns=self.keys.cdc_columns(),
                             partition_by=self.target.partition_by(), kafka_columns=self.target.kafka_columns())

    @work(thread=True, exclusive=True, exit_on_error=False, group="wizard-create", description="wizard: create stream")
    def create(self, settings: Settings, request: StreamRequest) -> None:
        try:
            create_stream(settings, request)
            result = StreamCreateDone(request.name)
        except Exception as exc:
            result = StreamCreateDone(request.name, *failure(exc, request.kafka))
        self.post_message(result)  # even when cancelled: the stream exists either way

    @on(StreamCreateDone)
    def create_done(self, message: StreamCreateDone) -> None:
        self.creating = False
        self.query_one("#create", Button).disabled = False
        if not message.error:
            self.dismiss(message.name)
            return
        self.closing.status("The stream was not created; nothing was changed. Fix the "
                            "problem below (Back for names) and Create again.", error=True)
        self.closing.set_create_error(message.error)
        if message.where in TARGET_FIELDS:  # also where Back leads
            self.target.forget_taken()  # taken since they were checked: the next check asks again
            show_error(self, message.where, message.error)
        elif message.where == Field.KEY:
            show_error(self.keys, "key", message.error)
