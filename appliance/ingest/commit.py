"""Committing a batch: dead-letter files first, then target files, each snapshot with the batch's end offsets.

A crash before either commit re-reads the whole batch; a crash between them leaves the
dead-letter half committed, and the replay skips dead-letter rows below the dead-letter
table's own offsets (`Committed.dead_letter_floor`). Files written but never committed
are orphans, never visible.
"""

from __future__ import annotations

from dataclasses import dataclass

from pyiceberg.table import Table

from appliance.config.settings import Settings
from appliance.core.failpoints import failpoint
from appliance.ingest.batch import BatchResult
from appliance.ingest.planning import Committed
from appliance.model.stream import StreamDef
from appliance.tables.commits import commit_files, commit_lock


@dataclass
class StreamTables:
    """A stream's two tables, as of their last commit by this engine (or load)."""

    target: Table
    dead_letter: Table


@dataclass(frozen=True)
class Snapshots:
    target: int | None
    dead_letter: int | None = None


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
    with commit_lock(settings, stream.table):
        tables.target, target_snapshot = commit_files(
            tables.target, result.target_files, stream.id, stream.topic, committed.target, offsets
        )
    failpoint("after_target_commit")
    return committed.after(offsets, dead_letters_committed=bool(dead_files)), Snapshots(target_snapshot, dead_snapshot)
