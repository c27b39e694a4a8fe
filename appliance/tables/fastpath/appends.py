"""A stream's append as one snapshot: its files in a manifest of their own, the parent's manifests
kept, and merged into one once there are many (`changes.commit_changes`).

What PyIceberg's merge-append does: the same files, the same summary, the same merge rule, at a
fraction of the CPU; for partitioned tables too. Tables of format v1 take PyIceberg's own path:
Floe creates none.
"""

from __future__ import annotations

from pyiceberg.manifest import DataFile
from pyiceberg.table import Table
from pyiceberg.table.snapshots import Operation

from appliance.tables.fastpath.changes import MANIFESTS, FileChanges, commit_changes
from appliance.tables.fastpath.manifests import Manifests
from appliance.tables.fastpath.transactions import transaction


def append_files(table: Table, files: list[DataFile], properties: dict[str, str],
                 manifests: Manifests = MANIFESTS) -> Table:
    """Commit `files` as one `append` snapshot whose summary carries `properties`; the table after it.

    Raises PyIceberg's CommitFailedException when another writer committed first.
    """
    if table.metadata.format_version != 2:
        return _pyiceberg_append(table, files, properties)
    return commit_changes(table, FileChanges(data=list(files)), Operation.APPEND, properties, manifests=manifests)


def _pyiceberg_append(table: Table, files: list[DataFile], properties: dict[str, str]) -> Table:
    tx = transaction(table)
    with tx.update_snapshot(snapshot_properties=properties).merge_append() as append:
        for data_file in files:
            append.append_data_file(data_file)
    return tx.commit_transaction()
