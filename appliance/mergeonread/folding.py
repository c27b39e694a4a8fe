"""Position deletes through a rewrite, and where each row of a rewrite went.

A rewrite (compaction, retention) reads its data files without the rows their position deletes
remove (and, for retention, without old rows), and writes the rest in order into new files; each
input's kept rows are a bitmap (`Kept`). In a group's order, the kept rows of its inputs are exactly
the rows of its outputs, so a kept row's new place is its rank among them: `RewriteMap` answers it
for many rows at once (a bitmap and a running count per 64 rows: two bits a row rewritten).

Two things use it. An upsert stream keeps committing meanwhile, and its new position deletes name
rows of the files being rewritten: those are carried over to the new files, most before the commit
takes the table's lock (`FoldMap.carry_ahead`) and the few committed since under it (`FoldMap.carry`),
and the delete files that name no live data file any more are removed in the same snapshot. And the
key index, whose locations point into the rewritten files, follows the rows without reading a key back:
the map is saved beside the index (`save`) before the rewrite commits, and named in its snapshot, so an
index in any process can replay it (`lineage`).
"""

from __future__ import annotations

import os
import time
import uuid
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from pyiceberg.manifest import DataFile, ManifestEntry
from pyiceberg.table import Table

from appliance.core.errors import RewriteConflict
from appliance.mergeonread.deletes import LiveDeletes, live_deletes, write_deletes_by_partition
from appliance.tables.commits import Carried
from appliance.tables.datafiles import delete_files

REWRITE_KEY = "floe.rewrite-map"  # a rewrite's snapshot names its map, saved beside the index


@dataclass(frozen=True)
class Kept:
    """Which rows of one input a rewrite wrote: a bitmap (numpy packbits, little bit order)."""

    rows: int
    bits: np.ndarray

    @classmethod
    def of(cls, mask: np.ndarray) -> Kept:
        return cls(len(mask), np.packbits(mask.astype(bool), bitorder="little"))

    @classmethod
    def every(cls, rows: int) -> Kept:
        return cls.of(np.ones(rows, dtype=bool))

    @classmethod
    def none(cls, rows: int) -> Kept:
        return cls(rows, np.zeros((rows + 7) // 8, dtype=np.uint8))

    @property
    def count(self) -> int:
        return int(np.bitwise_count(self.bits).sum())


@dataclass
class RewriteMap:
    """Where a rewrite put each row of its inputs. Inputs and outputs are in the rewrite's order (its
    groups one after the other); a row's rank among all kept rows is its place in the outputs laid end
    to end."""

    inputs: list[str]
    input_rows: np.ndarray  # int64, per input
    words: np.ndarray  # uint64: the kept bitmaps, each input starting on a word
    word_start: np.ndarray  # int64, per input
    ranks: np.ndarray  # int64, per word: kept rows before it
    outputs: list[str]
    output_starts: np.ndarray  # int64, per output and one more: its first row's rank
    mappable: bool = True  # False: some rows went to several partitions, in no order a map can follow

    @classmethod
    def of(cls, groups: list[tuple[list[str], list[Kept], list[tuple[str, int]]]], mappable: bool = True
           ) -> RewriteMap:
        inputs = [p for g in groups for p in g[0]]
        kept = [k for g in groups for k in g[1]]
        outputs = [o for g in groups for o in g[2]]
        padded = [np.pad(k.bits, (0, -len(k.bits) % 8)).view("<u8") for k in kept]
        sizes = np.array([len(w) for w in padded], dtype=np.int64)
        words = np.concatenate(padded) if padded else np.empty(0, dtype=np.uint64)
        counts = np.bitwise_count(words).astype(np.int64)
        return cls(inputs, np.array([k.rows for k in kept], dtype=np.int64), words,
                   np.concatenate([[0], np.cumsum(sizes)[:-1]]).astype(np.int64) if len(sizes) else sizes,
                   np.concatenate([[0], np.cumsum(counts)[:-1]]).astype(np.int64) if len(counts) else counts,
                   [o[0] for o in outputs],
                   np.concatenate([[0], np.cumsum([o[1] for o in outputs])]).astype(np.int64), mappable)

    def place(self, inputs: np.ndarray, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """For rows (by input number, row) of the inputs: whether each was kept, and if so its output
        (number) and row there."""
        rows = rows.astype(np.int64)
        w = self.word_start[inputs] + (rows >> 6)
        word = self.words[w]
        shift = (rows & 63).astype(np.uint64)
        kept = ((word >> shift) & np.uint64(1)).astype(bool)
        below = word & ((np.uint64(1) << shift) - np.uint64(1))
        rank = self.ranks[w] + np.bitwise_count(below).astype(np.int64)
        out = np.clip(np.searchsorted(self.output_starts, rank, side="right") - 1, 0, max(0, len(self.outputs) - 1))
        return kept, out, rank - self.output_starts[out]

    def save(self, path: Path) -> None:
        """Written whole or not at all (a temporary file renamed), readable by this user only."""
        tmp = path.with_name(f".{path.name}.{uuid.uuid4().hex}")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "wb") as f:
            np.savez(f, inputs=np.array(self.inputs, dtype=np.str_), input_rows=self.input_rows, words=self.words,
                     word_start=self.word_start, ranks=self.ranks, outputs=np.array(self.outputs, dtype=np.str_),
                     output_starts=self.output_starts, mappable=np.array(self.mappable))
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)

    @classmethod
    def load(cls, path: Path) -> RewriteMap:
        with np.load(path, allow_pickle=False) as z:
            return cls([str(p) for p in z["inputs"]], z["input_rows"], z["words"], z["word_start"], z["ranks"],
                       [str(p) for p in z["outputs"]], z["output_starts"], bool(z["mappable"]))


@dataclass
class FoldMap:
    """Where a rewrite put each row of its inputs: per group, the inputs in order with the rows kept of
    each, and the output files in order."""

    groups: list[tuple[list[str], list[Kept], list[DataFile]]] = field(default_factory=list)
    known: set[str] = field(default_factory=set)  # the delete files the rewrite read around
    # Inputs whose rows went to several partitions (a rewrite into a newer spec): no order maps them
    # onto the new files, so a delete committed on one meanwhile fails the rewrite (it runs again).
    scattered: set[str] = field(default_factory=set)
    ahead: list[DataFile] = field(default_factory=list)  # delete files carried before the commit's lock
    _map: RewriteMap | None = None

    def add(self, inputs: list[str], kept: list[Kept], outputs: list[DataFile]) -> None:
        self.groups.append((inputs, kept, outputs))
        self._map = None

    @property
    def inputs(self) -> set[str]:
        return {p for inputs, _, _ in self.groups for p in inputs}

    @property
    def map(self) -> RewriteMap:
        if self._map is None:
            self._map = RewriteMap.of([(i, k, [(f.file_path, f.record_count) for f in o]) for i, k, o in self.groups],
                                      mappable=not self.scattered)
        return self._map

    def carry_ahead(self, table: Table, rounds: int = 3) -> None:
        """Carry the deletes committed since the rewrite read its files onto its new files, before the
        commit takes the table's lock: they become known, and under the lock only newer ones are left.
        Again while a round takes long enough for the stream to have committed more meanwhile."""
        for _ in range(rounds):
            started = time.monotonic()
            now = live_deletes(table)
            carried = self.translate(table, now)
            self.ahead += carried
            self.known |= now.files.keys()
            if not carried or time.monotonic() - started < 1.0:
                return
            table = table.refresh()

    def carry(self, table: Table, entries: list[ManifestEntry] | None, live_data: set[str]) -> Carried:
        """What a rewrite's commit does with the table's position deletes as they are now: those
        committed since the rewrite read its files, on the new files (most carried ahead); those naming
        no live file, gone."""
        now = live_deletes(table, entries)
        fresh = self.translate(table, now)
        return Carried(self.ahead + fresh, now.removable(live_data), now.count, fresh)

    def forget_ahead(self, table: Table) -> None:
        delete_files(table, [f.file_path for f in self.ahead])
        self.ahead = []

    def translate(self, table: Table, now: LiveDeletes) -> list[DataFile]:
        """Delete files on the outputs for the rows of the inputs that delete files committed since the
        rewrite read them remove."""
        if all(name in self.known for name in now.named):  # none committed since: an append-only table's every time
            return []
        hit_scattered = [p for p in self.scattered if _new_positions(now, self.known, p).size]
        if hit_scattered:
            raise RewriteConflict(f"rows of {hit_scattered[0]} were deleted while it was rewritten into the "
                                  "current partitioning")
        where = self.map
        numbers = {p: i for i, p in enumerate(where.inputs)}
        outputs = [f for _, _, files in self.groups for f in files]
        doomed: dict[str, list[np.ndarray]] = defaultdict(list)
        for path in where.inputs:
            gone = _new_positions(now, self.known, path)
            gone = gone[gone < where.input_rows[numbers[path]]]
            if not gone.size or not outputs:
                continue
            kept, out, rows = where.place(np.full(gone.size, numbers[path]), gone)
            for j in np.unique(out[kept]):
                doomed[outputs[j].file_path].append(rows[kept & (out == j)])
        # Already sorted and distinct: an output's rows come from its group's inputs, each input's in
        # order and after the previous input's (ranks), and each input's positions are distinct.
        at = {p: np.concatenate(v) for p, v in doomed.items()}
        return write_deletes_by_partition(table.metadata, table.io, at, {f.file_path: f for f in outputs}) if at \
            else []

    def save(self, directory: Path | None) -> str | None:
        """Save the map where the table's key index looks for it (`directory`, if the table has one);
        its id, for the rewrite's snapshot to name, or None."""
        if directory is None or not directory.exists():
            return None
        rewrite_id = uuid.uuid4().hex
        folder = directory / "rewrites"
        folder.mkdir(mode=0o700, exist_ok=True)
        self.map.save(folder / f"{rewrite_id}.npz")
        return rewrite_id


def _new_positions(now: LiveDeletes, known: set[str], data_path: str) -> np.ndarray:
    """The positions of `data_path` that delete files other than `known` remove."""
    arrays = [named[data_path] for name, named in now.named.items() if name not in known and data_path in named]
    return np.unique(np.concatenate(arrays)) if arrays else np.empty(0, dtype=np.int64)
