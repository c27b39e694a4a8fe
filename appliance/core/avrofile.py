"""The Avro object container file's framing: zig-zag varints, the header, blocks.

Floe writes container files itself where a library would cost too much per file: Iceberg
manifests (`tables.manifests`) and the bodies of registry-framed Avro messages handed to
DuckDB's reader (`model.avro_columns`).
"""

from __future__ import annotations

MAGIC = b"Obj\x01"
_SMALL = tuple(bytes([(n << 1) ^ (n >> 63)]) for n in range(-64, 64))  # one byte: -64 <= n < 64


def avro_long(n: int) -> bytes:
    """Avro's zig-zag varint."""
    if -64 <= n < 64:
        return _SMALL[n + 64]
    n = (n << 1) ^ (n >> 63)
    out = bytearray()
    while n & ~0x7F:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def avro_bytes(b: bytes) -> bytes:
    return avro_long(len(b)) + b


# A manifest's header repeats the same long values (its Avro schema, the table's schema and spec: kilobytes of
# JSON) in every file a table writes: their pairs encoded once. Short values (ids, counts) change from file to
# file and cost little, so they are not kept.
_KEPT_PAIRS: dict[tuple[str, str], bytes] = {}
KEPT_PAIRS = 4096
LONG_VALUE = 64


def _pair(key: str, value: str) -> bytes:
    if len(value) < LONG_VALUE:
        return avro_bytes(key.encode()) + avro_bytes(value.encode())
    found = _KEPT_PAIRS.get((key, value))
    if found is None:
        if len(_KEPT_PAIRS) >= KEPT_PAIRS:
            _KEPT_PAIRS.clear()  # tables' schemas changed many times over: start again
        found = _KEPT_PAIRS[(key, value)] = avro_bytes(key.encode()) + avro_bytes(value.encode())
    return found


def container_header(metadata: dict[str, str], sync: bytes) -> bytes:
    """The magic, the metadata map (schema, codec...) and the 16-byte sync marker."""
    return b"".join([MAGIC, avro_long(len(metadata)), *(_pair(k, v) for k, v in metadata.items()),
                     avro_long(0), sync])
