"""Pattern streams: every topic whose whole name matches a regular expression, each into its own table named
by a template. The name rule and the matching as units; the CLI's create, show, list, pause, resume and delete
against a real broker; bad input as one line."""

from __future__ import annotations

import json
import threading
import uuid

import orjson
import pytest

from appliance.config.settings import load_settings
from appliance.core.errors import InvalidName, TopicPatternError
from appliance.model.patterns import Member, TopicPattern, changed_topics
from appliance.state.store import StateStore
from appliance.tables.catalog import Catalog

from conftest import floe


def test_a_topic_names_its_table_by_the_template_made_a_valid_name():
    cdc = TopicPattern.parse(r"dbserver1\.inventory\.(.*)", "cdc.{1}")
    assert cdc.table_for("dbserver1.inventory.customers") == "cdc.customers"
    assert cdc.table_for("dbserver1.inventory.Order-Lines.v2") == "cdc.order_lines_v2"  # lowercase, others as _
    assert cdc.table_for("dbserver1.inventory.2fa") == "cdc._2fa"  # a name starts with no digit
    both = TopicPattern.parse(r"(\w+)\.(\w+)", "{1}.{topic}_{2}")
    assert both.table_for("Shop.orders") == "shop.shop_orders_orders"
    with pytest.raises(InvalidName):  # an optional group that took nothing makes no name
        TopicPattern.parse(r"a(x)?", "ns.{1}").table_for("a")


def test_a_pattern_matches_the_whole_topic_name_and_tells_new_topics_from_gone_ones():
    cdc = TopicPattern.parse(r"dbserver1\.inventory\.(.*)", "cdc.{1}")
    assert cdc.matches("dbserver1.inventory.orders")
    assert not cdc.matches("dbserver1.inventory")  # the dot is literal, the name whole
    assert not cdc.matches("old.dbserver1.inventory.orders")
    assert not TopicPattern.parse("orders", "x.{topic}").matches("orders_v2")

    def member(topic: str, removed: str = "") -> Member:
        return Member("inv", topic, topic, f"cdc.{topic}", f"cdc.{topic}_dlq", None, {}, "", removed_at=removed)

    members = {t: member(t) for t in ("dbserver1.inventory.a", "dbserver1.inventory.b")}
    members["dbserver1.inventory.z"] = member("dbserver1.inventory.z", removed="2026-11-26T00:00:00")
    new, gone = changed_topics(cdc, members, ["dbserver1.inventory.a", "dbserver1.inventory.c", "other.c"])
    assert (new, gone) == (["dbserver1.inventory.c"], ["dbserver1.inventory.b"])  # z is gone already


@pytest.mark.parametrize("pattern, template, says", [
    ("dbserver1.(", "cdc.{1}", "not a valid regular expression"),
    (r"dbserver1\.(.*)", "cdc.{2}", "names {2}"),
    (r"dbserver1\..*", "cdc.{1}", "it has no group"),
    (r"dbserver1\.(.*)", "cdc.all", "names neither {topic} nor a group"),
    (r"dbserver1\.(.*)", "Cdc-x.{1}", "makes no table name"),
])
def test_a_bad_pattern_or_template_is_refused_in_one_line(pattern, template, says):
    with pytest.raises(TopicPatternError, match=says.replace("{", r"\{").replace("(", r"\(")):
        TopicPattern.parse(pattern, template)


def _debezium(topic_id: int, key: int, name: str) -> tuple[bytes, bytes]:
    after = {"id": key, "name": name, "topic_id": topic_id}
    return orjson.dumps({"id": key}), orjson.dumps({"op": "c", "before": None, "after": after,
                                                   "source": {"ts_ms": 1, "lsn": key}, "ts_ms": 1})


def test_pattern_stream_cli_create_show_list_pause_resume_delete(broker):
    prefix = f"db{uuid.uuid4().hex[:6]}"
    producer = broker.producer()
    for i, table in enumerate(("customers", "Orders")):
        key, value = _debezium(i, 1, "x")
        producer.produce(f"{prefix}.inventory.{table}", key=key, value=value)
    producer.produce(f"{prefix}.other.things", key=b"1", value=b'{"id": 1}')
    assert producer.flush(30) == 0

    bad = floe("stream", "create", "inv", "--bootstrap", broker.bootstrap, "--topic-pattern", f"{prefix}.(",
               "--table", "cdc.{1}", "--cdc", "debezium")
    assert bad.returncode != 0 and len(bad.stderr.strip().splitlines()) == 1, bad.stderr
    assert "not a valid regular expression" in bad.stderr
    bad = floe("stream", "create", "inv", "--bootstrap", broker.bootstrap, "--topic-pattern",
               rf"{prefix}\.inventory\.(.*)", "--table", "cdc.{2}", "--cdc", "debezium")
    assert bad.returncode != 0 and len(bad.stderr.strip().splitlines()) == 1, bad.stderr
    assert "names {2}" in bad.stderr
    both = floe("stream", "create", "inv", "--bootstrap", broker.bootstrap, "--topic", "x", "--topic-pattern", "x",
                "--table", "cdc.{topic}")
    assert both.returncode != 0 and "one of them" in both.stderr
    with StateStore(load_settings().state_db) as state:
        assert not state.streams(), "a refused create records nothing"

    created = floe("stream", "create", "inv", "--bootstrap", broker.bootstrap, "--topic-pattern",
                   rf"{prefix}\.inventory\.(.*)", "--table", "cdc.{1}", "--cdc", "debezium")
    assert created.returncode == 0, created.stderr
    assert created.stdout.splitlines() == [f"{prefix}.inventory.Orders -> cdc.orders (3 columns, upsert by id)",
                                           f"{prefix}.inventory.customers -> cdc.customers (3 columns, upsert by id)"]
    assert sorted(Catalog(load_settings()).list_tables()) == ["cdc.customers", "cdc.customers_dlq", "cdc.orders",
                                                               "cdc.orders_dlq"]
    shown = json.loads(floe("stream", "show", "inv", "--format", "json").stdout)
    assert shown["topic_pattern"] == rf"{prefix}\.inventory\.(.*)"
    assert [(t["topic"], t["table"], t["state"]) for t in shown["topics"]] == [
        (f"{prefix}.inventory.Orders", "cdc.orders", "reading"),
        (f"{prefix}.inventory.customers", "cdc.customers", "reading")]
    text = floe("stream", "show", "inv").stdout
    assert f"  {prefix}.inventory.customers -> cdc.customers (dead letters cdc.customers_dlq); reading" in text
    [row] = json.loads(floe("stream", "list", "--format", "json").stdout)
    assert (row["name"], row["table"]) == ("inv", "cdc.{1} (2 tables)")
    _a_topic_s_schema_change_proposes_what_works(f"{prefix}.inventory.Orders")

    # A topic gone from the cluster (as the next look at its topics finds): its ingest stops, its table stays;
    # missing from a listing only, while the cluster still knows it by name, it stays.
    from appliance.control.patterns import _gone, take_topics
    from appliance.kafka.client import KafkaClient

    with StateStore(load_settings().state_db) as state, KafkaClient(state.stream("inv").kafka) as client:
        listed = [f"{prefix}.inventory.Orders"]
        take_topics(load_settings(), state, state.stream("inv"), listed, "earliest", lambda t: _gone(client, t))
        assert all(m.active for m in state.members("inv").values())
        assert _gone(client, f"{prefix}.inventory.never_made")  # what a deleted topic's name gets
        take_topics(load_settings(), state, state.stream("inv"), listed, "earliest")  # the cluster's word taken
        [gone] = [e for e in state.events("inv") if e.kind == "topic_removed"]
    assert gone.message == f"topic {prefix}.inventory.customers left the cluster: its ingest stopped, table " \
                           "cdc.customers stays"
    shown = json.loads(floe("stream", "show", "inv", "--format", "json").stdout)
    assert [t["state"].split(" at ")[0] for t in shown["topics"]] == ["reading", "removed"]
    assert "cdc.customers" in Catalog(load_settings()).list_tables()

    clash = floe("stream", "create", "one", "--bootstrap", broker.bootstrap, "--topic", f"{prefix}.other.things",
                 "--table", "cdc.orders")
    assert clash.returncode != 0 and "already written by stream 'inv'" in clash.stderr  # a topic's table is taken

    assert floe("stream", "pause", "inv").returncode == 0
    with StateStore(load_settings().state_db) as state:
        assert state.stream("inv").paused
    assert floe("stream", "resume", "inv").returncode == 0
    with StateStore(load_settings().state_db) as state:
        assert not state.stream("inv").paused
    deleted = floe("stream", "delete", "inv", "--drop-tables")
    assert deleted.returncode == 0, deleted.stderr
    assert "the tables of its topics dropped" in deleted.stderr
    assert Catalog(load_settings()).list_tables() == []
    with StateStore(load_settings().state_db) as state:
        assert state.streams() == [] and state.all_members() == []


def _a_topic_s_schema_change_proposes_what_works(topic: str) -> None:
    """A topic's schema change, told as the engine's runner of that topic tells it, proposes commands that work on a
    pattern stream, each run as printed: the replay of that topic's dead letters among them."""
    import re
    import shlex

    from appliance.ingest.patterns import PatternRunner
    from appliance.model.changes import SchemaChange

    with StateStore(load_settings().state_db) as state:
        runner = PatternRunner(load_settings(), None, Catalog(load_settings()), state, state.stream("inv"))
        runner.members(force=True)  # a runner for each topic, as the engine makes them (no Spark needed yet)
        runner.runners[topic].schema.report({SchemaChange.incompatible("topic_id", "long", "a string")}, {})
        runner.close()
        [told] = [e.message for e in state.events("inv") if e.kind == "schema_changed"]
    assert "those messages go to cdc.orders_dlq" in told, told
    proposed = re.findall(r"`(floe [^`]+)`", told)
    assert proposed == ["floe table alter cdc.orders drop-column topic_id",
                        "floe table alter cdc.orders add-column topic_id string", f"floe dlq replay inv --topic {topic}"]
    for command in proposed:
        done = floe(*shlex.split(command)[1:])
        assert done.returncode == 0, (command, done.stderr)
    assert done.stdout.startswith("inv: 0 dead letters selected"), done.stdout  # that topic's table has none yet


class Inventory:
    """Debezium change events into topics of one database, and each topic's rows as they stand now."""

    def __init__(self, broker, prefix: str) -> None:
        self.producer, self.prefix = broker.producer(), prefix
        self.rows: dict[str, dict[int, dict]] = {}  # by table name, key -> row
        self.lsn = 0

    def change(self, table: str, key: int, name: str | None) -> None:
        """Key `key` of `table` set to `name` (None: deleted, then its tombstone)."""
        rows, self.lsn = self.rows.setdefault(table, {}), self.lsn + 1
        before, after = rows.get(key), None if name is None else {"id": key, "name": name, "lsn": self.lsn}
        op = "d" if after is None else "u" if before else "c"
        event = {"op": op, "before": before, "after": after, "source": {"ts_ms": self.lsn, "lsn": self.lsn},
                 "ts_ms": self.lsn}
        topic = f"{self.prefix}.inventory.{table}"
        self.producer.produce(topic, key=orjson.dumps({"id": key}), value=orjson.dumps(event), partition=key % 2)
        if after is None:
            self.producer.produce(topic, key=orjson.dumps({"id": key}), value=None, partition=key % 2)
            rows.pop(key, None)
        else:
            rows[key] = after

    def history(self, table: str, round: int) -> None:
        for key in range(1, 9):
            self.change(table, key, f"{table}-{key}-r{round}")
        self.change(table, 3 + round, None)
        for n in range(20):
            self.change(table, 2, f"{table}-2-r{round}-{n}")
        assert self.producer.flush(30) == 0


def _table_rows(table: str) -> dict[int, dict]:
    """The table's rows read by DuckDB (`floe query`), checked against PyIceberg's reading."""
    result = floe("query", f"select id, name, lsn from {table}", "--format", "json")
    assert result.returncode == 0, result.stderr
    by_duckdb = [json.loads(line) for line in result.stdout.splitlines()]
    by_pyiceberg = Catalog(load_settings()).table(table).scan(selected_fields=("id", "name", "lsn")).to_arrow()
    assert sorted(by_duckdb, key=lambda r: r["id"]) == sorted(by_pyiceberg.to_pylist(), key=lambda r: r["id"])
    assert len(by_duckdb) == len({r["id"] for r in by_duckdb}), f"{table}: a key twice"
    return {r["id"]: r for r in by_duckdb}


def _tables_hold(inventory: Inventory) -> bool:
    tables = set(Catalog(load_settings()).list_tables())
    return all(f"cdc.{t}" in tables and _table_rows(f"cdc.{t}") == rows for t, rows in inventory.rows.items())


@pytest.mark.slow
def test_a_pattern_over_debezium_topics_through_a_kill_and_a_topic_that_appears_while_it_runs(
        broker, floe_home, spark, java):
    from appliance.control.patterns import discover_members
    from appliance.core.polling import poll
    from appliance.ingest.engine import Engine

    from conftest import floe_process, java_reads_as_pyiceberg, run_until_caught_up, wait_for

    inventory = Inventory(broker, f"db{uuid.uuid4().hex[:6]}")
    tables = [f"t{i}" for i in range(5)]
    for table in tables:
        inventory.history(table, 0)
    created = floe("stream", "create", "inv", "--bootstrap", broker.bootstrap, "--topic-pattern",
                   rf"{inventory.prefix}\.inventory\.(.*)", "--table", "cdc.{1}", "--cdc", "debezium")
    assert created.returncode == 0, created.stderr
    assert len(created.stdout.splitlines()) == 5

    # Killed just after the first topic's upsert commit of a batch: the other topics' batches ran, uncommitted.
    killed = floe_process("run", "--until-caught-up", env={"FLOE_FAILPOINTS": "upsert_committed"})
    assert killed.returncode == -9, killed.stderr
    with StateStore(load_settings().state_db) as state:
        committed = [m for m in state.members("inv").values()
                     if Catalog(load_settings()).table(m.table).metadata.current_snapshot_id is not None]
    assert 1 <= len(committed) < 5, "the kill fell between two topics' commits"

    for table in tables:
        inventory.history(table, 1)
    engine = Engine(load_settings(), spark=spark, discover=discover_members)  # as `floe run` makes it
    running = threading.Thread(target=engine.run, daemon=True)
    running.start()
    inventory.history("late", 0)  # a topic that appears while the engine runs
    poll(lambda: "cdc.late" in Catalog(load_settings()).list_tables(), 60, 0.5, "the new topic's table",
         error=AssertionError)
    wait_for(lambda: _tables_hold(inventory), 120, 1.0, "every table holding its topic's rows")
    engine.stop()
    running.join(120)
    with StateStore(load_settings().state_db) as state:
        batches = [b for b in state.recent_batches("inv", 1000) if b.messages]
    assert engine.jobs.jobs_run < len(batches), "the topics' batches share Spark jobs"
    inventory.history("t3", 2)
    inventory.history("late", 1)
    run_until_caught_up(spark)  # `floe run --until-caught-up`: every topic read to where it stood at the start
    assert _tables_hold(inventory)
    for table, rows in inventory.rows.items():  # each topic's table (position deletes and all) read by Java Iceberg
        assert java_reads_as_pyiceberg(java, Catalog(load_settings()).table(f"cdc.{table}")) == len(rows), table
    audited = floe("audit", "inv", "--format", "json")
    assert audited.returncode == 0, audited.stdout
    assert sorted(r["table"] for r in json.loads(audited.stdout)) == sorted(f"cdc.{t}" for t in [*tables, "late"])
    with StateStore(load_settings().state_db) as state:
        added = [e.message for e in state.events("inv") if e.kind == "topic_added"]
    assert f"topic {inventory.prefix}.inventory.late -> cdc.late (3 columns)" in added and len(added) == 6


async def test_the_ui_shows_a_pattern_stream_as_one_stream_with_its_tables(broker):
    from tui.app import FloeApp

    from tui_helpers import screen_text, until

    prefix = f"db{uuid.uuid4().hex[:6]}"
    producer = broker.producer()
    for table in ("customers", "orders", "lines"):
        key, value = _debezium(0, 1, "x")
        producer.produce(f"{prefix}.inventory.{table}", key=key, value=value)
    assert producer.flush(30) == 0
    created = floe("stream", "create", "inv", "--bootstrap", broker.bootstrap, "--topic-pattern",
                   rf"{prefix}\.inventory\.(.*)", "--table", "cdc.{1}", "--cdc", "debezium")
    assert created.returncode == 0, created.stderr
    app = FloeApp(load_settings())
    async with app.run_test(size=(200, 40)) as pilot:
        table = app.query_one("#streams-table")
        await until(pilot, lambda: table.row_count == 1, 30, "one row for the pattern stream")
        table.focus()
        await pilot.press("enter")
        await until(pilot, lambda: "3 tables: cdc.customers, cdc.lines, cdc.orders" in screen_text(app), 30,
                    "the stream's detail naming its tables")


def test_a_pattern_streams_topics_keep_their_kafka_key_and_headers_as_columns(broker, spark):
    """`--kafka-columns key,headers` holds for every topic a pattern takes, those that come later too; `--subject`
    names one topic's subject and is refused for a pattern, in one line."""
    from appliance.control.patterns import discover_members
    from appliance.ingest.engine import Engine
    from appliance.query.connection import run_query

    prefix = f"kc{uuid.uuid4().hex[:6]}"
    producer = broker.producer()
    for name in ("a", "b"):
        producer.produce(f"{prefix}.{name}", key=f"k-{name}".encode(), value=b'{"id": 1}',
                         headers=[("tenant", name.encode())], partition=0)
    assert producer.flush(30) == 0
    refused = floe("stream", "create", "kc", "--bootstrap", broker.bootstrap, "--topic-pattern", rf"{prefix}\.(.*)",
                   "--table", "kc.{1}", "--subject", "x-value")
    assert refused.returncode != 0 and len(refused.stderr.strip().splitlines()) == 1, refused.stderr
    assert "--subject names one topic's subject" in refused.stderr
    bad = floe("stream", "create", "kc", "--bootstrap", broker.bootstrap, "--topic-pattern", rf"{prefix}\.(.*)",
               "--table", "kc.{1}", "--kafka-columns", "key,value")
    assert bad.returncode != 0 and "kafka columns 'value' not allowed" in bad.stderr, bad.stderr
    created = floe("stream", "create", "kc", "--bootstrap", broker.bootstrap, "--topic-pattern", rf"{prefix}\.(.*)",
                   "--table", "kc.{1}", "--kafka-columns", "key,headers")
    assert created.returncode == 0, created.stderr
    producer.produce(f"{prefix}.c", key=b"k-c", value=b'{"id": 3}', headers=[("tenant", b"c")], partition=0)
    assert producer.flush(30) == 0
    settings = load_settings()
    Engine(settings, spark=spark, discover=discover_members).run(until_caught_up=True)  # takes the later topic
    for name in ("a", "b", "c"):
        [row] = run_query(settings, f"select _kafka_key k, _kafka_headers h from kc.{name}").to_pylist()
        assert row["k"] == f"k-{name}".encode() and row["h"] == [{"key": "tenant", "value": name.encode()}], row


def test_a_pattern_streams_topics_ask_their_watermarks_through_the_clusters_poller(broker):
    """Hundreds of topics must not mean hundreds of watermark requests a poll: the members' watermarks come from the
    cluster's poller, every topic in one poll, and a topic no longer a member is no longer asked."""
    from appliance.ingest.patterns import PatternRunner
    from appliance.ingest.watermarks import WatermarkPollers

    prefix = f"wm{uuid.uuid4().hex[:6]}"
    producer = broker.producer()
    for i, name in enumerate(("a", "b", "c")):
        for n in range(i + 1):
            producer.produce(f"{prefix}.{name}", value=orjson.dumps({"id": n}), partition=0)
    assert producer.flush(30) == 0
    assert floe("stream", "create", "wm", "--bootstrap", broker.bootstrap, "--topic-pattern", rf"{prefix}\.(.*)",
                "--table", "wm.{1}").returncode == 0
    stop = threading.Event()
    pollers = WatermarkPollers(600.0, stop)  # polls only when asked: each one counted below
    try:
        with StateStore(load_settings().state_db) as state:
            stream = state.stream("wm")
            runner = PatternRunner(load_settings(), None, Catalog(load_settings()), state, stream, pollers=pollers)
            poller = pollers.of(stream.kafka)
            marks = runner.watermarks(fresh=True)
            assert {t: w.high for (t, p), w in marks.items() if p == 0} == {
                f"{prefix}.a": 1, f"{prefix}.b": 2, f"{prefix}.c": 3}
            asked = poller.requests
            runner.watermarks(fresh=True)
            assert poller.requests == asked + 1, "one poll for every topic"
            state.remove_member("wm", f"{prefix}.c")
            runner.members(force=True)
            assert sorted(poller._topics) == [f"{prefix}.a", f"{prefix}.b"]
            runner.close()
            assert poller._topics == {}
    finally:
        stop.set()
        pollers.close()
