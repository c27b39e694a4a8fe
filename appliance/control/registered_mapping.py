"""A stream's mapping from the schema registry (Avro, Protobuf): no guessing, the writer schema's columns.

The schema is the one the topic's newest message names in its wire format header, so the
mapping fits what actually flows whatever subject naming strategy the producers use; an
empty topic takes the subject's latest version (`TOPIC-value` by default).
"""

from __future__ import annotations

from dataclasses import dataclass

from appliance.core.errors import MappingError, SchemaError, SchemaNotFound
from appliance.decode import wire
from appliance.decode.registered import AvroFormat, ProtobufFormat
from appliance.kafka.client import SampledMessage
from appliance.kafka.registry import registry
from appliance.kafka.settings import RegistrySettings
from appliance.model.mapping import Mapping


@dataclass(frozen=True)
class RegistryMapping:
    mapping: Mapping
    subject: str
    schema_id: int
    version: int | None
    source: str  # how the schema was chosen, for the user


def default_subject(topic: str) -> str:
    """Confluent's TopicNameStrategy for values."""
    return f"{topic}-value"


def _keys(fmt: str, sampled: list[SampledMessage]) -> list[tuple]:
    """(schema id, message indexes) of the sampled messages in the wire format, newest first, each once."""
    out: list[tuple] = []
    for message in sorted(sampled, key=lambda m: (m.timestamp_ms or 0, m.offset), reverse=True):
        value = message.value or b""
        try:
            schema_id, at = wire.header(value)
            indexes = wire.message_indexes(value, at)[0] if fmt == "protobuf" else ()
        except wire.Malformed:
            continue
        if (schema_id, indexes) not in out:
            out.append((schema_id, indexes))
    return out


def registry_mapping(fmt: str, settings: RegistrySettings, topic: str, subject: str | None,
                     sampled: list[SampledMessage]) -> RegistryMapping:
    """The columns of the writer schema the topic uses now."""
    reg = registry(settings)
    subject = subject or default_subject(topic)
    decoder, key, how = None, None, "the schema of the topic's newest message"
    for key in _keys(fmt, sampled):
        try:
            decoder = _decoder(fmt, settings, key)
            break
        except SchemaError:
            continue  # a message naming no schema the registry has: an older one may
    if decoder is None:
        try:
            version, schema = reg.version(subject, "latest")
        except SchemaNotFound:
            raise MappingError(f"no schema for topic {topic!r}: no sampled message names a schema the registry "
                               f"{settings.display_url} has, and subject {subject!r} has no versions") from None
        key, how = (schema.id, (0,) if fmt == "protobuf" else ()), f"subject {subject} version {version}"
        decoder = _decoder(fmt, settings, key)
    versions = dict(reg.versions_of(key[0]))
    if subject not in versions and versions:
        subject = sorted(versions)[0]
    columns = decoder.layout.columns
    if not columns:
        raise MappingError(f"schema id {key[0]} has no field Floe can map to a column")
    return RegistryMapping(Mapping(columns), subject, key[0], versions.get(subject), how)


def _decoder(fmt: str, settings: RegistrySettings, key: tuple):
    formats = {"avro": AvroFormat, "protobuf": ProtobufFormat}
    built = formats[fmt](settings)
    try:
        return built.build(key if fmt == "protobuf" else key[:1])
    except SchemaNotFound:
        raise SchemaError(f"schema id {key[0]} is not in the schema registry {settings.display_url}") from None
