"""The Events pane against a real engine, broker and catalog, driven by Textual's Pilot."""

import asyncio
import re
import uuid

from rich.text import Text
from textual.widgets import Select

from appliance.config.settings import load_settings
from appliance.control.streams import create_stream, set_paused
from appliance.ingest.engine import Engine
from appliance.state.records import BatchRecord
from appliance.state.store import StateStore
from appliance.views.events import EventsFollower, dead_letter_bursts, events_feed
from tui.app import FloeApp
from tui.panes.streams import StreamsPane

from conftest import pizza_values
from tui_helpers import cell, until


def shown_events(table) -> list[tuple[str, str, str, str]]:
    """(level, stream, kind, message) of every row, top to bottom, as the user reads them."""
    return [
        tuple(Text.from_markup(cell(table, key.value, c)).plain for c in ("level", "stream", "kind", "message"))
        for key in table.rows
    ]


async def test_events_lists_created_and_bursts_live_and_filters_by_stream(broker, topic, spark):
    settings = load_settings()
    clicks_topic = f"t_{uuid.uuid4().hex[:10]}"
    # 20 of 120 messages are bad: a burst. The clicks are clean.
    broker.produce(topic, pizza_values(100) + [b"{bad", b"[1]"] * 10, partition=0)
    broker.produce(clicks_topic, pizza_values(50))
    create_stream(settings, "orders", bootstrap=broker.bootstrap, topic=topic, table="ingest.orders")
    create_stream(settings, "clicks", bootstrap=broker.bootstrap, topic=clicks_topic, table="ingest.clicks")
    Engine(settings, spark=spark).run(until_caught_up=True)

    app = FloeApp(settings)
    async with app.run_test(size=(160, 50)) as pilot:
        await pilot.press("4")
        assert app.query_one("#sections").active == "events"
        table = app.query_one("#events-table")
        await until(pilot, lambda: any(e[2] == "dead_letter_burst" for e in shown_events(table)), 30, "the burst")
        events = shown_events(table)
        assert ("info", "orders", "stream_created", f"stream created: {topic} -> ingest.orders") in events
        assert ("info", "clicks", "stream_created", f"stream created: {clicks_topic} -> ingest.clicks") in events
        assert ("info", "(engine)", "engine_stopped", "engine stopped") in events
        [burst] = [e for e in events if e[2] == "dead_letter_burst"]
        assert burst[:2] == ("warning", "orders")
        assert burst[3].startswith("20 of 120 messages (17%) went to the dead-letter table")
        assert "yellow" in cell(table, str(events.index(burst)), "level")  # warnings coloured
        # Newest first: the engine stopped after it started, and after the streams were created.
        kinds = [e[2] for e in events]
        assert kinds.index("engine_stopped") < kinds.index("engine_started") < kinds.index("stream_created")

        # Filter by stream with the keyboard: All streams, clicks, orders.
        select = app.query_one("#events-filter", Select)
        table.focus()  # the pane's keys work with the focus inside it
        await pilot.press("f")
        await until(pilot, lambda: select.expanded, 5, "the filter open")
        await pilot.press("down", "down", "enter")
        await until(pilot, lambda: select.value == "orders", 5, "orders chosen")
        await until(pilot, lambda: {e[1] for e in shown_events(table)} == {"orders"}, 10, "only orders")
        assert {e[2] for e in shown_events(table)} == {"stream_created", "dead_letter_burst"}

        # Live: a new event of the chosen stream appears on top; another stream's does not.
        await asyncio.to_thread(set_paused, settings, "clicks", True)
        await asyncio.to_thread(set_paused, settings, "orders", True)
        await until(pilot, lambda: shown_events(table)[0][2] == "stream_paused", 10, "orders paused on top")
        assert {e[1] for e in shown_events(table)} == {"orders"}

        # Back to every stream.
        select.value = "*"
        await until(pilot, lambda: {e[1] for e in shown_events(table)} >= {"orders", "clicks", "(engine)"}, 10, "all")
        assert [e[2] for e in shown_events(table)][:2] == ["stream_paused", "stream_paused"]


async def test_events_pane_shows_errors_in_red_and_the_full_message(floe_home):
    settings = load_settings()
    state = StateStore(settings.state_db)
    long = "KafkaError{code=_TRANSPORT,str=\"[thrd:localhost:1/bootstrap]: connection refused [/]\"} " + "x" * 300
    try:
        state.add_event("broker_unreachable", long, "orders", "error")
    finally:
        state.close()
    app = FloeApp(settings, start_section="events")
    async with app.run_test(size=(160, 50)) as pilot:
        table = app.query_one("#events-table")
        await until(pilot, lambda: table.row_count == 1, 10, "the event")
        assert "red" in cell(table, "0", "level")
        [(level, stream, kind, message)] = shown_events(table)
        assert (level, stream, kind) == ("error", "orders", "broker_unreachable")
        assert message.startswith('KafkaError{code=_TRANSPORT,str="[thrd:localhost:1/bootstrap]: connection refused [/]"}')
        assert message.endswith("…") and len(message) == 160  # one line in the table...
        full = str(app.query_one("#events-message").render())
        assert long in full  # ...in full below it
        assert "1 event, 1 error" in str(app.query_one("#events-count").render())


def test_dead_letter_bursts_are_derived_from_batches_and_merged(floe_home):
    settings = load_settings()
    state = StateStore(settings.state_db)
    try:
        def batch(stream, second, messages, dead):
            at = f"2026-01-01T00:{second // 60:02d}:{second % 60:02d}.000+00:00"
            state.record_batch(BatchRecord(stream=stream, started_at=at, committed_at=at, duration_ms=10,
                                           messages=messages, rows=messages - dead, dead_letter_rows=dead, bytes=0,
                                           target_snapshot_id=None, dead_letter_snapshot_id=None, offsets="{}",
                                           lag=None))

        batch("a", 0, 100, 9)  # under 10%: no burst
        batch("a", 1, 19, 19)  # too small a batch to count
        batch("a", 2, 100, 10)  # a burst...
        batch("a", 5, 200, 50)  # ...continued 3 s later: the same event
        batch("b", 6, 20, 2)  # another stream's
        batch("a", 200, 40, 40)  # minutes later: a new event
        bursts = dead_letter_bursts(state)
        assert [(e.stream, e.at[11:19], e.message) for e in bursts] == [
            ("a", "00:03:20", "40 of 40 messages (100%) went to the dead-letter table in one batch"),
            ("b", "00:00:06", "2 of 20 messages (10%) went to the dead-letter table in one batch"),
            ("a", "00:00:05", "60 of 300 messages (20%) went to the dead-letter table over 2 batches in 3s"),
        ]
        assert {e.kind for e in bursts} == {"dead_letter_burst"} and {e.level for e in bursts} == {"warning"}
        assert [e.stream for e in dead_letter_bursts(state, "b")] == ["b"]
        assert len({e.key for e in bursts}) == 3
    finally:
        state.close()
    feed = events_feed(settings, "a")
    assert [e.kind for e in feed.events] == ["dead_letter_burst", "dead_letter_burst"]
    assert feed.streams == []  # neither stream exists, nor has recorded events


async def test_an_unchanged_second_reads_nothing_new_and_changes_still_show(floe_home, monkeypatch):
    """With hundreds of streams and their events, the pane's refresh reads what changed: the events after the
    newest one shown (none, in an unchanged second), the list of streams only when a stream was created. New
    events still appear on top, and a new stream in the filter."""
    import sqlite3

    from appliance.core.clock import now
    from appliance.kafka.settings import KafkaSettings
    from appliance.model.stream import StreamDef

    from many_streams import MAPPING, fill, name_of

    settings = load_settings()
    fill(settings, 300)
    with StateStore(settings.state_db, durable=False) as state:
        for i in range(3000):
            state.add_event("stream_resumed", f"event {i}", name_of(i % 300))
    statements: list[str] = []
    real = sqlite3.connect

    def traced(*args, **kwargs):
        conn = real(*args, **kwargs)
        conn.set_trace_callback(statements.append)
        return conn

    monkeypatch.setattr(sqlite3, "connect", traced)
    app = FloeApp(settings, start_section="events")
    async with app.run_test(size=(160, 50)) as pilot:
        pane = app.query_one("#events-pane")
        table = app.query_one("#events-table")
        streams = app.query_one(StreamsPane)  # mounted behind, it reads once at its mount: not a refresh
        await until(pilot, lambda: table.row_count == 200 and len(pane.streams) == 300 and streams.views is not None,
                    20, "the events")
        assert shown_events(table)[0][3] == "event 2999"
        version = pane.shown_version
        statements.clear()
        await until(pilot, lambda: sum("newest" in s or "max(id)" in s for s in statements) >= 3, 20,
                    "three refreshes")
        reads = [s for s in statements if s.lstrip().lower().startswith("select")]
        assert not [s for s in reads if "distinct" in s.lower()], "the streams of every event read again"
        # Rows read, in either quoting: sqlite-utils writes "events", the state store [events] (what is newest, an
        # index's min and max, is the refresh's own look).
        assert not [s for s in reads if re.search(r'from [\["](events|batches)[\]"]', s.lower())], reads
        assert pane.shown_version == version  # nothing redrawn

        with StateStore(settings.state_db) as state:
            state.add_stream(StreamDef(name="zz_new", id="id-new", topic="zz", kafka=KafkaSettings.create("b:9092"),
                                       format="json", table="ingest.zz", dead_letter_table="ingest.zz_dlq",
                                       mapping=MAPPING, starting_offsets="earliest", start_positions={0: 0},
                                       paused=False, created_at=now()))
            state.add_event("stream_created", "a new one", "zz_new")
        await until(pilot, lambda: shown_events(table)[0][1:] == ("zz_new", "stream_created", "a new one"), 10,
                    "the new event on top")
        await until(pilot, lambda: "zz_new" in pane.streams, 10, "the new stream in the filter")
        assert len(pane.streams) == 301 and table.row_count == 200


def test_a_follower_reads_what_a_fresh_read_does_after_each_change(floe_home):
    """What the Events pane reads each second, a change at a time, is what reading everything again says."""
    settings = load_settings()
    follower = EventsFollower(settings)

    def batch(state, stream, second, messages, dead):
        at = f"2026-01-01T00:{second // 60:02d}:{second % 60:02d}.000+00:00"
        state.record_batch(BatchRecord(stream=stream, started_at=at, committed_at=at, duration_ms=10,
                                       messages=messages, rows=messages - dead, dead_letter_rows=dead, bytes=0,
                                       target_snapshot_id=None, dead_letter_snapshot_id=None, offsets="{}", lag=None))

    changes = [
        lambda s: batch(s, "a", 0, 100, 50),  # a burst...
        lambda s: batch(s, "a", 3, 100, 0),  # a clean batch: nothing changes
        lambda s: batch(s, "a", 5, 100, 30),  # ...the burst goes on: the same event, a new message
        lambda s: s.add_event("stream_paused", "paused", "a"),
        lambda s: batch(s, "b", 9, 40, 40),
        lambda s: [s.add_event("engine_started", f"started {i}") for i in range(5)],  # more than the limit
        lambda s: s.db.execute("delete from events where id = (select min(id) from events)"),  # pruned
        lambda s: s.db.execute("delete from batches where id = (select min(id) from batches)"),
    ]
    with StateStore(settings.state_db) as state:
        feeds = []
        for change in changes:
            change(state)
            mine, fresh = follower.read(), events_feed(settings, limit=200)
            assert (mine.events, mine.streams) == (fresh.events, fresh.streams)
            feeds.append(mine)
    assert feeds[1].version == feeds[0].version != feeds[2].version  # a clean batch changed nothing
    assert feeds[2].events[0].message.endswith("over 2 batches in 5s") and len(feeds[2].events) == 1
    assert feeds[-3].streams == ["a"] and feeds[-1].streams == [] and "paused" not in [e.message for e in feeds[-1].events]
    assert feeds[-1].events[-1].message.startswith("30 of 100 messages")  # the burst's first batch pruned
    small = EventsFollower(settings, limit=3)
    assert [e.message for e in small.read().events][:3] == ["started 4", "started 3", "started 2"]
    with StateStore(settings.state_db) as state:
        state.add_event("engine_started", "started 5")
    assert [e.message for e in small.read().events] == ["started 5", "started 4", "started 3"]
