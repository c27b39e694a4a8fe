"""Routed streams: one topic's messages, each into the table a field of it names (`--route-by`).

`floe stream create --route-by FIELD --table 'NS.PREFIX_{value}'` checks the field and the template, the cluster
and the topic, records the stream and makes its dead-letter table; the tables themselves are made by the running
engine as their values appear (`ingest/routed.py`), each with the columns of its own messages. Append streams only
`--mode upsert --key K` makes each route's table an upsert table keyed by K (the same key columns in every kind: a
route whose messages carry no K is refused; `ingest/routed.py`). Debezium change events are refused with it
(`NO_CDC` says what works instead).
"""

from __future__ import annotations

from appliance.config.settings import Settings, ensure_home
from appliance.control.audit import audited
from appliance.control.fields import Field, raise_problems
from appliance.control.streams import check_request, connections
from appliance.control.targets import DEAD_LETTER_PARTITIONING, DEFAULT_PARTITIONING, conflicts
from appliance.core.clock import now
from appliance.core.errors import InvalidName, MappingError
from appliance.core.vocabulary import EventKind
from appliance.kafka.client import KafkaClient
from appliance.model.kafka_columns import parse_kafka_columns
from appliance.model.keys import key_columns
from appliance.model.mapping import Mapping
from appliance.model.names import check_table_name
from appliance.model.routes import RouteRule
from appliance.model.stream import StreamDef
from appliance.state.store import StateStore
from appliance.tables.catalog import Catalog
from appliance.tables.iceberg_schemas import dead_letter_iceberg_schema

# The refusal of `--cdc` with `--route-by`: what works, in one line.
NO_CDC = ("--cdc debezium is not supported with --route-by (a change event's table is its source's, not a field's "
          "value): route plain upserts with --mode upsert --key COLS, or give each source table its own topic and "
          "create a pattern stream (--topic-pattern ... --cdc debezium)")
NEEDS_KEY = ("a routed upsert stream needs --key COLUMN[,COLUMN...]: the same key columns in every route's table "
             "(each table's columns come from its own messages, so no key is proposed)")


def default_dead_letter_table(settings: Settings, name: str, template: str) -> str:
    """The template's namespace, and the stream's name with the dead-letter suffix."""
    namespace = template.split(".")[0] if "." in template else ""
    return f"{namespace}.{name.replace('-', '_')}{settings.dead_letter_suffix}"


@audited("stream create")
def create_routed_stream(settings: Settings, name: str, *, bootstrap: str, topic: str, route_by: str, table: str,
                         format: str = "json", starting_offsets: str = "earliest", dead_letter_table: str | None = None,
                         kafka_options: dict[str, str] | None = None, schema_registry: str | None = None,
                         registry_options: dict[str, str] | None = None, schema_evolution: str = "auto",
                         mode: str | None = None, cdc: str = "", key: str | tuple[str, ...] = (),
                         partition_by: str = DEFAULT_PARTITIONING,
                         kafka_columns: str | tuple[str, ...] | list[str] = ()) -> StreamDef:
    """Create routed stream `name`: `topic`'s messages into the tables `table` (a template of `{value}`) names with
    their field `route_by` (`a.b`: a nested field); the other arguments are `create_stream`'s."""
    problems: dict = {}
    rule = None
    try:
        rule = RouteRule.parse(route_by, table)
    except InvalidName as exc:
        problems[Field.TABLE] = str(exc)
    mode = mode or "append"
    key = key_columns(key)
    if cdc:
        problems[Field.MODE] = NO_CDC
    elif key and mode != "upsert":
        problems[Field.KEY] = "--key is for upsert streams: add --mode upsert"
    elif mode == "upsert" and not key:
        problems[Field.KEY] = NEEDS_KEY
    try:
        kafka_columns = parse_kafka_columns(kafka_columns)
    except MappingError as exc:
        problems[Field.KAFKA_COLUMNS] = str(exc)
    kafka, registry = connections(bootstrap, kafka_options, schema_registry, registry_options, problems)
    if not dead_letter_table and "{" in table.split(".")[0]:
        problems[Field.DEAD_LETTER_TABLE] = (f"the table template {table!r} names its namespace by the value: give "
                                             "--dead-letter-table NAMESPACE.TABLE")
    dead_letter_table = dead_letter_table or default_dead_letter_table(settings, name, table)
    if rule is not None:
        problems = {**check_request(name, topic, rule.example(), dead_letter_table, format, starting_offsets,
                                    registry, schema_evolution, partition_by=partition_by), **problems}
    raise_problems(problems)
    ensure_home(settings)
    with StateStore(settings.state_db) as state:
        taken = conflicts(state, name, "", dead_letter_table)
        for where in (Field.STREAM, Field.DEAD_LETTER_TABLE):
            if where in taken:
                raise_problems({where: taken[where]})
        with KafkaClient(kafka, group=f"floe.{name}", timeout=settings.sample_timeout) as client:
            marks = client.watermarks(topic, client.partitions(topic))  # the topic exists before anything is made
        earliest = starting_offsets == "earliest"
        stream = StreamDef(
            name=name, id=StateStore.new_id(), topic=topic, kafka=kafka, format=format, table=table,
            dead_letter_table=dead_letter_table, mapping=Mapping.of_table(()), starting_offsets=starting_offsets,
            start_positions={p: (w.low if earliest else w.high) for p, w in marks.items()}, paused=False,
            created_at=now(), registry=registry, schema_evolution=schema_evolution,
            kafka_columns=tuple(kafka_columns), table_template=table, partition_by=partition_by, route_by=rule.field,
            mode=mode, key=key)
        check_table_name(dead_letter_table)
        catalog = Catalog(settings)
        catalog.check_can_create(dead_letter_table, dead_letter_iceberg_schema())
        catalog.ensure_table(dead_letter_table, dead_letter_iceberg_schema(), DEAD_LETTER_PARTITIONING)
        state.add_stream(stream)
        state.add_event(EventKind.STREAM_CREATED, f"stream created: {topic} routed by {rule.field} -> {table} "
                        f"({stream.describe_mode()})", name)
    return stream
