"""Messages shared across the app; a pane's or screen's own messages live beside it."""

from __future__ import annotations

from dataclasses import dataclass

from textual.message import Message

from appliance.views.engine import EngineStatus


@dataclass
class EngineStatusRead(Message):
    status: EngineStatus


@dataclass
class ActionDone(Message):
    """A background action finished: shown as a toast."""

    text: str
    error: bool = False
