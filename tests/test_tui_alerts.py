"""The Alerts section driven by Textual's Pilot, on a real FLOE_HOME and state database: an alert added
through the form is listed, saved, audited as the UI's and tested; a bad rule is one line under the
form; `d` removes an alert; open incidents show in the section and in the header."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

from textual.widgets import Input

from appliance.config.settings import load_settings
from appliance.control.alerts import add_alert
from appliance.core.clock import now
from appliance.model.stage import StageDef
from appliance.state.store import StateStore
from appliance.views.alerts import alerts_overview
from tui.app import FloeApp
from tui.screens.alert_form import AlertFormScreen, notify_urls

from tui_helpers import cell, engine_checked, showing, until

SECRET = "s3cretpass"
URL = f"json://floe:{SECRET}@127.0.0.1:9/hook-token-abcdef"  # nothing listens on port 9


ENGINE_DOWN = '[[alerts]]\nname = "engine_gone"\nrule = "engine_down"\nnotify = ["json://127.0.0.1:9/down"]\n'


def settings_with_one_attempt(home, more: str = ""):
    home.mkdir(parents=True, exist_ok=True)
    (home / "floe.toml").write_text("[alerting]\nnotify_attempts = 1\n" + more)
    return load_settings()


def toasts(app) -> list[str]:
    return [str(n.message) for n in app._notifications]


async def open_form(app, pilot) -> AlertFormScreen:
    app.query_one("#alerts-table").focus()
    await pilot.press("n")
    await until(pilot, lambda: showing(app, AlertFormScreen), 5, "the form")
    return app.screen


def fill(screen, **values: str) -> None:
    for name, value in values.items():
        screen.query_one(f"#alert-{name}", Input).value = value


async def test_an_alert_added_in_the_form_is_listed_audited_tested_and_removed(floe_home, monkeypatch):
    monkeypatch.delenv("FLOE_VIA", raising=False)
    settings = settings_with_one_attempt(floe_home)
    app = FloeApp(settings, "alerts")
    async with app.run_test(size=(180, 45)) as pilot:
        table = app.query_one("#alerts-table")
        await until(pilot, lambda: "No alerts yet" in str(app.query_one("#alerts-empty").render()), 10, "the hint")
        screen = await open_form(app, pilot)
        fill(screen, name="never", rule="stalled", notify=URL)
        await pilot.press("escape")  # cancelled: nothing added
        await until(pilot, lambda: not isinstance(app.screen, AlertFormScreen), 5, "the form cancelled")
        screen = await open_form(app, pilot)
        fill(screen, name="orders_lag", rule="lag_messages > 1000", notify=URL, **{"for": "2m"})
        await pilot.press("ctrl+s")
        await until(pilot, lambda: not isinstance(app.screen, AlertFormScreen), 10, "the form closed")
        await until(pilot, lambda: "orders_lag" in [k.value for k in table.rows], 10, "the alert listed")
        assert cell(table, "orders_lag", "rule") == "lag_messages > 1000"
        assert cell(table, "orders_lag", "subject") == "*" and cell(table, "orders_lag", "for") == "2m"
        assert cell(table, "orders_lag", "open") == "0" and cell(table, "orders_lag", "from") == "floe alert"
        shown = cell(table, "orders_lag", "notify")
        assert shown.startswith("json://") and SECRET not in shown and "hook-token-abcdef" not in shown

        await pilot.press("t")  # nothing listens: the target FAILED, masked
        await until(pilot, lambda: any("FAILED" in t and "orders_lag" in t for t in toasts(app)), 30, "the test")
        report = next(t for t in toasts(app) if "FAILED" in t and "orders_lag" in t)
        assert "1 of 1 target FAILED" in report and "FAILED  json://" in report and SECRET not in report
        assert "Connection refused" in report and "hook-token-abcdef" not in report  # Apprise's reason, masked

        await pilot.press("d")
        await until(pilot, lambda: app.screen.__class__.__name__ == "ConfirmScreen", 5, "the confirmation")
        await pilot.press("y")
        await until(pilot, lambda: table.row_count == 0, 10, "the alert removed")
        # The list may be read again before the removal's own message arrives: wait for the toast too.
        await until(pilot, lambda: any("Removed alert orders_lag" in t for t in toasts(app)), 10, "its toast")
    assert os.environ.get("FLOE_VIA") is None  # the app puts back what it set

    assert alerts_overview(settings)[0] == []  # "never" was cancelled, orders_lag removed
    with StateStore(settings.state_db) as state:
        trail = {(r.action, r.target): r for r in state.audit_trail()}
    added, removed = trail[("alert add", "orders_lag")], trail[("alert remove", "orders_lag")]
    assert added.via == "ui" and added.outcome == "ok" and removed.via == "ui" and removed.outcome == "ok"
    assert SECRET not in added.arguments and json.loads(added.arguments)["rule"] == "lag_messages > 1000"


async def test_the_form_adds_what_the_engine_checked_and_says_what_is_wrong_in_one_line(floe_home):
    settings = settings_with_one_attempt(floe_home)
    app = FloeApp(settings, "alerts")
    async with app.run_test(size=(180, 45)) as pilot:
        screen = await open_form(app, pilot)
        fill(screen, name="bad", rule="lag_messagez > 5", notify=URL)
        await pilot.press("ctrl+s")
        error = screen.query_one("#alert-error")
        await until(pilot, lambda: "unknown measure 'lag_messagez'" in str(error.render()), 10, "the error")
        assert "\n" not in str(error.render()).strip() and "Traceback" not in str(error.render())
        assert isinstance(app.screen, AlertFormScreen)
        assert alerts_overview(settings)[0] == []

        # An empty For means the rule's default, and the placeholder says which, as the rule is typed.
        placeholder = screen.query_one("#alert-for", Input)
        assert placeholder.placeholder == "the rule's default"  # lag_messagez is no measure
        fill(screen, rule="lag_messages")
        await until(pilot, lambda: placeholder.placeholder == "at once", 5, "lag_messages' default in the placeholder")
        fill(screen, name="bad", rule="stalled", notify="json://127.0.0.1:9/a, json://127.0.0.1:9/b")
        await until(pilot, lambda: placeholder.placeholder == "5m", 5, "stalled's default in the placeholder")
        screen.query_one("#alert-notify", Input).focus()
        await pilot.press("enter")
        await until(pilot, lambda: not isinstance(app.screen, AlertFormScreen), 10, "the form closed")
        table = app.query_one("#alerts-table")
        await until(pilot, lambda: "bad" in [k.value for k in table.rows], 10, "the alert listed")
        assert cell(table, "bad", "for") == "5m (default)"
    [alert] = alerts_overview(settings)[0]
    assert alert.rule == "stalled" and len(alert.notify) == 2 and alert.window == 300


async def test_a_stage_alert_added_in_the_form_watches_that_stage(floe_home):
    settings = settings_with_one_attempt(floe_home)
    with StateStore(settings.state_db) as state:
        state.add_stage(StageDef(name="daily", id="1", source="ns.t", sql="select * from source", table="ns.daily",
                                 kind="append", paused=False, created_at=now()))
    app = FloeApp(settings, "alerts")
    async with app.run_test(size=(180, 45)) as pilot:
        screen = await open_form(app, pilot)
        fill(screen, name="daily_stuck", rule="lag_messages > 5", stage="daily", notify=URL)
        await pilot.press("ctrl+s")
        error = screen.query_one("#alert-error")
        await until(pilot, lambda: "lag_messages is not measured on a stage" in str(error.render()), 10, "the error")
        fill(screen, rule="stalled", stream="orders")
        await pilot.press("ctrl+s")
        await until(pilot, lambda: "not both" in str(error.render()), 10, "the second error")
        fill(screen, stream="")
        await pilot.press("ctrl+s")
        await until(pilot, lambda: not isinstance(app.screen, AlertFormScreen), 10, "the form closed")
        table = app.query_one("#alerts-table")
        await until(pilot, lambda: "daily_stuck" in [k.value for k in table.rows], 10, "the alert listed")
        assert cell(table, "daily_stuck", "subject") == "stage daily"
        assert cell(table, "daily_stuck", "rule") == "stalled"
    [alert] = alerts_overview(settings)[0]
    assert (alert.stage, alert.stream, alert.rule) == ("daily", "", "stalled")


def test_notify_urls_are_split_on_commas_spaces_and_newlines_but_not_inside_a_url():
    assert notify_urls("json://a/x, slack://t/y\nmailto://u:p@h?to=a@x,b@y  ntfys://topic,") == [
        "json://a/x", "slack://t/y", "mailto://u:p@h?to=a@x,b@y", "ntfys://topic"]
    assert notify_urls("  ") == []


async def test_open_incidents_show_in_the_section_and_in_the_header(floe_home):
    settings = settings_with_one_attempt(floe_home, ENGINE_DOWN)
    add_alert(settings, "orders_lag", "lag_messages > 1000", [URL])
    app = FloeApp(settings, "streams")
    async with app.run_test(size=(180, 45)) as pilot:
        incidents, table = app.query_one("#incidents-table"), app.query_one("#alerts-table")
        await until(pilot, lambda: table.row_count == 2, 10, "the alerts listed")
        assert cell(table, "engine_gone", "from") == "floe.toml" and cell(table, "engine_gone", "subject") == "*"
        assert incidents.row_count == 0 and app.sub_title == FloeApp.SUB_TITLE
        with StateStore(settings.state_db) as state:
            opened = state.open_incident("orders_lag", "pizza", "lag_messages > 1000", "52,340",
                                         "stream pizza: lag 52,340 messages > 1000")
        await until(pilot, lambda: incidents.row_count == 1, 10, "the incident listed")
        key = str(opened.id)
        assert cell(incidents, key, "alert") == "orders_lag" and cell(incidents, key, "subject") == "pizza"
        assert cell(incidents, key, "rule") == "lag_messages > 1000" and "52,340" in cell(incidents, key, "value")
        # The pane shows its rows before the message bubbles on to the app, which sets the header.
        await until(pilot, lambda: "1 open incident" in app.sub_title, 10, "the header's count")
        assert "1 open incident" in app.sub_title  # seen from the Streams section
        await pilot.press("6")
        await until(pilot, lambda: app.focused is table, 5, "the Alerts section")
        assert "1" in cell(table, "orders_lag", "open")
        table.move_cursor(row=table.get_row_index("engine_gone"))
        await pilot.press("d")  # floe.toml's: refused at once, nothing asked
        await until(pilot, lambda: any("floe.toml" in t for t in toasts(app)), 5, "the refusal")
        assert app.screen.__class__.__name__ != "ConfirmScreen" and table.row_count == 2

        with StateStore(settings.state_db) as state:
            state.resolve_incident(opened.id, "0")
        await until(pilot, lambda: incidents.row_count == 0, 10, "the incident gone")
        await until(pilot, lambda: app.sub_title == FloeApp.SUB_TITLE, 5, "the header cleared")


SNAPSHOT_HOME = Path("/tmp/floe-snapshot-alerts-home")


def test_alerts_screen(snap_compare, monkeypatch):
    shutil.rmtree(SNAPSHOT_HOME, ignore_errors=True)
    monkeypatch.setenv("FLOE_HOME", str(SNAPSHOT_HOME))
    settings = settings_with_one_attempt(SNAPSHOT_HOME, ENGINE_DOWN)
    add_alert(settings, "orders_lag", "lag_messages > 100000", [URL, "mailto://ops:pw@example.com"], for_="5m")
    add_alert(settings, "orders_dead", "dead_letter_ratio > 0.05", ["json://127.0.0.1:9/dlq"])
    with StateStore(settings.state_db) as state:
        state.db["incidents"].insert({"alert": "orders_lag", "subject": "pizza_orders", "rule": "lag_messages > 100000",
                                      "opened_at": "2026-11-21T10:00:00.000+00:00", "value": "152,340",
                                      "message": "stream pizza_orders: lag 152,340 messages > 100000",
                                      "notified_open": 1, "notified_resolved": 0})

    async def wait_for_rows(pilot):
        await until(pilot, lambda: pilot.app.query_one("#incidents-table").row_count == 1, 10, "the incident")
        await engine_checked(pilot)

    app = FloeApp(settings, "alerts", clock=False)
    assert snap_compare(app, run_before=wait_for_rows, terminal_size=(160, 30))
