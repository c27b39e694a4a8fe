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

from appliance.tables.fastpath.files import write_new

_EMPTY = b'"snapshots":[]'


class MetadataWriter:
    def __init__(self) -> None:
        self._snapshots: dict[str, dict[int, tuple[Snapshot, bytes]]] = {}  # table uuid -> snapshot id -> JSON
        self._joined: dict[str, tuple[list[Snapshot], bytes]] = {}  # table uuid -> (snapshots, their JSON joined)
        # PyIceberg writes current-snapshot-id -1 instead of leaving it out when this is set.
        self._exclude_none = not Config().get_bool("legacy-current-snapshot-id")

    def json(self, metadata: TableMetadata) -> bytes:
        rest = metadata.model_copy(update={"snapshots": []}).model_dump_json(exclude_none=self._exclude_none).encode()
        if rest.count(_EMPTY) != 1:  # a shape this splice does not know: serialise it all, as PyIceberg does
            return metadata.model_dump_json(exclude_none=self._exclude_none).encode()
        return rest.replace(_EMPTY, b'"snapshots":[' + self._snapshots_json(metadata) + b"]")

    def _snapshots_json(self, metadata: TableMetadata) -> bytes:
        table, snapshots = str(metadata.table_uuid), metadata.snapshots
        last = self._joined.get(table)
        if last is not None and one_appended(last[0], snapshots):
            # A commit adds one snapshot to the list the last one wrote: no walk over the others.
            entry = self._known(None, snapshots[-1])
            self._snapshots[table][entry[0].snapshot_id] = entry
            joined = last[1] + (b"," if last[1] else b"") + entry[1]
        else:
            known = self._snapshots.get(table, {})
            parts = {s.snapshot_id: self._known(known.get(s.snapshot_id), s) for s in snapshots}
            self._snapshots[table] = parts  # what expiry removed is forgotten here
            joined = b",".join(parts[s.snapshot_id][1] for s in snapshots)
        self._joined[table] = (snapshots, joined)
        return joined

    def _known(self, known: tuple[Snapshot, bytes] | None, snapshot: Snapshot) -> tuple[Snapshot, bytes]:
        # The same object while the metadata stays cached; an equal one after a reload.
        if known is not None and (known[0] is snapshot or known[0] == snapshot):
            return known
        return snapshot, snapshot.model_dump_json(exclude_none=self._exclude_none).encode()

    def write(self, metadata: TableMetadata, io: FileIO, location: str) -> None:
        data = Compressor.get_compressor(location).bytes_compressor()(self.json(metadata))
        write_new(io, location, data)


def one_appended(before: list[Snapshot], after: list[Snapshot]) -> bool:
    """Whether `after` is `before` and one snapshot more. Snapshots are frozen models: a changed
    one (expiry rewrites a child's parent id) is another object, so identity tells."""
    if len(after) != len(before) + 1:
        return False
    if not before:
        return True
    middle = len(before) // 2
    return after[0] is before[0] and after[middle] is before[middle] and after[-2] is before[-1]
