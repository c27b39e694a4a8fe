"""floe.log's line a minute of what the streams committed (`ingest/summary.py`), from real batch records."""

from __future__ import annotations

import logging

from appliance.ingest.summary import IngestSummary, Totals
from appliance.state.records import BatchRecord
from appliance.state.store import StateStore


def batch(stream: str, ms: int, messages: int, rows: int, dead: int) -> BatchRecord:
    return BatchRecord(stream=stream, started_at="2026-11-29T10:00:00+00:00", committed_at="2026-11-29T10:00:01+00:00",
                       duration_ms=ms, messages=messages, rows=rows, dead_letter_rows=dead, bytes=0,
                       target_snapshot_id=None, dead_letter_snapshot_id=None, offsets="{}", lag=0)


def test_totals_sum_the_batches_and_take_nearest_rank_quantiles():
    batches = [(f"s{i % 3}", ms, 4, 3, 1) for i, ms in enumerate(range(10, 210, 10))]  # 20 batches, 10..200 ms
    totals = Totals.of(batches)
    assert totals == Totals(batches=20, streams=3, messages=80, rows=60, dead_letter_rows=20, median_ms=100,
                            p95_ms=190, slowest_ms=200, slowest="s1")
    assert totals.describe(60.2) == ("ingest, the last 60 s: 20 batches of 3 streams committed 80 messages (60 rows, "
                                     "20 dead letters); a batch took 0.10 s at the median, 0.19 s at p95, 0.20 s at "
                                     "most (s1)")
    assert Totals.of([("a", 5, 1, 1, 0)]).describe(3).startswith(
        "ingest, the last 3 s: 1 batch of 1 stream committed 1 message (1 row, 0 dead letters)")
    assert Totals.of([]) is None


def test_each_line_holds_the_batches_since_the_last_and_none_is_written_for_none(tmp_path, caplog):
    state = StateStore(tmp_path / "state.db")
    state.record_batch(batch("before", 900, 5, 5, 0))  # committed before the summary was made: not its
    summary = IngestSummary(state, every=3600)
    assert not summary.due()
    with caplog.at_level(logging.INFO, logger="appliance.ingest.summary"):
        summary.log()
        assert caplog.messages == []
        for i in range(1, 1001):
            state.record_batch(batch(f"s{i % 200}", i, 4, 4, 0))
        summary.log()
        state.record_batch(batch("late", 5000, 1, 0, 1))
        summary.log()
        summary.log()
    first, second = caplog.messages
    assert "1,000 batches of 200 streams committed 4,000 messages (4,000 rows, 0 dead letters)" in first
    assert "0.50 s at the median, 0.95 s at p95, 1.00 s at most (s0)" in first
    assert "1 batch of 1 stream committed 1 message (0 rows, 1 dead letter)" in second
    assert "5.00 s at most (late)" in second
    summary.every = 0
    assert summary.due()
    state.close()
