"""Manifests and manifest lists of a stream's appends, encoded with fastavro; those this process
wrote are kept, so the next commit need not read them back.

A stream commits every second, and each commit writes a manifest for its new files and a
manifest list naming every live manifest. PyIceberg 0.12 does both with its pure-Python
Avro encoder, converts the Iceberg schemas to Avro ones for every file, compresses every
entry as a block of its own, and reads the parent's manifest list back from storage:
about 7 ms of CPU per commit, most of what a trickling stream costs. Here the schemas are
converted once, records are encoded by fastavro's C encoder into one block, and the
manifest lists and entries this process wrote stay in memory (files never change once
written), so a commit reads nothing it wrote itself.

The files are the ones the Iceberg spec (format v2) describes, with the header keys PyIceberg
writes; tests/test_manifests.py reads them back with PyIceberg and DuckDB, entry by entry
against PyIceberg's own writer (Java Iceberg 1.10 read them too, checked by hand).
"""

from __future__ import annotations

import io as io_module
import json
import threading
from collections.abc import Iterable
from typing import Any, NamedTuple

import fastavro
from fastavro.read import SchemaResolutionError
from pyiceberg.io import FileIO
from pyiceberg.manifest import (
    MANIFEST_LIST_FILE_SCHEMAS,
    ManifestContent,
    ManifestEntry,
    ManifestEntryStatus,
    ManifestFile,
    PartitionFieldStats,
    PartitionFieldSummary,
    data_file_with_partition,
    manifest_entry_schema_with_data_file,
    read_manifest_list,
)
from pyiceberg.partitioning import PartitionSpec
from pyiceberg.types import IcebergType, PrimitiveType
from pyiceberg.table.metadata import TableMetadata

from appliance.core.cache import Cache
from appliance.tables.fastpath.avro_records import compile_record
from appliance.tables.fastpath.entries import (
    AvroFileFormat,
    Entry,
    EntryFormat,
    KeptFile,
    entry_bytes,
    entry_head,
    file_body,
)
from appliance.tables.fastpath.files import write_new

FORMAT_VERSION = 2


def _manifest_file(m: ManifestFile) -> dict[str, Any]:
    return {
        "manifest_path": m.manifest_path, "manifest_length": m.manifest_length,
        "partition_spec_id": m.partition_spec_id, "content": int(m.content), "sequence_number": m.sequence_number,
        "min_sequence_number": m.min_sequence_number, "added_snapshot_id": m.added_snapshot_id,
        "added_files_count": m.added_files_count, "existing_files_count": m.existing_files_count,
        "deleted_files_count": m.deleted_files_count, "added_rows_count": m.added_rows_count,
        "existing_rows_count": m.existing_rows_count, "deleted_rows_count": m.deleted_rows_count,
        "partitions": [{"contains_null": p.contains_null, "contains_nan": p.contains_nan,
                        "lower_bound": p.lower_bound, "upper_bound": p.upper_bound} for p in m.partitions or []],
        "key_metadata": m.key_metadata,
    }


class Manifests:
    """Writes manifests and manifest lists, and remembers the newest ones it wrote or read.

    Thread-safe: every stream's worker commits through the same one.
    """

    # Sized for hundreds of streams committing in turn: an LRU smaller than the tables that commit
    # misses on every commit, and each commit then reads its parent's manifest list back from storage.
    KEPT_LISTS = 4096  # manifest lists (a few manifests each: small)
    KEPT_ENTRIES = 100_000  # manifest entries, over all the kept manifests (about 1 KB each)
    KEPT_RECORDS = 50_000  # manifest list records (about 650 bytes each with their manifest; 100 live a table at most)
    # What each list written here added to its parent's (a manifest or two): an expiry of a stream's table reads
    # the oldest expired list and these, not the dozens of lists it expires (0.4 ms each). 200 trickles' tables
    # hold about 26,000 snapshots at a cap of 100; those an expiry drops are forgotten (`forget_lists`).
    KEPT_ADDED = 100_000

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._formats: dict[tuple, EntryFormat] = {}
        self._list_format = AvroFileFormat(MANIFEST_LIST_FILE_SCHEMAS[FORMAT_VERSION], "manifest_file")
        self._lists: Cache[str, tuple[ManifestFile, ...]] = Cache(self.KEPT_LISTS)
        self._entries: Cache[str, tuple[Entry, ...]] = Cache(self.KEPT_ENTRIES, weigh=len)
        self._listed: dict[str, tuple[ManifestFile, bytes]] = {}  # manifest path -> (that object, its list record)
        self._added: Cache[str, tuple[Listed, ...]] = Cache(self.KEPT_ADDED)  # list path -> what it added

    # ---- what a snapshot holds -------------------------------------------------------------

    def manifests(self, io: FileIO, manifest_list: str) -> tuple[ManifestFile, ...]:
        """The manifests a manifest list names."""
        return self._lists.make(manifest_list, lambda: tuple(read_manifest_list(io.new_input(manifest_list))))

    def entries(self, io: FileIO, manifest: ManifestFile) -> tuple[Entry | ManifestEntry, ...]:
        """A manifest's entries, deleted ones included, with inherited sequence numbers filled in: those this
        process wrote as kept (their files `KeptFile`s), any other as PyIceberg reads it, not kept (a commit
        that writes its entries again keeps them so)."""
        found = self._entries.get(manifest.manifest_path)
        if found is None:
            found = tuple(manifest.fetch_manifest_entry(io, discard_deleted=False))
        return found

    # ---- which files: maintenance's walks over a table's history ------------------------------

    def listed(self, io: FileIO, manifest_list: str) -> tuple[Listed, ...]:
        """What a list says of each manifest it names (its path, the snapshot that added it, how many files it
        holds DELETED): from memory if kept, else decoded by fastavro (PyIceberg's reader costs 1-2 ms a list,
        and an expiry reads dozens), never kept."""
        found = self._lists.get(manifest_list)
        if found is not None:
            return tuple(Listed(m.manifest_path, m.added_snapshot_id, m.deleted_files_count) for m in found)
        return tuple(Listed(r["manifest_path"], r.get("added_snapshot_id"), r.get("deleted_files_count"))
                     for r in _records(io, manifest_list, _LISTED))

    def new_in(self, io: FileIO, manifest_list: str) -> tuple[Listed, ...]:
        """The manifests a list names that its parent's did not, where this process wrote it; otherwise every
        manifest it names (`listed`): never fewer."""
        found = self._added.get(manifest_list)
        return found if found is not None else self.listed(io, manifest_list)

    def forget_lists(self, manifest_lists: Iterable[str]) -> None:
        """Lists an expiry dropped: what they added is not asked again."""
        for path in manifest_lists:
            self._added.pop(path)

    def listed_paths(self, io: FileIO, manifest_list: str) -> tuple[str, ...]:
        """The paths of the manifests a list names, as `listed`."""
        return tuple(m.path for m in self.listed(io, manifest_list))

    def live_paths(self, io: FileIO, manifest: str) -> list[str]:
        """The data or delete files a manifest holds live (added or existing, not deleted), as `listed`."""
        found = self._entries.get(manifest)
        if found is not None:
            return [e.data_file.file_path for e in found if e.status != ManifestEntryStatus.DELETED]
        return [r["data_file"]["file_path"] for r in _records(io, manifest, _ENTRIES) if r["status"] != ManifestEntryStatus.DELETED]

    def deleted_paths(self, io: FileIO, manifest: Listed) -> list[tuple[int | None, str]]:
        """The files a manifest holds DELETED, each with the snapshot that removed it (an entry's own snapshot id,
        else the one that added the manifest, as the spec has entries inherit it), as `listed`."""
        found = self._entries.get(manifest.path)
        rows = ((e.status, e.snapshot_id, e.data_file.file_path) for e in found) if found is not None else (
            (r["status"], r.get("snapshot_id"), r["data_file"]["file_path"]) for r in _records(io, manifest.path, _ENTRIES))
        return [(by if by is not None else manifest.added_by, path)
                for status, by, path in rows if status == ManifestEntryStatus.DELETED]

    # ---- writing -----------------------------------------------------------------------------

    def write_manifest(self, io: FileIO, path: str, metadata: TableMetadata, spec: PartitionSpec,
                       entries: list[Entry | ManifestEntry], snapshot_id: int, sequence_number: int,
                       content: ManifestContent = ManifestContent.DATA) -> ManifestFile:
        """A manifest of `entries`, all data files or all delete files (`content`). ADDED entries of
        `snapshot_id` are written with their sequence numbers left to inheritance; they are kept here
        with `sequence_number` filled in."""
        fmt = self._entry_format(metadata, spec)
        counts = {s: [0, 0] for s in ManifestEntryStatus}
        encoded, kept, seqs = [], [], []
        for entry in entries:
            status, data_file = entry.status, entry.data_file
            counts[status][0] += 1
            counts[status][1] += data_file.record_count
            inherit = status == ManifestEntryStatus.ADDED and entry.snapshot_id == snapshot_id
            seq = sequence_number if inherit else entry.sequence_number
            file_seq = sequence_number if inherit else entry.file_sequence_number
            if status != ManifestEntryStatus.DELETED:
                seqs.append(seq)
            body = file_body(fmt, data_file)
            encoded.append(entry_bytes(fmt, body, int(status), entry.snapshot_id, None if inherit else seq,
                                        None if inherit else file_seq))
            kept.append(Entry(status, entry.snapshot_id, seq, file_seq, KeptFile(data_file, spec.spec_id, body, fmt)))
        data = fmt.avro.file(encoded, len(entries), {
            "schema": fmt.schema_json, "partition-spec": fmt.spec_json, "partition-spec-id": str(spec.spec_id),
            "format-version": "2", "content": "deletes" if content == ManifestContent.DELETES else "data"})
        write_new(io, path, data)
        self._entries.put(path, tuple(kept))
        return ManifestFile.from_args(
            manifest_path=path, manifest_length=len(data), partition_spec_id=spec.spec_id,
            content=content, sequence_number=sequence_number,
            min_sequence_number=min(seqs, default=sequence_number), added_snapshot_id=snapshot_id,
            added_files_count=counts[ManifestEntryStatus.ADDED][0],
            existing_files_count=counts[ManifestEntryStatus.EXISTING][0],
            deleted_files_count=counts[ManifestEntryStatus.DELETED][0],
            added_rows_count=counts[ManifestEntryStatus.ADDED][1],
            existing_rows_count=counts[ManifestEntryStatus.EXISTING][1],
            deleted_rows_count=counts[ManifestEntryStatus.DELETED][1],
            partitions=_partition_summaries(fmt.partition_types, [e.data_file.partition for e in entries]),
            key_metadata=None,
        )

    def write_list(self, io: FileIO, path: str, manifests: list[ManifestFile], snapshot_id: int,
                   parent_id: int | None, sequence_number: int) -> None:
        meta = {"snapshot-id": str(snapshot_id), "parent-snapshot-id": str(parent_id) if parent_id else "null",
                "sequence-number": str(sequence_number), "format-version": "2"}
        records = self._listed_records(manifests)
        write_new(io, path, self._list_format.file(records, len(records), meta))
        self._lists.put(path, tuple(manifests))
        # A writer lists its parent's manifests and those it adds, with its snapshot id.
        self._added.put(path, tuple(Listed(m.manifest_path, m.added_snapshot_id, m.deleted_files_count)
                                    for m in manifests if m.added_snapshot_id == snapshot_id))

    def _listed_records(self, manifests: list[ManifestFile]) -> list[bytes]:
        """The manifests' records in a manifest list. A commit lists its parent's manifests again, the very
        objects the parent listed: their records are kept, not encoded again at each commit."""
        with self._lock:  # once for the list, not once a manifest: every stream's worker commits through here
            found = [self._listed.get(m.manifest_path) for m in manifests]
        new = []
        for i, m in enumerate(manifests):
            if found[i] is None or found[i][0] is not m:
                found[i] = (m, self._list_format.record(_manifest_file(m)))
                new.append(found[i])
        if new:
            with self._lock:
                if len(self._listed) + len(new) > self.KEPT_RECORDS:
                    self._listed.clear()
                for kept in new:
                    self._listed[kept[0].manifest_path] = kept
        return [record for _, record in found]

    def _entry_format(self, metadata: TableMetadata, spec: PartitionSpec) -> EntryFormat:
        key = (str(metadata.table_uuid), metadata.current_schema_id, spec.spec_id)
        with self._lock:
            found = self._formats.get(key)
        if found is None:
            schema = metadata.schema()
            partition_type = spec.partition_type(schema)
            data_file_type = data_file_with_partition(partition_type, FORMAT_VERSION)
            entry_schema = manifest_entry_schema_with_data_file(FORMAT_VERSION, data_file_type)
            avro = AvroFileFormat(entry_schema, "manifest_entry")
            fields = json.loads(avro.schema_json)["fields"]
            data_file = next(f for f in fields if f["name"] == "data_file")["type"]
            partition = next(f for f in data_file["fields"] if f["name"] == "partition")["type"]
            found = EntryFormat(avro, [f["name"] for f in partition["fields"]],
                                _spec_json(spec), schema.model_dump_json(),
                                [f.field_type for f in partition_type.fields],
                                fastavro.parse_schema(data_file), entry_head(fields),
                                json.dumps(data_file, sort_keys=True), compile_record(data_file))
            with self._lock:
                self._formats[key] = found
        return found

    # ---- the kept files ----------------------------------------------------------------------

    def drop(self, paths: list[str]) -> None:
        """Forget what is kept of these manifests: a commit's parent listed them and the commit does not (a
        merge's or a rewrite's). A commit staged on that parent still finds them, in storage."""
        if not paths:
            return
        with self._lock:
            for path in paths:
                self._entries.pop(path)
                self._listed.pop(path, None)

    def forget(self, everything: bool = False) -> None:
        """Drop every kept list and entry: what an engine committing to hundreds of tables finds for one table's
        older manifests (`scripts/bench_trickle_maintenance` times maintenance so), where what each list added
        stays; `everything`: that too, as in a process that did not write them."""
        with self._lock:
            self._lists.clear()
            self._entries.clear()
            if everything:
                self._added.clear()



# What maintenance's walks read of a list's and a manifest's records. A merged manifest's entry carries each
# column's size, counts and bounds: decoded whole, 70-80 us an entry, up to half of an expiry's CPU in
# `scripts/bench_trickle_maintenance` (it reads the merged manifests of the expired snapshots and of the oldest
# kept one); projected, under 30 us.
# Avro resolves a reader's record against the writer's by name, and Iceberg's writers name them as the spec's
# schemas do (`manifest_file`, `manifest_entry`, `r2` for the data file, field 2).
_LISTED = fastavro.parse_schema({"type": "record", "name": "manifest_file", "fields": [
    {"name": "manifest_path", "type": "string"},
    {"name": "added_snapshot_id", "type": ["null", "long"], "default": None},
    {"name": "deleted_files_count", "type": ["null", "int"], "default": None}]})
_ENTRIES = fastavro.parse_schema({"type": "record", "name": "manifest_entry", "fields": [
    {"name": "status", "type": "int"},
    {"name": "snapshot_id", "type": ["null", "long"], "default": None},
    {"name": "data_file", "type": {"type": "record", "name": "r2", "fields": [{"name": "file_path", "type": "string"}]}},
]})


class Listed(NamedTuple):
    """A manifest as a manifest list names it, what maintenance's walks need of it."""

    path: str
    added_by: int | None  # the snapshot that wrote it
    deleted: int | None  # how many files it holds DELETED (None: the list does not say)


def _records(io: FileIO, path: str, fields: dict) -> list[dict]:
    """An Avro file's records, only the `fields` of a reader's schema decoded by fastavro (every codec PyIceberg
    reads, with the same libraries); every field, where the writer named its records otherwise."""
    with io.new_input(path).open() as f:
        data = f.read()
    try:
        return list(fastavro.reader(io_module.BytesIO(data), reader_schema=fields))
    except SchemaResolutionError:
        return list(fastavro.reader(io_module.BytesIO(data)))


def _partition_summaries(types: list[IcebergType], partitions: list) -> list[PartitionFieldSummary]:
    """PyIceberg's `construct_partition_summaries`, on the partition types worked out once."""
    odd = next((t for t in types if not isinstance(t, PrimitiveType)), None)
    if partitions and odd is not None:  # as PyIceberg raises it, at the first partition's values
        raise ValueError(f"Expected a primitive type for the partition field, got {odd}")
    stats = [PartitionFieldStats(t) for t in types]
    for keys in partitions:
        for i, s in enumerate(stats):
            s.update(keys[i])
    return [s.to_summary() for s in stats]


def _spec_json(spec: PartitionSpec) -> str:
    return "[" + ",".join(f.model_dump_json() for f in spec.fields) + "]"
