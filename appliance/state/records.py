"""What the state database holds, as typed records: one class per table, values in the shared vocabulary."""

from __future__ import annotations

import datetime as dt
import functools
import json
import time
from dataclasses import dataclass, fields
from enum import StrEnum
from typing import Any, TypeVar

from appliance.core.vocabulary import (
    EngineAsk,
    EngineState,
    EventKind,
    EventLevel,
    MaintenanceTask,
    RunOutcome,
    RunTrigger,
    StagePhase,
    StreamPhase,
)

R = TypeVar("R")


def _epoch_ms(iso: str | None) -> float | None:
    return dt.datetime.fromisoformat(iso).timestamp() * 1000 if iso else None


def known(kind: type[StrEnum], value: Any, default: Any = None) -> Any:
    """`value` as a member of `kind`; an unknown value (from a newer Floe) stays as it was."""
    if value is None:
        return default
    try:
        return kind(value)
    except ValueError:
        return value


@functools.cache
def _field_names(cls: type) -> tuple[str, ...]:
    return tuple(f.name for f in fields(cls))  # once a class: `fields` was a tenth of `floe stream list`


def from_row(cls: type[R], row: dict[str, Any], **converted: Any) -> R:
    values = {name: row.get(name) for name in _field_names(cls)}
    values.update(converted)
    return cls(**values)


@dataclass(frozen=True)
class StreamSummary:
    """What lists of hundreds of streams show of each one's definition: no mapping to parse."""

    name: str
    topic: str
    table: str
    dead_letter_table: str
    paused: bool
    route_by: str = ""  # a routed stream's field


@dataclass(frozen=True)
class StreamStatus:
    """What the engine last wrote about a stream; a stream it never ran has the defaults."""

    name: str
    phase: StreamPhase = StreamPhase.IDLE
    last_error: str = ""
    last_error_at: str | None = None
    last_commit_at: str | None = None
    lag: int | None = None
    rows_total: int = 0
    dead_letter_total: int = 0
    messages_per_s: float = 0.0
    updated_at: str | None = None
    error_kind: str = ""
    behind_since: str | None = None
    newest_kafka_ts: int | None = None
    freshness_ms: int | None = None
    failures_total: int = 0  # batches that failed before committing, since the stream was created

    def lag_seconds(self, now_ms: float | None = None) -> float | None:
        """At most how long the oldest waiting message has waited: 0 when nothing waits.

        The first unread message came after the newest one committed, and after the stream was
        last seen with nothing waiting: the wait is at most the time since the later of the two.
        """
        if self.lag is None:
            return None
        if not self.lag and self.phase is not StreamPhase.FAILED:  # a failing stream cannot tell: bound it
            return 0.0
        now_ms = now_ms if now_ms is not None else time.time() * 1000
        marks = [m for m in (self.newest_kafka_ts, _epoch_ms(self.behind_since)) if m]
        return round(max(0.0, (now_ms - max(marks)) / 1000), 3) if marks else None

    def freshness_seconds(self, now_ms: float | None = None) -> float | None:
        """How far the table is behind its topic: while messages wait, the age of the newest row
        committed; when none do, how old the last batch's newest message was when it committed."""
        if (self.lag or self.phase is StreamPhase.FAILED) and self.newest_kafka_ts:
            now_ms = now_ms if now_ms is not None else time.time() * 1000
            return round(max(0.0, (now_ms - self.newest_kafka_ts) / 1000), 3)
        return None if self.freshness_ms is None else self.freshness_ms / 1000

    @classmethod
    def of(cls, row: dict[str, Any]) -> StreamStatus:
        return from_row(cls, row, phase=known(StreamPhase, row.get("phase"), StreamPhase.IDLE),
                        last_error=row.get("last_error") or "", rows_total=row.get("rows_total") or 0,
                        dead_letter_total=row.get("dead_letter_total") or 0,
                        messages_per_s=float(row.get("messages_per_s") or 0.0), error_kind=row.get("error_kind") or "",
                        failures_total=row.get("failures_total") or 0)


@dataclass(frozen=True)
class BatchRecord:
    """One committed batch of a stream."""

    stream: str
    started_at: str
    committed_at: str
    duration_ms: int
    messages: int
    rows: int
    dead_letter_rows: int
    bytes: int
    target_snapshot_id: int | None
    dead_letter_snapshot_id: int | None
    offsets: str  # JSON: partition -> next offset
    lag: int | None
    newest_kafka_ts: int | None = None  # epoch ms
    median_kafka_ts: int | None = None
    throttle_ms: int = 0
    # A routed stream's batch: how many route tables it committed, besides its dead-letter table (the anchor, whose
    # snapshot is `dead_letter_snapshot_id`; it has no target of its own). None for any other stream's batch.
    route_tables: int | None = None
    table_rows: str | None = None  # JSON {table: rows committed there}; None in batches recorded before it
    id: int | None = None

    @property
    def messages_per_s(self) -> float:
        return (self.messages or 0) / max((self.duration_ms or 1) / 1000, 0.001)

    @classmethod
    def of(cls, row: dict[str, Any]) -> BatchRecord:
        return from_row(cls, row, messages=row.get("messages") or 0, rows=row.get("rows") or 0,
                        dead_letter_rows=row.get("dead_letter_rows") or 0, bytes=row.get("bytes") or 0,
                        duration_ms=row.get("duration_ms") or 0, throttle_ms=row.get("throttle_ms") or 0)


@dataclass(frozen=True)
class EventRecord:
    id: int
    at: str
    stream: str | None
    level: EventLevel
    kind: EventKind | str
    message: str

    @classmethod
    def of(cls, row: dict[str, Any]) -> EventRecord:
        return from_row(cls, row, level=known(EventLevel, row.get("level"), EventLevel.INFO),
                        kind=known(EventKind, row.get("kind"), ""), message=row.get("message") or "")


@dataclass(frozen=True)
class EngineRecord:
    pid: int | None
    started_at: str | None
    heartbeat_at: str | None
    spark_master: str | None
    state: EngineState | None
    answers: frozenset[EngineAsk] = frozenset()  # the requests it takes

    @classmethod
    def of(cls, row: dict[str, Any]) -> EngineRecord:
        return from_row(cls, row, state=known(EngineState, row.get("state")),
                        answers=frozenset(known(EngineAsk, a) for a in (row.get("answers") or "").split(",") if a))


@dataclass
class RunRecord:
    """One maintenance run, dry or real, whatever its outcome, with its figures."""

    task: MaintenanceTask
    table_name: str
    trigger: RunTrigger
    outcome: RunOutcome = RunOutcome.OK
    detail: str = ""
    dry_run: bool = False
    started_at: str = ""
    finished_at: str = ""
    duration_ms: int = 0
    files_before: int | None = None
    files_after: int | None = None
    bytes_before: int | None = None
    bytes_after: int | None = None
    rows_deleted: int | None = None
    rows_rewritten: int | None = None
    snapshots_expired: int | None = None
    files_deleted: int | None = None
    snapshot_id: int | None = None
    id: int | None = None

    @property
    def failed(self) -> bool:
        return self.outcome in (RunOutcome.FAILED, RunOutcome.BUSY)

    @classmethod
    def of(cls, row: dict[str, Any]) -> RunRecord:
        return from_row(cls, row, task=known(MaintenanceTask, row.get("task")),
                        trigger=known(RunTrigger, row.get("trigger")), outcome=known(RunOutcome, row.get("outcome")),
                        dry_run=bool(row.get("dry_run")), detail=row.get("detail") or "",
                        duration_ms=row.get("duration_ms") or 0)

    def row(self) -> dict[str, Any]:
        values = {f.name: getattr(self, f.name) for f in fields(self) if f.name != "id"}
        values["dry_run"] = int(self.dry_run)
        return values


@dataclass(frozen=True)
class RequestRecord:
    """A maintenance run asked for from the UI, for the engine to take."""

    id: int
    table_name: str
    task: MaintenanceTask
    requested_at: str
    taken_at: str | None

    @classmethod
    def of(cls, row: dict[str, Any]) -> RequestRecord:
        return from_row(cls, row, task=known(MaintenanceTask, row.get("task")))


@dataclass(frozen=True)
class StageStatus:
    """What the engine last wrote about a stage; a stage it never ran has the defaults. `position` is
    the source snapshot it has read up to (the truth is in its table's commits; this is for the UI
    and for expiry, which keeps that snapshot and the ones after it)."""

    name: str
    phase: StagePhase = StagePhase.IDLE
    position: int | None = None
    last_run_at: str | None = None
    last_error: str = ""
    last_error_at: str | None = None
    rows_in_total: int = 0
    rows_out_total: int = 0
    runs: int = 0
    lag_snapshots: int | None = None
    lag_rows: int | None = None
    updated_at: str | None = None
    table_rows: int | None = None  # what its table holds, as the engine last looked

    @classmethod
    def of(cls, row: dict[str, Any]) -> StageStatus:
        return from_row(cls, row, phase=known(StagePhase, row.get("phase"), StagePhase.IDLE),
                        last_error=row.get("last_error") or "", rows_in_total=row.get("rows_in_total") or 0,
                        rows_out_total=row.get("rows_out_total") or 0, runs=row.get("runs") or 0)


@dataclass(frozen=True)
class StageRunRecord:
    """One run of a stage: the source snapshots it read (after `from_snapshot`, up to `to_snapshot`)."""

    stage: str
    started_at: str
    finished_at: str
    duration_ms: int
    from_snapshot: int | None
    to_snapshot: int | None
    rows_in: int
    rows_out: int
    outcome: str  # ok, failed
    error: str = ""
    id: int | None = None

    @classmethod
    def of(cls, row: dict[str, Any]) -> StageRunRecord:
        return from_row(cls, row, error=row.get("error") or "")


@dataclass(frozen=True)
class EngineRequestRecord:
    """Work asked of the running engine (`engine_requests`), and how it went: `answer` (JSON; a long piece
    of work's progress until `answered_at`), `result` (a preview's rows, Arrow IPC), or `error`."""

    id: int
    ask: EngineAsk
    args: dict[str, Any]
    who: dict[str, str]  # user, host, via: whom the audit trail names
    requested_at: str
    withdrawn_at: str | None = None
    taken_at: str | None = None
    taken_by: int | None = None  # the engine's pid
    answered_at: str | None = None
    abandoned_at: str | None = None
    answer: Any = None
    result: bytes | None = None
    error: str = ""
    error_kind: str = ""  # the error's class, one of appliance.core.errors'

    @property
    def answered(self) -> bool:
        return self.answered_at is not None

    def table(self):
        """A preview's rows as an Arrow table."""
        import pyarrow as pa

        with pa.ipc.open_stream(self.result) as reader:
            return reader.read_all()

    @staticmethod
    def encoded(table) -> bytes:
        import pyarrow as pa

        sink = pa.BufferOutputStream()
        with pa.ipc.new_stream(sink, table.schema) as writer:
            writer.write_table(table)
        return sink.getvalue().to_pybytes()

    @classmethod
    def of(cls, row: dict[str, Any]) -> EngineRequestRecord:
        answer = row.get("answer")
        return from_row(cls, row, ask=known(EngineAsk, row.get("ask")), args=json.loads(row.get("args") or "{}"),
                        who=json.loads(row.get("who") or "{}"), answer=json.loads(answer) if answer else None,
                        error=row.get("error") or "", error_kind=row.get("error_kind") or "")
