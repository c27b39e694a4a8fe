"""`floe stream create --route-by`, and what `floe stream show` adds for a routed stream."""

from __future__ import annotations

from typing import Any

import click

from appliance.cli.base import err, settings


def create_routed(name: str, *, mapping: str, subject: str | None, cdc_columns: bool,
                  kafka_options: tuple[str, ...], registry_options: tuple[str, ...], **arguments: Any) -> None:
    """Create routed stream NAME: its tables are made by the engine as their values appear."""
    from appliance.control.routes import create_routed_stream
    from appliance.kafka.settings import parse_kafka_options, parse_registry_options

    for given, option in ((mapping != "auto", "--mapping"), (subject, "--subject"),
                          (cdc_columns, "--cdc-columns")):
        if given:
            raise click.UsageError(f"{option} does not apply with --route-by: each table's columns come from its "
                                   "own messages")
    arguments["key"] = arguments["key"] or ()  # needed with --mode upsert; --cdc refused, in one line
    s = create_routed_stream(settings(), name, kafka_options=parse_kafka_options(kafka_options),
                             registry_options=parse_registry_options(registry_options), **arguments)
    err(f"created stream {s.name}: {s.topic} routed by {s.route_by} -> {s.table} (dead letters: "
        f"{s.dead_letter_table}); {s.describe_mode()}; each value's table is made while the engine runs")


def echo_routes(routes: list[dict[str, Any]]) -> None:
    """A routed stream's tables, one line each, as `floe stream show` prints them."""
    click.echo(f"routes ({len(routes)}):")
    for r in routes:
        offsets = r["committed_offsets"]
        at = ", ".join(f"{p}:{o}" for p, o in sorted(offsets.items())) if isinstance(offsets, dict) else offsets
        state = f"refused: {r['refused']}" if r["refused"] else f"committed {at or 'nothing yet'}"
        click.echo(f"  {r['value']} -> {r['table']}; {state}")
