"""Stage operations the CLI and the UI share: create, update, preview, pause, resume, delete.

A stage's SQL is checked twice before anything is written: what can be kept incrementally
(`stages.sql`, without Spark), then what Spark makes of it over empty rows (its columns, or a
one-line error: an unknown column, a type that does not fit). Only then is its table created.
Spark is the running engine's session (`control/requests.py`), or, with no engine to ask, the
command's own; the UI, which never hosts a JVM, then runs the `floe stage` command in a process of its own.
"""

from __future__ import annotations

import json
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Iterator

import pyarrow as pa

from appliance.config.settings import Settings, ensure_home
from appliance.control.audit import audited
from appliance.core.clock import now
from appliance.core.errors import FloeError, InvalidName, StageExists, StageQueryRefused, TableConflict
from appliance.core.vocabulary import EngineAsk, EventKind
from appliance.model.names import check_stream_name, check_table_name
from appliance.model.partitioning import Partitioning
from appliance.model.stage import DOES, GROUP, StageDef
from appliance.state.store import StateStore
from appliance.tables.catalog import Catalog, warehouse_io
from appliance.tables.system import refuse_system

if TYPE_CHECKING:
    from appliance.stages.checks import Checked


@contextmanager
def _spark(settings: Settings, spark) -> Iterator[object]:
    """`spark`, or a session of this command's own for checking queries (its JVM quiet on stderr)."""
    if spark is not None:
        yield spark
        return
    from appliance.spark.session import command_session

    with command_session(settings, app_name="floe-stage") as own:
        yield own


def _checked(settings: Settings, catalog: Catalog, query, source: str, spark, checked: Checked | None) -> Checked:
    """What Spark makes of the query: `checked` when the running engine said it already; else on `spark`;
    else by the running engine; else on a session of this command's own."""
    from appliance.stages.checks import Checked, check

    if checked is not None:
        return checked
    if spark is None:
        from appliance.control.requests import ask_engine, error_of

        answer = ask_engine(settings, EngineAsk.CHECK, {"source": source, "sql": query.sql}).answer
        if answer is not None:
            if answer.error:
                raise error_of(answer)
            return Checked.of_answer(answer.answer)
    with _spark(settings, spark) as session:
        return check(session, catalog, query, catalog.table(source))


@dataclass(frozen=True)
class CreatedStage:
    stage: StageDef
    columns: list[tuple[str, str]]  # the table's columns: name, Spark SQL type


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
    for stream in state.table_writers():
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
                 partition_by: str | None = None, checked: Checked | None = None) -> CreatedStage:
    """Create stage `name`: its SQL checked, its table created from the query's columns (partitioned as
    `partition_by` says, over them; none by default). `checked`: what the running engine made of
    this query, in place of a Spark session here."""
    from appliance.stages.sql import analyse

    ensure_home(settings)
    query = analyse(sql)
    layout = Partitioning.parse(partition_by)
    catalog = Catalog(settings)
    with StateStore(settings.state_db) as state:
        _check_names(state, catalog, name, source, table, query.kind)
    with warehouse_io(settings, f"create stage {name}"):
        checked = _checked(settings, catalog, query, source, spark, checked)
        if _rows_in(catalog, table):
            raise TableConflict(f"table {table} exists and holds rows: a new stage would add to them; "
                                "choose another table or drop it")
        created = not catalog.exists(table)
        target = catalog.ensure_table(table, checked.schema, layout.check(checked.schema))[0]
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
    return CreatedStage(stage, checked.columns)


@audited("stage update")
def update_stage(settings: Settings, name: str, sql: str, spark=None, checked: Checked | None = None) -> CreatedStage:
    """New SQL for a stage. An appending stage goes on from where it is with the new query; a grouping
    stage's table is recomputed from the whole source by its next run (its state follows its query).
    `checked`: what the running engine made of this query, in place of a Spark session here."""
    from appliance.stages.sql import analyse

    query = analyse(sql)
    catalog = Catalog(settings)
    with StateStore(settings.state_db) as state:
        stage = state.stage(name)
    if query.kind != stage.kind:
        raise StageQueryRefused(f"stage {name!r} is a {stage.kind} stage and this query makes a {query.kind} one: "
                                "delete the stage and create it again")
    with warehouse_io(settings, f"update stage {name}"):
        checked = _checked(settings, catalog, query, stage.source, spark, checked)
        schema = checked.schema
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
        return CreatedStage(state.stage(name), checked.columns)


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
    PREVIEW_SAMPLE rows), without creating anything: on `spark`, else by the running engine, else on a
    session of this command's own."""
    from appliance.stages.checks import preview_rows
    from appliance.stages.sql import analyse

    query = analyse(sql)
    if spark is None:
        from appliance.control.requests import ask_engine, error_of

        answer = ask_engine(settings, EngineAsk.PREVIEW, {"source": source, "sql": sql, "rows": rows}).answer
        if answer is not None:
            if answer.error:
                raise error_of(answer)
            return answer.answer["query_kind"], answer.table()
    catalog = Catalog(settings)
    catalog.check_exists(source)
    with warehouse_io(settings, f"preview a stage over {source}"), _spark(settings, spark) as session:
        return query.kind, preview_rows(session, catalog, query, catalog.table(source), rows)


def check_query(settings: Settings, source: str, sql: str, spark) -> Checked:
    """What Spark on `spark` makes of a stage's query over `source`: its kind and its table's columns."""
    from appliance.stages.sql import analyse

    catalog = Catalog(settings)
    catalog.check_exists(source)
    with warehouse_io(settings, f"check a stage over {source}"):
        return _checked(settings, catalog, analyse(sql), source, spark, None)


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


def created_line(stage: StageDef) -> str:
    return f"created {stage.kind} stage {stage.name}: {stage.source} -> {stage.table}; it {DOES[stage.kind]}"


def updated_line(stage: StageDef) -> str:
    again = " (its table is recomputed from the whole source by the next run)" if stage.kind == GROUP else ""
    return f"updated stage {stage.name}{again}"


def preview_line(kind: str) -> str:
    return f"a {kind} stage: it {DOES[kind]}"


# ---- for the UI, which never hosts a JVM: the running engine's session, else a `floe` process of its own ----


@dataclass(frozen=True)
class Outcome:
    """What a preview or a save came to: its result (a preview's rows and columns) or its one-line error,
    and who answered: the running engine, or a `floe stage` command of its own."""

    ok: bool
    said: str  # what it did, or what is wrong
    rows: list[dict] = field(default_factory=list)
    columns: list[str] = field(default_factory=list)
    by_engine: bool = False


def _problem(exc: Exception) -> Outcome:
    text = str(exc) if isinstance(exc, FloeError) else f"{type(exc).__name__}: {exc}"
    return Outcome(False, " ".join(text.split()))


def preview_for_ui(settings: Settings, source: str, sql: str, rows: int = 50) -> Outcome:
    """The query's result over a sample of `source`, previewed by the running engine on its session; by
    `floe stage preview` in a process of its own (a JVM's start) when no engine answers."""
    from appliance.control.requests import ask_engine
    from appliance.stages.sql import analyse

    try:
        analyse(sql)  # a query refused (empty, ORDER BY...) is told at once, without Spark
        answer = ask_engine(settings, EngineAsk.PREVIEW, {"source": source, "sql": sql, "rows": rows}).answer
        if answer is None:
            return preview_apart(settings, source, sql, rows)
        if answer.error:
            return Outcome(False, answer.error, by_engine=True)
        table = answer.table()
    except Exception as exc:  # noqa: BLE001 - said in one line, as a command would say it
        return _problem(exc)
    return Outcome(True, preview_line(answer.answer["query_kind"]), table.to_pylist(), table.column_names,
                   by_engine=True)


def save_for_ui(settings: Settings, name: str, source: str, sql: str, table: str, new: bool) -> Outcome:
    """Create (new) or update a stage: its query checked by the running engine, then the stage saved
    here (nothing more needs Spark); by `floe stage create` or `update` in a process of its own when no
    engine answers."""
    from appliance.control.requests import ask_engine
    from appliance.stages.checks import Checked
    from appliance.stages.sql import analyse

    try:
        analyse(sql)  # a query refused (empty, ORDER BY...) is told at once, without Spark
        if not new:
            with StateStore(settings.state_db) as state:
                source = state.stage(name).source
        answer = ask_engine(settings, EngineAsk.CHECK, {"source": source, "sql": sql}).answer
        if answer is None:
            return save_apart(settings, name, source, sql, table, new)
        if answer.error:
            return Outcome(False, answer.error, by_engine=True)
        checked = Checked.of_answer(answer.answer)
        if new:
            stage = create_stage(settings, name, source=source, sql=sql, table=table, checked=checked).stage
            return Outcome(True, created_line(stage), by_engine=True)
        return Outcome(True, updated_line(update_stage(settings, name, sql, checked=checked).stage), by_engine=True)
    except Exception as exc:  # noqa: BLE001 - what a command would say on its last line
        return _problem(exc)


def _outcome(done) -> Outcome:
    from appliance.control.processes import said_last

    said = said_last(done)
    if done.returncode:
        return Outcome(False, said or f"exited with code {done.returncode}")
    rows = [json.loads(line) for line in done.stdout.splitlines() if line.strip().startswith("{")]
    return Outcome(True, said, rows, list(rows[0]) if rows else [])


def preview_apart(settings: Settings, source: str, sql: str, rows: int = 50) -> Outcome:
    """`floe stage preview` in a process of its own."""
    from appliance.control.processes import run_floe

    return _outcome(run_floe(settings, ["stage", "preview", "--from", source, "--sql", sql, "--rows", str(rows),
                                        "--format", "json"]))


def save_apart(settings: Settings, name: str, source: str, sql: str, table: str, new: bool) -> Outcome:
    """`floe stage create` (new) or `floe stage update`, in a process of its own."""
    from appliance.control.processes import run_floe

    args = ["stage", "create", name, "--from", source, "--sql", sql, "--table", table] if new else \
        ["stage", "update", name, "--sql", sql]
    return _outcome(run_floe(settings, args))
