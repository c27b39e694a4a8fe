"""One table's maintenance, in the Tables pane: the policy in effect, recent runs, "run now" buttons.

A button asks `appliance.control.maintenance` for a run: the running engine takes the
request within a second, or, with no engine running, `floe maintain` runs it as its own
background process. Either way the run is recorded in the state database, where the
once-a-second read finds it: until then it shows as requested (or running).
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from rich.markup import escape
from rich.table import Table
from rich.text import Text
from textual import on, work
from textual.app import ComposeResult
from textual.containers import Horizontal, Vertical
from textual.message import Message
from textual.widgets import Button, DataTable, Label, Static
from textual.worker import Worker, get_current_worker

from appliance.config.policy import PolicySetting
from appliance.control.maintenance import MaintainLaunch, request_run
from appliance.core import hints
from appliance.core.vocabulary import (
    MaintenanceTask,
    RequestState,
    RunOutcome,
    RunTrigger,
)
from appliance.state.records import RunRecord
from appliance.views.maintenance import MaintenanceView, table_maintenance
from tui.format import number, one_line, seconds, size, utc
from tui.messages import ActionDone
from tui.screens.confirm import ConfirmScreen
from tui.screens.sections import REFRESH
from tui.styles import outcome_text
from tui.widgets.rows import put_row, trim_rows
from tui.workers import Refresh, ReportsFailures

# task, button label, key (bound by the Tables pane), in the order the buttons stand
BUTTONS = (
    (MaintenanceTask.COMPACT, "Compact now", "c"),
    (MaintenanceTask.EXPIRE, "Expire snapshots now", "e"),
    (MaintenanceTask.ORPHANS, "Remove orphans now", "o"),
    (MaintenanceTask.RETENTION, "Apply retention now", "r"),
)
RUN_COLUMNS = [
    ("time", "Started (UTC)"), ("task", "Task"), ("trigger", "Trigger"), ("outcome", "Outcome"),
    ("files", "Files"), ("bytes", "Bytes"), ("rows", "Rows deleted"), ("duration", "Duration"),
    ("detail", "Detail"),
]
RUNS = 20  # runs shown, newest first
EXITED_GRACE = 5.0  # seconds a finished `floe maintain` stays listed while its run is not read yet


@dataclass
class MaintenanceLoaded(Message):
    table: str
    view: MaintenanceView | None  # None with `error`
    error: str = ""


@dataclass
class MaintainLaunched(Message):
    launch: MaintainLaunch


@dataclass
class MaintenanceRan(Message):
    """A new run of `table` was recorded: its files and snapshots may have changed."""

    table: str


@dataclass
class Launch:
    """A `floe maintain` this UI started, watched until its run is recorded."""

    started: MaintainLaunch
    exited_at: float | None = None  # time.monotonic() when first seen finished


def _arrow(before: str | None, after: str | None) -> str:
    if before is None and after is None:
        return ""
    return f"{before or '–'} → {after or '–'}"


def run_cells(run: RunRecord) -> dict[str, str]:
    files = _arrow(None if run.files_before is None else f"{run.files_before:,}",
                   None if run.files_after is None else f"{run.files_after:,}")
    if not files and run.files_deleted:
        files = f"{run.files_deleted:,} deleted"  # expiry and orphan removal only delete
    bytes_ = ""
    if run.bytes_before is not None and run.bytes_after is not None:
        bytes_ = _arrow(size(run.bytes_before), size(run.bytes_after))
    dry = " (dry run)" if run.dry_run and run.outcome != RunOutcome.DRY_RUN else ""
    return {
        "time": utc(run.started_at),
        "task": escape(run.task),
        "trigger": escape(run.trigger or ""),
        "outcome": outcome_text(run.outcome or "", dry),
        "files": files,
        "bytes": bytes_,
        "rows": "" if run.rows_deleted is None else number(run.rows_deleted),
        "duration": seconds(run.duration_ms / 1000),
        "detail": escape(one_line(run.detail, 200)),
    }


def pending_cells(at: str, task: str, trigger: str, state: RequestState, detail: str) -> dict[str, str]:
    cells = dict.fromkeys((key for key, _ in RUN_COLUMNS), "")
    cells.update(time=utc(at), task=escape(task), trigger=trigger, outcome=outcome_text(state), detail=escape(detail))
    return cells


def policy_grid(rows: list[PolicySetting]) -> Table:
    """The settings in two side-by-side halves: eleven rows of one would crowd out the runs."""
    grid = Table(box=None, padding=(0, 1), show_edge=False, header_style="bold")
    half = (len(rows) + 1) // 2
    for i in range(2):
        if i:
            grid.add_column("", width=2)
        grid.add_column("Setting")
        grid.add_column("Value")
        grid.add_column("From")
    for i in range(half):
        cells: list = []
        for j, row in enumerate((rows[i], rows[i + half] if i + half < len(rows) else None)):
            if j:
                cells.append("")
            if row is None:
                cells += ["", "", ""]
                continue
            # set for this table or its namespace: worth a glance
            cells += [row.setting, Text(row.value, style="bold" if row.own else ""),
                      Text(row.source, style="bold yellow" if row.own else "dim")]
        grid.add_row(*cells)
    return grid


class MaintenancePanel(ReportsFailures, Vertical):
    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.table: str | None = None  # the table shown, or asked for
        self.view: MaintenanceView | None = None  # the last view of `table`
        self.newest_run: dict[str, int] = {}  # table -> id of the newest run seen: a new one changed the table
        self.launches: list[Launch] = []
        self.shown_policy: tuple[list[PolicySetting], str] | None = None

    def compose(self) -> ComposeResult:
        with Horizontal(id="maintenance-buttons"):
            for task, label, key in BUTTONS:
                # The key is on the button, not in the footer: four more there push out the app's own.
                # Retention deletes rows: it looks different, and asks first.
                yield Button(f"{label} ({key})", id=f"run-{task}", compact=True,
                             variant="warning" if task == MaintenanceTask.RETENTION else "default")
        yield Label(f"Policy in effect  [dim]({hints.TABLE_POLICY} changes it)[/]", classes="maintenance-heading")
        yield Static("", id="maintenance-policy")
        yield Label("Recent runs (newest first)", classes="maintenance-heading")
        runs = DataTable(id="maintenance-runs", cursor_type="row", zebra_stripes=True)
        for key, label in RUN_COLUMNS:
            runs.add_column(label, key=key)
        yield runs

    def on_mount(self) -> None:
        # The same once-a-second read as the other live views: a run that ends, by whatever
        # trigger, shows up without a key press.
        self.reading = Refresh(self.load)
        self.set_interval(1.0, self.reading.due, name=REFRESH)

    def show_table(self, name: str | None) -> None:
        if name != self.table:
            self.table = name
            self.view = None
            self.shown_policy = None
            self.query_one("#maintenance-policy", Static).update("Loading…" if name else "")
            self.query_one("#maintenance-runs", DataTable).clear()
        self.reading.now()

    # ---- reading, in a worker ----

    def load(self) -> Worker | None:
        if self.table is None:  # no thread a second while the Tables section was never opened
            return None
        return self.read(self.table)

    @work(thread=True, exclusive=True, group="maintenance-load", exit_on_error=False)
    def read(self, table: str) -> None:
        try:
            view = table_maintenance(self.app.settings, table, runs=RUNS)
        except Exception as exc:
            self.post_message(MaintenanceLoaded(table, None, str(exc)))
            return
        if not get_current_worker().is_cancelled:
            self.post_message(MaintenanceLoaded(table, view))

    # ---- running a task now ----

    @on(Button.Pressed, "#maintenance-buttons Button")
    def pressed(self, event: Button.Pressed) -> None:
        event.stop()
        self.run_now((event.button.id or "").removeprefix("run-"))

    def run_now(self, task: MaintenanceTask | str) -> None:
        task = MaintenanceTask(task)  # a key binding hands over the plain name
        table = self.table
        if table is None:
            self.notify("Select a table first")
            return
        if task != MaintenanceTask.RETENTION:
            self.start(table, task)
            return
        policy = {row.setting: row.value for row in (self.view.policy if self.view else [])}
        cut = (f"Rows whose {policy['retention_column']} is older than {policy['retention']} are deleted."
               if policy else "Rows older than its retention period are deleted.")

        def answered(yes: bool | None) -> None:
            if yes:
                self.start(table, task)

        self.app.push_screen(ConfirmScreen(f"Apply retention to {table} now? {cut}", yes="Apply retention"), answered)

    @work(thread=True, group="maintenance-run", exit_on_error=False)
    def start(self, table: str, task: MaintenanceTask) -> None:
        try:
            launch = request_run(self.app.settings, table, task)
        except Exception as exc:
            self.post_message(ActionDone(f"Cannot start {task.noun} of {table}: {exc}", error=True))
        else:
            if launch is None:
                self.post_message(ActionDone(f"{task.noun.capitalize()} of {table} requested: "
                                             "the running engine will run it"))
            else:
                self.post_message(MaintainLaunched(launch))
                self.post_message(ActionDone(f"No engine running: started `floe maintain {table} --{task}`"
                                             f" in the background (log: {launch.log})"))
        self.app.call_from_thread(self.reading.now)

    @on(MaintainLaunched)
    def launched(self, message: MaintainLaunched) -> None:
        self.launches.append(Launch(message.launch))
        self.show()

    # ---- showing, on the UI thread ----

    @on(MaintenanceLoaded)
    def loaded(self, message: MaintenanceLoaded) -> None:
        if message.table != self.table:
            return  # answers a table no longer shown
        if message.view is None:
            self.shown_policy = None
            self.query_one("#maintenance-policy", Static).update(
                Text(f"Cannot read maintenance: {message.error}", style="red"))
            return
        view = self.view = message.view
        newest = view.runs[0].id if view.runs else 0
        seen = self.newest_run.get(view.table)
        self.newest_run[view.table] = newest
        if seen is not None and newest > seen:
            self.post_message(MaintenanceRan(view.table))
        self.reap(view)
        self.show()

    def reap(self, view: MaintenanceView) -> None:
        """Forget `floe maintain` processes whose run is recorded; report the ones that failed."""
        for launch in list(self.launches):
            started = launch.started
            code = started.process.poll()
            if code is None:
                continue
            if launch.exited_at is None:
                launch.exited_at = time.monotonic()
                if code:
                    self.notify(f"`floe maintain {started.table} --{started.task}` exited with status {code}"
                                f" (log: {started.log})", severity="error", timeout=8, markup=False)
            recorded = view.table == started.table and any(
                r.task == started.task and r.trigger == RunTrigger.CLI and r.started_at >= started.at
                for r in view.runs)
            if recorded or code or time.monotonic() - launch.exited_at > EXITED_GRACE:
                self.launches.remove(launch)

    def show(self) -> None:
        view = self.view
        if view is None or view.table != self.table:
            return
        if (view.policy, view.policy_error) != self.shown_policy:  # a Static keeps no copy to compare with
            self.shown_policy = (view.policy, view.policy_error)
            self.query_one("#maintenance-policy", Static).update(
                Text(f"Cannot resolve the policy: {view.policy_error}", style="red") if view.policy_error
                else policy_grid(view.policy))
        rows = [pending_cells(p.requested_at, p.task, p.trigger, p.state, p.detail) for p in view.pending]
        for launch in reversed(self.launches):
            started = launch.started
            if started.table == view.table and launch.exited_at is None:
                rows.append(pending_cells(started.at, started.task, RunTrigger.CLI, RequestState.RUNNING,
                                          f"floe maintain {started.table} --{started.task} "
                                          f"(pid {started.process.pid})"))
        rows += [run_cells(r) for r in view.runs]
        table = self.query_one("#maintenance-runs", DataTable)
        for i, cells in enumerate(rows):
            put_row(table, str(i), cells)
        trim_rows(table, len(rows))
