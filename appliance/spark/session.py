"""The SparkSession Floe runs its batches on."""

from __future__ import annotations

import atexit
import logging
import os
import shutil
import sys
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

from appliance.config.settings import Settings
from appliance.core.errors import ConfigError
from appliance.core.logfiles import ConsoleSink
from appliance.spark.archive import java_options

LOG4J = Path(__file__).resolve().with_name("log4j2.properties")  # shipped in the package
JVM_OPTIONS = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"


def check_java() -> None:
    """Raise a ConfigError saying what to do if Spark's driver JVM cannot be started."""
    java_home = os.environ.get("JAVA_HOME")
    if java_home and not os.access(os.path.join(java_home, "bin", "java"), os.X_OK):
        raise ConfigError(f"JAVA_HOME={java_home} has no bin/java: point it at a Java 17 install or unset it")
    if not (java_home or shutil.which("java")):
        raise ConfigError("Spark needs Java 17: install openjdk-17-jre-headless or set JAVA_HOME")


@contextmanager
def _stderr_to(settings: Settings, path: Path) -> Iterator[None]:
    """File descriptor 2 into `path` meanwhile, rolled at `[logs] max_size`: a process started now (the
    JVM, and its Python workers) keeps writing there, through a pipe this process drains."""
    path.parent.mkdir(parents=True, exist_ok=True)
    sys.stderr.flush()
    saved = os.dup(2)
    sink = ConsoleSink(path, settings.logs.max_bytes, settings.logs.keep)
    os.dup2(sink.fd, 2)
    try:
        yield
    finally:
        sys.stderr.flush()
        os.dup2(saved, 2)
        os.close(saved)
        sink.release()  # the JVM holds its own end: the sink drains it until the JVM, or this process, ends
        atexit.register(sink.finish)


def _logging_options(settings: Settings) -> str:
    """The JVM's log4j settings: FLOE_HOME/logs/spark.log, rolled at `[logs] max_size` (log4j2.properties)."""
    return (f"-Dlog4j.configurationFile={LOG4J.as_uri()} -Dfloe.log.dir={settings.log_dir} "
            f"-Dfloe.log.max={settings.logs.max_bytes} -Dfloe.log.keep={settings.logs.keep}")


def spark_session(settings: Settings, app_name: str = "floe", extra_java_options: str | None = None):
    """The session; `extra_java_options` replace the class-data archive's (see `archive.py`). The JVM's
    own stderr (its start-up chatter, "Using incubator modules", and whatever it and Spark's Python
    workers print later) goes to FLOE_HOME/logs/spark-console.log, never to the terminal of the command
    that started it: Floe says what went wrong itself, in one line."""
    check_java()
    with _stderr_to(settings, console_log(settings)):
        return _session(settings, app_name, extra_java_options)


def console_log(settings: Settings) -> Path:
    return settings.log_dir / "spark-console.log"


def _session(settings: Settings, app_name: str, extra_java_options: str | None):
    # Spark's Python workers must be this interpreter: it is the one with Floe and pyarrow.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    os.environ.setdefault("PYARROW_IGNORE_TIMEZONE", "1")  # what pandas-on-Spark asks for; Floe's times are UTC
    settings.log_dir.mkdir(parents=True, exist_ok=True)
    # The JVM only schedules: Floe's data never passes through it. The C1 compiler alone
    # starts it sooner, and spares the seconds of C2 compiling that otherwise cost a
    # trickle more CPU than its data; the serial collector suits its small heap.
    archive = java_options() if extra_java_options is None else extra_java_options
    # Only the driver's JVM logs to FLOE_HOME. In local[N] the executor lives in that JVM;
    # a cluster's executors log where the cluster keeps them (a standalone worker: its
    # work dir, app-*/N/stderr), not to a path on the driver's machine they may not have.
    java_opts = f"{_logging_options(settings)} {JVM_OPTIONS} {archive}".strip()
    os.environ.setdefault("PYSPARK_SUBMIT_ARGS", f'--driver-java-options "{java_opts}" pyspark-shell')

    from pyspark.sql import SparkSession

    builder = (
        SparkSession.builder.master(settings.spark_master)
        .appName(app_name)
        .config("spark.driver.memory", settings.spark_driver_memory)
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.pyspark.python", sys.executable)
        .config("spark.pyspark.driver.python", sys.executable)
        .config("spark.scheduler.mode", "FAIR")
        # Python workers without the archives that cost every task 0.1 s of CPU (see daemon.py).
        .config("spark.python.daemon.module", "appliance.spark.daemon")
        # A task that fails is retried by the engine's next batch, from committed offsets.
        .config("spark.task.maxFailures", "1")
    )
    if settings.spark_master.startswith("local") or "//127.0.0.1:" in settings.spark_master or "//localhost:" in settings.spark_master:
        # Everything on this machine: keep Spark's own sockets on loopback.
        builder = builder.config("spark.driver.host", "127.0.0.1").config("spark.driver.bindAddress", "127.0.0.1")
    cores = _local_cores(settings.spark_master)
    if cores:
        # A stage's grouping shuffles a run's rows: on one machine, a partition or two per core is
        # faster than Spark's 200 (a cluster keeps Spark's default; `[spark]` settings win either way).
        builder = builder.config("spark.sql.shuffle.partitions", str(2 * cores))
    for key, value in settings.spark_conf.items():
        builder = builder.config(key, value)
    session = builder.getOrCreate()
    session.sparkContext.setLogLevel("ERROR")
    # PySpark logs each failed query, Java stack and all, as JSON on stderr; Floe reports those
    # errors itself, in one line where they belong (a stage's event, a command's error).
    for name in ("SQLQueryContextLogger", "DataFrameQueryContextLogger"):
        logging.getLogger(name).disabled = True
    return session


def running_session():
    """The SparkSession this process already runs (a notebook's, the pytest plugin's), or None. Importing
    nothing: a process without PySpark loaded has none."""
    if "pyspark" not in sys.modules:
        return None
    from pyspark.errors import PySparkRuntimeError
    from pyspark.sql import SparkSession

    try:
        return SparkSession.active()
    except PySparkRuntimeError:
        return None


@contextmanager
def command_session(settings: Settings, app_name: str = "floe") -> Iterator:
    """A SparkSession for one command, stopped when it is done; in a process that already runs one, that
    one, left running for its owner (a command run in-process must not stop a notebook's session)."""
    running = running_session()
    if running is not None:
        yield running
        return
    own = spark_session(settings, app_name)
    try:
        yield own
    finally:
        own.stop()


def _local_cores(master: str) -> int | None:
    """The cores of a `local[N]` or `local[*]` master; None for a cluster."""
    if master == "local":
        return 1
    if master.startswith("local["):
        inside = master[6:].split(",")[0].rstrip("]")
        if inside == "*":
            return os.cpu_count() or 1
        return int(inside) if inside.isdigit() else None
    return None


def parallelism(spark) -> int:
    return max(1, spark.sparkContext.defaultParallelism)



def record_classes(archive: Path) -> None:
    """Run a short session whose JVM writes the classes it loaded to `archive` as it exits."""
    import tempfile

    from appliance.config.settings import load_settings

    home = Path(tempfile.mkdtemp(prefix="floe-archive-"))
    spark = spark_session(load_settings(home), app_name="floe-archive",
                          extra_java_options=f"-XX:ArchiveClassesAtExit={archive}")
    spark.sparkContext.parallelize(range(2), 2).map(lambda x: x).collect()
    jvm = spark.sparkContext._gateway.proc  # the JVM process PySpark started
    spark.stop()
    jvm.stdin.close()  # the gateway exits when its stdin closes, and writes the archive as it exits
    jvm.wait(600)
    shutil.rmtree(home, ignore_errors=True)


if __name__ == "__main__":
    if sys.argv[1:2] == ["--record-classes"]:
        record_classes(Path(sys.argv[2]))
