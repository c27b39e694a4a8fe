"""Planning a batch, without I/O: pieces from positions and watermarks, next positions from results."""

from __future__ import annotations

import pytest

from appliance.core.errors import BrokerUnreachable, KafkaAccessDenied, OffsetsBeyondTopic, ReadTimeout
from appliance.ingest.jobs import asked_before, next_tick, next_wake, trickle_due
from appliance.ingest.planning import (
    Committed,
    Expired,
    advance,
    allocate,
    caught_up,
    lag,
    pack_tasks,
    plan_batch,
    plan_tasks,
)
from appliance.kafka.client import Watermarks
from appliance.kafka.reader import Piece, PieceResult


def marks(**by_partition: tuple[int, int]) -> dict[int, Watermarks]:
    return {int(p[1:]): Watermarks(*w) for p, w in by_partition.items()}


def covered(tasks: list[list[Piece]]) -> dict[int, list[tuple[int, int]]]:
    out: dict[int, list[tuple[int, int]]] = {}
    for piece in sorted((p for t in tasks for p in t), key=lambda p: (p.partition, p.start)):
        out.setdefault(piece.partition, []).append((piece.start, piece.end))
    return out


# ---- planning a batch ----


def test_a_batch_reads_from_the_positions_to_the_high_watermarks():
    plan = plan_batch({0: 10, 1: 0}, marks(p0=(0, 15), p1=(0, 3), p2=(0, 4)), budget=1000)
    assert plan.pieces == [Piece(0, 10, 15), Piece(1, 0, 3), Piece(2, 0, 4)]  # a new partition starts at 0
    assert plan.start == {0: 10, 1: 0, 2: 0} and plan.expired == []


def test_offsets_that_left_the_topic_are_skipped_and_reported():
    plan = plan_batch({0: 5, 1: 50}, marks(p0=(20, 30), p1=(0, 60)), budget=1000)
    assert plan.expired == [Expired(0, 5, 20)]
    assert "offsets 5..19 expired" in plan.expired[0].describe()
    assert plan.start[0] == 20 and plan.pieces[0] == Piece(0, 20, 30)


def test_positions_past_the_end_of_the_topic_are_an_error_naming_the_partition():
    with pytest.raises(OffsetsBeyondTopic, match="partition 1: committed offset 90 is beyond the topic's end"):
        plan_batch({0: 0, 1: 90}, marks(p0=(0, 5), p1=(0, 40)), budget=1000)


def test_nothing_to_read_plans_no_piece():
    assert plan_batch({0: 7}, marks(p0=(0, 7)), budget=1000).pieces == []


# ---- uneven partitions ----


def test_the_budget_serves_small_lags_whole_and_shares_the_rest():
    shares = allocate({0: 10, 1: 1_000_000, 2: 5, 3: 0, 4: 400}, budget=1000)
    assert shares[0] == 10 and shares[2] == 5 and 3 not in shares
    assert sum(shares.values()) == 1000 and shares[1] >= shares[4] - 1
    assert allocate({0: 3, 1: 3}, budget=1_000_000) == {0: 3, 1: 3}


def test_a_large_partition_is_cut_so_every_core_has_work():
    tasks = plan_tasks([Piece(0, 1000, 101_000), Piece(1, 0, 10)], parallelism=4)
    assert len(tasks) == 4
    sizes = sorted(sum(p.size for p in t) for t in tasks)
    assert sizes[-1] - sizes[0] <= 25_010  # balanced, largest first
    # every offset once: no gap, no overlap
    assert covered(tasks)[1] == [(0, 10)]
    spans = covered(tasks)[0]
    assert spans[0][0] == 1000 and spans[-1][1] == 101_000
    assert all(a[1] == b[0] for a, b in zip(spans, spans[1:]))


def test_a_small_batch_is_one_task():
    assert plan_tasks([Piece(0, 0, 100), Piece(1, 0, 50), Piece(2, 5, 5)], parallelism=8) == [
        [Piece(0, 0, 100), Piece(1, 0, 50)]
    ]


# ---- results to next positions: gaps ----


def test_transaction_markers_and_compacted_records_do_not_stall_a_partition():
    # The reader reports how far the log was read, past markers and compacted-away offsets.
    start = {0: 0, 1: 100}
    results = [PieceResult(0, 0, 10), PieceResult(1, 100, 160)]
    assert advance(start, results) == ({0: 10, 1: 160}, [])


def test_a_partition_stops_at_its_gap_and_the_others_commit():
    timeout = ReadTimeout("partition 1: no message at offset 120 within 10s")
    results = [PieceResult(0, 0, 10), PieceResult(1, 100, 120, timeout), PieceResult(1, 150, 150)]
    new, errors = advance({0: 0, 1: 100}, results)
    assert new == {0: 10, 1: 120} and errors == [timeout]


def test_rows_read_beyond_a_gap_abandon_the_batch_with_the_errors_type():
    results = [PieceResult(1, 100, 120, ReadTimeout("partition 1: no message at offset 120")),
               PieceResult(1, 150, 170)]
    with pytest.raises(ReadTimeout, match="batch abandoned, will be re-read: partition 1: no message at offset 120"):
        advance({1: 100}, results)


@pytest.mark.parametrize("error", [BrokerUnreachable("broker x unreachable"), KafkaAccessDenied("access denied"),
                                   ReadTimeout("no message")])
def test_a_batch_that_read_nothing_raises_the_read_error_itself(error):
    with pytest.raises(type(error)) as raised:
        advance({0: 5}, [PieceResult(0, 5, 5, error)])
    assert raised.value.retryable == error.retryable and str(error) in str(raised.value)


# ---- where a stream stands ----


def test_lag_and_caught_up_count_expired_offsets_as_read():
    now = marks(p0=(50, 80), p1=(0, 10))
    assert lag({0: 20, 1: 4}, now) == 30 + 6
    assert caught_up({0: 20, 1: 10}, now, goal={0: 50, 1: 10})
    assert not caught_up({0: 20, 1: 9}, now, goal={0: 50, 1: 10})


def test_committed_offsets_of_the_two_tables():
    fresh = Committed(None, None)
    assert fresh.read_from({0: 3, 1: 0}) == {0: 3, 1: 0} and fresh.replayed({0: 3, 1: 0}) == {}
    # a crash between the two commits: the dead-letter table is ahead, the target says where to read
    interrupted = Committed({0: 10}, {0: 20})
    assert interrupted.read_from({0: 0, 1: 0}) == {0: 10, 1: 0}
    assert interrupted.replayed({0: 0, 1: 0}) == {0: (10, 20)}
    assert Committed(None, {0: 20, 1: 4}).replayed({0: 5, 1: 4}) == {0: (5, 20)}  # the first batch interrupted
    assert interrupted.after({0: 30}, dead_letters_committed=False) == Committed({0: 30}, {0: 20})
    assert interrupted.after({0: 30}, dead_letters_committed=True) == Committed({0: 30}, {0: 30})


def test_small_batches_of_several_streams_share_one_task():
    assert pack_tasks([20] * 10, parallelism=2) == [list(range(10))]


def test_large_batches_still_spread_over_every_core():
    tasks = pack_tasks([50_000, 50_000, 20, 20], parallelism=2)
    assert len(tasks) == 2
    assert sorted(i for t in tasks for i in t) == [0, 1, 2, 3]
    assert {0, 1} not in [set(t) for t in tasks]  # the two large ones never share a task


def test_packing_never_makes_more_tasks_than_items_or_cores():
    assert pack_tasks([], parallelism=4) == []
    assert len(pack_tasks([100_000], parallelism=4)) == 1
    assert len(pack_tasks([10_000] * 8, parallelism=3)) == 3


def test_workers_wake_on_a_shared_grid():
    assert next_tick(10.0, 0.25) == 10.0
    assert next_tick(10.01, 0.25) == 10.25
    assert next_tick(10.26, 0.25) == 10.5
    assert next_tick(3.3, 0) == 3.3


def test_busy_streams_wake_on_the_shared_grid_of_commit_intervals_whatever_their_history():
    # Two streams whose last steps began a poll interval apart wake together after a read.
    assert next_wake(10.0, 10.2, True, 1.0, 0.25) == 11.0
    assert next_wake(10.25, 10.4, True, 1.0, 0.25) == 12.0  # never sooner than the commit interval
    assert next_wake(11.0, 11.3, True, 1.0, 0.25) == 12.0
    # A step that overran its interval steps again at the next poll tick, not a whole interval later.
    assert next_wake(10.0, 11.1, True, 1.0, 0.25) == 11.25
    # Idle streams poll on the poll grid, which holds the commit grid's points.
    assert next_wake(10.0, 10.05, False, 1.0, 0.25) == 10.25
    assert next_wake(10.0, 10.6, False, 1.0, 0.25) == 10.75


def test_trickles_spread_over_their_cycles_ticks():
    # A cycle of 2.5 s on a 1 s grid is 3 ticks: a stream keeps its own one of them, 3 s apart.
    assert [trickle_due(t, 2.5, 1.0, 0) for t in (9.0, 12.0, 15.0)] == [12.0, 15.0, 18.0]
    assert [trickle_due(t, 2.5, 1.0, 1) for t in (10.0, 13.0)] == [13.0, 16.0]
    # Woken a little after its tick: counted from the tick (from the wake, 4 s on a 1 s grid would be 8).
    assert [trickle_due(t, 4.0, 1.0, 0) for t in (12.03, 16.2)] == [16.0, 20.0]
    assert trickle_due(12.0, 4.0, 1.0, 0) == 16.0
    # Off its slot (its first wait, or a step that overran): the next tick of its own, never before the interval.
    assert trickle_due(10.0, 2.5, 1.0, 0) == 15.0
    assert trickle_due(12.02, 2.5, 1.0, 0) == 15.0
    assert trickle_due(12.7, 2.5, 1.0, 0) == 18.0
    # Slots spread evenly: 300 streams' slots over 3 ticks, 100 each.
    ticks = [trickle_due(0.0, 2.5, 1.0, slot) for slot in range(300)]
    assert {t: ticks.count(t) for t in set(ticks)} == {3.0: 100, 4.0: 100, 5.0: 100}
    # Ticks counted exactly where the interval is a whole number of them (2.5 s on a 0.5 s grid: 5, not 6).
    assert trickle_due(10.0, 2.5, 0.5, 0) == 12.5
    # An interval within one tick, or no grid: as before.
    assert trickle_due(10.0, 1.0, 1.0, 2) == 11.0
    assert trickle_due(10.3, 2.5, 0, 1) == pytest.approx(12.799)


def test_a_lingering_trickles_topic_is_asked_before_its_own_tick_only_while_its_rate_cannot_fill_a_batch():
    assert asked_before(16.0, 12.0, 1.0, 1000) == 16.0  # 4 messages by its tick: asked before that tick only
    assert asked_before(16.0, 12.0, 249.0, 1000) == 16.0
    assert asked_before(16.0, 12.0, 250.0, 1000) is None  # a batch's worth by then: asked before every tick
    assert asked_before(16.0, 12.0, 4500.0, 1000) is None
    assert asked_before(16.0, 17.0, 4500.0, 1000) == 16.0  # already due: nothing to wait for
