"""Upsert streams: the table holds each key's newest row, by merge-on-read, exactly once.

Real broker, real Spark, real catalog: messages with updates, deletes, tombstones, malformed ones
and many updates of one key inside one batch; the table read by DuckDB and by PyIceberg equals
the newest state per key computed from what was produced; `floe audit` proves it; compaction
folds the position deletes in.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import threading
import time

import orjson
import pytest

from appliance.config.settings import ensure_home, load_settings
from appliance.tables.catalog import Catalog
from appliance.tables.snapshots import totals

from conftest import FLOE, ROOT, finished, floe, floe_process, run_until_caught_up, run_until_killed, wait_for

PARTITIONS = 4


class Changes:
    """Produces keyed messages and keeps the newest state per key that they give."""

    def __init__(self, broker, topic: str) -> None:
        self.producer = broker.producer()
        self.topic = topic
        self.state: dict[int, dict] = {}
        self.bad: set[tuple[int, int]] = set()  # (partition, offset) of the messages that must be dead letters
        self.sent = 0

    def _send(self, key: bytes | None, value: bytes | None, partition: int, bad: bool = False) -> None:
        def delivered(err, msg):
            assert err is None, err
            if bad:
                self.bad.add((msg.partition(), msg.offset()))
        self.producer.produce(self.topic, key=key, value=value, partition=partition, on_delivery=delivered)
        self.sent += 1

    def upsert(self, key: int, **row) -> None:
        row = {"id": key, **row}
        self.state[key] = row
        self._send(orjson.dumps({"id": key}), orjson.dumps(row), key % PARTITIONS)

    def delete(self, key: int) -> None:
        self.state.pop(key, None)
        self._send(orjson.dumps({"id": key}), None, key % PARTITIONS)

    def malformed(self, key: int) -> None:
        self._send(orjson.dumps({"id": key}), b"{not json", key % PARTITIONS, bad=True)
        self._send(orjson.dumps({"id": key}), orjson.dumps({"name": "no key"}), key % PARTITIONS, bad=True)
        self._send(None, None, key % PARTITIONS, bad=True)  # a tombstone naming no key

    def flush(self) -> None:
        assert self.producer.flush(30) == 0


def query(sql: str) -> list[dict]:
    result = floe("query", sql, "--format", "json")
    assert result.returncode == 0, result.stderr
    return [json.loads(line) for line in result.stdout.splitlines()]


def table_state(table: str) -> dict[int, dict]:
    rows = query(f"select id, name, n from {table}")
    assert len(rows) == len({r["id"] for r in rows}), "a key twice"
    return {r["id"]: r for r in rows}


def pyiceberg_state(table: str) -> dict[int, dict]:
    rows = Catalog(load_settings()).table(table).scan(selected_fields=("id", "name", "n")).to_arrow().to_pylist()
    assert len(rows) == len({r["id"] for r in rows}), "a key twice"
    return {r["id"]: r for r in rows}


def expected(changes: Changes) -> dict[int, dict]:
    return {k: {"id": k, "name": v.get("name"), "n": v.get("n")} for k, v in changes.state.items()}


@pytest.mark.slow
def test_the_table_holds_each_keys_newest_row_read_alike_by_duckdb_and_pyiceberg(broker, topic, floe_home, spark):
    rng = random.Random(22)
    changes = Changes(broker, topic)
    for i in range(600):
        changes.upsert(rng.randrange(150), name=f"first-{i}", n=i)
    for i in range(50):  # one key updated many times inside one batch: only its newest is written
        changes.upsert(7, name=f"seven-{i}", n=1000 + i)
    for key in (3, 11, 19, 500):  # 500 never existed: deleting it changes nothing
        changes.delete(key)
    changes.malformed(42)
    changes.flush()
    created = floe("stream", "create", "u", "--bootstrap", broker.bootstrap, "--topic", topic, "--table",
                   "ingest.u", "--mode", "upsert")  # the key: the Kafka key's field, id
    assert created.returncode == 0, created.stderr
    assert "upsert by id" in created.stderr
    run_until_caught_up(spark)
    table = Catalog(load_settings()).table("ingest.u")
    first = table.current_snapshot().summary.additional_properties
    assert int(first["added-records"]) == len(changes.state), "one row per key written, its newest"
    assert table_state("ingest.u") == expected(changes) == pyiceberg_state("ingest.u")

    # A second batch replaces and deletes rows of the first: position deletes, merge-on-read.
    for i in range(400):
        changes.upsert(rng.randrange(200), name=f"second-{i}", n=2000 + i)
    for key in rng.sample(sorted(changes.state), 20):
        changes.delete(key)
    changes.upsert(3, name="back", n=3000)  # a deleted key comes back
    changes.flush()
    run_until_caught_up(spark)
    table = Catalog(load_settings()).table("ingest.u")
    summary = table.current_snapshot().summary
    assert summary.operation.value == "overwrite" and int(summary.additional_properties["added-position-deletes"])
    assert table_state("ingest.u") == expected(changes) == pyiceberg_state("ingest.u")
    dead = {(r["p"], r["o"]) for r in query("select _kafka_partition p, _kafka_offset o from ingest.u_dlq")}
    assert dead == changes.bad
    audit = floe("audit", "u")
    assert audit.returncode == 0, audit.stdout + audit.stderr

    # Compaction folds the position deletes into the data: none left, the same rows.
    compacted = floe("maintain", "ingest.u", "--compact")
    assert compacted.returncode == 0, compacted.stderr
    held = totals(Catalog(load_settings()).table("ingest.u"))
    assert held.delete_files == 0 and held.position_deletes == 0 and held.rows == len(changes.state)
    assert table_state("ingest.u") == expected(changes) == pyiceberg_state("ingest.u")
    # ...and the stream goes on from the compacted table (its key index rebuilt from it).
    for i in range(100):
        changes.upsert(rng.randrange(200), name=f"third-{i}", n=4000 + i)
    changes.delete(next(iter(changes.state)))
    changes.flush()
    run_until_caught_up(spark)
    assert table_state("ingest.u") == expected(changes) == pyiceberg_state("ingest.u")
    audit = floe("audit", "u", "--format", "json")
    assert audit.returncode == 0, audit.stdout
    report = json.loads(audit.stdout)
    assert report["keys"]["keys"] == report["keys"]["table_keys"] == len(changes.state)


class Trickle(Changes):
    """Changes from a thread while the engine runs: random upserts and deletes over a set of keys."""

    def __init__(self, broker, topic: str, rng: random.Random, keys: int) -> None:
        super().__init__(broker, topic)
        self.rng, self.keys = rng, keys

    def run(self, n: int, stop=None) -> None:
        for i in range(n):
            if stop is not None and stop.is_set():
                break
            key = self.rng.randrange(self.keys)
            if self.rng.random() < 0.1:
                self.delete(key)
            else:
                self.upsert(key, name=f"v{self.sent}", n=self.sent)
            self.producer.poll(0)
            if stop is not None and i % 40 == 0:
                stop.wait(0.005)  # a steady trickle, not one burst
        self.flush()


@pytest.mark.slow
def test_upserts_land_exactly_once_through_kill_9(broker, topic, floe_home, spark):
    from conftest import AfterACommit

    seed = int(os.environ.get("FLOE_TEST_SEED", random.randrange(1 << 30)))
    print(f"seed {seed}")
    rng = random.Random(seed)
    floe_home.mkdir(parents=True, exist_ok=True)
    (floe_home / "floe.toml").write_text('[engine]\nmax_batch_messages = 400\ncommit_interval = "100ms"\n'
                                         'retry_backoff = "1s"\n')
    trickle = Trickle(broker, topic, rng, keys=300)
    trickle.run(1500)
    created = floe("stream", "create", "k", "--bootstrap", broker.bootstrap, "--topic", topic, "--table",
                   "ingest.k", "--mode", "upsert", "--key", "id")
    assert created.returncode == 0, created.stderr
    # A kill between writing a commit's position deletes and committing them, on purpose.
    crashed = floe_process("run", "--until-caught-up", env={"FLOE_FAILPOINTS": "upsert_deletes_written"})
    assert crashed.returncode == -9, crashed.stderr
    # Kills at random moments of the engine's work (within 2 s of its first commit, while the rest of the backlog
    # is read in batches of 400), not of its start: two prove what four at 5-15 s after the start did (on a
    # loaded machine, most of those fell before the engine read anything).
    for _ in range(2):
        run_until_killed(120, lambda stop: trickle.run(1500, stop), when=AfterACommit("k", rng.uniform(0, 2)))
        trickle.run(rng.randint(50, 300))  # arrives while the engine is down
    run_until_caught_up(spark)
    assert table_state("ingest.k") == expected(trickle) == pyiceberg_state("ingest.k")
    audit = floe("audit", "k")
    assert audit.returncode == 0, audit.stdout + audit.stderr


@pytest.mark.slow
def test_compaction_under_a_live_upsert_stream_folds_every_delete_and_keeps_the_rows(broker, topic, floe_home):
    rng = random.Random(7)
    floe_home.mkdir(parents=True, exist_ok=True)
    # Every batch commits at once (trickle_messages = 0: no trickle waits its trickle_interval).
    (floe_home / "floe.toml").write_text('[engine]\ncommit_interval = "100ms"\ntrickle_messages = 0\n')
    trickle = Trickle(broker, topic, rng, keys=200)
    trickle.run(600)
    created = floe("stream", "create", "live", "--bootstrap", broker.bootstrap, "--topic", topic, "--table",
                   "ingest.live", "--mode", "upsert", "--key", "id")
    assert created.returncode == 0, created.stderr
    engine = subprocess.Popen(FLOE + ["run"], cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                              text=True, start_new_session=True)
    # The trickle and the minute start once the engine commits: starting it takes a while on a loaded
    # machine, and a trickle that ended before would leave the compactions nothing to do.
    wait_for(lambda: totals(Catalog(load_settings()).table("ingest.live")).data_files, 120,
             what="the engine's first commit")
    stop = threading.Event()
    feeding = threading.Thread(target=trickle.run, args=(10**7, stop))
    feeding.start()
    try:
        compactions, said = 0, []
        deadline = time.monotonic() + 60
        while compactions < 3 and time.monotonic() < deadline:
            # From another process, while the stream commits its deletes every 100 ms: the deletes
            # committed during a rewrite are carried over to its new files.
            done = floe("maintain", "ingest.live", "--compact")
            assert done.returncode == 0, done.stderr
            said.append(done.stdout + done.stderr)
            compactions += "ok" in done.stdout + done.stderr
        assert compactions == 3, said
    finally:
        stop.set()
        feeding.join()
    wait_for(lambda: table_state("ingest.live") == expected(trickle), 120, what="the stream to catch up")
    engine.send_signal(signal.SIGTERM)
    code, said = finished(engine, 90)
    assert code == 0, said
    assert floe("maintain", "ingest.live", "--compact").returncode == 0
    held = totals(Catalog(load_settings()).table("ingest.live"))
    assert held.delete_files == 0 and held.rows == len(trickle.state)
    assert table_state("ingest.live") == expected(trickle) == pyiceberg_state("ingest.live")
    audit = floe("audit", "live")
    assert audit.returncode == 0, audit.stdout + audit.stderr


@pytest.mark.slow
def test_the_audit_finds_a_lost_key_a_resurrected_one_and_a_key_twice_and_stages_refuse_the_table(broker, topic,
                                                                                                   floe_home, spark):
    changes = Changes(broker, topic)
    for i in range(40):
        changes.upsert(i, name=f"n{i}", n=i)
    changes.delete(7)
    changes.flush()
    assert floe("stream", "create", "a", "--bootstrap", broker.bootstrap, "--topic", topic, "--table", "ingest.a",
                "--mode", "upsert", "--key", "id").returncode == 0
    run_until_caught_up(spark)
    assert floe("audit", "a").returncode == 0

    # Damage the table behind Floe's back, as another writer could: a key lost, a deleted key back,
    # and one key twice.
    import pyarrow as pa
    from pyiceberg.expressions import EqualTo

    table = Catalog(load_settings()).table("ingest.a")
    table.delete(EqualTo("id", 3))
    rows = table.scan(row_filter=EqualTo("id", 5)).to_arrow()
    table.append(rows)
    back = rows.set_column(rows.schema.get_field_index("id"), "id", pa.array([7], pa.int64()))
    table.append(back.set_column(back.schema.get_field_index("_kafka_offset"), "_kafka_offset",
                                 pa.array([10_000], pa.int64())))
    audit = floe("audit", "a")
    assert audit.returncode == 1, audit.stdout
    said = audit.stdout
    assert "1 keys missing from the table, e.g. 3" in said
    assert "1 keys held by more than one row, e.g. 5" in said
    assert "deleted keys still in the table, e.g. 7" in said

    refused = floe("stage", "create", "s", "--from", "ingest.a", "--table", "prep.s", "--sql", "select * from source")
    assert refused.returncode != 0 and len(refused.stderr.strip().splitlines()) == 1
    assert "upsert stream 'a'" in refused.stderr and "updated and deleted in place" in refused.stderr


def test_a_table_another_writer_loaded_takes_the_topic_on_top_across_two_days_of_partitions(broker, topic, spark,
                                                                                             floe_home):
    """A team's initial load with PyIceberg (its own Arrow types, no Kafka positions), then Floe applies
    the topic to it: every loaded row found and replaced like Floe's own. The messages' Kafka timestamps
    alternate between two days, so each batch's rows fall in two of the table's (daily) partitions,
    written partition by partition: the keys handed to the index follow the files."""
    import datetime as dt

    import pyarrow as pa

    from appliance.auditor.check import audit_stream
    from appliance.control.streams import create_stream
    from appliance.ingest.engine import Engine
    from appliance.model.mapping import Column, Mapping
    from appliance.model.partitioning import Partitioning
    from appliance.query.connection import run_query
    from appliance.tables.iceberg_schemas import target_iceberg_schema

    settings = load_settings()
    ensure_home(settings)
    mapping = Mapping((Column("id", "long", ("id",)), Column("name", "string", ("name",)),
                       Column("n", "long", ("n",))))
    catalog = Catalog(settings)
    catalog.iceberg.create_namespace("ingest")
    schema = target_iceberg_schema(mapping)
    loaded = catalog.iceberg.create_table("ingest.loaded", schema, properties={"format-version": "2"},
                                          partition_spec=Partitioning.parse("day(_kafka_timestamp)").spec(schema))
    state = {k: {"id": k, "name": f"loaded-{k}", "n": -k} for k in range(200)}
    rows = pa.table({"id": pa.array(list(state), pa.int64()),
                     "name": pa.array([r["name"] for r in state.values()], pa.large_string()),
                     "n": pa.array([r["n"] for r in state.values()], pa.int64())})
    for f in loaded.schema().fields[3:]:
        rows = rows.append_column(f.name, pa.nulls(rows.num_rows, pa.int32() if f.name == "_kafka_partition" else
                                                   pa.int64() if f.name == "_kafka_offset" else
                                                   pa.timestamp("us", tz="UTC")))
    loaded.append(rows)
    producer = broker.producer()
    days = [dt.datetime(2026, 11, 1, tzinfo=dt.UTC), dt.datetime(2026, 11, 2, tzinfo=dt.UTC)]

    def send(i: int, key: int, value: dict | None) -> None:
        stamp = int((days[i % 2] + dt.timedelta(seconds=i)).timestamp() * 1000)
        producer.produce(topic, key=orjson.dumps({"id": key}), partition=key % PARTITIONS, timestamp=stamp,
                         value=None if value is None else orjson.dumps(value))

    rng = random.Random(5)
    for round_ in range(2):
        for i in range(600):
            key = rng.randrange(300)
            if rng.random() < 0.15:
                state.pop(key, None)
                send(i, key, None)
            else:
                state[key] = {"id": key, "name": f"r{round_}-{i}", "n": i}
                send(i, key, state[key])
        assert producer.flush(30) == 0
        if not round_:  # the topic is made by its first messages
            create_stream(settings, "onto", bootstrap=broker.bootstrap, topic=topic, table="ingest.loaded",
                          mode="upsert", key=["id"], mapping=mapping)
        Engine(settings, spark=spark).run(until_caught_up=True)
        held = run_query(settings, "select id, name, n from ingest.loaded").to_pylist()
        assert len(held) == len({r["id"] for r in held}), "a key twice"
        assert {r["id"]: r for r in held} == state
    report = audit_stream(settings, "onto")
    assert report.ok, report.problems
