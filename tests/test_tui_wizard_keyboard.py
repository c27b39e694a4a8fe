"""The new-stream wizard by keyboard alone, against the real broker, catalog and state database.

Keys only (Pilot's `press`): no clicks, no widget values set from the test. What the test reads
(which option a list highlights, which control has the focus) only decides the next key.
"""

from __future__ import annotations

import asyncio

from appliance.config.settings import load_settings
from appliance.control.streams import create_stream
from appliance.state.store import StateStore
from tui.app import FloeApp
from tui.screens.new_stream import NewStreamScreen

from conftest import pizza_values
from tui_helpers import open_wizard, shown, text, until

NAV = "#wizard-nav Button"


def controls(screen, step_id: str) -> set[str]:
    """The ids of the controls a keyboard user must reach on the step shown: its enabled, displayed
    fields, lists, tables and buttons, and the wizard's own buttons."""
    found = [*screen.query_one(f"#{step_id}").query("Input, Select, Button, DataTable, Checkbox"), *screen.query(NAV)]
    return {w.id for w in found if w.display and not w.disabled}


async def tab_stops(pilot, key: str) -> list[str]:
    """The ids the focus visits pressing `key` until it is back where it started."""
    app = pilot.app
    start, stops = app.focused, []
    for _ in range(40):
        await pilot.press(key)
        stops.append(app.focused.id if app.focused is not None else None)
        if app.focused is start:
            return stops
    raise AssertionError(f"{key} never came back to {start}: {stops}")


async def assert_tab_reaches_every_control(pilot, screen, step_id: str) -> None:
    forward = await tab_stops(pilot, "tab")
    assert sorted(forward) == sorted(controls(screen, step_id)), forward  # each once, nothing else
    backward = await tab_stops(pilot, "shift+tab")
    assert backward[:-1] == list(reversed(forward[:-1])), backward


async def choose(pilot, select, prompt: str, opener: str = "enter") -> None:
    """Open the focused list with `opener`, move down to `prompt` with the arrow key, take it with Enter."""
    assert select.has_focus
    await pilot.press(opener)
    overlay = select.query_one("SelectOverlay")
    await until(pilot, lambda: select.expanded and overlay.has_focus, 5, "the list open")
    for _ in range(overlay.option_count):
        if str(overlay.get_option_at_index(overlay.highlighted).prompt) == prompt:
            break
        await pilot.press("down")
    await pilot.press("enter")
    await until(pilot, lambda: not select.expanded and select.has_focus, 5, "the list closed on its choice")


async def focus_by_tab(pilot, widget_id: str) -> None:
    for _ in range(40):
        if pilot.app.focused is not None and pilot.app.focused.id == widget_id:
            return
        await pilot.press("tab")
    raise AssertionError(f"Tab never reached #{widget_id}")


async def retype(pilot, value: str) -> None:
    await pilot.press("ctrl+u", *value)  # Ctrl+U clears the field left of the cursor, at its end after Tab


async def test_the_wizard_by_keyboard_alone(broker, topic):
    broker.produce(topic, pizza_values(6), partition=0)  # one partition: the sample holds every message
    settings = load_settings()
    await asyncio.to_thread(create_stream, settings, "taken", bootstrap=broker.bootstrap, topic=topic,
                            table="ingest.elsewhere")
    app = FloeApp(settings)
    async with app.run_test(size=(160, 50)) as pilot:
        screen = await open_wizard(app, pilot)  # `n`
        sections = app.screen_stack[0].query_one("#sections")

        # Step 1: Tab reaches every control and nothing else; Enter in the field loads the topics.
        await assert_tab_reaches_every_control(pilot, screen, "source")
        await pilot.press(*broker.bootstrap, "enter")
        select = screen.query_one("#topic")
        await until(pilot, lambda: "topics on" in text(screen.query_one("#source-status")), 30, "topics listed")
        await until(pilot, lambda: select.has_focus, 5, "focus on the topic list")
        # The app's own keys stay out of the form: a section key, and q, which would quit.
        await pilot.press("5", "q", "n")
        assert app.screen is screen and select.has_focus and sections.active == "streams"
        await choose(pilot, select, topic)
        assert select.value == topic
        sample = screen.query_one("#sample-table")
        await until(pilot, lambda: sample.row_count == 6, 30, "the chosen topic's messages in the sample")
        assert all('"order_id"' in str(sample.get_row_at(i)[2]) for i in range(6))
        assert "Connected to" in text(screen.query_one("#source-status"))
        await pilot.press("ctrl+n")
        await until(pilot, lambda: screen.step == 1, 10, "the target step")

        # Step 2: names another stream has are refused as they are typed, and Next with them.
        table = screen.query_one("#table")
        await until(pilot, lambda: table.has_focus, 5, "focus on the table name")
        await assert_tab_reaches_every_control(pilot, screen, "target")
        await retype(pilot, "elsewhere")
        await until(pilot, lambda: shown(screen, "table-error"), 10, "the taken table's problem")
        assert shown(screen, "table-error") == "table ingest.elsewhere is already written by stream 'taken'"
        assert shown(screen, "dlq-error") == "table ingest.elsewhere_dlq is already written by stream 'taken'"
        await pilot.press("ctrl+n")
        assert screen.step == 1 and table.has_focus
        await retype(pilot, "keyed_orders")
        await until(pilot, lambda: not shown(screen, "table-error"), 10, "the table's problem gone")
        await focus_by_tab(pilot, "stream")
        await retype(pilot, "taken")
        await until(pilot, lambda: shown(screen, "stream-error"), 10, "the taken stream name's problem")
        assert shown(screen, "stream-error") == "stream 'taken' already exists"
        assert screen.query_one("#stream").has_class("-invalid")
        await pilot.press("ctrl+n")
        assert screen.step == 1 and screen.query_one("#stream").has_focus
        await retype(pilot, "mine")
        await until(pilot, lambda: not shown(screen, "stream-error"), 10, "the stream name's problem gone")
        await focus_by_tab(pilot, "offsets")
        await choose(pilot, screen.query_one("#offsets"), "latest: only new messages", opener="space")
        await pilot.press("ctrl+n")
        await until(pilot, lambda: screen.step == 2, 10, "the mapping step")

        # Step 3: the inferred columns; the first one's type chosen from its list.
        mapping = screen.query_one("#mapping-table")
        await until(pilot, lambda: mapping.row_count == 6, 60, "inferred columns")
        await until(pilot, lambda: mapping.has_focus, 5, "focus on the mapping")
        await assert_tab_reaches_every_control(pilot, screen, "mapping")
        await focus_by_tab(pilot, "col-type")
        await choose(pilot, screen.query_one("#col-type"), "string")
        await until(pilot, lambda: str(mapping.get_row_at(0)[1]) == "string", 5, "order_id a string")
        await focus_by_tab(pilot, "create")
        await pilot.press("enter")
        await until(pilot, lambda: not isinstance(app.screen, NewStreamScreen), 60, "wizard closed after create")

    with StateStore(settings.state_db) as state:
        stream = state.stream("mine")
    assert (stream.topic, stream.table, stream.dead_letter_table) == (topic, "ingest.keyed_orders",
                                                                      "ingest.keyed_orders_dlq")
    assert stream.starting_offsets == "latest"
    assert {c.name: c.type for c in stream.mapping.columns}["order_id"] == "string"


async def test_a_topic_chosen_by_the_program_shows_its_sample_too(broker, topic):
    other = f"{topic}_b"
    broker.produce(topic, pizza_values(4), partition=0)
    broker.produce(other, [b'{"other": 1}', b'{"other": 2}'], partition=0)
    app = FloeApp(load_settings())
    async with app.run_test(size=(160, 50)) as pilot:
        screen = await open_wizard(app, pilot)
        await pilot.press(*broker.bootstrap, "enter")
        await until(pilot, lambda: "topics on" in text(screen.query_one("#source-status")), 30, "topics listed")
        select, sample = screen.query_one("#topic"), screen.query_one("#sample-table")
        select.value = topic
        await until(pilot, lambda: sample.row_count == 4, 30, "the topic's messages")
        select.value = other  # another topic: its own messages replace the first one's
        await until(pilot, lambda: sample.row_count == 2 and '"other"' in str(sample.get_row_at(0)[2]), 30,
                    "the other topic's messages")
        assert f"messages of {other}" in text(screen.query_one("#source-status"))
