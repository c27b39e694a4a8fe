"""The revenue stage: its SQL over the orders table, kept up to date as more orders arrive."""

from decimal import Decimal
from pathlib import Path

HERE = Path(__file__).resolve().parent.parent


def order(i, store, amount):
    return {"order_id": i, "store": {"name": store}, "amount": amount, "ordered_at": "2026-11-21T10:00:00Z"}


def revenue(floe):
    return {r["store"]: (r["orders"], r["revenue"])
            for r in floe.query("select * from lake.revenue_by_store").to_pylist()}


def test_revenue_per_store_follows_new_orders(floe):
    floe.produce_json("orders", [order(1, "Napoli", "10.00"), order(2, "Roma", "5.50"), order(3, "Napoli", "2.25")])
    floe.create_stream("orders", topic="orders", table="lake.orders", mapping=HERE / "orders.toml")
    floe.create_stage("revenue_by_store", source="lake.orders", table="lake.revenue_by_store",
                      sql=(HERE / "revenue_by_store.sql").read_text())
    floe.run_until_caught_up()
    assert revenue(floe) == {"Napoli": (2, Decimal("12.25")), "Roma": (1, Decimal("5.50"))}

    floe.produce_json("orders", [order(4, "Roma", "1.00")])
    floe.run_until_caught_up()
    assert revenue(floe) == {"Napoli": (2, Decimal("12.25")), "Roma": (2, Decimal("6.50"))}
    assert floe.audit("orders").ok
