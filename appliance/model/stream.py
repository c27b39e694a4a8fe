"""A stream's definition: which topic, on which cluster, into which tables, with which mapping."""

from __future__ import annotations

from dataclasses import dataclass

from appliance.core import hints
from appliance.core.errors import NotForPatterns
from appliance.kafka.settings import KafkaSettings, RegistrySettings
from appliance.model.mapping import Mapping

FORMATS = ("json", "avro", "protobuf")
REGISTRY_FORMATS = ("avro", "protobuf")  # formats that need a schema registry
STARTING_OFFSETS = ("earliest", "latest")
SCHEMA_EVOLUTION = ("auto", "off")
MODES = ("append", "upsert")  # every message a new row, or its key's new row (the table: one row per key)
CDC = ("debezium",)  # change-event envelopes: the row is `after` (or `before`, for a delete)


@dataclass(frozen=True)
class StreamDef:
    name: str
    id: str
    topic: str
    kafka: KafkaSettings
    format: str
    table: str
    dead_letter_table: str
    mapping: Mapping
    starting_offsets: str  # "earliest" or "latest"
    start_positions: dict[int, int]  # resolved at creation: where a fresh stream begins
    paused: bool
    created_at: str
    registry: RegistrySettings | None = None
    subject: str = ""  # the registry subject the mapping was made from (Avro, Protobuf)
    schema_evolution: str = "auto"
    mode: str = "append"
    key: tuple[str, ...] = ()  # upsert: the key columns
    cdc: str = ""  # "debezium": the messages are change events (an upsert stream)
    cdc_columns: bool = False  # keep the event's op, time and source position as _cdc_* columns
    kafka_columns: tuple[str, ...] = ()  # "key", "headers": the Kafka key and headers as _kafka_* columns
    # A pattern stream: every topic whose whole name matches `topic_pattern` into the table `table_template`
    # names (`model/patterns.py`); `topic` and `table` then hold the pattern and the template, and each topic
    # is a member (`state` table `stream_members`) with its own tables, mapping and offsets.
    topic_pattern: str = ""
    table_template: str = ""
    partition_by: str = ""  # a pattern or routed stream's: the partitioning of the tables it makes later
    # A routed stream: each message into the table `table` (a template of `{value}`) names with its field
    # `route_by` (`model/routes.py`); each table made is a route (`state` table `stream_routes`).
    route_by: str = ""

    @property
    def evolves(self) -> bool:
        return self.schema_evolution == "auto"

    @property
    def is_pattern(self) -> bool:
        return bool(self.topic_pattern)

    @property
    def is_routed(self) -> bool:
        return bool(self.route_by)

    def single(self, what: str, instead: str = "") -> StreamDef:
        """This stream, if it reads one topic into one table; a pattern or routed stream raises NotForPatterns
        saying `what` it cannot."""
        if self.is_routed:  # its dead letters are in one table, which a query reads
            raise NotForPatterns(f"stream {self.name} routes its messages by field {self.route_by}: {what} works on "
                                 f"a single table's stream; {hints.routed_dead_letters(self.dead_letter_table)}")
        if self.is_pattern:
            raise NotForPatterns(f"stream {self.name} reads a topic pattern: {what} works on a single topic's stream"
                                 + (f"; {instead}" if instead else ""))
        return self

    @property
    def upserts(self) -> bool:
        return self.mode == "upsert"

    def describe_mode(self) -> str:
        """The mode as `floe stream show` and the UI say it."""
        if not self.upserts:
            return "append"
        return f"upsert by {', '.join(self.key)}" + (f" ({self.cdc} change events)" if self.cdc else "")

    @property
    def group(self) -> str:
        """The consumer group id: a label for the broker's logs; Floe never commits offsets to Kafka."""
        return f"floe.{self.name}"

    def mapping_toml(self) -> str:
        """The mapping as saved to `mappings/NAME.toml`, with a header naming the stream."""
        return self.mapping.to_toml(f"Floe mapping of stream {self.name}: topic {self.topic} -> {self.table}")
