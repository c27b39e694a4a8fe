"""Events: what the engine recorded, and dead-letter bursts derived from its batches."""

from __future__ import annotations

import datetime as dt
import itertools
import threading
from dataclasses import dataclass

from appliance.config.settings import Settings
from appliance.core.clock import age
from appliance.core.vocabulary import EventKind, EventLevel
from appliance.state.records import BatchRecord, EventRecord
from appliance.state.store import StateStore

BURST_SHARE = 0.10  # a batch whose dead-letter rows are at least this share of its messages...
BURST_MIN_MESSAGES = 20  # ...and that holds at least this many messages is a burst
BURST_MERGE_SECONDS = 60.0  # burst batches of one stream this close together make one event
BURST_SCAN_BATCHES = 20_000  # only the newest batches are looked at, so a poll stays cheap
_VERSIONS = itertools.count(1)  # feeds' versions, shared by every follower


@dataclass
class EventView:
    key: str  # stable across polls: "event:<id>" or "burst:<stream>:<first batch id>"
    at: str  # ISO 8601, UTC
    stream: str | None
    level: EventLevel
    kind: EventKind | str
    message: str
    id: int = 0  # a recorded event's id in the state database (0 for a derived one)


@dataclass
class EventsFeed:
    events: list[EventView]  # newest first
    streams: list[str]  # every stream that exists or has events, for a filter
    version: int = 0  # a follower's feed's (`EventsFollower`): new each time it changes, never another's


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
    return _bursts(state.heavy_dead_letter_batches(BURST_MIN_MESSAGES, BURST_SHARE, BURST_SCAN_BATCHES, stream))


def _bursts(heavy: list[BatchRecord]) -> list[EventView]:
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


def _view(e: EventRecord) -> EventView:
    return EventView(key=f"event:{e.id}", at=e.at, stream=e.stream, level=e.level, kind=e.kind, message=e.message,
                     id=e.id)


class EventsFollower:
    """The newest `limit` events (of one stream, or all), recorded and derived, read again at the cost of what
    changed: the events after the newest one read, the batches after the newest one read (the bursts are derived
    from the heavy ones, kept), the list of streams only when a stream was created or deleted or events were pruned. A second where
    nothing changed is a few small statements.

    `read` returns the whole feed each time, with a `version` that moves only when it changed: a reader that
    missed a feed (a worker cancelled) still gets what it missed.
    """

    def __init__(self, settings: Settings, stream: str | None = None, limit: int = 200) -> None:
        self.settings, self.stream, self.limit = settings, stream, limit
        self._lock = threading.Lock()
        self._reset()

    def _reset(self) -> None:
        self._first_event = self._last_event = self._last_batch = 0
        self._recorded: list[EventView] = []  # newest first, at most `limit`
        self._heavy: list[BatchRecord] = []  # heavy batches among the newest BURST_SCAN_BATCHES, oldest first
        self._streams_version: tuple[object, ...] | None = None
        self._names: set[str] = set()
        self._feed = EventsFeed([], [], 0)

    def read(self) -> EventsFeed:
        with self._lock:  # a worker cancelled by the next one may still be reading
            return self._read()

    def _read(self) -> EventsFeed:
        with StateStore(self.settings.state_db) as state:
            state.db.conn.execute("BEGIN")  # one snapshot: nothing committed between two reads is read twice
            first_event, last_event, first_batch, last_batch = state.id_ranges()
            if last_event < self._last_event or last_batch < self._last_batch:
                self._reset()  # a state database restored from a backup: read it all again
            new = state.events(self.stream, self.limit, self._last_event) if last_event > self._last_event else []
            heavy = state.heavy_dead_letter_batches(BURST_MIN_MESSAGES, BURST_SHARE, BURST_SCAN_BATCHES, self.stream,
                                                    self._last_batch) if last_batch > self._last_batch else []
            version = state.streams_version()
            names = None
            if (version, first_event) != (self._streams_version, self._first_event):
                # A stream created or deleted, or events pruned (a deleted stream's last ones): read only now.
                names = {s.name for s in state.stream_summaries()} | state.event_streams()
            state.db.conn.execute("COMMIT")
        kept = [b for b in self._heavy if b.id > last_batch - BURST_SCAN_BATCHES and b.id >= first_batch]
        recorded = [e for e in self._recorded if e.id >= first_event]  # the older ones were pruned
        changed = bool(new) or bool(heavy) or len(kept) < len(self._heavy) or len(recorded) < len(self._recorded) \
            or names is not None
        self._last_event, self._last_batch, self._streams_version = last_event, last_batch, version
        self._first_event = first_event
        self._heavy = kept + heavy
        self._recorded = ([_view(e) for e in new] + recorded)[:self.limit]
        self._names = (names if names is not None else self._names) | {e.stream for e in new if e.stream}
        if changed or not self._feed.version:
            # Stable sort: recorded events keep their id order within one millisecond.
            merged = sorted(self._recorded + _bursts(self._heavy), key=lambda e: e.at, reverse=True)
            self._feed = EventsFeed(merged[:self.limit], sorted(self._names), next(_VERSIONS))
        return self._feed


def events_feed(settings: Settings, stream: str | None = None, limit: int = 200) -> EventsFeed:
    """The newest `limit` events (of one stream, or all), recorded and derived, newest first."""
    return EventsFollower(settings, stream, limit).read()
