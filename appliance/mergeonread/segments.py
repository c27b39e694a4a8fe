"""Where the index's locations point: a location is 64 bits, a segment (one data file's rows of one Kafka
partition) and a row of that file; and rewrites followed without touching every location at once.

A segment knows its file and its Kafka partition, so an upsert learns the partition of a key's current
row (which the precedence rule needs) from its location alone. When a rewrite removes files, their
segments point into its `RewriteMap`: `translate` follows a location through it (and through later
ones) to the row's new file and position. Locations are translated where they are met (a lookup writes
the answer back) and, shard by shard, by the index's checkpoint cycle, after which the map is let go.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from appliance.core.errors import KeyIndexStale
from appliance.mergeonread.folding import RewriteMap

ROW_BITS = 38  # 2.7e11 rows in a file
SEGMENT_BITS = 63 - ROW_BITS  # the top bit says "no row"
ROW_MASK = np.uint64((1 << ROW_BITS) - 1)
DEAD = np.uint64(0xFFFF_FFFF_FFFF_FFFF)  # no row, and nothing to remember (kept in its place until a merge)
MAX_SEGMENTS = 1 << SEGMENT_BITS
PAIR_SPAN = 1 << 32  # a (file number, Kafka partition) pair as file * PAIR_SPAN + partition + PAIR_SPAN // 2
# A key whose newest message deleted it: no row, but that message's partition and Kafka timestamp (ms),
# for a message of another partition that comes later with an older timestamp (`precedence`).
TOMB = np.uint64(1 << 63)
TOMB_TIME_BITS = 42  # ms since 1970: until 2109
TOMB_PARTITIONS = (1 << (63 - TOMB_TIME_BITS)) - 1  # the last partition number is DEAD's


def live(locations: np.ndarray) -> np.ndarray:
    """Which locations are rows (neither DEAD nor a tombstone)."""
    return (locations >> np.uint64(63)) == 0


def tombstones(partitions: np.ndarray, timestamps: np.ndarray) -> np.ndarray:
    """Tombstones of deletes at these partitions and timestamps (µs; below 0: unknown, kept as 0)."""
    millis = np.clip(timestamps // 1000, 0, (1 << TOMB_TIME_BITS) - 1).astype(np.uint64)
    parts = np.clip(partitions, 0, TOMB_PARTITIONS - 1).astype(np.uint64)
    return TOMB | (parts << np.uint64(TOMB_TIME_BITS)) | millis


def tombstone_positions(locations: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(partition, timestamp in µs) of tombstones."""
    parts = ((locations & ~TOMB) >> np.uint64(TOMB_TIME_BITS)).astype(np.int64)
    millis = (locations & np.uint64((1 << TOMB_TIME_BITS) - 1)).astype(np.int64)
    return parts.astype(np.int32), millis * 1000
LIVE, RELEASED = -1, -2  # a segment's rewrite input: none, or one whose map was let go


@dataclass
class Rewrite:
    """A rewrite the index follows: its map, its inputs' first global number, its outputs' file numbers."""

    rewrite_id: str
    map: RewriteMap | None  # None once let go
    first_input: int
    output_files: np.ndarray  # int64, per output: its file number


class Segments:
    """File numbers, segments and the rewrites pending translation. Not thread-safe: the index's owner's."""

    def __init__(self) -> None:
        self.paths: list[str | None] = []  # file number -> path (None: let go)
        self.numbers: dict[str, int] = {}
        self.file = np.empty(0, dtype=np.int64)  # segment -> file number
        self.partition = np.empty(0, dtype=np.int32)  # segment -> Kafka partition (-1: none)
        self.input = np.empty(0, dtype=np.int64)  # segment -> global input number of a pending rewrite, or LIVE
        self.count = 0
        self._pairs: dict[tuple[int, int], int] = {}
        self._by_file: dict[int, list[int]] = {}
        self._file_input: dict[int, int] = {}  # file number -> its global input number in a rewrite followed
        self.rewrites: list[Rewrite] = []
        self._input_rewrite = np.empty(0, dtype=np.int64)  # global input number -> index in `rewrites`
        self._inputs = 0

    # ---- files and segments ---------------------------------------------------------------------

    def file_number(self, path: str) -> int:
        number = self.numbers.get(path)
        if number is None:
            number = self.numbers[path] = len(self.paths)
            self.paths.append(path)
        return number

    def segment(self, file_number: int, partition: int) -> int:
        found = self._pairs.get((file_number, partition))
        if found is None:
            if self.count >= MAX_SEGMENTS:
                raise KeyIndexStale("the key index ran out of segment numbers; it is built again")
            if self.count == len(self.file):
                grow = max(1024, self.count)
                self.file = np.concatenate([self.file, np.zeros(grow, dtype=np.int64)])
                self.partition = np.concatenate([self.partition, np.zeros(grow, dtype=np.int32)])
                self.input = np.concatenate([self.input, np.full(grow, LIVE, dtype=np.int64)])
            found = self._pairs[(file_number, partition)] = self.count
            self.file[found], self.partition[found] = file_number, partition
            self.input[found] = self._file_input.get(file_number, LIVE)
            self._by_file.setdefault(file_number, []).append(found)
            self.count += 1
        return found

    def locations(self, file_number: int, partitions: np.ndarray, rows: np.ndarray | None = None) -> np.ndarray:
        """The locations of a file's rows (all of them, in order, or `rows`), each row's partition given."""
        rows = np.arange(len(partitions), dtype=np.uint64) if rows is None else rows.astype(np.uint64)
        if not len(partitions) or (partitions == partitions[0]).all():  # a file of one partition: the usual
            segment = np.uint64(self.segment(file_number, int(partitions[0]) if len(partitions) else -1))
            return (segment << np.uint64(ROW_BITS)) | rows
        values, inverse = np.unique(partitions, return_inverse=True)
        ids = np.array([self.segment(file_number, int(p)) for p in values], dtype=np.uint64)
        return (ids[inverse.reshape(-1)] << np.uint64(ROW_BITS)) | rows

    def locations_of_pairs(self, file_numbers: np.ndarray, partitions: np.ndarray, rows: np.ndarray) -> np.ndarray:
        # Each (file, partition) pair as one int64, in the pairs' own order (file, then partition, which may be
        # -1): numpy's unique over rows (`axis=0`) sorts them as raw bytes, 80% of a checkpoint step that
        # follows a compaction of 10^8 keys; over one int64 column it is a plain sort.
        pairs = file_numbers.astype(np.int64) * PAIR_SPAN + (partitions.astype(np.int64) + PAIR_SPAN // 2)
        values, inverse = np.unique(pairs, return_inverse=True)
        ids = np.array([self.segment(int(v // PAIR_SPAN), int(v % PAIR_SPAN - PAIR_SPAN // 2)) for v in values],
                       dtype=np.uint64)
        return (ids[inverse.reshape(-1)] << np.uint64(ROW_BITS)) | rows.astype(np.uint64)

    def split(self, locations: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(segment, row) of each location (all rows: `live`)."""
        return (locations >> np.uint64(ROW_BITS)).astype(np.int64), (locations & ROW_MASK).astype(np.int64)

    def partitions_of(self, locations: np.ndarray) -> np.ndarray:
        return self.partition[self.split(locations)[0]]

    def by_file(self, locations: np.ndarray) -> dict[str, np.ndarray]:
        """Locations (rows, none pending translation) as each data file's rows, sorted."""
        locations = np.sort(locations)  # by segment, then row
        locations = locations[np.r_[True, locations[1:] != locations[:-1]]] if len(locations) else locations
        segments = (locations >> np.uint64(ROW_BITS)).astype(np.int64)
        cuts = np.flatnonzero(np.diff(segments)) + 1
        out: dict[str, list[np.ndarray]] = {}
        for part in np.split(locations, cuts) if len(locations) else ():
            path = self.paths[self.file[int(part[0] >> np.uint64(ROW_BITS))]]
            out.setdefault(path, []).append((part & ROW_MASK).astype(np.int64))
        return {p: v[0] if len(v) == 1 else np.sort(np.concatenate(v)) for p, v in out.items()}

    # ---- rewrites ---------------------------------------------------------------------------------

    def follow(self, rewrite_id: str, rewrite: RewriteMap) -> None:
        """From now on, locations in the rewrite's inputs translate through its map."""
        if not rewrite.mappable:
            raise KeyIndexStale("a rewrite moved rows across partitions in no order the key index can follow")
        index = len(self.rewrites)
        outputs = np.array([self.file_number(p) for p in rewrite.outputs], dtype=np.int64)
        self.rewrites.append(Rewrite(rewrite_id, rewrite, self._inputs, outputs))
        self._input_rewrite = np.concatenate([self._input_rewrite, np.full(len(rewrite.inputs), index)])
        for i, path in enumerate(rewrite.inputs):
            number = self.file_number(path)
            self._file_input[number] = self._inputs + i
            for segment in self._by_file.get(number, ()):
                self.input[segment] = self._inputs + i
        self._inputs += len(rewrite.inputs)

    @property
    def pending(self) -> bool:
        return any(r.map is not None for r in self.rewrites)

    def translate(self, locations: np.ndarray) -> tuple[np.ndarray, bool]:
        """`locations` followed through every pending rewrite (a row a rewrite left out becomes DEAD; what
        is not a row stays as it is); and whether any changed."""
        if not self.pending:
            return locations, False
        out = locations
        changed = False
        while True:
            rows_at = np.flatnonzero(live(out))
            segments, rows = self.split(out[rows_at])
            inputs = self.input[segments]
            if (inputs == RELEASED).any():
                raise KeyIndexStale("a location points into a rewrite the key index let go of")
            hit = inputs >= 0
            if not hit.any():
                return out, changed
            if not changed:
                out, changed = out.copy(), True
            where, inputs, rows = rows_at[hit], inputs[hit], rows[hit]
            partitions = self.partition[segments[hit]]
            owners = self._input_rewrite[inputs]
            for owner in np.unique(owners):
                mine = owners == owner
                rewrite = self.rewrites[owner]
                kept, outputs, new_rows = rewrite.map.place(inputs[mine] - rewrite.first_input, rows[mine])
                moved = self.locations_of_pairs(rewrite.output_files[outputs], partitions[mine], new_rows) \
                    if len(rewrite.output_files) else np.zeros(len(kept), dtype=np.uint64)
                out[where[mine]] = np.where(kept, moved, DEAD)

    def release(self, count: int) -> None:
        """Let go of the first `count` rewrites' maps: no location points into their inputs any more."""
        for rewrite in self.rewrites[:count]:
            if rewrite.map is None:
                continue
            for path in rewrite.map.inputs:
                if path in self.numbers:
                    self.forget_file(self.numbers[path])
            rewrite.map = None

    def forget_file(self, number: int) -> None:
        """A file no location points into any more (rewritten, or truncated away): its segments go; one
        still met would say the index is stale rather than point anywhere."""
        path = self.paths[number]
        if path is not None:
            self.numbers.pop(path, None)
            self.paths[number] = None
        self._file_input[number] = RELEASED
        for segment in self._by_file.pop(number, ()):
            self._pairs.pop((number, int(self.partition[segment])), None)
            self.input[segment] = RELEASED

    def live(self) -> tuple[np.ndarray, list[int]]:
        """The segments of files still named, and those files' numbers: what a checkpoint keeps."""
        named = np.array([p is not None for p in self.paths] + [False], dtype=bool)
        files = self.file[:self.count]
        ids = np.flatnonzero(named[np.where(files >= 0, files, len(self.paths))])
        return ids, [n for n, p in enumerate(self.paths) if p is not None]

    @classmethod
    def restore(cls, ids: np.ndarray, files: np.ndarray, partitions: np.ndarray, numbers: list[int],
                paths: list[str]) -> Segments:
        """Segments as a checkpoint kept them (ids and file numbers as they were)."""
        out = cls()
        size = (max(numbers) + 1) if numbers else 0
        out.paths = [None] * size
        for number, path in zip(numbers, paths):
            out.paths[number], out.numbers[path] = path, number
        count = int(ids.max()) + 1 if len(ids) else 0
        out.file = np.full(max(count, 1024), -1, dtype=np.int64)
        out.partition = np.zeros(max(count, 1024), dtype=np.int32)
        out.input = np.full(max(count, 1024), RELEASED, dtype=np.int64)
        out.file[ids], out.partition[ids], out.input[ids] = files, partitions, LIVE
        out.count = count
        for segment, number, partition in zip(ids.tolist(), files.tolist(), partitions.tolist()):
            out._pairs[(number, partition)] = segment
            out._by_file.setdefault(number, []).append(segment)
        return out
