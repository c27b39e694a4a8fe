"""The Query pane against a real catalog and DuckDB, driven by Textual's Pilot."""

import json
import subprocess
import sys

import pyarrow.csv as pa_csv
import pyarrow.parquet as pq
import pytest

from appliance.config.settings import load_settings
from appliance.control.streams import create_stream
from appliance.ingest.engine import Engine
from appliance.query.connection import run_query
from appliance.query.history import HISTORY_LIMIT, append_history, load_history
from tui.app import FloeApp

from conftest import ROOT, pizza_values
from tui_helpers import type_into, until

LONG = "select count(*) from range(1000000000000)"  # minutes of work: only ever cancelled


def status(app) -> str:
    return str(app.query_one("#query-status").render())


def editor(app):
    return app.query_one("#query-editor")


def grid(app):
    return app.query_one("#query-results")


def toasts(app) -> list[str]:
    return [str(n.message) for n in app._notifications]


async def run_sql(pilot, sql: str, key: str = "ctrl+j") -> None:
    app = pilot.app
    editor(app).load_text(sql)
    await pilot.press(key)
    await until(pilot, lambda: not app.query_one("#query-pane").running, 60, f"{sql!r} to finish")


@pytest.fixture
def ingested(broker, topic, spark):
    settings = load_settings()
    broker.produce(topic, pizza_values(300) + [b"{bad"])
    create_stream(settings, "x", bootstrap=broker.bootstrap, topic=topic, table="ingest.x")
    Engine(settings, spark=spark).run(until_caught_up=True)
    return settings


async def test_query_counts_reports_errors_and_carries_on(ingested):
    app = FloeApp(load_settings())
    async with app.run_test(size=(160, 50)) as pilot:
        await pilot.press("3")
        await until(pilot, lambda: app.focused is editor(app), 10, "the editor focused")
        await type_into(pilot, "select count(*) as n from ingest.x")
        await pilot.press("ctrl+j")
        await until(pilot, lambda: "1 row in" in status(app), 60, "row-count status")
        assert [str(c.label) for c in grid(app).columns.values()] == ["n"]
        assert [str(c) for c in grid(app).get_row_at(0)] == ["300"]
        # As wide as "300" when added, not measured later: a frame drawn before then read "3" (a real terminal).
        assert [(c.width, c.auto_width) for c in grid(app).columns.values()] == [(3, False)]

        # DuckDB's own message, one line, in the status line and a toast; the UI carries on.
        await run_sql(pilot, "selec count(*) from ingest.x", key="f5")
        assert status(app) == 'Parser Error: syntax error at or near "selec"'
        assert any('Parser Error: syntax error at or near "selec"' in t for t in toasts(app))
        await run_sql(pilot, "select count(*) from ingest.x_dlq")
        assert "1 row in" in status(app)
        assert [str(c) for c in grid(app).get_row_at(0)] == ["1"]

        await run_sql(pilot, "select * from ingest.missing")
        assert status(app).startswith("Catalog Error: Table with name missing does not exist")

        # A big result: the grid holds the first 1,000 rows, the status says how many there are.
        await run_sql(pilot, "select range as i, 'row ' || range as label from range(250000)")
        assert "250,000 rows in" in status(app) and "showing the first 1,000" in status(app)
        assert grid(app).row_count == 1000
        assert [str(c) for c in grid(app).get_row_at(999)] == ["999", "row 999"]
        assert [c.width for c in grid(app).columns.values()] == [3, 7]  # the rows shown, "row 999" the widest

        # Text is shown as text, never as markup.
        await run_sql(pilot, "select '[bold]x[/bold]' as s, null as n")
        assert [str(c) for c in grid(app).get_row_at(0)] == ["[bold]x[/bold]", "NULL"]

        # Escape leaves the editor, so the section keys work again.
        await pilot.press("escape")
        await until(pilot, lambda: app.focused is grid(app), 10, "the results grid focused")
        await pilot.press("2")
        await until(pilot, lambda: app.query_one("#sections").active == "tables", 10,
                    "the Tables section")


async def test_export_writes_csv_and_parquet_of_the_last_result(ingested, floe_home):
    sql = "select order_id, store_name, amount, ordered_at from ingest.x order by order_id"
    expected = run_query(load_settings(), sql)
    app = FloeApp(load_settings())
    async with app.run_test(size=(160, 50)) as pilot:
        await pilot.press("3")
        await pilot.click("#export-csv")  # nothing to export yet
        await until(pilot, lambda: any("Run a query first" in t for t in toasts(app)), 10, "nothing-to-export toast")

        await run_sql(pilot, sql)
        assert "300 rows in" in status(app)
        path_box = app.query_one("#export-path")
        default = path_box.value
        assert default.startswith(str(floe_home / "exports")) and default.endswith(".csv")

        await pilot.click("#export-csv")
        csv_path = floe_home / "exports" / default.rsplit("/", 1)[1]
        await until(pilot, lambda: csv_path.exists(), 30, "the CSV file")
        back = pa_csv.read_csv(csv_path)
        assert back.num_rows == 300 and back.column_names == ["order_id", "store_name", "amount", "ordered_at"]
        assert back["order_id"].to_pylist() == expected["order_id"].to_pylist()
        assert back["store_name"].to_pylist() == expected["store_name"].to_pylist()

        await pilot.click("#export-parquet")
        parquet_path = csv_path.with_suffix(".parquet")
        await until(pilot, lambda: parquet_path.exists(), 30, "the Parquet file")
        assert pq.read_table(parquet_path).equals(expected)
        assert path_box.value == str(parquet_path)
        await until(pilot, lambda: any("Exported 300 rows as PARQUET" in t for t in toasts(app)), 10, "toast")

        # A name of one's own, relative to the exports folder; Enter exports by its suffix.
        path_box.focus()
        path_box.value = "mine.parquet"
        await pilot.press("enter")
        mine = floe_home / "exports" / "mine.parquet"
        await until(pilot, lambda: mine.exists(), 30, "mine.parquet")
        assert pq.read_table(mine).num_rows == 300

        # Bytes and nested values (the dead-letter table) become text in a CSV.
        await run_sql(pilot, "select raw_value, headers, error_stage from ingest.x_dlq")
        path_box.value = str(floe_home / "dead.csv")
        await pilot.click("#export-csv")
        await until(pilot, lambda: (floe_home / "dead.csv").exists(), 30, "dead.csv")
        dead = pa_csv.read_csv(floe_home / "dead.csv").to_pylist()
        assert dead == [{"raw_value": "{bad", "headers": "[]", "error_stage": "decode"}]


async def test_escape_and_cancel_button_stop_a_long_query(floe_home):
    app = FloeApp(load_settings())
    async with app.run_test(size=(160, 50)) as pilot:
        await pilot.press("3")
        editor(app).load_text(LONG)
        await pilot.press("ctrl+j")
        await until(pilot, lambda: "Running" in status(app), 30, "running status")
        assert app.query_one("#query-run").disabled and not app.query_one("#query-cancel").disabled
        await pilot.press("escape")
        await until(pilot, lambda: "cancelled" in status(app), 30, "cancelled status")
        assert app.focused is editor(app)  # Escape cancelled; it did not also leave the editor
        assert not app.query_one("#query-pane").running

        await run_sql(pilot, "select 41 + 1 as answer")  # the session survives an interrupt
        assert "1 row in" in status(app)
        assert [str(c) for c in grid(app).get_row_at(0)] == ["42"]

        editor(app).load_text(LONG)
        await pilot.press("f5")
        await until(pilot, lambda: "Running" in status(app), 30, "running again")
        await pilot.click("#query-cancel")
        await until(pilot, lambda: "cancelled" in status(app), 30, "cancelled by the button")
        assert [str(c) for c in grid(app).get_row_at(0)] == ["42"]  # the last result stays

        # Cancelled at once, before DuckDB has started: the interrupt is sent again until it lands.
        editor(app).load_text(LONG)
        await pilot.press("ctrl+j", "escape")
        await until(pilot, lambda: "cancelled" in status(app), 30, "cancelled straight away")


async def test_history_survives_a_new_app(floe_home):
    app = FloeApp(load_settings())
    async with app.run_test(size=(160, 50)) as pilot:
        await pilot.press("3")
        await run_sql(pilot, "select 1 as first")
        await run_sql(pilot, "selec 2")  # failed statements are kept too: they are the ones to fix
        await run_sql(pilot, "select 3 as third")
    lines = (floe_home / "query_history.jsonl").read_text().splitlines()
    assert [json.loads(line)["sql"] for line in lines] == ["select 1 as first", "selec 2", "select 3 as third"]

    app = FloeApp(load_settings())
    async with app.run_test(size=(160, 50)) as pilot:
        await pilot.press("3")
        await until(pilot, lambda: len(app.query_one("#query-pane").history) == 3, 10, "history loaded")
        await type_into(pilot, "draft")
        await pilot.press("ctrl+up")
        assert editor(app).text == "select 3 as third"
        await pilot.press("ctrl+up", "ctrl+up", "ctrl+up")  # stops at the oldest
        assert editor(app).text == "select 1 as first"
        await pilot.press("ctrl+down")
        assert editor(app).text == "selec 2"
        await pilot.press("ctrl+down", "ctrl+down")
        assert editor(app).text == "draft"  # back past the newest: what was being typed
        await run_sql(pilot, "select 3 as third")  # the same as the newest: not repeated
    assert len((floe_home / "query_history.jsonl").read_text().splitlines()) == 3


def test_history_file_is_capped_newest_last(floe_home):
    settings = load_settings()
    for i in range(HISTORY_LIMIT + 20):
        append_history(settings, f"select {i}")
    history = load_history(settings)
    assert len(history) == HISTORY_LIMIT
    assert history[0] == "select 20" and history[-1] == f"select {HISTORY_LIMIT + 19}"
    with (floe_home / "query_history.jsonl").open("a") as f:
        f.write('{"sql": "torn line\n')  # a crash mid-write loses that line, not the history
    assert load_history(settings)[-1] == f"select {HISTORY_LIMIT + 19}"


def test_query_core_imports_no_ui():
    code = ("import sys, appliance.query.session, appliance.views.streams, appliance.views.events; "
            "bad = [m for m in sys.modules if m.split('.')[0] in ('tui', 'textual')]; "
            "assert not bad, bad")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert result.returncode == 0, result.stderr
