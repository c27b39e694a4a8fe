"""A stream's append as one snapshot: its files in a manifest of their own, the parent's manifests
kept, and merged into one once there are many.

What PyIceberg's merge-append does, on `tables.manifests`: the same files, the same summary,
the same merge rule (`commit.manifest.min-count-to-merge`, manifests under
`commit.manifest.target-size-bytes`), at a fraction of the CPU. Tables with a partition spec
take PyIceberg's own path: Floe creates none, and they are not worth a second writer.
"""

from __future__ import annotations

import uuid

from pyiceberg.manifest import DataFile, ManifestContent, ManifestEntry, ManifestEntryStatus, ManifestFile
from pyiceberg.table import Table
from pyiceberg.table.metadata import TableMetadata
from pyiceberg.table.refs import MAIN_BRANCH, SnapshotRefType
from pyiceberg.table.snapshots import (
    Operation,
    Snapshot,
    SnapshotSummaryCollector,
    Summary,
    update_snapshot_summaries,
)
from pyiceberg.table.update import AddSnapshotUpdate, AssertRefSnapshotId, SetSnapshotRefUpdate

from appliance.tables.fastpath.manifests import Manifests
from appliance.tables.fastpath.transactions import transaction

MIN_COUNT_TO_MERGE = "commit.manifest.min-count-to-merge"
TARGET_SIZE = "commit.manifest.target-size-bytes"
MERGE_ENABLED = "commit.manifest-merge.enabled"

MANIFESTS = Manifests()  # one per process: what it wrote, every table's commits can reuse


def append_files(table: Table, files: list[DataFile], properties: dict[str, str],
                 manifests: Manifests = MANIFESTS) -> Table:
    """Commit `files` as one `append` snapshot whose summary carries `properties`; the table after it.

    Raises PyIceberg's CommitFailedException when another writer committed first.
    """
    metadata = table.metadata
    if metadata.spec().fields or metadata.format_version != 2:
        return _pyiceberg_append(table, files, properties)
    io = table.io
    snapshot_id = metadata.new_snapshot_id()
    parent = metadata.snapshot_by_name(MAIN_BRANCH)
    sequence_number = metadata.next_sequence_number()
    commit = uuid.uuid4()
    location = table.location_provider()
    added = [ManifestEntry.from_args(status=ManifestEntryStatus.ADDED, snapshot_id=snapshot_id, sequence_number=None,
                                     file_sequence_number=None, data_file=f) for f in files]
    kept = [m for m in (manifests.manifests(io, parent.manifest_list) if parent else ())
            if m.has_added_files() or m.has_existing_files()]
    merged = _mergeable(metadata, kept, bool(added))
    if merged:
        added += [ManifestEntry.from_args(status=ManifestEntryStatus.EXISTING, snapshot_id=e.snapshot_id,
                                          sequence_number=e.sequence_number,
                                          file_sequence_number=e.file_sequence_number, data_file=e.data_file)
                  for m in merged for e in manifests.entries(io, m) if e.status != ManifestEntryStatus.DELETED]
        gone = {m.manifest_path for m in merged}
        kept = [m for m in kept if m.manifest_path not in gone]
    written = [manifests.write_manifest(io, location.new_metadata_location(f"{commit}-m0.avro"), metadata,
                                        metadata.spec(), added, snapshot_id, sequence_number)] if added else []
    manifest_list = location.new_metadata_location(f"snap-{snapshot_id}-0-{commit}.avro")
    parent_id = parent.snapshot_id if parent else None
    manifests.write_list(io, manifest_list, written + kept, snapshot_id, parent_id, sequence_number)
    return _commit(table, Snapshot(snapshot_id=snapshot_id, parent_snapshot_id=parent_id,
                                   sequence_number=sequence_number, manifest_list=manifest_list,
                                   summary=_summary(metadata, files, properties, parent),
                                   schema_id=metadata.current_schema_id))


def _commit(table: Table, snapshot: Snapshot) -> Table:
    """`snapshot` as the new head of the main branch, if the branch is still where it was."""
    tx = transaction(table)
    tx._apply(
        (AddSnapshotUpdate(snapshot=snapshot),
         SetSnapshotRefUpdate(snapshot_id=snapshot.snapshot_id, parent_snapshot_id=snapshot.parent_snapshot_id,
                              ref_name=MAIN_BRANCH, type=SnapshotRefType.BRANCH)),
        (AssertRefSnapshotId(snapshot_id=snapshot.parent_snapshot_id, ref=MAIN_BRANCH),),
    )
    return tx.commit_transaction()


def _mergeable(metadata: TableMetadata, kept: list[ManifestFile], adding: bool) -> list[ManifestFile]:
    """The manifests to merge into this commit's own, as PyIceberg's merge-append picks them: once
    there are `min-count-to-merge` (the new one included), every data manifest of the current
    spec under the target size."""
    props = metadata.properties
    if props.get(MERGE_ENABLED, "true").lower() != "true" or len(kept) + adding < int(props.get(MIN_COUNT_TO_MERGE,
                                                                                                  "100")):
        return []
    spec_id, target = metadata.spec().spec_id, int(props.get(TARGET_SIZE, str(8 * 1024 * 1024)))
    small = [m for m in kept if m.partition_spec_id == spec_id and m.content == ManifestContent.DATA
             and m.manifest_length < target]
    return small if len(small) + adding >= 2 else []


def _summary(metadata: TableMetadata, files: list[DataFile], properties: dict[str, str],
             parent: Snapshot | None) -> Summary:
    collector = SnapshotSummaryCollector()
    schema, spec = metadata.schema(), metadata.spec()
    for data_file in files:
        collector.add_file(data_file=data_file, partition_spec=spec, schema=schema)
    return update_snapshot_summaries(
        summary=Summary(operation=Operation.APPEND, **collector.build(), **properties),
        previous_summary=parent.summary if parent is not None else None,
    )


def _pyiceberg_append(table: Table, files: list[DataFile], properties: dict[str, str]) -> Table:
    tx = transaction(table)
    with tx.update_snapshot(snapshot_properties=properties).merge_append() as append:
        for data_file in files:
            append.append_data_file(data_file)
    return tx.commit_transaction()
