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

from appliance.core.errors import KafkaConfigError, RegistryConfigError

SECRET_KEY = re.compile(r"(password|secret|token|credentials|private\.key|key\.pem|user\.info)", re.IGNORECASE)
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


def parse_registry_options(pairs: list[str] | tuple[str, ...]) -> dict[str, str]:
    """`KEY=VALUE` texts, as `--schema-registry-option` takes them, into a dict."""
    try:
        return parse_kafka_options(pairs)
    except KafkaConfigError as exc:
        raise RegistryConfigError(str(exc).replace("kafka option", "schema registry option")) from None


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


# ---- schema registry -----------------------------------------------------------------------

# confluent-kafka's SchemaRegistryClient keys a stream may set (`--schema-registry-option`).
REGISTRY_OPTIONS = (
    "basic.auth.credentials.source", "basic.auth.user.info",
    "bearer.auth.credentials.source", "bearer.auth.token", "bearer.auth.logical.cluster",
    "bearer.auth.identity.pool.id", "bearer.auth.issuer.endpoint.url", "bearer.auth.client.id",
    "bearer.auth.client.secret", "bearer.auth.scope",
    "ssl.ca.location", "ssl.certificate.location", "ssl.key.location",
    "timeout", "max.retries", "retries.wait.ms", "retries.max.wait.ms",
)
REGISTRY_NUMBERS = ("timeout", "max.retries", "retries.wait.ms", "retries.max.wait.ms")
_URL = re.compile(r"^https?://[^\s/?#]+(:\d{1,5})?(/[^\s]*)?$")
_USERINFO = re.compile(r"(https?://)([^@/,]+)@")


@dataclass(frozen=True)
class RegistrySettings:
    """How to reach a schema registry (Confluent's REST API: Confluent, Redpanda, Karapace)."""

    url: str
    options: tuple[tuple[str, str], ...] = field(default=(), repr=False)

    @classmethod
    def create(cls, url: str, options: dict[str, str] | None = None) -> RegistrySettings:
        url = (url or "").strip().rstrip("/")
        if not all(_URL.match(u.strip()) for u in url.split(",")) or not url:
            raise RegistryConfigError(f"schema registry URL {mask_url(url)!r} must be http(s)://HOST[:PORT][/PATH]")
        options = dict(options or {})
        for key, value in options.items():
            if key not in REGISTRY_OPTIONS:
                raise RegistryConfigError(f"schema registry option {key!r} is not one Floe passes on "
                                          f"(use one of {', '.join(REGISTRY_OPTIONS)})")
            if key in REGISTRY_NUMBERS and not re.fullmatch(r"\d+(\.\d+)?", str(value).strip()):
                raise RegistryConfigError(f"schema registry option {key} must be a number, not {value!r}")
        return cls(url, tuple(sorted(options.items())))

    @property
    def display_url(self) -> str:
        return mask_url(self.url)

    def masked_options(self) -> dict[str, str]:
        return {k: (MASK if is_secret(k) else v) for k, v in self.options}

    def __repr__(self) -> str:
        return f"RegistrySettings(url={self.display_url!r}, options={self.masked_options()!r})"

    def scrub(self, text: str) -> str:
        """`text` with every secret value (and any password in the URL) replaced."""
        secrets = [v for k, v in self.options if is_secret(k) and v]
        secrets += [m.group(2).split(":", 1)[1] for m in _USERINFO.finditer(self.url) if ":" in m.group(2)]
        for value in secrets:
            text = text.replace(value, MASK)
        return text

    def client_config(self) -> dict[str, Any]:
        """SchemaRegistryClient's configuration (numbers as numbers: the client checks their types)."""
        conf: dict[str, Any] = {"url": self.url}
        for key, value in self.options:
            conf[key] = (float(value) if "." in value else int(value)) if key in REGISTRY_NUMBERS else value
        return conf


def mask_url(url: str) -> str:
    """A URL with the password of its `user:password@` part masked."""
    return _USERINFO.sub(lambda m: m.group(1) + m.group(2).split(":")[0] + (":" + MASK if ":" in m.group(2) else "")
                         + "@", url)
