"""Debezium change events: the row is the event's `after` (for a delete, its key from `before`).

An event is an envelope: `op` (`c` create, `r` snapshot read, `u` update, `d` delete, `t`
truncate), `before`, `after`, `source` (the database position and time) and `ts_ms`. In JSON it
may be wrapped by Kafka Connect's JsonConverter as `{"schema": ..., "payload": <envelope>}`; in
Avro and Protobuf it is a registered record whose `after` and `before` are the table's row. The
stream's columns are the row's (its mapping's sources are relative to `after`), never the
envelope's; with `cdc_columns`, the op, the event's time and the source position are kept too,
under the source path `__debezium` (columns `_cdc_op`, `_cdc_ts`, `_cdc_position`).
"""

from __future__ import annotations

from typing import Any

import orjson
import pyarrow as pa

from appliance.decode.json_format import new_fields
from appliance.decode.parsed import MessageFormat, Op, Parsed, extract_columns, validate
from appliance.model.mapping import Column, Mapping
from appliance.model.names import snake_case

OPS = {"c": Op.UPSERT, "r": Op.UPSERT, "u": Op.UPSERT, "d": Op.DELETE, "t": Op.TRUNCATE}
META = "__debezium"  # the source path of the envelope's own fields, for the _cdc_* columns
CDC_COLUMNS = (Column("_cdc_op", "string", (META, "op")), Column("_cdc_ts", "timestamptz", (META, "ts")),
               Column("_cdc_position", "string", (META, "position")))
# Where connectors put their source position: PostgreSQL, SQL Server, Oracle, Db2; MySQL's is file:pos.
_POSITIONS = ("lsn", "change_lsn", "scn", "commit_lsn")


def position(source: dict[str, Any] | None) -> str | None:
    """The source database's position of the event, as its connector names it."""
    if not isinstance(source, dict):
        return None
    for name in _POSITIONS:
        if source.get(name) is not None:
            return str(source[name])
    if source.get("file") is not None and source.get("pos") is not None:
        return f"{source['file']}:{source['pos']}"
    return None


def _meta(op: str, source: Any, ts_ms: Any) -> dict[str, Any]:
    ts = source.get("ts_ms") if isinstance(source, dict) and source.get("ts_ms") is not None else ts_ms
    return {"op": op, "ts": ts, "position": position(source)}


class DebeziumFormat:
    """Change events around another format's rows (JSON when `inner` is None; Avro or Protobuf through
    the registry). `key`: the key columns, read from `before` for a delete."""

    name = "debezium"

    def __init__(self, inner: MessageFormat | None = None, key: tuple[str, ...] = (), cdc_columns: bool = False
                 ) -> None:
        self.inner = inner
        self.key = key
        self.cdc_columns = cdc_columns

    def parse(self, values: list[bytes | None], max_message_bytes: int, mapping: Mapping) -> Parsed:
        if self.inner is None or self.inner.name == "json":
            return self._json(values, max_message_bytes, mapping)
        return self._registered(values, max_message_bytes, mapping)

    def _keys(self, mapping: Mapping) -> list[Column]:
        return [c for c in mapping.columns if c.name in self.key]

    # ---- JSON ------------------------------------------------------------------------------------

    def _json(self, values: list[bytes | None], max_message_bytes: int, mapping: Mapping) -> Parsed:
        ok, bad = validate(values, max_message_bytes)
        keys = self._keys(mapping)
        good: list[int] = []
        rows: list[dict[str, Any]] = []
        ops: list[Op] = []
        for i in ok:
            value = values[i]
            try:
                event = orjson.loads(value[5:] if value[0] == 0 and len(value) >= 5 else value)
            except orjson.JSONDecodeError as exc:
                bad.append((i, "decode", f"invalid JSON: {exc}"))
                continue
            row, why = self._row(unwrapped(event))
            if why:
                bad.append((i, "decode", why))
                continue
            good.append(i)
            rows.append(row[0])
            ops.append(row[1])
        upserts = [r for r, op in zip(rows, ops) if op is Op.UPSERT]
        key_names = {k.name for k in keys}

        def values(columns: list[Column]) -> list[list[Any]]:
            # A delete's row is `before`: only its key matters (a bad value elsewhere must not stop it).
            found = extract_columns(rows, [c.source for c in columns])
            return [vals if c.name in key_names or c.source[0] == META else
                    [v if op is Op.UPSERT else None for v, op in zip(vals, ops)] for c, vals in zip(columns, found)]

        return Parsed(good, bad, values, proposed=[c for c in new_fields(upserts, mapping) if c.source[0] != META],
                      ops=ops)

    def _row(self, event: Any) -> tuple[tuple[dict[str, Any], Op], str]:
        if not isinstance(event, dict) or "op" not in event:
            return ({}, Op.UPSERT), "not a Debezium change event: a JSON object with op, before and after"
        op = OPS.get(event["op"])
        if op is None:
            return ({}, Op.UPSERT), f"Debezium op {event['op']!r} is not one of c, r, u, d, t"
        row: Any = {}
        if op is not Op.TRUNCATE:
            row = event.get("after" if op is Op.UPSERT else "before")
        if not isinstance(row, dict):
            side = "after" if op is Op.UPSERT else "before"
            return ({}, op), f"Debezium {event['op']!r} event without its {side!r} row"
        if self.cdc_columns:
            row = {**row, META: _meta(event["op"], event.get("source"), event.get("ts_ms"))}
        return (row, op), ""

    # ---- Avro and Protobuf -----------------------------------------------------------------------

    def _registered(self, values: list[bytes | None], max_message_bytes: int, mapping: Mapping) -> Parsed:
        envelope = Mapping(tuple(Column(c.name, c.type, ("after", *c.source)) for c in mapping.columns
                                 if c.source[0] != META))
        parsed = self.inner.parse(values, max_message_bytes, envelope)
        n = len(parsed.good)
        [codes, source_ts, ts_ms, *where] = [_list(v, n) for v in parsed.values([
            Column("op", "string", ("op",)), Column("ts", "long", ("source", "ts_ms")),
            Column("ts", "long", ("ts_ms",)),
            *(Column(p, "string", ("source", p)) for p in (*_POSITIONS, "file", "pos"))])]
        keep, ops = [], []
        for j, code in enumerate(codes):
            op = OPS.get(code)
            if op is None:
                parsed.bad.append((parsed.good[j], "decode", f"not a Debezium change event: op is {code!r}"))
            else:
                keep.append(j)
                ops.append(op)
        keys = self._keys(mapping)
        before = dict(zip((k.name for k in keys), (_list(v, n) for v in parsed.values(
            [Column(k.name, k.type, ("before", *k.source)) for k in keys]))))
        metas = [_meta(codes[j], dict(zip((*_POSITIONS, "file", "pos"), (w[j] for w in where))),
                 source_ts[j] if source_ts[j] is not None else ts_ms[j]) for j in keep]
        after_values = parsed.values

        def values_of(columns: list[Column]) -> list[list[Any]]:
            wanted = [Column(c.name, c.type, ("after", *c.source)) for c in columns]
            found = [_list(v, n) for v in after_values(wanted)]
            out = []
            for c, vals in zip(columns, found):
                if c.source[0] == META:
                    out.append([m[c.source[1]] for m in metas])
                    continue
                gone = before.get(c.name)
                out.append([(gone[j] if gone is not None else None) if op is Op.DELETE else
                            (None if op is Op.TRUNCATE else vals[j]) for j, op in zip(keep, ops)])
            return out

        moved = {j: k for k, j in enumerate(keep)}
        for conflict in parsed.conflicts:
            conflict.positions = [moved[p] for p in conflict.positions if p in moved]
        parsed.good = [parsed.good[j] for j in keep]
        parsed.values, parsed.ops = values_of, ops
        parsed.proposed = row_columns_of(parsed.proposed, {c.name for c in mapping.columns})
        return parsed


def row_columns_of(envelope: list[Column] | tuple[Column, ...], taken: set[str] | None = None) -> list[Column]:
    """The columns of an envelope's `after` as the row's: sources relative to it, names made from them
    (as they would be for the row's own schema), none taking a name in `taken`."""
    taken = set(taken or ())
    out = []
    for c in envelope:
        if c.source[0] != "after" or len(c.source) < 2:
            continue
        base = "_".join(snake_case(part) for part in c.source[1:])
        name, n = base, 2
        while name in taken:
            name, n = f"{base}_{n}", n + 1
        taken.add(name)
        out.append(Column(name, c.type, c.source[1:]))
    return out


def unwrapped(event: Any) -> Any:
    """A JSON event without Kafka Connect's schema wrapper."""
    if isinstance(event, dict) and "payload" in event and "schema" in event and "op" not in event:
        return event["payload"]
    return event


def _list(values: Any, n: int) -> list[Any]:
    if values is None:
        return [None] * n
    if isinstance(values, (pa.Array, pa.ChunkedArray)):
        return values.to_pylist()
    return list(values)
