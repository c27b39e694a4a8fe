"""A stream's source: checking how to reach the cluster, listing topics, previewing and sampling one.

The wizard and `floe stream create` both go through here: the same checks, the same
sample, the same inferred mapping.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from appliance.control.fields import Field, Problems
from appliance.control.keys import change_rows, json_keys, kafka_key_fields, proposed_key, row_columns
from appliance.core.errors import KafkaConfigError, MappingError, RegistryConfigError
from appliance.decode.keys import is_tombstone
from appliance.kafka.client import KafkaClient, SampledMessage
from appliance.kafka.settings import KafkaSettings, RegistrySettings, security_options
from appliance.model.inference import infer_mapping, sample_objects
from appliance.model.kafka_columns import with_key_fields
from appliance.model.mapping import Mapping
from appliance.model.stream import REGISTRY_FORMATS

SAMPLE_GROUP = "floe-wizard"  # consumer group id for metadata and samples; never joined


@dataclass(frozen=True)
class SourceForm:
    """How a user describes a cluster: servers, a security protocol and its credentials."""

    bootstrap: str
    protocol: str = "PLAINTEXT"
    mechanism: str = "PLAIN"
    username: str = ""
    password: str = field(default="", repr=False)
    ca_location: str = ""
    format: str = "json"
    registry_url: str = ""
    registry_credentials: str = field(default="", repr=False)  # USER:PASSWORD for basic auth
    mode: str = "append"  # what the messages are: append (events), upsert (states by key) or debezium

    @property
    def cdc(self) -> str:
        return "debezium" if self.mode == "debezium" else ""

    def registry(self) -> RegistrySettings | None:
        """The schema registry settings, for formats that need one; raises RegistryConfigError."""
        if self.format not in REGISTRY_FORMATS:
            return None
        options = {"basic.auth.user.info": self.registry_credentials} if self.registry_credentials else {}
        return RegistrySettings.create(self.registry_url, options)

    def options(self) -> dict[str, str]:
        """The librdkafka options, with the keys `--kafka-option` takes."""
        return security_options(self.protocol, self.mechanism, self.username, self.password, self.ca_location)


def check_source(form: SourceForm, topic: str | None = None, need_topic: bool = False
                 ) -> tuple[KafkaSettings | None, Problems]:
    """The Kafka settings of the form, or None and what is wrong with which field."""
    problems: Problems = {}
    options = form.options()
    if form.protocol.startswith("SASL"):
        if "sasl.username" not in options:
            problems[Field.USERNAME] = "a username is required for SASL"
        if "sasl.password" not in options:
            problems[Field.PASSWORD] = "a password is required for SASL"
    if "ssl.ca.location" in options and not Path(options["ssl.ca.location"]).is_file():
        problems[Field.CA] = f"no such file: {options['ssl.ca.location']}"
    kafka = None
    try:
        kafka = KafkaSettings.create(form.bootstrap, options)
    except KafkaConfigError as exc:
        problems[Field.BOOTSTRAP] = str(exc)
    if need_topic and not topic:
        problems[Field.TOPIC] = "a topic is required"
    if form.format in REGISTRY_FORMATS:
        try:
            form.registry()
        except RegistryConfigError as exc:
            problems[Field.REGISTRY] = str(exc) if form.registry_url else f"format {form.format} needs a schema " \
                "registry URL"
        if form.registry_credentials and ":" not in form.registry_credentials:
            problems[Field.REGISTRY_CREDENTIALS] = "credentials are USER:PASSWORD"
    return (None if problems else kafka), problems


def list_topics(kafka: KafkaSettings, timeout: float) -> list[str]:
    with KafkaClient(kafka, group=SAMPLE_GROUP, timeout=timeout) as client:
        return client.topics()


def preview(kafka: KafkaSettings, topic: str, count: int, timeout: float) -> list[SampledMessage]:
    """Up to `count` of the topic's newest messages: a connection test that shows what flows."""
    with KafkaClient(kafka, group=SAMPLE_GROUP, timeout=timeout) as client:
        return client.sample(topic, count, timeout)


@dataclass(frozen=True)
class Inferred:
    mapping: Mapping
    sampled: int  # messages the mapping was inferred from
    subject: str = ""  # for a registry format: the subject the schema is registered under
    described: str = ""  # where the columns came from, for the user
    key: tuple[str, ...] = ()  # the columns holding the Kafka key's fields: an upsert stream's proposed key


def columns_for(kafka: KafkaSettings, topic: str, fmt: str, registry: RegistrySettings | None, count: int,
                timeout: float, cdc: str = "") -> Inferred:
    """The columns a new stream of this format gets: inferred from JSON messages (a change event's row
    for `cdc`), or the registry's schema; and the key the Kafka keys propose."""
    with KafkaClient(kafka, group=SAMPLE_GROUP, timeout=timeout) as client:
        sampled = client.sample(topic, count, timeout)
    if fmt in REGISTRY_FORMATS:
        from appliance.control.registered_mapping import registry_mapping

        found = registry_mapping(fmt, registry, topic, None, sampled)
        mapping = row_columns(found.mapping, False) if cdc else found.mapping
        version = f" version {found.version}" if found.version else ""
        inferred = Inferred(mapping, len(sampled), found.subject,
                            f"from the registry's schema id {found.schema_id} (subject {found.subject}{version})")
    elif cdc:
        rows = change_rows(sampled)
        if not rows:
            raise MappingError(f"topic {topic!r} holds no Debezium change event to infer the columns from")
        inferred = Inferred(infer_mapping(rows), len(sampled), described=f"inferred from {len(rows)} change events")
    else:
        found_json = infer_from_sample(topic, sampled)
        inferred = Inferred(found_json.mapping, found_json.sampled,
                            described=f"inferred from {found_json.sampled} messages")
    key = proposed_key(inferred.mapping, kafka_key_fields(sampled, fmt, registry))
    return Inferred(inferred.mapping, inferred.sampled, inferred.subject, inferred.described, key)


def infer_from_topic(kafka: KafkaSettings, topic: str, count: int, timeout: float,
                     group: str = SAMPLE_GROUP) -> Inferred:
    """A mapping inferred from up to `count` of the topic's newest messages."""
    with KafkaClient(kafka, group=group, timeout=timeout) as client:
        sampled = client.sample(topic, count, timeout)
    return infer_from_sample(topic, sampled)


def infer_from_sample(topic: str, sampled: list[SampledMessage]) -> Inferred:
    if not sampled:
        raise MappingError(f"topic {topic!r} is empty: nothing to infer the columns from; "
                           "produce some messages first, or supply a mapping")
    # A tombstone (a null, or JsonConverter's wrapped null) is no row: its envelope's fields are no columns.
    # A keyed topic's JSON keys add the fields the values lack, as @key.FIELD columns.
    mapping = infer_mapping(sample_objects(m.value for m in sampled if not is_tombstone(m.value)))
    return Inferred(with_key_fields(mapping, json_keys(sampled)), len(sampled))
