"""Pizza-order events like the hosted products' demo topic, published at a steady rate, a few of them bad."""

from __future__ import annotations

import datetime as dt
import random
import threading
import time

import orjson
from confluent_kafka import Producer

PRODUCTS = [
    ("margherita", "pizza", 9.5), ("pepperoni", "pizza", 11.0), ("quattro_formaggi", "pizza", 12.5),
    ("calzone", "pizza", 12.0), ("garlic_bread", "side", 4.5), ("tiramisu", "dessert", 6.0),
    ("lemonade", "drink", 3.0), ("cola", "drink", 2.5),
]
STATUSES = ["accepted", "accepted", "accepted", "preparing", "out_for_delivery", "delivered", "cancelled"]


def pizza_order(rng: random.Random, order_id: int, at: dt.datetime | None = None) -> dict:
    at = at or dt.datetime.now(dt.timezone.utc)
    lines = []
    for _ in range(rng.randint(1, 4)):
        name, category, price = rng.choice(PRODUCTS)
        qty = rng.randint(1, 3)
        lines.append({"product": name, "category": category, "quantity": qty, "unit_price": price, "net_price": round(qty * price, 2)})
    return {
        "store_id": rng.randint(1, 12),
        "store_order_id": order_id,
        "coupon_code": rng.choice([None, None, None, rng.randint(1000, 9999)]),
        "status": rng.choice(STATUSES),
        "ordered_at": at.isoformat(timespec="milliseconds").replace("+00:00", "Z"),
        "customer": {"id": rng.randint(1, 5000), "loyaltyTier": rng.choice(["none", "silver", "gold"])},
        "total": round(sum(line["net_price"] for line in lines), 2),
        "order_lines": lines,
    }


# What a flaky upstream really sends now and then: these land in the dead-letter table.
BAD_MESSAGES = [b'{"store_id": 3, "status": "accepted"', b"[]", b'{"store_id": "three"}', b"\xff\xfeoops", b""]


def publish(producer: Producer, topic: str, rate: float, stop: threading.Event, bad_ratio: float = 0.01,
            seed: int = 7, limit: int | None = None) -> int:
    """Publish pizza orders at `rate` per second until `stop` (or `limit` messages)."""
    rng = random.Random(seed)
    sent = 0
    started = time.monotonic()
    while not stop.is_set() and (limit is None or sent < limit):
        due = int((time.monotonic() - started) * rate) + 1
        while sent < due and (limit is None or sent < limit):
            if rng.random() < bad_ratio:
                value = rng.choice(BAD_MESSAGES)
            else:
                value = orjson.dumps(pizza_order(rng, sent + 1))
            producer.produce(topic, value=value, key=str(rng.randint(1, 12)).encode())
            sent += 1
        producer.poll(0)
        stop.wait(max(0.0, (sent / rate) - (time.monotonic() - started)))
    producer.flush(10)
    return sent
