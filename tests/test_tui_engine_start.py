"""Ctrl+E in the UI starts `floe run` through `appliance.control.processes`, and the audit trail records
it as the UI's, driven by Textual's Pilot on a real FLOE_HOME and state database."""

from __future__ import annotations

import json

from appliance.config.settings import load_settings
from appliance.state.store import StateStore
from tui.app import FloeApp

from tui_helpers import until


async def test_starting_the_engine_from_the_ui_is_in_the_audit_trail(floe_home, monkeypatch):
    monkeypatch.delenv("FLOE_VIA", raising=False)
    # The engine started inherits this environment: with no Java it exits at once, so no engine outlives
    # the test, and the start is recorded all the same (whether it then runs is its log's to say).
    monkeypatch.setenv("JAVA_HOME", "/nonexistent/jdk")
    settings = load_settings()
    app = FloeApp(settings)
    async with app.run_test(size=(160, 40)) as pilot:
        await pilot.press("ctrl+e")
        await until(pilot, lambda: [n for n in app._notifications if "engine exited" in str(n.message)], 60,
                    "the engine's exit")
    with StateStore(settings.state_db) as state:
        trail = [r for r in state.audit_trail() if r.action == "engine start"]
    assert [(r.target, r.via, r.outcome) for r in trail] == [(str(floe_home), "ui", "ok")]
    assert json.loads(trail[0].arguments) == {"log": str(floe_home / "logs" / "engine.out")}
