"""`floe demo`, as the README's first command runs it: broker, publisher, stream, engine, live status."""

import json
import signal
import subprocess

from conftest import FLOE, ROOT, floe, wait_for


def test_demo_ingests_pizza_orders_and_stops_cleanly(tmp_path):
    out = tmp_path / "demo.out"
    with out.open("w") as sink:
        demo = subprocess.Popen(FLOE + ["demo", "--rate", "200", "--no-ui"], cwd=ROOT, stdout=sink, stderr=subprocess.STDOUT)
        try:
            def ingested():
                result = floe("query", "select (select count(*) from ingest.pizza_orders) as n,"
                                       " (select count(*) from ingest.pizza_orders_dlq) as d", "--format", "json")
                return result.returncode == 0 and json.loads(result.stdout)["n"] >= 500
            wait_for(ingested, 180, interval=1, what="demo rows in ingest.pizza_orders")
            wait_for(lambda: "rows," in out.read_text() and "msg/s" in out.read_text(), 30, what="a status line")
        finally:
            demo.send_signal(signal.SIGINT)
            code = demo.wait(90)
    text = out.read_text()
    assert code == 0, text
    assert "embedded broker on 127.0.0.1:" in text
    assert 'name = "ordered_at", type = "timestamptz"' in text
    assert "Traceback" not in text
    rows = json.loads(floe("query", "select count(*) as n, count(distinct (_kafka_partition, _kafka_offset)) as once,"
                                    " min(total) > 0 as positive from ingest.pizza_orders", "--format", "json").stdout)
    assert rows["n"] == rows["once"] and rows["positive"] is True
    stream = json.loads(floe("stream", "list", "--format", "json").stdout)
    assert [s["name"] for s in stream] == ["pizza_orders"]


def test_a_second_demo_resumes_the_first_with_what_the_user_built_on_it(floe_home, spark):
    """The user builds a stage on the demo's table; `floe demo` again keeps the stream, its tables and
    the stage, and orders keep landing after those of the first demo, every offset once."""
    import threading

    from appliance.auditor import audit_stream
    from appliance.config.settings import load_settings
    from appliance.control.stages import create_stage
    from appliance.demo.run import run_demo
    from appliance.query.connection import run_query
    from appliance.state.store import StateStore
    from appliance.tables.catalog import Catalog

    settings = load_settings()

    def count(table: str = "ingest.pizza_orders") -> int:
        return run_query(settings, f"select count(*) as n from {table}").to_pylist()[0]["n"]

    def demo(until, then=lambda: None) -> list[str]:
        """`floe demo --no-ui` in this process, on the session's Spark, until `until()`; `then()` before it ends."""
        said, failed, stop = [], [], threading.Event()

        def run() -> None:
            try:
                run_demo(settings, 300, stop, said.append, spark=spark)
            except BaseException as exc:
                failed.append(exc)

        thread = threading.Thread(target=run, daemon=True)
        thread.start()
        try:
            wait_for(lambda: failed or until(), 180, interval=0.5, what="demo rows")
            assert not failed, failed[0]
            then()
        finally:
            stop.set()
            thread.join(60)
        assert not failed, failed[0]
        return said

    demo(lambda: count() > 0)
    first = count()
    create_stage(settings, "by_status", source="ingest.pizza_orders", table="prep.by_status", spark=spark,
                 sql="select status, count(*) as n from source group by status")
    audits = []
    said = demo(lambda: count() >= first + 100, then=lambda: audits.append(audit_stream(settings, "pizza_orders")))

    assert any(line.startswith("resuming the demo stream pizza_orders") for line in said), said
    with StateStore(settings.state_db) as state:
        assert [s.name for s in state.stages()] == ["by_status"]
        assert [s.name for s in state.streams()] == ["pizza_orders"]
    assert audits[0].ok, audits[0].render()
    assert Catalog(settings).exists("prep.by_status")
