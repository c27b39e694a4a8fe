"""An upsert stream's commit: its new rows, the position deletes of the rows they replace or delete,
and its offsets, in one snapshot (merge-on-read: nothing is rewritten).

The batch's tasks wrote each key's newest row into data files and say which keys their newest
message deletes. Here, under the table's commit lock, the key index is brought up to the table's
current snapshot (rebuilt when another writer committed), each replaced or deleted row is found
by position, the position-delete files are written, and all of it commits with the offsets. A
replay after a crash starts from the table as committed (offsets and rows in one snapshot), so it
can neither resurrect a deleted key nor leave a key twice.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from pyiceberg.exceptions import CommitFailedException
from pyiceberg.manifest import DataFile
from pyiceberg.table import Table
from pyiceberg.table.snapshots import Operation

from appliance.core.errors import CommitConflict
from appliance.core.failpoints import failpoint
from appliance.core.retry import retrying
from appliance.tables.commits import already_committed
from appliance.tables.datafiles import delete_files, live_entries
from appliance.tables.fastpath.changes import FileChanges, commit_changes, spec_of
from appliance.tables.fastpath.deletes import write_deletes_by_partition
from appliance.tables.keyindex import KeyIndex
from appliance.tables.snapshots import offsets_properties


@dataclass
class KeyedRows:
    """What an upsert batch's tasks wrote and deleted."""

    written: list[tuple[DataFile, list[Any]]] = field(default_factory=list)  # new data file, its rows' keys
    deleted: list[Any] = field(default_factory=list)  # keys whose newest message deletes them
    truncated: bool = False  # a truncate: the rows committed before it go


@dataclass(frozen=True)
class UpsertCommit:
    snapshot_id: int | None
    replaced: int  # rows of earlier commits replaced or deleted (position deletes written)


def commit_upsert(table: Table, index: KeyIndex, rows: KeyedRows, stream_id: str, topic: str,
                  expected: dict[int, int] | None, offsets: dict[int, int], attempts: int = 5
                  ) -> tuple[Table, UpsertCommit]:
    """Commit `rows` with `offsets` in one snapshot; the caller holds the table's commit lock.

    As `commits.commit_files`: a lost race is retried on fresh metadata only while the table holds
    the offsets the batch was planned from.
    """
    name = ".".join(table.name())
    props = offsets_properties(stream_id, topic, offsets)
    try:
        for attempt in retrying(CommitFailedException, f"upsert commit to {name}", attempts=attempts):
            with attempt:
                if attempt.retry_state.attempt_number > 1:
                    table = table.refresh()
                    landed = already_committed(table, stream_id, expected, offsets)
                    if landed is not None:
                        index.forget()  # it did not see that commit land
                        return table, UpsertCommit(landed, 0)
                return _commit(table, index, rows, props)
    except CommitFailedException:
        raise CommitConflict(f"table {name}: upsert commit failed {attempts} times in a row") from None
    except BaseException:
        index.forget()
        raise


def _commit(table: Table, index: KeyIndex, rows: KeyedRows, props: dict[str, str]) -> tuple[Table, UpsertCommit]:
    if not index.reflects(table):
        index.build(table)
    plan = index.plan(rows.written, rows.deleted, rows.truncated)
    new = [f for f, _ in rows.written]
    default_spec = table.metadata.default_spec_id
    for f in new:
        f.spec_id = spec_of(f, default_spec)
    deletes = write_deletes_by_partition(table.metadata, table.io, plan.doomed,
                                         {**index.files, **{f.file_path: f for f in new}})
    removed = _everything(table) if plan.truncate else []
    failpoint("upsert_deletes_written")
    operation = Operation.OVERWRITE if deletes or removed else Operation.APPEND
    try:
        table = commit_changes(table, FileChanges(data=new, deletes=deletes, removed=removed), operation, props)
    except BaseException:
        delete_files(table, [f.file_path for f in deletes])  # never referenced
        raise
    snapshot_id = table.current_snapshot().snapshot_id
    index.landed(plan, new, snapshot_id)
    return table, UpsertCommit(snapshot_id, plan.replaced)


def _everything(table: Table) -> list[DataFile]:
    """Every live data and delete file: what a truncate removes."""
    return [e.data_file for e in live_entries(table)]
