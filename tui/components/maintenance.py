"""One table's maintenance, in the Tables pane: the policy in effect, recent runs, "run now" buttons.

The engine knows nothing of the UI. A button either leaves a request in the state
database, which a running engine's maintenance thread takes within a second, or, with
no engine running, starts `floe maintain` as its own background process. Either way
the run is recorded in the state database, where the once-a-second read finds it:
until then the request shows as "requested" (or "running" once the engine took it).
"""

from __future__ import annotations

import datetime as dt
import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rich.markup import escape
from rich.table import Table
from rich.text import Text
from textual import on, work
from textual.app import ComposeResult
from textual.containers import Horizontal, Vertical
from textual.message import Message
from textual.widgets import Button, DataTable, Label, Static
from textual.worker import get_current_worker

from appliance import observe
from appliance.state import StateStore, now
from tui.components.confirm import ConfirmScreen
from tui.components.stream_detail import number, one_line, put_row, trim_rows
from tui.format import seconds, size
from tui.messages import ActionDone

# task (also `floe maintain`'s option), button label, key (bound by the Tables pane), what a toast calls it
BUTTONS = (
    ("compact", "Compact now", "c", "compaction"),
    ("expire", "Expire snapshots now", "e", "snapshot expiry"),
    ("orphans", "Remove orphans now", "o", "orphan file removal"),
    ("retention", "Apply retention now", "r", "retention"),
)
WHAT = {task: what for task, _, _, what in BUTTONS}
RUN_COLUMNS = [
    ("time", "Started (UTC)"), ("task", "Task"), ("trigger", "Trigger"), ("outcome", "Outcome"),
    ("files", "Files"), ("bytes", "Bytes"), ("rows", "Rows deleted"), ("duration", "Duration"),
    ("detail", "Detail"),
]
OUTCOME_STYLE = {"ok": "green", "nothing to do": "dim", "dry run": "cyan", "failed": "bold red", "busy": "yellow", "cancelled": "yellow",
                 "requested": "magenta", "queued": "magenta", "running": "bold cyan"}
RUNS = 20  # runs shown, newest first
EXITED_GRACE = 5.0  # seconds a finished `floe maintain` stays listed while its run is not read yet


@dataclass
class MaintenanceLoaded(Message):
    table: str
    view: Any  # appliance.observe.MaintenanceView, or None with `error`
    error: str = ""


@dataclass
class MaintainLaunched(Message):
    """`floe maintain` was started for a task, with no engine to ask."""

    table: str
    task: str
    at: str  # ISO 8601, UTC: its run starts after this
    process: subprocess.Popen
    log: Path


@dataclass
class MaintenanceRan(Message):
    """A new run of `table` was recorded: its files and snapshots may have changed."""

    table: str


@dataclass
class Launch:
    table: str
    task: str
    at: str
    process: subprocess.Popen
    log: Path
    exited_at: float | None = None  # time.monotonic() when first seen finished


def utc(value: str | None) -> str:
    if not value:
        return ""
    return dt.datetime.fromisoformat(value).astimezone(dt.timezone.utc).strftime("%Y-%m-%d %H:%M:%S")


def _arrow(before: str | None, after: str | None) -> str:
    if before is None and after is None:
        return ""
    return f"{before or '–'} → {after or '–'}"


def run_cells(run: dict[str, Any]) -> dict[str, str]:
    files = _arrow(None if run["files_before"] is None else f"{run['files_before']:,}",
                   None if run["files_after"] is None else f"{run['files_after']:,}")
    if not files and run.get("files_deleted"):
        files = f"{run['files_deleted']:,} deleted"  # expiry and orphan removal only delete
    bytes_ = ""
    if run["bytes_before"] is not None and run["bytes_after"] is not None:
        bytes_ = _arrow(size(run["bytes_before"]), size(run["bytes_after"]))
    style = OUTCOME_STYLE.get(run["outcome"], "")
    outcome = escape(run["outcome"] or "")
    if run.get("dry_run") and run["outcome"] != "dry run":
        outcome += " (dry run)"
    return {
        "time": utc(run["started_at"]),
        "task": escape(run["task"]),
        "trigger": escape(run["trigger"] or ""),
        "outcome": f"[{style}]{outcome}[/]" if style else outcome,
        "files": files,
        "bytes": bytes_,
        "rows": "" if run["rows_deleted"] is None else number(run["rows_deleted"]),
        "duration": seconds((run["duration_ms"] or 0) / 1000),
        "detail": escape(one_line(run["detail"] or "", 200)),
    }


def pending_cells(at: str, task: str, trigger: str, outcome: str, detail: str) -> dict[str, str]:
    cells = dict.fromkeys((key for key, _ in RUN_COLUMNS), "")
    cells.update(time=utc(at), task=escape(task), trigger=trigger,
                 outcome=f"[{OUTCOME_STYLE[outcome]}]{outcome}[/]", detail=escape(detail))
    return cells


def policy_grid(rows: list[dict[str, str]]) -> Table:
    """The settings in two side-by-side halves: ten rows of one would crowd out the runs."""
    grid = Table(box=None, padding=(0, 1), show_edge=False, header_style="bold")
    half = (len(rows) + 1) // 2
    for i in range(2):
        if i:
            grid.add_column("", width=2)
        grid.add_column("Setting")
        grid.add_column("Value")
        grid.add_column("From")
    for i in range(half):
        cells: list[Any] = []
        for j, row in enumerate((rows[i], rows[i + half] if i + half < len(rows) else None)):
            if j:
                cells.append("")
            if row is None:
                cells += ["", "", ""]
                continue
            own = row["from"] != "default"  # set for this table or its namespace: worth a glance
            cells += [row["setting"], Text(row["value"], style="bold" if own else ""),
                      Text(row["from"], style="bold yellow" if own else "dim")]
        grid.add_row(*cells)
    return grid


class MaintenancePanel(Vertical):
    DEFAULT_CSS = """
    MaintenancePanel {
        height: 1fr;
    }
    MaintenancePanel #maintenance-buttons {
        height: auto;
        margin: 1 0 1 0;
    }
    MaintenancePanel #maintenance-buttons Button {
        margin-right: 2;
        min-width: 14;
    }
    MaintenancePanel .maintenance-heading {
        text-style: bold;
        color: $text-accent;
    }
    MaintenancePanel #maintenance-policy {
        height: auto;
    }
    MaintenancePanel #maintenance-runs {
        height: 1fr;
        min-height: 4;
    }
    """

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.table: str | None = None  # the table shown, or asked for
        self.view: Any = None  # the last MaintenanceView of `table`
        self.newest_run: dict[str, int] = {}  # table -> id of the newest run seen: a new one changed the table
        self.launches: list[Launch] = []
        self.shown_policy: tuple[list[dict[str, str]], str] | None = None

    def compose(self) -> ComposeResult:
        with Horizontal(id="maintenance-buttons"):
            for task, label, key, _ in BUTTONS:
                # The key is on the button, not in the footer: four more there push out the app's own.
                # Retention deletes rows: it looks different, and asks first.
                yield Button(f"{label} ({key})", id=f"run-{task}", compact=True,
                             variant="warning" if task == "retention" else "default")
        yield Label("Policy in effect  [dim](floe table policy TABLE changes it)[/]", classes="maintenance-heading")
        yield Static("", id="maintenance-policy")
        yield Label("Recent runs (newest first)", classes="maintenance-heading")
        runs = DataTable(id="maintenance-runs", cursor_type="row", zebra_stripes=True)
        for key, label in RUN_COLUMNS:
            runs.add_column(label, key=key)
        yield runs

    def on_mount(self) -> None:
        # The same once-a-second read as the other live views: a run that ends, by whatever
        # trigger, shows up without a key press.
        self.set_interval(1.0, self.load)

    def show_table(self, name: str | None) -> None:
        if name != self.table:
            self.table = name
            self.view = None
            self.shown_policy = None
            self.query_one("#maintenance-policy", Static).update("Loading…" if name else "")
            self.query_one("#maintenance-runs", DataTable).clear()
        self.load()

    # ---- reading, in a worker ----

    def load(self) -> None:
        if self.table is not None:  # no thread a second while the Tables section was never opened
            self.read(self.table)

    @work(thread=True, exclusive=True, group="maintenance-load", exit_on_error=False)
    def read(self, table: str) -> None:
        try:
            view = observe.table_maintenance(self.app.settings, table, runs=RUNS)
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

    def run_now(self, task: str) -> None:
        table = self.table
        if table is None:
            self.notify("Select a table first")
            return
        if task != "retention":
            self.start(table, task)
            return
        policy = {row["setting"]: row["value"] for row in (self.view.policy if self.view else [])}
        cut = (f"Rows whose {policy['retention_column']} is older than {policy['retention']} are deleted."
               if policy else "Rows older than its retention period are deleted.")

        def answered(yes: bool | None) -> None:
            if yes:
                self.start(table, task)

        self.app.push_screen(ConfirmScreen(f"Apply retention to {table} now? {cut}", yes="Apply retention"), answered)

    @work(thread=True, group="maintenance-run", exit_on_error=False)
    def start(self, table: str, task: str) -> None:
        settings = self.app.settings
        what = WHAT[task]
        try:
            # Asked afresh, not the status line's last answer: a request left for an engine
            # that just stopped would wait for the next `floe run`.
            if observe.engine_status(settings)["alive"]:
                state = StateStore(settings.state_db)
                try:
                    state.request_maintenance(table, task)
                finally:
                    state.close()
                self.post_message(ActionDone(f"{what.capitalize()} of {table} requested: the running engine will run it"))
            else:
                log = settings.log_dir / "maintain.out"
                log.parent.mkdir(parents=True, exist_ok=True)
                command = [sys.executable, "-m", "appliance.cli", "maintain", table, f"--{task}"]
                at = now()
                with log.open("ab") as out:
                    # Like Ctrl+E's `floe run`: its own session, so it finishes even if this UI quits.
                    # FLOE_HOME is this UI's home, whatever the environment says.
                    process = subprocess.Popen(command, stdout=out, stderr=out, stdin=subprocess.DEVNULL,
                                               start_new_session=True,
                                               env={**os.environ, "FLOE_HOME": str(settings.home)})
                self.post_message(MaintainLaunched(table, task, at, process, log))
                self.post_message(ActionDone(f"No engine running: started `floe maintain {table} --{task}`"
                                        f" in the background (log: {log})"))
        except Exception as exc:
            self.post_message(ActionDone(f"Cannot start {what} of {table}: {exc}", error=True))
        self.load()

    @on(MaintainLaunched)
    def launched(self, message: MaintainLaunched) -> None:
        self.launches.append(Launch(message.table, message.task, message.at, message.process, message.log))
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
        newest = view.runs[0]["id"] if view.runs else 0
        seen = self.newest_run.get(view.table)
        self.newest_run[view.table] = newest
        if seen is not None and newest > seen:
            self.post_message(MaintenanceRan(view.table))
        self.reap(view)
        self.show()

    def reap(self, view: Any) -> None:
        """Forget `floe maintain` processes whose run is recorded; report the ones that failed."""
        for launch in list(self.launches):
            code = launch.process.poll()
            if code is None:
                continue
            if launch.exited_at is None:
                launch.exited_at = time.monotonic()
                if code:
                    self.notify(f"`floe maintain {launch.table} --{launch.task}` exited with status {code}"
                                f" (log: {launch.log})", severity="error", timeout=8, markup=False)
            recorded = view.table == launch.table and any(
                r["task"] == launch.task and r["trigger"] == "cli" and r["started_at"] >= launch.at for r in view.runs)
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
        rows: list[dict[str, str]] = []
        waiting = "runs when the engine starts (Ctrl+E)" if not view.engine_alive else "waiting for the engine"
        for r in reversed(view.requested):
            rows.append(pending_cells(r["requested_at"], r["task"], "request", "requested", waiting))
        for i, r in reversed(list(enumerate(view.running))):
            # The engine takes every request at once and runs them one after another.
            rows.append(pending_cells(r["requested_at"], r["task"], "request", "queued" if i else "running",
                                      f"taken by the engine at {utc(r['taken_at'])[11:]}"))
        for launch in reversed(self.launches):
            if launch.table == view.table and launch.exited_at is None:
                rows.append(pending_cells(launch.at, launch.task, "cli", "running",
                                          f"floe maintain {launch.table} --{launch.task} (pid {launch.process.pid})"))
        rows += [run_cells(r) for r in view.runs]
        table = self.query_one("#maintenance-runs", DataTable)
        for i, cells in enumerate(rows):
            put_row(table, str(i), cells)
        trim_rows(table, len(rows))
