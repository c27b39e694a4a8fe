"""Upsert streams' key indexes, kept for the life of the engine's process, and checkpointed beside the
state so that the next process loads them (`mergeonread.store`).

A stream's worker ends when it is paused, redefined or fails hard, and a new one starts later;
rebuilding a large index from the table each time would cost minutes. The index is kept here by
stream id, and whoever takes it brings it to the table before trusting it (`mergeonread.lineage`).
The engine saves them whole when it stops, and forgets (and deletes the checkpoints of) those of
deleted streams.
"""

from __future__ import annotations

import json
import threading
from pathlib import Path

from pyiceberg.table import Table

from appliance.mergeonread.commit import checkpoint
from appliance.mergeonread.index import KeyIndex
from appliance.mergeonread.store import IndexStore, index_directory
from appliance.model.stream import StreamDef

_LOCK = threading.Lock()
_KEPT: dict[str, KeyIndex] = {}
_SWEPT: set[Path] = set()  # homes whose checkpoints of deleted streams were looked for


def index_for(home: Path, stream: StreamDef, table: Table) -> KeyIndex:
    """The stream's index: the one kept, if its key and table are still the stream's, or a new one (which
    loads its checkpoint, or builds, at its first use)."""
    directory = index_directory(home, table)
    with _LOCK:
        found = _KEPT.get(stream.id)
        if found is None or found.columns != stream.key or found.store.directory != directory:
            found = _KEPT[stream.id] = KeyIndex(stream.key, IndexStore(directory, owner=stream.id))
        return found


def save_all() -> None:
    """Every index kept, saved whole (the engine stops): the next start loads instead of replaying."""
    with _LOCK:
        kept = list(_KEPT.values())
    for index in kept:
        checkpoint(index, everything=True)


def keep_only(home: Path, stream_ids: set[str]) -> None:
    """Forget the indexes of streams that no longer exist, and delete their checkpoints."""
    with _LOCK:
        gone = set(_KEPT) - stream_ids
        for stream_id in gone:
            del _KEPT[stream_id]
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
