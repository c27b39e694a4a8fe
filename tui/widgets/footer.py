"""Textual's footer, recomposed only when the keys it shows change.

Textual's `Footer` recomposes (every key widget made and styled again) whenever the screen's bindings are
updated, which is every focus change: each Tab through a form. Pressing Tab through the wizard spent most of
its time there. What it would show is compared first; the same keys, enabled alike, keep the footer as it is.
"""

from __future__ import annotations

from typing import Any

from textual.screen import Screen
from textual.widgets import Footer as TextualFooter


def shown_keys(screen: Screen) -> tuple[Any, ...]:
    """What a footer shows of `screen`'s bindings: each shown key, its action, text, state and group."""
    palette = screen.app.COMMAND_PALETTE_BINDING
    return tuple((key, binding.action, binding.description, enabled, tooltip, binding.group)
                 for key, (_, binding, enabled, tooltip) in screen.active_bindings.items()
                 if binding.show or key == palette)


class Footer(TextualFooter):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._shown: tuple[Any, ...] | None = None

    def bindings_changed(self, screen: Screen) -> None:
        if screen.app.app_focus and self.is_attached and screen is self.screen:
            shown = shown_keys(screen)
            if self._bindings_ready and shown == self._shown:
                return
            self._shown = shown
        super().bindings_changed(screen)
