"""Floe's pytest plugin (entry point `pytest11`): fixtures for testing pipelines with local Spark.

- `floe`: a `FloeClient` on a fresh FLOE_HOME under the test's `tmp_path`, with topics of its own.
- `floe_broker`: the embedded Kafka-protocol broker, hosted by this process for the session.
- `floe_spark`: one local SparkSession for the session (local[2], tuned for tests).
- `floe_schema_registry`: an embedded schema registry for the session, for Avro and Protobuf.

pytest imports every plugin at start-up, also in runs that use none of this: nothing heavy is
imported here until a fixture is asked for. Under pytest-xdist each worker is a process with its
own broker, registry and Spark; topics are prefixed per test, so nothing collides.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from appliance.testing.client import FloeClient


@pytest.fixture(scope="session")
def floe_broker():
    """The embedded Kafka-protocol broker (librdkafka's mock cluster) on loopback: `.bootstrap`."""
    from appliance.standins.broker import EmbeddedBroker

    broker = EmbeddedBroker()
    yield broker
    broker.close()


@pytest.fixture(scope="session")
def floe_schema_registry():
    """An embedded schema registry (Confluent's REST API) on loopback: `.url`, `.client()`."""
    from appliance.standins.registry import EmbeddedRegistry

    registry = EmbeddedRegistry()
    yield registry
    registry.close()


@pytest.fixture(scope="session")
def floe_spark(tmp_path_factory):
    """One local SparkSession for the whole session; every `floe` fixture runs on it."""
    from dataclasses import replace

    from appliance.config.settings import load_settings
    from appliance.spark.session import spark_session

    # Two cores are plenty for test-sized batches and leave the machine to xdist's other workers.
    settings = replace(load_settings(tmp_path_factory.mktemp("floe-spark")), spark_master="local[2]")
    session = spark_session(settings, app_name="floe-pytest")
    yield session
    session.stop()


@pytest.fixture
def floe(tmp_path, floe_broker, floe_spark, request, monkeypatch) -> Iterator[FloeClient]:
    """A Floe of this test's own: FLOE_HOME in `tmp_path`, topics no other test sees.

    `produce(topic, values, keys=None, partition=None, headers=None)`, `produce_json/avro/protobuf`,
    `create_stream(name, topic=, table=, mapping="auto", format="json", **options)` (options as `floe
    stream create` has them: `mode="upsert"`, `key="id"` or a list, `cdc="debezium"`, `partition_by=`...;
    see `FloeClient.create_stream`), `create_stage(name, source=, table=, sql=)`, `run_until_caught_up()`,
    `query(sql)`, `dead_letters(stream)`, `audit(stream)`, `topic(name)`, `home`, `settings`."""
    from appliance.testing.client import FloeClient

    home = tmp_path / "floe-home"
    # Anything that reads FLOE_HOME (a `floe` command a test starts, say) sees this test's home.
    monkeypatch.setenv("FLOE_HOME", str(home))
    monkeypatch.delenv("FLOE_SPARK_MASTER", raising=False)

    def registry_url() -> str:  # the registry starts only for a test that needs one
        return request.getfixturevalue("floe_schema_registry").url

    client = FloeClient(home, floe_broker.bootstrap, floe_spark, registry=registry_url)
    yield client
    client.close()


def pytest_configure(config) -> None:
    # PySpark's collect() leaves its result socket to the garbage collector on purpose
    # (pyspark/util.py, _load_from_socket): not the user's leak, so not the user's warning.
    config.addinivalue_line("filterwarnings", "ignore:unclosed <socket.socket:ResourceWarning")
    config.addinivalue_line("filterwarnings", "ignore::DeprecationWarning:pyspark.*")


def pytest_report_header(config) -> str | None:
    if os.environ.get("PYTEST_XDIST_WORKER"):
        return None
    return "floe: fixtures floe, floe_broker, floe_spark, floe_schema_registry"
