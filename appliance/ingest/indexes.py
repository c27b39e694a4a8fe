"""Upsert streams' key indexes, kept for the life of the engine's process, and checkpointed beside the
state so that the next process loads them (`mergeonread.store`).

A stream's worker ends when it is paused, redefined or fails hard, and a new one starts later;
rebuilding a large index from the table each time would cost minutes. The index is kept here by
stream id and table (a routed upsert stream keeps one per route table), and whoever takes it brings it
to the table before trusting it (`mergeonread.lineage`).
The engine saves them whole when it stops, and forgets (and deletes the checkpoints of) those of
deleted streams. At its start it loads them in a thread while Spark starts (`preload`): a stream's first
commit then finds its index current instead of loading (or building) it after its first batch.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable, Iterable
from pathlib import Path

from pyiceberg.table import Table

from appliance.mergeonread.commit import checkpoint
from appliance.mergeonread.index import KeyIndex
from appliance.mergeonread.lineage import bring_to
from appliance.mergeonread.store import IndexStore, index_directory
from appliance.model.stream import StreamDef

_LOCK = threading.Lock()
_KEPT: dict[tuple[str, str], KeyIndex] = {}  # (stream id, table): a routed stream keeps one per route table
_SWEPT: set[Path] = set()  # homes whose checkpoints of deleted streams were looked for
_LOADING: dict[str, threading.Event] = {}  # stream id -> set once `preload` is done with its index

log = logging.getLogger(__name__)


def index_for(home: Path, stream: StreamDef, table: Table) -> KeyIndex:
    """The index of the stream's table `table` (a routed stream's route as `route_stream` makes it: each route table
    its own): the one kept, if its key and table are still the stream's, or a new one (which loads its checkpoint,
    or builds, at its first use). Waits while `preload` is bringing it in: an index has one user at a time."""
    loading = _LOADING.get(stream.id)
    if loading is not None:
        loading.wait()
    return _kept(home, stream, table)


def preload(home: Path, streams: Iterable[StreamDef], table_of: Callable[[StreamDef], Table]) -> threading.Thread:
    """The upsert `streams`' indexes loaded (or built) in a thread of their own, now. Whatever fails is
    logged and left to the stream's first commit, which loads or builds as it would have."""
    mine = [s for s in streams if s.upserts and not s.is_routed]  # a route table's loads at its first commit
    with _LOCK:
        for stream in mine:
            _LOADING.setdefault(stream.id, threading.Event())

    def load() -> None:
        for stream in mine:
            try:
                table = table_of(stream)
                bring_to(_kept(home, stream, table), table)
            except Exception as exc:  # noqa: BLE001 - the first commit tries again, and says what is wrong
                log.warning("%s: key index not loaded ahead (%s): its first commit loads it", stream.name, exc)
            finally:
                _LOADING.pop(stream.id).set()

    thread = threading.Thread(target=load, name="floe-index-preload", daemon=True)
    thread.start()
    return thread


def _kept(home: Path, stream: StreamDef, table: Table) -> KeyIndex:
    directory = index_directory(home, table)
    with _LOCK:
        found = _KEPT.get((stream.id, stream.table))
        if found is None or found.columns != stream.key or found.store.directory != directory:
            found = _KEPT[(stream.id, stream.table)] = KeyIndex(stream.key, IndexStore(directory, owner=stream.id))
        return found


def save_all() -> None:
    """Every index kept, saved whole (the engine stops): the next start loads instead of replaying."""
    for loading in list(_LOADING.values()):
        loading.wait()
    with _LOCK:
        kept = list(_KEPT.values())
    for index in kept:
        checkpoint(index, everything=True)


def keep_only(home: Path, stream_ids: set[str]) -> None:
    """Forget the indexes of streams that no longer exist, and delete their checkpoints."""
    with _LOCK:
        gone = {kept for kept in _KEPT if kept[0] not in stream_ids}
        for kept in gone:
            del _KEPT[kept]
        if not gone and home in _SWEPT:
            return
        _SWEPT.add(home)
    root = home / "indexes"
    for folder in root.iterdir() if root.exists() else ():
        try:
            owner = json.loads((folder / "index.json").read_text()).get("owner")
        except (OSError, ValueError):
            continue
        if owner and owner not in stream_ids:
            IndexStore(folder, writable=False).drop()
