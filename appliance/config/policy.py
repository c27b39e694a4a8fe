"""Maintenance policies: the defaults in config, overridden per namespace, then per table.

A policy is a handful of named values (retention, target file size, how long
snapshots are kept...). Each is validated here, once, whether it comes from
`config/floe.toml`, `$FLOE_HOME/floe.toml` or `floe table policy`, so a bad value
is one line naming the key, never a failure in the middle of a maintenance run.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, fields
from typing import Any, Callable

from appliance.config.units import Period, parse_duration, parse_period, parse_size
from appliance.core.errors import ConfigError

MIN_ORPHAN_AGE = 3600.0  # younger files may belong to a commit in flight


def _positive_int(value: Any, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, str)) or not str(value).strip().isdigit() or int(value) < 1:
        raise ConfigError(f"{what}: {value!r} is not a positive whole number")
    return int(value)


def _column(value: Any, what: str) -> str:
    if not isinstance(value, str) or not re.fullmatch(r"[a-z_][a-z0-9_]*", value):
        raise ConfigError(f"{what}: {value!r} is not a column name (lower snake_case)")
    return value


def _orphan_age(value: Any, what: str) -> float:
    seconds = parse_duration(value, what)
    if seconds < MIN_ORPHAN_AGE:
        raise ConfigError(f"{what}: {value!r} is too young; files that recent may belong to a commit in flight (use at least 1h)")
    return seconds


def _size(value: Any, what: str) -> int:
    size = parse_size(value, what)
    if size < 1024:
        raise ConfigError(f"{what}: {value!r} is too small (use at least 1KB)")
    return size


@dataclass(frozen=True)
class Policy:
    target_file_size: int
    compact_small_files: int
    compact_min_average_size: int
    compact_interval: float
    keep_snapshots: float
    min_snapshots: int
    max_snapshots: int
    min_snapshot_age: float
    orphan_age: float
    retention: Period
    retention_column: str

    @property
    def small_file_size(self) -> int:
        """Files under this are rewritten by compaction (Iceberg's own rule: 3/4 of the target)."""
        return self.target_file_size * 3 // 4


# How each key is parsed, and how `floe table policy` spells its option.
PARSERS: dict[str, Callable[[Any, str], Any]] = {
    "target_file_size": _size,
    "compact_small_files": _positive_int,
    "compact_min_average_size": parse_size,
    "compact_interval": parse_duration,
    "keep_snapshots": parse_duration,
    "min_snapshots": _positive_int,
    "max_snapshots": _positive_int,
    "min_snapshot_age": parse_duration,
    "orphan_age": _orphan_age,
    "retention": parse_period,
    "retention_column": _column,
}
assert set(PARSERS) == {f.name for f in fields(Policy)}


def check_values(values: dict[str, Any], where: str) -> dict[str, Any]:
    """The values as given (kept as text for display), after checking each parses."""
    out = {}
    for key, value in values.items():
        if key not in PARSERS:
            raise ConfigError(f"{where}: unknown policy setting {key!r} (known: {', '.join(PARSERS)})")
        PARSERS[key](value, f"{where}: {key}")
        out[key] = value
    return out


def build_policy(layers: list[tuple[str, dict[str, Any]]]) -> tuple[Policy, dict[str, str], dict[str, Any]]:
    """The policy from layers, lowest first: the policy, where each value came from, and the raw values."""
    raw: dict[str, Any] = {}
    source: dict[str, str] = {}
    for name, values in layers:
        for key, value in values.items():
            raw[key] = value
            source[key] = name
    missing = set(PARSERS) - set(raw)
    if missing:
        raise ConfigError(f"maintenance policy: missing {', '.join(sorted(missing))}")
    policy = Policy(**{key: PARSERS[key](raw[key], f"{source[key]}: {key}") for key in PARSERS})
    if policy.max_snapshots < policy.min_snapshots:
        raise ConfigError(
            f"maintenance policy: max_snapshots ({policy.max_snapshots}) is below min_snapshots ({policy.min_snapshots})"
        )
    return policy, source, raw


@dataclass(frozen=True)
class PolicySetting:
    """One setting in effect: its value as written, and where it comes from."""

    setting: str
    value: str
    source: str  # "default", "namespace NS" or "table NS.TABLE"

    @property
    def own(self) -> bool:
        """Set for this table or its namespace, not a default."""
        return self.source != "default"

    def as_dict(self) -> dict[str, str]:
        return {"setting": self.setting, "value": self.value, "from": self.source}
