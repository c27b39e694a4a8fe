"""Helpers for Pilot tests: wait on what the screen shows, with a deadline."""

from __future__ import annotations

from typing import Callable

from appliance.core.polling import poll_async

from conftest import LEAST_WAIT


async def until(pilot, condition: Callable[[], object], timeout: float = 60.0, what: str = "condition"):
    """`conftest.wait_for` between the Pilot's pauses: the app keeps running while it waits. At least
    `conftest.LEAST_WAIT` seconds, whatever the test asks."""
    return await poll_async(condition, max(timeout, LEAST_WAIT), pilot.pause, 0.1, what, error=AssertionError)


def cell(table, row: str, column: str) -> str:
    return str(table.get_cell(row, column))


async def engine_checked(pilot, timeout: float = 30.0) -> None:
    """A snapshot waits for the header's first engine check: a loaded machine paints "checking…" otherwise."""
    def checked():
        return "checking" not in str(pilot.app.query_one("#engine-status").render())

    await until(pilot, checked, timeout, "the engine status in the header")
    await pilot.pause()


def text(widget) -> str:
    return str(widget.render())


def shown(screen, error_id: str) -> str:
    """The text of an error Label under a field of the new-stream wizard, or "" when it is hidden."""
    label = screen.query_one(f"#{error_id}")
    return text(label) if label.has_class("-shown") else ""


async def open_wizard(app, pilot):
    """`n` opens the new-stream wizard, its first field focused."""
    from tui.screens.new_stream import NewStreamScreen

    await pilot.press("n")
    screen = await until(pilot, lambda: showing(app, NewStreamScreen) and app.screen, 10, "the wizard")
    await until(pilot, lambda: screen.query_one("#bootstrap").has_focus, 5, "focus on bootstrap")
    return screen


def screen_text(app) -> str:
    """What the terminal shows, as plain text (from the screenshot Textual would save)."""
    import html
    import re

    return html.unescape(re.sub(r"<[^>]+>", "", app.export_screenshot())).replace("\xa0", " ")


def showing(app, screen_class) -> object:
    """The app's screen when it is a `screen_class` composed and mounted (a screen just pushed has no
    children to query yet); else None."""
    screen = app.screen
    return screen if isinstance(screen, screen_class) and screen.is_mounted else None


async def type_into(pilot, value: str) -> None:
    """Text into the focused field as the terminal hands over a paste (one event, as Textual's driver posts
    it); where no text field has the focus (a list's type-to-search), key by key. The wizard's keyboard test
    types every key; the other tests' text arrives in one piece, not at a tenth of a second a key."""
    from textual import events
    from textual.widgets import Input, TextArea

    if isinstance(pilot.app.focused, (Input, TextArea)):
        pilot.app._driver.send_message(events.Paste(value))
        await pilot.pause()
    else:
        await pilot.press(*value)

