"""One maintenance task about to run on one table: everything a task's `perform` needs."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from pyiceberg.table import Table

from appliance.config.policy import Policy
from appliance.config.settings import Settings
from appliance.state.records import RunRecord
from appliance.tables.catalog import Catalog


@dataclass
class Job:
    settings: Settings
    catalog: Catalog
    table: Table
    policy: Policy
    run: RunRecord  # the task fills in its figures, outcome and detail
    spark: Callable[[], Any]  # the SparkSession, started only when a rewrite first needs it

    @property
    def dry_run(self) -> bool:
        return self.run.dry_run


def plural(n: int, what: str) -> str:
    return f"{n} {what}{'s' * (n != 1)}"
