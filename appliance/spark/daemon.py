"""Spark's Python worker daemon, minus the archives that make every task slow.

Spark puts `pyspark.zip`, the py4j zip and its own `spark-core` jar at the front of
its Python workers' path, and every task calls `importlib.invalidate_caches()`,
which makes each zip importer re-read its archive's whole directory: about 0.1 s of
CPU per task, most of a small batch's cost. With PySpark installed from PyPI, the
same modules are in site-packages, so the daemon drops the archives it does not
need before it starts; workers forked from it inherit the shorter path.

The daemon imports what an ingest task needs before it forks any worker (`PRELOAD`): a first batch of
several tasks imported it once per worker, in parallel on a machine's cores, seconds of CPU each.

It also makes the collection that the daemon runs after each task of a reused worker
cheap: a full `gc.collect()` walked every object of pyarrow, PyIceberg and pydantic,
about 50 ms per task. Objects that survive a task are frozen out of later collections,
and the whole heap is collected again now and then, so cycles that die later are freed.

A worker whose socket the JVM has closed (it stopped reading: a `take` or `limit` has its rows, a
preview is done, or the session stops) fails to flush with BrokenPipeError, and PySpark prints that
traceback to stderr, which is FLOE_HOME/logs/spark-console.log, on every such stop. The worker still
exits as PySpark would make it; only that expected traceback is left out. Any other failure is printed.

The daemon and the workers forked from it make files for their owner alone (umask 077, see
`core/private.py`), whatever umask the JVM that started them had: tasks write the tables' data files.

Used through `spark.python.daemon.module` (see `session.py`).
"""

from __future__ import annotations

import importlib.machinery
import sys

from appliance.core.collector import Collector
from appliance.core.private import keep_private

FULL_COLLECTION_EVERY = 300.0  # seconds


def _redundant(entry: str, others: list[str]) -> bool:
    name = entry.rsplit("/", 1)[-1]
    if name.endswith(".jar"):
        return True  # Java classes: nothing a Python worker imports
    if name == "pyspark.zip":
        return importlib.machinery.PathFinder.find_spec("pyspark", others) is not None
    if name.startswith("py4j-") and name.endswith(".zip"):
        return importlib.machinery.PathFinder.find_spec("py4j", others) is not None
    return False


def clean_path() -> None:
    archives = [e for e in sys.path if e.endswith((".zip", ".jar"))]
    for entry in archives:
        others = [e for e in sys.path if e != entry and not e.endswith((".zip", ".jar"))]
        if _redundant(entry, others):
            sys.path.remove(entry)
            sys.path_importer_cache.pop(entry, None)


class _AfterTask:
    """Stands in for the `gc` module in `pyspark.daemon`, which only calls `collect()`."""

    def __init__(self) -> None:
        self.collector = Collector(full_every=FULL_COLLECTION_EVERY)

    def collect(self) -> int:
        return self.collector.collect()  # only what is not frozen (what the last task made), then frozen


def quiet_on_closed_socket(worker):
    """`pyspark.daemon.worker`, returning 1 (the worker process exits, as when it fails) instead of raising
    BrokenPipeError: the JVM closed the socket on purpose, and nothing is left to tell it."""
    def run(sock, authenticated):
        try:
            return worker(sock, authenticated)
        except BrokenPipeError:
            return 1

    return run


# What an ingest task's work imports (pyarrow, confluent-kafka, PyIceberg, the decoders): seconds of CPU that
# each worker spent at its first task, every engine start. Imported once here, the workers forked start with it.
PRELOAD = ("appliance.ingest.batch",)


def preload() -> None:
    for name in PRELOAD:
        try:
            importlib.import_module(name)
        except Exception:  # noqa: BLE001 - a worker imports it again, and its task says what is wrong
            pass


if __name__ == "__main__":
    clean_path()
    keep_private()
    from pyspark import daemon  # imported after the clean-up, so from site-packages

    preload()

    daemon.gc = _AfterTask()
    daemon.worker = quiet_on_closed_socket(daemon.worker)
    daemon.manager()
