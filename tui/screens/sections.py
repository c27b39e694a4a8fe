"""The screen the sections live on (the app's default screen), quiet while another screen covers it.

Textual repaints the screen below the current one whenever anything changes there, and the current
screen with it, in full: with the wizard or a stream's detail open, the sections' once-a-second reads,
the header's clock and the hidden inputs' cursors kept both screens repainting several times a second
(`scripts/bench_ui_idle`, 50 streams, the wizard on top: 0.43 cores at rest). So while another screen is
on top, the sections' periodic refreshes (timers named REFRESH) and the header's clock pause, and resume when
this screen is current again; a dialog over the sections (a confirmation, a form) shows them as they were.
Timers their owners pause and resume themselves (the Query section's, while a query runs) are left alone.
"""

from __future__ import annotations

from textual.screen import Screen
from textual.timer import Timer


REFRESH = "section refresh"  # the name of a section's periodic refresh timer
PERIODIC = {REFRESH, "update header clock"}  # ...and of Textual's header clock


class SectionsScreen(Screen):
    def __init__(self) -> None:
        super().__init__(id="_default")
        self._paused: list[Timer] = []

    def timers(self) -> list[Timer]:
        """The running periodic timers of this screen and everything on it."""
        # Textual keeps a node's timers in `_timers` and a timer's state in `_active` (no public view of either).
        return [timer for node in (self, *self.walk_children()) for timer in list(node._timers)
                if timer.name in PERIODIC and timer._active.is_set()]

    def on_screen_suspend(self) -> None:
        self._paused = self.timers()
        for timer in self._paused:
            timer.pause()

    def on_screen_resume(self) -> None:
        paused, self._paused = self._paused, []
        for timer in paused:
            timer.resume()
