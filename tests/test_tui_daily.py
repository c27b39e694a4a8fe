"""What a new user tripped over, driven by Textual's Pilot against a real catalog: Esc closes any screen
from any focus and the section keys do not act behind it, the section's table has the focus from the
start, the command palette knows Floe's commands, Ctrl+S exports in one step, the Query placeholder
names a table that exists, the footer and header say what is true of the engine, `floe demo`'s notices."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.parquet as pq
from textual.widgets import TextArea
from textual.worker import WorkerState

from appliance.config.settings import load_settings
from appliance.tables.catalog import Catalog
from tui.app import FloeApp
from tui.screens.stage_editor import StageEditorScreen
from tui.screens.stream_detail import StreamDetailScreen

from tui_helpers import showing, type_into, until


def toasts(app) -> list[str]:
    return [str(n.message) for n in app._notifications]


def highlighted(app) -> str:
    """The command the palette would run on Enter."""
    found = app.screen.query("CommandList")
    if not found or found.first().highlighted is None:
        return ""
    option = found.first().get_option_at_index(found.first().highlighted)
    return str(getattr(option.prompt, "plain", option.prompt)).strip()


def footer_keys(app) -> set[str]:
    return {b.action for _, b, enabled, _ in app.screen.active_bindings.values() if enabled and b.show}


def a_table(name: str = "ingest.orders") -> None:
    load_settings().home.mkdir(parents=True, exist_ok=True)
    catalog = Catalog(load_settings())
    catalog.iceberg.create_namespace_if_not_exists(name.split(".")[0])
    table = catalog.iceberg.create_table(name, schema=pa.schema([("id", pa.int64()), ("status", pa.string())]))
    table.append(pa.table({"id": pa.array([1, 2, 3], pa.int64()), "status": ["new", "paid", "new"]}))


async def test_esc_closes_the_stage_editor_from_its_text_box_and_no_section_key_acts_behind_it(floe_home):
    app = FloeApp(load_settings(), "stages")
    async with app.run_test(size=(160, 40)) as pilot:
        await until(pilot, lambda: app.focused is not None and app.focused.id == "stages-table", 10, "the focus")
        await pilot.press("n")
        editor = await until(pilot, lambda: showing(app, StageEditorScreen) and app.screen, 10, "editor")
        editor.query_one(TextArea).focus()
        await pilot.press("6")  # typed into the SQL box, not a section switch
        await pilot.press("escape")  # from inside the text box: the editor asks to discard what was typed
        await until(pilot, lambda: app.screen.__class__.__name__ == "ConfirmScreen", 5, "asked to discard")
        await pilot.press("y")
        await until(pilot, lambda: not isinstance(app.screen, StageEditorScreen), 5, "the editor closed")
        assert app.query_one("#sections").active == "stages"
        await pilot.press("n")
        await until(pilot, lambda: showing(app, StageEditorScreen), 10, "the editor again")
        app.screen.query_one("#stage-name").focus()
        await pilot.press("6", "2")  # into the name box, and never a section behind the editor
        assert app.query_one("#sections").active == "stages"
        app.screen.set_focus(None)
        await pilot.press("2")  # nothing has the focus: a section key, still not acting behind a screen
        assert app.query_one("#sections").active == "stages" and isinstance(app.screen, StageEditorScreen)
        await pilot.press("escape")  # asked to discard "62"
        await until(pilot, lambda: app.screen.__class__.__name__ == "ConfirmScreen", 5, "asked again")
        await pilot.press("y")
        await until(pilot, lambda: not isinstance(app.screen, StageEditorScreen), 5, "closed again")
        await pilot.press("2")
        assert app.query_one("#sections").active == "tables"


async def test_the_streams_table_has_the_focus_from_the_start_and_enter_opens_a_stream(floe_home):
    from test_tui_snapshots import MAPPING

    from appliance.kafka.settings import KafkaSettings
    from appliance.model.stream import StreamDef
    from appliance.state.store import StateStore

    with StateStore(load_settings().state_db) as state:
        state.add_stream(StreamDef(name="orders", id="id-orders", topic="orders",
                                   kafka=KafkaSettings.create("broker:9092"), format="json", table="ingest.orders",
                                   dead_letter_table="ingest.orders_dlq", mapping=MAPPING,
                                   starting_offsets="earliest", start_positions={0: 0}, paused=False,
                                   created_at="2026-11-21T10:00:00.000+00:00"))
    app = FloeApp(load_settings())
    async with app.run_test(size=(160, 40)) as pilot:
        table = app.query_one("#streams-table")
        await until(pilot, lambda: table.row_count == 1 and app.focused is table, 10, "the focused table")
        await pilot.press("enter")
        await until(pilot, lambda: showing(app, StreamDetailScreen), 10, "the stream's detail")
        await pilot.press("escape")
        await until(pilot, lambda: not isinstance(app.screen, StreamDetailScreen), 5, "back")
        await pilot.press("4")
        await until(pilot, lambda: app.focused is app.query_one("#events-table"), 5, "the events table focused")


async def test_the_command_palette_finds_floe_commands_and_runs_them(floe_home):
    a_table()
    app = FloeApp(load_settings(), "tables")
    async with app.run_test(size=(160, 40)) as pilot:
        tables = app.query_one("#tables-pane")
        await until(pilot, lambda: tables.selected == "ingest.orders", 20, "the table selected")
        await pilot.press("ctrl+p")
        await until(pilot, lambda: app.screen.__class__.__name__ == "CommandPalette", 5, "the palette")
        await type_into(pilot, "new stage")
        await until(pilot, lambda: highlighted(app).startswith("New stage"), 10, "New stage found")
        await pilot.press("enter")
        await until(pilot, lambda: showing(app, StageEditorScreen), 10, "the stage editor, from the palette")
        await pilot.press("escape")
        await until(pilot, lambda: not isinstance(app.screen, StageEditorScreen), 5, "closed")
        await pilot.press("ctrl+p")
        await until(pilot, lambda: app.screen.__class__.__name__ == "CommandPalette", 5, "the palette again")
        await type_into(pilot, "open the selected table")
        await until(pilot, lambda: highlighted(app).startswith("Open the selected table"), 10, "found")
        await pilot.press("enter")
        editor = app.query_one("#query-editor", TextArea)
        await until(pilot, lambda: editor.text == "select * from ingest.orders limit 100", 10, "the table in Query")
        assert app.query_one("#sections").active == "query"


async def test_query_placeholder_names_a_table_and_ctrl_s_exports_in_one_step(floe_home):
    a_table("ingest.pizza_orders")
    app = FloeApp(load_settings(), "query")
    async with app.run_test(size=(160, 40)) as pilot:
        editor = app.query_one("#query-editor", TextArea)
        await until(pilot, lambda: editor.placeholder == "select * from ingest.pizza_orders limit 100", 20,
                    "a placeholder of a table that exists")
        await pilot.press("ctrl+s")
        await until(pilot, lambda: any("Run a query first" in t for t in toasts(app)), 5, "nothing to export yet")
        editor.load_text("select * from ingest.pizza_orders order by id")
        editor.focus()
        await pilot.press("f5")
        results = app.query_one("#query-results")
        await until(pilot, lambda: results.row_count == 3, 30, "the result")
        await pilot.press("ctrl+s")
        await until(pilot, lambda: app.screen.__class__.__name__ == "ExportFormatScreen", 5, "the format asked")
        await pilot.press("p")
        done = await until(pilot, lambda: [t for t in toasts(app) if t.startswith("Exported 3 rows as PARQUET")], 20,
                           "the export")
    path = done[0].rsplit(" to ", 1)[1]
    assert pq.read_table(path).column("id").to_pylist() == [1, 2, 3]


async def test_the_footer_offers_start_engine_only_without_one_and_the_header_says_starting(floe_home):
    from appliance.control.processes import start_engine

    app = FloeApp(load_settings())
    async with app.run_test(size=(160, 40)) as pilot:
        label = app.query_one("#engine-status")
        await until(pilot, lambda: "engine stopped" in str(label.render()), 10, "stopped")
        assert "start_engine" in footer_keys(app)
    launch = start_engine(load_settings())
    try:
        app = FloeApp(load_settings(), notices=("Replaced the previous demo stream pizza_orders",),
                      engine_launch=launch)
        async with app.run_test(size=(160, 40)) as pilot:
            label = app.query_one("#engine-status")
            assert any("Replaced the previous demo stream" in t for t in toasts(app))
            await until(pilot, lambda: "engine starting" in str(label.render()) or app.engine_alive, 10, "starting")
            await until(pilot, lambda: "engine running" in str(label.render()), 120, "running")
            await until(pilot, lambda: "start_engine" not in footer_keys(app), 5, "no Start engine in the footer")
    finally:
        from appliance.control.processes import stop

        stop(launch.process)


GATHERING = "--textual-command-palette-gather-commands"  # the group of the palette's search workers


def searched(app) -> bool:
    """The open palette's search has ended: every provider answered (no search worker left pending or running),
    and it lists what they found."""
    return bool(offered(app)) and not any(w.group == GATHERING and w.state in (WorkerState.PENDING, WorkerState.RUNNING)
                                          for w in app.workers)


def offered(app) -> list[str]:
    """Every command the open palette lists."""
    found = app.screen.query("CommandList")
    if not found:
        return []
    listed = found.first()
    return [str(getattr(o.prompt, "plain", o.prompt)).strip().splitlines()[0] for o in
            (listed.get_option_at_index(i) for i in range(listed.option_count))]  # a name, then its help


async def test_the_palette_offers_start_the_engine_only_while_none_runs(floe_home):
    import os
    import threading

    from appliance.core.clock import now
    from appliance.core.vocabulary import EngineState
    from appliance.state.store import StateStore

    app = FloeApp(load_settings())
    async with app.run_test(size=(160, 40)) as pilot:
        label = app.query_one("#engine-status")
        await until(pilot, lambda: "engine stopped" in str(label.render()), 10, "stopped")
        await pilot.press("ctrl+p", *"engine")
        await until(pilot, lambda: "Start the engine" in offered(app), 10, "Start the engine offered")
        await pilot.press("escape")
        await until(pilot, lambda: app.screen.__class__.__name__ != "CommandPalette", 5, "the palette closed")
        stop = threading.Event()

        def beat() -> None:  # what a running engine writes, often enough never to look stale
            with StateStore(load_settings().state_db) as state:
                while not stop.is_set():
                    state.engine_heartbeat(os.getpid(), "local[2]", EngineState.RUNNING, now())
                    stop.wait(0.5)

        beating = threading.Thread(target=beat, daemon=True)
        beating.start()
        try:
            await until(pilot, lambda: "engine running" in str(label.render()), 10, "running")
            assert "start_engine" not in footer_keys(app)
            await pilot.press("ctrl+p", *"engine")
            await until(pilot, lambda: searched(app), 10, "every provider's answers")
            assert app.engine_alive and "Start the engine" not in offered(app)
        finally:
            stop.set()
            beating.join()


async def test_ctrl_s_asks_the_format_in_the_middle_with_the_likely_one_focused(floe_home):
    a_table("ingest.pizza_orders")
    app = FloeApp(load_settings(), "query", clock=False)
    async with app.run_test(size=(120, 40)) as pilot:
        editor = app.query_one("#query-editor", TextArea)
        editor.load_text("select * from ingest.pizza_orders order by id")
        editor.focus()
        await pilot.press("f5")
        await until(pilot, lambda: app.query_one("#query-results").row_count == 3, 30, "the result")
        for typed, likely in (("", "csv"), ("orders.parquet", "parquet")):
            if typed:
                app.query_one("#export-path").value = typed
            editor.focus()
            await pilot.press("ctrl+s")
            screen = await until(pilot, lambda: app.screen.__class__.__name__ == "ExportFormatScreen" and app.screen,
                                 5, "the format asked")
            box = await until(pilot, lambda: screen.query_one("#confirm-box").region, 5, "the box laid out")
            # In the middle, clear of the header: not in the top-left corner.
            assert abs((box.x + box.width / 2) - 60) <= 1 and abs((box.y + box.height / 2) - 20) <= 1, box
            assert app.focused is not None and app.focused.id == likely
            await pilot.press("enter")
            await until(pilot, lambda: [t for t in toasts(app) if t.startswith(f"Exported 3 rows as {likely.upper()}")],
                        20, f"the {likely} export")
