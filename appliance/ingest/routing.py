"""A routed stream's batch inside its Spark task: one read of the topic, split by each message's route value.

The task reads its pieces once (`batch.run_items`), takes each message's route value (its value parsed once with
the stream's format, the field looked up; or its key's or a header's text, with no value parsed:
`decode.route_values`),
groups the messages by the table the value names (`model/routes.RouteRule`) and decodes each group with its
route's mapping into that table's files. A JSON message is parsed once: its object, parsed for its route value,
is the one its route's mapping reads (`group`, `json_format.ParsedJson`). A message
without the field, or whose value makes no valid table name, is a dead letter with the reason (stage `route`).

A value naming a table that has no route yet is like a schema change: the task writes nothing and hands back the
new tables with a few of their messages (`TaskResult.new_routes`); the driver records the routes, makes their
tables from those samples and runs the task again (`ingest/routed.py`). So is a route's batch that needs its
table to change (`TaskResult.evolutions`). A message at an offset a table has already committed (an earlier
attempt of this batch was cut between two tables' commits) is not written to it again (`routes.unlanded`).

A routed upsert stream's group is reduced to each key's newest message (`decode.keys`, by `mergeonread.precedence`)
before that skip, and its keys travel back per table (`Router.route_keys`): a key's rows in two route tables are two
keys. A tombstone naming a table not made yet deletes nothing and makes no table.
"""

from __future__ import annotations

import datetime as dt
import time
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from appliance.decode.json_format import ParsedJson
from appliance.decode.keys import Keyed
from appliance.decode.parsed import Bad, MessageFormat
from appliance.decode.route_values import route_values
from appliance.decode.rows import dead_letter_rows, decode_batch
from appliance.ingest.batch import BatchSpec, TaskResult, timestamp_sample
from appliance.kafka.reader import Piece, PieceResult
from appliance.kafka.records import RawBatch
from appliance.mergeonread.keyforms import KeyForm
from appliance.mergeonread.plans import Keys
from appliance.model.changes import Evolution
from appliance.model.columns import KAFKA_OFFSET, KAFKA_PARTITION
from appliance.model.mapping import Mapping
from appliance.model.routes import RouteRule, route_text, unlanded
from appliance.tables.datafiles import TableTarget, in_file_order, table_metadata, write_data_files

SAMPLES = 50  # messages of a new route a task hands back: its mapping is inferred from them
ROUTE_STAGE = "route"  # the dead-letter stage of a message that names no table


def not_taken(rows: pa.Table, committed: dict[int, int] | None) -> pa.Table:
    """The rows of messages a table that committed `committed` has not taken (`model.routes.unlanded`)."""
    if not committed or not rows.num_rows:
        return rows
    keep = [unlanded(committed, p, o) for p, o in zip(rows.column(KAFKA_PARTITION.name).to_pylist(),
                                                        rows.column(KAFKA_OFFSET.name).to_pylist())]
    return rows if all(keep) else rows.filter(pa.array(keep, pa.bool_()))


@dataclass(frozen=True)
class RouteTarget:
    """What a task needs of one route's table: its mapping, where its files go, and the offsets it has taken."""

    mapping: Mapping
    target: TableTarget
    committed: dict[int, int] | None


@dataclass(frozen=True)
class Router:
    """A routed stream's tables as its tasks see them (picklable: it travels to them in the `BatchSpec`)."""

    rule: RouteRule
    routes: dict[str, RouteTarget]  # by table
    refused: dict[str, str]  # tables that cannot be made, and why: their messages are dead letters
    keyed: Keyed | None = None  # a routed upsert stream's key: each route's group reduced to each key's newest

    def write(self, spec: BatchSpec, pieces: list[Piece], raw: RawBatch, results: list[PieceResult],
              ingested_at: dt.datetime, read_seconds: float) -> TaskResult:
        t1 = time.perf_counter()
        messages, size = len(raw), sum(len(v) for v in raw.values if v)
        groups, new, bad, objects = self.split(raw, spec.fmt, spec.max_message_bytes)
        if new:  # written once the driver has made their tables
            return TaskResult(pieces=results, read=pieces, new_routes=new, messages=messages,
                              read_seconds=read_seconds)
        dead = [dead_letter_rows(raw, sorted(bad), ingested_at)]
        rows: dict[str, pa.Table] = {}
        result = TaskResult(pieces=results, read=pieces, messages=messages, bytes=size, read_seconds=read_seconds)
        for table, indexes in groups.items():
            route = self.routes[table]
            # Every message of the group is decoded, even one its table has taken (an attempt cut between two
            # tables' commits): its dead letter, if it makes one, is still owed, as the dead-letter table
            # commits last. Only its row is not written again.
            part, fmt = group(raw, indexes, spec.fmt, objects)
            decoded = decode_batch(part, route.mapping, spec.max_message_bytes, ingested_at, fmt, spec.evolve,
                                   self.keyed)
            if decoded.changes:
                result.route_changes.setdefault(table, set()).update(decoded.changes)
            for schema, n in decoded.schemas.items():
                result.schemas[schema] = result.schemas.get(schema, 0) + n
            if decoded.evolution:
                result.evolutions[table] = decoded.evolution
                continue
            untaken = not_taken(decoded.target, route.committed)
            if self.keyed is not None:
                untaken = self.route_keys(result, table, untaken, not_taken(decoded.deleted, route.committed))
            if untaken.num_rows:
                rows[table] = untaken
            dead.append(decoded.dead_letter)
        if result.evolutions:  # written once those tables have changed
            return result
        t2 = time.perf_counter()
        dead_letters = pa.concat_tables(dead)
        result.routed_files = {table: write_data_files(self.routes[table].target, part) for table, part in rows.items()}
        result.dead_letter_files = write_data_files(spec.dead_letter, dead_letters)
        result.rows = sum(part.num_rows for part in rows.values())
        result.dead_letter_rows = dead_letters.num_rows
        result.timestamps, result.throttle_ms = timestamp_sample(raw.timestamps), raw.throttle_ms
        result.decode_seconds, result.write_seconds = t2 - t1, time.perf_counter() - t2
        return result

    def route_keys(self, result: TaskResult, table: str, rows: pa.Table, deleted: pa.Table) -> pa.Table:
        """An upsert route's rows in its files' order, their keys and those its newest messages delete handed back
        as the index keeps them (`TaskResult.routed_keys`, `routed_deleted`). Its table's index places them."""
        target = self.routes[table].target
        rows = in_file_order(target, rows)
        form = KeyForm.of(table_metadata(target).schema(), self.keyed.columns)
        if rows.num_rows:
            result.routed_keys[table] = Keys.of(form, rows)
        if deleted.num_rows:
            result.routed_deleted[table] = Keys.of(form, deleted)
        return rows

    def split(self, raw: RawBatch, fmt: MessageFormat | None, max_message_bytes: int
              ) -> tuple[dict[str, list[int]], dict[str, tuple[str, list[bytes]]], list[Bad], list | None]:
        """(the messages of each routed table, the tables without a route yet with their value and a sample of
        their messages, the messages that name no table with the reason, and for JSON each message's object,
        parsed already: see `group`)."""
        values, bad, objects = route_values(raw, self.rule, fmt, max_message_bytes)
        groups: dict[str, list[int]] = {}
        new: dict[str, tuple[str, list[bytes]]] = {}
        named: dict[Any, tuple[str | None, str]] = {}
        for i, value in values:
            try:  # by type too: True and 1 are equal keys, and name "true" and "1"
                table, why = named[(value.__class__, value)]
            except KeyError:
                table, why = named[(value.__class__, value)] = self.rule.route(value)
            except TypeError:  # a record or a list: no table, never cached
                table, why = self.rule.route(value)
            if table is None or table in self.refused:
                bad.append((i, ROUTE_STAGE, why or f"table {table}: {self.refused[table]}"))
            elif table in self.routes:
                groups.setdefault(table, []).append(i)
            elif self.keyed is not None and raw.values[i] is None:
                continue  # a tombstone of a table not made yet deletes nothing: it makes no table either
            else:
                sample = new.setdefault(table, (route_text(value) or "", []))[1]
                if len(sample) < SAMPLES:
                    sample.append(raw.values[i])
        return groups, new, bad, objects


def group(raw: RawBatch, indexes: list[int], fmt: MessageFormat | None, objects: list | None
          ) -> tuple[RawBatch, MessageFormat | None]:
    """A route's messages, and the format to decode them with: for JSON, their objects as `split` parsed them
    (`objects`, by the batch's index), not parsed again."""
    part = raw.take(indexes)
    if objects is None:
        return part, fmt
    return part, ParsedJson(part.values, [objects[i] for i in indexes])


def merged_evolutions(tasks: list) -> dict[str, Evolution]:
    """What each route's table must become, over a batch's tasks (or a routed replay's parts: anything with
    `evolutions` by table)."""
    out: dict[str, Evolution] = {}
    for r in tasks:
        for table, evolution in r.evolutions.items():
            out[table] = out.get(table, Evolution()).merged(evolution)
    return out


def merged_new_routes(tasks: list[TaskResult]) -> dict[str, tuple[str, list[bytes]]]:
    """The tables a batch's tasks met without a route, each with its value and its samples."""
    out: dict[str, tuple[str, list[bytes]]] = {}
    for r in tasks:
        for table, (value, sample) in r.new_routes.items():
            out.setdefault(table, (value, []))[1].extend(sample[:SAMPLES - len(out[table][1])])
    return out
