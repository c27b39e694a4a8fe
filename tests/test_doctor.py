"""`floe doctor`: every check against real servers, a good configuration passing all of them, and broken
ones failing exactly the checks they break, each with what to do; the catalog and the warehouse left
as they were, and no secret in any line."""

from __future__ import annotations

import json
from pathlib import Path

from appliance.config.settings import DEFAULTS_FILE

from conftest import BrokerProcess, floe, free_port, pizza_values

PASSWORD_VARIABLE = "FLOE_DOCTOR_TEST_PASSWORD"
PASSWORD = "doctor-pw-7f3a9c1e-never-print-me"


def doctor(*args: str) -> tuple[int, dict[str, tuple[str, str]], str]:
    """(exit code, {check name: (status, rest of its line)}, all it said) of `floe doctor`."""
    result = floe("doctor", "--timeout", "3", *args, timeout=120)
    assert "Traceback" not in result.stderr, result.stderr
    lines = {}
    for line in result.stdout.splitlines():
        status, name, rest = line.split(None, 2)
        lines[name] = (status, rest)
    return result.returncode, lines, result.stdout + result.stderr


def catalog_contents() -> tuple[list, dict]:
    """Every namespace of the test's catalog, and every table of each."""
    from appliance.config.settings import load_settings
    from appliance.tables.catalog import Catalog

    iceberg = Catalog(load_settings()).iceberg
    namespaces = sorted(iceberg.list_namespaces())
    return namespaces, {ns: sorted(iceberg.list_tables(ns)) for ns in namespaces}


def files_under(folder: Path) -> list[str]:
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*"))


def create_stream(name: str, bootstrap: str, topic: str, *options: str, env: dict | None = None) -> None:
    result = floe("stream", "create", name, "--bootstrap", bootstrap, "--topic", topic, "--table", f"ingest.{name}",
                  *options, env=env)
    assert result.returncode == 0, result.stderr


def test_a_good_configuration_passes_every_check_and_leaves_nothing_behind(broker, registry, topic, floe_home,
                                                                          monkeypatch):
    broker.produce(topic, pizza_values(20))
    create_stream("orders", broker.bootstrap, topic, "--schema-registry", registry.url)
    monkeypatch.setenv(PASSWORD_VARIABLE, PASSWORD)
    create_stream("secured", broker.bootstrap, topic, "--kafka-option", f"sasl.password=${{env:{PASSWORD_VARIABLE}}}")
    before, warehouse_before = catalog_contents(), files_under(floe_home / "warehouse")

    code, lines, said = doctor()

    assert code == 0, said
    assert list(lines) == ["config", "secrets", "catalog", "warehouse", "catalog-write", "state", "broker[orders]",
                           "registry[orders]", "broker[secured]", "java", "spark", "privacy"], said
    assert {status for status, _ in lines.values()} == {"ok"}, said
    assert lines["catalog"][1].startswith("sql catalog at sqlite:///") and "namespace" in lines["catalog"][1]
    assert lines["state"][1].startswith("2 streams, 0 stages")
    assert lines["broker[orders]"][1] == f"{broker.bootstrap}: topic {topic}, 4 partitions"
    assert lines["registry[orders]"][1].startswith(f"{registry.url}: ")
    assert lines["spark"][1].endswith("local[*]: no server needed")
    assert PASSWORD not in said
    # the throwaway table and its namespace are gone, and so are the probe object and every folder made
    assert catalog_contents() == before
    assert files_under(floe_home / "warehouse") == warehouse_before

    result = floe("doctor", "--format", "json", timeout=120)
    checks = json.loads(result.stdout)
    assert result.returncode == 0 and [c["name"] for c in checks][:3] == ["config", "secrets", "catalog"]
    assert all(c["status"] == "ok" and c["ok"] and c["todo"] == "" for c in checks), checks
    assert catalog_contents() == before


def test_a_broken_configuration_fails_the_checks_it_breaks_and_says_what_to_do(broker, topic, floe_home,
                                                                             monkeypatch):
    broker.produce(topic, pizza_values(20))
    create_stream("fine", broker.bootstrap, topic)
    monkeypatch.setenv(PASSWORD_VARIABLE, PASSWORD)
    create_stream("secured", broker.bootstrap, topic, "--kafka-option", f"sasl.password=${{env:{PASSWORD_VARIABLE}}}")
    dead_registry = f"http://127.0.0.1:{free_port()}"
    create_stream("unregistered", broker.bootstrap, topic, "--schema-registry", dead_registry)
    gone = BrokerProcess()  # a cluster that answers when its stream is made, and is gone since
    try:
        gone.produce(topic, pizza_values(5))
        create_stream("orphan", gone.bootstrap, topic)
    finally:
        gone.stop()
    before = catalog_contents()
    # the warehouse becomes a file where a directory should be; the environment loses the password
    (floe_home / "not-a-folder").write_text("a file, not a folder\n")
    (floe_home / "floe.toml").write_text(f'[warehouse]\nlocation = "{floe_home / "not-a-folder"}"\n')

    monkeypatch.delenv(PASSWORD_VARIABLE)
    code, lines, said = doctor()

    assert code == 1, said
    failing = {name for name, (status, _) in lines.items() if status == "FAIL"}
    assert failing == {"warehouse", "broker[orphan]", "broker[secured]", "registry[unregistered]"}, said
    assert lines["catalog-write"][0] == "skip" and "warehouse" in lines["catalog-write"][1]
    assert {name for name, (status, _) in lines.items() if status == "ok"} == {
        "config", "secrets", "catalog", "state", "broker[fine]", "broker[unregistered]", "java", "spark", "privacy"}, said
    warehouse = lines["warehouse"][1]
    assert warehouse.startswith(f"{(floe_home / 'not-a-folder').as_uri()}: cannot write") and "-> make [warehouse]" in warehouse
    orphan = lines["broker[orphan]"][1]
    assert f"{gone.bootstrap} unreachable: " in orphan and "Connection refused" in orphan
    assert orphan.endswith("-> check the bootstrap servers and kafka options with `floe stream show orphan`")
    secured = lines["broker[secured]"][1]
    assert f"${{env:{PASSWORD_VARIABLE}}} cannot be resolved: no environment variable {PASSWORD_VARIABLE}" in secured
    assert "-> set that environment variable" in secured
    assert lines["registry[unregistered]"][1].startswith(f"schema registry {dead_registry} unreachable")
    assert PASSWORD not in said
    assert catalog_contents() == before


def test_an_s3_warehouse_nobody_serves_and_a_secret_that_is_not_set(floe_home, monkeypatch):
    endpoint, spark_port = f"http://127.0.0.1:{free_port()}", free_port()
    floe_home.mkdir(parents=True)
    (floe_home / "floe.toml").write_text(
        f'[spark]\nmaster = "spark://127.0.0.1:{spark_port}"\n\n'
        '[warehouse]\nlocation = "s3://floe-bucket/warehouse"\n\n'
        f'[warehouse.s3]\nendpoint = "{endpoint}"\naccess_key_id = "floe-key"\n'
        'secret_access_key = "${env:FLOE_DOCTOR_S3_SECRET}"\n')

    monkeypatch.delenv("FLOE_DOCTOR_S3_SECRET", raising=False)
    code, lines, said = doctor()

    assert code == 1, said
    reference = "${env:FLOE_DOCTOR_S3_SECRET} cannot be resolved"
    assert lines["secrets"][0] == "FAIL" and reference in lines["secrets"][1], said
    assert lines["secrets"][1].startswith("s3.secret_access_key: secret reference")
    # the catalog's properties hold the S3 keys: it cannot be opened, and what needs it is not tried
    assert lines["catalog"][0] == "FAIL" and reference in lines["catalog"][1], said
    assert [lines[name][0] for name in ("warehouse", "catalog-write")] == ["skip", "skip"]
    assert lines["spark"] == ("FAIL", f"master spark://127.0.0.1:{spark_port} unreachable: Connection refused -> "
                                      "start the Spark master, or set [spark] master in floe.toml (or "
                                      "FLOE_SPARK_MASTER) to one that runs"), said
    assert [lines[name][0] for name in ("config", "state", "java")] == ["ok", "ok", "ok"], said

    secret = "s3-secret-0c9d2b7a-never-print-me"
    monkeypatch.setenv("FLOE_DOCTOR_S3_SECRET", secret)
    code, lines, said = doctor()

    assert code == 1, said
    assert [lines[name][0] for name in ("secrets", "catalog")] == ["ok", "ok"], said
    assert lines["warehouse"][0] == "FAIL", said
    assert lines["warehouse"][1].startswith(f"s3://floe-bucket/warehouse (endpoint {endpoint}): cannot write")
    assert lines["catalog-write"][0] == "skip"
    assert secret not in said


def test_an_invalid_floe_toml_is_one_failed_line_not_a_traceback(floe_home):
    floe_home.mkdir(parents=True)
    (floe_home / "floe.toml").write_text('[engine]\ncommit_interval = "soon"\n')

    code, lines, said = doctor()

    assert code == 1, said
    assert list(lines) == ["config", "java"], said
    status, rest = lines["config"]
    assert status == "FAIL" and "commit_interval" in rest and rest.endswith(
        f"-> fix the setting it names in floe.toml ({DEFAULTS_FILE} lists every setting with its default)")


def test_a_rest_catalog_is_written_where_it_places_its_tables(floe_home, seaweed, monkeypatch):
    from pyiceberg.catalog import load_catalog

    monkeypatch.setenv("FLOE_DOCTOR_REST_CREDENTIAL", f"{seaweed.access_key}:{seaweed.secret_key}")
    properties = {**seaweed.rest_properties(), "credential": "${env:FLOE_DOCTOR_REST_CREDENTIAL}"}
    floe_home.mkdir(parents=True)
    (floe_home / "floe.toml").write_text('[catalog]\ntype = "rest"\n'
                                         + "".join(f'"{k}" = "{v}"\n' for k, v in properties.items()))
    rest = load_catalog("check", **seaweed.rest_properties())

    def contents():
        return {ns: sorted(rest.list_tables(ns)) for ns in sorted(rest.list_namespaces())}

    before = contents()
    code, lines, said = doctor()

    assert code == 0, said
    assert lines["catalog"][0] == "ok" and lines["catalog"][1].startswith(f"rest catalog at {seaweed.rest_uri} (")
    # the service places tables in its table bucket, where only data files may be written at all
    assert lines["warehouse"][0] == "skip", said
    assert lines["catalog-write"][0] == "ok" and "an object written where its data goes" in lines["catalog-write"][1]
    assert lines["secrets"] == ("ok", "1 reference in the settings, all resolved")
    assert seaweed.secret_key not in said
    assert contents() == before
