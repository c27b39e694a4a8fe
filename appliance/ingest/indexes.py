"""Upsert streams' key indexes, kept for the life of the engine's process.

A stream's worker ends when it is paused, redefined or fails hard, and a new one starts later;
rebuilding a million keys' index from the table each time would cost seconds. The index is kept
here by stream id, and whoever takes it checks it against the table before trusting it
(`KeyIndex.reflects`): a stale one rebuilds itself. The engine forgets those of deleted streams.
"""

from __future__ import annotations

import threading

from appliance.model.stream import StreamDef
from appliance.tables.keyindex import KeyIndex

_LOCK = threading.Lock()
_KEPT: dict[str, KeyIndex] = {}


def index_for(stream: StreamDef) -> KeyIndex:
    """The stream's index: the one kept, if its key is still the stream's, or a new one to build."""
    with _LOCK:
        found = _KEPT.get(stream.id)
        if found is None or found.columns != stream.key:
            found = _KEPT[stream.id] = KeyIndex(stream.key)
        return found


def keep_only(stream_ids: set[str]) -> None:
    """Forget the indexes of streams that no longer exist."""
    with _LOCK:
        for gone in set(_KEPT) - stream_ids:
            del _KEPT[gone]
