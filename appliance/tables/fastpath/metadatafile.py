"""Table metadata files, each snapshot, snapshot-log entry and schema serialised once rather than once per commit.

Every commit writes the whole table metadata again: every kept snapshot, and the snapshot log with
one entry per snapshot. Each snapshot's summary goes through a Python-level pydantic serializer, so
PyIceberg's `model_dump_json` of a 2,000-snapshot table took about 13 ms of CPU per commit, most of
a trickling stream's cost; the log, serialised in Rust, still cost 0.6 ms a commit at 1,700 entries.
An entry rarely changes once committed (expiring a snapshot's parent drops its parent id): its JSON
is kept with it (per table, only for what the table still has), reused while the entry is unchanged,
and a commit that appends one entry to the lists the last one wrote adds its JSON alone. The rest of
the document, small, is still serialised by pydantic, and the pieces joined once. The result is the
same JSON that PyIceberg writes (tests/test_efficiency.py compares them).
"""

from __future__ import annotations

from typing import Any, Callable, Hashable

from pyiceberg.io import FileIO
from pyiceberg.serializers import Compressor
from pyiceberg.table.metadata import TableMetadata
from pyiceberg.table.snapshots import Snapshot
from pyiceberg.utils.config import Config

from appliance.tables.fastpath.files import write_new


class _Spliced:
    """One list field of the metadata (its JSON key and how its entries are known), each table's entries'
    JSON kept, and the pieces of the list the table's last document held."""

    def __init__(self, key: str, identity: Callable[[Any], Hashable], exclude_none: bool) -> None:
        self.empty = f'"{key}":[]'.encode()
        self.opening = f'"{key}":['.encode()
        self._identity = identity
        self._exclude_none = exclude_none
        self._known: dict[str, dict[Hashable, tuple[Any, bytes]]] = {}  # table uuid -> entry -> its JSON
        self._last: dict[str, tuple[list, list[bytes]]] = {}  # table uuid -> (list, the pieces of its JSON)

    def pieces(self, table: str, entries: list) -> list[bytes]:
        """The JSON of `entries` (the list's inside, without brackets) as pieces to join."""
        last = self._last.get(table)
        if last is not None and one_appended(last[0], entries):
            # A commit adds one entry to the list the last one wrote: no walk over the others.
            known = self._known[table]
            entry = self._entry(known.get(self._identity(entries[-1])), entries[-1])
            known[self._identity(entry[0])] = entry
            # A new list: a stream's commit and a compaction's can make documents of one table at once, each
            # from the same last one (a list of pointers, copied in microseconds).
            pieces = [*last[1], b",", entry[1]] if last[1] else [entry[1]]
        else:
            known = self._known.get(table, {})
            fresh = {}
            for e in entries:
                key = self._identity(e)
                fresh[key] = self._entry(known.get(key), e)
            self._known[table] = fresh  # what expiry removed is forgotten here
            pieces = []
            for e in entries:  # the kept JSON itself, not a copy of it: 200 tables' snapshots are 80 MB of it
                if pieces:
                    pieces.append(b",")
                pieces.append(fresh[self._identity(e)][1])
        self._last[table] = (entries, pieces)
        return pieces

    def _entry(self, known: tuple[Any, bytes] | None, entry: Any) -> tuple[Any, bytes]:
        # The same object while the metadata stays cached; an equal one after a reload, kept from then on: the
        # next commit passes that one (a 12-column schema compared field by field was 16 us of every commit).
        if known is not None:
            if known[0] is entry:
                return known
            if known[0] == entry:
                return entry, known[1]
        return entry, entry.model_dump_json(exclude_none=self._exclude_none).encode()


class MetadataWriter:
    def __init__(self) -> None:
        # PyIceberg writes current-snapshot-id -1 instead of leaving it out when this is set.
        self._exclude_none = not Config().get_bool("legacy-current-snapshot-id")
        self._snapshots = _Spliced("snapshots", lambda s: s.snapshot_id, self._exclude_none)
        self._log = _Spliced("snapshot-log", lambda e: (e.snapshot_id, e.timestamp_ms), self._exclude_none)
        # A schema's JSON goes through PyIceberg's Python serializer of each field's type: 50 us a commit for 11
        # columns, the same every time.
        self._schemas = _Spliced("schemas", lambda s: s.schema_id, self._exclude_none)

    def json(self, metadata: TableMetadata) -> bytes:
        rest = metadata.model_copy(update={"snapshots": [], "snapshot_log": [], "schemas": []}).model_dump_json(
            exclude_none=self._exclude_none).encode()
        fields = [(self._snapshots, metadata.snapshots), (self._log, metadata.snapshot_log),
                  (self._schemas, metadata.schemas)]
        at = [rest.find(spliced.empty) for spliced, _ in fields]
        if any(rest.count(spliced.empty) != 1 for spliced, _ in fields):
            # A shape this splice does not know: serialise it all, as PyIceberg does.
            return metadata.model_dump_json(exclude_none=self._exclude_none).encode()
        table = str(metadata.table_uuid)
        out, start = [], 0
        for position, (spliced, entries) in sorted(zip(at, fields), key=lambda pair: pair[0]):
            out += [rest[start:position], spliced.opening, *spliced.pieces(table, entries), b"]"]
            start = position + len(spliced.empty)
        out.append(rest[start:])
        return b"".join(out)

    def write(self, metadata: TableMetadata, io: FileIO, location: str) -> None:
        data = Compressor.get_compressor(location).bytes_compressor()(self.json(metadata))
        write_new(io, location, data)


def one_appended(before: list, after: list) -> bool:
    """Whether `after` is `before` and one entry more. Snapshots and log entries are frozen models: a changed
    one (expiry rewrites a child's parent id) is another object, so identity tells."""
    if len(after) != len(before) + 1:
        return False
    if not before:
        return True
    middle = len(before) // 2
    return after[0] is before[0] and after[middle] is before[middle] and after[-2] is before[-1]
