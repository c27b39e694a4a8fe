"""Stream operations the CLI and the UI share: create, list, show, pause, resume, delete.

Every check runs before anything is written, so a wrong call changes nothing.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from appliance.catalog import Catalog, committed_offsets, dead_letter_iceberg_schema, target_iceberg_schema
from appliance.errors import FloeError, InvalidName, KafkaConfigError, MappingError, StreamExists, TableConflict
from appliance.kafka_client import KafkaClient, KafkaSettings, SampledMessage
from appliance.mapping import Mapping, infer_mapping, sample_objects
from appliance.names import check_stream_name, check_table_name
from appliance.settings import Settings, ensure_home
from appliance.state import StateStore, StreamDef, now

FORMATS = ("json",)


def parse_kafka_options(pairs: list[str] | tuple[str, ...]) -> dict[str, str]:
    options: dict[str, str] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise KafkaConfigError(f"kafka option {pair.split('=')[0]!r} must be KEY=VALUE")
        options[key.strip()] = value.strip()
    return options


@dataclass
class CreatedStream:
    stream: StreamDef
    inferred: bool
    sampled: int
    mapping_file: Path


def _mapping_path(settings: Settings, name: str) -> Path:
    return settings.home / "mappings" / f"{name}.toml"


def create_stream(
    settings: Settings,
    name: str,
    *,
    bootstrap: str,
    topic: str,
    table: str,
    format: str = "json",
    mapping: str | Path | Mapping = "auto",
    starting_offsets: str = "earliest",
    dead_letter_table: str | None = None,
    kafka_options: dict[str, str] | None = None,
) -> CreatedStream:
    """Create stream `name`. `mapping` is "auto" (inferred from a sample of the topic), the path
    of a TOML mapping file, or a `Mapping` already built (the UI's edited one)."""
    check_stream_name(name)
    if format not in FORMATS:
        raise FloeError(f"format {format!r} is not supported; use one of: {', '.join(FORMATS)}")
    check_table_name(table)
    dead_letter_table = dead_letter_table or f"{table}{settings.dead_letter_suffix}"
    check_table_name(dead_letter_table)
    if dead_letter_table == table:
        raise InvalidName("the dead-letter table must differ from the target table")
    if starting_offsets not in ("earliest", "latest"):
        raise FloeError(f"starting offsets {starting_offsets!r} must be earliest or latest")
    if not topic:
        raise FloeError("a topic is required")
    kafka = KafkaSettings.create(bootstrap, kafka_options)
    if isinstance(mapping, Mapping):
        given: Mapping | None = mapping
    elif isinstance(mapping, (str, Path)):
        given = None if mapping == "auto" else Mapping.from_file(mapping)
    else:
        raise MappingError(f"mapping must be 'auto', a mapping file or a Mapping, not {type(mapping).__name__}")

    ensure_home(settings)
    state = StateStore(settings.state_db)
    try:
        if any(s.name == name for s in state.streams()):
            raise StreamExists(f"stream {name!r} already exists")
        for other in state.streams():
            if {table, dead_letter_table} & {other.table, other.dead_letter_table}:
                raise TableConflict(f"table {table} or {dead_letter_table} is already written by stream {other.name!r}")

        with KafkaClient(kafka, group=f"floe.{name}", timeout=settings.sample_timeout) as client:
            partitions = client.partitions(topic)
            marks = client.watermarks(topic, partitions)
            sampled: list[SampledMessage] = []
            if given is None:
                sampled = client.sample(topic, settings.sample_messages, settings.sample_timeout)
                if not sampled:
                    raise MappingError(
                        f"topic {topic!r} is empty: nothing to infer a mapping from; supply --mapping FILE"
                    )
                chosen = infer_mapping(sample_objects(m.value for m in sampled))
            else:
                chosen = given
        positions = {p: (w.low if starting_offsets == "earliest" else w.high) for p, w in marks.items()}

        catalog = Catalog(settings)
        target_schema = target_iceberg_schema(chosen)
        catalog.check_can_create(table, target_schema)
        catalog.check_can_create(dead_letter_table, dead_letter_iceberg_schema())
        stream = StreamDef(
            name=name,
            id=StateStore.new_id(),
            topic=topic,
            kafka=kafka,
            format=format,
            table=table,
            dead_letter_table=dead_letter_table,
            mapping=chosen,
            starting_offsets=starting_offsets,
            start_positions=positions,
            paused=False,
            created_at=now(),
        )
        created: list[str] = []
        try:
            for tname, schema in ((table, target_schema), (dead_letter_table, dead_letter_iceberg_schema())):
                _, fresh = catalog.ensure_table(tname, schema)
                if fresh:
                    created.append(tname)
            state.add_stream(stream)
        except BaseException:
            for tname in created:  # leave nothing behind from a failed create
                catalog.drop(tname)
            raise
        path = _mapping_path(settings, name)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(mapping_header_toml(stream))
        state.add_event("stream_created", f"stream created: {topic} -> {table}", name)
        return CreatedStream(stream, given is None, len(sampled), path)
    finally:
        state.close()


def mapping_header_toml(stream: StreamDef) -> str:
    return stream.mapping.to_toml(f"Floe mapping of stream {stream.name}: topic {stream.topic} -> {stream.table}")


def list_streams(settings: Settings) -> list[dict[str, Any]]:
    state = StateStore(settings.state_db)
    try:
        statuses = state.statuses()
        out = []
        for s in state.streams():
            st = statuses.get(s.name, {})
            out.append(
                {
                    "name": s.name,
                    "state": "paused" if s.paused else (st.get("phase") or "active"),
                    "topic": s.topic,
                    "table": s.table,
                    "rows": st.get("rows_total") or 0,
                    "dead_letters": st.get("dead_letter_total") or 0,
                    "lag": st.get("lag"),
                    "last_commit": st.get("last_commit_at") or "",
                    "last_error": st.get("last_error") or "",
                }
            )
        return out
    finally:
        state.close()


def show_stream(settings: Settings, name: str) -> dict[str, Any]:
    state = StateStore(settings.state_db)
    try:
        s = state.stream(name)
        status = state.status(name)
        batches = state.recent_batches(name, 5)
    finally:
        state.close()
    catalog = Catalog(settings)
    try:
        offsets = committed_offsets(catalog.table(s.table), s.id)
    except Exception as exc:  # the table may have been dropped by hand
        offsets = f"unavailable: {exc}"
    return {
        "name": s.name,
        "id": s.id,
        "state": "paused" if s.paused else (status.get("phase") or "active"),
        "topic": s.topic,
        "bootstrap": s.kafka.bootstrap,
        "kafka_options": s.kafka.masked_options(),
        "format": s.format,
        "table": s.table,
        "dead_letter_table": s.dead_letter_table,
        "starting_offsets": s.starting_offsets,
        "committed_offsets": offsets,
        "rows_total": status.get("rows_total") or 0,
        "dead_letter_total": status.get("dead_letter_total") or 0,
        "lag": status.get("lag"),
        "last_commit_at": status.get("last_commit_at"),
        "last_error": status.get("last_error"),
        "recent_batches": batches,
        "mapping": mapping_header_toml(s),
    }


def set_paused(settings: Settings, name: str, paused: bool) -> None:
    state = StateStore(settings.state_db)
    try:
        state.set_paused(name, paused)
        state.add_event("stream_paused" if paused else "stream_resumed", "paused" if paused else "resumed", name)
    finally:
        state.close()


def delete_stream(settings: Settings, name: str, drop_tables: bool = False) -> StreamDef:
    state = StateStore(settings.state_db)
    try:
        stream = state.stream(name)
        state.remove_stream(name)
        state.add_event("stream_deleted", "deleted" + (" with its tables" if drop_tables else ""), name)
    finally:
        state.close()
    if drop_tables:
        catalog = Catalog(settings)
        catalog.drop(stream.table)
        catalog.drop(stream.dead_letter_table)
    _mapping_path(settings, name).unlink(missing_ok=True)
    return stream
