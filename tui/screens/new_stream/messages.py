"""Messages of the new-stream wizard: workers' answers, and what one step tells the screen."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from textual.message import Message

from appliance.control.fields import Problems
from appliance.kafka.settings import KafkaSettings
from appliance.model.mapping import Mapping

if TYPE_CHECKING:
    from appliance.kafka.client import SampledMessage


@dataclass
class BrokersKnown(Message):
    bootstraps: list[str]  # the streams' bootstrap servers, the newest stream's first


@dataclass
class TopicsListed(Message):
    kafka: KafkaSettings
    topics: list[str]
    error: str = ""
    where: str = ""  # the field the error belongs next to


@dataclass
class SampleRead(Message):
    kafka: KafkaSettings
    topic: str
    messages: list[SampledMessage]
    error: str = ""
    where: str = ""


@dataclass
class MappingInferred(Message):
    key: tuple  # (bootstrap, topic, format, registry URL, change events) it was asked for
    mapping: Mapping | None
    sampled: int = 0
    error: str = ""
    subject: str = ""
    described: str = ""
    proposed_key: tuple[str, ...] = ()  # the columns holding the Kafka key's fields


@dataclass
class StreamCreateDone(Message):
    name: str
    error: str = ""
    where: str = ""


@dataclass
class NamesChecked(Message):
    """Which of the names typed on the target step (stream, table, dead-letter table) are taken."""

    names: tuple[str, str, str]
    problems: Problems


@dataclass
class TopicChosen(Message):
    """The source step's topic changed: the target step suggests names from it."""

    topic: str | None


class ColumnsInferred(Message):
    """The mapping step has columns to show: the screen describes where they go."""


class ResampleRequested(Message):
    """The user asked to infer the columns again, from the source as it is now."""
