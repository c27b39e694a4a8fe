"""The Stages section against a real engine, broker, catalog and Spark, driven by Textual's Pilot: the
live list (state, lineage, lag, rows in and out), pause, resume, delete, and the editor: its example
query (a placeholder), its preview and save, answered by the running engine (tests/test_stage_requests.py:
those answers, and the `floe stage` commands of their own that answer when no engine runs)."""

from __future__ import annotations

from textual.events import ScreenResume
from textual.widgets import Input, Select, TextArea

from appliance.config.settings import load_settings
from appliance.control.stages import create_stage
from appliance.control.streams import create_stream
from appliance.ingest.engine import Engine
from appliance.query.connection import run_query
from appliance.tables.catalog import Catalog
from tui.app import FloeApp
from tui.screens.confirm import ConfirmScreen
from tui.screens.stage_editor import EXAMPLE, StageEditorScreen

from conftest import pizza_values, wait_for
from tui_helpers import cell, showing, type_into, until


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
        stores = run_query(settings, "select count(*) n from prep.per_store").to_pylist()[0]["n"]
        assert cell(table, "per_store", "table_rows") == str(stores) and cell(table, "big", "table_rows") == str(big)

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


async def test_the_editor_previews_a_query_refuses_a_bad_one_and_saves_a_stage(broker, topic, running_engine):
    settings = load_settings()
    broker.produce(topic, pizza_values(150))
    create_stream(settings, "orders", bootstrap=broker.bootstrap, topic=topic, table="ingest.orders")
    # The running engine previews and checks for the editor, on this process's SparkSession: a `floe stage`
    # process of its own (a JVM's start) for each, when no engine runs, is test_stage_requests'.
    running_engine()
    wait_for(lambda: run_query(settings, "select count(*) n from ingest.orders").to_pylist()[0]["n"] == 150, 120,
             what="the stream's rows")
    listed_on_return: list[list[str]] = []  # the stages listed when the main screen shows again

    def returned(message) -> None:
        if isinstance(message, ScreenResume) and app.screen is app.screen_stack[0]:
            listed_on_return.append([k.value for k in app.query_one("#stages-table").rows])

    app = FloeApp(settings, "stages")
    async with app.run_test(size=(180, 50), message_hook=returned) as pilot:
        await until(pilot, lambda: "No stages yet" in shown(app, "#stages-empty"), 30, "the empty pane")
        app.query_one("#stages-table").focus()
        await pilot.press("n")
        await until(pilot, lambda: showing(app, StageEditorScreen), 5, "the editor")
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

        listed_on_return.clear()
        await pilot.press("ctrl+s")
        await until(pilot, lambda: not isinstance(app.screen, StageEditorScreen), 180, "saved and closed")
        # Listed the moment the list shows again, not once its next read comes back.
        await until(pilot, lambda: listed_on_return, 5, "the list shown again")
        assert listed_on_return[0] == ["by_status"]
        assert not app.query_one("#stages-empty").display
    assert Catalog(settings).exists("prep.by_status")


async def test_the_editor_shows_an_example_query_that_is_not_its_text(floe_home):
    settings = load_settings()
    app = FloeApp(settings, "stages", clock=False)
    async with app.run_test(size=(160, 45)) as pilot:
        app.query_one("#stages-table").focus()
        await pilot.press("n")
        editor = await until(pilot, lambda: showing(app, StageEditorScreen)
                             and app.screen.query_one("#stage-sql", TextArea), 10, "the editor")
        assert editor.text == "" and editor.placeholder == EXAMPLE
        await until(pilot, lambda: "orders per hour" in editor.render_line(0).text, 10, "the example shown")
        await pilot.press("f5")
        await until(pilot, lambda: "a query (a SELECT over source)" in shown(app, "#stage-status"), 10,
                    "the empty query told")
        editor.focus()
        await type_into(pilot, "select 1")
        await until(pilot, lambda: editor.text == "select 1", 10, "typed over the example, not after it")
        assert "orders per hour" not in editor.render_line(0).text


def source_table(settings, name: str = "ingest.orders") -> None:
    from appliance.config.settings import ensure_home
    from appliance.model.mapping import Column, Mapping
    from appliance.tables.iceberg_schemas import target_iceberg_schema

    ensure_home(settings)
    Catalog(settings).ensure_table(name, target_iceberg_schema(Mapping((Column("order_id", "long", ("order_id",)),))))


async def open_editor(app, pilot) -> StageEditorScreen:
    app.query_one("#stages-table").focus()
    await pilot.press("n")
    screen = await until(pilot, lambda: showing(app, StageEditorScreen) and app.screen, 10, "the editor")
    source = screen.query_one("#stage-source", Select)
    await until(pilot, lambda: ("ingest.orders", "ingest.orders") in source._options, 30, "tables listed")
    return screen


async def test_the_editor_says_at_once_what_f5_needs_and_its_placeholder_is_no_value(floe_home):
    settings = load_settings()
    source_table(settings)
    app = FloeApp(settings, "stages", clock=False)
    async with app.run_test(size=(160, 45)) as pilot:
        screen = await open_editor(app, pilot)
        table = screen.query_one("#stage-table", Input)
        assert table.value == "" and table.placeholder.startswith("e.g. ")  # an example, not a value
        screen.query_one("#stage-name", Input).value = "hourly"
        screen.query_one("#stage-source", Select).value = "ingest.orders"
        editor = screen.query_one("#stage-sql", TextArea)
        editor.text = "select order_id from source"
        editor.focus()
        await pilot.press("f5")
        # Said by the key itself, before any worker: no wait for it.
        assert shown(app, "#stage-status") == "A preview needs the table it writes (NAMESPACE.TABLE)."
        assert "NAMESPACE.TABLE" in shown(app, "#stage-table-error") and table.has_focus
        assert not screen.busy and not [w for w in app.workers if w.group == "stage-command"]
        table.value = "prep"
        await pilot.press("ctrl+s")
        assert shown(app, "#stage-status") == "Saving needs the table it writes as NAMESPACE.TABLE."
        editor.text = ""
        screen.query_one("#stage-name", Input).value = ""
        await pilot.press("f5")
        assert shown(app, "#stage-status") == ("A preview needs a stage name, the table it writes as NAMESPACE.TABLE "
                                               "and a query (a SELECT over source).")
        assert screen.query_one("#stage-name").has_focus


async def test_esc_asks_before_discarding_an_edited_stage_and_only_then(floe_home):
    settings = load_settings()
    source_table(settings)
    app = FloeApp(settings, "stages", clock=False)
    async with app.run_test(size=(160, 45)) as pilot:
        await open_editor(app, pilot)
        await pilot.press("escape")  # nothing typed: closed at once
        await until(pilot, lambda: app.screen is app.screen_stack[0], 5, "closed without a question")
        screen = await open_editor(app, pilot)
        screen.query_one("#stage-name", Input).value = "hourly"
        screen.query_one("#stage-sql", TextArea).focus()
        await pilot.press("s")
        await pilot.press("escape")  # from the SQL box
        await until(pilot, lambda: showing(app, ConfirmScreen), 5, "asked to discard")
        assert "Discard this new stage?" in shown(app, "#confirm-question")
        await pilot.press("n")  # kept, as it was
        await until(pilot, lambda: app.screen is screen, 5, "back in the editor")
        assert screen.query_one("#stage-name", Input).value == "hourly"
        assert screen.query_one("#stage-sql", TextArea).text == "s"
        await pilot.press("escape")
        await until(pilot, lambda: showing(app, ConfirmScreen), 5, "asked again")
        await pilot.press("y")
        await until(pilot, lambda: app.screen is app.screen_stack[0], 5, "discarded")


async def test_the_list_says_rows_out_are_over_all_runs_and_what_the_table_holds(floe_home):
    """A grouping stage rewrites its whole table each run: 330 runs of 10 groups are 3.3k rows out, and
    its table holds 10."""
    from pyiceberg.schema import Schema
    from pyiceberg.types import LongType, NestedField, StringType

    from appliance.stages.checks import Checked
    from appliance.state.store import StateStore

    settings = load_settings()
    source_table(settings)
    checked = Checked("group", [("status", "string"), ("n", "bigint")],
                      Schema(NestedField(1, "status", StringType(), required=False),
                             NestedField(2, "n", LongType(), required=False)))
    create_stage(settings, "per_status", source="ingest.orders", table="prep.per_status", checked=checked,
                 sql="select cast(order_id as string) as status, count(*) as n from source group by 1")
    with StateStore(settings.state_db) as state:  # as the engine writes it after its runs
        state.update_stage_status("per_status", rows_in_total=330, rows_out_total=3300, runs=330, table_rows=10)
    app = FloeApp(settings, "stages", clock=False)
    async with app.run_test(size=(200, 30)) as pilot:
        table = app.query_one("#stages-table")
        await until(pilot, lambda: table.row_count == 1, 10, "the stage listed")
        labels = {str(c.key.value): str(c.label) for c in table.columns.values()}
        assert labels["rows_out"] == "Rows out, all runs" and labels["rows_in"] == "Rows in, all runs"
        assert labels["table_rows"] == "Table rows"
        assert cell(table, "per_status", "rows_out") == "3.3k" and cell(table, "per_status", "table_rows") == "10"


async def test_a_stage_saved_through_the_running_engine_is_listed_the_moment_the_editor_closes(running_engine):
    """The engine checks the query and the editor closes at once: the list behind it must not wait for its
    next read (seconds on a loaded machine) to show the stage."""
    settings = load_settings()
    source_table(settings)
    running_engine()
    listed_on_return: list[list[str]] = []

    def returned(message) -> None:
        if isinstance(message, ScreenResume) and app.screen is app.screen_stack[0]:
            listed_on_return.append([k.value for k in app.query_one("#stages-table").rows])

    app = FloeApp(settings, "stages", clock=False)
    async with app.run_test(size=(180, 40), message_hook=returned) as pilot:
        await until(pilot, lambda: app.engine_alive, 120, "the engine alive")
        screen = await open_editor(app, pilot)
        screen.query_one("#stage-name", Input).value = "ids"
        screen.query_one("#stage-source", Select).value = "ingest.orders"
        screen.query_one("#stage-table", Input).value = "prep.ids"
        screen.query_one("#stage-sql", TextArea).text = "select order_id from source"
        listed_on_return.clear()
        await pilot.press("ctrl+s")
        await until(pilot, lambda: not isinstance(app.screen, StageEditorScreen), 180, "saved and closed")
        await until(pilot, lambda: listed_on_return, 5, "the list shown again")
        assert listed_on_return[0] == ["ids"]
