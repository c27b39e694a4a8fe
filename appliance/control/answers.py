"""The engine's answers to commands and the UI: work they ask of it (`control/requests.py`), done on its
warm SparkSession where a command would start a JVM of its own.

A thread looks at `engine_requests` ten times a second and takes as many requests as it has free hands
(HANDS), each run in a pool thread of its own, in a FAIR pool of Spark's, so that a long replay never
holds back a preview, and streams and stages go on beside them. Each ask runs the very code the command
runs in its own process (ANSWERS), in the asker's name for the audit trail. What is not taken stays for
the asker to do itself. `floe run` gives the engine this thread (`Engine(answers=Answers)`); the engine
says in its heartbeat which asks it takes, so that an engine without it (a one-off run) is never waited for.
A stopping engine cancels the work in flight; work it breaks off is abandoned (the asker does it itself),
work it finished is answered.
"""

from __future__ import annotations

import logging
import os
import threading
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, Callable

from appliance.config.settings import Settings
from appliance.control.audit import on_behalf
from appliance.control.requests import Answered, Work
from appliance.core.errors import FloeError, RequestAbandoned, UnforeseenError
from appliance.core.vocabulary import EngineAsk, MaintenanceTask
from appliance.state.records import EngineRequestRecord
from appliance.state.store import StateStore

log = logging.getLogger(__name__)

POLL = 0.1  # seconds between looks for a request: a command is waiting
FRESH = 60.0  # seconds a request waits to be taken; an older one's asker has given up (or is gone)
HANDS = 2  # requests worked on at once
JOB_GROUP = "floe-requests"
POOL = "requests"


def _preview(work: Work) -> Answered:
    from appliance.control.stages import preview

    kind, rows = preview(work.settings, work.args["source"], work.args["sql"], work.args["rows"], spark=work.spark)
    return Answered({"query_kind": kind}, EngineRequestRecord.encoded(rows))


def _check(work: Work) -> Answered:
    from appliance.control.stages import check_query

    return Answered(check_query(work.settings, work.args["source"], work.args["sql"], work.spark).as_answer())


def _maintain(work: Work) -> Answered:
    from appliance.control.maintenance import Maintained, maintain_here

    done = Maintained()

    def show(run) -> None:
        done.runs.append(run)
        work.progress(done.as_answer())

    with on_behalf(work.request.who, work.stopping):
        tasks = [MaintenanceTask(t) for t in work.args["tasks"]]
        out = maintain_here(work.settings, work.args["tables"], tasks, work.args["dry_run"], show, work.spark,
                            work.stopping)
    return Answered(out.as_answer())


def _replay(work: Work) -> Answered:
    from appliance.control.dead_letters import preview_replay, replay_dead_letters

    stream, where, topic = work.args["stream"], work.args["where"], work.args.get("topic")
    if work.args["dry_run"]:
        return Answered(preview_replay(work.settings, stream, where, spark=work.spark, topic=topic).as_dict())
    with on_behalf(work.request.who, work.stopping):
        return Answered(replay_dead_letters(work.settings, stream, where, spark=work.spark, topic=topic).as_dict())


def _purge(work: Work) -> Answered:
    from appliance.control.dead_letters import purge_dead_letters

    with on_behalf(work.request.who, work.stopping):
        purged = purge_dead_letters(work.settings, work.args["stream"], work.args["where"], work.args.get("topic"))
    return Answered(purged.as_dict())


# Each ask's work: the code the command runs in its own process, here on the engine's session.
ANSWERS: dict[EngineAsk, Callable[[Work], Answered]] = {
    EngineAsk.PREVIEW: _preview, EngineAsk.CHECK: _check, EngineAsk.MAINTAIN: _maintain,
    EngineAsk.REPLAY: _replay, EngineAsk.PURGE: _purge,
}


class Answers(threading.Thread):
    """The engine's thread answering requests: `asks` says which it takes."""

    asks = frozenset(ANSWERS) | {EngineAsk.WARM}

    def __init__(self, settings: Settings, spark: Any, stopping: threading.Event, hands: int = HANDS) -> None:
        super().__init__(name="floe-answers", daemon=True)
        self.settings = settings
        self.spark = spark
        self.stopping = stopping
        self.hands = hands
        self.answered = 0  # requests answered since the engine started
        self.warm = False  # a preview's path through Spark has run once
        self._lock = threading.Lock()

    def run(self) -> None:
        busy: set[Future] = set()
        with StateStore(self.settings.state_db, durable=False) as state, \
                ThreadPoolExecutor(self.hands, thread_name_prefix="floe-answer") as pool:
            while not self.stopping.is_set():
                busy = {f for f in busy if not f.done()}
                try:
                    for request in state.take_engine_requests(os.getpid(), self.asks, FRESH, self.hands - len(busy)):
                        busy.add(pool.submit(self._answer, request))
                except Exception:  # the state database busy past its timeout: the next look tries again
                    log.exception("engine requests: cannot take a request")
                self.stopping.wait(POLL)
        # Leaving the pool waits for the work in flight, which the stopping engine cancels (`cancel`).

    def cancel(self) -> None:
        """Stop the work in flight (the engine stops): its Spark jobs, a maintenance rewrite's included."""
        from appliance.maintenance.rewrite import JOB_GROUP as REWRITES

        for group in (JOB_GROUP, REWRITES):
            try:
                self.spark.sparkContext.cancelJobGroup(group)
            except Exception:  # noqa: BLE001 - no job in flight, or the JVM going away with the engine
                pass

    def _answer(self, request: EngineRequestRecord) -> None:
        context = self.spark.sparkContext
        context.setLocalProperty("spark.scheduler.pool", POOL)
        context.setJobGroup(JOB_GROUP, f"floe {request.ask} (request {request.id})", interruptOnCancel=True)
        try:
            with StateStore(self.settings.state_db, durable=False) as state:
                self._work(state, request)
        except Exception:  # the state database gone wrong under the answer: the asker sees no answer
            log.exception("engine request %s: cannot answer", request.id)
        finally:
            context.setLocalProperty("spark.scheduler.pool", None)
            context.setLocalProperty("spark.jobGroup.id", None)

    def _work(self, state: StateStore, request: EngineRequestRecord) -> None:
        work = Work(self.settings, self.spark, self.stopping, request,
                    lambda answer: state.engine_request_progress(request.id, answer))
        try:
            if self.stopping.is_set():
                raise RequestAbandoned("the engine is stopping")
            answered = self._warm() if request.ask is EngineAsk.WARM else ANSWERS[request.ask](work)
        except Exception as exc:
            if self.stopping.is_set() or isinstance(exc, RequestAbandoned):
                state.abandon_engine_request(request.id)  # cancelled with the engine: the asker does it itself
                return
            if not isinstance(exc, FloeError):
                log.exception("engine request %s (%s) failed", request.id, request.ask)
                exc = UnforeseenError.of(exc)
            answer: dict[str, Any] = {"error": " ".join(str(exc).split())[:600], "error_kind": type(exc).__name__}
        else:
            answer = {"answer": answered.answer, "result": answered.result}
            self.warm = self.warm or request.ask in (EngineAsk.WARM, EngineAsk.PREVIEW)
        with self._lock:
            self.answered += 1
        state.answer_engine_request(request.id, **answer)

    def _warm(self) -> Answered:
        from appliance.stages.checks import warm_up

        if not self.warm:
            warm_up(self.spark)
        return Answered()
