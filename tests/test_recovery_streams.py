"""Streams that resume exactly once on a recovered or restored catalog.

- `floe run` busy with an append stream (with dead letters), an upsert stream and a stage, its
  catalog.db deleted under it, then the engine killed with SIGKILL: `floe recover` finds every table
  again (the streams' and their dead-letter tables, the stage's, the system tables) and the next run
  leaves every table exact, `floe audit` clean.
- A backup restored after more commits than `metadata_versions` keeps: its catalog pointed at metadata
  files long deleted; every table re-pointed, every batch in the system tables exactly once.
"""

from __future__ import annotations

import os
import signal
import subprocess
import threading

import orjson
import pytest

from appliance.auditor import audit_stream
from appliance.config.settings import load_settings
from appliance.control.backup import backup, restore
from appliance.control.stages import create_stage
from appliance.control.streams import create_stream
from appliance.ingest.engine import Engine
from appliance.model.mapping import Column, Mapping
from appliance.query.connection import run_query
from appliance.state.store import StateStore
from appliance.tables.catalog import Catalog

from conftest import FLOE, ROOT, floe, wait_for

KEYS = 50


class Traffic:
    """Orders (every 25th malformed) and keyed account updates, produced in steps; what each must give."""

    def __init__(self, broker, topic: str) -> None:
        self.producer = broker.producer()
        self.orders, self.accounts = f"{topic}_orders", f"{topic}_accounts"
        self.sent = 0
        self.malformed = 0
        self.latest: dict[int, int] = {}  # account id -> its newest balance

    def step(self, n: int) -> None:
        for _ in range(n):
            i = self.sent
            self.sent += 1
            if i % 25 == 7:
                self.malformed += 1
                self.producer.produce(self.orders, value=b"{not json", key=str(i).encode())
            else:
                self.producer.produce(self.orders, key=str(i).encode(),
                                      value=orjson.dumps({"order_id": i, "amount": i % 40}))
            key = i % KEYS
            self.latest[key] = i
            self.producer.produce(self.accounts, key=orjson.dumps({"id": key}),
                                  value=orjson.dumps({"id": key, "balance": i}), partition=key % 4)
            if i % 100 == 0:
                self.producer.poll(0)
        assert self.producer.flush(30) == 0

    def feed(self, stop: threading.Event) -> None:
        while not stop.is_set():
            self.step(40)
            stop.wait(0.05)


def make_streams(broker, traffic: Traffic, spark=None) -> None:
    settings = load_settings()
    traffic.step(200)
    create_stream(settings, "orders", bootstrap=broker.bootstrap, topic=traffic.orders, table="ingest.orders",
                  mapping=Mapping((Column("order_id", "long", ("order_id",)), Column("amount", "long", ("amount",)))))
    create_stream(settings, "accounts", bootstrap=broker.bootstrap, topic=traffic.accounts, table="ingest.accounts",
                  mode="upsert", key=("id",),
                  mapping=Mapping((Column("id", "long", ("id",)), Column("balance", "long", ("balance",)))))
    if spark is not None:
        create_stage(settings, "big", source="ingest.orders", table="derived.big_orders",
                     sql="select order_id, amount from source where amount >= 30", spark=spark)


def count(sql: str) -> int:
    return run_query(load_settings(), sql).column(0)[0].as_py()


def assert_exact(traffic: Traffic) -> None:
    """Every table holds what was produced, once; both audits clean."""
    good = traffic.sent - traffic.malformed
    assert count("select count(*) from ingest.orders") == good
    assert count("select count(distinct order_id) from ingest.orders") == good
    assert count("select count(*) from ingest.orders_dlq") == traffic.malformed
    if Catalog(load_settings()).exists("derived.big_orders"):
        assert count("select count(*) from derived.big_orders") == count(
            "select count(*) from ingest.orders where amount >= 30")
    accounts = run_query(load_settings(), "select id, balance from ingest.accounts").to_pylist()
    assert {r["id"]: r["balance"] for r in accounts} == traffic.latest and len(accounts) == KEYS
    for stream in ("orders", "accounts"):
        report = audit_stream(load_settings(), stream)
        assert report.ok, report.render()


def batches_recorded() -> int:
    with StateStore(load_settings().state_db) as state:
        return state.last_id("batches")


def last_event() -> int:
    with StateStore(load_settings().state_db) as state:
        return state.last_id("events")


def failures_since(event_id: int) -> int:
    """How many streams reported a failure after event `event_id`."""
    with StateStore(load_settings().state_db) as state:
        return state.db.execute("select count(distinct stream) from events where id > ? and kind = 'stream_failed'",
                                [event_id]).fetchone()[0]


@pytest.mark.slow
def test_a_catalog_deleted_under_a_busy_engine_killed_with_sigkill_is_recovered_exactly(broker, topic, floe_home,
                                                                                       spark):
    floe_home.mkdir()
    (floe_home / "floe.toml").write_text('[engine]\ncommit_interval = "200ms"\nmax_batch_messages = 300\n'
                                         '[observe]\nsystem_tables_interval = "1s"\n')
    traffic = Traffic(broker, topic)
    make_streams(broker, traffic, spark)
    engine = subprocess.Popen(FLOE + ["run"], cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                              start_new_session=True)
    stop = threading.Event()
    feeding = threading.Thread(target=traffic.feed, args=(stop,))
    feeding.start()
    try:
        settings = load_settings()
        wait_for(lambda: Catalog(settings).exists("floe.batches") and batches_recorded() > 10, timeout=300,
                 what="the engine's first commits and system tables")
        lost_at = last_event()
        settings.catalog_db.unlink()  # the catalog lost while streams commit: SQLite refuses their commits
        wait_for(lambda: failures_since(lost_at) >= 2, timeout=120, what="both streams failing to commit")
    finally:
        os.killpg(engine.pid, signal.SIGKILL)  # the engine, its JVM and its Python workers
        engine.wait()
        stop.set()
        feeding.join()

    recovered = floe("recover")
    assert recovered.returncode == 0, recovered.stderr
    catalog = Catalog(load_settings())
    for table in ("ingest.orders", "ingest.orders_dlq", "ingest.accounts", "ingest.accounts_dlq",
                  "derived.big_orders", "floe.batches", "floe.events"):
        assert catalog.exists(table), recovered.stdout + recovered.stderr
    traffic.step(100)  # and the streams go on
    Engine(load_settings(), spark=spark).run(until_caught_up=True)
    assert_exact(traffic)


def run_engine_until(spark, condition, what: str) -> None:
    engine = Engine(load_settings(), spark=spark)
    thread = threading.Thread(target=engine.run, daemon=True)
    thread.start()
    try:
        wait_for(condition, timeout=240, what=what)
    finally:
        engine.stop()
        thread.join(120)


def exported_messages() -> int:
    """Messages in the system table of batches: each batch once, or the sum is off."""
    if not Catalog(load_settings()).exists("floe.batches"):
        return 0
    return count("select coalesce(sum(messages), 0) from floe.batches where stream = 'orders'")


def test_a_backup_restored_after_its_metadata_was_deleted_resumes_exactly_once(broker, topic, floe_home, spark,
                                                                              tmp_path):
    floe_home.mkdir()
    (floe_home / "floe.toml").write_text(
        '[engine]\ncommit_interval = "100ms"\nmax_batch_messages = 60\n[maintenance]\nmetadata_versions = 2\n'
        '[observe]\nsystem_tables_interval = "500ms"\n')
    traffic = Traffic(broker, topic)
    make_streams(broker, traffic)
    run_engine_until(spark, lambda: exported_messages() == traffic.sent, "the first messages, exported")
    made = backup(load_settings(), tmp_path / "backup")
    backed_up = Catalog(load_settings()).location("ingest.orders")

    traffic.step(300)  # five batches or more: the backup's metadata file is deleted
    run_engine_until(spark, lambda: exported_messages() == traffic.sent, "more messages, exported")
    assert not os.path.exists(backed_up.removeprefix("file://"))

    recovery = restore(load_settings(), made.directory)
    assert {t.table: t.action for t in recovery.tables}["ingest.orders"] == "re-pointed"
    traffic.step(100)
    run_engine_until(spark, lambda: exported_messages() >= traffic.sent, "the last messages, exported")
    assert exported_messages() == traffic.sent, "a batch exported twice, or never"
    assert_exact(traffic)
