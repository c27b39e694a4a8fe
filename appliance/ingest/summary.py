"""A line a minute in floe.log of what the streams committed, in place of a line a batch: 200 trickles commit 50
batches a second, and a line each filled floe.log and its five older files (`[logs] max_size`, `keep`) in two
hours, rolling away any warning older than that. The batch records themselves stay in the state database and the
system tables; `[logs] level = "debug"` brings the line a batch back."""

from __future__ import annotations

import logging
import math
import time
from dataclasses import dataclass

from appliance.core.words import plural
from appliance.state.store import StateStore

log = logging.getLogger(__name__)

EVERY = 60.0  # seconds between two lines


@dataclass(frozen=True)
class Totals:
    """What some batches add up to."""

    batches: int
    streams: int
    messages: int
    rows: int
    dead_letter_rows: int
    median_ms: int  # a batch's time, start to commit
    p95_ms: int
    slowest_ms: int
    slowest: str  # the stream of the slowest batch

    @classmethod
    def of(cls, batches: list[tuple[str, int, int, int, int]]) -> Totals | None:
        """(stream, duration_ms, messages, rows, dead letter rows) of each batch; None for no batch."""
        if not batches:
            return None
        times = sorted(b[1] for b in batches)
        slowest = max(batches, key=lambda b: b[1])
        return cls(len(batches), len({b[0] for b in batches}), sum(b[2] for b in batches),
                   sum(b[3] for b in batches), sum(b[4] for b in batches), _rank(times, 0.5), _rank(times, 0.95),
                   slowest[1], slowest[0])

    def describe(self, seconds: float) -> str:
        return (f"ingest, the last {seconds:.0f} s: {plural(self.batches, 'batch')} of {plural(self.streams, 'stream')}"
                f" committed {plural(self.messages, 'message')} ({plural(self.rows, 'row')}, "
                f"{plural(self.dead_letter_rows, 'dead letter')}); a batch took {self.median_ms / 1000:.2f} s at the "
                f"median, {self.p95_ms / 1000:.2f} s at p95, {self.slowest_ms / 1000:.2f} s at most ({self.slowest})")


def _rank(ordered: list[int], q: float) -> int:
    """The nearest-rank quantile `q` of `ordered` (not empty)."""
    return ordered[max(0, math.ceil(q * len(ordered)) - 1)]


class IngestSummary:
    """Logs, when `due`, what was committed since the last line (or since it was made): from the batch records,
    one query a minute, whatever the streams."""

    def __init__(self, state: StateStore, every: float = EVERY) -> None:
        self.state, self.every = state, every
        self.after = state.id_ranges()[3]  # the newest batch before: another engine's, or this one's before a stop
        self.since = time.monotonic()

    def due(self) -> bool:
        return time.monotonic() - self.since >= self.every

    def log(self) -> None:
        """The line for the batches committed since the last one, if any were."""
        found = self.state.batches_after(self.after)
        seconds, self.since = time.monotonic() - self.since, time.monotonic()
        if found:
            self.after = found[-1][0]
            log.info(Totals.of([b[1:] for b in found]).describe(seconds))
