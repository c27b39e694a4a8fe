"""Observability end to end, with real parts: alerts that reach a real HTTP webhook through Apprise,
Prometheus metrics scraped over HTTP, the system tables read with DuckDB, `floe status` and
`floe watch --once` as a monitor would run them."""

from __future__ import annotations

import getpass
import json
import os
import signal
import subprocess
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.request import urlopen

import orjson
import pytest
from prometheus_client.parser import text_string_to_metric_families

from appliance.config.settings import load_settings
from appliance.control.alerts import add_alert
from appliance.control.streams import create_stream
from appliance.query.session import QuerySession
from appliance.state.store import StateStore
from appliance.views.status import status_report

from conftest import FLOE, ROOT, BrokerProcess, floe, pizza_values, wait_for


class Webhook:
    """A local HTTP server that keeps every JSON notification Apprise posts to it."""

    def __init__(self) -> None:
        received = self.received = []

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                received.append(json.loads(body))
                self.send_response(200)
                self.end_headers()

            def log_message(self, *args) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.url = f"json://127.0.0.1:{self.server.server_port}/hook"

    def titles(self) -> list[str]:
        return [m["title"] for m in self.received]

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def webhook():
    hook = Webhook()
    yield hook
    hook.close()


def quick_alerting(home, **observe) -> None:
    """Alerts looked at twice a second, incidents that resolve after 2 s clear, system tables every 2 s."""
    home.mkdir(parents=True, exist_ok=True)
    extra = "".join(f"{k} = {v!r}\n".replace("'", '"') for k, v in observe.items())
    (home / "floe.toml").write_text(
        '[alerting]\nevaluate_interval = "500ms"\ncooldown = "2s"\nnotify_attempts = 2\n'
        '[observe]\nsystem_tables_interval = "2s"\n' + extra)


def metrics(url: str) -> dict[tuple[str, tuple], float]:
    text = urlopen(url, timeout=10).read().decode()
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def query(sql: str) -> list[tuple]:
    with QuerySession(load_settings()) as session:
        table = session.run(sql)
    return list(zip(*(c.to_pylist() for c in table.columns)))


def test_bad_messages_open_one_incident_then_resolve_once(broker, topic, running_engine, webhook, floe_home):
    quick_alerting(floe_home)
    settings = load_settings()
    produced_from = time.time()
    broker.produce(topic, pizza_values(200))
    create_stream(settings, "orders", bootstrap=broker.bootstrap, topic=topic, table="ingest.orders")
    add_alert(settings, "bad-input", "dead_letter_ratio > 0.2", [webhook.url], stream="orders", for_="4s")
    engine = running_engine(metrics_port=0)
    wait_for(lambda: engine.metrics is not None and StateStore(settings.state_db).status("orders").rows_total == 200,
             what="the good rows")
    assert status_report(settings).exit_code == 0

    broker.produce(topic, [b"{not json"] * 100)
    wait_for(lambda: len(webhook.received) == 1, timeout=30, what="the incident's notification")
    opened = webhook.received[0]
    assert opened["title"] == "[Floe] OPEN: bad-input (dead_letter_ratio > 0.2) on stream orders"
    assert "ingest.orders_dlq" in opened["message"] and opened["type"] == "failure"
    report = status_report(settings)
    assert report.exit_code == 1 and [i.alert for i in report.incidents] == ["bad-input"]
    assert floe("status").returncode == 1

    # Good messages again: the ratio over the 4 s window falls, and 2 s later the incident resolves.
    stop = threading.Event()
    sent = [200]

    def good() -> None:
        while not stop.wait(0.2):
            broker.produce(topic, pizza_values(20, start=sent[0]))
            sent[0] += 20

    feeder = threading.Thread(target=good)
    feeder.start()
    try:
        wait_for(lambda: len(webhook.received) >= 2, timeout=40, what="the resolution's notification")
    finally:
        stop.set()
        feeder.join()
    assert webhook.titles()[1] == "[Floe] RESOLVED: bad-input (dead_letter_ratio > 0.2) on stream orders"
    with StateStore(settings.state_db) as state:
        incidents = state.incidents("bad-input")
        assert len(incidents) == 1 and incidents[0].notified_open and incidents[0].notified_resolved
    assert len(webhook.received) == 2, "notified once when it opened and once when it resolved"

    # Prometheus: the same counts the tables hold, scraped over HTTP and parsed.
    rows = sent[0]
    wait_for(lambda: StateStore(settings.state_db).status("orders").rows_total == rows, what="every good row")
    scraped = wait_for(lambda: (m := metrics(engine.metrics.url))[("floe_stream_rows_total", (("stream", "orders"),))]
                       == rows and m, what="the metrics to count every row")
    label = (("stream", "orders"),)
    assert scraped[("floe_stream_dead_letters_total", label)] == 100
    assert scraped[("floe_stream_messages_total", label)] == rows + 100
    assert scraped[("floe_stream_up", label)] == 1
    assert scraped[("floe_table_rows_total", (("stream", "orders"), ("table", "ingest.orders")))] == rows  # per table
    assert scraped[("floe_stream_batch_duration_seconds_count", label)] >= 2
    # The newest committed row's age: seconds (not milliseconds), since this test produced it.
    assert 0 <= scraped[("floe_stream_freshness_seconds", label)] <= time.time() - produced_from
    assert ("floe_stream_lag_messages", label) in scraped

    # Everything as tables: batches, events and the audit trail, read with DuckDB.
    wait_for(lambda: query("select sum(messages) from floe.batches where stream = 'orders'")[0][0] == rows + 100,
             timeout=30, what="floe.batches to hold every batch")
    fresh = query("select min(freshness_newest_s), min(freshness_median_s), count(*) from floe.batches "
                  "where freshness_median_s >= freshness_newest_s")
    assert 0 <= fresh[0][0] <= time.time() - produced_from
    assert fresh[0][2] == query("select count(*) from floe.batches")[0][0]
    expected = {"stream_created", "alert_added", "incident_opened", "incident_resolved"}
    wait_for(lambda: {k for (k,) in query("select kind from floe.events")} >= expected, what="floe.events")
    audit = query("select action, target, os_user, via, outcome, arguments from floe.audit order by changed_at")
    assert [(a, t, u, v, o) for a, t, u, v, o, _ in audit] == [
        ("stream create", "orders", getpass.getuser(), "cli", "ok"),
        ("alert add", "bad-input", getpass.getuser(), "cli", "ok")]
    assert json.loads(audit[1][5])["notify"] == [webhook.url]


def test_a_frozen_broker_opens_stalled_and_status_says_degraded(topic, running_engine, webhook, floe_home):
    quick_alerting(floe_home)
    (floe_home / "floe.toml").write_text((floe_home / "floe.toml").read_text() + '[engine]\nfetch_timeout = "2s"\n'
                                         'retry_backoff = "1s"\n')
    own = BrokerProcess()  # frozen below: not the session's broker
    try:
        settings = load_settings()
        own.produce(topic, pizza_values(50))
        create_stream(settings, "frozen", bootstrap=own.bootstrap, topic=topic, table="ingest.frozen")
        add_alert(settings, "stuck", "stalled", [webhook.url], stream="frozen", for_="3s")
        running_engine()
        wait_for(lambda: StateStore(settings.state_db).status("frozen").rows_total == 50, what="the first rows")
        os.kill(own.proc.pid, signal.SIGSTOP)
        try:
            wait_for(lambda: webhook.received, timeout=60, what="the stalled notification")
            assert webhook.titles() == ["[Floe] OPEN: stuck (stalled) on stream frozen"]
            assert status_report(settings).exit_code == 1
        finally:
            os.kill(own.proc.pid, signal.SIGCONT)
        wait_for(lambda: len(webhook.received) == 2, timeout=60, what="the stream to commit again and resolve")
        assert webhook.titles()[1] == "[Floe] RESOLVED: stuck (stalled) on stream frozen"
    finally:
        own.stop()


def test_watch_reports_a_killed_engine_once_and_its_return(webhook, floe_home):
    quick_alerting(floe_home)
    assert floe("alert", "add", "down", "--rule", "engine_down", "--notify", webhook.url).returncode == 0
    watched = floe("watch", "--once")
    assert watched.returncode == 2 and "no engine has run" in watched.stdout
    assert webhook.titles() == ["[Floe] OPEN: down (engine_down) on the engine"]

    engine = subprocess.Popen(FLOE + ["run", "--metrics-port", "0"], cwd=ROOT, stdout=subprocess.DEVNULL,
                              stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        wait_for(lambda: floe("status").returncode == 1, timeout=120, what="the engine up, the incident open")
        assert floe("watch", "--once").returncode == 0
        assert webhook.titles()[1] == "[Floe] RESOLVED: down (engine_down) on the engine"
        assert floe("status").returncode == 0
        os.killpg(engine.pid, signal.SIGKILL)
        engine.wait(30)
        # Within the 2 s cooldown after the last resolution a watch does not open a new incident yet.
        watched = wait_for(lambda: (w := floe("watch", "--once")).returncode == 2 and len(webhook.received) == 3
                           and w, timeout=30, what="the engine reported down")
        assert "is gone without stopping" in watched.stdout
        assert floe("watch", "--once").returncode == 2
        assert webhook.titles()[2:] == ["[Floe] OPEN: down (engine_down) on the engine"], "one notification"
        status = floe("status", "--format", "json")
        assert status.returncode == 2 and json.loads(status.stdout)["status"] == "down"
    finally:
        if engine.poll() is None:
            os.killpg(engine.pid, signal.SIGKILL)
        engine.wait(30)
        engine.stderr.close()


def test_a_target_that_is_down_is_retried_then_an_event_never_an_error(floe_home):
    quick_alerting(floe_home)
    dead = "json://127.0.0.1:9/nobody"
    assert floe("alert", "add", "x", "--rule", "failed", "--notify", dead).returncode == 0
    tested = floe("alert", "test", "x")
    assert tested.returncode == 1 and "FAILED json://127.0.0.1:9/nobody" in tested.stdout
    with StateStore(load_settings().state_db) as state:
        failures = [e for e in state.events() if e.kind == "notification_failed"]
    assert len(failures) == 1 and "after 2 attempt(s)" in failures[0].message


def test_bad_alerts_are_one_line_and_secrets_never_shown(floe_home):
    secret = "json://floe:s3cr3t-pw@127.0.0.1:9/hook-token-123456"
    for args, problem in [
        (["--rule", "lag > 5"], "unknown measure 'lag'"),
        (["--rule", "lag_messages"], "needs a comparison"),
        (["--rule", "stalled > 4"], "takes no comparison"),
        (["--rule", "dead_letter_ratio > 2"], "between 0 and 1"),
        (["--rule", "engine_down", "--stream", "x"], "is about the engine"),
        (["--rule", "failed", "--for", "soon"], "not a duration"),
    ]:
        done = floe("alert", "add", "a", *args, "--notify", secret)
        assert done.returncode == 1 and problem in done.stderr and len(done.stderr.strip().splitlines()) == 1
        assert "s3cr3t" not in done.stderr
    assert floe("alert", "add", "a", "--rule", "failed", "--notify", "nope://x").returncode == 1
    assert floe("alert", "add", "a", "--rule", "lag_seconds > 5m", "--notify", secret).returncode == 0
    shown = floe("alert", "list").stdout + floe("alert", "show", "a", "--format", "json").stdout
    assert "a " in shown and "s3cr3t" not in shown and "hook-token-123456" not in shown
    audit = StateStore(load_settings().state_db).audit_trail()
    assert len(audit) == 8 and all("s3cr3t" not in row.arguments for row in audit)
    assert [r.outcome for r in audit][0] == "ok" and {r.outcome for r in audit[1:]} == {"failed"}

    (floe_home / "floe.toml").write_text('[[alerts]]\nname = "cfg"\nrule = "lag_messages >"\nnotify = ["json://h/x"]\n')
    done = floe("alert", "list")
    assert done.returncode == 1 and "alerts entry 1" in done.stderr and "floe.toml" in done.stderr
    (floe_home / "floe.toml").write_text('[[alerts]]\nname = "cfg"\nrule = "lag_messages > 10"\n'
                                         'notify = ["json://h/x"]\nfor = "1m"\n')
    listed = json.loads(floe("alert", "list", "--format", "json").stdout)
    assert [(a["name"], a["from"]) for a in listed] == [("a", "floe alert"), ("cfg", "floe.toml")]
    assert floe("alert", "remove", "cfg").returncode == 1


def test_system_tables_follow_their_own_retention(floe_home):
    from appliance.maintenance.policies import describe_policy
    from appliance.observe.systables import SystemTableWriter
    from appliance.tables.catalog import Catalog

    settings = load_settings()
    with StateStore(settings.state_db) as state:
        state.record_audit("u", "h", "cli", "stream create", "x", {"kafka": {"sasl.password": "***"}}, "ok")
        SystemTableWriter(settings, Catalog(settings), state).export()
        policy = {p.setting: (p.value, p.source) for p in describe_policy(settings, state, Catalog(settings),
                                                                          "floe.events")}
    assert policy["retention"] == ("30d", "system tables")
    assert policy["retention_column"] == ("occurred_at", "system tables")
    assert floe("table", "policy", "floe", "--retention", "90d").returncode == 0
    shown = json.loads(floe("table", "policy", "floe.batches", "--format", "json").stdout)
    assert {r["setting"]: r["value"] for r in shown}["retention"] == "90d"
    assert {r["setting"]: r["value"] for r in shown}["retention_column"] == "committed_at"
    assert query("select count(*) from floe.audit")[0][0] == 1
    assert orjson.loads(query("select arguments from floe.audit")[0][0]) == {"kafka": {"sasl.password": "***"}}


def test_every_history_lands_once_and_the_state_database_keeps_only_the_recent(floe_home):
    from appliance.core.vocabulary import EventKind, MaintenanceTask, RunOutcome, RunTrigger
    from appliance.observe.systables import SystemTableWriter
    from appliance.state.records import RunRecord, StageRunRecord
    from appliance.tables.catalog import Catalog

    floe_home.mkdir(parents=True, exist_ok=True)
    (floe_home / "floe.toml").write_text('[observe]\nkeep_in_state = "0s"\n')  # forget what is exported at once
    settings = load_settings()
    with StateStore(settings.state_db) as state:
        writer = SystemTableWriter(settings, Catalog(settings), state)
        for i in range(3):
            state.add_event(EventKind.POLICY_CHANGED, f"event {i}", table="ns.t")
            state.record_run(RunRecord(MaintenanceTask.COMPACT, "ns.t", RunTrigger.SCHEDULE, RunOutcome.OK,
                                       started_at=f"2026-11-23T10:00:0{i}.000+00:00"))
            state.record_stage_run(StageRunRecord("st", f"2026-11-23T10:00:0{i}.000+00:00", "", 5, None, 1, 10, 2,
                                                  "ok"))
            assert writer.export()["floe.events"] == 1
        assert writer.export() == dict.fromkeys(writer.export(), 0), "nothing twice"
        # Exported and old: gone from the state database, but for each table's newest row (ids go on from it).
        assert [e.message for e in state.events()] == ["event 2"]
        assert len(state.runs()) == 1
        state.add_event(EventKind.POLICY_CHANGED, "event 3")
        writer.export()
    assert query("select message from floe.events order by event_id") == [(f"event {i}",) for i in range(4)]
    assert query("select count(*), min(table_name) from floe.maintenance_runs") == [(3, "ns.t")]
    assert query("select count(*), sum(rows_out) from floe.stage_runs") == [(3, 6)]


def test_a_new_state_database_exports_its_own_rows_and_floe_is_reserved(floe_home):
    from appliance.core.vocabulary import EventKind
    from appliance.observe.systables import SystemTableWriter
    from appliance.tables.catalog import Catalog

    settings = load_settings()
    for message in ("before", "after"):  # the second state database starts its ids at 1 again
        with StateStore(settings.state_db) as state:
            state.add_event(EventKind.POLICY_CHANGED, message)
            state.add_event(EventKind.POLICY_CHANGED, message)
            SystemTableWriter(settings, Catalog(settings), state).export()
        settings.state_db.unlink()
    assert query("select message, count(*) from floe.events group by 1 order by 1") == [("after", 2), ("before", 2)]

    for args in (["stream", "create", "s", "--bootstrap", "h:9092", "--topic", "t", "--table", "floe.audit"],
                 ["table", "alter", "floe.events", "add-column", "x", "string"]):
        done = floe(*args)
        assert done.returncode == 1 and "holds Floe's system tables" in done.stderr, done.stderr
    rows = StateStore(settings.state_db).audit_trail()
    assert [(r.action, r.outcome) for r in rows] == [("table alter add-column", "failed"), ("stream create", "failed")]


def test_the_audit_masks_passwords_in_any_url():
    from appliance.control.audit import masked

    assert masked("https://u:ab/cd@reg:8081/x") == "https://u:***@reg:8081/x"
    assert masked("see json://u:p@ss@h/p and https://reg:8081/p@th") == "see json://u:***@h/p and https://reg:8081/p@th"


def test_system_table_rows_are_the_arrow_table_of_their_rows_as_dicts():
    import pyarrow as pa

    from appliance.observe.systables import ROWS, arrow_rows
    from appliance.tables.system import SYSTEM_TABLES

    system = next(s for s in SYSTEM_TABLES if s.source == "batches")
    rows = [{"id": i, "stream": f"s{i % 3}", "committed_at": "2026-11-26T10:00:00.125+00:00",
             "started_at": "2026-11-26T09:59:59.000+00:00", "messages": i, "rows": i, "dead_letter_rows": 0,
             "bytes": 10 * i, "duration_ms": 800, "lag": 0, "newest_kafka_ts": None if i % 2 else 1795734327222,
             "median_kafka_ts": 1795734327000, "throttle_ms": None, "target_snapshot_id": 7 + i,
             "dead_letter_snapshot_id": None, "offsets": '{"0": 5}'} for i in range(5)]
    schema = system.schema.as_arrow()
    as_dicts = pa.Table.from_pylist([{f.name: r.get(f.name) for f in schema} for r in map(ROWS["batches"], rows)],
                                    schema=schema)
    assert arrow_rows(system, rows).equals(as_dicts)
    assert arrow_rows(system, rows).column("newest_kafka_timestamp").null_count == 2

