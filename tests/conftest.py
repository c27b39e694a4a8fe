"""Real parts only: a Kafka-protocol broker process on loopback, a local SparkSession,
a SQLite catalog and a warehouse in a temporary FLOE_HOME."""

from __future__ import annotations

import json
import os
import shlex
import signal
import socket
import subprocess
import threading
import time
import uuid
from pathlib import Path
from typing import Callable

import pytest
from confluent_kafka import Producer

from appliance.core import hints
from appliance.core.polling import poll

pytest_plugins = ["budget", "order"]  # the suite's time and slowest tests at the end; long files first

from commands import FLOE, ROOT, command_logging, floe, floe_process  # noqa: F401  (the tests import them from here)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# A loaded machine (CI's three workers on two cores, a JVM starting beside) can take many seconds to do what a
# quiet one does at once: a wait's deadline only decides how long a failing test takes to say so.
LEAST_WAIT = 30.0


def wait_for(condition: Callable[[], object], timeout: float = 60.0, interval: float = 0.1, what: str = "condition"):
    """Poll `condition` until it returns something truthy, or fail after `timeout` seconds, at least LEAST_WAIT
    (appliance/core/polling.py)."""
    return poll(condition, max(timeout, LEAST_WAIT), interval, what, error=AssertionError)


class FloeProcess:
    """A `floe` command serving something in its own process; its first line says where."""

    def __init__(self, command: str) -> None:
        self.proc = subprocess.Popen(
            FLOE + [command], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, cwd=ROOT
        )
        self.address = self.proc.stdout.readline().strip()
        if not self.address:
            raise RuntimeError(f"floe {command} printed no address")

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
        self.proc.stdout.close()


class BrokerProcess(FloeProcess):
    """`floe broker` in its own process: other processes reach it over TCP like any broker."""

    def __init__(self) -> None:
        super().__init__("broker")
        self.bootstrap = self.address

    def producer(self) -> Producer:
        return Producer({"bootstrap.servers": self.bootstrap, "linger.ms": 5, "log_level": 0})

    def produce(self, topic: str, values: list[bytes | None], keys: list[bytes | None] | None = None,
                partition: int | None = None) -> None:
        producer = self.producer()
        for i, value in enumerate(values):
            kwargs = {"partition": partition} if partition is not None else {}
            producer.produce(topic, value=value, key=keys[i] if keys else None, **kwargs)
            if i % 10000 == 0:
                producer.poll(0)
        assert producer.flush(30) == 0, "messages left unsent"


class RegistryProcess(FloeProcess):
    """`floe registry` in its own process: a schema registry reached over HTTP like any other."""

    def __init__(self) -> None:
        super().__init__("registry")
        self.url = self.address

    def client(self):
        from confluent_kafka.schema_registry import SchemaRegistryClient

        return SchemaRegistryClient({"url": self.url})


@pytest.fixture(scope="session")
def registry():
    r = RegistryProcess()
    yield r
    r.stop()


@pytest.fixture(scope="session")
def broker():
    b = BrokerProcess()
    yield b
    b.stop()


@pytest.fixture
def topic() -> str:
    return f"t_{uuid.uuid4().hex[:10]}"


@pytest.fixture(autouse=True)
def floe_home(tmp_path, monkeypatch) -> Path:
    """Every test gets its own FLOE_HOME: a developer's own config never leaks in."""
    home = tmp_path / "floe-home"
    monkeypatch.setenv("FLOE_HOME", str(home))
    monkeypatch.delenv("FLOE_SPARK_MASTER", raising=False)
    return home


@pytest.fixture(autouse=True)
def fresh_secrets():
    """Each test masks the values its own references resolve to, not an earlier test's in the same worker (a
    client id "floe-b" resolved in one test masked "s3://floe-bucket" in another's message)."""
    from appliance.core.secrets import forget_values

    forget_values()


@pytest.fixture(scope="session")
def spark(floe_spark):
    """The plugin's session SparkSession (appliance/testing/plugin.py): one JVM for the suite."""
    return floe_spark


@pytest.fixture
def running_engine(spark):
    """Start an engine in this process on the shared SparkSession, answering requests as `floe run` does;
    stopped at the end, or by `running_engine.stop()`, which fails the test if a run ended in an error (as
    `floe run` exiting non-zero would). `running_engine.running()`: every engine started still runs."""
    from appliance.config.settings import load_settings
    from appliance.control.answers import Answers
    from appliance.control.patterns import discover_members
    from appliance.ingest.engine import Engine

    engines = []
    errors: list[BaseException] = []

    def start(**kwargs):
        engine = Engine(load_settings(), spark=spark, **{"answers": Answers, "discover": discover_members, **kwargs})

        def run():
            try:
                engine.run()
            except BaseException as error:  # noqa: BLE001 - handed to the test at stop()
                errors.append(error)

        thread = threading.Thread(target=run, daemon=True)
        thread.start()
        engines.append((engine, thread))
        return engine

    def stop() -> None:
        """Stop every engine started and wait for its run to end (its lock released, its Spark jobs done)."""
        while engines:
            engine, thread = engines.pop()
            engine.stop()
            thread.join(60)
            assert not thread.is_alive(), "an engine did not stop within 60 s"
        if errors:
            raise AssertionError(f"an engine's run ended in an error: {errors[0]!r}") from errors[0]

    start.stop = stop
    start.running = lambda: bool(engines) and all(thread.is_alive() for _, thread in engines)
    yield start
    stop()


# -- the reference Java Iceberg (Iceberg 1.10 on Spark 3.5, in a virtualenv of its own: scripts/javaiceberg/) ----

JAVA = ROOT / ".javaiceberg" / ".venv" / "bin" / "python"
JAVA_READ = ROOT / "scripts" / "javaiceberg" / "read.py"


class JavaReader:
    """The reference Java Iceberg reader (`read.py --serve`): one JVM for the module's reads, not one a read."""

    def __init__(self, log: Path) -> None:
        self.log = log.open("w")
        self.proc = subprocess.Popen([str(JAVA), str(JAVA_READ), "--serve"], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=self.log, text=True)

    def __call__(self, metadata_location: str, sql: str = "", meta: str = "") -> list[dict]:
        """Rows Java Iceberg reads: of `sql` over the table `t`, or of a metadata table."""
        self.proc.stdin.write(json.dumps({"metadata_json": metadata_location, "sql": sql, "meta": meta}) + "\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()  # pytest-timeout bounds a reader that never answers
        assert line, f"the Java reader exited: {self.proc.poll()}"
        answer = json.loads(line)
        assert "error" not in answer, answer["error"][-2000:]
        return answer["rows"]

    def close(self) -> None:
        self.proc.stdin.close()
        try:
            self.proc.wait(60)
        finally:
            self.proc.kill()
            self.proc.stdout.close()
            self.log.close()


@pytest.fixture(scope="session")
def java(tmp_path_factory):
    """The reference Java Iceberg reader of a worker, started as the first test asking for it sets up (a JVM's
    start is seconds of a 2-core machine: the modules that read with it share one)."""
    if not JAVA.exists():
        pytest.fail(f"the reference Java Iceberg is not set up ({JAVA}): run scripts/javaiceberg/setup --no-s3",
                    pytrace=False)
    reader = JavaReader(tmp_path_factory.mktemp("javaiceberg") / "read.log")
    yield reader
    reader.close()


def as_java_prints(value):
    """A value PyIceberg read, as read.py prints what Java read: timestamps in UTC without an offset, bytes as
    {"$binary_hex": ...}, decimals as text."""
    import datetime as dt
    import decimal

    if isinstance(value, dict):
        return {k: as_java_prints(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [as_java_prints(v) for v in value]
    if isinstance(value, bytes):
        return {"$binary_hex": value.hex()}
    if isinstance(value, decimal.Decimal):
        return str(value)
    if isinstance(value, dt.datetime) and value.tzinfo is not None:
        value = value.astimezone(dt.UTC).replace(tzinfo=None)
    return value.isoformat() if isinstance(value, (dt.datetime, dt.date, dt.time)) else value


def java_reads_as_pyiceberg(java: JavaReader, table) -> int:
    """Every row of `table` (PyIceberg's) as the reference Java Iceberg reads it, equal to PyIceberg's reading, by
    Kafka position; the number of rows."""
    theirs = java(table.metadata_location, "select * from t order by _kafka_partition, _kafka_offset")
    ours = sorted(table.scan().to_arrow().to_pylist(), key=lambda r: (r["_kafka_partition"], r["_kafka_offset"]))
    assert theirs == [as_java_prints(row) for row in ours], table.name()
    return len(ours)


def run_until_caught_up(spark) -> None:
    """`floe run --until-caught-up` in this process, on the session's SparkSession: what the command does
    between its start and its exit (a stream or stage that fails raises FloeError naming it)."""
    from appliance.cli.base import settings
    from appliance.control.patterns import discover_members
    from appliance.ingest.engine import Engine

    with command_logging():  # its log in FLOE_HOME's logs/floe.log, as the command's
        Engine(settings(), spark=spark, discover=discover_members).run(until_caught_up=True)


def run_until_killed(seconds: float, feed: Callable[[threading.Event], None],
                     when: Callable[[], object] | None = None) -> None:
    """`floe run` in a process group of its own, while `feed(stop)` runs in a thread (producing, say),
    then SIGKILL after `seconds`, as a power cut would, or, given `when`, the moment `when()` holds (failing
    if it has not within `seconds`); `feed` is told to stop and is waited for."""
    # `floe run` as Floe's hints print it (appliance/core/hints.py): this runs it as a user would
    engine = subprocess.Popen(FLOE + shlex.split(hints.START_ENGINE)[1:], cwd=ROOT, stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL, start_new_session=True)
    stop = threading.Event()
    feeding = threading.Thread(target=feed, args=(stop,))
    feeding.start()
    try:
        if when is None:
            exited = engine.poll() is not None or _exits_within(engine, seconds)
        else:
            exited = poll(lambda: "exited" if engine.poll() is not None else when(), seconds, 0.05,
                          "the moment of the kill", error=AssertionError) == "exited"
        assert not exited, "the engine exited by itself"
    finally:
        try:
            os.killpg(engine.pid, signal.SIGKILL)  # Spark's JVM and workers too
        except ProcessLookupError:
            pass
        engine.wait()
        stop.set()
        feeding.join()


class AfterACommit:
    """A kill's moment for `run_until_killed(when=...)`: `delay` seconds after the engine started next commits a
    batch of `stream`. A kill a fixed time after `floe run` starts falls in its start (a JVM's and imports'
    seconds, many more on a loaded machine) as often as in its work; this one falls in its work, or after it."""

    def __init__(self, stream: str, delay: float) -> None:
        from appliance.config.settings import load_settings
        from appliance.state.store import StateStore

        self.stream, self.delay = stream, delay
        # One connection for every poll: opening the state database costs 30 times its query, and the polls
        # run through a JVM's start, beside the engine they wait for.
        self._state: StateStore | None = StateStore(load_settings().state_db)
        self.before = self._last()  # made before the engine starts: its batches are the ones after
        self.due: float | None = None

    def _last(self) -> int:
        batches = self._state.recent_batches(self.stream, 1)
        return batches[0].id if batches else 0

    def __call__(self) -> bool:
        if self.due is None and self._last() > self.before:
            self.due = time.monotonic() + self.delay
            self._state.close()
            self._state = None
        return self.due is not None and time.monotonic() >= self.due


def _exits_within(process: subprocess.Popen, seconds: float) -> bool:
    try:
        process.wait(timeout=seconds)
        return True
    except subprocess.TimeoutExpired:
        return False


def finished(process: subprocess.Popen, timeout: float) -> tuple[int, str]:
    """Wait for a process started with stderr=PIPE: its exit code and what it said, the pipe closed."""
    try:
        code = process.wait(timeout)
        return code, process.stderr.read()
    finally:
        process.stderr.close()


def committed_again(floe_home, commits: int, seen: list | None = None):
    """Table n.t: two rows appended, then the same file committed `commits` times more as a stream commits (each
    commit's metadata added to `seen`); the catalog and the table."""
    import pyarrow as pa

    from appliance.config.settings import load_settings
    from appliance.tables.catalog import Catalog
    from appliance.tables.commits import commit_files

    floe_home.mkdir(parents=True)
    catalog = Catalog(load_settings())
    data = pa.table({"a": pa.array([1, 2], pa.int64())})
    table, _ = catalog.ensure_table("n.t", data.schema)
    table.append(data)
    files = [task.file for task in table.scan().plan_files()]
    offsets = None
    for i in range(1, commits + 1):
        table, _ = commit_files(table, files, "s", "topic", offsets, {0: i})
        offsets = {0: i}
        if seen is not None:
            seen.append(table.metadata)
    return catalog, table


def uri_exists(uri: str) -> bool:
    """Whether a local warehouse's file (a `file://` URI, as a table names it) is on disk."""
    return Path(uri.removeprefix("file://")).exists()


def pyiceberg_files(table, data):
    """PyIceberg's own data files of `data` for `table`, to compare Floe's with: uncompressed and without
    dictionaries where Floe writes a small file so (`SMALL_FILE_BYTES`; every file of `data` is as small as
    `data`, or as big: the tests comparing write one partition, or small ones)."""
    from pyiceberg.io.pyarrow import _dataframe_to_data_files

    import pyiceberg.io.pyarrow as pyiceberg_arrow

    from appliance.tables.fastpath.parquet import SMALL_FILE_BYTES, SMALL_FILE_OPTIONS

    if data.nbytes >= SMALL_FILE_BYTES:
        return list(_dataframe_to_data_files(table_metadata=table.metadata, df=data, io=table.io))
    # PyIceberg's writer with a small file's options (no table property turns its dictionaries off)
    options = pyiceberg_arrow._get_parquet_writer_kwargs
    pyiceberg_arrow._get_parquet_writer_kwargs = lambda properties: {**options(properties), **SMALL_FILE_OPTIONS}
    try:
        return list(_dataframe_to_data_files(table_metadata=table.metadata, df=data, io=table.io))
    finally:
        pyiceberg_arrow._get_parquet_writer_kwargs = options


def pizza_values(n: int, start: int = 0) -> list[bytes]:
    import orjson

    return [
        orjson.dumps({"order_id": i, "store": {"id": i % 7, "name": f"store {i % 7}"}, "amount": i * 1.25,
                      "status": "accepted" if i % 3 else "delivered", "ordered_at": "2026-11-21T10:00:00Z"})
        for i in range(start, start + n)
    ]


# -- real servers, one of each per test session (tests/servers.py) --------------------------------

from servers import PostgresServer, SeaweedServer, ServerUnavailable  # noqa: E402


def _start(server_class):
    """Start a server, or fail the test in one line saying why (never skip)."""
    try:
        return server_class()
    except ServerUnavailable as exc:
        error = str(exc)
    pytest.fail(error, pytrace=False)


@pytest.fixture(scope="session")
def postgres():
    """A PostgreSQL server of the session's own: `postgres.database()` gives a fresh database's URL."""
    server = _start(PostgresServer)
    yield server
    server.stop()


@pytest.fixture(scope="session")
def seaweed():
    """SeaweedFS (`weed mini`) of the session's own: S3 at `seaweed.s3_endpoint`, an Iceberg REST catalog
    at `seaweed.rest_uri`."""
    server = _start(SeaweedServer)
    yield server
    server.stop()
