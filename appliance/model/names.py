"""Names Floe accepts, and how source names become lower snake_case."""

from __future__ import annotations

import re

from appliance.core.errors import InvalidName

_IDENT = re.compile(r"^[a-z_][a-z0-9_]*$")
_STREAM = re.compile(r"^[a-z0-9][a-z0-9_-]{0,62}$")
_CAMEL_1 = re.compile(r"([A-Z]+)([A-Z][a-z])")
_CAMEL_2 = re.compile(r"([a-z0-9])([A-Z])")
_NON_WORD = re.compile(r"[^a-z0-9]+")


def snake_case(name: str) -> str:
    """`customerId` -> `customer_id`, `Order-Lines` -> `order_lines`, `2fa` -> `_2fa`."""
    text = _CAMEL_2.sub(r"\1_\2", _CAMEL_1.sub(r"\1_\2", name)).lower()
    text = _NON_WORD.sub("_", text).strip("_") or "field"
    return f"_{text}" if text[0].isdigit() else text


def check_identifier(name: str, what: str) -> str:
    if not _IDENT.match(name or "") or len(name) > 128:
        raise InvalidName(f"{what} {name!r} must be lower snake_case: letters a-z, digits and _, not starting with a digit")
    return name


def check_table_name(name: str) -> tuple[str, str]:
    """`namespace.table` -> ("namespace", "table"), both lower snake_case."""
    parts = (name or "").split(".")
    if len(parts) != 2:
        raise InvalidName(f"table name {name!r} must be NAMESPACE.TABLE, e.g. ingest.orders")
    check_identifier(parts[0], "namespace")
    check_identifier(parts[1], "table")
    return parts[0], parts[1]


def check_stream_name(name: str) -> str:
    if not _STREAM.match(name or ""):
        raise InvalidName(f"stream name {name!r} must be 1-63 characters of a-z, 0-9, _ or -, starting with a letter or digit")
    return name
