"""`floe status`: the engine, what it waits for, each stream and stage, and the open incidents, in one
report with an exit code for scripts and monitors (0 all well, 1 degraded, 2 the engine down)."""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field
from typing import Any

from appliance.config.settings import Settings, ensure_home
from appliance.core.vocabulary import StagePhase, StreamPhase
from appliance.state.records import StageStatus, StreamStatus
from appliance.state.store import StateStore
from appliance.views.engine import EngineHealth, engine_health, shown

OK, DEGRADED, DOWN = 0, 1, 2


@dataclass(frozen=True)
class StreamLine:
    name: str
    state: str
    lag_messages: int | None
    lag_seconds: float | None
    freshness_seconds: float | None
    last_commit_at: str | None
    error: str
    was: str = ""  # with the engine down: what the engine last said the stream was doing (state: stopped)


@dataclass(frozen=True)
class StageLine:
    name: str
    state: str
    lag_rows: int | None
    last_run_at: str | None
    error: str
    was: str = ""  # as StreamLine.was


@dataclass(frozen=True)
class IncidentLine:
    alert: str
    subject: str
    rule: str
    value: str
    opened_at: str


@dataclass(frozen=True)
class OutageLine:
    """A dependency the running engine waits for: down since `since`, saying `message`."""

    dependency: str
    since: str
    message: str


@dataclass(frozen=True)
class StatusReport:
    engine: EngineHealth
    waiting_for: list[OutageLine] = field(default_factory=list)
    streams: list[StreamLine] = field(default_factory=list)
    stages: list[StageLine] = field(default_factory=list)
    incidents: list[IncidentLine] = field(default_factory=list)

    @property
    def failing(self) -> list[str]:
        return [f"stream {s.name}" for s in self.streams if s.state == StreamPhase.FAILED] + \
               [f"stage {s.name}" for s in self.stages if s.state == StagePhase.FAILED]

    @property
    def exit_code(self) -> int:
        """2: the engine is down; 1: it waits for a dependency, an open incident, or a stream or stage failing;
        0: all well."""
        if not self.engine.up:
            return DOWN
        return DEGRADED if self.waiting_for or self.incidents or self.failing else OK

    @property
    def verdict(self) -> str:
        return {OK: "ok", DEGRADED: "degraded", DOWN: "down"}[self.exit_code]

    def as_dict(self) -> dict[str, Any]:
        return {"status": self.verdict, "exit_code": self.exit_code, "engine": asdict(self.engine),
                "waiting_for": [asdict(o) for o in self.waiting_for],
                "streams": [asdict(s) for s in self.streams], "stages": [asdict(s) for s in self.stages],
                "incidents": [asdict(i) for i in self.incidents]}


def _stream(name: str, paused: bool, status: StreamStatus, now_ms: float, engine_up: bool) -> StreamLine:
    state = StreamPhase.PAUSED if paused else status.phase
    seen = shown(state, engine_up)
    return StreamLine(name, seen.state, status.lag, status.lag_seconds(now_ms), status.freshness_seconds(now_ms),
                      status.last_commit_at, status.last_error if state is StreamPhase.FAILED else "", seen.was)


def _stage(name: str, paused: bool, status: StageStatus, engine_up: bool) -> StageLine:
    state = StagePhase.PAUSED if paused else status.phase
    seen = shown(state, engine_up)
    return StageLine(name, seen.state, status.lag_rows, status.last_run_at,
                     status.last_error if state is StagePhase.FAILED else "", seen.was)


def status_report(settings: Settings) -> StatusReport:
    ensure_home(settings)
    now_ms = time.time() * 1000
    with StateStore(settings.state_db) as state:
        health = engine_health(settings, state)
        statuses, stage_statuses = state.statuses(), state.stage_statuses()
        streams = [_stream(s.name, s.paused, statuses.get(s.name) or StreamStatus(s.name), now_ms, health.up)
                   for s in state.stream_summaries()]
        stages = [_stage(s.name, s.paused, stage_statuses.get(s.name) or StageStatus(s.name), health.up)
                  for s in state.stages()]
        incidents = [IncidentLine(i.alert, i.subject, i.rule, i.value, i.opened_at) for i in state.open_incidents()]
        # A stopped engine waits for nothing: what it waited for before a kill is no longer true.
        waiting = [OutageLine(o.dependency, o.since, o.message) for o in state.outages()] if health.up else []
    return StatusReport(health, waiting, streams, stages, incidents)
