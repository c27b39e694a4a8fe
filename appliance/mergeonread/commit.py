"""An upsert stream's commit: its new rows, the position deletes of the rows they replace or delete,
and its offsets, in one snapshot (merge-on-read: nothing is rewritten).

The batch's tasks wrote each key's newest row into data files and say which keys their newest
message deletes, as key words with Kafka positions (`plans.KeyedRows`). Here, under the table's commit
lock, the key index is brought to the table's current snapshot (`lineage`), the plan finds each
replaced or deleted row by position, the position-delete files are written, and all of it commits
with the offsets. The index changes only once the snapshot has landed; the caller then lets it save a
few of its shards (`checkpoint`), once the table's commit lock is free again. A replay after a crash
starts from the table as committed (offsets and rows in one snapshot), so it can neither resurrect a
deleted key nor leave a key twice; and the index, whatever it held, replays that snapshot or is built
again.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from pyiceberg.manifest import DataFile
from pyiceberg.table import Table
from pyiceberg.table.snapshots import Operation

from appliance.core.errors import KeyIndexStale
from appliance.core.failpoints import failpoint
from appliance.mergeonread.deletes import write_deletes_by_partition
from appliance.mergeonread.index import KeyIndex
from appliance.mergeonread.lineage import MERGE_KEY, bring_to, flatten
from appliance.mergeonread.plans import KeyedRows, landed, plan
from appliance.tables.commits import commit_with_offsets
from appliance.tables.datafiles import delete_files, live_entries
from appliance.tables.fastpath.changes import FileChanges, commit_changes, spec_of
from appliance.tables.snapshots import offsets_properties

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class UpsertCommit:
    snapshot_id: int | None
    replaced: int  # rows of earlier commits replaced or deleted (position deletes written)


def commit_upsert(table: Table, index: KeyIndex, rows: KeyedRows, stream_id: str, topic: str,
                  expected: dict[int, int] | None, offsets: dict[int, int], attempts: int = 5
                  ) -> tuple[Table, UpsertCommit]:
    """Commit `rows` with `offsets` in one snapshot; the caller holds the table's commit lock. A lost
    race is retried as `commits.commit_with_offsets` says; a commit that had landed is replayed by the
    index at the next one."""
    props = {**offsets_properties(stream_id, topic, offsets), MERGE_KEY: "upsert"}
    return commit_with_offsets(table, stream_id, expected, offsets, "upsert commit",
                               lambda t: _commit(t, index, rows, props),
                               lambda t, landed_id: (t, UpsertCommit(landed_id, 0)), attempts)


def _commit(table: Table, index: KeyIndex, rows: KeyedRows, props: dict[str, str]) -> tuple[Table, UpsertCommit]:
    bring_to(index, table)
    done = plan(index, table, rows)
    default_spec = table.metadata.default_spec_id
    for f in rows.files:
        f.spec_id = spec_of(f, default_spec)
    deletes = write_deletes_by_partition(table.metadata, table.io, done.doomed,
                                         {**index.files, **{f.file_path: f for f in rows.files}})
    removed = _everything(table) if rows.truncated else []
    failpoint("upsert_deletes_written")
    operation = Operation.OVERWRITE if deletes or removed else Operation.APPEND
    try:
        table = commit_changes(table, FileChanges(data=rows.files, deletes=deletes, removed=removed), operation,
                               props)
    except BaseException:
        delete_files(table, [f.file_path for f in deletes])  # never referenced
        raise
    failpoint("upsert_committed")
    snapshot = table.current_snapshot()
    try:
        landed(index, done, snapshot.snapshot_id, snapshot.sequence_number)
    except BaseException:
        index.forget()  # half-applied: the next commit loads the checkpoint or builds
        raise
    failpoint("upsert_landed")
    return table, UpsertCommit(snapshot.snapshot_id, done.replaced)


def checkpoint(index: KeyIndex, everything: bool = False) -> None:
    """Save the shards due (all: `everything`), if the index has a checkpoint. A checkpoint that cannot
    be written costs a longer start later, never a commit: it is logged, and tried again next time."""
    if index.store is None:
        return
    try:
        index.store.step(index, flatten, everything)
    except OSError as exc:
        log.warning("key index checkpoint in %s not written: %s", index.store.directory, exc)
    except KeyIndexStale as exc:
        log.warning("key index dropped (%s): the next commit loads or builds it", exc)
        index.forget()


def _everything(table: Table) -> list[DataFile]:
    """Every live data and delete file: what a truncate removes."""
    return [e.data_file for e in live_entries(table)]
