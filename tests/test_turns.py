"""Stream workers take turns at the driver's Python work (`appliance/ingest/turns.py`): one at a time, a turn
given up while waiting for a job, and never a wait past the holder's `patience`."""

import threading
import time

from appliance.ingest.turns import Turns


def holder(turns: Turns) -> tuple[threading.Thread, threading.Event, threading.Event]:
    """A thread that takes the turn and keeps it until told: the thread, `taken`, and `release`."""
    taken, release = threading.Event(), threading.Event()

    def hold():
        with turns.turn():
            taken.set()
            release.wait(30)

    thread = threading.Thread(target=hold)
    thread.start()
    assert taken.wait(10)
    return thread, taken, release


def test_one_worker_at_a_time_the_next_as_soon_as_the_turn_is_left():
    turns = Turns(patience=30.0)
    thread, _, release = holder(turns)
    got = threading.Event()

    def wait_turn():
        with turns.turn():
            got.set()

    waiter = threading.Thread(target=wait_turn)
    waiter.start()
    assert not got.wait(0.3), "the turn is held by another worker"
    release.set()
    assert got.wait(10)
    thread.join(10)
    waiter.join(10)
    assert turns.waited_out == 0


def test_a_turn_kept_past_patience_is_not_waited_for_again():
    turns = Turns(patience=0.2)
    thread, _, release = holder(turns)
    started = time.monotonic()
    with turns.turn():
        assert not turns.held(), "went on beside the holder"
    assert time.monotonic() - started < 5
    assert turns.waited_out == 1
    # The holder has now kept it past its patience: the next worker does not wait at all.
    started = time.monotonic()
    with turns.turn():
        pass
    assert time.monotonic() - started < 0.15
    assert turns.waited_out == 2
    release.set()
    thread.join(10)
    with turns.turn():  # left: the next takes it
        assert turns.held()


def test_a_turn_given_up_while_waiting_is_taken_back_and_reentry_changes_nothing():
    turns = Turns(patience=30.0)
    job_done, waiting, others = threading.Event(), threading.Event(), []

    def worker():
        with turns.turn():
            with turns.turn():  # re-entered: still held, not taken twice
                assert turns.held()
            assert turns.held()
            with turns.given_up():
                assert not turns.held()
                waiting.set()
                job_done.wait(30)
            assert turns.held()

    thread = threading.Thread(target=worker)
    thread.start()

    def other():
        with turns.turn():
            others.append(turns.held())

    assert waiting.wait(10)
    t = threading.Thread(target=other)
    t.start()
    t.join(10)
    assert others == [True], "another worker took the turn while the first waited for its job"
    job_done.set()
    thread.join(10)
    assert turns.waited_out == 0
