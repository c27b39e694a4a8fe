"""`floe doctor`: the configuration checked end to end, one line per check."""

from __future__ import annotations

import sys

import click

from appliance.cli.base import cli


def _log_to_home() -> None:
    """Libraries' log lines into FLOE_HOME's log when there is one, never onto the report (its settings
    may be what is wrong: the log is rolled at its default size)."""
    import logging

    from appliance.config.settings import LogSettings, home_dir
    from appliance.core.logfiles import log_to

    log_dir = home_dir() / "logs"
    if log_dir.is_dir():
        log_to(log_dir / "floe.log", LogSettings().max_bytes, LogSettings().keep)
    else:
        logging.basicConfig(handlers=[logging.NullHandler()])


@cli.command()
@click.option("--format", "fmt", type=click.Choice(["text", "json"]), default="text", show_default=True)
@click.option("--timeout", type=click.FloatRange(0.5, 300), default=5.0, show_default=True,
              help="Seconds each check may wait for a server.")
def doctor(fmt: str, timeout: float) -> None:
    """Check the configuration end to end: floe.toml and its secret references, the catalog (reachable
    and writable), the warehouse (writable), each stream's broker and schema registry, Java and Spark.

    One line per check, with what to do when it fails; exits 1 when any check fails. Nothing is left
    behind: the catalog's throwaway table and the warehouse's probe object are removed again.
    """
    import dataclasses
    import json

    from appliance.control.doctor import diagnose, format_check

    _log_to_home()
    checks = diagnose(timeout=timeout)
    if fmt == "json":
        click.echo(json.dumps([{**dataclasses.asdict(c), "ok": c.ok} for c in checks], indent=2))
    else:
        width = max(len(c.name) for c in checks)
        for check in checks:
            click.echo(format_check(check, width))
    sys.exit(0 if all(c.ok for c in checks) else 1)
