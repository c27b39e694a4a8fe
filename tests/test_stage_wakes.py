"""The stage thread's wakes: a stream's commit wakes it only when a stage exists; a stage made while the
engine runs is still run within `POLL`."""

from __future__ import annotations

import contextlib
import threading
import time
from types import SimpleNamespace

from appliance.stages import scheduler
from appliance.stages.scheduler import POLL, StageScheduler
from conftest import wait_for


class _State:
    def __init__(self) -> None:
        self.defined: list = []
        self.looks = 0

    def stages(self) -> list:
        self.looks += 1
        return list(self.defined)


def _committing(changed: threading.Event, stop: threading.Event) -> None:
    while not stop.is_set():  # as 200 streams do: a commit every 10 ms
        changed.set()
        stop.wait(0.01)


def test_commits_wake_the_stage_thread_only_once_a_stage_exists(monkeypatch):
    state = _State()
    monkeypatch.setattr(scheduler, "StateStore", lambda *a, **k: contextlib.nullcontext(state))
    catalog = SimpleNamespace(location=lambda table: f"{table}@{time.monotonic()}")  # a source that always moved
    stopping, changed, done = threading.Event(), threading.Event(), threading.Event()
    stages = StageScheduler(SimpleNamespace(state_db=None), None, catalog, stopping, changed)
    ran: list[float] = []
    monkeypatch.setattr(stages, "_run", lambda state, stage: (ran.append(time.monotonic()), (True, None))[1])
    committer = threading.Thread(target=_committing, args=(changed, done), daemon=True)
    committer.start()
    stages.start()
    try:
        time.sleep(1.0)  # a window to count the looks in, not a wait for a condition
        assert state.looks <= 1.0 / POLL + 2, state.looks  # not one look per commit (about 100)
        created = time.monotonic()
        state.defined = [SimpleNamespace(id=1, name="counts", sql="select 1", updated_at="t", source="ingest.live",
                                         table="prep.counts", paused=False)]
        wait_for(lambda: ran, 5, 0.01, "the new stage run")
        assert ran[0] - created <= POLL + 0.2, "a new stage waits no longer than before"
        looks = state.looks
        time.sleep(0.5)
        assert state.looks - looks >= 0.5 / POLL + 5, state.looks - looks  # with a stage, commits wake it again
    finally:
        done.set()
        stopping.set()
        stages.join(2)
