"""What keeps a trickle cheap: shared Spark jobs, lean Python workers and commits, a class-data archive.

The figures are measured by scripts/bench_efficiency; these tests check that each part
does what it must, with a real broker, SparkSession, catalog and warehouse.
"""

import os
import sqlite3
import subprocess
import sys
import threading
from pathlib import Path

import pyarrow as pa
import pytest
from pyiceberg.exceptions import CommitFailedException
from pyiceberg.serializers import FromInputFile
from pyiceberg.table import Table
from pyiceberg.table.snapshots import Operation
from pyiceberg.table.update import update_table_metadata
from pyiceberg.types import StringType

from appliance.config.settings import load_settings
from appliance.control.streams import create_stream
from appliance.ingest import jobs as jobs_module
from appliance.ingest.jobs import BatchJobs
from appliance.ingest.runner import StreamRunner
from appliance.state.store import StateStore
from appliance.tables.catalog import Catalog
from appliance.tables.fastpath.changes import FileChanges, commit_changes
from appliance.tables.fastpath.metadatafile import MetadataWriter
from appliance.tables.fastpath.sql_catalog import FloeSqlCatalog
from appliance.tables.fastpath import transactions
from appliance.tables.fastpath.transactions import LeanTransaction, staged_metadata

from conftest import ROOT, committed_again, pizza_values, wait_for


def test_python_workers_leave_spark_archives_off_their_path_and_freeze_what_survives(spark):
    def look(_):
        import gc

        import pyspark

        return [p for p in sys.path if p.endswith((".zip", ".jar")) and "pyspark" in p], pyspark.__file__, \
            gc.get_freeze_count()

    first = spark.sparkContext.parallelize([0], 1).map(look).collect()[0]
    archives, pyspark_file, _ = first
    assert archives == []
    assert "site-packages" in pyspark_file and ".zip" not in pyspark_file
    _, _, frozen = spark.sparkContext.parallelize([0], 1).map(look).collect()[0]
    assert frozen > 0  # what the first task left behind is out of every later collection


def test_python_workers_are_forked_with_what_an_ingest_task_imports(spark):
    """The daemon the workers fork from has imported an ingest task's modules (pyarrow, confluent-kafka): each
    worker starts with them instead of spending seconds of CPU importing them at its first task."""
    def parent_libraries(_):
        import os

        with open(f"/proc/{os.getppid()}/maps") as maps:  # the daemon runs no task: what it loaded, it imported
            loaded = maps.read()
        return {lib for lib in ("libarrow", "librdkafka") if lib in loaded}

    assert spark.sparkContext.parallelize([0], 1).map(parent_libraries).collect() == [{"libarrow", "librdkafka"}]


def _catalog(tmp_path) -> FloeSqlCatalog:
    return FloeSqlCatalog("floe", uri=f"sqlite:///{tmp_path}/catalog.db", warehouse=tmp_path.as_uri())


def test_a_lean_transaction_stages_what_pyiceberg_would(tmp_path):
    catalog = _catalog(tmp_path)
    catalog.create_namespace("n")
    data = pa.table({"a": pa.array([1, 2], pa.int64())})
    table = catalog.create_table("n.t", data.schema)
    for i in range(3):
        table.append(data, snapshot_properties={"i": str(i)})
    tx = LeanTransaction(table)
    with tx.update_snapshot(snapshot_properties={"i": "last"}).fast_append() as append:
        for f in table.scan().plan_files():
            append.append_data_file(f.file)
    ours = staged_metadata(table.metadata, tx._updates).model_dump(exclude={"last_updated_ms"})
    theirs = update_table_metadata(table.metadata, tx._updates).model_dump(exclude={"last_updated_ms"})
    assert ours == theirs
    committed = tx.commit_transaction()
    assert [s.summary["i"] for s in committed.snapshots()] == ["0", "1", "2", "last"]
    reread = _catalog(tmp_path).load_table("n.t")  # from the file, not a cache
    assert reread.metadata == committed.metadata
    assert reread.scan().to_arrow().num_rows == 12  # 3 appends of 2 rows, then their 3 files again


def test_a_commit_applies_its_updates_once_and_commits_what_pyiceberg_would_stage(tmp_path, monkeypatch):
    catalog = _catalog(tmp_path)
    catalog.create_namespace("n")
    data = pa.table({"a": pa.array([1, 2], pa.int64())})
    table = catalog.create_table("n.t", data.schema)
    for _ in range(2):
        table.append(data)
    applied = []
    real = transactions.apply_table_update

    def counted(update, metadata, context):
        applied.append(update)
        return real(update, metadata, context)

    monkeypatch.setattr(transactions, "apply_table_update", counted)
    tx = LeanTransaction(table)
    with tx.update_snapshot().fast_append() as append:
        for f in table.scan().plan_files():
            append.append_data_file(f.file)
    base, location, updates = table.metadata, table.metadata_location, tx._updates
    expected = update_table_metadata(base, updates, metadata_location=location)
    committed = tx.commit_transaction()
    assert len(applied) == len(updates)  # by the transaction's metadata, not again by the catalog's commit
    assert committed.metadata.model_dump(exclude={"last_updated_ms"}) == expected.model_dump(exclude={"last_updated_ms"})
    assert [e.metadata_file for e in committed.metadata.metadata_log][-1] == location


def test_the_metadata_cache_never_hides_another_writers_commit(tmp_path):
    a, b = _catalog(tmp_path), _catalog(tmp_path)
    a.create_namespace("n")
    data = pa.table({"a": pa.array([1], pa.int64())})
    stale = a.create_table("n.t", data.schema)
    a.load_table("n.t").append(data)
    seen_by_b = b.load_table("n.t")
    assert seen_by_b.current_snapshot() is not None
    seen_by_b.append(data)
    b_snapshot = seen_by_b.current_snapshot().snapshot_id
    # Planned on metadata that is no longer current: refused, then (PyIceberg retries appends)
    # replanned on B's commit, never written over it.
    stale.append(data)
    final = a.load_table("n.t")
    assert len(final.snapshots()) == 3
    assert final.current_snapshot().parent_snapshot_id == b_snapshot
    assert final.scan().to_arrow().num_rows == 3


def test_a_commit_on_the_table_it_last_swapped_in_skips_the_read_and_one_the_swap_finds_moved_is_redone(tmp_path):
    a, b = _catalog(tmp_path), _catalog(tmp_path)
    a.create_namespace("n")
    data = pa.table({"a": pa.array([1], pa.int64())})
    table = a.create_table("n.t", data.schema)
    table.append(data)  # the commits' own connection opened
    reads: list[str] = []
    a._sqlite_db().set_trace_callback(lambda sql: reads.append(sql) if sql.startswith("SELECT") else None)
    metadata_files = lambda: sorted(tmp_path.rglob("*.metadata.json"))  # noqa: E731

    table.append(data)  # on the version it swapped in last: straight to the swap
    assert reads == []
    assert len(metadata_files()) == 3

    with b.load_table("n.t").transaction() as tx:  # another process moves the table, main left where it was
        tx.set_properties(owner="b")
    table.append(data)  # the swap finds it moved: read, staged again on it, swapped
    assert len(reads) == 1
    fresh = b.load_table("n.t")
    assert fresh.properties["owner"] == "b" and fresh.scan().to_arrow().num_rows == 3
    assert len(metadata_files()) == 5  # the file staged on the old version deleted, not left behind

    b.load_table("n.t").append(data)  # moves main: the stale table's append is refused, then replanned
    before = len(metadata_files())
    with pytest.raises(CommitFailedException):
        commit_changes(table, FileChanges(data=[next(iter(table.scan().plan_files())).file]), Operation.APPEND, {})
    assert len(metadata_files()) == before
    assert b.load_table("n.t").scan().to_arrow().num_rows == 4

    a.load_table("n.t")
    assert table.metadata.table_uuid in a._newest
    a.drop_table("n.t")  # its versions kept are forgotten with it
    assert table.metadata.table_uuid not in a._newest


def test_a_table_is_loaded_as_pyiceberg_loads_it_in_one_statement_without_the_orm(tmp_path):
    from pyiceberg.catalog.sql import SqlCatalog
    from pyiceberg.exceptions import NoSuchTableError
    from sqlalchemy import event

    catalog = _catalog(tmp_path)
    catalog.create_namespace("n")
    data = pa.table({"a": pa.array([1], pa.int64())})
    catalog.create_table("n.t", data.schema).append(data)
    stock = SqlCatalog("floe", uri=f"sqlite:///{tmp_path}/catalog.db", warehouse=tmp_path.as_uri())
    statements = []
    event.listen(catalog.engine, "before_cursor_execute", lambda *args: statements.append(args[2]))
    for name in ("n.t", ("n", "t")):
        ours, theirs = catalog.load_table(name), stock.load_table(name)
        assert ours.name() == theirs.name() == ("n", "t")
        assert ours.metadata_location == theirs.metadata_location
        assert ours.metadata == theirs.metadata and ours.scan().to_arrow().num_rows == 1
    assert statements == [], "through the commits' own SQLite connection, not the ORM's"
    with pytest.raises(NoSuchTableError, match="n.missing"):
        catalog.load_table("n.missing")
    # Another engine's view is not a table, here as in PyIceberg's own.
    with sqlite3.connect(tmp_path / "catalog.db") as db:
        db.execute("insert into iceberg_tables (catalog_name, table_namespace, table_name, metadata_location, "
                   "iceberg_type) values ('floe', 'n', 'v', ?, 'VIEW')", [ours.metadata_location])
    for loader in (catalog, stock):
        with pytest.raises(NoSuchTableError):
            loader.load_table("n.v")


def test_metadata_files_hold_what_pyiceberg_writes_with_each_snapshot_serialised_once(tmp_path):
    catalog = _catalog(tmp_path)
    catalog.create_namespace("n")
    data = pa.table({"a": pa.array([1], pa.int64())})
    table = catalog.create_table("n.t", data.schema)
    writer = MetadataWriter()
    assert writer.json(table.metadata) == table.metadata.model_dump_json().encode()  # no snapshot yet
    uuid = str(table.metadata.table_uuid)
    for i in range(4):
        table.append(data, snapshot_properties={"i": str(i), "offsets": f'{{"0": {i}}}'})
        assert writer.json(table.metadata) == table.metadata.model_dump_json().encode()
        if i:  # one more snapshot and log entry than the last document: only theirs were added
            assert len(writer._snapshots._last[uuid][1]) == len(writer._log._last[uuid][1]) == 2 * i + 1
    oldest = table.snapshots()[0].snapshot_id
    table.maintenance.expire_snapshots().by_id(oldest).commit()
    assert writer.json(table.metadata) == table.metadata.model_dump_json().encode()
    assert oldest not in writer._snapshots._known[uuid]  # forgotten with the snapshot
    assert all(snapshot != oldest for snapshot, _ in writer._log._known[uuid])
    table.append(data)  # appended to a list the writer made whole again
    assert writer.json(table.metadata) == table.metadata.model_dump_json().encode()
    assert len(writer._log._last[uuid][1]) == 2 * 4 - 1  # four entries, three commas
    newest = table.current_snapshot().snapshot_id  # the kept JSON itself is a piece: no second copy of it
    assert writer._snapshots._last[uuid][1][-1] is writer._snapshots._known[uuid][newest][1]
    # Two commits made from the same table at once (a stream's and a compaction's: they take no common lock): each
    # document holds its own new snapshot and not the other's, whichever the writer saw last.
    base, seen_by_both = table.metadata, writer._snapshots._last[uuid]
    table.append(data)
    first = table.metadata
    other = base.model_copy(update={"snapshots": [*base.snapshots, first.snapshots[-1].model_copy(
        update={"snapshot_id": 7, "summary": first.snapshots[-1].summary})], "current_snapshot_id": 7})
    assert writer.json(first) == first.model_dump_json().encode()
    writer._snapshots._last[uuid] = seen_by_both  # as the other thread found it, before the first's document
    assert writer.json(other) == other.model_dump_json().encode()
    # What the catalog wrote reads back as the table it committed.
    written = FromInputFile.table_metadata(table.io.new_input(table.metadata_location))
    assert written == table.metadata
    # A second schema: each schema's JSON made once, the first one's kept through the change
    first_schema = writer._schemas._known[uuid][0][1]
    with table.update_schema() as update:
        update.add_column("b", StringType())
    table.append(pa.table({"a": pa.array([2], pa.int64()), "b": ["x"]}))
    assert len(table.metadata.schemas) == 2
    assert writer.json(table.metadata) == table.metadata.model_dump_json().encode()
    assert writer._schemas._known[uuid][0][1] is first_schema and set(writer._schemas._known[uuid]) == {0, 1}
    # An equal schema from a reload: its JSON kept, and the object the next commits pass kept with it.
    reloaded = FromInputFile.table_metadata(table.io.new_input(table.metadata_location))
    assert reloaded.schemas[0] is not table.metadata.schemas[0]
    assert writer.json(reloaded) == reloaded.model_dump_json().encode()
    assert writer._schemas._known[uuid][0] == (reloaded.schemas[0], first_schema)
    assert writer._schemas._known[uuid][0][0] is reloaded.schemas[0]


def test_appends_merge_manifests_so_the_manifest_list_stays_short(floe_home):
    catalog, table = committed_again(floe_home, 40)
    manifests = table.current_snapshot().manifests(table.io)
    assert len(manifests) < 32, len(manifests)  # 41 appends, each with its own manifest before merging
    assert catalog.table("n.t").scan().to_arrow().num_rows == 2 * 41


def test_a_table_keeps_only_its_newest_metadata_files(floe_home):
    """Each commit rewrites the metadata file with every kept snapshot (1.5 MB at 2,000): 100 of them a table, as
    Iceberg keeps by default, were 30 GB for 200 streams' tables. Floe keeps `metadata_versions` (10)."""
    assert load_settings().maintenance.metadata_versions == 10
    catalog, table = committed_again(floe_home, 25)
    folder = Path(table.metadata_location.removeprefix("file://")).parent
    kept = sorted(folder.glob("*.metadata.json"))
    assert len(kept) == 11, [p.name for p in kept]  # the current one and the 10 before it
    assert Path(table.metadata_location.removeprefix("file://")) in kept
    assert len(table.metadata.metadata_log) == 10
    assert catalog.table("n.t").scan().to_arrow().num_rows == 2 * 26


def test_a_commit_through_an_older_table_deletes_what_it_pushed_out_and_warns_of_nothing(floe_home, caplog):
    """Maintenance commits through a Table loaded before the stream's latest commits. PyIceberg's clean-up after a
    commit works from that Table's metadata log: it named files deleted long before ("Failed to delete metadata
    file", a warning each) and missed the one this commit pushed out of the window of 10."""
    import logging

    from appliance.tables.commits import commit_files

    catalog, table = committed_again(floe_home, 3)
    stale = catalog.table("n.t")
    files = [task.file for task in table.scan().plan_files()]
    for i in range(4, 20):  # the stream goes on: the stale table's log names files deleted since
        table, _ = commit_files(table, files, "s", "topic", {0: i - 1}, {0: i})
    with caplog.at_level(logging.WARNING):
        with stale.transaction() as tx:  # no requirement on the branch: it commits on the current metadata
            tx.set_properties({"floe.test": "1"})
    assert not [r.getMessage() for r in caplog.records if "Failed to delete" in r.getMessage()]
    fresh = catalog.table("n.t")
    assert fresh.properties["floe.test"] == "1" and len(fresh.metadata.snapshots) == len(table.metadata.snapshots)
    folder = Path(fresh.metadata_location.removeprefix("file://")).parent
    kept = sorted(folder.glob("*.metadata.json"))
    assert len(kept) == 11 and Path(fresh.metadata_location.removeprefix("file://")) in kept
    assert {Path(e.metadata_file.removeprefix("file://")) for e in fresh.metadata.metadata_log} <= set(kept)


def steps_due_together(broker, spark, sizes: dict[str, int], namespace: str, in_engine: int = 0,
                       close: bool = True, jobs: BatchJobs | None = None) -> tuple[dict, BatchJobs, Catalog]:
    """A stream per topic of `sizes` (that many messages each), each worker's step planning before any submits (due
    together), on one `BatchJobs`: each stream's outcome, the jobs and the catalog.

    Each step holds its worker's turn, and nobody gives up waiting for one here: the first to plan waits until
    every worker is planning, and the job waits until every one has submitted, so each one after the first
    plans only because those before it gave their turns up while waiting for the job."""
    settings = load_settings()
    for t, n in sizes.items():
        broker.produce(t, pizza_values(n))
    streams = [create_stream(settings, t, bootstrap=broker.bootstrap, topic=t, table=f"{namespace}.{t}").stream
               for t in sizes]
    jobs = jobs or BatchJobs(spark, in_engine)
    jobs.turns.patience = 600.0
    catalog = Catalog(settings)
    outcomes, first = {}, []

    def step(stream):
        state = StateStore(settings.state_db)
        runner = StreamRunner(settings, spark, catalog, state, stream, jobs)
        with jobs.planning():
            assert jobs.turns.held()
            if not first:  # the first to plan: the others are waiting for their turns
                first.append(stream.name)
                wait_for(lambda: jobs.planners == len(streams), 60, 0.01, "every worker planning")
            outcomes[stream.name] = runner.step()
            assert jobs.turns.held(), "a step takes its turn back after its job, to commit"
        runner.close()
        state.close()

    threads = [threading.Thread(target=step, args=(s,)) for s in streams]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    if close:
        jobs.close()
    assert jobs.turns.waited_out == 0
    return outcomes, jobs, catalog


def test_streams_due_together_share_one_spark_job(broker, spark, floe_home, monkeypatch):
    # A batch waits for the others still planning at most WINDOW (0.1 s): on a loaded machine a
    # first batch's planning (its tables loaded) can take longer. The wait ends as soon as every
    # planning worker has submitted, so a long window changes nothing but the flake.
    monkeypatch.setattr(jobs_module, "WINDOW", 30.0)
    topics = [f"share_{i}_{os.getpid()}" for i in range(2)]
    outcomes, jobs, catalog = steps_due_together(broker, spark, {t: 300 for t in topics}, "share")
    assert {name: o.rows for name, o in outcomes.items()} == {t: 300 for t in topics}
    assert jobs.jobs_run == 1
    for t in topics:
        assert catalog.table(f"share.{t}").scan().to_arrow().num_rows == 300


def test_a_busy_streams_batch_takes_a_job_of_its_own_beside_the_trickles_shared_one(broker, spark, floe_home,
                                                                                    monkeypatch):
    """A big batch neither rides in the trickles' job nor waits for it: two lanes, each its own jobs. Two
    trickles and a busy stream due together make two jobs, the trickles' shared."""
    monkeypatch.setattr(jobs_module, "WINDOW", 30.0)  # as above: every planner submits before a job starts
    sizes = {f"trickle_a_{os.getpid()}": 20, f"trickle_b_{os.getpid()}": 30, f"busy_{os.getpid()}": 3000}
    outcomes, jobs, catalog = steps_due_together(broker, spark, sizes, "lanes")
    assert {name: o.rows for name, o in outcomes.items()} == sizes
    assert jobs.jobs_run == 2, "one job for the busy stream, one shared by the trickles"
    for t, n in sizes.items():
        assert catalog.table(f"lanes.{t}").scan().to_arrow().num_rows == n


def test_a_shared_job_of_a_few_messages_runs_in_the_engine_and_a_bigger_one_in_spark(broker, spark, floe_home,
                                                                                      monkeypatch):
    """The trickles' shared job (50 messages, at most `in_engine`) is read, decoded and written in its lane's
    thread, with the lane's own consumer, closed with the jobs; the busy stream's (3,000) is a Spark job."""
    import appliance.ingest.batch as batch_module

    spark_jobs = []
    in_tasks = batch_module.run_in_tasks
    monkeypatch.setattr(batch_module, "run_in_tasks", lambda *a: spark_jobs.append(a[2]) or in_tasks(*a))
    monkeypatch.setattr(jobs_module, "WINDOW", 30.0)  # every planner submits before a job starts
    sizes = {f"here_a_{os.getpid()}": 20, f"here_b_{os.getpid()}": 30, f"spark_{os.getpid()}": 3000}
    outcomes, jobs, catalog = steps_due_together(broker, spark, sizes, "here", in_engine=100, close=False)
    assert {name: o.rows for name, o in outcomes.items()} == sizes
    assert (jobs.jobs_run, jobs.jobs_in_engine, len(spark_jobs)) == (2, 1, 1), "the trickles' job ran here"
    for t, n in sizes.items():
        rows = catalog.table(f"here.{t}").scan().to_arrow()
        assert rows.num_rows == n and sorted(rows.column("order_id").to_pylist()) == list(range(n))
    kept = jobs._consumers[jobs_module.TRICKLE]
    assert len(kept) == 1 and not jobs._consumers[jobs_module.BUSY]
    jobs.close()
    assert not kept, "the lane's consumer closed with the jobs"


def test_in_the_first_minute_before_spark_s_python_workers_start_a_bigger_job_runs_in_the_engine(
        broker, spark, floe_home, monkeypatch):
    """A restart's catch-up (300 messages here, three times `in_engine`) runs in the engine's process while the
    session's Python workers have run no job of ours (the first waits seconds for them to start); once one has, a
    job of the same size is a Spark job again, as is one past `COLD_FACTOR` times `in_engine` from the first."""
    import weakref

    import appliance.ingest.batch as batch_module
    import appliance.spark.tasks as tasks_module

    spark_jobs = []
    in_tasks = batch_module.run_in_tasks
    monkeypatch.setattr(batch_module, "run_in_tasks", lambda *a: spark_jobs.append(a[2]) or in_tasks(*a))
    monkeypatch.setattr(jobs_module, "WINDOW", 30.0)  # every planner submits before a job starts
    # The suite's session ran other tests' jobs: as a new engine's own session, none yet.
    monkeypatch.setattr(tasks_module, "_STARTED", weakref.WeakSet())
    pid = os.getpid()
    jobs = BatchJobs(spark, 100)
    rounds = [({f"cold_{pid}": 300}, (1, 1, 0)), ({f"big_{pid}": 600}, (2, 1, 1)), ({f"warm_{pid}": 300}, (3, 1, 2))]
    for sizes, (run, here, in_spark) in rounds:
        outcomes, _, catalog = steps_due_together(broker, spark, sizes, "cold", close=False, jobs=jobs)
        assert {name: o.rows for name, o in outcomes.items()} == sizes
        assert (jobs.jobs_run, jobs.jobs_in_engine, jobs.jobs_in_spark, len(spark_jobs)) == (run, here, in_spark,
                                                                                             in_spark), sizes
        for t, n in sizes.items():
            rows = catalog.table(f"cold.{t}").scan().to_arrow()
            assert rows.num_rows == n and sorted(rows.column("order_id").to_pylist()) == list(range(n))
    jobs.close()


def test_a_jobs_bar_for_the_engine_is_higher_only_in_its_first_minute_before_spark_s_workers_start():
    limit, factor, minute = jobs_module.in_engine_limit, jobs_module.COLD_FACTOR, jobs_module.COLD_SECONDS
    assert limit(2000, started=False, age=1.0) == 2000 * factor == 10_000
    assert limit(2000, started=False, age=minute + 1) == 2000, "a stream of thousands a second goes to Spark"
    assert limit(2000, started=True, age=1.0) == 2000
    assert limit(0, started=False, age=1.0) == 0, "0 keeps every job in Spark"


def test_a_batchs_lane_is_told_by_the_messages_it_plans():
    from appliance.kafka.reader import Piece

    small = [(None, [[Piece(0, 0, 600)], [Piece(1, 10, 399)]])]  # 989 messages over two tasks
    assert jobs_module.lane(small) == jobs_module.TRICKLE
    assert jobs_module.lane(small + [(None, [[Piece(0, 600, 611)]])]) == jobs_module.BUSY  # 1,000: a pattern's
    assert jobs_module.lane([(None, [])]) == jobs_module.TRICKLE


def test_a_sessions_core_count_is_asked_once_and_ends_with_the_session():
    """The count is kept per session for every stream; a session that ends takes it with it, so a new one (at the
    same address, as CPython reuses a freed object's) asks its own."""
    from appliance.ingest import runner

    class Context:
        def __init__(self, cores: int) -> None:
            self.asked, self.cores = 0, cores

        @property
        def defaultParallelism(self) -> int:
            self.asked += 1
            return self.cores

    class Session:  # what `parallelism` reads of a SparkSession
        def __init__(self, cores: int) -> None:
            self.sparkContext = Context(cores)

    held = len(runner._CORES)  # the suite's own session, if a test in this process ran a stream on it
    first = Session(2)
    assert [runner.session_cores(first) for _ in range(5)] == [2] * 5 and first.sparkContext.asked == 1
    del first
    for cores in (4, 6, 8):  # each one freed before the next is made: CPython hands out the same address again
        session = Session(cores)
        assert runner.session_cores(session) == cores
        del session
    assert len(runner._CORES) == held


def test_a_background_build_warns_of_nothing_and_is_reaped_when_it_ends(monkeypatch, tmp_path):
    """The archive's builder outlives the call that starts it: dropping its Popen while it runs raised a
    ResourceWarning from the garbage collector in whatever came next (a test's set-up, once), and it was reaped only
    at some later Popen. The child here waits for a file, standing in for the build's minute."""
    import gc
    import warnings

    from appliance.spark.archive import start_detached

    unraised = []
    monkeypatch.setattr(sys, "unraisablehook", unraised.append)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        done = tmp_path / "done"
        waits = f"import os, time\nwhile not os.path.exists({str(done)!r}): time.sleep(0.02)"
        reaper = start_detached([sys.executable, "-c", waits], dict(os.environ))
        gc.collect()  # while the child runs: its Popen is the reaper's, not garbage
        assert reaper.is_alive()
        done.touch()
    wait_for(lambda: not reaper.is_alive(), what="the child reaped")
    gc.collect()
    assert unraised == []


def test_the_class_data_archive_is_built_and_used(tmp_path, spark):
    env = {**os.environ, "XDG_CACHE_HOME": str(tmp_path / "cache"), "FLOE_HOME": str(tmp_path / "home")}
    env.pop("PYSPARK_SUBMIT_ARGS", None)
    built = subprocess.run([sys.executable, "-m", "appliance.spark.archive"], env=env, cwd=ROOT,
                           capture_output=True, text=True, timeout=300)
    assert built.returncode == 0, built.stderr
    [archive] = (tmp_path / "cache" / "floe").glob("*.jsa")
    assert archive.stat().st_size > 10_000_000
    made = archive.stat().st_mtime_ns
    again = subprocess.run([sys.executable, "-m", "appliance.spark.archive"], env=env, cwd=ROOT,
                           capture_output=True, text=True, timeout=300)  # `scripts/setup` run a second time
    assert again.returncode == 0 and f"kept {archive}" in again.stderr and archive.stat().st_mtime_ns == made
    # Used: the suite's own session started after `scripts/setup` built the user's archive, by the same name.
    from appliance.spark.archive import archive_path

    assert archive_path().name == archive.name and archive_path().exists()
    args = list(spark.sparkContext._jvm.java.lang.management.ManagementFactory.getRuntimeMXBean().getInputArguments())
    assert f"-XX:SharedArchiveFile={archive_path()}" in args, args
