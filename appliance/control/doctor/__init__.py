"""`floe doctor`: the configuration checked end to end, one line per check with what to do when one fails.

Each check is a small function returning a `Check` (name, status, detail, what to do). Each runs
in a thread of its own with a deadline, so a server that never answers costs its check a few
seconds, never the command; the checks of different servers (the catalog, each stream's broker
and registry, the Spark master) run at once. Nothing is left behind (see `storage`), and no secret
is in any line: every value a secret setting or a resolved reference holds is masked, and so is
the password of any `user:password@` URL.
"""

from __future__ import annotations

from pathlib import Path

from appliance.control.doctor.checks import Check, Running, format_check, masked
from appliance.control.doctor.configuration import (
    STATE_TODO,
    check_config,
    check_secrets,
    check_state,
    stream_secrets,
)
from appliance.control.doctor.privacy import check_privacy
from appliance.control.doctor.servers import (
    JAVA_TODO,
    SPARK_TODO,
    KafkaLines,
    broker_todo,
    check_broker,
    check_java,
    check_registry,
    check_spark,
    registry_todo,
)
from appliance.control.doctor.storage import storage_checks
from appliance.kafka.logs import KAFKA_LOG
from appliance.model.stream import StreamDef

__all__ = ["Check", "diagnose", "format_check"]


def diagnose(home: Path | None = None, timeout: float = 5.0) -> list[Check]:
    """Every check, in order: configuration, catalog and warehouse, state and each stream's servers,
    Java and Spark. `timeout`: seconds each check may wait for a server."""
    config, settings = check_config(home)
    if settings is None:
        return [config, Running("java", JAVA_TODO, lambda: check_java(timeout), timeout).result()]
    secrets: set[str] = set()
    checks = [config, check_secrets(settings, secrets)]
    lines = KafkaLines()
    streams: list[StreamDef] = []
    KAFKA_LOG.addHandler(lines)
    try:
        reading = Running("state", STATE_TODO, lambda: check_state(settings), timeout)
        state = reading.result()
        streams = reading.value or []
        later = []
        for s in streams:
            later.append(Running(f"broker[{s.name}]", broker_todo(s.name),
                                 lambda s=s: check_broker(s, timeout, lines), timeout))
            if s.registry is not None:
                later.append(Running(f"registry[{s.name}]", registry_todo(s.name),
                                     lambda s=s: check_registry(s, timeout), timeout))
        later += [Running("java", JAVA_TODO, lambda: check_java(timeout), timeout),
                  Running("spark", SPARK_TODO, lambda: check_spark(settings.spark_master, timeout), timeout)]
        checks += storage_checks(settings, timeout) + [state] + [r.result() for r in later]
        checks.append(check_privacy(settings))
    finally:
        KAFKA_LOG.removeHandler(lines)
    for stream in streams:
        secrets |= stream_secrets(stream)
    return [masked(check, secrets) for check in checks]
