"""`floe stream ...`: create and manage streams."""

from __future__ import annotations

import json

import click

from appliance.cli.base import cli, err, settings
from appliance.core import hints
from appliance.core.vocabulary import StreamPhase


@cli.group()
def stream() -> None:
    """Create and manage streams (topic -> Iceberg table)."""


@stream.command("create")
@click.argument("name")
@click.option("--bootstrap", required=True, help="Kafka bootstrap servers, HOST:PORT[,HOST:PORT].")
@click.option("--topic", default=None, help="Topic to ingest.")
@click.option("--topic-pattern", default=None, metavar="REGEX",
              help="Ingest every topic whose whole name matches REGEX, each into its own table: --table is then a "
                   "template of {topic} and the pattern's groups {1}, {2}... (e.g. cdc.{1}); topics that appear "
                   "later are taken while the engine runs.")
@click.option("--route-by", default=None, metavar="FIELD",
              help="Route each message into the table its FIELD's value names (a nested field as a.b; the Kafka "
                   "key or a header as @key, @key.FIELD, @header.NAME): --table is then a template of {value} (e.g. "
                   "analytics.events_{value}); a new value's table is made while the engine runs, with the columns "
                   "of its own messages. With --mode upsert --key COLS each table holds each key's newest row; --cdc is "
                   "refused with it.")
@click.option("--format", "fmt", default="json", show_default=True, help="Message format: json, avro or protobuf.")
@click.option("--schema-registry", default=None, metavar="URL",
              help="Schema registry (Confluent's API: Confluent, Redpanda, Karapace); needed for avro and protobuf.")
@click.option("--schema-registry-option", "registry_options", multiple=True, metavar="KEY=VALUE",
              help="SchemaRegistryClient property, e.g. basic.auth.user.info=KEY:SECRET (repeatable).")
@click.option("--subject", default=None, help="Registry subject to map from when the topic is empty "
              "(default TOPIC-value).")
@click.option("--schema-evolution", type=click.Choice(["auto", "off"]), default="auto", show_default=True,
              help="auto: new fields become columns and types widen, live; off: new fields are ignored.")
@click.option("--table", required=True, help="Target table, NAMESPACE.TABLE.")
@click.option("--mapping", default="auto", show_default=True, help="'auto' to infer from a sample, or a TOML file.")
@click.option("--starting-offsets", type=click.Choice(["earliest", "latest"]), default="earliest", show_default=True)
@click.option("--dead-letter-table", default=None, help="Dead-letter table (default: TABLE_dlq).")
@click.option("--kafka-option", "kafka_options", multiple=True, metavar="KEY=VALUE",
              help="librdkafka property, e.g. security.protocol=SASL_SSL (repeatable).")
@click.option("--mode", type=click.Choice(["append", "upsert"]), default=None,
              help="append (default): every message a row; upsert: the table holds each key's newest row, a "
                   "tombstone deletes its key.")
@click.option("--key", default=None, metavar="COL[,COL...]",
              help="Upsert key columns (default: the Kafka key's fields).")
@click.option("--cdc", type=click.Choice(["debezium"]), default=None,
              help="Debezium change events (an upsert stream): c, r, u upsert `after`, d deletes, t truncates.")
@click.option("--cdc-columns", is_flag=True, help="Keep each event's op, time and source position as "
              "_cdc_op, _cdc_ts, _cdc_position.")
@click.option("--kafka-columns", default=None, metavar="key,headers",
              help="Keep the Kafka key (_kafka_key, its bytes) and/or headers (_kafka_headers) as columns.")
@click.option("--partition-by", default="day(_kafka_timestamp)", show_default=True,
              help="The table's partitions: day(COL), hour(COL), month(COL), year(COL), bucket(N, COL), "
                   "truncate(W, COL) or a column, comma-separated; none for no partitioning.")
def stream_create(name: str, bootstrap: str, topic: str | None, topic_pattern: str | None, route_by: str | None,
                  fmt: str,
                  schema_registry: str | None,
                  registry_options: tuple[str, ...], subject: str | None, schema_evolution: str, table: str,
                  mapping: str, starting_offsets: str, dead_letter_table: str | None,
                  kafka_options: tuple[str, ...], mode: str | None, key: str | None, cdc: str | None,
                  cdc_columns: bool, kafka_columns: str | None, partition_by: str) -> None:
    """Create stream NAME reading TOPIC into TABLE. Prints the mapping as TOML on stdout."""
    from appliance.control.streams import create_stream
    from appliance.kafka.settings import parse_kafka_options, parse_registry_options

    if (topic is None) == (topic_pattern is None):
        raise click.UsageError("give --topic or --topic-pattern (one of them)")
    if route_by is not None:
        from appliance.cli.routes import create_routed

        if topic_pattern is not None:
            raise click.UsageError("--route-by routes one topic's messages: give --topic, not --topic-pattern")
        create_routed(name, bootstrap=bootstrap, topic=topic, route_by=route_by, table=table, format=fmt,
                      mapping=mapping, subject=subject, starting_offsets=starting_offsets,
                      dead_letter_table=dead_letter_table, kafka_options=kafka_options,
                      schema_registry=schema_registry, registry_options=registry_options,
                      schema_evolution=schema_evolution, mode=mode, key=key, cdc=cdc or "", cdc_columns=cdc_columns,
                      partition_by=partition_by, kafka_columns=kafka_columns or ())
        return
    if topic_pattern is not None:
        from appliance.cli.patterns import create_pattern

        if subject is not None:
            raise click.UsageError("--subject names one topic's subject: a pattern stream maps each topic from its "
                                   "own (TOPIC-value, or its newest message's writer schema)")
        create_pattern(name, bootstrap=bootstrap, topic_pattern=topic_pattern, table=table, format=fmt,
                       kafka_columns=kafka_columns or (),
                       mapping=mapping, starting_offsets=starting_offsets, dead_letter_table=dead_letter_table,
                       kafka_options=parse_kafka_options(kafka_options), schema_registry=schema_registry,
                       registry_options=parse_registry_options(registry_options), schema_evolution=schema_evolution,
                       mode=mode, key=key or (), cdc=cdc or "", cdc_columns=cdc_columns, partition_by=partition_by)
        return
    created = create_stream(
        settings(), name, bootstrap=bootstrap, topic=topic, table=table, format=fmt, mapping=mapping,
        starting_offsets=starting_offsets, dead_letter_table=dead_letter_table,
        kafka_options=parse_kafka_options(kafka_options), schema_registry=schema_registry,
        registry_options=parse_registry_options(registry_options), subject=subject,
        schema_evolution=schema_evolution, mode=mode, key=key,
        cdc=cdc or "", cdc_columns=cdc_columns, partition_by=partition_by, kafka_columns=kafka_columns or (),
    )
    s = created.stream
    how = ("from the mapping file" if not created.inferred else
           f"from the registry's schema (subject {s.subject})" if s.registry and s.format != "json" else
           f"inferred from {created.sampled} messages")
    click.echo(s.mapping_toml(), nl=False)
    err(f"created stream {s.name}: {s.topic} -> {s.table} (dead letters: {s.dead_letter_table}); "
        f"{s.describe_mode()}; {len(s.mapping.columns)} columns {how}; mapping saved to {created.mapping_file}")


@stream.command("list")
@click.option("--format", "fmt", type=click.Choice(["table", "json"]), default="table", show_default=True)
@click.option("--name", "name", default=None, metavar="PATTERN",
              help="Only streams whose name matches: a glob (orders_*), or any part of the name.")
@click.option("--state", type=click.Choice([str(p) for p in StreamPhase] + ["stopped"]), default=None,
              help="Only streams in this state (with the engine down: stopped, or the state they were in).")
@click.option("--namespace", default=None, help="Only streams whose target table is in this namespace.")
@click.option("--sort", type=click.Choice(["name", "state", "rate", "lag", "rows", "errors", "last-commit"]),
              default="name", show_default=True, help="Order (rate, lag, rows, errors, last-commit: largest first).")
def stream_list(fmt: str, name: str | None, state: str | None, namespace: str | None, sort: str) -> None:
    """List streams with their state and totals."""
    from appliance.views.engine import Shown
    from appliance.views.streams import select_streams, streams_overview

    views = streams_overview(settings(), batches=False)  # it prints no batch figures
    picked = select_streams(views, name, state, namespace, sort)
    rows = [view.summary() for view in picked]
    if fmt == "json":
        click.echo(json.dumps(rows, indent=2))
        return
    if views and not picked:
        err(f"none of the {len(views)} streams matches")
        return
    if not rows:
        err(f"no streams yet: `{hints.CREATE_STREAM_HELP}` says how to create one")
        return
    from appliance.query.formatting import format_rows

    for row in rows:
        row["state"] = Shown(row["state"], row.pop("was")).text

    click.echo(format_rows(list(rows[0]), rows))


def _committed(batch: dict, stream: dict) -> str:
    """What a batch committed: its table's snapshot; a routed stream's, its route tables and the snapshot of its
    dead-letter table, which every batch commits (it holds where the next one reads)."""
    from appliance.views.streams import target_committed

    if "route_by" not in stream:
        return f"snapshot {batch['target_snapshot_id']}"
    counted = "" if batch["route_tables"] is None else f"{target_committed(batch['route_tables'], None)}, "
    return f"{counted}snapshot {batch['dead_letter_snapshot_id']} of {stream['dead_letter_table']}"


@stream.command("show")
@click.argument("name")
@click.option("--format", "fmt", type=click.Choice(["text", "json"]), default="text", show_default=True)
def stream_show(name: str, fmt: str) -> None:
    """Show a stream's definition, committed offsets, status and mapping."""
    from appliance.views.engine import Shown
    from appliance.views.streams import stream_info

    info = stream_info(settings(), name).as_dict()
    if fmt == "json":
        click.echo(json.dumps(info, indent=2, default=str))
        return
    info["state"] = Shown(info["state"], info.pop("was")).text
    mapping = info.pop("mapping")
    topics = info.pop("topics")
    routes = info.pop("routes")
    if not info["route_by"]:
        info.pop("route_by")
    if not info["topic_pattern"]:
        info.pop("topic_pattern")
    else:
        info.pop("committed_offsets")  # each topic's, below
    batches = info.pop("recent_batches")
    seen = info.pop("schemas_seen")
    if info["format"] == "json" and not info["schema_registry"]:
        for key in ("schema_registry", "registry_options", "subject"):
            info.pop(key)
    if info["mode"] == "append":
        for key in ("key", "cdc"):
            info.pop(key)
    else:
        info["key"] = ", ".join(info["key"])
        if not info["cdc"]:
            info.pop("cdc")
    info["kafka_columns"] = ", ".join(info["kafka_columns"]) or "none"
    for key, value in info.items():
        click.echo(f"{key:18} {json.dumps(value) if isinstance(value, (dict, list)) else value}")
    if batches:
        click.echo("recent batches:")
        for b in batches:
            click.echo(f"  {b['committed_at']}  {b['messages']} messages, {b['rows']} rows, "
                       f"{b['dead_letter_rows']} dead letters, {b['duration_ms']} ms, {_committed(b, info)}")
    if seen:
        click.echo("writer schemas seen:")
        for v in seen:
            where = f"{v['subject']} version {v['version']}" if v["subject"] else "subject unknown"
            click.echo(f"  id {v['schema']}  {where}  {v['messages']} messages  first {v['first_seen_at']}  "
                       f"last {v['last_seen_at']}")
    if topics:
        from appliance.cli.patterns import echo_topics

        echo_topics(topics)
    if routes:
        from appliance.cli.routes import echo_routes

        echo_routes(routes)
    if mapping:
        click.echo("mapping:")
        click.echo(mapping, nl=False)


@stream.command("update")
@click.argument("name")
@click.option("--schema-evolution", type=click.Choice(["auto", "off"]), default=None,
              help="auto: new fields become columns and types widen, live; off: new fields are ignored.")
def stream_update(name: str, schema_evolution: str | None) -> None:
    """Change a stream's settings; a running engine applies them from the next batch."""
    from appliance.control.streams import update_stream

    if schema_evolution is None:
        raise click.UsageError("nothing to update: give --schema-evolution")
    s = update_stream(settings(), name, schema_evolution=schema_evolution)
    err(f"updated stream {name}: schema evolution {s.schema_evolution}")


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
    tables = f"the tables of its topics {kept}" if s.is_pattern else \
        f"the tables of its routes and {s.dead_letter_table} {kept}" if s.is_routed else \
        f"tables {s.table} and {s.dead_letter_table} {kept}"
    err(f"deleted stream {name}; {tables}")
