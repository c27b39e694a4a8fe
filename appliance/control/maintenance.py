"""Maintenance asked for by a user: the running engine takes it, or `floe maintain` runs it now."""

from __future__ import annotations

import subprocess
from dataclasses import dataclass
from pathlib import Path

from appliance.config.settings import Settings
from appliance.control.audit import audited
from appliance.control.processes import spawn
from appliance.core.clock import now
from appliance.core.vocabulary import MaintenanceTask
from appliance.state.store import StateStore
from appliance.views.engine import engine_status

MAINTAIN_LOG = "maintain.out"


@dataclass(frozen=True)
class MaintainLaunch:
    """`floe maintain TABLE --TASK` started in the background, with no engine to ask."""

    table: str
    task: MaintenanceTask
    at: str  # ISO 8601, UTC: its run starts after this
    process: subprocess.Popen
    log: Path


@audited(lambda a: f"maintenance request {a['task']}", "table")
def request_run(settings: Settings, table: str, task: MaintenanceTask) -> MaintainLaunch | None:
    """Ask for a run of `task` on `table` now; the `floe maintain` launched when no engine runs, else None.

    Asked afresh, not from a status shown a second ago: a request left for an engine that
    just stopped would wait for the next `floe run`.
    """
    if engine_status(settings).alive:
        with StateStore(settings.state_db) as state:
            state.request_maintenance(table, task)
        return None
    at = now()
    log = settings.log_dir / MAINTAIN_LOG
    return MaintainLaunch(table, task, at, spawn(settings, ["maintain", table, f"--{task}"], log), log)
