"""One Spark job for every stream that is due at the same moment.

A Spark job has a fixed cost (scheduling in the JVM, a round trip to a Python worker)
that is most of a small batch's cost. Stream workers wake on shared grids
(`next_wake`: busy streams on the grid of commit intervals, idle ones on that of poll
intervals; `trickle_due`: trickles on their own tick of it, a share of them each tick), so the streams that
are due plan their batches at about the same time;
`BatchJobs` holds each submitted batch until every worker still planning has submitted
(or `WINDOW` has passed) and runs them all as one job. Each worker then commits its own
stream, as before: only the Spark job is shared. A step holds its worker's turn at the driver's Python work
(`turns.Turns`) but while it waits for its job.

Batches go in one of two lanes, each with its jobs one at a time: a big batch (`BUSY_MESSAGES` or more
planned) in the busy lane, the others in the trickle lane. A busy stream's batch then neither waits for a job
of a hundred trickles to end nor rides in one, and the trickles still share their jobs: the two lanes' jobs
run side by side on Spark's FAIR scheduler.

A job of at most `in_engine` messages (`engine.batch_in_engine`: the trickles' batches of a tick, a few hundred
messages) is not a Spark job at all: its lane's thread reads, decodes and writes it here, with consumers of its
own. The work is the same; what it saves is what a Spark job costs whatever it holds (scheduling in the JVM, the
job's closure pickled to a Python worker, the results back), a third of 200 trickles' CPU. In the engine's first
minute, while the session's Python workers have run no job of ours, the bar is `COLD_FACTOR` times higher
(`in_engine_limit`): a first Spark job waits 2-4 s for them to start, while the catch-up of a restart (ten seconds
of a stream at 300 msg/s, 3,000 messages) takes a few tenths of a second here.
"""

from __future__ import annotations

import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Iterator

from appliance.core.activity import Activity
from appliance.ingest.batch import BatchResult, BatchSpec, run_batches
from appliance.ingest.turns import Turns
from appliance.kafka.reader import Consumers, Piece, close_consumers
from appliance.spark.session import parallelism
from appliance.spark.tasks import workers_started

WINDOW = 0.1  # seconds a submitted batch waits at most for the other streams' batches
BUSY_MESSAGES = 1000  # a batch planned this big goes in the busy lane
BUSY, TRICKLE = 0, 1
JITTER = 0.25  # a step that began within this share of a tick after it began at that tick (`trickle_due`)
COLD_FACTOR = 5  # in the engine's first minute, Spark's Python workers not started: jobs this many times bigger here
COLD_SECONDS = 60.0


def planned(batches: list[tuple[BatchSpec, list[list[Piece]]]]) -> int:
    """The messages batches' tasks plan to read."""
    return sum(piece.size for _, tasks in batches for task in tasks for piece in task)


def lane(batches: list[tuple[BatchSpec, list[list[Piece]]]]) -> int:
    """The lane of one worker's batches: BUSY when they plan `BUSY_MESSAGES` or more messages."""
    return BUSY if planned(batches) >= BUSY_MESSAGES else TRICKLE


def in_engine_limit(in_engine: int, started: bool, age: float) -> int:
    """The most messages a job may plan to run in the engine's process rather than in Spark, `age` seconds after the
    engine's first stream started: `in_engine`, or `COLD_FACTOR` times that in the first `COLD_SECONDS` while Spark's
    Python workers have not `started` (`spark.tasks.workers_started`: a first Spark job waits 2-4 s for them). A first
    minute's bar, not one until they start: a stream of a few thousand messages a second would otherwise run in the
    engine's thread for as long as the engine runs."""
    return in_engine * COLD_FACTOR if not started and age < COLD_SECONDS else in_engine


def next_tick(after: float, grid: float) -> float:
    """The first point of the shared grid (multiples of `grid` on the monotonic clock) at or after `after`."""
    if grid <= 0:
        return after
    return -(-after // grid) * grid


def trickle_due(tick: float, interval: float, grid: float, slot: int) -> float:
    """When a trickle whose step started at `tick` steps again: after `interval`, on a tick of the shared grid, and
    on its own one of the cycle's ticks (`slot`, any integer: a stream's is fixed).

    A trickle's cycle is `interval` rounded up to whole ticks. Every trickle on the first tick after its interval
    fell into one phase: 200 streams planned, ran and committed together every third second, a stream's commit
    waiting behind 199 others (0.7 s a batch, most of it that queue) and two seconds in three idle. Spread over the
    cycle's ticks by a fixed slot, each tick takes its share: the same commits, each waiting for fewer.
    """
    if grid <= 0:
        return tick + interval - 1e-3
    start = tick // grid * grid
    if tick - start > JITTER * grid:
        start = tick  # a step begun off the grid (woken early, or one that overran): its interval from then
    # else the tick it woke at, a little late: counted from the tick, or a cycle of 4 s on a 1 s grid made 8 s
    due = next_tick(start + interval - 1e-3, grid)
    if interval <= grid:
        return due
    ticks = -(-round(interval * 1000) // round(grid * 1000))  # whole ticks in a cycle (ms: 2.5 / 0.5 is 5, not 6)
    return due + ((slot - round(due / grid)) % ticks) * grid


def asked_before(due: float, now: float, rate: float, limit: int) -> float | None:
    """The tick before which a trickle lingering until `due` has its topic asked (`ClusterPoller.hold`): `due`
    itself when at its rate (messages a second) fewer than `limit` arrive by then; None, before every tick (and woken
    once `limit` wait), for a stream fast enough to fill a batch sooner: one at 4,500 msg/s on a 100 ms commit
    interval read 450 messages a step, a trickle's batch, and then waited out the whole trickle interval."""
    return due if rate * max(0.0, due - now) < limit else None


def next_wake(tick: float, now: float, read: bool, commit_interval: float, poll_interval: float) -> float:
    """When a worker whose step started at `tick` steps again.

    A step that read something waits out the commit interval, and wakes on the grid of
    commit intervals that every stream shares: busy streams stay in step with each other,
    whatever their history, so they share one Spark job a tick instead of drifting into
    several. A step that overran its interval, or read nothing, takes the next poll tick.
    """
    eps = 1e-3
    if read:
        due = tick + commit_interval
        if now <= due:
            return next_tick(due - eps, commit_interval)
        return next_tick(now - eps, poll_interval)
    return next_tick(max(tick + poll_interval, now) - eps, poll_interval)


@dataclass
class _Request:
    batches: list[tuple[BatchSpec, list[list[Piece]]]]  # one worker's: a pattern stream's topics' batches
    done: threading.Event = field(default_factory=threading.Event)
    results: list[BatchResult | BaseException] = field(default_factory=list)


class BatchJobs:
    def __init__(self, spark, in_engine: int = 0, activity: Activity | None = None) -> None:
        self.spark = spark
        self.activity = activity or Activity()  # the steps under way, which maintenance gives way to
        self.in_engine = in_engine  # messages: a job of at most this many runs in its lane's thread, not in Spark
        self._consumers: list[Consumers] = [{}, {}]  # a lane's own, for the jobs its thread runs here
        self._cond = threading.Condition()
        self._pending: list[list[_Request]] = [[], []]  # a lane's, BUSY and TRICKLE
        self._planning = 0  # workers in a step that have not submitted yet
        self._threads: list[threading.Thread | None] = [None, None]
        self._step = threading.local()  # per worker thread: has its step submitted a batch yet?
        self.turns = Turns()
        self.jobs_run = 0  # shared jobs started, for whoever wants to see the sharing
        self.jobs_in_engine = 0  # of them, those run here
        self.jobs_in_spark = 0  # and those run in Spark
        self._born = time.monotonic()  # with the engine's first stream: its first minute is its catch-up
        self._closed = False

    @contextmanager
    def planning(self) -> Iterator[None]:
        """Around a worker's step, its turn held: while it plans, others' batches wait for its own (up to WINDOW)."""
        with self.activity.step(), self._stepping():
            with self.turns.turn():
                yield

    @contextmanager
    def _stepping(self) -> Iterator[None]:
        with self._cond:
            self._planning += 1
            self._step.open = True
        try:
            yield
        finally:
            with self._cond:
                if self._step.open:  # a step with nothing to read: nobody waits for it any more
                    self._step.open = False
                    self._planning -= 1
                    self._cond.notify_all()

    @property
    def planners(self) -> int:
        """Workers in a step that have not submitted a batch yet."""
        return self._planning

    def run(self, spec: BatchSpec, tasks: list[list[Piece]]) -> BatchResult:
        """Run this batch in the next shared job; its result, or its error raised here."""
        [result] = self.run_many([(spec, tasks)])
        if isinstance(result, BaseException):
            raise result
        return result

    def run_many(self, batches: list[tuple[BatchSpec, list[list[Piece]]]]) -> list[BatchResult | BaseException]:
        """Several batches of one worker (a pattern stream's topics) in the next shared job: each one's result
        or error, in order."""
        request, at = _Request(batches), lane(batches)
        with self._cond:
            if getattr(self._step, "open", False):
                self._step.open = False
                self._planning -= 1
            self._pending[at].append(request)
            thread = self._threads[at]
            if thread is None or not thread.is_alive():
                self._threads[at] = threading.Thread(target=self._serve, args=(at,), daemon=True,
                                                     name=f"floe-batch-jobs-{'busy' if at == BUSY else 'trickle'}")
                self._threads[at].start()
            self._cond.notify_all()
        with self.turns.given_up():  # the job runs in Spark: the others plan and commit meanwhile
            request.done.wait()
        return request.results

    def _serve(self, at: int) -> None:
        while True:
            with self._cond:
                while not self._pending[at]:
                    if self._closed or not self._cond.wait(60.0):
                        self._threads[at] = None  # idle a minute: the next submit starts a new one
                        return
                deadline = time.monotonic() + WINDOW
                while self._planning > 0 and time.monotonic() < deadline:
                    self._cond.wait(deadline - time.monotonic())
                batch, self._pending[at] = self._pending[at], []
                self.jobs_run += 1
            self._run(batch, at)

    def close(self) -> None:
        """Once the workers are gone: the serving thread ends now, not after its idle minute (an
        engine run in a test's process, say, leaves no thread behind)."""
        with self._cond:
            self._closed = True
            self._cond.notify_all()
            threads = list(self._threads)
        for thread, consumers in zip(threads, self._consumers):
            if thread is not None:
                thread.join(30)
            if thread is None or not thread.is_alive():  # one still reading keeps its consumer: the process ends
                close_consumers(consumers)

    def _run(self, batch: list[_Request], at: int) -> None:
        batches = [b for r in batch for b in r.batches]
        try:
            limit = in_engine_limit(self.in_engine, workers_started(self.spark), time.monotonic() - self._born)
            if planned(batches) <= limit:
                self.jobs_in_engine += 1
                results = run_batches(self.spark, batches, 1, consumers=self._consumers[at])
            else:
                self.jobs_in_spark += 1
                results = run_batches(self.spark, batches, parallelism(self.spark))
        except BaseException as exc:  # the job itself failed: every stream in it retries
            results = [exc] * len(batches)
        start = 0
        for request in batch:
            request.results = list(results[start:start + len(request.batches)])
            start += len(request.batches)
            request.done.set()
