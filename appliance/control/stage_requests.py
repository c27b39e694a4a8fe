"""A stage query's preview or check asked of the running engine, through the state database.

The asker writes a request row (`stage_requests`); the engine's `stages/requests.py` thread takes it
within a tenth of a second and answers on its warm SparkSession. The asker polls the row until the
answer is there, and gives up, for the caller to do the work itself (`floe stage` in a process of
its own), when no engine runs, when none takes the request within TAKE_WITHIN (a starting engine,
one busy with another request, or an older Floe), when the engine stops, or after ANSWER_WITHIN.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from appliance.config.settings import Settings
from appliance.core.vocabulary import StageAsk
from appliance.state.records import StageRequestRecord
from appliance.state.store import StateStore
from appliance.views.engine import engine_status

TAKE_WITHIN = 5.0  # seconds for the engine to take a request (it looks ten times a second)
ANSWER_WITHIN = 120.0  # seconds for its answer: a preview on a warm session takes one or two
POLL = 0.05  # seconds between looks at the request's row
ALIVE_EVERY = 1.0  # seconds between looks at the engine's heartbeat while waiting


@dataclass(frozen=True)
class Asked:
    """What a request came to: the engine's answer, or why there is none."""

    answer: StageRequestRecord | None
    why_not: str = ""  # no engine runs, it did not take the request, it stopped, it took too long


def ask_engine(settings: Settings, ask: StageAsk, source: str, sql: str, rows: int = 0, *,
               take_within: float = TAKE_WITHIN, answer_within: float = ANSWER_WITHIN) -> Asked:
    """The running engine's answer to a preview or check of `sql` over `source`; no answer when it does
    not give one in time (the request is then withdrawn, if still untaken, so that nobody works on it)."""
    if not engine_status(settings).alive:
        return Asked(None, "no engine runs")
    with StateStore(settings.state_db) as state:
        request_id = state.ask_stage(ask, source, sql, rows)
        started = time.monotonic()
        next_alive = started + ALIVE_EVERY
        while True:
            request = state.stage_request(request_id)
            if request is None:
                return Asked(None, "the request was removed")
            if request.answered:
                return Asked(request)
            waited = time.monotonic() - started
            if request.taken_at is None and waited > take_within and state.withdraw_stage_request(request_id):
                return Asked(None, f"the engine did not take the request within {take_within:.0f}s")
            if waited > answer_within:
                return Asked(None, f"the engine did not answer within {answer_within:.0f}s")
            if time.monotonic() >= next_alive:
                if not engine_status(settings, state).alive:
                    state.withdraw_stage_request(request_id)
                    return Asked(None, "the engine stopped")
                next_alive = time.monotonic() + ALIVE_EVERY
            time.sleep(POLL)


def warm_engine(settings: Settings) -> bool:
    """Ask the running engine to get a preview's path ready (the editor opened), without waiting for it;
    False when no engine runs."""
    if not engine_status(settings).alive:
        return False
    with StateStore(settings.state_db) as state:
        state.ask_stage(StageAsk.WARM, "", "")
    return True
