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
        # A timer its owner runs and stops itself (the Query section's, while a query runs): running when the
        # wizard opens, stopped by its owner meanwhile, it must stay stopped when the sections come back.
        ticker = app.query_one("#query-pane")._ticker
        ticker.resume()
        wizard = await open_wizard(app, pilot)
        assert sections.timers() == []
        ticker.pause()  # the query ended behind the wizard
        # Three seconds by the wizard's own clock: its cursor blinks every half second.
        cursor, blinks = wizard.query_one("#bootstrap"), []

        def three_seconds() -> bool:
            if not blinks or blinks[-1] != cursor._cursor_visible:
                blinks.append(cursor._cursor_visible)
                if len(blinks) == 2:
                    # Counted from the cursor's first blink: a repaint the sections had scheduled before the
                    # wizard covered them may land just after it opens on a loaded machine (CI saw one).
                    repaints.clear()
            return len(blinks) > 7

        await until(pilot, three_seconds, 30, "the wizard's cursor blinking for three seconds")
        # Before, the sections' once-a-second reads, the clock and hidden cursors repainted both screens in
        # full about five times a second.
        assert sum(screen is sections for screen in repaints) <= 1, len(repaints)
        assert sum(screen is wizard for screen in repaints) <= len(blinks) + 1
        await pilot.press("escape")
        await until(pilot, lambda: app.screen is sections and sections.timers(), 10,
                    "the sections' timers running again")
        assert not ticker._active.is_set()


async def test_tab_through_a_form_keeps_the_footer_and_a_change_of_keys_recomposes_it(floe_home, monkeypatch):
    """Textual's footer was made again at every focus change (each Tab through the wizard: most of the
    keyboard test's time); now only when the keys it shows change."""
    from textual.widgets import Footer as TextualFooter

    from tui.widgets.footer import Footer, shown_keys

    recomposed: list[TextualFooter] = []
    recompose = TextualFooter.recompose

    async def counted(footer: TextualFooter) -> None:
        recomposed.append(footer)
        await recompose(footer)

    monkeypatch.setattr(TextualFooter, "recompose", counted)
    app = FloeApp(load_settings())
    async with app.run_test(size=(160, 50)) as pilot:
        wizard = await open_wizard(app, pilot)
        footer = wizard.query_one(Footer)
        await until(pilot, lambda: footer.query("FooterKey"), 10, "the wizard's footer keys")
        recomposed.clear()
        visited, keys, changes = set(), shown_keys(wizard), 0
        for _ in range(8):
            await pilot.press("tab")
            await pilot.pause()
            visited.add(app.focused.id)
            now = shown_keys(wizard)
            changes, keys = changes + (now != keys), now
        assert len(visited) > 4 and changes < len(visited)  # most fields show the same keys
        assert len([f for f in recomposed if f is footer]) <= changes
        await pilot.press("escape")  # the sections' footer: other keys, shown at once
        sections_footer = app.screen.query_one(Footer)
        await until(pilot, lambda: any("New stream" in str(key.render()) for key in sections_footer.query("FooterKey")),
                    10, "the sections' keys in their footer")
