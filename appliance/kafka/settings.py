"""How to reach a Kafka cluster: bootstrap servers and librdkafka options, secrets masked.

Plain data, no client library: a stream definition holds one without importing
confluent-kafka, and printing one (a log line, a repr, a worker's description) never
shows a password.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from appliance.core.errors import KafkaConfigError

SECRET_KEY = re.compile(r"(password|secret|token|credentials|private\.key|key\.pem)", re.IGNORECASE)
MASK = "***"

# librdkafka properties Floe sets itself; a user-supplied value would break exactly-once.
OWNED = {"enable.auto.commit", "enable.auto.offset.store", "auto.offset.reset", "enable.partition.eof"}

PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
SASL_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")

_BOOTSTRAP = re.compile(r"^[^\s:,]+:\d{1,5}$")


def is_secret(key: str) -> bool:
    return bool(SECRET_KEY.search(key))


def parse_kafka_options(pairs: list[str] | tuple[str, ...]) -> dict[str, str]:
    """`KEY=VALUE` texts, as `--kafka-option` takes them, into a dict."""
    options: dict[str, str] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise KafkaConfigError(f"kafka option {pair.split('=')[0]!r} must be KEY=VALUE")
        options[key.strip()] = value.strip()
    return options


def security_options(protocol: str, mechanism: str = "", username: str = "", password: str = "",
                     ca_location: str = "") -> dict[str, str]:
    """The librdkafka options for a security protocol and its credentials, as `--kafka-option` takes them.

    Only what the protocol uses is kept: a SASL password typed before switching to SSL is dropped.
    """
    options: dict[str, str] = {}
    if protocol != "PLAINTEXT":
        options["security.protocol"] = protocol
    if protocol.startswith("SASL"):
        options["sasl.mechanisms"] = mechanism
        if username:
            options["sasl.username"] = username
        if password:
            options["sasl.password"] = password
    if protocol in ("SSL", "SASL_SSL") and ca_location:
        options["ssl.ca.location"] = str(Path(ca_location).expanduser())
    return options


@dataclass(frozen=True)
class KafkaSettings:
    bootstrap: str
    options: tuple[tuple[str, str], ...] = field(default=(), repr=False)

    @classmethod
    def create(cls, bootstrap: str, options: dict[str, str] | None = None) -> KafkaSettings:
        bootstrap = (bootstrap or "").strip()
        if not bootstrap or not all(_BOOTSTRAP.match(b.strip()) for b in bootstrap.split(",")):
            raise KafkaConfigError(f"bootstrap servers {bootstrap!r} must be HOST:PORT[,HOST:PORT...]")
        options = dict(options or {})
        for key in options:
            if key in OWNED or key == "bootstrap.servers":
                raise KafkaConfigError(f"kafka option {key!r} is set by Floe and cannot be overridden")
        return cls(bootstrap, tuple(sorted(options.items())))

    @property
    def option_dict(self) -> dict[str, str]:
        return dict(self.options)

    def masked_options(self) -> dict[str, str]:
        return {k: (MASK if is_secret(k) else v) for k, v in self.options}

    def __repr__(self) -> str:
        return f"KafkaSettings(bootstrap={self.bootstrap!r}, options={self.masked_options()!r})"

    def scrub(self, text: str) -> str:
        """`text` with every secret value replaced, for errors and logs."""
        for key, value in self.options:
            if is_secret(key) and value:
                text = text.replace(value, MASK)
        return text

    def consumer_config(self, group: str, logger: Any = None, **extra: Any) -> dict[str, Any]:
        conf: dict[str, Any] = {
            "bootstrap.servers": self.bootstrap,
            "group.id": group,
            "enable.auto.commit": False,
            "enable.auto.offset.store": False,
            "enable.partition.eof": False,
            # An offset out of range is decided by the engine (it compares with the
            # watermarks), never silently by the client.
            "auto.offset.reset": "error",
            # Records of aborted transactions are never data (librdkafka's default, said aloud).
            "isolation.level": "read_committed",
            "socket.connection.setup.timeout.ms": 10000,
        }
        if logger is not None:
            conf["logger"] = logger
        conf.update(dict(self.options))
        conf.update(extra)
        return conf
