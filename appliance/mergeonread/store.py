"""An upsert table's key index on disk, beside the state: `$FLOE_HOME/indexes/<table uuid>/`.

The checkpoint is the shards' sorted arrays, in files of a run of shards each (about a million keys a
file: one for a small table, 128 for 10^8 keys), and a small `index.json` naming them, each shard with
the snapshot its copy reflects, and the segments they point into. It is written a file at a time as the
stream commits (`step`: every file whose shards changed, within `CYCLE` seconds; a few megabytes a
commit, never the whole index at once), and whole when the engine stops (every file whose shards changed
since it was saved; the others hold for the index's snapshot). Every file is written to a temporary name,
flushed to disk and renamed, readable by this user only; `index.json` is replaced last, so a kill at any
moment leaves a checkpoint whose every shard is one it names. A file mapped afresh is read in by a thread
(`memory.warm`) ahead of the lookups that need its pages.

Loading maps the keys (copy-on-write) and reads the locations into memory, which every commit writes;
and trusts nothing: `lineage` checks the table and key, checks
that every shard's snapshot is an ancestor of the table's, and replays what came after; anything it
cannot prove is built again from the table. Rewrite maps (`folding`) are saved by maintenance in
`rewrites/` here, so the index of any process can follow a compaction.
"""

from __future__ import annotations

import json
import logging
import os
import time
import uuid
from collections.abc import Callable
from pathlib import Path

import numpy as np
from pyiceberg.table import Table

from appliance.core.errors import KeyIndexStale
from appliance.core.failpoints import failpoint
from appliance.mergeonread.index import KeyIndex
from appliance.mergeonread.keyforms import KeyForm
from appliance.mergeonread.memory import give_back, warm
from appliance.mergeonread.segments import Segments
from appliance.mergeonread.shards import SHARDS, Shard

log = logging.getLogger(__name__)

VERSION = 1
MAGIC = b"FLOEKIX2"
KEYS_PER_FILE = 1 << 20
CYCLE = 300.0  # seconds: a shard that changed is saved within about this long
MAX_PER_STEP = 8  # files of shards one commit may save
# ...and keys: a step follows its shards through pending rewrites and writes them, in the commit's path,
# so a catch-up after a long rewrite of a big table (10^8 keys: 128 files) costs a batch a second, not ten.
MAX_KEYS_PER_STEP = 2_000_000
ORPHAN_MAPS = 2 * 86400.0  # seconds: a rewrite map no snapshot named by then is let go


def index_directory(home: Path, table: Table) -> Path:
    return home / "indexes" / str(table.metadata.table_uuid)


class IndexStore:
    """The checkpoint of one table's index. `writable` False: read it only (a command beside the engine)."""

    def __init__(self, directory: Path, owner: str = "", writable: bool = True) -> None:
        self.directory, self.owner, self.writable = directory, owner, writable
        if writable:
            directory.mkdir(mode=0o700, parents=True, exist_ok=True)
        self._cursor = 0
        self._last = time.monotonic()
        self._pass_rewrites = 0  # rewrites the index followed when the current pass began
        self._old: list[str] = []  # files replaced, deleted once index.json no longer names them
        # A first checkpoint over files no loaded index.json named (a checkpoint of another key or version,
        # a torn one): once the new index.json is in, every file it does not name goes.
        self._sweep = False
        self.meta: dict = {}
        self.rewrites: dict[str, int] = {}  # rewrite id -> its snapshot's sequence number (replayed or seen)

    @property
    def maps(self) -> Path:
        return self.directory / "rewrites"

    # ---- loading ----------------------------------------------------------------------------------

    def load(self, index: KeyIndex, table: Table) -> list[tuple[int | None, int]]:
        """The checkpoint into `index`; each shard's (snapshot id, sequence number). Raises KeyIndexStale
        when there is none, or it is of another table or key."""
        try:
            meta = json.loads((self.directory / "index.json").read_text())
        except (OSError, ValueError):
            raise KeyIndexStale("no checkpoint of the key index") from None
        form = KeyForm.of(table.schema(), index.columns)
        if meta.get("version") != VERSION or meta.get("table_uuid") != str(table.metadata.table_uuid) \
                or tuple(meta.get("columns", ())) != form.columns or tuple(meta.get("kinds", ())) != form.kinds:
            raise KeyIndexStale("the checkpoint is of another table, key or version")
        index.reset(form, str(table.metadata.table_uuid))
        index.segments = _load_segments(self.directory / meta["segments"])
        reflected = []
        for s, entry in enumerate(meta["shards"]):
            index.shards.parts[s] = self._load_shard(entry, index.shards.wide)
            index.shards.parts[s].sequence = entry["sequence"]
            reflected.append((entry["snapshot_id"], entry["sequence"]))
        index.keys = index.shards.keys()
        warm([a for p in index.shards.parts for a in (p.h, p.low)])
        index.clocks = {int(p): int(t) for p, t in meta.get("clocks", {}).items()}
        index.shards.watermark = min(index.clocks.values()) if index.clocks else 0
        self.meta = meta
        return reflected

    def _load_shard(self, entry: dict, wide: bool) -> Shard:
        shard, keys = Shard(wide), entry["keys"]
        shard.dirty = False  # its saved copy is this one
        if not keys:
            return shard
        path = self.directory / entry["file"]
        try:
            with path.open("rb") as f:
                magic = f.read(len(MAGIC))
            size = path.stat().st_size
        except OSError:
            raise KeyIndexStale(f"checkpoint file {entry['file']} is missing") from None
        if magic != MAGIC or size < entry["at"] + 8 * keys * (3 if wide else 2):
            raise KeyIndexStale(f"checkpoint file {entry['file']} is not what index.json says")
        _map(shard, path, entry["at"], keys)
        return shard

    # ---- saving -----------------------------------------------------------------------------------

    def step(self, index: KeyIndex, flatten: Callable[[KeyIndex, int], None], everything: bool = False) -> None:
        """After a commit: save the files due (in turn, so that each is saved once a `CYCLE`), their shards
        first followed through pending rewrites; `everything`: all of them (the engine stops)."""
        if not self.writable or not index.ready:
            return
        now = time.monotonic()
        # A first checkpoint holds every shard; so does the first after a build (no shard has a saved copy),
        # which is then served from its saved copies rather than the heap (`_map`).
        first = not self.meta or all(p.sequence < 0 for p in index.shards.parts)
        everything = everything or first
        if everything:
            self._sweep = self._sweep or not self.meta
            self.meta.setdefault("shards", [None] * SHARDS)
            self.meta["files"] = max(1, min(SHARDS, 1 << max(0, (len(index) // KEYS_PER_FILE).bit_length())))
        files = self.meta["files"]
        most = max(1, min(MAX_PER_STEP, MAX_KEYS_PER_STEP * files // max(1, len(index))))
        due = files if everything else min(most, int((now - self._last) * files / CYCLE))
        if due < 1:
            return
        self._last = now if everything else self._last + due * CYCLE / files
        for _ in range(due):
            g = self._cursor % files
            self._cursor = (g + 1) % files
            if g == 0:  # a pass begins: the rewrites followed before the last one began are flattened everywhere
                index.segments.release(self._pass_rewrites)
                self._pass_rewrites = len(index.segments.rewrites)
            # Whole, the files of changed shards are written, the others' copies hold (an engine's stop after
            # a few changes writes a few files, not 2 GiB at 10^8 keys, and the rest stay mapped as they were).
            self._save_run(index, flatten, range(g * SHARDS // files, (g + 1) * SHARDS // files), first)
        if everything:
            index.segments.release(len(index.segments.rewrites))
        self._save_meta(index)
        if everything:
            give_back()  # the shards' heap arrays, now served from their saved copies

    def _save_run(self, index: KeyIndex, flatten: Callable[[KeyIndex, int], None], run: range, force: bool) -> None:
        """One file of the shards `run`, if any changed; otherwise their copies hold for the index's snapshot."""
        for s in run:
            flatten(index, s)
        parts = [index.shards.parts[s] for s in run]
        if not force and not any(p.dirty for p in parts):
            for s in run:
                self.meta["shards"][s].update(snapshot_id=index.snapshot_id, sequence=index.sequence)
            return
        name = f"shards-{run.start:03d}-{uuid.uuid4().hex[:12]}.bin"
        at, entries, arrays = len(MAGIC), [], []
        for s, shard in zip(run, parts):
            shard.merge(index.shards.watermark)
            mine = [shard.h] + ([shard.low] if shard.low is not None else []) + [shard.loc]
            entries.append({"file": name, "at": at, "keys": len(shard.h), "snapshot_id": index.snapshot_id,
                            "sequence": index.sequence})
            arrays += mine
            at += sum(8 * len(a) for a in mine)

        def write(f) -> None:
            f.write(MAGIC)
            for a in arrays:
                f.write(np.ascontiguousarray(a, dtype="<u8").tobytes())

        _atomic(self.directory / name, write)
        failpoint("checkpoint_shard_saved")
        self._old += [e["file"] for e in (self.meta["shards"][s] for s in run) if e]
        for s, shard, entry in zip(run, parts, entries):
            self.meta["shards"][s] = entry
            shard.dirty, shard.sequence = False, index.sequence
            if entry["keys"]:
                _map(shard, self.directory / name, entry["at"], entry["keys"], shard.loc)
        warm([a for p in parts for a in (p.h, p.low)])

    def _save_meta(self, index: KeyIndex) -> None:
        if not self.meta:
            return
        segments = f"segments-{uuid.uuid4().hex[:12]}.npz"
        _atomic(self.directory / segments, lambda f: _save_segments(f, index.segments))
        named = {e["file"] for e in self.meta["shards"]}
        old = [f for f in set(self._old) if f not in named] + [self.meta.get("segments")]
        self._old = []
        self.meta.update(version=VERSION, table_uuid=index.table_uuid, columns=list(index.form.columns),
                         kinds=list(index.form.kinds), owner=self.owner, segments=segments,
                         clocks={str(p): t for p, t in index.clocks.items()})
        _atomic(self.directory / "index.json", lambda f: f.write(json.dumps(self.meta).encode()))
        failpoint("checkpoint_saved")
        if self._sweep:
            old += [p.name for p in (*self.directory.glob("shards-*.bin"), *self.directory.glob("segments-*.npz"))
                    if p.name not in named and p.name != segments]
            self._sweep = False
        for name in old:
            if name:
                (self.directory / name).unlink(missing_ok=True)
        self._forget_maps()

    def _forget_maps(self) -> None:
        """Rewrite maps no shard needs any more (their snapshot is at or below every shard's), and
        orphans (maps of rewrites that never committed)."""
        if not self.maps.exists():
            return
        oldest = min(e["sequence"] for e in self.meta["shards"])
        now = time.time()
        for path in self.maps.glob("*.npz"):
            sequence = self.rewrites.get(path.stem)
            if (sequence is not None and sequence <= oldest) or \
                    (sequence is None and now - path.stat().st_mtime > ORPHAN_MAPS):
                path.unlink(missing_ok=True)

    def drop(self) -> None:
        """The checkpoint is of no use any more (its table or stream is gone)."""
        for path in sorted(self.directory.rglob("*"), reverse=True):
            path.rmdir() if path.is_dir() else path.unlink(missing_ok=True)
        self.directory.rmdir()


def _map(shard: Shard, path: Path, at: int, keys: int, written: np.ndarray | None = None) -> None:
    """The shard's keys as its saved copy at `at` in `path`, mapped copy-on-write: what a restart
    loads, and what a running index serves from once a shard is saved. The pages are the file's, which
    the system can drop and read again, not the process's own: the index's resident cost after a build
    (whose arrays came from the heap) is then what a restart's is (measured by scripts/bench_keyindex_build).

    The locations are the process's own (8 bytes a key; `written`, the array just saved, else read from
    the file): every commit writes some, and a write into a mapped page copies it first, one fault a key
    at 10^8 keys, 0.25-0.5 s of a 100,000-message upsert batch (`scripts/bench_keyindex_commit`)."""
    width = 2 if shard.low is None else 3
    arrays = [np.memmap(path, dtype="<u8", mode="c", offset=at + 8 * keys * i, shape=(keys,)) for i in range(width - 1)]
    shard.h = arrays[0]
    if width == 3:
        shard.low = arrays[1]
    if written is not None and len(written) == keys:
        shard.loc = np.ascontiguousarray(written, dtype=np.uint64)
    else:
        shard.loc = np.fromfile(path, dtype="<u8", count=keys, offset=at + 8 * keys * (width - 1)).astype(np.uint64, copy=False)


def _atomic(path: Path, write: Callable) -> None:
    tmp = path.with_name(f".{path.name}.{uuid.uuid4().hex}")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        with os.fdopen(fd, "wb") as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    folder = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(folder)
    finally:
        os.close(folder)


def _save_segments(f, segments: Segments) -> None:
    ids, numbers = segments.live()
    paths = "\n".join(segments.paths[n] for n in numbers).encode()
    np.savez(f, ids=ids, files=segments.file[ids], partitions=segments.partition[ids],
             numbers=np.array(numbers, dtype=np.int64), paths=np.frombuffer(paths, dtype=np.uint8))


def _load_segments(path: Path) -> Segments:
    try:
        with np.load(path, allow_pickle=False) as z:
            numbers = z["numbers"].tolist()
            paths = z["paths"].tobytes().decode().split("\n") if numbers else []
            return Segments.restore(z["ids"], z["files"], z["partitions"], numbers, paths)
    except (OSError, ValueError, KeyError):
        raise KeyIndexStale(f"checkpoint file {path.name} is unreadable") from None
