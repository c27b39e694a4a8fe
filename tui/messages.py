"""Messages that workers post to the UI: workers never touch widgets themselves."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from textual.message import Message


@dataclass
class EngineStatus(Message):
    status: dict[str, Any]


@dataclass
class StreamsLoaded(Message):
    streams: list[Any]  # appliance.observe.StreamView


@dataclass
class ActionDone(Message):
    """A background action finished: shown as a toast."""

    text: str
    error: bool = False
