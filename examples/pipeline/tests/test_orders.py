"""The orders mapping: good orders land typed, bad ones go to the dead-letter table, nothing is lost."""

from decimal import Decimal
from pathlib import Path

import pytest
from appliance.core.errors import FloeError

HERE = Path(__file__).resolve().parent.parent
MAPPING = HERE / "orders.toml"


def order(i, store="Napoli", amount="12.50"):
    return {"order_id": i, "store": {"id": 1, "name": store}, "amount": amount, "ordered_at": "2026-11-21T10:00:00Z"}


def test_orders_land_typed_and_bad_messages_are_dead_lettered(floe):
    floe.produce_json("orders", [order(1), order(2, "Roma", "7.25")])
    floe.produce("orders", [b"{not json", b'{"order_id": "one"}'])
    floe.create_stream("orders", topic="orders", table="lake.orders", mapping=MAPPING)
    floe.run_until_caught_up()

    rows = floe.query("select order_id, store, amount from lake.orders order by order_id").to_pylist()
    assert rows == [{"order_id": 1, "store": "Napoli", "amount": Decimal("12.50")},
                    {"order_id": 2, "store": "Roma", "amount": Decimal("7.25")}]
    dead = floe.dead_letters("orders")
    assert [d["raw_value"] for d in dead] == [b"{not json", b'{"order_id": "one"}']
    assert dead[0]["error_stage"] == "decode"
    report = floe.audit("orders")
    assert report.ok, report.render()


def test_the_same_topic_name_in_another_test_starts_empty(floe):
    floe.produce_json("orders", [order(10)])
    floe.create_stream("orders", topic="orders", table="lake.orders", mapping=MAPPING)
    floe.run_until_caught_up()
    assert floe.query("select order_id from lake.orders").to_pylist() == [{"order_id": 10}]


def test_a_bad_mapping_file_is_one_clear_error(floe, tmp_path):
    bad = tmp_path / "bad.toml"
    bad.write_text("[[columns]]\nname = 'x'\n")
    floe.produce_json("orders", [order(1)])
    with pytest.raises(FloeError, match="bad.toml"):  # every Floe error is a FloeError, in one line
        floe.create_stream("orders", topic="orders", table="lake.orders", mapping=bad)
