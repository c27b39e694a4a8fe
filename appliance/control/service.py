"""`floe service unit`: a systemd unit that runs this FLOE_HOME's engine as a service.

The engine runs as `floe run` as the given user, restarted when it fails. Its secrets come from an
EnvironmentFile that must set every variable a `${env:NAME}` reference names (floe.toml's catalog, S3
and alert settings, each stream's Kafka and schema registry options, each alert's notification URLs);
the unit names them. systemd stops it with SIGTERM to the engine alone (`KillMode=mixed`: Spark's JVM
and Python workers are the engine's to stop), which finishes or abandons the batch in flight, and
SIGKILLs what is left only after `TimeoutStopSec` (the offsets make even that safe).
"""

from __future__ import annotations

import getpass
import os
import shlex
import sys
from dataclasses import dataclass
from pathlib import Path

from appliance.config.settings import Settings
from appliance.control.doctor.configuration import setting_strings
from appliance.core.secrets import env_names
from appliance.state.alerting import all_alerts
from appliance.state.store import StateStore

STOP_TIMEOUT = 120  # seconds: the longest batch, the system tables' last round, Spark's stop
ENV_FILE = "floe.env"


def secret_variables(settings: Settings) -> list[str]:
    """Every environment variable a `${env:NAME}` reference of this FLOE_HOME names: in floe.toml (catalog,
    S3, alerts), in each stream's Kafka and schema registry options, in each alert's notification URLs."""
    texts = [text for _, text in setting_strings(settings)]
    if settings.state_db.exists():
        with StateStore(settings.state_db) as state:
            for stream in state.streams():
                sources = [stream.kafka] + ([stream.registry] if stream.registry else [])
                texts += [value for source in sources for _, value in source.options]
                texts.append(stream.kafka.bootstrap)
                texts.append(stream.registry.url if stream.registry else "")
            texts += [url for alert in all_alerts(settings, state) for url in alert.notify]
    return sorted({name for text in texts for name in env_names(text)})


@dataclass(frozen=True)
class Unit:
    text: str
    variables: list[str]  # what the EnvironmentFile must set
    env_file: Path


def floe_program() -> list[str]:
    """How this installation's `floe` is started: its console script beside this Python, or the module."""
    script = Path(sys.executable).parent / "floe"
    return [str(script)] if os.access(script, os.X_OK) else [sys.executable, "-m", "appliance.cli"]


def service_unit(settings: Settings, user: str | None = None, env_file: Path | None = None,
                 stop_timeout: int = STOP_TIMEOUT) -> Unit:
    """The unit's text for this FLOE_HOME, and the variables its EnvironmentFile must set."""
    user = user or getpass.getuser()
    env_file = env_file or settings.home / ENV_FILE
    variables = secret_variables(settings)
    environment = [f"Environment={_quoted(f'FLOE_HOME={settings.home}')}"]
    if os.environ.get("JAVA_HOME"):  # Spark's Java, as this shell finds it
        environment.append(f"Environment={_quoted('JAVA_HOME=' + os.environ['JAVA_HOME'])}")
    if variables:
        environment += [f"# {env_file} (mode 0600, owned by {user}) must set: {' '.join(variables)}",
                        f"EnvironmentFile={env_file}"]
    else:
        environment.append("# No ${env:...} reference in the configuration: no EnvironmentFile needed.")
    lines = [
        f"# Floe's engine for FLOE_HOME={settings.home}; written by `floe service unit`.",
        "# Install: floe service unit | sudo tee /etc/systemd/system/floe.service",
        "#          sudo systemctl daemon-reload && sudo systemctl enable --now floe",
        "# Its log: journalctl -u floe (the console); FLOE_HOME/logs/floe.log and spark.log (rolled).",
        "[Unit]",
        f"Description=Floe engine: Kafka topics into Iceberg tables ({settings.home})",
        "After=network-online.target",
        "Wants=network-online.target",
        "",
        "[Service]",
        "Type=simple",
        f"User={user}",
        *environment,
        f"ExecStart={shlex.join([*floe_program(), 'run'])}",
        "Restart=on-failure",
        "RestartSec=10s",
        "KillMode=mixed",
        "KillSignal=SIGTERM",
        f"TimeoutStopSec={stop_timeout}s",
        "UMask=0077",
        "NoNewPrivileges=yes",
        "",
        "[Install]",
        "WantedBy=multi-user.target",
    ]
    return Unit("\n".join(lines) + "\n", variables, env_file)


def _quoted(assignment: str) -> str:
    """An Environment= assignment, quoted when it holds a space (systemd's own quoting)."""
    return f'"{assignment}"' if any(c.isspace() for c in assignment) else assignment
