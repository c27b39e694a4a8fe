"""An upsert table's key: which columns can hold it, and a row's key as Python sees it.

A key travels and is compared as a plain Python value, as Arrow's `to_pylist` gives it (a tuple
when there are several key columns): the same from a decoded batch and from a data file read back.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import pyarrow as pa

from appliance.core.errors import MappingError
from appliance.model.mapping import Mapping

# Types whose values compare exactly: no floats (NaN, -0.0), nothing nested.
KEY_KINDS = ("boolean", "int", "long", "string", "binary", "date", "timestamp", "timestamptz", "decimal")


def key_values(table: pa.Table, columns: tuple[str, ...]) -> list[Any]:
    """Each row's key: the value of its one key column, or the tuple of them."""
    if len(columns) == 1:
        return table.column(columns[0]).to_pylist()
    return list(zip(*(table.column(c).to_pylist() for c in columns)))


def key_columns(key: str | Iterable[str] | None) -> tuple[str, ...]:
    """A key's columns as a user gives them: "id", "id, tenant" (comma-separated, as `--key` takes them)
    or a list of names; blanks left out. A string is never taken for its characters."""
    if key is None:
        return ()
    parts = key.split(",") if isinstance(key, str) else key
    return tuple(part.strip() for part in parts if part.strip())


def check_key(mapping: Mapping, key: tuple[str, ...]) -> tuple[str, ...]:
    """`key` if its columns are mapped columns of a type a key can have; MappingError naming the first
    that is not."""
    if not key:
        raise MappingError("an upsert stream needs a key: --key COLUMN[,COLUMN...]")
    if len(set(key)) != len(key):
        raise MappingError(f"key {','.join(key)} names a column twice")
    columns = {c.name: c for c in mapping.columns}
    for name in key:
        column = columns.get(name)
        if column is None:
            raise MappingError(f"key column {name!r} is not a column of the mapping "
                               f"(columns: {', '.join(columns) or 'none'})")
        if column.ctype.kind not in KEY_KINDS:
            raise MappingError(f"key column {name!r} is {column.type}: a key is one of {', '.join(KEY_KINDS)}")
    return key
