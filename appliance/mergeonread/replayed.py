"""Dead letters replayed into an upsert table: each replayed message against its key's current row.

A replayed message is old: rows of its key may have come after it. The same rule as ingestion decides
(`precedence`), but a row of the message's own partition is compared by offset, read back from its file.
A replayed row that wins replaces the key's row; one that loses is deleted by position in the same
snapshot, and its dead letter stays where it is (`lost`).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
from pyiceberg.manifest import DataFile
from pyiceberg.table import Table

from appliance.mergeonread.deletes import write_deletes_by_partition
from appliance.mergeonread.index import KeyIndex
from appliance.mergeonread.lineage import bring_to
from appliance.mergeonread.plans import KeyedRows, plan
from appliance.mergeonread.store import IndexStore, index_directory


def open_index(home: Path, table: Table, columns: tuple[str, ...]) -> KeyIndex:
    """A key index of `table` for this process alone: its checkpoint (the engine's) read and brought to the
    table, else built."""
    return KeyIndex(columns, IndexStore(index_directory(home, table), writable=False))


def replay_changes(target: Table, index: KeyIndex, batch: KeyedRows) -> tuple[list[DataFile], np.ndarray]:
    """The position deletes of a replay's commit to an upsert table, and which of its entries (rows,
    then deleted keys) lost to a newer row of their key."""
    bring_to(index, target)
    done = plan(index, target, batch, after_table=False)
    deletes = write_deletes_by_partition(target.metadata, target.io, done.doomed,
                                         {**index.files, **{f.file_path: f for f in batch.files}})
    return deletes, done.lost
