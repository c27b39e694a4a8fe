"""A stream's definition as the state database's `streams` row, and back."""

from __future__ import annotations

import functools
import json
from typing import TYPE_CHECKING, Any

from appliance.core.clock import now
from appliance.kafka.settings import KafkaSettings, RegistrySettings

if TYPE_CHECKING:  # a definition's mapping is Arrow's and PyIceberg's types: `floe status` and lists need neither
    from appliance.model.stream import StreamDef


def stream_row(stream: StreamDef) -> dict[str, Any]:
    return {
        "name": stream.name,
        "id": stream.id,
        "topic": stream.topic,
        "bootstrap": stream.kafka.bootstrap,
        "kafka_options": json.dumps(stream.kafka.option_dict),
        "format": stream.format,
        "target_table": stream.table,
        "dead_letter_table": stream.dead_letter_table,
        "mapping": stream.mapping.to_toml() if stream.mapping.columns else "",  # a pattern's: each topic's own
        "starting_offsets": stream.starting_offsets,
        "start_positions": json.dumps({str(k): v for k, v in stream.start_positions.items()}),
        "paused": int(stream.paused),
        "created_at": stream.created_at,
        "updated_at": now(),
        "schema_registry": stream.registry.url if stream.registry else None,
        "registry_options": json.dumps(dict(stream.registry.options)) if stream.registry else None,
        "subject": stream.subject,
        "schema_evolution": stream.schema_evolution,
        "mode": stream.mode,
        "key_columns": json.dumps(list(stream.key)),
        "cdc": stream.cdc,
        "cdc_columns": int(stream.cdc_columns),
        "kafka_columns": ",".join(stream.kafka_columns),
        "topic_pattern": stream.topic_pattern,
        "table_template": stream.table_template,
        "partition_by": stream.partition_by,
        "route_by": stream.route_by,
    }


def stream_of_row(row: dict[str, Any]) -> StreamDef:
    return _stream_of(tuple(row.items()))


@functools.lru_cache(maxsize=4096)
def _stream_of(items: tuple) -> StreamDef:
    """A stream's definition from its row, parsed once per distinct row: the engine reads every stream's
    row each half second, and a mapping's TOML costs far more than the read (hundreds of streams)."""
    from appliance.model.mapping import Mapping  # Arrow's and PyIceberg's types: only where a mapping is read
    from appliance.model.stream import StreamDef

    row = dict(items)
    return StreamDef(
        name=row["name"],
        id=row["id"],
        topic=row["topic"],
        kafka=KafkaSettings(row["bootstrap"], tuple(sorted(json.loads(row["kafka_options"]).items()))),
        format=row["format"],
        table=row["target_table"],
        dead_letter_table=row["dead_letter_table"],
        mapping=Mapping.from_toml(row["mapping"], origin=f"stream {row['name']} mapping", stored=True)
        if row["mapping"] else Mapping.of_table(()),
        starting_offsets=row["starting_offsets"],
        start_positions={int(k): v for k, v in json.loads(row["start_positions"]).items()},
        paused=bool(row["paused"]),
        created_at=row["created_at"],
        registry=RegistrySettings(row["schema_registry"], tuple(sorted(json.loads(row["registry_options"] or "{}")
                                                                       .items())))
        if row.get("schema_registry") else None,
        subject=row.get("subject") or "",
        schema_evolution=row.get("schema_evolution") or "auto",
        mode=row.get("mode") or "append",
        key=tuple(json.loads(row.get("key_columns") or "[]")),
        cdc=row.get("cdc") or "",
        cdc_columns=bool(row.get("cdc_columns")),
        kafka_columns=tuple(c for c in (row.get("kafka_columns") or "").split(",") if c),
        topic_pattern=row.get("topic_pattern") or "",
        table_template=row.get("table_template") or "",
        partition_by=row.get("partition_by") or "",
        route_by=row.get("route_by") or "",
    )
