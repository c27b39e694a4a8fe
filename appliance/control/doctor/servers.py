"""The checks of what Floe reaches over the network or starts: each stream's broker and schema
registry, Java, Spark."""

from __future__ import annotations

import logging
import os
import re
import shutil
import socket
import subprocess

from appliance.control.doctor.checks import SECRET_TODO, Check, failed, one_line, passed
from appliance.core import hints
from appliance.core.errors import BrokerUnreachable, SecretUnresolved, TopicNotFound
from appliance.core.words import plural
from appliance.kafka.client import KafkaClient
from appliance.kafka.registry import Registry
from appliance.kafka.settings import RegistrySettings
from appliance.model.stream import StreamDef

JAVA_NEEDED = 17  # Spark 4's minimum
JAVA_TODO = f"install Java {JAVA_NEEDED} or later (e.g. openjdk-17-jre-headless), or point JAVA_HOME at one"
SPARK_TODO = "start the Spark master, or set [spark] master in floe.toml (or FLOE_SPARK_MASTER) to one that runs"


def broker_todo(stream: str) -> str:
    return f"check the bootstrap servers and kafka options with `{hints.SHOW_STREAM.format(stream=stream)}`"


def registry_todo(stream: str) -> str:
    return f"check the schema registry URL and options with `{hints.SHOW_STREAM.format(stream=stream)}`"


class KafkaLines(logging.Handler):
    """librdkafka's own log lines while the checks run: they say why a broker could not be reached."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())

    def why(self, bootstrap: str) -> str:
        """The newest failure librdkafka logged about one of `bootstrap`'s servers, without its prefixes."""
        servers = [s.strip() for s in bootstrap.split(",")]
        for line in reversed(self.lines):
            text = line.rsplit("]: ", 1)[-1]
            if any(text.startswith(f"{s}/") for s in servers) and "failed" in text:
                return re.sub(r"\s*\(after \d+ms.*$", "", re.sub(r"^\S+/\S+: ", "", text))
        return ""


def check_broker(stream: StreamDef, timeout: float, lines: KafkaLines) -> Check:
    """The stream's cluster answers a metadata request, and has the stream's topic; the stream's
    secret references resolve (the client resolves them, as the engine's does)."""
    name = f"broker[{stream.name}]"
    kafka = stream.kafka
    try:
        with KafkaClient(kafka, group=f"floe.doctor.{stream.name}", timeout=timeout) as client:
            partitions = client.partitions(stream.topic)
    except SecretUnresolved as exc:
        return failed(name, str(exc), SECRET_TODO)
    except BrokerUnreachable as exc:
        why = lines.why(kafka.bootstrap)
        return failed(name, f"{kafka.bootstrap} unreachable: {why}" if why else str(exc), broker_todo(stream.name))
    except TopicNotFound as exc:
        return failed(name, str(exc), f"create topic {stream.topic} on {kafka.bootstrap}, or check the stream "
                                      f"with `{hints.SHOW_STREAM.format(stream=stream.name)}`")
    paused = " (stream paused)" if stream.paused else ""
    return passed(name, f"{kafka.bootstrap}: topic {stream.topic}, {plural(len(partitions), 'partition')}{paused}")


def check_registry(stream: StreamDef, timeout: float) -> Check:
    """The stream's schema registry answers (its subjects listed), with the stream's credentials."""
    name = f"registry[{stream.name}]"
    given = stream.registry
    options = {**dict(given.options), "timeout": f"{timeout:g}", "max.retries": "0"}
    try:
        subjects = Registry(RegistrySettings(given.url, tuple(sorted(options.items())))).subjects()
    except SecretUnresolved as exc:
        return failed(name, str(exc), SECRET_TODO)
    subject = ""
    if stream.subject:
        subject = f", subject {stream.subject} " + ("registered" if stream.subject in subjects else "not registered")
    return passed(name, f"{given.display_url}: {plural(len(subjects), 'subject')}{subject}")


def check_java(timeout: float) -> Check:
    """The Java Spark's driver would start (JAVA_HOME, or `java` on PATH), at version 17 or later."""
    from appliance.spark.session import check_java as java_there

    java_there()
    java_home = os.environ.get("JAVA_HOME")
    java = os.path.join(java_home, "bin", "java") if java_home else shutil.which("java") or "java"
    said = subprocess.run([java, "-version"], capture_output=True, text=True, timeout=timeout)
    found = re.search(r'version "([^"]+)"', said.stderr + said.stdout)
    if not found:
        first = (said.stderr or said.stdout).strip().splitlines()[:1]
        return failed("java", f"{java} -version names no version: {first[0] if first else '(nothing)'}", JAVA_TODO)
    version = found.group(1)
    parts = re.findall(r"\d+", version)
    major = int(parts[1] if parts[:1] == ["1"] and len(parts) > 1 else parts[0]) if parts else 0  # 1.8 is 8
    where = f"{java} (JAVA_HOME)" if java_home else java
    if major < JAVA_NEEDED:
        return failed("java", f"Java {version} at {where}: Spark needs {JAVA_NEEDED} or later", JAVA_TODO)
    return passed("java", f"Java {version} at {where}")


def check_spark(master: str, timeout: float) -> Check:
    """pyspark importable, and a standalone master (`spark://host:port`) accepting connections. A local
    master needs no server, and starting a session only to check it would take seconds."""
    try:
        import pyspark
    except ImportError as exc:
        return failed("spark", f"pyspark cannot be imported: {exc}", "install Floe with its dependencies "
                                                                      "(pip install -e .)")
    if not master.startswith("spark://"):
        return passed("spark", f"pyspark {pyspark.__version__}; {master}: no server needed")
    host, _, port = master[len("spark://"):].rpartition(":")
    try:
        socket.create_connection((host, int(port)), timeout=timeout).close()
    except OSError as exc:
        return failed("spark", f"master {master} unreachable: {exc.strerror or one_line(exc)}", SPARK_TODO)
    return passed("spark", f"pyspark {pyspark.__version__}; master {master} accepts connections")
