"""Live schema evolution, with an engine running the whole time: new fields become columns, types
widen, incompatible values are dead-lettered and told once, and the Iceberg table's schema, as
any client changes it, is what the stream follows from its next batch."""

from __future__ import annotations

import datetime as dt
import os
import queue
import subprocess
import threading

import orjson
from pyiceberg.types import StringType

from appliance.config.settings import load_settings
from appliance.control.streams import create_stream, update_stream
from appliance.control.tables import alter_table
from appliance.query.connection import run_query
from appliance.state.store import StateStore
from appliance.tables.catalog import Catalog

from conftest import FLOE, ROOT, floe, floe_process, run_until_caught_up, wait_for
from proto_helpers import avro_serializer


def rows(sql: str) -> list[dict]:
    return run_query(load_settings(), sql).to_pylist()


def columns(table: str) -> dict[str, str]:
    return {f.name: str(f.field_type) for f in Catalog(load_settings()).table(table).schema().fields}


def events(stream: str, kind: str) -> list[str]:
    with StateStore(load_settings().state_db) as state:
        return [e.message for e in state.events(stream, limit=1000) if e.kind == kind]


def produce_json(broker, topic, objects, partition=None):
    broker.produce(topic, [orjson.dumps(o) for o in objects], partition=partition)


def test_json_fields_appear_types_widen_and_incompatible_values_are_told_once(broker, topic, running_engine,
                                                                              floe_home):
    settings = load_settings()
    floe_home.mkdir(parents=True, exist_ok=True)
    mapping = floe_home / "m.toml"
    mapping.write_text('[[columns]]\nname = "id"\ntype = "long"\nsource = "id"\n'
                       '[[columns]]\nname = "qty"\ntype = "int"\nsource = "qty"\n')
    produce_json(broker, topic, [{"id": i, "qty": i} for i in range(10)])
    create_stream(settings, "evo", bootstrap=broker.bootstrap, topic=topic, table="ingest.evo", mapping=str(mapping))
    running_engine()
    wait_for(lambda: rows("select count(*) n from ingest.evo")[0]["n"] == 10, 120, what="first rows")

    # A new field, nested under a new object too: columns added before the data that uses them.
    produce_json(broker, topic, [{"id": 10 + i, "qty": 1, "coupon": f"C{i}", "geo": {"lat": 1.5, "city": "Oslo"}}
                                 for i in range(5)])
    wait_for(lambda: rows("select count(*) n from ingest.evo")[0]["n"] == 15, 120, what="rows with new fields")
    assert columns("ingest.evo")["coupon"] == "string" and columns("ingest.evo")["geo_lat"] == "double"
    got = rows("select id, coupon, geo_city from ingest.evo where id in (9, 12) order by id")
    assert got == [{"id": 9, "coupon": None, "geo_city": None}, {"id": 12, "coupon": "C2", "geo_city": "Oslo"}]
    assert any("added column coupon (string) for new field coupon" in e for e in events("evo", "schema_evolved"))

    # A value only a wider column holds: the int column becomes a long, and the value lands.
    produce_json(broker, topic, [{"id": 20, "qty": 2**40}])
    wait_for(lambda: rows("select count(*) n from ingest.evo where id = 20")[0]["n"] == 1, 120, what="widened")
    assert columns("ingest.evo")["qty"] == "long"
    assert rows("select qty from ingest.evo where id = 20") == [{"qty": 2**40}]

    # A string where the long was: every such message dead-lettered, the change told once.
    produce_json(broker, topic, [{"id": f"x{i}"} for i in range(30)] + [{"id": 99}])
    wait_for(lambda: rows("select count(*) n from ingest.evo_dlq")[0]["n"] == 30, 120, what="schema dead letters")
    wait_for(lambda: rows("select count(*) n from ingest.evo where id = 99")[0]["n"] == 1, 60, what="later row")
    dead = rows("select distinct error_stage, error_message from ingest.evo_dlq where _kafka_offset >= 0 limit 1")
    assert dead[0]["error_stage"] == "schema" and "where column 'id' is long" in dead[0]["error_message"]
    told = events("evo", "schema_changed")
    assert len(told) == 1 and "column id is long but messages now carry a string" in told[0]


def test_the_table_schema_changed_by_any_client_is_followed_live(broker, topic, running_engine, floe_home):
    settings = load_settings()
    produce_json(broker, topic, [{"id": i, "note": "a", "extra": "e"} for i in range(5)])
    create_stream(settings, "tt", bootstrap=broker.bootstrap, topic=topic, table="ingest.tt")
    update_stream(settings, "tt", schema_evolution="off")
    engine = running_engine()
    wait_for(lambda: rows("select count(*) n from ingest.tt")[0]["n"] == 5, 120, what="first rows")

    # With evolution off, a new field is left out and said once...
    produce_json(broker, topic, [{"id": 5 + i, "note": "b", "extra": "e", "tag": "t"} for i in range(3)])
    wait_for(lambda: rows("select count(*) n from ingest.tt")[0]["n"] == 8, 60, what="rows without tag")
    assert "tag" not in columns("ingest.tt")
    assert len([e for e in events("tt", "schema_changed") if "new field tag is not ingested" in e]) == 1

    # ...until another Iceberg client adds its column: filled from the next batch, no restart.
    catalog = Catalog(settings)
    with catalog.table("ingest.tt").update_schema() as update:
        update.add_column("tag", StringType())
    # A column dropped elsewhere is no longer written; one renamed keeps its source.
    with catalog.table("ingest.tt").update_schema() as update:
        update.delete_column("extra")
    alter_table(settings, "ingest.tt", "rename-column", "note", "remark")
    produce_json(broker, topic, [{"id": 100 + i, "note": "c", "extra": "e", "tag": "t2"} for i in range(3)])
    wait_for(lambda: rows("select count(*) n from ingest.tt where id >= 100")[0]["n"] == 3, 120, what="later rows")
    assert rows("select tag, remark from ingest.tt where id = 101") == [{"tag": "t2", "remark": "c"}]
    assert "extra" not in columns("ingest.tt")

    # Evolution back on: the dropped field stays out; a genuinely new one comes in.
    update_stream(settings, "tt", schema_evolution="auto")
    # The engine takes the change within a tick (a new worker); a message produced before that may be
    # read under the old setting, as a user's would.
    wait_for(lambda: engine.workers["tt"].stream.schema_evolution == "auto", 30, what="the engine to take the change")
    produce_json(broker, topic, [{"id": 200, "note": "d", "extra": "e", "fresh": 1}])
    wait_for(lambda: rows("select count(*) n from ingest.tt where id = 200")[0]["n"] == 1, 120, what="row 200")
    assert "fresh" in columns("ingest.tt") and "extra" not in columns("ingest.tt")
    with StateStore(settings.state_db) as state:
        shown = state.stream("tt").mapping
    assert [c.name for c in shown.columns] == ["id", "remark", "tag", "fresh"]
    assert shown.ignored == (("extra",),)


def test_a_new_registry_version_becomes_columns_without_a_restart(broker, registry, topic, running_engine):
    settings = load_settings()
    v1 = {"type": "record", "name": "Reading", "fields": [{"name": "sensor", "type": "string"},
                                                          {"name": "value", "type": "int"}]}
    broker.produce(topic, [avro_serializer(registry, v1, topic)({"sensor": "s1", "value": i}) for i in range(5)])
    create_stream(settings, "sensors", bootstrap=broker.bootstrap, topic=topic, table="ingest.sensors",
                  format="avro", schema_registry=registry.url)
    running_engine()
    wait_for(lambda: rows("select count(*) n from ingest.sensors")[0]["n"] == 5, 120, what="v1 rows")

    v2 = {**v1, "fields": [{"name": "sensor", "type": "string"}, {"name": "value", "type": "long"},
                           {"name": "unit", "type": ["null", "string"], "default": None}]}
    broker.produce(topic, [avro_serializer(registry, v2, topic)({"sensor": "s2", "value": 2**40, "unit": "C"})])
    wait_for(lambda: rows("select count(*) n from ingest.sensors")[0]["n"] == 6, 120, what="v2 row")
    assert columns("ingest.sensors")["unit"] == "string" and columns("ingest.sensors")["value"] == "long"
    assert rows("select sensor, value, unit from ingest.sensors order by value desc limit 2") == [
        {"sensor": "s2", "value": 2**40, "unit": "C"}, {"sensor": "s1", "value": 4, "unit": None}]

    v3 = {**v1, "fields": [{"name": "sensor", "type": "string"}]}  # fields removed: their columns stay
    broker.produce(topic, [avro_serializer(registry, v3, topic)({"sensor": "s3"})])
    wait_for(lambda: rows("select count(*) n from ingest.sensors")[0]["n"] == 7, 120, what="v3 row")
    assert rows("select value, unit from ingest.sensors where sensor = 's3'") == [{"value": None, "unit": None}]
    with StateStore(settings.state_db) as state:
        seen = state.seen_schemas("sensors")
    assert [(s["subject"], s["version"]) for s in seen] == [(f"{topic}-value", 1), (f"{topic}-value", 2),
                                                            (f"{topic}-value", 3)]


def test_a_crash_between_the_schema_update_and_the_data_commit_loses_and_duplicates_nothing(broker, topic, spark):
    produce_json(broker, topic, [{"id": i} for i in range(100)])
    assert floe("stream", "create", "sc", "--bootstrap", broker.bootstrap, "--topic", topic,
                "--table", "ingest.sc").returncode == 0
    run_until_caught_up(spark)
    produce_json(broker, topic, [{"id": 100 + i, "added": f"a{i}"} for i in range(50)])
    crashed = floe_process("run", "--until-caught-up", env={"FLOE_FAILPOINTS": "after_schema_commit"})
    assert crashed.returncode == -9
    assert "added" in columns("ingest.sc")  # the schema update landed, its data did not
    assert rows("select count(*) n from ingest.sc")[0]["n"] == 100
    run_until_caught_up(spark)
    got = rows("select count(*) n, count(distinct _kafka_offset || '-' || _kafka_partition) d, count(added) a "
               "from ingest.sc")
    assert got == [{"n": 150, "d": 150, "a": 50}]


def test_a_schema_update_that_loses_a_race_with_another_writer_is_redone_on_fresh_metadata(broker, topic, spark):
    """PyIceberg does not retry a schema-only commit: Floe's update, staged on the metadata it read,
    meets a schema another client committed meanwhile, and is worked out again on top of it."""
    settings = load_settings()
    produce_json(broker, topic, [{"id": i} for i in range(20)])
    assert floe("stream", "create", "race", "--bootstrap", broker.bootstrap, "--topic", topic,
                "--table", "ingest.race").returncode == 0
    run_until_caught_up(spark)
    produce_json(broker, topic, [{"id": 20 + i, "coupon": f"c{i}"} for i in range(10)])

    env = {**os.environ, "FLOE_FAILPOINTS": "schema_commit=3"}
    engine = subprocess.Popen(FLOE + ["run", "--until-caught-up"], cwd=ROOT, env=env, stdout=subprocess.DEVNULL,
                              stderr=subprocess.PIPE, text=True)
    said: queue.Queue = queue.Queue()
    lines: list[str] = []
    threading.Thread(target=lambda: [said.put(line) for line in engine.stderr], daemon=True).start()
    try:
        wait_for(lambda: lines.append(said.get(timeout=1)) or "failpoint schema_commit" in lines[-1], 180,
                 what="Floe's schema update staged")
        # Another client adds a column while Floe's update waits to commit.
        with Catalog(settings).table("ingest.race").update_schema() as update:
            update.add_column("note", StringType())
        code = engine.wait(180)
    finally:
        if engine.poll() is None:
            engine.kill()
    assert code == 0, "".join(lines)
    engine.stderr.close()
    assert {"coupon", "note"} <= set(columns("ingest.race"))
    log = (settings.log_dir / "floe.log").read_text()
    assert "schema change of ingest.race lost a race" in log  # the race really happened, and was redone
    got = rows("select count(*) n, count(distinct _kafka_partition || '-' || _kafka_offset) d, count(coupon) c, "
               "count(note) t from ingest.race")
    assert got == [{"n": 30, "d": 30, "c": 10, "t": 0}]
    assert rows("select coupon from ingest.race where id = 25") == [{"coupon": "c5"}]


def test_a_replay_after_a_crash_between_the_two_commits_follows_what_landed_not_where_messages_go_now(
        broker, topic, spark):
    """The dead-letter commit lands, the engine dies before the target commit, and before the replay the
    table's schema changes, so some messages now go elsewhere than they did: each still lands once (and a
    dead letter committed before the crash is not written again)."""
    mapping = '[[columns]]\nname = "id"\ntype = "long"\nsource = "id"\n' \
              '[[columns]]\nname = "n"\ntype = "long"\nsource = "n"\n'
    mapping_file = load_settings().home / "m.toml"
    mapping_file.parent.mkdir(parents=True, exist_ok=True)
    mapping_file.write_text(mapping)
    produce_json(broker, topic, [{"id": 1, "n": "abc"},  # a string where a long is: a dead letter, then...
                                 {"id": 2, "s": "text"},  # a field left out (evolution off): a row, then...
                                 {"id": 3, "n": 3}], partition=0)
    assert floe("stream", "create", "rr", "--bootstrap", broker.bootstrap, "--topic", topic, "--table", "ingest.rr",
                "--mapping", str(mapping_file), "--schema-evolution", "off").returncode == 0
    crashed = floe_process("run", "--until-caught-up", env={"FLOE_FAILPOINTS": "after_dead_letter_commit"})
    assert crashed.returncode == -9
    assert rows("select count(*) n from ingest.rr_dlq")[0]["n"] == 1
    assert rows("select count(*) n from ingest.rr")[0]["n"] == 0

    # ...now message 1 fits (its column is gone) and message 2 does not (s is a long column now).
    assert floe("table", "alter", "ingest.rr", "drop-column", "n").returncode == 0
    assert floe("table", "alter", "ingest.rr", "add-column", "s", "long").returncode == 0
    run_until_caught_up(spark)
    target = rows("select id from ingest.rr order by id")
    dead = rows("select _kafka_offset o, error_stage s from ingest.rr_dlq order by o")
    assert target == [{"id": 3}]  # message 1 landed as a dead letter before the crash: not again
    assert dead == [{"o": 0, "s": "schema"}, {"o": 1, "s": "schema"}]  # message 2 was never committed: now here


def test_altering_a_table_that_records_no_sources_keeps_every_column_bound_to_its_field(broker, topic):
    from appliance.tables.evolution import SOURCES_KEY, bindings, mapping_of

    settings = load_settings()
    produce_json(broker, topic, [{"id": 1, "customer": {"id": 7}}])
    create_stream(settings, "old", bootstrap=broker.bootstrap, topic=topic, table="ingest.old")
    catalog = Catalog(settings)
    with catalog.table("ingest.old").transaction() as tx:  # as tables made before sources were recorded
        tx.remove_properties(SOURCES_KEY)
    assert bindings(catalog.table("ingest.old")) is None
    alter_table(settings, "ingest.old", "add-column", "tip", "double", source="payment.tip")
    mapping = mapping_of(catalog.table("ingest.old"))
    assert {c.name: c.source for c in mapping.columns} == {"id": ("id",), "customer_id": ("customer", "id"),
                                                           "tip": ("payment", "tip")}


def test_a_new_protobuf_version_mixed_with_the_old_in_one_batch_becomes_columns(broker, registry, topic, spark):
    from appliance.ingest.engine import Engine

    from proto_helpers import F, message_class, proto_file, protobuf_serializer

    settings = load_settings()
    fields = [("id", 1, F.TYPE_INT64), ("qty", 2, F.TYPE_INT32)]
    proto_file("evo/v1.proto", "evo.v1", {"Line": fields})
    proto_file("evo/v2.proto", "evo.v2", {"Line": [*fields, ("note", 3, F.TYPE_STRING),
                                                   ("at", 4, F.TYPE_MESSAGE, None, ".google.protobuf.Timestamp")]},
               deps=("google/protobuf/timestamp.proto",))
    v1, v2 = message_class("evo.v1.Line"), message_class("evo.v2.Line")
    old, new = protobuf_serializer(registry, v1, topic), protobuf_serializer(registry, v2, topic)
    broker.produce(topic, [old(v1(id=i, qty=i)) for i in range(3)], partition=0)
    create_stream(settings, "lines", bootstrap=broker.bootstrap, topic=topic, table="ingest.lines",
                  format="protobuf", schema_registry=registry.url)
    later = v2(id=4, qty=4, note="n4")
    later.at.seconds = 1_700_000_000
    broker.produce(topic, [new(v2(id=3, qty=3, note="n3")), old(v1(id=5, qty=5)), new(later)], partition=0)
    Engine(settings, spark=spark).run(until_caught_up=True)
    at = dt.datetime(2023, 11, 14, 22, 13, 20, tzinfo=dt.timezone.utc)
    assert rows("select id, qty, note, \"at\" from ingest.lines order by id") == [
        {"id": i, "qty": i, "note": {3: "n3", 4: "n4"}.get(i), "at": at if i == 4 else None} for i in range(6)]
    assert columns("ingest.lines")["at"] == "timestamptz"
    assert any("added column note (string)" in e for e in events("lines", "schema_evolved"))
