"""A stream's schema while it runs: the mapping read off its table, the table evolved when the
messages need it, and every schema change told once.

The table is the truth (`tables.evolution`): before each batch the mapping is the table's
current schema with its recorded sources, so a column another Iceberg client added, renamed
or dropped is honoured from the next batch. When a batch's messages carry new fields or
need a wider type (schema evolution `auto`), the schema update is committed before the
data that uses it; a kill between the two leaves columns that the re-read batch fills.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from pyiceberg.table import Table

from appliance.config.settings import Settings
from appliance.core import hints
from appliance.core.errors import FloeError
from appliance.core.vocabulary import EventKind, EventLevel
from appliance.model.changes import ChangeKind, Evolution, SchemaChange
from appliance.model.mapping import Mapping
from appliance.model.sources import describe
from appliance.model.stream import StreamDef
from appliance.state.store import StateStore
from appliance.tables.evolution import SOURCES_KEY, ensure_bindings, evolve, evolved, mapping_of

log = logging.getLogger(__name__)


class StreamSchema:
    def __init__(self, settings: Settings, state: StateStore, stream: StreamDef,
                 record: Callable[[Mapping], None] | None = None, member: bool = False) -> None:
        """`record`: where the mapping the table makes is shown (default: the stream's row; a route's, its own).
        `member`: a pattern stream's topic, run as a stream of its own under the pattern stream's name: its mapping
        is its member row's (the pattern stream's is what new topics are given), and its replay names its topic."""
        self.settings = settings
        # A schema change proposes the replay of its dead letters: a table's own, a route's, a pattern's topic's
        self.replays = not (stream.is_pattern or stream.is_routed)
        self.member = member
        self._record = record or (
            (lambda mapping: state.update_member_mapping(stream.name, stream.topic, mapping)) if member else
            (lambda mapping: state.update_stream(stream.name, mapping=mapping)))
        self.state = state
        self.stream = stream
        self._key: tuple | None = None
        self._mapping: Mapping | None = None
        self._shown = stream.mapping  # what the state database shows as the stream's mapping
        # Writer schemas whose subject and version are known (looked up once, ever: kept in the state).
        self._versions: set[str] = {r["schema"] for r in state.seen_schemas(stream.name) if r["subject"]}

    def prepared(self, table: Table) -> Table:
        """The target table with its columns' sources recorded (older tables lack them)."""
        return ensure_bindings(self.settings, table, self.stream.mapping)

    def mapping(self, table: Table) -> Mapping:
        """The mapping as the table's current schema makes it; the state database follows it."""
        meta = table.metadata
        key = (meta.current_schema_id, meta.properties.get(SOURCES_KEY))
        if key != self._key or self._mapping is None:
            self._mapping = mapping_of(table, self.stream.mapping)
            self._key = key
            if self._mapping != self._shown and self._mapping.columns:
                self._record(self._mapping)
                self._shown = self._mapping
        return self._mapping

    def evolve(self, table: Table, evolution: Evolution) -> Table:
        """Commit what `evolution` asks of the table; an event says what changed."""
        table, done = evolve(self.settings, table, evolution, self.stream.mapping)
        if done:
            self.state.add_event(EventKind.SCHEMA_EVOLVED, f"table {self.stream.table}: " + "; ".join(done),
                                 self.stream.name)
        return table

    def staged(self, table: Table, evolution: Evolution) -> tuple[Table, Mapping]:
        """The table as `evolve` would make it, committed nowhere, and its mapping (a dry run's: nothing
        changes, not even the mapping the state database shows)."""
        table = evolved(table, evolution, self.stream.mapping)[0]
        return table, mapping_of(table, self.stream.mapping)

    def report(self, changes: set[SchemaChange], schemas: dict[str, int]) -> None:
        """Each schema change once per stream (not once per message), and the writer schemas met."""
        for change in sorted(changes):
            if self.state.note_change(self.stream.name, change.key):
                told = _describe(self.stream, change, self._mapping, self.replays, self.member)
                self.state.add_event(EventKind.SCHEMA_CHANGED, told, self.stream.name, EventLevel.WARNING)
        if schemas:
            versions, settled = self._versions_of(set(schemas) - self._versions)
            self.state.saw_schemas(self.stream.name, schemas, versions)
            self._versions |= settled

    def _versions_of(self, new: set[str]) -> tuple[dict[str, tuple[str, int]], set[str]]:
        """Subject and version of writer schemas not seen before, and the schemas settled: those looked up, and
        those the registry cannot say (none, or no such id). A registry that could not be asked (down, slow under
        load) is asked again at the next batch that meets the schema: once unasked, its version was never shown."""
        if not new or self.stream.registry is None:
            return {}, new
        from appliance.kafka.registry import registry

        out, settled = {}, set()
        for key in new:
            try:
                found = registry(self.stream.registry).versions_of(int(key.split(":")[0]))
            except (FloeError, ValueError) as exc:
                log.info("stream %s: no subject for schema %s: %s", self.stream.name, key, exc)
                if not getattr(exc, "retryable", False):
                    settled.add(key)
                continue
            settled.add(key)
            if found:
                preferred = [v for v in found if v[0] == self.stream.subject] or found
                out[key] = preferred[-1]
        return out, settled


def _describe(stream: StreamDef, change: SchemaChange, mapping: Mapping | None, replays: bool, member: bool) -> str:
    if change.kind is ChangeKind.IGNORED:
        return (f"new field {change.seen} is not ingested: schema evolution is off for this stream (column "
                f"{change.column} {change.column_type} would hold it); "
                f"`{hints.EVOLVE_STREAM.format(stream=stream.name)}` adds it")
    # Iceberg widens only int to long, float to double and a decimal's precision: a column that must hold
    # another kind of value is dropped (older rows then read NULL in it) and added again, as text.
    source = next((describe(c.source) for c in (mapping or stream.mapping).columns if c.name == change.column), None)
    replay = hints.replay(stream.name, stream.topic if member else "")
    home = f", then bring those messages home with `{replay}`" if replays else ""
    return (f"column {change.column} is {change.column_type} but messages now carry {change.seen} there: those "
            f"messages go to {stream.dead_letter_table} with error_stage 'schema'. Fix the producer, or make the "
            f"column text: `{hints.DROP_COLUMN.format(table=stream.table, column=change.column)}` (its older values "
            f"are then gone), `{hints.add_column(stream.table, change.column, source)}`{home}")
