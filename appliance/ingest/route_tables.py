"""A routed stream's new tables, made while it runs: each route's mapping from its own messages, and its table.

A table a route value names for the first time gets the columns its messages carry: inferred from the sample its
tasks handed back (JSON, as `floe stream create` infers), or the writer schema the newest of them names (Avro,
Protobuf: the registry's, no guessing); a routed upsert stream's must hold its key columns (`model.keys.check_key`:
a route whose samples carry no key is refused). Its table is made as a stream's target is (partitioned as the
stream says, each column's source recorded). A table another stream or a stage writes, or an existing one of other
columns, is refused: the route is recorded with the reason and its messages go to the dead-letter table.
"""

from __future__ import annotations

from pyiceberg.table import Table

from appliance.config.settings import Settings
from appliance.core.errors import MappingError, SchemaError, SchemaNotFound, TableConflict
from appliance.decode import wire
from appliance.model.inference import infer_mapping, sample_objects
from appliance.model.kafka_columns import with_kafka_columns
from appliance.model.keys import check_key
from appliance.model.mapping import Mapping
from appliance.model.partitioning import Partitioning
from appliance.model.routes import Route
from appliance.model.stream import StreamDef
from appliance.state.store import StateStore
from appliance.tables.catalog import Catalog
from appliance.tables.evolution import ensure_bindings
from appliance.tables.iceberg_schemas import target_iceberg_schema

PARTITIONING = "day(_kafka_timestamp)"  # a routed stream's tables', unless it was created with its own


def route_mapping(stream: StreamDef, samples: list[bytes]) -> Mapping:
    """The columns of a new route's table, from its messages (those with a value: a tombstone has no columns)."""
    samples = [v for v in samples if v is not None]
    if stream.format == "json":
        mapping = infer_mapping(sample_objects(v[5:] if v[:1] == b"\0" and len(v) >= 5 else v for v in samples))
    else:
        mapping = _registry_mapping(stream, samples)
    if not mapping.columns:
        raise MappingError("its messages carry no field to make a column of")
    mapping = with_kafka_columns(mapping, stream.kafka_columns)
    if stream.upserts:  # an upsert table per route, keyed alike: a route whose messages hold no key is refused
        check_key(mapping, stream.key)
    return mapping


def _registry_mapping(stream: StreamDef, samples: list[bytes]) -> Mapping:
    """The writer schema's columns, of the newest sample naming a schema the registry has."""
    from appliance.decode.registered import AvroFormat, ProtobufFormat

    fmt = (AvroFormat if stream.format == "avro" else ProtobufFormat)(stream.registry)
    for value in reversed(samples):
        try:
            schema_id, at = wire.header(value)
            key = (schema_id, wire.message_indexes(value, at)[0]) if stream.format == "protobuf" else (schema_id,)
            return Mapping(tuple(fmt.build(key).layout.columns))
        except (wire.Malformed, SchemaError, SchemaNotFound):
            continue
    raise MappingError("none of its messages names a writer schema the registry has")


def taken_by(state: StateStore, stream: StreamDef, table: str) -> str:
    """Who else writes `table` (another stream, a stage, this stream's dead letters), or ""."""
    if table == stream.dead_letter_table:
        return f"it is the stream's dead-letter table {table}"
    stage = next((s.name for s in state.stages() if s.table == table), None)
    if stage is not None:
        return f"table {table} is written by stage {stage!r}"
    other = next((s.name for s in state.table_writers() if s.name != stream.name
                  and table in (s.table, s.dead_letter_table)), None)
    return f"table {table} is already written by stream {other!r}" if other else ""


def make_table(settings: Settings, catalog: Catalog, state: StateStore, stream: StreamDef, route: Route) -> Table:
    """The route's table, made if it is not there yet (a kill after its route was recorded leaves it to make);
    TableConflict when another writes it, a non-retryable error when an existing one cannot take its rows."""
    taken = taken_by(state, stream, route.table)
    if taken:
        raise TableConflict(taken)
    table, _ = catalog.ensure_table(route.table, target_iceberg_schema(route.mapping),
                                    Partitioning.parse(stream.partition_by or PARTITIONING))
    return ensure_bindings(settings, table, route.mapping)
