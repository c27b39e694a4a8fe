"""Work asked of the running engine through the state database, on its warm SparkSession, where a
command would otherwise start a JVM of its own (5 to 10 s): a stage query's preview or check, `floe
maintain`, `floe dlq replay` and `purge`. One path for every command and for the UI.

The asker writes a request row (`engine_requests`); the engine's `control/answers.py` thread takes it
within a tenth of a second and runs the same code the command runs, there. The asker polls the row and
gives up, for the caller to do the work in its own process, when no engine runs or the one running takes
no such request (one starting, or a one-off `floe run --until-caught-up`), when none takes it within
TAKE_WITHIN (all its hands busy, or an older Floe), or when the engine stops before it is done (it
abandons the request, or its heartbeat stops). A request that changes tables (`EngineAsk.changes`) is
waited for as long as the engine lives once taken, so that it is never done twice; the others for
ANSWER_WITHIN at most. The engine's answer is typed: JSON the caller decodes, or one line of error with
its kind, raised here as the same `FloeError` the command raises itself.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass
from typing import Any, Callable, TypeVar

from appliance.config.settings import Settings
from appliance.control.audit import identity
from appliance.core import errors, hints
from appliance.core.clock import age, utcnow
from appliance.core.errors import EngineUnresponsive, FloeError
from appliance.core.vocabulary import EngineAsk, EngineState
from appliance.state.records import EngineRequestRecord
from appliance.state.store import StateStore
from appliance.views.engine import engine_status, process_alive

log = logging.getLogger(__name__)

TAKE_WITHIN = 3.0  # seconds for the engine to take a request (it looks ten times a second)
ANSWER_WITHIN = 120.0  # seconds for a question's answer (a preview on a warm session takes one or two)
POLL = 0.02  # seconds between looks at the request's row
ALIVE_EVERY = 1.0  # seconds between looks at the engine's heartbeat while waiting

T = TypeVar("T")


@dataclass(frozen=True)
class Work:
    """A request as the engine works on it (`control/answers.py`): on its session, told when it stops."""

    settings: Settings
    spark: Any
    stopping: threading.Event
    request: EngineRequestRecord
    progress: Callable[[Any], None]  # what long work has done so far, for the asker to show

    @property
    def args(self) -> dict[str, Any]:
        return self.request.args


@dataclass(frozen=True)
class Answered:
    """The engine's answer: JSON for the asker to decode, and a preview's rows (Arrow IPC)."""

    answer: Any = None
    result: bytes | None = None


@dataclass(frozen=True)
class Asked:
    """What a request came to: the engine's answer, or why there is none (`seen`: the row as last seen:
    the progress of work the engine abandoned)."""

    answer: EngineRequestRecord | None
    why_not: str = ""  # no engine runs, it did not take the request, it stopped before it was done
    seen: EngineRequestRecord | None = None


def ask_engine(settings: Settings, ask: EngineAsk, args: dict[str, Any], *, take_within: float = TAKE_WITHIN,
               answer_within: float = ANSWER_WITHIN,
               progress: Callable[[Any], None] | None = None) -> Asked:
    """The running engine's answer to `ask`; none when it cannot give one (the request is then withdrawn, if
    still untaken, so that nobody works on it). `progress` is shown what long work has done so far."""
    status = engine_status(settings)
    if not status.alive:
        return Asked(None, "no engine runs")
    if ask not in status.answers:
        return Asked(None, f"the running engine (pid {status.pid}) takes no {ask} requests")
    with StateStore(settings.state_db) as state:
        request_id = state.new_engine_request(ask, args, identity())
        try:
            return _wait(settings, state, request_id, ask, take_within, answer_within, progress)
        except BaseException:  # Ctrl-C: what no engine took yet is never done; what one took, it finishes
            state.withdraw_engine_request(request_id)
            raise


def _wait(settings: Settings, state: StateStore, request_id: int, ask: EngineAsk, take_within: float,
          answer_within: float, progress: Callable[[Any], None] | None) -> Asked:
    started = time.monotonic()
    next_alive = started + ALIVE_EVERY
    shown = None
    while True:
        request = state.engine_request(request_id)
        if request is None:
            return Asked(None, "the request was removed")
        if progress is not None and request.answer is not None and request.answer != shown:
            shown = request.answer
            progress(shown)
        if request.answered:
            return Asked(request)
        if request.abandoned_at:
            return Asked(None, "the engine stopped before it was done", request)
        waited = time.monotonic() - started
        if request.taken_at is None and waited > take_within and state.withdraw_engine_request(request_id):
            return Asked(None, f"the engine did not take the request within {take_within:.0f}s")
        if waited > answer_within and not ask.changes:
            return Asked(None, f"the engine did not answer within {answer_within:.0f}s", request)
        if time.monotonic() >= next_alive:
            if not _working_on(settings, state, request, ask):
                state.withdraw_engine_request(request_id)
                final = state.engine_request(request_id)  # it may have answered just before it stopped
                if final is not None and final.answered:
                    return Asked(final)
                return Asked(None, "the engine stopped", final)
            next_alive = time.monotonic() + ALIVE_EVERY
        time.sleep(POLL)


def _working_on(settings: Settings, state: StateStore, request: EngineRequestRecord, ask: EngineAsk) -> bool:
    """Whether the engine may still answer. A request that changes tables, once taken, is waited for while
    the process that took it lives and has not stopped: a late heartbeat (a loaded machine starves its
    thread for seconds) must not make the asker do the work a second time beside the engine. Past
    `[alerting] heartbeat_timeout` without one, the engine is hung: that is said, and nothing done here."""
    if ask.changes and request.taken_by is not None:
        record = state.engine()
        if record is None or record.pid != request.taken_by or record.state is EngineState.STOPPED \
                or not process_alive(record.pid):
            return False
        silent = age(record.heartbeat_at, utcnow())
        if silent is not None and silent > settings.alerting.heartbeat_timeout:
            raise EngineUnresponsive(f"the engine (pid {record.pid}) took this {ask} and has not answered for "
                                     f"{silent:.0f}s (no heartbeat): not done here, as it may still finish it; "
                                     f"see `{hints.STATUS}`")
        return True
    return engine_status(settings, state).alive


def error_of(request: EngineRequestRecord) -> FloeError:
    """The engine's error as the command raises it itself: the same kind, the same line."""
    kind = getattr(errors, request.error_kind, None)
    if isinstance(kind, type) and issubclass(kind, FloeError):
        try:
            return kind(request.error)
        except TypeError:  # a kind that takes more than its message
            pass
    return FloeError(request.error)


def served(settings: Settings, ask: EngineAsk, args: dict[str, Any], decode: Callable[[EngineRequestRecord], T],
           here: Callable[[], T], progress: Callable[[Any], None] | None = None) -> T:
    """`ask` answered by the running engine, decoded; else `here()`, the work done in this process. The
    engine's error is raised as the command's own."""
    asked = ask_engine(settings, ask, args, progress=progress)
    if asked.answer is None:
        log.info("%s done in this process: %s", ask, asked.why_not)
        return here()
    log.info("%s done by the engine (pid %s, request %s)", ask, asked.answer.taken_by, asked.answer.id)
    if asked.answer.error:
        raise error_of(asked.answer)
    return decode(asked.answer)


def warm_engine(settings: Settings) -> bool:
    """Ask the running engine to get a preview's path ready (the editor opened), without waiting for it;
    False when no engine takes such requests."""
    if EngineAsk.WARM not in engine_status(settings).answers:
        return False
    with StateStore(settings.state_db) as state:
        state.new_engine_request(EngineAsk.WARM, {}, identity())
    return True
