"""A stream's definition: which topic, on which cluster, into which tables, with which mapping."""

from __future__ import annotations

from dataclasses import dataclass

from appliance.kafka.settings import KafkaSettings, RegistrySettings
from appliance.model.mapping import Mapping

FORMATS = ("json", "avro", "protobuf")
REGISTRY_FORMATS = ("avro", "protobuf")  # formats that need a schema registry
STARTING_OFFSETS = ("earliest", "latest")
SCHEMA_EVOLUTION = ("auto", "off")


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

    @property
    def evolves(self) -> bool:
        return self.schema_evolution == "auto"

    @property
    def group(self) -> str:
        """The consumer group id: a label for the broker's logs; Floe never commits offsets to Kafka."""
        return f"floe.{self.name}"

    def mapping_toml(self) -> str:
        """The mapping as saved to `mappings/NAME.toml`, with a header naming the stream."""
        return self.mapping.to_toml(f"Floe mapping of stream {self.name}: topic {self.topic} -> {self.table}")
