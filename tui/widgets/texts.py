"""Texts updated in place: a Static keeps no copy of its content, so this remembers what each shows."""

from __future__ import annotations

from textual.dom import DOMNode
from textual.widgets import Static


class Texts:
    def __init__(self, owner: DOMNode) -> None:
        self.owner = owner
        self.shown: dict[str, str] = {}

    def set(self, selector: str, text: str) -> None:
        """Update the Static at `selector` only when its text changes."""
        if self.shown.get(selector) != text:
            self.shown[selector] = text
            self.owner.query_one(selector, Static).update(text)
