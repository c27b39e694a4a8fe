"""Message formats: raw values in, parsed messages and each mapped column's values out.

A format also says what the messages carry that the mapping does not (`Parsed.proposed`:
new fields, as columns) and, for schemas from a registry, which columns a writer schema
would widen (`Parsed.wider`) or changes incompatibly (`Parsed.changes`). JSON is here;
Avro and Protobuf, which need the registry, are in `model.registered`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

import orjson

from appliance.model.mapping import Column, Mapping
from appliance.model.types import ColumnType

Bad = tuple[int, str, str]  # (index of the message, dead-letter stage, reason)


@dataclass
class Conflict:
    """A writer schema whose field has another type than its column holds, and the rows it wrote
    (positions in `Parsed.good`). `nested`: the field became a record or a union, whose parts are
    columns of their own (schema evolution adds them)."""

    column: str
    ours: str
    theirs: str
    writer: str  # the writer schema, as the message names it
    nested: bool = False
    positions: list[int] = field(default_factory=list)


@dataclass
class Parsed:
    """The messages of a batch that parsed, in order, and the others with their reasons."""

    good: list[int]
    bad: list[Bad]
    values: Callable[[list[Column]], list[list[Any]]]  # each column's values, aligned with `good`
    proposed: list[Column] = field(default_factory=list)
    wider: dict[str, ColumnType] = field(default_factory=dict)
    changes: dict[str, tuple[str, str, str]] = field(default_factory=dict)  # column -> (column, its type, seen)
    schemas: dict[str, int] = field(default_factory=dict)  # writer schema (id, for registry formats) -> messages
    conflicts: list[Conflict] = field(default_factory=list)
    # Whether a value a column cannot hold may widen it: for JSON, the values are all there is;
    # with a writer schema, only a wider type in the schema may (a value beyond it is corrupt).
    widen_by_value: bool = True


def validate(values: list[bytes | None], max_message_bytes: int) -> tuple[list[int], list[Bad]]:
    """Indexes of the messages worth parsing; the empty and the oversized ones as dead letters."""
    try:
        lengths = list(map(len, values))
    except TypeError:  # a message without a value: looked at one by one below
        pass
    else:
        if not values or (min(lengths) > 0 and max(lengths) <= max_message_bytes):
            return list(range(len(values))), []  # the usual batch, checked in C
    ok: list[int] = []
    bad: list[Bad] = []
    for i, value in enumerate(values):
        if not value:
            bad.append((i, "validate", "empty message (no value)"))
        elif len(value) > max_message_bytes:
            bad.append((i, "validate", f"message of {len(value)} bytes exceeds max_message_bytes ({max_message_bytes})"))
        else:
            ok.append(i)
    return ok, bad


def extract_columns(objects: list[dict[str, Any]], paths: list[tuple[str, ...]]) -> list[list[Any]]:
    """Values at each path, one list per path aligned with `objects`.

    Shared parents are looked up once: `customer.id` and `customer.name` walk
    `customer` a single time. Comprehensions, not per-value function calls: this
    is the innermost loop of ingestion.
    """
    levels: dict[tuple[str, ...], list[Any]] = {(): objects}

    def at(path: tuple[str, ...]) -> list[Any]:
        found = levels.get(path)
        if found is None:
            parent, key = at(path[:-1]), path[-1]
            if len(path) == 1:
                found = [o.get(key) for o in parent]  # top level: every object is a dict
            else:
                found = [p.get(key) if p.__class__ is dict else None for p in parent]
            levels[path] = found
        return found

    return [at(path) for path in paths]


def _kind_of(value: Any) -> str:
    if isinstance(value, list):
        return "an array"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, (int, float)):
        return "a number"
    return "null"


class JsonFormat:
    """Schemaless JSON objects, also in the registry's wire format (its 5-byte header is skipped:
    no JSON text starts with a NUL byte)."""

    name = "json"

    def parse(self, values: list[bytes | None], max_message_bytes: int, mapping: Mapping) -> Parsed:
        loads, decode_error = orjson.loads, orjson.JSONDecodeError
        ok, bad = validate(values, max_message_bytes)
        good: list[int] = []
        objects: list[dict[str, Any]] = []
        for i in ok:
            value = values[i]
            if value[0] == 0 and len(value) >= 5:
                value = value[5:]
            try:
                obj = loads(value)
            except decode_error as exc:
                text = str(exc)
                low = text.lower()
                bad.append((i, "decode", f"invalid UTF-8: {text}" if "utf-8" in low or "surrogate" in low
                            else f"invalid JSON: {text}"))
                continue
            if type(obj) is not dict:
                bad.append((i, "decode", f"JSON value is {_kind_of(obj)}, not an object"))
                continue
            good.append(i)
            objects.append(obj)
        return Parsed(good, bad, lambda columns: extract_columns(objects, [c.source for c in columns]),
                      proposed=new_fields(objects, mapping))


# ---- new JSON fields ----------------------------------------------------------------------------


def _tree(paths: set[tuple[str, ...]]) -> dict[str, Any]:
    """Known source paths as nested dicts; None marks a leaf (whatever lies under it is its value)."""
    root: dict[str, Any] = {}
    for path in sorted(paths, key=len):
        node = root
        for key in path[:-1]:
            child = node.setdefault(key, {})
            if child is None:
                break
            node = child
        else:
            node[path[-1]] = None
    return root


def _unknown(objects: list[Any], node: dict[str, Any], prefix: tuple[str, ...], out: list[dict[str, Any]]) -> None:
    """Fold the keys `node` does not know, with their values, into `out` (one dict per object)."""
    known = node.keys()
    for j, obj in enumerate(objects):
        if obj.__class__ is not dict or obj.keys() <= known:
            continue
        for key in obj.keys() - known:
            target = out[j]
            for step in prefix:
                target = target.setdefault(step, {})
            target[key] = obj[key]
    for key, child in node.items():
        if child:
            _unknown([o.get(key) if o.__class__ is dict else None for o in objects], child, prefix + (key,), out)


def new_fields(objects: list[dict[str, Any]], mapping: Mapping) -> list[Column]:
    """Columns for the fields these objects carry that the mapping neither reads nor ignores,
    named and typed as inference would; fields seen only as null wait until they hold a value."""
    from appliance.model.inference import infer_mapping

    partial: list[dict[str, Any]] = [{} for _ in objects]
    _unknown(objects, _tree(mapping.sources()), (), partial)
    found = [p for p in partial if p]
    if not found:
        return []
    inferred = infer_mapping(found).columns
    values = extract_columns(found, [c.source for c in inferred])
    names = {c.name for c in mapping.columns}
    out = []
    for col, vals in zip(inferred, values):
        if not any(v is not None for v in vals):
            continue
        name, n = col.name, 2
        while name in names:
            name, n = f"{col.name}_{n}", n + 1
        names.add(name)
        out.append(Column(name, col.type, col.source))
    return out
