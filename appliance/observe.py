"""Read models for whoever watches the engine (the terminal UI, `floe stream show`).

Everything here reads: the state database the engine writes as it runs, and the
catalog's table metadata. Nothing here needs the engine to be in this process.
"""

from __future__ import annotations

import codecs
import datetime as dt
from dataclasses import dataclass, field
from typing import Any

from appliance.settings import Settings
from appliance.state import StateStore, StreamDef

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


def _stream_view(state: StateStore, s: StreamDef, st: dict[str, Any], now: dt.datetime) -> StreamView:
    since = (now - dt.timedelta(minutes=2)).isoformat(timespec="milliseconds")
    recent = list(state.db["batches"].rows_where("stream = ? and committed_at >= ?", [s.name, since]))
    minute = [b for b in recent if (_age(b["committed_at"], now) or 1e9) <= 60]
    phase = "paused" if s.paused else (st.get("phase") or "idle")
    return StreamView(
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


def streams_overview(settings: Settings) -> list[StreamView]:
    state = StateStore(settings.state_db)
    try:
        now = dt.datetime.now(dt.timezone.utc)
        statuses = state.statuses()
        return [_stream_view(state, s, statuses.get(s.name, {}), now) for s in state.streams()]
    finally:
        state.close()


def stream_history(settings: Settings, name: str, limit: int = 120, state: StateStore | None = None) -> list[dict[str, Any]]:
    """The stream's most recent batches, oldest first, with their rate and lag (None before lag was recorded)."""
    own = state is None
    state = state or StateStore(settings.state_db)
    try:
        state.stream(name)
        rows = state.recent_batches(name, limit)
    finally:
        if own:
            state.close()
    rows.reverse()
    for b in rows:
        b["messages_per_s"] = (b["messages"] or 0) / max((b["duration_ms"] or 1) / 1000, 0.001)
        b.setdefault("lag", None)
    return rows


def history_series(
    batches: list[dict[str, Any]], now: dt.datetime, buckets: int = 60, width: float = 5.0, lag_now: int | None = None
) -> tuple[list[float], list[float]]:
    """Messages/s and lag in `buckets` windows of `width` seconds ending now, oldest first.

    `batches` oldest first, as `stream_history` returns them. A window without a batch
    keeps the lag of the batch before it; the newest window shows `lag_now` when given
    (the engine updates the stream's lag even when a poll finds nothing to commit).
    """
    rate = [0.0] * buckets
    lag_at: list[float | None] = [None] * buckets
    carried: float | None = None
    for b in batches:
        age = _age(b["committed_at"], now)
        if age is None:
            continue
        slot = buckets - 1 - int(max(age, 0.0) // width)
        if slot < 0:
            if b.get("lag") is not None:
                carried = float(b["lag"])  # before the window: where the lag line starts
            continue
        rate[slot] += (b["messages"] or 0) / width
        if b.get("lag") is not None:
            lag_at[slot] = float(b["lag"])
    lag: list[float] = []
    for value in lag_at:
        carried = value if value is not None else carried
        lag.append(carried or 0.0)
    if lag_now is not None and lag:
        lag[-1] = float(lag_now)
    return rate, lag


@dataclass
class StreamDetail:
    view: StreamView
    kafka_bootstrap: str
    created_at: str
    batches: list[dict[str, Any]]  # newest first, as `stream_history` rows
    rate_series: list[float]  # messages/s, oldest first, one value per `series_width` seconds
    lag_series: list[float]
    series_width: float


def stream_detail(settings: Settings, name: str, batches: int = 50, buckets: int = 60, width: float = 5.0) -> StreamDetail:
    """One stream's header, recent batches and rate/lag series, in one read of the state database."""
    state = StateStore(settings.state_db)
    try:
        now = dt.datetime.now(dt.timezone.utc)
        s = state.stream(name)
        view = _stream_view(state, s, state.status(name), now)
        window = dt.timedelta(seconds=buckets * width)
        # Enough batches to cover the window (one a second at most per stream by default) and the table.
        history = stream_history(settings, name, limit=max(batches, int(window.total_seconds() * 2)), state=state)
    finally:
        state.close()
    rate, lag = history_series(history, now, buckets, width, lag_now=None if s.paused else view.lag)
    return StreamDetail(
        view=view,
        kafka_bootstrap=s.kafka.bootstrap,
        created_at=s.created_at,
        batches=list(reversed(history[-batches:])),
        rate_series=rate,
        lag_series=lag,
        series_width=width,
    )


# ---- dead letters (read from the dead-letter table through DuckDB) ----


@dataclass
class DeadLetter:
    ingested_at: dt.datetime | None
    partition: int | None
    offset: int | None
    kafka_timestamp: dt.datetime | None
    error_stage: str
    error_message: str
    value_preview: str  # the raw value's first bytes as UTF-8, undecodable bytes replaced
    value_bytes: int | None  # the raw value's full size; None for a null value
    truncated: bool


def _preview(raw: bytes | None, total: int | None) -> tuple[str, bool]:
    if raw is None:
        return "", False
    truncated = total is not None and total > len(raw)
    # A cut in the middle of a character is not an error of the message: leave the tail out.
    text = codecs.getincrementaldecoder("utf-8")("replace").decode(bytes(raw), final=not truncated)
    return text, truncated


def dead_letters(settings: Settings, name: str, limit: int = 20, preview_bytes: int = 512) -> list[DeadLetter]:
    """The stream's most recent dead-letter rows, newest first, from its dead-letter table."""
    from appliance.query import run_query

    state = StateStore(settings.state_db)
    try:
        table = state.stream(name).dead_letter_table
    finally:
        state.close()
    namespace, _, short = table.partition(".")
    sql = (
        "select _ingested_at, _kafka_partition, _kafka_offset, _kafka_timestamp, error_stage, error_message,"
        f" raw_value[1:{int(preview_bytes)}] as raw_preview, octet_length(raw_value) as raw_bytes"
        f' from "{namespace}"."{short}" order by _ingested_at desc, _kafka_offset desc limit {int(limit)}'
    )
    out = []
    for row in run_query(settings, sql).to_pylist():
        text, truncated = _preview(row["raw_preview"], row["raw_bytes"])
        out.append(
            DeadLetter(
                ingested_at=row["_ingested_at"],
                partition=row["_kafka_partition"],
                offset=row["_kafka_offset"],
                kafka_timestamp=row["_kafka_timestamp"],
                error_stage=row["error_stage"] or "",
                error_message=row["error_message"] or "",
                value_preview=text,
                value_bytes=row["raw_bytes"],
                truncated=truncated,
            )
        )
    return out


# ---- events: what the engine recorded, and dead-letter bursts derived from its batches ----

BURST_SHARE = 0.10  # a batch whose dead-letter rows are at least this share of its messages...
BURST_MIN_MESSAGES = 20  # ...and that holds at least this many messages is a burst
BURST_MERGE_SECONDS = 60.0  # burst batches of one stream this close together make one event
BURST_SCAN_BATCHES = 20_000  # only the newest batches are looked at, so a poll stays cheap


@dataclass
class EventView:
    key: str  # stable across polls: "event:<id>" or "burst:<stream>:<first batch id>"
    at: str  # ISO 8601, UTC
    stream: str | None
    level: str  # info, warning, error
    kind: str
    message: str


@dataclass
class EventsFeed:
    events: list[EventView]  # newest first
    streams: list[str]  # every stream that exists or has events, for a filter


def dead_letter_bursts(state: StateStore, stream: str | None = None) -> list[EventView]:
    """`dead_letter_burst` events, derived from the batches the engine recorded; newest first.

    Nothing is stored: the batches are the record. Consecutive burst batches of a stream
    (no more than BURST_MERGE_SECONDS apart) are reported as one event.
    """
    if "batches" not in state.db.table_names():
        return []
    top = state.db.execute("select coalesce(max(id), 0) from batches").fetchone()[0]
    where = "id > ? and messages >= ? and dead_letter_rows * 1000 >= messages * ?"
    args: list[Any] = [top - BURST_SCAN_BATCHES, BURST_MIN_MESSAGES, int(BURST_SHARE * 1000)]
    if stream:
        where += " and stream = ?"
        args.append(stream)
    rows = state.db.execute(
        f"select id, stream, committed_at, messages, dead_letter_rows from batches where {where} order by id", args
    ).fetchall()
    groups: dict[str, list[list[Any]]] = {}
    for row in rows:
        runs = groups.setdefault(row[1], [])
        if runs and (_age(runs[-1][-1][2], dt.datetime.fromisoformat(row[2])) or 0) <= BURST_MERGE_SECONDS:
            runs[-1].append(row)
        else:
            runs.append([row])
    out = []
    for name, runs in groups.items():
        for run in runs:
            messages = sum(r[3] for r in run)
            dead = sum(r[4] for r in run)
            if len(run) == 1:
                span = "in one batch"
            else:
                seconds = _age(run[0][2], dt.datetime.fromisoformat(run[-1][2])) or 0.0
                span = f"over {len(run)} batches in {seconds:.0f}s"
            out.append(
                EventView(
                    key=f"burst:{name}:{run[0][0]}",
                    at=run[-1][2],
                    stream=name,
                    level="warning",
                    kind="dead_letter_burst",
                    message=f"{dead} of {messages} messages ({dead / messages:.0%}) went to the dead-letter table {span}",
                )
            )
    out.sort(key=lambda e: e.at, reverse=True)
    return out


def events_feed(settings: Settings, stream: str | None = None, limit: int = 200) -> EventsFeed:
    """The newest `limit` events (of one stream, or all), recorded and derived, newest first."""
    state = StateStore(settings.state_db)
    try:
        recorded = [
            EventView(
                key=f"event:{e['id']}", at=e["at"], stream=e["stream"], level=e["level"] or "info",
                kind=e["kind"] or "", message=e["message"] or "",
            )
            for e in state.events(stream, limit)
        ]
        bursts = dead_letter_bursts(state, stream)
        names = {s.name for s in state.streams()}
        names.update(r[0] for r in state.db.execute("select distinct stream from events where stream is not null"))
    finally:
        state.close()
    # Stable sort: recorded events keep their id order within one millisecond.
    merged = sorted(recorded + bursts, key=lambda e: e.at, reverse=True)
    return EventsFeed(events=merged[:limit], streams=sorted(names))


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


# ---- table maintenance: the policy in effect, the record of runs, runs asked for ----


@dataclass
class MaintenanceView:
    table: str
    policy: list[dict[str, str]]  # {"setting", "value", "from"}, in `floe table policy` order
    runs: list[dict[str, Any]]  # `maintenance_runs` rows, newest first
    requested: list[dict[str, Any]]  # requests no engine has taken yet, oldest first
    running: list[dict[str, Any]]  # requests the running engine took whose run is not recorded yet, oldest first
    engine_alive: bool
    policy_error: str = ""  # a stored policy that no longer checks out: the runs are still worth showing


def table_maintenance(settings: Settings, table: str, runs: int = 20) -> MaintenanceView:
    """One table's maintenance, from the state database alone: cheap enough to poll every second.

    The policy is resolved like `describe_policy` does, without its catalog lookup (and
    without a Maintainer, whose catalog connection a once-a-second poll does not need).
    """
    from appliance.errors import ConfigError
    from appliance.maintenance import effective_policy
    from appliance.policy import PARSERS

    state = StateStore(settings.state_db)
    try:
        try:
            _, source, raw = effective_policy(settings, state, table)
            policy, policy_error = [{"setting": k, "value": str(raw[k]), "from": source[k]} for k in PARSERS], ""
        except ConfigError as exc:
            policy, policy_error = [], str(exc)
        engine = state.engine()
        alive = engine_status(settings, state)["alive"]
        running: list[dict[str, Any]] = []
        if alive:
            # A request leaves the queue when the engine takes it and its run is recorded when it
            # ends; in between it is running (or waiting behind another). Requests taken by an
            # engine that died before recording them are not this engine's: started_at tells.
            running = [dict(r) for r in state.db.query(
                "select * from maintenance_requests r where r.table_name = ? and r.taken_at is not null"
                " and r.taken_at >= ? and not exists (select 1 from maintenance_runs m where"
                " m.table_name = r.table_name and m.task = r.task and m.trigger = 'request'"
                " and m.started_at >= r.taken_at) order by r.id",
                [table, engine.get("started_at") or ""],
            )]
        return MaintenanceView(
            table=table,
            policy=policy,
            runs=state.runs(table, limit=runs),
            requested=state.pending_requests(table),
            running=running,
            engine_alive=alive,
            policy_error=policy_error,
        )
    finally:
        state.close()
