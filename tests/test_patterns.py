"""Pattern streams: every topic whose whole name matches a regular expression, each into its own table named
by a template. The name rule and the matching as units; the CLI's create, show, list, pause, resume and delete
against a real broker; bad input as one line."""

from __future__ import annotations

import json
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
    assert not StateStore(load_settings().state_db).streams(), "a refused create records nothing"

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

    clash = floe("stream", "create", "one", "--bootstrap", broker.bootstrap, "--topic", f"{prefix}.other.things",
                 "--table", "cdc.orders")
    assert clash.returncode != 0 and "already written by stream 'inv'" in clash.stderr  # a topic's table is taken

    assert floe("stream", "pause", "inv").returncode == 0
    assert StateStore(load_settings().state_db).stream("inv").paused
    assert floe("stream", "resume", "inv").returncode == 0
    assert not StateStore(load_settings().state_db).stream("inv").paused
    deleted = floe("stream", "delete", "inv", "--drop-tables")
    assert deleted.returncode == 0, deleted.stderr
    assert "the tables of its topics dropped" in deleted.stderr
    assert Catalog(load_settings()).list_tables() == []
    with StateStore(load_settings().state_db) as state:
        assert state.streams() == [] and state.all_members() == []
