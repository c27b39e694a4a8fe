"""The screen the sections live on (the app's default screen), quiet while another screen covers it.

Textual repaints the screen below the current one whenever anything changes there, and the current
screen with it, in full: with the wizard or a stream's detail open, the sections' once-a-second reads,
the header's clock and the hidden inputs' cursors kept both screens repainting several times a second
(`scripts/bench_ui_idle`, 50 streams, the wizard on top: 0.43 cores at rest). Nothing of this screen
shows behind a screen that covers it, so its timers pause until it is the current screen again.
"""

from __future__ import annotations

from textual.screen import Screen
from textual.timer import Timer


class SectionsScreen(Screen):
    def __init__(self) -> None:
        super().__init__(id="_default")
        self._paused: list[Timer] = []

    def timers(self) -> list[Timer]:
        """The running timers of this screen and everything on it."""
        # Textual keeps a node's timers in `_timers` and a timer's state in `_active` (no public view of either).
        return [timer for node in (self, *self.walk_children()) for timer in list(node._timers)
                if timer._active.is_set()]

    def on_screen_suspend(self) -> None:
        self._paused = self.timers()
        for timer in self._paused:
            timer.pause()

    def on_screen_resume(self) -> None:
        paused, self._paused = self._paused, []
        for timer in paused:
            timer.resume()
