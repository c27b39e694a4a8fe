"""Counting offsets: how many rows hold each offset of a partition's expected range.

One counter per offset (two bytes each) instead of a hash of (partition, offset) pairs:
100M offsets cost 200 MB and one pass over the rows, and gaps and duplicates fall out
of the counters as runs.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

COUNTER = np.uint16  # a counter wraps only past 65,535 copies of one offset; `check` notices that


@dataclass
class PartitionTally:
    """Rows per offset in [first, end) of one partition, and the rows that fall outside it."""

    first: int
    end: int
    counts: np.ndarray = field(init=False)
    rows_in_range: int = 0
    below: list[int] = field(default_factory=list)  # offsets under `first`, at most a sample
    beyond: list[int] = field(default_factory=list)  # offsets at or past `end`, at most a sample
    below_rows: int = 0
    beyond_rows: int = 0

    def __post_init__(self) -> None:
        self.counts = np.zeros(max(self.end - self.first, 0), dtype=COUNTER)

    def add(self, offsets: np.ndarray) -> None:
        inside = (offsets >= self.first) & (offsets < self.end)
        kept = offsets[inside] - self.first
        np.add.at(self.counts, kept, 1)
        self.rows_in_range += len(kept)
        if len(kept) != len(offsets):
            low, high = offsets[offsets < self.first], offsets[offsets >= self.end]
            self.below_rows += len(low)
            self.beyond_rows += len(high)
            self.below.extend(low[: SAMPLE - len(self.below)].tolist())
            self.beyond.extend(high[: SAMPLE - len(self.beyond)].tolist())

    def check(self) -> None:
        if int(self.counts.sum(dtype=np.int64)) != self.rows_in_range:
            raise OverflowError("an offset is held by more than 65,535 rows")

    def missing(self) -> list[tuple[int, int]]:
        """Ranges [from, to) of offsets no row holds."""
        return [(self.first + a, self.first + b) for a, b in runs(self.counts == 0)]

    def duplicated(self) -> list[tuple[int, int, int]]:
        """Ranges [from, to) of offsets more than one row holds, with the most copies in each."""
        return [(self.first + a, self.first + b, int(self.counts[a:b].max())) for a, b in runs(self.counts > 1)]


SAMPLE = 20


def runs(mask: np.ndarray) -> list[tuple[int, int]]:
    """The [start, stop) index ranges where `mask` is true."""
    if not len(mask):
        return []
    edges = np.flatnonzero(np.diff(np.concatenate(([False], mask, [False])).astype(np.int8)))
    return [(int(a), int(b)) for a, b in zip(edges[::2], edges[1::2])]


def tally(batches, tallies: dict[int, PartitionTally], make) -> None:
    """Add record batches of (_kafka_partition, _kafka_offset) to `tallies`; `make(partition)` gives
    the tally of a partition not in it yet."""
    for batch in batches:
        if not batch.num_rows:
            continue
        if batch.column(0).null_count or batch.column(1).null_count:
            raise ValueError("a row without a Kafka partition or offset")
        partitions = batch.column(0).to_numpy()
        offsets = batch.column(1).to_numpy()
        present = np.unique(partitions)
        for p in present.tolist():
            if p not in tallies:
                tallies[p] = make(p)
            tallies[p].add(offsets if len(present) == 1 else offsets[partitions == p])
