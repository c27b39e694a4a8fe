"""What Floe writes, read back by the reference Java Iceberg implementation (Iceberg 1.10 on Spark 3.5, in
a virtualenv of its own: scripts/javaiceberg/; conftest's `java`), and compared with DuckDB's and PyIceberg's reading."""

from __future__ import annotations

import json

import orjson

from appliance.config.settings import load_settings
from appliance.tables.catalog import Catalog

from conftest import floe, run_until_caught_up


def duckdb_rows(sql: str) -> list[dict]:
    result = floe("query", sql, "--format", "json")
    assert result.returncode == 0, result.stderr
    return [json.loads(line) for line in result.stdout.splitlines()]


def test_java_iceberg_reads_an_upsert_table_with_position_deletes_as_duckdb_and_pyiceberg_do(broker, topic,
                                                                                             floe_home, spark, java):
    producer = broker.producer()

    def send(key: int, value: dict | None) -> None:
        producer.produce(topic, key=orjson.dumps({"id": key}), value=None if value is None else orjson.dumps(value),
                         partition=key % 4)

    for i in range(200):
        send(i % 50, {"id": i % 50, "name": f"a{i}", "n": i})
    assert producer.flush(30) == 0
    assert floe("stream", "create", "j", "--bootstrap", broker.bootstrap, "--topic", topic, "--table", "ingest.j",
                "--mode", "upsert", "--key", "id").returncode == 0
    run_until_caught_up(spark)
    for i in range(60):
        send(i % 30, {"id": i % 30, "name": f"b{i}", "n": 1000 + i})
    for key in (40, 41, 42):
        send(key, None)
    assert producer.flush(30) == 0
    run_until_caught_up(spark)

    sql = "select id, name, n from {t} order by id"
    for compacted in (False, True):
        table = Catalog(load_settings()).table("ingest.j")
        ours = duckdb_rows(sql.format(t="ingest.j"))
        assert len(ours) == 47
        assert java(table.metadata_location, sql.format(t="t")) == ours
        assert sorted(table.scan(selected_fields=("id", "name", "n")).to_arrow().to_pylist(),
                      key=lambda r: r["id"]) == ours
        deletes = java(table.metadata_location, meta="delete_files")
        if compacted:
            assert deletes == []
        else:
            assert deletes and all(d["content"] == 1 for d in deletes), "position deletes, as Java sees them"
            assert sum(d["record_count"] for d in deletes) == 30 + 3  # the 30 keys replaced, the 3 deleted
            assert floe("maintain", "ingest.j", "--compact").returncode == 0


def test_java_iceberg_reads_partitioned_tables_and_their_evolution_as_duckdb_does(broker, topic, floe_home, spark,
                                                                                   java):
    import datetime as dt

    producer = broker.producer()
    day = dt.datetime(2026, 11, 1, 12, tzinfo=dt.timezone.utc)
    for i in range(120):
        producer.produce(topic, value=orjson.dumps({"id": i, "ts": (day + dt.timedelta(hours=7 * i)).isoformat(),
                                                    "region": ["eu", "us", "ap"][i % 3]}), partition=i % 4)
    assert producer.flush(30) == 0
    assert floe("stream", "create", "pj", "--bootstrap", broker.bootstrap, "--topic", topic, "--table", "ingest.pj",
                "--partition-by", "day(ts), bucket(8, id)").returncode == 0
    run_until_caught_up(spark)
    assert floe("table", "alter", "ingest.pj", "partition-by", "month(ts), region").returncode == 0
    for i in range(120, 160):
        producer.produce(topic, value=orjson.dumps({"id": i, "ts": day.isoformat(), "region": "eu"}), partition=i % 4)
    assert producer.flush(30) == 0
    run_until_caught_up(spark)

    table = Catalog(load_settings()).table("ingest.pj")
    sql = "select id, ts, region from {t} order by id"
    ours = duckdb_rows(sql.format(t="ingest.pj"))
    theirs = java(table.metadata_location, sql.format(t="t"))
    assert len(ours) == 160 and [r["id"] for r in theirs] == [r["id"] for r in ours]
    assert [r["region"] for r in theirs] == [r["region"] for r in ours]
    files = java(table.metadata_location, meta="files")
    specs = {f["spec_id"] for f in files}
    assert specs == {0, 1}, "files of both specs, each with the partition values Java reads from the manifests"
    one_day = java(table.metadata_location, "select count(*) as n from t where ts >= '2026-11-01' and ts < '2026-11-02'")
    assert one_day == duckdb_rows("select count(*) as n from ingest.pj where ts >= '2026-11-01' and ts < '2026-11-02'")


def test_java_iceberg_reads_both_tables_of_a_dead_letter_replay_as_duckdb_does(broker, topic, floe_home, spark,
                                                                                java):
    """A replay's move (new target rows; the dead-letter table's position deletes and its rows that
    still fail, written again) read by Java Iceberg as DuckDB reads it."""
    from test_dlq import fix_mapping, strict_stream

    strict_stream(broker, topic, "jr", 30)
    run_until_caught_up(spark)
    fix_mapping("jr")
    replayed = floe("dlq", "replay", "jr", "--where", "_kafka_offset < 20")
    assert replayed.returncode == 0 and "moved 7 to the target" in replayed.stdout, replayed.stdout + replayed.stderr
    catalog = Catalog(load_settings())
    for name in ("ingest.jr", "ingest.jr_dlq"):
        seen = java(catalog.table(name).metadata_location, "select _kafka_offset o from t order by 1")
        assert seen == duckdb_rows(f"select _kafka_offset o from {name} order by 1"), name
    assert [r["o"] for r in duckdb_rows("select _kafka_offset o from ingest.jr_dlq order by 1")] == [21, 24, 27]
