"""Maintenance over many tables, paced: the engine's scheduler queues what is due, the most fragmented and
busiest tables first, says so in `floe table runs`, and its rewrites always leave the streams a task slot."""

from __future__ import annotations

import datetime as dt
import threading

import pyarrow as pa
import pytest

from appliance.config.settings import ensure_home, load_settings
from appliance.core.vocabulary import MaintenanceTask
from appliance.maintenance.maintainer import Maintainer
from appliance.maintenance.queue import Due, commits_since, ordered, spread, stretch
from appliance.maintenance.rewrite import JOB_GROUP, at_once
from appliance.maintenance.scheduler import MaintenanceScheduler
from appliance.state.store import StateStore
from appliance.tables.catalog import Catalog
from appliance.tables.datafiles import live_data_files

from conftest import floe

C, E, ORPH = MaintenanceTask.COMPACT, MaintenanceTask.EXPIRE, MaintenanceTask.ORPHANS


def test_compactions_first_the_most_files_to_merge_weighted_by_commits_then_by_name():
    dues = [Due("a.quiet", (E, ORPH)), Due("a.none", ()), Due("a.small", (C, E), 20, 0), Due("a.busy", (C,), 20, 60),
            Due("a.big", (C,), 100, 0), Due("a.tie", (C,), 20, 0), Due("a.expire", (E,), 0, 900)]
    assert [d.table for d in ordered(dues)] == ["a.big", "a.busy", "a.small", "a.tie", "a.expire", "a.quiet"]
    assert Due("a.busy", (C,), 20, 600).reason == "20 files to merge, 600 commits in the last hour"
    assert Due("a.busy", (C,), 20, 600).score > Due("a.big", (C,), 100, 0).score  # busy enough outranks bigger
    assert Due("a.quiet", (E, ORPH), 0, 3).reason == "3 commits in the last hour"
    assert commits_since([1, 5, 9, 10], 9) == 2


def test_tables_maintained_together_first_drift_apart_and_none_more_often_than_its_interval():
    """A database's CDC: 200 tables created, first compacted at the same check; each then compacted every
    stretch of its own. Without it all 200 stay due at one check of every interval, a wave of work."""
    names = [f"cdc.inventory_table_{i}" for i in range(200)]
    assert spread(names[0]) == spread(names[0]) and all(0 <= spread(n) < 1 for n in names)
    own = [stretch(n, 600.0) for n in names]
    assert all(600.0 <= s < 750.0 for s in own) and len(set(own)) == 200
    checks = [int(5 * s // 60) for s in own]  # the check (one a minute) at which each is due the fifth time
    busiest = max(checks.count(c) for c in set(checks))
    assert busiest <= 30, f"{busiest} of 200 tables due at one check of the fifth interval"
    assert len(set(checks)) >= 12  # spread over the 12.5 minutes the stretches span by then


def test_a_tables_task_is_due_its_own_stretch_after_it_last_ran(floe_home):
    settings, catalog = _lab(floe_home)
    name = next(n for n in (f"lab.t{i}" for i in range(100)) if spread(n) > 0.4)
    _fragmented(catalog, name, 6)
    maintainer = Maintainer(settings, catalog=catalog)
    assert C in maintainer.due(name), "never compacted: due at once"
    assert maintainer.run(name, C).outcome == "ok"
    table = catalog.table(name)
    for i in range(6):  # as fragmented again
        table.append(pa.table({"id": [i], "day": ["2026-11-03"]}, schema=table.schema().as_arrow()))
    finished = dt.datetime.fromisoformat(maintainer.state.last_run(name, C).finished_at).timestamp()
    interval = maintainer.policy(name).compact_interval
    assert C not in maintainer.due(name, clock=lambda: finished + interval)  # its own interval is a tenth longer
    assert C not in maintainer.due(name, clock=lambda: finished + stretch(name, interval) - 1)
    assert C in maintainer.due(name, clock=lambda: finished + stretch(name, interval))


@pytest.mark.parametrize("slots, groups, sharing, step", [
    (2, 5, True, 1), (4, 5, True, 3), (4, 2, True, 2), (1, 3, True, 1), (2, 5, False, 5), (8, 3, False, 3)])
def test_rewrites_beside_the_streams_leave_them_a_task_slot(slots, groups, sharing, step):
    assert at_once(slots, groups, sharing) == step


def _lab(floe_home, in_engine: int | None = None):
    """A FLOE_HOME whose tables are due for compaction from 5 small files on, and a namespace `lab`; rewrites of
    at most `in_engine` bytes in the engine's process (by default, as configured by default)."""
    floe_home.mkdir(parents=True)
    # share = 1: the tasks back to back (the rests that pace them are test_maintenance_many_tables.py's)
    (floe_home / "floe.toml").write_text('[maintenance]\nshare = 1\n' + (
        f'rewrite_in_engine = {in_engine}\n' if in_engine is not None else '') +
        '[maintenance.policy]\ncompact_small_files = 5\n')
    settings = load_settings()
    ensure_home(settings)
    catalog = Catalog(settings)
    catalog.iceberg.create_namespace("lab")
    return settings, catalog


def _fragmented(catalog: Catalog, name: str, files: int) -> None:
    """A table of `files` small files (one append each), as a stream leaves it between two compactions."""
    schema = pa.schema([("id", pa.int64()), ("day", pa.string())])
    table = catalog.iceberg.create_table(name, schema)
    with table.update_spec() as spec:  # by day: two days, two rewrite groups
        spec.add_identity("day")
    for i in range(files):
        table.append(pa.table({"id": [i, i + 1000], "day": ["2026-11-01", "2026-11-02"]}, schema=schema))


def test_the_engines_maintenance_queues_the_most_fragmented_first_says_so_and_leaves_a_slot(floe_home, spark):
    settings, catalog = _lab(floe_home, in_engine=0)  # these few KB go to Spark as a table of hundreds of MB does
    for name, files in (("lab.few", 6), ("lab.many", 14), ("lab.some", 9)):
        _fragmented(catalog, name, files)
    stop = threading.Event()  # the engine's: its Maintainer shares Spark with the streams
    maintainer = Maintainer(settings, spark=spark, stopping=stop)
    scheduler = MaintenanceScheduler(settings, spark, stop)
    with StateStore(settings.state_db) as state:
        state.request_maintenance("lab.few", MaintenanceTask.EXPIRE)  # a user's request: the pass stops at once
        scheduler._scheduled(maintainer)
        queue = state.maintenance_queue()
        assert [(q.table_name, q.task) for q in queue if q.task == "compact"] == [
            ("lab.many", "compact"), ("lab.some", "compact"), ("lab.few", "compact")]
        assert queue[0].position == 1 and queue[0].reason == "28 files to merge, 14 commits in the last hour"
        assert not state.runs(), "a pending request goes first: nothing scheduled ran"
        shown = floe("table", "runs", "--queued")
        assert shown.returncode == 0
        assert shown.stdout.splitlines()[1].startswith("     1. compact   lab.many  (28 files"), shown.stdout
        assert "lab.few" in floe("table", "runs", "lab.few").stdout.split("started")[0]  # the queue before the runs
        state.take_requests()

        tracker = spark.sparkContext.statusTracker()
        before = set(tracker.getJobIdsForGroup(JOB_GROUP))
        scheduler._scheduled(maintainer)
        compactions = [r for r in reversed(state.runs(task=MaintenanceTask.COMPACT))]
        assert [(r.table_name, r.outcome) for r in compactions] == [
            ("lab.many", "ok"), ("lab.some", "ok"), ("lab.few", "ok")]
        assert state.maintenance_queue() == []
    # Two days a table: two rewrite groups each, run one at a time beside the streams (local[2]: one slot left).
    jobs = set(tracker.getJobIdsForGroup(JOB_GROUP)) - before
    assert len(jobs) == 6, jobs
    for name in ("lab.few", "lab.many", "lab.some"):
        assert len(live_data_files(catalog.table(name))) == 2


def test_a_compaction_in_a_process_of_its_own_takes_every_slot(floe_home, spark):
    settings, catalog = _lab(floe_home, in_engine=0)
    _fragmented(catalog, "lab.alone", 6)
    tracker = spark.sparkContext.statusTracker()
    before = set(tracker.getJobIdsForGroup(JOB_GROUP))
    run = Maintainer(settings, spark=spark).run("lab.alone", MaintenanceTask.COMPACT)  # `floe maintain`'s
    assert run.outcome == "ok", run.detail
    assert len(set(tracker.getJobIdsForGroup(JOB_GROUP)) - before) == 1  # both days' groups in one job
    assert len(live_data_files(catalog.table("lab.alone"))) == 2


def test_a_small_rewrite_runs_in_the_engine_without_a_spark_job(floe_home, spark):
    """A trickle's files (a few KB each) are rewritten in the calling process: as a Spark job they cost twice the
    CPU (its tasks started, the files sent and the results back). The rows are the same either way."""
    settings, catalog = _lab(floe_home)
    _fragmented(catalog, "lab.small", 6)
    rows = sorted(catalog.table("lab.small").scan().to_arrow().column("id").to_pylist())
    tracker = spark.sparkContext.statusTracker()
    before = set(tracker.getJobIdsForGroup(JOB_GROUP))
    run = Maintainer(settings, spark=spark).run("lab.small", MaintenanceTask.COMPACT)
    assert run.outcome == "ok", run.detail
    assert set(tracker.getJobIdsForGroup(JOB_GROUP)) == before
    table = catalog.table("lab.small")
    assert len(live_data_files(table)) == 2 and sorted(table.scan().to_arrow().column("id").to_pylist()) == rows
