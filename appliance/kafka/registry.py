"""A schema registry as a stream's tasks reach it: writer schemas by id, asked once per id per worker.

Confluent's REST API (Confluent Schema Registry, Redpanda's, Karapace) through confluent-kafka's
`SchemaRegistryClient`. What goes wrong is told apart, because it decides a message's fate:
an id the registry does not know (404) is the message's fault and dead-letters it; a registry
that is down, slow or refuses the credentials is not, and the batch waits and is retried.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any

from appliance.core.errors import RegistryAccessDenied, RegistryConfigError, RegistryUnavailable, SchemaNotFound
from appliance.core.secrets import has_reference
from appliance.kafka.settings import RegistrySettings

_CLIENTS: dict[RegistrySettings, Registry] = {}
# The registry API's own "not found" codes (subject, version, schema), the same in Confluent's,
# Redpanda's and Karapace's registries.
NOT_FOUND_CODES = (40401, 40402, 40403)
_LOCK = threading.Lock()


@dataclass(frozen=True)
class WriterSchema:
    """A registered schema as the registry gave it, with the schemas it references (by import name)."""

    id: int
    schema_type: str  # AVRO, PROTOBUF or JSON
    text: str
    references: tuple[tuple[str, str, int], ...]  # (name, subject, version)


def registry(settings: RegistrySettings) -> Registry:
    """The one client of this registry in this process."""
    with _LOCK:
        found = _CLIENTS.get(settings)
        if found is None:
            found = _CLIENTS[settings] = Registry(settings)
        return found


class Registry:
    def __init__(self, settings: RegistrySettings) -> None:
        self.settings = settings
        self._config = settings.client_config()  # secret references resolved now, for this client
        self.client = self._connect(self._config)
        self._parsed: dict[tuple, Any] = {}
        self._lock = threading.Lock()

    def _connect(self, config: dict[str, Any]):
        from confluent_kafka.schema_registry import SchemaRegistryClient

        try:
            return SchemaRegistryClient(config)
        except (ValueError, TypeError) as exc:
            raise RegistryConfigError(f"schema registry: {self.settings.scrub(str(exc))}") from None

    def _renewed(self) -> bool:
        """After a refusal, the secret references resolved again: a rotated credential gets a client
        of its own (the schemas parsed so far stay). True when it did."""
        if not (has_reference(self.settings.url) or any(has_reference(v) for _, v in self.settings.options)):
            return False
        config = self.settings.client_config()
        if config == self._config:
            return False
        self.client, self._config = self._connect(config), config
        return True

    def schema(self, schema_id: int, fmt: str | None = None) -> WriterSchema:
        """The schema registered under `schema_id` (`fmt="serialized"`: Protobuf as a descriptor)."""
        found = self.raw(schema_id, fmt)
        refs = tuple((r.name, r.subject, r.version) for r in found.references or ())
        return WriterSchema(schema_id, found.schema_type or "AVRO", found.schema_str, refs)

    def raw(self, schema_id: int, fmt: str | None = None):
        """confluent-kafka's `Schema` for `schema_id`, for its serde helpers (references and all)."""
        return self.call(lambda: self.client.get_schema(schema_id, fmt=fmt), f"schema id {schema_id}")

    def versions_of(self, schema_id: int) -> list[tuple[str, int]]:
        """The (subject, version) pairs a schema id is registered under."""
        found = self.call(lambda: self.client.get_schema_versions(schema_id), f"versions of schema id {schema_id}")
        return sorted((v.subject, v.version) for v in found)

    def version(self, subject: str, version: int | str, fmt: str | None = None) -> tuple[int, WriterSchema]:
        """(version, schema) of a subject: a number, or "latest"."""
        if version == "latest":
            found = self.call(lambda: self.client.get_latest_version(subject, fmt=fmt), f"subject {subject!r}")
        else:
            found = self.call(lambda: self.client.get_version(subject, int(version), True, fmt),
                               f"subject {subject!r} version {version}")
        schema = found.schema
        refs = tuple((r.name, r.subject, r.version) for r in schema.references or ())
        return found.version, WriterSchema(found.schema_id, schema.schema_type or "AVRO", schema.schema_str, refs)

    def subjects(self) -> list[str]:
        return sorted(self.call(lambda: self.client.get_subjects(), "subjects"))

    def parsed(self, key: tuple, make) -> Any:
        """What `make()` builds from a schema (a decoder, say), built once per key."""
        with self._lock:
            found = self._parsed.get(key)
        if found is None:
            found = make()
            with self._lock:
                self._parsed[key] = found
        return found

    def forget(self, key: tuple) -> None:
        with self._lock:
            self._parsed.pop(key, None)

    def call(self, fn, what: str, renewed: bool = False):
        """`fn()`, its failures as Floe's errors (the registry's HTTP client raises its own kinds).
        `fn` reaches the registry through `self.client`: after a refusal it is asked again, once,
        of a client with the credentials as they resolve now."""
        from confluent_kafka.schema_registry.error import SchemaRegistryError

        try:
            return fn()
        except SchemaRegistryError as exc:
            status = exc.http_status_code
            text = self.settings.scrub(f"{what}: {exc.error_message}")
            if status == 404 and exc.error_code in NOT_FOUND_CODES:
                raise SchemaNotFound(f"schema registry {self.settings.display_url} does not know {text}") from None
            if status == 404:
                # A 404 without a registry's own code comes from something else at that URL (a
                # proxy, a wrong path): the messages are not at fault, so they must not be dead-lettered.
                raise RegistryUnavailable(f"{self.settings.display_url} answered {what} with HTTP 404 and no schema "
                                          "registry error code: is the URL a schema registry's?") from None
            if status in (401, 403):
                if not renewed and self._renewed():
                    return self.call(fn, what, renewed=True)
                raise RegistryAccessDenied(f"schema registry {self.settings.display_url} refused access: {text}"
                                           ) from None
            raise RegistryUnavailable(f"schema registry {self.settings.display_url}: {text} (HTTP {status})") from None
        except Exception as exc:  # connection refused, timeouts, TLS: httpx's own errors
            detail = self.settings.scrub(" ".join(str(exc).split()) or type(exc).__name__)
            raise RegistryUnavailable(f"schema registry {self.settings.display_url} unreachable ({what}): "
                                      f"{detail}") from None
