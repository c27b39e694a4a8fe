"""Maintenance over hundreds of tables: a check reads each one's snapshot summary, not its manifests (the summary
tells whether a compaction is due and how many small files it would merge at least; the manifests only where it
cannot tell: delete files, or large files among the small), and the scheduled tasks keep to `[maintenance] share`
of the time, a person's request never waiting for it. Fast: PyIceberg appends, orphan scans, no Spark."""

from __future__ import annotations

import datetime as dt
import threading
from pathlib import Path

import pyarrow as pa
import pytest

from appliance.config.settings import ensure_home, load_settings
from appliance.core.vocabulary import MaintenanceTask
from appliance.maintenance.compaction import plan_compaction, summary_verdict
from appliance.maintenance.maintainer import Maintainer
from appliance.maintenance.scheduler import MaintenanceScheduler, rest_after
from appliance.state.store import StateStore
from appliance.tables.catalog import Catalog
from appliance.tables.snapshots import Totals, totals

C, ORPH = MaintenanceTask.COMPACT, MaintenanceTask.ORPHANS


def _home(floe_home: Path, policy: str = "") -> tuple:
    floe_home.mkdir(parents=True)
    (floe_home / "floe.toml").write_text(f"[maintenance.policy]\n{policy}")
    settings = load_settings()
    ensure_home(settings)
    catalog = Catalog(settings)
    catalog.iceberg.create_namespace("lab")
    return settings, catalog


def _appended(catalog: Catalog, name: str, files: int, rows: int = 2) -> None:
    schema = pa.schema([("id", pa.int64())])
    table = catalog.iceberg.create_table(name, schema)
    for i in range(files):
        table.append(pa.table({"id": list(range(i * rows, (i + 1) * rows))}, schema=schema))


def _without_manifests(catalog: Catalog, name: str) -> int:
    """Delete the table's manifests and manifest lists: whatever reads one from now on fails."""
    gone = [f for f in Path(catalog.table(name).metadata.location.removeprefix("file://"), "metadata").iterdir()
            if f.suffix == ".avro"]
    for f in gone:
        f.unlink()
    return len(gone)


def test_a_fragmented_table_is_due_from_its_summary_with_its_small_files_counted(floe_home):
    settings, catalog = _home(floe_home)
    _appended(catalog, "lab.trickle", 12)
    table = catalog.table("lab.trickle")
    policy = Maintainer(settings).policy("lab.trickle")
    plan = plan_compaction(table, policy)
    assert plan.triggered(policy) and summary_verdict(totals(table), policy) == (True, plan.small_files) == (True, 12)
    assert _without_manifests(catalog, "lab.trickle") > 0
    due = Maintainer(settings).assess("lab.trickle")
    assert C in due.tasks and due.files_to_merge == 12, "told without a manifest read"


def test_a_table_of_large_enough_files_is_not_due_and_no_manifest_is_read(floe_home):
    settings, catalog = _home(floe_home, 'compact_min_average_size = "16B"\n')
    _appended(catalog, "lab.fine", 6, rows=50)
    policy = Maintainer(settings).policy("lab.fine")
    table = catalog.table("lab.fine")
    assert not plan_compaction(table, policy).triggered(policy)
    assert summary_verdict(totals(table), policy) == (False, 0)
    _without_manifests(catalog, "lab.fine")
    due = Maintainer(settings).assess("lab.fine")
    assert C not in due.tasks and due.files_to_merge == 0


@pytest.mark.parametrize("held, verdict", [
    (Totals(1, 10, 4, 400), (False, 0)),  # fewer than 5 files
    # 200 files of 200 MB: at most 2 of them over the small size (96 MB), so at least 198 small: due
    (Totals(1, 10, 200, 200 * 2**20), (True, 198)),
    (Totals(1, 10, 6, 6 * 100 * 2**20), (False, 0)),  # an average over compact_min_average_size, few files
    (Totals(1, 10, 6, 6 * 2**20, delete_files=1), (None, 0)),  # position deletes: only the plan can tell
    # 120 files averaging 20 MB: up to 25 of them may be large (2,400 MB // 96 MB), so at least 95 small: only
    # the plan can tell
    (Totals(1, 10, 120, 120 * 20 * 2**20), (None, 95)),
])
def test_the_summary_tells_what_it_can_and_says_when_it_cannot(held, verdict, floe_home):
    settings, _ = _home(floe_home)
    assert summary_verdict(held, Maintainer(settings).policy("lab.t")) == verdict


def _seconds(iso: str) -> float:
    return dt.datetime.fromisoformat(iso).timestamp()


def test_scheduled_tasks_rest_to_keep_to_their_share_of_the_time(floe_home):
    settings, catalog = _home(floe_home)
    (floe_home / "floe.toml").write_text("[maintenance]\nshare = 0.02\n")  # 49 times each task's time at rest
    settings = load_settings()
    for name in ("lab.a", "lab.b", "lab.c"):
        _appended(catalog, name, 1)
    maintainer = Maintainer(settings)
    MaintenanceScheduler(settings, None, threading.Event(), poll=0.05)._scheduled(maintainer)
    runs = sorted(maintainer.state.runs(task=ORPH), key=lambda r: r.started_at)  # each new table: orphans due
    assert [r.table_name for r in runs] == ["lab.a", "lab.b", "lab.c"]
    for before, after in zip(runs, runs[1:]):
        took = _seconds(before.finished_at) - _seconds(before.started_at)
        assert _seconds(after.started_at) - _seconds(before.finished_at) >= rest_after(took, 0.02) * 0.9
    assert rest_after(2.0, 0.25) == 6.0 and rest_after(2.0, 1.0) == 0.0


def test_a_persons_request_ends_the_rest_at_once(floe_home):
    settings, catalog = _home(floe_home)
    (floe_home / "floe.toml").write_text("[maintenance]\nshare = 0.0001\n")  # a rest of minutes
    settings = load_settings()
    for name in ("lab.a", "lab.b"):
        _appended(catalog, name, 1)
    maintainer = Maintainer(settings)
    scheduler = MaintenanceScheduler(settings, None, threading.Event(), poll=0.05)
    passing = threading.Thread(target=scheduler._scheduled, args=(maintainer,))
    passing.start()
    with StateStore(settings.state_db) as state:
        deadline = dt.datetime.now() + dt.timedelta(seconds=30)
        while not state.runs(task=ORPH) and dt.datetime.now() < deadline:
            passing.join(0.02)
        state.request_maintenance("lab.b", C)
        passing.join(10)
        assert not passing.is_alive(), "the rest ends when a request waits"
        assert [r.table_name for r in state.runs(task=ORPH)] == ["lab.a"], "the pass stops: the request goes first"


@pytest.mark.parametrize("share", ["0", "1.5", '"a quarter"', "true"])
def test_a_share_out_of_range_is_one_line_naming_the_setting(share, floe_home):
    from appliance.core.errors import ConfigError

    floe_home.mkdir(parents=True)
    (floe_home / "floe.toml").write_text(f"[maintenance]\nshare = {share}\n")
    with pytest.raises(ConfigError, match=r"maintenance\.share.*above 0 and at most 1") as caught:
        load_settings()
    assert "\n" not in str(caught.value)
