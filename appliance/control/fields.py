"""The fields of a stream request, and which of them an error is about.

A form (the UI's wizard) shows each problem next to its field; the CLI prints them on
one line. Both get them from here, so the rules live in one place.
"""

from __future__ import annotations

from enum import StrEnum

from appliance.core.errors import (
    FloeError,
    InvalidPartitioning,
    InvalidRequest,
    KafkaAccessDenied,
    KafkaConfigError,
    MappingError,
    RegistryAccessDenied,
    RegistryConfigError,
    RegistryUnavailable,
    SchemaError,
    SchemaNotFound,
    StreamExists,
    TableConflict,
    TopicNotFound,
)
from appliance.kafka.settings import KafkaSettings, RegistrySettings


class Field(StrEnum):
    BOOTSTRAP = "bootstrap"
    PROTOCOL = "protocol"
    MECHANISM = "mechanism"
    USERNAME = "username"
    PASSWORD = "password"
    CA = "ca"
    TOPIC = "topic"
    NAMESPACE = "namespace"
    TABLE = "table"
    DEAD_LETTER_TABLE = "dlq"
    STREAM = "stream"
    STARTING_OFFSETS = "offsets"
    FORMAT = "format"
    REGISTRY = "registry"
    REGISTRY_CREDENTIALS = "registry-credentials"
    SUBJECT = "subject"
    SCHEMA_EVOLUTION = "evolution"
    MAPPING = "mapping"
    MODE = "mode"
    KEY = "key"
    KAFKA_COLUMNS = "kafka-columns"
    PARTITIONING = "partitioning"


SOURCE_FIELDS = (Field.BOOTSTRAP, Field.PROTOCOL, Field.MECHANISM, Field.USERNAME, Field.PASSWORD, Field.CA,
                 Field.FORMAT, Field.REGISTRY, Field.REGISTRY_CREDENTIALS, Field.TOPIC)
TARGET_FIELDS = (Field.NAMESPACE, Field.TABLE, Field.DEAD_LETTER_TABLE, Field.STREAM, Field.STARTING_OFFSETS,
                 Field.PARTITIONING)

Problems = dict[Field, str]


def field_of(exc: BaseException) -> Field:
    """The field an error belongs next to."""
    text = str(exc)
    if isinstance(exc, InvalidRequest) and exc.problems:
        return Field(next(iter(exc.problems)))
    if "ssl.ca.location" in text:  # librdkafka reports a bad CA file when the client is made
        return Field.CA
    for kind, where in ((TopicNotFound, Field.TOPIC), (KafkaAccessDenied, Field.USERNAME),
                        (KafkaConfigError, Field.PROTOCOL), (StreamExists, Field.STREAM),
                        (TableConflict, Field.TABLE), (MappingError, Field.MAPPING),
                        (RegistryConfigError, Field.REGISTRY), (RegistryUnavailable, Field.REGISTRY),
                        (RegistryAccessDenied, Field.REGISTRY), (SchemaNotFound, Field.SUBJECT),
                        (SchemaError, Field.SUBJECT), (InvalidPartitioning, Field.PARTITIONING)):
        if isinstance(exc, kind):
            return where
    return Field.BOOTSTRAP


def failure(exc: BaseException, kafka: KafkaSettings | None = None,
            registry: RegistrySettings | None = None) -> tuple[str, Field]:
    """(one line, secrets scrubbed; the field it belongs next to) for any error of a request."""
    text = str(exc) if isinstance(exc, FloeError) else f"{type(exc).__name__}: {exc}"
    for settings in (kafka, registry):
        if settings is not None:
            text = settings.scrub(text)
    return " ".join(text.split()), field_of(exc)


def raise_problems(problems: Problems) -> None:
    if problems:
        raise InvalidRequest.of({str(k): v for k, v in problems.items()})
