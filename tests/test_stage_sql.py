"""A stage's SQL: what is refused and why (no Spark needed), and grouping queries kept by merging run
after run equal to the same query over all the rows at once (real Spark SQL)."""

from __future__ import annotations

import datetime as dt
import decimal
import random

import pytest

from appliance.core.errors import StageQueryRefused
from appliance.stages.grouping import plan
from appliance.stages.runner import probe
from appliance.stages.sql import analyse


@pytest.mark.parametrize("sql, kind, tables", [
    ("select * from source where amount > 5", "append", ()),
    ("select s.*, r.region from source s join ref.stores r on s.store_id = r.id", "append", ("ref.stores",)),
    ("select s.id from source s left join ref.stores r on s.store_id = r.id", "append", ("ref.stores",)),
    ("select a from source where x union all select b from source where y", "append", ()),
    ("with f as (select * from source where ok) select k, count(*) from f group by k", "group", ()),
    ("select date_trunc('hour', ts) h, count(*), sum(a), avg(a), min(a), max(a), count(distinct c) from source "
     "group by 1", "group", ()),
    ("select count(*) from source", "group", ()),
    ("select distinct status from source", "group", ()),
    ("select k, count(*) from source group by all", "group", ()),
    ("select s.*, (select max(v) from ref.t) m from source s", "append", ("ref.t",)),  # its aggregate, not ours
    ("select * from Source where amount > 5", "append", ()),
    ("select * from source unpivot (v for k in (a, b))", "append", ()),
    ("with a as (select * from source where ok), b as (select * from a) select * from b", "append", ()),
])
def test_queries_a_stage_can_keep_are_classified(sql, kind, tables):
    query = analyse(sql)
    assert (query.kind, query.tables) == (kind, tables)


@pytest.mark.parametrize("sql, reason", [
    ("selec x", "is not a SELECT query"),
    ("select * from source where", "does not parse"),
    ("insert into t select * from source", "must be a SELECT, not INSERT"),
    ("select 1 from source; select 2 from source", "must be one SELECT statement, not 2"),
    ("select 1", "does not read `source`"),
    ("select * from orders", "reads orders: a stage reads `source` and catalog tables as NAMESPACE.TABLE"),
    ("select * from source order by a", "uses ORDER BY"),
    ("select * from source limit 3", "uses LIMIT"),
    ("select rand() r from source", "calls rand()"),
    ("select current_timestamp() t, * from source", "calls current_timestamp()"),
    ("select row_number() over (order by a) n from source", "uses a window function"),
    ("select k, count(*) from source group by k having count(*) > 1", "uses HAVING"),
    ("select k, stddev(x) from source group by k", "uses STDDEV(), which cannot be merged"),
    ("select k, sum(distinct x) from source group by k", "uses SUM(DISTINCT ...)"),
    ("select k, count(distinct x, y) from source group by k", "counts DISTINCT over several columns"),
    ("select * from ref.t r left join source s on r.id = s.id", "on the outer side of an outer join"),
    ("select * from source s full join ref.t r on r.id = s.id", "on the outer side of an outer join"),
    ("select * from ref.t r left anti join source s on r.id = s.id", "in a semi or anti join"),
    ("select * from source a join source b on a.id = b.id", "reads `source` more than once"),
    ("select a from source union select a from source", "uses UNION without ALL"),
    ("select x from source intersect select x from ref.t", "uses INTERSECT"),
    ("select a from source union all select a from ref.t", "a UNION ALL branch that does not read `source`"),
    ("select * from ref.t where id in (select id from source)", "in a subquery used as a value or a condition"),
    ("select k, n from (select k, count(*) n from source group by k)", "groups or deduplicates `source` in a subquery"),
    ("with s as (select * from source) select * from s a join s b on a.id = b.id", "reads `source` more than once"),
    ("with a as (select * from source), b as (select * from a) select * from b right join ref.t r on b.id = r.id",
     "on the outer side of an outer join"),
    ("with a as (select * from source), b as (select * from a), c as (select k, count(*) n from b group by k) "
     "select * from c", "groups or deduplicates `source` in a subquery"),
    ("with a as (select * from source) select * from ref.t", "does not read `source`"),
    ("select try_sum(x) v from source", "uses TRY_SUM(), which cannot be merged"),
    ("select k, every(ok) from source group by k", "uses EVERY(), which cannot be merged"),
    ("select k, sum(x) filter (where y > 0) s from source group by k", "FILTER (WHERE ...)"),
    ("select k, count(*) from source group by rollup(k)", "ROLLUP, CUBE or GROUPING SETS"),
    ("select * from source pivot (sum(x) for k in ('a' as a))", "uses PIVOT"),
    ("select * from source s join ref.t version as of 3 r on s.id = r.id", "as of another version"),
])
def test_queries_that_cannot_be_kept_incrementally_are_refused_with_a_reason(sql, reason):
    with pytest.raises(StageQueryRefused) as refused:
        analyse(sql)
    message = str(refused.value)
    assert reason in message and "\n" not in message


ROWS = "id long, status string, amount decimal(10,2), cust int, x double, ts timestamp"


@pytest.fixture(scope="module")
def orders(spark):
    rng = random.Random(7)
    rows = [(i, rng.choice(["a", "b", "c", None]), decimal.Decimal(rng.randint(-10000, 10000)) / 100,
             rng.randint(1, 50) if i % 7 else None, rng.randint(0, 400) / 4,
             dt.datetime(2026, 1, 1 + i % 3, i % 5)) for i in range(3000)]
    return spark.createDataFrame(rows, ROWS)


@pytest.mark.parametrize("sql", [
    "select date_trunc('hour', ts) as hour, status, count(*) as n, count(cust) c, sum(amount) s, min(amount), "
    "max(amount), avg(amount) a, avg(cust) ac, avg(x) ax, count(distinct cust) dc from source group by 1, status",
    "select count(*), sum(amount), avg(amount), max(x) from source",
    "select distinct status from source",
    "select upper(status) u, round(sum(amount) / count(*), 2) r, count(*) + 1 n from source where amount > 0 "
    "group by status",
    "select s.status, count(*) n from source s group by s.status",
])
def test_grouping_merged_run_by_run_equals_the_query_over_every_row(spark, orders, sql):
    query = analyse(sql)
    orders.createOrReplaceTempView("floe_test_all")
    expected = spark.sql(query.bound({"source": "floe_test_all"}).sql(dialect="spark"))
    orders.limit(0).createOrReplaceTempView("floe_test_new")
    merge = plan(query.bound({"source": "floe_test_new"}), probe(spark))
    table = spark.createDataFrame([], ", ".join(f"`{n}` {t}" for n, t in merge.columns))
    for start, end in ((0, 700), (700, 1400), (1400, 1400), (1400, 2100), (2100, 3000)):  # one run finds nothing
        orders.where(f"id >= {start} and id < {end}").createOrReplaceTempView("floe_test_new")
        table.createOrReplaceTempView("floe_test_kept")
        table = spark.sql(merge.run_sql("floe_test_kept")).localCheckpoint()
    got = table.selectExpr(*[f"`{n}`" for n, _ in merge.outputs])
    assert expected.exceptAll(got).count() == 0 and got.exceptAll(expected).count() == 0


def _equal_when_merged(spark, sql: str, rows, schema: str, ref=None) -> None:
    """`sql` kept by merging one row at a time equals `sql` over every row (`ref`: rows of ref.t)."""
    frame = spark.createDataFrame(rows, schema)
    views = {"source": "floe_test_all"}
    if ref is not None:
        spark.createDataFrame(*ref).createOrReplaceTempView("floe_test_ref")
        views["ref.t"] = "floe_test_ref"
    query = analyse(sql)
    frame.createOrReplaceTempView("floe_test_all")
    expected = spark.sql(query.bound(views).sql(dialect="spark"))
    frame.limit(0).createOrReplaceTempView("floe_test_new")
    merge = plan(query.bound({**views, "source": "floe_test_new"}), probe(spark))
    table = spark.createDataFrame([], ", ".join(f"`{n}` {t}" for n, t in merge.columns))
    for row in rows:
        spark.createDataFrame([row], schema).createOrReplaceTempView("floe_test_new")
        table.createOrReplaceTempView("floe_test_kept")
        table = spark.sql(merge.run_sql("floe_test_kept")).localCheckpoint()
    got = table.selectExpr(*[f"`{n}`" for n, _ in merge.outputs])
    assert sorted(map(tuple, expected.collect())) == sorted(map(tuple, got.collect()))


def test_keys_and_aggregates_of_two_tables_with_the_same_column_names_stay_apart(spark):
    rows = [(1, "a", 10), (2, "a", 20), (1, "b", 30)]
    ref = ([(1, "north", 100), (2, "south", 200)], "store long, k string, x long")
    _equal_when_merged(spark, "select s.k sk, r.k rk, count(*) n, sum(s.x) a, sum(r.x) b from source s "
                              "join ref.t r on s.store = r.store group by s.k, r.k", rows,
                       "store long, k string, x long", ref)


def test_grouping_by_a_name_that_is_a_source_column_and_an_alias_groups_by_the_column_as_spark_does(spark):
    rows = [("a", 1), ("A", 1), ("a", 2), ("A", 2)]
    _equal_when_merged(spark, "select upper(k) as k, count(*) n from source group by k", rows, "k string, x long")
    _equal_when_merged(spark, "select k, count(*) n, sum(x) s from source group by all", rows, "k string, x long")
