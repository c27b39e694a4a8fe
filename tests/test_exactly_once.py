"""Exactly once through kill -9: every offset of the topic lands once, in the target or the dead-letter table."""

import json
import os
import random
import signal
import subprocess
import threading

import orjson
import pytest

from conftest import FLOE, ROOT, floe, run_until_caught_up, run_until_killed

MALFORMED = [
    b"{ not json",
    b"[1, 2, 3]",
    b'"a bare string"',
    b'{"order_id": "twelve"}',
    b'{"order_id": 5, "ordered_at": "the day after tomorrow"}',
    b"\xc3\x28 not utf-8",
    b"",
    b'{"note": "' + b"z" * 5000 + b'"}',  # over max_message_bytes (4KB here)
]


class Publisher:
    """Produces a mix of good and malformed messages and remembers where each one landed."""

    def __init__(self, broker, topic, rng):
        self.producer = broker.producer()
        self.topic = topic
        self.rng = rng
        self.sent = 0
        self.landed: dict[tuple[int, int], bool] = {}  # (partition, offset) -> malformed?
        self.lock = threading.Lock()

    def _delivered(self, malformed):
        def callback(err, msg):
            assert err is None, err
            with self.lock:
                self.landed[(msg.partition(), msg.offset())] = malformed
        return callback

    def publish(self, n, stop=None):
        for _ in range(n):
            if stop is not None and stop.is_set():
                break
            self.sent += 1
            malformed = self.rng.random() < 0.04
            value = self.rng.choice(MALFORMED) if malformed else orjson.dumps(
                {"order_id": self.sent, "store": {"id": self.sent % 9}, "amount": self.sent / 4,
                 "ordered_at": "2026-11-21T12:00:00Z", "status": self.rng.choice(["new", "paid"])})
            self.producer.produce(self.topic, value=value, key=str(self.sent).encode(),
                                  on_delivery=self._delivered(malformed))
            self.producer.poll(0)
            if stop is not None and self.sent % 50 == 0:
                stop.wait(0.005)  # a steady trickle while the engine runs, not one burst
        assert self.producer.flush(30) == 0


def query_json(sql):
    result = floe("query", sql, "--format", "json")
    assert result.returncode == 0, result.stderr
    return [json.loads(line) for line in result.stdout.splitlines()]


@pytest.mark.slow
def test_every_offset_lands_once_through_repeated_kill_9(broker, topic, floe_home, spark):
    seed = int(os.environ.get("FLOE_TEST_SEED", random.randrange(1 << 30)))
    print(f"seed {seed}")
    rng = random.Random(seed)
    floe_home.mkdir(parents=True, exist_ok=True)
    (floe_home / "floe.toml").write_text(
        '[engine]\nmax_batch_messages = 600\ncommit_interval = "100ms"\nmax_message_bytes = "4KB"\n'
        'fetch_timeout = "5s"\nretry_backoff = "1s"\n'
    )
    publisher = Publisher(broker, topic, rng)
    publisher.publish(3000)
    # Inference widens types across the sample, and the sample holds malformed messages
    # ("twelve" would make order_id a string): pin the mapping as a user would.
    mapping = floe_home / "eo.toml"
    mapping.write_text(
        'columns = [{name = "order_id", type = "long", source = "order_id"},\n'
        '  {name = "store_id", type = "long", source = "store.id"},\n'
        '  {name = "amount", type = "double", source = "amount"},\n'
        '  {name = "ordered_at", type = "timestamptz", source = "ordered_at"},\n'
        '  {name = "status", type = "string", source = "status"}]\n'
    )
    created = floe("stream", "create", "eo", "--bootstrap", broker.bootstrap, "--topic", topic,
                   "--table", "ingest.eo", "--mapping", str(mapping))
    assert created.returncode == 0, created.stderr

    kills = 0
    for _ in range(4):
        engine = subprocess.Popen(FLOE + ["run"], cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                  text=True, start_new_session=True)
        stop = threading.Event()
        trickle = threading.Thread(target=publisher.publish, args=(1000, stop))
        trickle.start()
        try:
            engine.wait(timeout=rng.uniform(4, 16))  # the kill lands at a random moment of the run
            pytest.fail(f"engine exited by itself: {engine.stderr.read()}")
        except subprocess.TimeoutExpired:
            engine.send_signal(signal.SIGKILL)
            engine.wait()
            kills += 1
        finally:
            engine.stderr.close()
        stop.set()
        trickle.join()
        publisher.publish(rng.randint(100, 600))  # arrives while the engine is down
        try:
            os.killpg(engine.pid, signal.SIGKILL)  # Spark's JVM dies with its driver; make sure
        except ProcessLookupError:
            pass

    run_until_caught_up(spark)
    assert kills == 4

    target = {(r["p"], r["o"]) for r in query_json("select _kafka_partition p, _kafka_offset o from ingest.eo")}
    dead = query_json("select _kafka_partition p, _kafka_offset o, raw_value, error_stage from ingest.eo_dlq")
    dead_keys = {(r["p"], r["o"]) for r in dead}
    [counts] = query_json("select (select count(*) from ingest.eo) t, (select count(*) from ingest.eo_dlq) d")

    produced = len(publisher.landed)
    assert produced == publisher.sent
    assert counts["t"] + counts["d"] == produced, (counts, produced)
    assert len(target) == counts["t"] and len(dead_keys) == counts["d"], "a (partition, offset) landed twice"
    assert target | dead_keys == set(publisher.landed) and not target & dead_keys
    assert dead_keys == {k for k, bad in publisher.landed.items() if bad}, "every malformed message dead-lettered"


def _shifting(fmt: str, registry, topic: str):
    """Message i carries field f{i // 250}: JSON gains a key every 250 messages, Avro a registry
    version (each keeping the fields before it, as nullable)."""
    if fmt == "json":
        return lambda i: orjson.dumps({"id": i, f"f{i // 250}": i})
    from proto_helpers import avro_serializer

    serializers = {}

    def encode(i):
        k = i // 250
        if k not in serializers:
            fields = [{"name": "id", "type": "long"}] + [{"name": f"f{j}", "type": ["null", "long"], "default": None}
                                                         for j in range(k + 1)]
            serializers[k] = avro_serializer(registry, {"type": "record", "name": "Shift", "fields": fields}, topic)
        return serializers[k]({"id": i, f"f{k}": i})

    return encode


@pytest.mark.slow
@pytest.mark.parametrize("fmt", ["json", "avro"])
def test_every_offset_lands_once_through_kill_9_while_the_schema_keeps_changing(broker, topic, floe_home, fmt,
                                                                                request, spark):
    """New fields arrive all along (one every 250 messages), so kills land before, between and after
    schema updates and the data commits that use them."""
    seed = int(os.environ.get("FLOE_TEST_SEED", random.randrange(1 << 30)))
    print(f"seed {seed}")
    rng = random.Random(seed)
    floe_home.mkdir(parents=True, exist_ok=True)
    (floe_home / "floe.toml").write_text('[engine]\nmax_batch_messages = 400\ncommit_interval = "100ms"\n'
                                         'retry_backoff = "1s"\n')
    registry = request.getfixturevalue("registry") if fmt == "avro" else None
    encode = _shifting(fmt, registry, topic)
    sent = {"n": 0}
    producer = broker.producer()

    def publish(n, stop=None):
        for _ in range(n):
            if stop is not None and stop.is_set():
                break
            i = sent["n"]
            sent["n"] += 1
            producer.produce(topic, value=encode(i), partition=i % 4)
            producer.poll(0)
            if stop is not None and i % 50 == 0:
                stop.wait(0.01)
        assert producer.flush(30) == 0

    publish(300)
    registry_args = ["--format", "avro", "--schema-registry", registry.url] if registry else []
    created = floe("stream", "create", "shift", "--bootstrap", broker.bootstrap, "--topic", topic,
                   "--table", "ingest.shift", *registry_args)
    assert created.returncode == 0, created.stderr
    for _ in range(4):
        run_until_killed(rng.uniform(4, 16), lambda stop: publish(800, stop))
    run_until_caught_up(spark)

    n = sent["n"]
    fields = (n - 1) // 250 + 1
    wide = ", ".join(f"f{k}" for k in range(fields))
    got = query_json(f"select id, {wide} from ingest.shift")
    assert len(got) == n and len({r["id"] for r in got}) == n, "every message once"
    for r in got:  # each row holds its own field's value and nothing in the others
        k = r["id"] // 250
        assert r[f"f{k}"] == r["id"] and all(r[f"f{j}"] is None for j in range(fields) if j != k), r
    [dead] = query_json("select count(*) as d from ingest.shift_dlq")
    assert dead["d"] == 0
