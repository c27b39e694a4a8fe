"""One value into a column's type: what fits, what is bad data, and what is a changed schema.

Decoded values arrive as JSON gives them (str, int, float, bool, list, dict) or as Avro and
Protobuf give them (Decimal, datetime, date, time, UUID, bytes). Lossless casts are accepted
(`"42"` into a long, epoch milliseconds into a timestamp, a UUID's text into a uuid). A value
of the right kind that does not fit is bad data (`Unfit`: stage `convert`); a value of
another kind altogether, such as a string where a long was, is a schema change (`Mismatch`:
stage `schema`); an integer too large for an `int` column is one Iceberg can absorb by
widening the column (`Wider`).
"""

from __future__ import annotations

import base64
import binascii
import datetime as dt
import decimal
import re
import uuid
from functools import lru_cache
from typing import Any, Callable

import orjson

from appliance.model.types import ColumnType, parse_type

UTC = dt.timezone.utc
EPOCH_DATE = dt.date(1970, 1, 1)
_INT_TEXT = re.compile(r"^\s*[-+]?\d+\s*$")
_FRACTION = re.compile(r"(\.\d{6})\d+")


class Unfit(ValueError):
    """The value is of the right kind but does not fit its column (bad data)."""


class Mismatch(Unfit):
    """The value is of another kind than its column holds: the source's schema changed."""


class Wider(Unfit):
    """The value fits a wider type Iceberg can promote the column to."""

    def __init__(self, wider: ColumnType) -> None:
        super().__init__(wider.name)
        self.wider = wider


class Invalid:
    """A value its format already found bad (a Protobuf timestamp out of range, say): it lands in no
    column, and its message is dead-lettered with the reason."""

    __slots__ = ("reason",)

    def __init__(self, reason: str) -> None:
        self.reason = reason

    def __repr__(self) -> str:
        return f"<{self.reason}>"


def kind_of(value: Any) -> str:
    """What a value is, as a message names it."""
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int):
        return "an integer"
    if isinstance(value, (float, decimal.Decimal)):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, (bytes, bytearray)):
        return "bytes"
    if isinstance(value, list):
        return "an array"
    if isinstance(value, dict):
        return "an object"
    if isinstance(value, dt.datetime):
        return "a timestamp"
    if isinstance(value, dt.date):
        return "a date"
    if isinstance(value, dt.time):
        return "a time"
    if isinstance(value, uuid.UUID):
        return "a UUID"
    return type(value).__name__


def _json_default(value: Any) -> Any:
    if isinstance(value, decimal.Decimal):
        return str(value)
    if isinstance(value, (bytes, bytearray)):
        return base64.b64encode(value).decode()
    if isinstance(value, uuid.UUID):
        return str(value)
    raise TypeError


def json_text(value: Any) -> str:
    return orjson.dumps(value, default=_json_default).decode()


def _integer(value: Any, bits: int) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, float, str, decimal.Decimal)):
        raise Mismatch
    if isinstance(value, float):
        if not value.is_integer():
            raise Unfit
        value = int(value)
    elif isinstance(value, decimal.Decimal):
        if value != value.to_integral_value():
            raise Unfit
        value = int(value)
    elif isinstance(value, str):
        if not _INT_TEXT.match(value):
            raise Mismatch
        value = int(value)
    if not -(2 ** (bits - 1)) <= value < 2 ** (bits - 1):
        if bits == 32 and -(2 ** 63) <= value < 2 ** 63:
            raise Wider(parse_type("long"))
        raise Unfit
    return value


def _floating(value: Any) -> float:
    if isinstance(value, bool):
        raise Mismatch
    if isinstance(value, (int, float, decimal.Decimal)):
        return float(value)
    if isinstance(value, str):
        try:
            return float(value)
        except ValueError:
            raise Mismatch from None
    raise Mismatch


def _boolean(value: Any) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.lower() in ("true", "false"):
        return value.lower() == "true"
    raise Mismatch


def _string(value: Any) -> str:
    return value if isinstance(value, str) else json_text(value)


def _decimal(t: ColumnType) -> Callable[[Any], decimal.Decimal]:
    quantum = decimal.Decimal(1).scaleb(-t.scale)
    integer_digits = t.precision - t.scale

    def convert(value: Any) -> decimal.Decimal:
        if isinstance(value, bool):
            raise Mismatch
        if isinstance(value, float):
            value = decimal.Decimal(repr(value))
        elif isinstance(value, (int, str)):
            try:
                value = decimal.Decimal(value.strip() if isinstance(value, str) else value)
            except decimal.InvalidOperation:
                raise Mismatch from None
        elif not isinstance(value, decimal.Decimal):
            raise Mismatch
        if not value.is_finite():
            raise Unfit
        try:
            exact = value.quantize(quantum, context=decimal.Context(prec=80))
        except decimal.InvalidOperation:  # more digits than any decimal column holds (1e100)
            raise Unfit from None
        if exact != value:
            raise Unfit  # more fractional digits than the column keeps: never rounded away
        digits = len(exact.as_tuple().digits) - t.scale if exact else 0
        if digits > integer_digits:
            if digits + t.scale <= 38:
                raise Wider(parse_type(f"decimal({digits + t.scale},{t.scale})"))
            raise Unfit
        return exact

    return convert


def _binary(value: Any) -> bytes:
    if isinstance(value, (bytes, bytearray)):
        return bytes(value)
    if isinstance(value, str):
        try:
            return base64.b64decode(value, validate=True)
        except (binascii.Error, ValueError):
            raise Unfit from None
    raise Mismatch


def _uuid(value: Any) -> bytes:
    if isinstance(value, uuid.UUID):
        return value.bytes
    if isinstance(value, str):
        try:
            return uuid.UUID(value.strip()).bytes
        except ValueError:
            raise Unfit from None
    if isinstance(value, (bytes, bytearray)) and len(value) == 16:
        return bytes(value)
    raise Mismatch


def _parse_datetime(value: Any) -> dt.datetime:
    if isinstance(value, dt.datetime):
        return value
    if isinstance(value, bool) or isinstance(value, dt.date):
        raise Mismatch
    if isinstance(value, (int, float)):  # epoch milliseconds, Kafka's own convention
        try:
            return dt.datetime.fromtimestamp(value / 1000, UTC)
        except (OverflowError, OSError, ValueError):
            raise Unfit from None
    if not isinstance(value, str):
        raise Mismatch
    try:
        return dt.datetime.fromisoformat(_FRACTION.sub(r"\1", value.strip()))
    except ValueError:
        raise Unfit from None


def _timestamptz(value: Any) -> dt.datetime:
    parsed = _parse_datetime(value)
    return parsed.replace(tzinfo=UTC) if parsed.tzinfo is None else parsed.astimezone(UTC)


def _timestamp(value: Any) -> dt.datetime:
    parsed = _parse_datetime(value)
    return parsed if parsed.tzinfo is None else parsed.astimezone(UTC).replace(tzinfo=None)


def _date(value: Any) -> dt.date:
    if isinstance(value, dt.datetime):
        raise Mismatch
    if isinstance(value, dt.date):
        return value
    if isinstance(value, int) and not isinstance(value, bool):  # days since the epoch
        try:
            return EPOCH_DATE + dt.timedelta(days=value)
        except OverflowError:
            raise Unfit from None
    if isinstance(value, str):
        try:
            return dt.date.fromisoformat(value.strip())
        except ValueError:
            raise Unfit from None
    raise Mismatch


def _time(value: Any) -> dt.time:
    if isinstance(value, dt.time):
        return value.replace(tzinfo=None)
    if isinstance(value, str):
        try:
            return dt.time.fromisoformat(_FRACTION.sub(r"\1", value.strip()))
        except ValueError:
            raise Unfit from None
    raise Mismatch


def _list(element: Callable[[Any], Any]) -> Callable[[Any], list]:
    def convert(value: Any) -> list:
        if not isinstance(value, (list, tuple)):
            raise Mismatch
        return [None if v is None else element(v) for v in value]

    return convert


def _map(key: Callable[[Any], Any], item: Callable[[Any], Any]) -> Callable[[Any], list]:
    def convert(value: Any) -> list:
        if not isinstance(value, dict):
            raise Mismatch
        return [(key(k), None if v is None else item(v)) for k, v in value.items()]

    return convert


SIMPLE: dict[str, Callable[[Any], Any]] = {
    "boolean": _boolean, "int": lambda v: _integer(v, 32), "long": lambda v: _integer(v, 64),
    "float": _floating, "double": _floating, "string": _string, "json": json_text, "binary": _binary,
    "uuid": _uuid, "date": _date, "time": _time, "timestamp": _timestamp, "timestamptz": _timestamptz,
}


@lru_cache(maxsize=512)
def converter(t: ColumnType) -> Callable[[Any], Any]:
    """One value (not None) into what Arrow takes for a column of type `t`; raises `Unfit` and its kinds."""
    if t.kind == "decimal":
        return _decimal(t)
    if t.kind == "list":
        return _list(_element(t.element))
    if t.kind == "map":
        return _map(_element(t.key), _element(t.element))
    return SIMPLE[t.kind]


def _element(t: ColumnType) -> Callable[[Any], Any]:
    """Inside a list or a map, a value too large for an int is bad data: Iceberg widens no element."""
    convert = converter(t)

    def strict(value: Any) -> Any:
        if value.__class__ is Invalid:
            raise Unfit(value.reason)
        try:
            return convert(value)
        except Wider:
            raise Unfit from None

    return strict
