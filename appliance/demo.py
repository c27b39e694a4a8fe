"""The demo: pizza-order events like the hosted products' demo topic, published at a steady rate."""

from __future__ import annotations

import datetime as dt
import random
import subprocess
import sys
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


DEMO_STREAM = "pizza_orders"
DEMO_TABLE = "ingest.pizza_orders"


def status_line(settings) -> str:
    from appliance.state import StateStore

    state = StateStore(settings.state_db)
    try:
        st = state.status(DEMO_STREAM)
    finally:
        state.close()
    if not st:
        return "waiting for the engine..."
    age = ""
    if st.get("last_commit_at"):
        seconds = (dt.datetime.now(dt.timezone.utc) - dt.datetime.fromisoformat(st["last_commit_at"])).total_seconds()
        age = f", last commit {seconds:.1f}s ago"
    error = f" | last error: {st['last_error']}" if st.get("phase") == "failed" else ""
    return (
        f"{dt.datetime.now().strftime('%H:%M:%S')} {DEMO_STREAM}: {st.get('phase')}, "
        f"{st.get('rows_total') or 0} rows, {st.get('dead_letter_total') or 0} dead letters, "
        f"{st.get('messages_per_s') or 0:.0f} msg/s, lag {st.get('lag') or 0}{age}{error}"
    )


def run_demo(settings, rate: float, stop: threading.Event, out, ui=None) -> None:
    """Broker, publisher, stream and engine in this process; then `ui(settings, section)` until
    the user quits it or, without a UI, a status line every 2 seconds until `stop`."""
    from appliance.broker import EmbeddedBroker
    from appliance.engine import Engine
    from appliance.errors import EngineBusy, StreamNotFound
    from appliance.kafka_client import KafkaClient, KafkaSettings
    from appliance.streams import create_stream, delete_stream, mapping_header_toml

    broker = EmbeddedBroker()
    out(f"embedded broker on {broker.bootstrap}; publishing {rate:g} pizza orders/s to topic {DEMO_STREAM}")
    publisher = threading.Thread(
        target=publish, args=(broker.producer(), DEMO_STREAM, rate, stop), daemon=True, name="demo-publisher"
    )
    publisher.start()
    kafka = KafkaSettings.create(broker.bootstrap)
    with KafkaClient(kafka) as client:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and not stop.is_set():
            try:
                # enough messages for the mapping to be inferred from a fair sample
                if sum(w.high for w in client.watermarks(DEMO_STREAM).values()) >= 100:
                    break
            except Exception:  # the topic appears with the first message
                pass
            stop.wait(0.2)
    try:
        delete_stream(settings, DEMO_STREAM, drop_tables=True)  # the last demo's broker is gone with its offsets
        out(f"replaced the previous demo stream {DEMO_STREAM}")
    except StreamNotFound:
        pass
    created = create_stream(settings, DEMO_STREAM, bootstrap=broker.bootstrap, topic=DEMO_STREAM, table=DEMO_TABLE)
    out(f"stream {DEMO_STREAM}: topic {DEMO_STREAM} -> {DEMO_TABLE}, mapping inferred from {created.sampled} messages:")
    out(mapping_header_toml(created.stream).rstrip())

    if ui is not None:
        # With the UI, the engine is its own `floe run` process, as in production: the UI
        # owns the terminal, and Spark's JVM writes to a log file instead of over it.
        log = settings.log_dir / "demo-engine.out"
        with log.open("ab") as sink:
            engine_proc = subprocess.Popen([sys.executable, "-m", "appliance.cli", "run"], stdout=sink,
                                           stderr=sink, stdin=subprocess.DEVNULL, start_new_session=True)
        try:
            ui(settings, "streams")
        finally:
            stop.set()
            engine_proc.terminate()
            try:
                engine_proc.wait(60)
            except subprocess.TimeoutExpired:
                engine_proc.kill()
            publisher.join(timeout=15)
            broker.close()
        return
    engine = Engine(settings)
    failure: list[BaseException] = []

    def run_engine() -> None:
        try:
            engine.run()
        except EngineBusy:
            out("another `floe run` holds this FLOE_HOME: it ingests the demo stream")
        except BaseException as exc:  # shown on the status line, the demo carries on
            failure.append(exc)

    engine_thread = threading.Thread(target=run_engine, daemon=True, name="demo-engine")
    engine_thread.start()
    out("ingesting; Ctrl-C to stop. Query it with:  floe query \"select status, count(*) from ingest.pizza_orders group by 1\"")
    while not stop.wait(2.0):
        out(status_line(settings) if not failure else f"engine failed: {failure[0]}")
    engine.stop()
    engine_thread.join()
    publisher.join(timeout=15)
    out(status_line(settings))
    broker.close()
