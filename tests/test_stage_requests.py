"""The stage editor's previews and checks, asked of the running engine through the state database and
answered on its SparkSession; with no engine to answer, `floe stage` in a process of its own.

Real parts only: the broker in its own process, the engine in this one (its answers are taken by this
process's pid), the catalog, Spark, and `floe` processes for the fallback."""

from __future__ import annotations

import os
import time

import orjson

from appliance.config.settings import load_settings
from appliance.control.requests import ask_engine, warm_engine
from appliance.control.stages import preview_for_ui, save_for_ui
from appliance.control.streams import create_stream
from appliance.core.clock import now
from appliance.core.vocabulary import EngineAsk, EngineState
from appliance.ingest.engine import Engine
from appliance.query.connection import run_query
from appliance.state.records import EngineRequestRecord
from appliance.state.store import StateStore
from appliance.tables.catalog import Catalog
from appliance.views.engine import engine_status

from conftest import wait_for

STATUSES = ["new", "paid", "sent"]
BY_STATUS = "select status, count(*) as n from source group by status"


def orders(n: int) -> list[bytes]:
    return [orjson.dumps({"order_id": i, "status": STATUSES[i % 3], "amount": i % 7 + 0.5}) for i in range(n)]


def rows(sql: str) -> list[dict]:
    return run_query(load_settings(), sql).to_pylist()


def requests(settings) -> list[EngineRequestRecord]:
    with StateStore(settings.state_db) as state:
        return [EngineRequestRecord.of(r) for r in state.db["engine_requests"].rows_where(order_by="id")]


def counts(result_rows: list[dict]) -> dict[str, int]:
    return {r["status"]: r["n"] for r in result_rows}


def test_the_running_engine_previews_checks_and_saves_for_the_editor(broker, topic, running_engine):
    settings = load_settings()
    broker.produce(topic, orders(60))
    create_stream(settings, "orders", bootstrap=broker.bootstrap, topic=topic, table="ingest.orders")
    engine = running_engine()
    wait_for(lambda: rows("select count(*) n from ingest.orders")[0]["n"] == 60, 120, what="the stream's rows")
    assert engine_status(settings).alive
    expected = {r["status"]: r["n"] for r in rows("select status, count(*) n from ingest.orders group by status")}

    assert warm_engine(settings)  # the editor opened: nothing waits for this one
    [warm] = wait_for(lambda: [r for r in requests(settings) if r.answered], 120, what="the warm-up done")
    assert warm.ask is EngineAsk.WARM and not warm.error and engine.answers.warm

    preview = preview_for_ui(settings, "ingest.orders", BY_STATUS)
    assert preview.ok and preview.by_engine, preview
    assert preview.columns == ["status", "n"] and counts(preview.rows) == expected == {s: 20 for s in STATUSES}
    assert preview.said.startswith("a group stage")
    asked = requests(settings)[-1]
    assert asked.ask is EngineAsk.PREVIEW and asked.taken_by == os.getpid() and asked.answered and not asked.error
    assert engine.answers.answered == 2

    bad = preview_for_ui(settings, "ingest.orders", "select nope from source")
    assert not bad.ok and bad.by_engine and "`nope` cannot be resolved" in bad.said and "\n" not in bad.said
    refused = preview_for_ui(settings, "ingest.orders", "select * from source order by amount")
    assert not refused.ok and "ORDER BY" in refused.said  # refused here, before anyone asks Spark
    empty = preview_for_ui(settings, "ingest.orders", "  \n")
    assert not empty.ok and "empty" in empty.said
    assert engine.answers.answered == 3

    unknown = save_for_ui(settings, "nope", "ingest.orders", "select nope from source", "prep.nope", new=True)
    assert not unknown.ok and unknown.by_engine and "`nope` cannot be resolved" in unknown.said
    assert not Catalog(settings).exists("prep.nope")
    saved = save_for_ui(settings, "by_status", "ingest.orders", BY_STATUS, "prep.by_status", new=True)
    assert saved.ok and saved.by_engine and saved.said.startswith("created group stage by_status"), saved
    wait_for(lambda: {r["status"]: r["n"] for r in rows("select status, n from prep.by_status")} == expected, 120,
             what="the saved stage run by the engine")
    richer = "select status, count(*) as n, sum(amount) as total from source group by status"
    updated = save_for_ui(settings, "by_status", "", richer, "", new=False)
    assert updated.ok and updated.by_engine and "recomputed" in updated.said, updated
    totals = {r["status"]: r["total"] for r in rows("select status, sum(amount) total from ingest.orders group by 1")}
    wait_for(lambda: {r["status"]: r["total"] for r in rows("select status, total from prep.by_status")} == totals,
             120, what="the updated stage recomputed")

    answered = requests(settings)
    assert [r.ask for r in answered] == [EngineAsk.WARM, EngineAsk.PREVIEW, EngineAsk.PREVIEW, EngineAsk.CHECK,
                                         EngineAsk.CHECK, EngineAsk.CHECK]
    assert all(r.taken_by == os.getpid() and r.answered for r in answered)
    assert engine.answers.answered == 6


def test_with_no_engine_to_answer_the_editor_runs_floe_stage_in_a_process(broker, topic, spark):
    settings = load_settings()
    broker.produce(topic, orders(30))
    create_stream(settings, "orders", bootstrap=broker.bootstrap, topic=topic, table="ingest.orders")
    Engine(settings, spark=spark).run(until_caught_up=True)  # fills the table, then stops

    started = time.monotonic()
    asked = ask_engine(settings, EngineAsk.PREVIEW, {"source": "ingest.orders", "sql": BY_STATUS, "rows": 20})
    assert asked.answer is None and asked.why_not == "no engine runs" and time.monotonic() - started < 5
    assert not warm_engine(settings)
    assert requests(settings) == []  # nothing asked of nobody

    # An engine starting (its heartbeat written, its Spark session not yet up) takes no requests and says so:
    # nobody waits for it.
    with StateStore(settings.state_db) as state:
        state.engine_heartbeat(os.getpid(), settings.spark_master, EngineState.STARTING, now())
    started = time.monotonic()
    asked = ask_engine(settings, EngineAsk.PREVIEW, {"source": "ingest.orders", "sql": BY_STATUS, "rows": 20})
    assert asked.answer is None and "takes no preview requests" in asked.why_not and time.monotonic() - started < 1
    assert requests(settings) == []
    # One that says it takes them but does not (all its hands busy): the asker withdraws the request after its
    # deadline, so that nobody answers it later.
    with StateStore(settings.state_db) as state:
        state.engine_heartbeat(os.getpid(), settings.spark_master, EngineState.RUNNING, now(), [EngineAsk.PREVIEW])
    asked = ask_engine(settings, EngineAsk.PREVIEW, {"source": "ingest.orders", "sql": BY_STATUS, "rows": 20},
                       take_within=0.5)
    assert asked.answer is None and "did not take" in asked.why_not
    [withdrawn] = requests(settings)
    assert withdrawn.withdrawn_at and withdrawn.taken_at is None
    with StateStore(settings.state_db) as state:
        assert state.take_engine_requests(os.getpid(), list(EngineAsk), 60, 5) == []
        state.engine_heartbeat(os.getpid(), settings.spark_master, EngineState.STOPPED, now())

    preview = preview_for_ui(settings, "ingest.orders", BY_STATUS)
    assert preview.ok and not preview.by_engine, preview
    assert counts(preview.rows) == {s: 10 for s in STATUSES} and preview.columns == ["status", "n"]
    # A process that fails says why in its last line, and that line is what the editor shows. It fails here
    # before its JVM starts (a Spark error's one line through `floe stage`: test_stages); a JVM's start
    # costs the suite 20 s under load.
    bad = preview_for_ui(settings, "ingest.nope", BY_STATUS)
    assert not bad.ok and not bad.by_engine and bad.said.startswith("no table named ingest.nope"), bad
    saved = save_for_ui(settings, "by_status", "ingest.orders", BY_STATUS, "prep.by_status", new=True)
    assert saved.ok and not saved.by_engine and "by_status" in saved.said, saved
    assert Catalog(settings).exists("prep.by_status") and requests(settings) == [withdrawn]
