"""Make tests/fixtures/upgrade/: a FLOE_HOME written by a previous release, for tests/test_upgrade.py.

    python scripts/make_upgrade_fixture.py [COMMIT]      (default fbd6e66, the release before issue 35)

The previous release's code is taken from git (`git archive COMMIT`) into a temporary folder, and every
step below runs that code, as its `floe` command, on FLOE_HOME=/tmp/floe-upgrade-fixture/home (Iceberg
keeps absolute paths: the test unpacks the home at the same place). It hosts a stand-in broker, produces
the messages (kept in messages.jsonl.gz, so the test can give a broker of its own the same topics at the
same offsets) and makes: an append stream with dead letters, an upsert stream, a stage, an alert and a
table policy; `floe run` ingests everything, writes the system tables, and is stopped with SIGTERM. The
home is then packed, without its logs and lock, as floe-home.tar.gz.
"""

from __future__ import annotations

import base64
import gzip
import io
import json
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "tests" / "fixtures" / "upgrade"
HOME = Path("/tmp/floe-upgrade-fixture/home")
ORDERS, ACCOUNTS = "upgrade_orders", "upgrade_accounts"
MALFORMED = (b"{not json", b'{"order_id": "twelve"}')


def messages() -> list[tuple[str, int, bytes | None, bytes]]:
    """(topic, partition, key, value) of every message, in the order produced."""
    out = []
    for i in range(240):
        value = MALFORMED[i % 2] if i % 30 == 29 else json.dumps(
            {"order_id": i, "store": f"s{i % 5}", "amount": i * 1.5}).encode()
        out.append((ORDERS, i % 4, str(i).encode(), value))
    for i in range(160):
        key = i % 40
        out.append((ACCOUNTS, key % 4, json.dumps({"id": key}).encode(),
                    json.dumps({"id": key, "name": f"account {key}", "balance": i}).encode()))
    return out


def floe(code: Path, *args: str, check: bool = True) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(code), "FLOE_HOME": str(HOME)}
    done = subprocess.run([sys.executable, "-m", "appliance.cli", *args], cwd=code, env=env, capture_output=True,
                          text=True, timeout=600)
    if check and done.returncode != 0:
        raise SystemExit(f"floe {' '.join(args)} failed: {done.stderr}")
    return done


def caught_up(code: Path) -> bool:
    """Every stream's rows and dead letters in, the stage's rows and the system tables written."""
    sql = ("select (select count(*) from ingest.orders) + (select count(*) from ingest.orders_dlq), "
           "(select count(*) from ingest.accounts), (select count(*) from derived.big_orders), "
           "(select count(*) from floe.batches)")
    done = floe(code, "query", sql, "--format", "csv", check=False)
    if done.returncode != 0:
        return False
    orders, accounts, big, batches = (int(v) for v in done.stdout.splitlines()[-1].split(","))
    return orders == 240 and accounts == 40 and big > 0 and batches > 0


def build(code: Path) -> None:
    sys.path.insert(0, str(code))
    from appliance.standins.broker import EmbeddedBroker  # the previous release's

    broker = EmbeddedBroker()
    producer = broker.producer()
    for topic, partition, key, value in messages():
        producer.produce(topic, value=value, key=key, partition=partition)
    assert producer.flush(30) == 0
    HOME.mkdir(parents=True)
    (HOME / "floe.toml").write_text('[observe]\nsystem_tables_interval = "1s"\n')
    mapping = HOME / "orders-mapping.toml"
    mapping.write_text('columns = [{name = "order_id", type = "long", source = "order_id"},\n'
                       '  {name = "store", type = "string", source = "store"},\n'
                       '  {name = "amount", type = "double", source = "amount"}]\n')
    floe(code, "stream", "create", "orders", "--bootstrap", broker.bootstrap, "--topic", ORDERS,
         "--table", "ingest.orders", "--mapping", str(mapping))
    mapping.unlink()
    floe(code, "stream", "create", "accounts", "--bootstrap", broker.bootstrap, "--topic", ACCOUNTS,
         "--table", "ingest.accounts", "--mode", "upsert", "--key", "id")
    floe(code, "stage", "create", "big", "--from", "ingest.orders", "--table", "derived.big_orders",
         "--sql", "select order_id, store, amount from source where amount >= 300")
    floe(code, "alert", "add", "orders-lag", "--rule", "lag_messages > 100000", "--stream", "orders",
         "--notify", "json://127.0.0.1:9/floe")
    floe(code, "table", "policy", "ingest.orders", "--retention", "1 year", "--keep-snapshots", "3d")
    env = {**os.environ, "PYTHONPATH": str(code), "FLOE_HOME": str(HOME)}
    engine = subprocess.Popen([sys.executable, "-m", "appliance.cli", "run"], cwd=code, env=env,
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 600
    while not caught_up(code):
        if time.monotonic() > deadline or engine.poll() is not None:
            engine.kill()
            raise SystemExit(f"the engine did not catch up: {engine.stderr.read()}")
        time.sleep(2)
    time.sleep(3)  # a few more rounds of the system tables
    engine.send_signal(signal.SIGTERM)
    if engine.wait(180) != 0:
        raise SystemExit(f"the engine did not stop cleanly: {engine.stderr.read()}")
    broker.close()


def pack() -> None:
    OUT.mkdir(parents=True, exist_ok=True)
    for database in ("state.db", "catalog.db"):  # whole files: what the write-ahead log holds, moved in
        with sqlite3.connect(HOME / database) as db:
            db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    with tarfile.open(OUT / "floe-home.tar.gz", "w:gz") as tar:
        for path in sorted(HOME.rglob("*")):
            relative = path.relative_to(HOME)
            if relative.parts[0] in ("logs", "locks") or path.name == "engine.lock" or not path.is_file() \
                    or path.name.endswith(("-wal", "-shm")):
                continue
            tar.add(path, arcname=f"home/{relative}")
    with gzip.open(OUT / "messages.jsonl.gz", "wt") as out:
        for topic, partition, key, value in messages():
            out.write(json.dumps({"topic": topic, "partition": partition,
                                  "key": base64.b64encode(key).decode() if key else None,
                                  "value": base64.b64encode(value).decode()}) + "\n")


def main() -> None:
    commit = sys.argv[1] if len(sys.argv) > 1 else "fbd6e66"
    if HOME.exists():
        shutil.rmtree(HOME)
    with tempfile.TemporaryDirectory(prefix="floe-prev-") as folder:
        code = Path(folder)
        archive = subprocess.run(["git", "-C", str(ROOT), "archive", commit], capture_output=True, check=True)
        with tarfile.open(fileobj=io.BytesIO(archive.stdout)) as tar:
            tar.extractall(code, filter="data")
        build(code)
    pack()
    print(f"{OUT}: {', '.join(f'{p.name} {p.stat().st_size} B' for p in sorted(OUT.iterdir()))}")


if __name__ == "__main__":
    main()
