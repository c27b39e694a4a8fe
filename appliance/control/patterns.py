"""Pattern streams: every topic whose whole name matches a regular expression, each into its own tables.

`floe stream create --topic-pattern` checks the expression and the table template, records the stream and
takes the topics that match now; the running engine calls `discover_members` (given to it by `floe run`:
the engine cannot import this package) every few seconds to take the topics that appear later and to stop
those that left the cluster. A topic is taken as a stream of its own would be created (`streams._resolve`,
`streams._create_tables`: its mapping inferred or read from the registry, its key, both tables), and recorded
as the stream's member.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from appliance.config.settings import Settings, ensure_home
from appliance.control.audit import audited
from appliance.control.fields import Field, raise_problems
from appliance.control.streams import StreamRequest, _create_tables, _resolve, check_request, connections
from appliance.control.targets import DEFAULT_PARTITIONING, conflicts
from appliance.core.clock import now
from appliance.core.errors import (
    FloeError,
    InvalidName,
    MappingError,
    TableConflict,
    TopicNotFound,
)
from appliance.core.vocabulary import EventKind, EventLevel
from appliance.kafka.client import KafkaClient
from appliance.model.kafka_columns import parse_kafka_columns
from appliance.model.keys import key_columns
from appliance.model.mapping import Mapping
from appliance.model.partitioning import Partitioning
from appliance.model.patterns import Member, TopicPattern, changed_topics
from appliance.model.stream import StreamDef
from appliance.state.store import StateStore

log = logging.getLogger(__name__)


@dataclass
class CreatedPattern:
    stream: StreamDef
    members: list[Member]  # the topics taken now
    waiting: list[str]  # matching topics not taken (yet): empty, or the reason each was skipped


@audited("stream create")
def create_pattern_stream(settings: Settings, name: str, *, bootstrap: str, topic_pattern: str, table: str,
                          format: str = "json", mapping: str | Path | Mapping = "auto",
                          starting_offsets: str = "earliest", dead_letter_table: str | None = None,
                          kafka_options: dict[str, str] | None = None, schema_registry: str | None = None,
                          registry_options: dict[str, str] | None = None, schema_evolution: str = "auto",
                          mode: str | None = None, key: str | tuple[str, ...] | list[str] = (), cdc: str = "",
                          cdc_columns: bool = False, partition_by: str = DEFAULT_PARTITIONING,
                          kafka_columns: str | tuple[str, ...] | list[str] = ()) -> CreatedPattern:
    """Create pattern stream `name`: `table` (and `dead_letter_table`) are templates of `{topic}` and the
    pattern's groups `{1}`, `{2}`...; the other arguments are `create_stream`'s, for every topic."""
    mode = mode or ("upsert" if cdc else "append")
    dead_letter_table = dead_letter_table or f"{table}{settings.dead_letter_suffix}"
    pattern = dead_pattern = None
    problems = {}
    try:
        kafka_columns = parse_kafka_columns(kafka_columns)
    except MappingError as exc:
        problems[Field.KAFKA_COLUMNS] = str(exc)
        kafka_columns = ()
    for where, template in ((Field.TABLE, table), (Field.DEAD_LETTER_TABLE, dead_letter_table)):
        try:
            made = TopicPattern.parse(topic_pattern, template)
        except InvalidName as exc:
            problems.setdefault(Field.TOPIC if "regular expression" in str(exc) else where, str(exc))
            continue
        pattern, dead_pattern = (made, dead_pattern) if where == Field.TABLE else (pattern, made)
    kafka, registry = connections(bootstrap, kafka_options, schema_registry, registry_options, problems)
    if pattern and dead_pattern:
        problems = {**check_request(name, topic_pattern, pattern.example(), dead_pattern.example(), format,
                                    starting_offsets, registry, schema_evolution, mode, key_columns(key), cdc,
                                    cdc_columns, partition_by, kafka_columns), **problems}
    raise_problems(problems)
    given = mapping if isinstance(mapping, Mapping) else None if mapping == "auto" else Mapping.from_file(mapping)
    stream = StreamDef(
        name=name, id=StateStore.new_id(), topic=topic_pattern, kafka=kafka, format=format, table=table,
        dead_letter_table=dead_letter_table, mapping=given or Mapping.of_table(()), starting_offsets=starting_offsets,
        start_positions={}, paused=False, created_at=now(), registry=registry, schema_evolution=schema_evolution,
        mode=mode, key=key_columns(key), cdc=cdc, cdc_columns=cdc_columns, topic_pattern=topic_pattern,
        table_template=table, partition_by=partition_by, kafka_columns=kafka_columns)
    ensure_home(settings)
    with StateStore(settings.state_db) as state:
        taken = conflicts(state, name, "", "")
        if Field.STREAM in taken:
            raise_problems({Field.STREAM: taken[Field.STREAM]})
        with KafkaClient(kafka, group=stream.group, timeout=settings.sample_timeout) as client:
            topics = client.topics()  # the cluster answers before anything is recorded
        state.add_stream(stream)
        state.add_event(EventKind.STREAM_CREATED, f"stream created: topics matching {topic_pattern} -> {table}",
                        name)
        waiting = take_topics(settings, state, stream, topics, starting_offsets)
        return CreatedPattern(stream, [m for m in state.members(name).values() if m.active], waiting)


def discover_members(settings: Settings, stream: StreamDef) -> list[Member]:
    """What the engine runs of a pattern stream: its active members, once the topics that match now are taken
    (read from their earliest offsets) and those gone from the cluster are stopped."""
    with StateStore(settings.state_db) as state:
        with KafkaClient(stream.kafka, group=stream.group, timeout=settings.sample_timeout) as client:
            take_topics(settings, state, stream, client.topics(), "earliest", lambda topic: _gone(client, topic))
        return [m for m in state.members(stream.name).values() if m.active]


def _gone(client: KafkaClient, topic: str) -> bool:
    """A topic missing from the cluster's listing, asked for by name: only a topic the cluster says it does
    not know is gone (a listing from a broker that is still loading its metadata stops nothing)."""
    try:
        client.partitions(topic)
    except TopicNotFound:
        return True
    return False


def take_topics(settings: Settings, state: StateStore, stream: StreamDef, topics: list[str],
                starting_offsets: str, gone_indeed: Callable[[str], bool] = lambda topic: True) -> list[str]:
    """Members made of the matching topics not yet taken, members stopped whose topic is gone (`gone_indeed`
    asks the cluster again); the matching topics left waiting (no message yet, a dependency down for now, or
    a reason told once as an event)."""
    pattern = TopicPattern(stream.topic_pattern, stream.table_template)
    new, gone = changed_topics(pattern, state.members(stream.name), topics)
    for topic in filter(gone_indeed, gone):
        state.remove_member(stream.name, topic)
        table = state.members(stream.name)[topic].table
        state.add_event(EventKind.TOPIC_REMOVED, f"topic {topic} left the cluster: its ingest stopped, table "
                        f"{table} stays", stream.name, EventLevel.WARNING, table)
    waiting = []
    for topic in new:
        try:
            member = _take(settings, state, stream, topic, starting_offsets)
        except FloeError as exc:
            waiting.append(f"{topic}: {exc}")
            if exc.retryable:  # a dependency down (a registry, say): taken at a later look, the others go on
                log.warning("stream %s: topic %s not taken for now: %s", stream.name, topic, exc)
                continue
            if state.note_change(stream.name, f"topic {topic} skipped: {exc}"):  # told once
                state.add_event(EventKind.TOPIC_SKIPPED, f"topic {topic} matches but is not taken: {exc}",
                                stream.name, EventLevel.WARNING)
            continue
        if member is None:
            waiting.append(f"{topic}: no message yet")
    return waiting


def _take(settings: Settings, state: StateStore, stream: StreamDef, topic: str, starting_offsets: str
          ) -> Member | None:
    """The topic as a member of `stream`, its tables made; None while it holds no message to infer from."""
    table = TopicPattern(stream.topic_pattern, stream.table_template).table_for(topic)
    dead_letter_table = TopicPattern(stream.topic_pattern, stream.dead_letter_table).table_for(topic)
    taken = conflicts(state, "", table, dead_letter_table)
    for where in (Field.TABLE, Field.DEAD_LETTER_TABLE):
        if where in taken:
            raise TableConflict(taken[where])
    given = stream.mapping if stream.mapping.columns else None
    if given is None:
        with KafkaClient(stream.kafka, group=stream.group, timeout=settings.sample_timeout) as client:
            if all(w.high <= w.low for w in client.watermarks(topic).values()):
                return None
    request = StreamRequest(
        name=stream.name, kafka=stream.kafka, topic=topic, table=table, dead_letter_table=dead_letter_table,
        mapping=given, starting_offsets=starting_offsets, format=stream.format, registry=stream.registry,
        schema_evolution=stream.schema_evolution, mode=stream.mode, key=stream.key, cdc=stream.cdc,
        cdc_columns=stream.cdc_columns, partition_by=stream.partition_by or DEFAULT_PARTITIONING,
        kafka_columns=stream.kafka_columns)
    made, _ = _resolve(settings, request)
    member = Member(stream.name, topic, made.id, table, dead_letter_table, made.mapping, made.start_positions,
                    made.created_at, made.key, made.subject)
    _create_tables(settings, state, made, Partitioning.parse(request.partition_by), lambda _: state.add_member(member))
    state.add_event(EventKind.TOPIC_ADDED, f"topic {topic} -> {table} ({len(made.mapping.columns)} columns)",
                    stream.name, table=table)
    return member

