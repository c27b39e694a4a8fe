"""Tables other writers also wrote: a team's initial load with PyIceberg (`table.append` of Arrow tables with
Arrow's large types and without) and rows the reference Java Iceberg appended through the same SQL catalog
(scripts/javaiceberg/write.py); then what Floe does to a table reads them all by the table's schema:
retention, compaction, a stage, an upsert stream that finds and replaces the loaded rows, a dead-letter
replay over them, and the audit."""

from __future__ import annotations

import datetime as dt
import subprocess

import orjson
import pyarrow as pa
from pyiceberg.catalog.sql import SqlCatalog
from test_dlq import STRICT, fix_mapping

from appliance.auditor.check import audit_stream
from appliance.config.settings import load_settings
from appliance.control.dead_letters import replay_dead_letters
from appliance.control.stages import create_stage
from appliance.control.streams import create_stream
from appliance.ingest.engine import Engine
from appliance.maintenance.maintainer import Maintainer
from appliance.maintenance.policies import set_policy
from appliance.query.connection import run_query
from appliance.tables.catalog import Catalog

from conftest import ROOT

JAVA = ROOT / ".javaiceberg" / ".venv" / "bin" / "python"
WRITE = ROOT / "scripts" / "javaiceberg" / "write.py"
NOW = dt.datetime.now(dt.timezone.utc).replace(microsecond=0)
OLD = NOW - dt.timedelta(days=400)


def rows(sql: str) -> list[dict]:
    return run_query(load_settings(), sql).to_pylist()


def team_catalog(settings) -> SqlCatalog:
    """The catalog as a team's own PyIceberg code opens it: PyIceberg's SqlCatalog, under Floe's catalog name."""
    return SqlCatalog("floe", **settings.catalog_properties())


def load_with_pyiceberg(settings, table: str, columns: dict[str, pa.Array]) -> None:
    team_catalog(settings).load_table(table).append(pa.table(columns))


def load_with_java(settings, table: str, records: list[dict], tmp_path) -> None:
    source = tmp_path / f"{table}.jsonl"
    source.write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in records))
    done = subprocess.run([str(JAVA), str(WRITE), table, str(source), "--catalog-db",
                           str(settings.home / "catalog.db"), "--warehouse", str(settings.home / "warehouse")],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]


def writers(settings, table: str) -> tuple[set, set, set]:
    """Which of `table`'s live data files each writer wrote, by the Arrow types in their Parquet schema."""
    import pyarrow.parquet as pq

    large, small, java = set(), set(), set()
    for task in Catalog(settings).table(table).scan().plan_files():
        path = task.file.file_path.removeprefix("file://")
        meta = pq.read_metadata(path).metadata or {}
        if b"ARROW:schema" not in meta:
            java.add(path)
        elif any(pa.types.is_large_string(f.type) for f in pq.read_schema(path)):
            large.add(path)
        else:
            small.add(path)
    return large, small, java


def test_retention_compaction_a_stage_and_the_audit_read_every_writers_files(broker, topic, spark, floe_home,
                                                                             tmp_path):
    settings = load_settings()
    broker.produce(topic, [orjson.dumps({"id": i, "v": f"kafka {i}"}) for i in range(20)])
    create_stream(settings, "orders", bootstrap=broker.bootstrap, topic=topic, table="ingest.orders",
                  partition_by="none")
    create_stage(settings, "copy", source="ingest.orders", table="prep.orders_copy", spark=spark,
                 sql="select id, v from source")
    Engine(settings, spark=spark).run(until_caught_up=True)

    # The team's initial load, half of it older than the retention period: with large types, without, and Java's.
    def load(ids: range, large: bool) -> None:
        text = pa.large_string() if large else pa.string()
        load_with_pyiceberg(settings, "ingest.orders", {
            "id": pa.array(ids, pa.int64()), "v": pa.array([f"loaded {i}" for i in ids], text),
            "_kafka_timestamp": pa.array([OLD if i % 2 else NOW for i in ids], pa.timestamp("us", "UTC"))})

    load(range(100, 110), large=True)
    load(range(110, 120), large=False)
    load_with_java(settings, "ingest.orders", [
        {"id": i, "v": f"java {i}", "_kafka_timestamp": (OLD if i % 2 else NOW).isoformat()} for i in range(120, 126)],
        tmp_path)
    large, small, java = writers(settings, "ingest.orders")
    assert len(large) == 1 and len(java) == 1 and len(small) >= 2, (large, small, java)
    every = set(range(20)) | set(range(100, 126))

    Engine(settings, spark=spark).run(until_caught_up=True)  # the stage reads the loaded rows too
    assert {r["id"] for r in rows("select id from prep.orders_copy")} == every

    maintainer = Maintainer(settings, spark=spark)
    set_policy(settings, maintainer.state, maintainer.catalog, "ingest.orders", {"retention": "30d"})
    run = maintainer.run("ingest.orders", "retention")
    old = {i for i in range(100, 126) if i % 2}
    assert run.outcome == "ok" and run.rows_deleted == len(old), run.detail
    assert {r["id"] for r in rows("select id from ingest.orders")} == every - old

    # More of the team's rows than the retention's file holds, to be compacted with Floe's own (fewer would be
    # merged without it: `compaction.newer_worth_merging`).
    load(range(200, 240), large=True)
    assert writers(settings, "ingest.orders")[0], "a file with large types to compact"
    run = maintainer.run("ingest.orders", "compact")
    assert run.outcome == "ok", run.detail
    assert sorted(r["id"] for r in rows("select id from ingest.orders")) == sorted(every - old | set(range(200, 240)))
    assert rows("select v from ingest.orders where id = 200") == [{"v": "loaded 200"}]
    assert len(Catalog(settings).table("ingest.orders").inspect.files()) == 1

    report = audit_stream(settings, "orders")
    assert report.ok, report.render()


def test_an_upsert_stream_and_a_replay_replace_rows_other_writers_loaded(broker, topic, spark, floe_home, tmp_path):
    settings = load_settings()
    mapping = settings.home / "people.toml"
    mapping.parent.mkdir(parents=True, exist_ok=True)
    mapping.write_text(STRICT + '[[columns]]\nname = "name"\ntype = "string"\nsource = "name"\n')
    updates = [{"id": 1, "code": 10, "name": "kafka 1"}, {"id": 11, "code": 11, "name": "kafka 11"},
               {"id": 3, "code": "A3", "name": "kafka 3"},  # a string code: a dead letter, until the fix
               {"id": 50, "code": 50, "name": "kafka 50"}]
    broker.produce(topic, [orjson.dumps(u) for u in updates], keys=[str(u["id"]).encode() for u in updates],
                   partition=0)
    create_stream(settings, "people", bootstrap=broker.bootstrap, topic=topic, table="ingest.people",
                  mapping=str(mapping), schema_evolution="off", mode="upsert", key="id")

    # The initial load, before the stream's first batch: the team's columns, and of Floe's own only the one
    # the table is partitioned by (PyIceberg needs it), null: no Kafka offsets, no time of ingestion.
    def load(ids: range, text: pa.DataType) -> None:
        load_with_pyiceberg(settings, "ingest.people", {
            "id": pa.array(ids, pa.int64()), "code": pa.array(ids, pa.int64()),
            "name": pa.array([f"loaded {i}" for i in ids], text),
            "_kafka_timestamp": pa.nulls(len(ids), pa.timestamp("us", "UTC"))})

    load(range(1, 6), pa.large_string())
    load(range(6, 11), pa.string())
    load_with_java(settings, "ingest.people", [{"id": i, "code": i, "name": f"java {i}"} for i in range(11, 14)],
                   tmp_path)

    Engine(settings, spark=spark).run(until_caught_up=True)
    expected = {i: f"loaded {i}" for i in range(1, 11)} | {i: f"java {i}" for i in range(11, 14)}
    expected |= {1: "kafka 1", 11: "kafka 11", 50: "kafka 50"}
    assert {r["id"]: r["name"] for r in rows("select id, name from ingest.people")} == expected
    assert [r["o"] for r in rows("select _kafka_offset o from ingest.people_dlq")] == [2]

    fix_mapping("people")  # `code` becomes a string column
    report = replay_dead_letters(settings, "people", spark=spark)
    assert report.moved == 1, report.lines()
    got = rows("select id, code, name from ingest.people order by id")
    assert {r["id"]: r["name"] for r in got} == expected | {3: "kafka 3"}
    assert [r for r in got if r["id"] == 3] == [{"id": 3, "code": "A3", "name": "kafka 3"}]

    maintainer = Maintainer(settings, spark=spark)
    assert maintainer.run("ingest.people", "compact").outcome == "ok"
    assert rows("select id, code, name from ingest.people order by id") == got
    audit = audit_stream(settings, "people")
    assert audit.ok, audit.render()
