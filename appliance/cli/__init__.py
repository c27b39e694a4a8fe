"""The `floe` command. Diagnostics go to stderr; stdout is for results (query output, mappings).

Each command group lives in its own module and imports what it needs when it runs, so
`floe stream list` does not pay for Spark.
"""

from __future__ import annotations

import logging
import sqlite3
import sys

import click

from appliance.cli import admin, dlq, doctor, engine, maintenance, observe, query, stages, streams  # noqa: F401  (they add their commands)
from appliance.cli.base import cli, err
from appliance.core import hints
from appliance.core.errors import FloeError
from appliance.core.logfiles import logging_to_file
from appliance.core.private import keep_private


def failed(message: str) -> None:
    """The command's one-line error on stderr, and in FLOE_HOME's log once the command writes one (an
    operator reading the log sees what failed, not only what ran); exit 1."""
    err(message)
    if logging_to_file():
        logging.getLogger("appliance.cli").error(message)
    sys.exit(1)


def main() -> None:
    keep_private()  # what this command and the processes it starts write is for their owner alone
    try:
        cli.main(prog_name="floe", standalone_mode=False)  # `floe`, also as `python -m appliance.cli`
    except click.exceptions.Exit as exc:
        sys.exit(exc.exit_code)
    except click.exceptions.Abort:
        err("floe: aborted")
        sys.exit(130)
    except click.UsageError as exc:
        hint = f" (see `{hints.HELP.format(command=exc.ctx.command_path)}`)" if exc.ctx else ""
        err(f"floe: error: {exc.format_message()}{hint}")
        sys.exit(2)
    except click.ClickException as exc:
        failed(f"floe: error: {exc.format_message()}")
    except FloeError as exc:
        failed(f"floe: error: {exc}")
    except sqlite3.OperationalError as exc:  # the state database locked for too long, or its disk full
        failed(f"floe: error: the state database: {exc}")
    except KeyboardInterrupt:
        sys.exit(130)
