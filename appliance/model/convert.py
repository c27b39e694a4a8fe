"""Converting a column's decoded JSON values into its Arrow type.

One vectorised Arrow call per column when every value fits; only a column holding a
value that does not fit falls back to value-by-value conversion, which names the culprit.
Lossless casts are accepted (`"42"` into a long, epoch milliseconds into a timestamp).
"""

from __future__ import annotations

import datetime as dt
import re
from typing import Any, Callable

import orjson
import pyarrow as pa
import pyarrow.compute as pc

from appliance.model.mapping import Column

UTC = dt.timezone.utc

_INT_TEXT = re.compile(r"^\s*[-+]?\d+\s*$")
_FRACTION = re.compile(r"(\.\d{6})\d+")


class Unfit(ValueError):
    """A value cannot be converted to its column's type."""


def _short(value: Any) -> str:
    text = orjson.dumps(value).decode() if not isinstance(value, str) else repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def _to_long(value: Any, bits: int = 64) -> int:
    if isinstance(value, bool):
        raise Unfit
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    elif isinstance(value, str) and _INT_TEXT.match(value):
        value = int(value)
    if not isinstance(value, int) or not -(2 ** (bits - 1)) <= value < 2 ** (bits - 1):
        raise Unfit
    return value


def _to_double(value: Any) -> float:
    if isinstance(value, bool):
        raise Unfit
    if isinstance(value, (int, float)):
        return float(value)
    if isinstance(value, str):
        try:
            return float(value)
        except ValueError:
            raise Unfit from None
    raise Unfit


def _to_bool(value: Any) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.lower() in ("true", "false"):
        return value.lower() == "true"
    raise Unfit


def _to_string(value: Any) -> str:
    return value if isinstance(value, str) else orjson.dumps(value).decode()


def _to_json(value: Any) -> str:
    return orjson.dumps(value).decode()


def _parse_datetime(value: Any) -> dt.datetime:
    if isinstance(value, bool):
        raise Unfit
    if isinstance(value, (int, float)):  # epoch milliseconds, Kafka's own convention
        try:
            return dt.datetime.fromtimestamp(value / 1000, UTC)
        except (OverflowError, OSError, ValueError):
            raise Unfit from None
    if not isinstance(value, str):
        raise Unfit
    try:
        return dt.datetime.fromisoformat(_FRACTION.sub(r"\1", value.strip()))
    except ValueError:
        raise Unfit from None


def _to_timestamptz(value: Any) -> dt.datetime:
    parsed = _parse_datetime(value)
    return parsed.replace(tzinfo=UTC) if parsed.tzinfo is None else parsed.astimezone(UTC)


def _to_timestamp(value: Any) -> dt.datetime:
    parsed = _parse_datetime(value)
    return parsed if parsed.tzinfo is None else parsed.astimezone(UTC).replace(tzinfo=None)


def _to_date(value: Any) -> dt.date:
    if isinstance(value, int) and not isinstance(value, bool):  # days since the epoch
        try:
            return dt.date(1970, 1, 1) + dt.timedelta(days=value)
        except OverflowError:
            raise Unfit from None
    if isinstance(value, str):
        try:
            return dt.date.fromisoformat(value.strip())
        except ValueError:
            raise Unfit from None
    raise Unfit


SLOW: dict[str, Callable[[Any], Any]] = {
    "boolean": _to_bool,
    "int": lambda v: _to_long(v, 32),
    "long": _to_long,
    "float": _to_double,
    "double": _to_double,
    "string": _to_string,
    "json": _to_json,
    "date": _to_date,
    "timestamp": _to_timestamp,
    "timestamptz": _to_timestamptz,
}


def _fast(col: Column, values: list[Any]) -> pa.Array | None:
    """One vectorised conversion, or None when some value needs a closer look."""
    if col.type == "json":
        return None
    try:
        inferred = pa.array(values)
    except (pa.ArrowException, TypeError, ValueError, OverflowError):
        return None
    kind = inferred.type
    if pa.types.is_null(kind):
        return pa.nulls(len(values), col.arrow_type)
    target = col.arrow_type
    try:
        if col.type in ("long", "int"):
            return inferred.cast(target) if pa.types.is_int64(kind) else None
        if col.type in ("double", "float"):
            return inferred.cast(target) if pa.types.is_int64(kind) or pa.types.is_float64(kind) else None
        if col.type == "boolean":
            return inferred if pa.types.is_boolean(kind) else None
        if col.type == "string":
            return inferred if pa.types.is_string(kind) else None
        if col.type == "timestamptz" and pa.types.is_string(kind):
            return pc.cast(inferred, target)  # strict: strings without a zone take the slow path
        if col.type == "date" and pa.types.is_string(kind):
            return pc.cast(inferred, target)
    except (pa.ArrowException, ValueError):
        return None
    return None


# Python classes that pass into a column's Arrow type unchanged: when the fast path
# fails, only the values of other classes need the value-by-value conversion.
PASS_THROUGH: dict[str, tuple[type, ...]] = {
    "long": (int,), "int": (int,), "double": (float, int), "float": (float, int),
    "boolean": (bool,), "string": (str,),
}


def convert_column(col: Column, values: list[Any], errors: dict[int, str]) -> pa.Array:
    """Typed Arrow array for `values`; rows that do not fit get a message in `errors`."""
    fast = _fast(col, values)
    if fast is not None:
        return fast
    convert = SLOW[col.type]
    passing = PASS_THROUGH.get(col.type)
    if passing is not None:
        # `v.__class__`, not isinstance: a bool is an int to isinstance, not to a long column.
        odd = [i for i, v in enumerate(values) if v is not None and v.__class__ not in passing]
        fixed = list(values)
        found: dict[int, str] = {}
        for i in odd:
            try:
                fixed[i] = convert(values[i])
            except Unfit:
                fixed[i] = None
                found[i] = f"column {col.name!r} ({col.type}): cannot convert {_short(values[i])}"
        try:
            array = pa.array(fixed, col.arrow_type)
        except (pa.ArrowException, OverflowError, TypeError, ValueError):
            pass  # e.g. an int beyond 64 bits: fall through to the full check
        else:
            for i, message in found.items():
                errors.setdefault(i, message)
            return array
    out: list[Any] = []
    append = out.append
    for i, value in enumerate(values):
        if value is None:
            append(None)
            continue
        try:
            append(convert(value))
        except Unfit:
            append(None)
            errors.setdefault(i, f"column {col.name!r} ({col.type}): cannot convert {_short(value)}")
    return pa.array(out, col.arrow_type)
