"""The `floe` command group and what every command shares: settings, logging, one-line errors."""

from __future__ import annotations

import os
import signal
import threading
from pathlib import Path
from typing import Any

import click

from appliance.config.settings import Settings, ensure_home, load_settings
from appliance.core.logfiles import CONSOLE_LOG, capture_console, log_to


def settings() -> Settings:
    """Settings of this FLOE_HOME, which exists afterwards; Floe's log goes to its logs/."""
    loaded = load_settings()
    ensure_home(loaded)
    log_to(loaded.log_dir / "floe.log", loaded.logs.max_bytes, loaded.logs.keep, loaded.logs.level)
    console = os.environ.pop(CONSOLE_LOG, "")
    if console:
        capture_console(Path(console), loaded.logs.max_bytes, loaded.logs.keep)
    return loaded


def err(message: str) -> None:
    """Diagnostics go to stderr: stdout is for results (query output, mappings)."""
    click.echo(message, err=True)


def install_stop(stop: threading.Event) -> None:
    """SIGINT/SIGTERM set `stop`; a second one exits at once (the offsets make that safe)."""
    def handler(signum: int, _frame: Any) -> None:
        if stop.is_set():
            raise SystemExit(130)
        err("stopping after the current batch (signal again to force)")
        stop.set()

    signal.signal(signal.SIGINT, handler)
    signal.signal(signal.SIGTERM, handler)


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="floe", prog_name="floe")
def cli() -> None:
    """Floe: Kafka topics into Apache Iceberg tables, exactly once.

    State, catalog and warehouse live under FLOE_HOME (default ~/.floe).
    """
