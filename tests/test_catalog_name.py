"""`[catalog] name`: the name Floe opens its catalog under. A SQL catalog files each table under it
(`iceberg_tables.catalog_name`), so another engine over the same database (PyIceberg, Trino's or
Spark's JDBC catalog) sees Floe's tables only under that name; everything in Floe that opens the
catalog uses it: the engine, DuckDB's queries, the audit, maintenance, `floe stream show`."""

from __future__ import annotations

import json
import subprocess

import pytest
from pyiceberg.catalog.sql import SqlCatalog

from appliance.config.settings import load_settings
from appliance.core.errors import ConfigError

from conftest import ROOT, pizza_values

JAVA = ROOT / ".javaiceberg" / ".venv" / "bin" / "python"
READ = ROOT / "scripts" / "javaiceberg" / "read.py"


def test_a_stream_lands_under_the_catalog_s_name_and_every_reader_of_floe_uses_it(broker, topic, floe_home, spark):
    from appliance.auditor import audit_stream
    from appliance.control.streams import create_stream
    from appliance.core.vocabulary import MaintenanceTask
    from appliance.ingest.engine import Engine
    from appliance.maintenance.maintainer import Maintainer
    from appliance.query.connection import run_query
    from appliance.tables.metadata_json import committed_offsets_of

    floe_home.mkdir(parents=True)
    (floe_home / "floe.toml").write_text('[catalog]\nname = "lake"\n')  # Floe's own SQLite catalog, named so
    settings = load_settings()
    assert settings.catalog.own and settings.catalog.name == "lake"
    broker.produce(topic, pizza_values(30))
    stream = create_stream(settings, "named", bootstrap=broker.bootstrap, topic=topic, table="ingest.named").stream
    for start in (30, 60):  # two commits, two data files: something for compaction to do
        Engine(settings, spark=spark).run(until_caught_up=True)
        broker.produce(topic, pizza_values(30, start))
    Engine(settings, spark=spark).run(until_caught_up=True)

    assert run_query(settings, "select count(*) as n from ingest.named").to_pylist() == [{"n": 90}]
    report = audit_stream(settings, "named")
    assert report.ok, report.render()
    run = Maintainer(settings, spark=spark).run("ingest.named", MaintenanceTask.COMPACT)
    assert not run.failed, run
    offsets = committed_offsets_of(settings, "ingest.named", stream.id)  # `floe stream show`'s fast read
    assert sum(offsets.values()) == 90, offsets

    uri = f"sqlite:///{settings.catalog_db}"
    lake = SqlCatalog("lake", uri=uri, warehouse=settings.warehouse)
    assert lake.load_table("ingest.named").scan().to_arrow().num_rows == 90
    assert lake.load_table("ingest.named").current_snapshot().summary.operation.value == "replace"  # compacted
    floe = SqlCatalog("floe", uri=uri, warehouse=settings.warehouse)
    assert floe.list_namespaces() == [] and not floe.table_exists("ingest.named")

    if not JAVA.exists():
        pytest.fail(f"the reference Java Iceberg is not set up ({JAVA}): run scripts/javaiceberg/setup --no-s3")
    jdbc = f"jdbc:sqlite:{settings.catalog_db}"
    done = subprocess.run([str(JAVA), str(READ), "ingest.named", "--jdbc-catalog", jdbc, "--catalog-name", "lake",
                           "--sql", "select count(*) as n from t", "--json"],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert [json.loads(line) for line in done.stdout.splitlines()] == [{"n": 90}]


@pytest.mark.parametrize("value", ['"two words"', '""', "7", '"a.b"', '"-x"', '"' + "x" * 256 + '"'])
def test_a_catalog_name_other_engines_cannot_use_is_one_line_naming_it(floe_home, value):
    floe_home.mkdir(parents=True)
    (floe_home / "floe.toml").write_text(f"[catalog]\nname = {value}\n")
    with pytest.raises(ConfigError, match=r"floe\.toml: catalog\.name must be letters, digits") as error:
        load_settings()
    assert "\n" not in str(error.value)


@pytest.mark.parametrize("value", ['"soon"', "0", "-3"])
def test_a_rest_request_timeout_that_is_no_deadline_is_one_line_naming_it(floe_home, value):
    floe_home.mkdir(parents=True)
    (floe_home / "floe.toml").write_text(f'[catalog]\ntype = "rest"\nuri = "http://127.0.0.1:9"\n'
                                         f'request-timeout = {value}\n')
    with pytest.raises(ConfigError, match=r"floe\.toml: catalog\.request-timeout must be a number of seconds above "
                                          r"0 \(a REST request's deadline\); it is ") as error:
        load_settings()
    assert "\n" not in str(error.value)
