"""`floe stream list` and `floe status` with 500 streams: filters (name pattern, state, namespace), sorting,
and every stream's figures read in a few queries, not a few per stream (issue 32). No Spark, no broker."""

from __future__ import annotations

import json
import sqlite3
import time

import pytest

from appliance.config.settings import ensure_home, load_settings

from commands import floe
from many_streams import STREAMS, engine_up, fill


@pytest.fixture
def many(floe_home):
    settings = load_settings()
    ensure_home(settings)
    fill(settings)
    engine_up(settings)  # states are shown as written, not `stopped`
    return settings


def listed(*args: str) -> list[dict]:
    result = floe("stream", "list", "--format", "json", *args)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def test_stream_list_filters_by_name_state_and_namespace_and_sorts(many):
    assert len(listed()) == STREAMS
    orders = listed("--name", "orders_*")
    assert len(orders) == STREAMS // 2 and all(r["name"].startswith("orders_") for r in orders)
    assert [r["name"] for r in listed("--name", "ERS_12")] == ["orders_121", "orders_123", "orders_125",
                                                                "orders_127", "orders_129"]  # any part, any case
    failed = listed("--state", "failed")
    assert failed and {r["state"] for r in failed} == {"failed"}
    assert {r["name"] for r in failed} == {f"orders_{i:03d}" for i in range(STREAMS) if i % 10 == 3 and i % 7}
    paused = listed("--state", "paused", "--namespace", "web")
    assert {r["name"] for r in paused} == {f"clicks_{i:03d}" for i in range(0, STREAMS, 2) if i % 7 == 0}
    by_lag = listed("--sort", "lag", "--namespace", "sales")
    assert [r["lag"] for r in by_lag] == sorted((r["lag"] for r in by_lag), reverse=True)
    assert by_lag[0]["name"] == "orders_499"
    errors_first = listed("--sort", "errors")
    assert {r["name"] for r in errors_first[:len(failed)]} == {r["name"] for r in failed}
    table = floe("stream", "list", "--name", "nothing_like_it")
    assert table.returncode == 0 and f"none of the {STREAMS} streams matches" in table.stderr
    bad = floe("stream", "list", "--sort", "size")
    assert bad.returncode == 2 and "'size' is not one of" in bad.stderr


def test_status_and_stream_list_read_500_streams_in_a_few_queries(many):
    from appliance.views.status import status_report
    from appliance.views.streams import streams_overview

    statements: list[str] = []
    real = sqlite3.connect

    def counting(*args, **kwargs):
        conn = real(*args, **kwargs)
        conn.set_trace_callback(statements.append)
        return conn

    sqlite3.connect = counting
    try:
        started = time.perf_counter()
        views = streams_overview(many)
        report = status_report(many)
        seconds = time.perf_counter() - started
    finally:
        sqlite3.connect = real
    assert len(views) == STREAMS and len(report.streams) == STREAMS
    assert all(len(v.throughput) == 24 and sum(v.throughput) > 0 for v in views)
    # sqlite-utils' look at the schema is a constant; what reads the streams' rows must not grow with them.
    reads = [s for s in statements if s.lstrip().lower().startswith("select") and "sqlite_master" not in s]
    assert len(reads) < 30, f"{len(reads)} queries for {STREAMS} streams"
    assert seconds < 5.0  # 0.1 s on an idle machine (scripts/bench_cli --streams 500); generous under load
