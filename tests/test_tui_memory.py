"""A UI left open for hours must not grow: live refreshes update cells in place.

Textual's own render caches are LRU-bounded (they fill up, then stay flat), so the check
is on what Floe could leak: widgets, rows, workers and pending messages must not pile up
as refreshes go by.
"""

from appliance.config.settings import load_settings
from appliance.core.clock import now
from appliance.kafka.settings import KafkaSettings
from appliance.model.mapping import Column, Mapping
from appliance.model.stream import StreamDef
from appliance.state.store import StateStore
from appliance.views.streams import streams_overview
from tui.app import FloeApp
from tui.panes.streams import StreamsLoaded, StreamsPane


def add_streams(settings, n):
    state = StateStore(settings.state_db)
    for i in range(n):
        state.add_stream(StreamDef(
            name=f"s{i}", id=f"id{i}", topic=f"t{i}", kafka=KafkaSettings.create("127.0.0.1:9092"), format="json",
            table=f"ingest.t{i}", dead_letter_table=f"ingest.t{i}_dlq",
            mapping=Mapping((Column("a", "long", ("a",)),)), starting_offsets="earliest",
            start_positions={0: 0}, paused=False, created_at=now()))
    return state


async def test_live_refreshes_do_not_pile_up(floe_home):
    settings = load_settings()
    settings.home.mkdir(parents=True, exist_ok=True)
    state = add_streams(settings, 5)
    app = FloeApp(settings)
    async with app.run_test(size=(160, 40)) as pilot:
        pane = app.query_one(StreamsPane)
        table = app.query_one("#streams-table")

        async def cycles(n):
            for i in range(n):
                for s in range(5):  # the numbers change every time, as they do live
                    state.update_status(f"s{s}", phase="running", rows_total=i * 100 + s, lag=i % 7,
                                        messages_per_s=float(i % 13), last_commit_at=now())
                pane.show(StreamsLoaded(streams_overview(settings)))
                await pilot.pause()

        await cycles(5)
        widgets = len(list(app.query("*")))
        await cycles(40)
        assert len(list(app.query("*"))) == widgets, "refreshes added widgets"
        assert table.row_count == 5
        assert str(table.get_cell("s4", "rows")) == "3.9k"
        assert len(app.workers) <= 4, f"workers piling up: {list(app.workers)}"
        assert app._message_queue.qsize() < 50
        for cache in (table._row_render_cache, table._cell_render_cache, table._line_cache):
            assert cache.maxsize and len(cache) <= cache.maxsize  # bounded: full caches stay flat
