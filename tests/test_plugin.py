"""Floe's pytest plugin: the example project run as a user runs it, and the fixtures' promises
(a home and topics per test, cleanup, xdist) checked on the fixtures themselves."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from appliance.core.errors import MappingError, StreamNotFound

from conftest import ROOT

EXAMPLE = ROOT / "examples" / "pipeline"


def _files(root: Path) -> set[str]:
    return {str(p.relative_to(root)) for p in root.rglob("*") if "__pycache__" not in p.parts}


def test_the_example_project_passes_through_the_installed_plugin_in_parallel(tmp_path):
    """From a directory of its own, as a user would: no conftest of ours within reach, the plugin
    found through its entry point, two xdist workers running modules that use the same topic and
    table names."""
    project = tmp_path / "pipeline"
    shutil.copytree(EXAMPLE, project, ignore=shutil.ignore_patterns("__pycache__", ".pytest_cache"))
    before = _files(project)
    base = tmp_path / "basetemp"
    env = {k: v for k, v in os.environ.items() if k not in ("FLOE_HOME", "PYTHONPATH")}
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-n", "2", "-p", "no:cacheprovider",
                           f"--basetemp={base}"], cwd=project, env=env, capture_output=True,
                          text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    assert "4 passed" in done.stdout
    # Each test had a FLOE_HOME of its own, under pytest's temporary directory, not in the project.
    homes = sorted(base.rglob("floe-home"))
    assert len(homes) == 4 and all((h / "state.db").exists() for h in homes)
    assert _files(project) - before <= {"tests/__pycache__"}, _files(project) - before


def test_the_plugin_is_registered_by_its_entry_point():
    from importlib.metadata import entry_points

    found = [e for e in entry_points(group="pytest11") if e.name == "floe"]
    assert [e.value for e in found] == ["appliance.testing.plugin"]


def _orders(floe, n: int) -> int:
    floe.produce_json("orders", [{"order_id": i, "amount": i * 1.5} for i in range(n)])
    floe.create_stream("orders", topic="orders", table="lake.orders")
    floe.run_until_caught_up()
    return floe.query("select count(*) as n from lake.orders").to_pylist()[0]["n"]


def test_a_topic_name_is_this_tests_own_first(floe, tmp_path):
    assert floe.home == tmp_path / "floe-home" and os.environ["FLOE_HOME"] == str(floe.home)
    assert floe.topic("orders") != "orders" and floe.topic("orders").endswith(".orders")
    assert _orders(floe, 3) == 3


def test_a_topic_name_is_this_tests_own_second(floe):
    """Runs after the first: the same topic and table names, none of its messages or rows."""
    assert _orders(floe, 5) == 5
    assert floe.audit("orders").ok


def test_the_engine_leaves_no_thread_behind(floe):
    before = {t.ident for t in threading.enumerate()}
    _orders(floe, 2)
    left = [t.name for t in threading.enumerate() if t.ident not in before and t.is_alive()]
    assert not left, left


def test_avro_through_the_session_registry(floe, floe_schema_registry):
    schema = {"type": "record", "name": "Order", "fields": [{"name": "order_id", "type": "long"},
                                                            {"name": "store", "type": "string"}]}
    floe.produce_avro("payments", schema, [{"order_id": 1, "store": "Napoli"}, {"order_id": 2, "store": "Roma"}])
    floe.produce("payments", [b"not avro at all"])
    floe.create_stream("payments", topic="payments", table="lake.payments", format="avro")
    floe.run_until_caught_up()
    assert floe.query("select order_id, store from lake.payments order by 1").to_pylist() == [
        {"order_id": 1, "store": "Napoli"}, {"order_id": 2, "store": "Roma"}]
    assert [d["raw_value"] for d in floe.dead_letters("payments")] == [b"not avro at all"]
    assert floe_schema_registry.client().get_subjects() == [f"{floe.topic('payments')}-value"]


def test_a_mapping_given_as_a_dict(floe):
    floe.produce_json("orders", [{"order_id": 7, "amount": 2.5}])
    floe.create_stream("orders", topic="orders", table="lake.orders", mapping={"order_id": "long", "amount": "double"})
    floe.run_until_caught_up()
    assert floe.query("select order_id, amount from lake.orders").to_pylist() == [{"order_id": 7, "amount": 2.5}]


def test_an_upsert_key_given_as_a_string_or_a_list(floe):
    """`key="id"` is the column id (not the columns i and d); "id, tenant" and a list name two."""
    import orjson

    rows = [{"id": 1, "tenant": "a", "n": 1}, {"id": 1, "tenant": "b", "n": 2}, {"id": 1, "tenant": "a", "n": 3}]
    for topic in ("one", "two", "listed"):
        floe.produce(topic, [orjson.dumps(r) for r in rows],
                     keys=[orjson.dumps({"id": r["id"], "tenant": r["tenant"]}) for r in rows], partition=0)
    # a tombstone as Kafka Connect's JsonConverter spells it deletes its key's row
    floe.produce("two", [b'{"schema": null, "payload": null}'], keys=[b'{"id": 1, "tenant": "b"}'], partition=0)
    floe.create_stream("one", topic="one", table="lake.one", mode="upsert", key="id")
    floe.create_stream("two", topic="two", table="lake.two", mode="upsert", key="id, tenant")
    floe.create_stream("listed", topic="listed", table="lake.listed", mode="upsert", key=["id", "tenant"])
    floe.run_until_caught_up()
    assert floe.query("select id, tenant, n from lake.one").to_pylist() == [{"id": 1, "tenant": "a", "n": 3}]
    assert floe.query("select tenant, n from lake.listed order by 1").to_pylist() == [
        {"tenant": "a", "n": 3}, {"tenant": "b", "n": 2}]
    assert floe.query("select tenant, n from lake.two").to_pylist() == [{"tenant": "a", "n": 3}]
    assert floe.audit("two").ok and not floe.dead_letters("two")


def test_bad_input_is_a_floe_error(floe):
    with pytest.raises(MappingError, match="mapping must be"):
        floe.create_stream("orders", topic="orders", table="lake.orders", mapping={})
    with pytest.raises(MappingError, match="'amount' must be a string"):
        floe.create_stream("orders", topic="orders", table="lake.orders", mapping={"amount": 5})
    with pytest.raises(StreamNotFound):
        floe.audit("nope")
    with pytest.raises(StreamNotFound):
        floe.dead_letters("nope")


def test_the_readme_example(floe):
    """The issue's and the README's example, word for word."""
    floe.produce("orders", [b'{"order_id": 1, "amount": 9.5}', b"{bad"])
    floe.create_stream("orders", topic="orders", table="lake.orders")   # mapping="auto" | a TOML path | a dict
    floe.create_stage("big", source="lake.orders", table="lake.big", sql="select * from source where amount > 5")
    floe.run_until_caught_up()
    assert floe.query("select count(*) from lake.orders").to_pylist() == [{"count_star()": 1}]
    assert floe.dead_letters("orders")[0]["error_stage"] == "decode"
    assert floe.audit("orders").ok
    assert floe.query("select order_id from lake.big").to_pylist() == [{"order_id": 1}]


def test_protobuf_through_the_session_registry(floe):
    from proto_helpers import F, message_class, proto_file

    proto_file("plugin_order.proto", "plugin", {"Order": [("order_id", 1, F.TYPE_INT64), ("store", 2, F.TYPE_STRING)]})
    order = message_class("plugin.Order")
    floe.produce_protobuf("orders", [order(order_id=1, store="Napoli"), order(order_id=2, store="Roma")])
    floe.create_stream("orders", topic="orders", table="lake.orders", format="protobuf")
    floe.run_until_caught_up()
    assert floe.query("select order_id, store from lake.orders order by 1").to_pylist() == [
        {"order_id": 1, "store": "Napoli"}, {"order_id": 2, "store": "Roma"}]
    assert floe.audit("orders").ok


def test_the_pytest_extra_brings_everything_the_plugin_imports():
    """`pip install 'floe[pytest]'` is the one command the README gives: every package the plugin's modules
    import, at their top or in a fixture, must come with floe or with that extra."""
    import ast
    import re
    import tomllib
    from importlib.metadata import packages_distributions

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    declared = {re.split(r"[\[<>=!~ ;]", r, maxsplit=1)[0].lower().replace("_", "-")
                for r in project["dependencies"] + project["optional-dependencies"]["pytest"]}
    assert {"pytest", "pytest-xdist"} <= declared
    imported = set()
    for module in (ROOT / "appliance" / "testing").glob("*.py"):
        for node in ast.walk(ast.parse(module.read_text())):
            if isinstance(node, ast.Import):
                imported |= {a.name.split(".")[0] for a in node.names}
            elif isinstance(node, ast.ImportFrom) and node.level == 0:
                imported.add(node.module.split(".")[0])
    third_party = imported - set(sys.stdlib_module_names) - {"appliance", "__future__"}
    owners = packages_distributions()
    needed = {d.lower().replace("_", "-") for name in third_party for d in owners.get(name, [name])}
    assert needed and needed <= declared, sorted(needed - declared)
