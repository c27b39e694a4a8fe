"""The stream detail screen against a real engine, broker and catalog, driven by Textual's Pilot."""


from rich.text import Text

from appliance.config.settings import load_settings
from appliance.control.streams import create_stream
from appliance.state.store import StateStore
from appliance.tables.catalog import Catalog
from tui.app import FloeApp
from tui.screens.audit_report import AuditScreen
from tui.screens.stream_detail import StreamDetailScreen

from conftest import pizza_values
from tui_helpers import cell, showing, until


def plain(table, row: str, column: str) -> str:
    """A cell as the user reads it: markup applied, escapes undone."""
    return Text.from_markup(cell(table, row, column)).plain


def rows(table, *columns: str) -> list[tuple[str, ...]]:
    return [tuple(plain(table, key.value, c) for c in columns) for key in table.rows]


def shown(widget) -> str:
    return str(widget.render())


async def test_detail_shows_batches_dead_letters_live_and_pauses(broker, topic, running_engine):
    settings = load_settings()
    broker.produce(topic, pizza_values(300) + [b"{bad", b"[1]", b"\xff\xfe not utf-8"], partition=0)
    create_stream(settings, "orders", bootstrap=broker.bootstrap, topic=topic, table="ingest.orders")
    running_engine()
    app = FloeApp(settings)
    async with app.run_test(size=(160, 50)) as pilot:
        streams = app.query_one("#streams-table")
        await until(pilot, lambda: cell(streams, "orders", "rows") == "300", 120, "300 rows in the streams pane")
        streams.focus()
        await pilot.press("enter")
        screen = await until(pilot, lambda: showing(app, StreamDetailScreen) and app.screen, 10, "detail")
        assert screen.stream_name == "orders"

        # Header: topic -> table, state, totals.
        head = screen.query_one("#detail-title")
        stats = screen.query_one("#detail-stats")
        await until(pilot, lambda: f"{topic} → table ingest.orders" in shown(head), 10, "topic -> table")
        await until(pilot, lambda: "rows 300" in shown(stats) and "dead letters 3" in shown(stats), 10, "totals")
        assert "running" in shown(stats) and "lag 0" in shown(stats)

        # Batches, newest first, with the snapshot each committed, and the lag after each.
        batches = screen.query_one("#batches-table")
        await until(pilot, lambda: batches.row_count >= 1, 10, "batch rows")
        table = Catalog(settings).table("ingest.orders")
        committed = {str(s.snapshot_id) for s in table.snapshots()}
        shown_batches = rows(batches, "messages", "rows", "dead", "snapshot", "lag")
        assert sum(int(b[0]) for b in shown_batches) == 303
        assert sum(int(b[1]) for b in shown_batches) == 300
        assert sum(int(b[2]) for b in shown_batches) == 3
        assert {b[3] for b in shown_batches} <= committed
        assert plain(batches, "0", "snapshot") == str(table.current_snapshot().snapshot_id)
        assert plain(batches, "0", "lag") == "0"
        assert any(screen.query_one("#rate-chart").data)

        # Dead letters from the dead-letter table: stage, position, raw value (UTF-8, bad bytes replaced).
        dead = screen.query_one("#dead-letters-table")
        await until(pilot, lambda: dead.row_count == 3, 60, "three dead letters")
        by_offset = {r[0]: r[1:] for r in rows(dead, "where", "stage", "error", "value")}
        assert set(by_offset) == {"0/300", "0/301", "0/302"}
        assert by_offset["0/300"][0] == "decode" and by_offset["0/300"][2] == "{bad"
        assert by_offset["0/301"][2] == "[1]" and by_offset["0/301"][1]
        assert by_offset["0/302"][2] == "\ufffd\ufffd not utf-8"
        assert plain(dead, "0", "where") == "0/302"  # newest first
        assert "offset 302" in shown(screen.query_one("#dead-letter-full"))  # the highlighted one, in full

        # Live: a new batch comes in on top and the dead-letter table is read again.
        broker.produce(topic, pizza_values(50, start=300) + [b'{"order_id": "not a number"}'], partition=0)
        await until(pilot, lambda: plain(batches, "0", "messages") == "51", 60, "the new batch on top")
        assert plain(batches, "0", "dead") == "1"
        await until(pilot, lambda: dead.row_count == 4, 60, "the new dead letter")
        assert plain(dead, "0", "where") == "0/353"
        assert '{"order_id": "not a number"}' == plain(dead, "0", "value")
        await until(pilot, lambda: "rows 350" in shown(stats), 10, "new totals")

        # The audit, from the detail: OK on the live tables, then FAILED once a row is duplicated.
        await pilot.press("a")
        audit = await until(pilot, lambda: showing(app, AuditScreen) and app.screen, 10, "the audit")
        verdict = audit.query_one("#audit-verdict")
        await until(pilot, lambda: "OK" in shown(verdict), 60, "the audit's verdict")
        assert "354 offsets" in shown(verdict) and "OK: 354 offsets" in shown(audit.query_one("#audit-report"))
        target = Catalog(settings).table("ingest.orders")
        target.append(target.scan(limit=1).to_arrow())
        await pilot.press("a")
        await until(pilot, lambda: "FAILED" in shown(verdict), 60, "the audit's second verdict")
        assert "1 duplicated" in shown(verdict) and "DUPLICATED: 1 offsets" in shown(audit.query_one("#audit-report"))
        await pilot.press("escape")
        await until(pilot, lambda: showing(app, StreamDetailScreen), 5, "back to the detail")

        # Pause and resume from the detail screen.
        state = StateStore(settings.state_db)
        try:
            await pilot.press("p")
            await until(pilot, lambda: state.stream("orders").paused, 10, "paused flag")
            await until(pilot, lambda: "paused" in shown(stats), 10, "paused shown")
            assert screen.query_one("#pause").disabled and not screen.query_one("#resume").disabled
            await pilot.click("#resume")
            await until(pilot, lambda: not state.stream("orders").paused, 10, "resumed flag")
            await until(pilot, lambda: "paused" not in shown(stats), 30, "resumed shown")
            kinds = [e.kind for e in state.events("orders")]
            assert kinds[:2] == ["stream_resumed", "stream_paused"]
        finally:
            state.close()

        await pilot.press("escape")
        await until(pilot, lambda: not isinstance(app.screen, StreamDetailScreen), 5, "back to the streams")
        assert app.query_one("#streams-table").row_count == 1


async def test_detail_of_a_stream_without_batches_or_dead_letters(broker, topic):
    settings = load_settings()
    broker.produce(topic, pizza_values(5))
    create_stream(settings, "quiet", bootstrap=broker.bootstrap, topic=topic, table="ingest.quiet")
    app = FloeApp(settings)
    async with app.run_test(size=(160, 50)) as pilot:
        streams = app.query_one("#streams-table")
        await until(pilot, lambda: streams.row_count == 1, 30, "the stream listed")
        streams.focus()
        await pilot.press("enter")
        screen = await until(pilot, lambda: showing(app, StreamDetailScreen) and app.screen, 10, "detail")
        title = screen.query_one("#dead-letters-title")
        await until(pilot, lambda: "Dead letters: none" in shown(title), 60, "no dead letters")
        assert "none yet" in shown(screen.query_one("#batches-title"))
        assert screen.query_one("#batches-table").row_count == 0
        assert "idle" in shown(screen.query_one("#detail-stats"))
        await pilot.press("escape")
        await until(pilot, lambda: not isinstance(app.screen, StreamDetailScreen), 5, "back")


def test_history_series_buckets_rate_and_carries_lag():
    import datetime as dt

    now = dt.datetime(2026, 1, 1, 0, 10, tzinfo=dt.timezone.utc)

    def at(seconds_ago):
        return (now - dt.timedelta(seconds=seconds_ago)).isoformat(timespec="milliseconds")

    from appliance.state.records import BatchRecord
    from appliance.views.streams import history_series

    def batch(seconds_ago, messages, lag):
        return BatchRecord(stream="s", started_at=at(seconds_ago), committed_at=at(seconds_ago), duration_ms=100,
                           messages=messages, rows=messages, dead_letter_rows=0, bytes=0, target_snapshot_id=1,
                           dead_letter_snapshot_id=None, offsets="{}", lag=lag)

    batches = [
        batch(400, 100, 900),  # before the window: the lag line starts here
        batch(12, 50, 40),
        batch(1, 20, None),  # recorded before lag was
    ]
    rate, lag = history_series(batches, now, buckets=6, width=5.0)
    assert rate == [0.0, 0.0, 0.0, 10.0, 0.0, 4.0]
    assert lag == [900.0, 900.0, 900.0, 40.0, 40.0, 40.0]
    assert history_series(batches, now, buckets=6, width=5.0, lag_now=3)[1][-1] == 3.0


async def test_detail_shows_the_format_registry_subject_and_schema_versions(broker, registry, topic, spark):
    from appliance.ingest.engine import Engine

    from proto_helpers import avro_serializer

    settings = load_settings()
    v1 = {"type": "record", "name": "Tick", "fields": [{"name": "n", "type": "long"}]}
    v2 = {**v1, "fields": [{"name": "n", "type": "long"}, {"name": "m", "type": ["null", "long"], "default": None}]}
    broker.produce(topic, [avro_serializer(registry, v1, topic)({"n": 1})], partition=0)
    create_stream(settings, "ticks", bootstrap=broker.bootstrap, topic=topic, table="ingest.ticks", format="avro",
                  schema_registry=registry.url, registry_options={"basic.auth.user.info": "me:hidden"})
    broker.produce(topic, [avro_serializer(registry, v2, topic)({"n": 2, "m": 3})], partition=0)
    Engine(settings, spark=spark).run(until_caught_up=True)
    app = FloeApp(settings)
    async with app.run_test(size=(160, 50)) as pilot:
        app.push_screen(StreamDetailScreen("ticks"))
        screen = await until(pilot, lambda: showing(app, StreamDetailScreen) and app.screen, 10, "detail")
        source = await until(pilot, lambda: screen.query("#detail-source").first(), 10, "the source line")
        try:
            await until(pilot, lambda: "versions seen v1, v2" in shown(source), 20, "schema versions")
        except AssertionError as exc:
            raise AssertionError(f"{exc}; the source line shows: {shown(source)!r}") from None
        text = shown(source)
        assert "format avro" in text and f"subject {topic}-value" in text and registry.url in text
        assert "schema evolution auto" in text and "hidden" not in text


async def test_a_detail_whose_every_read_outlasts_its_refresh_still_shows(floe_home, monkeypatch):
    """Under load a read of the detail can take more than the second between two: each read cancelled by the next
    showed nothing at all ("loading…" for good). A read still going is let finish; the next starts after it."""
    import time

    import tui.screens.stream_detail as detail_module
    from appliance.config.settings import ensure_home
    from appliance.core.clock import utcnow
    from appliance.kafka.settings import KafkaSettings
    from appliance.model.mapping import Column, Mapping
    from appliance.model.stream import StreamDef

    settings = load_settings()
    ensure_home(settings)
    with StateStore(settings.state_db) as state:
        state.add_stream(StreamDef(name="slow", id="slow", topic="slow-topic", kafka=KafkaSettings.create("h:9092"),
                                   format="json", table="ns.slow", dead_letter_table="ns.slow_dlq",
                                   mapping=Mapping((Column("id", "long", ("id",)),)), starting_offsets="earliest",
                                   start_positions={}, paused=False, created_at=utcnow().isoformat()))
    read = detail_module.stream_detail

    def slow_read(*args, **kwargs):
        time.sleep(1.6)  # every read outlasts the one-second refresh
        return read(*args, **kwargs)

    monkeypatch.setattr(detail_module, "stream_detail", slow_read)
    app = FloeApp(settings)
    async with app.run_test(size=(160, 50)) as pilot:
        app.push_screen(StreamDetailScreen("slow"))
        screen = await until(pilot, lambda: showing(app, StreamDetailScreen) and app.screen, 10, "detail")
        title = screen.query_one("#detail-title")
        await until(pilot, lambda: "slow-topic" in shown(title), 10, "the detail, read slower than it refreshes")
