"""Failed workers are reported, never swallowed.

Every widget and screen that runs workers mixes in `ReportsFailures`: a worker that ends
in error (`exit_on_error=False` keeps the app running) becomes a toast. A refresh that
fails every second is reported once, and again only after it has worked in between. A view that reads
itself every second does it through `Refresh`: never a read over one still going.
"""

from __future__ import annotations

from typing import Callable

from textual.worker import Worker, WorkerState

from tui.format import first_line


class ReportsFailures:
    """Mixin for a DOM node that runs workers (Worker.StateChanged does not bubble)."""

    def on_worker_state_changed(self, event: Worker.StateChanged) -> None:
        report = getattr(self.app, "worker_changed", None)  # type: ignore[attr-defined]
        if report is not None:
            report(event.worker, event.state)


class FailureLog:
    """Which worker groups are failing now, and with what: so each failure is told once."""

    def __init__(self) -> None:
        self.failing: dict[str, str] = {}

    def changed(self, worker: Worker, state: WorkerState) -> str | None:
        """The message to show for this change of state, if any."""
        key = f"{type(worker.node).__name__}:{worker.group or worker.name}"
        if state is WorkerState.SUCCESS:
            self.failing.pop(key, None)
            return None
        if state is not WorkerState.ERROR or worker.error is None:
            return None
        text = first_line(worker.error)
        if self.failing.get(key) == text:
            return None
        self.failing[key] = text
        return f"{worker.group or worker.name}: {text}"


class Refresh:
    """A view's reading of itself: due every second, started only once the last read has finished; asked for
    now (another stream or table to show, an action done), started at once.

    Under load a read can outlast the second between two. Started anyway, an exclusive worker cancels the one
    still going: a view that drops a cancelled read's result then shows nothing at all ("loading…" for good, as
    the stream detail did), and one that posts it anyway piles up a thread a second. `read` starts the view's
    worker (or returns None: nothing to read yet). On the UI thread; a worker thread asks with
    `app.call_from_thread(reading.now)`."""

    def __init__(self, read: Callable[[], Worker | None]) -> None:
        self.read = read
        self.worker: Worker | None = None

    def due(self) -> None:
        if self.worker is None or self.worker.is_finished:
            self.worker = self.read()

    def now(self) -> None:
        self.worker = self.read()
