"""Stream operations the CLI, the demo and the UI share: check, create, pause, resume, delete.

Every check runs before anything is written, so a wrong call changes nothing; the
problems come back per field (`control.fields`), for a form to show where they belong.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from appliance.config.settings import Settings, ensure_home
from appliance.control.audit import audited
from appliance.control.fields import Field, Problems, raise_problems
from appliance.control.keys import change_rows, kafka_key_fields, proposed_key, row_columns, with_cdc_columns
from appliance.control.registered_mapping import default_subject, registry_mapping
from appliance.control.source import infer_from_sample
from appliance.control.targets import DEAD_LETTER_PARTITIONING, DEFAULT_PARTITIONING, conflicts
from appliance.core.clock import now
from appliance.core.errors import (
    InvalidName,
    InvalidPartitioning,
    KafkaConfigError,
    MappingError,
    RegistryConfigError,
    StreamExists,
    TableConflict,
)
from appliance.core.vocabulary import EventKind
from appliance.kafka.client import KafkaClient
from appliance.kafka.settings import KafkaSettings, RegistrySettings
from appliance.model.inference import infer_mapping
from appliance.model.kafka_columns import parse_kafka_columns, with_kafka_columns
from appliance.model.keys import check_key, key_columns
from appliance.model.mapping import Mapping
from appliance.model.names import (
    check_stream_name,
    check_table_name,
)
from appliance.model.partitioning import Partitioning
from appliance.model.stream import (
    CDC,
    FORMATS,
    MODES,
    REGISTRY_FORMATS,
    SCHEMA_EVOLUTION,
    STARTING_OFFSETS,
    StreamDef,
)
from appliance.state.store import StateStore
from appliance.tables.catalog import Catalog
from appliance.tables.evolution import ensure_bindings
from appliance.tables.iceberg_schemas import dead_letter_iceberg_schema, target_iceberg_schema
from appliance.tables.system import refuse_system

# ---- create -----------------------------------------------------------------------


@dataclass(frozen=True)
class StreamRequest:
    """A stream to create. `mapping` None: infer one from a sample of the topic."""

    name: str
    kafka: KafkaSettings
    topic: str
    table: str
    dead_letter_table: str
    mapping: Mapping | None = None
    starting_offsets: str = "earliest"
    format: str = "json"
    registry: RegistrySettings | None = None
    subject: str = ""  # the registry subject to map from, when the topic is empty (default TOPIC-value)
    schema_evolution: str = "auto"
    mode: str = "append"  # or "upsert": the table holds each key's newest row
    key: tuple[str, ...] = ()  # upsert: the key columns; empty: the Kafka key's fields
    cdc: str = ""  # "debezium": change events (an upsert stream)
    cdc_columns: bool = False  # keep the events' op, time and source position as _cdc_* columns
    partition_by: str = DEFAULT_PARTITIONING  # the target table's partitioning, as `Partitioning.parse` reads it
    kafka_columns: tuple[str, ...] = ()  # "key", "headers": the Kafka key and headers as _kafka_* columns


@dataclass
class CreatedStream:
    stream: StreamDef
    inferred: bool
    sampled: int
    mapping_file: Path


def check_request(name: str, topic: str, table: str, dead_letter_table: str, format: str = "json",
                  starting_offsets: str = "earliest", registry: RegistrySettings | None = None,
                  schema_evolution: str = "auto", mode: str = "append", key: tuple[str, ...] = (),
                  cdc: str = "", cdc_columns: bool = False, partition_by: str = DEFAULT_PARTITIONING,
                  kafka_columns: tuple[str, ...] = ()) -> Problems:
    """What is wrong with a stream request itself, by field, before any broker or table is asked."""
    problems: Problems = {}
    try:
        parse_kafka_columns(kafka_columns)
    except MappingError as exc:
        problems[Field.KAFKA_COLUMNS] = str(exc)
    for where, check in ((Field.STREAM, lambda: check_stream_name(name)),
                         (Field.TABLE, lambda: (check_table_name(table), refuse_system(table))),
                         (Field.DEAD_LETTER_TABLE, lambda: (check_table_name(dead_letter_table),
                                                            refuse_system(dead_letter_table, "dead-letter table")))):
        try:
            check()
        except InvalidName as exc:
            problems[where] = str(exc)
    if Field.DEAD_LETTER_TABLE not in problems and dead_letter_table == table:
        problems[Field.DEAD_LETTER_TABLE] = "the dead-letter table must differ from the target table"
    if format not in FORMATS:
        problems[Field.FORMAT] = f"format {format!r} is not supported; use one of: {', '.join(FORMATS)}"
    if format in REGISTRY_FORMATS and registry is None:
        problems.setdefault(Field.REGISTRY, f"format {format} needs a schema registry (--schema-registry URL)")
    if schema_evolution not in SCHEMA_EVOLUTION:
        problems[Field.SCHEMA_EVOLUTION] = f"schema evolution {schema_evolution!r} must be auto or off"
    if starting_offsets not in STARTING_OFFSETS:
        problems[Field.STARTING_OFFSETS] = f"starting offsets {starting_offsets!r} must be earliest or latest"
    if not topic:
        problems[Field.TOPIC] = "a topic is required"
    problems.update(_mode_problems(mode, key, cdc, cdc_columns))
    try:
        Partitioning.parse(partition_by)
    except InvalidPartitioning as exc:
        problems[Field.PARTITIONING] = str(exc)
    return problems


def _mode_problems(mode: str, key: tuple[str, ...], cdc: str, cdc_columns: bool) -> Problems:
    if mode not in MODES:
        return {Field.MODE: f"mode {mode!r} must be one of: {', '.join(MODES)}"}
    if cdc and cdc not in CDC:
        return {Field.MODE: f"change events {cdc!r} are not supported; use one of: {', '.join(CDC)}"}
    if cdc and mode != "upsert":
        return {Field.MODE: f"{cdc} change events make an upsert stream: leave out --mode or give --mode upsert"}
    if key and mode != "upsert":
        return {Field.KEY: "--key is for upsert streams: add --mode upsert"}
    if cdc_columns and not cdc:
        return {Field.MODE: "--cdc-columns keeps change events' fields: add --cdc debezium"}
    return {}


def connections(bootstrap: str, kafka_options: dict[str, str] | None, schema_registry: str | None,
                 registry_options: dict[str, str] | None, problems: dict
                 ) -> tuple[KafkaSettings | None, RegistrySettings | None]:
    """The cluster's and the registry's settings, each None with its problem noted in `problems`."""
    kafka = registry = None
    try:
        kafka = KafkaSettings.create(bootstrap, kafka_options)
    except KafkaConfigError as exc:
        problems[Field.BOOTSTRAP if "bootstrap" in str(exc) else Field.PROTOCOL] = str(exc)
    if schema_registry or registry_options:
        try:
            registry = RegistrySettings.create(schema_registry or "", registry_options)
        except RegistryConfigError as exc:
            problems[Field.REGISTRY] = str(exc)
    return kafka, registry


@audited("stream create")
def create_stream(settings: Settings, name: str, *, bootstrap: str, topic: str, table: str, format: str = "json",
                  mapping: str | Path | Mapping = "auto", starting_offsets: str = "earliest",
                  dead_letter_table: str | None = None, kafka_options: dict[str, str] | None = None,
                  schema_registry: str | None = None, registry_options: dict[str, str] | None = None,
                  subject: str | None = None, schema_evolution: str = "auto", mode: str | None = None,
                  key: str | tuple[str, ...] | list[str] = (), cdc: str = "", cdc_columns: bool = False,
                  partition_by: str = DEFAULT_PARTITIONING,
                  kafka_columns: str | tuple[str, ...] | list[str] = ()) -> CreatedStream:
    """Create stream `name`. `mapping` is "auto" (inferred from a sample of the topic, or for Avro and
    Protobuf read from the registry's schema), the path of a TOML mapping file, or a `Mapping`
    already built (the UI's edited one). `mode` "upsert" (implied by `cdc`) keeps each `key`'s newest
    row (`key`: "id", "id, tenant" or a list of column names); no key: the Kafka key's fields.
    `kafka_columns` ("key,headers", either or both) keeps the Kafka key and headers as columns."""
    mode = mode or ("upsert" if cdc else "append")
    key = key_columns(key)
    dead_letter_table = dead_letter_table or f"{table}{settings.dead_letter_suffix}"
    problems: dict = {}
    try:
        kafka_columns = parse_kafka_columns(kafka_columns)
    except MappingError as exc:
        problems[Field.KAFKA_COLUMNS] = str(exc)
    kafka, registry = connections(bootstrap, kafka_options, schema_registry, registry_options, problems)
    problems = {**check_request(name, topic, table, dead_letter_table, format, starting_offsets, registry,
                                schema_evolution, mode, key, cdc, cdc_columns, partition_by,
                                kafka_columns if not problems.get(Field.KAFKA_COLUMNS) else ()), **problems}
    raise_problems(problems)
    if isinstance(mapping, Mapping):
        given: Mapping | None = mapping
    elif isinstance(mapping, (str, Path)):
        given = None if mapping == "auto" else Mapping.from_file(mapping)
    else:
        raise MappingError(f"mapping must be 'auto', a mapping file or a Mapping, not {type(mapping).__name__}")
    return _create(settings, StreamRequest(name=name, kafka=kafka, topic=topic, table=table, mapping=given,
                                          starting_offsets=starting_offsets, dead_letter_table=dead_letter_table,
                                          format=format, registry=registry, subject=subject or "",
                                          schema_evolution=schema_evolution, mode=mode, key=key, cdc=cdc,
                                          cdc_columns=cdc_columns, partition_by=partition_by,
                                          kafka_columns=kafka_columns))


@audited("stream create", "request.name")
def create(settings: Settings, request: StreamRequest) -> CreatedStream:
    """Create the stream `request` describes (the UI's wizard)."""
    return _create(settings, request)


def _create(settings: Settings, request: StreamRequest) -> CreatedStream:
    raise_problems(check_request(request.name, request.topic, request.table, request.dead_letter_table,
                                 request.format, request.starting_offsets, request.registry,
                                 request.schema_evolution, request.mode, request.key, request.cdc,
                                 request.cdc_columns, request.partition_by, request.kafka_columns))
    ensure_home(settings)
    with StateStore(settings.state_db) as state:
        _check_free(state, request)
        stream, sampled = _resolve(settings, request)
        _create_tables(settings, state, stream, Partitioning.parse(request.partition_by))
        path = mapping_path(settings, stream.name)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(stream.mapping_toml())
        state.add_event(EventKind.STREAM_CREATED, f"stream created: {stream.topic} -> {stream.table}", stream.name)
    return CreatedStream(stream, request.mapping is None, sampled, path)


def _check_free(state: StateStore, request: StreamRequest) -> None:
    taken = conflicts(state, request.name, request.table, request.dead_letter_table)
    if Field.STREAM in taken:
        raise StreamExists(taken[Field.STREAM])
    for where in (Field.TABLE, Field.DEAD_LETTER_TABLE):
        if where in taken:
            raise TableConflict(taken[where])


def _resolve(settings: Settings, request: StreamRequest) -> tuple[StreamDef, int]:
    """The stream's definition: where each partition starts, its mapping (given or inferred) and key."""
    with KafkaClient(request.kafka, group=f"floe.{request.name}", timeout=settings.sample_timeout) as client:
        marks = client.watermarks(request.topic, client.partitions(request.topic))
        mapping, sampled, subject = request.mapping, 0, request.subject
        sample = client.sample(request.topic, settings.sample_messages, settings.sample_timeout) \
            if mapping is None or (request.mode == "upsert" and not request.key) else []
        if mapping is None:
            mapping, sampled, subject = _mapping_of(request, sample)
        elif request.cdc:
            mapping = with_cdc_columns(mapping, request.cdc_columns)
        if request.format in REGISTRY_FORMATS and not subject:
            subject = default_subject(request.topic)
        mapping = with_kafka_columns(mapping, request.kafka_columns)
    key = request.key
    if request.mode == "upsert":
        key = key or proposed_key(mapping, kafka_key_fields(sample, request.format, request.registry))
        if not key:
            raise_problems({Field.KEY: "an upsert stream needs a key (--key COLUMN[,COLUMN...]): the sampled "
                                       "messages' Kafka keys name no mapped column"})
        try:
            check_key(mapping, key)
        except MappingError as exc:
            raise_problems({Field.KEY: str(exc)})
    earliest = request.starting_offsets == "earliest"
    return StreamDef(
        name=request.name, id=StateStore.new_id(), topic=request.topic, kafka=request.kafka, format=request.format,
        table=request.table, dead_letter_table=request.dead_letter_table, mapping=mapping,
        starting_offsets=request.starting_offsets,
        start_positions={p: (w.low if earliest else w.high) for p, w in marks.items()},
        paused=False, created_at=now(), registry=request.registry, subject=subject,
        schema_evolution=request.schema_evolution, mode=request.mode, key=tuple(key), cdc=request.cdc,
        cdc_columns=request.cdc_columns, kafka_columns=request.kafka_columns,
    ), sampled


def _mapping_of(request: StreamRequest, sample: list) -> tuple[Mapping, int, str]:
    """The columns inferred from the sample, or the registry's writer schema's (a change event's row's)."""
    if request.format in REGISTRY_FORMATS:  # the writer schema's columns, no guessing
        found = registry_mapping(request.format, request.registry, request.topic, request.subject, sample)
        mapping = row_columns(found.mapping, request.cdc_columns) if request.cdc else found.mapping
        return mapping, len(sample), found.subject
    if request.cdc:
        rows = change_rows(sample)
        if not rows:
            raise MappingError(f"topic {request.topic!r} holds no Debezium change event to infer the columns from; "
                               "produce some first, or supply a mapping")
        return with_cdc_columns(infer_mapping(rows), request.cdc_columns), len(sample), ""
    inferred = infer_from_sample(request.topic, sample)
    return inferred.mapping, inferred.sampled, ""


def _create_tables(settings: Settings, state: StateStore, stream: StreamDef, partitioning: Partitioning,
                   record: Callable[[StreamDef], None] | None = None) -> None:
    """Both tables (or existing ones that fit) and the definition (`record`: a pattern's member), or nothing."""
    catalog = Catalog(settings)
    target = target_iceberg_schema(stream.mapping)
    try:
        partitioning.check(target)
    except InvalidPartitioning as exc:
        raise_problems({Field.PARTITIONING: str(exc)})
    tables = ((stream.table, target, partitioning),
              (stream.dead_letter_table, dead_letter_iceberg_schema(), DEAD_LETTER_PARTITIONING))
    for name, schema, _ in tables:
        catalog.check_can_create(name, schema)
    created: list[str] = []
    try:
        for name, schema, layout in tables:
            if catalog.ensure_table(name, schema, layout)[1]:
                created.append(name)
        ensure_bindings(settings, catalog.table(stream.table), stream.mapping)
        (record or state.add_stream)(stream)
    except BaseException:
        for name in created:  # leave nothing behind from a failed create
            catalog.drop(name)
        raise


# ---- pause, resume, delete -----------------------------------------------------------------


def mapping_path(settings: Settings, name: str) -> Path:
    return settings.home / "mappings" / f"{name}.toml"


@audited(lambda a: "stream pause" if a["paused"] else "stream resume")
def set_paused(settings: Settings, name: str, paused: bool) -> None:
    with StateStore(settings.state_db) as state:
        state.set_paused(name, paused)
        state.add_event(EventKind.STREAM_PAUSED if paused else EventKind.STREAM_RESUMED,
                        "paused" if paused else "resumed", name)


@audited("stream update")
def update_stream(settings: Settings, name: str, schema_evolution: str | None = None) -> StreamDef:
    """Change what can change in a running stream; the engine applies it from the next batch."""
    if schema_evolution is not None and schema_evolution not in SCHEMA_EVOLUTION:
        raise_problems({Field.SCHEMA_EVOLUTION: f"schema evolution {schema_evolution!r} must be auto or off"})
    with StateStore(settings.state_db) as state:
        stream = state.stream(name)
        if schema_evolution is not None and schema_evolution != stream.schema_evolution:
            state.update_stream(name, schema_evolution=schema_evolution)
            state.add_event(EventKind.STREAM_UPDATED, f"schema evolution {schema_evolution}", name)
        return state.stream(name)


@audited("stream delete")
def delete_stream(settings: Settings, name: str, drop_tables: bool = False) -> StreamDef:
    with StateStore(settings.state_db) as state:
        stream = state.stream(name)
        tables = state.tables_of(stream)  # a pattern stream's: every topic's two
        readers = [s.name for s in state.stages() if s.source in tables]
        if drop_tables and readers:
            raise TableConflict(f"stage {readers[0]!r} reads {name}'s tables: delete it first, or keep the tables")
        state.remove_stream(name)
        state.add_event(EventKind.STREAM_DELETED, "deleted" + (" with its tables" if drop_tables else ""), name)
    if drop_tables:
        catalog = Catalog(settings)
        for table in tables:
            catalog.drop(table)
        with StateStore(settings.state_db) as state:
            for table in tables:
                state.forget_table(table)
    mapping_path(settings, name).unlink(missing_ok=True)
    return stream
