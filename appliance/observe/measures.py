"""What an alert's rule reads: per-stream and per-stage measures, taken the way the UI and `floe status`
show them.

Lag is the stream's (watermarks minus committed offsets, after its last step); freshness and
lag in seconds come from Kafka timestamps and commit times; ratios from the committed batches.
A stage has two: failing, and stalled (its source has rows it has not processed, and no run
completed for the window).
"""

from __future__ import annotations

from dataclasses import dataclass

from appliance.config.alerts import AlertDef, Measure
from appliance.core.vocabulary import StagePhase, StreamPhase
from appliance.state.records import StageStatus, StreamStatus

AUTH_ERRORS = ("KafkaAccessDenied", "RegistryAccessDenied")


@dataclass(frozen=True)
class Reading:
    breached: bool
    value: float | str | None  # what was measured (None: nothing to measure yet)

    def shown(self) -> str:
        if isinstance(self.value, float):
            return f"{self.value:,.3f}".rstrip("0").rstrip(".")
        return "" if self.value is None else str(self.value)


@dataclass(frozen=True)
class Window:
    """A stream's committed batches over an alert's window, summed."""

    messages: int = 0
    dead_letters: int = 0
    throttle_ms: int = 0

    @property
    def dead_letter_ratio(self) -> float | None:
        return None if not self.messages else round(self.dead_letters / self.messages, 4)


def stream_reading(alert: AlertDef, status: StreamStatus, window: Window, stalled_for: float | None,
                   paused: bool) -> Reading:
    """The alert's measure for one stream. `window`: its batches committed in the alert's window;
    `stalled_for`: seconds without a commit while messages wait or the topic cannot be read."""
    measure = alert.rule.measure
    if paused:
        return Reading(False, None)  # a paused stream is behind on purpose
    if measure is Measure.LAG_MESSAGES:
        return _threshold(alert, None if status.lag is None else float(status.lag))
    if measure is Measure.LAG_SECONDS:
        return _threshold(alert, status.lag_seconds())
    if measure is Measure.FRESHNESS_SECONDS:
        return _threshold(alert, status.freshness_seconds())
    if measure is Measure.DEAD_LETTER_RATIO:
        return _threshold(alert, window.dead_letter_ratio)
    if measure is Measure.FAILED:
        failing = status.phase is StreamPhase.FAILED
        return Reading(failing, status.last_error if failing else None)
    if measure is Measure.AUTH_FAILED:
        denied = status.phase is StreamPhase.FAILED and status.error_kind in AUTH_ERRORS
        return Reading(denied, status.last_error if denied else None)
    if measure is Measure.STALLED:
        return Reading(stalled_for is not None and stalled_for >= alert.window,
                       None if stalled_for is None else round(stalled_for, 1))
    if measure is Measure.THROTTLED:
        return Reading(window.throttle_ms > 0, float(window.throttle_ms))
    return Reading(False, None)


def stage_reading(alert: AlertDef, status: StageStatus, stalled_for: float | None, paused: bool) -> Reading:
    """The alert's measure for one stage. `stalled_for`: seconds without a completed run while its
    source has rows it has not processed (or it fails)."""
    measure = alert.rule.measure
    if paused:
        return Reading(False, None)  # a paused stage is behind on purpose
    if measure is Measure.FAILED:
        failing = status.phase is StagePhase.FAILED
        return Reading(failing, status.last_error if failing else None)
    if measure is Measure.STALLED:
        return Reading(stalled_for is not None and stalled_for >= alert.window,
                       None if stalled_for is None else round(stalled_for, 1))
    return Reading(False, None)


def _threshold(alert: AlertDef, value: float | None) -> Reading:
    return Reading(alert.rule.crossed(value), value)

