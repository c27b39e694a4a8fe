"""`floe` commands for the tests: in this process (`floe`), or in a process of their own (`floe_process`).

A `floe` process costs a Python start and its imports, and a JVM if the command needs Spark, where the
test's process has all of that loaded already. So a command runs here, on the test's FLOE_HOME, as
`appliance.cli.main` runs it in a process: the same exit code, its stdout and stderr apart, with what
C libraries print on file descriptors 1 and 2, its log in FLOE_HOME's logs/. A command that needs
Spark uses the session's SparkSession and leaves it running (`spark.session.command_session`).

A process of its own is for what only a process shows: a SIGKILL (a fail point that kills), a command
that runs until a signal (`floe run`, `demo`, `broker`, `registry`, `watch`, `tui`), the command's start
itself (its imports, its entry point); `floe` refuses those.
"""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import tempfile
import threading
import traceback
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path

from click.testing import CliRunner

ROOT = Path(__file__).resolve().parent.parent
FLOE = [sys.executable, "-m", "appliance.cli"]
LONG_RUNNING = {"run", "demo", "broker", "registry", "tui"}
# A command here takes over what is the process's own (sys.stdout, descriptors 1 and 2, sys.argv, the root
# logger): two at once, from a test's threads, would write into each other's output.
_ONE_AT_A_TIME = threading.Lock()


def floe_process(*args: str, env: dict | None = None, timeout: float = 300,
                 input: str | None = None) -> subprocess.CompletedProcess:
    """Run the `floe` command as a user would, in its own process."""
    return subprocess.run(
        FLOE + list(args), capture_output=True, text=True, timeout=timeout, cwd=ROOT,
        env={**os.environ, **(env or {})}, input=input,
    )


def _needs_a_process(args: tuple[str, ...], env: dict | None) -> str | None:
    if env and "FLOE_FAILPOINTS" in env:
        return "its fail points are read when a process starts, and one may kill it"
    if args and args[0] in LONG_RUNNING or args[:1] == ("watch",) and "--once" not in args:
        return "it runs until a signal"
    return None


def floe(*args: str, env: dict | None = None, timeout: float = 300,
         input: str | None = None) -> subprocess.CompletedProcess:
    """Run `floe ARGS` in this process, as its own process would (see the module's doc); `timeout` is
    pytest-timeout's here."""
    why = _needs_a_process(args, env)
    if why:
        raise ValueError(f"floe {' '.join(args)}: use floe_process, {why}")
    from appliance.cli import main

    code, fd_out, fd_err = 0, "", ""
    with _ONE_AT_A_TIME, command_logging():
        with ExitStack() as stack:
            out, err, _ = stack.enter_context(CliRunner().isolation(input=input, env=env))
            fds = stack.enter_context(_descriptors())
            argv = sys.argv
            sys.argv = ["floe", *args]
            try:
                main()
            except SystemExit as exc:
                code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
            except Exception:  # what Python does with an uncaught exception: a traceback and exit 1
                sys.stderr.write(traceback.format_exc())
                code = 1
            finally:
                sys.argv = argv
                sys.stdout.flush()
                sys.stderr.flush()
            stdout, stderr = out.getvalue().decode(), err.getvalue().decode()
        fd_out, fd_err = fds
    return subprocess.CompletedProcess(["floe", *args], code, stdout + fd_out, stderr + fd_err)


@contextmanager
def command_logging() -> Iterator[None]:
    """Meanwhile the root logger has none of pytest's handlers, so that a command's `logging.basicConfig`
    (`appliance.cli.base.settings`) writes FLOE_HOME's logs/floe.log, as in a process of its own."""
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    root.handlers = []
    try:
        yield
    finally:
        for handler in root.handlers:
            handler.close()
        root.handlers, root.level = handlers, level


class _descriptors:
    """File descriptors 1 and 2 into files meanwhile; afterwards, as (stdout, stderr), what was written
    there below Python (librdkafka's log, say)."""

    def __enter__(self) -> list[str]:
        self.result: list[str] = ["", ""]
        self.files = [tempfile.TemporaryFile(), tempfile.TemporaryFile()]
        self.saved = [os.dup(1), os.dup(2)]
        for fd, file in zip((1, 2), self.files):
            os.dup2(file.fileno(), fd)
        return self.result

    def __exit__(self, *exc) -> None:
        for i, (fd, file) in enumerate(zip((1, 2), self.files)):
            os.dup2(self.saved[i], fd)
            os.close(self.saved[i])
            file.seek(0)
            self.result[i] = file.read().decode(errors="replace")
            file.close()
