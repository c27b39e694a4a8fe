"""Partitioned tables against the real broker, Spark and catalog: each day in files of its own, retention
dropping old days without rewriting them, partition evolution taken live, bucket and identity
partitions, compaction per partition, upserts across partitions; PyIceberg reads them all."""

from __future__ import annotations

import datetime as dt
import json

import orjson
import pytest

from appliance.config.settings import load_settings
from appliance.control.tables import alter_table
from appliance.tables.catalog import Catalog
from appliance.tables.datafiles import live_data_files

from conftest import floe, run_until_caught_up, wait_for

UTC = dt.timezone.utc
DAY_US = 86_400_000_000


def query(sql: str) -> list[dict]:
    result = floe("query", sql, "--format", "json")
    assert result.returncode == 0, result.stderr
    return [json.loads(line) for line in result.stdout.splitlines()]


def events(broker, topic: str, days: int, per_day: int, start: int = 0) -> dt.datetime:
    """`per_day` events on each of the last `days` days (noon UTC), ids from `start`; the first day."""
    today = dt.datetime.now(UTC).replace(hour=12, minute=0, second=0, microsecond=0)
    first = today - dt.timedelta(days=days - 1)
    producer = broker.producer()
    n = start
    for d in range(days):
        for i in range(per_day):
            ts = first + dt.timedelta(days=d, minutes=i)
            producer.produce(topic, value=orjson.dumps({"id": n, "ts": ts.isoformat(), "region": ["eu", "us"][n % 2],
                                                        "amount": n * 1.5}), partition=n % 4)
            n += 1
    assert producer.flush(30) == 0
    return first


def epoch_day(moment: dt.datetime) -> int:
    return (moment.date() - dt.date(1970, 1, 1)).days


def day_of(bound: bytes) -> int:
    return int.from_bytes(bound, "little", signed=True) // DAY_US


@pytest.mark.slow
def test_each_day_in_files_of_its_own_and_retention_drops_old_days_without_rewriting_them(broker, topic,
                                                                                           floe_home, spark):
    first = events(broker, topic, 20, 30)
    created = floe("stream", "create", "p", "--bootstrap", broker.bootstrap, "--topic", topic, "--table",
                   "ingest.p", "--partition-by", "day(ts)")
    assert created.returncode == 0, created.stderr
    run_until_caught_up(spark)
    table = Catalog(load_settings()).table("ingest.p")
    files = live_data_files(table)
    ts_id = table.schema().find_field("ts").field_id
    for f in files:  # read back from the files' own bounds: every row of a file in its partition's day
        assert day_of(f.lower_bounds[ts_id]) == day_of(f.upper_bounds[ts_id]) == f.partition[0]
    assert len({f.partition[0] for f in files}) == 20
    assert table.scan().to_arrow().num_rows == 600
    day = first + dt.timedelta(days=4)
    [found] = query(f"select count(*) as n from ingest.p where ts >= '{day.date()}' and "
                    f"ts < '{(day + dt.timedelta(days=1)).date()}'")
    assert found["n"] == 30
    dead = Catalog(load_settings()).table("ingest.p_dlq")
    assert str(dead.spec().fields[0].transform) == "day" and dead.spec().fields[0].name == "_ingested_at_day"

    # Retention of 10 days: the 9 whole older days go by dropping their files; only the day the cut
    # falls in is rewritten.
    assert floe("table", "policy", "ingest.p", "--retention", "10d", "--retention-column", "ts").returncode == 0
    before = {f.file_path: f for f in live_data_files(Catalog(load_settings()).table("ingest.p"))}
    ran = floe("maintain", "ingest.p", "--retention")
    assert ran.returncode == 0, ran.stderr
    table = Catalog(load_settings()).table("ingest.p")
    after = {f.file_path: f for f in live_data_files(table)}
    cut = dt.datetime.now(UTC) - dt.timedelta(days=10)
    removed = [before[p] for p in set(before) - set(after)]
    added = [after[p] for p in set(after) - set(before)]
    old_days = set(range(epoch_day(first), epoch_day(cut)))
    assert {f.partition[0] for f in removed} - {epoch_day(cut)} == old_days, "every older day's files dropped"
    assert {f.partition[0] for f in added} <= {epoch_day(cut)}, "only the day the cut falls in is rewritten"
    kept = query("select count(*) as n, min(ts) as oldest from ingest.p")[0]
    assert kept["n"] == table.scan().to_arrow().num_rows
    assert dt.datetime.fromisoformat(kept["oldest"]) >= cut


@pytest.mark.slow
def test_bucket_and_identity_partitions_and_a_partitioning_changed_live(broker, topic, floe_home, running_engine):
    events(broker, topic, 2, 40)
    created = floe("stream", "create", "b", "--bootstrap", broker.bootstrap, "--topic", topic, "--table",
                   "ingest.b", "--partition-by", "bucket(4, id), region")
    assert created.returncode == 0, created.stderr
    running_engine()
    settings = load_settings()
    wait_for(lambda: Catalog(settings).table("ingest.b").scan().to_arrow().num_rows == 80, 120, what="rows")
    files = live_data_files(Catalog(settings).table("ingest.b"))
    assert {(f.partition[0], f.partition[1]) for f in files} <= {(b, r) for b in range(4) for r in ("eu", "us")}
    assert all(f.partition[1] in f.file_path for f in files)

    # A new partitioning, taken by the running stream from its next batch; old files keep theirs.
    said = alter_table(settings, "ingest.b", "partition-by", "day(ts)")
    assert said == "partitioning bucket(4, id), region -> day(ts)"
    events(broker, topic, 2, 40, start=1000)
    wait_for(lambda: Catalog(settings).table("ingest.b").scan().to_arrow().num_rows == 160, 120, what="more rows")
    table = Catalog(settings).table("ingest.b")
    by_spec = {spec: [f for f in live_data_files(table) if f.spec_id == spec] for spec in (0, 1)}
    assert by_spec[0] and by_spec[1] and all(len(f.partition) == 1 for f in by_spec[1])
    shown = json.loads(floe("table", "show", "ingest.b", "--format", "json").stdout)
    assert [(s["spec_id"], s["partitioning"], s["current"]) for s in shown["specs"]] == [
        (0, "bucket(4, id), region", False), (1, "day(ts)", True)]

    # Compaction rewrites the old spec's small files into the current one, partition by partition.
    compacted = floe("maintain", "ingest.b", "--compact")
    assert compacted.returncode == 0, compacted.stderr
    table = Catalog(settings).table("ingest.b")
    assert {f.spec_id for f in live_data_files(table)} == {1}
    assert table.scan().to_arrow().num_rows == 160
    assert query("select count(distinct id) as n from ingest.b")[0]["n"] == 160


@pytest.mark.slow
def test_an_upsert_row_moved_to_another_partition_leaves_no_copy_behind(broker, topic, floe_home, spark):
    producer = broker.producer()
    day1 = dt.datetime(2026, 11, 1, 12, tzinfo=UTC)
    for i in range(20):
        producer.produce(topic, key=str(i).encode(), value=orjson.dumps({"id": i, "ts": day1.isoformat(), "v": 1}),
                         partition=i % 2)
    assert producer.flush(30) == 0
    assert floe("stream", "create", "u", "--bootstrap", broker.bootstrap, "--topic", topic, "--table", "ingest.u",
                "--mode", "upsert", "--key", "id", "--partition-by", "day(ts)").returncode == 0
    run_until_caught_up(spark)
    for i in range(10):  # their new rows are of another day: the old ones, in day 1's files, are deleted
        producer.produce(topic, key=str(i).encode(), value=orjson.dumps(
            {"id": i, "ts": (day1 + dt.timedelta(days=3)).isoformat(), "v": 2}), partition=i % 2)
    assert producer.flush(30) == 0
    run_until_caught_up(spark)
    rows = query("select id, v, cast(ts as date) as day from ingest.u order by id")
    assert [(r["id"], r["v"]) for r in rows] == [(i, 2 if i < 10 else 1) for i in range(20)]
    table = Catalog(load_settings()).table("ingest.u")
    assert sorted(r["id"] for r in table.scan().to_arrow().to_pylist()) == list(range(20))
    assert floe("audit", "u").returncode == 0
