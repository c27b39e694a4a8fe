"""`floe backup`, `floe restore`, `floe recover` and `floe service unit`: keeping a FLOE_HOME for months."""

from __future__ import annotations

from pathlib import Path

import click

from appliance.cli.base import cli, err, settings


def _report(recovery) -> None:
    """One line per table whose pointer changed (the others counted), then what was passed over or set aside."""
    changed = [t for t in recovery.tables if t.action != "unchanged"]
    for table in changed:
        where = table.location or table.was or ""
        click.echo(f"{table.action:11} {table.table}  {where}")
    click.echo(f"{len(recovery.tables)} tables: {len(changed)} changed, {len(recovery.tables) - len(changed)} "
               "already pointed at their newest metadata")
    for message in recovery.warnings:
        err(f"warning: {message}")
    for path in recovery.set_aside:
        err(f"set aside: {path}")


@cli.command()
@click.argument("directory", type=click.Path(path_type=Path))
def backup(directory: Path) -> None:
    """Copy the state database, the catalog (Floe's SQLite one) and floe.toml into DIRECTORY, new or empty.

    Safe while the engine runs: each database is copied consistently by SQLite's online backup. The
    tables' data and every stream's offsets are in the warehouse: back it up (or keep it on replicated
    storage) with your storage's own tools. `floe restore DIRECTORY` puts a backup back.
    """
    from appliance.control.backup import backup as make_backup

    made = make_backup(settings(), directory)
    click.echo(f"backed up {', '.join(made.files) or 'nothing (no state yet)'} to {made.directory}")
    if made.note:
        err(f"note: {made.note}")


@cli.command()
@click.argument("directory", type=click.Path(exists=True, file_okay=False, path_type=Path))
def restore(directory: Path) -> None:
    """Put the backup in DIRECTORY back into FLOE_HOME, then point each table at its newest metadata.

    The files it replaces are kept beside them (`state.db.before-restore-<time>`). The backup's catalog
    points at metadata files the tables have since replaced; each table is pointed at its newest one in
    the warehouse, so every stream resumes exactly where its table's offsets say. The engine must be stopped.
    """
    from appliance.control.backup import restore as put_back

    _report(put_back(settings(), directory))


@cli.command()
def recover() -> None:
    """Rebuild a lost or damaged catalog from the warehouse: each table pointed at its newest metadata file.

    For Floe's own SQLite catalog (a damaged file is set aside and made again) or a SQL catalog on
    PostgreSQL. Every table under the warehouse's namespaces is found again (streams' and their dead-letter
    tables, stages', the system tables); the offsets live in the tables' snapshots, so every stream resumes
    exactly once. The engine must be stopped.
    """
    from appliance.control.backup import recover as rebuild

    _report(rebuild(settings()))


@cli.group()
def service() -> None:
    """Run Floe as a service (systemd)."""


@service.command()
@click.option("--user", default=None, help="The user the engine runs as (default: you).")
@click.option("--env-file", type=click.Path(path_type=Path), default=None,
              help="The file that sets the secrets' environment variables (default: FLOE_HOME/floe.env).")
@click.option("--stop-timeout", type=click.IntRange(10, 3600), default=None,
              help="Seconds systemd waits for the engine to stop before it kills it (default 120).")
def unit(user: str | None, env_file: Path | None, stop_timeout: int | None) -> None:
    """Print a systemd unit that runs `floe run` on this FLOE_HOME, restarted when it fails.

    The unit names every environment variable a ${env:NAME} reference of the configuration needs (floe.toml,
    the streams' Kafka and schema registry options, the alerts' notification URLs): set them in the
    EnvironmentFile, mode 0600. Install it with `floe service unit | sudo tee /etc/systemd/system/floe.service`.
    """
    from appliance.control.service import STOP_TIMEOUT, service_unit

    made = service_unit(settings(), user, env_file.expanduser().resolve() if env_file else None,
                        stop_timeout or STOP_TIMEOUT)
    click.echo(made.text, nl=False)
