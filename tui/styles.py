"""How the shared vocabulary looks on screen: one colour per stream phase, run outcome and event level."""

from __future__ import annotations

from rich.markup import escape

from appliance.core.vocabulary import EventLevel, RequestState, RunOutcome, StagePhase, StreamPhase

PHASE_STYLE = {
    StreamPhase.RUNNING: "green", StreamPhase.CATCHING_UP: "yellow", StreamPhase.PAUSED: "blue",
    StreamPhase.FAILED: "bold red", StreamPhase.STARTING: "cyan", StreamPhase.IDLE: "dim",
    StagePhase.UP_TO_DATE: "green",  # a stage's other phases share their names (and colours) with a stream's
}
OUTCOME_STYLE = {
    RunOutcome.OK: "green", RunOutcome.NOTHING_TO_DO: "dim", RunOutcome.DRY_RUN: "cyan",
    RunOutcome.FAILED: "bold red", RunOutcome.BUSY: "yellow", RunOutcome.CANCELLED: "yellow",
    RequestState.REQUESTED: "magenta", RequestState.QUEUED: "magenta", RequestState.RUNNING: "bold cyan",
}
LEVEL_STYLE = {EventLevel.ERROR: "bold red", EventLevel.WARNING: "yellow", EventLevel.INFO: "green"}


def styled(text: str, style: str) -> str:
    """`text` as markup in `style` (escaped); plain when there is no style."""
    return f"[{style}]{escape(text)}[/]" if style else escape(text)


def phase_text(phase: StreamPhase | str) -> str:
    return styled(str(phase), PHASE_STYLE.get(phase, ""))


def outcome_text(outcome: RunOutcome | RequestState | str, suffix: str = "") -> str:
    return styled(f"{outcome}{suffix}", OUTCOME_STYLE.get(outcome, ""))


def level_text(level: EventLevel | str) -> str:
    return styled(str(level), LEVEL_STYLE.get(level, ""))
