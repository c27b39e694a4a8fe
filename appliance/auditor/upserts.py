"""`floe audit` of an upsert stream: the table against its topic, key by key.

An upsert table holds each key's newest row, not every offset, so it is proven another way: the
messages the topic still holds, from the stream's first offset (or the topic's low watermark) up
to the committed position, are read and decoded as the engine decodes them (without the ones the
dead-letter table holds: those changed nothing), each key's newest message is found, and the table
must hold exactly that: every key once, each at its newest message's offset, no deleted key, and
every message that does not decode in the dead-letter table. Keys whose messages have all left the
topic cannot be checked; they are counted, not trusted. Nothing is written anywhere.

A routed upsert stream's route tables are audited alike, each over only the messages routed to it (each message
routed again by the stream's rule, as its batch did): a key is its table's and its key (`audit_routed_upserts`).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable
from contextlib import closing
from dataclasses import dataclass, field
from typing import Any

import duckdb
import pyarrow as pa

from appliance.auditor.report import AuditReport, PartitionAudit
from appliance.auditor.scans import scan_sql
from appliance.config.settings import Settings
from appliance.core.errors import QueryError
from appliance.decode.formats import format_of
from appliance.decode.keys import Keyed
from appliance.decode.route_values import route_values
from appliance.decode.rows import Decoded, decode_batch
from appliance.kafka.client import KafkaClient, Watermarks
from appliance.kafka.reader import Piece
from appliance.kafka.records import RawBatch
from appliance.mergeonread.precedence import Position, newer
from appliance.model.columns import KAFKA_OFFSET, KAFKA_PARTITION, KAFKA_TIMESTAMP
from appliance.model.keys import key_values
from appliance.model.mapping import Mapping
from appliance.model.routes import RouteRule
from appliance.model.stream import StreamDef
from appliance.query.connection import one_line, open_connection

CHUNK = 200_000  # messages read and decoded at a time
EXAMPLES = 5


@dataclass
class KeyAudit:
    """What the key-by-key check found (counts, and a few examples of each failure)."""

    messages: int = 0  # read from the topic
    keys: int = 0  # in the newest state the retained messages give
    table_keys: int = 0
    twice: list[str] = field(default_factory=list)  # keys held by more than one row
    missing: list[str] = field(default_factory=list)  # a key the messages give, not in the table
    stale: list[str] = field(default_factory=list)  # a key at another offset than its newest message's
    deleted: list[str] = field(default_factory=list)  # a key deleted by its newest message, in the table
    unexplained: list[str] = field(default_factory=list)  # a key in the table that no retained message gives
    unchecked: int = 0  # table keys whose messages all left the topic
    loaded: int = 0  # table keys of rows another writer loaded (no Kafka position) that no message replaced
    undelivered: list[str] = field(default_factory=list)  # messages that do not decode, not dead letters
    truncated: set[int] = field(default_factory=set)  # partitions a truncate event was read from


Decode = Callable[[RawBatch], tuple[list[tuple[Any, Decoded]], list[tuple[int, int]]]]


def audit_upserts(settings: Settings, stream: StreamDef, report: AuditReport, target, dead, mapping: Mapping,
                  committed: dict[int, int], marks: dict[int, Watermarks]) -> KeyAudit:
    fmt, keyed = format_of(stream), Keyed(stream.key, tombstones_delete=not stream.cdc)

    def decode(raw: RawBatch) -> tuple[list[tuple[Any, Decoded]], list[tuple[int, int]]]:
        return [(None, decode_batch(raw, mapping, settings.engine.max_message_bytes, fmt=fmt, evolve=False,
                                    keyed=keyed))], []

    return _audit(settings, stream, report, {None: target}, dead, committed, marks, decode)


def audit_routed_upserts(settings: Settings, stream: StreamDef, report: AuditReport, routes: dict[str, tuple],
                         dead, committed: dict[int, int], marks: dict[int, Watermarks]) -> KeyAudit:
    """A routed upsert stream's route tables (`routes`: each table with the mapping its messages are decoded with),
    each against the messages routed to it alone: each message routed again by the stream's rule
    (`decode.route_values`, `RouteRule.route`), each table's keys its own (a key in two tables is two keys)."""
    rule, fmt = RouteRule.parse(stream.route_by, stream.table), format_of(stream)
    keyed, most = Keyed(stream.key, tombstones_delete=True), settings.engine.max_message_bytes

    def decode(raw: RawBatch) -> tuple[list[tuple[Any, Decoded]], list[tuple[int, int]]]:
        values, bad, _ = route_values(raw, rule, fmt, most)
        undelivered = [(raw.partitions[i], raw.offsets[i]) for i, _, _ in bad]
        groups: dict[str, list[int]] = {}
        for i, value in values:
            table, _ = rule.route(value)
            if table in routes:
                groups.setdefault(table, []).append(i)
            elif table is None or raw.values[i] is not None:  # a tombstone of a table never made deletes nothing
                undelivered.append((raw.partitions[i], raw.offsets[i]))
        return [(table, decode_batch(raw.take(indexes), routes[table][1], most, fmt=fmt, evolve=False, keyed=keyed))
                for table, indexes in sorted(groups.items())], undelivered

    return _audit(settings, stream, report, {t: table for t, (table, _) in routes.items()}, dead, committed, marks,
                  decode)


def _audit(settings: Settings, stream: StreamDef, report: AuditReport, targets: dict[Any, Any], dead,
           committed: dict[int, int], marks: dict[int, Watermarks], decode: Decode) -> KeyAudit:
    """`targets`: the tables by label (None: a stream's one table), whose keys are labelled alike: (table, key)."""
    audit = KeyAudit()
    table: list[tuple[Any, tuple[int, int]]] = []
    with closing(open_connection(settings)) as con:
        dead_offsets = _pairs(con, dead, stream, f"{KAFKA_PARTITION.name}, {KAFKA_OFFSET.name}")
        for label, target in sorted(targets.items(), key=lambda t: t[0] or ""):
            table += [(key if label is None else (label, key), where)
                      for key, where in _table_rows(con, target, stream)]
    newest, lows = _newest(settings, stream, committed, marks, dead_offsets, audit, decode)
    _compare(audit, newest, table, lows)
    _describe(report, audit)
    for p in sorted(set(committed) | set(marks)):
        low = marks[p].low if p in marks else None
        report.partitions.append(PartitionAudit(
            p, stream.start_positions.get(p, 0), committed.get(p, 0), None, low,
            marks[p].high if p in marks else None, sum(1 for _, (q, _) in table if q == p),
            sum(1 for q, _ in dead_offsets if q == p), 0, 0))
    return audit


def _newest(settings: Settings, stream: StreamDef, committed: dict[int, int], marks: dict[int, Watermarks],
            dead_offsets: set[tuple[int, int]], audit: KeyAudit, decode: Decode
            ) -> tuple[dict[Any, tuple[Position, bool]], dict[int, int]]:
    """Each key's newest message in what the topic retains (by `precedence`, as the engine decides it):
    its position, and whether it deletes the key."""
    newest: dict[Any, tuple[Position, bool]] = {}
    lows: dict[int, int] = {}
    with KafkaClient(stream.kafka, group=stream.group, timeout=settings.sample_timeout) as client:
        for p, end in sorted(committed.items()):
            start = max(stream.start_positions.get(p, 0), marks[p].low if p in marks else 0)
            lows[p] = start
            while start < end:
                raw, [result] = client.read(stream.topic, [Piece(p, start, min(end, start + CHUNK))],
                                            settings.engine.fetch_timeout)
                if result.error is not None and result.next_offset == start:
                    raise result.error
                start = result.next_offset
                audit.messages += len(raw)
                keep = [i for i, o in enumerate(raw.offsets) if (p, o) not in dead_offsets]
                groups, undelivered = decode(raw.take(keep))
                audit.undelivered += [f"partition {q} offset {o}" for q, o in undelivered]
                for label, decoded in groups:
                    for q, o in zip(decoded.dead_letter.column(KAFKA_PARTITION.name).to_pylist(),
                                    decoded.dead_letter.column(KAFKA_OFFSET.name).to_pylist()):
                        audit.undelivered.append(f"partition {q} offset {o}")
                    if decoded.truncated is not None:
                        newest = {k: v for k, v in newest.items() if v[1] or v[0].partition != p}
                        audit.truncated.add(p)
                    _merge(newest, decoded.target, stream.key, False, label)
                    _merge(newest, decoded.deleted, stream.key, True, label)
    return newest, lows


def _merge(newest: dict[Any, tuple[Position, bool]], rows, key: tuple[str, ...], deletes: bool, label: Any) -> None:
    """Messages into each key's newest, by the one precedence rule; `label`: their table's (a routed stream's)."""
    stamps = rows.column(KAFKA_TIMESTAMP.name).cast(pa.int64()).to_pylist()
    keys = key_values(rows, key)
    keys = keys if label is None else [(label, k) for k in keys]
    for k, q, o, t in zip(keys, rows.column(KAFKA_PARTITION.name).to_pylist(),
                          rows.column(KAFKA_OFFSET.name).to_pylist(), stamps):
        mine = Position(q, o, t)
        if k not in newest or newer(mine, newest[k][0]):
            newest[k] = (mine, deletes)


def _compare(audit: KeyAudit, newest: dict[Any, tuple[Position, bool]], table: list[tuple[Any, tuple[int, int]]],
             lows: dict[int, int]) -> None:
    held: dict[Any, list[tuple[int, int]]] = defaultdict(list)
    for key, where in table:
        held[key].append(where)
    audit.table_keys = len(held)
    audit.keys = sum(1 for _, gone in newest.values() if not gone)
    for key, places in held.items():
        if len(places) > 1:
            audit.twice.append(f"{key!r} at {sorted(places, key=repr)}")
        want = newest.get(key)
        if want is None:
            p, o = places[0]
            if p is None or o is None:
                audit.loaded += 1  # loaded by another writer, never updated since: nothing to check it against
            elif o < lows.get(p, 0):
                audit.unchecked += 1  # its messages left the topic: nothing to check it against
            else:
                audit.unexplained.append(f"{key!r} at partition {p} offset {o}")
        elif want[1]:
            audit.deleted.append(f"{key!r} at {places[0]}")
        elif (want[0].partition, want[0].offset) not in places:
            audit.stale.append(f"{key!r}: the table holds {places[0]}, its newest message is "
                               f"{(want[0].partition, want[0].offset)}")
    for key, (where, gone) in newest.items():
        if gone or key in held:
            continue
        if audit.truncated and where.partition not in audit.truncated:
            audit.unchecked += 1  # a truncate elsewhere may have removed it, depending on the batches
        else:
            audit.missing.append(f"{key!r} (newest message at {(where.partition, where.offset)})")


def _describe(report: AuditReport, audit: KeyAudit) -> None:
    for title, found in (("keys held by more than one row", audit.twice),
                         ("keys missing from the table", audit.missing),
                         ("keys not at their newest message's offset", audit.stale),
                         ("deleted keys still in the table", audit.deleted),
                         ("keys in the table that no retained message gives", audit.unexplained),
                         ("messages that do not decode and are not in the dead-letter table", audit.undelivered)):
            if found:
                report.problems.append(f"{len(found):,} {title}, e.g. {'; '.join(found[:EXAMPLES])}")
    report.notes.append(f"{audit.messages:,} retained messages read; {audit.keys:,} keys in their newest state, "
                        f"{audit.table_keys:,} in the table")
    if audit.loaded:
        report.notes.append(f"{audit.loaded:,} keys of the table are rows another writer loaded that no retained "
                            "message replaces: not checked")
    if audit.unchecked:
        report.notes.append(f"{audit.unchecked:,} keys of the table have no message left in the topic (their history "
                            "expired): not checked")
    if audit.truncated:
        report.notes.append(f"truncate events read in partition(s) {sorted(audit.truncated)}: a key of another "
                            "partition missing from the table is counted unchecked (which batch a truncate fell in "
                            "decides)")


def _pairs(con, table, stream: StreamDef, columns: str) -> set[tuple[int, int]]:
    sql = scan_sql(table, stream, columns)
    return set() if sql is None else set(map(tuple, _fetch(con, table, sql)))


def _table_rows(con, table, stream: StreamDef) -> list[tuple[Any, tuple[int, int]]]:
    keys = ", ".join(f'"{k}"' for k in stream.key)
    sql = scan_sql(table, stream, f"{keys}, {KAFKA_PARTITION.name}, {KAFKA_OFFSET.name}")
    if sql is None:
        return []
    arrow = con.execute(sql).to_arrow_table()
    return list(zip(key_values(arrow, stream.key), zip(arrow.column(KAFKA_PARTITION.name).to_pylist(),
                                                       arrow.column(KAFKA_OFFSET.name).to_pylist())))


def _fetch(con, table, sql: str) -> list[tuple]:
    try:
        return con.execute(sql).fetchall()
    except duckdb.Error as exc:
        raise QueryError(f"reading {'.'.join(table.name())}: {one_line(exc)}") from None
