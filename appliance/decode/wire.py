"""The Confluent wire format: a magic byte, the writer schema's id, for Protobuf the message
indexes, then the payload.

    0x00 | 4-byte big-endian schema id | [Protobuf: zig-zag varint count, then that many indexes] | payload

A single index byte 0 stands for [0], the file's first message type. `Malformed` says what
is wrong with a message that is not in this format; such a message is dead-lettered.
"""

from __future__ import annotations

from itertools import compress
from typing import Callable

MAGIC = 0
HEADER = 5  # bytes: the magic byte and the schema id


class Malformed(ValueError):
    """A message not in the wire format: the text names what is wrong."""


def header(value: bytes) -> tuple[int, int]:
    """(schema id, offset of what follows the id)."""
    if len(value) < 5:
        raise Malformed(f"message of {len(value)} bytes is too short for the schema registry wire format "
                        "(magic byte and 4-byte schema id)")
    if value[0] != MAGIC:
        raise Malformed(f"magic byte {value[0]} is not the schema registry wire format's 0 "
                        "(is the topic's format right?)")
    schema_id = int.from_bytes(value[1:5], "big", signed=True)
    if schema_id < 0:  # registries give ids as 32-bit signed integers, from 1 up
        raise Malformed(f"schema id {schema_id} is negative: not a schema registry id (is the topic's format right?)")
    return schema_id, HEADER


def _varint(value: bytes, at: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        if at >= len(value):
            raise Malformed("message indexes run past the end of the message")
        byte = value[at]
        at += 1
        result |= (byte & 0x7F) << shift
        shift += 7
        if not byte & 0x80:
            return (result >> 1) ^ -(result & 1), at
        if shift > 63:
            raise Malformed("message indexes hold a varint longer than 64 bits")


def message_indexes(value: bytes, at: int) -> tuple[tuple[int, ...], int]:
    """The Protobuf message indexes after the schema id, and where the payload starts."""
    count, at = _varint(value, at)
    if count == 0:
        return (0,), at
    if count < 0 or count > 100:
        raise Malformed(f"message index count {count} is not valid")
    indexes = []
    for _ in range(count):
        index, at = _varint(value, at)
        indexes.append(index)
    return tuple(indexes), at


def avro_header(value: bytes) -> tuple[tuple, int]:
    """((schema id,), where the Avro body starts)."""
    schema_id, at = header(value)
    return (schema_id,), at


def protobuf_header(value: bytes) -> tuple[tuple, int]:
    """((schema id, message indexes), where the Protobuf payload starts)."""
    schema_id, at = header(value)
    indexes, at = message_indexes(value, at)
    return (schema_id, indexes), at


def encode_indexes(indexes: tuple[int, ...]) -> bytes:
    """The wire format's bytes for `indexes` (for tests and the demo's producer)."""
    if indexes == (0,):
        return b"\x00"
    out = bytearray()
    for n in (len(indexes), *indexes):
        z = (n << 1) ^ (n >> 63)
        while z & ~0x7F:
            out.append((z & 0x7F) | 0x80)
            z >>= 7
        out.append(z)
    return bytes(out)


MAX_GROUPS = 16  # distinct headers told apart by their bytes; past that, each header is read on its own


def grouped(values: list[bytes], indexes: list[int], read: Callable[[bytes], tuple[tuple, int]]
            ) -> tuple[list[tuple[tuple, int, list[int]]], list[tuple[int, str]]]:
    """The messages at `indexes` grouped by header: [(key, where the payload starts, members)], and
    the messages whose header is malformed, with the reason. `read(value)` gives (key, start).

    A header's bytes determine it (its varints are self-delimiting), so every message that starts
    with the bytes of one header read has that header: one `startswith` a message, in C, rather
    than a header parsed in Python for each. A batch holds one or a few headers.
    """
    groups: list[tuple[tuple, int, list[int]]] = []
    bad: list[tuple[int, str]] = []
    rest = indexes
    while rest and len(groups) < MAX_GROUPS:
        first = values[rest[0]]
        try:
            key, at = read(first)
        except Malformed as exc:
            bad.append((rest[0], str(exc)))
            rest = rest[1:]
            continue
        prefix = first[:at]
        same = [values[i].startswith(prefix) for i in rest]
        groups.append((key, at, list(compress(rest, same))))
        rest = [] if all(same) else [i for i, s in zip(rest, same) if not s]
    for i in rest:  # many distinct headers (garbage, mostly): one by one
        try:
            key, at = read(values[i])
        except Malformed as exc:
            bad.append((i, str(exc)))
            continue
        groups.append((key, at, [i]))
    return groups, bad
