"""Committing a batch: dead-letter files first, then target files, each snapshot with the batch's end offsets.

A crash before either commit re-reads the whole batch; a crash between them leaves the
dead-letter half committed. The replay then leaves out, from both tables, the messages that
landed as dead letters (`landed_dead_letters`), read back from the dead-letter table itself:
not "whatever goes to the dead-letter table again", because where a message goes can change
in between (another client changes the table's schema, the registry learns a schema, schema
evolution is switched). Files written but never committed are orphans, never visible.
"""

from __future__ import annotations

from dataclasses import dataclass

from pyiceberg.expressions import And, BooleanExpression, EqualTo, GreaterThanOrEqual, LessThan, Or
from pyiceberg.table import Table

from appliance.config.settings import Settings
from appliance.core.failpoints import failpoint
from appliance.ingest.batch import BatchResult
from appliance.ingest.planning import Committed
from appliance.mergeonread.commit import checkpoint, commit_upsert
from appliance.mergeonread.index import KeyIndex
from appliance.model.columns import INGESTED_AT, KAFKA_OFFSET, KAFKA_PARTITION
from appliance.model.stream import StreamDef
from appliance.tables.commits import commit_files, commit_lock
from appliance.tables.reading import read_table


@dataclass
class StreamTables:
    """A stream's two tables, as of their last commit by this engine (or load), and for an upsert
    stream the index of its keys (built from the table at the first commit)."""

    target: Table
    dead_letter: Table
    index: KeyIndex | None = None


@dataclass(frozen=True)
class Snapshots:
    target: int | None
    dead_letter: int | None = None
    replaced: int = 0  # upsert streams: rows of earlier commits replaced or deleted


def commit_batch(settings: Settings, stream: StreamDef, tables: StreamTables, committed: Committed,
                 offsets: dict[int, int], result: BatchResult) -> tuple[Committed, Snapshots]:
    """Commit the batch's files; `tables` move to the new snapshots. Returns what the tables now hold."""
    dead_snapshot = None
    dead_files = result.dead_letter_files
    if dead_files:
        with commit_lock(settings, stream.dead_letter_table):
            tables.dead_letter, dead_snapshot = commit_files(
                tables.dead_letter, dead_files, stream.id, stream.topic, committed.dead_letter, offsets
            )
        committed = Committed(committed.target, dict(offsets))
        failpoint("after_dead_letter_commit")
    # Always a target snapshot, even of no files: it carries the offsets the next batch resumes from.
    replaced = 0
    with commit_lock(settings, stream.table):
        if tables.index is not None:
            tables.target, done = commit_upsert(tables.target, tables.index, result.keyed_rows(), stream.id,
                                                stream.topic, committed.target, offsets)
            target_snapshot, replaced = done.snapshot_id, done.replaced
        else:
            tables.target, target_snapshot = commit_files(
                tables.target, result.target_files, stream.id, stream.topic, committed.target, offsets
            )
    if tables.index is not None:
        checkpoint(tables.index)  # a few of its shards, the table's commit lock free again
    failpoint("after_target_commit")
    return (committed.after(offsets, dead_letters_committed=bool(dead_files)),
            Snapshots(target_snapshot, dead_snapshot, replaced))


def landed_dead_letters(table: Table, ranges: dict[int, tuple[int, int]], since: str) -> dict[int, frozenset[int]]:
    """The offsets in `ranges` (per partition, [from, to)) that the dead-letter table holds, from rows
    ingested `since` (the stream's creation: a reused table may hold an earlier stream's rows)."""
    if not ranges:
        return {}
    clauses: list[BooleanExpression] = [
        And(EqualTo(KAFKA_PARTITION.name, p), GreaterThanOrEqual(KAFKA_OFFSET.name, lo),
            LessThan(KAFKA_OFFSET.name, hi))
        for p, (lo, hi) in ranges.items()]
    where = clauses[0] if len(clauses) == 1 else Or(*clauses)
    row_filter = And(where, GreaterThanOrEqual(INGESTED_AT.name, since))
    rows = read_table(table.metadata, table.io, table.schema().select(KAFKA_PARTITION.name, KAFKA_OFFSET.name),
                      table.scan(row_filter=row_filter).plan_files(), row_filter)
    landed: dict[int, set[int]] = {}
    for p, o in zip(rows.column(0).to_pylist(), rows.column(1).to_pylist()):
        landed.setdefault(p, set()).add(o)
    return {p: frozenset(offsets) for p, offsets in landed.items()}
