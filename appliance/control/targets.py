"""A new stream's targets: the names suggested for its tables and its own, and what is wrong with those
typed (the wizard checks them as they are typed: their spelling here, whether another stream or a stage
has them in the state database), and how its tables are partitioned by default."""

from __future__ import annotations

from appliance.config.settings import Settings
from appliance.control.fields import Field, Problems
from appliance.core.errors import InvalidName, InvalidPartitioning
from appliance.model.names import check_identifier, check_stream_name, check_table_name, snake_case
from appliance.model.partitioning import Partitioning
from appliance.state.store import StateStore
from appliance.tables.system import refuse_system

STREAM_NAME_MAX = 63
# A new stream's table: one partition a day of the time Kafka stamped each message. Never null and
# close to arrival order, so a live batch writes one day (two around midnight) and a day's files
# are compacted together; and the column retention reads by default, so a retention period drops
# whole days of files without rewriting one. An event-time column of the messages' own is a
# better choice when queries filter on it (the wizard proposes it when it infers one).
DEFAULT_PARTITIONING = "day(_kafka_timestamp)"
DEAD_LETTER_PARTITIONING = Partitioning.parse("day(_ingested_at)")


def suggested_table(topic: str) -> str:
    return snake_case(topic) if topic else ""


def suggested_dead_letter_table(settings: Settings, table: str) -> str:
    return f"{table}{settings.dead_letter_suffix}" if table else ""


def suggested_stream_name(table: str) -> str:
    return table.lstrip("_")[:STREAM_NAME_MAX]


def qualified(namespace: str, name: str) -> str:
    """A table name as typed next to a namespace: `NAME` is in that namespace, `NS.NAME` says its own."""
    return name if "." in name else f"{namespace}.{name}"


def check_target(namespace: str, table: str, dead_letter_table: str, stream: str,
                 partition_by: str = DEFAULT_PARTITIONING) -> Problems:
    """What is wrong with the names of a new stream and its tables, and the way its table is written
    as partitioned, by field; nothing is read (the partitioning's columns are checked at create)."""
    problems: Problems = {}
    try:
        Partitioning.parse(partition_by)
    except InvalidPartitioning as exc:
        problems[Field.PARTITIONING] = str(exc)
    try:
        check_identifier(namespace, "namespace")
    except InvalidName as exc:
        problems[Field.NAMESPACE] = str(exc)
    try:
        check_identifier(table, "table")
        if Field.NAMESPACE not in problems:
            check_table_name(f"{namespace}.{table}")
            refuse_system(f"{namespace}.{table}")
    except InvalidName as exc:
        problems[Field.TABLE] = str(exc)
    if not dead_letter_table:
        problems[Field.DEAD_LETTER_TABLE] = "a dead-letter table is required"
    else:
        try:
            check_table_name(qualified(namespace, dead_letter_table))
            refuse_system(qualified(namespace, dead_letter_table), "dead-letter table")
            if qualified(namespace, dead_letter_table) == f"{namespace}.{table}":
                raise InvalidName("the dead-letter table must differ from the target table")
        except InvalidName as exc:
            problems[Field.DEAD_LETTER_TABLE] = str(exc)
    try:
        check_stream_name(stream)
    except InvalidName as exc:
        problems[Field.STREAM] = str(exc)
    return problems


def conflicts(state: StateStore, name: str, table: str, dead_letter_table: str) -> Problems:
    """The names of a new stream that another stream or a stage has taken, by field: what create refuses."""
    problems: Problems = {}
    streams, stages = state.streams(), state.stages()
    if any(other.name == name for other in streams):
        problems[Field.STREAM] = f"stream {name!r} already exists"
    elif any(stage.name == name for stage in stages):
        problems[Field.STREAM] = (f"a stage is named {name!r}: streams and stages share their names' events; "
                                  "choose another")
    for where, wanted in ((Field.TABLE, table), (Field.DEAD_LETTER_TABLE, dead_letter_table)):
        by_stage = next((s.name for s in stages if s.table == wanted), None)
        by_stream = next((s.name for s in state.table_writers() if wanted in (s.table, s.dead_letter_table)), None)
        if by_stage is not None:
            problems[where] = f"table {wanted} is written by stage {by_stage!r}"
        elif by_stream is not None:
            problems[where] = f"table {wanted} is already written by stream {by_stream!r}"
    return problems


def taken_names(settings: Settings, name: str, table: str, dead_letter_table: str) -> Problems:
    """`conflicts` as the state database has them now; none before it exists (nothing is created here)."""
    if not settings.state_db.exists():
        return {}
    with StateStore(settings.state_db) as state:
        return conflicts(state, name, table, dead_letter_table)
