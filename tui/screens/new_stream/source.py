"""Step 1 of the wizard: the Kafka cluster, its security settings, a topic, and a look at its messages.

Every broker call runs in a thread worker that posts a message back; a failure is shown
next to the field it concerns (`appliance.control.fields`), and the form keeps what was
typed. The password reaches Kafka only inside a `KafkaSettings`, whose repr masks it;
workers get fixed descriptions, because Textual otherwise names one after its arguments.
"""

from __future__ import annotations

from rich.text import Text
from textual import on, work
from textual.app import ComposeResult
from textual.containers import Horizontal
from textual.message import Message
from textual.suggester import SuggestFromList
from textual.widgets import Button, DataTable, Input, Label, Select
from textual.worker import get_current_worker

from appliance.control.fields import SOURCE_FIELDS, Field, Problems, failure
from appliance.control.source import SourceForm, check_source, list_topics, preview
from appliance.kafka.settings import PROTOCOLS, SASL_MECHANISMS, KafkaSettings
from appliance.model.stream import FORMATS, REGISTRY_FORMATS
from appliance.views.streams import known_brokers
from tui.screens.new_stream.messages import BrokersKnown, SampleRead, TopicChosen, TopicsListed
from tui.widgets.form import FormStep, field, show_error
from tui.workers import ReportsFailures

MODE_CHOICES = [("events: every message is a new row (append)", "append"),
                ("states: each message is its key's newest row (upsert)", "upsert"),
                ("Debezium change events (upsert by key)", "debezium")]
PREVIEW_MESSAGES = 10
PREVIEW_CHARS = 120
TOPIC_HINT = " (Load topics lists the broker's topics)"


def preview_text(value: bytes | None) -> Text:
    if value is None:
        return Text("(null)", style="dim")
    text = " ".join(value.decode("utf-8", errors="replace").split())
    if len(text) > PREVIEW_CHARS:
        text = text[: PREVIEW_CHARS - 1] + "…"
    return Text(text)  # a Text, never markup: message contents may hold [brackets]


class SourceStep(ReportsFailures, FormStep):
    def compose(self) -> ComposeResult:
        yield Label("Where the messages come from: a Kafka cluster and one of its topics.", classes="step-intro")
        yield field("Bootstrap servers", Input(placeholder="host:9092[,host2:9092]", id="bootstrap"), "bootstrap")
        with Horizontal(classes="row"):
            yield field("Security protocol", Select([(p, p) for p in PROTOCOLS], value="PLAINTEXT",
                                                    allow_blank=False, id="protocol"), "protocol")
            yield field("SASL mechanism", Select([(m, m) for m in SASL_MECHANISMS], value="PLAIN",
                                                 allow_blank=False, id="mechanism"), "mechanism")
        with Horizontal(classes="row"):
            yield field("SASL username", Input(id="username"), "username")
            yield field("SASL password", Input(password=True, id="password"), "password")
            yield field("CA file (PEM, for SSL)", Input(placeholder="/path/to/ca.pem", id="ca"), "ca")
        with Horizontal(classes="row"):
            yield field("Message format", Select([(f, f) for f in FORMATS], value="json", allow_blank=False,
                                                 id="format"), "format")
            yield field("Schema registry URL (Avro, Protobuf)", Input(placeholder="http://registry:8081",
                                                                      id="registry"), "registry")
            yield field("Registry credentials", Input(password=True, placeholder="USER:PASSWORD",
                                                      id="registry-credentials"), "registry-credentials")
        with Horizontal(classes="row"):
            yield field("The messages are", Select(MODE_CHOICES, value="append", allow_blank=False, id="mode"), "mode")
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

    def on_mount(self) -> None:
        self.sync_security()
        self.sync_format()
        self.read_known_brokers()

    # ---- the clusters Floe knows ----

    @work(thread=True, exclusive=True, exit_on_error=False, group="wizard-brokers", description="wizard: brokers")
    def read_known_brokers(self) -> None:
        self.post_message(BrokersKnown(known_brokers(self.app.settings)))

    @on(BrokersKnown)
    def brokers_known(self, message: BrokersKnown) -> None:
        """The newest stream's cluster, selected (typing replaces it), unless something was typed first;
        the others complete as they are typed (→ takes the completion)."""
        if not message.bootstraps:
            return
        box = self.query_one("#bootstrap", Input)
        box.suggester = SuggestFromList(message.bootstraps, case_sensitive=False)
        if box.value:
            return  # the typed value wins
        box.value = message.bootstraps[0]
        box.select_all()
        self.status("Bootstrap servers: your newest stream's cluster. Enter loads its topics; typing replaces it.")

    # ---- the form ----

    def form(self) -> SourceForm:
        return SourceForm(
            bootstrap=self._value("bootstrap"),
            protocol=str(self.query_one("#protocol", Select).value),
            mechanism=str(self.query_one("#mechanism", Select).value),
            username=self._value("username"),
            password=self.query_one("#password", Input).value,  # as typed: spaces may matter
            ca_location=self._value("ca"),
            format=str(self.query_one("#format", Select).value),
            registry_url=self._value("registry"),
            registry_credentials=self.query_one("#registry-credentials", Input).value,
            mode=str(self.query_one("#mode", Select).value),
        )

    def _value(self, widget_id: str) -> str:
        return self.query_one(f"#{widget_id}", Input).value.strip()

    def topic(self) -> str | None:
        value = self.query_one("#topic", Select).value
        return None if value is Select.NULL else str(value)

    def check(self, need_topic: bool) -> tuple[KafkaSettings | None, Problems]:
        """The Kafka settings of the form and each field's mistake, shown next to the fields.

        Only adds: an error stays until its field is edited or a broker call succeeds.
        """
        kafka, problems = check_source(self.form(), self.topic(), need_topic)
        for name, text in problems.items():
            self.set_error(name, text + (TOPIC_HINT if name == Field.TOPIC else ""))
        return kafka, problems

    def set_error(self, name: str, text: str) -> None:
        show_error(self, name, text)

    def status(self, text: str, error: bool = False) -> None:
        self.query_one("#source-status", Label).update(Text(text, style="bold red" if error else ""))

    def focus_first(self, problems: Problems) -> None:
        for name in SOURCE_FIELDS:
            if name in problems:
                self.query_one(f"#{name}").focus()
                return

    def _post_if_current(self, message: Message) -> None:
        """Post from a worker unless a newer request of its group replaced it."""
        if not get_current_worker().is_cancelled:
            self.post_message(message)

    @on(Select.Changed, "#protocol")
    def sync_security(self) -> None:
        protocol = str(self.query_one("#protocol", Select).value)
        sasl, ssl = protocol.startswith("SASL"), protocol in ("SSL", "SASL_SSL")
        for widget_id, enabled in (("mechanism", sasl), ("username", sasl), ("password", sasl), ("ca", ssl)):
            self.query_one(f"#{widget_id}").disabled = not enabled
            if not enabled:
                self.set_error(widget_id, "")
        self.set_error("protocol", "")

    @on(Select.Changed, "#format")
    def sync_format(self) -> None:
        registered = str(self.query_one("#format", Select).value) in REGISTRY_FORMATS
        for widget_id in ("registry", "registry-credentials"):
            self.query_one(f"#{widget_id}").disabled = not registered
            self.set_error(widget_id, "")

    @on(Input.Changed, "#bootstrap, #username, #password, #ca, #registry, #registry-credentials")
    def edited(self, event: Input.Changed) -> None:
        self.set_error(event.input.id or "", "")

    # ---- topics ----

    @on(Input.Submitted, "#bootstrap, #username, #password, #ca, #registry, #registry-credentials")
    @on(Button.Pressed, "#load-topics")
    def load_topics_requested(self) -> None:
        kafka, problems = self.check(need_topic=False)
        if kafka is None:
            self.focus_first(problems)
            return
        self.status(f"Loading topics from {kafka.bootstrap}…")
        self.load_topics(kafka, self.app.settings.sample_timeout)

    @work(thread=True, exclusive=True, exit_on_error=False, group="wizard-topics", description="wizard: load topics")
    def load_topics(self, kafka: KafkaSettings, timeout: float) -> None:
        try:
            result = TopicsListed(kafka, list_topics(kafka, timeout))
        except Exception as exc:
            result = TopicsListed(kafka, [], *failure(exc, kafka))
        self._post_if_current(result)

    @on(TopicsListed)
    def topics_listed(self, message: TopicsListed) -> None:
        if message.error:
            self.set_error(message.where if message.where in SOURCE_FIELDS else "bootstrap", message.error)
            self.status("Could not load the topics.", error=True)
            return
        for name in ("bootstrap", "protocol", "ca"):
            self.set_error(name, "")
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
        self.status(f"{len(message.topics)} topics on {message.kafka.bootstrap}.")
        focused = self.screen.focused
        if message.topics and (focused is None or focused.id in ("bootstrap", "load-topics")):
            select.focus()

    @on(Select.Changed, "#topic")
    def topic_changed(self) -> None:
        self.set_error("topic", "")
        self.query_one("#sample-table", DataTable).clear()
        self.status("")
        topic = self.topic()
        self.post_message(TopicChosen(topic))
        if topic is not None:  # the table under the list shows what the chosen topic holds
            self.read_topic(move_focus=False)

    # ---- a look at the messages ----

    @on(Button.Pressed, "#test-connection")
    def test_connection_requested(self) -> None:
        self.read_topic(move_focus=True)

    def read_topic(self, move_focus: bool) -> None:
        """Read the newest messages of the chosen topic into the sample table, in a worker."""
        kafka, problems = self.check(need_topic=True)
        if kafka is None:
            if move_focus:
                self.focus_first(problems)
            return
        topic = self.topic() or ""
        self.query_one("#sample-table", DataTable).clear()
        self.status(f"Reading up to {PREVIEW_MESSAGES} messages of {topic}…")
        self.read_sample(kafka, topic, self.app.settings.sample_timeout)

    @work(thread=True, exclusive=True, exit_on_error=False, group="wizard-sample", description="wizard: test connection")
    def read_sample(self, kafka: KafkaSettings, topic: str, timeout: float) -> None:
        try:
            result = SampleRead(kafka, topic, preview(kafka, topic, PREVIEW_MESSAGES, timeout))
        except Exception as exc:
            result = SampleRead(kafka, topic, [], *failure(exc, kafka))
        self._post_if_current(result)

    @on(SampleRead)
    def sample_read(self, message: SampleRead) -> None:
        if message.topic != self.topic():
            return  # another topic was chosen since: its own read is on its way
        if message.error:
            self.set_error(message.where if message.where in SOURCE_FIELDS else "topic", message.error)
            self.status("Connection test failed.", error=True)
            return
        for name in ("bootstrap", "protocol", "ca", "topic"):
            self.set_error(name, "")
        table = self.query_one("#sample-table", DataTable)
        table.clear()
        for m in message.messages:
            table.add_row(str(m.partition), str(m.offset), preview_text(m.value), key=f"{m.partition}:{m.offset}")
        if message.messages:
            self.status(f"Connected to {message.kafka.bootstrap}: the newest "
                        f"{len(message.messages)} messages of {message.topic}.")
        else:
            self.status(f"Connected to {message.kafka.bootstrap}: {message.topic} is empty.")
