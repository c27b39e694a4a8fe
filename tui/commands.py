"""Floe's commands in the command palette (Ctrl+P): the sections, creating things, and acting on what
is selected, each found by typing a word of it ("stream", "stage", "new", "audit"...).

The app is Floe's (`tui.app.FloeApp`, which lists this provider): its actions and panes are used by
name, so this module needs no import of the app's."""

from __future__ import annotations

from functools import partial
from typing import Callable

from textual.app import App
from textual.command import DiscoveryHit, Hit, Hits, Provider

from appliance.core import hints

SECTIONS = ("streams", "tables", "query", "events", "stages", "alerts")


def _pane(app: App, section: str):
    app.action_section(section)
    return app.query_one(f"#{section}-pane")


def _on_pane(app: App, section: str, action: str) -> None:
    """The section shown, then one of its pane's actions (as its key would)."""
    pane = _pane(app, section)
    app.call_after_refresh(pane.run_action, action)


def _stream_action(app: App, action: str) -> None:
    pane = app.query_one("#streams-pane")
    if not pane.selected():
        app.notify("No stream selected (Streams section)", severity="warning")
        return
    if action == "audit":
        from tui.screens.audit_report import AuditScreen

        app.push_screen(AuditScreen(pane.selected()))
    else:
        pane.run_action(action)


def _table_in_query(app: App) -> None:
    name = app.query_one("#tables-pane").selected
    if not name:
        app.notify("No table selected (Tables section)", severity="warning")
        return
    pane = _pane(app, "query")
    pane.set_sql(hints.TABLE_SAMPLE.format(table=name))


def _maintain_table(app: App) -> None:
    tables = app.query_one("#tables-pane")
    if not tables.selected:
        app.notify("No table selected (Tables section)", severity="warning")
        return
    app.action_section("tables")
    app.call_after_refresh(tables.run_action, "maintain('compact')")


def commands(app: App) -> list[tuple[str, str, Callable[[], object]]]:
    """(name, help, what it does) for every Floe command."""
    out: list[tuple[str, str, Callable[[], object]]] = [
        (f"Go to {s.capitalize()}", f"Show the {s} section ({i})", partial(app.action_section, s))
        for i, s in enumerate(SECTIONS, 1)]
    out += [
        ("New stream", "The new-stream wizard (n)", app.action_new_stream),
        ("New stage", "A SQL preparation stage, with a preview", partial(_on_pane, app, "stages", "new")),
        ("New alert", "An alert rule and where to send it", partial(_on_pane, app, "alerts", "new")),
        ("Pause the selected stream", "Stop ingesting it until resumed", partial(_stream_action, app, "pause")),
        ("Resume the selected stream", "Ingest it again", partial(_stream_action, app, "resume")),
        ("Audit the selected stream", "Check every offset landed exactly once", partial(_stream_action, app, "audit")),
        ("Run maintenance on the selected table", "Compact it now (the Tables section's maintenance tab)",
         partial(_maintain_table, app)),
        ("Open the selected table in Query", "select * from it, ready to run", partial(_table_in_query, app)),
    ]
    # Offered when the footer offers Ctrl+E: the app's one rule (FloeApp.check_action), while no engine runs.
    if app.check_action("start_engine", ()):
        out.append(("Start the engine", f"`{hints.START_ENGINE}` in the background (Ctrl+E)", app.action_start_engine))
    return out


class FloeCommands(Provider):
    async def discover(self) -> Hits:
        for name, help_text, run in commands(self.app):
            yield DiscoveryHit(name, run, help=help_text)

    async def search(self, query: str) -> Hits:
        matcher = self.matcher(query)
        for name, help_text, run in commands(self.app):
            score = max(matcher.match(name), matcher.match(help_text) * 0.5)
            if score > 0:
                yield Hit(score, matcher.highlight(name), run, help=help_text)
