"""Removing and adding whole data files in one snapshot, on PyIceberg's overwrite producer."""

from __future__ import annotations

from typing import Any, Callable

from pyiceberg.io import FileIO
from pyiceberg.manifest import DataFile
from pyiceberg.table import Transaction
from pyiceberg.table.metadata import TableMetadata
from pyiceberg.table.snapshots import Operation, Summary
from pyiceberg.typedef import EMPTY_DICT

from appliance.tables.fastpath.internals import OverwriteFiles

# What a rewrite's snapshot copies from the snapshot it is built on: (metadata, parent id) -> keys.
Carry = Callable[[TableMetadata, "int | None"], dict[str, str]]


class RewriteFiles(OverwriteFiles):
    """Removes and adds whole data files in one snapshot: `replace` for compaction (same
    rows), `overwrite` or `delete` for retention (fewer rows).

    PyIceberg computes summary totals only for append/overwrite/delete, so a `replace` is
    totalled as an overwrite and then labelled. The stream offsets are copied from the
    parent when the snapshot is built (`carry`), so a retried commit carries the newest ones.
    """

    def __init__(self, label: Operation, carry: Carry, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._label = label
        self._carry = carry

    def _summary(self, snapshot_properties: dict[str, str] = EMPTY_DICT) -> Summary:
        carried = self._carry(self._transaction.table_metadata, self._parent_snapshot_id)
        self._operation = Operation.OVERWRITE if self._label == Operation.REPLACE else self._label
        summary = super()._summary({**carried, **snapshot_properties})
        self._operation = self._label
        return Summary(operation=self._label, **summary.additional_properties)

    def _validate_concurrency(self) -> None:
        # Appends committed meanwhile do not conflict with removing other files; that the
        # removed files are all still there is checked when the deletes are planned.
        return None


def rewrite_files(tx: Transaction, io: FileIO, remove: list[DataFile], add: list[DataFile], label: Operation,
                  properties: dict[str, str], carry: Carry) -> None:
    """Stage in `tx` one snapshot (labelled `label`) without `remove` and with `add`."""
    producer = RewriteFiles(label, carry, Operation.OVERWRITE, tx, io, snapshot_properties=properties)
    for data_file in remove:
        producer.delete_data_file(data_file)
    for data_file in add:
        producer.append_data_file(data_file)
    producer.commit()
