"""What Spark makes of a stage's query without running the stage: its result over a sample of the
source (a preview), and the columns its table gets (the check before it is created or updated).

The same code answers a `floe stage` command and the UI: on the running engine's session
(`control/answers.py`), or on a session of the command's own.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

import pyarrow as pa
from pyiceberg.schema import Schema
from pyiceberg.table import Table

from appliance.core.errors import StageFailed
from appliance.model.stage import SOURCE
from appliance.stages.frames import tasks_frame
from appliance.stages.runner import Views, bind_tables, output_columns, spark_errors
from appliance.stages.sql import DIALECT, StageQuery
from appliance.tables.catalog import Catalog

PREVIEW_SAMPLE = 10_000  # rows of the source a preview reads, the newest files first


@dataclass(frozen=True)
class Checked:
    """A query Spark resolved: its kind, its table's columns (names, Spark SQL types) and that table's
    Iceberg schema (fresh field ids, every column optional)."""

    kind: str
    columns: list[tuple[str, str]]
    schema: Schema

    def as_answer(self) -> dict[str, str]:
        """As the running engine answers a check (`control/requests.py`)."""
        return {"query_kind": self.kind, "columns": json.dumps(self.columns),
                "table_schema": self.schema.model_dump_json()}

    @classmethod
    def of_answer(cls, answer: dict[str, str]) -> Checked:
        return cls(answer["query_kind"], [(n, t) for n, t in json.loads(answer["columns"])],
                   Schema.model_validate_json(answer["table_schema"]))


def table_schema(spark, columns: list[tuple[str, str]]) -> Schema:
    """An Iceberg schema (fresh field ids, every column optional) for Spark columns."""
    from pyspark.sql.pandas.types import to_arrow_schema

    from appliance.tables.fastpath.internals import arrow_to_iceberg_schema

    struct = spark.createDataFrame([], ", ".join(f"`{n}` {t}" for n, t in columns)).schema
    arrow = to_arrow_schema(struct)
    arrow = pa.schema([f.with_nullable(True) for f in arrow])
    return arrow_to_iceberg_schema(arrow)


def check(spark, catalog: Catalog, query: StageQuery, source: Table) -> Checked:
    """The query checked by Spark over empty rows of `source`: a bad one fails in one line (StageFailed)."""
    columns = output_columns(spark, catalog, query, source)
    return Checked(query.kind, columns, table_schema(spark, columns))


def preview_rows(spark, catalog: Catalog, query: StageQuery, source: Table, rows: int) -> pa.Table:
    """The query's first `rows` rows over a sample of `source` (its files as planned, until about
    PREVIEW_SAMPLE rows), without creating anything."""
    snapshot = source.current_snapshot()
    tasks = list(source.scan(snapshot_id=snapshot.snapshot_id).plan_files()) if snapshot else []
    sample, count = [], 0
    for task in tasks:
        if count >= PREVIEW_SAMPLE:
            break
        sample.append(task)
        count += task.file.record_count
    views = Views(spark)
    try:
        views.bind(SOURCE, tasks_frame(spark, source, source.schema(), sample))
        bind_tables(views, spark, catalog, query)
        # The exchange before the limit lets each read task hand over all it reads: a limit right
        # above the tasks stops reading mid-stream, and Spark then discards their Python workers,
        # which the next preview (and the engine's streams) would start and warm again (0.5 s or more).
        result = spark.sql(query.bound(views.names).sql(dialect=DIALECT))
        return result.repartition(1).limit(rows).toArrow()
    except spark_errors() as exc:
        raise StageFailed(views.described(exc)) from None
    finally:
        views.drop()


def warm_up(spark) -> None:
    """A tiny query down a preview's path (rows fed by Python, Spark SQL, an exchange, Arrow back). A
    session's first preview otherwise pays for the JVM's first compilation of that path: 2 to 4 s
    more on 2 cores."""
    def same(batches):
        yield from batches

    views = Views(spark)
    try:
        views.bind(SOURCE, spark.range(4).mapInArrow(same, "id long"))
        spark.sql(f"select id, count(*) as n from {views.names[SOURCE]} where id > 0 group by id") \
            .repartition(1).limit(1).toArrow()
    finally:
        views.drop()
