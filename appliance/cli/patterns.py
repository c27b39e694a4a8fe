"""`floe stream create --topic-pattern` and what `floe stream show` adds for a pattern stream."""

from __future__ import annotations

from typing import Any

import click

from appliance.cli.base import err, settings


def create_pattern(name: str, **arguments: Any) -> None:
    """Create pattern stream NAME; each topic taken is one line on stdout: topic, table, columns."""
    from appliance.control.patterns import create_pattern_stream

    created = create_pattern_stream(settings(), name, **arguments)
    s = created.stream
    for member in created.members:
        click.echo(f"{member.topic} -> {member.table} ({len(member.mapping.columns)} columns"
                   + (f", upsert by {', '.join(member.key)}" if member.key else "") + ")")
    for line in created.waiting:
        err(f"waiting: {line}")
    err(f"created stream {s.name}: topics matching {s.topic_pattern} -> {s.table} (dead letters: "
        f"{s.dead_letter_table}); {s.describe_mode()}; {len(created.members)} topics taken now, those that "
        "appear later are taken while the engine runs")


def echo_topics(topics: list[dict[str, Any]]) -> None:
    """A pattern stream's topics, one line each, as `floe stream show` prints them."""
    click.echo(f"topics ({len(topics)}):")
    for t in topics:
        offsets = t["committed_offsets"]
        at = ", ".join(f"{p}:{o}" for p, o in sorted(offsets.items())) if isinstance(offsets, dict) else offsets
        click.echo(f"  {t['topic']} -> {t['table']} (dead letters {t['dead_letter_table']}); {t['state']}; "
                   f"committed {at or 'nothing yet'}")
