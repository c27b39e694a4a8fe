"""Position-delete files (Iceberg v2): which rows of which data files are gone, by position; and the
ones a snapshot holds.

The spec's layout: Parquet with `file_path` (field id 2147483546) and `pos` (2147483545), sorted
by both; one file per partition of the data files it names. Their column bounds are kept whole
(not truncated), so a reader can tell from the manifest alone which data files a delete file can
touch. Every reader Floe's users have (DuckDB, PyIceberg, Java Iceberg) applies them; PyIceberg
writes none, so Floe writes its own.
"""

from __future__ import annotations

import uuid
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from pyiceberg.io import FileIO
from pyiceberg.manifest import DataFile, DataFileContent, FileFormat, ManifestEntry
from pyiceberg.table import Table
from pyiceberg.table.locations import load_location_provider
from pyiceberg.table.metadata import TableMetadata
from pyiceberg.typedef import Record

from appliance.core.cache import Cache
from appliance.tables.datafiles import live_entries
from appliance.tables.fastpath.parquet import SMALL_FILE_BYTES
from appliance.tables.snapshots import holds_no_deletes

FILE_PATH_ID, POS_ID = 2147483546, 2147483545
SCHEMA = pa.schema([
    pa.field("file_path", pa.string(), nullable=False, metadata={b"PARQUET:field_id": str(FILE_PATH_ID).encode()}),
    pa.field("pos", pa.int64(), nullable=False, metadata={b"PARQUET:field_id": str(POS_ID).encode()}),
])


def _long(n: int) -> bytes:
    return int(n).to_bytes(8, "little", signed=True)


def write_position_deletes(metadata: TableMetadata, io: FileIO, doomed: dict[str, Any], spec_id: int,
                           partition: Record) -> DataFile:
    """One delete file of the rows at `doomed` (data file path -> positions), data files all of
    `partition`. Paths are sorted here, and each path's positions sorted: the spec's order."""
    paths = sorted(p for p, positions in doomed.items() if len(positions))
    positions = [np.sort(np.asarray(doomed[p], dtype=np.int64)) for p in paths]
    counts = np.array([len(at) for at in positions], dtype=np.int64)
    files = pa.DictionaryArray.from_arrays(pa.array(np.repeat(np.arange(len(paths)), counts), pa.int32()),
                                           pa.array(paths, pa.string())).cast(pa.string())
    rows = pa.table([files, pa.array(np.concatenate(positions))], schema=SCHEMA)
    locations = load_location_provider(metadata.location, metadata.properties)
    path = locations.new_data_location(f"floe-deletes-{uuid.uuid4()}.parquet")
    output = io.new_output(path)
    with output.create(overwrite=False) as stream:
        # A batch's few deletes, as a trickle's data file, uncompressed (zstd doubled the write for nothing).
        small = rows.nbytes < SMALL_FILE_BYTES
        writer = pq.ParquetWriter(stream, SCHEMA, compression="none" if small else "zstd")
        writer.write_table(rows)
        writer.close()
        size = stream.tell()  # what was written: `len(output)` asks the file system again
    written = writer.writer.metadata
    sizes = {FILE_PATH_ID: 0, POS_ID: 0}
    for g in range(written.num_row_groups):
        sizes[FILE_PATH_ID] += written.row_group(g).column(0).total_compressed_size
        sizes[POS_ID] += written.row_group(g).column(1).total_compressed_size
    count = rows.num_rows
    f = DataFile.from_args(
        content=DataFileContent.POSITION_DELETES, file_path=path, file_format=FileFormat.PARQUET,
        partition=partition, record_count=count, file_size_in_bytes=size,
        column_sizes=sizes, value_counts={FILE_PATH_ID: count, POS_ID: count},
        null_value_counts={FILE_PATH_ID: 0, POS_ID: 0}, nan_value_counts={},
        lower_bounds={FILE_PATH_ID: paths[0].encode(), POS_ID: _long(min(int(at[0]) for at in positions))},
        upper_bounds={FILE_PATH_ID: paths[-1].encode(), POS_ID: _long(max(int(at[-1]) for at in positions))},
        key_metadata=None, split_offsets=None, equality_ids=None, sort_order_id=None,
    )
    f.spec_id = spec_id
    return f


def write_deletes_by_partition(metadata: TableMetadata, io: FileIO, doomed: dict[str, Any],
                               files: dict[str, DataFile]) -> list[DataFile]:
    """Delete files for `doomed` (data file path -> positions), one per partition of those data files
    (`files` says each one's spec and partition)."""
    groups: dict[tuple[int, Any], dict[str, Any]] = defaultdict(dict)
    for path, positions in doomed.items():
        if len(positions):
            f = files[path]
            groups[(_spec(f, metadata.default_spec_id), f.partition)][path] = positions
    return [write_position_deletes(metadata, io, part, spec_id, partition)
            for (spec_id, partition), part in groups.items()]


def _spec(f: DataFile, default: int) -> int:
    try:
        return f.spec_id
    except AttributeError:  # a file written in a task, not yet in a manifest
        return default


def read_position_deletes(io: FileIO, delete_file: DataFile) -> dict[str, np.ndarray]:
    """Each data file path the delete file names, with its deleted positions (sorted)."""
    with io.new_input(delete_file.file_path).open() as stream:
        rows = pq.read_table(stream, columns=["file_path", "pos"])
    if not rows.num_rows:
        return {}
    paths = rows.column("file_path").combine_chunks().dictionary_encode()
    positions = rows.column("pos").to_numpy()
    codes = paths.indices.to_numpy()
    order = np.argsort(codes, kind="stable")
    bounds = np.searchsorted(codes[order], np.arange(len(paths.dictionary) + 1))
    return {paths.dictionary[k].as_py(): np.sort(positions[order[bounds[k]:bounds[k + 1]]])
            for k in range(len(paths.dictionary)) if bounds[k + 1] > bounds[k]}


def referenced_paths(delete_file: DataFile) -> tuple[str, str] | None:
    """The range of data file paths a delete file can name, from its manifest bounds (None: unknown)."""
    lower = (delete_file.lower_bounds or {}).get(FILE_PATH_ID)
    upper = (delete_file.upper_bounds or {}).get(FILE_PATH_ID)
    if lower is None or upper is None:
        return None
    return lower.decode(), upper.decode()


KEPT_READS = 4096
_READ: Cache[str, dict[str, np.ndarray]] = Cache(KEPT_READS)  # delete files never change: read once


def positions_of(io: FileIO, delete_file: DataFile) -> dict[str, np.ndarray]:
    """A delete file's positions by data file path (kept: delete files never change)."""
    path = delete_file.file_path
    return _READ.make(path, lambda: read_position_deletes(io, delete_file))


@dataclass
class LiveDeletes:
    """A snapshot's live position-delete files: what each names, and each data file's deleted rows."""

    files: dict[str, DataFile] = field(default_factory=dict)  # delete file path -> its DataFile
    named: dict[str, dict[str, np.ndarray]] = field(default_factory=dict)  # delete file -> data path -> positions
    sequences: dict[str, int] = field(default_factory=dict)  # delete file path -> its data sequence number
    _gathered: dict[str, list[np.ndarray]] = field(default_factory=lambda: defaultdict(list))
    _positions: dict[str, np.ndarray] | None = None

    @property
    def positions(self) -> dict[str, np.ndarray]:
        """Data path -> its deleted positions, sorted. Merged when first asked: a rewrite's commit reads
        the live deletes under the table's commit lock, and at 10^8 keys merging every file's took seconds."""
        if self._positions is None:
            self._positions = {p: np.unique(np.concatenate(arrays)) for p, arrays in self._gathered.items()}
        return self._positions

    def of(self, data_path: str) -> np.ndarray | None:
        return self.positions.get(data_path)

    def count(self, data_path: str) -> int:
        """How many rows of `data_path` are deleted, merging only its own positions."""
        if self._positions is not None:
            return len(self._positions.get(data_path, ()))
        arrays = self._gathered.get(data_path)
        return len(np.unique(np.concatenate(arrays))) if arrays else 0

    def removable(self, live_data: set[str]) -> list[DataFile]:
        """The delete files that name no live data file: nothing left for them to delete."""
        return [self.files[p] for p, named in self.named.items() if not named.keys() & live_data]

    def applying(self, data_path: str, sequence: int) -> np.ndarray | None:
        """The positions of `data_path` deleted by delete files of a sequence number at or above the
        data file's `sequence` (the spec: a position delete applies to data no newer than itself)."""
        arrays = [named[data_path] for name, named in self.named.items()
                  if data_path in named and self.sequences.get(name, 0) >= sequence]
        return np.unique(np.concatenate(arrays)) if arrays else None


def live_deletes(table: Table, entries: list[ManifestEntry] | None = None) -> LiveDeletes:
    out = LiveDeletes()
    if entries is None and holds_no_deletes(table.current_snapshot()):  # nothing to read
        return out
    for e in entries if entries is not None else live_entries(table):
        f = e.data_file
        if f.content != DataFileContent.POSITION_DELETES:
            continue
        found = positions_of(table.io, f)
        out.files[f.file_path] = f
        out.named[f.file_path] = found
        out.sequences[f.file_path] = e.sequence_number or 0
        for path, positions in found.items():
            out._gathered[path].append(positions)
    return out
