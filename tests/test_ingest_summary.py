"""The engine's lines a minute in floe.log of what the streams committed and the stages ran (`ingest/summary.py`),
from real batch and stage run records."""

from __future__ import annotations

import logging

from appliance.ingest.summary import EngineSummary, StageTotals, Times, Totals
from appliance.state.records import BatchRecord, StageRunRecord
from appliance.state.store import StateStore


def batch(stream: str, ms: int, messages: int, rows: int, dead: int) -> BatchRecord:
    return BatchRecord(stream=stream, started_at="2026-11-29T10:00:00+00:00", committed_at="2026-11-29T10:00:01+00:00",
                       duration_ms=ms, messages=messages, rows=rows, dead_letter_rows=dead, bytes=0,
                       target_snapshot_id=None, dead_letter_snapshot_id=None, offsets="{}", lag=0)


def run(stage: str, ms: int, rows_in: int, rows_out: int, outcome: str = "ok") -> StageRunRecord:
    return StageRunRecord(stage, "2026-11-29T10:00:00+00:00", "2026-11-29T10:00:01+00:00", ms, 1, 2, rows_in, rows_out,
                          outcome)


def test_totals_sum_the_batches_and_take_nearest_rank_quantiles():
    batches = [(f"s{i % 3}", ms, 4, 3, 1) for i, ms in enumerate(range(10, 210, 10))]  # 20 batches, 10..200 ms
    totals = Totals.of(batches)
    assert totals == Totals(batches=20, streams=3, messages=80, rows=60, dead_letter_rows=20,
                            times=Times(median_ms=100, p95_ms=190, slowest_ms=200, slowest="s1"))
    assert totals.describe(60.2) == ("ingest, the last 60 s: 20 batches of 3 streams committed 80 messages (60 rows, "
                                     "20 dead letters); a batch took 0.10 s at the median, 0.19 s at p95, 0.20 s at "
                                     "most (s1)")
    assert Totals.of([("a", 5, 1, 1, 0)]).describe(3).startswith(
        "ingest, the last 3 s: 1 batch of 1 stream committed 1 message (1 row, 0 dead letters)")
    assert Totals.of([]) is None


def test_stage_totals_count_failed_runs_but_time_only_those_that_ran():
    runs = [("hourly", 800, 100, 10, "ok"), ("daily", 2100, 50, 1, "ok"), ("hourly", 0, 0, 0, "failed")]
    assert StageTotals.of(runs).describe(61) == (
        "stages, the last 61 s: 3 runs of 2 stages (1 failed), 150 rows in, 11 out; a run took 0.80 s at the "
        "median, 2.10 s at p95, 2.10 s at most (daily)")
    assert StageTotals.of([("hourly", 0, 0, 0, "failed")]).describe(5) == (
        "stages, the last 5 s: 1 run of 1 stage (1 failed), 0 rows in, 0 out")
    assert StageTotals.of([]) is None


def test_each_line_holds_what_came_since_the_last_and_none_is_written_for_nothing(tmp_path, caplog):
    state = StateStore(tmp_path / "state.db")
    state.record_batch(batch("before", 900, 5, 5, 0))  # committed before the summary was made: not its
    state.record_stage_run(run("before", 900, 5, 5))
    summary = EngineSummary(state, every=3600)
    assert not summary.due()
    with caplog.at_level(logging.INFO, logger="appliance.ingest.summary"):
        summary.log()
        assert caplog.messages == []
        for i in range(1, 1001):
            state.record_batch(batch(f"s{i % 200}", i, 4, 4, 0))
        summary.log()
        state.record_batch(batch("late", 5000, 1, 0, 1))
        state.record_stage_run(run("hourly", 1500, 1000, 20))
        summary.log()
        summary.log()
    first, second, third = caplog.messages
    assert "1,000 batches of 200 streams committed 4,000 messages (4,000 rows, 0 dead letters)" in first
    assert "0.50 s at the median, 0.95 s at p95, 1.00 s at most (s0)" in first
    assert "1 batch of 1 stream committed 1 message (0 rows, 1 dead letter)" in second
    assert "5.00 s at most (late)" in second
    assert third.startswith("stages, the last ") and "1 run of 1 stage, 1,000 rows in, 20 out" in third
    assert "1.50 s at most (hourly)" in third
    summary.every = 0
    assert summary.due()
    state.close()
