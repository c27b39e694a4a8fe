"""Errors named by what went wrong, each marked retryable or not.

A retryable error is about the world (a broker that does not answer, a commit
that lost a race) and the engine tries again later; a terminal one is about
what the user asked for and is reported, never retried.
"""

from __future__ import annotations


class FloeError(Exception):
    """Base of every error Floe reports to a user as one line."""

    retryable = False

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message

    def __str__(self) -> str:
        return self.message


class ConfigError(FloeError):
    """A config file or a setting is malformed."""


class InvalidName(FloeError, ValueError):
    """A stream, namespace, table or column name is not allowed."""


class StreamNotFound(FloeError):
    """No stream has that name."""


class StreamExists(FloeError):
    """A stream with that name exists already."""


class MappingError(FloeError):
    """A mapping file or an inferred mapping cannot be used."""


class TableConflict(FloeError):
    """A table exists and cannot serve the stream as asked."""


class KafkaConfigError(FloeError):
    """A librdkafka property is unknown or has a bad value."""


class BrokerUnreachable(FloeError):
    """The Kafka cluster did not answer in time."""

    retryable = True


class TopicNotFound(FloeError):
    """The topic does not exist on the cluster."""


class WarehouseError(FloeError):
    """The warehouse's storage (S3, a local disk) failed a read or a write; often an outage."""

    retryable = True


class QueryError(FloeError):
    """A SQL statement failed; the message is DuckDB's."""


class CommitConflict(FloeError):
    """Another writer changed the table between our read and our commit."""

    retryable = True


class OffsetsConflict(FloeError):
    """The table holds offsets this engine did not expect: another engine writes this stream."""


class EngineBusy(FloeError):
    """Another `floe run` already holds this FLOE_HOME."""


class TableNotFound(FloeError):
    """No table or namespace of that name is in the catalog."""


class RewriteConflict(FloeError):
    """Files a maintenance task meant to replace were replaced or deleted meanwhile."""

    retryable = True


class MaintenanceBusy(FloeError):
    """Another process is running maintenance on that table."""

    retryable = True
