"""The table view's maintenance tab against a real broker, engine, catalog and `floe maintain`,
driven by Textual's Pilot: the policy, runs as they are recorded, and the "run now" buttons."""

import asyncio
import io
import shutil
from pathlib import Path

import pytest
from rich.console import Console
from rich.text import Text

from appliance.config.settings import load_settings
from appliance.control.streams import create_stream
from appliance.ingest.engine import Engine
from appliance.maintenance.maintainer import Maintainer
from appliance.maintenance.policies import set_policy
from appliance.model.mapping import Column, Mapping
from appliance.state.records import RunRecord
from appliance.state.store import StateStore
from appliance.tables.catalog import Catalog
from appliance.tables.iceberg_schemas import target_iceberg_schema
from tui.app import FloeApp

from conftest import pizza_values
from tui_helpers import engine_checked, until

TABLE = "ingest.x"


def ingest(broker, topic: str, spark, batches: int) -> None:
    """`batches` separate commits, so the table has at least that many small data files."""
    settings = load_settings()
    broker.produce(topic, pizza_values(100))
    create_stream(settings, "x", bootstrap=broker.bootstrap, topic=topic, table=TABLE)
    Engine(settings, spark=spark).run(until_caught_up=True)
    for i in range(1, batches):
        broker.produce(topic, pizza_values(60, start=100 + 60 * i))
        Engine(settings, spark=spark).run(until_caught_up=True)


def data_files(table: str = TABLE) -> int:
    return len(Catalog(load_settings()).table(table).inspect.files())


def summary(app) -> str:
    return str(app.query_one("#table-summary").render())


def runs(app) -> list[dict[str, str]]:
    """The runs grid as shown, top row first, each cell as plain text."""
    table = app.query_one("#maintenance-runs")
    keys = sorted(table.rows, key=lambda k: int(k.value))
    return [{c: Text.from_markup(str(table.get_cell(k, c))).plain for c in ("time", "task", "trigger", "outcome",
             "files", "bytes", "rows", "duration", "detail")} for k in keys]


def policy_text(app) -> str:
    console = Console(width=200, file=io.StringIO(), record=True)
    console.print(app.query_one("#maintenance-policy").content)
    return console.export_text()


def toasts(app) -> list[str]:
    return [str(n.message) for n in app._notifications]


async def open_maintenance(pilot) -> None:
    app = pilot.app
    await pilot.press("2")
    await until(pilot, lambda: f"{TABLE}\n" in summary(app), 30, "the table's detail")
    await pilot.press("m")
    assert app.query_one("#table-tabs").active == "tab-maintenance"
    await until(pilot, lambda: "target_file_size" in policy_text(app), 30, "the policy")


async def test_view_shows_policy_and_a_run_as_it_is_recorded(broker, topic, spark):
    ingest(broker, topic, spark, batches=5)
    settings = load_settings()
    maintainer = Maintainer(settings)
    set_policy(settings, maintainer.state, maintainer.catalog, TABLE, {"keep_snapshots": "2d"})
    before = data_files()
    assert before >= 5

    app = FloeApp(load_settings())
    async with app.run_test(size=(160, 50)) as pilot:
        await open_maintenance(pilot)
        lines = policy_text(app).splitlines()
        assert any("keep_snapshots" in line and "2d" in line and f"table {TABLE}" in line for line in lines)
        assert any("retention " in line and "forever" in line for line in lines)
        assert "default" in policy_text(app)
        assert runs(app) == []
        assert f"{before} data files" in summary(app)

        # A compaction from elsewhere (here, this process): the view finds it by itself.
        run = await asyncio.to_thread(Maintainer(load_settings(), spark=spark).run, TABLE, "compact")
        assert run.outcome == "ok", run.detail
        await until(pilot, lambda: runs(app), 30, "the run in the grid")
        [row] = runs(app)
        assert (row["task"], row["trigger"], row["outcome"]) == ("compact", "cli", "ok")
        assert row["files"] == f"{run.files_before} → {run.files_after}"
        assert " → " in row["bytes"] and row["duration"].endswith(" s")
        assert "small files" in row["detail"]
        # The table changed: its summary and snapshots are read again without a key.
        await until(pilot, lambda: f"{run.files_after} data file" in summary(app), 30, "the new file count")
        assert run.files_after < before
        snapshots = app.query_one("#table-snapshots")
        assert str(snapshots.get_row_at(0)[1]) == "replace"


async def test_compact_now_is_a_request_the_running_engine_serves(broker, topic, spark, running_engine, floe_home):
    ingest(broker, topic, spark, batches=5)
    # Only requests: the engine's own schedule would compact these small files by itself.
    (floe_home / "floe.toml").write_text("[maintenance]\nenabled = false\n")
    settings = load_settings()
    # A request left while no engine runs waits for one, and says so.
    state = StateStore(settings.state_db)
    state.request_maintenance(TABLE, "orphans")
    state.close()
    before = data_files()

    app = FloeApp(settings)
    async with app.run_test(size=(160, 50)) as pilot:
        await open_maintenance(pilot)
        await until(pilot, lambda: [(r["task"], r["outcome"]) for r in runs(app)] == [("orphans", "requested")],
                    30, "the waiting request")
        assert "runs when the engine starts" in runs(app)[0]["detail"]

        running_engine()
        await until(pilot, lambda: app.engine_alive, 60, "the engine seen running")
        await until(pilot, lambda: [(r["task"], r["trigger"]) for r in runs(app)] == [("orphans", "request")]
                    and runs(app)[0]["outcome"] in ("ok", "nothing to do"), 60, "the request served")

        await pilot.click("#run-compact")
        await until(pilot, lambda: any("Compaction of ingest.x requested" in t for t in toasts(app)), 10, "the toast")
        await until(pilot, lambda: runs(app)[0]["task"] == "compact" and runs(app)[0]["outcome"] == "ok",
                    180, "the requested compaction run")
        row = runs(app)[0]
        assert row["trigger"] == "request"
        assert [r["task"] for r in runs(app)] == ["compact", "orphans"]  # nothing pending any more
        after = data_files()
        assert after < before
        assert row["files"] == f"{before} → {after}"
        await until(pilot, lambda: f"{after} data file" in summary(app), 30, "the new file count")
    state = StateStore(settings.state_db)
    assert state.pending_requests() == []
    state.close()


async def test_without_an_engine_a_button_runs_floe_maintain(broker, topic, spark):
    ingest(broker, topic, spark, batches=1)
    settings = load_settings()

    app = FloeApp(settings)
    async with app.run_test(size=(160, 50)) as pilot:
        await open_maintenance(pilot)
        await until(pilot, lambda: "engine stopped" in str(app.query_one("#engine-status").render()), 10,
                    "the engine seen stopped")
        await pilot.press("e")  # Expire snapshots now, from the keyboard
        await until(pilot, lambda: any(f"started `floe maintain {TABLE} --expire`" in t for t in toasts(app)),
                    10, "the toast")
        # The process is listed as running (pid, command) until its run is recorded, then just the run.
        await until(pilot, lambda: [(r["task"], r["trigger"]) for r in runs(app)] == [("expire", "cli")]
                    and runs(app)[0]["outcome"] != "running", 120, "the run of floe maintain")
        assert runs(app)[0]["outcome"] in ("ok", "nothing to do")

        await pilot.click("#run-orphans")
        await until(pilot, lambda: [(r["task"], r["trigger"]) for r in runs(app)] == [("orphans", "cli"), ("expire", "cli")]
                    and runs(app)[0]["outcome"] != "running", 120, "the second run")
        assert runs(app)[0]["outcome"] in ("ok", "nothing to do")

        # Retention deletes rows: it asks first. No is no...
        await pilot.press("r")
        await until(pilot, lambda: app.screen.__class__.__name__ == "ConfirmScreen", 10, "the question")
        question = str(app.screen.query_one("#confirm-question").render())
        assert f"Apply retention to {TABLE} now?" in question and "_kafka_timestamp" in question
        await pilot.press("escape")
        await until(pilot, lambda: app.screen.__class__.__name__ != "ConfirmScreen", 10, "the question gone")
        assert not any("--retention" in t for t in toasts(app))
        # ... and yes runs it (the policy keeps rows forever: nothing to do, and no Spark needed).
        await pilot.press("r")
        await until(pilot, lambda: app.screen.__class__.__name__ == "ConfirmScreen", 10, "the question")
        await pilot.press("y")
        await until(pilot, lambda: runs(app)[0]["task"] == "retention" and runs(app)[0]["outcome"] != "running",
                    120, "the retention run")
        assert (runs(app)[0]["trigger"], runs(app)[0]["outcome"]) == ("cli", "nothing to do")
        assert runs(app)[0]["detail"] == "retention is forever"
    state = StateStore(settings.state_db)
    assert state.pending_requests() == []  # nothing was left for an engine
    state.close()


# ---- what the tab looks like: a fixed FLOE_HOME, so every run paints the same screen ----

SNAPSHOT_HOME = Path("/tmp/floe-snapshot-maintenance-home")
MAPPING = Mapping((Column("order_id", "long", ("order_id",)), Column("status", "string", ("status",)),
                   Column("ordered_at", "timestamptz", ("ordered_at",))))
NO_FIGURES = dict(dry_run=False, files_before=None, files_after=None, bytes_before=None, bytes_after=None,
                  rows_deleted=None, rows_rewritten=None, snapshots_expired=None, files_deleted=None, snapshot_id=None)


@pytest.fixture
def recorded_home(monkeypatch):
    shutil.rmtree(SNAPSHOT_HOME, ignore_errors=True)
    SNAPSHOT_HOME.mkdir(parents=True)
    monkeypatch.setenv("FLOE_HOME", str(SNAPSHOT_HOME))
    settings = load_settings()
    Catalog(settings).ensure_table("ingest.pizza_orders", target_iceberg_schema(MAPPING))
    state = StateStore(settings.state_db)
    state.set_policy("namespace", "ingest", {"keep_snapshots": "1d"})
    state.set_policy("table", "ingest.pizza_orders", {"retention": "30d", "retention_column": "ordered_at"})
    for task, trigger, minute, outcome, figures, detail in (
        ("compact", "schedule", 0, "ok", dict(files_before=240, files_after=3, bytes_before=5_400_000,
                                              bytes_after=4_900_000, rows_rewritten=125_000),
         "238 small files (5,300,000 bytes) into 1 (target 134,217,728 bytes)"),
        ("expire", "cli", 5, "ok", dict(snapshots_expired=12, files_deleted=250),
         "12 of 40 snapshots expired; deleted 250 files"),
        ("retention", "request", 6, "nothing to do", dict(files_before=3, files_after=3, rows_deleted=0),
         "no rows with ordered_at before 2026-10-22T10:06:00+00:00 (30d)"),
    ):
        state.record_run(RunRecord(**{**NO_FIGURES, **figures, "task": task, "table_name": "ingest.pizza_orders",
                            "trigger": trigger, "started_at": f"2026-11-21T10:0{minute}:00.000+00:00",
                            "finished_at": f"2026-11-21T10:0{minute}:02.000+00:00", "duration_ms": 1500 + minute,
                            "outcome": outcome, "detail": detail}))
    state.db["maintenance_requests"].insert({"table_name": "ingest.pizza_orders", "task": "orphans",
                                             "requested_at": "2026-11-21T10:07:00.000+00:00", "taken_at": None})
    state.close()
    return settings


def test_maintenance_tab_snapshot(snap_compare, recorded_home):
    async def open_tab(pilot):
        app = pilot.app
        await until(pilot, lambda: "ingest.pizza_orders\n" in summary(app), 30, "the table's detail")
        await pilot.press("m")
        await until(pilot, lambda: len(runs(app)) == 4 and "retention_column" in policy_text(app), 30, "the tab")
        await engine_checked(pilot)

    assert snap_compare(FloeApp(recorded_home, "tables", clock=False), run_before=open_tab, terminal_size=(160, 30))
