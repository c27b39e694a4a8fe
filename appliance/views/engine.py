"""Whether an engine runs on this FLOE_HOME, from the heartbeat it writes every half second."""

from __future__ import annotations

from dataclasses import dataclass

from appliance.config.settings import Settings
from appliance.core.clock import age, utcnow
from appliance.core.vocabulary import EngineState
from appliance.state.store import StateStore

HEARTBEAT_STALE = 5.0  # seconds without a heartbeat before the engine counts as stopped


@dataclass(frozen=True)
class EngineStatus:
    alive: bool
    pid: int | None = None
    spark_master: str | None = None
    heartbeat_age: float | None = None
    started_at: str | None = None


def engine_status(settings: Settings, state: StateStore | None = None) -> EngineStatus:
    own = state is None
    state = state or StateStore(settings.state_db)
    try:
        record = state.engine()
    finally:
        if own:
            state.close()
    if record is None:
        return EngineStatus(alive=False)
    heartbeat = age(record.heartbeat_at, utcnow())
    alive = record.state in (EngineState.RUNNING, EngineState.STARTING) and heartbeat is not None \
        and heartbeat < HEARTBEAT_STALE
    return EngineStatus(alive, record.pid, record.spark_master, heartbeat, record.started_at)
