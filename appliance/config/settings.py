"""Floe's settings: the defaults (`floe.toml` beside this module, shipped in the package; the repository's
`config/floe.toml` is a link to it), overridden by `$FLOE_HOME/floe.toml`.

Validation names the file and the key, so a typo is one clear line, not a traceback.
"""

from __future__ import annotations

import os
import re
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from appliance.config.alerts import AlertDef, alerts_from_config
from appliance.config.catalog import SECRET_PROPERTY, CatalogSettings, catalog_settings, kind_of
from appliance.config.policy import build_policy, check_values
from appliance.config.units import parse_duration, parse_size
from appliance.core.errors import ConfigError
from appliance.core.private import private_dir
from appliance.core.secrets import resolve_all

DEFAULTS_FILE = Path(__file__).resolve().with_name("floe.toml")
DEFAULT_HOME = "~/.floe"


@dataclass(frozen=True)
class S3Settings:
    endpoint: str = ""
    region: str = "us-east-1"
    access_key_id: str = ""
    secret_access_key: str = field(default="", repr=False)

    def __repr__(self) -> str:  # the secret never reaches a log line
        return f"S3Settings(endpoint={self.endpoint!r}, region={self.region!r}, access_key_id=***)"


@dataclass(frozen=True)
class EngineSettings:
    commit_interval: float = 1.0
    poll_interval: float = 0.25
    max_batch_messages: int = 400_000
    fetch_timeout: float = 10.0
    max_message_bytes: int = 1024 * 1024
    retry_backoff: float = 5.0
    trickle_interval: float = 4.0
    trickle_messages: int = 1000
    batch_in_engine: int = 2000  # messages: a shared job this small runs in the engine's process, not in Spark


@dataclass(frozen=True)
class MaintenanceSettings:
    enabled: bool = True
    check_interval: float = 60.0
    expire_interval: float = 3600.0
    orphans_interval: float = 86400.0
    retention_interval: float = 3600.0
    metadata_versions: int = 10
    share: float = 0.25  # of the time, at most, that scheduled tasks run: each is followed by a rest
    rewrite_in_engine: int = 4 * 1024 * 1024  # bytes: rewrites this small run in the engine's process, not in Spark
    policy: dict[str, Any] = field(default_factory=dict)  # the default policy, validated


@dataclass(frozen=True)
class ObserveSettings:
    system_tables: bool = True
    system_tables_interval: float = 15.0
    keep_in_state: float = 86400.0
    metrics_port: int = 0  # 0: no metrics endpoint
    metrics_host: str = "127.0.0.1"


@dataclass(frozen=True)
class AlertingSettings:
    evaluate_interval: float = 5.0
    cooldown: float = 60.0
    heartbeat_timeout: float = 30.0
    notify_attempts: int = 3
    alerts: tuple[AlertDef, ...] = ()  # [[alerts]] of floe.toml


LEVELS = ("debug", "info", "warning", "error")  # `[logs] level`


@dataclass(frozen=True)
class LogSettings:
    max_bytes: int = 10 * 1024 * 1024  # each log file is rolled over at this size
    keep: int = 5  # older files kept: floe.log.1 ... floe.log.5
    level: str = "info"  # Floe's own lines at this level and up (`LEVELS`); libraries' at info or warning


@dataclass(frozen=True)
class Settings:
    home: Path
    spark_master: str
    spark_driver_memory: str
    spark_conf: dict[str, str]
    warehouse: str
    s3: S3Settings
    engine: EngineSettings
    sample_messages: int
    sample_timeout: float
    dead_letter_suffix: str
    default_namespace: str
    maintenance: MaintenanceSettings = field(default_factory=MaintenanceSettings)
    observe: ObserveSettings = field(default_factory=ObserveSettings)
    alerting: AlertingSettings = field(default_factory=AlertingSettings)
    catalog: CatalogSettings = field(default_factory=CatalogSettings)
    logs: LogSettings = field(default_factory=LogSettings)

    @property
    def state_db(self) -> Path:
        return self.home / "state.db"

    @property
    def catalog_db(self) -> Path:
        return self.home / "catalog.db"

    @property
    def log_dir(self) -> Path:
        return self.home / "logs"

    @property
    def engine_lock(self) -> Path:
        """Held (flock) by the one engine of this FLOE_HOME, and by what must not run beside one."""
        return self.home / "engine.lock"

    @property
    def on_s3(self) -> bool:
        """Whether tables live on S3: the warehouse is there, or the catalog names S3 settings."""
        catalog = dict(self.catalog.properties)
        return (catalog.get("warehouse", self.warehouse).startswith(("s3://", "s3a://"))
                or self.warehouse.startswith(("s3://", "s3a://")) or any(k.startswith("s3.") for k in catalog))

    def s3_properties(self) -> dict[str, str]:
        """PyIceberg's `s3.*` properties: [warehouse.s3], overridden by any `s3.*` of [catalog];
        secret references resolved now (each use resolves them again)."""
        props = {
            "s3.endpoint": self.s3.endpoint,
            "s3.region": self.s3.region,
            "s3.access-key-id": self.s3.access_key_id,
            "s3.secret-access-key": self.s3.secret_access_key,
        }
        props.update({k: v for k, v in self.catalog.properties if k.startswith("s3.")})
        return resolve_all({k: v for k, v in props.items() if v}, "s3 setting", _secret_property)

    def catalog_properties(self) -> dict[str, str]:
        """The PyIceberg catalog's properties, secret references resolved (at each use, never kept):
        Floe's SQLite catalog when floe.toml has no [catalog]; S3 keys included when the warehouse is on S3."""
        if self.catalog.own:
            props = {"uri": f"sqlite:///{self.catalog_db}", "warehouse": self.warehouse}
        else:
            props = dict(self.catalog.properties)
            if kind_of(props) == "sql":
                props.setdefault("warehouse", self.warehouse)
        if self.on_s3:
            props = {**self.s3_properties(), **props}
        return resolve_all(props, "catalog property", _secret_property)


def _secret_property(key: str) -> bool:
    return bool(SECRET_PROPERTY.search(key))


def home_dir() -> Path:
    return Path(os.environ.get("FLOE_HOME") or DEFAULT_HOME).expanduser().resolve()


def _read_toml(path: Path) -> dict[str, Any]:
    try:
        with path.open("rb") as handle:
            return tomllib.load(handle)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: not valid TOML: {exc}") from None
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read: {exc.strerror}") from None


def _merge(base: dict[str, Any], override: dict[str, Any], path: Path, prefix: str = "") -> dict[str, Any]:
    merged = dict(base)
    for key, value in override.items():
        where = f"{prefix}{key}"
        if key not in base:
            raise ConfigError(f"{path}: unknown setting {where!r}")
        if isinstance(base[key], dict):
            if not isinstance(value, dict):
                raise ConfigError(f"{path}: {where!r} must be a table")
            # spark.conf and catalog are free-form: Spark's and PyIceberg's own property names
            free = where in ("spark.conf", "catalog")
            merged[key] = {**base[key], **value} if free else _merge(base[key], value, path, where + ".")
        else:
            merged[key] = value
    return merged


def spark_master_or_error(master: str, where: str) -> str:
    """`master` if Spark can use it; a one-line ConfigError naming `where` it came from otherwise."""
    if not re.match(r"^(local(\[(\*|\d+)\])?|spark://[^\s/]+:\d+)$", master):
        raise ConfigError(f"{where} must be local[*], local[N] or spark://host:port, not {master!r}")
    return master


def load_settings(home: Path | None = None) -> Settings:
    home = home or home_dir()
    raw = _read_toml(DEFAULTS_FILE)
    user_file = home / "floe.toml"
    source = DEFAULTS_FILE
    alerts: Any = []
    if user_file.exists():
        user = _read_toml(user_file)
        alerts = user.pop("alerts", [])  # an array of tables: not a default to override
        raw = _merge(raw, user, user_file)
        source = user_file

    def get(section: str, key: str) -> Any:
        return raw[section][key]

    def check(cond: bool, key: str, why: str) -> None:
        if not cond:
            raise ConfigError(f"{source}: {key} {why}")

    engine = _engine(raw["engine"], source, check)
    master = spark_master_or_error(str(get("spark", "master")), f"{source}: spark.master")
    if os.environ.get("FLOE_SPARK_MASTER"):
        master = spark_master_or_error(os.environ["FLOE_SPARK_MASTER"], "FLOE_SPARK_MASTER")
    warehouse = str(get("warehouse", "location")) or (home / "warehouse").as_uri()
    if "://" not in warehouse:
        warehouse = Path(warehouse).expanduser().resolve().as_uri()
    check(
        warehouse.startswith(("file://", "s3://", "s3a://")),
        "warehouse.location",
        f"must be a local path, file:// or s3:// location, not {warehouse!r}",
    )
    s3raw = raw["warehouse"]["s3"]
    s3 = S3Settings(**{k: str(v) for k, v in s3raw.items()})
    maintenance = _maintenance(raw["maintenance"], source, check)
    sample = raw["streams"]["sample_messages"]
    check(isinstance(sample, int) and sample > 0, "streams.sample_messages", "must be a positive integer")
    return Settings(
        home=home,
        spark_master=master,
        spark_driver_memory=str(get("spark", "driver_memory")),
        spark_conf={str(k): str(v) for k, v in raw["spark"]["conf"].items()},
        warehouse=warehouse,
        s3=s3,
        engine=engine,
        sample_messages=sample,
        sample_timeout=parse_duration(raw["streams"]["sample_timeout"], "streams.sample_timeout"),
        dead_letter_suffix=str(raw["streams"]["dead_letter_suffix"]),
        default_namespace=str(raw["streams"]["default_namespace"]),
        maintenance=maintenance,
        observe=_observe(raw["observe"], source, check),
        alerting=_alerting(raw["alerting"], source, check, alerts_from_config(alerts, str(source))),
        catalog=catalog_settings(raw.get("catalog", {}), str(source)),
        logs=_logs(raw["logs"], source, check),
    )


def _whole(value: Any, name: str) -> int:
    """A count: an integer in the file, or one clear line naming the key (not `int()`'s message about a literal)."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise ConfigError(f"{name} must be a whole number, not {value!r}")
    return value


def _engine(raw: dict[str, Any], source: Path, check) -> EngineSettings:
    try:
        engine = EngineSettings(
            commit_interval=parse_duration(raw["commit_interval"], "engine.commit_interval"),
            poll_interval=parse_duration(raw["poll_interval"], "engine.poll_interval"),
            max_batch_messages=_whole(raw["max_batch_messages"], "engine.max_batch_messages"),
            fetch_timeout=parse_duration(raw["fetch_timeout"], "engine.fetch_timeout"),
            max_message_bytes=parse_size(raw["max_message_bytes"], "engine.max_message_bytes"),
            retry_backoff=parse_duration(raw["retry_backoff"], "engine.retry_backoff"),
            trickle_interval=parse_duration(raw["trickle_interval"], "engine.trickle_interval"),
            trickle_messages=_whole(raw["trickle_messages"], "engine.trickle_messages"),
            batch_in_engine=_whole(raw["batch_in_engine"], "engine.batch_in_engine"),
        )
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"{source}: [engine] {exc}") from None
    except ConfigError as exc:
        raise ConfigError(f"{source}: {exc}") from None
    check(engine.max_batch_messages > 0, "engine.max_batch_messages", "must be positive")
    check(engine.max_message_bytes > 0, "engine.max_message_bytes", "must be positive")
    check(engine.trickle_messages >= 0, "engine.trickle_messages", "must be 0 (no trickles) or more")
    check(engine.batch_in_engine >= 0, "engine.batch_in_engine", "must be 0 (every job in Spark) or more")
    return engine


def _maintenance(raw: dict[str, Any], source: Path, check) -> MaintenanceSettings:
    check(isinstance(raw["enabled"], bool), "maintenance.enabled", "must be true or false")
    versions = raw["metadata_versions"]
    check(isinstance(versions, int) and versions >= 1, "maintenance.metadata_versions", "must be a positive integer")
    share = raw["share"]
    check(isinstance(share, (int, float)) and not isinstance(share, bool) and 0 < share <= 1, "maintenance.share",
          "must be a number above 0 and at most 1 (the share of the time scheduled maintenance may run)")
    policy = check_values(dict(raw["policy"]), f"{source} [maintenance.policy]")
    build_policy([(f"{source} [maintenance.policy]", policy)])
    try:
        return MaintenanceSettings(
            enabled=raw["enabled"],
            metadata_versions=versions,
            share=float(share),
            rewrite_in_engine=parse_size(raw["rewrite_in_engine"], "maintenance.rewrite_in_engine"),
            policy=policy,
            **{key: parse_duration(raw[key], f"maintenance.{key}")
               for key in ("check_interval", "expire_interval", "orphans_interval", "retention_interval")},
        )
    except ConfigError as exc:
        raise ConfigError(f"{source}: {exc}") from None


def _observe(raw: dict[str, Any], source: Path, check) -> ObserveSettings:
    check(isinstance(raw["system_tables"], bool), "observe.system_tables", "must be true or false")
    port = raw["metrics_port"]
    check(isinstance(port, int) and not isinstance(port, bool) and 0 <= port <= 65535, "observe.metrics_port",
          "must be a port number (0: no metrics endpoint)")
    try:
        return ObserveSettings(
            system_tables=raw["system_tables"], metrics_port=port, metrics_host=str(raw["metrics_host"]),
            system_tables_interval=parse_duration(raw["system_tables_interval"], "observe.system_tables_interval"),
            keep_in_state=parse_duration(raw["keep_in_state"], "observe.keep_in_state"),
        )
    except ConfigError as exc:
        raise ConfigError(f"{source}: {exc}") from None


def _alerting(raw: dict[str, Any], source: Path, check, alerts: list[AlertDef]) -> AlertingSettings:
    attempts = raw["notify_attempts"]
    check(isinstance(attempts, int) and not isinstance(attempts, bool) and 1 <= attempts <= 10,
          "alerting.notify_attempts", "must be a whole number from 1 to 10")
    try:
        return AlertingSettings(
            notify_attempts=attempts, alerts=tuple(alerts),
            **{key: parse_duration(raw[key], f"alerting.{key}")
               for key in ("evaluate_interval", "cooldown", "heartbeat_timeout")},
        )
    except ConfigError as exc:
        raise ConfigError(f"{source}: {exc}") from None


def _logs(raw: dict[str, Any], source: Path, check) -> LogSettings:
    keep = raw["keep"]
    check(isinstance(keep, int) and not isinstance(keep, bool) and 1 <= keep <= 100, "logs.keep",
          "must be a whole number from 1 to 100")
    try:
        max_bytes = parse_size(raw["max_size"], "logs.max_size")
    except ConfigError as exc:
        raise ConfigError(f"{source}: {exc}") from None
    check(max_bytes >= 1024, "logs.max_size", "must be at least 1KB")
    level = raw["level"].lower() if isinstance(raw["level"], str) else raw["level"]
    check(level in LEVELS, "logs.level", f"must be one of {', '.join(LEVELS)}, not {level!r}")
    return LogSettings(max_bytes=max_bytes, keep=keep, level=level)


def ensure_home(settings: Settings) -> None:
    """FLOE_HOME, its logs and a local warehouse, made for their owner alone (0700) whatever the umask:
    they hold the tables' data, the catalog, Kafka credentials. Existing ones keep their mode
    (`floe doctor` warns when others may read them)."""
    private_dir(settings.home)
    private_dir(settings.log_dir)
    if settings.warehouse.startswith("file://"):
        private_dir(Path(settings.warehouse[len("file://"):]))
