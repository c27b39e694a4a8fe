"""The Stages section against a real engine, broker, catalog and Spark, driven by Textual's Pilot: the
live list (state, lineage, lag, rows in and out), pause, resume, delete, and the editor: its example
query (a placeholder), its preview and save, which run `floe stage` commands of their own when no
engine runs (tests/test_stage_requests.py: the running engine's answers)."""

from __future__ import annotations

from textual.widgets import Input, Select, TextArea

from appliance.config.settings import load_settings
from appliance.control.stages import create_stage
from appliance.control.streams import create_stream
from appliance.ingest.engine import Engine
from appliance.query.connection import run_query
from appliance.tables.catalog import Catalog
from tui.app import FloeApp
from tui.screens.stage_editor import EXAMPLE, StageEditorScreen

from conftest import pizza_values
from tui_helpers import cell, until


def shown(app, selector: str) -> str:
    return str(app.screen.query_one(selector).render())


async def test_stages_section_lists_pauses_resumes_and_deletes(broker, topic, spark):
    settings = load_settings()
    broker.produce(topic, pizza_values(200))
    create_stream(settings, "pizza", bootstrap=broker.bootstrap, topic=topic, table="ingest.pizza")
    Engine(settings, spark=spark).run(until_caught_up=True)
    create_stage(settings, "big", source="ingest.pizza", sql="select store_id, amount from source where amount > 30",
                 table="prep.big", spark=spark)
    create_stage(settings, "per_store", source="prep.big",
                 sql="select store_id, count(*) as orders from source group by store_id", table="prep.per_store",
                 spark=spark)
    Engine(settings, spark=spark).run(until_caught_up=True)
    big = run_query(settings, "select count(*) n from prep.big").to_pylist()[0]["n"]
    app = FloeApp(settings, "stages")
    async with app.run_test(size=(180, 40)) as pilot:
        table = app.query_one("#stages-table")
        await until(pilot, lambda: table.row_count == 2, 30, "two stages")
        assert cell(table, "per_store", "lineage") == f"topic {topic} → ingest.pizza → big → prep.big → per_store → " \
                                                      "prep.per_store"
        assert cell(table, "per_store", "kind") == "grouping" and cell(table, "big", "kind") == "append"
        assert "up_to_date" in cell(table, "big", "state") and cell(table, "big", "lag") == "0"
        assert cell(table, "big", "rows_in") == "200" and cell(table, "big", "rows_out") == str(big)
        assert cell(table, "per_store", "rows_in") == str(big)

        table.focus()
        table.move_cursor(row=table.get_row_index("big"))
        await pilot.press("p")
        await until(pilot, lambda: "paused" in cell(table, "big", "state"), 30, "paused")
        await pilot.press("r")
        await until(pilot, lambda: "paused" not in cell(table, "big", "state"), 30, "resumed")
        await pilot.press("d")  # per_store reads big's table: refused, with the reason
        await until(pilot, lambda: app.screen.__class__.__name__ == "ConfirmScreen", 5, "confirmation")
        await pilot.press("y")
        await until(pilot, lambda: any("per_store" in str(n.message) and "delete it first" in str(n.message)
                                       for n in app._notifications), 30, "the refusal")
        table.move_cursor(row=table.get_row_index("per_store"))
        await pilot.press("d")
        await until(pilot, lambda: app.screen.__class__.__name__ == "ConfirmScreen", 5, "confirmation")
        await pilot.press("y")
        await until(pilot, lambda: table.row_count == 1, 30, "per_store deleted")
    assert not Catalog(settings).exists("prep.per_store") and Catalog(settings).exists("prep.big")


async def test_the_editor_previews_a_query_refuses_a_bad_one_and_saves_a_stage(broker, topic, spark):
    settings = load_settings()
    broker.produce(topic, pizza_values(150))
    create_stream(settings, "orders", bootstrap=broker.bootstrap, topic=topic, table="ingest.orders")
    Engine(settings, spark=spark).run(until_caught_up=True)
    app = FloeApp(settings, "stages")
    async with app.run_test(size=(180, 50)) as pilot:
        await until(pilot, lambda: "No stages yet" in shown(app, "#stages-empty"), 30, "the empty pane")
        app.query_one("#stages-table").focus()
        await pilot.press("n")
        await until(pilot, lambda: isinstance(app.screen, StageEditorScreen), 5, "the editor")
        screen = app.screen
        source = screen.query_one("#stage-source", Select)
        await until(pilot, lambda: ("ingest.orders", "ingest.orders") in source._options, 30, "tables listed")
        screen.query_one("#stage-name", Input).value = "by_status"
        source.value = "ingest.orders"
        screen.query_one("#stage-table", Input).value = "prep.by_status"
        editor = screen.query_one("#stage-sql", TextArea)
        editor.text = "select status, count(*) as n from source order by n"
        await pilot.press("f5")
        await until(pilot, lambda: "ORDER BY" in shown(app, "#stage-status"), 120, "the refusal")

        editor.text = "select status, count(*) as n from source group by status"
        await pilot.press("f5")
        grid = screen.query_one("#stage-preview")
        await until(pilot, lambda: grid.row_count > 0, 180, "the preview's rows")
        assert "group stage" in shown(app, "#stage-status")
        counts = {str(grid.get_row_at(i)[0]): int(str(grid.get_row_at(i)[1])) for i in range(grid.row_count)}
        assert sum(counts.values()) == 150

        await pilot.press("ctrl+s")
        await until(pilot, lambda: not isinstance(app.screen, StageEditorScreen), 180, "saved and closed")
        table = app.query_one("#stages-table")
        await until(pilot, lambda: "by_status" in [k.value for k in table.rows], 30, "the new stage listed")
    assert Catalog(settings).exists("prep.by_status")


async def test_the_editor_shows_an_example_query_that_is_not_its_text(floe_home):
    settings = load_settings()
    app = FloeApp(settings, "stages", clock=False)
    async with app.run_test(size=(160, 45)) as pilot:
        app.query_one("#stages-table").focus()
        await pilot.press("n")
        editor = await until(pilot, lambda: isinstance(app.screen, StageEditorScreen)
                             and app.screen.query_one("#stage-sql", TextArea), 10, "the editor")
        assert editor.text == "" and editor.placeholder == EXAMPLE
        await until(pilot, lambda: "orders per hour" in editor.render_line(0).text, 10, "the example shown")
        await pilot.press("f5")
        await until(pilot, lambda: "The query is empty" in shown(app, "#stage-status"), 10, "the empty query told")
        editor.focus()
        await pilot.press(*"select 1")
        await until(pilot, lambda: editor.text == "select 1", 10, "typed over the example, not after it")
        assert "orders per hour" not in editor.render_line(0).text
