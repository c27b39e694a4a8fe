"""Events: what the engine recorded, and dead-letter bursts derived from its batches."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass

from appliance.config.settings import Settings
from appliance.core.clock import age
from appliance.core.vocabulary import EventKind, EventLevel
from appliance.state.records import BatchRecord
from appliance.state.store import StateStore

BURST_SHARE = 0.10  # a batch whose dead-letter rows are at least this share of its messages...
BURST_MIN_MESSAGES = 20  # ...and that holds at least this many messages is a burst
BURST_MERGE_SECONDS = 60.0  # burst batches of one stream this close together make one event
BURST_SCAN_BATCHES = 20_000  # only the newest batches are looked at, so a poll stays cheap


@dataclass
class EventView:
    key: str  # stable across polls: "event:<id>" or "burst:<stream>:<first batch id>"
    at: str  # ISO 8601, UTC
    stream: str | None
    level: EventLevel
    kind: EventKind | str
    message: str


@dataclass
class EventsFeed:
    events: list[EventView]  # newest first
    streams: list[str]  # every stream that exists or has events, for a filter


def _runs(batches: list[BatchRecord]) -> list[list[BatchRecord]]:
    """Consecutive batches of one stream no more than BURST_MERGE_SECONDS apart, grouped."""
    groups: dict[str, list[list[BatchRecord]]] = {}
    for b in batches:
        runs = groups.setdefault(b.stream, [])
        if runs and (age(runs[-1][-1].committed_at, dt.datetime.fromisoformat(b.committed_at)) or 0) \
                <= BURST_MERGE_SECONDS:
            runs[-1].append(b)
        else:
            runs.append([b])
    return [run for runs in groups.values() for run in runs]


def dead_letter_bursts(state: StateStore, stream: str | None = None) -> list[EventView]:
    """`dead_letter_burst` events, derived from the batches the engine recorded; newest first.

    Nothing is stored: the batches are the record. Consecutive burst batches of a stream
    are reported as one event.
    """
    heavy = state.heavy_dead_letter_batches(BURST_MIN_MESSAGES, BURST_SHARE, BURST_SCAN_BATCHES, stream)
    out = []
    for run in _runs(heavy):
        messages = sum(b.messages for b in run)
        dead = sum(b.dead_letter_rows for b in run)
        if len(run) == 1:
            span = "in one batch"
        else:
            seconds = age(run[0].committed_at, dt.datetime.fromisoformat(run[-1].committed_at)) or 0.0
            span = f"over {len(run)} batches in {seconds:.0f}s"
        out.append(EventView(
            key=f"burst:{run[0].stream}:{run[0].id}",
            at=run[-1].committed_at,
            stream=run[0].stream,
            level=EventLevel.WARNING,
            kind=EventKind.DEAD_LETTER_BURST,
            message=f"{dead} of {messages} messages ({dead / messages:.0%}) went to the dead-letter table {span}",
        ))
    out.sort(key=lambda e: e.at, reverse=True)
    return out


def events_feed(settings: Settings, stream: str | None = None, limit: int = 200) -> EventsFeed:
    """The newest `limit` events (of one stream, or all), recorded and derived, newest first."""
    with StateStore(settings.state_db) as state:
        recorded = [
            EventView(key=f"event:{e.id}", at=e.at, stream=e.stream, level=e.level, kind=e.kind, message=e.message)
            for e in state.events(stream, limit)
        ]
        bursts = dead_letter_bursts(state, stream)
        names = {s.name for s in state.stream_summaries()} | state.event_streams()  # no mapping parsed
    # Stable sort: recorded events keep their id order within one millisecond.
    merged = sorted(recorded + bursts, key=lambda e: e.at, reverse=True)
    return EventsFeed(events=merged[:limit], streams=sorted(names))
