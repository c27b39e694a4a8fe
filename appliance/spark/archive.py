"""A class-data archive for the driver's JVM: Spark's classes loaded from one mapped file.

Starting the JVM and loading Spark's few thousand classes is most of a SparkSession's
start (about 4 s on 2 cores); with an application class-data sharing archive (JDK 13+,
`-XX:SharedArchiveFile`) it takes about 2 s, which every `floe run --until-caught-up`,
restart and test pays. The archive depends on the JDK and the Spark jars, so it is
kept per user, keyed by both, in `$XDG_CACHE_HOME/floe` (default `~/.cache/floe`).

The first session on a machine starts without it and builds it in the background (a
separate Spark session that records its classes when its JVM exits), so nobody waits
for it. The JVM ignores an archive that does not match it, so a stale or damaged one
costs nothing but the time it would have saved.

    python -m appliance.spark.archive    builds it now (the setup script does)
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

BUILD_TIMEOUT = 600.0  # seconds: an older `.building` marker is a build that died


def cache_dir() -> Path:
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "floe"


def archive_path() -> Path:
    import pyspark

    java = os.environ.get("JAVA_HOME") or shutil.which("java") or ""
    java = os.path.realpath(os.path.join(java, "bin", "java") if os.environ.get("JAVA_HOME") else java)
    key = f"{pyspark.__version__}|{os.path.dirname(pyspark.__file__)}|{java}|{_mtime(java)}"
    return cache_dir() / f"spark-{pyspark.__version__}-{hashlib.sha1(key.encode()).hexdigest()[:12]}.jsa"


def _mtime(path: str) -> int:
    try:
        return int(os.stat(path).st_mtime)
    except OSError:
        return 0


def java_options() -> str:
    """JVM options that use the archive when there is one; otherwise a build starts in the background."""
    if os.environ.get("FLOE_JVM_ARCHIVE") == "off":
        return ""
    path = archive_path()
    if path.exists():
        # Xshare:auto (the default) runs without sharing when the archive does not match.
        return f"-XX:SharedArchiveFile={path} -Xlog:cds=off,cds+dynamic=off"
    build_in_background(path)
    return ""


def build_in_background(path: Path) -> None:
    marker = path.with_suffix(".building")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        if marker.exists() and time.time() - marker.stat().st_mtime < BUILD_TIMEOUT:
            return  # another process is building it
        marker.write_text(str(os.getpid()))
        start_detached([sys.executable, "-m", "appliance.spark.archive", str(path)], _builder_env())
    except OSError:
        pass  # no cache directory to write: sessions start the slower way


def start_detached(command: list[str], env: dict[str, str]) -> threading.Thread:
    """`command` in a session of its own, nobody waiting for it; the thread that reaps it when it ends.

    A Popen dropped while its child runs warns (a ResourceWarning, from the garbage collector, wherever it
    happens to run), and the child is reaped only at some later Popen: the build takes a minute and outlives
    its caller."""
    process = subprocess.Popen(command, start_new_session=True, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL, env=env)
    reaper = threading.Thread(target=process.wait, name="floe-reaper", daemon=True)
    reaper.start()
    return reaper


def _builder_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PYSPARK_SUBMIT_ARGS", "FLOE_HOME")}
    return {**env, "FLOE_JVM_ARCHIVE": "off"}


def build(path: Path) -> bool:
    """Record the classes of a short Spark session into `path`; True when it was written."""
    tmp = path.with_suffix(f".{os.getpid()}.tmp")
    try:
        # A child process, because the JVM writes the archive when it exits.
        subprocess.run([sys.executable, "-m", "appliance.spark.session", "--record-classes", str(tmp)], check=False,
                       stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                       env=_builder_env(), timeout=BUILD_TIMEOUT)
        if tmp.exists() and tmp.stat().st_size > 0:
            os.replace(tmp, path)  # whole or not at all, for sessions starting meanwhile
            return True
        return False
    except (OSError, subprocess.TimeoutExpired):
        return False
    finally:
        tmp.unlink(missing_ok=True)
        path.with_suffix(".building").unlink(missing_ok=True)


if __name__ == "__main__":
    target = Path(sys.argv[1]) if len(sys.argv) > 1 else archive_path()
    if len(sys.argv) == 1 and target.exists():
        # Its name says which pyspark and which java it was made for: a setup run again keeps it (a build is
        # a Spark session of its own, half a minute on 2 cores).
        print(f"kept {target}", file=sys.stderr)
        sys.exit(0)
    target.parent.mkdir(parents=True, exist_ok=True)
    ok = build(target)
    print(f"{'built' if ok else 'could not build'} {target}", file=sys.stderr)
    sys.exit(0 if ok else 1)
