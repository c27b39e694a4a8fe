"""The one rule for waiting with a deadline (appliance/core/polling.py), which the engine, its UI and the
tests' `wait_for` and `until` share."""

import asyncio
import threading

import pytest

from appliance.core.polling import poll, poll_async


def test_the_first_truthy_value_is_returned_and_errors_meanwhile_mean_not_yet():
    answers = iter([KeyError("not there yet"), 0, None, "ready"])

    def condition():
        answer = next(answers)
        if isinstance(answer, Exception):
            raise answer
        return answer

    assert poll(condition, 5, interval=0.001) == "ready"


def test_a_timeout_says_what_was_waited_for_and_the_last_error():
    def condition():
        raise KeyError("the table")

    with pytest.raises(AssertionError, match=r"timed out after 0.05s waiting for the rows \(last error: 'the table'\)"):
        poll(condition, 0.05, interval=0.01, what="the rows", error=AssertionError)


def test_a_fatal_error_ends_the_wait_at_once_and_a_sleep_that_says_stop_ends_it_with_none():
    calls = []

    def dead():
        calls.append(1)
        raise ProcessLookupError("the server died")

    with pytest.raises(ProcessLookupError):
        poll(dead, 60, fatal=(ProcessLookupError,))
    assert len(calls) == 1
    stop = threading.Event()
    stop.set()
    assert poll(lambda: False, 60, sleep=stop.wait) is None


def test_the_async_form_pauses_between_attempts():
    pauses = []

    async def pause(seconds):
        pauses.append(seconds)

    values = iter([False, False, 7])
    assert asyncio.run(poll_async(lambda: next(values), 5, pause, interval=0.2)) == 7
    assert pauses == [0.2, 0.2]


def test_a_costly_condition_is_asked_at_most_a_quarter_of_the_wait():
    """Asking takes time (a query, a catalog load): the pause after an attempt is at least SHARE times what it
    took, so that the wait does not crowd out the work it waits for; a cheap one keeps the interval."""
    import time

    from appliance.core.polling import SHARE

    pauses: list[float] = []
    values = iter([False, False, 7])

    def costly():
        time.sleep(0.05)  # stands for the cost of asking, not for waiting
        return next(values)

    assert poll(costly, 5, interval=0.01, sleep=pauses.append) == 7
    assert len(pauses) == 2 and all(p >= SHARE * 0.05 for p in pauses), pauses
    pauses.clear()
    values = iter([False, 1])
    assert poll(lambda: next(values), 5, interval=0.01, sleep=pauses.append) == 1
    assert pauses == [0.01]
