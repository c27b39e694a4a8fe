"""`floe recover`, `floe backup` and `floe restore`: a lost, damaged or restored catalog pointed at each
table's newest whole metadata file in the warehouse, so every stream resumes exactly once.

Here without Spark: tables committed through Floe's catalog, on a local warehouse and on S3 (SeaweedFS),
and the newest-metadata rule against half-written files, lost races and files whose manifests are gone.
End to end (a stream killed with its catalog gone; a backup restored after its metadata was deleted) in
test_recovery_streams.py.
"""

from __future__ import annotations

import json
import sqlite3
import uuid
from pathlib import Path

import pyarrow as pa
import pytest

from appliance.config.settings import ensure_home, load_settings
from appliance.control.backup import backup, recover, restore
from appliance.core.errors import BackupError, RecoveryRefused
from appliance.core.locks import FileLock
from appliance.state.store import StateStore
from appliance.tables.catalog import Catalog
from appliance.tables.recovery import Warehouse, metadata_version, newest

from conftest import floe

SCHEMA = pa.schema([pa.field("x", pa.int64())])
TABLES = ("ingest.orders", "ingest.orders_dlq", "daily.totals", "floe.events")


def make_tables(settings, commits: int = 3) -> dict[str, str]:
    """A stream's two tables, a stage's and a system table, each committed `commits` times; where each is."""
    ensure_home(settings)
    StateStore(settings.state_db).close()
    catalog = Catalog(settings)
    for name in TABLES:
        table, _ = catalog.ensure_table(name, SCHEMA)
        for i in range(commits):
            table.append(pa.table({"x": [i]}, schema=SCHEMA))
    return {name: catalog.location(name) for name in TABLES}


def rows(settings, name: str) -> list[int]:
    return sorted(Catalog(settings).table(name).scan().to_arrow()["x"].to_pylist())


def write_beside(location: str, version: int, text: str) -> str:
    """A metadata file of `version` in the same folder as `location` (a local one), holding `text`."""
    folder = location.removeprefix("file://").rsplit("/", 1)[0]
    path = f"{folder}/{version:05d}-{uuid.uuid4()}.metadata.json"
    Path(path).write_text(text)
    return "file://" + path


def test_a_lost_catalog_comes_back_from_the_warehouse_every_table_at_its_newest_metadata(floe_home):
    settings = load_settings()
    before = make_tables(settings)
    settings.catalog_db.unlink()

    recovery = recover(settings)

    assert {t.table: (t.action, t.location) for t in recovery.tables} == {
        name: ("registered", location) for name, location in before.items()}
    assert all(rows(settings, name) == [0, 1, 2] for name in TABLES)
    again = recover(settings)
    assert {t.action for t in again.tables} == {"unchanged"} and not again.warnings
    table = Catalog(settings).table("ingest.orders")
    table.append(pa.table({"x": [3]}, schema=SCHEMA))  # commits go on from the recovered pointer
    assert metadata_version(Catalog(settings).location("ingest.orders")) == 4
    assert rows(settings, "ingest.orders")[-1] == 3


def test_newest_means_whole_and_highest_never_a_half_written_file_nor_a_lost_race(floe_home):
    settings = load_settings()
    locations = make_tables(settings)
    current = locations["ingest.orders"]
    text = Path(current.removeprefix("file://")).read_text()
    newest_version = metadata_version(current)
    half = write_beside(current, newest_version + 2, text[: len(text) // 2])  # a writer died mid-file
    # A commit that never happened, whose files orphan removal had begun to delete: its manifest list is gone.
    gone = json.loads(text)
    snapshot = next(s for s in gone["snapshots"] if s["snapshot-id"] == gone["current-snapshot-id"])
    snapshot["manifest-list"] = snapshot["manifest-list"].replace(".avro", "-gone.avro")
    no_files = write_beside(current, newest_version + 1, json.dumps(gone))
    # The loser of a race at the newest version: an older state, renamed as if written beside the winner.
    older = Catalog(settings).table("ingest.orders").metadata.metadata_log[-1].metadata_file
    loser = write_beside(current, newest_version, Path(older.removeprefix("file://")).read_text())
    settings.catalog_db.unlink()

    recovery = recover(settings)

    pointed = {t.table: t.location for t in recovery.tables}
    assert pointed["ingest.orders"] == current, recovery
    assert [w.split(" passed over: ")[0] for w in recovery.warnings] == [
        f"ingest.orders: metadata file {half}", f"ingest.orders: metadata file {no_files}"], recovery.warnings
    assert "does not parse" in recovery.warnings[0] and "manifest list is gone" in recovery.warnings[1]
    assert loser not in pointed.values() and rows(settings, "ingest.orders") == [0, 1, 2]
    # A tie of versions goes to the catalog's own pointer when there is one.
    warehouse = Warehouse(settings.warehouse, settings.catalog_properties())
    assert newest(warehouse, "ingest.orders", current=loser, warn=lambda _: None).location == loser


def test_a_commit_that_failed_after_writing_its_metadata_file_is_passed_over(floe_home):
    """A commit whose swap failed removes the files it wrote, but its metadata file stays: not a table state."""
    settings = load_settings()
    before = make_tables(settings)
    table = Catalog(settings).table("ingest.orders")
    files_before = {task.file.file_path for task in table.scan().plan_files()}
    table.append(pa.table({"x": [99]}, schema=SCHEMA))
    failed = table.metadata_location
    [added] = {task.file.file_path for task in table.scan().plan_files()} - files_before
    Path(added.removeprefix("file://")).unlink()  # what the failed commit's clean-up removes
    settings.catalog_db.unlink()

    recovery = recover(settings)

    assert {t.table: t.location for t in recovery.tables}["ingest.orders"] == before["ingest.orders"]
    assert recovery.warnings == [f"ingest.orders: metadata file {failed} passed over: 1 of the files its snapshot "
                                 f"added are gone ({added})"], recovery.warnings
    assert rows(settings, "ingest.orders") == [0, 1, 2]


def test_a_damaged_catalog_is_set_aside_and_rebuilt(floe_home):
    settings = load_settings()
    before = make_tables(settings, commits=1)
    settings.catalog_db.write_bytes(b"not a database, whatever it was " * 200)

    result = floe("recover")

    assert result.returncode == 0, result.stderr
    assert "is damaged" in result.stderr and "set aside: " in result.stderr, result.stderr
    assert f"{len(TABLES)} tables: {len(TABLES)} changed" in result.stdout, result.stdout
    assert {name: Catalog(settings).location(name) for name in TABLES} == before
    aside = sorted(p.name for p in floe_home.glob("catalog.db.*"))  # the file, and its WAL files with it
    assert aside and all(name.startswith("catalog.db.damaged-") for name in aside), aside
    assert not aside[0].endswith(("-wal", "-shm")) and len({name.removesuffix("-wal").removesuffix("-shm")
                                                            for name in aside}) == 1, aside


def test_recovery_refuses_while_an_engine_runs_and_for_a_rest_catalog(floe_home):
    settings = load_settings()
    make_tables(settings, commits=1)
    with FileLock(settings.engine_lock):  # as a running engine holds it
        with pytest.raises(RecoveryRefused, match="an engine runs on"):
            recover(settings)
        with pytest.raises(RecoveryRefused, match="an engine runs on"):
            restore(settings, backup(settings, floe_home.parent / "b").directory)
    (floe_home / "floe.toml").write_text('[catalog]\ntype = "rest"\nuri = "http://127.0.0.1:9"\n')
    done = floe("recover")
    assert done.returncode == 1 and "floe recover rebuilds a SQL catalog" in done.stderr, done.stderr


def test_a_restored_backup_points_at_metadata_written_after_it(floe_home, tmp_path):
    """The backup's catalog points at files that later commits replaced and deleted (metadata_versions = 2)."""
    floe_home.mkdir()
    (floe_home / "floe.toml").write_text("[maintenance]\nmetadata_versions = 2\n")
    settings = load_settings()
    make_tables(settings, commits=1)
    made = backup(settings, tmp_path / "backup")
    assert set(made.files) == {"state.db", "catalog.db", "floe.toml"}
    assert {p.stat().st_mode & 0o777 for p in made.directory.iterdir()} == {0o600}
    with sqlite3.connect(made.directory / "catalog.db") as db:
        backed = dict(db.execute("select table_namespace || '.' || table_name, metadata_location from iceberg_tables"))
    table = Catalog(settings).table("ingest.orders")
    for i in range(1, 5):
        table.append(pa.table({"x": [i]}, schema=SCHEMA))
    newest_now = Catalog(settings).location("ingest.orders")
    assert not Path(backed["ingest.orders"].removeprefix("file://")).exists()  # deleted after commit
    with pytest.raises(BackupError, match="not an empty directory"):
        backup(settings, made.directory)

    recovery = restore(settings, made.directory)

    assert {t.table: t.action for t in recovery.tables}["ingest.orders"] == "re-pointed"
    assert Catalog(settings).location("ingest.orders") == newest_now
    assert rows(settings, "ingest.orders") == [0, 1, 2, 3, 4]
    # Each database set aside with its WAL files, if it has any open.
    assert sorted({p.name.split("-")[0] for p in recovery.set_aside}) == ["catalog.db.before", "state.db.before"]


def test_recovery_on_s3_finds_every_table_and_passes_over_a_torn_file(floe_home, seaweed):
    bucket = seaweed.new_bucket()
    floe_home.mkdir()
    (floe_home / "floe.toml").write_text(
        f'[warehouse]\nlocation = "s3://{bucket}/lake"\n[warehouse.s3]\nendpoint = "{seaweed.s3_endpoint}"\n'
        f'region = "{seaweed.region}"\naccess_key_id = "{seaweed.access_key}"\n'
        f'secret_access_key = "{seaweed.secret_key}"\n')
    settings = load_settings()
    before = make_tables(settings, commits=2)
    current = before["ingest.orders"]
    key = current.removeprefix(f"s3://{bucket}/").rsplit("/", 1)[0] + f"/{metadata_version(current) + 1:05d}-" \
        f"{uuid.uuid4()}.metadata.json"
    seaweed.client().put_object(Bucket=bucket, Key=key, Body=b'{"format-version": 2, "table-uu')
    settings.catalog_db.unlink()

    recovery = recover(settings)

    assert {t.table: t.location for t in recovery.tables} == before
    assert recovery.warnings == [f"ingest.orders: metadata file s3://{bucket}/{key} passed over: does not parse "
                                 "(ValidationError)"], recovery.warnings
    assert all(rows(settings, name) == [0, 1] for name in TABLES)


def test_a_postgresql_catalog_that_lost_its_rows_and_one_left_behind_is_pointed_again(floe_home, postgres):
    url = postgres.database(f"recover_{uuid.uuid4().hex[:8]}")
    floe_home.mkdir()
    (floe_home / "floe.toml").write_text(f'[catalog]\ntype = "sql"\nuri = "{url}"\n')
    settings = load_settings()
    before = make_tables(settings, commits=2)
    stale = Catalog(settings).table("ingest.orders").metadata.metadata_log[-1].metadata_file
    iceberg = Catalog(settings).iceberg
    iceberg.drop_table("floe.events")  # its row lost (the files stay)
    iceberg.repoint(("ingest", "orders"), stale)  # a row left at an older version (a restored dump, say)

    recovery = recover(settings)

    actions = {t.table: t.action for t in recovery.tables}
    assert actions == {"floe.events": "registered", "ingest.orders": "re-pointed", "ingest.orders_dlq": "unchanged",
                       "daily.totals": "unchanged"}
    assert {name: Catalog(settings).location(name) for name in TABLES} == before
    assert all(rows(settings, name) == [0, 1] for name in TABLES)
