"""The Avro object container file's framing: zig-zag varints, the header, blocks.

Floe writes container files itself where a library would cost too much per file: Iceberg
manifests (`tables.manifests`) and the bodies of registry-framed Avro messages handed to
DuckDB's reader (`model.avro_columns`).
"""

from __future__ import annotations

MAGIC = b"Obj\x01"


def avro_long(n: int) -> bytes:
    """Avro's zig-zag varint."""
    n = (n << 1) ^ (n >> 63)
    out = bytearray()
    while n & ~0x7F:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def avro_bytes(b: bytes) -> bytes:
    return avro_long(len(b)) + b


def container_header(metadata: dict[str, str], sync: bytes) -> bytes:
    """The magic, the metadata map (schema, codec...) and the 16-byte sync marker."""
    return b"".join([MAGIC, avro_long(len(metadata)),
                     *(avro_bytes(k.encode()) + avro_bytes(v.encode()) for k, v in metadata.items()),
                     avro_long(0), sync])
