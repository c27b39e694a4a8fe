"""Floe's terminal UI: streams, tables, SQL, events, stages and alerts, attached to whatever engine runs.

The UI never blocks: every read of the state database, the catalog, Kafka or DuckDB
runs in a worker that posts a message back, and a worker that fails is reported. It
never owns ingestion either: it reads what the engine writes to the state database,
and can start `floe run` as its own background process, which outlives the UI and the
terminal.
"""

from __future__ import annotations

import os
from pathlib import Path

from textual import on, work
from textual.actions import SkipAction
from textual.app import App, ComposeResult
from textual.binding import Binding
from textual.css.query import NoMatches
from textual.widgets import Header, Static, TabbedContent, TabPane
from textual.worker import Worker, WorkerState, get_current_worker

from appliance.config.settings import Settings
from appliance.control.audit import VIA_ENV
from appliance.control.processes import ENGINE_LOG, EngineLaunch, start_engine
from appliance.core import hints
from appliance.views.engine import engine_status
from tui.commands import FloeCommands
from tui.format import plural
from tui.messages import ActionDone, EngineStatusRead
from tui.panes.alerts import AlertsLoaded, AlertsPane
from tui.panes.events import EventsPane
from tui.panes.query import QueryPane
from tui.panes.stages import StagesPane
from tui.panes.streams import StreamsPane
from tui.panes.tables import TablesPane
from tui.screens.help import HelpScreen
from tui.screens.sections import SectionsScreen
from tui.widgets.footer import Footer
from tui.widgets.texts import Texts
from tui.workers import FailureLog, ReportsFailures

CSS_PATH = Path(__file__).with_name("app.tcss")


class FloeApp(ReportsFailures, App):
    TITLE = "Floe"
    SUB_TITLE = "Kafka → Iceberg"
    CSS_PATH = CSS_PATH
    COMMANDS = App.COMMANDS | {FloeCommands}
    # Keys of the sections, which must not act behind a screen pushed over them (an editor, a form).
    SECTION_ACTIONS = {"section", "new_stream"}
    BINDINGS = [
        # Esc closes whatever screen is over the sections, wherever its focus is (an editor's text box
        # would keep it otherwise); an open dropdown closes first.
        Binding("escape", "close_screen", "Close", priority=True),
        Binding("1", "section('streams')", "Streams"),
        Binding("2", "section('tables')", "Tables"),
        Binding("3", "section('query')", "Query"),
        Binding("4", "section('events')", "Events"),
        Binding("5", "section('stages')", "Stages"),
        Binding("6", "section('alerts')", "Alerts"),
        Binding("n", "new_stream", "New stream"),
        Binding("ctrl+e", "start_engine", "Start engine"),
        Binding("ctrl+t", "toggle_theme", "Theme"),
        Binding("question_mark,f1", "help", "Help"),
        Binding("q", "quit", "Quit"),
    ]

    def __init__(self, settings: Settings, start_section: str = "streams", clock: bool = True,
                 notices: tuple[str, ...] = (), engine_launch: EngineLaunch | None = None) -> None:
        super().__init__()
        self.settings = settings
        self.start_section = start_section
        self.clock = clock
        self.notices = notices  # said once the UI shows (what `floe demo` did before it)
        self.engine_launch = engine_launch  # an engine started for this UI (`floe demo`), not yet alive
        self.engine_alive = False
        self.engine_starting = engine_launch is not None  # until the engine is alive or has exited
        self.failures = FailureLog()
        self.texts = Texts(self)
        self.via: str | None = None  # FLOE_VIA before the app set it, put back when it ends

    def get_default_screen(self) -> SectionsScreen:
        return SectionsScreen()

    def compose(self) -> ComposeResult:
        yield Header(show_clock=self.clock)
        yield Static("engine: checking…", id="engine-status")
        with TabbedContent(initial=self.start_section, id="sections"):
            with TabPane("Streams", id="streams"):
                yield StreamsPane(id="streams-pane")
            with TabPane("Tables", id="tables"):
                yield TablesPane(id="tables-pane")
            with TabPane("Query", id="query"):
                yield QueryPane(id="query-pane")
            with TabPane("Events", id="events"):
                yield EventsPane(id="events-pane")
            with TabPane("Stages", id="stages"):
                yield StagesPane(id="stages-pane")
            with TabPane("Alerts", id="alerts"):
                yield AlertsPane(id="alerts-pane")
        yield Footer()

    def on_mount(self) -> None:
        # The audit trail records the changes made here, and by the `floe` commands started here, as the UI's.
        self.via = os.environ.get(VIA_ENV)
        os.environ[VIA_ENV] = "ui"
        self.theme = "textual-dark"
        self.check_engine()
        self.set_interval(1.0, self.check_engine)
        for notice in self.notices:
            self.notify(notice, timeout=10)
        if self.engine_launch is not None:
            self.wait_for_engine(self.engine_launch)
        # The section's main table has the focus from the start, so Enter and its keys work at once
        # (unless a key has shown another section meanwhile: then that one's has it).
        self.call_after_refresh(self._focus_section, self.start_section)

    def on_unmount(self) -> None:
        if self.via is None:
            os.environ.pop(VIA_ENV, None)
        else:
            os.environ[VIA_ENV] = self.via

    def worker_changed(self, worker: Worker, state: WorkerState) -> None:
        """Every failed worker of the app, its panes and screens lands here: a toast, once per failure."""
        text = self.failures.changed(worker, state)
        if text:
            self.notify(text, title="Background task failed", severity="error", timeout=10, markup=False)

    @work(thread=True, exclusive=True, group="engine-status", exit_on_error=False)
    def check_engine(self) -> None:
        self.post_message(EngineStatusRead(engine_status(self.settings)))

    @on(EngineStatusRead)
    def show_engine(self, message: EngineStatusRead) -> None:
        status = message.status
        self.engine_alive = status.alive
        try:  # by id among the sections screen's children: a query would walk every widget, once a second
            self.screen_stack[0].get_child_by_id("engine-status")
        except (IndexError, NoMatches):  # a late answer while the app shuts down
            return
        if status.alive != getattr(self, "_shown_alive", None):
            self._shown_alive = status.alive
            self.refresh_bindings()  # the footer offers Ctrl+E only while no engine runs
        if not status.alive and self.engine_starting:
            text = f"[yellow]● engine starting…[/] streams ingest once it runs — home {self.settings.home}"
        elif status.alive:
            text = (f"[green]● engine running[/] pid {status.pid}, spark {status.spark_master}"
                    f" — home {self.settings.home}")
        else:
            text = (f"[red]● engine stopped[/] — streams are not ingesting; Ctrl+E starts `{hints.START_ENGINE}`"
                    f" — home {self.settings.home}")
        # Only a change repaints: an update lays the whole screen out again, once a second otherwise.
        self.texts.set("#engine-status", text)

    @on(AlertsLoaded)
    def count_incidents(self, message: AlertsLoaded) -> None:
        """Open incidents show in the header whatever section is open."""
        n = len(message.incidents)
        self.sub_title = f"{self.SUB_TITLE} — {plural(n, 'open incident')} (6: Alerts)" if n else self.SUB_TITLE

    @on(ActionDone)
    def toast(self, message: ActionDone) -> None:
        self.notify(message.text, severity="error" if message.error else "information",
                    timeout=8 if message.error else 4)

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        # The sections' keys act on the main screen: from a screen over it (the wizard, a stream's
        # detail) they would switch what is hidden behind it and take its focus, so they wait. A
        # modal one (help, a confirmation) keeps its keys to itself already, and the footer it dims
        # still shows them.
        if action in self.SECTION_ACTIONS:
            return all(screen.is_modal for screen in self.screen_stack[1:])
        if action == "start_engine":
            return not self.engine_alive
        if action == "close_screen":  # False: Esc goes on to the section's own bindings, or a dropdown's
            return len(self.screen_stack) > 1 and type(self.focused).__name__ != "SelectOverlay"
        return True

    async def action_close_screen(self) -> None:
        screen = self.screen
        action = next((b.action for b in screen.BINDINGS if isinstance(b, Binding)
                       and "escape" in (k.strip() for k in b.key.split(",")) and b.action != "close_screen"), None)
        if action is None:
            raise SkipAction()
        await screen.run_action(action)

    @on(TabbedContent.TabActivated, "#sections")
    def section_shown(self, event: TabbedContent.TabActivated) -> None:
        pane_id = event.pane.id if event.pane is not None else None
        if pane_id and self.focused is not None and event.pane in self.focused.ancestors_with_self:
            return  # the section's own widget has the focus already
        if pane_id:
            self.call_after_refresh(self._focus_section, pane_id)

    def _focus_section(self, name: str) -> None:
        if self.query_one(TabbedContent).active != name:
            return
        pane = self.query_one(f"#{name}-pane")
        if self.focused is None or pane not in self.focused.ancestors_with_self:
            target = next((w for kind in ("TextArea", "Tree", "DataTable") for w in pane.query(kind)), pane)
            target.focus()

    def action_section(self, name: str) -> None:
        self.query_one(TabbedContent).active = name
        # Focus the pane itself, so its keys (p, r, d, f...) work at once, not the tab bar.
        pane = self.query_one(f"#{name}-pane")
        target = next((w for kind in ("TextArea", "Tree", "DataTable") for w in pane.query(kind)), pane)
        # At once, not after a refresh: a widget of the old section that still has the focus
        # when it is hidden hands it to a sibling there, and TabbedContent then switches back
        # to the section that sibling is in (seen on a loaded machine). On the sections' own
        # screen: another on top of it would take a widget it does not hold, and its keys with it.
        pane.screen.set_focus(target)
        self.call_after_refresh(target.focus)

    def action_new_stream(self) -> None:
        from tui.screens.new_stream import NewStreamScreen

        def created(name: str | None) -> None:
            if name:
                self.notify(f"Created stream {name}")
                self.action_section("streams")

        self.push_screen(NewStreamScreen(), created)

    def action_toggle_theme(self) -> None:
        self.theme = "textual-light" if self.theme == "textual-dark" else "textual-dark"

    def action_help(self) -> None:
        rows: list[tuple[str, str, str]] = []
        for where, node in (("anywhere", self), ("screen", self.screen)):
            for binding in node.BINDINGS:
                if isinstance(binding, Binding):
                    rows.append((self.keys_shown(binding), binding.description or binding.action, where))
        # The sections' own panes only: tabs nested in a pane (the table view's) hold plain widgets.
        for pane in self.query("#sections > ContentSwitcher > TabPane > *"):
            for binding in getattr(pane, "BINDINGS", []):
                if isinstance(binding, Binding):
                    rows.append((self.keys_shown(binding), binding.description,
                                 pane.__class__.__name__.replace("Pane", "")))
        self.push_screen(HelpScreen(rows))

    def keys_shown(self, binding: Binding) -> str:
        """A binding's keys as the footer shows them ("?", "F1", "^e"), not by their names."""
        shown = []
        for key in (k.strip() for k in binding.key.split(",")):
            text = self.get_key_display(Binding(key, binding.action))
            shown.append(text.upper() if text[:1] == "f" and text[1:].isdigit() else text)
        return " / ".join(shown)

    @work(thread=True, group="engine-start", exit_on_error=False)
    def wait_for_engine(self, launch: EngineLaunch) -> None:
        try:
            worker = get_current_worker()
            self._started(launch.wait_until_alive(self.settings, cancelled=lambda: worker.is_cancelled))
        finally:
            self.engine_starting = False

    def _started(self, outcome) -> None:
        """In a worker: the header says what is true before the toast says why."""
        self.engine_starting = False
        self.post_message(EngineStatusRead(engine_status(self.settings)))
        if outcome.exit_code is not None:
            self.post_message(ActionDone(f"The engine exited (code {outcome.exit_code}): {outcome.last_line}",
                                         error=True))

    def action_start_engine(self) -> None:
        if self.engine_alive:
            self.notify("The engine is already running")
            return
        if self.engine_starting:
            self.notify(f"The engine is starting (log: {self.settings.log_dir / ENGINE_LOG})")
            return
        self.engine_starting = True
        self.start_engine()

    @work(thread=True, group="engine-start", exit_on_error=False)
    def start_engine(self) -> None:
        try:
            launch = start_engine(self.settings)
            self.post_message(ActionDone(f"Starting the engine in the background (log: {launch.log})"))
            worker = get_current_worker()
            self._started(launch.wait_until_alive(self.settings, cancelled=lambda: worker.is_cancelled))
        finally:
            self.engine_starting = False  # a plain flag, read by the key's action and the header


def run_tui(settings: Settings, start_section: str = "streams", notices: tuple[str, ...] = (),
            engine_launch: EngineLaunch | None = None) -> None:
    FloeApp(settings, start_section, notices=notices, engine_launch=engine_launch).run()
