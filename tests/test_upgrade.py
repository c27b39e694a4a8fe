"""The upgrade path: a FLOE_HOME written by the previous release (commit fbd6e66, made by
scripts/make_upgrade_fixture.py: an append stream with dead letters, an upsert stream, a stage, an alert,
a table policy, the system tables) opened by this code. Its state database migrates, its tables keep
their properties, and the engine resumes every stream exactly once with new messages."""

from __future__ import annotations

import base64
import gzip
import json
import shutil
import tarfile
from pathlib import Path

import pytest

from appliance.auditor import audit_stream
from appliance.config.settings import load_settings
from appliance.core.locks import FileLock
from appliance.ingest.engine import Engine
from appliance.maintenance.policies import describe_policy
from appliance.observe.systables import upkeep
from appliance.query.connection import run_query
from appliance.state.alerting import all_alerts
from appliance.state.schema import SCHEMA
from appliance.state.store import StateStore
from appliance.tables.catalog import Catalog, table_properties

FIXTURE = Path(__file__).parent / "fixtures" / "upgrade"
HOME = Path("/tmp/floe-upgrade-fixture/home")  # where it was made: Iceberg's paths are absolute
MALFORMED = (b"{not json", b'{"order_id": "twelve"}')  # as the fixture's script sent them


@pytest.fixture
def previous_home(monkeypatch):
    """The previous release's FLOE_HOME, unpacked where it was made (one test at a time on this machine)."""
    with FileLock(HOME.parent.parent / "floe-upgrade-fixture.lock"):
        shutil.rmtree(HOME, ignore_errors=True)
        with tarfile.open(FIXTURE / "floe-home.tar.gz") as tar:
            tar.extractall(HOME.parent, filter="data")
        monkeypatch.setenv("FLOE_HOME", str(HOME))
        yield HOME
        shutil.rmtree(HOME, ignore_errors=True)


def produce_again(broker) -> dict[str, dict]:
    """The fixture's messages, into this session's broker at the same partitions and offsets; what they were."""
    producer = broker.producer()
    sent = [json.loads(line) for line in gzip.open(FIXTURE / "messages.jsonl.gz", "rt")]
    for m in sent:
        producer.produce(m["topic"], value=base64.b64decode(m["value"]), partition=m["partition"],
                         key=base64.b64decode(m["key"]) if m["key"] else None)
    assert producer.flush(30) == 0
    return {topic: [m for m in sent if m["topic"] == topic] for topic in {m["topic"] for m in sent}}


def test_a_home_of_the_previous_release_migrates_and_resumes_exactly_once(previous_home, broker, spark):
    settings = load_settings()
    sent = produce_again(broker)
    catalog = Catalog(settings)
    before = {name: dict(catalog.table(name).metadata.properties) for name in catalog.list_tables()}

    with StateStore(settings.state_db) as state:  # this code opens it: every table and column it declares
        for name, (columns, _, _) in SCHEMA.items():
            assert set(columns) <= set(state.db[name].columns_dict), name
        for stream in state.streams():  # the broker the fixture's messages lived in is gone: this one has them
            state.update_stream(stream.name, bootstrap=broker.bootstrap)
        assert [s.name for s in state.stages()] == ["big"]
        assert [a.name for a in all_alerts(settings, state)] == ["orders-lag"]
        upkeep(settings, state)  # the engine's first round on it
        policy = {row.setting: row.value for row in describe_policy(settings, state, catalog, "ingest.orders")}
    assert policy["retention"] == "1 year" and policy["keep_snapshots"] == "3d"
    assert {name: dict(Catalog(settings).table(name).metadata.properties) for name in before} == before
    # Floe's table properties were the previous release's too, but for the metadata files kept (100 then, 10 now):
    # maintenance's first look at each table brings that one down (`Catalog.ensure_properties`), the rest unchanged.
    wanted, kept = table_properties(settings), "write.metadata.previous-versions-max"
    assert all(props[kept] == "100" and {k: v for k, v in wanted.items() if k != kept}.items() <= props.items()
               for props in before.values())
    for name, props in before.items():
        assert catalog.ensure_properties(catalog.table(name)).metadata.properties == {**props, **wanted}

    producer = broker.producer()  # new messages, after what the previous release ingested
    for i in range(240, 300):
        producer.produce("upgrade_orders", key=str(i).encode(), partition=i % 4,
                         value=json.dumps({"order_id": i, "store": "s9", "amount": 400.0 + i}).encode())
    for i in range(20):
        producer.produce("upgrade_accounts", key=json.dumps({"id": i}).encode(), partition=i % 4,
                         value=json.dumps({"id": i, "name": f"renamed {i}", "balance": -i}).encode())
    assert producer.flush(30) == 0
    Engine(settings, spark=spark).run(until_caught_up=True)

    rows = run_query(settings, "select count(*) n, count(distinct order_id) d from ingest.orders").to_pylist()[0]
    malformed = sum(1 for m in sent["upgrade_orders"] if base64.b64decode(m["value"]) in MALFORMED)
    assert rows == {"n": 300 - malformed, "d": 300 - malformed}
    assert run_query(settings, "select count(*) from ingest.orders_dlq").column(0)[0].as_py() == malformed
    accounts = {r["id"]: r for r in run_query(settings, "select id, name, balance from ingest.accounts").to_pylist()}
    assert len(accounts) == 40 and all(accounts[i]["balance"] == -i for i in range(20))
    assert all(accounts[k]["name"] == f"account {k}" for k in range(20, 40))
    big = run_query(settings, "select (select count(*) from derived.big_orders), "
                              "(select count(*) from ingest.orders where amount >= 300)").to_pylist()[0]
    assert len(set(big.values())) == 1, big
    for stream in ("orders", "accounts"):
        report = audit_stream(settings, stream)
        assert report.ok, report.render()
