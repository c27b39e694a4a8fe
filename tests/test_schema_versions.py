"""The writer schema versions a stream met (`ingest/stream_schema.StreamSchema.report`): looked up in the registry
once each, and again while the registry could not be asked: a lookup lost to a registry that was down, or slow
under load, left the version unknown for good (the stream's detail showed "id 1" instead of "v1")."""

from __future__ import annotations

import json
import socket

import pytest
from confluent_kafka.schema_registry import Schema

from appliance.config.settings import ensure_home, load_settings
from appliance.core.clock import utcnow
from appliance.ingest.stream_schema import StreamSchema
from appliance.kafka.settings import KafkaSettings, RegistrySettings
from appliance.model.mapping import Column, Mapping
from appliance.model.stream import StreamDef
from appliance.standins.registry import EmbeddedRegistry
from appliance.state.store import StateStore

TICK = {"type": "record", "name": "Tick", "fields": [{"name": "n", "type": "long"}]}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _stream(url: str) -> StreamDef:
    return StreamDef(name="ticks", id="ticks", topic="ticks", kafka=KafkaSettings.create("h:9092"), format="avro",
                     table="ns.ticks", dead_letter_table="ns.ticks_dlq",
                     mapping=Mapping((Column("n", "long", ("n",)),)), starting_offsets="earliest", start_positions={},
                     paused=False, created_at=utcnow().isoformat(), registry=RegistrySettings.create(url),
                     subject="ticks-value")


@pytest.fixture
def settings(floe_home):
    settings = load_settings()
    ensure_home(settings)
    return settings


@pytest.fixture
def own_registry():
    """A registry of the test's own: its schema ids start at 1."""
    registry = EmbeddedRegistry()
    yield registry
    registry.close()


def _seen(state: StateStore) -> list[tuple]:
    return [(r["schema"], r["subject"], r["version"], r["messages"]) for r in state.seen_schemas("ticks")]


def test_a_version_the_registry_could_not_tell_is_asked_again_until_it_does(settings):
    port = _free_port()
    stream = _stream(f"http://127.0.0.1:{port}")
    with StateStore(settings.state_db) as state:
        state.add_stream(stream)
        schema = StreamSchema(settings, state, stream)
        schema.report(set(), {"1": 3})  # nothing listens there yet: the registry is down
        assert _seen(state) == [("1", "", None, 3)]

        registry = EmbeddedRegistry(port=port)
        try:
            registered = registry.client()
            assert registered.register_schema("ticks-value", Schema(json.dumps(TICK), "AVRO")) == 1
            schema.report(set(), {"1": 2})  # up again: asked again, and told
            assert _seen(state) == [("1", "ticks-value", 1, 5)]
            asked = registry.served("/schemas/ids/1/versions")
            schema.report(set(), {"1": 1})
            assert registry.served("/schemas/ids/1/versions") == asked  # told once: never asked again
            assert _seen(state) == [("1", "ticks-value", 1, 6)]
        finally:
            registry.close()


def test_an_id_the_registry_does_not_know_is_not_asked_at_every_batch(settings, own_registry):
    stream = _stream(own_registry.url)
    with StateStore(settings.state_db) as state:
        state.add_stream(stream)
        schema = StreamSchema(settings, state, stream)
        for _ in range(3):
            schema.report(set(), {"7": 1})
        assert own_registry.served("/schemas/ids/7/versions") == 1  # a 404 is an answer
        assert _seen(state) == [("7", "", None, 3)]


def test_schemas_first_met_in_one_batch_are_listed_in_version_order(settings, own_registry):
    client = own_registry.client()
    v2 = {**TICK, "fields": [*TICK["fields"], {"name": "m", "type": ["null", "long"], "default": None}]}
    for n in range(8):  # ids 9 and 10 for the two versions: "10" sorts before "9" as text
        other = {"type": "record", "name": f"Other{n}", "fields": [{"name": "x", "type": "long"}]}
        client.register_schema(f"other{n}-value", Schema(json.dumps(other), "AVRO"))
    first = client.register_schema("ticks-value", Schema(json.dumps(TICK), "AVRO"))
    second = client.register_schema("ticks-value", Schema(json.dumps(v2), "AVRO"))
    stream = _stream(own_registry.url)
    with StateStore(settings.state_db) as state:
        state.add_stream(stream)
        assert (first, second) == (9, 10)
        StreamSchema(settings, state, stream).report(set(), {str(first): 1, str(second): 1})
        assert [(r["subject"], r["version"]) for r in state.seen_schemas("ticks")] == [
            ("ticks-value", 1), ("ticks-value", 2)]
