"""`floe audit` on a clean stream, and on tables damaged on purpose through PyIceberg: each damage
is found and named by partition and offset; the audit itself changes nothing."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
from pyiceberg.expressions import AlwaysTrue, And, EqualTo, GreaterThanOrEqual, LessThanOrEqual

from appliance.auditor.check import _split, masked_reason
from appliance.auditor.tally import PartitionTally, runs
from appliance.config.settings import load_settings
from appliance.control.streams import create_stream
from appliance.ingest.engine import Engine
from appliance.model.mapping import Column, Mapping
from appliance.state.store import StateStore
from appliance.tables.catalog import Catalog

from conftest import floe, pizza_values


def audit(stream: str) -> tuple[int, dict]:
    done = floe("audit", stream, "--format", "json")
    assert done.stdout, done.stderr
    return done.returncode, json.loads(done.stdout)


def ingest(spark) -> None:
    Engine(load_settings(), spark=spark).run(until_caught_up=True)


def warehouse_files(home: Path) -> dict[str, int]:
    return {str(p): p.stat().st_mtime_ns for p in (home / "warehouse").rglob("*") if p.is_file()}


@pytest.fixture
def orders(broker, topic, floe_home, spark):
    """A stream of 400 orders over 4 partitions (keyed) with 40 malformed messages, ingested."""
    values = pizza_values(400)
    for i in range(0, 400, 10):
        values[i] = b"{not json" if i % 20 else b'{"order_id": "not a number"}'
    broker.produce(topic, values, keys=[str(i).encode() for i in range(400)])
    create_stream(load_settings(), "orders", bootstrap=broker.bootstrap, topic=topic, table="ingest.orders")
    ingest(spark)
    return Catalog(load_settings())


def test_a_clean_stream_passes_and_nothing_is_changed(orders, floe_home):
    before = warehouse_files(floe_home)
    locations = [orders.table(t).metadata_location for t in ("ingest.orders", "ingest.orders_dlq")]
    code, report = audit("orders")
    assert code == 0 and report["ok"], report
    assert report["checked"] == 400 and not report["gaps"] and not report["duplicates"] and not report["problems"]
    assert sum(p["target_rows"] for p in report["partitions"]) + report["dead_letters"]["rows"] == 400
    assert len(report["partitions"]) == 4
    stages = {r["stage"] for r in report["dead_letters"]["reasons"]}
    assert sum(r["rows"] for r in report["dead_letters"]["reasons"]) == report["dead_letters"]["rows"] > 0
    assert stages  # each reason is named by the stage that refused the message
    assert warehouse_files(floe_home) == before
    assert [orders.table(t).metadata_location for t in ("ingest.orders", "ingest.orders_dlq")] == locations
    text = floe("audit", "orders")
    assert text.returncode == 0 and "OK: 400 offsets" in text.stdout, text.stdout


def _one_row(table, partition=None):
    where = EqualTo("_kafka_partition", partition) if partition is not None else AlwaysTrue()
    return table.scan(limit=1, row_filter=where).to_arrow()


def test_a_duplicated_row_is_found_and_named(orders):
    table = orders.table("ingest.orders")
    row = _one_row(table)
    p, o = row["_kafka_partition"][0].as_py(), row["_kafka_offset"][0].as_py()
    table.append(row)  # the same message twice, as a bad writer would
    code, report = audit("orders")
    assert code == 1 and not report["ok"]
    assert report["duplicates"] == [{"partition": p, "first": o, "last": o, "target_rows": 2, "dead_letter_rows": 0}]
    assert not report["gaps"]
    text = floe("audit", "orders").stdout
    assert f"DUPLICATED: 1 offsets in 1 ranges\n  partition {p}, offset {o}: 2 rows in the target" in text


def test_a_deleted_row_and_a_removed_range_are_found_and_named(orders):
    table = orders.table("ingest.orders")
    row = _one_row(table, partition=1)
    o = row["_kafka_offset"][0].as_py()
    table.delete(And(EqualTo("_kafka_partition", 1), EqualTo("_kafka_offset", o)))
    dead = orders.table("ingest.orders_dlq")
    marks = audit("orders")[1]["partitions"]
    p2 = next(p for p in marks if p["partition"] == 2)
    lo, hi = p2["first"] + 5, p2["first"] + 30
    for t in (table, dead):  # a whole offset range gone from both tables
        t.delete(And(EqualTo("_kafka_partition", 2),
                     And(GreaterThanOrEqual("_kafka_offset", lo), LessThanOrEqual("_kafka_offset", hi))))
    code, report = audit("orders")
    assert code == 1 and not report["duplicates"]
    gaps = {(g["partition"], g["first"], g["last"]) for g in report["gaps"]}
    assert gaps == {(1, o, o), (2, lo, hi)}, report["gaps"]
    text = floe("audit", "orders").stdout
    assert f"partition 2, offsets {lo}..{hi} ({hi - lo + 1} offsets)" in text and "LOST (in neither table)" in text
    assert text.rstrip().splitlines()[-1].startswith("FAILED")


def test_a_dead_letter_also_in_the_target_is_a_duplicate(orders):
    dead = _one_row(orders.table("ingest.orders_dlq"))
    p, o = dead["_kafka_partition"][0].as_py(), dead["_kafka_offset"][0].as_py()
    table = orders.table("ingest.orders")
    row = _one_row(table, partition=p).to_pylist()[0]
    row["_kafka_offset"] = o
    table.append(pa.Table.from_pylist([row], schema=table.schema().as_arrow()))
    code, report = audit("orders")
    assert code == 1
    assert report["duplicates"] == [{"partition": p, "first": o, "last": o, "target_rows": 1, "dead_letter_rows": 1}]


def test_offsets_that_expired_before_they_were_read_are_not_a_loss(broker, topic, floe_home, spark):
    """The embedded broker keeps about 5 MiB per partition: 8 MiB of messages push the first ones out
    before the engine reads them. The stream skips them, notes it, and the audit says so."""
    mapping = Mapping((Column("id", "long", ("id",)),))
    broker.produce(topic, [b'{"id": -1}'], partition=0)  # the topic exists; the stream starts at offset 0
    create_stream(load_settings(), "big", bootstrap=broker.bootstrap, topic=topic, table="ingest.big",
                  mapping=mapping)
    pad = "x" * 100_000
    broker.produce(topic, [json.dumps({"id": i, "pad": pad}).encode() for i in range(80)], partition=0)
    ingest(spark)
    code, report = audit("big")
    assert code == 0, report
    expired = [e for e in report["expired"] if e["partition"] == 0]
    assert expired and expired[0]["first"] == 0, report
    with StateStore(load_settings().state_db) as state:
        noted = state.expired_offsets(state.stream("big").id)
    assert noted[0][:2] == (0, 0) and noted[0][2] == expired[0]["last"] + 1
    assert "expired from the topic before Floe read them (not a loss)" in floe("audit", "big").stdout


def test_rows_deleted_by_retention_are_not_a_loss(orders):
    done = floe("table", "policy", "ingest.orders", "--retention", "1d", "--retention-column", "ordered_at")
    assert done.returncode == 0, done.stderr
    done = floe("maintain", "ingest.orders", "--retention")
    assert done.returncode == 0, done.stderr
    assert orders.table("ingest.orders").properties["floe.retention-deleted-rows"] == "360"
    code, report = audit("orders")
    assert code == 0 and not report["gaps"] and sum(
        r["last"] - r["first"] + 1 for r in report["retention"]) == 360 and report["retention_deleted"] == 360
    orders.table("ingest.orders_dlq").delete(EqualTo("_kafka_partition", 0))  # more than retention can explain
    code, report = audit("orders")
    assert code == 1 and report["gaps"] and any("more than it can explain" in n for n in report["notes"])


def test_an_unknown_stream_is_one_line(floe_home):
    done = floe("audit", "nope")
    assert done.returncode == 1 and done.stderr.strip().count("\n") == 0 and "nope" in done.stderr


def test_runs_and_splits():
    assert runs(np.array([], dtype=bool)) == []
    assert runs(np.array([1, 1, 0, 1, 0, 0, 1], dtype=bool)) == [(0, 2), (3, 4), (6, 7)]
    assert list(_split(0, 10, [(2, 4), (8, 20)])) == [(0, 2, False), (2, 4, True), (4, 8, False), (8, 10, True)]
    t = PartitionTally(10, 15)
    t.add(np.array([9, 10, 11, 11, 14, 15, 99]))
    assert t.missing() == [(12, 14)] and t.duplicated() == [(11, 12, 2)]
    assert (t.below, t.beyond, t.rows_in_range) == ([9], [15, 99], 4)


@pytest.mark.parametrize("message, grouped", [
    ("invalid UTF-8 at byte 12", "invalid UTF-8 at byte N"),
    ("expected 3 fields, got -4", "expected N fields, got N"),
    ("offsets 1,2,3 in partition[0]", "offsets N,N,N in partition[N]"),
    ("at 2024-01-05T10:00:00.123+00:00 (ISO-8859-1, x86_64, int32, base64)",
     "at N (ISO-8859-1, x86_64, int32, base64)"),
    ("12:34 value 1.5.", "N value N."),
    ("no digits here", "no digits here"),
])
def test_reasons_group_numbers_without_damaging_words(message, grouped):
    import duckdb

    # The expression the audit runs, in DuckDB as the audit runs it.
    con = duckdb.connect()
    assert con.execute(f"SELECT {masked_reason('m')} FROM (SELECT ? AS m)", [message]).fetchone()[0] == grouped


def test_messages_differing_only_in_numbers_group_together():
    import duckdb

    con = duckdb.connect()
    found = con.execute(f"SELECT {masked_reason('m')} AS r, count(*) FROM (VALUES ('invalid UTF-8 at byte 3'), "
                        "('invalid UTF-8 at byte 41'), ('invalid UTF-16 at byte 3')) t(m) GROUP BY r ORDER BY r"
                        ).fetchall()
    assert found == [("invalid UTF-16 at byte N", 1), ("invalid UTF-8 at byte N", 2)]
