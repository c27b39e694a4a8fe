"""Stage operations the CLI and the UI share: create, update, preview, pause, resume, delete.

A stage's SQL is checked twice before anything is written: what can be kept incrementally
(`stages.sql`, without Spark), then what Spark makes of it over empty rows (its columns, or a
one-line error: an unknown column, a type that does not fit). Only then is its table created.
"""

from __future__ import annotations

import json
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Iterator

import pyarrow as pa

from appliance.config.settings import Settings, ensure_home
from appliance.control.audit import audited
from appliance.core.clock import now
from appliance.core.errors import InvalidName, StageExists, StageQueryRefused, TableConflict
from appliance.core.vocabulary import EventKind
from appliance.model.names import check_stream_name, check_table_name
from appliance.model.partitioning import Partitioning
from appliance.model.stage import GROUP, SOURCE, StageDef
from appliance.state.store import StateStore
from appliance.tables.catalog import Catalog, warehouse_io
from appliance.tables.system import refuse_system

PREVIEW_SAMPLE = 10_000  # rows of the source a preview reads, the newest files first


@contextmanager
def _spark(settings: Settings, spark) -> Iterator[object]:
    """`spark`, or a session of this command's own for checking queries (its JVM quiet on stderr)."""
    if spark is not None:
        yield spark
        return
    from appliance.spark.session import spark_session

    own = spark_session(settings, app_name="floe-stage", quiet=True)
    try:
        yield own
    finally:
        own.stop()


@dataclass(frozen=True)
class CreatedStage:
    stage: StageDef
    columns: list[tuple[str, str]]  # the table's columns: name, Spark SQL type


def _iceberg_schema(spark, columns: list[tuple[str, str]]):
    """An Iceberg schema (fresh field ids, every column optional) for Spark columns."""
    from pyspark.sql.pandas.types import to_arrow_schema

    from appliance.tables.fastpath.internals import arrow_to_iceberg_schema

    struct = spark.createDataFrame([], ", ".join(f"`{n}` {t}" for n, t in columns)).schema
    arrow = to_arrow_schema(struct)
    arrow = pa.schema([f.with_nullable(True) for f in arrow])
    return arrow_to_iceberg_schema(arrow)


def _check_names(state: StateStore, catalog: Catalog, name: str, source: str, table: str, kind: str) -> None:
    check_stream_name(name)
    check_table_name(source)
    check_table_name(table)
    refuse_system(table)
    if source == table:
        raise InvalidName(f"stage {name!r} reads and writes {table}: write another table")
    catalog.check_exists(source)
    if any(s.name == name for s in state.stages()):
        raise StageExists(f"stage {name!r} already exists")
    if any(s.name == name for s in state.streams()):
        raise StageExists(f"a stream is named {name!r}: stages and streams share their names' events; "
                          "choose another")
    for stream in state.streams():
        if table in (stream.table, stream.dead_letter_table):
            raise TableConflict(f"table {table} is written by stream {stream.name!r}")
        if source == stream.table and stream.upserts:
            # A stage reads the rows appended since its last run; an upsert table's rows are replaced and
            # deleted in place, so neither kind of stage could follow it (a grouping stage would count a
            # key's every version). Query it with `floe query`, which reads its current state.
            raise StageQueryRefused(f"{source} is upsert stream {stream.name!r}'s table, whose rows are updated and "
                                    "deleted in place: a stage follows tables that grow by appended rows")
    for other in state.stages():
        if other.table == table:
            raise TableConflict(f"table {table} is written by stage {other.name!r}")
        if other.source == table and kind == GROUP:
            raise StageQueryRefused(f"stage {other.name!r} reads {table}: a grouping stage's rows change in place, "
                                    "so no stage can follow its table")
        if other.table == source and other.kind == GROUP:
            raise StageQueryRefused(f"{source} is grouping stage {other.name!r}'s table, whose rows change in place: "
                                    "a stage follows tables that grow by appended rows")
    upstream, seen = source, set()
    while upstream and upstream not in seen:  # a stage may not feed its own source, however far up
        seen.add(upstream)
        writer = next((s for s in state.stages() if s.table == upstream), None)
        upstream = writer.source if writer else None
        if upstream == table:
            raise StageQueryRefused(f"stage {name!r} would read its own output through {source}")


def _rows_in(catalog: Catalog, name: str) -> int:
    if not catalog.exists(name):
        return 0
    snapshot = catalog.table(name).current_snapshot()
    return int(snapshot.summary.additional_properties.get("total-records", 0)) if snapshot and snapshot.summary else 0


@audited("stage create")
def create_stage(settings: Settings, name: str, *, source: str, sql: str, table: str, spark=None,
                 partition_by: str | None = None) -> CreatedStage:
    """Create stage `name`: its SQL checked, its table created from the query's columns (partitioned as
    `partition_by` says, over them; none by default)."""
    from appliance.stages.runner import output_columns
    from appliance.stages.sql import analyse

    ensure_home(settings)
    query = analyse(sql)
    layout = Partitioning.parse(partition_by)
    catalog = Catalog(settings)
    with StateStore(settings.state_db) as state:
        _check_names(state, catalog, name, source, table, query.kind)
    with warehouse_io(settings, f"create stage {name}"), _spark(settings, spark) as session:
        columns = output_columns(session, catalog, query, catalog.table(source))
        if _rows_in(catalog, table):
            raise TableConflict(f"table {table} exists and holds rows: a new stage would add to them; "
                                "choose another table or drop it")
        created = not catalog.exists(table)
        schema = _iceberg_schema(session, columns)
        target = catalog.ensure_table(table, schema, layout.check(schema))[0]
    stage = StageDef(name=name, id=StateStore.new_id(), source=source, sql=sql, table=table, kind=query.kind,
                     paused=False, created_at=now())
    try:
        with StateStore(settings.state_db) as state:
            state.add_stage(stage)
            state.add_event(EventKind.STAGE_CREATED, f"{stage.kind} stage: {source} -> {table}", name)
    except BaseException:
        if created:
            catalog.drop(".".join(target.name()))
        raise
    return CreatedStage(stage, columns)


@audited("stage update")
def update_stage(settings: Settings, name: str, sql: str, spark=None) -> CreatedStage:
    """New SQL for a stage. An appending stage goes on from where it is with the new query; a grouping
    stage's table is recomputed from the whole source by its next run (its state follows its query)."""
    from appliance.stages.runner import output_columns
    from appliance.stages.sql import analyse

    query = analyse(sql)
    catalog = Catalog(settings)
    with StateStore(settings.state_db) as state:
        stage = state.stage(name)
    if query.kind != stage.kind:
        raise StageQueryRefused(f"stage {name!r} is a {stage.kind} stage and this query makes a {query.kind} one: "
                                "delete the stage and create it again")
    with warehouse_io(settings, f"update stage {name}"), _spark(settings, spark) as session:
        columns = output_columns(session, catalog, query, catalog.table(stage.source))
        schema = _iceberg_schema(session, columns)
        try:
            _widen(settings, catalog, stage.table, schema)
        except StageQueryRefused:
            if stage.kind != GROUP:
                raise
            # A grouping stage's next run rebuilds its table from the whole source: columns of
            # another type are no obstacle, the table is made anew with the query's columns.
            catalog.drop(stage.table)
            catalog.ensure_table(stage.table, schema)
    fields: dict = {"sql": sql}
    if stage.kind == GROUP:
        fields["id"] = StateStore.new_id()  # a fresh position: the next run starts over, from every row
    with StateStore(settings.state_db) as state:
        state.update_stage(name, **fields)
        state.add_event(EventKind.STAGE_UPDATED, "query changed" + ("; its table is recomputed from the whole "
                                                                     "source" if stage.kind == GROUP else ""), name)
        return CreatedStage(state.stage(name), columns)


def _widen(settings: Settings, catalog: Catalog, name: str, schema) -> None:
    """The stage's table gains the new query's new columns (older rows read NULL); a column of
    another type is refused, unless Iceberg can widen it."""
    from pyiceberg.exceptions import ValidationError

    from appliance.tables.commits import commit_lock

    table = catalog.table(name)
    with commit_lock(settings, name):
        try:
            with table.update_schema() as update:
                update.union_by_name(schema)
        except (ValidationError, ValueError) as exc:
            raise StageQueryRefused(f"the new query's columns do not fit table {name}: {exc}") from None


def preview(settings: Settings, source: str, sql: str, rows: int = 20, spark=None) -> tuple[str, pa.Table]:
    """(the query's kind, its result over a sample of `source`: its files as planned, until about
    PREVIEW_SAMPLE rows), without creating anything."""
    from appliance.stages.frames import tasks_frame
    from appliance.stages.runner import Views, bind_tables, spark_errors
    from appliance.stages.sql import DIALECT, analyse

    query = analyse(sql)
    catalog = Catalog(settings)
    catalog.check_exists(source)
    with warehouse_io(settings, f"preview a stage over {source}"), _spark(settings, spark) as session:
        table = catalog.table(source)
        snapshot = table.current_snapshot()
        tasks = list(table.scan(snapshot_id=snapshot.snapshot_id).plan_files()) if snapshot else []
        sample, count = [], 0
        for task in tasks:
            if count >= PREVIEW_SAMPLE:
                break
            sample.append(task)
            count += task.file.record_count
        views = Views(session)
        try:
            views.bind(SOURCE, tasks_frame(session, table, table.schema(), sample))
            bind_tables(views, session, catalog, query)
            result = session.sql(query.bound(views.names).sql(dialect=DIALECT)).limit(rows).toArrow()
        except spark_errors() as exc:
            from appliance.core.errors import StageFailed

            raise StageFailed(views.described(exc)) from None
        finally:
            views.drop()
    return query.kind, result


@audited(lambda a: "stage pause" if a["paused"] else "stage resume")
def set_stage_paused(settings: Settings, name: str, paused: bool) -> None:
    with StateStore(settings.state_db) as state:
        state.update_stage(name, paused=paused)
        state.add_event(EventKind.STAGE_PAUSED if paused else EventKind.STAGE_RESUMED,
                        "paused" if paused else "resumed", name)


@audited("stage delete")
def delete_stage(settings: Settings, name: str, drop_table: bool = False) -> StageDef:
    with StateStore(settings.state_db) as state:
        stage = state.stage(name)
        readers = [s.name for s in state.stages() if s.source == stage.table]
        if readers:
            raise TableConflict(f"stage {readers[0]!r} reads {stage.table}: delete it first")
        state.remove_stage(name)
        state.add_event(EventKind.STAGE_DELETED, "deleted" + (" with its table" if drop_table else ""), name)
    if drop_table:
        Catalog(settings).drop(stage.table)
        with StateStore(settings.state_db) as state:
            state.forget_table(stage.table)
    return stage


# ---- for the UI: the same operations in a `floe` process of their own, so that no UI hosts a JVM ----


@dataclass(frozen=True)
class Outcome:
    """What a `floe stage` command said: its result (a preview's rows), or its one-line error."""

    ok: bool
    said: str  # its stderr's last line: what it did, or what is wrong
    rows: list[dict] = field(default_factory=list)


def _outcome(done) -> Outcome:
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    said = lines[-1].removeprefix("floe: error: ") if lines else ""
    if done.returncode:
        return Outcome(False, said or f"exited with code {done.returncode}")
    rows = [json.loads(line) for line in done.stdout.splitlines() if line.strip().startswith("{")]
    return Outcome(True, said, rows)


def preview_apart(settings: Settings, source: str, sql: str, rows: int = 50) -> Outcome:
    from appliance.control.processes import run_floe

    return _outcome(run_floe(settings, ["stage", "preview", "--from", source, "--sql", sql, "--rows", str(rows),
                                        "--format", "json"]))


def save_apart(settings: Settings, name: str, source: str, sql: str, table: str, new: bool) -> Outcome:
    """`floe stage create` (new) or `floe stage update`."""
    from appliance.control.processes import run_floe

    args = ["stage", "create", name, "--from", source, "--sql", sql, "--table", table] if new else \
        ["stage", "update", name, "--sql", sql]
    return _outcome(run_floe(settings, args))
