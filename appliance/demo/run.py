"""`floe demo`: the embedded broker, pizza orders published to it, one stream, and the engine and UI on it."""

from __future__ import annotations

import datetime as dt
import threading
from typing import Callable

from appliance.config.settings import Settings
from appliance.control.answers import Answers
from appliance.control.patterns import discover_members
from appliance.control.processes import start_engine, stop
from appliance.control.streams import create_stream
from appliance.core import hints
from appliance.core.clock import age, utcnow
from appliance.core.errors import EngineBusy, StreamNotFound
from appliance.core.polling import poll
from appliance.core.vocabulary import StreamPhase
from appliance.demo.pizza import publish
from appliance.demo.resume import move_to, positions, restore_topic
from appliance.ingest.engine import Engine
from appliance.kafka.client import KafkaClient
from appliance.kafka.settings import KafkaSettings
from appliance.standins.broker import EmbeddedBroker
from appliance.state.store import StateStore

DEMO_STREAM = "pizza_orders"
DEMO_TABLE = "ingest.pizza_orders"
SAMPLE_BEFORE_CREATE = 100  # messages: enough for the mapping to be inferred from a fair sample


def status_line(settings: Settings) -> str:
    with StateStore(settings.state_db) as state:
        st = state.status(DEMO_STREAM)
    if st.updated_at is None:
        return "waiting for the engine..."
    seconds = age(st.last_commit_at, utcnow())
    since = f", last commit {seconds:.1f}s ago" if seconds is not None else ""
    error = f" | last error: {st.last_error}" if st.phase == StreamPhase.FAILED else ""
    return (
        f"{dt.datetime.now().strftime('%H:%M:%S')} {DEMO_STREAM}: {st.phase}, "
        f"{st.rows_total} rows, {st.dead_letter_total} dead letters, "
        f"{st.messages_per_s:.0f} msg/s, lag {st.lag or 0}{since}{error}"
    )


def _wait_for_sample(broker: EmbeddedBroker, stop_event: threading.Event) -> None:
    with KafkaClient(KafkaSettings.create(broker.bootstrap)) as client:
        def enough() -> bool:  # raises until the topic appears, with the first message
            return sum(w.high for w in client.watermarks(DEMO_STREAM).values()) >= SAMPLE_BEFORE_CREATE

        try:
            poll(enough, 30, 0.2, "the demo's first messages", sleep=stop_event.wait)
        except TimeoutError:  # a stream made from fewer messages still works
            pass


def run_demo(settings: Settings, rate: float, stop_event: threading.Event, out: Callable[[str], None],
             ui: Callable | None = None, spark: object | None = None) -> None:
    """Broker, publisher and stream in this process; then `ui(settings, section)` until the user
    quits it or, without a UI, a status line every 2 seconds until `stop_event` (the engine on
    `spark`, if given, else a session of its own). A demo stream left by an earlier demo resumes."""
    broker = EmbeddedBroker()
    out(f"embedded broker on {broker.bootstrap}; publishing {rate:g} pizza orders/s to topic {DEMO_STREAM}")
    publisher = threading.Thread(target=publish, args=(broker.producer(), DEMO_STREAM, rate, stop_event),
                                 daemon=True, name="demo-publisher")
    try:
        notices = _resume(settings, broker, out)
        publisher.start()
        if not notices:
            _create(settings, broker, stop_event, out)
        if ui is not None:
            _with_ui(settings, ui, stop_event, tuple(notices))
        else:
            _with_status_lines(settings, stop_event, out, spark)
    finally:
        stop_event.set()
        if publisher.is_alive():
            publisher.join(timeout=15)
        broker.close()


def _resume(settings: Settings, broker: EmbeddedBroker, out: Callable[[str], None]) -> list[str]:
    """The last demo's stream on this broker, its topic brought to where the stream stands (see
    `resume.py`); what to tell the user, or nothing when there is no demo stream to resume."""
    try:
        with StateStore(settings.state_db) as state:
            stream = state.stream(DEMO_STREAM)
    except StreamNotFound:
        return []
    upto = positions(settings, stream)
    out(f"resuming the demo stream {DEMO_STREAM} after the {sum(upto.values()):,} messages its tables hold: "
        "they and what was built on them are kept")
    restore_topic(broker.producer(), broker.bootstrap, stream.topic, upto)
    move_to(settings, DEMO_STREAM, broker.bootstrap)
    return [f"Resumed the demo stream {DEMO_STREAM}: its tables and what you built on them are kept, "
            f"and orders flow again"]


def _create(settings: Settings, broker: EmbeddedBroker, stop_event: threading.Event,
            out: Callable[[str], None]) -> None:
    _wait_for_sample(broker, stop_event)
    created = create_stream(settings, DEMO_STREAM, bootstrap=broker.bootstrap, topic=DEMO_STREAM, table=DEMO_TABLE)
    out(f"stream {DEMO_STREAM}: topic {DEMO_STREAM} -> {DEMO_TABLE}, mapping inferred from {created.sampled} messages:")
    out(created.stream.mapping_toml().rstrip())


def _with_ui(settings: Settings, ui: Callable, stop_event: threading.Event, notices: tuple[str, ...]) -> None:
    # With the UI, the engine is its own `floe run` process, as in production: the UI
    # owns the terminal, and Spark's JVM writes to a log file instead of over it.
    launch = start_engine(settings, log_name="demo-engine.out")
    try:
        ui(settings, "streams", notices=notices, engine_launch=launch)
    finally:
        stop_event.set()
        stop(launch.process)


def _with_status_lines(settings: Settings, stop_event: threading.Event, out: Callable[[str], None],
                       spark: object | None) -> None:
    engine = Engine(settings, spark=spark, answers=Answers, discover=discover_members)
    failure: list[BaseException] = []

    def run_engine() -> None:
        try:
            engine.run()
        except EngineBusy:
            out("another `floe run` holds this FLOE_HOME: it ingests the demo stream")
        except BaseException as exc:  # shown on the status line, the demo carries on
            failure.append(exc)

    engine_thread = threading.Thread(target=run_engine, daemon=True, name="demo-engine")
    engine_thread.start()
    out(f"ingesting; Ctrl-C to stop. Query it with:  {hints.DEMO_QUERY}")
    while not stop_event.wait(2.0):
        out(status_line(settings) if not failure else f"engine failed: {failure[0]}")
    engine.stop()
    engine_thread.join()
    out(status_line(settings))
