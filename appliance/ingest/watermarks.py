"""One watermark poller per Kafka cluster, for every running stream that reads from it.

Each stream used to ask its partitions' watermarks itself, one request per partition at every
poll: 500 idle streams made 2,000 requests a second and woke 500 threads four times a second.
A poller asks a cluster's watermarks of every partition its streams read in two requests a poll
interval per 100 partitions (`KafkaClient.many_watermarks`), and its partitions in one metadata request every
`PARTITIONS_TTL`; it sets a stream's `moved` event when one of its topic's watermarks changes or
an error appears, so an idle stream sleeps until it has something to read (and a lingering trickle
until it has enough, `hold`). A topic whose every stream lingers is asked only at the last poll before the
tick of the commit grid its trickles wake at, when they plan, not at every poll. A failure stays the
topic's (a topic deleted) or the cluster's (a broker down), raised in the steps of the streams
it concerns, as the stream's own request raised it before.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections import Counter
from dataclasses import dataclass, field

from appliance.core.errors import FloeError, UnforeseenError
from appliance.ingest.jobs import next_tick
from appliance.ingest.planning import lag
from appliance.kafka.client import KafkaClient, Watermarks
from appliance.kafka.settings import KafkaSettings

log = logging.getLogger(__name__)

PARTITIONS_TTL = 30.0  # seconds a topic's partition list is kept: partitions are rarely added
# A cluster where nothing moved for QUIET_POLLS polls is asked less often, the interval doubling up to
# QUIET_INTERVAL, and back at once when anything moves: 500 idle streams' two requests of 2,000 partitions
# four times a second were most of an idle engine's CPU; a quiet topic's first message waits at most a second.
QUIET_POLLS = 8
QUIET_INTERVAL = 1.0


@dataclass
class _Topic:
    partitions: list[int] | None = None
    looked_up: float = 0.0
    marks: dict[int, Watermarks] = field(default_factory=dict)
    error: FloeError | None = None
    listeners: set[threading.Event] = field(default_factory=set)


def tick_ahead(now: float, grid: float, interval: float, poll_seconds: float) -> float | None:
    """The grid's next tick when a poll begun `now` may be the last before it; None when a later poll will be.

    Polls begin `interval` after the last one ended, so two begin up to `interval` + a poll's time + a late wake
    apart: a window of `interval` alone before each tick fell between two polls now and then, and the tick's
    trickles planned with the watermarks of the cycle before, their newest messages left for the next cycle (4 s
    later). Measured at 200 streams over an hour: a batch's newest message was 1.1 s old at its start (p95) in
    the first forty minutes, 3.8-4.0 s in the last twenty (the polls slower under expiry's load), and the
    freshness p95 of its last ten minutes 6.2 s against 4.1-4.5 before. The window is the widest such gap (the last
    poll's time, and half an interval for a late wake): sometimes two polls ask for one tick."""
    tick = next_tick(now, grid)
    return tick if tick - now <= interval * 1.5 + poll_seconds else None


class ClusterPoller(threading.Thread):
    """The watermarks of every topic its streams read on one cluster, asked together each interval."""

    def __init__(self, kafka: KafkaSettings, interval: float, stopping: threading.Event, grid: float = 0.0) -> None:
        super().__init__(name=f"floe-watermarks-{kafka.bootstrap}", daemon=True)
        self.kafka = kafka
        self.interval = interval
        self.grid = grid  # the commit grid lingering trickles wake on (0: every topic at every poll)
        self.stopping = stopping
        self._cond = threading.Condition()
        self._topics: dict[str, _Topic] = {}
        self._begun = 0  # polls begun
        self._done = 0  # polls done
        self._asked = False  # a caller waits for a poll begun after its call
        self._client: KafkaClient | None = None
        # Lingering trickles: (positions, limit, the tick they wake at unless woken: None, any tick)
        self._held: dict[threading.Event, tuple[dict[int, int], int, float | None]] = {}
        self.timeout = 10.0  # seconds a request waits for the cluster
        self.requests = 0  # rounds of requests sent, for whoever wants to see the sharing
        self.asked: Counter[str] = Counter()  # polls that asked each topic
        self.current_interval = interval  # seconds between polls now: longer while nothing moves
        self._poll_seconds = 0.0  # how long the last poll took

    def subscribe(self, topic: str, moved: threading.Event) -> None:
        with self._cond:
            self._topics.setdefault(topic, _Topic()).listeners.add(moved)

    def unsubscribe(self, topic: str, moved: threading.Event) -> None:
        with self._cond:
            found = self._topics.get(topic)
            if found is not None:
                found.listeners.discard(moved)
                if not found.listeners:
                    del self._topics[topic]

    def hold(self, topic: str, moved: threading.Event, positions: dict[int, int], limit: int,
             due: float | None = None) -> None:
        """Until `release`, `moved` (cleared now) is set only once `limit` messages of `topic` wait past
        `positions`, or the topic fails: a lingering trickle sleeps through the polls that see a message or
        two arrive (hundreds of them woke at every poll, each to find it had not enough to read).

        With `due` (the grid's tick the trickle wakes at), its topic is asked only at the last poll before that
        tick, not before every tick: trickles spread over a cycle's ticks (`jobs.trickle_due`), every topic
        before every tick asked three or four times what their streams read once. What arrives meanwhile, however
        much, waits for that tick (at most the trickle's cycle): a worker gives `due` only while its stream's rate
        brings fewer than `limit` messages by then (`jobs.asked_before`).
        """
        with self._cond:
            self._held[moved] = (positions, limit, due)
            moved.clear()
            known = self._topics.get(topic)
            if known is not None and (known.error is not None or lag(positions, known.marks) >= limit):
                moved.set()

    def release(self, moved: threading.Event) -> None:
        with self._cond:
            self._held.pop(moved, None)

    def watermarks(self, topic: str, fresh: bool = False) -> dict[int, Watermarks]:
        """`topic`'s partitions' watermarks as last polled; `fresh`, or a topic never polled yet: from a
        poll begun after this call. A failure to learn them is raised."""
        with self._cond:
            known = self._topics.setdefault(topic, _Topic())
            if fresh or known.partitions is None and known.error is None:
                want = self._begun + 1
                self._asked = True
                self._cond.notify_all()
                while self._done < want:
                    if self.stopping.is_set() and not self.is_alive():
                        break
                    self._cond.wait(1.0)
            if known.error is not None:
                raise known.error
            return dict(known.marks)

    def close(self) -> None:
        with self._cond:
            self._cond.notify_all()
        if self.is_alive():
            self.join(15)
        if self._client is not None:
            self._client.close()
            self._client = None

    def run(self) -> None:
        quiet, interval = 0, self.interval
        while not self.stopping.is_set():
            with self._cond:
                if not self._asked:
                    self._cond.wait(interval)
                asked, self._asked = self._asked, False
                self._begun += 1
                names = list(self._topics) if asked else self._to_ask(self._tick_ahead(interval))
                self.asked.update(names)
            began = time.monotonic()
            found = self._poll(names) if names else {}
            self._poll_seconds = time.monotonic() - began
            with self._cond:
                quiet = 0 if self._apply(found) else quiet + 1
                self._done += 1
                self._cond.notify_all()
            interval = self.interval if quiet < QUIET_POLLS else min(max(self.interval, QUIET_INTERVAL), interval * 2)
            self.current_interval = interval

    def _tick_ahead(self, interval: float) -> float | None:
        """The commit grid's next tick when this may be the last poll before it, when lingering trickles wake (with
        no grid, every poll is: inf); None at the other polls."""
        if self.grid <= 0:
            return math.inf
        return tick_ahead(time.monotonic(), self.grid, interval, self._poll_seconds)

    def _to_ask(self, tick: float | None) -> list[str]:
        """The topics a stream waits on at every poll (an idle or a busy one), never polled yet, or, at the last
        poll before a tick, with a stream lingering until that tick. The caller holds `_cond`."""
        return [name for name, topic in self._topics.items()
                if topic.partitions is None or any(self._asks(moved, tick) for moved in topic.listeners)]

    def _asks(self, moved: threading.Event, tick: float | None) -> bool:
        held = self._held.get(moved)
        if held is None:
            return True
        due = held[2]
        return tick is not None and (due is None or due <= tick + self.grid / 2)

    def _poll(self, names: list[str]) -> dict[str, dict[int, Watermarks] | FloeError]:
        self.requests += 1
        try:
            return self._ask(names)
        except FloeError as exc:  # the cluster's: every topic's, and a fresh connection next time
            error: FloeError = exc
        except Exception as exc:  # noqa: BLE001 - what Floe did not foresee fails the streams, not the poller
            log.exception("watermarks of %s", self.kafka.bootstrap)
            error = UnforeseenError.of(exc, f"watermarks of {self.kafka.bootstrap}")
        if self._client is not None:
            self._client.close()
            self._client = None
        return {name: error for name in names}

    def _ask(self, names: list[str]) -> dict[str, dict[int, Watermarks] | FloeError]:
        if self._client is None:
            self._client = KafkaClient(self.kafka, timeout=self.timeout)
        now = time.monotonic()
        with self._cond:
            stale = [n for n in names if n in self._topics and (self._topics[n].partitions is None
                                                                 or now - self._topics[n].looked_up > PARTITIONS_TTL)]
        looked_up = self._client.partitions_of(stale) if stale else {}
        out: dict[str, dict[int, Watermarks] | FloeError] = {}
        asked: list[tuple[str, int]] = []
        with self._cond:
            for name in names:
                topic = self._topics.get(name)
                if topic is None:
                    continue
                if name in looked_up:
                    if isinstance(looked_up[name], FloeError):
                        out[name] = looked_up[name]
                        topic.partitions = None
                        continue
                    topic.partitions, topic.looked_up = looked_up[name], now
                if topic.partitions is not None:
                    asked += [(name, p) for p in topic.partitions]
        marks = self._client.many_watermarks(asked) if asked else {}
        for (name, p), mark in marks.items():
            if name in out and isinstance(out[name], FloeError):
                continue
            out[name] = mark if isinstance(mark, FloeError) else {**out.get(name, {}), p: mark}
        return out

    def _apply(self, found: dict[str, dict[int, Watermarks] | FloeError]) -> bool:
        """The poll's findings kept, the streams of the topics that moved woken; whether any did."""
        any_moved = False
        for name, result in found.items():
            topic = self._topics.get(name)
            if topic is None:
                continue
            error, marks = (result, topic.marks) if isinstance(result, FloeError) else (None, result)
            if marks != topic.marks or (error is None) != (topic.error is None):
                any_moved = True
                for moved in topic.listeners:
                    held = self._held.get(moved)
                    if held is None or error is not None or lag(held[0], marks) >= held[1]:
                        moved.set()
            topic.marks, topic.error = marks, error
        return any_moved


class WatermarkPollers:
    """The engine's pollers, one per cluster its streams read, started on first use."""

    def __init__(self, interval: float, stopping: threading.Event, grid: float = 0.0) -> None:
        self.interval = interval
        self.grid = grid
        self.stopping = stopping
        self._lock = threading.Lock()
        self._pollers: dict[KafkaSettings, ClusterPoller] = {}

    def of(self, kafka: KafkaSettings) -> ClusterPoller:
        with self._lock:
            poller = self._pollers.get(kafka)
            if poller is None or not poller.is_alive():
                poller = self._pollers[kafka] = ClusterPoller(kafka, self.interval, self.stopping, self.grid)
                poller.start()
            return poller

    def close(self) -> None:
        with self._lock:
            pollers, self._pollers = list(self._pollers.values()), {}
        for poller in pollers:
            poller.close()
