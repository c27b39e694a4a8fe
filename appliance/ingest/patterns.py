"""A pattern stream's batches: one worker, one Kafka client and one Spark job a step for all its topics.

Each topic (a member, `model/patterns.py`) keeps its own `StreamRunner`, as a stream of its own tables, mapping,
schema evolution and offsets (in its tables' snapshots, under the member's id), so everything a stream's batch
does holds for each. What the topics share is what costs: the worker thread and its wake-ups, the driver's
Kafka client (metadata), the cluster's watermark poller (with every other stream's topics: two requests a poll
for hundreds of topics, not one a topic), and the Spark job: every member due plans its batch, the batches run
as one job (`BatchJobs.run_many`, with other streams' due at the same tick), then each member commits its own
tables. The members come from `discover` (given to the engine by `floe run`), looked at every DISCOVER_EVERY
seconds: topics that appear are taken, read from their earliest offset; those gone stop.
"""

from __future__ import annotations

import threading
import time
from typing import Callable

from appliance.config.settings import Settings
from appliance.ingest.batch import BatchResult, BatchSpec, run_batches
from appliance.ingest.jobs import BatchJobs
from appliance.ingest.runner import BatchOutcome, Prepared, StreamRunner
from appliance.ingest.watermarks import WatermarkPollers
from appliance.kafka.client import KafkaClient, Watermarks
from appliance.model.patterns import Member, member_stream
from appliance.model.stream import StreamDef
from appliance.spark.session import parallelism
from appliance.state.store import StateStore
from appliance.tables.catalog import Catalog, warehouse_io

DISCOVER_EVERY = 10.0  # seconds between looks at the cluster's topics: a new one lands well within a minute

Discover = Callable[[Settings, StreamDef], list[Member]]


class PatternRunner:
    """Runs the batches of a pattern stream's topics. Not thread-safe: one worker thread owns it."""

    def __init__(self, settings: Settings, spark, catalog: Catalog, state: StateStore, stream: StreamDef,
                 jobs: BatchJobs | None = None, discover: Discover | None = None,
                 pollers: WatermarkPollers | None = None) -> None:
        self.settings, self.spark, self.catalog, self.state = settings, spark, catalog, state
        self.stream = stream
        self.jobs = jobs
        self.discover = discover  # None: the members recorded (a topic that appears waits for an engine with it)
        self.runners: dict[str, StreamRunner] = {}  # by topic
        # The members' watermarks come from the cluster's poller with every other stream's (two requests a poll,
        # whatever the number of topics), each topic subscribed while it is a member. The stream itself still
        # steps every poll interval (`poller` None: no worker sleeps on one event for hundreds of topics).
        self.pollers = pollers
        self.poller = None
        self._moved = threading.Event()  # what the cluster's poller sets for the members' topics; nobody waits on it
        self._kafka: KafkaClient | None = None
        self._looked: float | None = None  # when the members were last looked at (monotonic)

    @property
    def kafka(self) -> KafkaClient:
        if self._kafka is None:
            self._kafka = KafkaClient(self.stream.kafka, group=self.stream.group, timeout=10.0)
        return self._kafka

    def close(self) -> None:
        """The shared client closed, and with it the members' runners (a fresh connection next time)."""
        for topic in list(self.runners):
            self._drop(topic)
        self._looked = None
        if self._kafka is not None:
            self._kafka.close()
            self._kafka = None

    def reset(self) -> None:
        for runner in self.runners.values():
            runner.reset()

    def members(self, force: bool = False) -> None:
        """The runners brought to the stream's active members, looked at again when due."""
        if not force and self._looked is not None and time.monotonic() - self._looked < DISCOVER_EVERY:
            return
        if self.discover is not None:
            found = self.discover(self.settings, self.stream)
        else:
            found = [m for m in self.state.members(self.stream.name).values() if m.active]
        self._looked = time.monotonic()
        current = {m.topic: m for m in found}
        for topic in [t for t in self.runners if t not in current]:
            self._drop(topic)
        for topic, member in current.items():
            if topic not in self.runners:
                runner = StreamRunner(self.settings, self.spark, self.catalog, self.state,
                                      member_stream(self.stream, member), self.jobs, self.pollers, kafka=self.kafka,
                                      member=True)
                if runner.poller is not None:
                    runner.poller.subscribe(topic, self._moved)
                self.runners[topic] = runner

    def _drop(self, topic: str) -> None:
        runner = self.runners.pop(topic)
        if runner.poller is not None:
            runner.poller.unsubscribe(topic, self._moved)
        runner.close()

    def watermarks(self, fresh: bool = False) -> dict[tuple[str, int], Watermarks]:
        """Every member's partitions' watermarks, by (topic, partition). `fresh`: from one poll begun after this
        call, which asks every member's topic at once (the first member's fresh answer waits for it)."""
        self.members()
        out: dict[tuple[str, int], Watermarks] = {}
        for topic, runner in self.runners.items():
            out.update({(topic, p): w for p, w in runner.watermarks(fresh).items()})
            fresh = fresh and runner.poller is None
        return out

    def caught_up(self, goal: dict[tuple[str, int], int]) -> bool:
        """Every member that was there when `goal` was taken has read up to it."""
        return all(runner.caught_up({p: high for (t, p), high in goal.items() if t == topic})
                   for topic, runner in self.runners.items() if any(t == topic for t, _ in goal))

    def step(self) -> BatchOutcome:
        with warehouse_io(self.settings, f"write stream {self.stream.name}'s tables"):
            return self._step()

    def _step(self) -> BatchOutcome:
        self.members()
        failures: dict[str, Exception] = {}
        due: list[tuple[str, Prepared, BatchSpec]] = []
        for topic, runner in self.runners.items():
            try:
                prepared = runner.prepare()
                if prepared is not None:
                    due.append((topic, prepared, runner.spec()))
            except Exception as exc:  # this topic's alone: the others go on
                failures[topic] = exc
        outcomes = []
        for (topic, prepared, _), result in zip(due, self._run([(spec, p.tasks) for _, p, spec in due])):
            try:
                if isinstance(result, BaseException):
                    raise result
                outcomes.append(self.runners[topic].finish(prepared, result))
            except Exception as exc:
                failures[topic] = exc
        if failures:
            self._failed(failures)
        return BatchOutcome(sum(o.messages for o in outcomes), sum(o.rows for o in outcomes),
                            sum(o.dead_letter_rows for o in outcomes), self._lag(), any(o.committed for o in outcomes),
                            max((o.newest_kafka_ts for o in outcomes if o.newest_kafka_ts), default=None))

    def _run(self, batches: list[tuple[BatchSpec, list[list]]]) -> list[BatchResult | BaseException]:
        if not batches:
            return []
        if self.jobs is not None:
            return self.jobs.run_many(batches)
        return run_batches(self.spark, batches, parallelism(self.spark))

    def _failed(self, failures: dict[str, Exception]) -> None:
        """The members that failed read again next time; a topic gone from the cluster stops (the members are
        looked at again now); any other failure is the stream's, raised once the others have committed."""
        for topic in failures:
            self.runners[topic].reset()
        self.members(force=True)
        left = [exc for topic, exc in failures.items() if topic in self.runners]
        if left:
            raise left[0]

    def _lag(self) -> int:
        return sum(runner.lag() for runner in self.runners.values() if runner.committed is not None and runner.marks)
