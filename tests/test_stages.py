"""SQL preparation stages end to end, as a user runs them: `floe` commands in their own processes, a real
broker, Spark and catalog. After rounds of ingestion with SIGKILLs between them, a compaction of the source
and aggressive snapshot expiry, each stage's table equals its query recomputed over its whole source."""

from __future__ import annotations

import json
import os
import random
import threading

import orjson
import pyarrow as pa
import pytest

from appliance.config.settings import load_settings
from appliance.control.stages import create_stage, update_stage
from appliance.ingest.engine import Engine
from appliance.query.connection import run_query
from appliance.state.store import StateStore
from appliance.tables.catalog import Catalog
from appliance.tables.datafiles import live_data_files

from conftest import AfterACommit, floe, run_until_caught_up, run_until_killed, wait_for

STATUSES = ["new", "paid", "sent", "cancelled"]


def rows(sql: str) -> list[dict]:
    return run_query(load_settings(), sql).to_pylist()


def order(i: int, rng: random.Random) -> bytes:
    return orjson.dumps({
        "order_id": i, "store_id": rng.randint(1, 6), "customer_id": rng.randint(1, 40),
        "status": rng.choice(STATUSES), "amount": rng.randint(1, 400) / 4,  # quarters: sums stay exact in doubles
        "coupon": rng.choice([None, "c1", "c2"]), "ordered_at": f"2026-11-2{i % 3}T1{i % 4}:{i % 60:02d}:00Z"})


def equal(table: str, recomputed: str, columns: str) -> None:
    """The stage's table (its query's columns) and the query recomputed by DuckDB over the whole source."""
    kept = f"select {columns} from {table}"
    [found] = rows(f"select (select count(*) from (({recomputed}) except all ({kept}))) missing, "
                   f"(select count(*) from (({kept}) except all ({recomputed}))) extra")  # one query, one connection
    missing, extra = found["missing"], found["extra"]
    assert (missing, extra) == (0, 0), f"{table}: {missing} rows missing, {extra} too many"


STAGES = {
    # name: (source, sql, table, the same query as DuckDB recomputes it over the whole source, its columns)
    "big": ("ingest.orders", "select order_id, store_id, amount, status from source where amount >= 50",
            "prep.big", "select order_id, store_id, amount, status from ingest.orders where amount >= 50",
            "order_id, store_id, amount, status"),
    "by_hour": ("ingest.orders",
                "select date_trunc('hour', ordered_at) as hour, status, count(*) as n, count(coupon) as coupons, "
                "sum(amount) as total, min(amount) as lo, max(amount) as hi, avg(amount) as mean, "
                "count(distinct customer_id) as customers from source group by 1, 2",
                "prep.by_hour",
                "select date_trunc('hour', ordered_at) as hour, status, count(*) as n, count(coupon) as coupons, "
                "sum(amount) as total, min(amount) as lo, max(amount) as hi, avg(amount) as mean, "
                "count(distinct customer_id) as customers from ingest.orders group by 1, 2",
                "hour, status, n, coupons, total, lo, hi, mean, customers"),
    "big_by_store": ("prep.big", "select store_id, count(*) as n, sum(amount) as total from source group by store_id",
                     "prep.big_by_store",
                     "select store_id, count(*) as n, sum(amount) as total from prep.big group by store_id",
                     "store_id, n, total"),
    "regional": ("ingest.orders",
                 "select s.order_id, s.amount, r.region from source s join ref.stores r on s.store_id = r.store_id",
                 "prep.regional",
                 "select s.order_id, s.amount, r.region from ingest.orders s join ref.stores r "
                 "on s.store_id = r.store_id", "order_id, amount, region"),
    "dead_reasons": ("ingest.orders_dlq", "select error_stage, count(*) as n from source group by error_stage",
                     "prep.dead_reasons",
                     "select error_stage, count(*) as n from ingest.orders_dlq group by error_stage", "error_stage, n"),
}


def orders_stream(broker, topic: str, name: str, n: int, rng: random.Random) -> None:
    """`n` orders on `topic`, and stream `name` reading them into ingest.NAME (created, not yet run)."""
    broker.produce(topic, [order(i, rng) for i in range(n)])
    created = floe("stream", "create", name, "--bootstrap", broker.bootstrap, "--topic", topic, "--table",
                   f"ingest.{name}")
    assert created.returncode == 0, created.stderr


def caught_up(spark) -> None:
    """Every stream and stage up to date, on the tests' SparkSession."""
    Engine(load_settings(), spark=spark).run(until_caught_up=True)


def reference_table(settings) -> None:
    """A table made by another Iceberg client, which stages join for enrichment."""
    catalog = Catalog(settings)
    catalog.iceberg.create_namespace("ref")
    stores = catalog.iceberg.create_table("ref.stores", schema=pa.schema([("store_id", pa.int64()),
                                                                            ("region", pa.string())]))
    stores.append(pa.table({"store_id": list(range(1, 7)), "region": ["north", "south", "east"] * 2}))


@pytest.mark.slow
def test_stages_equal_their_queries_through_kills_compaction_and_expiry(broker, topic, floe_home, spark):
    seed = int(os.environ.get("FLOE_TEST_SEED", random.randrange(1 << 30)))
    print(f"seed {seed}")
    rng = random.Random(seed)
    settings = load_settings()
    floe_home.mkdir(parents=True, exist_ok=True)
    # Small batches committed every 200 ms, never held back as a trickle's: each cycle leaves small files
    # for the compaction between kills.
    (floe_home / "floe.toml").write_text('[engine]\ncommit_interval = "200ms"\nmax_batch_messages = 600\n'
                                         'trickle_messages = 0\n[maintenance]\nenabled = false\n')
    sent = {"n": 0}
    producer = broker.producer()

    def publish(n: int, stop: threading.Event | None = None) -> None:
        for _ in range(n):
            if stop is not None and stop.is_set():
                break
            i = sent["n"]
            sent["n"] += 1
            producer.produce(topic, value=b"{not json" if i % 97 == 5 else order(i, rng), partition=i % 4)
            producer.poll(0)
            if stop is not None and i % 40 == 0:
                stop.wait(0.02)
        assert producer.flush(30) == 0

    publish(400)
    assert floe("stream", "create", "orders", "--bootstrap", broker.bootstrap, "--topic", topic,
                "--table", "ingest.orders").returncode == 0
    run_until_caught_up(spark)  # the dead-letter table exists, with rows
    reference_table(settings)
    for name, (source, sql, table, _, _) in STAGES.items():
        created = floe("stage", "create", name, "--from", source, "--sql", sql, "--table", table)
        assert created.returncode == 0, created.stderr
    assert floe("table", "policy", "ingest.orders", "--keep-snapshots", "1s", "--min-snapshots", "1").returncode == 0
    # A second commit into the source, so that the first compaction has files to merge even if, on a loaded
    # machine, no cycle's engine lives long enough to commit before its kill.
    publish(100)
    run_until_caught_up(spark)

    for cycle in range(3):
        run_until_killed(120, lambda stop: publish(700, stop),
                         when=AfterACommit("orders", rng.uniform(0, 4)))
        # Maintenance of the source between kills: a compaction (`replace`), then an expiry that would
        # drop every snapshot older than a second but for the ones the stages still have to read.
        maintained = floe("maintain", "ingest.orders", "--compact", "--expire")
        assert maintained.returncode == 0, maintained.stderr

    run_until_caught_up(spark)
    # A compaction committed (in some cycle: a later cycle's expiry may have dropped its snapshot, and a
    # cycle whose engine was killed before it committed twice has nothing to compact).
    runs = json.loads(floe("table", "runs", "ingest.orders", "--format", "json").stdout)
    assert any(r["task"] == "compact" and r["snapshot_id"] for r in runs), runs
    assert rows("select count(*) n from ingest.orders")[0]["n"] + rows(
        "select count(*) n from ingest.orders_dlq")[0]["n"] == sent["n"]
    for name, (_, _, table, recomputed, columns) in STAGES.items():
        equal(table, recomputed, columns)
    listed = json.loads(floe("stage", "list", "--format", "json").stdout)
    # the one-off run has stopped: as `floe status` says, each stage is stopped, and was up to date
    assert {s["name"]: (s["state"], s["was"]) for s in listed} == {name: ("stopped", "up_to_date") for name in STAGES}
    assert {s["name"]: s["lag_rows"] for s in listed} == {name: 0 for name in STAGES}


def test_a_failing_stage_commits_nothing_and_goes_on_from_its_last_point_once_its_query_is_fixed(
        broker, topic, spark):
    settings = load_settings()
    rng = random.Random(1)
    orders_stream(broker, topic, "o", 200, rng)
    caught_up(spark)
    create_stage(settings, "tips", source="ingest.o", sql="select order_id, amount / (store_id - store_id) as odd "
                 "from source where coupon is not null", table="prep.tips", spark=spark)
    with pytest.raises(Exception, match="stage tips: .*DIVIDE_BY_ZERO"):
        Engine(settings, spark=spark).run(until_caught_up=True)  # ANSI SQL: division by zero fails the run
    assert rows("select count(*) n from prep.tips")[0]["n"] == 0  # nothing partial
    with StateStore(settings.state_db) as state:
        assert state.stage_status("tips").phase == "failed"
        [failed] = [e.message for e in state.events("tips") if e.kind == "stage_failed"]
    assert failed.endswith('once fixed (`floe stage update tips --sql "QUERY"`)'), failed  # tests/test_hints.py runs it
    broker.produce(topic, [order(200 + i, rng) for i in range(100)])
    update_stage(settings, "tips", "select order_id, amount as odd from source where coupon is not null", spark=spark)
    caught_up(spark)
    equal("prep.tips", "select order_id, amount as odd from ingest.o where coupon is not null", "order_id, odd")
    with StateStore(settings.state_db) as state:
        kinds = [e.kind for e in state.events("tips")]
    assert "stage_updated" in kinds


def test_a_stage_follows_its_source_live_and_a_refused_query_creates_nothing(broker, topic, running_engine):
    settings = load_settings()
    rng = random.Random(2)
    orders_stream(broker, topic, "live", 50, rng)
    refused = floe("stage", "create", "ordered", "--from", "ingest.live", "--sql",
                   "select * from source order by amount", "--table", "prep.ordered")
    assert refused.returncode == 1 and refused.stderr.count("\n") == 1
    assert "ORDER BY" in refused.stderr and not Catalog(settings).exists("prep.ordered")
    unknown = floe("stage", "create", "nope", "--from", "ingest.live", "--sql", "select nope from source",
                   "--table", "prep.nope")
    assert unknown.returncode == 1 and unknown.stderr.count("\n") == 1 and "`nope` cannot be resolved" in unknown.stderr
    assert floe("stage", "create", "counts", "--from", "ingest.live", "--sql",
                "select status, count(*) as n from source group by status", "--table", "prep.counts").returncode == 0
    running_engine()
    wait_for(lambda: sum(r["n"] for r in rows("select n from prep.counts")) == 50, 120, what="first counts")
    broker.produce(topic, [order(50 + i, rng) for i in range(30)])
    wait_for(lambda: sum(r["n"] for r in rows("select n from prep.counts")) == 80, 60, what="live counts")
    assert floe("stage", "pause", "counts").returncode == 0
    broker.produce(topic, [order(80 + i, rng) for i in range(10)])
    wait_for(lambda: rows("select count(*) n from ingest.live")[0]["n"] == 90, 60, what="the stream goes on")
    shown = floe("stage", "show", "counts")
    assert "state      paused" in shown.stdout
    assert sum(r["n"] for r in rows("select n from prep.counts")) == 80  # paused: no run
    assert floe("stage", "resume", "counts").returncode == 0
    wait_for(lambda: sum(r["n"] for r in rows("select n from prep.counts")) == 90, 60, what="resumed counts")


def test_a_grouping_stage_given_a_new_query_is_recomputed_once_not_added_to(broker, topic, spark):
    settings = load_settings()
    rng = random.Random(3)
    orders_stream(broker, topic, "g", 120, rng)
    caught_up(spark)
    create_stage(settings, "per_status", source="ingest.g", sql="select status, count(*) as n from source "
                 "group by status", table="prep.per_status", spark=spark)
    caught_up(spark)
    equal("prep.per_status", "select status, count(*) as n from ingest.g group by status", "status, n")
    # New columns, and one of another type: the table is rebuilt from the whole source, once.
    update_stage(settings, "per_status", "select status, count(*) as n, max(amount) as top, "
                 "cast(sum(amount) as string) as n2 from source group by status", spark=spark)
    broker.produce(topic, [order(120 + i, rng) for i in range(30)])
    with StateStore(settings.state_db) as state:
        runs_before = state.newest_stage_run()
    run_until_caught_up(spark)  # as `floe run --until-caught-up`, its log in floe.log
    equal("prep.per_status", "select status, count(*) as n, max(amount) as top, cast(sum(amount) as varchar) "
          "as n2 from ingest.g group by status", "status, n, top, n2")
    # Every run wrote the whole table: rows out add up over the runs, the table holds one row per status.
    with StateStore(settings.state_db) as state:
        status = state.stage_status("per_status")
    held = rows("select count(*) n from prep.per_status")[0]["n"]
    assert status.table_rows == held and status.rows_out_total > held
    # floe.log sums the stage's runs up at the run's end (once a minute in a long run), with no line a run.
    with StateStore(settings.state_db) as state:
        ran = len(state.stage_runs_after(runs_before))
    log = (settings.log_dir / "floe.log").read_text()
    assert "stage per_status:" not in log
    [line] = [line for line in log.splitlines() if "stages, the last" in line]
    assert f": {ran} run{'s' * (ran != 1)} of 1 stage, " in line and ran >= 1, line


def test_maintenance_of_the_source_alone_moves_a_stage_on_and_expiry_waits_for_a_first_run(broker, topic, spark):
    from appliance.maintenance.expiry import stage_positions
    from appliance.tables.snapshots import stage_position

    settings = load_settings()
    rng = random.Random(4)
    orders_stream(broker, topic, "m", 40, rng)
    for _ in range(3):  # three commits: several small files to compact
        caught_up(spark)
        broker.produce(topic, [order(i, rng) for i in range(40)])
    caught_up(spark)
    create_stage(settings, "copy", source="ingest.m", sql="select order_id from source", table="prep.copy",
                 spark=spark)
    catalog = Catalog(settings)
    assert stage_positions(settings, catalog, "ingest.m") == frozenset({None})  # its first run is due
    assert floe("table", "policy", "ingest.m", "--keep-snapshots", "1s", "--min-snapshots", "1").returncode == 0
    assert floe("maintain", "ingest.m", "--expire").returncode == 0
    assert len(catalog.table("ingest.m").metadata.snapshots) >= 3  # nothing expired before the stage ran
    caught_up(spark)
    assert floe("maintain", "ingest.m", "--compact").returncode == 0
    head = catalog.table("ingest.m").current_snapshot()
    assert head.summary.operation.value == "replace"
    Engine(settings, spark=spark).run(until_caught_up=True)  # no new rows: the position moves on all the same
    assert stage_position(catalog.table("prep.copy"), load_stage_id(settings, "copy")) == head.snapshot_id
    equal("prep.copy", "select order_id from ingest.m", "order_id")


def load_stage_id(settings, name: str) -> str:
    with StateStore(settings.state_db) as state:
        return state.stage(name).id


def test_a_stage_whose_source_was_recreated_fails_saying_what_to_do(broker, topic, spark):
    settings = load_settings()
    rng = random.Random(5)
    orders_stream(broker, topic, "r", 20, rng)
    caught_up(spark)
    create_stage(settings, "follow", source="ingest.r", sql="select order_id from source", table="prep.follow",
                 spark=spark)
    caught_up(spark)
    refused = floe("stream", "delete", "r", "--drop-tables")
    assert refused.returncode == 1 and "stage 'follow' reads r's tables" in refused.stderr
    catalog = Catalog(settings)
    schema = catalog.table("ingest.r").schema()
    catalog.drop("ingest.r")  # recreated by another client, history and all gone
    table = catalog.iceberg.create_table("ingest.r", schema=schema)
    arrow = table.schema().as_arrow()
    table.append(pa.Table.from_pylist([{name: None for name in arrow.names} | {"order_id": 1}], schema=arrow))
    with pytest.raises(Exception, match="no longer has snapshot .* delete the stage and create it again"):
        caught_up(spark)


def test_a_stage_table_partitioned_as_asked_over_the_querys_columns(broker, topic, spark):
    from appliance.core.errors import InvalidPartitioning

    settings = load_settings()
    rng = random.Random(6)
    orders_stream(broker, topic, "sp", 60, rng)
    caught_up(spark)
    with pytest.raises(InvalidPartitioning, match="no column 'nope'"):
        create_stage(settings, "bad", source="ingest.sp", sql="select order_id, store_id from source",
                     table="prep.bad", spark=spark, partition_by="bucket(4, nope)")
    assert not Catalog(settings).exists("prep.bad"), "nothing created"
    create_stage(settings, "parts", source="ingest.sp", sql="select order_id, store_id from source",
                 table="prep.parts", spark=spark, partition_by="bucket(4, order_id), store_id")
    caught_up(spark)
    table = Catalog(settings).table("prep.parts")
    assert [f.name for f in table.spec().fields] == ["order_id_bucket_4", "store_id"]
    field = table.schema().find_field("store_id").field_id
    for f in live_data_files(table):  # every row of a file in its partition
        low, high = (int.from_bytes(b[field], "little", signed=True) for b in (f.lower_bounds, f.upper_bounds))
        assert low == high == f.partition[1]
    equal("prep.parts", "select order_id, store_id from ingest.sp", "order_id, store_id")
