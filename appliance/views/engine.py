"""Whether an engine runs on this FLOE_HOME, from the heartbeat it writes every half second."""

from __future__ import annotations

import os
from dataclasses import dataclass

from appliance.config.settings import Settings
from appliance.core import hints
from appliance.core.clock import age, utcnow
from appliance.core.vocabulary import EngineAsk, EngineState, StagePhase, StreamPhase
from appliance.state.store import StateStore

HEARTBEAT_STALE = 5.0  # seconds without a heartbeat before the engine counts as stopped


@dataclass(frozen=True)
class EngineStatus:
    alive: bool
    pid: int | None = None
    spark_master: str | None = None
    heartbeat_age: float | None = None
    started_at: str | None = None
    answers: frozenset[EngineAsk] = frozenset()  # the requests it takes (none in a one-off run)


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
    return EngineStatus(alive, record.pid, record.spark_master, heartbeat, record.started_at,
                        record.answers if alive else frozenset())


@dataclass(frozen=True)
class EngineHealth:
    """What `floe status` and `floe watch` say of the engine: up, or down and why."""

    up: bool
    reason: str  # why it is down; what it does when up
    pid: int | None = None
    heartbeat_age: float | None = None
    started_at: str | None = None


def process_alive(pid: int | None) -> bool:
    if not pid:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process: alive
        return True
    return True


def engine_health(settings: Settings, state: StateStore) -> EngineHealth:
    """Down when it never ran, stopped, its process is gone (a kill -9), or its heartbeat is older
    than `[alerting] heartbeat_timeout` (a hung engine)."""
    record = state.engine()
    if record is None:
        return EngineHealth(False, f"no engine has run on this FLOE_HOME (start one: `{hints.START_ENGINE}`)")
    heartbeat = age(record.heartbeat_at, utcnow())
    shown = f"{heartbeat:.0f}s ago" if heartbeat is not None else "never"
    if record.state is EngineState.STOPPED:
        return EngineHealth(False, f"the engine stopped (last heartbeat {shown})", record.pid, heartbeat,
                            record.started_at)
    if not process_alive(record.pid):
        return EngineHealth(False, f"the engine's process {record.pid} is gone without stopping (last heartbeat "
                            f"{shown})", record.pid, heartbeat, record.started_at)
    if heartbeat is None or heartbeat > settings.alerting.heartbeat_timeout:
        return EngineHealth(False, f"no heartbeat from the engine (pid {record.pid}) since {shown}", record.pid,
                            heartbeat, record.started_at)
    return EngineHealth(True, f"running (pid {record.pid}, spark {record.spark_master})", record.pid, heartbeat,
                        record.started_at)


# What a stream or stage is only while an engine runs it: with the engine down, it is stopped.
LIVE = frozenset({StreamPhase.STARTING, StreamPhase.RUNNING, StreamPhase.CATCHING_UP, StagePhase.RUNNING,
                  StagePhase.UP_TO_DATE})
STOPPED = "stopped"


@dataclass(frozen=True)
class Shown:
    """A stream's or stage's state as every view shows it (`floe status`, `floe stream list/show`,
    `floe stage list/show`): what the engine last wrote while it runs; with the engine down, `stopped`,
    and `was` what it last wrote."""

    state: str
    was: str = ""

    @property
    def text(self) -> str:
        return f"{self.state} (was {self.was})" if self.was else self.state


def shown(phase: StreamPhase | StagePhase, engine_up: bool) -> Shown:
    """The one rule: `phase` (with pausing applied) as shown, given whether the engine is up."""
    return Shown(STOPPED, str(phase)) if not engine_up and phase in LIVE else Shown(str(phase))
