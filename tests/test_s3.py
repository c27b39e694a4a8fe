"""A warehouse on S3, end to end, against a real S3 server on loopback (SeaweedFS, the session's
`seaweed` fixture).

Spark tasks write the data files to S3, the driver commits them to the catalog, DuckDB
reads them back over httpfs, and the secret key never reaches a terminal or a log file.
"""

from __future__ import annotations

import json
import subprocess

import pytest

from conftest import floe, floe_process, pizza_values

# Undecodable, so they cannot sway the mapping inferred from a sample of the topic.
MALFORMED = [b"{broken json", b"[1, 2, 3]", b"\xff\xfe invalid utf-8"]


@pytest.fixture
def s3_warehouse(floe_home, seaweed):
    """A bucket of the test's own on SeaweedFS, and $FLOE_HOME/floe.toml with the warehouse in it."""
    bucket = seaweed.new_bucket()
    floe_home.mkdir(parents=True, exist_ok=True)
    (floe_home / "floe.toml").write_text(
        "[warehouse]\n"
        f'location = "s3://{bucket}/warehouse"\n'
        "\n[warehouse.s3]\n"
        f'endpoint = "{seaweed.s3_endpoint}"\n'
        f'region = "{seaweed.region}"\n'
        f'access_key_id = "{seaweed.access_key}"\n'
        f'secret_access_key = "{seaweed.secret_key}"\n'
    )
    return bucket


class Floe:
    """Runs `floe` commands and keeps every stdout and stderr, to look for the secret in."""

    def __init__(self, secret: str) -> None:
        self.secret = secret
        self.outputs: list[tuple[str, str]] = []

    def __call__(self, *args: str) -> subprocess.CompletedProcess:
        # `floe run` in a process of its own: its JVM's output and logs are looked through for the secret too
        result = (floe_process if args[0] == "run" else floe)(*args)
        name = f"floe {' '.join(args[:2])}"
        self.outputs += [(f"{name} stdout", result.stdout), (f"{name} stderr", result.stderr)]
        return result

    def ok(self, *args: str) -> subprocess.CompletedProcess:
        result = self(*args)
        assert result.returncode == 0, result.stderr
        return result

    def query_json(self, sql: str) -> list[dict]:
        return [json.loads(line) for line in self.ok("query", sql, "--format", "json").stdout.splitlines()]

    def assert_secret_kept(self, floe_home) -> None:
        for what, text in self.outputs:
            assert self.secret not in text, f"secret key printed in {what}"
        logs = [p for p in (floe_home / "logs").rglob("*") if p.is_file()]
        assert logs, "no log files written"
        for path in logs:
            assert self.secret not in path.read_text(errors="replace"), f"secret key written to {path}"


def _keys(client, bucket: str, prefix: str) -> list[str]:
    keys = []
    for page in client.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix):
        keys += [o["Key"] for o in page.get("Contents", [])]
    return keys


def test_warehouse_on_s3_end_to_end(broker, topic, floe_home, seaweed, s3_warehouse):
    run = Floe(seaweed.secret_key)
    good = pizza_values(1000)
    broker.produce(topic, good[:500] + MALFORMED + good[500:])

    run.ok("stream", "create", "s3orders", "--bootstrap", broker.bootstrap, "--topic", topic,
           "--table", "ingest.s3orders")
    run.ok("run", "--until-caught-up")

    [counts] = run.query_json(
        "select (select count(*) from ingest.s3orders) as rows, (select count(*) from ingest.s3orders_dlq) as dead,"
        " (select sum(order_id) from ingest.s3orders) as total")
    assert counts == {"rows": len(good), "dead": len(MALFORMED), "total": sum(range(len(good)))}
    dead = run.query_json("select error_stage from ingest.s3orders_dlq")
    assert sorted(d["error_stage"] for d in dead) == ["decode"] * len(MALFORMED)

    # The tables' files really are in the bucket, under the warehouse prefix; none on local disk.
    keys = _keys(seaweed.client(), s3_warehouse, "warehouse/")
    data = [k for k in keys if k.endswith(".parquet")]
    assert any(k.startswith("warehouse/ingest/s3orders/data/") for k in data), keys
    assert any(k.startswith("warehouse/ingest/s3orders_dlq/data/") for k in data), keys
    assert any(k.startswith("warehouse/ingest/s3orders/metadata/") and k.endswith(".metadata.json")
               for k in keys), keys
    assert not (floe_home / "warehouse").exists()

    # The secret key is in floe.toml and nowhere a person or a log shipper would see it.
    run.assert_secret_kept(floe_home)


def test_s3_outage_is_one_line_without_the_secret(broker, topic, floe_home, seaweed, s3_warehouse):
    """No Spark here: table creation and queries against a stopped endpoint fail as one clear line."""
    run = Floe(seaweed.secret_key)
    broker.produce(topic, pizza_values(20))
    run.ok("stream", "create", "up", "--bootstrap", broker.bootstrap, "--topic", topic, "--table", "ingest.up")

    with seaweed.down():  # killed: nothing listens on its port; running again after the block
        for args in (
            ("stream", "create", "down", "--bootstrap", broker.bootstrap, "--topic", topic, "--table", "ingest.down"),
            ("query", "select count(*) from ingest.up"),
        ):
            result = run(*args)
            assert result.returncode == 1, result.stderr
            assert "Traceback" not in result.stderr, result.stderr
            error = [line for line in result.stderr.splitlines() if line.startswith("floe: error:")]
            assert len(error) == 1 and f"s3://{s3_warehouse}/warehouse" in error[0], result.stderr
            assert seaweed.s3_endpoint in error[0], result.stderr
    # The failed create left no stream behind.
    streams = json.loads(run.ok("stream", "list", "--format", "json").stdout)
    assert [s["name"] for s in streams] == ["up"]
    run.assert_secret_kept(floe_home)
