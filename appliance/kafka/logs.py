"""Where librdkafka's own log lines go: Floe's log, each distinct line at most once a minute."""

from __future__ import annotations

import logging
import re
import time


class _Once(logging.Filter):
    """librdkafka repeats a failing connection's error many times a second: log each once a minute."""

    def __init__(self) -> None:
        super().__init__()
        self._seen: dict[str, float] = {}

    def filter(self, record: logging.LogRecord) -> bool:
        # the text after librdkafka's "[thrd:...]" prefix, without its "(after N ms ...)" tail
        key = re.sub(r"\s*\(after \d+ms.*$", "", record.getMessage())
        now = time.monotonic()
        if now - self._seen.get(key, -1e9) < 60:
            return False
        if len(self._seen) > 1000:
            self._seen.clear()
        self._seen[key] = now
        return True


KAFKA_LOG = logging.getLogger("appliance.kafka")
KAFKA_LOG.addFilter(_Once())
