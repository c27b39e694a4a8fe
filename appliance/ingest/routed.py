"""A routed stream's batches: one topic, each message into the table a field of it names, exactly once.

A step is a `StreamRunner`'s (plan, one Spark job, commit, record) over several tables: the tasks split the
messages by route (`ingest/routing.py`). Tables that a batch meets for the first time are recorded as routes in
the state database before anything is written, made with a mapping inferred from their own messages
(`route_tables`), and the tasks that met them run again; so are those whose messages need a route's table to
evolve first.

Exactly once: every table's snapshot carries the batch's end offsets under the stream's id. A batch commits each
route's table it has rows for (in the order of their names), then always the dead-letter table, even with no file:
it is the anchor, its offsets say where the next batch reads (`Committed.read_from`). On Floe's SQL catalog
(SQLite, PostgreSQL) those commits swap in as one catalog transaction: every table moves or none does. Where the catalog
has no such transaction (a REST catalog), they commit one after the other in that order, and a kill between two
leaves some route tables ahead of the anchor; the batch is then read again from the anchor, and a message is
written to its table only at an offset that table has not committed (`routes.unlanded`), so the re-read fills the
other tables only. A route's table that never committed has taken nothing, and no message naming it came before
its route was recorded.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections import Counter
from contextlib import ExitStack
from dataclasses import dataclass

from pyiceberg.table import Table

from appliance.core.clock import now
from appliance.core.errors import FloeError, SchemaError
from appliance.core.failpoints import failpoint
from appliance.core.vocabulary import EventKind, EventLevel
from appliance.ingest.batch import BatchResult, BatchSpec
from appliance.ingest.batch_commit import Snapshots, StreamTables
from appliance.ingest.indexes import index_for
from appliance.ingest.planning import Committed, advance
from appliance.ingest.route_tables import make_table, route_mapping
from appliance.ingest.routing import Router, RouteTarget, merged_evolutions, merged_new_routes
from appliance.ingest.runner import MAX_EVOLUTIONS, BatchOutcome, Prepared, StreamRunner
from appliance.ingest.stream_schema import StreamSchema
from appliance.mergeonread.commit import checkpoint, commit_upsert
from appliance.mergeonread.index import KeyIndex
from appliance.mergeonread.plans import KeyedRows, Keys
from appliance.model.mapping import Mapping
from appliance.model.routes import Route, RouteRule, route_stream
from appliance.tables.commits import commit_files, commit_lock
from appliance.tables.fastpath.sql_catalog import FloeSqlCatalog
from appliance.tables.snapshots import committed_offsets

log = logging.getLogger(__name__)

NO_COLUMNS = Mapping.of_table(())
TOGETHER = True  # on Floe's SQL catalog, a batch's tables in one catalog transaction (tests turn it off)


@dataclass
class RouteTable:
    """A route's table as this engine last committed or loaded it, its schema and the offsets it holds."""

    route: Route
    table: Table
    schema: StreamSchema
    committed: dict[int, int] | None
    index: KeyIndex | None = None  # a routed upsert stream's: this table's keys (`index_for`, by stream and table)


class RoutedRunner(StreamRunner):
    """Runs the batches of a routed stream. Not thread-safe: one worker thread owns it."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.rule = RouteRule.parse(self.stream.route_by, self.stream.table)
        self.routes: dict[str, RouteTable] = {}
        self.refused: dict[str, str] = {}

    def _load(self) -> None:
        dead = self.catalog.table(self.stream.dead_letter_table)
        self.tables = StreamTables(dead, dead)  # the dead-letter table is the anchor: no target of its own
        anchor = committed_offsets(dead, self.stream.id)
        self.committed = Committed(anchor, anchor)
        self.routes, self.refused = {}, {}
        for route in self.state.routes(self.stream.name).values():
            self._open(route)

    def _open(self, route: Route) -> None:
        """The route's table loaded (made, if a kill came between recording it and making it), or its refusal."""
        if route.refused:
            self.refused[route.table] = route.refused
            return
        try:
            table = make_table(self.settings, self.catalog, self.state, self.stream, route)
        except FloeError as exc:
            if exc.retryable:
                raise
            self._refuse(route, str(exc))
            return
        schema = StreamSchema(self.settings, self.state, route_stream(self.stream, route),
                              lambda mapping: self.state.update_route(dataclasses.replace(route, mapping=mapping)))
        index = index_for(self.settings.home, route_stream(self.stream, route), table) if self.stream.upserts else None
        self.routes[route.table] = RouteTable(route, table, schema, committed_offsets(table, self.stream.id), index)

    def _refuse(self, route: Route, why: str) -> None:
        self.state.update_route(dataclasses.replace(route, refused=why))
        self.refused[route.table] = why
        self.state.add_event(EventKind.ROUTE_REFUSED, f"value {route.value!r} of {self.rule.field} names table "
                             f"{route.table}, which cannot be made: {why}; its messages go to "
                             f"{self.stream.dead_letter_table}", self.stream.name, EventLevel.WARNING, route.table)

    def prepare(self) -> Prepared | None:
        prepared = super().prepare()
        if prepared is not None:  # another client may have changed a table's schema: this batch follows it
            self.tables.dead_letter = self.tables.target  # the anchor, made current by the runner's prepare
            for rt in self.routes.values():
                rt.table = self.catalog.current(rt.table)
        return prepared

    def spec(self) -> BatchSpec:
        stream, engine, dead = self.stream, self.settings.engine, self._target(self.tables.dead_letter)
        router = Router(self.rule, {name: RouteTarget(rt.schema.mapping(rt.table), self._target(rt.table),
                                                      rt.committed) for name, rt in self.routes.items()},
                        dict(self.refused), self._keyed)
        return BatchSpec(
            stream=stream.name, stream_id=stream.id, topic=stream.topic, kafka=stream.kafka, group=stream.group,
            mapping=NO_COLUMNS, target=dead, dead_letter=dead, landed={},
            max_message_bytes=engine.max_message_bytes, fetch_timeout=engine.fetch_timeout,
            fmt=self._format, evolve=stream.evolves, router=router,
        )

    def finish(self, prepared: Prepared, result: BatchResult) -> BatchOutcome:
        """New routes and schema changes first (their tasks run again), then the commits, the anchor's last."""
        plan = prepared.plan
        for _ in range(MAX_EVOLUTIONS):
            redo = [r for r in result.tasks if r.new_routes or r.evolutions]
            if not redo:
                break
            self._add_routes(merged_new_routes(redo), plan.start)
            for table, evolution in merged_evolutions(redo).items():
                rt = self.routes[table]
                rt.table = rt.schema.evolve(rt.table, evolution)
            failpoint("after_schema_commit")
            result = BatchResult([r for r in result.tasks if not (r.new_routes or r.evolutions)]
                                 + self._run([r.read for r in redo]).tasks)
        if any(r.new_routes or r.evolutions for r in result.tasks):
            raise SchemaError(f"stream {self.stream.name}: the batch still asks for new tables or schema changes "
                              f"after {MAX_EVOLUTIONS} rounds of them; it will be read again")
        failpoint("before_commit")
        offsets, read_errors = advance(plan.start, result.pieces)
        snapshot, tables = self._commit(offsets, result)
        self.committed = Committed(dict(offsets), dict(offsets))
        if read_errors:
            self.state.add_event(EventKind.PARTIAL_BATCH,
                                 "committed what was read; " + "; ".join(map(str, read_errors)),
                                 self.stream.name, EventLevel.WARNING)
        self._report(result)
        outcome = BatchOutcome(int(result.total("messages")), int(result.total("rows")),
                               int(result.total("dead_letter_rows")), self.lag(), True, result.newest_timestamp)
        taken: Counter = Counter()
        for r in result.tasks:
            for table, files in r.routed_files.items():
                taken[table] += sum(f.record_count for f in files)
        self._record(outcome, result, Snapshots(None, snapshot), offsets, prepared.started_at,
                     time.monotonic() - prepared.started, route_tables=tables, table_rows=dict(taken))
        return outcome

    def _report(self, result: BatchResult) -> None:
        """Each route table's schema changes as its own (its table named); the writer schemas as the stream's."""
        changes: dict[str, set] = {}
        for r in result.tasks:
            for table, found in r.route_changes.items():
                changes.setdefault(table, set()).update(found)
        for table, found in sorted(changes.items()):
            self.routes[table].schema.report(found, {})
        self.schema.report(result.changes, result.schemas)

    def _add_routes(self, new: dict[str, tuple[str, list[bytes]]], start: dict[int, int]) -> None:
        """Each new table recorded as a route (before anything is written to it), then made."""
        for table, (value, sample) in sorted(new.items()):
            if table in self.routes or table in self.refused:
                continue
            route = Route(self.stream.name, table, value, NO_COLUMNS, now(), dict(start))
            try:
                route = dataclasses.replace(route, mapping=route_mapping(self.stream, sample))
            except FloeError as exc:
                if exc.retryable:
                    raise
                route = dataclasses.replace(route, refused=f"no mapping: {exc}")
            told = None if route.refused else \
                f"value {value!r} of {self.rule.field} -> {table} ({len(route.mapping.columns)} columns)"
            self.state.add_route(route, told)
            self._open(self.state.routes(self.stream.name)[table])  # as recorded: an earlier attempt's stays

    def _commit(self, offsets: dict[int, int], result: BatchResult) -> tuple[int | None, int]:
        """Each route's table with rows (or, upserting, keys to delete), in the order of their names, then the
        anchor; its snapshot id and how many route tables committed. On Floe's SQL catalog in one catalog transaction
        (every table moves or none does); elsewhere one after the other."""
        changes = routed_changes(result.tasks, keyed=self.stream.upserts)
        snapshot = self._commit_all(changes, offsets, result.dead_letter_files)
        for table in sorted(changes):  # a few of each index's shards, the commit locks free again
            if self.routes[table].index is not None:
                checkpoint(self.routes[table].index)
        return snapshot, len(changes)

    def _commit_all(self, changes: dict[str, list | KeyedRows], offsets: dict[int, int], dead_files: list
                    ) -> int | None:
        tables = sorted(changes)
        dead = self.tables.dead_letter
        if not (TOGETHER and isinstance(dead.catalog, FloeSqlCatalog)):
            for table in tables:
                with commit_lock(self.settings, table):
                    self._commit_route(table, changes[table], offsets)
            with commit_lock(self.settings, self.stream.dead_letter_table):
                return self._commit_anchor(dead_files, offsets)
        with ExitStack() as locks:  # in the order of their names, as maintenance takes one at a time
            for name in sorted([*tables, self.stream.dead_letter_table]):
                locks.enter_context(commit_lock(self.settings, name))
            try:
                with dead.catalog.together():
                    for table in tables:
                        self._commit_route(table, changes[table], offsets)
                    return self._commit_anchor(dead_files, offsets)
            except BaseException:
                # An upsert commit moves its index at once, before the swap that makes it true: when the swap
                # fails, the touched indexes are dropped, and the next commit loads or builds each from its table.
                for table in tables:
                    if self.routes[table].index is not None:
                        self.routes[table].index.forget()
                raise

    def _commit_route(self, table: str, change: list | KeyedRows, offsets: dict[int, int]) -> None:
        rt = self.routes[table]
        # Never below what the table took before: a batch read again after a cut between two tables' commits
        # may end lower on a partition (a read cut short, another budget), and the next would write again
        # what lies between.
        taken = {p: max(o, (rt.committed or {}).get(p, o)) for p, o in offsets.items()}
        taken = {**(rt.committed or {}), **taken}
        if isinstance(change, KeyedRows):
            rt.table, _ = commit_upsert(rt.table, rt.index, change, self.stream.id, self.stream.topic, rt.committed,
                                        taken)
        else:
            rt.table, _ = commit_files(rt.table, change, self.stream.id, self.stream.topic, rt.committed, taken)
        rt.committed = taken
        failpoint("between_route_commits")

    def _commit_anchor(self, files: list, offsets: dict[int, int]) -> int | None:
        # Always a snapshot, even of no files: it carries the offsets the next batch reads from.
        self.tables.dead_letter, snapshot = commit_files(self.tables.dead_letter, files, self.stream.id,
                                                         self.stream.topic, self.committed.dead_letter, offsets)
        self.tables.target = self.tables.dead_letter
        return snapshot


def routed_changes(tasks: list, keyed: bool) -> dict[str, list | KeyedRows]:
    """What each route table takes from a batch's tasks (or a routed replay's parts: anything with `routed_files`,
    `routed_keys` and `routed_deleted` by table): its files (tables without any left out); a routed upsert stream's,
    its files with their rows' keys, in the tasks' order, and the keys its messages delete (tables with neither left
    out)."""
    files: dict[str, list] = {}
    for r in tasks:
        for table, found in r.routed_files.items():
            files.setdefault(table, []).extend(found)
    if not keyed:
        return {table: found for table, found in files.items() if found}
    touched = {t for t, found in files.items() if found} | {t for r in tasks for t in r.routed_deleted}
    return {table: KeyedRows(files.get(table, []),
                             Keys.concat([r.routed_keys[table] for r in tasks if table in r.routed_keys]),
                             Keys.concat([r.routed_deleted[table] for r in tasks if table in r.routed_deleted]))
            for table in touched}
