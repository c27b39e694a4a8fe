"""Form fields with their error under them, as the new-stream wizard lays them out."""

from __future__ import annotations

from textual.containers import Vertical, VerticalScroll
from textual.dom import DOMNode
from textual.widget import Widget
from textual.widgets import Input, Label, Select


class FormStep(VerticalScroll, can_focus=False):
    """A step of a form, scrolled as focus moves: it takes no focus itself, so Tab goes from control
    to control and never stops on the step, where nothing shows the focus and no key does anything."""


def field(label: str, widget: Widget, name: str) -> Vertical:
    """A labelled form field with its error Label underneath (`#NAME-error`, class field-error)."""
    return Vertical(
        Label(label, classes="field-label"),
        widget,
        Label("", id=f"{name}-error", classes="field-error", markup=False),
        classes="field",
        id=f"{name}-field",
    )


def show_error(node: DOMNode, name: str, text: str) -> None:
    """Show `text` under field `name` (or clear it) and mark its widget invalid."""
    label = node.query_one(f"#{name}-error", Label)
    label.update(text)
    label.set_class(bool(text), "-shown")
    for widget in node.query(f"#{name}"):
        if isinstance(widget, (Input, Select)):  # mapping/create errors have no field widget
            widget.set_class(bool(text), "-invalid")
