"""`floe maintain` and `floe table policy/runs`: table maintenance now, its policies, its record."""

from __future__ import annotations

import dataclasses
import json

import click

from appliance.cli.base import cli, err, settings
from appliance.core.vocabulary import TASK_ORDER, MaintenanceTask

POLICY_HELP = {
    "retention": "Delete rows older than this: forever, 1 week, 1 month, 6 months, 1 year, 30d...",
    "retention_column": "Event-time column retention looks at (default _kafka_timestamp).",
    "target_file_size": "Compaction's target file size, e.g. 128MB.",
    "compact_small_files": "Compact by itself once this many small files pile up.",
    "compact_min_average_size": "... or once files average less than this.",
    "compact_interval": "Compact by itself at most this often, e.g. 10m.",
    "keep_snapshots": "Expire snapshots older than this, e.g. 7d.",
    "min_snapshots": "Always keep at least this many snapshots.",
    "max_snapshots": "Keep at most this many snapshots, except those younger than min_snapshot_age.",
    "min_snapshot_age": "max_snapshots never expires a snapshot younger than this, e.g. 5m.",
    "orphan_age": "Delete unreferenced files older than this (at least 1h).",
}
TASK_NAMES = [t.value for t in MaintenanceTask]


@cli.command()
@click.argument("tables", nargs=-1)
@click.option("--compact", is_flag=True, help="Rewrite small data files into files near the target size.")
@click.option("--expire", is_flag=True, help="Expire old snapshots and delete the files only they used.")
@click.option("--orphans", is_flag=True, help="Delete files no snapshot references, older than the safety age.")
@click.option("--retention", is_flag=True, help="Delete rows older than the table's retention period.")
@click.option("--dry-run", is_flag=True, help="Show what each task would do; change nothing.")
def maintain(tables: tuple[str, ...], compact: bool, expire: bool, orphans: bool, retention: bool,
             dry_run: bool) -> None:
    """Run maintenance on TABLES now (default: every table). Without task options, every task runs.

    A running engine (`floe run`) does it on its Spark session; without one, this command starts its own.
    Each run is recorded and shown by `floe table runs` and in the UI's table view.
    Exits 1 if a task failed.
    """
    from appliance.control.maintenance import maintain as run_maintenance
    from appliance.maintenance.runs import format_run

    chosen = {MaintenanceTask.COMPACT: compact, MaintenanceTask.EXPIRE: expire, MaintenanceTask.ORPHANS: orphans,
              MaintenanceTask.RETENTION: retention}
    tasks = [t for t in TASK_ORDER if chosen[t]] or list(TASK_ORDER)
    done = run_maintenance(settings(), list(tables), tasks, dry_run, lambda run: click.echo(format_run(run)))
    if not done.names:
        err("no tables yet: create a stream first")


@cli.group()
def table() -> None:
    """Table maintenance policies and the record of maintenance runs."""


def _policy_options(command):
    from appliance.config.policy import PARSERS

    assert set(POLICY_HELP) == set(PARSERS)
    for key in reversed(list(PARSERS)):
        command = click.option(f"--{key.replace('_', '-')}", key, default=None, help=POLICY_HELP[key])(command)
    return command


@table.command("policy")
@click.argument("name")
@_policy_options
@click.option("--unset", multiple=True, metavar="SETTING",
              help="Drop NAME's own value of SETTING (e.g. retention), so it inherits again (repeatable).")
@click.option("--format", "fmt", type=click.Choice(["table", "json"]), default="table", show_default=True)
def table_policy(name: str, unset: tuple[str, ...], fmt: str, **values: str | None) -> None:
    """Show or change the maintenance policy of a table (NS.TABLE) or a namespace (NS).

    A namespace's values are the defaults of its tables; a table's own values win.
    """
    from appliance.control.audit import change
    from appliance.maintenance.policies import describe_policy, set_policy
    from appliance.state.store import StateStore
    from appliance.tables.catalog import Catalog

    loaded = settings()
    catalog = Catalog(loaded)
    given = {k: v for k, v in values.items() if v is not None}
    with StateStore(loaded.state_db) as state:
        if given or unset:
            with change(loaded, "table policy", name, set=given, unset=list(unset)):
                set_policy(loaded, state, catalog, name, given, tuple(k.replace("-", "_") for k in unset))
        rows = describe_policy(loaded, state, catalog, name)
    if fmt == "json":
        click.echo(json.dumps([row.as_dict() for row in rows], indent=2))
        return
    for row in rows:
        click.echo(f"{row.setting:26} {row.value:18} {row.source}")


@table.command("runs")
@click.argument("name", required=False)
@click.option("--task", type=click.Choice(TASK_NAMES), default=None)
@click.option("--limit", default=20, show_default=True, type=click.IntRange(1, 10000))
@click.option("--queued", is_flag=True, help="Only what the running engine's maintenance has queued, next first.")
@click.option("--format", "fmt", type=click.Choice(["table", "json"]), default="table", show_default=True)
def table_runs(name: str | None, task: str | None, limit: int, queued: bool, fmt: str) -> None:
    """The most recent maintenance runs, of one table or of all, after what the engine has queued."""
    from appliance.maintenance.runs import RUN_HEADER, format_run
    from appliance.state.store import StateStore
    from appliance.tables.catalog import Catalog

    loaded = settings()
    if name:
        Catalog(loaded).check_exists(name)
    with StateStore(loaded.state_db) as state:
        waiting = [q for q in state.maintenance_queue(name) if task is None or q.task == task]
        runs = [] if queued else state.runs(name, MaintenanceTask(task) if task else None, limit)
    if fmt == "json":
        rows = [dataclasses.asdict(q) for q in waiting] if queued else [{"id": r.id, **r.row()} for r in runs]
        click.echo(json.dumps(rows, indent=2))
        return
    if waiting:
        click.echo(f"queued by the engine's maintenance, next first ({len(waiting)}):")
        for q in waiting:
            click.echo(f"  {q.position:>4}. {q.task:9} {q.table_name}  ({q.reason}; queued {q.queued_at[11:19]})")
    if queued:
        if not waiting:
            err("nothing queued")
        return
    if not runs:
        err("no maintenance runs yet")
        return
    click.echo(f"{'started':19}  {'trigger':8} {RUN_HEADER}")
    for run in runs:
        click.echo(f"{run.started_at[:19]}  {run.trigger:8} {format_run(run)}")


@table.command("show")
@click.argument("name")
@click.option("--format", "fmt", type=click.Choice(["text", "json"]), default="text", show_default=True)
def table_show(name: str, fmt: str) -> None:
    """A table's size, partitioning (with its history), partitions, schema versions and snapshots."""
    import dataclasses
    import json

    from appliance.tables.catalog import Catalog
    from appliance.views.tables import table_view

    loaded = settings()
    Catalog(loaded).check_exists(name)
    view = table_view(loaded, name)
    if fmt == "json":
        click.echo(json.dumps(dataclasses.asdict(view), indent=2, default=str))
        return
    click.echo(f"{view.name}  {view.location}")
    deleted = f" ({view.position_deletes:,} of them deleted by {view.delete_files} delete files)" \
        if view.delete_files else ""
    click.echo(f"rows {view.rows:,}{deleted}  data files {view.data_files:,}  size {view.size_bytes:,} bytes  "
               f"snapshots {len(view.snapshots)}")
    click.echo(f"partitioned by {view.partitioning}")
    for spec in view.specs:
        click.echo(f"  spec {spec.spec_id}{' (current)' if spec.current else ''}: {spec.partitioning}, "
                   f"{spec.files:,} live files")
    if view.partitions:
        click.echo("partitions:")
        for p in view.partitions:
            extra = f", {p.delete_files} delete files" if p.delete_files else ""
            click.echo(f"  {p.partition:40} spec {p.spec_id}  {p.rows:>12,} rows  {p.files:>5} files  "
                       f"{p.size_bytes:>14,} bytes{extra}")
    click.echo("columns: " + ", ".join(f"{n} {t}" for n, t in view.schema))
    for version in view.schema_versions:
        click.echo(f"  schema {version.schema_id}{' (current)' if version.current else ''}: "
                   + "; ".join(version.changes))


@table.command("alter")
@click.argument("name")
@click.argument("operation", type=click.Choice(["add-column", "drop-column", "rename-column", "partition-by"]))
@click.argument("column")
@click.argument("value", required=False)
@click.option("--source", default=None, metavar="FIELD.PATH",
              help="add-column: the message field that fills it (default: the field of its name), or @key, "
                   "@key.FIELD, @header.NAME, @headers.")
def table_alter(name: str, operation: str, column: str, value: str | None, source: str | None) -> None:
    """Change TABLE's schema: `add-column COLUMN TYPE`, `drop-column COLUMN`, `rename-column COLUMN NEW`;
    or its partitioning: `partition-by "day(ts), bucket(16, id)"` (`none`: unpartitioned).

    Streams writing the table follow from their next batch, without a restart; files written before
    a partitioning change keep theirs until compaction rewrites them.
    """
    from appliance.control.tables import alter_table

    if operation == "partition-by" and value:
        raise click.UsageError('partition-by takes the partitioning as one argument, e.g. "day(ts), bucket(16, id)"')
    if operation in ("add-column", "rename-column") and not value:
        what = "a type, e.g. `add-column discount double`" if operation == "add-column" else "the new name"
        raise click.UsageError(f"{operation} needs {what}")
    if operation == "drop-column" and value:
        raise click.UsageError("drop-column takes only the column's name")
    err(alter_table(settings(), name, operation, column, value, source))
