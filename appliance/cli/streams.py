"""`floe stream ...`: create and manage streams."""

from __future__ import annotations

import json

import click

from appliance.cli.base import cli, err, settings


@cli.group()
def stream() -> None:
    """Create and manage streams (topic -> Iceberg table)."""


@stream.command("create")
@click.argument("name")
@click.option("--bootstrap", required=True, help="Kafka bootstrap servers, HOST:PORT[,HOST:PORT].")
@click.option("--topic", required=True, help="Topic to ingest.")
@click.option("--format", "fmt", default="json", show_default=True, help="Message format.")
@click.option("--table", required=True, help="Target table, NAMESPACE.TABLE.")
@click.option("--mapping", default="auto", show_default=True, help="'auto' to infer from a sample, or a TOML file.")
@click.option("--starting-offsets", type=click.Choice(["earliest", "latest"]), default="earliest", show_default=True)
@click.option("--dead-letter-table", default=None, help="Dead-letter table (default: TABLE_dlq).")
@click.option("--kafka-option", "kafka_options", multiple=True, metavar="KEY=VALUE",
              help="librdkafka property, e.g. security.protocol=SASL_SSL (repeatable).")
def stream_create(name: str, bootstrap: str, topic: str, fmt: str, table: str, mapping: str,
                  starting_offsets: str, dead_letter_table: str | None, kafka_options: tuple[str, ...]) -> None:
    """Create stream NAME reading TOPIC into TABLE. Prints the mapping as TOML on stdout."""
    from appliance.control.streams import create_stream
    from appliance.kafka.settings import parse_kafka_options

    created = create_stream(
        settings(), name, bootstrap=bootstrap, topic=topic, table=table, format=fmt, mapping=mapping,
        starting_offsets=starting_offsets, dead_letter_table=dead_letter_table,
        kafka_options=parse_kafka_options(kafka_options),
    )
    s = created.stream
    how = f"inferred from {created.sampled} messages" if created.inferred else "from the mapping file"
    click.echo(s.mapping_toml(), nl=False)
    err(f"created stream {s.name}: {s.topic} -> {s.table} (dead letters: {s.dead_letter_table}); "
        f"{len(s.mapping.columns)} columns {how}; mapping saved to {created.mapping_file}")


@stream.command("list")
@click.option("--format", "fmt", type=click.Choice(["table", "json"]), default="table", show_default=True)
def stream_list(fmt: str) -> None:
    """List streams with their state and totals."""
    from appliance.views.streams import streams_overview

    rows = [view.summary() for view in streams_overview(settings())]
    if fmt == "json":
        click.echo(json.dumps(rows, indent=2))
        return
    if not rows:
        err("no streams yet: create one with `floe stream create`")
        return
    import pyarrow as pa

    from appliance.query.formatting import format_table

    click.echo(format_table(pa.Table.from_pylist(rows)))


@stream.command("show")
@click.argument("name")
@click.option("--format", "fmt", type=click.Choice(["text", "json"]), default="text", show_default=True)
def stream_show(name: str, fmt: str) -> None:
    """Show a stream's definition, committed offsets, status and mapping."""
    from appliance.views.streams import stream_info

    info = stream_info(settings(), name).as_dict()
    if fmt == "json":
        click.echo(json.dumps(info, indent=2, default=str))
        return
    mapping = info.pop("mapping")
    batches = info.pop("recent_batches")
    for key, value in info.items():
        click.echo(f"{key:18} {json.dumps(value) if isinstance(value, (dict, list)) else value}")
    if batches:
        click.echo("recent batches:")
        for b in batches:
            click.echo(f"  {b['committed_at']}  {b['messages']} messages, {b['rows']} rows, "
                       f"{b['dead_letter_rows']} dead letters, {b['duration_ms']} ms, snapshot {b['target_snapshot_id']}")
    click.echo("mapping:")
    click.echo(mapping, nl=False)


@stream.command("pause")
@click.argument("name")
def stream_pause(name: str) -> None:
    """Stop reading a stream; the engine finishes its current batch first."""
    from appliance.control.streams import set_paused

    set_paused(settings(), name, True)
    err(f"paused stream {name}")


@stream.command("resume")
@click.argument("name")
def stream_resume(name: str) -> None:
    """Resume a paused stream from its committed offsets."""
    from appliance.control.streams import set_paused

    set_paused(settings(), name, False)
    err(f"resumed stream {name}")


@stream.command("delete")
@click.argument("name")
@click.option("--drop-tables", is_flag=True, help="Also drop the target and dead-letter tables and their files.")
def stream_delete(name: str, drop_tables: bool) -> None:
    """Delete a stream (its tables stay unless --drop-tables)."""
    from appliance.control.streams import delete_stream

    s = delete_stream(settings(), name, drop_tables)
    kept = "dropped" if drop_tables else "kept"
    err(f"deleted stream {name}; tables {s.table} and {s.dead_letter_table} {kept}")
