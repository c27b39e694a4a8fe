"""Python work as Spark tasks: `work(i)` runs in task i, its small result comes back pickled.

The data a task reads and writes never passes through the JVM; only results do (file
descriptions, counts). A `FloeError` raised in a task comes back as itself, so the
driver sees a read timeout or a storage outage by its type, not as a Py4J traceback; any other
exception comes back as an `UnforeseenError` naming it, with its traceback. Either way the
other tasks of the job finish: one task's failure never fails the Spark job.

What can still fail the job is Spark itself losing a task's run (its Python worker died, or the
channel to a reused worker was found closed): that is a `SparkTaskLost`, retryable, since nothing the
tasks wrote is committed before every task has answered.
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass
from typing import Callable

from appliance.core.errors import FloeError, SparkTaskLost, UnforeseenError


_STARTED: weakref.WeakSet = weakref.WeakSet()  # the sessions whose Python workers have run a job of ours


def workers_started(spark) -> bool:
    """Whether `spark` has run a job of `run_in_tasks`: its Python workers are up. The first such job of a session
    waits for them to start (2-4 s), a job of a few thousand messages ten times over."""
    return spark in _STARTED


@dataclass
class _Failed:
    error: FloeError


def run_in_tasks(spark, work: Callable[[int], object], n: int) -> list:
    """work(0) .. work(n - 1), one Spark task each; their results, in order."""

    def run(index: int) -> object:
        try:
            return work(index)
        except FloeError as exc:
            return _Failed(exc)
        except Exception as exc:  # a bug, say: this task's work failed, not the job
            return _Failed(UnforeseenError.of(exc, f"task {index}"))

    # An RDD job, not a DataFrame one: nothing here for Catalyst to plan or for Arrow to
    # carry, and a plan and code generation per job would double a small batch's cost.
    try:
        results = spark.sparkContext.parallelize(range(n), n).map(run).collect()
    except Exception as exc:
        raise _lost(exc) from exc
    _STARTED.add(spark)
    failed = [r.error for r in results if isinstance(r, _Failed)]
    if failed:
        raise failed[0]
    return results


def _lost(exc: Exception) -> Exception:
    """The job's failure as a `SparkTaskLost` naming Spark's reason in one line (a Py4J error's first
    line of its Java cause); anything not from the JVM as itself."""
    if not hasattr(exc, "java_exception"):  # py4j's Py4JJavaError, as PySpark raises it
        return exc
    try:
        reason = str(exc.java_exception.toString())
    except Exception:  # noqa: BLE001 - the JVM gone with the session: its Python side still has a message
        reason = str(exc)
    reason = " ".join(reason.splitlines()[0].split()) if reason.strip() else "no reason given"
    if "cancelled" in reason.lower():  # the job was cancelled (the engine stops): no task was lost
        return exc
    return SparkTaskLost(f"a Spark task was lost, the batch runs again: {reason}")
