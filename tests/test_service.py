"""Floe as a service nobody watches: the systemd unit `floe service unit` prints (checked by
`systemd-analyze verify`, its EnvironmentFile naming exactly the variables the configuration's
`${env:...}` references need), an engine that stops cleanly on SIGTERM within the unit's TimeoutStopSec
in the middle of a busy stream (nothing lost or doubled), and what Floe writes under FLOE_HOME for its
owner alone whatever the umask, Spark's Python workers' data files included."""

from __future__ import annotations

import os
import re
import signal
import stat
import subprocess
import threading
import time
from dataclasses import replace

import orjson
import pytest

from appliance.auditor import audit_stream
from appliance.config.settings import ensure_home, load_settings
from appliance.control.alerts import add_alert
from appliance.control.doctor.privacy import check_privacy
from appliance.control.streams import create_stream
from appliance.ingest.engine import Engine
from appliance.kafka.settings import KafkaSettings, RegistrySettings
from appliance.model.mapping import Column, Mapping
from appliance.query.connection import run_query
from appliance.state.store import StateStore

from conftest import FLOE, ROOT, floe, wait_for

SECRETS = {"PG_PASSWORD", "S3_SECRET", "HOOK_TOKEN", "KAFKA_PASSWORD", "REGISTRY_AUTH", "PAGER_TOKEN"}


def test_the_unit_verifies_and_names_exactly_the_variables_the_references_need(broker, topic, floe_home, tmp_path):
    settings = load_settings()
    ensure_home(settings)
    broker.produce(topic, [b'{"id": 1}'])
    create_stream(settings, "plain", bootstrap=broker.bootstrap, topic=topic, table="ingest.plain",
                  mapping=Mapping((Column("id", "long", ("id",)),)))
    with StateStore(settings.state_db) as state:  # a stream of a secured cluster (this broker has no SASL)
        kafka = KafkaSettings.create("kafka.example:9093", {
            "security.protocol": "sasl_ssl", "sasl.mechanism": "PLAIN", "sasl.username": "floe",
            "sasl.password": "${env:KAFKA_PASSWORD}"})
        registry = RegistrySettings.create("https://registry.example", {"basic.auth.user.info": "${env:REGISTRY_AUTH}"})
        state.add_stream(replace(state.stream("plain"), name="secured", id=StateStore.new_id(), kafka=kafka,
                                 registry=registry))
    (floe_home / "floe.toml").write_text(  # the team's catalog on PostgreSQL, its warehouse on S3
        '[catalog]\ntype = "sql"\nuri = "postgresql+psycopg2://floe:${env:PG_PASSWORD}@db:5432/lake"\n'
        'warehouse = "s3://lake/w"\n"s3.secret-access-key" = "${env:S3_SECRET}"\n'
        '"s3.access-key-id" = "${file:/run/secrets/s3-key-id}"\n'  # a file reference: no variable
        '[[alerts]]\nname = "lagging"\nrule = "lag_messages > 1000"\nnotify = ["json://h.example/${env:HOOK_TOKEN}"]\n')
    settings = load_settings()
    add_alert(settings, "down", "failed", ["json://pager.example/${env:PAGER_TOKEN}"])

    done = floe("service", "unit", "--user", "root", "--stop-timeout", "90")

    assert done.returncode == 0, done.stderr
    unit = done.stdout
    assert re.search(r"^ExecStart=\S+ run$", unit, re.M) and "\nRestart=on-failure\n" in unit
    assert f"\nEnvironment=FLOE_HOME={floe_home}\n" in unit and "\nUser=root\n" in unit
    assert f"\nEnvironmentFile={floe_home}/floe.env\n" in unit and "\nTimeoutStopSec=90s\n" in unit
    [listed] = re.findall(r"must set: (.*)$", unit, re.M)
    assert set(listed.split()) == SECRETS
    path = tmp_path / "floe.service"
    path.write_text(unit)
    (floe_home / "floe.env").write_text("".join(f"{name}=x\n" for name in sorted(SECRETS)))
    verified = subprocess.run(["systemd-analyze", "verify", str(path)], capture_output=True, text=True)
    assert verified.returncode == 0 and not verified.stderr.strip(), verified.stderr


def test_a_home_without_references_needs_no_environment_file(floe_home):
    done = floe("service", "unit")
    assert done.returncode == 0, done.stderr
    assert "EnvironmentFile" not in done.stdout.replace("no EnvironmentFile needed", "")


def modes(home) -> dict[str, int]:
    """Every path under `home` and its permission bits."""
    return {str(p.relative_to(home)): stat.S_IMODE(p.stat().st_mode) for p in home.rglob("*") if p.exists()}


@pytest.fixture
def umask_022():
    before = os.umask(0o022)
    yield
    os.umask(before)


def test_sigterm_in_a_busy_stream_stops_within_the_unit_timeout_and_leaves_no_file_open_to_others(
        broker, topic, floe_home, tmp_path, spark, umask_022):
    floe_home.mkdir(mode=0o700)
    config = floe_home / "floe.toml"
    config.write_text('[engine]\ncommit_interval = "100ms"\nmax_batch_messages = 2000\n')
    config.chmod(0o600)
    mapping = tmp_path / "mapping.toml"
    mapping.write_text('columns = [{name = "order_id", type = "long", source = "order_id"}]\n')
    producer = broker.producer()
    sent = [0]

    def produce(n: int) -> None:
        for _ in range(n):
            producer.produce(topic, value=orjson.dumps({"order_id": sent[0]}))
            sent[0] += 1
        producer.poll(0)

    def feed(stop: threading.Event) -> None:
        while not stop.wait(0.02):  # 10,000 msg/s: every batch full (2,000), one always in flight
            produce(200)
        assert producer.flush(30) == 0

    produce(500)  # the topic exists, with a first 500
    assert producer.flush(30) == 0
    created = floe("stream", "create", "busy", "--bootstrap", broker.bootstrap, "--topic", topic,
                   "--table", "ingest.busy", "--mapping", str(mapping))
    assert created.returncode == 0, created.stderr
    unit = floe("service", "unit").stdout
    timeout = int(re.search(r"^TimeoutStopSec=(\d+)s$", unit, re.M).group(1))
    engine = subprocess.Popen(FLOE + ["run"], cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                              text=True, start_new_session=True)
    feed_stop = threading.Event()
    feeding = threading.Thread(target=feed, args=(feed_stop,))
    feeding.start()
    try:
        settings = load_settings()
        wait_for(lambda: StateStore(settings.state_db).last_id("batches") >= 5, timeout=300,
                 what="the engine's batches")
        engine.send_signal(signal.SIGTERM)  # as systemd's KillMode=mixed does: the engine alone
        started = time.monotonic()
        code = engine.wait(timeout)
        stopped_in = time.monotonic() - started
    finally:
        feed_stop.set()
        feeding.join()
        if engine.poll() is None:
            os.killpg(engine.pid, signal.SIGKILL)
        said = engine.stderr.read()
        engine.stderr.close()
    assert code == 0, said
    assert stopped_in < timeout and "floe engine stopped" in said, said

    report = audit_stream(load_settings(), "busy")  # what the stopped engine committed: each offset once
    assert report.ok and report.checked > 0, report.render()
    open_to_others = {path: oct(mode) for path, mode in modes(floe_home).items() if mode & 0o077}
    assert open_to_others == {}, open_to_others
    assert floe_home.stat().st_mode & 0o777 == 0o700
    assert check_privacy(load_settings()).status == "ok"

    # This process's umask is 022 and so was its Spark's when it started: the Python workers' data files
    # are owner-only all the same (the worker daemon's umask); the driver's metadata files are not.
    written_before = set(modes(floe_home))
    Engine(load_settings(), spark=spark).run(until_caught_up=True)
    new = {p: m for p, m in modes(floe_home).items() if p not in written_before}
    data = {p: m for p, m in new.items() if p.endswith(".parquet")}
    assert data and set(data.values()) == {0o600}, data
    assert run_query(load_settings(), "select count(*), count(distinct order_id) from ingest.busy").to_pylist() == [
        {"count_star()": sent[0], "count(DISTINCT order_id)": sent[0]}]
    report = audit_stream(load_settings(), "busy")
    assert report.ok, report.render()


def test_doctor_warns_when_floe_home_or_the_warehouse_is_open_to_others(floe_home, tmp_path):
    lake = tmp_path / "lake"
    floe_home.mkdir(mode=0o700)
    (floe_home / "floe.toml").write_text(f'[warehouse]\nlocation = "{lake}"\n')
    settings = load_settings()
    ensure_home(settings)
    assert stat.S_IMODE(lake.stat().st_mode) == 0o700  # made for its owner, whatever the umask
    assert check_privacy(settings).status == "ok"
    floe_home.chmod(0o755)
    lake.chmod(0o750)
    check = check_privacy(settings)
    assert check.status == "warn" and check.ok, check
    assert check.detail == (f"FLOE_HOME {floe_home} is open to other users (mode 755); the warehouse {lake} is "
                            "open to other users (mode 750)")
