"""The order the engine's scheduled maintenance takes tables in: with hundreds of tables due at once, the most
fragmented and busiest first, one task at a time, and what waits said (`floe table runs` shows the queue).

Pure: `Due` is what a check found a table needs (`Maintainer.assess`), `ordered` the one rule of precedence.
A table whose compaction is due goes before those that only need expiry or orphan removal (a rewrite is what
readers of a fragmented table wait for); among them, the larger score first: the files a compaction would merge
(small data files and delete files), weighted by how busy the table is (its commits in the last hour: a busy
table fragments again fastest, and its readers are the most); ties by name, so that an order is reproducible.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass

from appliance.core.vocabulary import MaintenanceTask

REWRITES = (MaintenanceTask.COMPACT, MaintenanceTask.RETENTION)  # tasks that rewrite data files in Spark


@dataclass(frozen=True)
class Due:
    """What a check found a table needs now, with what decides its place in the queue."""

    table: str
    tasks: tuple[MaintenanceTask, ...]
    files_to_merge: int = 0  # small data files and delete files a compaction would rewrite (0: none due)
    commits_last_hour: int = 0

    @property
    def score(self) -> float:
        return self.files_to_merge * (1 + self.commits_last_hour / 60)

    @property
    def reason(self) -> str:
        """Why it is where it is, as `floe table runs` says it."""
        parts = [f"{self.files_to_merge} files to merge"] if MaintenanceTask.COMPACT in self.tasks else []
        parts.append(f"{self.commits_last_hour} commits in the last hour")
        return ", ".join(parts)


def ordered(dues: list[Due]) -> list[Due]:
    """The tables with something due, in the order they are maintained (see the module's rule)."""
    return sorted((d for d in dues if d.tasks),
                  key=lambda d: (MaintenanceTask.COMPACT not in d.tasks, -d.score, d.table))


def commits_since(snapshot_times_ms: list[int], since_ms: int) -> int:
    """How many of a table's snapshots were committed at or after `since_ms`."""
    return sum(1 for t in snapshot_times_ms if t >= since_ms)


def spread(table: str) -> float:
    """A stable share in [0, 1) of the table's own (its name's CRC-32), the same in every process and run."""
    return zlib.crc32(table.encode()) / 2**32


def stretch(table: str, interval: float) -> float:
    """The table's own interval of a task that runs at most every `interval`: up to a quarter longer, so that
    tables maintained together first are due at different checks after a few intervals, never all at once."""
    return interval * (1 + spread(table) / 4)
