"""Errors named by what went wrong, each marked retryable or not.

A retryable error is about the world (a broker that does not answer, a commit
that lost a race) and the engine tries again later; a terminal one is about
what the user asked for and is reported, never retried.

Every error pickles with its type (its only argument is the message), so one raised
inside a Spark task reaches the engine, the CLI and the UI as itself.
"""

from __future__ import annotations


class FloeError(Exception):
    """Base of every error Floe reports to a user as one line."""

    retryable = False
    # What the engine depends on and waits for while this error says it is down ("catalog", "warehouse",
    # "broker", "schema registry"); None: not an outage.
    dependency: str | None = None

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message

    def __str__(self) -> str:
        return self.message

    def reworded(self, message: str) -> FloeError:
        """The same kind of error with another message."""
        return type(self)(message)


class UnforeseenError(FloeError):
    """Floe's own code raised what it did not foresee (a bug, or an input nobody imagined), in one
    stream's or task's work. That work alone fails and is retried; the message names the exception's
    type and text, and `detail` carries its traceback for the log."""

    retryable = True

    def __init__(self, message: str, detail: str = "") -> None:
        super().__init__(message)
        self.detail = detail

    def __reduce__(self):
        return (type(self), (self.message, self.detail))

    def reworded(self, message: str) -> FloeError:
        return type(self)(message, self.detail)

    @classmethod
    def of(cls, exc: BaseException, where: str = "") -> UnforeseenError:
        import traceback

        text = " ".join(str(exc).split()) or "(no message)"
        return cls(f"{where + ': ' if where else ''}{type(exc).__name__}: {text}",
                   "".join(traceback.format_exception(exc)))


class ConfigError(FloeError):
    """A config file or a setting is malformed."""


class SecretUnresolved(FloeError):
    """A secret reference (`${env:NAME}`, `${file:/path}`) names nothing there is: the message names the
    reference, never a value. An unset variable stays unset for the life of the process."""


class SecretUnreadable(SecretUnresolved):
    """A secret file that is missing or unreadable now: mounted secrets come and go as they rotate."""

    retryable = True


class InvalidName(FloeError, ValueError):
    """A stream, namespace, table or column name is not allowed."""


class InvalidRequest(FloeError):
    """Several fields of one request are wrong: `problems` says which, each in one line."""

    def __init__(self, message: str, problems: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.problems = dict(problems or {})

    def __reduce__(self):
        return (type(self), (self.message, self.problems))

    @classmethod
    def of(cls, problems: dict[str, str]) -> InvalidRequest:
        return cls("; ".join(dict.fromkeys(problems.values())), problems)


class TopicPatternError(InvalidName):
    """A pattern stream's regular expression or table template cannot be used (the message says which)."""


class RouteError(InvalidName):
    """A routed stream's field or table template cannot be used (the message says which)."""


class NotForPatterns(FloeError):
    """What a pattern stream cannot do as a whole (yet): the message says what can be done instead."""


class StreamNotFound(FloeError):
    """No stream has that name."""


class TopicNotInStream(FloeError):
    """A `--topic` that the stream does not read (a pattern stream: none of the topics it took)."""


class StreamExists(FloeError):
    """A stream with that name exists already."""


class DemoNotResumed(FloeError):
    """`floe demo` could not bring its new broker's topic to where its stream stands."""


class MappingError(FloeError):
    """A mapping file or an inferred mapping cannot be used."""


class InvalidPartitioning(FloeError):
    """A table's partitioning cannot be used as written (the message says which part and why)."""


class TableConflict(FloeError):
    """A table exists and cannot serve the stream as asked."""


# ---- Kafka ---------------------------------------------------------------------


class KafkaConfigError(FloeError):
    """A librdkafka property is unknown or has a bad value."""


class KafkaAccessDenied(FloeError):
    """The cluster refused the credentials (authentication) or the topic (authorisation)."""


class TopicNotFound(FloeError):
    """The topic does not exist on the cluster."""


class KafkaUnavailable(FloeError):
    """Kafka did not deliver what was asked for in time; trying again later can help."""

    retryable = True
    dependency = "broker"


class BrokerUnreachable(KafkaUnavailable):
    """The Kafka cluster did not answer, or answered with a transport error."""


class ReadTimeout(KafkaUnavailable):
    """A partition's messages did not arrive within the fetch timeout."""


# ---- schema registry ------------------------------------------------------------------


class RegistryConfigError(FloeError):
    """A schema registry URL or option is malformed or unknown."""


class RegistryUnavailable(FloeError):
    """The schema registry did not answer, or answered with a server error: the batch waits."""

    retryable = True
    dependency = "schema registry"


class RegistryAccessDenied(FloeError):
    """The schema registry refused the credentials."""


class SchemaNotFound(FloeError):
    """The schema registry has no schema of that id or subject."""


class SchemaError(FloeError):
    """A registered schema Floe cannot read or map (the message says which part)."""


# ---- tables and storage ----------------------------------------------------------


class WarehouseError(FloeError):
    """The warehouse's storage (S3, a local disk) failed a read or a write; often an outage."""

    retryable = True
    dependency = "warehouse"


class CatalogUnavailable(FloeError):
    """The Iceberg catalog (its database or REST service) did not answer or failed; often an outage."""

    retryable = True
    dependency = "catalog"


class CatalogAccessDenied(FloeError):
    """The Iceberg catalog refused Floe's credentials or the operation."""


class DiskUnwritable(FloeError):
    """A file under FLOE_HOME (the state database) cannot be written: its disk is full or read-only. Floe
    waits for space, and writes again once it can."""

    retryable = True
    dependency = "disk"


class SparkTaskLost(FloeError):
    """Spark lost a task's run, not its work's answer: its Python worker died or its connection to it
    broke. Nothing of that run was committed; the batch runs again from the table's offsets."""

    retryable = True


class CommitConflict(FloeError):
    """Another writer changed the table between our read and our commit."""

    retryable = True


class OffsetsConflict(FloeError):
    """The table holds offsets this engine did not expect: another engine writes this stream."""


class OffsetsBeyondTopic(FloeError):
    """The committed offsets are past the topic's end: the topic was recreated or truncated."""


class TableNotFound(FloeError):
    """No table or namespace of that name is in the catalog."""


class RewriteConflict(FloeError):
    """Files a maintenance task meant to replace were replaced or deleted meanwhile."""

    retryable = True


class KeyIndexStale(FloeError):
    """An upsert table's key index cannot be proven to match the table (a checkpoint of another table or
    key, a snapshot it cannot replay, a rewrite it cannot follow): it is built again from the table."""

    retryable = True


# ---- engine, maintenance, queries ------------------------------------------------------


class EngineBusy(FloeError):
    """Another `floe run` already holds this FLOE_HOME."""


class MaintenanceBusy(FloeError):
    """Another process is running maintenance on that table."""

    retryable = True


class RequestAbandoned(FloeError):
    """The engine stopped before it finished what a command asked of it: the command does it itself."""

    retryable = True


class EngineUnresponsive(FloeError):
    """The engine took a request that changes tables and has stopped answering, its process still there (hung):
    not done here, as it may still finish it."""

    retryable = True


class BackupError(FloeError):
    """A backup cannot be made there, or that directory holds no backup to restore (the message says why)."""


class RecoveryRefused(FloeError):
    """`floe recover` cannot rebuild this catalog: it is not a SQL catalog Floe keeps (a REST catalog's
    service keeps its own state), or an engine runs on this FLOE_HOME."""


# ---- stages ------------------------------------------------------------------------


class StageNotFound(FloeError):
    """No stage has that name."""


class StageExists(FloeError):
    """A stage with that name exists already."""


class StageQueryRefused(FloeError):
    """A stage's SQL is malformed, or cannot be kept incrementally (the message says why)."""


class StageFailed(FloeError):
    """A stage's run failed: its query at run time (a column gone, a division by zero...). Nothing
    was committed; the stage resumes from its last committed point once its SQL is fixed."""


class StageConflict(FloeError):
    """A run lost a race with another writer of the stage's table: it runs again."""

    retryable = True


class ReplayConflict(FloeError):
    """Dead letters a replay read were taken or rewritten meanwhile (another replay, compaction)."""

    retryable = True


class DeadLetterReplayUnsupported(FloeError):
    """The catalog cannot commit a stream's two tables at once, which a replay needs."""


class DeadLetterFilterInvalid(FloeError):
    """A `--where` over the dead-letter table that does not parse or does not run."""


class QueryError(FloeError):
    """A SQL statement failed; the message is DuckDB's."""


class QueryCancelled(QueryError):
    """The statement was interrupted before it finished."""


# ---- alerts ------------------------------------------------------------------------


class AlertNotFound(FloeError):
    """No alert of that name."""


class AlertExists(FloeError):
    """An alert of that name already exists (in the state database or in floe.toml)."""


class AlertRuleError(FloeError):
    """An alert's rule, window or notification URL cannot be used (the message says which and why)."""
