"""The new-stream wizard against the real broker and catalog, driven by Textual's Pilot."""

from __future__ import annotations

import asyncio

from appliance.config.settings import load_settings
from appliance.control.streams import create_stream
from appliance.model.mapping import Mapping
from appliance.model.names import snake_case
from appliance.views.streams import stream_info, streams_overview
from tui.app import FloeApp
from tui.screens.new_stream import NewStreamScreen

from conftest import pizza_values
from tui_helpers import open_wizard, shown, text, type_into, until


async def type_text(pilot, value: str) -> None:
    await type_into(pilot, value)


async def load_and_pick_topic(pilot, screen, bootstrap: str, topic: str) -> None:
    """Type the bootstrap servers, Enter loads the topics, pick `topic` by typing its name."""
    await type_text(pilot, bootstrap)
    await pilot.press("enter")
    select = screen.query_one("#topic")
    status = screen.query_one("#source-status")
    await until(pilot, lambda: "topics on" in text(status), 30, "topics listed")
    await until(pilot, lambda: select.has_focus, 5, "focus on the topic list")  # loading moves on to it
    await pilot.press("enter")  # opens the list
    overlay = select.query_one("SelectOverlay")
    await until(pilot, lambda: select.expanded and overlay.has_focus, 10, "the list open")

    def highlighted() -> str | None:
        return None if overlay.highlighted is None else str(overlay.get_option_at_index(overlay.highlighted).prompt)

    for _ in range(3):  # type-to-search forgets what was typed after a pause, which a loaded machine may make
        await type_text(pilot, topic)
        try:
            await until(pilot, lambda: highlighted() == topic, 10, "the typed topic highlighted")
            break
        except AssertionError:
            await pilot.pause(1.5)
    await pilot.press("enter")
    await until(pilot, lambda: select.value == topic, 30, "topic picked")


async def test_wizard_end_to_end_creates_the_edited_stream(broker, topic):
    broker.produce(topic, pizza_values(40))
    settings = load_settings()
    app = FloeApp(settings)
    async with app.run_test(size=(160, 50)) as pilot:
        screen = await open_wizard(app, pilot)
        await load_and_pick_topic(pilot, screen, broker.bootstrap, topic)

        # Test connection reads a few of the newest messages and shows them.
        await pilot.click("#test-connection")
        sample = screen.query_one("#sample-table")
        status = screen.query_one("#source-status")
        await until(pilot, lambda: "Connected to" in text(status), 30, "sampled messages")
        assert 0 < sample.row_count <= 10
        rows = [sample.get_row_at(i) for i in range(sample.row_count)]
        assert all(str(p).isdigit() and str(o).isdigit() and '"order_id"' in str(v) for p, o, v in rows)

        # Step 2: defaults from the topic.
        await pilot.press("ctrl+n")
        await until(pilot, lambda: screen.step == 1, 5, "target step")
        table_name = snake_case(topic)
        assert screen.query_one("#namespace").value == "ingest"
        assert screen.query_one("#table").value == table_name
        assert screen.query_one("#dlq").value == f"{table_name}_dlq"
        assert screen.query_one("#stream").value == table_name
        assert not any(shown(screen, f"{f}-error") for f in ("namespace", "table", "dlq", "stream"))
        # The partitioning: day of the event time the sampled messages carry, once their columns are in.
        partitioning = screen.query_one("#partitioning")
        await until(pilot, lambda: partitioning.value == "day(ordered_at)", 60, "the proposed partitioning")
        partitioning.focus()
        await pilot.press("end", *["backspace"] * len("day(ordered_at)"))
        await type_text(pilot, "week(ordered_at)")
        assert "is not one of" in shown(screen, "partitioning-error")
        await pilot.press(*["backspace"] * len("week(ordered_at)"))
        await type_text(pilot, "day(ordered_at), bucket(4, order_id)")
        assert not shown(screen, "partitioning-error")

        # Step 3: the inferred columns, then a rename and a type change with the keyboard.
        await pilot.press("ctrl+n")
        await until(pilot, lambda: screen.step == 2, 5, "mapping step")
        mapping = screen.query_one("#mapping-table")
        await until(pilot, lambda: mapping.row_count == 6, 60, "inferred columns")
        names = [str(mapping.get_row_at(i)[0]) for i in range(mapping.row_count)]
        assert names == ["order_id", "store_id", "store_name", "amount", "status", "ordered_at"]
        await until(pilot, lambda: mapping.has_focus, 5, "focus on the mapping")

        await pilot.press("down", "down", "enter")  # store_name: Enter edits its name
        name_input = screen.query_one("#col-name")
        await until(pilot, lambda: name_input.has_focus, 5, "name editor")
        await type_text(pilot, "status")  # the name is selected on focus: typing replaces it
        assert "'status' appears more than once" in shown(screen, "mapping-error")
        await pilot.press("ctrl+s")  # refused while a column is wrong
        await until(pilot, lambda: mapping.has_focus, 5, "focus back on the table")
        assert "fix the columns" in shown(screen, "create-error") and isinstance(app.screen, NewStreamScreen)
        await pilot.press("r")  # r edits the name too
        await until(pilot, lambda: name_input.has_focus, 5, "name editor")
        await type_text(pilot, "shop_name")
        assert not shown(screen, "mapping-error") and not shown(screen, "create-error")
        await pilot.press("enter")  # back to the table
        await until(pilot, lambda: mapping.has_focus, 5, "focus back on the table")
        assert str(mapping.get_row_at(2)[0]) == "shop_name"

        await pilot.press("down", "t")  # amount: t opens the type list
        await until(pilot, lambda: screen.query_one("#col-type").expanded, 5, "type list")
        await type_text(pilot, "float")
        await pilot.press("enter")
        await until(pilot, lambda: str(mapping.get_row_at(3)[1]) == "float", 5, "type changed")
        assert not shown(screen, "mapping-error")

        await pilot.press("ctrl+s")
        await until(pilot, lambda: not isinstance(app.screen, NewStreamScreen), 60, "wizard closed after create")
        assert app.query_one("#sections").active == "streams"

    rows = streams_overview(settings)
    assert [(r.name, r.topic, r.table) for r in rows] == [(table_name, topic, f"ingest.{table_name}")]
    info = stream_info(settings, table_name)
    assert info.dead_letter_table == f"ingest.{table_name}_dlq"
    saved = {c.name: (c.type, c.source) for c in Mapping.from_toml(info.mapping).columns}
    assert saved["shop_name"] == ("string", ("store", "name"))
    assert saved["amount"] == ("float", ("amount",))
    assert "store_name" not in saved and saved["order_id"][0] == "long"
    from appliance.views.tables import table_view

    assert table_view(settings, f"ingest.{table_name}").partitioning == "day(ordered_at), bucket(4, order_id)"


async def test_bad_table_name_is_shown_next_to_the_field_and_next_refused(broker, topic):
    broker.produce(topic, pizza_values(5))
    app = FloeApp(load_settings())
    async with app.run_test(size=(160, 50)) as pilot:
        screen = await open_wizard(app, pilot)
        await load_and_pick_topic(pilot, screen, broker.bootstrap, topic)
        await pilot.press("ctrl+n")
        await until(pilot, lambda: screen.step == 1, 5, "target step")

        table = screen.query_one("#table")
        await until(pilot, lambda: table.has_focus, 5, "focus on the table name")
        await pilot.press("ctrl+u")  # clear, then type a bad name
        await type_text(pilot, "Orders-2")
        assert "must be lower snake_case" in shown(screen, "table-error")
        assert table.has_class("-invalid")
        # The stream name follows the table name while the user has not changed it.
        assert screen.query_one("#stream").value == "Orders-2"
        assert "stream name" in shown(screen, "stream-error")

        await pilot.press("ctrl+n")
        await pilot.click("#next")
        await pilot.pause()
        assert screen.step == 1 and isinstance(app.screen, NewStreamScreen)

        table.focus()
        await pilot.press("ctrl+u")
        await type_text(pilot, "orders_2")
        assert not shown(screen, "table-error") and not shown(screen, "stream-error")
        await pilot.press("ctrl+n")
        await until(pilot, lambda: screen.step == 2, 5, "mapping step once the name is right")

        await pilot.press("escape")
        await until(pilot, lambda: not isinstance(app.screen, NewStreamScreen), 5, "wizard cancelled")
    assert streams_overview(load_settings()) == []


async def test_unreachable_broker_error_is_shown_and_the_ui_carries_on(broker, topic, floe_home):
    floe_home.mkdir(parents=True, exist_ok=True)
    (floe_home / "floe.toml").write_text('[streams]\nsample_timeout = "3s"\n')
    broker.produce(topic, pizza_values(5))
    app = FloeApp(load_settings())
    async with app.run_test(size=(160, 50)) as pilot:
        screen = await open_wizard(app, pilot)
        await type_text(pilot, "127.0.0.1:1")
        await pilot.click("#load-topics")
        assert "Loading topics" in text(screen.query_one("#source-status"))
        await until(pilot, lambda: shown(screen, "bootstrap-error"), 30, "error under bootstrap")
        assert "unreachable" in shown(screen, "bootstrap-error")
        assert screen.query_one("#bootstrap").has_class("-invalid")
        assert isinstance(app.screen, NewStreamScreen)

        # Next without a topic is refused, with the reason next to the topic field.
        await pilot.press("ctrl+n")
        assert screen.step == 0 and shown(screen, "topic-error")

        # Still responsive: fix the address, and the same wizard goes on.
        bootstrap = screen.query_one("#bootstrap")
        bootstrap.focus()
        await pilot.press("ctrl+u")
        assert not shown(screen, "bootstrap-error")
        await load_and_pick_topic(pilot, screen, broker.bootstrap, topic)
        await pilot.click("#test-connection")
        sample = screen.query_one("#sample-table")
        await until(pilot, lambda: sample.row_count == 5, 30, "sampled messages")

        # A broker that goes away between steps: the error lands next to the field again.
        bootstrap.focus()
        await pilot.press("ctrl+u")
        await type_text(pilot, "127.0.0.1:1")
        await pilot.click("#test-connection")
        await until(pilot, lambda: shown(screen, "bootstrap-error"), 30, "error under bootstrap")
        assert "Connection test failed" in text(screen.query_one("#source-status"))
        await pilot.press("escape")
        await until(pilot, lambda: not isinstance(app.screen, NewStreamScreen), 5, "wizard cancelled")


async def test_a_failed_create_is_shown_and_keeps_every_edit(broker, topic):
    broker.produce(topic, pizza_values(20))
    settings = load_settings()
    app = FloeApp(settings)
    async with app.run_test(size=(160, 50)) as pilot:
        screen = await open_wizard(app, pilot)
        await load_and_pick_topic(pilot, screen, broker.bootstrap, topic)
        await pilot.press("ctrl+n")
        await until(pilot, lambda: screen.step == 1, 5, "target step")
        screen.query_one("#stream").focus()
        await pilot.press("ctrl+u", *"taken", "ctrl+n")
        await until(pilot, lambda: screen.step == 2, 5, "mapping step")
        # Someone else takes the name after it was checked: only Create can find out.
        await asyncio.to_thread(create_stream, settings, "taken", bootstrap=broker.bootstrap, topic=topic,
                                table="ingest.elsewhere")
        mapping = screen.query_one("#mapping-table")
        await until(pilot, lambda: mapping.row_count == 6, 60, "inferred columns")
        await pilot.press("x")  # drop order_id
        assert [str(mapping.get_row_at(i)[0]) for i in range(mapping.row_count)][0] == "store_id"

        await pilot.click("#create")
        await until(pilot, lambda: shown(screen, "create-error"), 60, "the create error")
        assert "already exists" in shown(screen, "create-error")
        assert isinstance(app.screen, NewStreamScreen) and mapping.row_count == 5

        await pilot.press("ctrl+b")
        assert screen.step == 1 and "already exists" in shown(screen, "stream-error")
        screen.query_one("#stream").focus()
        await pilot.press("ctrl+u", *"mine", "ctrl+n")
        await until(pilot, lambda: screen.step == 2, 5, "mapping step again")
        assert mapping.row_count == 5  # the same source and topic: the edits were kept
        await pilot.press("ctrl+s")
        await until(pilot, lambda: not isinstance(app.screen, NewStreamScreen), 60, "wizard closed after create")

    assert sorted(r.name for r in streams_overview(settings)) == ["mine", "taken"]
    columns = [c.name for c in Mapping.from_toml(stream_info(settings, "mine").mapping).columns]
    assert columns == ["store_id", "store_name", "amount", "status", "ordered_at"]


async def test_security_settings_become_kafka_options_and_the_password_stays_hidden(tmp_path, floe_home):
    floe_home.mkdir(parents=True, exist_ok=True)
    (floe_home / "floe.toml").write_text('[streams]\nsample_timeout = "3s"\n')
    ca = tmp_path / "ca.pem"
    ca.write_text("not a certificate\n")
    secret = "Pa55-w0rd-xyzzy"
    app = FloeApp(load_settings())
    async with app.run_test(size=(160, 50)) as pilot:
        screen = await open_wizard(app, pilot)
        await type_text(pilot, "127.0.0.1:1")
        assert screen.query_one("#username").disabled and screen.query_one("#ca").disabled
        await pilot.press("tab", "enter")  # security protocol
        await type_text(pilot, "SASL_SSL")
        await pilot.press("enter")
        await until(pilot, lambda: not screen.query_one("#username").disabled, 30, "SASL fields enabled")
        await pilot.click("#load-topics")
        assert "required" in shown(screen, "username-error") and "required" in shown(screen, "password-error")

        # Focus went to the first wrong field; the mechanism is just before it.
        await until(pilot, lambda: screen.query_one("#username").has_focus, 5, "focus on username")
        await pilot.press("shift+tab", "enter")  # SASL mechanism
        await type_text(pilot, "SCRAM-SHA-512")
        await pilot.press("enter", "tab")
        await type_text(pilot, "alice")
        await pilot.press("tab")
        await type_text(pilot, secret)
        await pilot.press("tab")
        assert screen.query_one("#ca").has_focus
        screen.query_one("#ca").insert_text_at_cursor(str(ca))  # as a paste would: a long path types slowly
        assert screen.kafka_options() == {
            "security.protocol": "SASL_SSL", "sasl.mechanisms": "SCRAM-SHA-512", "sasl.username": "alice",
            "sasl.password": secret, "ssl.ca.location": str(ca),
        }
        assert not shown(screen, "username-error") and not shown(screen, "password-error")
        await pilot.press("enter")  # loads the topics: librdkafka refuses this CA file
        await until(pilot, lambda: "ssl.ca.location" in shown(screen, "ca-error"), 30, "the error next to the CA file")
        assert secret not in app.export_screenshot()
        assert all(secret not in w.description for w in app.workers)
    for path in floe_home.rglob("*"):
        if path.is_file():
            assert secret.encode() not in path.read_bytes(), path


async def test_wizard_maps_an_avro_topic_from_the_registry_schema(broker, registry, topic):
    from proto_helpers import avro_serializer

    schema = {"type": "record", "name": "Payment", "fields": [
        {"name": "id", "type": "long"},
        {"name": "amount", "type": {"type": "bytes", "logicalType": "decimal", "precision": 10, "scale": 2}},
        {"name": "card", "type": {"type": "record", "name": "Card", "fields": [{"name": "brand", "type": "string"}]}}]}
    import decimal

    serialize = avro_serializer(registry, schema, topic)
    broker.produce(topic, [serialize({"id": i, "amount": decimal.Decimal("1.50"), "card": {"brand": "visa"}})
                           for i in range(3)])
    settings = load_settings()
    app = FloeApp(settings)
    async with app.run_test(size=(160, 50)) as pilot:
        screen = await open_wizard(app, pilot)
        screen.query_one("#format").value = "avro"
        await until(pilot, lambda: not screen.query_one("#registry").disabled, 5, "registry enabled")
        screen.query_one("#registry-credentials").value = "floe:s3cret"
        await pilot.press("ctrl+n")  # refused: no registry URL yet
        await until(pilot, lambda: "needs a schema registry URL" in shown(screen, "registry-error"), 5, "error")
        screen.query_one("#registry").value = registry.url
        screen.query_one("#bootstrap").focus()
        await load_and_pick_topic(pilot, screen, broker.bootstrap, topic)
        await pilot.press("ctrl+n")
        await until(pilot, lambda: screen.step == 1, 5, "target step")
        await pilot.press("ctrl+n")
        await until(pilot, lambda: screen.step == 2, 5, "mapping step")
        mapping = screen.query_one("#mapping-table")
        await until(pilot, lambda: mapping.row_count == 3, 60, "the schema's columns")
        rows = [tuple(str(c) for c in mapping.get_row_at(i)) for i in range(3)]
        assert rows == [("id", "long", "id"), ("amount", "decimal(10,2)", "amount"),
                        ("card_brand", "string", "card.brand")]
        status = str(screen.query_one("#mapping-status").render())
        assert "from the registry's schema id" in status and f"subject {topic}-value" in status
        name = screen.query_one("#stream").value
        await pilot.press("ctrl+s")
        await until(pilot, lambda: not isinstance(app.screen, NewStreamScreen), 60, "wizard closed")
    info = stream_info(settings, name)
    assert info.format == "avro" and info.subject == f"{topic}-value" and info.schema_registry == registry.url
    assert info.registry_options == {"basic.auth.user.info": "***"}


async def test_an_upsert_stream_through_the_wizard_takes_the_key_the_kafka_keys_propose(broker, topic):
    import orjson

    producer = broker.producer()
    for i in range(30):
        producer.produce(topic, key=orjson.dumps({"order_id": i % 10}), value=pizza_values(1, start=i % 10)[0])
    assert producer.flush(30) == 0
    settings = load_settings()
    app = FloeApp(settings)
    async with app.run_test(size=(160, 50)) as pilot:
        screen = await open_wizard(app, pilot)
        screen.query_one("#mode").value = "upsert"  # "states: each message is its key's newest row"
        await pilot.pause()
        await load_and_pick_topic(pilot, screen, broker.bootstrap, topic)
        assert "4 Key" in text(screen.query_one("#wizard-steps"))
        await pilot.press("ctrl+n")
        await until(pilot, lambda: screen.step == 1, 5, "target step")
        await pilot.press("ctrl+n")
        await until(pilot, lambda: screen.step == 2, 5, "mapping step")
        await until(pilot, lambda: screen.query_one("#mapping-table").row_count == 6, 60, "inferred columns")
        await pilot.press("ctrl+s")  # not the last step: nothing is created yet
        assert isinstance(app.screen, NewStreamScreen) and screen.step == 2
        await pilot.press("ctrl+n")
        await until(pilot, lambda: screen.step == 3, 5, "key step")
        key = screen.query_one("#key")
        assert key.value == "order_id" and key.has_focus  # the Kafka key's field
        await pilot.press("end", *["backspace"] * len("order_id"))
        await type_text(pilot, "amount")  # a double compares inexactly: not a key
        assert "a key is one of" in shown(screen, "key-error")
        await pilot.press(*["backspace"] * 6)
        await type_text(pilot, "order_id")
        assert not shown(screen, "key-error")
        await pilot.press("ctrl+s")
        await until(pilot, lambda: not isinstance(app.screen, NewStreamScreen), 60, "wizard closed after create")

    info = stream_info(settings, snake_case(topic))
    assert (info.mode, info.key, info.cdc) == ("upsert", ["order_id"], "")


async def test_bootstrap_offers_the_clusters_floe_knows_and_the_typed_value_wins(floe_home):
    from test_tui_snapshots import MAPPING

    from appliance.kafka.settings import KafkaSettings
    from appliance.model.stream import StreamDef
    from appliance.state.store import StateStore
    from tui.screens.new_stream.messages import BrokersKnown

    with StateStore(load_settings().state_db) as state:
        for name, bootstrap, created in (("old", "kafka-a:9092", "2026-11-01"), ("new", "kafka-b:9092", "2026-11-20")):
            state.add_stream(StreamDef(name=name, id=f"id-{name}", topic=name, kafka=KafkaSettings.create(bootstrap),
                                       format="json", table=f"ingest.{name}", dead_letter_table=f"ingest.{name}_dlq",
                                       mapping=MAPPING, starting_offsets="earliest", start_positions={0: 0},
                                       paused=False, created_at=f"{created}T10:00:00.000+00:00"))
    app = FloeApp(load_settings())
    async with app.run_test(size=(160, 50)) as pilot:
        screen = await open_wizard(app, pilot)
        box = screen.query_one("#bootstrap")
        await until(pilot, lambda: box.value == "kafka-b:9092", 10, "the newest stream's cluster prefilled")
        await pilot.press("x")  # typing replaces it...
        assert box.value == "x"
        box.value, box.cursor_position = "kafka-a", 7  # ...the others complete as typed (Pilot's keys are slow)
        await until(pilot, lambda: box._suggestion == "kafka-a:9092", 5, "the older cluster suggested")
        await pilot.press("right")
        assert box.value == "kafka-a:9092"
        box.value = "me:1"
        screen.query_one("SourceStep").post_message(BrokersKnown(["kafka-b:9092"]))  # a late answer
        await pilot.pause()  # until the screen has handled what was posted before: the late answer too
        assert box.value == "me:1"



async def test_the_wizard_keeps_the_kafka_key_and_headers_and_maps_the_keys_own_fields(broker, topic):
    import orjson

    from appliance.model.sources import describe

    producer = broker.producer()
    for i in range(10):
        producer.produce(topic, key=orjson.dumps({"order_id": i, "region": "eu"}), value=pizza_values(1, start=i)[0])
    assert producer.flush(30) == 0
    settings = load_settings()
    app = FloeApp(settings)
    async with app.run_test(size=(160, 50)) as pilot:
        screen = await open_wizard(app, pilot)
        await type_text(pilot, broker.bootstrap)
        await pilot.press("enter")  # loads the topics
        await until(pilot, lambda: "topics on" in text(screen.query_one("#source-status")), 30, "topics listed")
        screen.query_one("#topic").value = topic  # (picking by typing is the other tests')
        await pilot.pause()
        await pilot.press("ctrl+n")
        await until(pilot, lambda: screen.step == 1, 5, "target step")
        choice = screen.query_one("#kafka-columns")
        assert choice.value == "none"
        choice.focus()
        await pilot.press("enter")  # opens the list
        await until(pilot, lambda: choice.expanded, 5, "the kafka columns list")
        await pilot.press("down", "down", "down", "enter")  # neither, the key, the headers, both
        await until(pilot, lambda: choice.value == "key,headers", 5, "key and headers chosen")
        await pilot.press("ctrl+n")
        await until(pilot, lambda: screen.step == 2, 5, "mapping step")
        mapping = screen.query_one("#mapping-table")
        await until(pilot, lambda: mapping.row_count == 7, 60, "inferred columns, the key's region among them")
        rows = [mapping.get_row_at(i) for i in range(mapping.row_count)]
        assert (str(rows[-1][0]), str(rows[-1][2])) == ("region", "@key.region")  # the value has its own order_id
        await pilot.press("ctrl+s")
        await until(pilot, lambda: not isinstance(app.screen, NewStreamScreen), 60, "wizard closed after create")

    info = stream_info(settings, snake_case(topic))
    assert info.kafka_columns == ["key", "headers"]
    saved = [(c.name, c.type, describe(c.source)) for c in Mapping.from_toml(info.mapping).columns]
    assert saved[-3:] == [("region", "string", "@key.region"), ("_kafka_key", "binary", "@key"),
                          ("_kafka_headers", "headers", "@headers")]
