"""A routed stream's rule: one topic's messages into tables named by a field of each message's value.

`--route-by type --table 'analytics.events_{value}'` sends `{"type": "click", ...}` to `analytics.events_click`.
The field may be the message's Kafka key or a header instead, written as a mapping's source is (`model.sources`):
`@key` (the key's text), `@key.kind` (a field of a JSON or registry-encoded key), `@header.type` (a header's
text): routing by those reads no message value at all.
The value is made a valid table name as a pattern's topic names are (`patterns.name_part`: lowercase, other
characters as `_`, a leading digit prefixed `_`); a message without the field, or whose value makes no valid name,
goes to the stream's dead-letter table with the reason (`route`). Each table a value names is a `Route`, recorded
in the state database when the first message naming it is met, its mapping inferred from its own messages.

Pure functions only: the task-side split (`ingest/routing.py`) and the driver (`ingest/routed.py`) use them.
"""

from __future__ import annotations

import dataclasses
import string
from dataclasses import dataclass, field
from typing import Any

from appliance.core.errors import InvalidName, RouteError
from appliance.model.mapping import Mapping
from appliance.model.names import check_table_name
from appliance.model.patterns import name_part
from appliance.model.sources import HEADERS, describe, from_kafka, parse_source
from appliance.model.stream import StreamDef

VALUE = "value"  # the template's one field


@dataclass(frozen=True)
class RouteRule:
    """A field path into a message's value and a table template of `{value}`."""

    path: tuple[str, ...]
    template: str

    @classmethod
    def parse(cls, route_by: str, template: str) -> RouteRule:
        """Both checked: the field names a path of the value (`a.b` a nested field), the template names `{value}`
        and nothing else, and makes a NAMESPACE.TABLE."""
        route_by = (route_by or "").strip()
        if not route_by:
            raise RouteError("--route-by needs a field of the messages' value, e.g. type or event.kind, or @key, "
                             "@key.FIELD or @header.NAME")
        path = _route_path(route_by)
        try:
            parsed = list(string.Formatter().parse(template or ""))
        except ValueError as exc:
            raise RouteError(f"table template {template!r}: {exc}") from None
        fields = [(name, spec, conversion) for _, name, spec, conversion in parsed if name is not None]
        if not fields:
            raise RouteError(f"table template {template!r} does not name {{value}}: every message would land in "
                             "the same table (e.g. analytics.events_{value})")
        for name, spec, conversion in fields:
            if name != VALUE or spec or conversion:
                raise RouteError(f"table template {template!r} names {{{name}}}: a routed stream's template names "
                                 "only {value}")
        made = cls(path, template)
        try:
            check_table_name(made.example())
        except InvalidName as exc:
            raise RouteError(f"table template {template!r} makes no table name: {exc}") from None
        return made

    @property
    def field(self) -> str:
        """The field as `--route-by` writes it (and the state database keeps it): `type`, `@header.type`."""
        return describe(self.path)

    @property
    def from_kafka(self) -> bool:
        """Whether the route is the message's key or a header, not a field of its value."""
        return from_kafka(self.path)

    def example(self) -> str:
        """The template made with `x`: the name checks the template's literal parts."""
        return self.template.format(value="x")

    def route(self, value: Any) -> tuple[str | None, str]:
        """(the table `value` names, "") or (None, why the message has no table)."""
        text = route_text(value)
        if text is None:
            what = "missing or null" if value is None else f"{_kind(value)}, not a text or a number"
            return None, f"route field {self.field} is {what}: no table to route the message to"
        part = name_part(text)
        if not part.strip("_"):
            return None, f"route field {self.field} value {text[:80]!r} has no letter or digit to name a table"
        name = self.template.format(value=part)
        name = ".".join(f"_{p}" if p[:1].isdigit() else p for p in name.split("."))
        try:
            check_table_name(name)
        except InvalidName as exc:
            return None, f"route field {self.field} value {text[:80]!r} makes no table name: {exc}"
        return name, ""


def _route_path(route_by: str) -> tuple[str, ...]:
    """`--route-by` as a path: a field of the value (`a.b` nested), or a Kafka source that holds one value."""
    if route_by.startswith("@"):
        try:
            path = parse_source(route_by)
        except Exception:  # noqa: BLE001 - said below, in the route's words
            path = ()
        if not path or path == HEADERS:
            raise RouteError(f"--route-by {route_by!r}: a route taken from Kafka must be @key, @key.FIELD or "
                             "@header.NAME (one value a message)")
        return path
    path = tuple(route_by.split("."))
    if not all(part.strip() for part in path):
        raise RouteError(f"--route-by {route_by!r} must name a field of the messages' value, e.g. type or "
                         "event.kind (a nested field as a.b), or @key, @key.FIELD or @header.NAME")
    return path


def route_text(value: Any) -> str | None:
    """A field's value as the text a table name is made of; None: no value a name can be made of."""
    if value is None or isinstance(value, (dict, list, tuple, bytes)):
        return None
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


def _kind(value: Any) -> str:
    return {dict: "a record", list: "a list", tuple: "a list", bytes: "bytes"}.get(type(value), type(value).__name__)


@dataclass(frozen=True)
class Route:
    """A table a route value named: its mapping (as first inferred; the table's schema is the truth after), the
    value that made it, and where each partition was when it was recorded (no message naming it came before).
    `refused`: why the table cannot be made (its messages go to the dead-letter table with that reason)."""

    stream: str
    table: str
    value: str
    mapping: Mapping
    created_at: str
    start_positions: dict[int, int] = field(default_factory=dict)
    refused: str = ""


def route_stream(stream: StreamDef, route: Route) -> StreamDef:
    """A route as one table's stream: the routed stream's settings, id and dead-letter table with the route's table
    and mapping (what asks who writes a table, and a route's schema evolution, see it so)."""
    return dataclasses.replace(stream, table=route.table, mapping=route.mapping, route_by="", table_template="")


def unlanded(committed: dict[int, int] | None, partition: int, offset: int) -> bool:
    """Whether a message at (`partition`, `offset`) is still to be written to a table that committed
    `committed`: an earlier attempt of its batch, cut between two tables' commits, may have landed it."""
    return committed is None or offset >= committed.get(partition, 0)

