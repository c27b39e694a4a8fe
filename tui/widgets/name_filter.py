"""A small input that filters a list by name: shown by its pane's `/`, hidden again when emptied."""

from __future__ import annotations

from textual.widgets import Input


class NameFilter(Input):
    """Typing narrows the list at once (`Input.Changed`); Enter keeps the filter and hands the focus back to
    the list, Escape (the pane's binding) clears it. Hidden while empty and not being typed in."""

    DEFAULT_CSS = """
    NameFilter {
        width: 36;
        height: 1;
        border: none;
        padding: 0 1;
        display: none;
    }
    NameFilter.-shown {
        display: block;
    }
    """

    def __init__(self, placeholder: str = "name: any part, or a glob (orders_*)", **kwargs) -> None:
        super().__init__(placeholder=placeholder, **kwargs)

    def open(self) -> None:
        self.add_class("-shown")
        self.focus()

    def close(self) -> None:
        """Emptied and hidden; `Input.Changed` tells the pane."""
        self.value = ""
        self.remove_class("-shown")

    def on_blur(self) -> None:
        if not self.value:
            self.remove_class("-shown")
