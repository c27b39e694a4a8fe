"""The new-stream wizard: Source (Kafka), Target (Iceberg tables), Mapping (columns), Create.

Every Kafka and catalog call runs in a thread worker that never touches a widget: it posts
one of the messages below and a handler on the screen updates the widgets. A failure is
shown next to the field it concerns, and the form keeps everything typed so far.

Secrets: the password stays in a password Input and reaches Kafka only inside a
`KafkaSettings` (whose repr masks it) or the options handed to `create_stream`. Workers get
fixed descriptions, because Textual otherwise names a worker after the repr of its arguments.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from rich.text import Text
from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.message import Message
from textual.screen import Screen
from textual.widget import Widget
from textual.widgets import Button, ContentSwitcher, DataTable, Footer, Header, Input, Label, Select, Static
from textual.worker import get_current_worker

from appliance import streams
from appliance.errors import (
    FloeError,
    InvalidName,
    KafkaConfigError,
    MappingError,
    StreamExists,
    TableConflict,
    TopicNotFound,
)
from appliance.kafka_client import KafkaClient, KafkaSettings, SampledMessage
from appliance.mapping import TYPES, Column, Mapping, infer_mapping, sample_objects
from appliance.names import RESERVED_COLUMNS, check_identifier, check_stream_name, check_table_name, snake_case
from appliance.settings import Settings

STEPS = ("source", "target", "mapping")
STEP_TITLES = ("Source", "Target", "Mapping")
PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")
PREVIEW_MESSAGES = 10
PREVIEW_CHARS = 120
SOURCE_FIELDS = ("bootstrap", "protocol", "mechanism", "username", "password", "ca", "topic")
TARGET_FIELDS = ("namespace", "table", "dlq", "stream", "offsets")
WIZARD_GROUP = "floe-wizard"  # consumer group id for metadata and samples; never joined


# ---- messages from the workers -------------------------------------------------


@dataclass
class TopicsListed(Message):
    kafka: KafkaSettings
    topics: list[str]
    error: str = ""
    where: str = ""  # the field the error belongs next to


@dataclass
class SampleRead(Message):
    kafka: KafkaSettings
    topic: str
    messages: list[SampledMessage]
    error: str = ""
    where: str = ""


@dataclass
class MappingInferred(Message):
    kafka: KafkaSettings
    topic: str
    mapping: Mapping | None
    sampled: int = 0
    error: str = ""


@dataclass
class StreamCreateDone(Message):
    name: str
    error: str = ""
    where: str = ""


@dataclass(frozen=True)
class CreateRequest:
    """What the Create button sends to its worker; printable (the Kafka settings mask secrets)."""

    name: str
    kafka: KafkaSettings
    topic: str
    table: str
    dead_letter_table: str
    starting_offsets: str
    mapping: Mapping


@dataclass
class EditedColumn:
    name: str
    type: str
    source: tuple[str, ...]


def failure(exc: BaseException, kafka: KafkaSettings | None) -> tuple[str, str]:
    """(one-line message with secrets scrubbed, field it belongs next to) for a worker's error."""
    text = str(exc) if isinstance(exc, FloeError) else f"{type(exc).__name__}: {exc}"
    if kafka is not None:
        text = kafka.scrub(text)
    if "ssl.ca.location" in text:  # librdkafka reports a bad CA file when the client is made
        where = "ca"
    elif isinstance(exc, TopicNotFound):
        where = "topic"
    elif isinstance(exc, KafkaConfigError):
        where = "protocol"
    elif isinstance(exc, StreamExists):
        where = "stream"
    elif isinstance(exc, TableConflict):
        where = "table"
    elif isinstance(exc, MappingError):
        where = "mapping"
    else:
        where = "bootstrap"
    return text, where


def preview(value: bytes | None) -> Text:
    if value is None:
        return Text("(null)", style="dim")
    text = " ".join(value.decode("utf-8", errors="replace").split())
    if len(text) > PREVIEW_CHARS:
        text = text[: PREVIEW_CHARS - 1] + "…"
    return Text(text)  # a Text, never markup: message contents may hold [brackets]


def field(label: str, widget: Widget, name: str) -> Vertical:
    """A labelled form field with its error Label underneath (`#NAME-error`, class field-error)."""
    return Vertical(
        Label(label, classes="field-label"),
        widget,
        Label("", id=f"{name}-error", classes="field-error", markup=False),
        classes="field",
        id=f"{name}-field",
    )


class MappingTable(DataTable):
    """The editable mapping: Enter or r renames, t changes the type, Delete or x drops."""

    BINDINGS = [
        Binding("r", "screen.edit_name", "Rename"),
        Binding("t", "screen.edit_type", "Type"),
        Binding("delete,x", "screen.drop_column", "Drop column"),
    ]


class NewStreamScreen(Screen[str | None]):
    """Dismissed with the created stream's name, or None when cancelled."""

    DEFAULT_CSS = """
    NewStreamScreen {
        layout: vertical;
    }
    NewStreamScreen #wizard-steps {
        height: 1;
        padding: 0 2;
        background: $boost;
    }
    NewStreamScreen #wizard-switcher {
        height: 1fr;
    }
    NewStreamScreen .step {
        height: 1fr;
        padding: 0 2;
    }
    NewStreamScreen .step-intro, NewStreamScreen .status, NewStreamScreen .field-error {
        width: 1fr;
    }
    NewStreamScreen .step-intro {
        margin-top: 1;
        color: $text-muted;
    }
    NewStreamScreen .row {
        height: auto;
    }
    NewStreamScreen .field {
        height: auto;
        width: 1fr;
        margin-right: 2;
    }
    NewStreamScreen .field-label {
        margin-top: 1;
        color: $text-muted;
    }
    NewStreamScreen .field Select, NewStreamScreen .field Input {
        width: 1fr;
    }
    NewStreamScreen .field-error {
        display: none;
        color: $error;
        padding: 0 1;
    }
    NewStreamScreen .field-error.-shown {
        display: block;
    }
    NewStreamScreen .actions {
        height: auto;
        align: left bottom;
    }
    NewStreamScreen .actions Button {
        margin: 1 2 0 0;
    }
    NewStreamScreen .status {
        margin-top: 1;
        color: $text-muted;
    }
    NewStreamScreen #sample-table {
        height: auto;
        max-height: 14;
        margin-top: 1;
    }
    NewStreamScreen #mapping-table {
        height: auto;
        max-height: 55vh;
        margin-top: 1;
    }
    NewStreamScreen #mapping-editor {
        height: auto;
    }
    NewStreamScreen #wizard-nav {
        height: auto;
        padding: 0 2;
        background: $boost;
    }
    NewStreamScreen #wizard-nav Button {
        margin: 0 0 0 2;
    }
    NewStreamScreen #nav-hint {
        width: 1fr;
        height: 3;
        content-align: left middle;
        text-wrap: nowrap;
        text-overflow: ellipsis;
        color: $text-muted;
    }
    """

    BINDINGS = [
        Binding("escape", "cancel", "Cancel"),
        Binding("ctrl+b", "back", "Back"),
        Binding("ctrl+n", "next", "Next"),
        Binding("ctrl+s", "create", "Create"),
        # The app's `n` would open a second wizard over this one, its 1-4 switch the sections
        # hidden behind it.
        Binding("n,1,2,3,4", "ignore", "Ignored in the wizard", show=False),
    ]

    def __init__(self) -> None:
        super().__init__()
        self.step = 0
        self.creating = False
        self._suggested: dict[str, str] = {}  # input id -> the value the wizard last filled in
        self._mapping_key: tuple[str, str] | None = None  # (bootstrap, topic) of the mapping shown
        self._inferring = False
        self._inferred: Mapping | None = None
        self._sampled = 0
        self._columns: dict[str, EditedColumn] = {}  # row key -> column, in table order
        self._editing: str | None = None  # row key shown in the column editor
        self._refused = False  # Create was refused for the columns' mistakes

    # ---- layout ------------------------------------------------------------------

    def compose(self) -> ComposeResult:
        yield Header()
        yield Static(id="wizard-steps")
        with ContentSwitcher(initial="source", id="wizard-switcher"):
            with VerticalScroll(id="source", classes="step"):
                yield Label("Where the messages come from: a Kafka cluster and one of its topics.",
                            classes="step-intro")
                yield field("Bootstrap servers", Input(placeholder="host:9092[,host2:9092]", id="bootstrap"),
                            "bootstrap")
                with Horizontal(classes="row"):
                    yield field("Security protocol", Select([(p, p) for p in PROTOCOLS], value="PLAINTEXT",
                                                            allow_blank=False, id="protocol"), "protocol")
                    yield field("SASL mechanism", Select([(m, m) for m in MECHANISMS], value="PLAIN",
                                                         allow_blank=False, id="mechanism"), "mechanism")
                with Horizontal(classes="row"):
                    yield field("SASL username", Input(id="username"), "username")
                    yield field("SASL password", Input(password=True, id="password"), "password")
                    yield field("CA file (PEM, for SSL)", Input(placeholder="/path/to/ca.pem", id="ca"), "ca")
                with Horizontal(classes="row"):
                    yield field("Topic", Select([], prompt="Load topics first", id="topic"), "topic")
                    with Horizontal(classes="actions"):
                        yield Button("Load topics", id="load-topics")
                        yield Button("Test connection", id="test-connection")
                yield Label("", id="source-status", classes="status", markup=False)
                sample = DataTable(id="sample-table", cursor_type="row", zebra_stripes=True)
                sample.add_column("Partition", key="partition")
                sample.add_column("Offset", key="offset")
                sample.add_column("Value", key="value")
                yield sample
            with VerticalScroll(id="target", classes="step"):
                yield Label("", id="target-intro", classes="step-intro", markup=False)
                with Horizontal(classes="row"):
                    yield field("Namespace", Input(self.settings.default_namespace, id="namespace"), "namespace")
                    yield field("Table", Input(id="table"), "table")
                with Horizontal(classes="row"):
                    yield field("Dead-letter table (NAME, or NAMESPACE.NAME)", Input(id="dlq"), "dlq")
                    yield field("Stream name", Input(id="stream"), "stream")
                with Horizontal(classes="row"):
                    yield field("Starting offsets", Select([("earliest: everything in the topic", "earliest"),
                                                            ("latest: only new messages", "latest")],
                                                           value="earliest", allow_blank=False, id="offsets"),
                                "offsets")
                    yield Vertical(classes="field")
            with VerticalScroll(id="mapping", classes="step"):
                yield Label("", id="mapping-status", classes="step-intro", markup=False)
                table = MappingTable(id="mapping-table", cursor_type="row", zebra_stripes=True)
                table.add_column("Column", key="name")
                table.add_column("Type", key="type")
                table.add_column("Source field", key="source")
                yield table
                yield Label("", id="mapping-error", classes="field-error", markup=False)
                with Horizontal(id="mapping-editor", classes="row"):
                    yield field("Column name", Input(id="col-name"), "col-name")
                    yield field("Type", Select([(t, t) for t in TYPES], allow_blank=False, id="col-type"),
                                "col-type")
                with Horizontal(classes="actions"):
                    yield Button("Drop column", id="col-drop", variant="warning")
                    yield Button("Reset edits", id="mapping-reset")
                    yield Button("Sample again", id="mapping-resample")
                yield Label("", id="create-error", classes="field-error", markup=False)
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

    def on_mount(self) -> None:
        self.sync_security()
        self.show_step(0)

    # ---- small helpers -------------------------------------------------------------

    def set_error(self, name: str, text: str) -> None:
        """Show `text` under field `name` (or clear it) and mark its widget invalid."""
        label = self.query_one(f"#{name}-error", Label)
        label.update(text)
        label.set_class(bool(text), "-shown")
        for widget in self.query(f"#{name}"):
            if isinstance(widget, (Input, Select)):  # mapping/create errors have no field widget
                widget.set_class(bool(text), "-invalid")

    def clear_errors(self, *names: str) -> None:
        for name in names:
            self.set_error(name, "")

    def status(self, widget_id: str, text: str, error: bool = False) -> None:
        self.query_one(f"#{widget_id}", Label).update(Text(text, style="bold red" if error else ""))

    def value(self, widget_id: str) -> str:
        return self.query_one(f"#{widget_id}", Input).value.strip()

    def topic(self) -> str | None:
        value = self.query_one("#topic", Select).value
        return None if value is Select.NULL else str(value)

    def suggest(self, input_id: str, value: str) -> None:
        """Fill a default in, unless the user has typed their own value there."""
        widget = self.query_one(f"#{input_id}", Input)
        if widget.value == self._suggested.get(input_id, ""):
            widget.value = value
            self._suggested[input_id] = value

    def post_if_current(self, message: Message) -> None:
        """Post from a worker unless a newer request of its group replaced it."""
        if not get_current_worker().is_cancelled:
            self.post_message(message)

    # ---- steps and navigation ------------------------------------------------------

    def show_step(self, step: int) -> None:
        self.step = step
        self.query_one(ContentSwitcher).current = STEPS[step]
        parts = []
        for i, title in enumerate(STEP_TITLES):
            style = "bold reverse" if i == step else ("" if i < step else "dim")
            parts.append(Text(f" {i + 1} {title} ", style=style))
        self.query_one("#wizard-steps", Static).update(Text(" New stream   ").append_text(
            Text(" › ").join(parts)))
        self.query_one("#back", Button).disabled = step == 0
        self.query_one("#next", Button).display = step < len(STEPS) - 1
        self.query_one("#create", Button).display = step == len(STEPS) - 1
        hints = (
            "Enter in a field loads the topics · Tab moves · Ctrl+N next · Esc cancels",
            "Checked as you type · Ctrl+B back · Ctrl+N next · Esc cancels",
            "Enter/r rename · t type · Delete/x drop · Ctrl+S create · Esc cancels",
        )
        self.query_one("#nav-hint", Label).update(hints[step])
        first = ("#bootstrap", "#table", "#mapping-table")[step]
        self.query_one(first).focus()
        self.refresh_bindings()

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if action == "back":
            return self.step > 0
        if action == "next":
            return self.step < len(STEPS) - 1
        if action in ("create", "edit_name", "edit_type", "drop_column"):
            return self.step == len(STEPS) - 1
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
            kafka, errors = self.check_source(need_topic=True)
            if errors or kafka is None:
                self.focus_first_error(errors, SOURCE_FIELDS)
                return
            self.start_inference(kafka, self.topic() or "")
            self.query_one("#target-intro", Label).update(
                f"Where the rows go: topic {self.topic()} on {kafka.bootstrap} → an Iceberg table.")
            self.show_step(1)
            self.check_target()
        elif self.step == 1:
            errors = self.check_target()
            if errors:
                self.focus_first_error(errors, TARGET_FIELDS)
                return
            self.show_step(2)
            self.show_mapping_summary()

    def focus_first_error(self, errors: dict[str, str], order: tuple[str, ...]) -> None:
        for name in order:
            if name in errors:
                self.query_one(f"#{name}").focus()
                return

    @on(Button.Pressed, "#cancel")
    def cancel_pressed(self) -> None:
        self.action_cancel()

    @on(Button.Pressed, "#back")
    def back_pressed(self) -> None:
        self.action_back()

    @on(Button.Pressed, "#next")
    def next_pressed(self) -> None:
        self.action_next()

    @on(Button.Pressed, "#create")
    def create_pressed(self) -> None:
        self.action_create()

    # ---- step 1: source ----------------------------------------------------------------

    @on(Select.Changed, "#protocol")
    def sync_security(self) -> None:
        protocol = str(self.query_one("#protocol", Select).value)
        sasl, ssl = protocol.startswith("SASL"), protocol in ("SSL", "SASL_SSL")
        for widget_id, enabled in (("mechanism", sasl), ("username", sasl), ("password", sasl), ("ca", ssl)):
            self.query_one(f"#{widget_id}").disabled = not enabled
            if not enabled:
                self.set_error(widget_id, "")
        self.set_error("protocol", "")

    def kafka_options(self) -> dict[str, str]:
        """The librdkafka options of the form, with the keys `--kafka-option` takes."""
        protocol = str(self.query_one("#protocol", Select).value)
        options: dict[str, str] = {}
        if protocol != "PLAINTEXT":
            options["security.protocol"] = protocol
        if protocol.startswith("SASL"):
            options["sasl.mechanisms"] = str(self.query_one("#mechanism", Select).value)
            if self.value("username"):
                options["sasl.username"] = self.value("username")
            password = self.query_one("#password", Input).value  # as typed: spaces may matter
            if password:
                options["sasl.password"] = password
        if protocol in ("SSL", "SASL_SSL") and self.value("ca"):
            options["ssl.ca.location"] = str(Path(self.value("ca")).expanduser())
        return options

    def check_source(self, need_topic: bool) -> tuple[KafkaSettings | None, dict[str, str]]:
        """The Kafka settings of the form and each field's mistake, shown next to the fields."""
        errors: dict[str, str] = {}
        options = self.kafka_options()
        protocol = options.get("security.protocol", "PLAINTEXT")
        if protocol.startswith("SASL"):
            if "sasl.username" not in options:
                errors["username"] = "a username is required for SASL"
            if "sasl.password" not in options:
                errors["password"] = "a password is required for SASL"
        if "ssl.ca.location" in options and not Path(options["ssl.ca.location"]).is_file():
            errors["ca"] = f"no such file: {options['ssl.ca.location']}"
        kafka = None
        try:
            kafka = KafkaSettings.create(self.value("bootstrap"), options)
        except KafkaConfigError as exc:
            errors["bootstrap"] = str(exc)
        if need_topic and not self.topic():
            errors["topic"] = "pick a topic (Load topics lists the broker's topics)"
        # Only adds: an error stays until its field is edited or a broker call succeeds.
        for name, text in errors.items():
            self.set_error(name, text)
        return (None if errors else kafka), errors

    @on(Input.Changed, "#bootstrap, #username, #password, #ca")
    def source_edited(self, event: Input.Changed) -> None:
        self.set_error(event.input.id or "", "")

    @on(Input.Submitted, "#bootstrap, #username, #password, #ca")
    @on(Button.Pressed, "#load-topics")
    def load_topics_requested(self) -> None:
        kafka, errors = self.check_source(need_topic=False)
        if kafka is None:
            self.focus_first_error(errors, SOURCE_FIELDS)
            return
        self.status("source-status", f"Loading topics from {kafka.bootstrap}…")
        self.load_topics(kafka, self.settings.sample_timeout)

    @work(thread=True, exclusive=True, exit_on_error=False, group="wizard-topics", description="wizard: load topics")
    def load_topics(self, kafka: KafkaSettings, timeout: float) -> None:
        try:
            with KafkaClient(kafka, group=WIZARD_GROUP, timeout=timeout) as client:
                result = TopicsListed(kafka, client.topics())
        except Exception as exc:
            result = TopicsListed(kafka, [], *failure(exc, kafka))
        self.post_if_current(result)

    @on(TopicsListed)
    def topics_listed(self, message: TopicsListed) -> None:
        if message.error:
            self.set_error(message.where if message.where in SOURCE_FIELDS else "bootstrap", message.error)
            self.status("source-status", "Could not load the topics.", error=True)
            return
        self.clear_errors("bootstrap", "protocol", "ca")
        select = self.query_one("#topic", Select)
        before = self.topic()
        with select.prevent(Select.Changed):
            select.set_options([(Text(t), t) for t in message.topics])
            select.prompt = "Pick a topic" if message.topics else "No topics on this cluster"
            if before in message.topics:
                select.value = before
        if self.topic() != before:
            self.topic_changed()
        self.set_error("topic", "" if message.topics else "the cluster has no topics yet")
        self.status("source-status", f"{len(message.topics)} topics on {message.kafka.bootstrap}.")
        if message.topics and (self.focused is None or self.focused.id in ("bootstrap", "load-topics")):
            select.focus()

    @on(Select.Changed, "#topic")
    def topic_changed(self) -> None:
        topic = self.topic()
        self.set_error("topic", "")
        self.query_one("#sample-table", DataTable).clear()
        self.status("source-status", "")
        self.suggest("table", snake_case(topic) if topic else "")

    @on(Button.Pressed, "#test-connection")
    def test_connection_requested(self) -> None:
        kafka, errors = self.check_source(need_topic=True)
        if kafka is None:
            self.focus_first_error(errors, SOURCE_FIELDS)
            return
        topic = self.topic() or ""
        self.query_one("#sample-table", DataTable).clear()
        self.status("source-status", f"Reading up to {PREVIEW_MESSAGES} messages of {topic}…")
        self.read_sample(kafka, topic, self.settings.sample_timeout)

    @work(thread=True, exclusive=True, exit_on_error=False, group="wizard-sample", description="wizard: test connection")
    def read_sample(self, kafka: KafkaSettings, topic: str, timeout: float) -> None:
        try:
            with KafkaClient(kafka, group=WIZARD_GROUP, timeout=timeout) as client:
                result = SampleRead(kafka, topic, client.sample(topic, PREVIEW_MESSAGES, timeout))
        except Exception as exc:
            result = SampleRead(kafka, topic, [], *failure(exc, kafka))
        self.post_if_current(result)

    @on(SampleRead)
    def sample_read(self, message: SampleRead) -> None:
        if message.error:
            self.set_error(message.where if message.where in SOURCE_FIELDS else "topic", message.error)
            self.status("source-status", "Connection test failed.", error=True)
            return
        self.clear_errors("bootstrap", "protocol", "ca", "topic")
        table = self.query_one("#sample-table", DataTable)
        table.clear()
        for m in message.messages:
            table.add_row(str(m.partition), str(m.offset), preview(m.value), key=f"{m.partition}:{m.offset}")
        if message.messages:
            self.status("source-status", f"Connected to {message.kafka.bootstrap}: the newest "
                                         f"{len(message.messages)} messages of {message.topic}.")
        else:
            self.status("source-status", f"Connected to {message.kafka.bootstrap}: {message.topic} is empty.")

    # ---- step 2: target ---------------------------------------------------------------

    def target_names(self) -> tuple[str, str]:
        namespace, table, dlq = self.value("namespace"), self.value("table"), self.value("dlq")
        return f"{namespace}.{table}", (dlq if "." in dlq else f"{namespace}.{dlq}")

    def check_target(self) -> dict[str, str]:
        errors: dict[str, str] = {}
        namespace, table = self.value("namespace"), self.value("table")
        try:
            check_identifier(namespace, "namespace")
        except InvalidName as exc:
            errors["namespace"] = str(exc)
        try:
            check_identifier(table, "table")
            if "namespace" not in errors:
                check_table_name(f"{namespace}.{table}")
        except InvalidName as exc:
            errors["table"] = str(exc)
        target, dlq = self.target_names()
        if not self.value("dlq"):
            errors["dlq"] = "a dead-letter table is required"
        else:
            try:
                check_table_name(dlq)
                if dlq == target:
                    raise InvalidName("the dead-letter table must differ from the target table")
            except InvalidName as exc:
                errors["dlq"] = str(exc)
        try:
            check_stream_name(self.value("stream"))
        except InvalidName as exc:
            errors["stream"] = str(exc)
        for name in TARGET_FIELDS:
            self.set_error(name, errors.get(name, ""))
        return errors

    @on(Input.Changed, "#namespace, #table, #dlq, #stream")
    def target_edited(self, event: Input.Changed) -> None:
        if event.input.id == "table":
            table = self.value("table")
            self.suggest("dlq", f"{table}{self.settings.dead_letter_suffix}" if table else "")
            self.suggest("stream", table.lstrip("_")[:63])
        self.check_target()

    @on(Input.Submitted, "#namespace, #table, #dlq, #stream")
    def target_submitted(self) -> None:
        self.action_next()

    # ---- step 3: mapping --------------------------------------------------------------

    def start_inference(self, kafka: KafkaSettings, topic: str, again: bool = False) -> None:
        """Infer the mapping of the topic, unless it is the one shown (and maybe edited) already.

        New credentials alone keep the user's edits: only another cluster or topic starts over.
        """
        key = (kafka.bootstrap, topic)
        if key == self._mapping_key and (self._inferred is not None or self._inferring) and not again:
            return
        self._mapping_key = key
        self._inferring = True
        self._inferred = None
        self.fill_mapping({})
        self.set_error("create", "")
        self.status("mapping-status", f"Sampling up to {self.settings.sample_messages} messages of {topic} "
                                      "to infer the columns…")
        self.infer(kafka, topic, self.settings.sample_messages, self.settings.sample_timeout)

    @work(thread=True, exclusive=True, exit_on_error=False, group="wizard-infer", description="wizard: infer mapping")
    def infer(self, kafka: KafkaSettings, topic: str, count: int, timeout: float) -> None:
        try:
            with KafkaClient(kafka, group=WIZARD_GROUP, timeout=timeout) as client:
                sampled = client.sample(topic, count, timeout)
            if not sampled:
                raise MappingError(f"topic {topic!r} is empty: nothing to infer the columns from; "
                                   "produce some messages, then Sample again")
            result = MappingInferred(kafka, topic, infer_mapping(sample_objects(m.value for m in sampled)),
                                     len(sampled))
        except Exception as exc:
            result = MappingInferred(kafka, topic, None, error=failure(exc, kafka)[0])
        self.post_if_current(result)

    @on(MappingInferred)
    def mapping_inferred(self, message: MappingInferred) -> None:
        if self._mapping_key != (message.kafka.bootstrap, message.topic):
            return  # the source changed since this was asked for
        self._inferring = False
        if message.mapping is None:
            self.status("mapping-status", f"No mapping: {message.error}", error=True)
            return
        self._inferred, self._sampled = message.mapping, message.sampled
        self.reset_mapping()
        self.show_mapping_summary()

    def show_mapping_summary(self) -> None:
        if self._inferred is None:
            return
        target, dlq = self.target_names()
        self.status("mapping-status", f"Stream {self.value('stream')}: {self.topic()} → {target} "
                                      f"(dead letters: {dlq}). Columns inferred from {self._sampled} "
                                      "messages; edit them below.")

    def reset_mapping(self) -> None:
        if self._inferred is None:
            return
        self.fill_mapping({f"c{i}": EditedColumn(c.name, c.type, c.source)
                           for i, c in enumerate(self._inferred.columns)})

    def fill_mapping(self, columns: dict[str, EditedColumn]) -> None:
        self._columns = columns
        table = self.query_one("#mapping-table", DataTable)
        table.clear()
        for key, col in columns.items():
            table.add_row(Text(col.name), col.type, Text(".".join(col.source)), key=key)
        self.check_mapping()
        self.load_editor()

    def mapping_problems(self) -> dict[str, str]:
        problems: dict[str, str] = {}
        counts = Counter(c.name for c in self._columns.values())
        for key, col in self._columns.items():
            try:
                check_identifier(col.name, "column")
            except InvalidName as exc:
                problems[key] = str(exc)
                continue
            if col.name in RESERVED_COLUMNS:
                problems[key] = f"column {col.name!r} is reserved for Kafka metadata"
            elif counts[col.name] > 1:
                problems[key] = f"column {col.name!r} appears more than once"
        return problems

    def check_mapping(self) -> list[str]:
        """Each column's mistake, marked in the table and listed under it."""
        problems = self.mapping_problems()
        table = self.query_one("#mapping-table", DataTable)
        for key, col in self._columns.items():
            table.update_cell(key, "name", Text(col.name or "(empty)", style="bold red" if key in problems else ""))
            table.update_cell(key, "type", col.type)
        lines = list(dict.fromkeys(problems.values()))
        if self._inferred is not None and not self._columns:
            lines.append("every column was dropped: a table needs at least one (Reset edits brings them back)")
        self.set_error("mapping", "\n".join(lines))
        if not lines and self._refused:
            self.set_error("create", "")
            self._refused = False
        return lines

    def current_row(self) -> str | None:
        table = self.query_one("#mapping-table", DataTable)
        if not table.row_count:
            return None
        key = table.coordinate_to_cell_key(table.cursor_coordinate).row_key.value
        return key if key in self._columns else None

    def load_editor(self) -> None:
        """Show the highlighted column in the editor under the table."""
        self._editing = self.current_row()
        name, kind = self.query_one("#col-name", Input), self.query_one("#col-type", Select)
        col = self._columns.get(self._editing) if self._editing else None
        with name.prevent(Input.Changed), kind.prevent(Select.Changed):
            name.value = col.name if col else ""
            if col:
                kind.value = col.type
        for widget in (name, kind, self.query_one("#col-drop", Button)):
            widget.disabled = col is None

    @on(DataTable.RowHighlighted, "#mapping-table")
    def column_highlighted(self) -> None:
        self.load_editor()

    @on(DataTable.RowSelected, "#mapping-table")
    def column_selected(self) -> None:
        self.action_edit_name()

    def action_edit_name(self) -> None:
        if self._editing:
            self.query_one("#col-name", Input).focus()

    def action_edit_type(self) -> None:
        if self._editing:
            select = self.query_one("#col-type", Select)
            select.focus()
            select.action_show_overlay()

    @on(Input.Changed, "#col-name")
    def column_renamed(self, event: Input.Changed) -> None:
        if self._editing in self._columns:
            self._columns[self._editing].name = event.value.strip()
            self.check_mapping()

    @on(Input.Submitted, "#col-name")
    def column_rename_done(self) -> None:
        self.query_one("#mapping-table").focus()

    @on(Select.Changed, "#col-type")
    def column_retyped(self, event: Select.Changed) -> None:
        if self._editing in self._columns and event.value in TYPES:
            self._columns[self._editing].type = str(event.value)
            self.check_mapping()

    @on(Button.Pressed, "#col-drop")
    def action_drop_column(self) -> None:
        key = self._editing
        if key not in self._columns:
            return
        del self._columns[key]
        table = self.query_one("#mapping-table", DataTable)
        table.remove_row(key)
        table.focus()
        self.check_mapping()
        self.call_after_refresh(self.load_editor)

    @on(Button.Pressed, "#mapping-reset")
    def mapping_reset(self) -> None:
        self.reset_mapping()
        self.query_one("#mapping-table").focus()

    @on(Button.Pressed, "#mapping-resample")
    def mapping_resample(self) -> None:
        kafka, errors = self.check_source(need_topic=True)
        if kafka is None:
            self.set_error("create", "; ".join(errors.values()))
            return
        self.start_inference(kafka, self.topic() or "", again=True)

    # ---- create -------------------------------------------------------------------

    def action_create(self) -> None:
        if self.step != len(STEPS) - 1 or self.creating:
            return
        if self._inferred is None:
            self.set_error("create", "the columns are not inferred yet (see above)")
            return
        if self.check_mapping():
            self.set_error("create", "fix the columns marked in red first")
            self._refused = True
            self.query_one("#mapping-table").focus()
            return
        kafka, source_errors = self.check_source(need_topic=True)
        target_errors = self.check_target()
        if kafka is None or target_errors:
            self.set_error("create", "; ".join([*source_errors.values(), *target_errors.values()]))
            return
        try:
            mapping = Mapping(tuple(Column(c.name, c.type, c.source) for c in self._columns.values()))
        except MappingError as exc:
            self.set_error("create", str(exc))
            return
        target, dlq = self.target_names()
        request = CreateRequest(
            name=self.value("stream"), kafka=kafka, topic=self.topic() or "", table=target, dead_letter_table=dlq,
            starting_offsets=str(self.query_one("#offsets", Select).value), mapping=mapping,
        )
        self.creating = True
        self.query_one("#create", Button).disabled = True
        self.set_error("create", "")
        self.status("mapping-status", f"Creating stream {request.name} and its tables…")
        self.create(self.settings, request)

    @work(thread=True, exclusive=True, exit_on_error=False, group="wizard-create", description="wizard: create stream")
    def create(self, settings: Settings, request: CreateRequest) -> None:
        try:
            streams.create_stream(
                settings, request.name, bootstrap=request.kafka.bootstrap, topic=request.topic,
                table=request.table, mapping=request.mapping, starting_offsets=request.starting_offsets,
                dead_letter_table=request.dead_letter_table,
                # the same librdkafka keys `--kafka-option` takes; create_stream checks them
                # with KafkaSettings.create before saving them
                kafka_options=dict(request.kafka.options),
            )
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
        self.status("mapping-status", "The stream was not created; nothing was changed. Fix the "
                                      "problem below (Back for names) and Create again.", error=True)
        self.set_error("create", message.error)
        if message.where in TARGET_FIELDS:  # also where Back leads
            self.set_error(message.where, message.error)

