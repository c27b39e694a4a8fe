"""Routed streams (`--route-by`): one topic's messages, each into the table a field of it names, exactly once."""

from __future__ import annotations

import random

import orjson
import pytest

from appliance.config.settings import load_settings
from appliance.control.routes import NEEDS_KEY, NO_CDC
from appliance.core.errors import RouteError
from appliance.ingest.batch import TaskResult
from appliance.ingest.routing import ROUTE_STAGE, Router, RouteTarget, merged_new_routes
from appliance.kafka.records import RawBatch
from appliance.model.mapping import Mapping
from appliance.model.routes import RouteRule, unlanded
from appliance.state.store import StateStore

from conftest import floe


def test_a_value_names_its_table_made_a_valid_name_and_a_nested_field_is_a_path():
    rule = RouteRule.parse("type", "analytics.events_{value}")
    assert rule.route("click") == ("analytics.events_click", "")
    assert rule.route("Page-View") == ("analytics.events_page_view", "")
    assert rule.route(42) == ("analytics.events_42", "")
    assert rule.route(True) == ("analytics.events_true", "")
    assert RouteRule.parse("kind", "{value}.events").route("9lives") == ("_9lives.events", "")
    nested = RouteRule.parse("event.kind", "analytics.e_{value}")
    assert nested.path == ("event", "kind") and nested.field == "event.kind"


@pytest.mark.parametrize("value, says", [
    (None, "route field type is missing or null"),
    ({"a": 1}, "route field type is a record, not a text or a number"),
    ([1], "route field type is a list"),
    ("", "has no letter or digit"),
    ("!!!", "has no letter or digit"),
    ("x" * 200, "makes no table name"),
])
def test_a_missing_field_or_a_value_that_names_nothing_valid_says_why(value, says):
    table, why = RouteRule.parse("type", "analytics.events_{value}").route(value)
    assert table is None and says in why


@pytest.mark.parametrize("field, template, says", [
    ("", "a.t_{value}", "--route-by needs a field"),
    ("  ", "a.t_{value}", "--route-by needs a field"),
    ("a..b", "a.t_{value}", "must name a field of the messages' value"),
    ("@headers", "a.t_{value}", "must be @key, @key.FIELD or @header.NAME"),
    ("@value", "a.t_{value}", "must be @key, @key.FIELD or @header.NAME"),
    ("@header.", "a.t_{value}", "must be @key, @key.FIELD or @header.NAME"),
    ("type", "a.events", "does not name {value}"),
    ("type", "a.t_{topic}", "names {topic}"),
    ("type", "a.t_{value!r}", "names {value}"),
    ("type", "t_{value}", "makes no table name"),
])
def test_a_bad_field_or_template_is_refused(field, template, says):
    with pytest.raises(RouteError, match=".*") as caught:
        RouteRule.parse(field, template)
    assert says in str(caught.value) and "\n" not in str(caught.value)


def test_a_route_taken_from_the_key_or_a_header_names_tables_without_reading_the_value():
    assert RouteRule.parse("@header.event.type", "ev.t_{value}").field == "@header.event.type"  # a name with dots
    assert RouteRule.parse("@key", "ev.t_{value}").from_kafka and not RouteRule.parse("type", "ev.t_{value}").from_kafka
    values = [b"{not json", orjson.dumps({"n": 1}), None, orjson.dumps({"n": 3}), b"x", b"y"]
    headers = [[("kind", b"Click")], [("kind", b"buy"), ("kind", b"click")], [("kind", b"click")], None,
               [("kind", b"\xff")], [("other", b"click")]]
    raw = RawBatch(partitions=[0] * 6, offsets=list(range(6)), timestamps=[1] * 6,
                   keys=[b"a", b'{"k": "buy"}', b"c", b'{"k": "buy"}', b"e", b"f"], values=values, headers=headers)
    known = RouteTarget(Mapping.of_table(()), None, None)
    router = Router(RouteRule.parse("@header.kind", "ev.t_{value}"), {"ev.t_click": known}, {})
    groups, new, bad, _ = router.split(raw, None, 1 << 20)
    # The value is not read to route: a malformed or empty one is its table's dead letter, at decode.
    assert groups == {"ev.t_click": [0, 1, 2]}  # the last header of a name wins, as Kafka's lastHeader
    reasons = {i: (stage, why) for i, stage, why in bad}
    assert reasons[3] == (ROUTE_STAGE, "route field @header.kind is missing or null: no table to route the message to")
    assert reasons[4][0] == "decode" and "@header.kind is not UTF-8 text" in reasons[4][1]
    assert reasons[5][0] == ROUTE_STAGE and not new
    by_key = Router(RouteRule.parse("@key.k", "ev.t_{value}"), {}, {})
    groups, new, bad, _ = by_key.split(raw, None, 1 << 20)
    assert not groups and list(new) == ["ev.t_buy"] and new["ev.t_buy"][1] == [values[1], values[3]]
    assert {i for i, _, _ in bad} == {0, 2, 4, 5}  # keys that are not JSON objects name no table


def test_a_table_skips_what_it_committed():
    assert unlanded(None, 0, 5)  # a table that never committed takes everything
    assert unlanded({0: 10}, 1, 3)  # nor anything of a partition it never committed
    assert not unlanded({0: 10}, 0, 9) and unlanded({0: 10}, 0, 10)


def query(sql: str) -> list[dict]:
    """`floe query SQL --format json`'s rows."""
    import json

    done = floe("query", sql, "--format", "json")
    assert done.returncode == 0, done.stderr
    return [json.loads(line) for line in done.stdout.splitlines()]


def _raw(values: list[bytes | None]) -> RawBatch:
    n = len(values)
    return RawBatch(partitions=[0] * n, offsets=list(range(n)), timestamps=[1] * n, keys=[None] * n,
                    values=values, headers=[None] * n)


def test_a_task_splits_its_messages_by_route_and_hands_back_new_tables_with_samples():
    rule = RouteRule.parse("meta.type", "ev.t_{value}")
    known = RouteTarget(Mapping.of_table(()), None, {0: 2})
    router = Router(rule, {"ev.t_click": known}, {"ev.t_bad": "table ev.t_bad is written by stage 's'"})
    values = [orjson.dumps({"meta": {"type": t}, "n": i}) for i, t in enumerate(["click", "buy", "click", "Buy"])]
    values += [b"{not json", orjson.dumps({"n": 9}), orjson.dumps({"meta": {"type": "bad"}}), None, b"[1]"]
    groups, new, bad, _ = router.split(_raw(values), None, 1 << 20)
    assert groups == {"ev.t_click": [0, 2]}  # the skip by committed offsets is the write's, after the split
    assert list(new) == ["ev.t_buy"] and new["ev.t_buy"][0] == "buy" and new["ev.t_buy"][1] == [values[1], values[3]]
    reasons = {i: (stage, why) for i, stage, why in bad}
    assert reasons[4][0] == "decode" and "invalid JSON" in reasons[4][1]
    assert reasons[5] == (ROUTE_STAGE, "route field meta.type is missing or null: no table to route the message to")
    assert reasons[6] == (ROUTE_STAGE, "table ev.t_bad: table ev.t_bad is written by stage 's'")
    assert reasons[7] == ("validate", "empty message (no value)")
    assert reasons[8][0] == "decode"
    merged = merged_new_routes([TaskResult([], new_routes=new),
                                TaskResult([], new_routes={"ev.t_buy": ("Buy", [b"x"]), "ev.t_z": ("z", [b"y"])})])
    assert merged == {"ev.t_buy": ("buy", [values[1], values[3], b"x"]), "ev.t_z": ("z", [b"y"])}


def test_a_route_and_the_event_telling_of_it_are_recorded_together_once(floe_home, monkeypatch):
    """A kill between recording a route and its event lost the event for good (the next attempt found the route
    recorded): both are one transaction, and an attempt that finds the route recorded tells nothing again."""
    from appliance.core import failpoints
    from appliance.core.clock import now
    from appliance.core.vocabulary import EventKind
    from appliance.model.routes import Route

    route = Route("ev", "an.ev_click", "click", Mapping.of_table(()), now(), {0: 0})
    settings = load_settings()
    with StateStore(settings.state_db) as state:
        monkeypatch.setattr(failpoints, "_ARMED", {"route_recorded": "raise"})  # cut between the two
        with pytest.raises(RuntimeError):
            state.add_route(route, "value 'click' -> an.ev_click")
        assert state.routes("ev") == {} and state.events("ev") == []
        monkeypatch.setattr(failpoints, "_ARMED", {})
        assert state.add_route(route, "value 'click' -> an.ev_click")
        assert not state.add_route(route, "value 'click' -> an.ev_click")  # the next attempt's
        assert list(state.routes("ev")) == ["an.ev_click"]
        told = [(e.kind, e.message) for e in state.events("ev")]
        assert told == [(EventKind.ROUTE_ADDED, "value 'click' -> an.ev_click")]


def test_stream_create_refuses_a_bad_route_in_one_line():
    for args, says in [
        (["--topic-pattern", "x.*", "--route-by", "type", "--table", "a.t_{value}"],
         "give --topic, not --topic-pattern"),
        (["--topic", "t", "--route-by", "type", "--table", "a.events"], "does not name {value}"),
        (["--topic", "t", "--route-by", "", "--table", "a.t_{value}"], "--route-by needs a field"),
        (["--topic", "t", "--route-by", "type", "--table", "a.t_{value}", "--mode", "upsert"], NEEDS_KEY),
        (["--topic", "t", "--route-by", "type", "--table", "a.t_{value}", "--key", "id"], "add --mode upsert"),
        (["--topic", "t", "--route-by", "type", "--table", "a.t_{value}", "--cdc", "debezium"], NO_CDC),
        (["--topic", "t", "--route-by", "type", "--table", "{value}.events"], "give --dead-letter-table"),
    ]:
        done = floe("stream", "create", "ev", "--bootstrap", "127.0.0.1:9", *args)
        assert done.returncode != 0 and says in done.stderr, (args, done.stderr)
        assert len(done.stderr.strip().splitlines()) == 1, done.stderr
    if load_settings().state_db.exists():
        with StateStore(load_settings().state_db) as state:
            assert not state.streams(), "a refused create records nothing"


KINDS = {  # four kinds of different shapes, and a fifth that appears while the engine runs
    "click": lambda i: {"type": "click", "id": i, "page": f"/p/{i % 7}"},
    "Purchase": lambda i: {"type": "Purchase", "id": i, "amount": i / 4, "item": {"sku": f"s{i}", "qty": i % 3}},
    "view": lambda i: {"type": "view", "id": i, "ms": i * 3, "tags": ["a", "b"]},
    "login": lambda i: {"type": "login", "id": i, "user": f"u{i % 11}", "ok": i % 2 == 0},
    "log-out": lambda i: {"type": "log-out", "id": i, "reason": "idle"},
}
TABLES = {"click": "an.ev_click", "Purchase": "an.ev_purchase", "view": "an.ev_view", "login": "an.ev_login",
          "log-out": "an.ev_log_out"}
UNROUTABLE = [b"{oops", orjson.dumps({"id": -1}), orjson.dumps({"type": "!!!", "id": -2}),
              orjson.dumps({"type": {"nested": 1}, "id": -3})]


class Events:
    """What was produced: each kind's ids, and the unroutable messages' count."""

    def __init__(self, broker, topic: str) -> None:
        self.producer, self.topic = broker.producer(), topic
        self.ids: dict[str, list[int]] = {kind: [] for kind in KINDS}
        self.bad, self.next = 0, 0
        self.spread = random.Random(7)  # each partition carries every kind

    def send(self, n: int, kinds: list[str], stop=None) -> None:
        for _ in range(n):
            if stop is not None and stop.is_set():
                break
            i = self.next
            self.next += 1
            if i % 97 == 0:
                self.producer.produce(self.topic, value=UNROUTABLE[(i // 97) % len(UNROUTABLE)],
                                      partition=self.spread.randrange(4))
                self.bad += 1
                continue
            kind = kinds[i % len(kinds)]
            self.producer.produce(self.topic, value=orjson.dumps(KINDS[kind](i)), partition=self.spread.randrange(4))
            self.ids[kind].append(i)
            self.producer.poll(0)
            if stop is not None and i % 40 == 0:
                stop.wait(0.01)  # a trickle while the engine runs
        assert self.producer.flush(30) == 0


@pytest.mark.slow
def test_a_routed_topic_lands_each_kind_in_its_own_table_once_through_kills(broker, topic, floe_home, spark,
                                                                            java):
    import json

    from appliance.tables.catalog import Catalog
    from appliance.tables.snapshots import committed_offsets

    from commands import floe_process
    from conftest import java_reads_as_pyiceberg, run_until_caught_up, run_until_killed

    floe_home.mkdir(parents=True, exist_ok=True)
    (floe_home / "floe.toml").write_text('[engine]\nmax_batch_messages = 500\ncommit_interval = "100ms"\n')
    events, four = Events(broker, topic), ["click", "Purchase", "view", "login"]
    events.send(1200, four)
    created = floe("stream", "create", "ev", "--bootstrap", broker.bootstrap, "--topic", topic, "--route-by", "type",
                   "--table", "an.ev_{value}")
    assert created.returncode == 0, created.stderr

    # Killed between two route tables' commits of the first batch, made in one catalog transaction (Floe's SQL
    # catalog): none of them moved. (`test_without_a_catalog_transaction...`: the order and the recovery.)
    killed = floe_process("run", "--until-caught-up", env={"FLOE_FAILPOINTS": "between_route_commits"})
    assert killed.returncode == -9, killed.stderr
    catalog = Catalog(load_settings())
    with StateStore(load_settings().state_db) as state:
        stream, routes = state.stream("ev"), state.routes("ev")
    assert sorted(routes) == sorted(TABLES[k] for k in four) and not any(r.refused for r in routes.values())
    assert not [t for t in [*routes, "an.ev_dlq"] if committed_offsets(catalog.table(t), stream.id)]

    # A `floe run` killed while the fifth kind appears: the moment its route is recorded and told (its table
    # made, its rows not yet, or just, committed); then one that runs to the end.
    def fifth_kind_routed() -> bool:
        with StateStore(load_settings().state_db) as state:
            return any(e.kind == "route_added" and "'log-out'" in e.message for e in state.events("ev"))

    run_until_killed(120, lambda stop: events.send(1500, [*four, "log-out"], stop), when=fifth_kind_routed)
    events.send(300, [*four, "log-out"])
    run_until_caught_up(spark)

    for kind, table in TABLES.items():  # DuckDB (`floe query`), PyIceberg, the reference Java Iceberg
        assert [r["id"] for r in query(f"select id from {table} order by id")] == events.ids[kind], table
        assert sorted(catalog.table(table).scan().to_arrow().column("id").to_pylist()) == events.ids[kind], table
        assert java_reads_as_pyiceberg(java, catalog.table(table)) == len(events.ids[kind]), table
    assert java_reads_as_pyiceberg(java, catalog.table("an.ev_dlq")) == events.bad
    assert "amount" in catalog.table("an.ev_purchase").schema().column_names  # each table its kind's own columns
    assert "page" not in catalog.table("an.ev_purchase").schema().column_names
    dead = query("select error_stage, error_message from an.ev_dlq")
    assert len(dead) == events.bad
    assert {d["error_stage"] for d in dead} == {"decode", "route"}
    assert any("route field type is missing or null" in d["error_message"] for d in dead)
    audited = floe("audit", "ev", "--format", "json")
    assert audited.returncode == 0, audited.stdout
    [report] = json.loads(audited.stdout) if audited.stdout.lstrip().startswith("[") else [json.loads(audited.stdout)]
    assert report["ok"] and report["checked"] == events.next
    shown = json.loads(floe("stream", "show", "ev", "--format", "json").stdout)
    assert shown["route_by"] == "type" and sorted(r["table"] for r in shown["routes"]) == sorted(TABLES.values())
    with StateStore(load_settings().state_db) as state:
        added = [e.message for e in state.events("ev") if e.kind == "route_added"]
    assert any(a.startswith("value 'log-out' of type -> an.ev_log_out (") for a in added), added


def test_avro_messages_route_by_a_field_and_each_table_takes_its_writer_schemas_columns(broker, topic, registry,
                                                                                        spark):
    import json

    from confluent_kafka.schema_registry import topic_record_subject_name_strategy
    from confluent_kafka.schema_registry.avro import AvroSerializer
    from confluent_kafka.serialization import MessageField, SerializationContext

    from conftest import run_until_caught_up

    def serializer(name: str, fields: list[dict]):
        schema = {"type": "record", "name": name, "fields": [{"name": "type", "type": "string"},
                                                              {"name": "id", "type": "long"}, *fields]}
        ser = AvroSerializer(registry.client(), json.dumps(schema),
                             conf={"subject.name.strategy": topic_record_subject_name_strategy})
        return lambda record: ser(record, SerializationContext(topic, MessageField.VALUE))

    click = serializer("Click", [{"name": "page", "type": "string"}])
    buy = serializer("Buy", [{"name": "amount", "type": "double"}])
    values = [click({"type": "click", "id": i, "page": f"/p{i}"}) if i % 3 else buy({"type": "Buy", "id": i,
                                                                                    "amount": i / 2})
              for i in range(30)] + [click({"type": "", "id": 99, "page": ""})]
    broker.produce(topic, values)
    created = floe("stream", "create", "av", "--bootstrap", broker.bootstrap, "--topic", topic, "--format", "avro",
                   "--schema-registry", registry.url, "--route-by", "type", "--table", "an.av_{value}")
    assert created.returncode == 0, created.stderr
    run_until_caught_up(spark)

    assert [r["id"] for r in query("select id from an.av_click order by id")] == [i for i in range(30) if i % 3]
    assert query("select id, amount from an.av_buy order by id") == [{"id": i, "amount": i / 2}
                                                                      for i in range(0, 30, 3)]
    from appliance.tables.catalog import Catalog

    columns = Catalog(load_settings()).table("an.av_buy").schema().column_names
    assert "amount" in columns and "page" not in columns  # its writer schema's columns, not the other kind's
    [dead] = query("select error_stage, error_message from an.av_dlq")
    assert dead == {"error_stage": "route", "error_message": "route field type value '' has no letter or digit to "
                                                            "name a table"}


def test_a_task_writes_each_route_what_its_table_has_not_taken_and_dead_letters_the_rest(monkeypatch):
    """The per-table skip: a batch read again after a kill between two tables' commits writes a message only to
    a table that has not committed its offset (no Spark here: the task's work, called as a task calls it). Each
    JSON message is parsed once, for its route value and its table's columns alike."""
    import datetime as dt

    from appliance.config.settings import ensure_home
    from appliance.decode.json_format import JsonFormat
    from appliance.ingest.batch import BatchSpec
    from appliance.kafka.settings import KafkaSettings
    from appliance.model.inference import infer_mapping
    from appliance.tables.catalog import Catalog
    from appliance.tables.datafiles import TableTarget
    from appliance.tables.iceberg_schemas import dead_letter_iceberg_schema, target_iceberg_schema

    settings = load_settings()
    ensure_home(settings)
    catalog = Catalog(settings)
    values = [orjson.dumps({"k": "a" if i % 2 else "b", "n": i}) for i in range(8)] + [orjson.dumps({"n": 8})]
    mapping = infer_mapping([orjson.loads(v) for v in values])
    values.append(orjson.dumps({"k": "b", "n": "nine"}))  # a text where t_b's column is a number
    # ...and one in the range t_a has taken: its dead letter never landed (the dead-letter table commits last)
    values[3] = orjson.dumps({"k": "a", "n": "three"})
    targets = {name: TableTarget.of(catalog.ensure_table(name, target_iceberg_schema(mapping))[0])
               for name in ("r.t_a", "r.t_b")}
    dead = TableTarget.of(catalog.ensure_table("r.dlq", dead_letter_iceberg_schema())[0])
    rule = RouteRule.parse("k", "r.t_{value}")
    # t_a committed offsets up to 5 of partition 0 in the interrupted attempt; t_b nothing
    router = Router(rule, {"r.t_a": RouteTarget(mapping, targets["r.t_a"], {0: 5}),
                           "r.t_b": RouteTarget(mapping, targets["r.t_b"], None)}, {})
    spec = BatchSpec(stream="s", stream_id="id", topic="t", kafka=KafkaSettings.create("127.0.0.1:9"), group="g",
                     mapping=Mapping.of_table(()), target=dead, dead_letter=dead, landed={}, max_message_bytes=1 << 20,
                     fetch_timeout=1.0, fmt=JsonFormat(), router=router)
    parsed: list[bytes] = []
    loads = orjson.loads
    monkeypatch.setattr(orjson, "loads", lambda value: parsed.append(value) or loads(value))
    done = router.write(spec, [], _raw(values), [], dt.datetime.now(dt.UTC), 0.0)
    monkeypatch.undo()
    assert sorted(parsed) == sorted(values)  # once each (twice before: for the route, then by the route's mapping)
    assert not done.new_routes and not done.evolutions
    assert done.rows == 2 + 4 and done.dead_letter_rows == 3  # t_a: offsets 5 and 7 only; t_b: 0, 2, 4, 6
    assert [f.record_count for f in done.routed_files["r.t_a"]] == [2]
    assert sum(f.record_count for f in done.routed_files["r.t_b"]) == 4
    assert sum(f.record_count for f in done.dead_letter_files) == 3  # offsets 3, 8 (no route) and 9
    assert [c.column for c in done.route_changes["r.t_b"]] == ["n"] and sorted(done.route_changes) == ["r.t_a",
                                                                                                       "r.t_b"]


def test_routed_stream_cli_create_show_list_pause_resume_delete(broker, topic):
    import json

    from appliance.core.clock import now
    from appliance.ingest.route_tables import make_table, route_mapping
    from appliance.model.routes import Route
    from appliance.tables.catalog import Catalog

    broker.produce(topic, [orjson.dumps({"type": "click", "id": 1})])
    created = floe("stream", "create", "ev", "--bootstrap", broker.bootstrap, "--topic", topic, "--route-by",
                   "meta.type", "--table", "an.ev_{value}")
    assert created.returncode == 0, created.stderr
    assert created.stderr.strip() == (f"created stream ev: {topic} routed by meta.type -> an.ev_{{value}} (dead "
                                      "letters: an.ev_dlq); append; each value's table is made while the engine runs")
    settings = load_settings()
    catalog = Catalog(settings)
    assert catalog.list_tables() == ["an.ev_dlq"]  # the routes' tables come with their values
    again = floe("stream", "create", "ev2", "--bootstrap", broker.bootstrap, "--topic", topic, "--route-by", "type",
                 "--table", "an.x_{value}", "--dead-letter-table", "an.ev_dlq")
    assert again.returncode != 0 and "already written by stream 'ev'" in again.stderr
    missing = floe("stream", "create", "ev3", "--bootstrap", broker.bootstrap, "--topic", f"{topic}_none",
                   "--route-by", "type", "--table", "an.y_{value}")
    assert missing.returncode != 0 and len(missing.stderr.strip().splitlines()) == 1, missing.stderr

    # a route as the engine makes it (`ingest/routed.py`): recorded, then its table made
    with StateStore(settings.state_db) as state:
        stream = state.stream("ev")
        route = Route("ev", "an.ev_click", "click", route_mapping(stream, [orjson.dumps({"type": "click", "id": 1})]),
                      now(), {0: 0})
        state.add_route(route)
        make_table(settings, catalog, state, stream, route)
        assert state.tables_of(stream) == ["an.ev_dlq", "an.ev_click"]
    shown = json.loads(floe("stream", "show", "ev", "--format", "json").stdout)
    assert shown["route_by"] == "meta.type" and shown["table"] == "an.ev_{value}"
    assert [(r["value"], r["table"], r["refused"]) for r in shown["routes"]] == [("click", "an.ev_click", "")]
    assert "  click -> an.ev_click; committed nothing yet" in floe("stream", "show", "ev").stdout
    [row] = json.loads(floe("stream", "list", "--format", "json").stdout)
    assert row["table"] == "an.ev_{value} (1 tables)"
    from appliance.views.streams import stream_detail
    from tui.screens.stream_detail import title_text

    title = title_text(stream_detail(settings, "ev").view, broker.bootstrap)  # the UI's stream detail
    assert f"topic [b]{topic}[/b] routed by [b]meta.type[/b] → 1 tables: [b]an.ev_click[/b]" in title
    assert "dead letters → an.ev_dlq" in title
    assert floe("stream", "pause", "ev").returncode == 0 and floe("stream", "resume", "ev").returncode == 0
    replay = floe("dlq", "replay", "ev")  # no dead letter yet
    assert replay.returncode == 0 and replay.stdout.startswith("ev: 0 dead letters selected"), replay
    deleted = floe("stream", "delete", "ev", "--drop-tables")
    assert deleted.returncode == 0, deleted.stderr
    assert catalog.list_tables() == []
    with StateStore(settings.state_db) as state:
        assert state.routes("ev") == {}


def test_protobuf_messages_route_by_a_nested_field(broker, topic, registry, spark):
    from confluent_kafka.schema_registry import topic_record_subject_name_strategy
    from confluent_kafka.schema_registry.protobuf import ProtobufSerializer
    from confluent_kafka.serialization import MessageField, SerializationContext

    from conftest import run_until_caught_up
    from proto_helpers import F, message_class, proto_file

    meta = [("meta", 1, F.TYPE_MESSAGE, None, ".rt.Meta"), ("id", 2, F.TYPE_INT64)]
    proto_file("routes_test.proto", "rt", {"Meta": [("kind", 1, F.TYPE_STRING)],
                                           "Click": [*meta, ("page", 3, F.TYPE_STRING)],
                                           "Buy": [*meta, ("amount", 3, F.TYPE_DOUBLE)]})
    Meta, Click, Buy = (message_class(f"rt.{n}") for n in ("Meta", "Click", "Buy"))

    def serializer(cls):
        ser = ProtobufSerializer(cls, registry.client(), {"use.deprecated.format": False,
                                                          "subject.name.strategy": topic_record_subject_name_strategy})
        return lambda message: ser(message, SerializationContext(topic, MessageField.VALUE))

    click, buy = serializer(Click), serializer(Buy)
    values = [click(Click(meta=Meta(kind="click"), id=i, page=f"/p{i}")) if i % 2 else
              buy(Buy(meta=Meta(kind="buy"), id=i, amount=i / 2)) for i in range(20)]
    values.append(click(Click(id=99, page="/none")))  # no meta: no route
    broker.produce(topic, values)
    created = floe("stream", "create", "pb", "--bootstrap", broker.bootstrap, "--topic", topic, "--format",
                   "protobuf", "--schema-registry", registry.url, "--route-by", "meta.kind", "--table", "an.pb_{value}")
    assert created.returncode == 0, created.stderr
    run_until_caught_up(spark)

    assert [r["id"] for r in query("select id from an.pb_click order by id")] == list(range(1, 20, 2))
    assert query("select id, amount from an.pb_buy order by id") == [{"id": i, "amount": i / 2}
                                                                     for i in range(0, 20, 2)]
    [dead] = query("select error_stage, error_message from an.pb_dlq")
    assert dead["error_stage"] == "route" and "route field meta.kind" in dead["error_message"]


def test_without_a_catalog_transaction_a_batch_cut_between_two_tables_commits_lands_once(broker, topic, spark,
                                                                                       monkeypatch, tmp_path):
    """Where the catalog has no transaction over tables (a REST catalog), route tables commit in the order of their
    names and the dead-letter table last; a batch cut between two commits leaves tables ahead, and the batch read
    again fills only the others. (In this process: a fail point that raises, as a kill would leave the tables.)"""
    import json

    from appliance.core import failpoints
    from appliance.ingest import routed
    from appliance.tables.catalog import Catalog
    from appliance.tables.snapshots import committed_offsets

    from conftest import run_until_caught_up

    monkeypatch.setattr(routed, "TOGETHER", False)
    armed = tmp_path / "armed"
    armed.touch()
    monkeypatch.setattr(failpoints, "_ARMED", {"between_route_commits": f"raise@{armed}"})
    events, kinds = Events(broker, topic), ["click", "view", "login"]
    events.send(600, kinds)
    assert floe("stream", "create", "ev", "--bootstrap", broker.bootstrap, "--topic", topic, "--route-by", "type",
                "--table", "an.ev_{value}").returncode == 0
    with pytest.raises(Exception, match="failpoint between_route_commits"):
        run_until_caught_up(spark)
    catalog = Catalog(load_settings())
    with StateStore(load_settings().state_db) as state:
        stream, routes = state.stream("ev"), sorted(state.routes("ev"))
    assert [t for t in routes if committed_offsets(catalog.table(t), stream.id)] == ["an.ev_click"]  # the first
    assert committed_offsets(catalog.table("an.ev_dlq"), stream.id) is None  # the anchor: the batch is read again

    armed.unlink()
    events.send(300, kinds)
    # Read again in smaller batches: the first ends below what an.ev_click took, which it must keep.
    (load_settings().home / "floe.toml").write_text('[engine]\nmax_batch_messages = 100\n')
    run_until_caught_up(spark)
    for kind in kinds:
        done = floe("query", f"select id from {TABLES[kind]} order by id", "--format", "json")
        assert [json.loads(line)["id"] for line in done.stdout.splitlines()] == events.ids[kind], kind
    audited = floe("audit", "ev", "--format", "json")
    assert audited.returncode == 0 and json.loads(audited.stdout)["checked"] == events.next, audited.stdout


async def test_a_routed_stream_shows_what_each_batch_committed_and_a_route_s_schema_change_proposes_what_works(
        broker, topic, spark):
    """`floe stream show` and the UI's stream detail say what a routed batch committed (its route tables, its
    dead-letter table's snapshot: it has no target table of its own), and a route's schema change proposes
    commands that work on a routed stream, each run here as printed: the fix of the route's table, then the replay
    that brings its dead letter there."""
    import json
    import re
    import shlex

    from appliance.tables.catalog import Catalog

    from conftest import run_until_caught_up

    broker.produce(topic, [orjson.dumps({"type": "a", "n": i}) for i in range(5)] + [orjson.dumps({"type": "b"})])
    assert floe("stream", "create", "sc", "--bootstrap", broker.bootstrap, "--topic", topic, "--route-by", "type",
                "--table", "an.sc_{value}").returncode == 0
    from appliance.observe.metrics import FloeCollector

    collector = FloeCollector(load_settings())  # as the engine's endpoint: it counts what commits after its start
    run_until_caught_up(spark)
    broker.produce(topic, [orjson.dumps({"type": "a", "n": "five"})])  # a text where an.sc_a's column n is a number
    run_until_caught_up(spark)

    shown = json.loads(floe("stream", "show", "sc", "--format", "json").stdout)
    newest, first = shown["recent_batches"]
    assert (first["route_tables"], newest["route_tables"]) == (2, 0)  # the second batch: one dead letter only
    assert (json.loads(first["table_rows"]), json.loads(newest["table_rows"])) == ({"an.sc_a": 5, "an.sc_b": 1}, {})
    scraped = {(s.name, tuple(sorted(s.labels.items()))): s.value for family in collector.collect()
               for s in family.samples}  # what `floe run --metrics-port` serves
    collector.close()
    assert scraped[("floe_table_rows_total", (("stream", "sc"), ("table", "an.sc_a")))] == 5
    assert scraped[("floe_table_rows_total", (("stream", "sc"), ("table", "an.sc_b")))] == 1
    dead_letters = Catalog(load_settings()).table("an.sc_dlq")
    assert newest["dead_letter_snapshot_id"] == dead_letters.metadata.current_snapshot_id
    text = floe("stream", "show", "sc").stdout
    assert f"6 rows, 0 dead letters, {first['duration_ms']} ms, 2 route tables, snapshot " \
           f"{first['dead_letter_snapshot_id']} of an.sc_dlq" in text
    assert f"0 route tables, snapshot {newest['dead_letter_snapshot_id']} of an.sc_dlq" in text
    assert "snapshot None" not in text

    with StateStore(load_settings().state_db) as state:
        [told] = [e.message for e in state.events("sc") if e.kind == "schema_changed"]
    assert told.startswith("column n is long but messages now carry a string there: those messages go to "
                           "an.sc_dlq")
    proposed = re.findall(r"`(floe [^`]+)`", told)
    assert proposed == ["floe table alter an.sc_a drop-column n", "floe table alter an.sc_a add-column n string",
                        "floe dlq replay sc"]
    for command in proposed:
        done = floe(*shlex.split(command)[1:])
        assert done.returncode == 0, (command, done.stderr)
    assert done.stdout.startswith("sc: 1 dead letters selected; moved 1 to their tables, 0 stay"), done.stdout
    assert query("select count(*) n from an.sc_a where n = 'five'") == [{"n": 1}]

    from tui.app import FloeApp
    from tui.screens.stream_detail import StreamDetailScreen

    from tui_helpers import cell, showing, until

    app = FloeApp(load_settings())
    async with app.run_test(size=(160, 50)) as pilot:
        app.push_screen(StreamDetailScreen("sc"))
        await until(pilot, lambda: showing(app, StreamDetailScreen), 10, "the stream's detail")
        batches = app.screen.query_one("#batches-table")
        await until(pilot, lambda: batches.row_count == 2, 30, "its two batches")
        assert [cell(batches, str(i), "snapshot") for i in range(2)] == ["0 route tables", "2 route tables"]
        assert cell(batches, "0", "dead_snapshot") == str(newest["dead_letter_snapshot_id"])


def test_a_header_routes_each_message_to_its_table_and_the_value_is_decoded_there(broker, topic, spark):
    """`--route-by @header.kind`: the event's kind travels in a header, as tracing and event-type headers do; the
    values are each table's columns, a malformed one its own dead letter, a message without the header too."""
    from appliance.ingest.engine import Engine

    producer = broker.producer()
    sent = {"click": 0, "buy": 0}
    for i in range(60):
        kind = "click" if i % 3 else "buy"
        sent[kind] += 1
        producer.produce(topic, value=orjson.dumps({"id": i, kind: i * 10}), headers=[("kind", kind.encode())],
                         partition=0)
    producer.produce(topic, value=b"{broken", headers=[("kind", b"buy")], partition=0)
    producer.produce(topic, value=orjson.dumps({"id": 99}), partition=0)  # no header: no table
    assert producer.flush(30) == 0
    created = floe("stream", "create", "hk", "--bootstrap", broker.bootstrap, "--topic", topic, "--route-by",
                   "@header.kind", "--table", "hk.ev_{value}")
    assert created.returncode == 0 and "routed by @header.kind" in created.stderr, created.stderr
    Engine(load_settings(), spark=spark).run(until_caught_up=True)
    assert query("select count(*) n, sum(click) s from hk.ev_click") == [{"n": sent["click"], "s": sum(
        i * 10 for i in range(60) if i % 3)}]
    assert query("select count(*) n from hk.ev_buy") == [{"n": sent["buy"]}]
    dead = query("select _kafka_offset o, error_stage s, error_message m from hk.hk_dlq order by o")
    assert [(d["o"], d["s"]) for d in dead] == [(60, "decode"), (61, ROUTE_STAGE)], dead
    assert "@header.kind is missing or null" in dead[1]["m"]
    assert floe("audit", "hk").returncode == 0
