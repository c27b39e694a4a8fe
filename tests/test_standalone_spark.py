"""`spark.master = spark://host:port`: Floe on a real Spark standalone cluster, over a shared catalog and
warehouse as a cluster of several machines needs them: a SQL catalog on PostgreSQL, the warehouse on S3.

A standalone Master and one Worker run as their own processes (the pip package has no
sbin/ scripts, so they are started with bin/spark-class), and `floe run` is pointed at them;
the executor writes the data files to S3 itself.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import urllib.request
from pathlib import Path

import pyspark
import pytest

from appliance.spark.session import JVM_OPTIONS
from conftest import floe, floe_process, free_port, pizza_values, wait_for

SPARK_HOME = Path(pyspark.__file__).resolve().parent

MALFORMED = [
    b"{broken json",
    b'"a string, not an object"',
    b"[1, 2, 3]",
    b'{"order_id": "not a number"}',
    b"\xff\xfe invalid utf-8",
]


def stop_process(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)


class StandaloneCluster:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.port = free_port()
        self.webui_port = free_port()
        self.worker_webui_port = free_port()
        self.master_url = f"spark://127.0.0.1:{self.port}"
        self.work_dir = root / "worker-work"
        self.work_dir.mkdir(parents=True)
        (root / "local").mkdir()
        self.env = {
            **os.environ,
            "SPARK_HOME": str(SPARK_HOME),
            "SPARK_LOCAL_IP": "127.0.0.1",
            "SPARK_LOCAL_DIRS": str(root / "local"),
            "SPARK_WORKER_DIR": str(self.work_dir),
            "SPARK_LOG_DIR": str(root),
            # No REST submission server: it would take the fixed port 6066.
            "SPARK_MASTER_OPTS": "-Dspark.master.rest.enabled=false",
            # The master and the worker only schedule here: the JIT flags Floe gives its own driver
            # (`spark.session.JVM_OPTIONS`) spare the test their C2 compilations on 2 cores.
            "SPARK_DAEMON_JAVA_OPTS": JVM_OPTIONS,
        }
        self.procs: list[subprocess.Popen] = []
        self.logs: list[Path] = []

    def _spawn(self, args: list[str], log: Path) -> subprocess.Popen:
        with log.open("wb") as out:
            proc = subprocess.Popen(
                [str(SPARK_HOME / "bin" / "spark-class"), *args],
                stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=self.env, cwd=self.root,
            )
        self.procs.append(proc)
        self.logs.append(log)
        return proc

    def status(self) -> dict:
        with urllib.request.urlopen(f"http://127.0.0.1:{self.webui_port}/json", timeout=5) as resp:
            return json.load(resp)

    def _wait(self, condition, what: str, timeout: float = 120.0) -> None:
        """Poll `condition` until true; fail at once, with the logs, if a daemon exits."""
        def ready():
            if any(proc.poll() is not None for proc in self.procs):
                return "exited"
            return condition() and "ready"  # an OSError (web UI not up yet) is polled again

        try:
            outcome = wait_for(ready, timeout, 0.25, what=what)
        except AssertionError as exc:
            tails = "\n".join(f"--- {log.name}:\n{log.read_text(errors='replace')[-2000:]}" for log in self.logs)
            raise AssertionError(f"{exc}\n{tails}") from None
        if outcome == "exited":
            proc, log = next((p, l) for p, l in zip(self.procs, self.logs) if p.poll() is not None)
            raise AssertionError(f"{log.name}: exited with {proc.returncode} while waiting for {what}:\n"
                                 f"{log.read_text(errors='replace')[-4000:]}")

    def start(self) -> None:
        self._spawn(
            ["org.apache.spark.deploy.master.Master", "--host", "127.0.0.1", "--port", str(self.port),
             "--webui-port", str(self.webui_port)],
            self.root / "master.log",
        )
        self._wait(lambda: self.status().get("status") == "ALIVE", "the standalone master")
        self._spawn(
            ["org.apache.spark.deploy.worker.Worker", self.master_url, "--cores", "2", "--memory", "2g",
             "--host", "127.0.0.1", "--webui-port", str(self.worker_webui_port), "--work-dir", str(self.work_dir)],
            self.root / "worker.log",
        )
        self._wait(lambda: any(w.get("state") == "ALIVE" for w in self.status().get("workers", [])),
                   "the standalone worker to register")

    def stop(self) -> None:
        for proc in reversed(self.procs):  # the worker (and its executors) first, then the master
            stop_process(proc)


@pytest.fixture
def standalone_cluster(tmp_path):
    cluster = StandaloneCluster(tmp_path / "spark-cluster")
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.stop()


def query_json(sql):
    result = floe("query", sql, "--format", "json")
    assert result.returncode == 0, result.stderr
    return [json.loads(line) for line in result.stdout.splitlines()]


@pytest.mark.slow
def test_run_on_a_standalone_cluster(broker, topic, standalone_cluster, floe_home, postgres, seaweed):
    url = postgres.database(f"cluster_{topic}")
    bucket = seaweed.new_bucket(f"cluster-{topic.replace('_', '-')}")
    floe_home.mkdir(parents=True, exist_ok=True)
    (floe_home / "floe.toml").write_text(
        f'[warehouse]\nlocation = "s3://{bucket}/warehouse"\n\n[warehouse.s3]\nendpoint = "{seaweed.s3_endpoint}"\n'
        f'region = "{seaweed.region}"\naccess_key_id = "{seaweed.access_key}"\n'
        f'secret_access_key = "{seaweed.secret_key}"\n\n[catalog]\ntype = "sql"\nuri = "{url}"\n'
        # the executor's JVM as Floe's driver (a team's cluster sets its own)
        f'\n[spark.conf]\n"spark.executor.extraJavaOptions" = "{JVM_OPTIONS}"\n'
        # Every job in Spark: a job of a few thousand messages may otherwise run in the driver (`batch_in_engine`,
        # and five times that in the engine's first minute), and the point here is where Spark's tasks run.
        '\n[engine]\nbatch_in_engine = 0\n')
    good = pizza_values(6000)  # enough for plan_tasks to use both executor cores
    values = good[:3000] + MALFORMED + good[3000:]
    broker.produce(topic, values)
    created = floe("stream", "create", "orders", "--bootstrap", broker.bootstrap, "--topic", topic,
                   "--table", "ingest.orders")
    assert created.returncode == 0, created.stderr

    ran = floe_process("run", "--until-caught-up", "--spark-master", standalone_cluster.master_url)
    assert ran.returncode == 0, ran.stderr
    assert f"spark {standalone_cluster.master_url}" in ran.stderr

    [counts] = query_json(
        "select (select count(*) from ingest.orders) as rows, (select count(*) from ingest.orders_dlq) as dead,"
        " (select count(distinct (_kafka_partition, _kafka_offset)) from ingest.orders) as distinct_rows,"
        " (select count(distinct (_kafka_partition, _kafka_offset)) from ingest.orders_dlq) as distinct_dead,"
        " (select sum(order_id) from ingest.orders) as ids")
    assert counts == {"rows": len(good), "dead": len(MALFORMED), "distinct_rows": len(good),
                      "distinct_dead": len(MALFORMED), "ids": sum(range(len(good)))}

    # The tasks ran in the cluster's executor, not in the driver: the master saw the
    # application finish, and the worker launched an executor for it in its work dir.
    status = standalone_cluster.status()
    apps = status.get("completedapps", []) + status.get("activeapps", [])
    assert [a["name"] for a in apps] == ["floe"], apps
    app_dirs = list(standalone_cluster.work_dir.glob("app-*"))
    assert [d.name for d in app_dirs] == [apps[0]["id"]]
    stderrs = list(app_dirs[0].glob("*/stderr"))
    assert stderrs, f"no executor stderr under {app_dirs[0]}"
    executor_log = "\n".join(p.read_text(errors="replace") for p in stderrs)
    # The executor's own log, not just the launch command the worker writes at the top.
    assert "Successfully registered with driver" in executor_log, executor_log[-3000:]
    assert re.search(r"Finished task \S+ in stage \S+ \(TID \d+\)", executor_log), executor_log[-3000:]

    # The tables are in PostgreSQL and their files on S3, as every machine of the cluster sees them.
    from pyiceberg.catalog import load_catalog
    shared = load_catalog("floe", type="sql", uri=url, warehouse=f"s3://{bucket}/warehouse", **seaweed.s3_properties())
    table = shared.load_table("ingest.orders")
    assert table.scan().to_arrow().num_rows == len(good)
    assert all(t.file.file_path.startswith(f"s3://{bucket}/") for t in table.scan().plan_files())
    assert not (floe_home / "catalog.db").exists()
