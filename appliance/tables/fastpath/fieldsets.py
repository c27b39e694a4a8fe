"""Snapshots, their summaries and snapshot-log entries sharing the one thing pydantic keeps per instance that
never differs between them.

Pydantic keeps on every model instance the set of the field names it was given (`model_fields_set`): 728 bytes
for a snapshot's seven, 216 for its summary's and its log entry's, a third of what a kept snapshot costs in
memory, and an engine of 200 trickling tables keeps 100,000 of them (500 each). These models are frozen, so the
set is never changed in place (a copy with an update copies it first, `model_copy`): instances given the same
names can share one. tests/test_fieldsets.py checks that dumps, copies and comparisons are unchanged.
"""

from __future__ import annotations

from typing import Any, Iterable

_SHARED: dict[frozenset, set] = {}  # a few combinations of field names: never more than a handful


def share(model: Any) -> None:
    """Point `model`'s set of given field names to the one set of those names that others share."""
    names = model.__pydantic_fields_set__
    key = frozenset(names)
    shared = _SHARED.get(key)
    if shared is None:
        shared = _SHARED.setdefault(key, set(key))
    if names is not shared:
        object.__setattr__(model, "__pydantic_fields_set__", shared)


def share_snapshots(snapshots: Iterable[Any], log: Iterable[Any] = ()) -> None:
    """`share` each snapshot, its summary, and each log entry: a table's metadata as read from its file."""
    for snapshot in snapshots:
        share(snapshot)
        if snapshot.summary is not None:
            share(snapshot.summary)
    for entry in log:
        share(entry)
