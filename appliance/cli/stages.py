"""`floe stage ...`: SQL preparation stages, from table to table."""

from __future__ import annotations

import json

import click

from appliance.cli.base import cli, err, settings
from appliance.core import hints


@cli.group()
def stage() -> None:
    """SQL preparation stages: Spark SQL over the new rows of a table, into another table."""


def _columns(columns: list[tuple[str, str]]) -> str:
    return ", ".join(f"{n} {t}" for n, t in columns)


@stage.command("create")
@click.argument("name")
@click.option("--from", "source", required=True, metavar="NS.TABLE", help="The table whose new rows it reads.")
@click.option("--sql", required=True, help="Spark SQL over `source` (the new rows); NS.TABLE names other tables.")
@click.option("--table", required=True, metavar="NS.TABLE", help="The table it writes (created from the query).")
@click.option("--partition-by", default=None, help="Its table's partitions over the query's columns: day(COL), "
              "hour(COL), month(COL), year(COL), bucket(N, COL), truncate(W, COL) or a column (default: none).")
def stage_create(name: str, source: str, sql: str, table: str, partition_by: str | None) -> None:
    """Create stage NAME: its query checked, its table created; `floe run` keeps it up to date."""
    from appliance.control.stages import create_stage, created_line

    created = create_stage(settings(), name, source=source, sql=sql, table=table, partition_by=partition_by)
    err(created_line(created.stage))
    click.echo(_columns(created.columns))


@stage.command("update")
@click.argument("name")
@click.option("--sql", required=True, help="The stage's new query.")
def stage_update(name: str, sql: str) -> None:
    """Give stage NAME a new query (a failed stage then resumes from its last committed point)."""
    from appliance.control.stages import update_stage, updated_line

    updated = update_stage(settings(), name, sql)
    err(updated_line(updated.stage))
    click.echo(_columns(updated.columns))


@stage.command("preview")
@click.option("--from", "source", required=True, metavar="NS.TABLE", help="The table to sample.")
@click.option("--sql", required=True, help="Spark SQL over `source`.")
@click.option("--rows", default=20, show_default=True, help="Rows of the result to show.")
@click.option("--format", "fmt", type=click.Choice(["table", "csv", "json"]), default="table", show_default=True)
def stage_preview(source: str, sql: str, rows: int, fmt: str) -> None:
    """Run a stage's query over a sample of SOURCE and print the result; nothing is created."""
    from appliance.control.stages import preview, preview_line
    from appliance.query.formatting import format_csv, format_json, format_table

    kind, result = preview(settings(), source, sql, rows)
    err(preview_line(kind))
    click.echo({"table": format_table, "csv": format_csv, "json": format_json}[fmt](result), nl=False)
    if fmt == "table":
        click.echo()


@stage.command("list")
@click.option("--format", "fmt", type=click.Choice(["table", "json"]), default="table", show_default=True)
def stage_list(fmt: str) -> None:
    """List stages with their state, lineage, lag and totals."""
    from appliance.views.stages import stages_overview

    rows = [view.summary() for view in stages_overview(settings())]
    if fmt == "json":
        click.echo(json.dumps(rows, indent=2))
        return
    if not rows:
        err(f"no stages yet: `{hints.CREATE_STAGE_HELP}` says how to create one")
        return
    import pyarrow as pa

    from appliance.query.formatting import format_table
    from appliance.views.engine import Shown

    for row in rows:
        row["state"] = Shown(row["state"], row.pop("was")).text
    click.echo(format_table(pa.Table.from_pylist(rows)))


@stage.command("show")
@click.argument("name")
@click.option("--format", "fmt", type=click.Choice(["text", "json"]), default="text", show_default=True)
def stage_show(name: str, fmt: str) -> None:
    """Show a stage's query, lineage, position, totals and recent runs."""
    from appliance.views.stages import stage_info

    info = stage_info(settings(), name)
    if fmt == "json":
        click.echo(json.dumps(info.as_dict(), indent=2, default=str))
        return
    v = info.view
    for key, value in (("name", v.name), ("kind", v.kind), ("state", v.shown.text), ("lineage", " -> ".join(v.lineage)),
                       ("source", v.source), ("table", v.table), ("position", info.position),
                       ("lag", f"{v.lag_snapshots} snapshots, {v.lag_rows} rows" if v.lag_rows is not None else None),
                       ("rows in", f"{v.rows_in_total} (all runs)"), ("rows out", f"{v.rows_out_total} (all runs)"),
                       ("table rows", v.table_rows), ("runs", v.runs), ("last error", info.last_error),
                       ("sql", info.sql)):
        click.echo(f"{key:10} {value if value is not None else ''}")
    if info.runs:
        click.echo("recent runs:")
        for r in info.runs:
            click.echo(f"  {r.started_at[:19]}  {r.outcome:6} {r.rows_in} rows in, {r.rows_out} out, "
                       f"{r.duration_ms} ms, source snapshots {r.from_snapshot} -> {r.to_snapshot}"
                       + (f"  {r.error}" if r.error else ""))


@stage.command("pause")
@click.argument("name")
def stage_pause(name: str) -> None:
    """Pause stage NAME after its current run; its source's snapshots it has not read are kept."""
    from appliance.control.stages import set_stage_paused

    set_stage_paused(settings(), name, True)
    err(f"paused stage {name}")


@stage.command("resume")
@click.argument("name")
def stage_resume(name: str) -> None:
    """Resume stage NAME from where it stopped."""
    from appliance.control.stages import set_stage_paused

    set_stage_paused(settings(), name, False)
    err(f"resumed stage {name}")


@stage.command("delete")
@click.argument("name")
@click.option("--drop-table", is_flag=True, help="Drop the stage's table too.")
def stage_delete(name: str, drop_table: bool) -> None:
    """Delete stage NAME (its table stays unless --drop-table)."""
    from appliance.control.stages import delete_stage

    s = delete_stage(settings(), name, drop_table)
    err(f"deleted stage {name}" + (f" and table {s.table}" if drop_table else f"; table {s.table} kept"))
