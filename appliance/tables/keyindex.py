"""Where each key's current row is, in an upsert table: key -> (data file, row position).

An upsert commit must delete by position the row each new row replaces, so it must know where
that row is. The index is built from the table itself (every live data file's key columns, less
the rows its position deletes remove) and then kept by the commits of the process that built it;
it records the snapshot it reflects, and when the table's current snapshot is another (a
compaction, a retention run, any other writer), it is built again from the table: never trusted
over it. It lives in memory, in the engine (`ingest/indexes.py` keeps it across a stream's workers):
a restart rebuilds it (about 0.4 s per million keys, BENCHMARKS.md).

A key found live twice (a writer that is not Floe, say) keeps its newest row (the data file of
the higher sequence number, then the later position); the others are deleted by the next commit.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any, Iterable

import numpy as np
from pyiceberg.manifest import DataFile, DataFileContent, ManifestEntry
from pyiceberg.table import Table

from appliance.model.keys import key_values
from appliance.tables.datafiles import live_entries
from appliance.tables.fastpath.deletes import read_position_deletes
from appliance.tables.reading import file_tasks, read_table

POSITION_BITS = 32  # a location is (file number << 32) | row position: one int per key


@dataclass
class UpsertPlan:
    """What one commit does to the index: rows to delete by position, and each key's new place."""

    doomed: dict[str, np.ndarray] = field(default_factory=dict)  # data file path -> positions, sorted
    moved: dict[Any, int] = field(default_factory=dict)  # key -> its new row's location
    gone: list[Any] = field(default_factory=list)  # keys deleted
    truncate: bool = False  # every row before this commit's goes (its files are removed whole)
    replaced: int = 0  # rows of earlier commits that this one replaces or deletes


class KeyIndex:
    """One upsert table's keys. Not thread-safe: the stream's worker owns it."""

    def __init__(self, columns: tuple[str, ...]) -> None:
        self.columns = columns
        self.snapshot_id: int | None = None  # the table snapshot it reflects; None: not built
        self.built = False
        self._rows: dict[Any, int] = {}
        self._paths: list[str] = []
        self._numbers: dict[str, int] = {}
        self.files: dict[str, DataFile] = {}  # the live data files, for their spec and partition
        self.duplicates: dict[str, list[int]] = {}  # rows of keys found twice: deleted by the next commit

    def __len__(self) -> int:
        return len(self._rows)

    def reflects(self, table: Table) -> bool:
        current = table.current_snapshot()
        return self.built and self.snapshot_id == (current.snapshot_id if current else None)

    def forget(self) -> None:
        """After a failed commit or an error: the next one rebuilds from the table."""
        self.built = False

    # ---- building ---------------------------------------------------------------------------------

    def build(self, table: Table) -> None:
        """Every live key of `table`'s current snapshot, from its data and position-delete files."""
        current = table.current_snapshot()
        entries = live_entries(table)
        data = sorted((e for e in entries if e.data_file.content == DataFileContent.DATA),
                      key=lambda e: (e.sequence_number or 0, e.data_file.file_path))
        deleted = _deleted_positions(table, entries)
        self._rows, self._paths, self._numbers, self.files, self.duplicates = {}, [], {}, {}, defaultdict(list)
        projected = table.schema().select(*self.columns)
        for entry in data:
            f = entry.data_file
            self.files[f.file_path] = f
            keys = key_values(read_table(table.metadata, table.io, projected, file_tasks([f])),
                              self.columns) if f.record_count else []
            alive = np.ones(len(keys), dtype=bool)
            for positions in deleted.get(f.file_path, ()):
                if positions[1] >= (entry.sequence_number or 0):  # a delete applies to older-or-equal data
                    alive[positions[0][positions[0] < len(keys)]] = False
            self._add(f.file_path, keys, alive)
        self.duplicates = dict(self.duplicates)
        self.snapshot_id = current.snapshot_id if current else None
        self.built = True

    def _add(self, path: str, keys: list[Any], alive: np.ndarray) -> None:
        base = self._number(path) << POSITION_BITS
        live = np.flatnonzero(alive).tolist()
        found = {keys[pos]: base | pos for pos in live}
        if len(found) < len(live):  # a key twice in one file: the later position stays
            seen: dict[Any, int] = {}
            for pos in live:
                if keys[pos] in seen:
                    self.duplicates[path].append(seen[keys[pos]])
                seen[keys[pos]] = pos
        for key in found.keys() & self._rows.keys():
            old_path, old_pos = self.locate_packed(self._rows[key])
            self.duplicates.setdefault(old_path, []).append(old_pos)
        self._rows.update(found)

    def _number(self, path: str) -> int:
        number = self._numbers.get(path)
        if number is None:
            number = self._numbers[path] = len(self._paths)
            self._paths.append(path)
        return number

    def locate_packed(self, location: int) -> tuple[str, int]:
        return self._paths[location >> POSITION_BITS], location & ((1 << POSITION_BITS) - 1)

    def locate(self, key: Any) -> tuple[str, int] | None:
        location = self._rows.get(key)
        return None if location is None else self.locate_packed(location)

    # ---- a commit ---------------------------------------------------------------------------------

    def plan(self, written: Iterable[tuple[DataFile, list[Any]]], deleted: Iterable[Any],
             truncate: bool = False) -> UpsertPlan:
        """The position deletes and new places of a commit that writes `written` (each new data file
        with the keys of its rows, in order) and deletes the keys `deleted`. The index itself changes
        only once the commit has landed (`landed`). Dictionary lookups and numpy: a Python loop over
        a batch's keys would be most of an upsert commit's cost."""
        rows = {} if truncate else self._rows
        keys: list[Any] = []
        places: list[int] = []
        for f, file_keys in written:
            base = self._number(f.file_path) << POSITION_BITS
            keys += file_keys
            places += range(base, base + len(file_keys))
        gone = list(deleted)
        plan = UpsertPlan(moved=dict(zip(keys, places)), gone=gone, truncate=truncate)
        get = rows.get
        replaced = [old for old in map(get, keys + gone) if old is not None]
        if len(plan.moved) < len(keys) or plan.moved.keys() & set(gone):
            replaced += self._replaced_here(keys, places, gone)  # a key twice in one commit: rare
            for key in gone:  # its delete came after its write (the tasks' results, in order)
                plan.moved.pop(key, None)
        if not truncate:
            replaced += [(self._numbers[p] << POSITION_BITS) | at for p, ats in self.duplicates.items() for at in ats]
        plan.doomed = self._by_file(np.fromiter(replaced, dtype=np.int64, count=len(replaced)))
        plan.replaced = len(replaced)
        return plan

    @staticmethod
    def _replaced_here(keys: list[Any], places: list[int], gone: list[Any]) -> list[int]:
        """The rows of this commit that a later one of the same key replaces (or deletes)."""
        last: dict[Any, int] = {}
        out = []
        for key, place in zip(keys, places):
            if key in last:
                out.append(last[key])
            last[key] = place
        return out + [last[key] for key in gone if key in last]

    def _by_file(self, packed: np.ndarray) -> dict[str, np.ndarray]:
        """Packed locations as each data file's positions, sorted."""
        if not packed.size:
            return {}
        packed = np.unique(packed)  # sorted: by file number, then position
        numbers = packed >> POSITION_BITS
        positions = packed & ((1 << POSITION_BITS) - 1)
        cuts = np.flatnonzero(np.diff(numbers)) + 1
        return {self._paths[int(group[0])]: at for group, at in zip(np.split(numbers, cuts), np.split(positions, cuts))}

    def landed(self, plan: UpsertPlan, written: Iterable[DataFile], snapshot_id: int) -> None:
        """The commit of `plan` landed as `snapshot_id`: the index now reflects it."""
        if plan.truncate:
            self._rows, self.files = {}, {}
        self.duplicates = {}
        for f in written:
            self.files[f.file_path] = f
        self._rows.update(plan.moved)
        for key in plan.gone:
            self._rows.pop(key, None)
        self.snapshot_id = snapshot_id


def _deleted_positions(table: Table, entries: list[ManifestEntry]) -> dict[str, list[tuple[np.ndarray, int]]]:
    """Each data file's deleted positions, per live position-delete file, with that file's sequence number."""
    out: dict[str, list[tuple[np.ndarray, int]]] = defaultdict(list)
    for e in entries:
        if e.data_file.content == DataFileContent.POSITION_DELETES:
            for path, positions in read_position_deletes(table.io, e.data_file).items():
                out[path].append((positions, e.sequence_number or 0))
    return out
