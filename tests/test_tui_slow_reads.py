"""Views that read themselves every second, each read slower than that second, as on a loaded machine: each
shows what it read (`tui.workers.Refresh`: a read is never started over one still going, and never cancelled by
the next tick). Before, the Events and Maintenance sections dropped every read the next one had cancelled, and
showed nothing at all."""

import threading
import time

import pytest
from pyiceberg.schema import Schema
from pyiceberg.types import LongType, NestedField
from rich.text import Text

import tui.panes.maintenance as maintenance_module
from appliance.config.settings import ensure_home, load_settings
from appliance.core.vocabulary import EventKind
from appliance.state.store import StateStore
from appliance.tables.catalog import Catalog
from appliance.views.events import EventsFollower
from tui.app import FloeApp

from test_tui_maintenance import policy_text
from tui_helpers import until

SLOW = 1.6  # seconds each read takes: more than the one-second refresh


class Reads:
    """How many reads ran at once, at most: one read at a time is the rule."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.now = self.most = self.done = 0

    @classmethod
    def slowing(cls, monkeypatch, owner, name: str) -> "Reads":
        """`owner.name` (a view's read) made slow for the test, and counted."""
        reads = cls()
        monkeypatch.setattr(owner, name, reads.slowed(getattr(owner, name)))
        return reads

    def slowed(self, read):
        def slow(*args, **kwargs):
            with self.lock:
                self.now += 1
                self.most = max(self.most, self.now)
            try:
                time.sleep(SLOW)  # the fault injected: a read outlasting the refresh
                return read(*args, **kwargs)
            finally:
                with self.lock:
                    self.now -= 1
                    self.done += 1
        return slow

    async def one_at_a_time(self, pilot) -> None:
        """Reads go on, every second or so, and never two at once."""
        await until(pilot, lambda: self.done >= 3, 15, "reads going on")
        assert self.most == 1, "one read at a time"


@pytest.fixture
def settings(floe_home):
    settings = load_settings()
    ensure_home(settings)
    return settings


async def test_events_read_slower_than_their_refresh_still_show(settings, monkeypatch):
    with StateStore(settings.state_db) as state:
        state.add_event(EventKind.STREAM_CREATED, "stream created: slow-topic -> ns.slow", "slow")
    reads = Reads.slowing(monkeypatch, EventsFollower, "read")
    app = FloeApp(settings)
    async with app.run_test(size=(160, 50)) as pilot:
        await pilot.press("4")
        table = app.query_one("#events-table")
        messages = lambda: [Text.from_markup(str(table.get_cell(k, "message"))).plain for k in table.rows]  # noqa: E731
        await until(pilot, lambda: "stream created: slow-topic -> ns.slow" in messages(), 15, "the event")
        await reads.one_at_a_time(pilot)


async def test_maintenance_read_slower_than_its_refresh_still_shows(settings, monkeypatch):
    Catalog(settings).ensure_table("ns.slow", Schema(NestedField(1, "id", LongType(), required=False)))
    reads = Reads.slowing(monkeypatch, maintenance_module, "table_maintenance")
    app = FloeApp(settings)
    async with app.run_test(size=(160, 50)) as pilot:
        await pilot.press("2")
        summary = app.query_one("#table-summary")
        await until(pilot, lambda: "ns.slow\n" in str(summary.render()), 15, "the table's detail")
        await pilot.press("m")
        await until(pilot, lambda: "target_file_size" in policy_text(app), 15, "the policy, read slowly")
        await reads.one_at_a_time(pilot)
