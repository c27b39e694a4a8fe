"""A catalog found again in the warehouse: each table's newest whole metadata file, and the catalog
pointed at it.

Every table Floe makes lives at `<warehouse>/<namespace>/<table>`, its metadata files in `metadata/`,
named `<version>-<uuid>.metadata.json`. The offsets, a stage's position and the system tables' export
position all live in the snapshots those files describe, so a catalog pointed at each table's newest
one resumes every stream exactly once: the table's rows and the offsets that say what they hold were
committed together. "Newest" is decided by the version in the name, then by the metadata's own last
sequence number and last update (a commit that lost a race wrote a file of the same version as the
winner's; the catalog's own pointer wins such a tie). A file that does not parse (half written by a
process that died) is passed over, and so is one whose snapshot's manifest list, manifests or added
files are gone (a commit that failed after writing its metadata file removes the files it wrote; orphan
removal deletes those of a commit that never happened): the next older one is taken.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass, field
from typing import Callable

from pyarrow.fs import FileSelector, FileType
from pyiceberg.io import FileIO, load_file_io
from pyiceberg.io.pyarrow import PyArrowFileIO
from pyiceberg.manifest import ManifestEntryStatus, ManifestFile
from pyiceberg.serializers import FromInputFile
from pyiceberg.table.metadata import TableMetadata

from appliance.model.names import check_table_name
from appliance.tables.fastpath.sql_catalog import FloeSqlCatalog

log = logging.getLogger(__name__)

_NAME = re.compile(r"^(?:(\d+)-[0-9a-fA-F-]{36}|v(\d+))(?:\.[a-z0-9]+)?\.metadata\.json$")


def metadata_version(location: str) -> int | None:
    """The version in a metadata file's name (`00042-<uuid>.metadata.json`, `v42.metadata.json`); None
    for another file."""
    match = _NAME.match(location.rsplit("/", 1)[-1])
    if not match:
        return None
    return int(match.group(1) or match.group(2))


@dataclass(frozen=True)
class Newest:
    """A table's newest whole metadata file in the warehouse, and the newer ones passed over, with why."""

    table: str  # namespace.table
    location: str | None  # None: no whole metadata file at all
    passed_over: tuple[str, ...] = field(default=())


class Warehouse:
    """The tables' folders under a warehouse location, local or on an object store."""

    def __init__(self, location: str, properties: dict[str, str]) -> None:
        self.location = location.rstrip("/")
        self.io: FileIO = load_file_io(properties, self.location)
        scheme, netloc, self.root = PyArrowFileIO.parse_location(self.location)
        self.fs = PyArrowFileIO(properties).fs_by_scheme(scheme, netloc)
        self.prefix = self.location[: len(self.location) - len(self.root)] if self.location.endswith(self.root) \
            else f"{scheme}://"

    def _folders(self, path: str) -> list[str]:
        infos = self.fs.get_file_info(FileSelector(path, allow_not_found=True))
        return sorted(i.base_name for i in infos if i.type == FileType.Directory)

    def tables(self) -> list[str]:
        """`namespace.table` of every folder shaped like a table's: a `metadata` folder two levels down."""
        found = []
        for namespace in self._folders(self.root):
            for table in self._folders(f"{self.root}/{namespace}"):
                try:
                    check_table_name(f"{namespace}.{table}")
                except Exception:  # not a folder Floe made (a name Floe would refuse)
                    continue
                if "metadata" in self._folders(f"{self.root}/{namespace}/{table}"):
                    found.append(f"{namespace}.{table}")
        return found

    def metadata_files(self, table: str) -> list[tuple[int, str]]:
        """(version, location) of each metadata file of `table`, newest version first."""
        folder = f"{self.root}/{table.replace('.', '/')}/metadata"
        files = []
        for info in self.fs.get_file_info(FileSelector(folder, allow_not_found=True)):
            version = metadata_version(info.path) if info.type == FileType.File else None
            if version is not None:
                files.append((version, self.prefix + info.path))
        return sorted(files, reverse=True)


def _whole(io: FileIO, location: str) -> tuple[TableMetadata | None, str]:
    """The metadata at `location` if it parses and its current snapshot's files are there; else why not."""
    try:
        metadata = FromInputFile.table_metadata(io.new_input(location))
    except Exception as exc:  # noqa: BLE001 - half written, or not Iceberg metadata at all
        return None, f"does not parse ({type(exc).__name__})"
    snapshot = metadata.current_snapshot()
    if snapshot is None:
        return metadata, ""
    if not io.new_input(snapshot.manifest_list).exists():
        return None, f"its snapshot's manifest list is gone ({snapshot.manifest_list})"
    try:
        manifests: list[ManifestFile] = snapshot.manifests(io)
    except Exception as exc:  # noqa: BLE001
        return None, f"its manifest list does not read ({type(exc).__name__})"
    missing = [m.manifest_path for m in manifests if not io.new_input(m.manifest_path).exists()]
    if missing:
        return None, f"{len(missing)} of its snapshot's manifests are gone ({missing[0]})"
    missing = _added_files_gone(io, snapshot.snapshot_id, manifests)
    if missing:
        return None, f"{len(missing)} of the files its snapshot added are gone ({missing[0]})"
    return metadata, ""


def _added_files_gone(io: FileIO, snapshot_id: int, manifests: list[ManifestFile]) -> list[str]:
    """The data and delete files the snapshot added that are not there: a commit that failed after its
    metadata file was written removes the files it wrote (nothing references them, it believes)."""
    gone = []
    for manifest in manifests:
        if manifest.added_snapshot_id != snapshot_id:
            continue
        for entry in manifest.fetch_manifest_entry(io, discard_deleted=True):
            if entry.status == ManifestEntryStatus.ADDED and not io.new_input(entry.data_file.file_path).exists():
                gone.append(entry.data_file.file_path)
    return gone


def _rank(metadata: TableMetadata) -> tuple[int, int]:
    return metadata.last_sequence_number, metadata.last_updated_ms


def newest(warehouse: Warehouse, table: str, current: str | None = None,
           warn: Callable[[str], None] = log.warning) -> Newest:
    """`table`'s newest whole metadata file; `current`, the catalog's pointer, wins a tie of versions."""
    by_version: dict[int, list[str]] = {}
    for version, location in warehouse.metadata_files(table):
        by_version.setdefault(version, []).append(location)
    passed: list[str] = []
    for version in sorted(by_version, reverse=True):
        whole = []
        for location in by_version[version]:
            metadata, why = _whole(warehouse.io, location)
            if metadata is None:
                warn(f"{table}: metadata file {location} passed over: {why}")
                passed.append(location)
            else:
                whole.append((location == current, _rank(metadata), location))
        if whole:
            return Newest(table, max(whole)[2], tuple(passed))
    return Newest(table, None, tuple(passed))


@dataclass(frozen=True)
class Pointed:
    """What recovery did to one table of the catalog."""

    table: str
    action: str  # registered, re-pointed, unchanged, removed (its metadata is gone), or lost (none is whole)
    location: str | None  # where the catalog points now
    was: str | None = None  # where it pointed before


def _exists(io: FileIO, location: str) -> bool:
    try:
        return io.new_input(location).exists()
    except OSError:
        return True  # cannot tell: keep what the catalog has


def point_catalog(iceberg: FloeSqlCatalog, warehouse: Warehouse,
                  warn: Callable[[str], None] = log.warning) -> list[Pointed]:
    """Point every table found in the warehouse at its newest whole metadata file, registering those the
    catalog lacks; a table of the catalog whose metadata file is gone, with none in the warehouse, leaves it
    (dropped after a backup was taken). The catalog must be Floe's SQL catalog, with no engine running."""
    known = {".".join(t): iceberg.location(t) for ns in iceberg.list_namespaces() for t in iceberg.list_tables(ns)}
    done = []
    for table in warehouse.tables():
        current = known.pop(table, None)
        found = newest(warehouse, table, current, warn)
        identifier = tuple(table.split("."))
        if found.location is None:
            done.append(Pointed(table, "lost", current, current))
            warn(f"{table}: no whole metadata file in {warehouse.location}; the catalog is left as it was")
        elif current is None:
            if not iceberg.namespace_exists(identifier[0]):
                iceberg.create_namespace(identifier[0])
            iceberg.register_table(identifier, found.location)
            done.append(Pointed(table, "registered", found.location))
        elif current != found.location:
            iceberg.repoint(identifier, found.location)
            done.append(Pointed(table, "re-pointed", found.location, current))
        else:
            done.append(Pointed(table, "unchanged", current, current))
    for table, current in sorted(known.items()):
        if current and not _exists(warehouse.io, current):
            iceberg.drop_table(table)  # the catalog's row only: there is nothing left to purge
            done.append(Pointed(table, "removed", None, current))
        else:
            done.append(Pointed(table, "unchanged", current, current))
    return done
