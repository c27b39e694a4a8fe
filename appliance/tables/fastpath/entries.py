"""A manifest entry's bytes: the Avro layouts of Floe's manifests, a data file's record, and what a kept manifest
holds of each file (`KeptFile`), so that a merge or a rewrite writes an entry again as a copy of bytes.
`manifests` writes the files; tests/test_manifests.py checks these against fastavro's and PyIceberg's encodings.
"""

from __future__ import annotations

import io as io_module
import json
import os
import zlib
from dataclasses import dataclass
from typing import Any, NamedTuple

import fastavro
from pyiceberg.manifest import DataFile, ManifestEntryStatus
from pyiceberg.schema import Schema
from pyiceberg.types import IcebergType
from pyiceberg.utils.schema_conversion import AvroSchemaConversion

from appliance.core.avrofile import avro_long, container_header
from appliance.tables.fastpath.avro_records import Encoder, Unusual, encode


# A block whose records take less than this is written with Avro's null codec, as a small data file is written
# uncompressed (`parquet.SMALL_FILE_BYTES`): a trickle's commit writes a manifest of one entry (about 450 bytes)
# and a list of a few dozen manifests (about 4 KB), and deflating the two took about 190 us of its CPU, for
# 3 KB of storage, kept until the snapshot expires. A merged manifest of hundreds of entries is still deflated.
# Every Avro reader takes both codecs (the spec requires them): PyIceberg, fastavro, Java's, DuckDB's.
SMALL_BLOCK_BYTES = 16 * 1024


def _deflate(data: bytes) -> bytes:
    """Avro's deflate: raw, no zlib wrapper, as fastavro and Java's Inflater(nowrap) read it. Only a block of
    `SMALL_BLOCK_BYTES` or more comes here, so zlib's full 32 KB window, not one sized to a small block."""
    return zlib.compress(data, 6, wbits=-15)


class AvroFileFormat:
    """One Avro object-container layout: the Avro schema of an Iceberg schema, converted once."""

    def __init__(self, schema: Schema, name: str) -> None:
        avro = AvroSchemaConversion().iceberg_to_avro(schema, schema_name=name)
        self.schema_json = json.dumps(avro)
        self.parsed = fastavro.parse_schema(json.loads(self.schema_json))
        self.fields = [f["name"] for f in avro["fields"]]

    def record(self, record: dict[str, Any]) -> bytes:
        """One record's Avro encoding: a data block is these, one after the other."""
        body = io_module.BytesIO()
        fastavro.schemaless_writer(body, self.parsed, record)
        return body.getvalue()

    def file(self, encoded: list[bytes], count: int, metadata: dict[str, str]) -> bytes:
        """An object container file of `count` records already encoded, in one block: deflated unless small."""
        block = b"".join(encoded)
        small = len(block) < SMALL_BLOCK_BYTES
        meta = {**metadata, "avro.schema": self.schema_json, "avro.codec": "null" if small else "deflate"}
        sync = os.urandom(16)
        if not small:
            block = _deflate(block)
        return b"".join([container_header(meta, sync), avro_long(count), avro_long(len(block)), block, sync])


def _pairs(mapping: dict | None) -> list[dict[str, Any]] | None:
    return None if mapping is None else [{"key": k, "value": v} for k, v in mapping.items()]


def data_file_record(f: DataFile, partition_names: list[str]) -> dict[str, Any]:
    partition = f.partition
    return {
        "content": int(f.content), "file_path": f.file_path, "file_format": f.file_format.value,
        "partition": {name: partition[i] for i, name in enumerate(partition_names)},
        "record_count": f.record_count, "file_size_in_bytes": f.file_size_in_bytes,
        "column_sizes": _pairs(f.column_sizes), "value_counts": _pairs(f.value_counts),
        "null_value_counts": _pairs(f.null_value_counts), "nan_value_counts": _pairs(f.nan_value_counts),
        "lower_bounds": _pairs(f.lower_bounds), "upper_bounds": _pairs(f.upper_bounds),
        "key_metadata": f.key_metadata, "split_offsets": f.split_offsets, "equality_ids": f.equality_ids,
        "sort_order_id": f.sort_order_id,
    }


@dataclass(frozen=True)
class EntryFormat:
    avro: AvroFileFormat
    partition_names: list[str]
    spec_json: str
    schema_json: str
    partition_types: list[IcebergType]  # of the spec's fields: PyIceberg works them out again for each manifest
    data_file_schema: Any  # the entry's data file record, parsed by fastavro
    entry_head: Any  # (status, snapshot id, sequence numbers) -> the bytes before the data file, if the layout is v2's
    data_file_json: str  # the data file record's Avro schema: two formats with the same one encode a file alike
    data_file_encoder: Encoder | None = None  # `avro_records`' encoder of the data file record, where it has one


class KeptFile:
    """A file a kept manifest lists, as a later commit of its table needs it: its data-file record as this
    process encoded it, and what a manifest and its list entry count. Not its column statistics: a DataFile is
    about 4.5 KB of Python objects, and 200 trickling tables' kept manifests list 50,000 files or more."""

    __slots__ = ("file_path", "content", "record_count", "partition", "spec_id", "body", "fmt")

    def __init__(self, data_file: Any, spec_id: int, body: bytes, fmt: EntryFormat) -> None:
        self.file_path, self.content = data_file.file_path, data_file.content
        self.record_count, self.partition = data_file.record_count, data_file.partition
        self.spec_id, self.body, self.fmt = spec_id, body, fmt

    def record(self) -> dict[str, Any]:
        """The data file's record, decoded from what was written."""
        return _decoded(self.fmt, self.body)


class Entry(NamedTuple):
    """A manifest entry to write, or one a kept manifest holds (its data file a DataFile or a KeptFile): the
    fields of PyIceberg's ManifestEntry that a commit reads."""

    status: ManifestEntryStatus
    snapshot_id: int | None
    sequence_number: int | None
    file_sequence_number: int | None
    data_file: Any


def file_body(fmt: EntryFormat, data_file: DataFile | KeptFile) -> bytes:
    """A data file's record in `fmt`'s layout. A file never changes, and a merge writes every live file's entry
    again (EXISTING), a rewrite every removed one (DELETED): a kept file's record as written is reused, so those
    are a copy of bytes (py-spy put 40% of a compaction's driver time in encoding them)."""
    if isinstance(data_file, KeptFile):
        if data_file.fmt is fmt or data_file.fmt.data_file_json == fmt.data_file_json:
            return data_file.body
        record = data_file.record()  # another layout (a partition source's type promoted): encoded again
    else:
        record = data_file_record(data_file, fmt.partition_names)
    if fmt.data_file_encoder is not None:
        try:
            return encode(fmt.data_file_encoder, record)
        except Unusual:
            pass  # a value fastavro takes in its own way
    out = io_module.BytesIO()
    fastavro.schemaless_writer(out, fmt.data_file_schema, record)
    return out.getvalue()


def entry_bytes(fmt: EntryFormat, body: bytes, status: int, snapshot_id: int | None, seq: int | None,
                 file_seq: int | None) -> bytes:
    """An entry's Avro record: its status, snapshot and sequence numbers, then its data file's record."""
    if fmt.entry_head is None:  # a layout the composition does not know: fastavro encodes it whole
        return fmt.avro.record({"status": status, "snapshot_id": snapshot_id, "sequence_number": seq,
                                "file_sequence_number": file_seq, "data_file": _decoded(fmt, body)})
    return fmt.entry_head(status, snapshot_id, seq, file_seq) + body


def _decoded(fmt: EntryFormat, body: bytes) -> dict[str, Any]:
    """A data file's record encoded in `fmt`'s layout, decoded."""
    return fastavro.schemaless_reader(io_module.BytesIO(body), fmt.data_file_schema, None)


HEAD_FIELDS = [("status", "int"), ("snapshot_id", ["null", "long"]), ("sequence_number", ["null", "long"]),
               ("file_sequence_number", ["null", "long"])]


def entry_head(fields: list[dict]) -> Any:
    """The encoder of a v2 manifest entry's fields before its data file (an int, then three optional longs, as
    Avro encodes them: a union's branch, then its value), or None for another layout."""
    if [(f["name"], f["type"]) for f in fields[:4]] != HEAD_FIELDS or fields[4]["name"] != "data_file" or len(fields) != 5:
        return None

    def head(status: int, snapshot_id: int | None, seq: int | None, file_seq: int | None) -> bytes:
        return b"".join([avro_long(status), *(b"\x00" if v is None else b"\x02" + avro_long(v)
                                              for v in (snapshot_id, seq, file_seq))])
    return head
