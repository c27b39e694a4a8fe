"""Step 2 of the wizard: the Iceberg tables the rows go to, the stream's name, where it starts, and
whether the Kafka key and headers are columns of the table too (`--kafka-columns`).

Names are checked as they are typed: their spelling at once (`appliance.control.targets.check_target`),
and whether another stream or a stage has them (`taken_names`) in a worker, since that reads the state
database; the table, dead-letter table and stream names follow the topic until the user types their own.
"""

from __future__ import annotations

from textual import on, work
from textual.app import ComposeResult
from textual.containers import Horizontal
from textual.widgets import Input, Label, Select

from appliance.config.settings import Settings
from appliance.control.fields import TARGET_FIELDS, Problems
from appliance.control.targets import (
    DEFAULT_PARTITIONING,
    check_target,
    qualified,
    suggested_dead_letter_table,
    suggested_stream_name,
    suggested_table,
    taken_names,
)
from tui.screens.new_stream.messages import NamesChecked
from tui.widgets.form import FormStep, field, show_error
from tui.workers import ReportsFailures


class TargetStep(ReportsFailures, FormStep):
    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        # input id -> the value the wizard last filled in
        self._suggested: dict[str, str] = {"partitioning": DEFAULT_PARTITIONING}
        self._names: tuple[str, str, str] | None = None  # (stream, table, dead-letter table) last asked about
        self._taken: Problems | None = None  # the state database's answer for them; None while it is asked

    def compose(self) -> ComposeResult:
        yield Label("", id="target-intro", classes="step-intro", markup=False)
        with Horizontal(classes="row"):
            yield field("Namespace", Input(self.app.settings.default_namespace, id="namespace"), "namespace")
            yield field("Table", Input(id="table"), "table")
        with Horizontal(classes="row"):
            yield field("Dead-letter table (NAME, or NAMESPACE.NAME)", Input(id="dlq"), "dlq")
            yield field("Stream name", Input(id="stream"), "stream")
        with Horizontal(classes="row"):
            yield field("Starting offsets", Select([("earliest: everything in the topic", "earliest"),
                                                    ("latest: only new messages", "latest")],
                                                   value="earliest", allow_blank=False, id="offsets"), "offsets")
            yield field("Partition by (none: unpartitioned)", Input(DEFAULT_PARTITIONING, id="partitioning"),
                        "partitioning")
        with Horizontal(classes="row"):
            yield field("Kafka key and headers as columns",
                        Select([("neither", "none"), ("the key's bytes: _kafka_key", "key"),
                                ("the headers: _kafka_headers", "headers"),
                                ("both: _kafka_key and _kafka_headers", "key,headers")],
                               value="none", allow_blank=False, id="kafka-columns"), "kafka-columns")

    def value(self, widget_id: str) -> str:
        return self.query_one(f"#{widget_id}", Input).value.strip()

    def stream_name(self) -> str:
        return self.value("stream")

    def starting_offsets(self) -> str:
        return str(self.query_one("#offsets", Select).value)

    def partition_by(self) -> str:
        return self.value("partitioning")

    def kafka_columns(self) -> tuple[str, ...]:
        chosen = str(self.query_one("#kafka-columns", Select).value)
        return () if chosen == "none" else tuple(chosen.split(","))

    def propose_partitioning(self, text: str) -> None:
        """The partitioning the inferred columns propose, unless the user typed their own."""
        self.suggest("partitioning", text)

    def names(self) -> tuple[str, str]:
        """The target table and the dead-letter table, both NAMESPACE.TABLE."""
        namespace = self.value("namespace")
        return f"{namespace}.{self.value('table')}", qualified(namespace, self.value("dlq"))

    def set_intro(self, text: str) -> None:
        self.query_one("#target-intro", Label).update(text)

    @property
    def pending(self) -> bool:
        """Whether the state database has yet to say if the names typed are taken."""
        return self._taken is None

    def check(self) -> Problems:
        """Each field's mistake, shown under it: its spelling, then whether the name is taken (as far
        as the state database has answered for the names typed now; a new question goes to a worker)."""
        problems = check_target(self.value("namespace"), self.value("table"), self.value("dlq"), self.value("stream"),
                                self.value("partitioning"))
        names = (self.stream_name(), *self.names())
        if names != self._names:
            self._names, self._taken = names, None
            self.ask_taken(self.app.settings, names)
        for name, text in (self._taken or {}).items():
            problems.setdefault(name, text)
        for name in TARGET_FIELDS:
            show_error(self, name, problems.get(name, ""))
        return problems

    def forget_taken(self) -> None:
        """Ask the state database again at the next check: a create found a name taken since."""
        self._names, self._taken = None, None

    @work(thread=True, exclusive=True, exit_on_error=False, group="wizard-names", description="wizard: check names")
    def ask_taken(self, settings: Settings, names: tuple[str, str, str]) -> None:
        try:
            self.post_message(NamesChecked(names, taken_names(settings, *names)))
        except Exception:
            self.post_message(NamesChecked(names, {}))  # Create checks again; the toast says why not here
            raise

    @on(NamesChecked)
    def names_checked(self, message: NamesChecked) -> None:
        if message.names == self._names:  # else the names changed since: their own answer is on its way
            self._taken = message.problems
            self.check()

    def focus_first(self, problems: Problems) -> None:
        for name in TARGET_FIELDS:
            if name in problems:
                self.query_one(f"#{name}").focus()
                return

    def suggest(self, input_id: str, value: str) -> None:
        """Fill a default in, unless the user has typed their own value there."""
        widget = self.query_one(f"#{input_id}", Input)
        if widget.value == self._suggested.get(input_id, ""):
            widget.value = value
            self._suggested[input_id] = value

    def suggest_for_topic(self, topic: str | None) -> None:
        self.suggest("table", suggested_table(topic or ""))

    @on(Input.Changed, "#namespace, #table, #dlq, #stream, #partitioning")
    def edited(self, event: Input.Changed) -> None:
        if event.input.id == "table":
            table = self.value("table")
            self.suggest("dlq", suggested_dead_letter_table(self.app.settings, table))
            self.suggest("stream", suggested_stream_name(table))
        self.check()
