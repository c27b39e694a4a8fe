"""Position deletes through a rewrite: folded into the new files, and never lost to a race.

A rewrite (compaction, retention) reads its data files without the rows their position deletes
remove, and writes the rest in order into new files; each input's kept positions say where each
of its rows went. An upsert stream keeps committing meanwhile, and its new position deletes name
rows of the files being rewritten: at commit, under the table's commit lock, those are carried
over to the new files through the kept positions (`FoldMap.translate`). The delete files that name
no live data file any more are removed in the same snapshot; after a full compaction of a quiet
table, none is left.
"""

from __future__ import annotations

import threading
from collections import OrderedDict, defaultdict
from dataclasses import dataclass, field

import numpy as np
from pyiceberg.io import FileIO
from pyiceberg.manifest import DataFile, DataFileContent, ManifestEntry
from pyiceberg.table import Table

from appliance.core.errors import RewriteConflict
from appliance.tables.datafiles import live_entries
from appliance.tables.fastpath.deletes import read_position_deletes, write_deletes_by_partition

_READ: OrderedDict[str, dict[str, np.ndarray]] = OrderedDict()  # delete files never change: read once
_READ_LOCK = threading.Lock()
KEPT_READS = 4096


def positions_of(io: FileIO, delete_file: DataFile) -> dict[str, np.ndarray]:
    """A delete file's positions by data file path (kept: delete files never change)."""
    path = delete_file.file_path
    with _READ_LOCK:
        found = _READ.get(path)
    if found is None:
        found = read_position_deletes(io, delete_file)
        with _READ_LOCK:
            _READ[path] = found
            while len(_READ) > KEPT_READS:
                _READ.popitem(last=False)
    return found


@dataclass
class LiveDeletes:
    """A snapshot's live position-delete files: what each names, and each data file's deleted rows."""

    files: dict[str, DataFile] = field(default_factory=dict)  # delete file path -> its DataFile
    named: dict[str, dict[str, np.ndarray]] = field(default_factory=dict)  # delete file -> data path -> positions
    positions: dict[str, np.ndarray] = field(default_factory=dict)  # data path -> deleted positions, sorted

    def of(self, data_path: str) -> np.ndarray | None:
        return self.positions.get(data_path)

    def removable(self, live_data: set[str]) -> list[DataFile]:
        """The delete files that name no live data file: nothing left for them to delete."""
        return [self.files[p] for p, named in self.named.items() if not named.keys() & live_data]


def live_deletes(table: Table, entries: list[ManifestEntry] | None = None) -> LiveDeletes:
    out = LiveDeletes()
    gathered: dict[str, list[np.ndarray]] = defaultdict(list)
    for e in entries if entries is not None else live_entries(table):
        f = e.data_file
        if f.content != DataFileContent.POSITION_DELETES:
            continue
        found = positions_of(table.io, f)
        out.files[f.file_path] = f
        out.named[f.file_path] = found
        for path, positions in found.items():
            gathered[path].append(positions)
    out.positions = {p: np.unique(np.concatenate(arrays)) for p, arrays in gathered.items()}
    return out


@dataclass
class FoldMap:
    """Where a rewrite put each row of its inputs: per group, the inputs in order with the positions
    kept of each, and the output files in order."""

    groups: list[tuple[list[str], list[np.ndarray], list[DataFile]]] = field(default_factory=list)
    known: set[str] = field(default_factory=set)  # the delete files the rewrite read around
    # Inputs whose rows went to several partitions (a rewrite into a newer spec): no order maps them
    # onto the new files, so a delete committed on one meanwhile fails the rewrite (it runs again).
    scattered: set[str] = field(default_factory=set)

    def add(self, inputs: list[str], kept: list[np.ndarray], outputs: list[DataFile]) -> None:
        self.groups.append((inputs, kept, outputs))

    @property
    def inputs(self) -> set[str]:
        return {p for inputs, _, _ in self.groups for p in inputs}

    def translate(self, table: Table, now: LiveDeletes) -> list[DataFile]:
        """Delete files on the outputs for the rows of the inputs that delete files committed since the
        rewrite read them remove."""
        doomed: dict[str, list[int]] = defaultdict(list)
        outputs: dict[str, DataFile] = {}
        hit_scattered = [p for p in self.scattered if _new_positions(now, self.known, p).size]
        if hit_scattered:
            raise RewriteConflict(f"rows of {hit_scattered[0]} were deleted while it was rewritten into the "
                                  "current partitioning")
        for inputs, kept, files in self.groups:
            starts = np.cumsum([0] + [f.record_count for f in files])
            base = 0
            for path, rows in zip(inputs, kept):
                gone = _new_positions(now, self.known, path)
                if gone.size and rows.size:
                    at = np.searchsorted(rows, gone)  # where each deleted row went, if it was kept
                    found = at < rows.size
                    found[found] = rows[at[found]] == gone[found]
                    hit = at[found] + base
                    which = np.searchsorted(starts, hit, side="right") - 1
                    for j, position in zip(which.tolist(), hit.tolist()):
                        doomed[files[j].file_path].append(position - int(starts[j]))
                        outputs[files[j].file_path] = files[j]
                base += rows.size
        return write_deletes_by_partition(table.metadata, table.io, doomed, outputs) if doomed else []


def _new_positions(now: LiveDeletes, known: set[str], data_path: str) -> np.ndarray:
    """The positions of `data_path` that delete files other than `known` remove."""
    arrays = [named[data_path] for name, named in now.named.items() if name not in known and data_path in named]
    return np.unique(np.concatenate(arrays)) if arrays else np.empty(0, dtype=np.int64)
