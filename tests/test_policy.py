"""Maintenance policies: periods, validation, and which layer a value comes from."""

import datetime as dt

import pytest

from appliance.config.policy import build_policy, check_values
from appliance.config.settings import load_settings
from appliance.config.units import parse_period
from appliance.core.errors import ConfigError

NOW = dt.datetime(2026, 3, 31, 12, 0, tzinfo=dt.timezone.utc)


@pytest.mark.parametrize("text, cutoff", [
    ("1 week", dt.datetime(2026, 3, 24, 12, 0, tzinfo=dt.timezone.utc)),
    ("1 month", dt.datetime(2026, 2, 28, 12, 0, tzinfo=dt.timezone.utc)),  # calendar months
    ("6 months", dt.datetime(2025, 9, 30, 12, 0, tzinfo=dt.timezone.utc)),
    ("1 year", dt.datetime(2025, 3, 31, 12, 0, tzinfo=dt.timezone.utc)),
    ("30d", dt.datetime(2026, 3, 1, 12, 0, tzinfo=dt.timezone.utc)),
    ("12h", dt.datetime(2026, 3, 31, 0, 0, tzinfo=dt.timezone.utc)),
    ("90 days", dt.datetime(2025, 12, 31, 12, 0, tzinfo=dt.timezone.utc)),
])
def test_periods_are_calendar_aware(text, cutoff):
    assert parse_period(text).cutoff(NOW) == cutoff


def test_forever_keeps_everything():
    assert parse_period("forever").cutoff(NOW) is None


@pytest.mark.parametrize("bad", ["3 fortnights", "0d", "-1d", "soon", "1.5 weeks"])
def test_bad_periods_are_named(bad):
    with pytest.raises(ConfigError, match="is not a period"):
        parse_period(bad)


@pytest.mark.parametrize("key, value, message", [
    ("target_file_size", "huge", "is not a size"),
    ("target_file_size", "10B", "too small"),
    ("keep_snapshots", "a week", "is not a duration"),
    ("min_snapshots", 0, "positive whole number"),
    ("orphan_age", "10m", "at least 1h"),
    ("retention_column", "Event Time", "not a column name"),
    ("colour", "blue", "unknown policy setting"),
])
def test_bad_values_name_the_setting(key, value, message):
    with pytest.raises(ConfigError, match=message) as err:
        check_values({key: value}, "table ingest.orders")
    assert "table ingest.orders" in str(err.value) and "\n" not in str(err.value)


def test_table_wins_over_namespace_over_defaults(floe_home):
    defaults = load_settings().maintenance.policy
    policy, source, _ = build_policy([
        ("default", defaults),
        ("namespace ingest", {"retention": "1 month", "target_file_size": "64MB"}),
        ("table ingest.orders", {"retention": "1 year"}),
    ])
    assert str(policy.retention) == "1 year" and source["retention"] == "table ingest.orders"
    assert policy.target_file_size == 64 * 1024**2 and source["target_file_size"] == "namespace ingest"
    assert policy.keep_snapshots == 7 * 86400 and source["keep_snapshots"] == "default"
    assert policy.orphan_age == 3 * 86400 and policy.small_file_size == 48 * 1024**2


def test_a_bad_default_in_the_config_file_is_one_line(floe_home):
    floe_home.mkdir(parents=True)
    (floe_home / "floe.toml").write_text('[maintenance.policy]\nretention = "a while"\n')
    with pytest.raises(ConfigError) as err:
        load_settings()
    assert "floe.toml" in str(err.value) and "retention" in str(err.value) and "a while" in str(err.value)


def test_min_above_max_snapshots_is_refused(floe_home):
    with pytest.raises(ConfigError, match="max_snapshots"):
        build_policy([("default", load_settings().maintenance.policy), ("t", {"min_snapshots": 50, "max_snapshots": 10})])
