"""Failed workers are reported, never swallowed.

Every widget and screen that runs workers mixes in `ReportsFailures`: a worker that ends
in error (`exit_on_error=False` keeps the app running) becomes a toast. A refresh that
fails every second is reported once, and again only after it has worked in between.
"""

from __future__ import annotations

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
