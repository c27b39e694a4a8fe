"""The column types a mapping can use, with their Iceberg and Arrow types.

Simple types are named (`long`, `timestamptz`, `uuid`...); three take parameters:
`decimal(P,S)`, `list<T>` and `map<K,V>`, which nest (`list<map<string,double>>`). A type
is written the way Iceberg prints it, without spaces; `json` keeps any value as its JSON
text in a string column.
`headers` is a message's Kafka headers, a list of key/value structs (the `@headers` source fills it).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache
from typing import Callable

import pyarrow as pa
from pyiceberg.types import (
    BinaryType,
    BooleanType,
    DateType,
    DecimalType,
    DoubleType,
    FloatType,
    IcebergType,
    IntegerType,
    ListType,
    LongType,
    MapType,
    NestedField,
    StringType,
    StructType,
    TimestampType,
    TimestamptzType,
    TimeType,
    UUIDType,
)

from appliance.model.columns import HEADERS_TYPE

# name -> (Iceberg type, Arrow type)
SIMPLE: dict[str, tuple[IcebergType, pa.DataType]] = {
    "boolean": (BooleanType(), pa.bool_()),
    "int": (IntegerType(), pa.int32()),
    "long": (LongType(), pa.int64()),
    "float": (FloatType(), pa.float32()),
    "double": (DoubleType(), pa.float64()),
    "string": (StringType(), pa.string()),
    "json": (StringType(), pa.string()),
    "binary": (BinaryType(), pa.binary()),
    "uuid": (UUIDType(), pa.uuid()),
    "date": (DateType(), pa.date32()),
    "time": (TimeType(), pa.time64("us")),
    "timestamp": (TimestampType(), pa.timestamp("us")),
    "timestamptz": (TimestamptzType(), pa.timestamp("us", tz="UTC")),
}

TYPE_HELP = ", ".join(SIMPLE) + ", decimal(P,S), list<T>, map<K,V>"

MAX_PRECISION = 38
_DECIMAL = re.compile(r"^decimal\((\d+),(\d+)\)$")


class UnknownType(ValueError):
    """A type name that is not one of the column types (the message says which are)."""


@dataclass(frozen=True)
class ColumnType:
    """A parsed column type. `element` is a list's element or a map's value; `key` a map's key."""

    kind: str
    precision: int = 0
    scale: int = 0
    element: ColumnType | None = None
    key: ColumnType | None = None

    @property
    def name(self) -> str:
        if self.kind == "decimal":
            return f"decimal({self.precision},{self.scale})"
        if self.kind == "list":
            return f"list<{self.element.name}>"
        if self.kind == "map":
            return f"map<{self.key.name},{self.element.name}>"
        return self.kind

    def __str__(self) -> str:
        return self.name

    @property
    def nested(self) -> bool:
        return self.kind in ("list", "map", "headers")

    @property
    def arrow(self) -> pa.DataType:
        if self.kind == "decimal":
            return pa.decimal128(self.precision, self.scale)
        if self.kind == "list":
            return pa.list_(pa.field("element", self.element.arrow))
        if self.kind == "map":
            return pa.map_(self.key.arrow, self.element.arrow)
        if self.kind == "headers":
            return HEADERS_TYPE
        return SIMPLE[self.kind][1]

    def iceberg(self, next_id: Callable[[], int]) -> IcebergType:
        """The Iceberg type; nested fields take their ids from `next_id` (PyIceberg renumbers
        them when it creates or evolves a table)."""
        if self.kind == "decimal":
            return DecimalType(self.precision, self.scale)
        if self.kind == "list":
            return ListType(next_id(), self.element.iceberg(next_id), element_required=False)
        if self.kind == "map":
            key_id, value_id = next_id(), next_id()
            return MapType(key_id, self.key.iceberg(next_id), value_id, self.element.iceberg(next_id),
                           value_required=False)
        if self.kind == "headers":
            element_id, key_id, value_id = next_id(), next_id(), next_id()
            return ListType(element_id, StructType(NestedField(key_id, "key", StringType(), required=False),
                                                   NestedField(value_id, "value", BinaryType(), required=False)),
                            element_required=False)
        return SIMPLE[self.kind][0]


def _split_pair(text: str) -> tuple[str, str]:
    """`K,V` at the top level of nesting."""
    depth = 0
    for i, ch in enumerate(text):
        if ch in "<(":
            depth += 1
        elif ch in ">)":
            depth -= 1
        elif ch == "," and depth == 0:
            return text[:i], text[i + 1:]
    raise UnknownType(f"map<{text}> needs a key and a value type, e.g. map<string,double>")


@lru_cache(maxsize=1024)
def parse_type(text: str) -> ColumnType:
    """A column type from its name, e.g. `long`, `decimal(10,2)`, `list<string>`; one-line errors."""
    t = "".join((text or "").split()).lower()
    if t in SIMPLE or t == "headers":
        return ColumnType(t)
    if m := _DECIMAL.match(t):
        precision, scale = int(m.group(1)), int(m.group(2))
        if not 1 <= precision <= MAX_PRECISION or scale > precision:
            raise UnknownType(f"type {text!r}: decimal precision must be 1..{MAX_PRECISION} and scale at most the "
                             "precision")
        return ColumnType("decimal", precision, scale)
    if t.startswith("list<") and t.endswith(">"):
        return ColumnType("list", element=parse_type(t[5:-1]))
    if t.startswith("map<") and t.endswith(">"):
        key, value = _split_pair(t[4:-1])
        key_type = parse_type(key)
        if key_type.nested or key_type.kind == "json":
            raise UnknownType(f"type {text!r}: a map's keys must be a simple type")
        return ColumnType("map", key=key_type, element=parse_type(value))
    raise UnknownType(f"unknown type {text!r} (use one of {TYPE_HELP})")


def is_type(text: str) -> bool:
    try:
        parse_type(text)
    except UnknownType:
        return False
    return True


def of_iceberg(t: IcebergType) -> ColumnType:
    """The column type of an Iceberg type (a string column is `string`; a fixed one `binary`)."""
    if isinstance(t, DecimalType):
        return ColumnType("decimal", t.precision, t.scale)
    if isinstance(t, ListType) and _is_headers(t.element_type):
        return ColumnType("headers")
    if isinstance(t, ListType):
        return ColumnType("list", element=of_iceberg(t.element_type))
    if isinstance(t, MapType):
        return ColumnType("map", key=of_iceberg(t.key_type), element=of_iceberg(t.value_type))
    for name, (iceberg, _) in SIMPLE.items():
        if name != "json" and type(t) is type(iceberg):
            return ColumnType(name)
    if type(t).__name__ == "FixedType":
        return ColumnType("binary")
    raise UnknownType(f"Iceberg type {t} has no column type in Floe")


def _is_headers(t: IcebergType) -> bool:
    return isinstance(t, StructType) and [(f.name, type(f.field_type)) for f in t.fields] == [
        ("key", StringType), ("value", BinaryType)]


# Iceberg's allowed promotions: a column of the first type may become the second.
WIDER = {("int", "long"), ("float", "double")}


def widens(old: ColumnType, new: ColumnType) -> bool:
    """Whether Iceberg can promote a column of `old` to `new` without rewriting data."""
    if (old.kind, new.kind) in WIDER:
        return True
    return (old.kind == new.kind == "decimal" and new.scale == old.scale and new.precision > old.precision)
