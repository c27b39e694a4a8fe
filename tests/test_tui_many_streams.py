"""The Streams section, a stream's detail and the Events section with 500 streams (issue 32), driven by
Textual's Pilot. The streams are written straight into the state database (tests/many_streams.py): no broker,
no engine; with no engine running they show as `stopped`, except the paused and the failed."""

from __future__ import annotations

import time

from textual.widgets import DataTable

from appliance.config.settings import ensure_home, load_settings
from appliance.state.store import StateStore
from appliance.views.streams import select_streams, streams_overview
from tui.app import FloeApp
from tui.format import count
from tui.screens.stream_detail import StreamDetailScreen

from many_streams import STREAMS, fill, name_of
from tui_helpers import cell, showing, text, type_into, until

PAUSED = [i for i in range(STREAMS) if i % 7 == 0]
FAILED = [i for i in range(STREAMS) if i % 10 == 3 and i % 7]  # a paused stream shows paused, not failed


def keys(table: DataTable) -> list[str]:
    return [row.key.value for row in table.ordered_rows]


def many_streams():
    settings = load_settings()
    ensure_home(settings)
    fill(settings)
    return settings


async def test_500_streams_summed_filtered_sorted_and_refreshed_in_place(floe_home):
    settings = many_streams()
    app = FloeApp(settings, clock=False)
    async with app.run_test(size=(170, 40)) as pilot:
        pane = app.query_one("#streams-pane")
        table = app.query_one("#streams-table", DataTable)
        await until(pilot, lambda: table.row_count == STREAMS, 60, "500 rows")
        assert keys(table) == sorted(name_of(i) for i in range(STREAMS))  # by name at first

        # The summary line, against the figures tests/many_streams.py wrote (a paused stream reads 0 msg/s).
        stopped = STREAMS - len(PAUSED) - len(FAILED)
        summary = text(app.query_one("#streams-summary"))
        assert summary.startswith(f"500 streams: {stopped} stopped · {len(PAUSED)} paused · {len(FAILED)} failed"), \
            summary
        assert f"{count(sum(i % 50 for i in range(STREAMS) if i % 7))} msg/s" in summary
        assert f"lag {count(sum(range(STREAMS)))}" in summary
        assert summary.endswith(f"{len(FAILED)} streams with errors"), summary

        # `/` filters by name as `floe stream list --name` does; Esc clears it.
        table.focus()
        await pilot.press("slash")
        name_filter = app.query_one("#streams-filter")
        await until(pilot, lambda: name_filter.has_focus, 10, "the filter has the focus")
        await type_into(pilot, "ERS_12")
        expected = ["orders_121", "orders_123", "orders_125", "orders_127", "orders_129"]
        await until(pilot, lambda: keys(table) == expected, 10, "the rows the filter picks")
        assert [v.name for v in select_streams(streams_overview(settings), "ERS_12")] == expected
        assert "5 of 500 shown" in text(app.query_one("#streams-order"))
        await pilot.press("enter")  # kept, and the list has the focus again
        await until(pilot, lambda: table.has_focus, 10, "the list focused")
        assert keys(table) == expected and name_filter.value == "ERS_12"
        await pilot.press("escape")
        await until(pilot, lambda: table.row_count == STREAMS, 10, "every row back")
        assert name_filter.value == "" and not name_filter.display and table.has_focus

        # `s` goes round name, rate, lag, errors: each order the view's, the cursor on its stream.
        table.move_cursor(row=200)
        await pilot.pause()
        assert keys(table)[200] == "clicks_400"
        views = streams_overview(settings)
        for sort in ("rate", "lag", "errors", "name"):
            await pilot.press("s")
            order = [v.name for v in select_streams(views, sort=sort)]
            await until(pilot, lambda order=order: keys(table) == order, 10, f"sorted by {sort}")
            assert f"sorted by {sort}" in text(app.query_one("#streams-order"))
            assert keys(table)[table.cursor_row] == "clicks_400", sort
        assert keys(table)[:2] == ["clicks_000", "clicks_002"] and table.cursor_row == 200
        await pilot.press("s", "s")  # by lag, largest first
        await until(pilot, lambda: keys(table)[0] == "orders_499", 10, "sorted by lag")
        await pilot.press("s", "s")  # by name again

        # A refresh with one stream changed: that row's cells change, no row is added or removed, the cursor
        # and the scroll stay.
        await until(pilot, lambda: keys(table) == sorted(keys(table)) and table.cursor_row == 200, 10, "by name")
        await until(pilot, lambda: table.scroll_y > 0 and not app.animator.is_being_animated(table, "scroll_y"), 10,
                    "scrolled to the cursor's row")
        rows = [row.key for row in table.ordered_rows]
        scroll = table.scroll_y
        assert scroll > 0  # row 200 of 500 is below the first screen
        timings: list[float] = []
        present = pane.present

        def timed() -> None:
            started = time.perf_counter()
            present()
            timings.append(time.perf_counter() - started)

        pane.present = timed
        with StateStore(settings.state_db) as state:
            state.update_status("clicks_400", phase="failed", last_error="disk on fire")
        await until(pilot, lambda: "failed" in cell(table, "clicks_400", "state"), 20, "the changed row")
        assert cell(table, "clicks_400", "error") == "disk on fire"
        assert all(a is b for a, b in zip([row.key for row in table.ordered_rows], rows, strict=True))
        assert table.cursor_row == 200 and table.scroll_y == scroll
        assert f"{len(FAILED) + 1} failed" in text(app.query_one("#streams-summary"))
        # What a refresh costs the UI thread with 500 rows (scripts/bench_many_streams_ui measures it: a few
        # hundredths of a second); generous for a loaded machine.
        assert timings and max(timings) < 2.0, timings


async def test_detail_and_events_with_500_streams(floe_home):
    """A stream's detail opens from the 500 and reads only its own tables; Events offers every stream."""
    settings = many_streams()
    app = FloeApp(settings, clock=False)
    async with app.run_test(size=(170, 40)) as pilot:
        table = app.query_one("#streams-table", DataTable)
        await until(pilot, lambda: table.row_count == STREAMS, 60, "500 rows")
        table.focus()
        table.move_cursor(row=STREAMS - 1)
        await pilot.press("enter")
        screen = await until(pilot, lambda: showing(app, StreamDetailScreen), 10, "the detail")
        assert screen.stream_name == "orders_499"
        batches = screen.query_one("#batches-table", DataTable)
        await until(pilot, lambda: batches.row_count == 3, 20, "its three batches")
        await pilot.press("escape")
        await pilot.press("4")
        events = app.query_one("#events-pane")
        await until(pilot, lambda: len(events.streams) == STREAMS, 20, "every stream in the events' filter")


async def test_a_refresh_that_narrows_cells_of_every_row_measures_each_changed_cell_once():
    """A DataTable asked to fit a cell narrower than its column measures the whole column again: with every
    row's age narrower at once (500 rows: "10s ago" -> "9s ago"), that was 500 x 500 cells measured per
    refresh, seconds of the UI thread each second. `put_rows` measures only what may widen a column."""
    import textual.widgets._data_table as data_table
    from textual.app import App

    from tui.widgets.rows import put_rows

    class OneTable(App):
        def compose(self):
            table = DataTable()
            table.add_column("Stream", key="stream")
            table.add_column("Last commit", key="commit")
            yield table

    app = OneTable()
    async with app.run_test() as pilot:
        table = app.query_one(DataTable)
        put_rows(table, {f"s{i:03d}": {"stream": f"s{i:03d}", "commit": "10s ago"} for i in range(STREAMS)})
        await pilot.pause()
        measured = 0
        real = data_table.measure

        def counting(*args, **kwargs):
            nonlocal measured
            measured += 1
            return real(*args, **kwargs)

        data_table.measure = counting
        try:
            put_rows(table, {f"s{i:03d}": {"stream": f"s{i:03d}", "commit": "9s ago"} for i in range(STREAMS)})
            await pilot.pause()
        finally:
            data_table.measure = real
        assert str(table.get_cell("s499", "commit")) == "9s ago"
        assert measured < 5 * STREAMS, measured


def test_a_streams_dead_letters_are_read_from_its_own_table_alone(floe_home):
    """The detail's dead letters open their one table, not the catalog's hundreds: another table that cannot be
    read (its metadata gone) does not stop them."""
    import shutil

    from appliance.tables.catalog import Catalog
    from appliance.tables.iceberg_schemas import dead_letter_iceberg_schema
    from appliance.views.dead_letters import dead_letters

    settings = load_settings()
    ensure_home(settings)
    fill(settings, 4)
    catalog = Catalog(settings)
    catalog.ensure_table("sales.orders_003_dlq", dead_letter_iceberg_schema())
    other, _ = catalog.ensure_table("sales.orders_001_dlq", dead_letter_iceberg_schema())
    shutil.rmtree(other.location().removeprefix("file://") + "/metadata")
    assert dead_letters(settings, "orders_003") == []
