"""One stage run: the source's rows appended since the stage's position, through its query, into
its table, committed with the new position in the same snapshot.

The position (the source snapshot read up to) lives only in the stage table's commits, so a
run that dies at any moment leaves the table and its position together: the next run reads
the same rows again. A grouping stage reads its own table too and replaces it, merged; an
appending stage appends. Either way the driver plans, Spark tasks read and write files, and
the driver commits.
"""

from __future__ import annotations

import itertools
import logging
import re
import time
from dataclasses import dataclass

from pyiceberg.table import Table

from appliance.config.settings import Settings
from appliance.core.errors import FloeError, StageFailed
from appliance.model.stage import GROUP, SOURCE, StageDef
from appliance.spark.session import parallelism
from appliance.stages import grouping
from appliance.stages.frames import rows_frame, write_frame
from appliance.stages.sql import DIALECT, StageQuery, analyse
from appliance.tables.catalog import Catalog
from appliance.tables.commits import commit_stage
from appliance.tables.datafiles import live_data_files
from appliance.tables.snapshots import appended_since, lineage_since, stage_position

log = logging.getLogger(__name__)

JOB_GROUP = "floe-stages"
_VIEWS = itertools.count()


@dataclass(frozen=True)
class RunResult:
    """What a run did: the source snapshots it read (after `from_snapshot`, up to `to_snapshot`)."""

    from_snapshot: int | None
    to_snapshot: int
    rows_in: int
    rows_out: int
    seconds: float


class Views:
    """The temporary views one run (or one check) binds: `source` and each table its query reads,
    under names of their own, so that runs never see each other's. Errors name them as the user did."""

    def __init__(self, spark, prefix: str | None = None) -> None:
        """`prefix`: the same view names run after run (a stage's runs, one at a time), so that what is
        worked out from the bound query can be kept; by default names no other run uses."""
        self.spark = spark
        self.prefix = prefix
        self.names: dict[str, str] = {}  # SOURCE or NAMESPACE.TABLE -> view

    def bind(self, name: str, frame) -> str:
        prefix = self.prefix or f"floe_view_{next(_VIEWS)}"
        view = f"{prefix}_{len(self.names)}_{re.sub(r'[^a-z0-9]+', '_', name.lower())}"
        frame.createOrReplaceTempView(view)
        self.names[name] = view
        return view

    def drop(self) -> None:
        for view in self.names.values():
            self.spark.catalog.dropTempView(view)
        self.names.clear()

    def described(self, exc: BaseException) -> str:
        """A Spark error in one line, with the views called what the query calls them."""
        text = getattr(exc, "getMessage", lambda: None)() or str(exc)
        text = " ".join(text.split())
        text = re.sub(r"\s*(SQLSTATE: \w+|JVM stacktrace:.*|== SQL.*)$", "", text)
        for name, view in self.names.items():
            text = text.replace(f"`{view}`", name).replace(view, name)
        return text[:600]


def spark_errors() -> tuple[type[BaseException], ...]:
    """What Spark raises for a query that fails (PySpark turns the JVM's errors into these)."""
    from pyspark.errors import PySparkException

    return (PySparkException,)


def probe(spark):
    """What Spark makes of a SELECT: its columns' names and Spark SQL types."""
    return lambda sql: [(f.name, f.dataType.simpleString()) for f in spark.sql(sql).schema.fields]


def bind_tables(views: Views, spark, catalog: Catalog, query: StageQuery) -> None:
    """Each catalog table the query reads, as it is now (an enrichment reads its reference as of the run)."""
    for name in query.tables:
        table = catalog.table(name)
        snapshot = table.current_snapshot()
        views.bind(name, rows_frame(spark, table, snapshot.snapshot_id if snapshot else None))


def output_columns(spark, catalog: Catalog, query: StageQuery, source: Table) -> list[tuple[str, str]]:
    """The columns the stage's table has (names and Spark SQL types): the query's, and for a grouping
    stage the state it keeps. Checked by Spark over empty rows: a bad query fails here, in one line."""
    views = Views(spark)
    try:
        views.bind(SOURCE, rows_frame(spark, source, None))
        bind_tables(views, spark, catalog, query)
        bound = query.bound(views.names)
        if query.kind == GROUP:
            return grouping.plan(bound, probe(spark)).columns
        return probe(spark)(bound.sql(dialect=DIALECT))
    except spark_errors() as exc:
        raise StageFailed(views.described(exc)) from None
    finally:
        views.drop()


class StageRunner:
    def __init__(self, settings: Settings, spark, catalog: Catalog, stage: StageDef) -> None:
        self.settings = settings
        self.spark = spark
        self.catalog = catalog
        self.stage = stage
        self.query = analyse(stage.sql)
        self._plan: tuple[tuple, grouping.GroupPlan] | None = None  # kept while the tables' schemas are

    def pending(self) -> tuple[Table, Table, int | None, int] | None:
        """(source, table, position, head) when the source has moved on from the stage's position."""
        source = self.catalog.table(self.stage.source)
        head = source.current_snapshot()
        if head is None:
            return None
        table = self.catalog.table(self.stage.table)
        position = stage_position(table, self.stage.id)
        if position == head.snapshot_id:
            return None
        if position is not None and not lineage_since(source.metadata, position):
            raise StageFailed(f"stage {self.stage.name}: table {self.stage.source} no longer has snapshot {position}, "
                              "which the stage has read up to (the table was recreated or rolled back), so it "
                              "cannot tell which rows are new: delete the stage and create it again")
        return source, table, position, head.snapshot_id

    def run(self) -> RunResult | None:
        """Run once if there is anything new; what it did, or None."""
        found = self.pending()
        if found is None:
            return None
        source, table, position, head = found
        started = time.monotonic()
        if position is not None and appended_since(source.metadata, position)[0] == 0:
            # Only compactions, retention or schema changes since: no new rows, but the position moves
            # on, so that expiry need not keep those snapshots for the stage.
            commit_stage(self.settings, table, [], self.stage.id, self.stage.source, position, head)
            return RunResult(position, head, 0, 0, time.monotonic() - started)
        context = self.spark.sparkContext
        context.setLocalProperty("spark.scheduler.pool", "stages")
        context.setJobGroup(JOB_GROUP, f"floe stage {self.stage.name}", interruptOnCancel=True)
        views = Views(self.spark, prefix=f"floe_stage_{self.stage.id[:12]}")
        try:
            frame = rows_frame(self.spark, source, head, since=position)
            views.bind(SOURCE, frame)
            bind_tables(views, self.spark, self.catalog, self.query)
            rows_in = _rows_planned(source, head, position)
            files, replacing = self._output(views, table, fresh=position is None)
        except spark_errors() as exc:
            raise StageFailed(f"stage {self.stage.name}: {views.described(exc)}") from None
        finally:
            views.drop()
            context.setLocalProperty("spark.scheduler.pool", None)
            context.setLocalProperty("spark.jobGroup.id", None)
        commit_stage(self.settings, table, files, self.stage.id, self.stage.source, position, head, replacing)
        return RunResult(position, head, rows_in, sum(f.record_count for f in files), time.monotonic() - started)

    def _output(self, views: Views, table: Table, fresh: bool):
        """The run's data files, and (grouping) the table's files they replace. `fresh`: the run reads
        the whole source (a new stage, or one whose query changed): it starts from no groups at all."""
        bound = self.query.bound(views.names)
        columns = [f.name for f in table.schema().fields]
        if self.query.kind == GROUP:
            snapshot = table.current_snapshot()
            replacing = live_data_files(table) if snapshot else []
            kept = None if fresh or snapshot is None else snapshot.snapshot_id
            views.bind(self.stage.table, rows_frame(self.spark, table, kept))
            sql = self._group_plan(bound, table).run_sql(views.names[self.stage.table])
            out = self.spark.sql(sql)
            return write_frame(_aligned(out, columns), table, partitions=parallelism(self.spark)), replacing
        out = self.spark.sql(bound.sql(dialect=DIALECT))
        return write_frame(_aligned(out, columns), table), None


    def _group_plan(self, bound, table: Table) -> grouping.GroupPlan:
        """The merge plan, worked out again (two analyses by Spark) only when a schema it rests on changed."""
        schemas = [self.catalog.table(n).metadata.current_schema_id for n in (self.stage.source, *self.query.tables)]
        key = (bound.sql(dialect=DIALECT), tuple(schemas), table.metadata.current_schema_id)
        if self._plan is None or self._plan[0] != key:
            self._plan = (key, grouping.plan(bound, probe(self.spark)))
        return self._plan[1]


def _aligned(frame, columns: list[str]):
    """The query's output with the table's columns in the table's order (a column the table gained
    since, from an updated query or by hand, and that the query does not give, is NULL)."""
    from pyspark.sql import functions as F

    given = set(frame.columns)
    return frame.select(*[F.col(f"`{c}`") if c in given else F.lit(None).alias(c) for c in columns])


def _rows_planned(source: Table, head: int, position: int | None) -> int:
    """The rows a run reads: those the source's append snapshots added since the position (all of
    them, the first time)."""
    if position is None:
        snapshot = source.metadata.snapshot_by_id(head)
        return int(snapshot.summary.additional_properties.get("total-records", 0)) if snapshot.summary else 0
    return appended_since(source.metadata, position)[1]


def describe(exc: BaseException) -> str:
    return str(exc) if isinstance(exc, FloeError) else f"{type(exc).__name__}: {exc}"
