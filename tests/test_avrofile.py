"""Avro container framing (`core/avrofile.py`) against fastavro, the library it stands in for."""

from __future__ import annotations

import io
import json
import os
import random
import zlib

import fastavro

from appliance.core.avrofile import avro_long, container_header
from appliance.tables.fastpath.entries import _deflate


def _fastavro_long(n: int) -> bytes:
    out = io.BytesIO()
    fastavro.schemaless_writer(out, "long", n)
    return out.getvalue()


def test_avro_long_encodes_as_fastavro_at_every_length():
    values = [*range(-300, 300), 2**31, -2**31 - 1, 2**40, -2**40, 2**63 - 1, -2**63]
    assert [avro_long(n) for n in values] == [_fastavro_long(n) for n in values]


def test_a_header_kept_for_its_long_values_reads_back_with_every_file_own_short_ones():
    schema = {"type": "record", "name": "r", "fields": [{"name": "x", "type": "long"}]}
    long_value = "x" * 5000  # kept once encoded: the same bytes in every file
    files = []
    for snapshot in (1, 2, 3):
        sync = os.urandom(16)
        meta = {"avro.schema": json.dumps(schema), "avro.codec": "null", "big": long_value,
                "snapshot-id": str(snapshot)}
        body = avro_long(snapshot)
        files.append(b"".join([container_header(meta, sync), avro_long(1), avro_long(len(body)), body, sync]))
    for snapshot, data in enumerate(files, start=1):
        reader = fastavro.reader(io.BytesIO(data))
        assert reader.metadata["big"] == long_value
        assert reader.metadata["snapshot-id"] == str(snapshot)
        assert [r["x"] for r in reader] == [snapshot]


def test_a_deflated_block_of_any_size_inflates_as_avro_readers_inflate_it():
    rng = random.Random(7)
    for n in (0, 1, 511, 512, 513, 4096, 40_000, 100_000):
        data = bytes(rng.choice(b"abcdefgh/._0123") for _ in range(n))
        packed = _deflate(data)
        assert zlib.decompress(packed, -15) == data  # as fastavro and Java's Inflater(nowrap) read it
        assert len(packed) <= len(zlib.compress(data, 6, wbits=-15)) + 8
