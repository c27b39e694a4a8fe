"""Iceberg transactions that cost a commit, not a commit per read of their metadata.

PyIceberg 0.12's `update_table_metadata` deep-copies the whole table metadata after
applying a transaction's updates, and `Transaction.table_metadata` calls it on every
read: one fast append read it about fourteen times, and the catalog once more. At 1,000
snapshots that was 0.9 s of CPU per commit, most of a 1-second stream's cost. The
models are frozen pydantic objects and every update builds new ones
(`model_copy(update=...)`), so the copy protects nothing; `staged_metadata` is the same
function without it, and a `LeanTransaction` computes it once per set of updates.
"""

from __future__ import annotations

import threading
from datetime import datetime

from pyiceberg.table import Table, Transaction
from pyiceberg.table.metadata import TableMetadata
from pyiceberg.table.update import TableUpdate
from pyiceberg.utils.datetime import datetime_to_millis

from appliance.tables.fastpath import fieldsets
from appliance.tables.fastpath.internals import (
    TableMetadataUpdateContext,
    apply_table_update,
    update_table_metadata_log,
)


def staged_metadata(base: TableMetadata, updates: tuple[TableUpdate, ...],
                    metadata_location: str | None = None) -> TableMetadata:
    """`base` with `updates` applied: PyIceberg 0.12's `update_table_metadata` (pinned), minus
    its final deep copy."""
    new, changed = _applied(base, updates)
    if changed and metadata_location:
        new = update_table_metadata_log(new, metadata_location, base.last_updated_ms)
    if new.snapshot_log and (not base.snapshot_log or new.snapshot_log[-1] is not base.snapshot_log[-1]):
        fieldsets.share(new.snapshot_log[-1])  # the entry a commit adds: kept as long as its snapshot
    new.spec().check_compatible(new.schema())
    new.sort_order().check_compatible(new.schema())
    return new


_last = threading.local()


def _applied(base: TableMetadata, updates: tuple[TableUpdate, ...]) -> tuple[TableMetadata, bool]:
    """`updates` applied to `base`, and whether they changed it. A commit applies the same updates to the same
    base twice (its transaction's metadata, then the catalog's staged one): each thread's last is kept."""
    last = getattr(_last, "applied", None)
    if last is not None and last[0] is base and last[1] is updates:
        return last[2], last[3]
    context = TableMetadataUpdateContext()
    new = base
    for update in updates:
        new = apply_table_update(update, new, context)
    changed = context.has_changes()
    if changed and base.last_updated_ms == new.last_updated_ms:
        new = new.model_copy(update={"last_updated_ms": datetime_to_millis(datetime.now().astimezone())})
    _last.applied = (base, updates, new, changed)  # both held: their ids are not reused while kept
    return new, changed


class LeanTransaction(Transaction):
    def __init__(self, table: Table, autocommit: bool = False) -> None:
        super().__init__(table, autocommit)
        self._staged: tuple[TableMetadata, tuple, TableMetadata] | None = None

    @property
    def table_metadata(self) -> TableMetadata:
        base, updates = self._table.metadata, self._updates
        if not updates:
            return base
        staged = self._staged
        # `_updates` is a tuple, replaced (never changed) when an update is added.
        if staged is None or staged[0] is not base or staged[1] is not updates:
            staged = self._staged = (base, updates, staged_metadata(base, updates))
        return staged[2]


def transaction(table: Table) -> Transaction:
    return LeanTransaction(table)
