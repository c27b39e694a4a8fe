"""What every check of `floe doctor` shares: its result, a thread with a deadline to run it in, and
the masking of secrets in what it says."""

from __future__ import annotations

import dataclasses
import threading
import time
from dataclasses import dataclass
from typing import Any, Callable

from appliance.core.errors import FloeError
from appliance.core.secrets import scrub

OK, FAIL, SKIP, WARN = "ok", "fail", "skip", "warn"
GRACE = 2.0  # seconds a check may run past its own timeout (its own error says more) before it is called hung
SECRET_TODO = "set that environment variable (or make that file readable) where floe runs, or fix the reference"


@dataclass(frozen=True)
class Check:
    """One line of `floe doctor`: what was checked, how it went, and what to do when it failed."""

    name: str
    status: str  # ok, fail, skip (not tried: a check it needs failed), or warn (works, but worth a look)
    detail: str
    todo: str = ""

    @property
    def ok(self) -> bool:
        return self.status != FAIL


def passed(name: str, detail: str) -> Check:
    return Check(name, OK, detail)


def failed(name: str, detail: str, todo: str) -> Check:
    return Check(name, FAIL, detail, todo)


def skipped(name: str, detail: str) -> Check:
    return Check(name, SKIP, detail)


def one_line(exc: BaseException) -> str:
    """An error as one line: a Floe error's own message, or the exception's type and text."""
    if isinstance(exc, FloeError):
        return str(exc)
    text = " ".join(str(exc).split())
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


class Running:
    """One check in a thread of its own. `fn` returns a Check, or (Check, value) to hand a value on.
    Its result is a failed Check when it raises, or when it still runs past its deadline (the thread
    is a daemon: a server that never answers does not keep the command from exiting)."""

    def __init__(self, name: str, todo: str, fn: Callable[[], Any], timeout: float) -> None:
        self.name, self.todo, self.timeout = name, todo, timeout
        self.value: Any = None
        self._result: list[Check] = []
        self._deadline = time.monotonic() + timeout + GRACE
        self._thread = threading.Thread(target=self._run, args=(fn,), name=f"floe-doctor-{name}", daemon=True)
        self._thread.start()

    def _run(self, fn: Callable[[], Any]) -> None:
        try:
            found = fn()
        except Exception as exc:  # any failure is the check's line, never a traceback
            found = failed(self.name, one_line(exc), self.todo)
        if isinstance(found, tuple):
            found, self.value = found
        self._result.append(found)

    def result(self) -> Check:
        self._thread.join(max(0.0, self._deadline - time.monotonic()))
        if self._result:
            return self._result[0]
        return failed(self.name, f"no answer within {self.timeout:g} s", self.todo)


def run(name: str, todo: str, fn: Callable[[], Any], timeout: float) -> tuple[Check, Any]:
    """`fn` as a check with a deadline, waited for: (its Check, the value it handed on or None)."""
    running = Running(name, todo, fn, timeout)
    return running.result(), running.value


def mask(text: str, secrets: set[str]) -> str:
    """`text` with each secret value, every value a reference resolved to, and the password of any
    `scheme://user:password@` URL masked, in any form or piece (see `secrets.scrub`)."""
    return scrub(text, secrets)


def masked(check: Check, secrets: set[str]) -> Check:
    return dataclasses.replace(check, detail=mask(check.detail, secrets), todo=mask(check.todo, secrets))


def format_check(check: Check, width: int = 0) -> str:
    """`ok    catalog         ...` or `FAIL  broker[orders]  ... -> what to do`."""
    status = {OK: "ok", FAIL: "FAIL", SKIP: "skip", WARN: "warn"}[check.status]
    todo = f" -> {check.todo}" if check.status in (FAIL, WARN) and check.todo else ""
    return f"{status:5} {check.name:{width}}  {check.detail}{todo}"
