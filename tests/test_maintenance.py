"""Table maintenance against real parts: a broker, `floe run` in its own process, Spark, the
SQLite catalog and the warehouse on disk. Compaction while a stream writes, expiry and
orphan removal that really delete files, retention that deletes exactly the old rows."""

from __future__ import annotations

import datetime as dt
import hashlib
import math
import os
import signal
import subprocess
import threading
import time
from pathlib import Path

import orjson
import pyarrow as pa
import pyarrow.compute as pc
import pytest
from confluent_kafka import Consumer, TopicPartition

from appliance.config.settings import ensure_home, load_settings
from appliance.control.streams import create_stream
from appliance.ingest.engine import Engine
from appliance.maintenance.expiry import files_only_in
from appliance.maintenance.maintainer import Maintainer
from appliance.maintenance.policies import set_policy as set_policy_of
from appliance.query.connection import run_query
from appliance.state.store import StateStore
from appliance.tables.catalog import Catalog
from appliance.tables.datafiles import live_data_files, live_entries, reachable_files
from appliance.tables.snapshots import committed_offsets

from conftest import FLOE, ROOT, finished, floe, pizza_values, run_until_caught_up, uri_exists, wait_for


def set_policy(maintainer: Maintainer, name: str, values: dict) -> None:
    set_policy_of(maintainer.settings, maintainer.state, maintainer.catalog, name, values)


class Publisher:
    """A steady stream of orders, about 1% malformed, remembering where each landed."""

    def __init__(self, broker, topic: str) -> None:
        self.producer = broker.producer()
        self.topic = topic
        self.sent = 0
        self.landed: dict[tuple[int, int], bool] = {}
        self.lock = threading.Lock()
        self.stop = threading.Event()
        self.thread: threading.Thread | None = None

    def _callback(self, malformed: bool):
        def delivered(err, msg):
            assert err is None, err
            with self.lock:
                self.landed[(msg.partition(), msg.offset())] = malformed
        return delivered

    def publish(self, n: int) -> None:
        for _ in range(n):
            self.sent += 1
            malformed = self.sent % 97 == 0
            value = b"{broken" if malformed else orjson.dumps(
                {"order_id": self.sent, "store": {"id": self.sent % 9}, "amount": self.sent / 4,
                 "ordered_at": "2026-11-21T12:00:00Z", "status": "paid" if self.sent % 3 else "new"})
            self.producer.produce(self.topic, value=value, on_delivery=self._callback(malformed))
            self.producer.poll(0)
        assert self.producer.flush(30) == 0

    def start(self, per_second: int) -> None:
        def run():
            while not self.stop.is_set():
                started = time.monotonic()
                self.publish(per_second // 10)
                self.stop.wait(max(0.0, 0.1 - (time.monotonic() - started)))
        self.thread = threading.Thread(target=run, daemon=True)
        self.thread.start()

    def finish(self) -> None:
        self.stop.set()
        if self.thread:
            self.thread.join()
        assert self.producer.flush(30) == 0


def end_offsets(bootstrap: str, topic: str) -> dict[int, int]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "probe", "log_level": 0})
    try:
        parts = consumer.list_topics(topic, timeout=10).topics[topic].partitions
        return {p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1] for p in parts}
    finally:
        consumer.close()


def sorted_rows(table: pa.Table) -> pa.Table:
    return table.sort_by([("_kafka_partition", "ascending"), ("_kafka_offset", "ascending")])


def checksum(table: pa.Table) -> str:
    """A digest of every column of every row, independent of the order rows are stored in."""
    rows = sorted_rows(table).select(sorted(table.column_names))
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, rows.schema) as writer:
        writer.write_table(rows.combine_chunks())
    return hashlib.sha256(sink.getvalue().to_pybytes()).hexdigest()


def assert_exactly_once(settings, stream: str, landed: dict[tuple[int, int], bool]) -> None:
    catalog = Catalog(settings)
    target = catalog.table(f"ingest.{stream}").scan(selected_fields=("_kafka_partition", "_kafka_offset")).to_arrow()
    dead = catalog.table(f"ingest.{stream}_dlq").scan(selected_fields=("_kafka_partition", "_kafka_offset")).to_arrow()
    t = list(zip(target["_kafka_partition"].to_pylist(), target["_kafka_offset"].to_pylist()))
    d = list(zip(dead["_kafka_partition"].to_pylist(), dead["_kafka_offset"].to_pylist()))
    assert len(t) == len(set(t)), "a (partition, offset) is in the target table twice"
    assert len(d) == len(set(d)), "a (partition, offset) is in the dead-letter table twice"
    assert set(t) | set(d) == set(landed) and not set(t) & set(d)
    assert set(d) == {k for k, bad in landed.items() if bad}


def write_config(home: Path, text: str) -> None:
    home.mkdir(parents=True, exist_ok=True)
    (home / "floe.toml").write_text(text)


def files_on_disk(settings) -> set[str]:
    root = Path(settings.warehouse.removeprefix("file://"))
    return {p.as_uri() for p in root.rglob("*") if p.is_file()}


@pytest.mark.slow
def test_compaction_while_the_stream_writes_keeps_every_row_once(broker, topic, floe_home, spark, running_engine):
    # Commits ten times a second: the small files come sooner than at the default second, and the rewrite
    # races more commits. The engine's own maintenance is off so that this test decides when compaction runs.
    # The engine runs in this process on the session's Spark, as `floe run` runs its maintenance beside it.
    write_config(floe_home, '[engine]\ncommit_interval = "100ms"\n[maintenance]\nenabled = false\n')
    settings = load_settings()
    publisher = Publisher(broker, topic)
    publisher.publish(200)
    created = floe("stream", "create", "orders", "--bootstrap", broker.bootstrap, "--topic", topic,
                   "--table", "ingest.orders")
    assert created.returncode == 0, created.stderr
    running_engine()
    # The stand-in broker keeps only the newest few MiB of a partition: at 4,500 msg/s an engine still starting on
    # a loaded machine falls behind that, and the oldest messages expire unread (Floe says so: data_expired).
    # The fast producer starts once the engine has committed.
    wait_for(lambda: _stream_id(settings) and committed_offsets(Catalog(settings).table("ingest.orders"),
                                                                _stream_id(settings)), 300, 0.5,
             "the engine's first commit")
    publisher.start(per_second=4500)
    try:
        catalog = Catalog(settings)
        wait_for(lambda: len(live_data_files(catalog.table("ingest.orders"))) >= 150, 400, 0.5,
                 "hundreds of small files")
        target = 256 * 1024
        maintainer = Maintainer(settings, spark=spark)
        set_policy(maintainer, "ingest.orders", {"target_file_size": "256KB"})
        run = maintainer.run("ingest.orders", "compact")  # while the stream keeps committing
        assert run.outcome == "ok", run.detail
        wait_for(lambda: _commits_after(catalog, run.snapshot_id), 30, 0.2, "a commit after compaction")
    finally:
        publisher.finish()
    goal = end_offsets(broker.bootstrap, topic)
    wait_for(lambda: committed_offsets(Catalog(settings).table("ingest.orders"), _stream_id(settings)) == goal,
             120, 0.5, "the engine to catch up")
    running_engine.stop()

    table = Catalog(settings).table("ingest.orders")
    replace = table.snapshot_by_id(run.snapshot_id)
    assert replace.summary.operation.value == "replace"
    parent = table.snapshot_by_id(replace.parent_snapshot_id)
    before = table.scan(snapshot_id=parent.snapshot_id).to_arrow()
    after = table.scan(snapshot_id=replace.snapshot_id).to_arrow()
    assert before.num_rows == after.num_rows > 10_000
    assert checksum(before) == checksum(after), "compaction changed the rows"
    assert sorted_rows(before).equals(sorted_rows(after))

    # The file count is what the target size implies: only each task's last file is short.
    summary = replace.summary.additional_properties
    removed, added = int(summary["deleted-data-files"]), int(summary["added-data-files"])
    added_bytes = int(summary["added-files-size"])
    groups = math.ceil(int(summary["removed-files-size"]) / (8 * target))
    assert added <= math.ceil(added_bytes / target) + groups
    new_files = [f for f in live_data_files(table, replace) if f.file_path.split("/")[-1].startswith("floe-rewrite")]
    assert len(new_files) == added
    assert sum(f.file_size_in_bytes >= target * 3 // 4 for f in new_files) >= added - groups
    # Every small file was rewritten (a lone last one may stay); big ones were left alone.
    # (Files the stream committed while the rewrite ran were not planned: they stay for next time.)
    parent_entries = {e.data_file.file_path: e for e in live_entries(table, parent)}
    kept = {f.file_path for f in live_data_files(table, replace)}
    removed_seq = [e.sequence_number for p, e in parent_entries.items() if p not in kept]
    left_small = [e for p, e in parent_entries.items() if p in kept and e.data_file.file_size_in_bytes < target * 3 // 4]
    assert len(removed_seq) == removed >= 100  # hundreds of small files (a loaded machine writes bigger ones)
    assert sum(e.sequence_number < max(removed_seq) for e in left_small) <= 1
    at_parent = list(parent_entries)
    assert int(summary["total-data-files"]) == len(at_parent) - removed + added

    # Every offset once, then again after a restart with messages that arrived meanwhile.
    with StateStore(settings.state_db) as state:
        expired = [e.message for e in state.events() if e.kind == "data_expired"]
    assert not expired, f"the broker dropped messages before the engine read them (too loaded a machine): {expired}"
    assert_exactly_once(settings, "orders", publisher.landed)
    publisher.publish(3000)
    run_until_caught_up(spark)
    assert_exactly_once(settings, "orders", publisher.landed)
    counts = run_query(settings, "select (select count(*) from ingest.orders) + (select count(*) from ingest.orders_dlq) n")
    assert counts["n"].to_pylist() == [publisher.sent]


def _stream_id(settings) -> str:
    return StateStore(settings.state_db).stream("orders").id


def _commits_after(catalog: Catalog, snapshot_id: int) -> list[int]:
    table = catalog.table("ingest.orders")
    out, snap = [], table.current_snapshot()
    while snap is not None and snap.snapshot_id != snapshot_id:
        out.append(snap.snapshot_id)
        snap = table.snapshot_by_id(snap.parent_snapshot_id) if snap.parent_snapshot_id else None
    return out


def ingest_rounds(broker, topic, spark, settings, rounds: int, per_round: int = 150, start: int = 0,
                  create: str | None = None) -> None:
    """Produce and ingest `rounds` times: a file (and snapshot) per round in each table."""
    for i in range(rounds):
        broker.produce(topic, pizza_values(per_round, start + i * per_round) + [b"{bad"])
        if create and i == 0:
            create_stream(settings, create, bootstrap=broker.bootstrap, topic=topic, table=f"ingest.{create}")
        Engine(settings, spark=spark).run(until_caught_up=True)


def test_expiry_and_orphan_removal_delete_files_and_keep_the_offsets(broker, topic, spark, floe_home):
    settings = load_settings()
    ingest_rounds(broker, topic, spark, settings, rounds=6, create="x")
    maintainer = Maintainer(settings, spark=spark)
    set_policy(maintainer, "ingest", {"target_file_size": "1MB"})
    assert maintainer.run("ingest.x", "compact").outcome == "ok"
    stream_id = StateStore(settings.state_db).stream("x").id
    catalog = Catalog(settings)
    table = catalog.table("ingest.x")
    offsets = committed_offsets(table, stream_id)
    rows = table.scan().to_arrow()
    old_snapshots = [s.snapshot_id for s in table.metadata.snapshots]
    doomed = files_only_in(table, old_snapshots[:-1])
    assert any(p.endswith(".parquet") for p in doomed) and all(uri_exists(p) for p in doomed)

    # The defaults keep a week of snapshots: nothing is old enough yet.
    assert maintainer.run("ingest.x", "expire").outcome == "nothing to do"
    set_policy(maintainer, "ingest.x", {"keep_snapshots": "0s", "min_snapshots": 1})
    dry = maintainer.run("ingest.x", "expire", dry_run=True)
    assert dry.outcome == "dry run" and all(uri_exists(p) for p in doomed)
    run = maintainer.run("ingest.x", "expire")
    assert run.outcome == "ok", run.detail
    table = catalog.table("ingest.x")
    assert [s.snapshot_id for s in table.metadata.snapshots] == [old_snapshots[-1]]
    assert run.snapshots_expired == len(old_snapshots) - 1 and run.files_deleted == len(doomed)
    assert not any(uri_exists(p) for p in doomed), "expired files are still on disk"
    assert all(uri_exists(p) for p in reachable_files(table, table.metadata.snapshots).all())
    assert committed_offsets(table, stream_id) == offsets
    assert sorted_rows(table.scan().to_arrow()).equals(sorted_rows(rows))
    assert run_query(settings, "select count(*) n from ingest.x")["n"].to_pylist() == [rows.num_rows]

    # Orphans: stray files from work that never committed, old and young.
    data_dir = Path(table.metadata.location.removeprefix("file://"))
    old_stray = [data_dir / "data" / "00000-0-crashed.parquet", data_dir / "metadata" / "crashed-m0.avro"]
    young_stray = data_dir / "data" / "00000-0-in-flight.parquet"
    four_days_ago = time.time() - 4 * 86400
    for path in old_stray + [young_stray]:
        path.write_bytes(b"PAR1 never committed")
    for path in old_stray:
        os.utime(path, (four_days_ago, four_days_ago))
    before = files_on_disk(settings)
    dry = maintainer.run("ingest.x", "orphans", dry_run=True)
    assert dry.outcome == "dry run" and dry.files_deleted == 2 and files_on_disk(settings) == before
    run = maintainer.run("ingest.x", "orphans")
    assert run.outcome == "ok" and run.files_deleted == 2, run.detail
    assert files_on_disk(settings) == before - {p.as_uri() for p in old_stray}
    assert young_stray.exists()
    assert run_query(settings, "select count(*) n from ingest.x")["n"].to_pylist() == [rows.num_rows]
    assert catalog.table("ingest.x").scan().to_arrow().num_rows == rows.num_rows

    # Exactly-once resumption still holds on the expired table.
    ingest_rounds(broker, topic, spark, settings, rounds=1, start=900)
    counts = run_query(settings, "select count(*) n, count(distinct (_kafka_partition, _kafka_offset)) d from ingest.x")
    assert counts.to_pylist() == [{"n": 7 * 150, "d": 7 * 150}]
    assert run_query(settings, "select count(*) n from ingest.x_dlq")["n"].to_pylist() == [7]

    runs = StateStore(settings.state_db).runs("ingest.x")
    assert [r.task for r in runs][:3] == ["orphans", "orphans", "expire"]


def test_expiry_keeps_the_snapshot_with_the_offsets_when_others_commit_on_top(broker, topic, spark, floe_home):
    settings = load_settings()
    ingest_rounds(broker, topic, spark, settings, rounds=3, create="x")
    stream_id = StateStore(settings.state_db).stream("x").id
    catalog = Catalog(settings)
    table = catalog.table("ingest.x")
    offsets = committed_offsets(table, stream_id)
    holder = table.current_snapshot().snapshot_id
    # Someone appends by hand, twice, without offsets in the summary.
    extra = table.scan(limit=5).to_arrow()
    table.append(extra)
    table.append(extra)
    maintainer = Maintainer(settings, spark=spark)
    set_policy(maintainer, "ingest.x", {"keep_snapshots": "0s", "min_snapshots": 1})
    assert maintainer.run("ingest.x", "expire").outcome == "ok"
    table = catalog.table("ingest.x")
    kept = {s.snapshot_id for s in table.metadata.snapshots}
    assert holder in kept and len(kept) == 3, "the offsets snapshot and the chain above it stay"
    assert committed_offsets(table, stream_id) == offsets
    ingest_rounds(broker, topic, spark, settings, rounds=1, start=900)
    assert run_query(settings, "select count(*) n from ingest.x")["n"].to_pylist() == [4 * 150 + 10]


def test_retention_deletes_exactly_the_rows_older_than_the_period(broker, topic, spark, floe_home):
    settings = load_settings()
    now = dt.datetime.now(dt.timezone.utc)
    producer = broker.producer()
    ages_h: list[int] = []
    # Event times over 90 days, none within 3 hours of a boundary the test uses, whenever it
    # runs. Rounds 0-1 interleave old and new rows in each file (rewritten), round 2 is all
    # old (its files dropped whole), round 3 all new (untouched).
    for rnd in range(4):
        for i in range(90):
            age = 3 + 12 * (i * 2 + rnd) if rnd < 2 else (1000 + 6 * i if rnd == 2 else 3 + 6 * i)
            ages_h.append(age)
            ts = now - dt.timedelta(hours=age)
            value = orjson.dumps({"order_id": len(ages_h), "ordered_at": ts.isoformat() if i % 10 else None})
            producer.produce(topic, value=value, timestamp=int(ts.timestamp() * 1000))
        producer.produce(topic, value=b"{bad", timestamp=int((now - dt.timedelta(days=60)).timestamp() * 1000))
        assert producer.flush(30) == 0
        if rnd == 0:
            create_stream(settings, "r", bootstrap=broker.bootstrap, topic=topic, table="ingest.r")
        Engine(settings, spark=spark).run(until_caught_up=True)
    maintainer = Maintainer(settings, spark=spark)
    catalog = Catalog(settings)
    before_snapshot = catalog.table("ingest.r").current_snapshot().snapshot_id

    set_policy(maintainer, "ingest", {"retention": "30d"})  # a namespace default reaches both tables
    old = sum(a > 30 * 24 for a in ages_h)
    assert 0 < old < len(ages_h)
    dry = maintainer.run("ingest.r", "retention", dry_run=True)
    assert dry.outcome == "dry run" and dry.rows_deleted == old, dry.detail
    assert catalog.table("ingest.r").current_snapshot().snapshot_id == before_snapshot

    run = maintainer.run("ingest.r", "retention")
    assert run.outcome == "ok" and run.rows_deleted == old, run.detail
    table = catalog.table("ingest.r")
    kept = table.scan().to_arrow()
    cutoff = now - dt.timedelta(days=30)
    expected = sorted(i + 1 for i, a in enumerate(ages_h) if a <= 30 * 24)
    assert sorted(kept["order_id"].to_pylist()) == expected
    assert pc.min(kept["_kafka_timestamp"]).as_py() >= cutoff
    assert run_query(settings, "select count(*) n from ingest.r")["n"].to_pylist() == [len(expected)]
    # The dead-letter table follows the namespace's policy too: all its messages are 60 days old.
    assert maintainer.run("ingest.r_dlq", "retention").rows_deleted == 4
    assert catalog.table("ingest.r_dlq").scan().to_arrow().num_rows == 0
    assert committed_offsets(table, StateStore(settings.state_db).stream("r").id) is not None

    # A table's own period and column win over its namespace's; a null event time is kept.
    set_policy(maintainer, "ingest.r", {"retention": "1 week", "retention_column": "ordered_at"})
    run = maintainer.run("ingest.r", "retention")
    week = [r for r in kept.to_pylist() if r["ordered_at"] is None or r["ordered_at"] >= now - dt.timedelta(days=7)]
    assert run.rows_deleted == len(expected) - len(week)
    left = catalog.table("ingest.r").scan().to_arrow()
    assert sorted(left["order_id"].to_pylist()) == sorted(r["order_id"] for r in week)
    assert left["ordered_at"].null_count == sum(r["ordered_at"] is None for r in week) > 0


def test_partitioned_tables_are_compacted_partition_by_partition(spark, floe_home):
    from pyiceberg.partitioning import PartitionField, PartitionSpec
    from pyiceberg.schema import Schema
    from pyiceberg.transforms import IdentityTransform
    from pyiceberg.types import LongType, NestedField, StringType, TimestamptzType

    settings = load_settings()
    ensure_home(settings)
    catalog = Catalog(settings)
    schema = Schema(NestedField(1, "id", LongType(), required=False), NestedField(2, "note", StringType(), required=False),
                    NestedField(3, "at", TimestamptzType(), required=False), NestedField(4, "day", StringType(), required=False))
    catalog.iceberg.create_namespace("lab")
    table = catalog.iceberg.create_table("lab.events", schema, partition_spec=PartitionSpec(
        PartitionField(source_id=4, field_id=1000, transform=IdentityTransform(), name="day")))
    day0 = dt.datetime(2026, 11, 1, tzinfo=dt.timezone.utc)
    for i in range(12):
        ids = list(range(i * 300, (i + 1) * 300))
        table.append(pa.table({
            "id": pa.array(ids, pa.int64()),
            "note": [f"n{j}" for j in ids],
            "at": pa.array([day0 + dt.timedelta(hours=j % 72) for j in ids], pa.timestamp("us", tz="UTC")),
            "day": [(day0 + dt.timedelta(hours=j % 72)).date().isoformat() for j in ids],
        }))
    table = catalog.table("lab.events")
    before = table.scan().to_arrow()
    assert len(live_data_files(table)) == 36
    run = Maintainer(settings, spark=spark).run("lab.events", "compact")
    assert run.outcome == "ok", run.detail
    table = catalog.table("lab.events")
    files = live_data_files(table)
    assert len(files) == 3, "one file per day"
    assert [f.record_count for f in files] == [1200, 1200, 1200]
    for f in files:
        rows = table.scan(row_filter=f"day == '{f.partition[0]}'").to_arrow()
        assert rows.num_rows == 1200 and set(rows["day"].to_pylist()) == {f.partition[0]}
    assert table.scan().to_arrow().sort_by("id").equals(before.sort_by("id"))
    assert len({f.partition[0] for f in files}) == 3, "a file mixes days"


def test_the_engine_maintains_tables_by_itself_while_streaming(broker, topic, floe_home, running_engine):
    write_config(floe_home, '[engine]\ncommit_interval = "250ms"\n'
                            '[maintenance]\ncheck_interval = "1s"\nexpire_interval = "1s"\n'
                            '[maintenance.policy]\ncompact_small_files = 10\ncompact_interval = "0s"\n'
                            'keep_snapshots = "0s"\nmin_snapshots = 2\ntarget_file_size = "1MB"\n')
    settings = load_settings()
    publisher = Publisher(broker, topic)
    publisher.publish(100)
    create_stream(settings, "auto", bootstrap=broker.bootstrap, topic=topic, table="ingest.auto")
    running_engine()  # its maintenance scheduler beside its streams, on the session's Spark, as `floe run` does
    publisher.start(per_second=600)
    state = StateStore(settings.state_db)
    try:
        wait_for(lambda: {"compact", "expire"} <= {r.task for r in state.runs("ingest.auto")
                                                     if r.outcome == "ok" and r.trigger == "schedule"},
                 240, 0.5, "a scheduled compaction and expiry")
    finally:
        publisher.finish()
    goal = end_offsets(broker.bootstrap, topic)
    stream_id = state.stream("auto").id
    wait_for(lambda: committed_offsets(Catalog(settings).table("ingest.auto"), stream_id) == goal, 120, 0.5,
             "the engine to catch up")
    running_engine.stop()
    assert not [r for r in state.runs("ingest.auto") if r.outcome == "failed"]
    assert_exactly_once(settings, "auto", publisher.landed)


def test_stopping_the_engine_cancels_a_compaction_in_flight(broker, topic, floe_home, spark):
    write_config(floe_home, '[engine]\ncommit_interval = "250ms"\n'
                            '[maintenance]\nenabled = false\n'  # only the request below runs
                            'rewrite_in_engine = 0\n'  # a Spark job, which a stopping engine cancels
                            '[maintenance.policy]\ncompact_small_files = 2\n')
    settings = load_settings()
    publisher = Publisher(broker, topic)
    publisher.publish(100)
    create_stream(settings, "stall", bootstrap=broker.bootstrap, topic=topic, table="ingest.stall")
    # Each rewrite task stalls for 10 minutes, as one over a huge or hung input would.
    env = {**os.environ, "FLOE_FAILPOINTS": "rewrite_group=600"}
    engine = subprocess.Popen(FLOE + ["run"], cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                              text=True, start_new_session=True)
    state = StateStore(settings.state_db)
    try:
        catalog = Catalog(settings)
        wait_for(lambda: catalog.exists("ingest.stall") and len(live_data_files(catalog.table("ingest.stall"))) >= 1,
                 120, 0.5, "a first commit")
        publisher.publish(100)
        wait_for(lambda: len(live_data_files(catalog.table("ingest.stall"))) >= 2, 60, 0.5, "a second file")
        state.request_maintenance("ingest.stall", "compact")
        wait_for(lambda: not state.pending_requests("ingest.stall"), 30, 0.2, "the request taken")
        files = {f.file_path for f in live_data_files(catalog.table("ingest.stall"))}

        stopped = time.monotonic()
        engine.send_signal(signal.SIGTERM)
        code, said = finished(engine, 90)
        assert code == 0, said
    finally:
        if engine.poll() is None:
            engine.kill()
        engine.stderr.close()
    assert time.monotonic() - stopped < 90  # not the stall's 600 s: the rewrite was cancelled
    runs = state.runs("ingest.stall", task="compact")
    assert [r.outcome for r in runs] == ["cancelled"], runs
    assert "nothing was committed" in runs[0].detail
    table = Catalog(settings).table("ingest.stall")
    assert "replace" not in {s.summary.operation.value for s in table.metadata.snapshots}
    assert files <= {f.file_path for f in live_data_files(table)}  # the small files are still the table
    publisher.finish()
    run_until_caught_up(spark)  # and the stream goes on from its offsets
    assert_exactly_once(settings, "stall", publisher.landed)
