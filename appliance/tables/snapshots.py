"""Snapshots and what their summaries hold: the stream offsets committed with the data, totals.

Every commit of a stream carries, in its snapshot summary, the offsets to resume from
(`floe.offsets`), so the table and its offsets can never disagree. Maintenance snapshots
copy their parent's offsets forward, so the newest snapshot of a table holds them too.
This module is the one place that reads or writes those keys, and the one place that
walks a table's ancestry (with PyIceberg's `ancestors_of`).
"""

from __future__ import annotations

import datetime as dt
import json
from dataclasses import dataclass
from typing import Iterator

from pyiceberg.table import Table
from pyiceberg.table.metadata import TableMetadata
from pyiceberg.table.snapshots import TOTAL_DELETE_FILES, Snapshot, ancestors_of

from appliance.tables.metadata_json import OFFSETS_KEY, STREAM_KEY, parse_offsets  # noqa: F401  (one definition)

TOPIC_KEY = "floe.topic"
MAINTENANCE_KEY = "floe.maintenance"  # which task made a snapshot
# A stage's commits: which stage, and the snapshot of its source table it has read up to.
STAGE_KEY = "floe.stage-id"
SOURCE_SNAPSHOT_KEY = "floe.source-snapshot"
SOURCE_TABLE_KEY = "floe.source-table"
# A table property: how many rows retention has deleted from the table, ever. Snapshots are
# expired, a property stays; `floe audit` tells rows retention removed from lost ones with it.
RETENTION_DELETED_KEY = "floe.retention-deleted-rows"
PURGED_KEY = "floe.purged-rows"  # dead letters purged on purpose (`floe dlq purge`), ever
REPLAY_KEY = "floe.replay"  # both snapshots of one dead-letter replay carry its id
REPLAY_TARGET_KEY = "floe.replay.target-snapshot"  # the dead-letter snapshot names its target's
POSITION_KEYS = (STREAM_KEY, TOPIC_KEY, OFFSETS_KEY, STAGE_KEY, SOURCE_SNAPSHOT_KEY, SOURCE_TABLE_KEY)


def summary_properties(snapshot: Snapshot | None) -> dict[str, str]:
    return snapshot.summary.additional_properties if snapshot is not None and snapshot.summary else {}


def holds_no_deletes(snapshot: Snapshot | None) -> bool:
    """Whether a snapshot's summary says its table holds no delete file: an append-only table's (most tables),
    whose manifests need not be read whole to find none. A summary without the total (another writer's) is not
    taken for a no."""
    return summary_properties(snapshot).get(TOTAL_DELETE_FILES) == "0"


def offsets_properties(stream_id: str, topic: str, offsets: dict[int, int]) -> dict[str, str]:
    """The summary keys a stream's commit carries."""
    return {STREAM_KEY: stream_id, TOPIC_KEY: topic, OFFSETS_KEY: offsets_json(offsets)}


def offsets_json(offsets: dict[int, int]) -> str:
    return json.dumps({str(p): o for p, o in sorted(offsets.items())})


def _lineage(metadata: TableMetadata, start: Snapshot | None = None) -> Iterator[Snapshot]:
    """The snapshot (the current one by default) and its ancestors, newest first, as far as they are kept."""
    return ancestors_of(start if start is not None else metadata.current_snapshot(), metadata)


def ancestors(metadata: TableMetadata) -> list[Snapshot]:
    return list(_lineage(metadata))


def replay_of(table: Table) -> str | None:
    """The id of the newest dead-letter replay that committed to `table`."""
    return next((summary_properties(s)[REPLAY_KEY] for s in _lineage(table.metadata)
                 if REPLAY_KEY in summary_properties(s)), None)


def committed_offsets(table: Table, stream_id: str) -> dict[int, int] | None:
    """Next offsets to read per partition, from the newest snapshot this stream committed."""
    for snapshot in _lineage(table.metadata):
        summary = summary_properties(snapshot)
        if summary.get(STREAM_KEY) == stream_id and OFFSETS_KEY in summary:
            return parse_offsets(summary[OFFSETS_KEY])
    return None


def stage_properties(stage_id: str, source: str, snapshot_id: int) -> dict[str, str]:
    """The summary keys a stage's commit carries."""
    return {STAGE_KEY: stage_id, SOURCE_TABLE_KEY: source, SOURCE_SNAPSHOT_KEY: str(snapshot_id)}


def stage_position(table: Table, stage_id: str) -> int | None:
    """The source snapshot this stage has read up to, from the newest snapshot it committed."""
    for snapshot in _lineage(table.metadata):
        summary = summary_properties(snapshot)
        if summary.get(STAGE_KEY) == stage_id and SOURCE_SNAPSHOT_KEY in summary:
            return int(summary[SOURCE_SNAPSHOT_KEY])
    return None


def stream_snapshot_id(table: Table, stream_id: str) -> int | None:
    """The id of the newest snapshot that carries this stream's offsets."""
    for snapshot in _lineage(table.metadata):
        if summary_properties(snapshot).get(STREAM_KEY) == stream_id:
            return snapshot.snapshot_id
    return None


def offsets_summary(metadata: TableMetadata, snapshot_id: int | None) -> dict[str, str]:
    """The position keys (a stream's offsets, a stage's source snapshot) of the newest snapshot at
    or before `snapshot_id` that has them: what a maintenance snapshot carries forward."""
    start = metadata.snapshot_by_id(snapshot_id) if snapshot_id is not None else None
    if start is None:
        return {}
    for snapshot in _lineage(metadata, start):
        summary = summary_properties(snapshot)
        if (STREAM_KEY in summary and OFFSETS_KEY in summary) or (STAGE_KEY in summary
                                                                  and SOURCE_SNAPSHOT_KEY in summary):
            return {k: summary[k] for k in POSITION_KEYS if k in summary}
    return {}


def offsets_snapshot_chain(metadata: TableMetadata) -> list[int]:
    """The current snapshot and its ancestors down to the newest one holding stream offsets.

    Expiry keeps all of them, so that `committed_offsets`, which walks this chain, finds
    the offsets whatever was committed on top of them.
    """
    chain: list[int] = []
    for snapshot in _lineage(metadata):
        chain.append(snapshot.snapshot_id)
        summary = summary_properties(snapshot)
        if STREAM_KEY in summary or STAGE_KEY in summary:
            return chain
    return chain[:1]  # no offsets anywhere: only the current snapshot matters


@dataclass(frozen=True)
class Commit:
    """One snapshot that carries stream offsets: when it was committed and what it holds."""

    snapshot_id: int
    committed_ms: int
    offsets: dict[int, int]


def lineage_since(metadata: TableMetadata, snapshot_id: int) -> list[int]:
    """The current snapshot and its ancestors down to `snapshot_id` (included); empty when
    `snapshot_id` is not among them."""
    chain: list[int] = []
    for snapshot in _lineage(metadata):
        chain.append(snapshot.snapshot_id)
        if snapshot.snapshot_id == snapshot_id:
            return chain
    return []


def appended_since(metadata: TableMetadata, snapshot_id: int | None) -> tuple[int, int]:
    """(append snapshots, rows they added) after `snapshot_id` in the current lineage; None: all kept."""
    snapshots = rows = 0
    for snapshot in _lineage(metadata):
        if snapshot.snapshot_id == snapshot_id:
            break
        if snapshot.summary is not None and snapshot.summary.operation.value == "append":
            snapshots += 1
            rows += int(summary_properties(snapshot).get("added-records", 0))
    return snapshots, rows


def offset_commits(table: Table) -> list[Commit]:
    """Every kept snapshot of the current lineage that carries offsets, oldest first."""
    out = [
        Commit(s.snapshot_id, s.timestamp_ms, parse_offsets(summary_properties(s)[OFFSETS_KEY]))
        for s in _lineage(table.metadata) if OFFSETS_KEY in summary_properties(s)
    ]
    out.reverse()
    return out


@dataclass(frozen=True)
class Totals:
    """What the current snapshot's summary says of the whole table."""

    snapshot_id: int | None
    rows: int  # in the data files: rows deleted by position are counted until compaction folds them
    data_files: int
    size_bytes: int
    delete_files: int = 0
    position_deletes: int = 0


def totals(table: Table) -> Totals:
    snapshot = table.current_snapshot()
    summary = summary_properties(snapshot)
    return Totals(
        snapshot_id=snapshot.snapshot_id if snapshot else None,
        rows=int(summary.get("total-records", 0)),
        data_files=int(summary.get("total-data-files", 0)),
        size_bytes=int(summary.get("total-files-size", 0)),
        delete_files=int(summary.get("total-delete-files", 0)),
        position_deletes=int(summary.get("total-position-deletes", 0)),
    )


@dataclass(frozen=True)
class SnapshotInfo:
    snapshot_id: int
    committed_at: dt.datetime
    operation: str
    rows_added: int


def snapshot_infos(table: Table) -> list[SnapshotInfo]:
    """Every kept snapshot of the table, in metadata order."""
    return [
        SnapshotInfo(
            snapshot_id=s.snapshot_id,
            committed_at=dt.datetime.fromtimestamp(s.timestamp_ms / 1000, dt.timezone.utc),
            operation=s.summary.operation.value if s.summary else "",
            rows_added=int(summary_properties(s).get("added-records", 0)),
        )
        for s in table.snapshots()
    ]


def retention_deleted(table: Table) -> int:
    return int(table.properties.get(RETENTION_DELETED_KEY, "0"))


def purged(table: Table) -> int:
    return int(table.properties.get(PURGED_KEY, "0"))
