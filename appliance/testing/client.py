"""`FloeClient`: a test's own Floe, on the product's code paths, bound to one FLOE_HOME.

Streams are created by `control.streams`, stages by `control.stages`, ingestion is the engine's
one-off run (`floe run --until-caught-up`), queries go through `floe query`'s DuckDB views and the
audit is `floe audit`'s: what passes here behaves the same under `floe run`. Only the topics are
the test's own: every topic name is prefixed with this client's id on the broker, so two tests
(or two xdist workers) that both say "orders" never share a message.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterable
from collections.abc import Mapping as TypingMapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from appliance.config.settings import Settings, ensure_home, load_settings
from appliance.core.errors import FloeError, MappingError

if TYPE_CHECKING:
    import pyarrow as pa

    from appliance.auditor import AuditReport

Value = bytes | str | None


class FloeClient:
    def __init__(self, home: Path, bootstrap: str, spark: Any,
                 registry: Callable[[], str] | None = None, prefix: str | None = None) -> None:
        self.home = Path(home)
        self.settings: Settings = load_settings(self.home)
        ensure_home(self.settings)
        self.bootstrap = bootstrap
        self.spark = spark
        self._registry = registry  # the session's registry URL, started on first need
        self.prefix = prefix or f"t{uuid.uuid4().hex[:10]}."
        self._producer = None

    # ---- topics ----

    def topic(self, name: str) -> str:
        """The broker's name for this test's topic `name`."""
        return f"{self.prefix}{name}"

    def produce(self, topic: str, values: Iterable[Value], keys: Iterable[Value] | None = None,
                partition: int | None = None, headers: list[tuple[str, bytes]] | None = None) -> int:
        """Send `values` (bytes, str or None for a tombstone) to this test's `topic`; waits until the
        broker has them all. Returns how many were sent."""
        producer = self._producer_()
        keys = list(keys) if keys is not None else None
        sent = 0
        for i, value in enumerate(values):
            extra = {"partition": partition} if partition is not None else {}
            producer.produce(self.topic(topic), value=value, key=keys[i] if keys else None, headers=headers,
                             **extra)
            sent += 1
            if sent % 10_000 == 0:
                producer.poll(0)
        if producer.flush(30):
            raise FloeError(f"topic {topic!r}: messages still unsent after 30 s")
        return sent

    def produce_json(self, topic: str, records: Iterable[Any], **kwargs: Any) -> int:
        import orjson

        return self.produce(topic, [orjson.dumps(r) for r in records], **kwargs)

    def produce_avro(self, topic: str, schema: str | dict, records: Iterable[dict], **kwargs: Any) -> int:
        """Avro in the registry's wire format, the schema registered under `<topic>-value`."""
        import json

        from confluent_kafka.schema_registry.avro import AvroSerializer

        text = schema if isinstance(schema, str) else json.dumps(schema)
        return self._serialized(topic, AvroSerializer(self.registry_client(), text), records, **kwargs)

    def produce_protobuf(self, topic: str, messages: Iterable[Any], **kwargs: Any) -> int:
        """Protobuf messages (instances of one generated class) in the registry's wire format."""
        from confluent_kafka.schema_registry.protobuf import ProtobufSerializer

        messages = list(messages)
        if not messages:
            return 0
        serializer = ProtobufSerializer(type(messages[0]), self.registry_client(), {"use.deprecated.format": False})
        return self._serialized(topic, serializer, messages, **kwargs)

    def _serialized(self, topic: str, serializer, records: Iterable[Any], **kwargs: Any) -> int:
        from confluent_kafka.serialization import MessageField, SerializationContext

        context = SerializationContext(self.topic(topic), MessageField.VALUE)
        return self.produce(topic, [serializer(r, context) for r in records], **kwargs)

    @property
    def registry_url(self) -> str:
        if self._registry is None:
            raise FloeError("no schema registry: use the floe_schema_registry fixture")
        return self._registry()

    def registry_client(self):
        from confluent_kafka.schema_registry import SchemaRegistryClient

        return SchemaRegistryClient({"url": self.registry_url})

    # ---- streams and stages ----

    def create_stream(self, name: str, *, topic: str, table: str, mapping: str | Path | dict = "auto",
                      format: str = "json", **options: Any):
        """`floe stream create` of this test's `topic` into `table`.

        `mapping` is "auto" (inferred from the topic's messages, or the registry's schema for avro and
        protobuf), a mapping TOML file, or a dict: TOML-shaped ({"columns": [...]}) or column name ->
        type (each column from the field of its name). `format`: "json", "avro" or "protobuf" (the
        session's schema registry is used unless `schema_registry=` names another).

        `options` are `floe stream create`'s other options, by their Python names:
        `mode="append"|"upsert"`, `key="id"` (or "id, tenant", or a list of column names; default:
        the Kafka key's fields), `cdc="debezium"`, `cdc_columns=True`, `starting_offsets="earliest"|
        "latest"`, `dead_letter_table="ns.table"`, `schema_evolution="auto"|"off"`,
        `partition_by="day(ts)"` (or "none"), `kafka_columns="key,headers"` (either or both),
        `kafka_options={...}`, `schema_registry=URL`,
        `registry_options={...}`, `subject="..."`. Returns what was created (`.stream`, `.mapping_file`)."""
        from appliance.control.streams import create_stream

        given = _mapping(mapping)
        self._ensure_topic(topic)
        if format in ("avro", "protobuf"):
            options.setdefault("schema_registry", self.registry_url)
        return create_stream(self.settings, name, bootstrap=self.bootstrap, topic=self.topic(topic), table=table,
                             format=format, mapping=given, **options)

    def create_stage(self, name: str, *, source: str, table: str, sql: str):
        """`floe stage create`: `sql` reads the source table as `source`."""
        from appliance.control.stages import create_stage

        return create_stage(self.settings, name, source=source, sql=sql, table=table, spark=self.spark)

    def run_until_caught_up(self) -> None:
        """`floe run --until-caught-up`: every stream reads what its topic holds now, then every stage
        catches up. A stream or stage that fails raises FloeError naming it."""
        from appliance.control.patterns import discover_members
        from appliance.ingest.engine import Engine

        Engine(self.settings, spark=self.spark, discover=discover_members).run(until_caught_up=True)

    # ---- reading ----

    def query(self, sql: str) -> pa.Table:
        """`floe query`: DuckDB SQL over every table, `namespace.table`."""
        from appliance.query.connection import run_query

        return run_query(self.settings, sql)

    def dead_letters(self, stream: str) -> list[dict[str, Any]]:
        """The stream's dead-letter rows (raw bytes, error_stage, error_message...), in offset order."""
        from appliance.state.store import StateStore

        with StateStore(self.settings.state_db) as state:
            table = state.stream(stream).dead_letter_table
        namespace, name = table.split(".", 1)
        return self.query(f'SELECT * FROM "{namespace}"."{name}" ORDER BY _kafka_partition, _kafka_offset').to_pylist()

    def audit(self, stream: str) -> AuditReport:
        """`floe audit`: `.ok`, and `.render()` to show in an assertion's message."""
        from appliance.auditor import audit_stream

        return audit_stream(self.settings, stream)

    # ---- plumbing ----

    def _producer_(self):
        if self._producer is None:
            from confluent_kafka import Producer

            self._producer = Producer({"bootstrap.servers": self.bootstrap, "linger.ms": 5, "log_level": 0})
        return self._producer

    def _ensure_topic(self, topic: str) -> None:
        """A stream may be created before anything is produced: asking for the topic's metadata
        makes the embedded broker create it, as producing would (4 partitions)."""
        meta = self._producer_().list_topics(self.topic(topic), timeout=10)
        found = meta.topics.get(self.topic(topic))
        if found is None or found.error is not None:
            raise FloeError(f"topic {topic!r}: the broker did not create it ({found and found.error})")

    def close(self) -> None:
        if self._producer is not None:
            self._producer.flush(10)
            self._producer = None


def _mapping(mapping: str | Path | TypingMapping[str, Any]):
    from appliance.model.mapping import Column, Mapping

    if isinstance(mapping, (str, Path)):
        return mapping
    if not isinstance(mapping, TypingMapping) or not mapping:
        raise MappingError(f"mapping must be 'auto', a TOML file or a non-empty dict, not {mapping!r}")
    if "columns" in mapping:
        import tomli_w

        return Mapping.from_toml(tomli_w.dumps(dict(mapping)), origin="mapping dict")
    bad = [k for k, v in mapping.items() if not isinstance(v, str)]
    if bad:
        raise MappingError(f"mapping dict: the type of {bad[0]!r} must be a string such as 'long'")
    return Mapping(tuple(Column(name, kind, (name,)) for name, kind in mapping.items()))
