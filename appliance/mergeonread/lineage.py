"""Bringing a key index to its table's current snapshot: by replaying what came after the snapshot it
reflects, when every step is one of Floe's own; otherwise by building it again from the table.

What can be replayed:
- an upsert commit or a replay's move (`MERGE_KEY` in its summary): its new files' keys are read (a
  batch's rows, not the table's) and take their places; rows its position deletes remove that no new
  row explains (a key deleted) leave the index by one pass over its locations;
- a rewrite (compaction, retention) whose map is beside the index (`folding.REWRITE_KEY`): followed,
  not read;
- a snapshot that changes no file.
Anything else (another writer's append or delete, a snapshot the checkpoint's lineage does not lead to,
a missing map) and the index is built again: never trusted over the table.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field

import numpy as np
from pyiceberg.manifest import DataFile, DataFileContent, ManifestEntryStatus
from pyiceberg.table import Table
from pyiceberg.table.snapshots import Snapshot

from appliance.core.errors import KeyIndexStale
from appliance.mergeonread.building import build
from appliance.mergeonread.deletes import positions_of
from appliance.mergeonread.folding import REWRITE_KEY, RewriteMap
from appliance.mergeonread.index import KeyIndex
from appliance.mergeonread.reading import partitions_of, read_columns
from appliance.mergeonread.segments import DEAD, ROW_BITS, live
from appliance.mergeonread.shards import SHARDS, shard_of
from appliance.model.columns import KAFKA_PARTITION
from appliance.tables.datafiles import live_entries
from appliance.tables.snapshots import MAINTENANCE_KEY, ancestors, summary_properties

log = logging.getLogger(__name__)

MERGE_KEY = "floe.merge"  # a Floe commit an index can replay: "upsert" (a batch) or "move" (a replay)
COUNTS = ("added-data-files", "deleted-data-files", "added-delete-files", "removed-delete-files")


def bring_to(index: KeyIndex, table: Table) -> str:
    """Make `index` reflect `table`'s current snapshot; how (for the log): "current", "replayed",
    "loaded" or "built"."""
    if index.reflects(table):
        return "current"
    how = "replayed" if index.ready and index.table_uuid == str(table.metadata.table_uuid) else "loaded"
    started, name = time.monotonic(), ".".join(table.name())
    try:
        if how == "loaded":
            if index.store is None:
                raise KeyIndexStale("no checkpoint kept")
            behind = Behind(index.store.load(index, table))
        else:
            behind = Behind([(index.snapshot_id, index.sequence)] * SHARDS)
        _replay(index, table, behind)
    except KeyIndexStale as why:
        log.info("%s: key index to be built (%s)", name, why)
        build(index, table)
        how = "built"
    log.info("%s: key index %s to snapshot %s in %.2f s (%d keys)", name, how, index.snapshot_id,
             time.monotonic() - started, len(index))
    return how


@dataclass
class Behind:
    """Each shard's (snapshot, sequence number) while a replay brings them to the table's."""

    shards: list[tuple[int | None, int]]
    pending: list[tuple[np.ndarray, int]] = field(default_factory=list)  # rows deleted, as file rows; sequence

    def sequences(self) -> np.ndarray:
        return np.array([s for _, s in self.shards], dtype=np.int64)


def _replay(index: KeyIndex, table: Table, behind: Behind) -> None:
    current = table.current_snapshot()
    chain = _after(table, behind)
    sequences = behind.sequences()
    full = not index.files
    for snapshot in chain:
        kind = _kind(snapshot)
        if kind == "nothing":
            continue
        added, deletes, removed = _changes(table, snapshot)
        if kind == "rewrite":
            _follow(index, snapshot, added, removed, behind, sequences)
        elif kind == "merge":
            _apply(index, table, snapshot, added, deletes, removed, behind, sequences)
        else:
            raise KeyIndexStale(f"snapshot {snapshot.snapshot_id} was written by another writer "
                                f"({snapshot.summary.operation.value if snapshot.summary else 'unknown'})")
        if not full:
            for f in removed:
                index.files.pop(f.file_path, None)
            index.files.update((f.file_path, f) for f in added)
    _scan(index, behind, sequences)
    if full:
        index.files = {e.data_file.file_path: e.data_file for e in live_entries(table)
                       if e.data_file.content == DataFileContent.DATA}
    index.at(current.snapshot_id if current else None, current.sequence_number if current else 0)


def _after(table: Table, behind: Behind) -> list[Snapshot]:
    """The snapshots after the oldest shard's, oldest first; KeyIndexStale unless every shard's
    snapshot is in the table's current lineage."""
    lineage = ancestors(table.metadata)
    ids = {s.snapshot_id for s in lineage}
    for snapshot_id, _ in behind.shards:
        if snapshot_id is not None and snapshot_id not in ids:
            raise KeyIndexStale(f"snapshot {snapshot_id} the index reflects is not in the table's lineage")
    oldest = min(s for _, s in behind.shards)
    return [s for s in reversed(lineage) if (s.sequence_number or 0) > oldest]


def _kind(snapshot: Snapshot) -> str:
    summary = summary_properties(snapshot)
    if summary.get(MERGE_KEY) in ("upsert", "move"):
        return "merge"
    if MAINTENANCE_KEY in summary and REWRITE_KEY in summary:
        return "rewrite"
    if not any(int(summary.get(k, "0")) for k in COUNTS):
        return "nothing"
    return "foreign"


def _changes(table: Table, snapshot: Snapshot) -> tuple[list[DataFile], list[DataFile], list[DataFile]]:
    """The data files a snapshot added, the delete files it added, and the data files it removed."""
    added, deletes, removed = [], [], []
    for manifest in snapshot.manifests(table.io):
        if manifest.added_snapshot_id != snapshot.snapshot_id:
            continue
        for e in manifest.fetch_manifest_entry(table.io, discard_deleted=False):
            if e.snapshot_id != snapshot.snapshot_id:
                continue
            data = e.data_file.content == DataFileContent.DATA
            if e.status == ManifestEntryStatus.ADDED:
                (added if data else deletes).append(e.data_file)
            elif e.status == ManifestEntryStatus.DELETED and data:
                removed.append(e.data_file)
    return added, deletes, removed


def _apply(index: KeyIndex, table: Table, snapshot: Snapshot, added: list[DataFile], deletes: list[DataFile],
           removed: list[DataFile], behind: Behind, sequences: np.ndarray) -> None:
    """An upsert commit or a move: its live new rows take their keys' places; the rows it deletes that
    no new row explains wait for `_scan`."""
    sequence = snapshot.sequence_number or 0
    if removed:  # a truncate: every earlier row is gone
        _scan(index, behind, sequences)
        for s in np.flatnonzero(sequences < sequence):
            index.shards.parts[s] = type(index.shards.parts[s])(index.shards.wide)
        index.keys = index.shards.keys()
        for f in removed:
            if f.file_path in index.segments.numbers:
                index.segments.forget_file(index.segments.numbers[f.file_path])
    gone: dict[str, np.ndarray] = {}
    for f in deletes:
        for path, positions in positions_of(table.io, f).items():
            gone[path] = np.union1d(gone.get(path, np.empty(0, np.int64)), positions)
    explained = []
    for f in added:
        rows = read_columns(table.metadata, table.io, f, index.columns + (KAFKA_PARTITION.name,))
        alive = ~index.form.has_null(rows)
        alive[gone.pop(f.file_path, np.empty(0, np.int64))] = False
        locations = index.segments.locations(index.segments.file_number(f.file_path), partitions_of(rows))[alive]
        h, low = index.spread(index.form.words(rows)[alive])
        mine = sequences[shard_of(h)] < sequence
        h, low, locations = h[mine], None if low is None else low[mine], locations[mine]
        found = index.find(h, low)
        explained.append(_file_rows(index, found.location[found.present]))
        index.assign(h, low, found, locations)
    if gone:
        rows = np.concatenate([(np.uint64(index.segments.file_number(p)) << np.uint64(ROW_BITS)) | at.astype(np.uint64)
                               for p, at in gone.items()])
        unexplained = np.setdiff1d(rows, np.concatenate(explained) if explained else rows[:0])
        if unexplained.size:
            behind.pending.append((unexplained, sequence))


def _follow(index: KeyIndex, snapshot: Snapshot, added: list[DataFile], removed: list[DataFile], behind: Behind,
            sequences: np.ndarray) -> None:
    rewrite_id = summary_properties(snapshot)[REWRITE_KEY]
    path = index.store.maps / f"{rewrite_id}.npz" if index.store is not None else None
    if path is None or not path.exists():
        raise KeyIndexStale(f"the map of rewrite {rewrite_id} (snapshot {snapshot.snapshot_id}) is not here")
    rewrite = RewriteMap.load(path)
    if set(rewrite.inputs) != {f.file_path for f in removed} or set(rewrite.outputs) != {f.file_path for f in added}:
        raise KeyIndexStale(f"the map of rewrite {rewrite_id} does not match snapshot {snapshot.snapshot_id}")
    _scan(index, behind, sequences)  # what earlier commits deleted, before their files are rewritten
    index.segments.follow(rewrite_id, rewrite)
    index.store.rewrites[rewrite_id] = snapshot.sequence_number or 0


def _file_rows(index: KeyIndex, locations: np.ndarray) -> np.ndarray:
    """Locations as (file number, row), the way a delete file names a row."""
    locations = locations[live(locations)]
    segments, rows = index.segments.split(locations)
    return (index.segments.file[segments].astype(np.uint64) << np.uint64(ROW_BITS)) | rows.astype(np.uint64)


def _scan(index: KeyIndex, behind: Behind, sequences: np.ndarray) -> None:
    """Keys whose rows the replayed commits deleted without a new row (deleted keys) leave the index:
    one pass over the locations of the shards those commits are ahead of."""
    if not behind.pending:
        return
    for s in range(SHARDS):
        gone = [rows for rows, sequence in behind.pending if sequences[s] < sequence]
        if not gone:
            continue
        flatten(index, s)
        shard = index.shards.parts[s]
        doomed = np.unique(np.concatenate(gone))
        for which, locations in (("main", shard.loc), ("delta", shard.dloc)):
            hit = np.flatnonzero(np.isin(_file_rows_all(index, locations), doomed))
            if hit.size:
                locations = locations.copy() if not locations.flags.writeable else locations
                locations[hit] = DEAD
                shard.replace_locations(*((locations, shard.dloc) if which == "main" else (shard.loc, locations)))
                index.keys -= hit.size
    behind.pending.clear()


def _file_rows_all(index: KeyIndex, locations: np.ndarray) -> np.ndarray:
    """`_file_rows` aligned with `locations` (what is not a row, DEAD)."""
    out = np.full(len(locations), DEAD, dtype=np.uint64)
    rows = live(locations)
    out[rows] = _file_rows(index, locations[rows])
    return out


def flatten(index: KeyIndex, s: int) -> None:
    """Shard `s`'s locations followed through every pending rewrite, in place."""
    if not index.segments.pending:
        return
    shard = index.shards.parts[s]
    main, changed_main = index.segments.translate(shard.loc)
    delta, changed_delta = index.segments.translate(shard.dloc)
    if changed_main or changed_delta:
        dead = int(np.count_nonzero(~live(main)) + np.count_nonzero(~live(delta))) \
            - int(np.count_nonzero(~live(shard.loc)) + np.count_nonzero(~live(shard.dloc)))
        shard.replace_locations(main, delta)
        index.keys -= dead
