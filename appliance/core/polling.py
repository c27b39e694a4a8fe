"""Waiting for a condition with a deadline: one rule for the engine, its UI and the tests.

The rule: ask `condition()` until it returns something truthy, and return that; an exception it raises
means "not yet" (the thing asked about may not exist yet) and is named in the timeout's message, unless
it is one of `fatal`, which ends the wait at once. Between two attempts, `sleep(interval)`, or longer when
asking is costly: at least SHARE times what the last attempt took, so that a wait never spends more than a
quarter of its time asking (a query over a table, a catalog load) beside the work it waits for. A `sleep`
that returns True (a `threading.Event.wait`, say) ends the wait early, with None. Once `timeout` seconds
have passed, `error` is raised, saying what was waited for.

Waiting on something that is down (a catalog, a storage, a broker) backs off: `backoff(first, longest)`
gives the pauses, doubling from `first` and bounded by `longest`, so that it is retried often enough to
resume within `longest` of its return, and no more often than that once it has been down a while.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Iterator
from typing import Any

SHARE = 3.0  # a pause is at least this many times the last attempt: asking takes at most a quarter of a wait


def backoff(first: float, longest: float) -> Iterator[float]:
    """The pauses between attempts at what is down: `first`, doubled each time, never over `longest`."""
    pause = min(first, longest)
    while True:
        yield pause
        pause = min(pause * 2, longest)


class _Attempts:
    def __init__(self, condition: Callable[[], Any], timeout: float, what: str, error: type[BaseException],
                 fatal: tuple[type[BaseException], ...]) -> None:
        self.condition, self.timeout, self.what, self.error, self.fatal = condition, timeout, what, error, fatal
        self.deadline = time.monotonic() + timeout
        self.last: BaseException | None = None
        self.took = 0.0  # seconds the last attempt took

    def attempt(self) -> Any:
        started = time.monotonic()
        try:
            return self.condition()
        except self.fatal:
            raise
        except Exception as exc:
            self.last = exc
            return None
        finally:
            self.took = time.monotonic() - started

    def pause(self, interval: float) -> float:
        """The pause before the next attempt: `interval`, or SHARE times the last attempt if that is longer,
        never past the deadline by more than `interval`."""
        return min(max(interval, SHARE * self.took), max(interval, self.deadline - time.monotonic()))

    def timed_out(self) -> BaseException | None:
        if time.monotonic() < self.deadline:
            return None
        last = f" (last error: {self.last})" if self.last else ""
        return self.error(f"timed out after {self.timeout:g}s waiting for {self.what}{last}")


def poll(condition: Callable[[], Any], timeout: float, interval: float = 0.1, what: str = "condition",
         error: type[BaseException] = TimeoutError, fatal: tuple[type[BaseException], ...] = (),
         sleep: Callable[[float], object] = time.sleep) -> Any:
    """`condition()`'s first truthy value within `timeout` seconds (see the module's rule)."""
    attempts = _Attempts(condition, timeout, what, error, fatal)
    while True:
        value = attempts.attempt()
        if value:
            return value
        failed = attempts.timed_out()
        if failed is not None:
            raise failed
        if sleep(attempts.pause(interval)) is True:
            return None


async def poll_async(condition: Callable[[], Any], timeout: float, pause: Callable[[float], Awaitable[object]],
                     interval: float = 0.1, what: str = "condition",
                     error: type[BaseException] = TimeoutError) -> Any:
    """`poll` for an event loop: `await pause(interval)` between attempts (a Textual Pilot's `pause`)."""
    attempts = _Attempts(condition, timeout, what, error, ())
    while True:
        value = attempts.attempt()
        if value:
            return value
        failed = attempts.timed_out()
        if failed is not None:
            raise failed
        await pause(attempts.pause(interval))
