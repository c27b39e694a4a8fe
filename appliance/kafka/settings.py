"""How to reach a Kafka cluster: bootstrap servers and librdkafka options, secrets masked.

Plain data, no client library: a stream definition holds one without importing
confluent-kafka, and printing one (a log line, a repr, a worker's description) never
shows a password. An option or URL may hold secret references (`${env:NAME}`, `${file:/path}`):
they are kept as written and resolved only in the configs handed to a client, at each use.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable

from appliance.core.errors import KafkaConfigError, RegistryConfigError, SecretUnresolved
from appliance.core.secrets import REFERENCE, has_reference, references, resolve, resolve_all

SECRET_KEY = re.compile(r"(password|secret|token|credentials|private\.key|key\.pem|user\.info)", re.IGNORECASE)
MASK = "***"

# librdkafka properties Floe sets itself; a user-supplied value would break exactly-once.
OWNED = {"enable.auto.commit", "enable.auto.offset.store", "auto.offset.reset", "enable.partition.eof"}

PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
SASL_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")

_BOOTSTRAP = re.compile(r"^[^\s:,]+:\d{1,5}$")
_WORDS = re.compile(r"[^\s:,;=/\"']+")  # clear text beside a reference: masked, its punctuation kept


def is_secret(key: str) -> bool:
    return bool(SECRET_KEY.search(key))


def shown(key: str, value: str) -> str:
    """An option's value as it may be shown: a secret key's masked, but its references kept as written
    (a reference is not a secret); clear text beside a reference is masked word by word."""
    if not is_secret(key):
        return value
    if not has_reference(value):
        return MASK
    parts = REFERENCE.split(value)  # clear, provider, name, clear, provider, name, ..., clear
    out = [_WORDS.sub(MASK, parts[0])]
    for i in range(1, len(parts), 3):
        out.append(f"${{{parts[i]}:{parts[i + 1]}}}" + _WORDS.sub(MASK, parts[i + 2]))
    return "".join(out)


def reference_values(texts: Iterable[str]) -> list[str]:
    """The values the references in `texts` resolve to now, longest first, for scrubbing: those
    that do not resolve are skipped (scrubbing an error's text must never fail in turn). A
    `USER:PASSWORD` value gives its password too; a value of a few characters (a timeout's
    number) is no credential, and scrubbing it would garble every number of a message."""
    values = set()
    for text in texts:
        for reference in references(text):
            try:
                value = resolve(reference)
            except SecretUnresolved:
                continue
            values.update(v for v in (value, value.partition(":")[2]) if len(v) >= 4)
    return sorted(values, key=len, reverse=True)


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
        """The options as given: references as written (what is stored and shown)."""
        return dict(self.options)

    @property
    def has_references(self) -> bool:
        return any(has_reference(v) for _, v in self.options)

    def resolved_options(self) -> dict[str, str]:
        """The options with their references resolved now; SecretUnresolved names the first that is not."""
        return resolve_all(self.option_dict, "kafka option", is_secret)

    def masked_options(self) -> dict[str, str]:
        return {k: shown(k, v) for k, v in self.options}

    def __repr__(self) -> str:
        return f"KafkaSettings(bootstrap={self.bootstrap!r}, options={self.masked_options()!r})"

    def scrub(self, text: str) -> str:
        """`text` with every secret value replaced, for errors and logs: clear secrets, and what
        references resolve to (librdkafka's error texts may echo any option's value)."""
        secrets = [v for k, v in self.options if is_secret(k) and v and not has_reference(v)]
        for value in sorted(secrets, key=len, reverse=True) + reference_values(v for _, v in self.options):
            text = text.replace(value, MASK)
        return text

    def consumer_config(self, group: str, logger: Any = None, resolved: dict[str, str] | None = None,
                        **extra: Any) -> dict[str, Any]:
        """The consumer's configuration, references resolved now (`resolved`: the options already
        resolved by the caller, who compares them with those of a client it keeps)."""
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
        conf.update(self.resolved_options() if resolved is None else resolved)
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
# user info: up to an '@' before any '/', except inside a reference (`${file:/run/secrets/p}`)
_USERINFO = re.compile(r"(https?://)((?:\$\{[^}]*\}|[^@/,])+)@")


@dataclass(frozen=True)
class RegistrySettings:
    """How to reach a schema registry (Confluent's REST API: Confluent, Redpanda, Karapace)."""

    url: str
    options: tuple[tuple[str, str], ...] = field(default=(), repr=False)

    @classmethod
    def create(cls, url: str, options: dict[str, str] | None = None) -> RegistrySettings:
        url = (url or "").strip().rstrip("/")
        if not url or not _url_shaped(url):
            raise RegistryConfigError(f"schema registry URL {mask_url(url)!r} must be http(s)://HOST[:PORT][/PATH]")
        options = dict(options or {})
        for key, value in options.items():
            if key not in REGISTRY_OPTIONS:
                raise RegistryConfigError(f"schema registry option {key!r} is not one Floe passes on "
                                          f"(use one of {', '.join(REGISTRY_OPTIONS)})")
            if key in REGISTRY_NUMBERS and not has_reference(value) and not _NUMBER.fullmatch(str(value).strip()):
                raise RegistryConfigError(f"schema registry option {key} must be a number, not {value!r}")
        return cls(url, tuple(sorted(options.items())))

    @property
    def display_url(self) -> str:
        return mask_url(self.url)

    def masked_options(self) -> dict[str, str]:
        return {k: shown(k, v) for k, v in self.options}

    def __repr__(self) -> str:
        return f"RegistrySettings(url={self.display_url!r}, options={self.masked_options()!r})"

    def scrub(self, text: str) -> str:
        """`text` with every secret value (and any password in the URL) replaced, and what references
        in the options and the URL resolve to."""
        secrets = [v for k, v in self.options if is_secret(k) and v and not has_reference(v)]
        passwords = [_userinfo(m.group(2))[2] for m in _USERINFO.finditer(self.url)]
        secrets += [p for p in passwords if p and not has_reference(p)]
        secrets = sorted(secrets, key=len, reverse=True)
        for value in secrets + reference_values([self.url, *(v for _, v in self.options)]):
            text = text.replace(value, MASK)
        return text

    def client_config(self) -> dict[str, Any]:
        """SchemaRegistryClient's configuration, references resolved now (numbers as numbers: the
        client checks their types); SecretUnresolved names a reference that does not resolve."""
        conf: dict[str, Any] = {"url": resolve(self.url, "schema registry URL")}
        for key, value in resolve_all(dict(self.options), "schema registry option", is_secret).items():
            if key in REGISTRY_NUMBERS:
                if not _NUMBER.fullmatch(value.strip()):  # only a reference's value can be wrong here
                    raise RegistryConfigError(f"schema registry option {key} must be a number")
                value = float(value) if "." in value else int(value)
            conf[key] = value
        return conf


_NUMBER = re.compile(r"\d+(\.\d+)?")


def _url_shaped(url: str) -> bool:
    """Whether each of the URLs looks like one. References stand for text of any shape: the URL is
    checked with a plain word in their place, or, when a reference is more than a part (the whole
    URL, its host), with its value, looked at and forgotten; one that does not resolve here is left
    to its use, which names it."""
    def shaped(text: str) -> bool:
        return all(_URL.match(u.strip()) for u in text.split(","))

    with_words = shaped(REFERENCE.sub("secret", url))
    if with_words or not has_reference(url):
        return with_words
    try:
        return shaped(resolve(url))
    except SecretUnresolved:
        return True


def mask_url(url: str) -> str:
    """A URL with the password of its `user:password@` part masked (a reference is shown as written)."""
    def masked(m: re.Match) -> str:
        user, colon, password = _userinfo(m.group(2))
        if colon and not (has_reference(password) and not REFERENCE.sub("", password)):
            password = MASK
        return f"{m.group(1)}{user}{colon}{password}@"

    return _USERINFO.sub(masked, url)


def _userinfo(text: str) -> tuple[str, str, str]:
    """`user:password` split at its first ':' outside a reference, as str.partition splits."""
    spans = [m.span() for m in REFERENCE.finditer(text)]
    for i, c in enumerate(text):
        if c == ":" and not any(a <= i < b for a, b in spans):
            return text[:i], ":", text[i + 1:]
    return text, "", ""
