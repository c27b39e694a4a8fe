"""Streams as whoever watches the engine sees them: `floe stream list/show` and the UI.

Everything here reads: the state database the engine writes as it runs, and the
catalog's table metadata. Nothing here needs the engine to be in this process.
"""

from __future__ import annotations

import datetime as dt
import fnmatch
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

from appliance.config.settings import Settings
from appliance.core.clock import age, utcnow
from appliance.core.vocabulary import StreamPhase
from appliance.state.records import BatchRecord, StreamStatus, StreamSummary
from appliance.state.store import StateStore
from appliance.views.engine import Shown, engine_health, shown
from appliance.views.patterns import RouteView, TopicView, committed_of, route_views, topic_views

if TYPE_CHECKING:  # imported where definitions are parsed, not by `floe stream list`
    from appliance.model.stream import StreamDef

RECENT = dt.timedelta(minutes=2)  # batches read for the last-minute figures and the throughput line


@dataclass
class StreamView:
    name: str
    phase: StreamPhase
    topic: str
    table: str
    dead_letter_table: str
    messages_per_s: float
    rows_last_minute: int
    dead_letters_last_minute: int
    rows_total: int
    dead_letters_total: int
    lag: int | None
    last_commit_at: str | None
    last_commit_age: float | None
    last_error: str  # while the stream is failing; "" otherwise
    throughput: list[float] = field(default_factory=list)  # messages/s, one value per 5 s, oldest first
    shown: Shown = field(default_factory=lambda: Shown(""))  # the state as `floe status` shows it
    tables: list[str] = field(default_factory=list)  # a pattern stream's: each topic's table; a routed one's routes'
    route_by: str = ""  # a routed stream's field

    def summary(self) -> dict[str, Any]:
        """The row `floe stream list` prints."""
        return {
            "name": self.name, "state": self.shown.state, "was": self.shown.was, "topic": self.topic,
            "table": f"{self.table} ({len(self.tables)} tables)" if self.tables else self.table,
            "rows": self.rows_total, "dead_letters": self.dead_letters_total, "lag": self.lag,
            "last_commit": self.last_commit_at or "", "last_error": self.last_error,
        }


def phase_of(stream: StreamDef | StreamSummary, status: StreamStatus) -> StreamPhase:
    return StreamPhase.PAUSED if stream.paused else status.phase


def target_committed(route_tables: int | None, target_snapshot_id: int | None) -> str:
    """What a batch committed besides its dead-letter table, as the CLI and the UI say it: its target's snapshot,
    or, for a routed stream's batch (which has no one target), how many route tables it committed."""
    if route_tables is not None:
        return f"{route_tables} route tables"
    return str(target_snapshot_id) if target_snapshot_id else "–"


def throughput_series(batches: list[BatchRecord], now: dt.datetime, buckets: int = 24,
                      width: float = 5.0) -> list[float]:
    """Messages per second in `buckets` windows of `width` seconds ending now, oldest first."""
    series = [0.0] * buckets
    for b in batches:
        seconds = age(b.committed_at, now)
        if seconds is None or seconds < 0:
            continue
        slot = buckets - 1 - int(seconds // width)
        if 0 <= slot < buckets:
            series[slot] += b.messages / width
    return series


def _stream_view(recent: list[BatchRecord], s: StreamDef | StreamSummary, st: StreamStatus, now: dt.datetime,
                 engine_up: bool, tables: list[str] | None = None) -> StreamView:
    """`tables`: a pattern stream's, each of its topics' table."""
    minute = [b for b in recent if (age(b.committed_at, now) or 1e9) <= 60]
    phase = phase_of(s, st)
    return StreamView(
        name=s.name,
        phase=phase,
        topic=s.topic,
        table=s.table,
        dead_letter_table=s.dead_letter_table,
        tables=tables or [],
        route_by=s.route_by,
        messages_per_s=0.0 if s.paused else st.messages_per_s,
        rows_last_minute=sum(b.rows for b in minute),
        dead_letters_last_minute=sum(b.dead_letter_rows for b in minute),
        rows_total=st.rows_total,
        dead_letters_total=st.dead_letter_total,
        lag=st.lag,
        last_commit_at=st.last_commit_at,
        last_commit_age=age(st.last_commit_at, now),
        last_error=st.last_error if phase == StreamPhase.FAILED else "",
        throughput=throughput_series(recent, now),
        shown=shown(phase, engine_up),
    )


def streams_overview(settings: Settings, batches: bool = True) -> list[StreamView]:
    """`batches=False`: without the last minute's figures and the throughput series, which read every recent batch
    (what the UI shows; `floe stream list` prints neither, and reading them was a third of its time)."""
    with StateStore(settings.state_db) as state:
        now = utcnow()
        statuses = state.statuses()
        up = engine_health(settings, state).up
        recent = state.recent_batches_by_stream((now - RECENT).isoformat(timespec="milliseconds")) if batches else {}
        tables = {**state.member_tables(), **state.route_tables()}  # pattern and routed streams': a query each
        return [_stream_view(recent.get(s.name, []), s, statuses.get(s.name) or StreamStatus(s.name), now, up,
                             tables.get(s.name)) for s in state.stream_summaries()]


SORTS = {  # `floe stream list --sort`: each key, and whether the largest comes first
    "name": (lambda v: v.name, False),
    "state": (lambda v: (v.shown.state, v.name), False),
    "rate": (lambda v: v.messages_per_s, True),
    "lag": (lambda v: v.lag or 0, True),
    "rows": (lambda v: v.rows_total, True),
    "errors": (lambda v: (bool(v.last_error), v.dead_letters_total), True),
    "last-commit": (lambda v: v.last_commit_at or "", True),
}


def select_streams(views: list[StreamView], name: str | None = None, state: str | None = None,
                   namespace: str | None = None, sort: str = "name") -> list[StreamView]:
    """The streams whose name matches the glob `name` (case-insensitive), whose shown state is `state` (or
    was, with the engine down) and whose target table is in `namespace`, in `sort`'s order."""
    pattern = name.lower() if name else None
    picked = [v for v in views
              if (pattern is None or fnmatch.fnmatchcase(v.name.lower(), pattern if any(c in pattern for c in "*?[")
                                                         else f"*{pattern}*"))
              and (state is None or state in (v.shown.state, v.shown.was))
              and (namespace is None or v.table.rsplit(".", 1)[0] == namespace)]
    key, largest_first = SORTS[sort]
    return sorted(picked, key=key, reverse=largest_first)


@dataclass(frozen=True)
class StreamTotals:
    """Every stream at once, as the UI's summary line says it: how many in each shown state (`stopped` with the
    engine down), their messages a second and lag added up, and the streams with errors (failing, or with dead
    letters in the last minute)."""

    streams: int
    states: dict[str, int]  # shown state -> streams, largest first
    messages_per_s: float
    lag: int
    with_errors: int


def stream_totals(views: list[StreamView]) -> StreamTotals:
    states: dict[str, int] = {}
    for v in views:
        states[v.shown.state] = states.get(v.shown.state, 0) + 1
    return StreamTotals(
        streams=len(views),
        states=dict(sorted(states.items(), key=lambda kv: (-kv[1], kv[0]))),
        messages_per_s=sum(v.messages_per_s for v in views),
        lag=sum(v.lag or 0 for v in views),
        with_errors=sum(1 for v in views if v.last_error or v.dead_letters_last_minute),
    )


def known_brokers(settings: Settings) -> list[str]:
    """The bootstrap servers the streams read, the newest stream's first, each once: what a new stream
    most likely reads too."""
    with StateStore(settings.state_db) as state:
        streams = sorted(state.streams(), key=lambda s: s.created_at or "", reverse=True)
    return list(dict.fromkeys(s.kafka.bootstrap for s in streams))


def history_series(batches: list[BatchRecord], now: dt.datetime, buckets: int = 60, width: float = 5.0,
                   lag_now: int | None = None) -> tuple[list[float], list[float]]:
    """Messages/s and lag in `buckets` windows of `width` seconds ending now, oldest first.

    `batches` oldest first. A window without a batch keeps the lag of the batch before it;
    the newest window shows `lag_now` when given (the engine updates the stream's lag even
    when a poll finds nothing to commit).
    """
    rate = [0.0] * buckets
    lag_at: list[float | None] = [None] * buckets
    carried: float | None = None
    for b in batches:
        seconds = age(b.committed_at, now)
        if seconds is None:
            continue
        slot = buckets - 1 - int(max(seconds, 0.0) // width)
        if slot < 0:
            if b.lag is not None:
                carried = float(b.lag)  # before the window: where the lag line starts
            continue
        rate[slot] += b.messages / width
        if b.lag is not None:
            lag_at[slot] = float(b.lag)
    lag: list[float] = []
    for value in lag_at:
        carried = value if value is not None else carried
        lag.append(carried or 0.0)
    if lag_now is not None and lag:
        lag[-1] = float(lag_now)
    return rate, lag


@dataclass(frozen=True)
class TopicTables:
    """A pattern stream's topic as its detail lists it: its tables, and since when the topic is gone."""

    topic: str
    table: str
    dead_letter_table: str
    removed_at: str = ""


@dataclass
class StreamDetail:
    view: StreamView
    kafka_bootstrap: str
    created_at: str
    batches: list[BatchRecord]  # newest first
    rate_series: list[float]  # messages/s, oldest first, one value per `series_width` seconds
    lag_series: list[float]
    series_width: float
    source: SourceView | None = None
    topics: list[TopicTables] = field(default_factory=list)  # a pattern stream's, in name order


@dataclass(frozen=True)
class SchemaSeen:
    """A writer schema a stream has met: its id (and message indexes), subject and version."""

    schema: str
    subject: str
    version: int | None
    messages: int
    first_seen_at: str
    last_seen_at: str


@dataclass(frozen=True)
class SourceView:
    """How a stream's messages are read: format, registry (password masked), subject, evolution."""

    format: str
    registry: str
    registry_options: dict[str, str]  # secrets masked
    subject: str
    schema_evolution: str
    schemas: tuple[SchemaSeen, ...]
    mode: str = "append"  # as `StreamDef.describe_mode` says it: "append", "upsert by id"...
    kafka_columns: tuple[str, ...] = ()  # "key", "headers": kept as _kafka_key, _kafka_headers


def source_view(state: StateStore, s: StreamDef) -> SourceView:
    seen = tuple(SchemaSeen(r["schema"], r["subject"] or "", r["version"], r["messages"] or 0, r["first_seen_at"],
                            r["last_seen_at"]) for r in state.seen_schemas(s.name))
    return SourceView(s.format, s.registry.display_url if s.registry else "",
                      s.registry.masked_options() if s.registry else {}, s.subject, s.schema_evolution, seen,
                      s.describe_mode(), s.kafka_columns)


def stream_detail(settings: Settings, name: str, batches: int = 50, buckets: int = 60,
                  width: float = 5.0) -> StreamDetail:
    """One stream's header, recent batches and rate/lag series, in one read of the state database."""
    with StateStore(settings.state_db) as state:
        now = utcnow()
        s = state.stream(name)
        recent = state.batches_since(name, (now - RECENT).isoformat(timespec="milliseconds"))
        members = list(state.members(name).values()) if s.is_pattern else []
        tables = [m.table for m in members] if s.is_pattern else \
            [r.table for r in state.routes(name).values() if not r.refused] if s.is_routed else None
        view = _stream_view(recent, s, state.status(name), now, engine_health(settings, state).up, tables)
        # Enough batches to cover the window (one a second at most per stream by default) and the table.
        history = state.recent_batches(name, limit=max(batches, int(buckets * width * 2)))
        source = source_view(state, s)
    history.reverse()
    rate, lag = history_series(history, now, buckets, width, lag_now=None if s.paused else view.lag)
    return StreamDetail(
        view=view,
        kafka_bootstrap=s.kafka.bootstrap,
        created_at=s.created_at,
        batches=list(reversed(history[-batches:])),
        rate_series=rate,
        lag_series=lag,
        series_width=width,
        source=source,
        topics=[TopicTables(m.topic, m.table, m.dead_letter_table, m.removed_at) for m in members],
    )


@dataclass
class StreamInfo:
    """Everything `floe stream show` prints: the definition, where it stands, its mapping."""

    name: str
    id: str
    phase: StreamPhase
    topic: str
    bootstrap: str
    kafka_options: dict[str, str]  # secrets masked
    format: str
    schema_registry: str  # its URL, any password masked
    registry_options: dict[str, str]  # secrets masked
    subject: str
    schema_evolution: str
    schemas_seen: list[SchemaSeen]
    mode: str  # append, or upsert (with `key`, and `cdc` for change events)
    key: list[str]
    cdc: str
    kafka_columns: list[str]  # "key", "headers": kept as the _kafka_key and _kafka_headers columns
    table: str
    dead_letter_table: str
    starting_offsets: str
    committed_offsets: dict[int, int] | str | None  # a text when the table cannot be read
    rows_total: int
    dead_letter_total: int
    lag: int | None
    last_commit_at: str | None
    last_error: str
    recent_batches: list[BatchRecord]
    mapping: str  # TOML, as saved in mappings/NAME.toml ("" for a pattern stream's: each topic has its own)
    shown: Shown = field(default_factory=lambda: Shown(""))  # the state as `floe status` shows it
    topic_pattern: str = ""  # a pattern stream's: `topic` and `table` are then the pattern and the template
    topics: list[TopicView] = field(default_factory=list)  # a pattern stream's topics and their tables
    route_by: str = ""  # a routed stream's field: `table` is then the template of its tables
    routes: list[RouteView] = field(default_factory=list)  # a routed stream's tables

    def as_dict(self) -> dict[str, Any]:
        """As `floe stream show --format json` prints it: `state` (and `was`) as `floe status` has them."""
        out = asdict(self)
        out.pop("phase")
        seen = out.pop("shown")
        return {"name": out.pop("name"), "id": out.pop("id"), "state": seen["state"], "was": seen["was"], **out}


def stream_info(settings: Settings, name: str) -> StreamInfo:
    # The committed offsets are read from the table itself (its snapshots are the truth); a pattern stream's,
    # from each of its topics' tables.
    with StateStore(settings.state_db) as state:
        s = state.stream(name)
        status = state.status(name)
        batches = state.recent_batches(name, 5)
        source = source_view(state, s)
        up = engine_health(settings, state).up
        members = state.members(name)
        routes = state.routes(name) if s.is_routed else {}
    # A routed stream's position is its dead-letter table's, committed last in each batch (`ingest/routed.py`).
    offsets = None if s.is_pattern else committed_of(settings, s.dead_letter_table if s.is_routed else s.table, s.id)
    return StreamInfo(
        name=s.name, id=s.id, phase=phase_of(s, status), topic=s.topic, bootstrap=s.kafka.bootstrap,
        kafka_options=s.kafka.masked_options(), format=s.format, schema_registry=source.registry,
        registry_options=source.registry_options, subject=source.subject, schema_evolution=s.schema_evolution,
        schemas_seen=list(source.schemas), mode=s.mode, key=list(s.key), cdc=s.cdc, kafka_columns=list(s.kafka_columns),
        table=s.table,
        dead_letter_table=s.dead_letter_table, starting_offsets=s.starting_offsets, committed_offsets=offsets,
        rows_total=status.rows_total, dead_letter_total=status.dead_letter_total, lag=status.lag,
        last_commit_at=status.last_commit_at, last_error=status.last_error, recent_batches=batches,
        mapping=s.mapping_toml() if s.mapping.columns else "", shown=shown(phase_of(s, status), up),
        topic_pattern=s.topic_pattern, topics=topic_views(settings, members) if s.is_pattern else [],
        route_by=s.route_by, routes=route_views(settings, s.id, routes),
    )
