"""Rows moved between a stream's two tables in one step: dead letters replayed into the target.

The target gains the replayed rows (appended; in an upsert table, with position deletes for the
rows they replace: `mergeonread.replayed`), and the dead-letter table loses the replayed messages by
position deletes (and gains, for those that still fail, a row with their new reason). Both snapshots
swap in by one catalog transaction (`FloeSqlCatalog.together`), so no reader ever finds a message in both tables
or in neither, and a kill at any moment leaves either both commits or none. Each snapshot carries
its parent's stream offsets, so the stream running beside it resumes where it was.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from pyiceberg.manifest import DataFile, DataFileContent
from pyiceberg.table import Table
from pyiceberg.table.snapshots import Operation

from appliance.core.errors import DeadLetterReplayUnsupported, ReplayConflict
from appliance.core.failpoints import failpoint
from appliance.mergeonread.deletes import live_deletes, write_deletes_by_partition
from appliance.mergeonread.lineage import MERGE_KEY
from appliance.mergeonread.plans import KeyedRows
from appliance.mergeonread.replayed import open_index, replay_changes
from appliance.tables.datafiles import delete_files, live_entries
from appliance.tables.fastpath.changes import FileChanges, commit_changes, spec_of
from appliance.tables.fastpath.sql_catalog import FloeSqlCatalog
from appliance.tables.snapshots import PURGED_KEY, REPLAY_KEY, REPLAY_TARGET_KEY, offsets_summary, purged


@dataclass
class Move:
    """What a replay's tasks wrote, and the dead letters it takes out of their table."""

    taken: dict[str, np.ndarray]  # dead-letter data file -> positions of the messages replayed
    target_files: list[DataFile] = field(default_factory=list)
    dead_letter_files: list[DataFile] = field(default_factory=list)  # those that still fail, new reason
    keyed: KeyedRows | None = None  # upsert tables: the target files' rows' keys, and the keys deleted
    key_columns: tuple[str, ...] = ()
    home: Path | None = None  # where the target's key index is kept (FLOE_HOME)
    taken_at: dict[str, list[tuple[int, int]]] = field(default_factory=dict)  # (partition, offset) per position

    def positions_of(self, messages: set[tuple[int, int]]) -> dict[str, np.ndarray]:
        """The dead-letter positions of `messages` (partition, offset)."""
        out = {}
        for path, positions in self.taken.items():
            found = [pos for pos, at in zip(positions.tolist(), self.taken_at.get(path, ())) if at in messages]
            if found:
                out[path] = np.array(found, dtype=np.int64)
        return out


@dataclass(frozen=True)
class Moved:
    target_snapshot: int | None
    dead_letter_snapshot: int | None
    superseded: dict[str, np.ndarray]  # upsert: dead-letter positions left where they are (a newer row won)
    superseded_count: int = 0


def check_together(table: Table) -> None:
    if not isinstance(table.catalog, FloeSqlCatalog):
        raise DeadLetterReplayUnsupported(
            f"replaying dead letters needs Floe's SQL catalog (SQLite or PostgreSQL), which commits two "
            f"tables at once; this catalog ({type(table.catalog).__name__}) cannot")


def commit_move(target: Table, dead_letter: Table, move: Move) -> Moved:
    """Commit `move` to both tables in one catalog transaction; the caller holds both commit locks.

    Raises ReplayConflict when a dead letter to take is no longer where the replay read it
    (another replay took it, or compaction rewrote its file): the replay then reads again.
    """
    check_together(target)
    if dead_letter.catalog is not target.catalog:  # `together` holds one catalog's commits
        raise ValueError("a move's two tables must come from the same catalog object")
    entries = live_entries(dead_letter)
    files = {e.data_file.file_path: e.data_file for e in entries if e.data_file.content == DataFileContent.DATA}
    _check_taken(dead_letter, entries, files, move.taken)
    replay = uuid.uuid4().hex
    target_changes, superseded, count = _target_changes(target, move)
    merge = {MERGE_KEY: "move"} if move.key_columns else {}
    taken = _without(move.taken, superseded)
    dl_deletes = write_deletes_by_partition(dead_letter.metadata, dead_letter.io, taken, files) if taken else []
    dl_changes = FileChanges(data=move.dead_letter_files, deletes=dl_deletes)
    try:
        # Both tables always get a snapshot, each naming the replay: a reader that loaded one table
        # before the replay and the other after it can tell (`replay_of`) and load again.
        with target.catalog.together():
            new_target = commit_changes(target, target_changes,
                                        Operation.OVERWRITE if target_changes.deletes else Operation.APPEND,
                                        {**_carried(target, replay), **merge})
            failpoint("replay_between_commits", ".".join(target.name()))
            target_id = new_target.current_snapshot().snapshot_id
            new_dl = commit_changes(dead_letter, dl_changes, Operation.OVERWRITE if dl_deletes else Operation.APPEND,
                                    {**_carried(dead_letter, replay), REPLAY_TARGET_KEY: str(target_id)})
    except BaseException:
        delete_files(target, [f.file_path for f in target_changes.deletes])
        delete_files(dead_letter, [f.file_path for f in dl_deletes])
        raise
    return Moved(target_id, new_dl.current_snapshot().snapshot_id, superseded, count)


def commit_routed_move(routes: dict[str, tuple[Table, Move]], dead_letter: Table, taken: dict[str, np.ndarray],
                       dead_letter_files: list[DataFile]) -> int:
    """A routed stream's replay: each route table's new rows (`routes`: table -> its table and its part of the move)
    appended, in an upsert table with the position deletes of the rows they replace (`_target_changes`, each table's
    own index), the dead letters at `taken` deleted by position (but those a newer row of their key beat) and those
    that still fail added with their new reason, in one catalog transaction; the caller holds every table's commit
    lock. Returns how many dead letters a newer row beat. ReplayConflict as `commit_move`."""
    check_together(dead_letter)
    entries = live_entries(dead_letter)
    files = {e.data_file.file_path: e.data_file for e in entries if e.data_file.content == DataFileContent.DATA}
    _check_taken(dead_letter, entries, files, taken)
    replay = uuid.uuid4().hex
    changes: dict[str, FileChanges] = {}
    beaten: dict[str, list[np.ndarray]] = {}
    deletes: list[DataFile] = []
    count = 0
    try:
        for name in sorted(routes):
            changes[name], lost, n = _target_changes(*routes[name])
            count += n
            for path, positions in lost.items():
                beaten.setdefault(path, []).append(positions)
        taken = _without(taken, {path: np.concatenate(found) for path, found in beaten.items()})
        deletes = write_deletes_by_partition(dead_letter.metadata, dead_letter.io, taken, files) if taken else []
        # The route tables first, the anchor last, as a routed batch commits them (`ingest/routed.py`).
        with dead_letter.catalog.together():
            for name in sorted(routes):
                table, move = routes[name]
                merge = {MERGE_KEY: "move"} if move.key_columns else {}
                operation = Operation.OVERWRITE if changes[name].deletes else Operation.APPEND
                commit_changes(table, changes[name], operation, {**_carried(table, replay), **merge})
                failpoint("replay_between_commits", name)
            commit_changes(dead_letter, FileChanges(data=dead_letter_files, deletes=deletes),
                           Operation.OVERWRITE if deletes else Operation.APPEND, _carried(dead_letter, replay))
    except BaseException:
        delete_files(dead_letter, [f.file_path for f in [*deletes, *(f for c in changes.values() for f in c.deletes)]])
        raise
    return count


def _check_taken(dead_letter: Table, entries, files: dict[str, DataFile], taken: dict[str, np.ndarray]) -> None:
    gone = [p for p in taken if p not in files]
    if gone:
        raise ReplayConflict(f"dead-letter file {gone[0]} is no longer in {'.'.join(dead_letter.name())}")
    deleted = live_deletes(dead_letter, entries)
    for path, positions in taken.items():
        already = deleted.of(path)
        if already is not None and np.isin(positions, already).any():
            raise ReplayConflict(f"dead letters of {path} were taken meanwhile (another replay or purge)")


def _carried(table: Table, replay: str) -> dict[str, str]:
    return {**offsets_summary(table.metadata, table.metadata.current_snapshot_id), REPLAY_KEY: replay}


def _without(taken: dict[str, np.ndarray], left: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    out = {}
    for path, positions in taken.items():
        kept = positions[~np.isin(positions, left[path])] if path in left else positions
        if kept.size:
            out[path] = kept
    return out


def _target_changes(target: Table, move: Move) -> tuple[FileChanges, dict[str, np.ndarray], int]:
    """The target's changes: the new rows appended, or, in an upsert table, each key's replayed row in
    place of its older one. A key whose current row came later in the topic keeps it: the replayed
    row is deleted in the same snapshot, and its dead letter stays (returned by dead-letter position)."""
    new = list(move.target_files)
    for f in new:
        f.spec_id = spec_of(f, target.metadata.default_spec_id)
    if not move.key_columns or move.keyed is None:
        return FileChanges(data=new), {}, 0
    index = open_index(move.home or Path("."), target, move.key_columns)
    deletes, lost = replay_changes(target, index, move.keyed)
    entries = [move.keyed.rows, move.keyed.deleted]
    partitions = np.concatenate([e.partitions for e in entries])
    offsets = np.concatenate([e.offsets for e in entries])
    losers = set(zip(partitions[lost].tolist(), offsets[lost].tolist()))
    return FileChanges(data=new, deletes=deletes), move.positions_of(losers), len(losers)


def commit_purge(dead_letter: Table, taken: dict[str, np.ndarray]) -> Table:
    """Delete the dead letters at `taken` by position, counting them in the table's purged rows (so
    `floe audit` can tell their offsets from a loss); the caller holds the table's commit lock.
    Raises ReplayConflict when one of them is no longer where it was read."""
    entries = live_entries(dead_letter)
    files = {e.data_file.file_path: e.data_file for e in entries if e.data_file.content == DataFileContent.DATA}
    _check_taken(dead_letter, entries, files, taken)
    deletes = write_deletes_by_partition(dead_letter.metadata, dead_letter.io, taken, files)
    count = sum(len(p) for p in taken.values())
    try:
        return commit_changes(dead_letter, FileChanges(deletes=deletes), Operation.DELETE,
                              offsets_summary(dead_letter.metadata, dead_letter.metadata.current_snapshot_id),
                              {PURGED_KEY: str(purged(dead_letter) + count)})
    except BaseException:
        delete_files(dead_letter, [f.file_path for f in deletes])
        raise
