"""Avro files read by PyIceberg with each file schema converted once, not once per file (the header's too).

PyIceberg's `AvroFile` converts the Avro schema in a file's header into an Iceberg schema and resolves a tree of
readers against the schema it reads with, for every file it opens: 0.75 ms of the 1.9 ms a small manifest costs
to read, and compaction, expiry's fallback and the commits of a table whose manifests the cache no longer holds
read dozens to hundreds of them. A table's manifests (of one spec) and every manifest list share their header
schema, and a reader tree holds nothing between records (each `read` is given the decoder): both are kept per
header schema, schema read with, and types and enums read into. `install()` (by `changes`, the commits' module)
puts this in PyIceberg's place, process-wide; what is read is what PyIceberg reads (tests/test_avro_readers.py).
"""

from __future__ import annotations

from typing import Any

from pyiceberg.avro.decoder import new_decoder
from pyiceberg.avro.file import META_SCHEMA, AvroFile, AvroFileHeader
from pyiceberg.avro.resolver import construct_reader, resolve_reader

from appliance.core.cache import Cache
from appliance.tables.fastpath.internals import AVRO_SCHEMA_KEY

KEPT = 256  # file schemas (with what they are read as): a few per table and spec
PYICEBERG_ENTER = AvroFile.__enter__

# (header schema, id of the schema read with, read types, read enums) -> (that schema, kept alive while its id is
# in the key; the file schema; the reader tree)
_kept: Cache[tuple, tuple[Any, Any, Any]] = Cache(KEPT)


# The container's header (magic, metadata, sync marker), one schema for every Avro file: PyIceberg builds its
# reader tree again for each file it opens, half of what opening a manifest cost.
_HEADER = construct_reader(META_SCHEMA, {-1: AvroFileHeader})


def _enter(self: AvroFile) -> AvroFile:
    with self.input_file.open() as f:
        self.decoder = new_decoder(f.read())
    self.header = _HEADER.read(self.decoder)
    text = self.header.meta.get(AVRO_SCHEMA_KEY)
    key = (text, id(self.read_schema), tuple(self.read_types.items()), tuple(self.read_enums.items()))
    found = _kept.get(key)
    if found is None or found[0] is not self.read_schema:
        schema = self.header.get_schema()  # no schema in the header: PyIceberg's error
        reader = resolve_reader(schema, self.read_schema or schema, self.read_types, self.read_enums)
        found = (self.read_schema, schema, reader)
        _kept.put(key, found)
    self.schema = found[1]
    if not self.read_schema:
        self.read_schema = found[1]
    self.reader = found[2]
    return self


def install() -> None:
    AvroFile.__enter__ = _enter  # type: ignore[method-assign]
