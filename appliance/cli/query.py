"""`floe query`: DuckDB SQL over the catalog's tables."""

from __future__ import annotations

import click

from appliance.cli.base import cli, settings


@cli.command()
@click.argument("sql")
@click.option("--format", "fmt", type=click.Choice(["table", "csv", "json"]), default="table", show_default=True)
def query(sql: str, fmt: str) -> None:
    """Run DuckDB SQL; tables are named namespace.table (e.g. ingest.orders)."""
    from appliance.query.connection import run_query
    from appliance.query.formatting import format_csv, format_json, format_table

    result = run_query(settings(), sql)
    text = {"table": format_table, "csv": format_csv, "json": format_json}[fmt](result)
    click.echo(text, nl=fmt == "table")
