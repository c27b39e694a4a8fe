"""Table metadata files, each snapshot serialised once rather than once per commit.

Every commit writes the whole table metadata again, snapshots included, and a stream
committing every second keeps up to `max_snapshots` of them (2,000 by default). Each
snapshot's summary goes through a Python-level pydantic serializer, so PyIceberg's
`model_dump_json` of a 2,000-snapshot table took about 13 ms of CPU per commit, most
of a trickling stream's cost. A snapshot rarely changes once committed (expiring its
parent drops its parent id): its JSON is kept with it (per table, only for the
snapshots the table still has), reused while the snapshot is unchanged, and spliced
into the rest of the document, which pydantic still serialises. The result is the
same JSON that PyIceberg writes (tests/test_efficiency.py compares them).
"""

from __future__ import annotations

from pyiceberg.io import FileIO
from pyiceberg.serializers import Compressor
from pyiceberg.table.metadata import TableMetadata
from pyiceberg.table.snapshots import Snapshot
from pyiceberg.utils.config import Config

_EMPTY = b'"snapshots":[]'


class MetadataWriter:
    def __init__(self) -> None:
        self._snapshots: dict[str, dict[int, tuple[Snapshot, bytes]]] = {}  # table uuid -> snapshot id -> JSON
        # PyIceberg writes current-snapshot-id -1 instead of leaving it out when this is set.
        self._exclude_none = not Config().get_bool("legacy-current-snapshot-id")

    def json(self, metadata: TableMetadata) -> bytes:
        table = str(metadata.table_uuid)
        known = self._snapshots.get(table, {})
        parts = {s.snapshot_id: self._known(known.get(s.snapshot_id), s) for s in metadata.snapshots}
        self._snapshots[table] = parts  # what expiry removed is forgotten here
        rest = metadata.model_copy(update={"snapshots": []}).model_dump_json(exclude_none=self._exclude_none).encode()
        if rest.count(_EMPTY) != 1:  # a shape this splice does not know: serialise it all, as PyIceberg does
            return metadata.model_dump_json(exclude_none=self._exclude_none).encode()
        return rest.replace(_EMPTY, b'"snapshots":[' + b",".join(parts[s.snapshot_id][1] for s in metadata.snapshots)
                            + b"]")

    def _known(self, known: tuple[Snapshot, bytes] | None, snapshot: Snapshot) -> tuple[Snapshot, bytes]:
        # The same object while the metadata stays cached; an equal one after a reload.
        if known is not None and (known[0] is snapshot or known[0] == snapshot):
            return known
        return snapshot, snapshot.model_dump_json(exclude_none=self._exclude_none).encode()

    def write(self, metadata: TableMetadata, io: FileIO, location: str) -> None:
        data = Compressor.get_compressor(location).bytes_compressor()(self.json(metadata))
        with io.new_output(location).create(overwrite=False) as out:
            out.write(data)
