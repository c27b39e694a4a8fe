"""`[catalog]` of floe.toml: the Iceberg catalog as PyIceberg properties, as PyIceberg names them.

No properties means Floe's own SQLite catalog in FLOE_HOME. Values may be secret references
(`${env:NAME}`, `${file:/path}`): they are kept as written here and resolved only when a catalog is
opened (`Settings.catalog_properties`), so no value is ever held in Floe's settings or shown.

`name` is not a property but the name Floe opens the catalog under. A SQL catalog keeps it with each
table (`iceberg_tables.catalog_name`): another engine reading the same database (Trino's
`iceberg.jdbc-catalog.catalog-name`, a Spark catalog's name) sees Floe's tables under that name only.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from appliance.core.errors import ConfigError
from appliance.core.secrets import URI_PASSWORD, has_reference

# PyIceberg's catalog types; glue, hive, dynamodb and bigquery need their extras (`pip install floe[glue]`).
TYPES = ("sql", "rest", "glue", "hive", "dynamodb", "bigquery", "in-memory")
SECRET_PROPERTY = re.compile(r"(password|secret|token|credential|key-id|session)", re.IGNORECASE)
DEFAULT_NAME = "floe"
# A SQL catalog's `catalog_name` column holds at most 255 characters; other engines name catalogs in SQL
# and in dotted property names (`spark.sql.catalog.<name>`): no dots, no blanks.
_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_-]{0,254}")


def masked(key: str, value: str) -> str:
    """A property as it may be shown: secrets masked (a reference is shown, it is not a secret)."""
    if value.startswith("${") and value.endswith("}"):
        return value
    if SECRET_PROPERTY.search(key):
        return "***" if value else ""
    return URI_PASSWORD.sub(lambda m: f"{m.group(1)}{m.group(2) if has_reference(m.group(2)) else '***'}@", value)


@dataclass(frozen=True)
class CatalogSettings:
    properties: tuple[tuple[str, str], ...] = ()  # as written in floe.toml, references kept
    name: str = DEFAULT_NAME  # the name Floe opens the catalog under (`[catalog] name`)

    @property
    def own(self) -> bool:
        """True for Floe's own SQLite catalog in FLOE_HOME (no [catalog] properties)."""
        return not self.properties

    @property
    def kind(self) -> str:
        return kind_of(dict(self.properties)) if self.properties else "sql"

    def describe(self) -> str:
        """One line for screens and errors: the type and where, passwords masked."""
        props = dict(self.properties)
        named = f" {self.name}" if self.name != DEFAULT_NAME else ""
        if not props:
            return f"sql catalog{named} in FLOE_HOME/catalog.db"
        where = props.get("uri") or props.get("warehouse") or ""
        return f"{self.kind} catalog{named}" + (f" at {masked('uri', where)}" if where else "")

    def __repr__(self) -> str:
        return f"CatalogSettings({ {k: masked(k, v) for k, v in self.properties}!r}, name={self.name!r})"


def kind_of(props: dict[str, str]) -> str:
    """The catalog type PyIceberg would pick: `type`, else the one its URI implies."""
    if props.get("type"):
        return props["type"].lower()
    uri = props.get("uri", "")
    if uri.startswith(("http://", "https://")):
        return "rest"
    if uri.startswith("thrift://"):
        return "hive"
    if uri.startswith(("sqlite", "postgresql", "mysql")):
        return "sql"
    return ""


def catalog_settings(raw: dict[str, Any], source: str) -> CatalogSettings:
    """`[catalog]` checked: string values (nested tables read as dotted names, as PyIceberg spells them),
    a known type, and the URI the SQL and REST catalogs need; `name` apart from the properties."""
    raw = dict(raw)
    name = _name(raw.pop("name", DEFAULT_NAME), source)
    props = _flat(raw, source)
    if not props:
        return CatalogSettings(name=name)
    kind = kind_of(props)
    if kind not in TYPES:
        said = f"{kind!r}" if kind else "missing (and the uri does not imply one)"
        raise ConfigError(f"{source}: catalog.type must be one of {', '.join(TYPES)}; it is {said}")
    if kind in ("sql", "rest") and not props.get("uri"):
        raise ConfigError(f"{source}: catalog.uri is needed by a {kind} catalog")
    if kind == "rest" and "request-timeout" in props:
        _positive_seconds(props["request-timeout"], f"{source}: catalog.request-timeout")
    return CatalogSettings(tuple(sorted(props.items())), name)


def _positive_seconds(value: str, where: str) -> None:
    try:
        ok = float(value) > 0
    except ValueError:
        ok = False
    if not ok:
        raise ConfigError(f"{where} must be a number of seconds above 0 (a REST request's deadline); it is {value!r}")


def _name(name: Any, source: str) -> str:
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        raise ConfigError(f"{source}: catalog.name must be letters, digits, '_' or '-' (at most 255, not starting "
                          f"with '-'), as other engines will name the catalog; it is {name!r}")
    return name


def _flat(raw: dict[str, Any], source: str, prefix: str = "") -> dict[str, str]:
    out: dict[str, str] = {}
    for key, value in raw.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            out.update(_flat(value, source, name + "."))
        elif isinstance(value, (str, int, float, bool)):
            out[name] = str(value).lower() if isinstance(value, bool) else str(value)
        else:
            raise ConfigError(f"{source}: catalog.{name} must be a string, number or boolean")
    return out
