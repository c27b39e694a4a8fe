"""Maintenance asked for by a user: from the UI, a request the running engine's maintenance thread takes
(or `floe maintain` started in the background); `floe maintain`, run now, by the running engine on its
SparkSession (`control/requests.py`) or in the command's own process."""

from __future__ import annotations

import logging
import subprocess
import threading
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from appliance.config.settings import Settings
from appliance.control.audit import audited, change
from appliance.control.processes import spawn
from appliance.core.clock import now
from appliance.core.errors import FloeError, RequestAbandoned
from appliance.core.vocabulary import EngineAsk, MaintenanceTask, RunOutcome
from appliance.state.records import RunRecord
from appliance.state.store import StateStore
from appliance.views.engine import engine_status

log = logging.getLogger(__name__)

MAINTAIN_LOG = "maintain.out"


@dataclass(frozen=True)
class MaintainLaunch:
    """`floe maintain TABLE --TASK` started in the background, with no engine to ask."""

    table: str
    task: MaintenanceTask
    at: str  # ISO 8601, UTC: its run starts after this
    process: subprocess.Popen
    log: Path


@audited(lambda a: f"maintenance request {a['task']}", "table")
def request_run(settings: Settings, table: str, task: MaintenanceTask) -> MaintainLaunch | None:
    """Ask for a run of `task` on `table` now; the `floe maintain` launched when no engine runs, else None.

    Asked afresh, not from a status shown a second ago: a request left for an engine that
    just stopped would wait for the next `floe run`.
    """
    if EngineAsk.MAINTAIN in engine_status(settings).answers:  # a long-running engine: its maintenance thread
        with StateStore(settings.state_db) as state:
            state.request_maintenance(table, task)
        return None
    at = now()
    log = settings.log_dir / MAINTAIN_LOG
    return MaintainLaunch(table, task, at, spawn(settings, ["maintain", table, f"--{task}"], log), log)


# ---- `floe maintain`: the running engine runs it on its session, else this process (its own Spark) ----


@dataclass
class Maintained:
    """What `floe maintain` did: the tables it chose (none: no tables yet) and each run, in order."""

    names: list[str] = field(default_factory=list)
    runs: list[RunRecord] = field(default_factory=list)

    @property
    def failed(self) -> int:
        return sum(run.failed for run in self.runs)

    def as_answer(self) -> dict[str, Any]:
        return {"names": self.names, "runs": [{"id": r.id, **r.row()} for r in self.runs]}

    @classmethod
    def of_answer(cls, answer: dict[str, Any] | None) -> Maintained:
        answer = answer or {}
        return cls(list(answer.get("names", [])), [RunRecord.of(r) for r in answer.get("runs", [])])


def maintain(settings: Settings, tables: list[str], tasks: list[MaintenanceTask], dry_run: bool,
             show: Callable[[RunRecord], None]) -> Maintained:
    """Run `tasks` on `tables` (every table when none is named) now, each run shown as it ends; by the
    running engine on its session, else here. One entry in the audit trail; FloeError if a task failed."""
    from appliance.control.requests import ask_engine, error_of

    shown: list[RunRecord] = []

    def progress(answer: dict[str, Any]) -> None:
        for run in Maintained.of_answer(answer).runs[len(shown):]:
            shown.append(run)
            show(run)

    args = {"tables": tables, "tasks": [str(t) for t in tasks], "dry_run": dry_run}
    asked = ask_engine(settings, EngineAsk.MAINTAIN, args, progress=progress)
    if asked.answer is None:  # no engine to ask, or it stopped: what it did is not done again
        log.info("maintain done in this process: %s", asked.why_not)
        return maintain_here(settings, tables, tasks, dry_run, show, done=shown)
    if asked.answer.error:
        raise error_of(asked.answer)
    return Maintained.of_answer(asked.answer.answer)


def maintain_here(settings: Settings, tables: list[str], tasks: list[MaintenanceTask], dry_run: bool,
                  show: Callable[[RunRecord], None], spark: Any = None, stopping: threading.Event | None = None,
                  done: list[RunRecord] = ()) -> Maintained:
    """`maintain` in this process: on `spark`, or a session of its own started when a rewrite first needs
    one; the runs `done` (by an engine that stopped) are not run again. A run the engine's stop cancelled
    breaks off (RequestAbandoned), for its asker to run."""
    from appliance.maintenance.maintainer import Maintainer

    sessions = ExitStack()  # Spark only if a task needs it (a compaction), stopped at the end

    def start_spark():
        from appliance.spark.session import command_session

        return sessions.enter_context(command_session(settings, "floe-maintain"))

    maintainer = Maintainer(settings, spark=spark or start_spark, stopping=stopping)
    try:
        names = [maintainer.catalog.check_exists(t) for t in dict.fromkeys(tables)] or maintainer.catalog.list_tables()
        out = Maintained(names, list(done))
        if not names:
            return out
        ran = {(r.table_name, r.task) for r in done}
        with change(settings, "maintenance run", ", ".join(names), tasks=[str(t) for t in tasks], dry_run=dry_run):
            for name, task in ((n, t) for n in names for t in tasks if (n, t) not in ran):
                run = maintainer.run(name, task, dry_run=dry_run)
                if stopping is not None and stopping.is_set() and run.outcome is RunOutcome.CANCELLED:
                    raise RequestAbandoned(f"the engine stopped during the {task} of {name}")
                out.runs.append(run)
                show(run)
            if out.failed:  # recorded as failed, then one line (exit 1)
                raise FloeError(f"{out.failed} maintenance task{'s' if out.failed > 1 else ''} failed")
        return out
    finally:
        maintainer.state.close()
        sessions.close()
