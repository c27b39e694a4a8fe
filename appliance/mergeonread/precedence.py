"""Which message of a key is the newest: the one rule, wherever Floe decides it.

A batch's reduction to each key's newest message (`decode.keys`), an upsert commit against the rows the
table holds (`index`), a replay of dead letters (`replayed`) and the audit's proof (`auditor.upserts`)
all ask this module, so they cannot disagree.

The rule, for two messages of one key:
- in one partition, the higher offset wins (Kafka's own order);
- across partitions (a key that moved: partitions were added to the topic, or a producer keyed another
  way), the later Kafka timestamp wins, and the higher partition when the timestamps are equal or unknown;
- a row without a Kafka position (loaded by another writer: a team's initial load) is older than any
  message.

Across partitions this is an order only while each partition's timestamps of a key never go backwards;
where they do, the outcome can depend on how messages fell into batches (the audit then says so).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

UNKNOWN = np.iinfo(np.int64).min  # a timestamp Kafka did not give: older than any known one


@dataclass(frozen=True)
class Position:
    """Where a message was: its partition and offset, and Kafka's timestamp in microseconds (the unit of the
    table's `_kafka_timestamp`), None when unknown."""

    partition: int
    offset: int
    timestamp: int | None = None

    def _across(self) -> tuple[int, int]:
        return (UNKNOWN if self.timestamp is None else self.timestamp, self.partition)


def newer(a: Position | None, b: Position | None) -> bool:
    """Whether `a` is newer than `b`; None is a row without a Kafka position."""
    if a is None:
        return False
    if b is None:
        return True
    if a.partition == b.partition:
        return a.offset > b.offset
    return a._across() > b._across()


def newer_arrays(a_partitions: np.ndarray, a_offsets: np.ndarray, a_timestamps: np.ndarray,
                 b_partitions: np.ndarray, b_offsets: np.ndarray, b_timestamps: np.ndarray) -> np.ndarray:
    """`newer` element-wise; a partition below 0 is a row without a Kafka position, UNKNOWN a timestamp
    Kafka did not give."""
    same = a_partitions == b_partitions
    across = (a_timestamps > b_timestamps) | ((a_timestamps == b_timestamps) & (a_partitions > b_partitions))
    out = np.where(same, a_offsets > b_offsets, across)
    out = np.where(b_partitions < 0, True, out)
    return np.where(a_partitions < 0, False, out)


def newest(groups: np.ndarray, partitions: np.ndarray, offsets: np.ndarray, timestamps: np.ndarray) -> np.ndarray:
    """The rule over many entries at once: for entries labelled by `groups` (one label per key), the
    index of each group's newest entry, in the order of the groups' labels. Each partition's newest by
    offset first, then across partitions by timestamp and partition."""
    if not len(groups):
        return np.empty(0, dtype=np.int64)
    order = np.lexsort((offsets, partitions, groups))
    g, p = groups[order], partitions[order]
    last = np.ones(len(order), dtype=bool)
    last[:-1] = (g[1:] != g[:-1]) | (p[1:] != p[:-1])
    candidates = order[last]
    order = candidates[np.lexsort((partitions[candidates], timestamps[candidates], groups[candidates]))]
    g = groups[order]
    last = np.ones(len(order), dtype=bool)
    last[:-1] = g[1:] != g[:-1]
    return order[last]
