"""Inferring a mapping from sampled messages: nested objects flattened to snake_case names,
types widened across the sample, timestamps and dates recognised, rare misfits set aside."""

from __future__ import annotations

import re
from collections import Counter
from functools import reduce
from typing import Any, Iterable

import orjson

from appliance.core.errors import MappingError
from appliance.model.mapping import Column, Mapping
from appliance.model.names import snake_case

TIMESTAMP_RE = re.compile(
    r"^\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}(:\d{2}(\.\d{1,9})?)?(Z|z|[+-]\d{2}(:?\d{2})?)?$"
)
DATE_RE = re.compile(r"^\d{4}-\d{2}-\d{2}$")


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
