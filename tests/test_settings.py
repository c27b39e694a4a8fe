from pathlib import Path

import pytest

from appliance.config.settings import DEFAULTS_FILE, load_settings
from appliance.config.units import parse_duration, parse_size
from appliance.core.errors import ConfigError


def test_defaults_come_from_config_dir(floe_home):
    s = load_settings()
    assert s.home == floe_home.resolve()
    assert s.spark_master == "local[*]"
    assert s.warehouse == (floe_home.resolve() / "warehouse").as_uri()
    assert s.engine.max_message_bytes == 1024 * 1024
    assert s.logs.level == "info"


def test_the_documented_defaults_file_is_the_one_the_package_ships():
    """config/floe.toml, which the README points users to, is a link to the package's own defaults
    (an installed wheel has no config/ beside it): one file, never two that drift apart."""
    documented = Path(__file__).resolve().parent.parent / "config" / "floe.toml"
    assert DEFAULTS_FILE.parent == Path(__file__).resolve().parent.parent / "appliance" / "config"
    assert documented.is_symlink() and documented.resolve() == DEFAULTS_FILE
    assert documented.read_bytes() == DEFAULTS_FILE.read_bytes()


def test_home_file_overrides_defaults(floe_home):
    floe_home.mkdir()
    (floe_home / "floe.toml").write_text('[engine]\ncommit_interval = "3s"\n[spark]\nmaster = "spark://h:7077"\n')
    s = load_settings()
    assert s.engine.commit_interval == 3.0 and s.spark_master == "spark://h:7077"


@pytest.mark.parametrize(
    "text, message",
    [
        ("[engine\n", "not valid TOML"),
        ("[engin]\nx = 1\n", "unknown setting 'engin'"),
        ('[engine]\ncommit_interval = "soon"\n', "commit_interval"),
        ('[spark]\nmaster = "yarn"\n', "spark.master"),
        ('[engine]\nmax_message_bytes = "lots"\n', "max_message_bytes"),
        ('[maintenance]\nrewrite_in_engine = "a bit"\n', "maintenance.rewrite_in_engine"),
        ('[engine]\nbatch_in_engine = "lots"\n', "engine.batch_in_engine must be a whole number, not 'lots'"),
        ('[engine]\nbatch_in_engine = -1\n', "engine.batch_in_engine must be 0"),
        ('[engine]\ntrickle_messages = 2.5\n', "engine.trickle_messages must be a whole number"),
        ('[logs]\nlevel = "verbose"\n', "logs.level must be one of debug, info, warning, error, not 'verbose'"),
        ('[logs]\nlevel = 10\n', "logs.level must be one of debug, info, warning, error, not 10"),
    ],
)
def test_bad_config_names_file_and_key(floe_home, text, message):
    floe_home.mkdir()
    (floe_home / "floe.toml").write_text(text)
    with pytest.raises(ConfigError, match=message) as info:
        load_settings()
    assert str(floe_home / "floe.toml") in str(info.value)


def test_secrets_do_not_show_in_repr(floe_home):
    floe_home.mkdir()
    (floe_home / "floe.toml").write_text('[warehouse.s3]\nsecret_access_key = "hunter2"\n')
    assert "hunter2" not in repr(load_settings())


def test_units():
    assert parse_duration("250ms") == 0.25 and parse_duration("7d") == 7 * 86400
    assert parse_size("128MiB") == 128 * 1024**2 and parse_size(10) == 10


def test_spark_master_from_the_environment_is_checked_too(floe_home, monkeypatch):
    monkeypatch.setenv("FLOE_SPARK_MASTER", "spark://host-without-port")
    with pytest.raises(ConfigError, match="FLOE_SPARK_MASTER must be"):
        load_settings()
    monkeypatch.setenv("FLOE_SPARK_MASTER", "local[2]")
    assert load_settings().spark_master == "local[2]"
