"""Converting a column's decoded values into its Arrow type, and saying why a row cannot land.

One vectorised Arrow call per column when every value fits; only a column holding a value
that does not fit falls back to value-by-value conversion (`model.values`), which names the
culprit and tells bad data (stage `convert`) from a changed schema (stage `schema`), and
notes the values a wider column would hold (an `int` column receiving 64-bit integers).
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from typing import Any

import orjson
import pyarrow as pa
import pyarrow.compute as pc

from appliance.decode.values import Invalid, Mismatch, Unfit, Wider, converter, kind_of
from appliance.model.changes import SchemaChange
from appliance.model.mapping import Column
from appliance.model.sources import describe
from appliance.model.types import ColumnType

UTC = dt.timezone.utc


@dataclass(frozen=True)
class Problem:
    """Why a row cannot land: its dead-letter stage and message, and for a schema change what changed
    (column, its type, what came instead), so that each change is reported once."""

    stage: str
    message: str
    change: SchemaChange | None = None


def _short(value: Any) -> str:
    if isinstance(value, str):
        text = repr(value)
    else:
        try:
            text = orjson.dumps(value).decode()
        except TypeError:
            text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


# Simple types whose values Arrow converts on its own when every value is of one Python kind.
def _fast(col: Column, ctype: ColumnType, values: list[Any]) -> pa.Array | None:
    """One vectorised conversion, or None when some value needs a closer look."""
    kind = ctype.kind
    if kind not in ("long", "int", "double", "float", "boolean", "string", "timestamptz", "date"):
        return None
    try:
        inferred = pa.array(values)
    except (pa.ArrowException, TypeError, ValueError, OverflowError):
        return None
    seen = inferred.type
    if pa.types.is_null(seen):
        return pa.nulls(len(values), ctype.arrow)
    target = ctype.arrow
    if seen == target and kind != "timestamptz":
        return inferred  # a cast to its own type is an Arrow call for nothing: 4 us a column a batch
    try:
        if kind in ("long", "int"):
            return inferred.cast(target) if pa.types.is_int64(seen) else None
        if kind in ("double", "float"):
            return inferred.cast(target) if pa.types.is_int64(seen) or pa.types.is_float64(seen) else None
        if kind == "boolean":
            return inferred if pa.types.is_boolean(seen) else None
        if kind == "string":
            return inferred if pa.types.is_string(seen) else None
        if kind == "timestamptz" and pa.types.is_string(seen):
            return pc.cast(inferred, target)  # strict: strings without a zone take the slow path
        if kind == "timestamptz" and pa.types.is_timestamp(seen) and seen.tz is not None:
            return inferred.cast(target)
        if kind == "date" and (pa.types.is_string(seen) or pa.types.is_date32(seen)):
            return pc.cast(inferred, target)
    except (pa.ArrowException, ValueError):
        return None
    return None


# Python classes that pass into a column's Arrow type unchanged: when the fast path fails,
# only the values of other classes need the value-by-value conversion.
PASS_THROUGH: dict[str, tuple[type, ...]] = {
    "long": (int,), "int": (int,), "double": (float, int), "float": (float, int),
    "boolean": (bool,), "string": (str,), "binary": (bytes,), "time": (dt.time,),
}


def _array(values: list[Any], ctype: ColumnType) -> pa.Array:
    if ctype.kind == "uuid":  # converted to their 16 bytes; the UUID type is an extension of those
        return pa.ExtensionArray.from_storage(ctype.arrow, pa.array(values, pa.binary(16)))
    return pa.array(values, ctype.arrow)


def convert_column(col: Column, values: list[Any], errors: dict[int, Problem],
                   wider: dict[str, ColumnType] | None = None, widenable: bool = True) -> pa.Array:
    """Typed Arrow array for `values`; rows that do not fit get a `Problem` in `errors`.

    `wider`: where to note the wider type a column needs for values it cannot hold but a
    promoted column could (schema evolution on); without it those rows are schema problems.
    Not `widenable` (the writer schema's type is no wider): such a value is bad data.
    """
    ctype = col.ctype
    fast = _fast(col, ctype, values)
    if fast is not None:
        return fast
    passing = PASS_THROUGH.get(ctype.kind)
    if passing is not None:
        # `v.__class__`, not isinstance: a bool is an int to isinstance, not to a long column.
        odd = [i for i, v in enumerate(values) if v is not None and v.__class__ not in passing]
        fixed = list(values)
        found: dict[int, Problem] = {}
        for i in odd:
            fixed[i] = _one(col, ctype, values[i], i, found, wider, widenable)
        try:
            array = _array(fixed, ctype)
        except (pa.ArrowException, OverflowError, TypeError, ValueError):
            pass  # e.g. an int beyond 64 bits: fall through to the full check
        else:
            for i, problem in found.items():
                errors.setdefault(i, problem)
            return array
    out = [None if v is None else _one(col, ctype, v, i, errors, wider, widenable) for i, v in enumerate(values)]
    return _array(out, ctype)


def _one(col: Column, ctype: ColumnType, value: Any, i: int, errors: dict[int, Problem],
         wider: dict[str, ColumnType] | None, widenable: bool) -> Any:
    try:
        if value.__class__ is Invalid:
            raise Unfit(value.reason)
        return converter(ctype)(value)
    except Wider as exc:
        if not widenable:
            errors.setdefault(i, Problem("convert", f"column {col.name!r} ({ctype}): {_short(value)} does not fit "
                                                    "its writer schema's type either"))
        elif wider is not None:
            current = wider.get(col.name)
            if current is None or exc.wider.precision > current.precision or current.kind != exc.wider.kind:
                wider[col.name] = exc.wider
            errors.setdefault(i, Problem("widen", f"column {col.name!r} needs {exc.wider}"))
        else:
            errors.setdefault(i, Problem(
                "schema", f"field {_path(col)}: {_short(value)} needs {exc.wider} where column {col.name!r} is "
                          f"{ctype} (schema evolution is off)",
            SchemaChange.incompatible(col.name, ctype.name, exc.wider.name)))
    except Mismatch:
        kind = kind_of(value)
        errors.setdefault(i, Problem(
            "schema", f"field {_path(col)}: {kind} ({_short(value)}) where column {col.name!r} is {ctype}",
            SchemaChange.incompatible(col.name, ctype.name, kind)))
    except Unfit as exc:
        why = str(exc) or f"cannot convert {_short(value)}"
        errors.setdefault(i, Problem("convert", f"column {col.name!r} ({ctype}): {why}"))
    return None


def _path(col: Column) -> str:
    return describe(col.source)


# Arrow types a column's values may come in and be cast from without a look at each value:
# the cast can only fail (then each value is looked at), never change a value's meaning.
_SAME_FAMILY = (pa.types.is_integer, pa.types.is_floating, pa.types.is_timestamp, pa.types.is_date,
                pa.types.is_time, pa.types.is_decimal, pa.types.is_boolean)


def _castable(source: pa.DataType, target: pa.DataType) -> bool:
    if source == target:
        return True
    if pa.types.is_integer(source) and pa.types.is_floating(target):
        return True
    if (pa.types.is_string(source) or pa.types.is_large_string(source)) and pa.types.is_string(target):
        return True
    if (pa.types.is_binary(source) or pa.types.is_large_binary(source) or pa.types.is_fixed_size_binary(source)) \
            and pa.types.is_binary(target):
        return True
    if pa.types.is_list(source) and pa.types.is_list(target) or pa.types.is_map(source) and pa.types.is_map(target):
        return True
    return any(test(source) and test(target) for test in _SAME_FAMILY)


def convert_values(col: Column, values: Any, n: int, errors: dict[int, Problem],
                   wider: dict[str, ColumnType] | None = None, widenable: bool = True) -> pa.Array:
    """A column's values as a format hands them over: a list (each converted), an Arrow array
    decoded in columns (cast when that is lossless, else converted value by value), or None
    (the writer schema has no such field: nulls)."""
    if values is None:
        return pa.nulls(n, col.arrow_type)
    if isinstance(values, (pa.Array, pa.ChunkedArray)):
        target = col.arrow_type
        if _castable(values.type, target):
            try:
                return values.cast(target, safe=True)
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError):
                pass  # a value that does not fit: find it below
        values = values.to_pylist()
    return convert_column(col, values, errors, wider, widenable)
