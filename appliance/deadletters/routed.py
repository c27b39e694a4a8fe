"""`floe dlq replay` of a routed stream: each dead letter routed again by the stream's rule, decoded with its route's
mapping as the route's table makes it now, and moved there.

The stream has one dead-letter table for all its routes, and its position is that table's (`ingest/routed.py`),
so every dead letter is under it. A task reads its dead letters back (`tasks.read_dead_letters`), splits them by
route as a batch's task does (`ingest/routing.Router.split`) and decodes each route's group against its table; a
group whose messages ask for a schema change writes nothing, and the driver commits the change to that route's
table (as a batch does) and runs the task again. What still fails stays, with its reason: a message without the
field, a value that names no valid table or a refused one, one that names a table the stream has not made (the
running stream makes it from the next message of that value), one that still does not decode. The moves of one
replay, into every route table they reach, and the dead-letter table's position deletes swap in as one catalog
transaction (`moves.commit_routed_move`), so no reader finds a message in two tables or in none.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import time
from collections import Counter
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pyarrow as pa

from appliance.core.errors import FloeError, SchemaError
from appliance.core.failpoints import failpoint
from appliance.deadletters.moves import Move, check_together, commit_routed_move
from appliance.deadletters.report import ReplayReport
from appliance.deadletters.selection import Reading, Selection, select
from appliance.deadletters.tasks import read_dead_letters, reason, run_parts, split
from appliance.decode.formats import format_of
from appliance.decode.keys import Keyed
from appliance.decode.parsed import MessageFormat
from appliance.decode.rows import dead_letter_rows, decode_batch
from appliance.ingest.routed import routed_changes
from appliance.ingest.routing import ROUTE_STAGE, Router, RouteTarget, group, merged_evolutions
from appliance.ingest.stream_schema import StreamSchema
from appliance.mergeonread.plans import KeyedRows, Keys
from appliance.model.changes import Evolution
from appliance.model.columns import ERROR_MESSAGE, ERROR_STAGE
from appliance.model.mapping import Mapping
from appliance.model.routes import Route, RouteRule, route_stream
from appliance.model.stream import StreamDef
from appliance.spark.session import parallelism
from appliance.state.store import StateStore
from appliance.tables.catalog import Catalog
from appliance.tables.commits import commit_lock
from appliance.tables.datafiles import TableTarget, delete_files, write_data_files
from appliance.tables.snapshots import committed_offsets

MAX_EVOLUTIONS = 3
UNMADE = "its value names a table the stream has not made yet: the running stream makes it from the next message " \
         "of that value; replay again then"


@dataclass(frozen=True)
class RoutedSpec:
    stream: str
    router: Router
    dead_letter: TableTarget
    max_message_bytes: int
    fmt: MessageFormat | None
    evolve: bool
    write: bool = True  # False: a dry run, nothing written


@dataclass
class RoutedPart:
    """What one task did with its dead letters."""

    parts: dict[str, np.ndarray]  # the dead letters it was given: data file -> positions
    moved: int = 0
    stayed: int = 0
    reasons: Counter = field(default_factory=Counter)
    evolutions: dict[str, Evolution] = field(default_factory=dict)  # set: nothing written, these tables first
    routed_files: dict[str, list] = field(default_factory=dict)  # by route table
    dead_letter_files: list = field(default_factory=list)
    # A routed upsert stream's: each route table's rows' keys (in its files' order) and the keys its messages delete.
    routed_keys: dict[str, Keys] = field(default_factory=dict)
    routed_deleted: dict[str, Keys] = field(default_factory=dict)

    def files(self) -> list:
        return [f for found in self.routed_files.values() for f in found] + self.dead_letter_files


def replay_part(spec: RoutedSpec, parts: dict[str, np.ndarray], at: dt.datetime) -> RoutedPart:
    raw = read_dead_letters(spec.dead_letter.io_properties, parts)
    groups, _, bad, objects = spec.router.split(raw, spec.fmt, spec.max_message_bytes)
    placed = {i for indexes in groups.values() for i in indexes} | {b[0] for b in bad}
    bad += [(i, ROUTE_STAGE, UNMADE) for i in range(len(raw)) if i not in placed]
    out = RoutedPart(parts)
    rows: dict[str, pa.Table] = {}
    dead = [dead_letter_rows(raw, sorted(bad), at)]
    keyed = spec.router.keyed
    for table, indexes in groups.items():
        part, fmt = group(raw, indexes, spec.fmt, objects)
        decoded = decode_batch(part, spec.router.routes[table].mapping, spec.max_message_bytes, at, fmt, spec.evolve,
                               keyed)
        if decoded.evolution:
            out.evolutions[table] = decoded.evolution
            continue
        # an upsert route's: each key's newest, in its files' order, with the keys (older messages of a key move too)
        rows[table] = decoded.target if keyed is None else spec.router.route_keys(out, table, decoded.target,
                                                                              decoded.deleted)
        dead.append(decoded.dead_letter)
    if out.evolutions:
        return out
    dead_letters = pa.concat_tables(dead)
    out.moved, out.stayed = len(raw) - dead_letters.num_rows, dead_letters.num_rows
    out.reasons = Counter(reason(s, m) for s, m in zip(dead_letters.column(ERROR_STAGE.name).to_pylist(),
                                                       dead_letters.column(ERROR_MESSAGE.name).to_pylist()))
    if spec.write:
        out.routed_files = {t: write_data_files(spec.router.routes[t].target, part) for t, part in rows.items()
                            if part.num_rows}
        out.dead_letter_files = write_data_files(spec.dead_letter, dead_letters)
    return out


class RoutedReplay:
    """One replay of a routed stream's dead letters: its routes' tables and schemas, the decoding, the move."""

    def __init__(self, reading: Reading, state: StateStore, catalog: Catalog, stream: StreamDef) -> None:
        settings = reading.settings
        self.reading, self.settings, self.stream, self.catalog = reading, settings, stream, catalog
        self.rule = RouteRule.parse(stream.route_by, stream.table)
        routes = state.routes(stream.name).values()
        self.refused = {r.table: r.refused for r in routes if r.refused}
        self.tables = {r.table: catalog.table(r.table) for r in routes if not r.refused}
        self.schemas = {r.table: StreamSchema(settings, state, route_stream(stream, r), _recorder(state, r))
                        for r in routes if not r.refused}
        self.mappings = {t: self.schemas[t].mapping(table) for t, table in self.tables.items()}

    def run(self, where: str | None, dry_run: bool, spark) -> ReplayReport:
        started = time.monotonic()
        dead_letter = self.catalog.table(self.stream.dead_letter_table)
        if not dry_run:
            check_together(dead_letter)
        # Its anchor: every dead letter of a batch is committed with the stream's position, none past it.
        chosen = select(self.reading, dead_letter, self.stream.created_at, where,
                        committed_offsets(dead_letter, self.stream.id) or {})
        report = ReplayReport(self.stream.name, dry_run, selected=len(chosen), waiting=chosen.waiting, routed=True)
        if not len(chosen):
            return report
        if spark is None:
            from appliance.spark.session import running_session, spark_session

            spark = running_session() or spark_session(self.settings)
        results = self._decode(spark, dead_letter, chosen, dry_run)
        report.tally(results)
        if dry_run:
            return report
        report.superseded = self._move(dead_letter, chosen, results)
        report.moved -= report.superseded
        report.seconds = time.monotonic() - started
        return report

    def _spec(self, dead_letter, dry_run: bool) -> RoutedSpec:
        keyed = Keyed(self.stream.key) if self.stream.upserts else None
        router = Router(self.rule, {t: RouteTarget(self.mappings[t], TableTarget.of(table), None)
                                    for t, table in self.tables.items()}, dict(self.refused), keyed)
        return RoutedSpec(self.stream.name, router, TableTarget.of(dead_letter), self.settings.engine.max_message_bytes,
                          format_of(self.stream), self.stream.evolves, write=not dry_run)

    def _decode(self, spark, dead_letter, chosen: Selection, dry_run: bool) -> list[RoutedPart]:
        """Every selected dead letter routed and decoded (and, unless a dry run, written); the schema changes the
        routes' tables ask for committed first (a dry run's staged only)."""
        # an upsert stream's: a key's messages in one task, as a batch reads all of a partition in one
        tasks = list(chosen.by_partition().values()) if self.stream.upserts else split(chosen.positions,
                                                                                       parallelism(spark))
        results: list[RoutedPart] = []
        for _ in range(MAX_EVOLUTIONS + 1):
            done = run_parts(spark, replay_part, self._spec(dead_letter, dry_run), tasks)
            failed = next((r for r in done if isinstance(r, FloeError)), None)
            ok = [r for r in done if isinstance(r, RoutedPart)]
            if failed is not None:
                delete_files(dead_letter, [f.file_path for r in results + ok for f in r.files()])
                raise failed
            results += [r for r in ok if not r.evolutions]
            again = [r for r in ok if r.evolutions]
            if not again:
                return results
            for table, evolution in merged_evolutions(again).items():
                schema = self.schemas[table]
                if dry_run:
                    self.tables[table], self.mappings[table] = schema.staged(self.tables[table], evolution)
                else:
                    self.tables[table] = schema.evolve(self.tables[table], evolution)
                    self.mappings[table] = schema.mapping(self.tables[table])
            tasks = [r.parts for r in again]
        raise SchemaError(f"stream {self.stream.name}: the dead letters still ask for schema changes after "
                          f"{MAX_EVOLUTIONS} of them")

    def _move(self, dead_letter, chosen: Selection, results: list[RoutedPart]) -> int:
        """The move committed; how many dead letters a newer row of their key beat (they stay)."""
        changes = routed_changes(results, self.stream.upserts)
        key = tuple(self.stream.key) if self.stream.upserts else ()
        failpoint("replay_before_commit", self.stream.dead_letter_table)
        try:
            with ExitStack() as locks:  # in the order of their names, as a routed batch takes them
                for name in sorted([*changes, self.stream.dead_letter_table]):
                    locks.enter_context(commit_lock(self.settings, name))
                moves = {t: (self.tables[t].refresh(), _part(change, chosen, key, self.settings.home))
                         for t, change in changes.items()}
                return commit_routed_move(moves, dead_letter.refresh(), chosen.positions,
                                          [f for r in results for f in r.dead_letter_files])
        except BaseException:
            delete_files(dead_letter, [f.file_path for r in results for f in r.files()])
            raise


def _part(change: list | KeyedRows, chosen: Selection, key: tuple[str, ...], home: Path) -> Move:
    """A route table's part of the move: its files, and an upsert table's keys."""
    if isinstance(change, KeyedRows):
        return Move(chosen.positions, change.files, keyed=change, key_columns=key, home=home,
                    taken_at=chosen.messages)
    return Move(chosen.positions, change)


def _recorder(state: StateStore, route: Route) -> Callable[[Mapping], None]:
    """Where a route's mapping is shown as its table makes it: its own row (as the engine's runner records it)."""
    return lambda mapping: state.update_route(dataclasses.replace(route, mapping=mapping))
