"""The words engine, CLI and UI share: stream phases, engine states, maintenance tasks and
outcomes, event kinds and levels.

They are `StrEnum`s: stored in SQLite and printed as their plain values, compared with
`is`/`==` in code, and spelled in exactly one place.
"""

from __future__ import annotations

from enum import StrEnum


class StreamPhase(StrEnum):
    """Where a stream stands, as the engine last wrote it (or `IDLE` before any engine ran it)."""

    IDLE = "idle"
    STARTING = "starting"
    RUNNING = "running"
    CATCHING_UP = "catching_up"
    FAILED = "failed"
    PAUSED = "paused"


class StagePhase(StrEnum):
    """Where a stage stands, as the engine last wrote it (or `IDLE` before any engine ran it)."""

    IDLE = "idle"
    RUNNING = "running"  # its source has rows it has not processed yet
    UP_TO_DATE = "up_to_date"
    FAILED = "failed"
    PAUSED = "paused"


class EngineState(StrEnum):
    STARTING = "starting"
    RUNNING = "running"
    STOPPED = "stopped"


class MaintenanceTask(StrEnum):
    RETENTION = "retention"
    COMPACT = "compact"
    EXPIRE = "expire"
    ORPHANS = "orphans"

    @property
    def title(self) -> str:
        return _TASK_TITLES[self]

    @property
    def noun(self) -> str:
        """What a sentence calls a run of it: "compaction of ingest.orders requested"."""
        return _TASK_NOUNS[self]


# The order `floe maintain` runs them in: retention first, so compaction does not rewrite
# rows about to go; expiry after compaction, so the files it replaced are deleted at once.
TASK_ORDER = (MaintenanceTask.RETENTION, MaintenanceTask.COMPACT, MaintenanceTask.EXPIRE, MaintenanceTask.ORPHANS)

_TASK_TITLES = {
    MaintenanceTask.RETENTION: "Retention",
    MaintenanceTask.COMPACT: "Compaction",
    MaintenanceTask.EXPIRE: "Snapshot expiry",
    MaintenanceTask.ORPHANS: "Orphan files",
}
_TASK_NOUNS = {
    MaintenanceTask.RETENTION: "retention",
    MaintenanceTask.COMPACT: "compaction",
    MaintenanceTask.EXPIRE: "snapshot expiry",
    MaintenanceTask.ORPHANS: "orphan file removal",
}


class RunOutcome(StrEnum):
    OK = "ok"
    NOTHING_TO_DO = "nothing to do"
    DRY_RUN = "dry run"
    FAILED = "failed"
    BUSY = "busy"
    CANCELLED = "cancelled"


class RunTrigger(StrEnum):
    CLI = "cli"
    SCHEDULE = "schedule"
    REQUEST = "request"


class EngineAsk(StrEnum):
    """Work a `floe` command or the UI asks the running engine to do on its warm SparkSession
    (`engine_requests`), where it would otherwise start a JVM of its own."""

    PREVIEW = "preview"  # a stage query's result over a sample of its source
    CHECK = "check"  # a stage query's table columns, as saving the stage checks them
    WARM = "warm"  # the stage editor opened: get a preview's path through Spark ready, answered without waiting
    MAINTAIN = "maintain"  # `floe maintain`
    REPLAY = "replay"  # `floe dlq replay`, and its dry run
    PURGE = "purge"  # `floe dlq purge`

    @property
    def changes(self) -> bool:
        """It changes tables: once taken it is waited for as long as the engine lives (never done twice), and
        whoever does it records it in the audit trail, for the asker."""
        return self in (EngineAsk.MAINTAIN, EngineAsk.REPLAY, EngineAsk.PURGE)


class RequestState(StrEnum):
    """A maintenance run asked for that has no recorded outcome yet."""

    REQUESTED = "requested"  # no engine has taken it
    QUEUED = "queued"  # the engine took it and runs another first
    RUNNING = "running"


class EventLevel(StrEnum):
    INFO = "info"
    WARNING = "warning"
    ERROR = "error"


class EventKind(StrEnum):
    ENGINE_STARTED = "engine_started"
    ENGINE_STOPPED = "engine_stopped"
    DEPENDENCY_DOWN = "dependency_down"  # the catalog, the warehouse, a broker or a registry: the engine waits
    DEPENDENCY_BACK = "dependency_back"
    STREAM_CREATED = "stream_created"
    STREAM_PAUSED = "stream_paused"
    STREAM_RESUMED = "stream_resumed"
    STREAM_DELETED = "stream_deleted"
    STREAM_FAILED = "stream_failed"
    TOPIC_ADDED = "topic_added"  # a pattern stream took a topic that matches: its tables are made
    TOPIC_REMOVED = "topic_removed"  # a pattern stream's topic left the cluster: its ingest stops, its tables stay
    TOPIC_SKIPPED = "topic_skipped"  # a matching topic a pattern stream cannot take (yet): the reason
    ROUTE_ADDED = "route_added"  # a routed stream met a value naming a new table: its table is made
    ROUTE_REFUSED = "route_refused"  # a table a value names cannot be made: its messages are dead letters
    BROKER_UNREACHABLE = "broker_unreachable"
    STREAM_RECOVERED = "stream_recovered"
    REGISTRY_UNREACHABLE = "registry_unreachable"
    SCHEMA_EVOLVED = "schema_evolved"
    SCHEMA_CHANGED = "schema_changed"  # an incompatible change, or a new field left out
    TABLE_ALTERED = "table_altered"
    TABLE_TRUNCATED = "table_truncated"  # a change event's truncate emptied an upsert stream's table
    STREAM_UPDATED = "stream_updated"
    STAGE_CREATED = "stage_created"
    STAGE_UPDATED = "stage_updated"
    STAGE_PAUSED = "stage_paused"
    STAGE_RESUMED = "stage_resumed"
    STAGE_DELETED = "stage_deleted"
    STAGE_FAILED = "stage_failed"
    STAGE_RECOVERED = "stage_recovered"
    DATA_EXPIRED = "data_expired"
    PARTIAL_BATCH = "partial_batch"
    DEAD_LETTER_BURST = "dead_letter_burst"  # derived from the batches, never stored
    POLICY_CHANGED = "policy_changed"
    MAINTENANCE_RETENTION = "maintenance_retention"
    MAINTENANCE_COMPACT = "maintenance_compact"
    MAINTENANCE_EXPIRE = "maintenance_expire"
    MAINTENANCE_ORPHANS = "maintenance_orphans"
    SYSTEM_TABLES_FAILED = "system_tables_failed"
    ALERT_ADDED = "alert_added"
    ALERT_REMOVED = "alert_removed"
    INCIDENT_OPENED = "incident_opened"
    INCIDENT_RESOLVED = "incident_resolved"
    NOTIFICATION_FAILED = "notification_failed"
    NOTIFICATION_REQUEUED = "notification_requeued"  # undelivered before the engine stopped: queued again at start
    METRICS_FAILED = "metrics_failed"
    DEAD_LETTERS_REPLAYED = "dead_letters_replayed"
    DEAD_LETTERS_PURGED = "dead_letters_purged"

    @classmethod
    def maintenance(cls, task: MaintenanceTask) -> EventKind:
        return cls(f"maintenance_{task.value}")
