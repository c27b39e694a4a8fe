"""The engine's lines a minute in floe.log: what the streams committed, and what the stages ran, in place of a line
a batch and a line a stage's run. 200 trickles commit 50 batches a second, and a line each filled floe.log and its
five older files (`[logs] max_size`, `keep`) in two hours, rolling away any warning older than that; a stage runs
whenever its source commits. The records themselves stay in the state database and the system tables;
`[logs] level = "debug"` brings the line a batch and a line a run back."""

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
class Times:
    """How long some batches or runs took: the median, the p95 (nearest rank), the slowest and whose it was."""

    median_ms: int
    p95_ms: int
    slowest_ms: int
    slowest: str

    @classmethod
    def of(cls, took: list[tuple[str, int]]) -> Times:
        """(whose, milliseconds) of each, not empty."""
        ordered = sorted(ms for _, ms in took)
        slowest = max(took, key=lambda t: t[1])
        return cls(_rank(ordered, 0.5), _rank(ordered, 0.95), slowest[1], slowest[0])

    def describe(self, what: str) -> str:
        return (f"{what} took {self.median_ms / 1000:.2f} s at the median, {self.p95_ms / 1000:.2f} s at p95, "
                f"{self.slowest_ms / 1000:.2f} s at most ({self.slowest})")


def _rank(ordered: list[int], q: float) -> int:
    """The nearest-rank quantile `q` of `ordered` (not empty)."""
    return ordered[max(0, math.ceil(q * len(ordered)) - 1)]


@dataclass(frozen=True)
class Totals:
    """What some batches add up to."""

    batches: int
    streams: int
    messages: int
    rows: int
    dead_letter_rows: int
    times: Times  # a batch's, start to commit

    @classmethod
    def of(cls, batches: list[tuple[str, int, int, int, int]]) -> Totals | None:
        """(stream, duration_ms, messages, rows, dead letter rows) of each batch; None for no batch."""
        if not batches:
            return None
        return cls(len(batches), len({b[0] for b in batches}), sum(b[2] for b in batches),
                   sum(b[3] for b in batches), sum(b[4] for b in batches), Times.of([(b[0], b[1]) for b in batches]))

    def describe(self, seconds: float) -> str:
        return (f"ingest, the last {seconds:.0f} s: {plural(self.batches, 'batch')} of {plural(self.streams, 'stream')}"
                f" committed {plural(self.messages, 'message')} ({plural(self.rows, 'row')}, "
                f"{plural(self.dead_letter_rows, 'dead letter')}); {self.times.describe('a batch')}")


@dataclass(frozen=True)
class StageTotals:
    """What some stage runs add up to."""

    runs: int
    stages: int
    failed: int
    rows_in: int
    rows_out: int
    times: Times | None  # a run's that committed (a failed run records no time); None when none did

    @classmethod
    def of(cls, runs: list[tuple[str, int, int, int, str]]) -> StageTotals | None:
        """(stage, duration_ms, rows in, rows out, outcome) of each run; None for no run."""
        if not runs:
            return None
        done = [(r[0], r[1]) for r in runs if r[4] != "failed"]
        return cls(len(runs), len({r[0] for r in runs}), len(runs) - len(done), sum(r[2] for r in runs),
                   sum(r[3] for r in runs), Times.of(done) if done else None)

    def describe(self, seconds: float) -> str:
        failed = f" ({self.failed:,} failed)" if self.failed else ""
        times = f"; {self.times.describe('a run')}" if self.times else ""
        return (f"stages, the last {seconds:.0f} s: {plural(self.runs, 'run')} of {plural(self.stages, 'stage')}"
                f"{failed}, {plural(self.rows_in, 'row')} in, {self.rows_out:,} out{times}")


class EngineSummary:
    """Logs, when `due`, what was committed since the last lines (or since it was made): from the batch and stage
    run records, two queries a minute, whatever the streams."""

    def __init__(self, state: StateStore, every: float = EVERY) -> None:
        self.state, self.every = state, every
        # The newest records before: another engine's, or this one's before a stop.
        self.after, self.after_run = state.id_ranges()[3], state.newest_stage_run()
        self.since = time.monotonic()

    def due(self) -> bool:
        return time.monotonic() - self.since >= self.every

    def log(self) -> None:
        """The lines for the batches committed and the stages run since the last ones, if any were."""
        batches, runs = self.state.batches_after(self.after), self.state.stage_runs_after(self.after_run)
        seconds, self.since = time.monotonic() - self.since, time.monotonic()
        if batches:
            self.after = batches[-1][0]
            log.info(Totals.of([b[1:] for b in batches]).describe(seconds))
        if runs:
            self.after_run = runs[-1][0]
            log.info(StageTotals.of([r[1:] for r in runs]).describe(seconds))
