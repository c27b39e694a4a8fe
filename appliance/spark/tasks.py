"""Python work as Spark tasks: `work(i)` runs in task i, its small result comes back pickled.

The data a task reads and writes never passes through the JVM; only results do (file
descriptions, counts). A `FloeError` raised in a task comes back as itself, so the
driver sees a read timeout or a storage outage by its type, not as a Py4J traceback.
"""

from __future__ import annotations

import pickle
from dataclasses import dataclass
from typing import Callable

from appliance.core.errors import FloeError


@dataclass
class _Failed:
    error: FloeError


def run_in_tasks(spark, work: Callable[[int], object], n: int) -> list:
    """work(0) .. work(n - 1), one Spark task each; their results, in order."""
    import pyarrow as pa

    schema = pa.schema([("task", pa.int64()), ("result", pa.binary())])

    def run(batches):
        for batch in batches:
            for index in batch.column(0).to_pylist():
                try:
                    result = work(index)
                except FloeError as exc:
                    result = _Failed(exc)
                yield pa.RecordBatch.from_pydict({"task": [index], "result": [pickle.dumps(result)]}, schema=schema)

    rows = spark.range(0, n, 1, n).mapInArrow(run, "task long, result binary").collect()
    by_task = {r.task: pickle.loads(r.result) for r in rows}
    failed = [r.error for r in by_task.values() if isinstance(r, _Failed)]
    if failed:
        raise failed[0]
    return [by_task[i] for i in range(n)]
