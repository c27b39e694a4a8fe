"""One table's maintenance: the policy in effect, the record of runs, runs asked for and not done."""

from __future__ import annotations

from dataclasses import dataclass

from appliance.config.policy import PolicySetting
from appliance.config.settings import Settings
from appliance.core.errors import ConfigError
from appliance.core.vocabulary import MaintenanceTask, RequestState, RunTrigger
from appliance.maintenance.policies import settings_in_effect
from appliance.state.records import RunRecord
from appliance.state.store import StateStore
from appliance.views.engine import engine_status


@dataclass(frozen=True)
class PendingRun:
    """A run asked for whose outcome is not recorded yet."""

    task: MaintenanceTask
    requested_at: str
    state: RequestState
    detail: str
    trigger: RunTrigger = RunTrigger.REQUEST


@dataclass
class MaintenanceView:
    table: str
    policy: list[PolicySetting]  # in `floe table policy` order
    runs: list[RunRecord]  # newest first
    pending: list[PendingRun]  # newest first: what the running engine has taken, then what waits for one
    engine_alive: bool
    policy_error: str = ""  # a stored policy that no longer checks out: the runs are still worth showing


def table_maintenance(settings: Settings, table: str, runs: int = 20) -> MaintenanceView:
    """One table's maintenance, from the state database alone: cheap enough to poll every second."""
    with StateStore(settings.state_db) as state:
        try:
            policy, policy_error = settings_in_effect(settings, state, table), ""
        except ConfigError as exc:
            policy, policy_error = [], str(exc)
        engine = engine_status(settings, state)
        pending: list[PendingRun] = []
        if engine.alive:
            # A request leaves the queue when the engine takes it and its run is recorded when it
            # ends; in between it is running (or queued behind another: the engine takes every
            # request at once and runs them one after another). Requests taken by an engine that
            # died before recording them are not this engine's: its start time tells.
            taken = state.taken_unrecorded(table, engine.started_at or "")
            pending = [PendingRun(r.task, r.requested_at, RequestState.QUEUED if i else RequestState.RUNNING,
                                  f"taken by the engine at {r.taken_at[11:19]}") for i, r in enumerate(taken)]
            pending.reverse()
        waiting = "waiting for the engine" if engine.alive else "runs when the engine starts (Ctrl+E)"
        requested = [PendingRun(r.task, r.requested_at, RequestState.REQUESTED, waiting)
                     for r in reversed(state.pending_requests(table))]
        return MaintenanceView(
            table=table,
            policy=policy,
            runs=state.runs(table, limit=runs),
            pending=requested + pending,
            engine_alive=engine.alive,
            policy_error=policy_error,
        )
