"""Policies in effect: the defaults in config, then a namespace's own values, then a table's.

`floe table policy` and the UI show and change them through here; every table a change
reaches is checked (its retention column included) before anything is saved.
"""

from __future__ import annotations

from typing import Any, Callable

from appliance.config.policy import PARSERS, Policy, PolicySetting, build_policy, check_values
from appliance.config.settings import Settings
from appliance.core.errors import ConfigError, TableNotFound
from appliance.core.vocabulary import EventKind
from appliance.maintenance.retention import check_retention_column
from appliance.state.store import StateStore
from appliance.tables.catalog import Catalog
from appliance.tables.system import DEFAULT_RETENTION, NAMESPACE, system_policy

Lookup = Callable[[str, str], dict[str, Any]]  # (scope, name) -> that scope's own values


def _layers(settings: Settings, lookup: Lookup, namespace: str, table: str | None) -> list[tuple[str, dict]]:
    layers = [("default", settings.maintenance.policy)]
    if namespace == NAMESPACE:  # Floe's system tables: 30 days on each one's time column
        layers.append(("system tables", system_policy(table) if table else {"retention": DEFAULT_RETENTION}))
    layers.append((f"namespace {namespace}", lookup("namespace", namespace)))
    if table is not None:
        layers.append((f"table {table}", lookup("table", table)))
    return layers


def effective_policy(settings: Settings, state: StateStore, table: str) -> tuple[Policy, dict[str, str], dict[str, Any]]:
    """The table's policy, where each value came from, and the values as written."""
    return build_policy(_layers(settings, state.policy, table.split(".", 1)[0], table))


def settings_in_effect(settings: Settings, state: StateStore, name: str, scope: str = "table") -> list[PolicySetting]:
    """Each setting of a table's (or a namespace's) policy, in `floe table policy` order."""
    namespace = name.split(".", 1)[0]
    _, source, raw = build_policy(_layers(settings, state.policy, namespace, name if scope == "table" else None))
    return [PolicySetting(k, str(raw[k]), source[k]) for k in PARSERS]


def policy_scope(catalog: Catalog, name: str) -> tuple[str, str]:
    """('table', NS.TABLE) or ('namespace', NS) for a name that exists in the catalog."""
    if "." in name:
        return "table", catalog.check_exists(name)
    if name not in catalog.namespaces():
        raise TableNotFound(f"no namespace named {name} in the catalog")
    return "namespace", name


def describe_policy(settings: Settings, state: StateStore, catalog: Catalog, name: str) -> list[PolicySetting]:
    scope, name = policy_scope(catalog, name)
    return settings_in_effect(settings, state, name, scope)


def set_policy(settings: Settings, state: StateStore, catalog: Catalog, name: str, values: dict[str, Any],
               unset: tuple[str, ...] = ()) -> None:
    """Change NAME's own policy values; checked against the catalog before anything is saved."""
    scope, name = policy_scope(catalog, name)
    for key in unset:
        if key not in PARSERS:
            raise ConfigError(f"unknown policy setting {key!r} (known: {', '.join(PARSERS)})")
    own = {k: v for k, v in state.policy(scope, name).items() if k not in unset}
    own.update(check_values(values, f"{scope} {name}"))

    def lookup(s: str, n: str) -> dict[str, Any]:
        return own if (s, n) == (scope, name) else state.policy(s, n)

    tables = [name] if scope == "table" else [t for t in catalog.list_tables() if t.startswith(name + ".")]
    for table in tables:  # every table the change reaches must still have a valid policy
        policy = build_policy(_layers(settings, lookup, table.split(".", 1)[0], table))[0]
        if not policy.retention.forever:
            check_retention_column(catalog.table(table), policy.retention_column)
    state.set_policy(scope, name, own)
    state.add_event(EventKind.POLICY_CHANGED, f"{scope} {name}: maintenance policy " +
                    (", ".join(f"{k}={v}" for k, v in sorted(own.items())) or "back to the defaults"),
                    table=name if scope == "table" else None)
