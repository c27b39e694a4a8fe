"""Small data files this process wrote, their rows kept in memory for the compaction that reads them back.

A trickle writes a file of a few rows every few seconds into each of hundreds of tables, and compaction reads
each of them back minutes later: opening a Parquet file and decoding its footer and a dozen column chunks costs
PyArrow about half a millisecond however few its rows, most of what compacting a trickle's table costs (at 200
trickles, reading them back was a fifth of the engine's CPU). The rows of each small file written here are kept
by the file's path (a new name per file, never reused), a table's files gathered into blocks of `BLOCK_FILES`
(one Arrow table each, about half a kilobyte a file), and `tables/reading.py` takes them instead of reading
the file. A file rewritten away (`forget`) is dropped; past `limit` bytes, the oldest blocks go first.

Off until `keep_in_this_process` turns it on: in the engine's process, whose compaction reads what its trickles
wrote there, not in Spark's Python workers, whose files the engine's compactions would never take from them.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Iterable

import pyarrow as pa

BLOCK_FILES = 8  # files of one table gathered into one Arrow table: each Arrow table costs about 2 KB whatever its rows
OVERHEAD = 2048  # bytes an Arrow table of a dozen columns costs besides its buffers (measured: 2.3 KB for 4 rows)
LIMIT = 48 * 1024 * 1024  # 200 trickles' files of ten minutes are about 30,000: 20 MB kept so


class _Block:
    """Files of one table (one folder, one Arrow schema), appended until `BLOCK_FILES`, then joined."""

    __slots__ = ("key", "schema", "paths", "parts", "table", "offsets", "live", "nbytes")

    def __init__(self, key: str, schema: pa.Schema) -> None:
        self.key = key  # the folder of its files
        self.schema = schema
        self.paths: list[str] = []
        self.parts: list[pa.Table] = []
        self.table: pa.Table | None = None  # once sealed: every part's rows, one chunk per column
        self.offsets: list[int] = []  # once sealed: where each part's rows start
        self.live = 0  # its files not yet forgotten
        self.nbytes = 0

    def rows(self, i: int) -> pa.Table:
        if self.table is None:
            return self.parts[i]
        return self.table.slice(self.offsets[i], self.offsets[i + 1] - self.offsets[i])

    def seal(self) -> None:
        self.offsets = [0]
        for part in self.parts:
            self.offsets.append(self.offsets[-1] + part.num_rows)
        self.table = pa.concat_tables(self.parts).combine_chunks()
        self.parts = []
        self.nbytes = self.table.get_total_buffer_size() + OVERHEAD


class RecentFiles:
    def __init__(self, limit: int = LIMIT) -> None:
        self.limit = limit
        self.enabled = False
        self._lock = threading.Lock()
        self._where: dict[str, tuple[_Block, int]] = {}  # path -> its block and its place there
        # folder -> the blocks taking its files, one per schema (field ids too): almost always one. Not keyed by the
        # schema, which was hashed at every file (6 us); two writers of other Arrow types still fill a block each.
        self._filling: dict[str, list[_Block]] = {}
        self._blocks: OrderedDict[int, _Block] = OrderedDict()  # oldest first
        self.nbytes = 0

    def keep(self, path: str, rows: pa.Table) -> None:
        """The rows of the file just written at `path`, as written (its Arrow schema, with field ids)."""
        if not self.enabled:
            return
        folder = path.rsplit("/", 1)[0]
        with self._lock:
            filling = self._filling.setdefault(folder, [])
            block = next((b for b in filling if b.schema.equals(rows.schema, check_metadata=True)), None)
            if block is None:
                block = _Block(folder, rows.schema)
                filling.append(block)
                self._blocks[id(block)] = block
            was = block.nbytes
            self._where[path] = (block, len(block.parts))
            block.paths.append(path)
            block.parts.append(rows)
            block.live += 1
            block.nbytes += rows.get_total_buffer_size() + OVERHEAD
            self.nbytes += block.nbytes - was
            if len(block.parts) == BLOCK_FILES:
                self._seal(block)
            while self.nbytes > self.limit and self._blocks:
                self._drop(next(iter(self._blocks.values())))

    def _seal(self, block: _Block) -> None:
        self._unfill(block)
        was = block.nbytes
        block.seal()
        self.nbytes += block.nbytes - was

    def rows(self, path: str) -> pa.Table | None:
        """The rows kept of the file at `path`, or None: read the file."""
        with self._lock:
            found = self._where.get(path)
            return None if found is None else found[0].rows(found[1])

    def holds(self, path: str) -> bool:
        with self._lock:
            return path in self._where

    def rows_of(self, paths: list[str]) -> tuple[list[pa.Table], list[int]] | None:
        """The rows kept of every file at `paths`, one after the other (neighbours in a block as one slice of it: a
        compaction takes a trickle's files in the order they were written, eight to a block), and each file's row
        count; None when a file is not kept."""
        with self._lock:
            found = [self._where.get(path) for path in paths]
            if any(f is None for f in found):
                return None
            parts, counts = [], []
            i = 0
            while i < len(found):
                block, first = found[i]
                last = first
                while (block.table is not None and i + 1 < len(found) and found[i + 1][0] is block
                       and found[i + 1][1] == last + 1):
                    i, last = i + 1, last + 1
                if block.table is None:
                    parts.append(block.parts[first])
                    counts.append(block.parts[first].num_rows)
                else:
                    start = block.offsets[first]
                    parts.append(block.table.slice(start, block.offsets[last + 1] - start))
                    counts += [block.offsets[j + 1] - block.offsets[j] for j in range(first, last + 1)]
                i += 1
            return parts, counts

    def forget(self, paths: Iterable[str]) -> None:
        """Files no longer live (rewritten away): their rows are not read again."""
        with self._lock:
            for path in paths:
                found = self._where.pop(path, None)
                if found is not None:
                    block = found[0]
                    block.live -= 1
                    if block.live == 0:
                        self._drop(block)

    def _drop(self, block: _Block) -> None:
        self._blocks.pop(id(block), None)
        self._unfill(block)
        for path in block.paths:
            found = self._where.get(path)
            if found is not None and found[0] is block:
                del self._where[path]
        self.nbytes -= block.nbytes

    def _unfill(self, block: _Block) -> None:
        """`block` takes no more files (sealed, or dropped while it did)."""
        filling = self._filling.get(block.key, [])
        if block in filling:
            filling.remove(block)
            if not filling:
                del self._filling[block.key]

    def __len__(self) -> int:
        return len(self._where)


RECENT = RecentFiles()


def keep_in_this_process(limit: int = LIMIT) -> None:
    """Keep the rows of the small files this process writes (the engine's, at its start)."""
    RECENT.limit = limit
    RECENT.enabled = True
