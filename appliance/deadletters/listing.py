"""`floe dlq list` and `floe dlq purge`: a stream's dead letters shown, and the unwanted ones deleted.

A purge deletes by position (merge-on-read, nothing rewritten) and counts what it deleted in the
dead-letter table's properties, so `floe audit` tells those offsets from a loss; the operation
itself is in the audit trail (`control/dead_letters.py`). Like a replay, it leaves alone the dead
letters past the target's committed position, which a batch in flight may still read back.
"""

from __future__ import annotations

import codecs

import pyarrow as pa

from appliance.config.settings import Settings
from appliance.core.errors import DeadLetterFilterInvalid
from appliance.core.vocabulary import EventKind
from appliance.deadletters.moves import commit_purge
from appliance.deadletters.report import Purged, PurgeReport
from appliance.deadletters.selection import Reading, check_where, dead_letter_rows, select
from appliance.deadletters.sources import DeadLetterSource, sources
from appliance.model.columns import (
    ERROR_MESSAGE,
    ERROR_STAGE,
    INGESTED_AT,
    KAFKA_OFFSET,
    KAFKA_PARTITION,
    KAFKA_TIMESTAMP,
    RAW_VALUE,
)
from appliance.state.store import StateStore
from appliance.tables.catalog import Catalog, warehouse_io
from appliance.tables.commits import commit_lock
from appliance.tables.snapshots import committed_offsets

LISTED = [KAFKA_PARTITION.name, KAFKA_OFFSET.name, KAFKA_TIMESTAMP.name, INGESTED_AT.name, ERROR_STAGE.name,
          ERROR_MESSAGE.name]
TOPIC = "topic"  # a pattern stream's listing: which topic's dead-letter table each row is from


def list_dead_letters(settings: Settings, name: str, where: str | None = None, limit: int = 50,
                      preview: int = 80, topic: str | None = None) -> pa.Table:
    """The stream's dead letters that `where` selects, oldest offset first, with a preview of each value; a
    pattern stream's by topic (a `topic` column first), its topics read in order until `limit` rows are found."""
    check_where(where)
    with StateStore(settings.state_db) as state:
        stream = state.stream(name)
        found = sources(state, stream, topic)
    parts = []
    catalog = Catalog(settings)
    with Reading(settings) as reading:
        for source in found:
            rows = _listed(reading, catalog, source, where, limit, preview)
            parts.append(rows.add_column(0, TOPIC, pa.array([source.topic] * rows.num_rows, pa.string()))
                         if stream.is_pattern else rows)
            limit -= rows.num_rows
            if limit <= 0:
                break
    if not parts:  # a pattern stream that took no topic yet
        return pa.table({column: pa.array([], pa.string()) for column in [TOPIC, *LISTED, "value"]})
    return pa.concat_tables(parts)


def _listed(reading: Reading, catalog: Catalog, source: DeadLetterSource, where: str | None, limit: int,
            preview: int) -> pa.Table:
    with warehouse_io(reading.settings, f"read {source.table}"):
        table = catalog.table(source.table)
        rows = dead_letter_rows(reading, table, source.stream.created_at, where,
                                ", ".join(LISTED) + f", {RAW_VALUE.name}[1:{int(preview)}] as value")
    rows = rows.sort_by([(KAFKA_PARTITION.name, "ascending"), (KAFKA_OFFSET.name, "ascending")]).slice(0, limit)
    values = [None if v is None else codecs.decode(bytes(v), "utf-8", "replace")
              for v in rows.column("value").to_pylist()]
    return rows.select(LISTED).append_column("value", pa.array(values, pa.string()))


def purge(settings: Settings, name: str, where: str, topic: str | None = None) -> PurgeReport:
    """Delete the stream's dead letters that `where` selects, a pattern stream's topic by topic (`topic`'s alone),
    each table in a commit of its own."""
    if check_where(where) is None:
        raise DeadLetterFilterInvalid("purge needs --where: which dead letters nobody wants")
    report = PurgeReport(name)
    with StateStore(settings.state_db) as state, Reading(settings) as reading:
        catalog = Catalog(settings)
        for source in sources(state, state.stream(name), topic):
            with warehouse_io(settings, f"purge dead letters of {name}"):
                report.tables.append(_purge(reading, catalog, source, where))
            deleted = report.tables[-1].deleted
            if deleted:
                state.add_event(EventKind.DEAD_LETTERS_PURGED, f"purged {deleted:,} dead letters of "
                                f"{source.table} where {where}", name, table=source.table if source.topic else None)
    return report


def _purge(reading: Reading, catalog: Catalog, source: DeadLetterSource, where: str) -> Purged:
    """One dead-letter table's purge, under its commit lock: those under the stream's committed position."""
    target = None if source.routed else catalog.table(source.anchor)  # read before its dead letters, as a batch commits
    with commit_lock(reading.settings, source.table):
        table = catalog.table(source.table)
        anchor = table if target is None else target
        chosen = select(reading, table, source.stream.created_at, where,
                        committed_offsets(anchor, source.stream.id) or {})
        if len(chosen):
            commit_purge(table, chosen.positions)
    return Purged(source.table, len(chosen), chosen.waiting)
