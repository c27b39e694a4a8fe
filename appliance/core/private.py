"""What Floe writes is for its owner alone: FLOE_HOME holds the tables' data, the catalog, Kafka and
S3 credentials, and logs that name them all.

Two means, for two kinds of writer. The directories Floe makes itself (FLOE_HOME, its logs, a local
warehouse) are made 0700 whatever the umask, so nothing inside them is reachable by another user even
if a library made it 0644. And a `floe` process, with everything it starts (Spark's JVM, its Python
workers, the commands it launches), runs with the umask 077, so the files themselves are 0600 and the
folders 0700: the data files that Spark tasks write included. Spark's Python worker daemon sets the same
umask for itself (`spark/daemon.py`), so workers of a JVM started elsewhere (a test's, a cluster's) write
owner-only files too.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

OWNER_ONLY = 0o077  # the umask: nothing for the group, nothing for others


def keep_private() -> None:
    """This process, and every process it starts from now on, makes files for their owner alone."""
    os.umask(OWNER_ONLY)


def private_dir(path: Path) -> Path:
    """`path`, made with its parents if it is missing; made 0700 whatever the umask. An existing one
    keeps its mode: `floe doctor` says when others may read it."""
    if path.is_dir():
        return path
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        path.mkdir()
    except FileExistsError:
        return path
    os.chmod(path, 0o700)
    return path


def open_to_others(path: Path) -> int:
    """The permission bits `path` grants its group and others (0 when only its owner may use it)."""
    return stat.S_IMODE(path.stat().st_mode) & 0o077
