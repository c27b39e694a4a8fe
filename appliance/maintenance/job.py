"""One maintenance task about to run on one table: everything a task's `perform` needs."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Iterable

from pyiceberg.table import Table

from appliance.config.policy import Policy
from appliance.config.settings import Settings
from appliance.core.activity import give_way
from appliance.state.records import RunRecord
from appliance.state.store import StateStore
from appliance.tables.catalog import Catalog
from appliance.tables.datafiles import delete_files

DELETES_BETWEEN_WAYS = 16  # files deleted between two safe points: an expiry deletes hundreds


@dataclass
class Job:
    settings: Settings
    catalog: Catalog
    table: Table
    policy: Policy
    run: RunRecord  # the task fills in its figures, outcome and detail
    spark: Callable[[], Any]  # the SparkSession, started only when a rewrite first needs it
    state: StateStore | None = None  # the maintainer's open state store; None: a task opens one when it asks

    @property
    def dry_run(self) -> bool:
        return self.run.dry_run


def delete_giving_way(table: Table, paths: Iterable[str]) -> tuple[int, list[str]]:
    """`delete_files`, giving way to the streams' batches between every few files (`core.activity`): for the
    deletes a task makes outside any commit lock (an expiry's, orphans')."""
    paths, deleted, failed = sorted(paths), 0, []
    for start in range(0, len(paths), DELETES_BETWEEN_WAYS):
        give_way()
        done, failures = delete_files(table, paths[start:start + DELETES_BETWEEN_WAYS])
        deleted, failed = deleted + done, failed + failures
    return deleted, failed
