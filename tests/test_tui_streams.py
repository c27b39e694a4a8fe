"""The Streams pane against a real engine, broker and catalog, driven by Textual's Pilot."""

import pytest
from textual.worker import Worker, WorkerState

from appliance.config.settings import load_settings
from appliance.control.streams import create_stream
from appliance.tables.catalog import Catalog
from tui.app import FloeApp

from conftest import pizza_values
from tui_helpers import cell, screen_text, until


async def test_streams_pane_shows_live_state_and_pauses_resumes_deletes(broker, topic, running_engine):
    settings = load_settings()
    broker.produce(topic, pizza_values(300) + [b"{bad"])
    create_stream(settings, "orders", bootstrap=broker.bootstrap, topic=topic, table="ingest.orders")
    running_engine()
    app = FloeApp(settings)
    async with app.run_test(size=(160, 40)) as pilot:
        table = app.query_one("#streams-table")
        await until(pilot, lambda: cell(table, "orders", "rows") == "300", 120, "300 rows shown")
        assert cell(table, "orders", "dlq") == "1"
        assert "running" in cell(table, "orders", "state")
        await until(pilot, lambda: "engine running" in str(app.query_one("#engine-status").render()), 10, "engine status")

        table.focus()
        await pilot.press("p")
        await until(pilot, lambda: "paused" in cell(table, "orders", "state"), 30, "paused state")
        await pilot.press("r")
        await until(pilot, lambda: "paused" not in cell(table, "orders", "state"), 30, "resumed state")

        await pilot.press("d")
        await until(pilot, lambda: app.screen.__class__.__name__ == "ConfirmScreen", 5, "confirmation")
        await pilot.press("y")
        await until(pilot, lambda: table.row_count == 0, 30, "stream removed")
        assert "No streams yet" in str(app.query_one("#streams-empty").render())
    assert not Catalog(settings).exists("ingest.orders")


@pytest.mark.parametrize("size", [(80, 50), (80, 24)])
async def test_help_scrolls_to_its_last_keys_by_keyboard_and_wheel(floe_home, size):
    """The help is taller than the terminal: its last rows (the Alerts keys) are reached by End, by
    PgDn and by the mouse wheel."""
    from textual.events import MouseScrollDown

    app = FloeApp(load_settings(), clock=False)
    async with app.run_test(size=size) as pilot:
        await pilot.press("question_mark")
        table = await until(pilot, lambda: app.screen.__class__.__name__ == "HelpScreen"
                            and app.screen.query_one("#help-table"), 5, "help screen")
        await until(pilot, lambda: "Send a test" not in screen_text(app) and table.region.height, 5, "laid out")
        assert app.focused is table
        await pilot.press("end")
        await until(pilot, lambda: "Send a test" in screen_text(app), 5, "the last key, after End")
        await pilot.press("home")
        await until(pilot, lambda: "Send a test" not in screen_text(app), 5, "back at the top")
        for _ in range(10):
            await pilot.press("pagedown")
        await until(pilot, lambda: "Send a test" in screen_text(app), 5, "the last key, after PgDn")
        await pilot.press("home")
        await until(pilot, lambda: "Send a test" not in screen_text(app), 5, "back at the top")
        x, y = table.region.center
        under, _ = app.get_widget_at(x, y)  # the wheel goes where the mouse is, as a terminal reports it
        for _ in range(40):
            under.post_message(MouseScrollDown(under, x, y, 0, 1, 0, False, False, False, screen_x=x, screen_y=y))
        await until(pilot, lambda: "Send a test" in screen_text(app), 5, "the last key, by the wheel")


async def test_help_lists_bindings_and_theme_toggles(floe_home):
    app = FloeApp(load_settings())
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.press("question_mark")
        await until(pilot, lambda: app.screen.__class__.__name__ == "HelpScreen", 5, "help screen")
        keys = [str(row[0]) for row in app.screen.query_one("#help-table").rows and
                [app.screen.query_one("#help-table").get_row(k) for k in app.screen.query_one("#help-table").rows]]
        assert "n" in keys and "p" in keys and "^t" in keys and "? / F1" in keys  # as the footer shows keys
        assert not [k for k in keys if "question_mark" in k or "ctrl+" in k], keys
        await pilot.press("escape")
        assert app.theme == "textual-dark"
        await pilot.press("ctrl+t")
        assert app.theme == "textual-light"
        await pilot.press("2")
        assert app.query_one("#sections").active == "tables"


async def test_an_engine_that_cannot_start_is_reported_on_screen(floe_home, monkeypatch):
    # The engine the UI starts inherits this environment: a Java that is not there.
    monkeypatch.setenv("JAVA_HOME", "/nonexistent/jdk")
    app = FloeApp(load_settings())
    async with app.run_test(size=(160, 40)) as pilot:
        await pilot.press("ctrl+e")
        await pilot.press("ctrl+e")  # impatient: the second press starts no second engine
        messages = lambda: [str(n.message) for n in app._notifications]  # noqa: E731
        assert await until(pilot, lambda: [m for m in messages() if "The engine is starting" in m], 10, "not twice")
        shown = await until(pilot, lambda: [m for m in messages() if "engine exited" in m], 60, "the engine's exit")
        assert "code 1" in shown[0] and "JAVA_HOME=/nonexistent/jdk has no bin/java" in shown[0], shown
        assert "engine stopped" in str(app.query_one("#engine-status").render())
    assert (floe_home / "logs" / "engine.out").read_text().count("JAVA_HOME") == 1


async def test_a_failing_refresh_is_reported_once_and_the_ui_carries_on(floe_home):
    """A worker that fails is a toast, not a silently stale view; a refresh failing every second says so once."""
    settings = load_settings()
    floe_home.mkdir(parents=True, exist_ok=True)
    settings.state_db.write_bytes(b"this is not a database" * 100)  # every read of the state fails
    app = FloeApp(settings)
    failed: list[str] = []  # every worker that failed, by group, as the app was told of it
    told = app.worker_changed

    def counted(worker: Worker, state: WorkerState) -> None:
        if state is WorkerState.ERROR:
            failed.append(worker.group)
        told(worker, state)

    app.worker_changed = counted
    async with app.run_test(size=(160, 40)) as pilot:
        failures = lambda: [n for n in app._notifications if n.title == "Background task failed"]  # noqa: E731
        await until(pilot, lambda: any("streams-load" in n.message for n in failures()), 20, "the failure reported")
        before = failed.count("streams-load")
        await until(pilot, lambda: failed.count("streams-load") >= before + 3, 20, "three more refreshes failing alike")
        shown = failures()
        assert all(n.severity == "error" and "not a database" in n.message for n in shown), shown
        groups = [n.message.split(":")[0] for n in shown]
        # Each pane's refresh fails on its own schedule, so several groups may be told: each once.
        assert "streams-load" in groups and len(set(groups)) == len(groups), groups

        settings.state_db.unlink()  # fixed: the next refresh works and says so
        empty = app.query_one("#streams-empty")
        await until(pilot, lambda: "No streams yet" in str(empty.render()), 20, "the pane refreshed again")
