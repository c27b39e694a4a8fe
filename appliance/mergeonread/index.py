"""Each key's row in an upsert table: key -> location (data file segment and row), in about 24 bytes a key.

The index is the table's, never the other way round: it records the snapshot it reflects and is
brought to the table's current one before every use (`lineage.bring_to`), by replaying Floe's own
commits since, or built again from the table (`building`). The engine keeps one per upsert stream in
the driver (`ingest/indexes.py`) and checkpoints it beside the state (`store`), so that a restart loads
it instead of reading every key back.

Keys are kept as `keyforms` words in sorted `shards`; locations point into `segments`. A batch is looked
up, decided (`plans`) and applied with numpy calls over all of its keys, never a Python loop over them.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa
from pyiceberg.manifest import DataFile

from appliance.mergeonread.keyforms import KeyForm, mix
from appliance.mergeonread.segments import Segments, live
from appliance.mergeonread.shards import Found, Shards


class KeyIndex:
    """One upsert table's keys. Not thread-safe: the stream's worker (or one command) owns it."""

    def __init__(self, columns: tuple[str, ...], store: Any = None) -> None:
        self.columns = tuple(columns)
        self.store = store  # an IndexStore, to checkpoint to and load from; None: memory only
        self.forget()

    def forget(self) -> None:
        """Drop what is in memory: the next use loads the checkpoint or builds from the table."""
        self.form: KeyForm | None = None
        self.table_uuid: str | None = None
        self.snapshot_id: int | None = None  # the snapshot it reflects
        self.sequence = 0  # that snapshot's sequence number
        self.ready = False
        self.shards = Shards(wide=True)
        self.segments = Segments()
        self.files: dict[str, DataFile] = {}  # the live data files, for their spec and partition
        self.duplicates = np.empty(0, dtype=np.uint64)  # rows of keys found twice: deleted by the next commit
        self.keys = 0  # keys with a row
        self.clocks: dict[int, int] = {}  # partition -> the newest Kafka timestamp (ms) committed from it

    def reset(self, form: KeyForm, table_uuid: str) -> None:
        """Empty, for `form`'s keys of the table `table_uuid`."""
        self.forget()
        self.form, self.table_uuid = form, table_uuid
        self.shards = Shards(wide=form.width == 2)

    def __len__(self) -> int:
        return self.keys

    def reflects(self, table) -> bool:
        current = table.current_snapshot()
        return self.ready and self.table_uuid == str(table.metadata.table_uuid) \
            and self.snapshot_id == (current.snapshot_id if current else None)

    def at(self, snapshot_id: int | None, sequence: int) -> None:
        self.snapshot_id, self.sequence, self.ready = snapshot_id, sequence, True

    def tick(self, partitions: np.ndarray, timestamps: np.ndarray) -> None:
        """Messages of these partitions and timestamps (µs) were committed: a tombstone older than every
        partition's newest is beaten by any message to come, and can go."""
        for p in np.unique(partitions).tolist():
            newest = int(timestamps[partitions == p].max()) // 1000
            self.clocks[p] = max(self.clocks.get(p, 0), newest)
        self.shards.watermark = min(self.clocks.values()) if self.clocks else 0

    # ---- keys -------------------------------------------------------------------------------------

    def spread(self, words: np.ndarray) -> tuple[np.ndarray, np.ndarray | None]:
        h, low = mix(words)
        return h, low if self.shards.wide else None

    def find(self, h: np.ndarray, low: np.ndarray | None) -> Found:
        """Where the keys are, their locations followed through pending rewrites (and written back)."""
        found = self.shards.find(h, low)
        present = np.flatnonzero(found.present)
        moved, changed = self.segments.translate(found.location[present])
        if changed:
            differs = present[moved != found.location[present]]
            found.location[present] = moved
            self._put(h, low, found, differs)
        return found

    def assign(self, h: np.ndarray, low: np.ndarray | None, found: Found, locations: np.ndarray) -> None:
        """Keys (as `find` found them) to new locations; DEAD or a tombstone deletes a key."""
        was, now = found.present, live(locations)
        self.keys += int(np.count_nonzero(now & ~was)) - int(np.count_nonzero(was & ~now))
        self.shards.assign(h, low, found, locations)

    def _put(self, h: np.ndarray, low: np.ndarray | None, found: Found, rows: np.ndarray) -> None:
        if not len(rows):
            return
        sub = Found(found.shard[rows], found.where[rows], found.slot[rows], found.location[rows])
        gone = int(np.count_nonzero(~live(sub.location)))
        self.shards.assign(h[rows], None if low is None else low[rows], sub, sub.location)
        self.keys -= gone

    def locate(self, key: Any) -> tuple[str, int] | None:
        """One key's row (a value, or a tuple of the key columns' values): for tests and tools."""
        values = key if isinstance(key, tuple) else (key,)
        table = pa.table({c: [v] for c, v in zip(self.columns, values)})
        h, low = self.spread(self.form.words(table))
        location = self.find(h, low).location[0]
        if not live(np.array([location]))[0]:
            return None
        [(path, rows)] = self.segments.by_file(np.array([location], dtype=np.uint64)).items()
        return path, int(rows[0])

    def contents(self) -> dict[tuple[int, int], tuple[str, int]]:
        """Every live key (its spread words) and its row: to compare two indexes (tests, tools)."""
        out = {}
        for shard in self.shards.parts:
            for h, low, loc in ((shard.h, shard.low, shard.loc), (shard.dh, shard.dlow, shard.dloc)):
                moved = self.segments.translate(loc)[0]
                for i in np.flatnonzero(live(moved)).tolist():
                    [(path, rows)] = self.segments.by_file(moved[i:i + 1]).items()
                    out[(int(h[i]), int(low[i]) if low is not None else 0)] = (path, int(rows[0]))
        return out

    def nbytes(self) -> int:
        """Memory the keys and locations take (the shards' arrays)."""
        return self.shards.nbytes()
