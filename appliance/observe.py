"""Read models for whoever watches the engine (the terminal UI, `floe stream show`).

Everything here reads: the state database the engine writes as it runs, and the
catalog's table metadata. Nothing here needs the engine to be in this process.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field
from typing import Any

from appliance.settings import Settings
from appliance.state import StateStore

HEARTBEAT_STALE = 5.0  # seconds without a heartbeat before the engine counts as stopped


def _age(iso: str | None, now: dt.datetime) -> float | None:
    if not iso:
        return None
    return (now - dt.datetime.fromisoformat(iso)).total_seconds()


@dataclass
class StreamView:
    name: str
    state: str
    topic: str
    table: str
    dead_letter_table: str
    messages_per_s: float
    rows_last_minute: int
    dead_letters_last_minute: int
    rows_total: int
    dead_letters_total: int
    lag: int | None
    last_commit_age: float | None
    last_error: str
    throughput: list[float] = field(default_factory=list)  # messages/s, one value per 5 s, oldest first


def engine_status(settings: Settings, state: StateStore | None = None) -> dict[str, Any]:
    own = state is None
    state = state or StateStore(settings.state_db)
    try:
        row = state.engine()
    finally:
        if own:
            state.close()
    age = _age(row.get("heartbeat_at"), dt.datetime.now(dt.timezone.utc))
    alive = row.get("state") in ("running", "starting") and age is not None and age < HEARTBEAT_STALE
    return {"alive": alive, "pid": row.get("pid"), "spark_master": row.get("spark_master"), "heartbeat_age": age}


def throughput_series(batches: list[dict[str, Any]], now: dt.datetime, buckets: int = 24, width: float = 5.0) -> list[float]:
    """Messages per second in `buckets` windows of `width` seconds ending now, oldest first."""
    series = [0.0] * buckets
    for b in batches:
        age = _age(b["committed_at"], now)
        if age is None or age < 0:
            continue
        slot = buckets - 1 - int(age // width)
        if 0 <= slot < buckets:
            series[slot] += (b["messages"] or 0) / width
    return series


def streams_overview(settings: Settings) -> list[StreamView]:
    state = StateStore(settings.state_db)
    try:
        now = dt.datetime.now(dt.timezone.utc)
        since = (now - dt.timedelta(minutes=2)).isoformat(timespec="milliseconds")
        statuses = state.statuses()
        out = []
        for s in state.streams():
            st = statuses.get(s.name, {})
            recent = list(state.db["batches"].rows_where("stream = ? and committed_at >= ?", [s.name, since]))
            minute = [b for b in recent if (_age(b["committed_at"], now) or 1e9) <= 60]
            phase = "paused" if s.paused else (st.get("phase") or "idle")
            out.append(
                StreamView(
                    name=s.name,
                    state=phase,
                    topic=s.topic,
                    table=s.table,
                    dead_letter_table=s.dead_letter_table,
                    messages_per_s=0.0 if s.paused else float(st.get("messages_per_s") or 0.0),
                    rows_last_minute=sum(b["rows"] or 0 for b in minute),
                    dead_letters_last_minute=sum(b["dead_letter_rows"] or 0 for b in minute),
                    rows_total=st.get("rows_total") or 0,
                    dead_letters_total=st.get("dead_letter_total") or 0,
                    lag=st.get("lag"),
                    last_commit_age=_age(st.get("last_commit_at"), now),
                    last_error=(st.get("last_error") or "") if phase == "failed" else "",
                    throughput=throughput_series(recent, now),
                )
            )
        return out
    finally:
        state.close()


def stream_history(settings: Settings, name: str, limit: int = 120) -> list[dict[str, Any]]:
    """The stream's most recent batches, oldest first, with their rate and lag."""
    state = StateStore(settings.state_db)
    try:
        state.stream(name)
        rows = state.recent_batches(name, limit)
    finally:
        state.close()
    rows.reverse()
    for b in rows:
        b["messages_per_s"] = (b["messages"] or 0) / max((b["duration_ms"] or 1) / 1000, 0.001)
    return rows


@dataclass
class SnapshotView:
    snapshot_id: int
    committed_at: dt.datetime
    operation: str
    rows_added: int


@dataclass
class TableView:
    name: str
    rows: int
    data_files: int
    size_bytes: int
    snapshots: list[SnapshotView]
    schema: list[tuple[str, str]]
    location: str


def table_names(settings: Settings) -> list[str]:
    from appliance.catalog import Catalog

    return Catalog(settings).list_tables()


def table_view(settings: Settings, name: str) -> TableView:
    from appliance.catalog import Catalog

    table = Catalog(settings).table(name)
    current = table.current_snapshot()
    summary = current.summary.additional_properties if current and current.summary else {}
    snapshots = [
        SnapshotView(
            snapshot_id=s.snapshot_id,
            committed_at=dt.datetime.fromtimestamp(s.timestamp_ms / 1000, dt.timezone.utc),
            operation=s.summary.operation.value if s.summary else "",
            rows_added=int((s.summary.additional_properties if s.summary else {}).get("added-records", 0)),
        )
        for s in table.snapshots()
    ]
    return TableView(
        name=name,
        rows=int(summary.get("total-records", 0)),
        data_files=int(summary.get("total-data-files", 0)),
        size_bytes=int(summary.get("total-files-size", 0)),
        snapshots=snapshots,
        schema=[(f.name, str(f.field_type)) for f in table.schema().fields],
        location=table.location(),
    )
