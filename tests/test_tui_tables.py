"""The Tables pane against a real broker, engine and catalog, driven by Textual's Pilot."""

from appliance.config.settings import load_settings
from appliance.control.streams import create_stream
from appliance.ingest.engine import Engine
from appliance.views.tables import catalogue
from tui.app import FloeApp
from tui.panes.tables import TablesLoaded

from conftest import pizza_values
from tui_helpers import until


def leaves(app) -> list[str]:
    tree = app.query_one("#tables-tree")
    return [leaf.data for ns in tree.root.children for leaf in ns.children]


def summary(app) -> str:
    return str(app.query_one("#table-summary").render())


def column(table, key: str) -> list[str]:
    return [str(table.get_cell(row, key)) for row in table.rows]


async def test_tables_pane_lists_tables_and_shows_rows_snapshots_schema(broker, topic, spark):
    settings = load_settings()
    broker.produce(topic, pizza_values(300) + [b"{bad"])
    create_stream(settings, "x", bootstrap=broker.bootstrap, topic=topic, table="ingest.x")
    Engine(settings, spark=spark).run(until_caught_up=True)

    app = FloeApp(load_settings())
    async with app.run_test(size=(160, 50)) as pilot:
        await pilot.press("2")
        await until(pilot, lambda: leaves(app) == ["ingest.x", "ingest.x_dlq"], 30, "both tables in the tree")
        tree = app.query_one("#tables-tree")
        assert app.focused is tree
        assert "dead letters" in str(tree.root.children[0].children[1].label)

        # The first table is shown without asking.
        await until(pilot, lambda: "ingest.x\n" in summary(app) and "300 rows" in summary(app), 30, "ingest.x detail")
        assert "1 snapshot" in summary(app)
        snapshots = app.query_one("#table-snapshots")
        assert column(snapshots, "operation") == ["append"]
        assert column(snapshots, "rows") == ["300"]
        schema = app.query_one("#table-schema")
        names = column(schema, "column")
        assert {"order_id", "_kafka_partition", "_kafka_offset", "_ingested_at"} <= set(names)
        assert str(schema.get_cell("_kafka_offset", "type")) == "long"

        # Down the tree: the dead-letter table.
        await pilot.press("down")
        await until(pilot, lambda: "ingest.x_dlq" in summary(app) and "1 row ·" in summary(app), 30, "dead letters")
        assert "error_message" in column(app.query_one("#table-schema"), "column")

        # Back up the tree while a list read before is handled: the cursor stays where the user put it (it was
        # moved back to the table selected when the list was read, under load seconds before).
        pane = app.query_one("#tables-pane")
        tree.move_cursor(tree.root.children[0].children[0])
        pane.post_message(TablesLoaded(catalogue(settings)))
        on_x = lambda: (tree.cursor_node.data, pane.selected) == ("ingest.x", "ingest.x") and \
            "300 rows" in summary(app) and not [w for w in app.workers if w.node is pane and not w.is_finished]
        await until(pilot, on_x, 30, "back on ingest.x, the list and the detail read")
        await pilot.pause()
        await pilot.pause()
        assert on_x(), (tree.cursor_node.data, pane.selected, summary(app))

        # More data lands while the pane is open: F5 shows it, on the table that was selected.
        broker.produce(topic, pizza_values(50, start=300))
        Engine(load_settings(), spark=spark).run(until_caught_up=True)
        await pilot.press("f5")
        await until(pilot, lambda: "350 rows" in summary(app), 30, "refreshed row count")
        assert "2 snapshots" in summary(app)
        assert column(app.query_one("#table-snapshots"), "rows") == ["50", "300"]  # newest first

        # Shown again after another section: read again, no key needed.
        await pilot.press("1")
        broker.produce(topic, pizza_values(25, start=350))
        Engine(load_settings(), spark=spark).run(until_caught_up=True)
        await pilot.press("2")
        await until(pilot, lambda: "375 rows" in summary(app), 30, "detail read again when shown")
        await pilot.press("ctrl+r")
        await until(pilot, lambda: "3 snapshots" in summary(app), 30, "ctrl+r refresh")


async def test_tables_pane_without_tables_says_so(floe_home):
    app = FloeApp(load_settings())
    async with app.run_test(size=(160, 50)) as pilot:
        await pilot.press("2")
        await until(pilot, lambda: "No tables yet" in str(app.query_one("#tables-empty").render()), 30, "empty note")
        assert leaves(app) == []


async def test_schema_versions_say_what_changed_and_when(broker, topic, spark):
    import orjson

    from appliance.control.tables import alter_table

    settings = load_settings()
    broker.produce(topic, [orjson.dumps({"id": i, "note": "n"}) for i in range(5)])
    create_stream(settings, "v", bootstrap=broker.bootstrap, topic=topic, table="ingest.v")
    Engine(settings, spark=spark).run(until_caught_up=True)
    broker.produce(topic, [orjson.dumps({"id": 9, "note": "n", "coupon": "c"})])
    Engine(settings, spark=spark).run(until_caught_up=True)  # a new field: a column added, then its data
    alter_table(settings, "ingest.v", "rename-column", "note", "remark")  # no commit since
    app = FloeApp(load_settings())
    async with app.run_test(size=(160, 50)) as pilot:
        await pilot.press("2")
        await until(pilot, lambda: "ingest.v\n" in summary(app), 30, "ingest.v detail")
        versions = app.query_one("#table-schema-versions")
        await until(pilot, lambda: versions.row_count == 3, 10, "three schema versions")
        shown = [(str(versions.get_cell(r, "version")), str(versions.get_cell(r, "time")),
                  str(versions.get_cell(r, "changes"))) for r in versions.rows]
    assert shown[0] == ("2 (current)", "no commit since", "renamed note to remark")
    assert shown[1][0] == "1" and shown[1][2] == "added coupon (string)" and shown[1][1][:2] == "20"
    assert shown[2][0] == "0" and shown[2][2].startswith("created with")


async def test_tables_open_on_the_users_tables_with_floes_own_last(floe_home):
    """The system tables (`floe.audit`, `floe.batches`...) sort before `ingest.*`: the section must not
    open on them."""
    from appliance.config.settings import ensure_home
    from appliance.model.mapping import Column, Mapping
    from appliance.observe.systables import SystemTableWriter
    from appliance.state.store import StateStore
    from appliance.tables.catalog import Catalog
    from appliance.tables.iceberg_schemas import target_iceberg_schema

    settings = load_settings()
    ensure_home(settings)
    catalog = Catalog(settings)
    catalog.ensure_table("ingest.orders", target_iceberg_schema(Mapping((Column("id", "long", ("id",)),))))
    with StateStore(settings.state_db) as state:
        SystemTableWriter(settings, catalog, state).export()  # what the engine does every 15 s
    app = FloeApp(load_settings(), "tables", clock=False)
    async with app.run_test(size=(160, 50)) as pilot:
        await until(pilot, lambda: "ingest.orders\n" in summary(app), 30, "the user's table shown")
        tree = app.query_one("#tables-tree")
        assert [str(ns.label) for ns in tree.root.children] == ["ingest", "floe"]
        assert leaves(app)[0] == "ingest.orders" and "floe.audit" in leaves(app)
        assert tree.cursor_node.data == "ingest.orders"
