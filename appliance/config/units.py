"""The units settings and policies are written in: durations, sizes and calendar periods.

Each parser names what it was parsing in its error, so a typo is one clear line.
"""

from __future__ import annotations

import datetime as dt
import re
from dataclasses import dataclass
from typing import Any

from dateutil.relativedelta import relativedelta

from appliance.core.errors import ConfigError

_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h|d|w)\s*$")
_DURATION_UNITS = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}
_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(B|KB|MB|GB|KiB|MiB|GiB)?\s*$", re.IGNORECASE)
_SIZE_UNITS = {"b": 1, "kb": 1024, "mb": 1024**2, "gb": 1024**3, "kib": 1024, "mib": 1024**2, "gib": 1024**3}

_PERIOD = re.compile(r"^\s*(\d+)\s*([a-z]+)\s*$")
_PERIOD_UNITS: dict[str, tuple[str, int]] = {}
for _names, _unit in (
    (("s", "sec", "second", "seconds"), ("seconds", 1)),
    (("m", "min", "minute", "minutes"), ("seconds", 60)),
    (("h", "hour", "hours"), ("seconds", 3600)),
    (("d", "day", "days"), ("days", 1)),
    (("w", "week", "weeks"), ("days", 7)),
    (("mo", "month", "months"), ("months", 1)),
    (("y", "year", "years"), ("months", 12)),
):
    for _name in _names:
        _PERIOD_UNITS[_name] = _unit


def parse_duration(value: Any, what: str = "duration") -> float:
    """Seconds from '250ms', '5s', '7d' or a bare number of seconds."""
    if isinstance(value, (int, float)) and not isinstance(value, bool) and value >= 0:
        return float(value)
    match = _DURATION.match(str(value))
    if not match:
        raise ConfigError(f"{what}: {value!r} is not a duration (use e.g. 500ms, 5s, 10m, 7d)")
    return float(match.group(1)) * _DURATION_UNITS[match.group(2)]


def parse_size(value: Any, what: str = "size") -> int:
    """Bytes from '1MB', '128MiB' or a bare number of bytes."""
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        return value
    match = _SIZE.match(str(value))
    if not match:
        raise ConfigError(f"{what}: {value!r} is not a size (use e.g. 512KB, 1MB, 128MiB)")
    return int(float(match.group(1)) * _SIZE_UNITS[(match.group(2) or "b").lower()])


@dataclass(frozen=True)
class Period:
    """A retention period: calendar months and years are calendar months, not 30 days."""

    text: str
    months: int = 0
    days: int = 0
    seconds: int = 0

    @property
    def forever(self) -> bool:
        return not (self.months or self.days or self.seconds)

    def cutoff(self, now: dt.datetime) -> dt.datetime | None:
        """Rows with an event time before this are older than the period; None keeps everything."""
        if self.forever:
            return None
        return now - relativedelta(months=self.months, days=self.days, seconds=self.seconds)

    def __str__(self) -> str:
        return self.text


def parse_period(value: Any, what: str = "retention") -> Period:
    text = str(value).strip().lower()
    if text in ("forever", "never", "none", "0", ""):
        return Period("forever")
    match = _PERIOD.match(text)
    if not match or match.group(2) not in _PERIOD_UNITS or int(match.group(1)) == 0:
        raise ConfigError(
            f"{what}: {value!r} is not a period (use forever, 1 week, 1 month, 6 months, 1 year, 30d, 12h...)"
        )
    n, (unit, scale) = int(match.group(1)), _PERIOD_UNITS[match.group(2)]
    return Period(str(value).strip(), **{unit: n * scale})
