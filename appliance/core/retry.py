"""Retrying work that lost a race (an optimistic Iceberg commit), one way everywhere.

Attempts end after a number of tries or a time limit; between them a pause drawn at random up
to a doubling bound (full jitter: two writers that collided do not collide again in step).
What must be checked between attempts (did our commit land after all? is the table still where
the work began?) stays with the caller, which reads `attempt.retry_state.attempt_number`:

    for attempt in retrying(CommitFailedException, "commit to t", attempts=5):
        with attempt:
            ...

When every attempt lost, the last exception is raised for the caller to turn into its own error.
"""

from __future__ import annotations

import logging

from tenacity import (
    RetryCallState,
    Retrying,
    retry_if_exception_type,
    stop_after_attempt,
    stop_after_delay,
    wait_random_exponential,
)

log = logging.getLogger(__name__)

FIRST_PAUSE = 0.05  # seconds: the bound of the first pause, doubled at each attempt
LONGEST_PAUSE = 2.0


def retrying(on: type[BaseException] | tuple[type[BaseException], ...], what: str, attempts: int | None = None,
             seconds: float | None = None) -> Retrying:
    """Attempts of the work in `what` while it raises `on`: at most `attempts`, or for `seconds`."""
    if (attempts is None) == (seconds is None):
        raise ValueError("retrying takes attempts or seconds")

    def lost(state: RetryCallState) -> None:
        exc = state.outcome.exception() if state.outcome else None
        log.info("%s lost a race (attempt %d: %s); retrying", what, state.attempt_number, exc)

    return Retrying(
        retry=retry_if_exception_type(on),
        stop=stop_after_attempt(attempts) if attempts is not None else stop_after_delay(seconds),
        wait=wait_random_exponential(multiplier=FIRST_PAUSE, max=LONGEST_PAUSE),
        before_sleep=lost,
        reraise=True,
    )
