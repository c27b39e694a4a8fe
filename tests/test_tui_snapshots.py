"""Snapshot tests of the main screens (pytest-textual-snapshot): a layout change shows up as a diff.

State is written straight into a fixed FLOE_HOME so every run paints the same screen;
`pytest --snapshot-update` rewrites the baselines under tests/__snapshots__/ after a deliberate change.
"""

import fcntl
import shutil
from pathlib import Path

import pytest

from appliance.config.settings import load_settings
from appliance.kafka.settings import KafkaSettings
from appliance.model.mapping import Column, Mapping
from appliance.model.stream import StreamDef
from appliance.state.store import StateStore
from appliance.tables.catalog import Catalog
from appliance.tables.iceberg_schemas import target_iceberg_schema
from tui.app import FloeApp

from tui_helpers import engine_checked, until

HOME = Path("/tmp/floe-snapshot-home")
MAPPING = Mapping((Column("order_id", "long", ("order_id",)), Column("status", "string", ("status",)),
                   Column("ordered_at", "timestamptz", ("ordered_at",))))


@pytest.fixture
def fixed_home(monkeypatch):
    # One home for every snapshot (its path is on the screen): one test at a time on the machine, under
    # pytest-xdist too.
    with open(f"{HOME}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield _fill(monkeypatch)


def _fill(monkeypatch):
    shutil.rmtree(HOME, ignore_errors=True)
    HOME.mkdir(parents=True)
    monkeypatch.setenv("FLOE_HOME", str(HOME))
    settings = load_settings()
    state = StateStore(settings.state_db)
    for name, paused, phase, rows, dead, lag, error in (
        ("pizza_orders", False, "running", 125_400, 1_254, 12, ""),
        ("clicks", True, "paused", 9_800_000, 0, 40_210, ""),
        ("payments", False, "failed", 310, 2, 0, "broker 10.0.0.5:9092 unreachable: Connection refused"),
    ):
        state.add_stream(StreamDef(name=name, id=f"id-{name}", topic=name, kafka=KafkaSettings.create("broker:9092"),
                                   format="json", table=f"ingest.{name}", dead_letter_table=f"ingest.{name}_dlq",
                                   mapping=MAPPING, starting_offsets="earliest", start_positions={0: 0},
                                   paused=paused, created_at="2026-11-21T10:00:00.000+00:00"))
        state.update_status(name, phase=phase, rows_total=rows, dead_letter_total=dead, lag=lag,
                            messages_per_s=0.0, last_error=error)
    for i, (kind, level, stream, message) in enumerate([
        ("engine_started", "info", None, "engine started (pid 4242, spark local[*])"),
        ("stream_created", "info", "pizza_orders", "stream created: pizza_orders -> ingest.pizza_orders"),
        ("broker_unreachable", "error", "payments", "broker 10.0.0.5:9092 unreachable: Connection refused"),
        ("stream_paused", "info", "clicks", "paused"),
    ]):
        state.db["events"].insert({"at": f"2026-11-21T10:0{i}:00.000+00:00", "stream": stream, "level": level,
                                   "kind": kind, "message": message})
    state.close()
    Catalog(settings).ensure_table("ingest.pizza_orders", target_iceberg_schema(MAPPING))
    return settings


def app(settings, section="streams"):
    return FloeApp(settings, section, clock=False)


def test_streams_screen(snap_compare, fixed_home):
    assert snap_compare(app(fixed_home), run_before=engine_checked, terminal_size=(160, 30))


def test_help_screen(snap_compare, fixed_home):
    assert snap_compare(app(fixed_home), press=["question_mark"], run_before=engine_checked, terminal_size=(160, 40))


def test_events_screen(snap_compare, fixed_home):
    assert snap_compare(app(fixed_home, "events"), run_before=engine_checked, terminal_size=(160, 30))


def test_wizard_first_step(snap_compare, fixed_home):
    async def open_prefilled(pilot):
        await engine_checked(pilot)
        await pilot.press("n")
        await until(pilot, lambda: pilot.app.screen.query_one("#bootstrap").value == "broker:9092", 10,
                    "the known cluster prefilled")
        pilot.app.screen.query_one("#bootstrap").cursor_blink = False  # the same picture whenever it is taken
        await pilot.pause()

    assert snap_compare(app(fixed_home), run_before=open_prefilled, terminal_size=(160, 45))


def test_query_screen(snap_compare, fixed_home):
    async def type_sql(pilot):
        editor = pilot.app.query_one("TextArea")
        editor.cursor_blink = False  # a blinking cursor is in the picture or not by the clock
        editor.text = "select status, count(*) from ingest.pizza_orders group by 1"
        await engine_checked(pilot)

    assert snap_compare(app(fixed_home, "query"), run_before=type_sql, terminal_size=(160, 30))


def test_tables_screen(snap_compare, fixed_home):
    async def wait_for_detail(pilot):
        tree = pilot.app.screen.query_one("#tables-tree")
        summary = pilot.app.screen.query_one("#table-summary")
        await until(pilot, lambda: tree.cursor_node is not None and tree.cursor_node.data == "ingest.pizza_orders"
                    and "0 snapshots" in str(summary.render()), 10, "the table under the cursor and its detail")
        await engine_checked(pilot)

    assert snap_compare(app(fixed_home, "tables"), run_before=wait_for_detail, terminal_size=(160, 30))
