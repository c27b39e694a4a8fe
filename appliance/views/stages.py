"""Read models of stages: their state, lineage, lag and runs, for the UI and the CLI."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from appliance.config.settings import Settings
from appliance.core.vocabulary import StagePhase
from appliance.model.stage import StageDef
from appliance.model.stream import StreamDef
from appliance.state.records import StageRunRecord, StageStatus
from appliance.state.store import StateStore
from appliance.views.engine import Shown, engine_health, shown


def lineage(stage: StageDef, streams: list[StreamDef], stages: list[StageDef]) -> list[str]:
    """Where a stage's rows come from and go: topic -> table -> stage -> table, as far up as known."""
    chain = [stage.name, stage.table]
    table, seen = stage.source, {stage.name}
    while table:
        chain[:0] = [table]
        writer = next((s for s in stages if s.table == table and s.name not in seen), None)
        if writer is not None:
            chain[:0] = [writer.name]
            seen.add(writer.name)
            table = writer.source
            continue
        stream = next((s for s in streams if table in (s.table, s.dead_letter_table)), None)
        if stream is not None:
            chain[:0] = [f"topic {stream.topic}"]
        break
    return chain


@dataclass(frozen=True)
class StageView:
    name: str
    kind: str
    phase: StagePhase
    source: str
    table: str
    lineage: list[str]
    lag_snapshots: int | None
    lag_rows: int | None
    last_run_at: str | None
    rows_in_total: int  # over every run
    rows_out_total: int  # over every run: a grouping stage writes its whole table each time
    runs: int
    last_error: str
    table_rows: int | None = None  # what its table holds, as the engine last looked
    shown: Shown = field(default_factory=lambda: Shown(""))  # the state as `floe status` shows it

    def summary(self) -> dict[str, Any]:
        """The row `floe stage list` shows."""
        return {"name": self.name, "kind": self.kind, "state": self.shown.state, "was": self.shown.was,
                "lineage": " -> ".join(self.lineage),
                "lag_rows": self.lag_rows, "last_run": (self.last_run_at or "")[:19], "rows_in": self.rows_in_total,
                "rows_out": self.rows_out_total, "table_rows": self.table_rows, "error": self.last_error}


def _view(stage: StageDef, status: StageStatus, streams: list[StreamDef], stages: list[StageDef],
          engine_up: bool) -> StageView:
    phase = StagePhase.PAUSED if stage.paused else status.phase
    return StageView(stage.name, stage.kind, phase, stage.source, stage.table, lineage(stage, streams, stages),
                     status.lag_snapshots, status.lag_rows, status.last_run_at, status.rows_in_total,
                     status.rows_out_total, status.runs, status.last_error if phase == StagePhase.FAILED else "",
                     status.table_rows, shown(phase, engine_up))


def stages_overview(settings: Settings) -> list[StageView]:
    with StateStore(settings.state_db) as state:
        stages, streams, statuses = state.stages(), state.table_writers(), state.stage_statuses()
        up = engine_health(settings, state).up
    return [_view(s, statuses.get(s.name, StageStatus(s.name)), streams, stages, up) for s in stages]


@dataclass(frozen=True)
class StageInfo:
    view: StageView
    sql: str
    id: str
    created_at: str
    updated_at: str
    position: int | None  # the source snapshot it has read up to, as the engine last wrote it
    last_error: str  # even when it is no longer failing
    runs: list[StageRunRecord]

    def as_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["runs"] = [asdict(r) for r in self.runs]
        return out


def stage_info(settings: Settings, name: str, runs: int = 10) -> StageInfo:
    with StateStore(settings.state_db) as state:
        stage, streams, stages = state.stage(name), state.table_writers(), state.stages()
        status = state.stage_status(name)
        recent = state.stage_runs(name, runs)
        up = engine_health(settings, state).up
    return StageInfo(_view(stage, status, streams, stages, up), stage.sql, stage.id, stage.created_at, stage.updated_at,
                     status.position, status.last_error, recent)
