"""Column mappings: which JSON field lands in which typed column.

A mapping is inferred from a sample of messages (nested objects flattened to
snake_case names, types widened across the sample, timestamps recognised),
printed and saved as TOML, and can be edited and supplied back.
"""

from __future__ import annotations

import re
import tomllib
from collections import Counter
from dataclasses import dataclass
from functools import reduce
from pathlib import Path
from typing import Any, Iterable

import orjson
import pyarrow as pa
import tomli_w
from pyiceberg.types import (
    BooleanType,
    DateType,
    DoubleType,
    FloatType,
    IcebergType,
    IntegerType,
    LongType,
    StringType,
    TimestampType,
    TimestamptzType,
)

from appliance.errors import InvalidName, MappingError
from appliance.names import RESERVED_COLUMNS, check_identifier, snake_case

# name -> (Iceberg type, Arrow type). `json` keeps any value as its JSON text.
TYPES: dict[str, tuple[IcebergType, pa.DataType]] = {
    "boolean": (BooleanType(), pa.bool_()),
    "int": (IntegerType(), pa.int32()),
    "long": (LongType(), pa.int64()),
    "float": (FloatType(), pa.float32()),
    "double": (DoubleType(), pa.float64()),
    "string": (StringType(), pa.string()),
    "json": (StringType(), pa.string()),
    "date": (DateType(), pa.date32()),
    "timestamp": (TimestampType(), pa.timestamp("us")),
    "timestamptz": (TimestamptzType(), pa.timestamp("us", tz="UTC")),
}

TIMESTAMP_RE = re.compile(
    r"^\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}(:\d{2}(\.\d{1,9})?)?(Z|z|[+-]\d{2}(:?\d{2})?)?$"
)
DATE_RE = re.compile(r"^\d{4}-\d{2}-\d{2}$")


@dataclass(frozen=True)
class Column:
    name: str
    type: str
    source: tuple[str, ...]

    @property
    def arrow_type(self) -> pa.DataType:
        return TYPES[self.type][1]

    @property
    def iceberg_type(self) -> IcebergType:
        return TYPES[self.type][0]


@dataclass(frozen=True)
class Mapping:
    columns: tuple[Column, ...]

    def __post_init__(self) -> None:
        if not self.columns:
            raise MappingError("a mapping needs at least one column")
        seen: set[str] = set()
        for col in self.columns:
            try:
                check_identifier(col.name, "column")
            except InvalidName as exc:
                raise MappingError(str(exc)) from None
            if col.name in RESERVED_COLUMNS:
                raise MappingError(f"column {col.name!r} is reserved for Kafka metadata; rename it")
            if col.name in seen:
                raise MappingError(f"column {col.name!r} appears twice")
            if col.type not in TYPES:
                raise MappingError(f"column {col.name!r}: unknown type {col.type!r} (use one of {', '.join(TYPES)})")
            if not col.source or not all(isinstance(p, str) and p for p in col.source):
                raise MappingError(f"column {col.name!r}: source must name a field, e.g. \"customer.id\"")
            seen.add(col.name)

    def to_toml(self, header: str = "") -> str:
        doc = {
            "columns": [
                {"name": c.name, "type": c.type, "source": _source_text(c.source)} for c in self.columns
            ]
        }
        lines = [f"# {line}" for line in header.splitlines()] if header else []
        lines.append(f"# types: {', '.join(TYPES)}; source is a dotted path into the JSON object")
        return "\n".join(lines) + "\n" + tomli_w.dumps(doc)

    @classmethod
    def from_toml(cls, text: str, origin: str = "mapping") -> Mapping:
        try:
            doc = tomllib.loads(text)
        except tomllib.TOMLDecodeError as exc:
            raise MappingError(f"{origin}: not valid TOML: {exc}") from None
        raw = doc.get("columns")
        if not isinstance(raw, list) or not raw:
            raise MappingError(f"{origin}: needs one or more [[columns]] tables with name, type and source")
        columns = []
        for i, entry in enumerate(raw, 1):
            if not isinstance(entry, dict):
                raise MappingError(f"{origin}: columns entry {i} must be a table")
            unknown = set(entry) - {"name", "type", "source"}
            if unknown:
                raise MappingError(f"{origin}: columns entry {i}: unknown key {sorted(unknown)[0]!r}")
            name, type_, source = entry.get("name"), entry.get("type"), entry.get("source", entry.get("name"))
            if not isinstance(name, str) or not isinstance(type_, str):
                raise MappingError(f"{origin}: columns entry {i} needs a string name and type")
            if isinstance(source, str):
                path = _parse_source(source)
            elif isinstance(source, list) and all(isinstance(p, str) for p in source):
                path = tuple(source)
            else:
                raise MappingError(f"{origin}: column {name!r}: source must be a string or a list of strings")
            columns.append(Column(name, type_, path))
        try:
            return cls(tuple(columns))
        except MappingError as exc:
            raise MappingError(f"{origin}: {exc}") from None

    @classmethod
    def from_file(cls, path: str | Path) -> Mapping:
        p = Path(path)
        try:
            text = p.read_text()
        except OSError as exc:
            raise MappingError(f"mapping file {p}: cannot read: {exc.strerror}") from None
        return cls.from_toml(text, origin=f"mapping file {p}")


def _source_text(path: tuple[str, ...]) -> str | list[str]:
    return ".".join(path) if not any("." in p for p in path) else list(path)


def _parse_source(text: str) -> tuple[str, ...]:
    return tuple(p for p in text.split(".")) if text else ()


# ---- inference ---------------------------------------------------------------


def _kind(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "long" if -(2**63) <= value < 2**63 else "double"
    if isinstance(value, float):
        return "double"
    if isinstance(value, str):
        if DATE_RE.match(value):
            return "date"
        if TIMESTAMP_RE.match(value):
            return "timestamptz"
        return "string"
    return "json"  # arrays (and objects seen where a scalar was too)


def widen(a: str, b: str) -> str:
    """The narrowest type that holds values of both kinds."""
    if a == b or b == "null":
        return a
    if a == "null":
        return b
    pair = {a, b}
    if pair == {"long", "double"}:
        return "double"
    if pair == {"date", "timestamptz"}:
        return "timestamptz"
    if "json" in pair:
        return "json"
    return "string"


# A kind seen in at most this share of a field's sampled values, that would turn a typed
# column into text, is taken for bad data: those messages go to the dead-letter table.
OUTLIER_SHARE = 0.02
OUTLIER_MIN_SAMPLE = 50


def decide_type(counts: Counter[str]) -> str:
    """The column type for a field from how often each kind of value was seen."""
    seen = {k: n for k, n in counts.items() if k != "null"}
    widest = reduce(widen, seen, "null")
    total = sum(seen.values())
    if widest in ("string", "json") and total >= OUTLIER_MIN_SAMPLE:
        usual = reduce(widen, (k for k, n in seen.items() if n / total > OUTLIER_SHARE), "null")
        if usual not in ("null", "string", "json"):
            return usual
    return widest


def infer_mapping(objects: Iterable[Any]) -> Mapping:
    """Infer columns from decoded sample messages; non-objects are ignored."""
    counts: dict[tuple[str, ...], Counter[str]] = {}
    objects_at: set[tuple[str, ...]] = set()

    def walk(obj: dict[str, Any], prefix: tuple[str, ...]) -> None:
        for key, value in obj.items():
            path = prefix + (key,)
            if isinstance(value, dict) and value:
                objects_at.add(path)
                walk(value, path)
            else:
                counts.setdefault(path, Counter())[_kind(value if value != {} else None)] += 1

    seen_any = False
    for obj in objects:
        if isinstance(obj, dict):
            seen_any = True
            walk(obj, ())
    if not seen_any:
        raise MappingError("no JSON object among the sampled messages: cannot infer a mapping")

    kinds = {path: decide_type(c) for path, c in counts.items()}
    # A field that is an object in some messages and a scalar in others is kept whole, as JSON.
    conflicted = {p for p in objects_at if p in kinds}
    for path in conflicted:
        kinds[path] = "json"
    columns: list[Column] = []
    names: set[str] = set()
    for path, kind in kinds.items():
        if any(path[: i] in conflicted for i in range(1, len(path))):
            continue
        # snake_case strips leading underscores, so no inferred name is one of RESERVED_COLUMNS
        base = "_".join(snake_case(p) for p in path)
        name, n = base, 2
        while name in names:
            name, n = f"{base}_{n}", n + 1
        names.add(name)
        columns.append(Column(name, "string" if kind == "null" else kind, path))
    return Mapping(tuple(columns))


def sample_objects(values: Iterable[bytes | None]) -> list[Any]:
    out = []
    for value in values:
        try:
            out.append(orjson.loads(value)) if value else None
        except orjson.JSONDecodeError:
            continue
    return out
