"""Floe's own commands as processes: the engine (`floe run`) and `floe maintain` in the background,
and commands the UI waits for (`floe stage preview`, which needs a Spark of its own).

The one place that starts them. A background one runs in its own session, so it keeps going
after the UI (or the demo) that started it and its terminal are gone, and logs to a file
under `FLOE_HOME/logs`, where a failure to start can be read back.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from appliance.config.settings import Settings
from appliance.control.audit import change
from appliance.core.logfiles import CONSOLE_LOG
from appliance.views.engine import engine_status

ENGINE_LOG = "engine.out"
ENGINE_START_TIMEOUT = 180.0  # seconds: a cold JVM on a busy 2-core machine takes tens of them


def floe_command(*args: str) -> list[str]:
    return [sys.executable, "-m", "appliance.cli", *args]


def spawn(settings: Settings, args: list[str], log: Path) -> subprocess.Popen:
    """`floe ARGS` in the background on this FLOE_HOME (whatever the environment says), output to `log`:
    at first straight (a failure to start is there), then through the command's own console sink, which
    rolls the file at `[logs] max_size` (`cli/base.settings`)."""
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(os.open(log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600), "ab") as out:
        env = {**os.environ, "FLOE_HOME": str(settings.home), CONSOLE_LOG: str(log)}
        return subprocess.Popen(floe_command(*args), stdout=out, stderr=out, stdin=subprocess.DEVNULL,
                                start_new_session=True, env=env)


def run_floe(settings: Settings, args: list[str], timeout: float = 300.0) -> subprocess.CompletedProcess:
    """`floe ARGS` on this FLOE_HOME, waited for: its exit code, stdout and stderr."""
    return subprocess.run(floe_command(*args), capture_output=True, text=True, timeout=timeout,
                          stdin=subprocess.DEVNULL, env={**os.environ, "FLOE_HOME": str(settings.home)})


def said_last(done: subprocess.CompletedProcess) -> str:
    """What a `floe` command said last on stderr (its one-line error, when it failed), without the prefix."""
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    return lines[-1].removeprefix("floe: error: ") if lines else ""


def stop(process: subprocess.Popen, timeout: float = 60.0) -> None:
    """SIGTERM (the engine finishes its batch), then SIGKILL if it does not end in time."""
    process.terminate()
    try:
        process.wait(timeout)
    except subprocess.TimeoutExpired:
        process.kill()


def last_line(path: Path, since: int = 0) -> str:
    """The last non-blank line written to `path` after byte `since`."""
    with path.open("rb") as f:
        f.seek(since)
        lines = [line.strip() for line in f.read().decode(errors="replace").splitlines() if line.strip()]
    return lines[-1] if lines else f"no output; see {path}"


@dataclass(frozen=True)
class StartOutcome:
    alive: bool
    exit_code: int | None = None  # the engine exited before it was alive
    last_line: str = ""  # its last words then


@dataclass
class EngineLaunch:
    process: subprocess.Popen
    log: Path
    log_start: int  # where this run's output starts in the log

    def wait_until_alive(self, settings: Settings, timeout: float = ENGINE_START_TIMEOUT,
                         cancelled: Callable[[], bool] = lambda: False) -> StartOutcome:
        """Until the engine reports itself alive, or exits first (no Java, a bad config, another engine)."""
        deadline = time.monotonic() + timeout
        while not cancelled() and time.monotonic() < deadline:
            code = self.process.poll()
            if code is not None:
                return StartOutcome(False, code, last_line(self.log, self.log_start))
            if engine_status(settings).alive:
                return StartOutcome(True)
            time.sleep(0.5)
        return StartOutcome(engine_status(settings).alive)


def start_engine(settings: Settings, log_name: str = ENGINE_LOG) -> EngineLaunch:
    """`floe run` in the background (the UI's Ctrl+E, `floe demo`), recorded in the audit trail: starting
    the engine changes what is ingested. Whether it then comes alive is its log's and heartbeat's to say."""
    log = settings.log_dir / log_name
    with change(settings, "engine start", str(settings.home), log=str(log)):
        start = log.stat().st_size if log.exists() else 0
        return EngineLaunch(spawn(settings, ["run"], log), log, start)
