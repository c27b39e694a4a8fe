"""`floe dlq`: a stream's dead letters listed, replayed into the target once the mapping is fixed, purged."""

from __future__ import annotations

import click

from appliance.cli.base import cli, err, settings

WHERE_HELP = "A SQL condition over the dead-letter table's columns, e.g. \"error_stage = 'convert'\"."
TOPIC_HELP = "A pattern stream's: the dead letters of this topic's table only (default: every topic's)."


@cli.group()
def dlq() -> None:
    """A stream's dead letters: list, replay, purge."""


@dlq.command("list")
@click.argument("stream")
@click.option("--where", default=None, help=WHERE_HELP)
@click.option("--topic", default=None, help=TOPIC_HELP)
@click.option("--limit", type=click.IntRange(1), default=50, show_default=True)
@click.option("--format", "fmt", type=click.Choice(["table", "csv", "json"]), default="table", show_default=True)
def dlq_list(stream: str, where: str | None, topic: str | None, limit: int, fmt: str) -> None:
    """The stream's dead letters, oldest offset first, with why each one failed; a pattern stream's topic by
    topic (column `topic`)."""
    from appliance.deadletters.listing import list_dead_letters
    from appliance.query.formatting import format_csv, format_json, format_table

    rows = list_dead_letters(settings(), stream, where, limit, topic=topic)
    click.echo({"table": format_table, "csv": format_csv, "json": format_json}[fmt](rows), nl=fmt == "table")


@dlq.command("replay")
@click.argument("stream")
@click.option("--where", default=None, help=WHERE_HELP + " Default: every dead letter of the stream.")
@click.option("--topic", default=None, help=TOPIC_HELP)
@click.option("--dry-run", is_flag=True, help="Say how many would move and why the others would stay; change nothing.")
@click.option("--format", "fmt", type=click.Choice(["text", "json"]), default="text", show_default=True)
def dlq_replay(stream: str, where: str | None, topic: str | None, dry_run: bool, fmt: str) -> None:
    """Decode dead letters again with the stream's current mapping; those that now decode move to the target
    (a pattern stream's: each topic's into its own table).

    A running engine (`floe run`) does it on its Spark session; without one, this command starts its own.
    """
    import json

    from appliance.control.dead_letters import replay_now

    report = replay_now(settings(), stream, where, dry_run, topic)
    if fmt == "json":
        click.echo(json.dumps(report.as_dict()))
        return
    for line in report.lines():
        click.echo(line)


@dlq.command("purge")
@click.argument("stream")
@click.option("--where", required=True, help=WHERE_HELP)
@click.option("--topic", default=None, help=TOPIC_HELP)
@click.option("--yes", is_flag=True, help="Do it: without it, nothing is deleted.")
def dlq_purge(stream: str, where: str, topic: str | None, yes: bool) -> None:
    """Delete the dead letters nobody wants (recorded in the audit trail); a pattern stream's table by table."""
    from appliance.control.dead_letters import purge_now

    if not yes:
        from appliance.deadletters.selection import check_where  # DuckDB's import: not when the engine purges

        check_where(where)
        raise click.UsageError("purge deletes dead letters for good: add --yes")
    report = purge_now(settings(), stream, where, topic)
    for line in report.lines():
        click.echo(line)
    if not report.deleted:
        err(f"{stream}: no dead letter matched")
