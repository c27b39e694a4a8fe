"""The `floe` command group and what every command shares: settings, logging, one-line errors."""

from __future__ import annotations

import logging
import signal
import threading
from typing import Any

import click

from appliance.config.settings import Settings, ensure_home, load_settings
from appliance.core.secrets import ScrubbingFormatter


def settings() -> Settings:
    """Settings of this FLOE_HOME, which exists afterwards; Floe's log goes to its logs/."""
    loaded = load_settings()
    ensure_home(loaded)
    log_to(logging.FileHandler(loaded.log_dir / "floe.log"))
    return loaded


def log_to(handler: logging.Handler) -> None:
    """Floe's and its libraries' log lines into `handler`, every secret scrubbed out of each line
    (a driver's message may carry a piece of a password)."""
    handler.setFormatter(ScrubbingFormatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    logging.basicConfig(handlers=[handler], level=logging.INFO)
    for noisy in ("py4j", "pyiceberg", "sqlalchemy"):
        logging.getLogger(noisy).setLevel(logging.WARNING)


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
