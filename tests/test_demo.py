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
