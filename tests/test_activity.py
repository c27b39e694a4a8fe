"""Maintenance gives way to the streams' batches (`core.activity`): it waits at its safe points while a stream's
step is under way, for at most its patience, and never where it is not inside the engine's maintenance."""

from __future__ import annotations

import threading
import time

import pyarrow as pa

from appliance.config.settings import load_settings
from appliance.core.activity import Activity, Gate, give_way, giving_way
from appliance.core.polling import poll
from appliance.core.vocabulary import MaintenanceTask, RunOutcome
from appliance.ingest.jobs import BatchJobs
from appliance.maintenance.maintainer import Maintainer
from appliance.maintenance.policies import set_policy
from appliance.state.records import RunRecord
from appliance.tables.catalog import Catalog
from appliance.tables.commits import commit_files
from appliance.tables.datafiles import TableTarget, write_data_files

from conftest import uri_exists


class Step(threading.Thread):
    """A stream's step held open in a thread of its own until `end` is set."""

    def __init__(self, activity: Activity) -> None:
        super().__init__(daemon=True)
        self.activity, self.begun, self.end = activity, threading.Event(), threading.Event()
        self.ended_at = 0.0

    def run(self) -> None:
        with self.activity.step():
            self.begun.set()
            self.end.wait(30)
            self.ended_at = time.monotonic()


def run_beside_a_step(maintainer: Maintainer, gate: Gate, task: MaintenanceTask, meanwhile) -> RunRecord:
    """`task` on table n.t in a thread of its own while a stream's step is under way: `meanwhile()` once the task
    waits at a safe point, then the step ends; the task's run."""
    step = Step(gate.activity)
    step.start()
    step.begun.wait(5)
    runs = []
    working = threading.Thread(target=lambda: runs.append(maintainer.run("n.t", task)), daemon=True)
    working.start()
    poll(lambda: gate.waits >= 1, 30, what=f"the {task} to reach a safe point")
    meanwhile()
    step.end.set()
    working.join(60)
    [run] = runs
    return run


def test_a_safe_point_waits_until_the_steps_under_way_end():
    activity = Activity()
    gate = Gate(activity, patience=30)
    steps = [Step(activity) for _ in range(2)]
    for step in steps:
        step.start()
        step.begun.wait(5)
    passed = threading.Event()

    def background() -> None:
        with giving_way(gate):
            give_way()
        passed.set()

    worker = threading.Thread(target=background, daemon=True)
    worker.start()
    poll(lambda: gate.waits == 1, 5, what="the safe point to find the steps under way")
    steps[0].end.set()
    steps[0].join(5)
    assert not passed.wait(0.2), "one step still under way"
    steps[1].end.set()
    assert passed.wait(5)
    assert gate.ran_out == 0 and not activity.busy


def test_a_safe_point_waits_at_most_its_patience_and_the_waits_no_longer_than_the_work_between():
    activity = Activity()
    gate = Gate(activity, patience=0.2)
    step = Step(activity)
    step.start()
    step.begun.wait(5)
    with giving_way(gate):
        started = time.monotonic()
        give_way()  # an engine never quiet (a busy stream always in a step)
        assert time.monotonic() - started >= 0.2
        assert (gate.waits, gate.ran_out) == (1, 1)
        started, worked = time.monotonic(), 0.0
        for _ in range(20):
            begun = time.monotonic()
            sum(range(200_000))  # some work between two safe points
            worked += time.monotonic() - begun
            give_way()
        spent = time.monotonic() - started
        assert gate.waited - 0.2 <= worked + 0.01, "the waits after the first no longer than the work between"
        assert spent <= 2 * worked + 0.05
    step.end.set()
    step.join(5)


def test_outside_the_engines_maintenance_a_safe_point_never_waits():
    activity = Activity()
    step = Step(activity)
    step.start()
    step.begun.wait(5)
    started = time.monotonic()
    give_way()  # `floe maintain` in a process of its own: no gate
    with giving_way(None):
        give_way()
    assert time.monotonic() - started < 0.1
    step.end.set()
    step.join(5)


def test_a_workers_step_is_under_way_from_its_planning_to_its_end():
    jobs = BatchJobs(None)
    assert not jobs.activity.busy
    with jobs.planning():
        assert jobs.activity.busy and jobs.planners == 1
    assert not jobs.activity.busy and jobs.planners == 0


def test_an_expiry_in_the_engine_deletes_nothing_while_a_streams_step_is_under_way(floe_home):
    floe_home.mkdir(parents=True)
    settings = load_settings()
    catalog = Catalog(settings)
    data = pa.table({"a": pa.array([1, 2], pa.int64())})
    table, _ = catalog.ensure_table("n.t", data.schema)
    offsets, first_files = None, []
    for i in range(1, 31):  # a stream's commits, each a file of its own
        files = write_data_files(TableTarget.of(table), data)
        first_files += files if i == 1 else []
        table, _ = commit_files(table, files, "s", "topic", offsets, {0: i})
        offsets = {0: i}
    table.overwrite(data)  # every file replaced: the stream's files live on only in the old snapshots
    for i in range(31, 37):  # the stream goes on: its newest snapshots (those kept) hold none of its first files
        table, _ = commit_files(table, write_data_files(TableTarget.of(table), data), "s", "topic", offsets, {0: i})
        offsets = {0: i}
    activity = Activity()
    gate = Gate(activity, patience=30)
    maintainer = Maintainer(settings, catalog=catalog, gate=gate, stopping=threading.Event())
    set_policy(settings, maintainer.state, catalog, "n.t",
               {"max_snapshots": 5, "min_snapshots": 2, "min_snapshot_age": "0s"})

    def meanwhile() -> None:
        assert uri_exists(first_files[0].file_path), "deleted while the stream's step was under way"

    run = run_beside_a_step(maintainer, gate, MaintenanceTask.EXPIRE, meanwhile)
    assert run.outcome == RunOutcome.OK and run.snapshots_expired >= 25
    assert not uri_exists(first_files[0].file_path)
    assert maintainer.state.runs("n.t")[0].finished_at is not None


def test_a_compaction_in_the_engine_commits_nothing_while_a_streams_step_is_under_way(floe_home):
    floe_home.mkdir(parents=True)
    settings = load_settings()
    catalog = Catalog(settings)
    data = pa.table({"a": pa.array([1, 2], pa.int64())})
    table, _ = catalog.ensure_table("n.t", data.schema)
    for _ in range(20):  # a trickle's small files
        table.append(data)
    before = table.metadata.current_snapshot_id
    activity = Activity()
    gate = Gate(activity, patience=30)
    maintainer = Maintainer(settings, catalog=catalog, gate=gate, stopping=threading.Event())

    def meanwhile() -> None:
        assert catalog.table("n.t").metadata.current_snapshot_id == before, "committed while the step was under way"

    run = run_beside_a_step(maintainer, gate, MaintenanceTask.COMPACT, meanwhile)
    assert run.outcome == RunOutcome.OK and run.files_after == 1
    assert catalog.table("n.t").metadata.current_snapshot_id != before
