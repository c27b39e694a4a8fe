"""Any set of file changes as one snapshot: data and position-delete files added, files removed.

A stream's append, an upsert's row delta (its new rows and the position deletes of the rows they
replace, one data manifest and one delete manifest), and maintenance's rewrites (data files
replaced, the delete files folded into them dropped) are all this one producer, on
`fastpath.manifests`: the parent's manifests are kept as they are unless they hold a removed
file (then rewritten with that entry DELETED, the others EXISTING), and small manifests of one
content and spec are merged as PyIceberg's merge-append does (`commit.manifest.min-count-to-merge`,
manifests under `commit.manifest.target-size-bytes`). What it writes is what the Iceberg spec
(format v2) describes; tests read it back with PyIceberg, DuckDB and Java Iceberg.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field

from pyiceberg.manifest import (
    DataFile,
    ManifestContent,
    ManifestEntry,
    ManifestEntryStatus,
    ManifestFile,
)
from pyiceberg.table import Table
from pyiceberg.table.metadata import TableMetadata
from pyiceberg.table.refs import MAIN_BRANCH, SnapshotRefType
from pyiceberg.table.snapshots import Operation, Snapshot, Summary
from pyiceberg.table.update import AddSnapshotUpdate, AssertRefSnapshotId, SetPropertiesUpdate, SetSnapshotRefUpdate

from appliance.core.errors import RewriteConflict
from appliance.tables.fastpath import avro_readers, fieldsets, snapshot_index
from appliance.tables.fastpath.manifests import Entry, Manifests
from appliance.tables.fastpath.summaries import snapshot_summary
from appliance.tables.fastpath.transactions import transaction

snapshot_index.install()  # a commit looks snapshots up by id about eleven times
avro_readers.install()  # manifests read back: each file schema converted once

MIN_COUNT_TO_MERGE = "commit.manifest.min-count-to-merge"
TARGET_SIZE = "commit.manifest.target-size-bytes"
MERGE_ENABLED = "commit.manifest-merge.enabled"

MANIFESTS = Manifests()  # one per process: what it wrote, every table's commits can reuse


@dataclass
class FileChanges:
    data: list[DataFile] = field(default_factory=list)  # data files added
    deletes: list[DataFile] = field(default_factory=list)  # position-delete files added
    removed: list[DataFile] = field(default_factory=list)  # data or delete files, each live in the parent

    def __bool__(self) -> bool:
        return bool(self.data or self.deletes or self.removed)


def commit_changes(table: Table, changes: FileChanges, operation: Operation, properties: dict[str, str],
                   set_properties: dict[str, str] | None = None, manifests: Manifests = MANIFESTS) -> Table:
    """Commit `changes` as one snapshot whose summary carries `properties` (and, in the same commit,
    the table properties `set_properties`); the table after it.

    Raises RewriteConflict when a file to remove is not live in the parent, and PyIceberg's
    CommitFailedException when another writer committed first.
    """
    metadata, io = table.metadata, table.io
    snapshot_id = metadata.new_snapshot_id()
    parent = metadata.snapshot_by_name(MAIN_BRANCH)
    sequence_number = metadata.next_sequence_number()
    listed = manifests.manifests(io, parent.manifest_list) if parent else ()
    kept = [m for m in listed if m.has_added_files() or m.has_existing_files()]
    writer = _Writer(table, manifests, snapshot_id, sequence_number)
    if changes.removed:
        kept = writer.without(kept, {f.file_path for f in changes.removed})
    written: list[ManifestFile] = []
    for content, files in ((ManifestContent.DATA, changes.data), (ManifestContent.DELETES, changes.deletes)):
        for f in files:
            f.spec_id = spec_of(f, metadata.default_spec_id)
        for spec_id in sorted({f.spec_id for f in files}):
            added = [Entry(ManifestEntryStatus.ADDED, snapshot_id, None, None, f) for f in files if f.spec_id == spec_id]
            merged = _mergeable(metadata, kept, content, spec_id)
            if merged:
                added += [_again(e, ManifestEntryStatus.EXISTING) for m in merged for e in manifests.entries(io, m)
                          if e.status != ManifestEntryStatus.DELETED]
                gone = {m.manifest_path for m in merged}
                kept = [m for m in kept if m.manifest_path not in gone]
            written.append(writer.manifest(added, spec_id, content))
    manifest_list = table.location_provider().new_metadata_location(f"snap-{snapshot_id}-0-{writer.commit}.avro")
    parent_id = parent.snapshot_id if parent else None
    manifests.write_list(io, manifest_list, written + kept, snapshot_id, parent_id, sequence_number)
    # Merged or rewritten away: what is kept of them would only wait for the LRU.
    still = {m.manifest_path for m in kept}
    manifests.drop([m.manifest_path for m in listed if m.manifest_path not in still])
    snapshot = Snapshot(snapshot_id=snapshot_id, parent_snapshot_id=parent_id, sequence_number=sequence_number,
                        manifest_list=manifest_list, summary=_summary(metadata, changes, operation, properties, parent),
                        schema_id=metadata.current_schema_id)
    fieldsets.share_snapshots([snapshot])
    return _commit(table, snapshot, set_properties)


class _Writer:
    """This commit's manifests: named after it, written with its snapshot id and sequence number."""

    def __init__(self, table: Table, manifests: Manifests, snapshot_id: int, sequence_number: int) -> None:
        self.table, self.manifests = table, manifests
        self.snapshot_id, self.sequence_number = snapshot_id, sequence_number
        self.commit = uuid.uuid4()
        self.count = 0

    def manifest(self, entries: list[Entry], spec_id: int, content: ManifestContent) -> ManifestFile:
        metadata = self.table.metadata
        path = self.table.location_provider().new_metadata_location(f"{self.commit}-m{self.count}.avro")
        self.count += 1
        return self.manifests.write_manifest(self.table.io, path, metadata, metadata.specs()[spec_id], entries,
                                             self.snapshot_id, self.sequence_number, content)

    def without(self, kept: list[ManifestFile], removing: set[str]) -> list[ManifestFile]:
        """`kept` with every manifest that lists a file of `removing` rewritten: that entry DELETED."""
        out, found = [], set()
        # The manifests a rewrite touches become one per spec and content, not one each: a compaction
        # touches most of a table's manifests, and a reader of the snapshot it makes opens every one.
        # The entries it removes go to manifests of their own: holding no live file, they are skipped
        # by readers (their counts in the manifest list say so) and left out by the next commit.
        again: dict[tuple[int, ManifestContent, bool], list[Entry]] = {}
        for m in kept:
            entries = [e for e in self.manifests.entries(self.table.io, m) if e.status != ManifestEntryStatus.DELETED]
            hit = [e for e in entries if e.data_file.file_path in removing]
            if not hit:
                out.append(m)
                continue
            found.update(e.data_file.file_path for e in hit)
            for e in entries:
                gone = e.data_file.file_path in removing
                again.setdefault((m.partition_spec_id, m.content, gone), []).append(
                    _again(e, ManifestEntryStatus.DELETED, self.snapshot_id) if gone
                    else _again(e, ManifestEntryStatus.EXISTING))
        out += [self.manifest(entries, spec_id, content) for (spec_id, content, _), entries in again.items()]
        missing = removing - found
        if missing:
            raise RewriteConflict(f"{len(missing)} file(s) to remove are no longer in the table, e.g. "
                                  f"{sorted(missing)[0]}")
        return out


def _again(entry: Entry | ManifestEntry, status: ManifestEntryStatus, snapshot_id: int | None = None) -> Entry:
    """An entry written again with its sequence numbers (and, unless removed now, its snapshot id)."""
    return Entry(status, snapshot_id or entry.snapshot_id, entry.sequence_number, entry.file_sequence_number,
                 entry.data_file)


def _commit(table: Table, snapshot: Snapshot, set_properties: dict[str, str] | None) -> Table:
    """`snapshot` as the new head of the main branch, if the branch is still where it was."""
    updates = [AddSnapshotUpdate(snapshot=snapshot),
               SetSnapshotRefUpdate(snapshot_id=snapshot.snapshot_id, parent_snapshot_id=snapshot.parent_snapshot_id,
                                    ref_name=MAIN_BRANCH, type=SnapshotRefType.BRANCH)]
    if set_properties:
        updates.append(SetPropertiesUpdate(updates=set_properties))
    tx = transaction(table)
    tx._apply(tuple(updates), (AssertRefSnapshotId(snapshot_id=snapshot.parent_snapshot_id, ref=MAIN_BRANCH),))
    return tx.commit_transaction()


def _mergeable(metadata: TableMetadata, kept: list[ManifestFile], content: ManifestContent,
               spec_id: int) -> list[ManifestFile]:
    """The manifests to merge into this commit's own of `content` and `spec_id`, as PyIceberg's
    merge-append picks them: once there are `min-count-to-merge` (the new one included), every
    manifest of that content and spec under the target size."""
    props = metadata.properties
    if props.get(MERGE_ENABLED, "true").lower() != "true" or len(kept) + 1 < int(props.get(MIN_COUNT_TO_MERGE, "100")):
        return []
    target = int(props.get(TARGET_SIZE, str(8 * 1024 * 1024)))
    small = [m for m in kept if m.partition_spec_id == spec_id and m.content == content
             and m.manifest_length < target]
    return small if len(small) + 1 >= 2 else []


def _summary(metadata: TableMetadata, changes: FileChanges, operation: Operation, properties: dict[str, str],
             parent: Snapshot | None) -> Summary:
    default = metadata.default_spec_id
    return snapshot_summary(operation, metadata.schema(), metadata.specs(),
                            [(f, f.spec_id) for f in (*changes.data, *changes.deletes)],
                            [(f, spec_of(f, default)) for f in changes.removed], properties, parent)


def spec_of(f: DataFile, default: int) -> int:
    """A file's partition spec id; files written in a task carry none until a manifest is written."""
    try:
        return f.spec_id
    except AttributeError:
        return default
