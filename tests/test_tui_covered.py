"""The sections' screen is quiet while another screen covers it (Pilot, the real app)."""

from __future__ import annotations

from textual.screen import Screen

from appliance.config.settings import load_settings
from tui.app import FloeApp
from tui.screens.sections import SectionsScreen

from tui_helpers import open_wizard, until


async def test_the_sections_neither_read_nor_repaint_behind_the_wizard_and_wake_when_it_closes(floe_home,
                                                                                                monkeypatch):
    repaints: list[Screen] = []
    repaint = Screen._compositor_refresh

    def counted(screen: Screen) -> None:
        repaints.append(screen)
        return repaint(screen)

    monkeypatch.setattr(Screen, "_compositor_refresh", counted)
    app = FloeApp(load_settings())
    async with app.run_test(size=(160, 50)) as pilot:
        sections = app.screen
        assert isinstance(sections, SectionsScreen)
        await until(pilot, lambda: sections.timers(), 10, "the sections' timers running")
        wizard = await open_wizard(app, pilot)
        assert sections.timers() == []
        # Three seconds by the wizard's own clock: its cursor blinks every half second.
        cursor, blinks = wizard.query_one("#bootstrap"), []
        repaints.clear()

        def three_seconds() -> bool:
            if not blinks or blinks[-1] != cursor._cursor_visible:
                blinks.append(cursor._cursor_visible)
            return len(blinks) > 6

        await until(pilot, three_seconds, 30, "the wizard's cursor blinking for three seconds")
        # Before, the sections' once-a-second reads, the clock and hidden cursors repainted both screens in
        # full about five times a second.
        assert sum(screen is sections for screen in repaints) <= 1, len(repaints)
        assert sum(screen is wizard for screen in repaints) <= len(blinks) + 1
        await pilot.press("escape")
        await until(pilot, lambda: app.screen is sections and sections.timers(), 10,
                    "the sections' timers running again")
