"""`floe backup DIR`, `floe restore DIR` and `floe recover`: what a FLOE_HOME needs to come back.

The warehouse holds the data and every position (offsets, stages', the system tables'), so a FLOE_HOME
is whole again from its warehouse plus three small files: the state database (stream, stage and alert
definitions, policies, the audit trail), Floe's SQLite catalog (where each table's current metadata is)
and floe.toml. A backup copies them while the engine runs: each database through SQLite's online backup
(a consistent copy, writers going on). A catalog lost or damaged is rebuilt from the warehouse (each
table pointed at its newest whole metadata file, `tables/recovery.py`); a restore does the same after
putting the backup in place, since its catalog points at metadata files the tables have since replaced
(and `write.metadata.delete-after-commit` may have deleted).
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import os
import shutil
import sqlite3
from dataclasses import dataclass, field
from pathlib import Path

from appliance import __version__
from appliance.config.settings import Settings
from appliance.control.audit import audited, change
from appliance.core.errors import BackupError, RecoveryRefused
from appliance.core.locks import FileLock
from appliance.core.private import private_dir
from appliance.observe.systables import exported_positions
from appliance.state.store import StateStore
from appliance.tables.catalog import Catalog, open_catalog, warehouse_io
from appliance.tables.recovery import Pointed, Warehouse, point_catalog

log = logging.getLogger(__name__)

MANIFEST = "floe-backup.json"
CONFIG = "floe.toml"
_SIBLINGS = ("", "-wal", "-shm", "-journal")  # a SQLite database's files


@dataclass(frozen=True)
class Backup:
    directory: Path
    files: tuple[str, ...]
    note: str = ""  # what the backup leaves to another tool


@dataclass
class Recovery:
    """What `floe recover` (or a restore) did: each table's pointer, what it passed over, what it set aside."""

    tables: list[Pointed] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    set_aside: list[Path] = field(default_factory=list)


def _copy_db(source: Path, target: Path) -> None:
    """A consistent copy of a SQLite database, live or not (its online backup), for its owner alone."""
    os.close(os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
    src = sqlite3.connect(str(source), timeout=30)
    try:
        dst = sqlite3.connect(str(target))
        try:
            src.backup(dst)
        finally:
            dst.close()
    finally:
        src.close()


def _databases(settings: Settings) -> dict[str, Path]:
    """The databases a backup holds: the state's, and the catalog's when it is Floe's own SQLite file."""
    found = {"state.db": settings.state_db}
    if settings.catalog.own:
        found["catalog.db"] = settings.catalog_db
    return found


def backup(settings: Settings, directory: Path) -> Backup:
    """Copy the state database, Floe's SQLite catalog and floe.toml into `directory` (new or empty)."""
    directory = directory.expanduser().resolve()
    if directory.exists() and (not directory.is_dir() or any(directory.iterdir())):
        raise BackupError(f"{directory} is not an empty directory: back up into a new or empty one")
    private_dir(directory)
    files = []
    for name, path in _databases(settings).items():
        if path.exists():
            _copy_db(path, directory / name)
            files.append(name)
    if (settings.home / CONFIG).exists():
        shutil.copyfile(settings.home / CONFIG, directory / CONFIG)
        os.chmod(directory / CONFIG, 0o600)
        files.append(CONFIG)
    note = "" if settings.catalog.own else (f"the catalog is {settings.catalog.describe()}: back it up with its "
                                             "own tools (floe recover can rebuild a SQL catalog's pointers)")
    made = {"made_at": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"), "home": str(settings.home),
            "warehouse": settings.warehouse, "floe": __version__, "files": files}
    with open(os.open(directory / MANIFEST, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), "w") as out:
        out.write(json.dumps(made, indent=2) + "\n")
    return Backup(directory, tuple(files), note)


def _engine_stopped(settings: Settings, doing: str) -> FileLock:
    return FileLock(settings.engine_lock, RecoveryRefused(
        f"an engine runs on {settings.home}: stop it (floe run, the service, the UI's) before {doing}"))


def _set_aside(path: Path, tag: str) -> list[Path]:
    """`path` and its journal files renamed `<name>.<tag>-<time>`: kept, out of the way."""
    stamp = dt.datetime.now().strftime("%Y%m%dT%H%M%S")
    moved = []
    for suffix in _SIBLINGS:
        file = path.with_name(path.name + suffix)
        if file.exists():
            aside = file.with_name(f"{path.name}.{tag}-{stamp}{suffix}")
            os.replace(file, aside)
            moved.append(aside)
    return moved


def _unreadable(path: Path) -> str:
    """'' when the SQLite file at `path` reads as a database; else why not."""
    try:
        conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=30)
        try:
            result = conn.execute("PRAGMA quick_check").fetchone()[0]
        finally:
            conn.close()
    except sqlite3.DatabaseError as exc:
        return str(exc)
    return "" if result == "ok" else result


def _point(settings: Settings, recovery: Recovery) -> None:
    def warn(message: str) -> None:
        log.warning(message)
        recovery.warnings.append(message)

    properties = settings.catalog_properties()
    iceberg = open_catalog(settings)
    with warehouse_io(settings, "read the tables' metadata"):
        warehouse = Warehouse(properties.get("warehouse") or settings.warehouse, properties)
        recovery.tables = point_catalog(iceberg, warehouse, warn)


def _recover(settings: Settings) -> Recovery:
    if settings.catalog.kind != "sql":
        raise RecoveryRefused(f"the catalog is {settings.catalog.describe()}: floe recover rebuilds a SQL catalog "
                              "(Floe's own, or PostgreSQL); a REST catalog's service keeps its own state")
    recovery = Recovery()
    if settings.catalog.own:
        why = _unreadable(settings.catalog_db) if settings.catalog_db.exists() else ""
        if why:
            recovery.warnings.append(f"{settings.catalog_db} is damaged ({why}): set aside, and made again")
        if why or not settings.catalog_db.exists():  # a journal left by the lost file must not replay into a new one
            recovery.set_aside = _set_aside(settings.catalog_db, "damaged" if why else "orphan")
    _point(settings, recovery)
    return recovery


def recover(settings: Settings) -> Recovery:
    """Point every table of the warehouse at its newest whole metadata file in the catalog (made again if it
    is lost or damaged; a damaged file is set aside). No engine may run meanwhile."""
    with change(settings, "recover", str(settings.home)), _engine_stopped(settings, "recovering"):
        return _recover(settings)


@audited("restore", "directory")
def restore(settings: Settings, directory: Path) -> Recovery:
    """Put the backup in `directory` in place (the files it replaces set aside), point the tables at their
    newest metadata, and let the state database export its own rows to the system tables from where its
    predecessor left off."""
    directory = directory.expanduser().resolve()
    if not (directory / MANIFEST).exists():
        raise BackupError(f"{directory} holds no Floe backup (no {MANIFEST}; see floe backup)")
    files = json.loads((directory / MANIFEST).read_text())["files"]
    with _engine_stopped(settings, "restoring"):
        aside = []
        for name, path in _databases(settings).items():
            if name in files:
                aside += _set_aside(path, "before-restore")
                _copy_db(directory / name, path)
        if CONFIG in files and not (settings.home / CONFIG).exists():
            shutil.copyfile(directory / CONFIG, settings.home / CONFIG)
        recovery = _recover(settings) if settings.catalog.kind == "sql" else Recovery()
        recovery.set_aside[:0] = aside
        if "state.db" in files:
            with StateStore(settings.state_db) as state:
                state.restored(exported_positions(Catalog(settings), state.database_id()))
    return recovery
