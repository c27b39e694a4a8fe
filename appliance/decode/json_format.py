"""JSON messages: schemaless objects, each mapped column's values found by path, and the fields
the mapping does not know yet proposed as new columns (named and typed as inference would)."""

from __future__ import annotations

from typing import Any

import orjson

from appliance.decode.parsed import Bad, Parsed, extract_columns, validate
from appliance.model.mapping import Column, Mapping


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


def parse_objects(values: list[bytes | None], max_message_bytes: int) -> tuple[list[int], list[dict], list[Bad]]:
    """Each message's object: (the indexes of those that are JSON objects, their objects, the others with why).
    A value in the registry's wire format has its 5-byte header skipped (no JSON text starts with a NUL byte)."""
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
    return good, objects, bad


class JsonFormat:
    """Schemaless JSON objects, also in the registry's wire format."""

    name = "json"

    def parse(self, values: list[bytes | None], max_message_bytes: int, mapping: Mapping) -> Parsed:
        good, objects, bad = parse_objects(values, max_message_bytes)
        return _parsed(good, objects, bad, mapping)


class ParsedJson(JsonFormat):
    """Messages parsed already (a routed group's, parsed for their route values: `ingest/routing.py`): `objects`,
    one a value of `values`, are what parsing that very list gives; any other list is parsed (a batch's decode
    looking for the message it fails on)."""

    def __init__(self, values: list[bytes | None], objects: list[dict[str, Any]]) -> None:
        self.values, self.objects = values, objects

    def parse(self, values: list[bytes | None], max_message_bytes: int, mapping: Mapping) -> Parsed:
        if values is not self.values:
            return super().parse(values, max_message_bytes, mapping)
        return _parsed(list(range(len(values))), self.objects, [], mapping)


def _parsed(good: list[int], objects: list[dict[str, Any]], bad: list[Bad], mapping: Mapping) -> Parsed:
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
