"""A key as one or two 64-bit words: its exact form where it fits, a 128-bit hash otherwise.

- One integer-like column (boolean, int, long, date, timestamp): the value itself, one word.
- Two integer-like columns: both values, two words.
- One string column: a canonical UUID (lower-case, hyphenated: what databases print) is its 16 bytes,
  exactly; any other string is the first 16 bytes of its SHA-256.
- Anything else (binary, decimal, other combinations): the first 16 bytes of the SHA-256 of the key's
  columns, each written as text with its length in front (so no two keys write the same bytes).

Two keys share a hash with odds of about n²/2¹²⁹: 10⁻²³ for 10⁸ keys. The words depend only on the
values, never on the Arrow types a writer used (PyIceberg's `large_string`, a `timestamp[ns]`), so a
batch in a Spark task and a data file read back by the index give the same words. `mix` then spreads
them (a bijection: nothing is lost), so that the index can cut them into shards by their top bits.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyiceberg.schema import Schema
from pyiceberg.types import BooleanType, DateType, IntegerType, LongType, StringType, TimestampType, TimestamptzType

INTEGER_LIKE = (BooleanType, IntegerType, LongType, DateType, TimestampType, TimestamptzType)
UUID_HEX = np.r_[0:8, 9:13, 14:18, 19:23, 24:36]  # the 32 hex digits of a 36-character UUID
UUID_DASHES = np.array([8, 13, 18, 23])
_LOCAL = threading.local()


@dataclass(frozen=True)
class KeyForm:
    """How one table's key columns become words."""

    columns: tuple[str, ...]
    kinds: tuple[str, ...]  # per column: "integer", "string" or "other"

    @classmethod
    def of(cls, schema: Schema, columns: tuple[str, ...]) -> KeyForm:
        kinds = []
        for name in columns:
            field_type = schema.find_field(name).field_type
            kinds.append("integer" if isinstance(field_type, INTEGER_LIKE)
                         else "string" if isinstance(field_type, StringType) else "other")
        return cls(tuple(columns), tuple(kinds))

    @property
    def width(self) -> int:
        return 1 if self.kinds == ("integer",) else 2

    @property
    def exact(self) -> str:
        """How exact the words are, as the index's notes say it."""
        if set(self.kinds) == {"integer"} and len(self.kinds) <= 2:
            return "exact"
        return "exact UUIDs, else SHA-256" if self.kinds == ("string",) else "SHA-256"

    def words(self, table: pa.Table) -> np.ndarray:
        """Each row's key as `width` uint64 words, shape (rows, width). A row whose key has a null is
        all ones in the first word and left to the caller (`has_null`)."""
        if set(self.kinds) == {"integer"} and len(self.kinds) <= 2:
            return np.stack([_integers(table.column(c)) for c in self.columns], axis=1)
        if self.kinds == ("string",):
            return _text(table.column(self.columns[0]))
        return _sha256(_canonical(table, self.columns))

    def has_null(self, table: pa.Table) -> np.ndarray:
        out = np.zeros(table.num_rows, dtype=bool)
        for c in self.columns:
            column = table.column(c)
            if column.null_count:
                out |= column.is_null().to_numpy(zero_copy_only=False)
        return out


def _integers(column: pa.ChunkedArray | pa.Array) -> np.ndarray:
    t = column.type
    if pa.types.is_timestamp(t):
        column = column.cast(pa.timestamp("us", tz=t.tz)).cast(pa.int64())
    elif pa.types.is_date(t):
        column = column.cast(pa.date32()).cast(pa.int32())
    values = column.cast(pa.int64()).fill_null(-1)
    return values.to_numpy().view(np.uint64) if isinstance(values, pa.Array) \
        else values.combine_chunks().to_numpy().view(np.uint64)


def _text(column: pa.ChunkedArray | pa.Array) -> np.ndarray:
    """UUIDs exactly, other strings by SHA-256."""
    strings = (column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column).cast(pa.large_string())
    n = len(strings)
    out = np.empty((n, 2), dtype=np.uint64)
    uuid = _uuids(strings)
    found = uuid is not None
    if found:
        ok, words = uuid
        out[ok] = words[ok]
        rest = np.flatnonzero(~ok)
    else:
        rest = np.arange(n)
    if rest.size:
        others = strings.take(pa.array(rest)) if rest.size < n else strings
        out[rest] = _sha256(others)
    return out


def _uuids(strings: pa.LargeStringArray) -> tuple[np.ndarray, np.ndarray] | None:
    """(is a canonical UUID, its 16 bytes as two words) per string, or None when no string is 36 long."""
    n = len(strings)
    offsets = np.frombuffer(strings.buffers()[1], dtype=np.int64)[strings.offset:strings.offset + n + 1]
    data = np.frombuffer(strings.buffers()[2], dtype=np.uint8)
    if n and offsets[-1] - offsets[0] == 36 * n:  # every one 36 long (nulls aside): a view, no gather
        candidates = slice(None)
        chars = data[offsets[0]:offsets[-1]].reshape(n, 36)
    else:
        candidates = np.flatnonzero(np.diff(offsets) == 36)
        if not candidates.size:
            return None
        chars = data[offsets[candidates][:, None] + np.arange(36)]
    ok, words = _parse(chars)
    if not isinstance(candidates, slice):
        ok_all, words_all = np.zeros(n, dtype=bool), np.zeros((n, 2), dtype=np.uint64)
        ok_all[candidates], words_all[candidates] = ok, words
        ok, words = ok_all, words_all
    if strings.null_count:
        ok &= strings.is_valid().to_numpy(zero_copy_only=False)
    return ok, words


PARSE_ROWS = 1 << 15  # strings parsed at a time: small arrays stay in cache, and fresh pages cost here


def _parse(chars: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """36-character rows as canonical UUIDs: whether each is one, and its 16 bytes as two words."""
    ok = np.empty(len(chars), dtype=bool)
    words = np.empty((len(chars), 2), dtype=np.uint64)
    for start in range(0, len(chars), PARSE_ROWS):
        part = chars[start:start + PARSE_ROWS]
        hexes = np.take(part, UUID_HEX, axis=1)
        numeral = (hexes - np.uint8(48)) <= 9  # uint8 arithmetic: below '0' wraps round, above is large
        letter = (hexes - np.uint8(97)) <= 5
        nibbles = (hexes & np.uint8(15)) + np.uint8(9) * (hexes >> np.uint8(6))  # '0'-'9' -> 0-9, 'a'-'f' -> 10-15
        ok[start:start + PARSE_ROWS] = (numeral | letter).all(axis=1) \
            & (np.take(part, UUID_DASHES, axis=1) == ord("-")).all(axis=1)
        packed = (nibbles[:, 0::2] << np.uint8(4)) | nibbles[:, 1::2]
        words[start:start + PARSE_ROWS] = np.ascontiguousarray(packed).view(">u8")
    return ok, words


def _canonical(table: pa.Table, columns: tuple[str, ...]) -> pa.Array:
    """Each row's key columns as bytes, each with its length in front: `3:abc10:1700000000`."""
    binary = pa.large_binary()
    parts = []
    for name in columns:
        column = table.column(name)
        t = column.type
        if pa.types.is_timestamp(t) or pa.types.is_date(t) or pa.types.is_integer(t) or pa.types.is_boolean(t):
            text = pa.array(_integers(column).view(np.int64)).cast(pa.large_string()).cast(binary)
        elif pa.types.is_binary(t) or pa.types.is_large_binary(t) or pa.types.is_fixed_size_binary(t):
            text = column.cast(binary)
        else:  # strings and decimals (whose text the table's scale fixes)
            text = column.cast(pa.large_string()).cast(binary)
        lengths = pc.binary_length(text).cast(pa.large_string()).cast(binary)
        parts += [lengths, pa.scalar(b":", binary), text]
    return pc.binary_join_element_wise(*parts, pa.scalar(b"", binary))


def _sha256(values: pa.Array | pa.ChunkedArray) -> np.ndarray:
    """The first 16 bytes of each value's SHA-256, as two words (DuckDB computes them, many at once)."""
    con = getattr(_LOCAL, "duckdb", None)
    if con is None:
        import duckdb

        con = _LOCAL.duckdb = duckdb.connect()
        con.execute("SET threads = 1")
        con.execute("SET enable_progress_bar = false")
    con.register("key_values", pa.table({"v": values}))
    try:
        hashed = con.execute("SELECT unhex(left(sha256(v), 32)) AS h FROM key_values").to_arrow_table().column(0)
    finally:
        con.unregister("key_values")
    fixed = hashed.combine_chunks().cast(pa.binary(16))
    out = np.zeros((len(fixed), 2), dtype=np.uint64)
    if len(fixed):
        data = np.frombuffer(fixed.buffers()[1], dtype="<u8")[fixed.offset * 2:(fixed.offset + len(fixed)) * 2]
        out[:] = data.reshape(-1, 2)
    return out


M1, M2 = np.uint64(0xFF51AFD7ED558CCD), np.uint64(0xC4CEB9FE1A85EC53)


def fmix(x: np.ndarray) -> np.ndarray:
    """MurmurHash3's 64-bit finaliser: a bijection that spreads any pattern of keys evenly."""
    x = x ^ (x >> np.uint64(33))
    x *= M1
    x ^= x >> np.uint64(33)
    x *= M2
    x ^= x >> np.uint64(33)
    return x


def mix(words: np.ndarray) -> tuple[np.ndarray, np.ndarray | None]:
    """Words (rows, width) as the index keeps them: a well-spread high word and, for two words, the
    second one unchanged; together a bijection of the words."""
    with np.errstate(over="ignore"):
        if words.shape[1] == 1:
            return fmix(np.ascontiguousarray(words[:, 0])), None
        low = np.ascontiguousarray(words[:, 1])
        return fmix(words[:, 0] ^ fmix(low)), low
